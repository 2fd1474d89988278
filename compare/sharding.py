#!/usr/bin/env python3
"""Sharded optimizer state against whole state, printed with the targets (run by `make bench`).

`examples/mlp_zero.rs` (the all-gathers placed in forward) against `examples/mlp` (the same
layers and buckets), AdamW, side by side, the two alternating round by round, medians:

- on shared memory, 2 ranks: the sharded step over the unsharded one (target: at most 1.05);
- under an emulated link of 5 us and 1 GB/s, 2 ranks: the share of the all-gathers' time that
  forward hides (target: at least 0.7), beside the most forward could hide (from the same runs'
  traces), and the simulator's sharded step against the measured one (target: within 5%), for
  each batch given;
- on 4 ranks: the optimizer state per rank (target: a quarter) and the peak RSS of each.

Timing claims live here, printed, never in `make test`. Needs `cargo build --release --examples`.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

import jobs

LINK = ["--link", "latency=5us,bandwidth=1GB/s"]


def report(binary, ranks, steps, batch, extra):
    cmd = [binary, "--steps", str(steps), "--batch", str(batch), "--optimizer", "adamw", "--report", "json", *extra]
    return jobs.report(jobs.on_ranks(ranks, cmd))


def forward_bound(trace):
    """The most of the all-gathers forward can hide, from the Chrome trace `trace` of a sharded
    run, rank 0: an all-gather launched at the end of backward overlaps only the compute that runs
    before forward's last wait for one (the layers after that wait read parameters already
    gathered), so per step the bound is that compute over the all-gathers' time. The median over
    the steps after the first."""
    with open(trace) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    spans = [e for e in events if e.get("ph") == "X" and e.get("pid") == 0]
    bounds = []
    for step in (e for e in spans if e.get("cat") == "step" and e["args"]["step"] > 1):
        start, end = step["ts"], step["ts"] + step["dur"]
        inside = [e for e in spans if e is not step and start <= e["ts"] < end]
        waits = [e for e in inside if e["name"].startswith("wait all-gather")]
        gathers = [e for e in inside if e["name"].startswith("all-gather")]
        if not waits or not gathers:
            continue
        last_wait = max(e["ts"] + e["dur"] for e in waits)
        compute = sum(e["dur"] for e in inside if e["tid"] == step["tid"] and not e["name"].startswith("wait")
                      and e["ts"] + e["dur"] <= last_wait)
        bounds.append(min(1.0, compute / sum(e["dur"] for e in gathers)))
    if not bounds:
        sys.exit(f"no all-gathers in {trace}")
    return statistics.median(bounds)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(jobs.ROOT, "target", "release", "examples"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batches", type=int, nargs="+", default=[64, 256], help="samples per rank under the link")
    args = p.parse_args()
    whole, sharded = (os.path.join(args.bin_dir, name) for name in ("mlp", "mlp_zero"))

    ratios = []
    for _ in range(args.rounds):
        a = report(whole, 2, args.steps, 64, [])["step_ms"]
        b = report(sharded, 2, args.steps, 64, [])["step_ms"]
        ratios.append(b / a)
    ratio = statistics.median(ratios)
    print(f"shared memory, 2 ranks, batch 64: sharded step / whole step = {ratio:.3f} "
          f"(rounds {', '.join(f'{r:.3f}' for r in ratios)}; target <= 1.05: {'met' if ratio <= 1.05 else 'MISSED'})")

    for batch in args.batches:
        hidden, bounds, steps, predicted = [], [], [], []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                trace = os.path.join(tmp, "trace.json")
                r = report(sharded, 2, args.steps, batch, [*LINK, "--trace", trace])
                bounds.append(forward_bound(trace))
            hidden.append(r["all_gather"]["hidden_fraction"])
            predicted.append(r["predicted"]["step_ms"] / r["step_ms"] - 1.0)
            steps.append((report(whole, 2, args.steps, batch, LINK)["step_ms"], r["step_ms"]))
        h = statistics.median(hidden)
        step_ratio = statistics.median(s / w for w, s in steps)
        off = statistics.median(predicted)
        bound = statistics.median(bounds)
        print(f"5 us, 1 GB/s, 2 ranks, batch {batch}: {h:.3f} of the all-gathers hidden behind forward "
              f"(target >= 0.7: {'met' if h >= 0.7 else 'MISSED'}; forward's compute before its last wait could "
              f"hide at most {bound:.3f}); sharded step / whole step {step_ratio:.3f}; "
              f"simulated sharded step {off:+.1%} off the measured one "
              f"(target within 5%: {'met' if abs(off) <= 0.05 else 'MISSED'})")

    m_whole = report(whole, 4, 5, 16, [])["memory"]
    m_sharded = report(sharded, 4, 5, 16, [])["memory"]
    share = m_sharded["optimizer_state_mib"] / m_whole["optimizer_state_mib"]
    print(f"4 ranks: optimizer state {m_sharded['optimizer_state_mib']:.2f} vs {m_whole['optimizer_state_mib']:.2f} MiB "
          f"per rank ({share:.3f}; target 0.25: {'met' if abs(share - 0.25) < 0.01 else 'MISSED'}); peak RSS "
          f"{max(m_sharded['peak_rss_mib']):.1f} vs {max(m_whole['peak_rss_mib']):.1f} MiB "
          f"(estimates {m_sharded['needed_mib']:.1f} vs {m_whole['needed_mib']:.1f} MiB)")
    if abs(share - 0.25) >= 0.01:
        # A count of floats, not a time: a miss is a failure whatever the machine.
        sys.exit(f"FAILED: sharded optimizer state is {share:.3f} of whole state on 4 ranks, not 0.25")


if __name__ == "__main__":
    main()
