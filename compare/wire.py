"""Benchmark: gradients on the wire in FP32, bf16 and fp16 (`--grad-comm`), and as PowerSGD's
rank-4 factors (the `mlp_powersgd` example: `mlp`'s model compiled with `grad_comm = powersgd(rank
= 4)`, whose first 10 steps go whole), `mlp` on 2 ranks under emulated links: the one where FP32 communication dominates (`latency=30us,
bandwidth=0.25GB/s`, where `mlp`'s FP32 all-reduce takes 3-4x its compute; the table prints
both), `10gbe` and `100gbe`.
The formats alternate within each round so that drifts in machine load hit all alike; the table
shows medians over rounds of each run's median step, the step-time ratio to FP32 (median of the
rounds' ratios) and the bytes on the wire per rank from the report.

    make bench                        # runs this after compare/run.py
    python3 compare/wire.py --rounds 5 --steps 30
"""

import argparse
import os
import statistics
import sys

import jobs

EXAMPLES = os.path.join(jobs.ROOT, "target", "release", "examples")
MLP = os.path.join(EXAMPLES, "mlp")
MLP_POWERSGD = os.path.join(EXAMPLES, "mlp_powersgd")
LINKS = ["latency=30us,bandwidth=0.25GB/s", "10gbe", "100gbe"]
FORMATS = ["fp32", "bf16", "fp16", "powersgd"]
SLOW = "latency=30us,bandwidth=0.25GB/s"
# The targets on the link where FP32 communication dominates (none for the others): the
# step ratio to FP32, and for PowerSGD at least 50x fewer bytes on the wire.
TARGET = {(SLOW, "bf16"): 0.65, (SLOW, "powersgd"): 0.40}
FEWER_BYTES = {"powersgd": 50.0}


def step(args, link, fmt):
    # PowerSGD is compiled into its binary; the narrow formats are chosen at run time.
    binary, choice = (MLP_POWERSGD, []) if fmt == "powersgd" else (MLP, ["--grad-comm", fmt])
    cmd = [binary, "--steps", str(args.steps), "--batch", str(args.batch), "--link", link, "--report", "json"]
    report = jobs.report(jobs.on_ranks(2, cmd + choice))
    wire = sum(b["wire_bytes"] for b in report["buckets"])
    full = sum(b["bytes"] for b in report["buckets"])
    return report["step_ms"], wire, full, report["compute_ms"], report["all_reduce_ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # PowerSGD sends its first 10 steps whole. The report's step is the median of all 30; on a slow
    # link the 10 whole steps are the slowest, so that median is about the 78th percentile of the
    # 20 compressed steps: a little above their own median (conservative for PowerSGD).
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=64, help="samples per rank")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    for binary in (MLP, MLP_POWERSGD):
        if not os.path.exists(binary):
            sys.exit(f"{binary} is missing: cargo build --release --examples")

    print(f"mlp on 2 ranks, {args.steps} steps of {args.batch} samples per rank, {args.rounds} rounds")
    print(f"{'link':<34} {'format':<8} {'step ms':>8} {'/ fp32':>7} {'target':>7} {'on the wire':>12} {'fewer':>6}"
          f" {'compute ms':>11} {'all-reduce ms':>14}")
    missed, wrong = [], []
    for link in LINKS:
        runs = {f: [] for f in FORMATS}
        for _ in range(args.rounds):
            for fmt in FORMATS:
                runs[fmt].append(step(args, link, fmt))
        for fmt in FORMATS:
            ms = statistics.median(r[0] for r in runs[fmt])
            ratio = statistics.median(a[0] / b[0] for a, b in zip(runs[fmt], runs["fp32"]))
            wire, full = runs[fmt][-1][1], runs[fmt][-1][2]
            target = TARGET.get((link, fmt))
            shown = f"<={target:.2f}" if target else ""
            if target and ratio > target:
                missed.append(f"{fmt} on {link}: {ratio:.2f} > {target:.2f}")
            fewer = FEWER_BYTES.get(fmt)
            if link == SLOW and fewer and full / wire < fewer:
                # A count of bytes, not a time: a miss is a failure whatever the machine.
                wrong.append(f"{fmt} on {link}: {full / wire:.1f}x fewer bytes < {fewer:.0f}x")
            compute = statistics.median(r[3] for r in runs[fmt])
            all_reduce = statistics.median(r[4] for r in runs[fmt])
            print(f"{link:<34} {fmt:<8} {ms:>8.1f} {ratio:>7.2f} {shown:>7} {wire / 2**20:>8.2f} MiB "
                  f"{full / wire:>5.2f}x {compute:>11.1f} {all_reduce:>14.1f}")
    print("targets missed: " + ("; ".join(missed) if missed else "none"))
    if wrong:
        sys.exit("FAILED: " + "; ".join(wrong))


if __name__ == "__main__":
    main()
