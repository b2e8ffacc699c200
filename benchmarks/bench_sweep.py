"""Throughput of ``bridgebench sweep``: stages 1-4 of the pipeline (enumerate, rules, memory per GPU, predicted step
time with the ranking) in points per second, on a cold process (empty caches), and -- with ``--plan K`` -- stage 5,
the top K planned with real Megatron-Bridge ConfigContainers in this one process: seconds for the first point
(which imports Megatron-Bridge) and per point after it.

Targets: stages 1-4 over 10,000 points in under 60 s (issue 11); stage 5 at most 3 s per planned point after the
first (issue 15), on the 2-core development machine. The default space, ``kimi_k2_256`` (Kimi K2 on 256 GB300,
30,720 points), is three times the first target's size. Stage 5 writes only into a temporary folder.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_sweep.py [--space kimi_k2_256] [--plan 8] [overrides ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bridgebench import sweep as engine  # noqa: E402
from bridgebench.config import calibration  # noqa: E402


class _Timings:
    """A pipeline StageStore that keeps nothing but each stage's seconds and input count."""

    def __init__(self) -> None:
        self.stages: list[tuple[str, int, float]] = []

    def load(self, stage: str, index: int):
        return None

    def save(self, stage: str, index: int, rows, seconds: float, points: int) -> None:
        self.stages.append((f"{index} {stage}", points, seconds))


def plan_stage(overrides: list[str], space: str, k: int) -> dict:
    """Run the whole sweep with ``top_k = k`` into a temporary folder; returns the plan stage's timings."""
    import logging
    import warnings

    from bridgebench.launch.sweep import run_sweep

    warnings.filterwarnings("ignore")  # as `bridgebench sweep` does: Megatron-Bridge's import notes
    logging.getLogger("megatron").setLevel(logging.WARNING)

    with tempfile.TemporaryDirectory(prefix="bb-bench-sweep-") as tmp:
        for var, sub in (("SWEEPS", "sweeps"), ("PLANS", "plans"), ("LEDGER", "ledger.sqlite"),
                         ("RESULTS", "runs"), ("JOB_DIR", "jobs")):  # fmt: skip
            os.environ[f"BRIDGEBENCH_{var}"] = str(Path(tmp) / sub)
        result = run_sweep(overrides, space=space, top_k=k, name="bench")
        state = json.loads((result.dir / "state.json").read_text())
        per_point = [v["seconds"] for v in state["plans"].values() if "seconds" in v]
        statuses = [v["status"] for v in state["plans"].values()]
    return {"timings": result.stages.get("plan", {}), "per_point": per_point, "statuses": statuses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", default="kimi_k2_256", help="configs/sweep/<NAME>.yaml")
    ap.add_argument("--plan", type=int, default=0, metavar="K", help="also plan the top K (stage 5) and time it")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides on top of the space")
    args = ap.parse_args()
    calib = calibration.load()
    t0 = time.perf_counter()
    space, bases = engine.prepare(args.overrides, args.space)
    compose_s = time.perf_counter() - t0
    store = _Timings()
    rows = engine.run_pipeline(bases, calib, space=space, store=store)
    total = sum(s for _, _, s in store.stages)
    load = os.getloadavg()
    print(
        f"space {space.source}: {len(rows):,} points ({len(bases)} base(s) composed in {compose_s:.1f} s, not counted)"
    )
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")
    print(f"{'stage':32s} {'points in':>10s} {'seconds':>9s} {'points/s':>10s}")
    for name, points, seconds in store.stages:
        print(f"{name:32s} {points:10,} {seconds:9.2f} {points / seconds if seconds else 0:10,.0f}")
    print(f"{'stages 1-4':32s} {len(rows):10,} {total:9.2f} {len(rows) / total:10,.0f}")
    counts = engine.summarize(rows)
    print("outcome: " + ", ".join(f"{k} {v:,}" for k, v in counts["by_status"].items()))
    per_10k = total * 10_000 / len(rows)
    verdict = "met" if per_10k < 60 else "MISSED"
    print(f"target: 10,000 points in < 60 s -> {per_10k:.1f} s per 10,000 points at this rate ({verdict})")
    if args.plan:
        out = plan_stage(args.overrides, args.space, args.plan)
        pts = out["per_point"]
        load = os.getloadavg()
        print(f"\nstage 5 plan, top {args.plan} in one process ({', '.join(out['statuses'])}); load average "
              f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")  # fmt: skip
        if pts:
            print(f"  first point {pts[0]:.1f} s (imports Megatron-Bridge)")
        if len(pts) > 1:
            after = sum(pts[1:]) / len(pts[1:])
            verdict = "met" if after <= 3.0 else "MISSED"
            print(f"  per point after the first: {after:.2f} s (min {min(pts[1:]):.2f}, max {max(pts[1:]):.2f}); "
                  f"target <= 3 s ({verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
