"""Fitting the step-time model on NVIDIA's published tables, and the cross-validated uncertainty bands.

1. **Implied level** of a row (:func:`implied_level`): given its GPU / precision efficiency ``e``, the software
   level ``L`` (GEMM rate ``e L``, element-wise rate ``L``) that makes the predicted step equal the published one
   (``model FLOPs / (published TFLOP/s x GPUs)``), solved by Brent's method (the step time falls monotonically as
   ``L`` grows; communication runs at datasheet bandwidths and does not scale).
2. **Efficiencies** (:func:`calibrate`): each (chip, precision class) efficiency (:func:`chip_of`: the systems of
   one chip share it, as a fraction of each one's own peak) is set so that its rows' implied
   levels have a geometric mean of 1 (a fixed point, reached in :data:`E_ITERATIONS` steps).
3. **c_layer** (seconds per layer per microbatch) from :data:`C_LAYER_GRID`, **host_moe** (seconds of host work per
   MoE layer per microbatch, exposed where the token dispatch waits on the host:
   :func:`~bridgebench.model.steptime.predict.host_exposed`) from :data:`HOST_MOE_GRID` and **host_moe_expert** (its
   part per local expert, :func:`~bridgebench.model.steptime.predict.host_seconds`) from :data:`HOST_EXPERT_GRID`,
   by internal
   cross-validation on the training rows only: the triple whose rows' log levels are best predicted by the level
   table of the OTHER releases (:func:`_loro_level_error`, the same reading the predictions use) -- the
   configuration physics is judged on what it leaves to the release levels. (The mean of that and the
   leave-one-configuration-out level error chose 8 ms instead of 6: held out, LORO 7.3 % and LOCO 14.1 % against
   6.8 % and 14.3 %; docs/sweeps.md.)
4. **Release levels** (:func:`fit_levels`): each group's mean log level per published release, and each family's
   mean (:mod:`bridgebench.model.steptime.release`); for a model with no published group, the line of the rows' log
   levels in their non-GEMM share (:func:`fit_share_level`, :class:`~bridgebench.model.steptime.release.ShareLevel`).
5. **Bands** (:func:`calibrate_with_bands`): every row predicted by calibrations fitted without its release, its
   configuration at every release, its group, its model on its GPU, its model, its GPU (:func:`held_out_experiments`,
   :func:`leave_out`); the conformal half-widths by distance from the calibration (:mod:`~.bands`), and -- kept for
   callers that read them -- the root mean square of the leave-one-release-out log errors per GPU and precision
   class and over all rows, per group partially pooled towards its GPU and precision class (:func:`bands_from`).

Nothing is fitted per row: the free parameters are one efficiency per (chip, precision class), ``c_layer``,
``host_moe`` and ``host_moe_expert``; the release levels are the published rows' own levels, read off the table.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from bridgebench.model.spec import ModelSpec
from bridgebench.model.steptime import registry
from bridgebench.model.steptime.bands import HeldOut, Seen, beyond_release_spread, conformal_bands, novelty
from bridgebench.model.steptime.calibration import Calibration
from bridgebench.model.steptime.config import GpuFacts, TimeConfig, TimeModelError, config_key, family, group_key
from bridgebench.model.steptime.predict import (
    evaluate,
    non_gemm_share,
    point_release_index,
    predict_time,
    step_flops_of,
)
from bridgebench.model.steptime.release import GroupLevel, LevelTable, ShareLevel

#: grid of ``c_layer`` values (s per layer per microbatch) tried by :func:`calibrate`.
C_LAYER_GRID = (0.0, 5e-5, 1e-4, 2e-4, 4e-4, 8e-4, 1.6e-3)
#: grid of ``host_moe`` values (s of host work per MoE layer per microbatch, forward and backward) tried by
#: :func:`calibrate`: 0 (no host floor) to 16 ms, a MoE layer's few hundred kernel launches and its token-count
#: synchronisations at some 10-40 us each (PyTorch eager dispatch, Megatron-Core's Python).
HOST_MOE_GRID = (0.0, 2e-3, 4e-3, 6e-3, 8e-3, 1e-2, 1.2e-2, 1.6e-2)
#: grid of ``host_moe_expert`` values (s of host work per local expert per MoE layer per microbatch) tried by
#: :func:`calibrate` jointly with :data:`HOST_MOE_GRID`: 0 to 0.4 ms, the experts' six GEMMs and their casts at some
#: 10-40 us of launch each (Transformer Engine's multi-stream cuBLAS grouped GEMM, one GEMM per expert).
HOST_EXPERT_GRID = (0.0, 1e-4, 2e-4, 3e-4, 4e-4)
#: bracket of implied levels searched.
LEVEL_BRACKET = (1e-3, 20.0)
#: half-width in log level of the first bracket around a guessed level (:func:`implied_level`).
GUESS_SPAN = 0.02
#: most fixed-point steps of the efficiency of each (chip, precision class) (see the module docstring; secant steps,
#: :func:`_secant_step`); the steps stop once every class's mean log level is within :data:`E_TOLERANCE` of 0.
E_ITERATIONS = 12
#: convergence of the fixed point: largest |mean log level| of a class after a step.
E_TOLERANCE = 1e-5
#: starting efficiency of the fixed point.
E_START = 0.5


@dataclass(frozen=True, kw_only=True)
class Row:
    """One published row for calibration: model, point, published model TFLOP/s/GPU, and labels."""

    spec: ModelSpec
    cfg: TimeConfig
    tflops: float
    release: str = ""
    model: str = ""
    system: str = ""
    precision: str = ""


def implied_level(
    r: Row,
    eff: float,
    c_layer: float,
    kappa: float,
    ns_efficiency: float,
    host_moe: float = 0.0,
    host_moe_expert: float = 0.0,
    *,
    guess: float | None = None,
    bf16_gain: float = 1.0,
) -> float | None:
    """The software level at which ``r`` is predicted at its published TFLOP/s given efficiency ``eff`` and host
    work ``host_moe`` per MoE layer per microbatch, ``host_moe_expert`` more per local expert, its BF16 work at
    ``bf16_gain`` x its GEMMs' rate (:meth:`~bridgebench.model.steptime.calibration.Calibration.bf16_gain`); None
    when the level-independent terms alone exceed its step; :data:`LEVEL_BRACKET` ``[0]`` when even the lowest level
    is fast enough.

    ``guess`` (a level found for this row at nearby constants) starts Brent's method in a bracket of
    +-:data:`GUESS_SPAN` in log level around it, widened fourfold until the root is bracketed or the bracket reaches
    :data:`LEVEL_BRACKET`: the same root to ``xtol`` 1e-6 in log level, in about half the evaluations (the step time
    falls with the level, so the root is unique)."""
    from scipy.optimize import brentq

    flops = step_flops_of(registry.handle(r.spec), r.cfg.gbs, r.cfg.tp, r.cfg.flops_formula)
    target = flops / r.cfg.num_gpus / (r.tflops * 1e12)

    def gap(log_level: float) -> float:
        lv = math.exp(log_level)
        terms = evaluate(
            r.spec,
            r.cfg,
            eff * lv,
            c_layer,
            kappa,
            ns_efficiency,
            lv,
            host_moe=host_moe,
            host_moe_expert=host_moe_expert,
            bf16_gain=bf16_gain,
        )[0]
        return sum(terms.values()) - target

    lo, hi = (math.log(v) for v in LEVEL_BRACKET)
    if guess is not None and LEVEL_BRACKET[0] < guess < LEVEL_BRACKET[1]:
        span = GUESS_SPAN
        while True:
            a, b = max(lo, math.log(guess) - span), min(hi, math.log(guess) + span)
            if (a, b) == (lo, hi):
                break
            ga, gb = gap(a), gap(b)
            if ga >= 0 >= gb:
                return math.exp(brentq(gap, a, b, xtol=1e-6))
            span *= 4
    if gap(hi) > 0:
        return None
    if gap(lo) < 0:
        return LEVEL_BRACKET[0]
    return math.exp(brentq(gap, lo, hi, xtol=1e-6))


def fit_levels(
    rows: Sequence[Row], ys: Sequence[float]
) -> tuple[dict[tuple[str, str, str], GroupLevel], dict[str, Any]]:
    """Each group's mean log level per published release and each family's mean log level, from the log levels
    ``ys`` of ``rows`` (:mod:`bridgebench.model.steptime.release`)."""
    by: dict[tuple[str, str, str], dict[float, list[float]]] = {}
    fam_of: dict[tuple[str, str, str], str] = {}
    fams: dict[str, list[float]] = {}
    for r, y in zip(rows, ys):
        key = group_key(r.spec, r.cfg)
        by.setdefault(key, {}).setdefault(point_release_index(r.cfg) or 0.0, []).append(y)
        fam_of[key] = family(r.spec)
        fams.setdefault(family(r.spec), []).append(y)
    groups = {}
    for key, per in by.items():
        xs = sorted(per)
        groups[key] = GroupLevel(
            family=fam_of[key],
            x=tuple(xs),
            y=tuple(statistics.mean(per[x]) for x in xs),
            rows=sum(len(v) for v in per.values()),
        )
    return groups, {f: statistics.mean(v) for f, v in fams.items()}


def _held_out_level_error(rows: Sequence[Row], ys: Sequence[float], key: Callable[[Row], object]) -> float:
    """Mean |log level error| of each row read off the level table of the rows whose ``key`` differs from its own
    (internal leave one ``key`` value out on the training rows; a ``key`` value that is the only one is skipped)."""
    errs = []
    keys = [key(r) for r in rows]
    for value in set(keys):
        train = [(r, y) for r, y, k in zip(rows, ys, keys) if k != value]
        if not train:
            continue
        groups, fams = fit_levels([r for r, _ in train], [y for _, y in train])
        table = LevelTable(groups=groups, family_mean=fams)
        for r, y, k in zip(rows, ys, keys):
            if k == value:
                pred, _ = table.log_level(group_key(r.spec, r.cfg), family(r.spec), point_release_index(r.cfg))
                errs.append(abs(pred - y))
    return statistics.mean(errs) if errs else 0.0


def _loro_level_error(rows: Sequence[Row], ys: Sequence[float]) -> float:
    """:func:`_held_out_level_error` leaving one release out."""
    return _held_out_level_error(rows, ys, lambda r: r.release)


def _fit_at(
    rows: Sequence[Row],
    c: float,
    host: tuple[float, float],
    kappa: float,
    ns_efficiency: float,
    default_efficiency: float,
    seed: list[float | None] | None = None,
    measured_rates: Mapping[tuple[str, str], float] | None = None,
) -> tuple[Calibration, list[tuple[Row, float]]] | None:
    """The efficiencies per (chip, precision class) (:func:`chip_of`; written per GPU) at ``c_layer = c`` and
    ``(host_moe, host_moe_expert) = host`` (the fixed point of the module docstring) and the rows' log levels
    re-centred on them; None when no row leaves room for compute.

    ``seed``: the rows' levels at :data:`E_START` found by a fit at nearby constants, the guesses of the first step
    (:func:`implied_level`; empty: none); this fit's are written back into it. Each later step guesses the step
    before it. ``measured_rates`` (``Calibration.measured_rates``) enter each row's BF16 gain, re-read from the
    step's efficiencies (:func:`_bf16_gains`)."""
    keys = [(chip_of(r.cfg.gpu), r.cfg.precision_class) for r in rows]
    log_eff = dict.fromkeys(keys, math.log(E_START))
    last: dict[tuple[str, str], tuple[float, float]] = {}
    used: list[tuple[Row, float]] = []
    means: dict[tuple[str, str], float] = {}
    found: list[float | None] = list(seed) if seed and len(seed) == len(rows) else [None] * len(rows)
    for step in range(E_ITERATIONS):
        gains = _bf16_gains(rows, log_eff, measured_rates)
        found = [
            implied_level(r, math.exp(log_eff[k]), c, kappa, ns_efficiency, *host, guess=g, bf16_gain=gain)
            for r, k, g, gain in zip(rows, keys, found, gains)
        ]
        if step == 0 and seed is not None:
            seed[:] = found
        logs: dict[tuple[str, str], list[float]] = {}
        for k, v in zip(keys, found):
            if v is not None:
                logs.setdefault(k, []).append(math.log(v))
        means = {k: sum(v) / len(v) for k, v in logs.items()}
        used = [(r, math.log(v)) for r, v in zip(rows, found) if v is not None]
        if all(abs(m) < E_TOLERANCE for m in means.values()):
            break
        for k, m in means.items():
            step = _secant_step(last.get(k), log_eff[k], m)
            last[k] = (log_eff[k], m)
            log_eff[k] += step
    if not used:
        return None
    cal = Calibration(
        c_layer=c,
        host_moe=host[0],
        host_moe_expert=host[1],
        kappa=kappa,
        ns_efficiency=ns_efficiency,
        default_efficiency=default_efficiency,
        measured_rates=dict(measured_rates or {}),
    )
    for r, _ in used:
        k = (r.cfg.gpu.name, r.cfg.precision_class)
        cal.efficiency[k] = math.exp(log_eff[(chip_of(r.cfg.gpu), r.cfg.precision_class)])
        cal.rows[k] = cal.rows.get(k, 0) + 1
    # within E_TOLERANCE of the fixed point: centre each class's levels on 0 exactly
    return cal, [(r, y - means[(chip_of(r.cfg.gpu), r.cfg.precision_class)]) for r, y in used]


