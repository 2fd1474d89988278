#!/usr/bin/env python3
"""The planner's assumptions about PyTorch, observed in PyTorch itself.

1. Ready order. For PyTorch twins of the examples (same state-dict names, same shapes), one
   backward with `register_post_accumulate_grad_hook` on every parameter records the order in
   which autograd makes gradients ready: the order DDP records in its first iteration and
   rebuilds its buckets by. It is printed beside the order of our compiled buckets (each
   example's `--print-schedule`: buckets in launch order, members in buffer order) and any
   difference fails the script.
2. DDP's buckets. DDP (gloo, one process) runs the twins for three steps and reports, through
   `_get_ddp_logging_data`, its first-iteration and rebuilt buckets. With DDP's default
   arguments the rebuilt buckets must equal our plan of the same caps (`uneven_ddp` is compiled
   with DDP's defaults, 1 MiB then 25 MiB); the facts the documentation states by version are
   checked too: one bucket in the first iteration unless `find_unused_parameters=True`, and an
   explicit `bucket_cap_mb` sizing the first rebuilt bucket as well.

Run by `make bench` when torch is importable (`--torch-python`, or TORCH_PYTHON); prints
"skipped" and succeeds otherwise. The examples must be built (`cargo build --release --examples`).
"""

import argparse
import os
import subprocess
import sys

import jobs


# The examples' layers: (field, kind, arguments), as in examples/*.rs.
TOWER = [("fc1", "Linear", (64, 1024)), ("act1", "Relu", ())]
for i in range(2, 9):
    TOWER += [(f"fc{i}", "Linear", (1024, 1024)), (f"act{i}", "Relu", ())]
TOWER += [("head", "Linear", (1024, 10))]
UNEVEN = [("embed", "Linear", (784, 1024)), ("act0", "Relu", ()), ("fc1", "Linear", (1024, 512))]
for i in range(1, 7):
    UNEVEN += [(f"act{i}", "Relu", ()), (f"fc{i + 1}" if i < 6 else "head", "Linear", (512, 512 if i < 6 else 10))]
MODELS = {
    "mlp": [("fc1", "Linear", (784, 2048)), ("act1", "Relu", ()), ("fc2", "Linear", (2048, 2048)),
            ("act2", "Relu", ()), ("fc3", "Linear", (2048, 2048)), ("act3", "Relu", ()),
            ("head", "Linear", (2048, 10))],
    "tower": TOWER,
    # LayerNorm and a layer of one's own (a per-feature gain) between two Linears.
    "custom_layer": [("embed", "Linear", (784, 256)), ("norm", "LayerNorm", (256,)), ("act", "Gelu", ()),
                     ("gain", "Gain", (256,)), ("head", "Linear", (256, 10))],
    "uneven_ddp": UNEVEN,
}


def twin(torch, layers):
    """An `nn.Module` whose attributes are the example's fields, applied in order."""
    nn = torch.nn

    class Gain(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.gain = nn.Parameter(torch.ones(width))

        def forward(self, x):
            return x * self.gain

    make = {"Linear": nn.Linear, "LayerNorm": nn.LayerNorm, "Relu": nn.ReLU,
            "Gelu": lambda: nn.GELU(approximate="tanh"), "Gain": Gain}

    class Twin(nn.Module):
        def __init__(self):
            super().__init__()
            self.order = [name for name, _, _ in layers]
            for name, kind, args in layers:
                setattr(self, name, make[kind](*args))

        def forward(self, x):
            for name in self.order:
                x = getattr(self, name)(x)
            return x

    return Twin()


def observed_ready_order(torch, model, features):
    ready = []
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda _p, name=name: ready.append(name))
    model(torch.randn(8, features)).square().mean().backward()
    return ready


def compiled_buckets(binary, which="compiled"):
    """Our buckets (launch order), each a list of member names in buffer order: the compiled
    plan, or (`which="ddp"`) the plan of DDP's default caps for the same model."""
    out = subprocess.run([binary, f"--print-schedule={which}"], capture_output=True, text=True, check=True).stdout
    buckets = []
    for line in out.splitlines():
        if line.startswith("b") and line.split()[0][1:].isdigit():
            members = line.split("  ")[-1].strip()
            buckets.append([m.strip() for m in members.split(",")])
    if not buckets:
        sys.exit(f"no buckets in the output of {binary} --print-schedule:\n{out}")
    return buckets


