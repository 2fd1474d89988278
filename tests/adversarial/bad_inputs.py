#!/usr/bin/env python3
"""Adversarial inputs against the example binaries: a catalogue of command lines, files and
signals that a training binary must refuse clearly (up front where it can), survive, or stop on
cleanly. Each case runs in its own fresh scratch folder and states what it expects: an exit code,
a substring of the message, and for the cases where a result must survive (a closed stdout, a
SIGTERM), the files that must be there afterwards.

Prints a Markdown table (number, category, command, exit code, the first meaningful line printed,
verdict) and the totals: inputs tried, panics, hangs, results lost. Exits non-zero when any case
panics, hangs, loses its result or does not meet its expectation. A case may name such a failure
as another program's documented behaviour (mpirun aborting the job on SIGPIPE): it is then counted
apart, with its verdict, and does not fail the run.

    cargo build --examples && tests/adversarial/bad_inputs.py [--bin-dir DIR] [--only CATEGORY] [--markdown FILE]

A panic is exit status 101 or 134, or `panicked at` in the output. A hang is a run the script had
to end after the case's timeout. The example binaries are on the PATH of every command, so
commands read as they would be typed (`mlp ...`, `mpirun -n 2 mlp ...`); `mpirun` runs with
`--oversubscribe`. Standard library only.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from catalogue import catalogue
from fixtures import Fixtures
from harness import REPO, Runner, first_line, judge, md

def ui_cases() -> int:
    return sum(1 for p in (REPO / "tests" / "ui").rglob("*.rs") if p.with_suffix(".stderr").exists())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", default=str(REPO / "target" / "debug" / "examples"),
                    help="where the example binaries are (default: target/debug/examples)")
    ap.add_argument("--only", metavar="CATEGORY", action="append",
                    help="run only this category (repeatable); --only list prints them")
    ap.add_argument("--markdown", metavar="FILE", help="also write the table and totals to FILE")
    args = ap.parse_args()

    cases = catalogue()
    categories = list(dict.fromkeys(c.category for c in cases))
    if args.only and "list" in args.only:
        print("\n".join(f"{c} ({sum(1 for x in cases if x.category == c)})" for c in categories))
        return 0
    if args.only:
        unknown = [o for o in args.only if o not in categories]
        if unknown:
            sys.exit(f"unknown category {', '.join(unknown)}: one of {', '.join(categories)}")
    bin_dir = Path(args.bin_dir).resolve()
    for name in ["mlp", "tower", "custom_layer"]:
        if not (bin_dir / name).is_file():
            sys.exit(f"{bin_dir / name} is missing: build the examples first (cargo build --examples)")
    if shutil.which("mpirun") is None:
        sys.exit("mpirun is missing (make deps installs OpenMPI)")

    runner = Runner(bin_dir)
    fixtures = Fixtures(runner)
    rows, kinds = [], []
    header = "| # | category | command | exit | first line printed | verdict |\n|---|---|---|---|---|---|"
    print(header, flush=True)
    started = time.monotonic()
    try:
        for number, case in enumerate(cases, 1):
            if args.only and case.category not in args.only:
                continue
            folder = Path(tempfile.mkdtemp(prefix=f"bad-input-{number}-"))
            try:
                if case.setup:
                    case.setup(folder, fixtures)
                res = runner.run(case, folder)
                kind, verdict = judge(case, res, folder)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            row = (f"| {number} | {case.category} | `{md(case.cmd, 200)}` | {'killed' if res.killed else res.rc} | "
                   f"{md(first_line(res))} | {md(verdict, 200)} |")
            print(row, flush=True)
            rows.append(row)
            kinds.append(kind)
    finally:
        fixtures.cleanup()

    count = lambda k: kinds.count(k)  # noqa: E731
    totals = [
        "",
        f"Inputs tried: {len(kinds)} ({count('ok')} as expected) in {time.monotonic() - started:.0f} s",
        f"Panics: {count('panic')}",
        f"Hangs: {count('hang')}",
        f"Results lost: {count('lost')}",
        f"Expectations not met: {count('wrong')}",
        f"Documented behaviour of other programs: {count('documented')}",
        f"Malformed models (trybuild UI tests in tests/ui, not run here): {ui_cases()}",
    ]
    print("\n".join(totals))
    if args.markdown:
        Path(args.markdown).write_text("\n".join([header, *rows, *totals]) + "\n")
    bad = sum(count(k) for k in ["panic", "hang", "lost", "wrong"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
