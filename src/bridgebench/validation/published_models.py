"""The memory and time models against every published row (``bridgebench check-published --models``).

Each published row of a model with a ``configs/model`` entry (:func:`bridgebench.validation.time_calibration.
published_rows`) gets:

- **time**: its model TFLOP/s/GPU predicted by a calibration fitted WITHOUT the row's release (leave one release
  out, LORO: the scored release's rows never enter its fit) and by one fitted WITHOUT the row's configuration at
  every release (leave one configuration out, LOCO: :func:`bridgebench.model.steptime.fit.leave_out` keyed by
  :func:`~bridgebench.model.steptime.config.config_key`), against the published figure; each prediction's distance
  from its training rows and the shipped calibration's conformal band for that distance at 50 / 68 / 90 %
  (:mod:`bridgebench.model.steptime.bands`), and whether the published figure lies inside it (coverage; the
  shipped quantiles hold each row's own held-out error once among >= 120);
- **memory**: the row as a point of the sweep pipeline
  (:func:`bridgebench.validation.published_points.published_points`: the rules, then the busiest-GPU memory with
  the settings the tables do not print taken from the release's recipe or Megatron-Bridge's perf recipes):
  ``fits`` or not, and what prunes it. Every published row ran, so a row that does not fit is a false prune --
  unless its printed configuration cannot have run as printed (``inconsistent``).

Summary: rows, held-out MAPE and median |error| (LORO: all rows and per release; LOCO: all rows and per distance),
coverage at 50 / 68 / 90 % (LORO and LOCO), rows within their band, rows that fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from bridgebench.config import calibration as calib_mod
from bridgebench.model.steptime.bands import LEVELS
from bridgebench.model.steptime.config import config_key
from bridgebench.model.steptime.fit import Row, calibrate, leave_out
from bridgebench.model.steptime.predict import predict_time
from bridgebench.validation import metrics
from bridgebench.validation.time_calibration import published_rows


@dataclass(frozen=True, kw_only=True)
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
    inconsistent: int = 0
    printed_replaced: int = 0
    mape_by_release: dict[str, float] = field(default_factory=dict)
    calibration: str = "default"
    loco_mape: float = float("nan")
    loco_median_abs_error: float = float("nan")
    coverage: dict[str, dict[int, float]] = field(default_factory=dict)
    loco_mape_by_distance: dict[str, float] = field(default_factory=dict)


def _memory_verdicts(rows: list[Row], calib: calib_mod.ModelCalibration) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Memory verdicts of the published rows behind ``rows`` through the sweep pipeline, by (release, model, system,
    GPUs, GBS, published TFLOP/s) -- not the sizes: a release's own settings may replace printed sizes or the MBS
    (``published_settings.yaml``), and the time row carries the replaced ones."""
    from bridgebench.results.records import load_published
    from bridgebench.validation.published_points import published_points

    wanted = {(r.release, r.spec.name, r.system) for r in rows}
    records = [r for r in load_published() if (r.release, r.model, r.system) in wanted]
    df = published_points(records, calib=calib)
    out = {}
    for r in df.to_dict("records"):
        # not the sizes: a release's own settings (published_settings.yaml) may replace printed TP / PP / VP / MBS, and
        # the time row carries the replaced ones; (release, model, system, GPUs, GBS, TFLOP/s) is unique in the table
        key = (r["release"], r["model"], r["system"], r["num_gpus"], r["gbs"], r["published_tflops"])
        nan = float("nan")
        out[key] = {
            "mem_total_gb": nan if r.get("mem_total_gb") is None else r["mem_total_gb"],
            "hbm_usable_gb": nan if r.get("hbm_usable_gb") is None else r["hbm_usable_gb"],
            "fits": r["fits"],
            "reason": r.get("reason") or "",
            "inconsistent": r["inconsistent"],
            "printed_replaced": r.get("printed_replaced"),
        }
    return out