def _bf16_gains(
    rows: Sequence[Row], log_eff: Mapping[tuple[str, str], float], measured: Mapping[tuple[str, str], float] | None
) -> list[float]:
    """Each row's BF16 gain (:meth:`Calibration.bf16_gain`) at the fixed point's current efficiencies: every chip's
    classes written per GPU, with the measured class ratios, read through the same priors the predictions use."""
    tmp = Calibration(measured_rates=dict(measured or {}))
    for r in rows:
        chip = chip_of(r.cfg.gpu)
        for (ch, cls), v in log_eff.items():
            if ch == chip:
                tmp.efficiency[(r.cfg.gpu.name, cls)] = math.exp(v)
    out = []
    for r in rows:
        g = r.cfg.gpu
        out.append(tmp.bf16_gain(g.name, r.cfg.precision_class, lambda c, g=g: g.peak_tflops.get(c)))
    return out


def chip_of(gpu: GpuFacts) -> str:
    """The key one efficiency is fitted under: the GPU's chip, named by its CUDA compute capability (``cc 10.3``:
    GB300 and HGX B300; ``cc 10.0``: GB200 and HGX B200; ``cc 9.0``: H100 and H200), else its own name.

    An efficiency is the fraction of a GPU's own datasheet peak its GEMMs reach (``configs/gpu``); two systems of
    one chip differ in clocks and power (GB300 5,000 against HGX B300 4,500 dense FP8 TFLOP/s), which their peaks
    carry, not in the tensor cores' fraction of them. Fitted apart, the two absorbed their systems' other
    differences -- HGX B300's 256-GPU rows cross 8-GPU NVLink domains -- into the GEMM rate: 0.329 (HGX B300 FP8)
    against 0.590 (GB300) for one chip, while Qwen3 30B-A3B on 8 GPUs, the one configuration NVIDIA published on
    both, measures 679 and 699 TFLOP/s at 26.02. Tied, each system's remaining difference lands in its own groups'
    release levels. Published rows, held out with the stop-29 host pair (2 ms + 0.3 ms per local expert) fixed:
    leave one configuration out 13.2 -> 11.5 % MAPE (new GPU 32.6 -> 7.7 %; rows off by more than 25 %: 27 -> 20),
    leave one release out 6.2 -> 6.1 %; with the pair refitted (0 + 0.4 ms, ``benchmarks/validate_time.py``):
    11.5 % and 6.0 %, 22 rows off by more than 25 %. Nine efficiencies become six."""
    cc = gpu.compute_capability
    return f"cc {cc:g}" if cc else gpu.name


