"""Throughput of ``bridgebench sweep``'s stages 1-3 (enumerate + rules + dedupe, memory per GPU, predicted step time):
points per second per stage and the total, on a cold process (empty caches), for a configs/sweep space.

Target (issue 11): stages 1-3 over 10,000 points in under 60 s on the 2-core development machine. The default space,
``kimi_k2_256`` (Kimi K2 on 256 GB300, 30,720 points), is three times that size.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_sweep.py [--space kimi_k2_256] [overrides ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bridgebench.config import calibration  # noqa: E402
from bridgebench.config import sweep as engine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="kimi_k2_256", help="configs/sweep/<NAME>.yaml")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides on top of the space")
    args = ap.parse_args()
    calib = calibration.load()
    t0 = time.perf_counter()
    space = engine.parse_space(args.overrides, args.space)
    bases = engine.compose_bases(space)
    compose_s = time.perf_counter() - t0
    timings = []
    t = time.perf_counter()
    rows = engine.enumerate_points(space, bases)
    timings.append(("1 enumerate + rules + dedupe", len(rows), time.perf_counter() - t))
    n = sum(r["status"] == "valid" for r in rows)
    t = time.perf_counter()
    engine.score_memory(rows, bases, calib)
    timings.append(("2 memory per GPU", n, time.perf_counter() - t))
    n = sum(r["status"] in ("fits", "over_memory") for r in rows)
    t = time.perf_counter()
    engine.score_time(rows, bases, calib)
    timings.append(("3 predicted step time", n, time.perf_counter() - t))
    total = sum(s for _, _, s in timings)
    load = os.getloadavg()
    print(
        f"space {space.source}: {len(rows):,} points ({len(bases)} base(s) composed in {compose_s:.1f} s, not counted)"
    )
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print(f"{'stage':32s} {'points in':>10s} {'seconds':>9s} {'points/s':>10s}")
    for name, points, seconds in timings:
        print(f"{name:32s} {points:10,} {seconds:9.2f} {points / seconds:10,.0f}")
    print(f"{'stages 1-3':32s} {len(rows):10,} {total:9.2f} {len(rows) / total:10,.0f}")
    counts = engine.summarize(rows)
    print("outcome: " + ", ".join(f"{k} {v:,}" for k, v in counts["by_status"].items()))
    per_10k = total * 10_000 / len(rows)
    verdict = "met" if per_10k < 60 else "MISSED"
    print(f"target: 10,000 points in < 60 s -> {per_10k:.1f} s per 10,000 points at this rate ({verdict})")


if __name__ == "__main__":
    main()
