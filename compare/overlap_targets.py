#!/usr/bin/env python3
"""An example's overlap on 2 ranks, printed with its targets (run by `make bench`).

By default `examples/resmlp.rs` (eight residual blocks, one bucket per block), 64 samples per
rank; `--example gpt --batch 6 -- --text FILE` the GPT. Under an emulated link of 5 us and
1 GB/s, how much of its all-reduce time the compute hides (target: at least 0.8); on shared
memory, its step against its compute-only step (target: at most 1.05), modes alternating round
by round, medians. Arguments after `--` go to every run. Timing claims live here, printed, never
in `make test`. Needs `cargo build --release --examples`.
"""

import argparse
import os
import statistics
import sys

import jobs


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
    p.add_argument("extra", nargs="*", help="after --: arguments for every run")
    args = p.parse_args()
    binary = os.path.join(args.bin_dir, args.example)
    run = lambda flags: report(binary, flags, args.steps, args.batch, args.extra)  # noqa: E731
    hidden = [run(["--link", "latency=5us,bandwidth=1GB/s"])["hidden_fraction"] for _ in range(args.rounds)]
    ratios = []
    for i in range(args.rounds):
        modes = [[], ["--compute-only"]] if i % 2 == 0 else [["--compute-only"], []]
        steps = {tuple(m): run(m)["step_ms"] for m in modes}
        ratios.append(steps[()] / steps[("--compute-only",)])
    h, r = statistics.median(hidden), statistics.median(ratios)
    print(f"{args.example}, 2 ranks, {args.batch} samples per rank, medians of {args.rounds} rounds of "
          f"{args.steps} steps")
    print(f"  hidden under latency=5us,bandwidth=1GB/s: {h:.3f} of the all-reduce "
          f"(target >= 0.8: {'met' if h >= 0.8 else 'missed'}); rounds {' '.join(f'{x:.3f}' for x in hidden)}")
    print(f"  step / compute-only step on shared memory: {r:.3f} "
          f"(target <= 1.05: {'met' if r <= 1.05 else 'missed'}); rounds {' '.join(f'{x:.3f}' for x in ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