def _secant_step(last: tuple[float, float] | None, x: float, f: float) -> float:
    """The step of one class's log efficiency ``x`` towards its fixed point, where ``f`` is its rows' mean log level:
    ``f`` itself (a level that falls as ``1 / e``: compute-bound rows, the plain fixed point), or the secant step
    ``-f / slope`` through the previous (x, f) ``last`` when its slope lies in (-1.5, -0.05) (rows that wait on the
    host answer an efficiency change only in part, and the plain step would crawl)."""
    if last is not None and last[0] != x:
        slope = (f - last[1]) / (x - last[0])
        if -1.5 < slope < -0.05:
            return -f / slope
    return f


def calibrate(
    rows: Sequence[Row],
    *,
    c_grid: Iterable[float] = C_LAYER_GRID,
    host_grid: Iterable[float] = HOST_MOE_GRID,
    expert_grid: Iterable[float] = HOST_EXPERT_GRID,
    levels: bool = True,
    kappa: float = 1.4e-4,
    ns_efficiency: float = 0.5,
    default_efficiency: float = 0.35,
    measured_rates: Mapping[tuple[str, str], float] | None = None,
) -> Calibration:
    """Fit the efficiencies per (chip, precision class), ``c_layer``, ``host_moe`` and ``host_moe_expert`` (the host
    pair over ``host_grid`` x ``expert_grid`` at the first ``c_layer`` of ``c_grid``, then ``c_layer`` over ``c_grid``
    at that pair; each by
    :func:`_loro_level_error`) and (with ``levels``) the release levels on ``rows`` (see the module
    docstring). ``kappa`` and ``ns_efficiency`` are given (the published tables carry no Muon-only measurement;
    :mod:`bridgebench.validation.muon_fit` fits them on the blog's Table 1); ``measured_rates`` (large GEMMs measured
    per GPU and class, :attr:`Calibration.measured_rates`) enter the rows' BF16 gains and are kept on the result.

    Raises:
        TimeModelError: no row whose rate-independent terms leave room for compute.
    """
    c_grid, host_grid, expert_grid = list(c_grid), list(host_grid), list(expert_grid)
    scored: dict[tuple[float, float, float], tuple[float, Calibration, list[Any]]] = {}
    single = len(c_grid) * len(host_grid) * len(expert_grid) == 1
    seed: list[float | None] = []

    def best_of(points: list[tuple[float, float, float]]) -> tuple[float, Calibration, list[Any]] | None:
        for c, h, x in points:
            fitted = (
                None
                if (c, h, x) in scored
                else _fit_at(rows, c, (h, x), kappa, ns_efficiency, default_efficiency, seed, measured_rates)
            )
            if fitted:
                cal, resid = fitted
                err = 0.0 if single else _loro_level_error([r for r, _ in resid], [y for _, y in resid])
                scored[(c, h, x)] = (err, cal, resid)
        found = [scored[p] for p in points if p in scored]
        return min(found, key=lambda t: t[0]) if found else None

    # one pass of coordinate search: the host pair at the first c_layer, then c_layer at that pair
    first = best_of([(c_grid[0], h, x) for h in host_grid for x in expert_grid])
    host = (first[1].host_moe, first[1].host_moe_expert) if first else (host_grid[0], expert_grid[0])
    best = best_of([(c, *host) for c in c_grid])
    if best is None:
        raise TimeModelError("no usable calibration rows (rate-independent terms exceed every row's step time)")
    _, cal, resid = best
    if levels:
        cal.groups, cal.family_level = fit_levels([r for r, _ in resid], [y for _, y in resid])
        cal.level_share = fit_share_level(cal, [r for r, _ in resid], [y for _, y in resid])
    return cal


