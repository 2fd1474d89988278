#!/usr/bin/env python3
"""`examples/gpt.rs` against its PyTorch twin under the training options `gpt_twin.py` leaves at
their defaults (it trains AdamW with a clip active at every step, which hides how gradients are
scaled): SGD with momentum and PyTorch's coupled weight decay, `--decay-on matrices`, the
learning-rate schedule under SGD, `--accumulate` (micro-batch gradients averaged, as PyTorch
sums `loss / micro_steps`), sharded optimizer state, and `--no-overlap --all-reduce mpi`.

Each case trains `--steps` steps (default 6) of the gpt example at context 16 from the same
initial parameters, on one process and on 2 ranks (the same global batch), and the twin (from
`gpt_model.py`, fed the same windows) in float32 and float64. Ours must end within 1.5x of
PyTorch's own float32 distance to float64 (the largest per-tensor relative distance, as
`gpt_twin.py` measures it), and a twin with a planted error (gradients summed over the
micro-steps instead of averaged; PyTorch's SGD decay decoupled) must end farther from ours than
10x that floor.

Needs `cargo build --release --examples` and torch with safetensors (prints "skipped" without).
"""

import argparse
import os
import sys
import tempfile

import gpt_model
import jobs

CONTEXT, BATCH = 16, 4  # samples per micro-step over all ranks

# name: our flags, the twin's settings, and the planted error that must be caught (if any).
CASES = {
    "sgd momentum, decay on all": (
        ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.1", "--decay-on", "all"],
        dict(opt="sgd", lr=0.05, momentum=0.9, decay=0.1, decay_on="all"), "decoupled"),
    "sgd, decay on matrices, cosine schedule": (
        ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.01", "--decay-on", "matrices",
         "--lr-schedule", "cosine:warmup=2,until=5,min=0.01"],
        dict(opt="sgd", lr=0.1, momentum=0.9, decay=0.01, decay_on="matrices", schedule=(2, 5, 0.01)), None),
    "sgd, accumulate 2, schedule": (
        ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.1", "--decay-on", "all",
         "--accumulate", "2", "--lr-schedule", "cosine:warmup=1,until=4,min=0.02"],
        dict(opt="sgd", lr=0.1, momentum=0.9, decay=0.1, decay_on="all", accumulate=2, schedule=(1, 4, 0.02)),
        "summed"),
    "sgd, accumulate 2, clip 1, sharded state": (
        ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--weight-decay", "0.1", "--decay-on", "matrices",
         "--accumulate", "2", "--clip-grad-norm", "1.0", "--shard-optimizer"],
        dict(opt="sgd", lr=0.1, momentum=0.9, decay=0.1, decay_on="matrices", accumulate=2, clip=1.0), None),
    "sgd, accumulate 2, no overlap, MPI": (
        ["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9", "--accumulate", "2", "--no-overlap",
         "--all-reduce", "mpi"],
        dict(opt="sgd", lr=0.1, momentum=0.9, accumulate=2), "summed"),
    "adamw, accumulate 2, no clip": (
        ["--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.1", "--decay-on", "matrices", "--accumulate",
         "2"],
        dict(opt="adamw", lr=1e-3, decay=0.1, decay_on="matrices", accumulate=2), None),
}
# What every run shares, and what every case leaves at these values unless it says otherwise.
COMMON = ["--context", str(CONTEXT), "--report", "off", "--eval-every", "0", "--beta2", "0.99"]
DEFAULTS = dict(opt="sgd", lr=0.05, momentum=0.0, decay=0.0, decay_on="all", accumulate=1, clip=None, schedule=None)
OFF = ["--clip-grad-norm", "off", "--lr-schedule", "constant", "--weight-decay", "0"]


def lr_at(s, step):
    """The rate `--lr-schedule` gives the case at `step`."""
    return s["lr"] if s["schedule"] is None else gpt_model.lr_at(step, s["lr"], *s["schedule"])


