"""Side by side: two builds of the `mlp` example (say, before and after a change) in the modes of
`compare/run.py`, alternating run by run so that drifts in machine load hit both alike. Prints each
mode's median step for both and the median of the per-round ratios (new / old).

    git worktree add ../before <commit> && (cd ../before && cargo build --release --examples)
    python3 compare/builds.py ../before/target/release/examples/mlp target/release/examples/mlp
"""

import argparse
import os
import statistics
import sys

import jobs

MODES = {
    "overlap": [],
    "no overlap": ["--no-overlap"],
    "overlap, OpenMPI": ["--all-reduce", "mpi"],
    "compute only": ["--compute-only"],
    "one process": None,
}


def step_ms(mlp, args, flags):
    base = [mlp, "--steps", str(args.steps), "--batch", str(args.batch), "--report", "json"]
    cmd = base if flags is None else jobs.on_ranks(args.ranks, [*base, *flags])
    return jobs.report(cmd)["step_ms"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old", help="the mlp binary to compare against")
    p.add_argument("new")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64, help="samples per rank")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    # Repeatable, since a mode's name may hold a comma ("overlap, OpenMPI"); every mode by default.
    p.add_argument("--mode", action="append", choices=list(MODES), help="a mode to run (repeatable; default: all)")
    args = p.parse_args()
    modes = args.mode or list(MODES)
    for mlp in (args.old, args.new):
        if not os.access(mlp, os.X_OK):
            sys.exit(f"{mlp}: not an executable")

    print(f"mlp, {args.steps} steps of {args.batch} samples per rank, {args.rounds} rounds; new = {args.new}")
    print(f"{'mode':<18} {'old ms':>8} {'new ms':>8} {'new / old':>10}  per round")
    for mode in modes:
        flags = MODES[mode]
        pairs = []
        for i in range(args.rounds):
            # Alternate which goes first, so that neither always runs on a warmer machine.
            order = (args.old, args.new) if i % 2 == 0 else (args.new, args.old)
            times = {mlp: step_ms(mlp, args, flags) for mlp in order}
            pairs.append((times[args.old], times[args.new]))
        ratios = [n / o for o, n in pairs]
        old, new = statistics.median(o for o, _ in pairs), statistics.median(n for _, n in pairs)
        shown = " ".join(f"{r:.3f}" for r in ratios)
        print(f"{mode:<18} {old:>8.1f} {new:>8.1f} {statistics.median(ratios):>10.3f}  {shown}")


if __name__ == "__main__":
    main()