def fit_share_level(cal: Calibration, rows: Sequence[Row], ys: Sequence[float]) -> ShareLevel | None:
    """The line ``log level = intercept + slope x non-GEMM share`` over ``rows`` (log levels ``ys``), each row's
    share at ``cal``'s efficiency of its GPU and precision class and level 1
    (:func:`~bridgebench.model.steptime.predict.non_gemm_share`), by least squares (``scipy.stats.linregress``);
    None with fewer than 3 rows or shares that do not vary. See
    :class:`bridgebench.model.steptime.release.ShareLevel`."""
    from scipy.stats import linregress

    shares = [non_gemm_share(r.spec, r.cfg, cal.efficiency[(r.cfg.gpu.name, r.cfg.precision_class)], cal) for r in rows]
    if len(shares) < 3 or max(shares) - min(shares) < 1e-9:
        return None
    fit = linregress(shares, list(ys))
    return ShareLevel(
        intercept=float(fit.intercept), slope=float(fit.slope), slope_stderr=float(fit.stderr), rows=len(shares)
    )


def cross_validate(
    rows: Sequence[Row],
    fit: Callable[[Sequence[Row]], Calibration] | None = None,
    releases: Iterable[str] | None = None,
) -> list[float | None]:
    """Held-out predicted TFLOP/s/GPU of every row (None where it could not be predicted): each release's rows
    predicted by ``fit`` (default :func:`calibrate`) of the OTHER releases' rows (leave one release out), or only
    the ``releases`` given."""
    fit = fit or calibrate
    out: list[float | None] = [None] * len(rows)
    chosen = sorted({r.release for r in rows}) if releases is None else list(releases)
    for rel in chosen:
        train = [r for r in rows if r.release != rel]
        cal = fit(train)
        for i, r in enumerate(rows):
            if r.release == rel:
                out[i] = predict_time(r.spec, r.cfg, cal).tflops_per_gpu
    return out


