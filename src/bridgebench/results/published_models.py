"""The memory and time models against every published row (``bridgebench check-published --models``).

Each published row of a model with a ``configs/model`` entry (:func:`bridgebench.results.time_calibration.
published_rows`) gets:

- **time**: its model TFLOP/s/GPU predicted by a calibration fitted WITHOUT the row's release (leave one release
  out, :func:`bridgebench.model.timing.cross_validate`: the scored release's rows never enter its fit), against the
  published figure; the prediction's band (+- relative, from the shipped calibration) and whether the published
  figure lies inside it;
- **memory**: the memory model's busiest-GPU estimate (:func:`bridgebench.model.memory.estimate_memory`, the sweep's
  stage 2) on the same point, against the GPU's HBM less the calibrated margin: ``fits`` or not. Every published row
  ran, so a row that does not fit is a false prune of the memory model (the memory model is issue 15's other half;
  this only calls it). The published tables do not state recompute or the loss fusion: the point is priced as the
  time calibration sees it (:mod:`bridgebench.results.time_calibration`).

Summary: rows, held-out MAPE and median |error| (all rows and per release), rows within their band, rows that fit.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from bridgebench.config import calibration as calib_mod
from bridgebench.model import memory as mem
from bridgebench.model.timing import Row, calibrate, cross_validate, predict_time
from bridgebench.results.time_calibration import published_rows


@dataclass(frozen=True)
class ModelsSummary:
    """Counts and errors of :func:`check_models` (errors relative: 0.05 = 5 %)."""

    rows: int
    predicted: int
    mape: float
    median_abs_error: float
    max_abs_error: float
    within_band: int
    fits: int
    false_prunes: int
    mape_by_release: dict[str, float] = field(default_factory=dict)
    calibration: str = "default"


def memory_config(row: Row, calib: calib_mod.ModelCalibration) -> mem.MemoryConfig:
    """The memory model's view of a published row's point (AdamW / dist_muon, BF16 grads as the perf recipes; the
    recompute its recipe sets where bridgebench ships it; 25.09 rows, which name no precision, as FP8-CS)."""
    c = row.cfg
    return mem.MemoryConfig(
        num_gpus=c.num_gpus, mbs=c.mbs, gbs=c.gbs, tp=c.tp, pp=c.pp, vp=c.vp, cp=c.cp, ep=c.ep, etp=c.etp,
        seq_length=row.spec.seq_length, sequence_parallel=c.sp,
        pipeline_model_parallel_layout=c.pipeline_model_parallel_layout, optimizer=c.optimizer,
        use_distributed_optimizer=c.use_distributed_optimizer, precision=row.precision or "fp8_cs",
        grad_reduce_in_fp32=c.grad_reduce_in_fp32, recompute_granularity=c.recompute_granularity,
        recompute_method=c.recompute_method, recompute_num_layers=c.recompute_num_layers,
        recompute_modules=c.recompute_modules, moe_imbalance=calib.moe_imbalance, other_bytes=calib.other_bytes,
    )  # fmt: skip


def check_models(
    rows: list[Row] | None = None,
    calibration: str = "default",
    progress: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, ModelsSummary]:
    """Per-row table and summary (see the module docstring).

    Columns: release, model, system, precision, num_gpus, tp, pp, vp, cp, ep, etp, mbs, gbs, published_tflops,
    predicted_tflops (held out), rel_error, band (fraction), within_band, memory_gb, usable_gb, fits, memory_error.
    """
    rows = rows if rows is not None else published_rows()
    calib = calib_mod.load(calibration)
    releases = sorted({r.release for r in rows}, key=lambda x: [int(p) for p in x.split(".")])

    def fit(train: list[Row]):
        if progress:
            held = sorted({r.release for r in rows} - {r.release for r in train})
            progress(f"fitting without release {', '.join(held)} ({len(train)} rows)")
        return calibrate(train)

    held = cross_validate(rows, fit, releases)
    out = []
    for r, p in zip(rows, held):
        band = predict_time(r.spec, r.cfg, calib.time).band
        usable = calib.usable_hbm_bytes(r.cfg.gpu.hbm_bytes)
        try:
            m = mem.estimate_memory(r.spec, memory_config(r, calib)).total
            merr = ""
        except (mem.MemoryModelError, ValueError) as err:
            m, merr = float("nan"), str(err)
        c = r.cfg
        err = None if p is None else p / r.tflops - 1
        out.append({
            "release": r.release, "model": r.model, "system": r.system, "precision": r.precision,
            "num_gpus": c.num_gpus, "tp": c.tp, "pp": c.pp, "vp": c.vp, "cp": c.cp, "ep": c.ep, "etp": c.etp_,
            "mbs": c.mbs, "gbs": c.gbs, "published_tflops": r.tflops, "predicted_tflops": p, "rel_error": err,
            "band": band, "within_band": err is not None and abs(err) <= band,
            "memory_gb": m / 1e9, "usable_gb": usable / 1e9, "fits": bool(m <= usable), "memory_error": merr,
        })  # fmt: skip
    df = pd.DataFrame(out)
    errs = df["rel_error"].dropna().abs()
    by_rel = {
        rel: float(df.loc[df.release == rel, "rel_error"].dropna().abs().mean())
        for rel in releases
        if df.loc[df.release == rel, "rel_error"].notna().any()
    }
    summary = ModelsSummary(
        rows=len(df),
        predicted=int(errs.size),
        mape=float(errs.mean()) if errs.size else float("nan"),
        median_abs_error=float(statistics.median(errs)) if errs.size else float("nan"),
        max_abs_error=float(errs.max()) if errs.size else float("nan"),
        within_band=int(df["within_band"].sum()),
        fits=int(df["fits"].sum()),
        false_prunes=int((~df["fits"]).sum()),
        mape_by_release=by_rel,
        calibration=calibration,
    )
    return df, summary
