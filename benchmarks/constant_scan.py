"""One first-principles constant of the time model at another value: refit, then every published row held out four
ways. Prints figures; changes nothing on disk.

The constant is set in :mod:`bridgebench.model.steptime.predict` for this process only (``--expert-share``:
``EXPERT_LAUNCH_SHARE``, 0 gives the host floor of stops 29-34; ``--hbm``: ``HBM_EFFICIENCY``, the element-wise
rate). Then, as ``bridgebench calibrate`` does, ``c_layer`` and the host pair are chosen on their grids
(:func:`bridgebench.model.steptime.fit.calibrate`, criterion: leave-one-release-out level error), and with those
constants fixed every published row is predicted by fits that leave out its release, its configuration, its model
and its GPU (:func:`bridgebench.model.steptime.fit.leave_out`). Per way: MAPE, mean |log error| and the 68 %
quantile of |log error|. docs/sweeps.md stop 35 reports the scans of both constants made with it.

    PYTHONPATH=src .venv/bin/python benchmarks/constant_scan.py --expert-share 0.3333 [--hbm 0.8]
    (about 5 min per value on 2 cores)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from bridgebench.model.steptime import predict  # noqa: E402
from bridgebench.model.steptime.config import config_key  # noqa: E402
from bridgebench.model.steptime.fit import HOST_EXPERT_GRID, calibrate, leave_out  # noqa: E402
from bridgebench.validation.gemm_fit import measured_gemm_rates  # noqa: E402
from bridgebench.validation.time_calibration import published_rows  # noqa: E402

WAYS = {
    "release": lambda r: r.release,
    "configuration": lambda r: config_key(r.spec, r.cfg),
    "model": lambda r: r.spec.name,
    "GPU": lambda r: r.cfg.gpu.name,
}


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--expert-share", type=_fraction, default=predict.EXPERT_LAUNCH_SHARE)
    ap.add_argument("--hbm", type=_fraction, default=predict.HBM_EFFICIENCY)
    args = ap.parse_args()
    if args.hbm <= 0:
        ap.error("--hbm must be above 0")
    predict.EXPERT_LAUNCH_SHARE, predict.HBM_EFFICIENCY = args.expert_share, args.hbm
    t0 = time.time()
    print(f"EXPERT_LAUNCH_SHARE {args.expert_share:.4f}, HBM_EFFICIENCY {args.hbm}; load {os.getloadavg()[0]:.1f}")
    rows = published_rows()
    cal = calibrate(rows, expert_grid=(0.0, 5e-5, *HOST_EXPERT_GRID[1:]), measured_rates=measured_gemm_rates())
    eff = ", ".join(f"{g} {c} {v:.3f}" for (g, c), v in sorted(cal.efficiency.items()))
    print(
        f"chosen: c_layer {cal.c_layer * 1e3:.2f} ms, host {cal.host_moe * 1e3:.1f} ms + "
        f"{cal.host_moe_expert * 1e3:.2f} ms per local expert; efficiencies {eff} ({time.time() - t0:.0f} s)"
    )
    fixed = dict(c_grid=(cal.c_layer,), host_grid=(cal.host_moe,), expert_grid=(cal.host_moe_expert,),
                 measured_rates=cal.measured_rates)  # fmt: skip
    for name, key in WAYS.items():
        pred, _, _ = leave_out(rows, key, lambda rs: calibrate(rs, **fixed))
        ratios = [p / r.tflops for r, p in zip(rows, pred) if p]
        mape = statistics.mean(abs(q - 1) for q in ratios)
        logs = sorted(abs(math.log(q)) for q in ratios)
        print(
            f"held out by {name:13s} MAPE {100 * mape:.2f} %, mean |log| {statistics.mean(logs):.4f}, "
            f"q68 |log| {logs[int(0.68 * len(logs))]:.4f} over {len(logs)} rows ({time.time() - t0:.0f} s)"
        )


if __name__ == "__main__":
    main()
