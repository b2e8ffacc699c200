"""Calibration of ``bridgebench.results.compare_stats.compare_runs`` on synthetic runs: false-positive rate (both sides
from one distribution, threshold 0: the verdict is not "no significant change") and power (side B 3 % slower), for
3 / 5 / 10 runs per side, with the small-sample expansion (default) and without it. Prints a Markdown table.

Runs: per-run level log-normal with CV 1 %, times AR(1) per-iteration noise (phi 0.5, innovation CV 1 %), 60
iterations (``tests/results/test_compare_stats.py::synth_side``). Nominal alpha 0.05; the binomial standard error of
a rate near 0.05 over 200 seeds is 0.015.

    .venv/bin/python benchmarks/bench_compare_calibration.py [--seeds 200]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bridgebench.results import compare_stats as cs  # noqa: E402
from tests.results.test_compare_stats import synth_side  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--runs", type=int, nargs="+", default=[3, 5, 10])
    args = ap.parse_args()
    print(
        f"| runs/side | small-sample expansion | false-positive rate (null, {args.seeds} seeds) | power, 3 % slower |"
    )
    print("|---|---|---|---|")
    t0 = time.monotonic()
    for n in args.runs:
        for mode in ("expanded", "none"):
            fp = pw = 0
            for seed in range(args.seeds):
                rng = np.random.default_rng(10_000 + seed)
                a, b, c = synth_side(n, 1.0, rng), synth_side(n, 1.0, rng), synth_side(n, 1.03, rng)
                kw = {"seed": seed, "threshold": 0.0, "small_sample": mode, "n_resamples": 1000, "n_inner": 100}
                fp += cs.compare_runs(a, b, **kw).verdict != "no significant change"
                pw += cs.compare_runs(a, c, **kw).verdict == "slower"
            print(f"| {n} | {mode} | {fp / args.seeds:.3f} | {pw / args.seeds:.2f} |", flush=True)
    print(f"\n({time.monotonic() - t0:.0f} s; numpy {np.__version__}, {cs.library_versions()})")


if __name__ == "__main__":
    main()