#: prior weight (rows) of the GPU and precision class's band in a group's band (partial pooling, see
#: :func:`bands_from`).
BAND_PRIOR_ROWS = 3


def bands_from(rows: Sequence[Row], held_out: Sequence[float | None], cal: Calibration) -> Calibration:
    """``cal`` with its bands set from held-out predictions: per GPU and precision class (>= 3 rows) and over all
    rows the root mean square of the held-out log errors; per group the same, partially pooled towards its GPU and
    precision class's (``sqrt((sum e^2 + n0 s_gpu^2) / (n + n0))``, ``n0`` = :data:`BAND_PRIOR_ROWS`: a root mean
    square of 3-5 residuals is itself uncertain by tens of percent, and a group's residuals cover its published
    configurations, not the other points a sweep asks about); each reported as ``exp(rms) - 1``."""

    def band(sq: float, n: float) -> float:
        return math.exp(math.sqrt(sq / n)) - 1.0

    by_group: dict[str, Any] = {}
    by_gpu: dict[str, Any] = {}
    every = []
    for r, p in zip(rows, held_out):
        if p is None or p <= 0:
            continue
        e = math.log(p / r.tflops)
        by_group.setdefault((group_key(r.spec, r.cfg), (r.cfg.gpu.name, r.cfg.precision_class)), []).append(e)
        by_gpu.setdefault((r.cfg.gpu.name, r.cfg.precision_class), []).append(e)
        every.append(e)
    out = dataclasses.replace(cal)
    all_sq = sum(e * e for e in every) / len(every) if every else math.log1p(cal.band_default) ** 2
    gpu_sq = {k: sum(e * e for e in v) / len(v) for k, v in by_gpu.items() if len(v) >= 3}
    out.band_by_gpu = {k: math.exp(math.sqrt(v)) - 1.0 for k, v in gpu_sq.items()}
    out.bands = {
        key: band(sum(e * e for e in v) + BAND_PRIOR_ROWS * gpu_sq.get(gk, all_sq), len(v) + BAND_PRIOR_ROWS)
        for (key, gk), v in by_group.items()
    }
    out.band_default = math.exp(math.sqrt(all_sq)) - 1.0
    return out


