"""Benchmark: the `mlp` example under `mpirun -n 2` in four modes (compute only, no overlap,
overlap, communication only; the all-reduce through shared memory) plus overlap with OpenMPI's
all-reduce, one process against PyTorch with one thread (and with a thread per core, `--threads`,
when the machine has several), and PyTorch DDP (gloo, CPU) when `torch` is importable. Modes
alternate within each round so that drifts in machine load hit all alike; the table shows medians
over rounds of each run's median step.

    make bench                                   # builds, then runs this
    python3 compare/run.py --rounds 3 --json compare/results.json --torch-python .venv/bin/python
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

import jobs

MLP = os.path.join(jobs.ROOT, "target", "release", "examples", "mlp")
TARGETS = {
    "overlap / PyTorch DDP": 0.5,
    "overlap / compute only": 1.15,
    "one process / PyTorch one thread": 0.9,
    "peak RSS / needed": 1.3,
}


def ours(args, ranks, flags):
    return jobs.report(jobs.on_ranks(ranks, [MLP, "--steps", str(args.steps), "--batch", str(args.batch),
                                             "--report", "json", *flags]))


def torch_version(python):
    """torch's version as `python` imports it, or None when it cannot."""
    if not python:
        return None
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def peer(args, single, threads=1):
    script = os.path.join(jobs.ROOT, "compare", "ddp_peer.py")
    common = [script, "--steps", str(args.steps), "--batch", str(args.batch)]
    if single:
        return jobs.report([args.torch_python, *common, "--single", "--threads", str(threads)])
    return jobs.report([args.torch_python, "-m", "torch.distributed.run", "--nproc_per_node", str(args.ranks), *common])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64, help="samples per rank (PyTorch DDP's too)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=os.path.join(jobs.ROOT, "compare", "results.json"))
    p.add_argument("--torch-python", default=os.environ.get("TORCH_PYTHON", sys.executable),
                   help="a Python with torch installed (pip install torch); skipped when absent")
    args = p.parse_args()
    if not os.path.exists(MLP):
        sys.exit(f"{MLP} is missing: cargo build --release --examples (make bench does)")
    if not shutil.which("mpirun"):
        sys.exit("mpirun is missing: make deps")
    torch = torch_version(args.torch_python)
    with_torch = torch is not None
    if not with_torch:
        print(f"note: torch is not importable by {args.torch_python}; PyTorch rows are skipped "
              "(pip install torch, or --torch-python PATH)", file=sys.stderr)

    modes = {
        "compute only": lambda: ours(args, args.ranks, ["--compute-only"]),
        "no overlap": lambda: ours(args, args.ranks, ["--no-overlap"]),
        "overlap": lambda: ours(args, args.ranks, []),
        "overlap, OpenMPI": lambda: ours(args, args.ranks, ["--all-reduce", "mpi"]),
        "communication only": lambda: ours(args, args.ranks, ["--comm-only"]),
        "one process": lambda: ours(args, 1, []),
    }
    cores = len(os.sched_getaffinity(0))
    threaded = f"one process, {cores} threads"
    if cores > 1:
        modes[threaded] = lambda: ours(args, 1, ["--threads", str(cores)])
    if with_torch:
        modes["PyTorch DDP"] = lambda: peer(args, single=False)
        modes["PyTorch one thread"] = lambda: peer(args, single=True)
        if cores > 1:
            modes[f"PyTorch {cores} threads"] = lambda: peer(args, single=True, threads=cores)
    runs = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode, go in modes.items():
            result = go()
            runs[mode].append(result)
            print(f"round {r + 1}/{args.rounds}  {mode:<20} {result['step_ms']:8.1f} ms", file=sys.stderr)

    step = {m: statistics.median(x["step_ms"] for x in rs) for m, rs in runs.items()}
    memory = runs["overlap"][-1].get("memory") or {}
    ratios = {
        "overlap / compute only": step["overlap"] / step["compute only"],
        "overlap / no overlap": step["overlap"] / step["no overlap"],
        "overlap / overlap over OpenMPI": step["overlap"] / step["overlap, OpenMPI"],
        "overlap / max(compute, communication)": step["overlap"] / max(step["compute only"], step["communication only"]),
    }
    if with_torch:
        ratios["overlap / PyTorch DDP"] = step["overlap"] / step["PyTorch DDP"]
        ratios["one process / PyTorch one thread"] = step["one process"] / step["PyTorch one thread"]
        if cores > 1:
            ratios[f"{threaded} / PyTorch {cores} threads"] = step[threaded] / step[f"PyTorch {cores} threads"]
    if cores > 1:
        ratios[f"{threaded} / one process"] = step[threaded] / step["one process"]
    if memory:
        ratios["peak RSS / needed"] = max(memory["peak_rss_mib"]) / memory["needed_mib"]

    print(f"\nmlp 784-2048-2048-2048-10, {args.batch} samples per rank, SGD momentum, {args.ranks} ranks, "
          f"{args.steps} steps x {args.rounds} rounds (medians)")
    for mode, ms in step.items():
        print(f"  {mode:<24}{ms:9.1f} ms")
    # A target met by the medians may still be missed in some rounds: show each round's ratio.
    rounds = {}
    for name in ratios:
        num, _, den = name.partition(" / ")
        if name in TARGETS and num in runs and den in runs:
            rounds[name] = [a["step_ms"] / b["step_ms"] for a, b in zip(runs[num], runs[den])]
    for name, value in ratios.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else f"   target <= {target}: {'met' if value <= target else 'NOT met'}"
        each = f"   (rounds: {', '.join(f'{r:.3f}' for r in rounds[name])})" if name in rounds else ""
        print(f"  {name:<44}{value:7.3f}{verdict}{each}")
    if memory:
        print(f"  peak RSS per rank {memory['peak_rss_mib']} MiB, needed {memory['needed_mib']:.1f} MiB")
    with open(args.json, "w") as f:
        # The settings of the run, not where its files were: the JSON may be shared.
        config = {"steps": args.steps, "batch": args.batch, "ranks": args.ranks, "rounds": args.rounds, "torch": torch}
        json.dump({"config": config, "step_ms": step, "ratios": ratios, "ratios_by_round": rounds,
                   "memory": memory, "runs": runs}, f, indent=2)
    print(f"  written: {args.json}")


if __name__ == "__main__":
    main()
