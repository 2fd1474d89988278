#!/usr/bin/env python3
"""An example's overlap on 2 ranks, printed with its targets (run by `make bench`).

By default `examples/resmlp.rs` (eight residual blocks, one bucket per block), 64 samples per
rank; `--example gpt --batch 6 -- --text FILE` the GPT. Under an emulated link of 5 us and
1 GB/s, for each batch of `--link-batches`: how much of its all-reduce time the compute hides
(target: at least 0.8), beside backward's time over the all-reduce's. A whole state's
all-reduces overlap backward only (the next forward reads what they update), so where backward
is the shorter, the share stays near that ratio. On shared memory: its step against its
compute-only step (target: at most 1.05), beside what the all-reduces alone take (`--comm-only`)
over the compute-only step: on two cores, each shared by a rank's compute and communication
threads, that work is added to the step, not hidden. Modes alternate round by round; medians.
Arguments after `--` go to every run; `MPIRUN_ARGS` (see jobs.py) go to mpirun. Timing claims
live here, printed, never in `make test`.
Needs `cargo build --release --examples`.
"""

import argparse
import os
import statistics
import sys

import jobs

# The flags naming training data, which `--comm-only` refuses.
DATA_FLAGS = ("--data", "--text", "--tokens")


def report(binary, flags, steps, batch, extra):
    cmd = [binary, "--steps", str(steps), "--batch", str(batch), "--report", "json", *extra, *flags]
    return jobs.report(jobs.on_ranks(2, cmd), timeout=600)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--example", default="resmlp")
    p.add_argument("--batch", type=int, default=64, help="samples per rank")
    p.add_argument("--link-batches", type=int, nargs="+", help="samples per rank under the link (default: --batch)")
    p.add_argument("--shared-only", action="store_true", help="only the step against compute-only on shared memory")
    p.add_argument("extra", nargs="*", help="after --: arguments for every run")
    args = p.parse_args()
    binary = os.path.join(args.bin_dir, args.example)
    print(f"{args.example}, 2 ranks, medians of {args.rounds} rounds of {args.steps} steps")
    for batch in [] if args.shared_only else args.link_batches or [args.batch]:
        reports = [report(binary, ["--link", "latency=5us,bandwidth=1GB/s"], args.steps, batch, args.extra)
                   for _ in range(args.rounds)]
        hidden = [r["hidden_fraction"] for r in reports]
        ratio = statistics.median(r["backward_ms"] / r["all_reduce_ms"] for r in reports)
        h = statistics.median(hidden)
        print(f"  hidden under latency=5us,bandwidth=1GB/s, {batch} samples per rank: {h:.3f} of the all-reduce "
              f"(target >= 0.8: {'met' if h >= 0.8 else 'missed'}; backward lasts {ratio:.3f} of the all-reduce); "
              f"rounds {' '.join(f'{x:.3f}' for x in hidden)}")
    ratios, comm_shares = [], []
    modes = {
        "step": ([], args.extra),
        "compute": (["--compute-only"], args.extra),
        "comm": (["--comm-only"], without_data(args.extra)),
    }
    for i in range(args.rounds):
        order = list(modes) if i % 2 == 0 else list(modes)[::-1]
        steps = {name: report(binary, modes[name][0], args.steps, args.batch, modes[name][1])["step_ms"]
                 for name in order}
        ratios.append(steps["step"] / steps["compute"])
        comm_shares.append(steps["comm"] / steps["compute"])
    r = statistics.median(ratios)
    print(f"  step / compute-only step on shared memory, {args.batch} samples per rank: {r:.3f} "
          f"(target <= 1.05: {'met' if r <= 1.05 else 'missed'}; the all-reduces alone take "
          f"{statistics.median(comm_shares):.3f} of the compute-only step); rounds {' '.join(f'{x:.3f}' for x in ratios)}")
    return 0


def without_data(extra):
    """`extra` without the flags naming training data, which `--comm-only` refuses (it trains
    nothing; the model's buckets are what it sends)."""
    kept, skip = [], False
    for arg in extra:
        if skip:
            skip = False
        elif arg in DATA_FLAGS:
            skip = True
        elif not any(arg.startswith(f + "=") for f in DATA_FLAGS):
            kept.append(arg)
    return kept


if __name__ == "__main__":
    sys.exit(main())