#: held-out experiments behind the conformal bands, narrow to wide: what each leaves out of the training rows.
EXPERIMENTS: dict[str, Callable[[Row], object]] = {
    "release": lambda r: r.release,
    "configuration": lambda r: config_key(r.spec, r.cfg),
    "group": lambda r: group_key(r.spec, r.cfg),
    "model and GPU": lambda r: (r.spec.name, r.cfg.gpu.name),
    "model": lambda r: r.spec.name,
    "GPU": lambda r: r.cfg.gpu.name,
}


def leave_out(
    rows: Sequence[Row],
    key: Callable[[Row], object],
    fit: Callable[[Sequence[Row]], Calibration],
    progress: Callable[[str], None] | None = None,
) -> tuple[list[float | None], list[tuple[str, ...]], list[str]]:
    """Every row predicted by ``fit`` of the rows whose ``key`` differs from its own (leave one ``key`` value out):
    (held-out TFLOP/s/GPU, the row's distances from its training rows (:func:`~.bands.novelty`), its fold)."""
    pred: list[float | None] = [None] * len(rows)
    tiers: list[tuple[str, ...]] = [()] * len(rows)
    folds: list[str] = [""] * len(rows)
    values: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        values.setdefault(repr(key(r)), []).append(i)
    for n, (value, idx) in enumerate(sorted(values.items())):
        out = set(idx)
        train = [r for i, r in enumerate(rows) if i not in out]
        if not train:
            continue
        if progress:
            progress(f"{n + 1}/{len(values)}: without {value}")
        cal = fit(train)
        seen = Seen.of(train)
        for i in idx:
            pred[i] = predict_time(rows[i].spec, rows[i].cfg, cal).tflops_per_gpu
            tiers[i] = novelty(seen, rows[i].spec, rows[i].cfg)
            folds[i] = value
    return pred, tiers, folds


