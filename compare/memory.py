#!/usr/bin/env python3
"""Peak RSS against what training needs, printed with the target (run by `make bench`).

Each example trains a few steps with `--report json`; the report's memory holds every rank's
peak resident set (Linux `VmHWM`) and the estimate of what one rank needs (`overlap::memory`:
parameters, gradients, optimizer state, and the activations one micro-step keeps for every
position). Target: the largest rank's peak at most 1.25x the estimate (issue 26's bound for the
GPT), on one process; two ranks are printed too, where MPI's own memory (libraries, shared
segments: about 15 MiB a rank) weighs on small models. The one-process GPT runs once more for
`--long-steps`, where the report's own records (bounded: a window of spans, 512 steps' breakdowns)
are in the peak too. Needs `cargo build --release --examples`.
"""

import argparse
import os

import jobs

TARGET = 1.25

RUNS = [
    ("gpt", 1, ["--text", os.path.join(jobs.ROOT, "compare", "gpt_twin.py"), "--batch", "12", "--optimizer", "adamw",
                "--eval-every", "0"]),
    ("gpt", 2, ["--text", os.path.join(jobs.ROOT, "compare", "gpt_twin.py"), "--batch", "6", "--optimizer", "adamw",
                "--eval-every", "0"]),
    ("resmlp", 1, ["--batch", "64"]),
    ("mlp", 1, ["--batch", "64"]),
]

# The run measured again over `--long-steps`: the first of `RUNS`.
LONG = RUNS[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--long-steps", type=int, default=600, help="steps of the long run (0: none)")
    args = p.parse_args()
    print(f"peak RSS against parameters + gradients + optimizer state + activations, {args.steps} steps "
          f"({args.long_steps} for the last line)")
    runs = [(*run, args.steps) for run in RUNS] + ([(*LONG, args.long_steps)] if args.long_steps else [])
    for example, ranks, flags, steps in runs:
        cmd = [os.path.join(args.bin_dir, example), "--steps", str(steps), "--report", "json", *flags]
        memory = jobs.report(jobs.on_ranks(ranks, cmd))["memory"]
        peak, needed = max(memory["peak_rss_mib"]), memory["needed_mib"]
        ratio = peak / needed
        verdict = f"target <= {TARGET}: {'met' if ratio <= TARGET else 'missed'}" if ranks == 1 else "not a target"
        print(
            f"  {example:6} {ranks} rank(s), {steps:4} steps: {peak:6.1f} MiB for {needed:6.1f} MiB "
            f"(activations {memory['activations_mib']:.1f}, optimizer state {memory['optimizer_state_mib']:.1f}): "
            f"{ratio:.2f}x ({verdict})"
        )


if __name__ == "__main__":
    main()
