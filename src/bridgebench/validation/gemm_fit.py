"""The GEMM shape law of the step-time model (:mod:`bridgebench.model.steptime.gemm`) against GEMMs measured on an
H100 (``results/reference/gpu/h100_2026-11-27``, issue 22 item 6): 320 transformer-layer shapes in BF16 and FP8
(``gpu_gemm_shapes.json``, ``measure3.py``), the dense BF16 shapes and the grouped expert GEMMs (``gpu_measurements
.json``), and the H200's dense shapes (``../h200_2026-11-27``) as a second GPU.

Each law is fitted as ``time = t0 + count x 2 M N K / (R x shape(M, N, K))`` by least squares in log time
(scipy.optimize.least_squares): ``R`` the rate of a large GEMM, ``t0`` the per-call floor of the measurement (CUDA
events around one eagerly launched call: launch and dispatch, ~20 us -- not a cost of the back-to-back kernels of a
training step, so the step-time model does not carry it). Laws: the shipped ``f(M) f(N) f(K)`` with ``f(x) = x / (x +
128)`` (Hopper's tile edge, :data:`~bridgebench.model.steptime.gemm.GEMM_TILE`) and alternatives whose half-saturation
sizes are fitted (one for all, M / N / K each, M and N shared + K). Scored in sample, by two-fold cross-validation
over the hidden sizes (fit on every other one, score the rest), and out of sample on the dense, grouped and H200
shapes with the layer-shape fit. ``benchmarks/validate_time.py`` part (g) prints it; the verdict is in
:mod:`bridgebench.model.steptime.gemm`'s docstring.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

#: the H100 measurement and the H200 one beside it (folders of ``results/reference``)
H100_GEMMS = "gpu/h100_2026-11-27"
H200_GEMMS = "gpu/h200_2026-11-27"

#: one timed call: (M, N, K, GEMMs in the call, median seconds)
Shape = tuple[float, float, float, float, float]


def _f(x: float, half: float) -> float:
    return x / (x + half)


#: the law the step-time model ships (:mod:`bridgebench.model.steptime.gemm`)
SHIPPED_LAW = "shipped: f(M) f(N) f(K), 128"
#: name -> (shape factor of (half-saturation sizes, M, N, K), starting half-saturation sizes)
LAWS: dict[str, tuple[Callable[[Sequence[float], float, float, float], float], tuple[float, ...]]] = {
    SHIPPED_LAW: (lambda p, m, n, k: _f(m, 128) * _f(n, 128) * _f(k, 128), ()),
    "one fitted size": (lambda p, m, n, k: _f(m, p[0]) * _f(n, p[0]) * _f(k, p[0]), (128.0,)),
    "M, N, K fitted": (lambda p, m, n, k: _f(m, p[0]) * _f(n, p[1]) * _f(k, p[2]), (128.0, 128.0, 128.0)),
    "M = N, K fitted": (lambda p, m, n, k: _f(m, p[0]) * _f(n, p[0]) * _f(k, p[1]), (128.0, 128.0)),
}


@dataclass(frozen=True, kw_only=True)
class LawFit:
    """One law on one precision: ``rate`` (fraction of the datasheet peak of a large GEMM), ``t0_s``, the fitted
    half-saturation sizes, mean |log error| in sample, by two-fold CV over hidden sizes, and out of sample
    (``held_out``: set name -> mean |log error|)."""

    law: str
    precision: str
    rate: float
    t0_s: float
    halves: tuple[float, ...]
    in_sample: float
    cross_validated: float
    held_out: dict[str, float]


def _fit(shapes: list[Shape], law: str, peak: float) -> list[float]:
    from scipy.optimize import least_squares

    shape, start = LAWS[law]

    def resid(x: Sequence[float]) -> list[float]:
        rate, t0 = math.exp(x[0]), x[1]
        return [math.log(t0 + c * 2 * m * n * k / (rate * shape(x[2:], m, n, k))) - math.log(t) for m, n, k, c, t in
                shapes]  # fmt: skip

    lo = [math.log(0.1 * peak), 0.0] + [1.0] * len(start)
    hi = [math.log(1.2 * peak), 1e-4] + [1e5] * len(start)
    return list(least_squares(resid, [math.log(0.7 * peak), 1e-5, *start], bounds=(lo, hi)).x)


def _error(shapes: list[Shape], law: str, x: Sequence[float]) -> float:
    """Mean |log (predicted / measured time)|."""
    shape, _ = LAWS[law]
    rate, t0 = math.exp(x[0]), x[1]
    errs = [abs(math.log((t0 + c * 2 * m * n * k / (rate * shape(x[2:], m, n, k))) / t)) for m, n, k, c, t in shapes]
    return sum(errs) / len(errs)


def _load(folder: str, name: str) -> dict[str, Any]:
    from bridgebench.validation.data import require

    data: dict[str, Any] = json.loads((require("reference", f"{folder}/{name}") / folder / name).read_text())
    return data


def _parity(f: int, same: bool) -> Callable[[int], bool]:
    """``i -> (i % 2 == f) == same``: one half of a two-fold split of the hidden sizes (by index)."""
    return lambda i: (i % 2 == f) == same


def _layer_shapes(layer: list[dict[str, Any]], prec: str, keep: Callable[[int], bool] = lambda i: True) -> list[Shape]:
    """The layer GEMMs of ``gpu_gemm_shapes.json`` timed at ``prec``, those whose hidden size's index (ascending)
    ``keep`` accepts."""
    hidden = sorted({r["hidden"] for r in layer})
    return [(r["m"], r["n"], r["k"], 1, r[f"{prec}_median_s"]) for r in layer
            if r.get(f"{prec}_median_s") and keep(hidden.index(r["hidden"]))]  # fmt: skip


def measured_gemm_rates() -> dict[tuple[str, str], float]:
    """``{(gpu, precision class): rate}``: the rate of a large GEMM as a fraction of the GPU's datasheet dense peak,
    measured on that GPU -- the shipped shape law (:data:`SHIPPED_LAW`) fitted on all 320 layer shapes of the H100
    measurement (``results/reference/gpu/h100_2026-11-27/gpu_gemm_shapes.json``, torch 2.11.0+cu130, BF16 and FP8
    e4m3 with tensor-wise scales; peaks from ``configs/gpu/h100.yaml``): BF16 0.763, FP8 0.694. The step-time
    calibration takes their ratio as this GPU's class ratio
    (:meth:`bridgebench.model.steptime.calibration.Calibration.efficiency_of`).

    Fitted once per process; each call returns a fresh dict.

    Raises:
        bridgebench.validation.data.ReferenceDataMissing: the measurement file is absent.
    """
    return dict(_measured_gemm_rates())


@lru_cache(maxsize=1)
def _measured_gemm_rates() -> dict[tuple[str, str], float]:
    """The fit behind :func:`measured_gemm_rates`."""
    from bridgebench.config.catalog import load_gpu

    layer = _load(H100_GEMMS, "gpu_gemm_shapes.json")["layer_gemms"]
    out: dict[tuple[str, str], float] = {}
    for prec in ("bf16", "fp8"):
        peak = float(load_gpu("h100")["peak_tflops"][prec]) * 1e12
        out[("h100", prec)] = math.exp(_fit(_layer_shapes(layer, prec), SHIPPED_LAW, peak)[0]) / peak
    return out


def gemm_law_fits() -> list[LawFit]:
    """Every law of :data:`LAWS` fitted on the H100 layer shapes, per precision (``bf16``, ``fp8``), scored as the
    module docstring says; peaks from ``configs/gpu/h100.yaml``.

    Raises:
        bridgebench.validation.data.ReferenceDataMissing: a measurement file is absent.
    """
    from bridgebench.config.catalog import load_gpu

    layer = _load(H100_GEMMS, "gpu_gemm_shapes.json")["layer_gemms"]
    dense = _load(H100_GEMMS, "gpu_measurements.json")
    h200 = _load(H200_GEMMS, "gpu_measurements.json")
    others = {
        "H100 dense": [(r["m"], r["n"], r["k"], 1, r["median_s"]) for r in dense["dense_bf16"]],
        "H100 grouped": [
            (r["tokens_per_expert"], r["n"], r["k"], r["experts"], r["median_s"]) for r in dense["grouped_bf16"]
        ],  # fmt: skip
        "H200 dense": [(r["m"], r["n"], r["k"], 1, r["median_s"]) for r in h200["dense_bf16"]],
    }
    out = []
    for prec in ("bf16", "fp8"):
        peak = float(load_gpu("h100")["peak_tflops"][prec]) * 1e12

        def shapes(keep: Callable[[int], bool], prec: str = prec) -> list[Shape]:
            return _layer_shapes(layer, prec, keep)

        for law in LAWS:
            x = _fit(shapes(lambda i: True), law, peak)
            folds = [(shapes(_parity(f, True)), shapes(_parity(f, False))) for f in (0, 1)]
            cv = [(_error(te, law, _fit(tr, law, peak)), len(te)) for tr, te in folds]
            out.append(LawFit(
                law=law, precision=prec, rate=math.exp(x[0]) / peak, t0_s=x[1], halves=tuple(x[2:]),
                in_sample=_error(shapes(lambda i: True), law, x),
                cross_validated=sum(e * n for e, n in cv) / sum(n for _, n in cv),
                held_out={k: _error(v, law, x) for k, v in others.items()} if prec == "bf16" else {},
            ))  # fmt: skip
    return out