def held_out_experiments(
    rows: Sequence[Row],
    fit: Callable[[Sequence[Row]], Calibration],
    progress: Callable[[str], None] | None = None,
) -> tuple[list[HeldOut], dict[str, list[float | None]]]:
    """Every row held out by each of :data:`EXPERIMENTS`: the errors filed by distance (a row once per distance, by
    its narrowest experiment), and the held-out predictions per experiment."""
    held: list[HeldOut] = []
    done: set[tuple[int, str]] = set()
    preds: dict[str, list[float | None]] = {}
    for name, key in EXPERIMENTS.items():
        step = (lambda m, name=name: progress(f"leave one {name} out: {m}")) if progress else None
        pred, tiers, folds = leave_out(rows, key, fit, step)
        preds[name] = pred
        for i, (p, ts, fold) in enumerate(zip(pred, tiers, folds)):
            if p is None or p <= 0:
                continue
            for t in ts:
                if (i, t) not in done:
                    done.add((i, t))
                    held.append(HeldOut(row=i, log_error=math.log(p / rows[i].tflops), tier=t, fold=f"{name}={fold}"))
    return held, preds


def calibrate_with_bands(
    rows: Sequence[Row], progress: Callable[[str], None] | None = None, **kw
) -> tuple[Calibration, list[float | None]]:
    """:func:`calibrate` on all rows with conformal bands by distance (:mod:`~.bands`, from
    :func:`held_out_experiments`; the folds keep the ``c_layer`` and ``host_moe`` chosen on all rows) and the
    root-mean-square bands
    of :func:`bands_from` (leave one release out); returns the calibration and the held-out (leave one release out)
    predictions."""
    cal = calibrate(rows, **kw)
    fold_kw = dict(kw, c_grid=(cal.c_layer,), host_grid=(cal.host_moe,), expert_grid=(cal.host_moe_expert,))
    held, preds = held_out_experiments(rows, lambda rs: calibrate(rs, **fold_kw), progress)
    out = bands_from(rows, preds["release"], cal)
    out.conformal = conformal_bands(held, Seen.of(rows))
    loro = [math.log(p / r.tflops) if p and p > 0 else None for r, p in zip(rows, preds["release"])]
    releases = [point_release_index(r.cfg) for r in rows]
    out.conformal.beyond, out.conformal.beyond_counts = beyond_release_spread(releases, loro)
    return out, preds["release"]