class Twin:
    """PyTorch's loop with the case's settings (`planted`: "summed" or "decoupled")."""

    def __init__(self, torch, model, s, planted=None):
        self.torch, self.model, self.s, self.planted, self.step_count = torch, model, s, planted, 0
        params = list(model.parameters())  # the tied embedding once
        matrices = s["decay_on"] == "matrices"
        groups = [{"params": [p for p in params if p.dim() >= 2 or not matrices], "weight_decay": s["decay"]},
                  {"params": [p for p in params if p.dim() < 2 and matrices], "weight_decay": 0.0}]
        if s["opt"] == "sgd" and planted != "decoupled":
            self.opt = torch.optim.SGD(groups, lr=s["lr"], momentum=s["momentum"])
        elif s["opt"] == "sgd":
            self.opt = torch.optim.SGD([{**g, "weight_decay": 0.0} for g in groups], lr=s["lr"], momentum=s["momentum"])
        else:
            self.opt = torch.optim.AdamW(groups, lr=s["lr"], betas=(0.9, 0.99), eps=1e-8)

    def step(self, micro_batches):
        torch = self.torch
        lr = lr_at(self.s, self.step_count)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        scale = 1.0 if self.planted == "summed" else len(micro_batches)
        for x, y in micro_batches:
            logits = self.model(x).view(-1, gpt_model.NANO.vocab)
            (torch.nn.functional.cross_entropy(logits, y.view(-1)) / scale).backward()
        if self.s["clip"] is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.s["clip"])
        if self.planted == "decoupled":
            with torch.no_grad():
                for group in self.opt.param_groups:
                    for p in group["params"]:
                        p.mul_(1.0 - lr * self.s["decay"] * (p.dim() >= 2 or self.s["decay_on"] == "all"))
        self.opt.step()
        self.step_count += 1


def check(torch, load_file, binary, text_path, name, case, steps, work):
    flags, settings, planted = case
    s = {**DEFAULTS, **settings}
    text = gpt_model.Text(text_path, context=CONTEXT)
    init = os.path.join(work, "init.safetensors")
    if not os.path.exists(init):
        jobs.run([binary, "--text", text_path, "--steps", "1", "--batch", "1", "--save-params", init, *COMMON,
                  "--optimizer", "sgd", "--momentum", "0", "--lr", "1e-30", *OFF])
    start = gpt_model.with_head(load_file(init))

    def twin(dtype, error=None):
        model = gpt_model.twin(torch).to(dtype)
        model.load_state_dict({k: v.to(dtype) for k, v in start.items()}, strict=True)
        return model, Twin(torch, model, s, error)

    runs = {"f32": twin(torch.float32), "f64": twin(torch.float64)}
    if planted:
        runs[planted] = twin(torch.float32, planted)
    per_step = BATCH * s["accumulate"]
    for step in range(steps):
        micro = [text.batch(torch, step * per_step + m * BATCH, BATCH) for m in range(s["accumulate"])]
        for _, trainer in runs.values():
            trainer.step(micro)
    state = {k: {n: v.detach() for n, v in m.state_dict().items()} for k, (m, _) in runs.items()}
    floor = gpt_model.distance(torch, state["f32"], state["f64"])[0]
    failures, line = [], [f"PyTorch f32 {floor:.1e}"]
    # Sharded state needs two ranks; everything else runs on one process too.
    for ranks in (2,) if "--shard-optimizer" in flags else (1, 2):
        out = os.path.join(work, f"{len(os.listdir(work))}.safetensors")
        jobs.run(jobs.on_ranks(ranks, [binary, "--text", text_path, "--steps", str(steps), "--batch",
                                       str(BATCH // ranks), "--init-params", init, "--save-params", out, *COMMON,
                                       *OFF, *flags]), timeout=900)
        mine = load_file(out)
        ours = gpt_model.distance(torch, mine, state["f64"])[0]
        line.append(f"ours on {ranks} rank(s) {ours:.1e} ({ours / max(floor, 1e-30):.2f}x)")
        if ours > 1.5 * floor:
            failures.append(f"{name}, {ranks} rank(s): {ours / floor:.2f}x PyTorch's float32 distance (at most 1.5)")
        if planted:
            caught = gpt_model.distance(torch, mine, state[planted])[0]
            line.append(f"planted {planted} {caught:.1e}")
            if caught < 10 * max(floor, ours):
                failures.append(f"{name}: the planted {planted} error is not caught ({caught:.1e})")
    print(f"  {name}: " + ", ".join(line))
    return failures


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    p.add_argument("--text", help="a UTF-8 file [default: gpt_twin.py]")
    p.add_argument("--steps", type=int, default=6)
    args = p.parse_args()
    try:
        import torch
        from safetensors.torch import load_file
    except ImportError:
        print("gpt's training options against PyTorch: skipped (torch and safetensors are not importable)")
        return 0
    torch.set_num_threads(1)
    text = args.text or os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpt_twin.py")
    binary = os.path.join(args.bin_dir, "gpt")
    print(f"gpt's training options against PyTorch ({torch.__version__}), {args.steps} steps, distance to the "
          "float64 twin")
    failures = []
    for name, case in CASES.items():
        work = tempfile.mkdtemp(prefix="options-twin-")
        failures += check(torch, load_file, binary, text, name, case, args.steps, work)
    return jobs.verdict(failures)


if __name__ == "__main__":
    sys.exit(main())
