#!/usr/bin/env python3
"""Peak RSS against what training needs, printed with the target (run by `make bench`).

Each example trains a few steps with `--report json`; the report's memory holds every rank's
peak resident set (Linux `VmHWM`) and the estimate of what one rank needs (`overlap::memory`:
parameters, gradients, optimizer state, and the activations one micro-step keeps for every
position). Target: the largest rank's peak at most 1.25x the estimate (issue 26's bound for the
GPT), on one process; two ranks are printed too, where MPI's own memory (libraries, shared
segments: about 15 MiB a rank) weighs on small models. Needs `cargo build --release --examples`.
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


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    print(f"peak RSS against parameters + gradients + optimizer state + activations, {args.steps} steps")
    for example, ranks, flags in RUNS:
        cmd = [os.path.join(args.bin_dir, example), "--steps", str(args.steps), "--report", "json", *flags]
        memory = jobs.report(jobs.on_ranks(ranks, cmd))["memory"]
        peak, needed = max(memory["peak_rss_mib"]), memory["needed_mib"]
        ratio = peak / needed
        verdict = f"target <= {TARGET}: {'met' if ratio <= TARGET else 'missed'}" if ranks == 1 else "not a target"
        print(
            f"  {example:6} {ranks} rank(s): {peak:6.1f} MiB for {needed:6.1f} MiB "
            f"(activations {memory['activations_mib']:.1f}, optimizer state {memory['optimizer_state_mib']:.1f}): "
            f"{ratio:.2f}x ({verdict})"
        )


if __name__ == "__main__":
    main()