def check_models(
    rows: list[Row] | None = None,
    calibration: str = "default",
    progress: Callable[[str], None] | None = None,
) -> tuple[pd.DataFrame, ModelsSummary]:
    """Per-row table and summary (see the module docstring).

    Columns: release, model, system, precision, num_gpus, tp, pp, vp, cp, ep, etp, mbs, gbs, published_tflops,
    predicted_tflops (held out), rel_error, band (fraction), within_band, memory_gb, usable_gb, fits, memory_error,
    inconsistent, printed_replaced (``None``, or the printed sizes the memory verdict replaced with the release's
    launcher settings, ``validation/published_settings.yaml``).
    """
    rows = rows if rows is not None else published_rows()
    calib = calib_mod.load(calibration)
    releases = sorted({r.release for r in rows}, key=lambda x: [int(p) for p in x.split(".")])

    def step(what: str) -> Callable[[str], None] | None:
        return (lambda msg: progress(f"leave one {what} out: {msg}")) if progress else None

    # the folds keep the shipped c_layer and host pair (the grid search per fold would take 45x as long; see
    # bridgebench.model.steptime.fit.calibrate)
    c, h, x = calib.time.c_layer, calib.time.host_moe, calib.time.host_moe_expert
    rates = calib.time.measured_rates
    fixed = lambda rs: calibrate(rs, c_grid=(c,), host_grid=(h,), expert_grid=(x,), measured_rates=rates)  # noqa: E731
    held, loro_tiers, _ = leave_out(rows, lambda r: r.release, fixed, step("release"))
    loco, loco_tiers, _ = leave_out(rows, lambda r: config_key(r.spec, r.cfg), fixed, step("configuration"))
    memory = _memory_verdicts(rows, calib)
    cb = calib.time.conformal

    def bands(tiers: Any) -> dict[int, float]:
        if cb is None or not tiers:
            return {lv: float("nan") for lv in LEVELS}
        return {lv: cb.half_width(tiers, lv) for lv in LEVELS}

    out = []
    for r, p, lt, q, qt in zip(rows, held, loro_tiers, loco, loco_tiers):
        band = predict_time(r.spec, r.cfg, calib.time).band
        band_loro, band_loco = bands(lt), bands(qt)
        if cb is not None:
            band = band_loro[68]
        rc = r.cfg
        key = (r.release, r.spec.name, r.system, rc.num_gpus, rc.gbs, r.tflops)
        verdict = memory.get(key)
        replaced = None
        if verdict is None:
            m, usable, fits, merr, inconsistent = float("nan"), float("nan"), False, "no pipeline point", False
        else:
            m, usable = verdict["mem_total_gb"] * 1e9, verdict["hbm_usable_gb"] * 1e9
            fits, merr, inconsistent = bool(verdict["fits"]), verdict["reason"], bool(verdict["inconsistent"])
            replaced = verdict["printed_replaced"]
        err = None if p is None else metrics.rel_error(p, r.tflops)
        qerr = None if q is None else metrics.rel_error(q, r.tflops)
        out.append({
            "release": r.release, "model": r.model, "system": r.system, "precision": r.precision,
            "num_gpus": rc.num_gpus, "tp": rc.tp, "pp": rc.pp, "vp": rc.vp, "cp": rc.cp, "ep": rc.ep, "etp": rc.etp_,
            "mbs": rc.mbs, "gbs": rc.gbs, "published_tflops": r.tflops, "predicted_tflops": p, "rel_error": err,
            "band": band, "within_band": metrics.within_band(err, band),
            "memory_gb": m / 1e9, "usable_gb": usable / 1e9, "fits": fits,
            "memory_error": "" if fits else merr, "inconsistent": inconsistent, "printed_replaced": replaced,
            "loro_distance": ", ".join(lt), "loco_tflops": q, "loco_error": qerr, "loco_distance": ", ".join(qt),
            **{f"loro_band_{lv}": band_loro[lv] for lv in LEVELS},
            **{f"loco_band_{lv}": band_loco[lv] for lv in LEVELS},
        })  # fmt: skip
    df = pd.DataFrame(out)
    return df, _summary(df, releases, calibration)


def _summary(df: pd.DataFrame, releases: list[str], calibration: str) -> ModelsSummary:
    """The summary of a :func:`check_models` table (figures from :mod:`bridgebench.validation.metrics`)."""
    errs = df["rel_error"].tolist()
    by_rel = {
        rel: metrics.mape(df.loc[df.release == rel, "rel_error"])
        for rel in releases
        if df.loc[df.release == rel, "rel_error"].notna().any()
    }
    coverage = {
        name: {lv: metrics.coverage_fraction(df[col].tolist(), df[f"{name}_band_{lv}"].tolist()) for lv in LEVELS}
        for name, col in (("loro", "rel_error"), ("loco", "loco_error"))
    }
    by_distance = {
        d: metrics.mape(df.loc[df.loco_distance == d, "loco_error"]) for d in sorted(set(df.loco_distance)) if d
    }
    summary = ModelsSummary(
        rows=len(df),
        predicted=int(df["rel_error"].notna().sum()),
        mape=metrics.mape(errs),
        median_abs_error=metrics.median_abs(errs),
        max_abs_error=metrics.max_abs(errs),
        within_band=metrics.coverage(df["rel_error"].tolist(), df["band"].tolist())[0],
        fits=int(df["fits"].sum()),
        false_prunes=int((~df["fits"] & ~df["inconsistent"]).sum()),
        inconsistent=int(df["inconsistent"].sum()),
        printed_replaced=int(df["printed_replaced"].notna().sum()),
        mape_by_release=by_rel,
        calibration=calibration,
        loco_mape=metrics.mape(df["loco_error"]),
        loco_median_abs_error=metrics.median_abs(df["loco_error"]),
        coverage=coverage,
        loco_mape_by_distance=by_distance,
    )
    return summary
