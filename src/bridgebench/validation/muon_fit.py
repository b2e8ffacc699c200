"""Muon's two cost constants fitted on measurements: the Newton-Schulz GEMMs' fraction of the BF16 peak
(``ns_efficiency``) and the per-matrix cost (``kappa``, seconds per matrix on the busiest GPU: launches, the
orthogonalization's element-wise kernels, host work), :mod:`bridgebench.model.steptime.optimizer`.

Measurements (each a Muon step minus its AdamW twin's, in seconds, with the AdamW step it is measured against):

- NVIDIA's blog Table 1 (``results/reference/blog_table1.csv``; 26.02, GB300, MXFP8): Kimi K2 on 256 GPUs and
  Qwen3 30B-A3B on 8 GPUs -- ``step(AdamW) x (AdamW TFLOP/s / Muon model TFLOP/s - 1)``, the AdamW step from the
  published AdamW TFLOP/s and the release's model FLOPs; each recipe composed as ``+table1_run=<model>``;
- Megatron-LM's golden values (``results/reference/golden``; H100 / GB200, a 12-layer 8-expert MoE GPT): the
  layer-wise distributed Muon (``dist_muon``) against its Adam twin, medians from step 10 (INDEX.csv). The
  non-distributed ``muon`` cases are left out: they also check weight hashes across data-parallel replicas every
  step (docs/sweeps.md), which the model does not price.

**What is fitted on what.** By default on the blog's two pairs (two equations, two unknowns: Kimi K2's delta is
mostly Newton-Schulz FLOPs, Qwen3 30B-A3B's mostly per-matrix cost), the golden pairs printed as an out-of-sample
check. Including the golden pairs (``golden=True``, weighted by their repeat spread) pulls ``kappa`` up to make the
2-node golden runs (+12 to +28 %) slower -- but their 1-node twins measure Muon no slower than Adam (-1.3, -1.7 %),
which a per-matrix cost cannot do: the 2-node excess is cross-node communication of the tiny model's step, not
Newton-Schulz, and fitting it into ``kappa`` puts NS at ~89 % of the BF16 peak and misses Qwen3's blog delta by
1 point (figures: ``benchmarks/validate_time.py`` part (e)).

The predicted delta is ``step(Muon) - step(AdamW)`` of the time model at the shipped calibration (the GEMM rates do
not enter: NS runs at ``ns_efficiency x`` the BF16 peak). The fit minimizes the squared error of the predicted
step-time ratio ``1 + delta / measured AdamW step``, each divided by its measurement's spread (:func:`noise_of`:
weighted least squares, scipy.optimize.least_squares, bounds ``ns_efficiency`` in [0.05, 1], ``kappa`` in
[0, 1 ms]); residuals are reported per point (:class:`MuonFit`).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import registry
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import TimeConfig
from bridgebench.model.steptime.muon import adam_counterpart
from bridgebench.model.steptime.predict import predict_time, step_flops_of

#: bounds of the fit (ns_efficiency, kappa in s).
NS_BOUNDS = (0.05, 1.0)
KAPPA_BOUNDS = (0.0, 1e-3)


@dataclass(frozen=True, kw_only=True)
class MuonPoint:
    """One measured Muon-vs-AdamW pair: the Muon point (``cfg``), the measured delta and AdamW step (s)."""

    name: str
    spec: ModelSpec
    cfg: TimeConfig
    delta_s: float
    adam_s: float
    source: str


@dataclass(frozen=True, kw_only=True)
class MuonFit:
    """Fitted ``ns_efficiency`` and ``kappa`` (s per matrix), and per point (name, measured ratio, predicted ratio)
    of Muon / AdamW step time at the fit."""

    ns_efficiency: float
    kappa: float
    residuals: tuple[tuple[str, float, float], ...]

    @property
    def rms_pp(self) -> float:
        """Root mean square of (predicted - measured) ratio, in percentage points."""
        d = [p - m for _, m, p in self.residuals]
        return 100 * math.sqrt(sum(x * x for x in d) / len(d)) if d else float("nan")


def _blog_points() -> list[MuonPoint]:
    from bridgebench import sweep as engine
    from bridgebench.validation.data import require

    rows = {}
    with open(require("reference", "blog_table1.csv") / "blog_table1.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows[(r["model"], r["optimizer"])] = r
    out = []
    for run, label in (("kimi_k2", "Kimi K2"), ("qwen3_30b_a3b", "Qwen3 30B-A3B")):
        adam_tf = float(rows[(label, "AdamW")]["model_tflops_per_gpu"])
        muon_tf = float(rows[(label, "Muon")]["model_tflops_per_gpu"])
        base = engine.base_of([f"+table1_run={run}", "optimizer=muon"])
        cfg = engine.time_config(engine.effective(base, {}), base.gpu, base.spec)
        flops = step_flops_of(registry.handle(base.spec), cfg.gbs, cfg.tp, cfg.flops_formula)
        adam_s = flops / cfg.num_gpus / (adam_tf * 1e12)
        out.append(
            MuonPoint(
                name=f"blog {label}",
                spec=base.spec,
                cfg=cfg,
                delta_s=adam_s * (adam_tf / muon_tf - 1),
                adam_s=adam_s,
                source="blog_table1.csv",
            )
        )
    return out


def _golden_points() -> list[MuonPoint]:
    from bridgebench.config.catalog import load_gpu
    from bridgebench.model.steptime.config import GpuFacts
    from bridgebench.validation.golden import golden_cases, golden_spec

    cases = {(c.test_case, c.hardware): c for c in golden_cases()}
    out = []
    for c in golden_cases():
        if c.role != "muon" or c.gpu not in ("h100", "gb200") or c.iter_time_median_s is None:
            continue
        if not c.args.get("--use-distributed-optimizer"):
            continue  # non-distributed muon: weight-hash checks every step (module docstring)
        twin = cases.get((c.twin, c.hardware))
        if twin is None or twin.iter_time_median_s is None:
            continue
        cfg = TimeConfig.from_flat(
            gpu=GpuFacts.from_mapping(load_gpu(c.gpu)),
            peak_key="bf16",
            num_gpus=c.num_gpus,
            mbs=int(c.args["--micro-batch-size"]),
            gbs=int(c.args["--global-batch-size"]),
            ep=int(c.args["--expert-model-parallel-size"]),
            optimizer="dist_muon",
            use_distributed_optimizer=False,
        )
        delta = c.iter_time_median_s - twin.iter_time_median_s
        out.append(MuonPoint(name=f"golden {c.short} {c.hardware}", spec=golden_spec(c.args), cfg=cfg, delta_s=delta,
                             adam_s=twin.iter_time_median_s, source=f"golden/{c.test_case}"))  # fmt: skip
    return out


#: assumed run-to-run spread of a published TFLOP/s figure (relative): NVIDIA publishes none; 1 %, a fifth of
#: Megatron-Bridge's own CI regression threshold (5 %, research notes "Regression thresholds in use").
BLOG_SIGMA = 0.01


def noise_of(p: MuonPoint, pts: tuple[MuonPoint, ...]) -> float:
    """Standard deviation of a pair's measured ratio: the blog's :data:`BLOG_SIGMA`; for golden pairs the spread of
    the repeated golden measurements -- the same case on two H100 machines (``dgx_h100`` and ``dgx_h100_2nd``),
    ``|r1 - r2| / sqrt(2)`` over such repeats (pooled)."""
    if not p.source.startswith("golden/"):
        return BLOG_SIGMA
    by: dict[str, list[float]] = {}
    for q in pts:
        if q.source.startswith("golden/") and "h100" in q.name:
            by.setdefault(q.source, []).append(1 + q.delta_s / q.adam_s)
    diffs = [(v[0] - v[1]) ** 2 / 2 for v in by.values() if len(v) == 2]
    return math.sqrt(sum(diffs) / len(diffs)) if diffs else 0.05


@lru_cache(maxsize=1)
def muon_points() -> tuple[MuonPoint, ...]:
    """The measured pairs of the module docstring (blog first, then golden)."""
    return tuple(_blog_points() + _golden_points())


def predicted_ratio(p: MuonPoint, cal: Calibration) -> float:
    """Predicted Muon / AdamW step time of a pair: ``1 + (step(Muon) - step(AdamW)) / measured AdamW step``."""
    muon = predict_time(p.spec, p.cfg, cal)
    adam = predict_time(p.spec, adam_counterpart(p.cfg), cal)
    return 1 + (muon.total - adam.total) / p.adam_s


def fit_muon(cal: Calibration, points: tuple[MuonPoint, ...] | None = None, *, golden: bool = False) -> MuonFit:
    """Least-squares ``ns_efficiency`` and ``kappa`` (module docstring) at calibration ``cal``'s other constants, on
    ``points`` (default: the blog's two, and the golden pairs too with ``golden``); the residuals cover every
    measured pair (:func:`muon_points`), fitted or not.

    Raises:
        ValueError: no measured pair.
    """
    from scipy.optimize import least_squares

    every = muon_points() if points is None else points
    pts = every if (golden or points is not None) else tuple(p for p in every if not p.source.startswith("golden/"))
    if not pts:
        raise ValueError("no measured Muon / AdamW pair to fit ns_efficiency and kappa on")
    measured = [1 + p.delta_s / p.adam_s for p in pts]

    def at(x: Sequence[float]) -> Calibration:
        return dataclasses.replace(cal, ns_efficiency=float(x[0]), kappa=float(x[1]) * 1e-4)

    sigma = [noise_of(p, pts) for p in pts]

    def resid(x: Sequence[float]) -> list[float]:
        c = at(x)
        return [(predicted_ratio(p, c) - m) / s for p, m, s in zip(pts, measured, sigma)]

    lo = (NS_BOUNDS[0], KAPPA_BOUNDS[0] * 1e4)
    hi = (NS_BOUNDS[1], KAPPA_BOUNDS[1] * 1e4)
    x0 = (min(max(cal.ns_efficiency, lo[0]), hi[0]), min(max(cal.kappa * 1e4, lo[1]), hi[1]))
    sol = least_squares(resid, x0, bounds=(lo, hi), diff_step=1e-3)
    best = at(sol.x)
    res = tuple((p.name, 1 + p.delta_s / p.adam_s, predicted_ratio(p, best)) for p in every)
    return MuonFit(ns_efficiency=round(float(sol.x[0]), 4), kappa=round(float(sol.x[1]) * 1e-4, 7), residuals=res)


#: the GPU measurement shipped with the repository (issue 22 item 6; ``results/reference/SOURCES.md``).
GPU_MEASUREMENT = "gpu/h200_2026-11-27"


@dataclass(frozen=True, kw_only=True)
class GpuNsFit:
    """Newton-Schulz cost fitted on one GPU's measurement: ``ns_efficiency`` (fraction of the GPU's dense BF16
    peak) and ``call_s`` (seconds per NS call beyond its FLOPs: launches) from the per-shape NS timings at fp32
    matmul precision ``medium`` (the recipes' ``muon_fp32_matmul_prec``); ``kappa_s`` the per-matrix cost of the
    whole Muon step (kernels per parameter x measured launch latency); the count-weighted NS rate of each model's
    matrices as a fraction of the peak (``weighted``); the GPU, torch and the residuals (shape, measured s,
    predicted s)."""

    gpu: str
    torch: str
    ns_efficiency: float
    call_s: float
    kappa_s: float
    kernels_per_param: float
    launch_s: float
    weighted: dict[str, float]
    residuals: tuple[tuple[str, float, float], ...]


def gpu_ns_fit(folder: str = GPU_MEASUREMENT) -> GpuNsFit:
    """Fit ``time = NS FLOPs / (ns_efficiency x BF16 peak) + call_s`` on the measured NS timings of every shape
    (least squares in log time, scipy.optimize.least_squares); the peak from ``configs/gpu/<gpu>.yaml``. The
    measurement is on an H200 in a VM whose kernel launches take 8.1 us (about twice bare metal), so ``call_s`` and
    ``kappa_s`` are the VM's; ``ns_efficiency`` is a property of the GEMMs.

    Raises:
        bridgebench.validation.data.ReferenceDataMissing: the measurement is absent.
    """
    import json

    from scipy.optimize import least_squares

    from bridgebench.config.catalog import load_gpu
    from bridgebench.validation.data import require

    root = require("reference") / folder
    if not (root / "gpu_measurements.json").is_file():
        require("reference", f"{folder}/gpu_measurements.json")
    data = json.loads((root / "gpu_measurements.json").read_text())
    extra = json.loads((root / "gpu_measurements2.json").read_text())
    device = str(data["meta"]["device"])
    gpu = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100"}.get(device, device.lower().split()[-1])
    peak = float(load_gpu(gpu)["peak_tflops"]["bf16"]) * 1e12
    rows = [r for r in data["newton_schulz"] if r["fp32_matmul_prec"] == "medium"]

    def resid(x: Sequence[float]) -> list[float]:
        e, c = float(x[0]), float(x[1]) * 1e-6
        return [math.log((r["ns_flops"] / (e * peak) + c) / r["median_s"]) for r in rows]

    sol = least_squares(resid, (0.6, 50.0), bounds=((0.05, 0.0), (1.0, 1e4)))
    e, c = float(sol.x[0]), float(sol.x[1]) * 1e-6
    weighted = {}
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        flops = sum(r["ns_flops"] * r["count"] for r in mine)
        weighted[model] = flops / sum(r["median_s"] * r["count"] for r in mine) / peak
    muon = extra["muon_medium"]
    launch = float(extra["launch_s_per_kernel"])
    res = tuple(
        (f"{r['model']} {r['rows']}x{r['cols']}", float(r["median_s"]), r["ns_flops"] / (e * peak) + c) for r in rows
    )
    return GpuNsFit(
        gpu=gpu,
        torch=str(data["meta"]["torch"]),
        ns_efficiency=round(e, 4),
        call_s=c,
        kappa_s=float(muon["kernels_per_param"]) * launch,
        kernels_per_param=float(muon["kernels_per_param"]),
        launch_s=launch,
        weighted=weighted,
        residuals=res,
    )
