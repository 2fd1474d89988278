#!/usr/bin/env python3
"""`examples/resmlp.rs` against its PyTorch twin, step by step.

The twin is the same model written as PyTorch writes it: nested `nn.Module`s, the blocks in an
`nn.ModuleList` named `blocks`, each `y = x + fc2(gelu(fc1(norm(x))))`; its state-dict names
must equal our parameters file's, and it loads ours with `strict=True`. Both train from our
initial parameters on the same MNIST-format files (written here: random pixels and labels), with
SGD (momentum 0.9) and with AdamW, on one process and on 2 ranks (the same global batch), and
once from PyTorch's own initialisation (its state dict given to ours with `--init-params`); after
each of 10 steps every tensor of ours (`--save-params`) is compared with the twin's. The twin's
final state dict, saved as safetensors, holds exactly the schedule's parameter names and loads
back into ours (`--init-params`, as strict as `load_state_dict`).

Run by `make bench` when torch is importable (`--torch-python`, or TORCH_PYTHON); prints
"skipped" and succeeds otherwise. Needs `cargo build --release --examples`.
"""

import argparse
import os
import struct
import subprocess
import sys
import tempfile

import jobs

SAMPLES, GLOBAL_BATCH, STEPS = 256, 32, 10
# The float32 floor after 10 steps: each side rounds in its own order (products, reductions).
TOLERANCE = 1e-4


def write_idx(folder, rng):
    images = bytes(rng.randrange(256) for _ in range(SAMPLES * 784))
    labels = bytes(rng.randrange(10) for _ in range(SAMPLES))
    with open(os.path.join(folder, "train-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, SAMPLES, 28, 28) + images)
    with open(os.path.join(folder, "train-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 2049, SAMPLES) + labels)
    return images, labels


def ours(binary, data, out, steps, ranks, optimizer, lr, init=None):
    cmd = [binary, "--data", data, "--steps", str(steps), "--batch", str(GLOBAL_BATCH // ranks),
           "--optimizer", optimizer, "--lr", str(lr), "--report", "off", "--save-params", out]
    if init is not None:
        cmd += ["--init-params", init]
    if optimizer == "sgd":
        cmd += ["--momentum", "0.9"]
    jobs.run(jobs.on_ranks(ranks, cmd), timeout=600)


def twin(torch):
    nn = torch.nn

    class ResBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(256)
            self.fc1 = nn.Linear(256, 1024)
            self.act = nn.GELU(approximate="tanh")
            self.fc2 = nn.Linear(1024, 256)

        def forward(self, x):
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    class ResMlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.input = nn.Linear(784, 256)
            self.blocks = nn.ModuleList(ResBlock() for _ in range(8))
            self.head = nn.Linear(256, 10)

        def forward(self, x):
            x = self.input(x)
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    return ResMlp()


def largest_difference(torch, model, theirs):
    """The largest per-tensor `|ours - twin| / |twin|` (Euclidean norms), and its tensor."""
    worst = (0.0, "")
    for name, value in model.state_dict().items():
        diff = float(torch.linalg.vector_norm(theirs[name].double() - value.double()))
        rel = diff / max(float(torch.linalg.vector_norm(value.double())), 1e-30)
        worst = max(worst, (rel, name))
    return worst


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    args = p.parse_args()
    try:
        import torch
        from safetensors.torch import load_file, save_file
    except ImportError:
        print("resmlp against its PyTorch twin: skipped (torch and safetensors are not importable)")
        return 0
    import random

    torch.set_num_threads(1)
    binary = os.path.join(args.bin_dir, "resmlp")
    work = tempfile.mkdtemp(prefix="blocks-twin-")
    images, labels = write_idx(work, random.Random(3))
    x_all = torch.tensor(list(images), dtype=torch.float32).reshape(SAMPLES, 784) / 255.0
    y_all = torch.tensor(list(labels), dtype=torch.long)
    init = os.path.join(work, "init.safetensors")
    # The initial parameters: one step at a learning rate that moves no weight in float32 (the
    # command line refuses 0; LayerNorm biases, at 0, move by about 1e-30).
    ours(binary, work, init, 1, 1, "sgd", 1e-30)

    # The other way: PyTorch's own initialisation, saved as its state dict, is where ours starts.
    torch.manual_seed(0)
    theirs = os.path.join(work, "twin-init.safetensors")
    save_file({k: v.contiguous() for k, v in twin(torch).state_dict().items()}, theirs)

    failures = []
    print(f"resmlp against its PyTorch twin ({torch.__version__}), {STEPS} steps of {GLOBAL_BATCH} samples; "
          "largest per-tensor relative difference")
    configs = [("sgd", 0.01, 1, init), ("sgd", 0.01, 2, init), ("adamw", 0.001, 1, init), ("adamw", 0.001, 2, init),
               ("adamw", 0.001, 1, theirs)]
    for optimizer, lr, ranks, start in configs:
        model = twin(torch)
        model.load_state_dict(load_file(start), strict=True)
        opt = (torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9) if optimizer == "sgd"
               else torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01))
        row = []
        for step in range(STEPS):
            first = step * GLOBAL_BATCH
            index = torch.arange(first, first + GLOBAL_BATCH) % SAMPLES
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x_all[index]), y_all[index]).backward()
            opt.step()
            out = os.path.join(work, f"{optimizer}-{ranks}-{step + 1}.safetensors")
            ours(binary, work, out, step + 1, ranks, optimizer, lr, None if start == init else start)
            rel, name = largest_difference(torch, model, load_file(out))
            row.append(rel)
            if rel > TOLERANCE:
                failures.append(f"{optimizer} on {ranks} rank(s), step {step + 1}: {name} off by {rel:.2e}")
        origin = "ours" if start == init else "PyTorch's"
        print(f"  {optimizer:5} {ranks} rank(s), from {origin:9} init: " + " ".join(f"{r:.1e}" for r in row))
        # And back: the twin's state dict as safetensors holds exactly our parameters' names.
        back = os.path.join(work, f"twin-{optimizer}-{ranks}-{origin[:4]}.safetensors")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, back)
        check = subprocess.run([binary, "--print-schedule"], capture_output=True, text=True, check=True).stdout
        names = {m.strip() for line in check.splitlines() if line[:1] == "b" and line.split()[0][1:].isdigit()
                 for m in line.split("  ")[-1].split(",")}
        if names != set(load_file(back)):
            failures.append(f"the twin's state dict names differ from the schedule's: {sorted(names ^ set(load_file(back)))}")
        # ... and loads into ours (`--init-params`, strict), values intact.
        roundtrip = os.path.join(work, f"roundtrip-{optimizer}-{ranks}-{origin[:4]}.safetensors")
        ours(binary, work, roundtrip, 1, 1, "sgd", 1e-30, back)
        rel, name = largest_difference(torch, model, load_file(roundtrip))
        if rel > 1e-6:
            failures.append(f"the twin's parameters loaded into ours differ: {name} off by {rel:.2e}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"every step within {TOLERANCE:g}, from our initialisation and from PyTorch's; checkpoints load both ways "
          "(ours into the twin with strict=True, the twin's into ours with --init-params)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