def ddp_buckets(torch, model, features, **kwargs):
    """DDP's (first-iteration, rebuilt) buckets as lists of parameter names, from its logging data."""
    ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    names = [n for n, _ in model.named_parameters()]
    x = torch.randn(8, features)
    data = {}
    for _ in range(3):
        ddp(x).square().mean().backward()
        data = ddp._get_ddp_logging_data()
    first = [int(s) for s in str(data.get("bucket_sizes", "")).split(",") if s.strip()]
    rebuilt = data.get("rebuilt_per_bucket_param_indices")
    rebuilt = None if rebuilt is None else [[names[int(i)] for i in b.split()] for b in rebuilt.split(",")]
    return first, rebuilt


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    args = p.parse_args()
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("ready order against PyTorch: skipped (torch is not importable; pip install torch)")
        return 0
    torch.manual_seed(0)
    failures = []
    print(f"PyTorch {torch.__version__}: gradient-ready order (post-accumulate-grad hooks) against our plans")
    import blocks_twin  # resmlp's twin: nested modules, its blocks in an nn.ModuleList

    examples = [(name, twin(torch, layers), layers[0][2][0]) for name, layers in MODELS.items()]
    examples.append(("resmlp", blocks_twin.twin(torch), 784))
    for example, model, features in examples:
        observed = observed_ready_order(torch, model, features)
        ours = [m for b in compiled_buckets(os.path.join(args.bin_dir, example)) for m in b]
        same = observed == ours
        print(f"  {example:13} {'same' if same else 'DIFFERENT'}: {', '.join(observed)}")
        if not same:
            print(f"  {'':13} ours: {', '.join(ours)}")
            failures.append(f"{example}: ready order differs")

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29400 + os.getpid() % 500))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        layers = MODELS["uneven_ddp"]
        make = lambda: twin(torch, layers)  # noqa: E731
        ours = compiled_buckets(os.path.join(args.bin_dir, "uneven_ddp"))
        first, rebuilt = ddp_buckets(torch, make(), 784)
        print("DDP's buckets (gloo, one process; sizes in bytes):")
        print(f"  defaults: first iteration {first}; rebuilt {[len(b) for b in rebuilt or []]} parameters per bucket")
        checks = [
            ("with DDP's defaults the first iteration is one bucket (since 1.12)", len(first) == 1),
            ("with DDP's defaults the rebuilt buckets equal uneven_ddp's compiled ones", rebuilt == ours),
        ]
        first_cap, rebuilt_cap = ddp_buckets(torch, make(), 784, bucket_cap_mb=25)
        print(f"  bucket_cap_mb=25: rebuilt {[len(b) for b in rebuilt_cap or []]} parameters per bucket")
        checks.append(("an explicit bucket_cap_mb sizes the first rebuilt bucket too (since 2.3): one 10 MiB bucket",
                       rebuilt_cap is not None and len(rebuilt_cap) == 1))
        first_unused, _ = ddp_buckets(torch, make(), 784, find_unused_parameters=True)
        print(f"  find_unused_parameters=True: first iteration {first_unused}")
        # Definition order: embed.weight alone reaches the 1 MiB first bucket; launched last.
        checks.append(("find_unused_parameters=True assigns definition order with a small first bucket",
                       len(first_unused) == 2 and first_unused[-1] == 784 * 1024 * 4))
        for what, ok in checks:
            print(f"  {'ok  ' if ok else 'FAIL'} {what}")
            if not ok:
                failures.append(what)
        if not rebuilt == ours:
            print(f"  ours:     {ours}\n  rebuilt:  {rebuilt}")
        # Across blocks and residual connections: resmlp's twin under DDP's defaults against our
        # planner with the same caps (the example itself gives each block buckets of its own).
        ours_resmlp = compiled_buckets(os.path.join(args.bin_dir, "resmlp"), "ddp")
        _, rebuilt_resmlp = ddp_buckets(torch, blocks_twin.twin(torch), 784)
        same = rebuilt_resmlp == ours_resmlp
        print(f"  {'ok  ' if same else 'FAIL'} resmlp's twin: DDP's rebuilt buckets equal our plan at DDP's caps "
              f"({len(ours_resmlp)} buckets)")
        if not same:
            failures.append("resmlp: DDP's rebuilt buckets differ from our plan at DDP's caps")
            print(f"  ours:     {ours_resmlp}\n  rebuilt:  {rebuilt_resmlp}")
    finally:
        dist.destroy_process_group()
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    print("every observation agrees with the plans")
    return 0


if __name__ == "__main__":
    sys.exit(main())
