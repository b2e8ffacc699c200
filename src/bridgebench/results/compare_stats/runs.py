"""Own repeated runs compared: two-level bootstrap CI, rank test, verdict, repeats needed, FDR (the own-runs half
of :mod:`bridgebench.results.compare_stats`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from bridgebench.results.compare_stats.base import NO_SPREAD, CompareError, library_versions


def repeats_needed(cv: float, effect: float, alpha: float = 0.05, power: float = 0.8, min_runs: int = 3) -> int:
    """Runs per side for a two-sided two-sample comparison of run-level statistics to detect a relative change
    ``effect`` with ``power``, when runs vary with coefficient of variation ``cv``:
    ``ceil(2 (z_{1-alpha/2} + z_power)**2 (cv / effect)**2) + 1`` (normal approximation on the log scale; the + 1 pays
    for estimating the variance), at least ``min_runs``.

    Raises:
        CompareError: ``effect`` <= 0 or ``cv`` < 0.
    """
    if not effect > 0 or not cv >= 0:
        raise CompareError(f"repeats_needed: effect must be > 0 and cv >= 0, got effect={effect!r}, cv={cv!r}")
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return max(min_runs, math.ceil(2 * z**2 * (cv / effect) ** 2) + 1)


@dataclass(frozen=True, kw_only=True)
class RunComparison:
    """Side B vs side A on per-iteration values. ``ratio = S(B) / S(A)`` (module docstring)."""

    verdict: str
    ratio: float
    # the test's figures: None when no test was made (too few runs, or nothing varies)
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None  # two-sided; Welch t on the bootstrap SE of log(ratio); used for FDR
    n_runs: tuple[int, int]
    side_values: tuple[float, float]  # S(A), S(B), in the metric's unit
    between_run_cv: float | None  # pooled CV of the run-level statistics
    mannwhitney_runs_p: float | None = None
    mannwhitney_iterations_p: float | None = None  # dependent samples: informational only
    repeats_needed: int | None
    reason: str
    q_value: float | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _run_stat(stat: str) -> Callable[[np.ndarray], float]:
    if stat == "median":
        return np.median
    if stat == "mean":
        return np.mean
    raise CompareError(f"stat must be 'median' or 'mean', got {stat!r}")


def _pooled_cv(run_stats: Sequence[np.ndarray]) -> float | None:
    """Pooled between-run CV: sqrt of the pooled variance of log run-statistics over sides with >= 2 runs."""
    num, den = 0.0, 0
    for s in run_stats:
        if len(s) >= 2:
            ls = np.log(s)
            num += float(((ls - ls.mean()) ** 2).sum())
            den += len(s) - 1
    return math.sqrt(num / den) if den else None


def _verdict(ratio: float, up: bool, down: bool, threshold: float, kind: str) -> str:
    if up and ratio - 1 > threshold:
        return "slower" if kind == "time" else "faster"
    if down and 1 - ratio > threshold:
        return "faster" if kind == "time" else "slower"
    return "no significant change"


def _check_runs(side: Sequence[Sequence[float]], name: str) -> list[np.ndarray]:
    out = []
    for i, r in enumerate(side):
        x = np.asarray(r, dtype=float)
        if x.ndim != 1 or len(x) < 1 or not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise CompareError(f"side {name}, run {i}: needs a 1-D list of >= 1 positive finite values, got {r!r:.80}")
        out.append(x)
    if not out:
        raise CompareError(f"side {name} has no runs")
    return out


def compare_runs(
    a: Sequence[Sequence[float]],
    b: Sequence[Sequence[float]],
    *,
    kind: str = "time",
    stat: str = "median",
    n_resamples: int = 2000,
    n_inner: int = 200,
    confidence: float = 0.95,
    threshold: float = 0.01,
    bootstrap: str = "stationary",
    block_length: float | None = None,
    small_sample: str = "expanded",
    min_runs: int = 3,
    power: float = 0.8,
    power_effect: float | None = None,
    assumed_cv: float = 0.02,
    seed: int = 0,
) -> RunComparison:
    """Compare side B against side A; each side a list of runs, each run the per-iteration values of one job.

    Args:
        kind: ``time`` (values are seconds per step; ratio > 1 means B is slower) or ``throughput`` (TFLOP/s/GPU,
            tokens/s/GPU; ratio > 1 means B is faster).
        stat: run-level statistic, ``median`` or ``mean`` of the run's iterations.
        n_resamples: outer (run-level) bootstrap replicates.
        n_inner: block-bootstrap replicates precomputed per run; each outer draw of a run takes one at random (a Monte
            Carlo stand-in for a fresh inner resample). Runs of one value (no per-iteration series) have none.
        confidence: two-sided level of the CI; ``1 - confidence`` is also the test level.
        threshold: relative change a ``faster``/``slower`` verdict must exceed (dimensionless).
        bootstrap: ``stationary`` or ``moving`` (arch's ``StationaryBootstrap`` / ``MovingBlockBootstrap``).
        block_length: iterations per block; default the median over runs of >= 10 iterations of
            ``arch.bootstrap.optimal_block_length`` (at least 1).
        small_sample: ``expanded`` (see the module docstring) or ``none``.
        min_runs: fewer runs on a side gives ``insufficient``.
        power, power_effect: for :func:`repeats_needed` (effect default ``max(threshold, 0.02)``).
        assumed_cv: between-run CV used for the number of runs needed when no side has 2 runs.
        seed: seeds every random draw (``numpy.random.default_rng(seed)``; child generators for arch).

    Raises:
        CompareError: a run that is not positive finite values, an empty side, or an unknown option.
    """
    _check_options(kind, bootstrap, small_sample, confidence, threshold, n_resamples, n_inner, min_runs)
    f = _run_stat(stat)
    sides = [_check_runs(a, "A"), _check_runs(b, "B")]
    params: dict[str, Any] = {
        "kind": kind,
        "stat": stat,
        "side_aggregate": "mean of run statistics",
        "n_resamples": n_resamples,
        "n_inner": n_inner,
        "confidence": confidence,
        "threshold": threshold,
        "bootstrap": bootstrap,
        "small_sample": small_sample,
        "min_runs": min_runs,
        "power": power,
        "power_effect": power_effect if power_effect is not None else max(threshold, 0.02),
        "assumed_cv": assumed_cv,
        "seed": seed,
        "ci_method": "percentile on log ratio, two-level bootstrap",
        "iterations_per_run": [[len(r) for r in side] for side in sides],
        "versions": library_versions(),
    }
    run_stats = [np.array([f(r) for r in side]) for side in sides]
    untested = _untested(sides, run_stats, params)
    return untested if untested is not None else _tested(sides, run_stats, f, params, block_length)


def _check_options(
    kind: str,
    bootstrap: str,
    small_sample: str,
    confidence: float,
    threshold: float,
    n_resamples: int,
    n_inner: int,
    min_runs: int,
) -> None:
    """Raises CompareError for an option of :func:`compare_runs` outside its range."""
    if kind not in ("time", "throughput"):
        raise CompareError(f"kind must be 'time' or 'throughput', got {kind!r}")
    if bootstrap not in ("stationary", "moving"):
        raise CompareError(f"bootstrap must be 'stationary' or 'moving', got {bootstrap!r}")
    if small_sample not in ("expanded", "none"):
        raise CompareError(f"small_sample must be 'expanded' or 'none', got {small_sample!r}")
    if not 0 < confidence < 1 or not threshold >= 0 or n_resamples < 100 or n_inner < 1 or min_runs < 2:
        raise CompareError("need 0 < confidence < 1, threshold >= 0, n_resamples >= 100, n_inner >= 1, min_runs >= 2")


def _aggregate(
    sides: Sequence[Sequence[np.ndarray]], run_stats: Sequence[np.ndarray], params: dict[str, Any]
) -> dict[str, Any]:
    """The :class:`RunComparison` fields every outcome has: ``side_values`` ``(S(A), S(B))`` (the mean of each
    side's run statistics), ``ratio`` ``S(B) / S(A)``, the pooled ``between_run_cv``, ``n_runs`` and ``params``."""
    side_values = (float(run_stats[0].mean()), float(run_stats[1].mean()))
    return {
        "side_values": side_values,
        "ratio": side_values[1] / side_values[0],
        "between_run_cv": _pooled_cv(run_stats),
        "n_runs": (len(sides[0]), len(sides[1])),
        "params": params,
    }


def _untested(
    sides: Sequence[Sequence[np.ndarray]], run_stats: Sequence[np.ndarray], params: dict[str, Any]
) -> RunComparison | None:
    """The comparison when no test can be made (no CI, no p-values): ``insufficient`` with fewer than ``min_runs``
    runs on a side (and the runs needed), :data:`NO_SPREAD` when every value is identical within its side; else
    None."""
    common = _aggregate(sides, run_stats, params)
    ratio, cv, (n_a, n_b) = common["ratio"], common["between_run_cv"], common["n_runs"]
    min_runs, effect, power = params["min_runs"], params["power_effect"], params["power"]
    alpha = 1 - params["confidence"]

    def result(verdict: str, need: int | None, reason: str) -> RunComparison:
        """An outcome without a test: no CI, no p-values."""
        return RunComparison(**common, verdict=verdict, repeats_needed=need, reason=reason)

    if min(n_a, n_b) < min_runs:
        assumed_cv = params["assumed_cv"]
        need = repeats_needed(cv if cv is not None else assumed_cv, effect, alpha, power, min_runs)
        cv_src = f"observed {cv:.2%}" if cv is not None else f"assumed {assumed_cv:.0%}: no side has 2 runs"
        return result(
            "insufficient",
            need,
            f"insufficient: {n_a} vs {n_b} runs (fewer than {min_runs} per side); need {need} runs per side to "
            f"detect a {effect:.1%} change with power {power:.0%} at alpha {alpha:g} (between-run CV {cv_src})",
        )
    if all(np.ptp(np.concatenate(side)) == 0 for side in sides):  # nothing varies: nothing to test (not p = 0)
        values = ", ".join(f"{n} {np.unique(np.concatenate(sd)).tolist()[:3]}" for n, sd in zip("AB", sides))
        return result(
            NO_SPREAD,
            None,
            f"no spread: every value on both sides is identical within its side ({values}); the ratio "
            f"{ratio:.4f} is exact arithmetic, but identical repeats say nothing about run-to-run noise, so no test "
            "can be made (check that the repeats really ran: a cached result, a timer's resolution, a copied log)",
        )
    return None


def _tested(
    sides: Sequence[Sequence[np.ndarray]],
    run_stats: Sequence[np.ndarray],
    f: Callable[[np.ndarray], float],
    params: dict[str, Any],
    block_length: float | None,
) -> RunComparison:
    """The two-level bootstrap comparison (module docstring): CI of the ratio, Welch-t p-value on the bootstrap SE
    of the log ratio, Mann-Whitney U on run statistics and on iterations, verdict and runs needed."""
    common = _aggregate(sides, run_stats, params)
    side_values, ratio, cv, (n_a, n_b) = (common[k] for k in ("side_values", "ratio", "between_run_cv", "n_runs"))
    confidence, threshold = params["confidence"], params["threshold"]
    alpha = 1 - confidence
    rng = np.random.default_rng(params["seed"])
    inner = _inner_replicates(sides, f, rng, params, block_length)
    log_ratio, var_side = _outer_bootstrap(inner, rng, side_values, params)
    den = var_side[0] ** 2 / (n_a - 1) + var_side[1] ** 2 / (n_b - 1)
    df_w = (var_side[0] + var_side[1]) ** 2 / den if den > 0 else float(n_a + n_b - 2)
    se = float(log_ratio.std())
    if params["small_sample"] == "expanded":
        fac = float(stats.t.ppf(1 - alpha / 2, df_w) / stats.norm.ppf(1 - alpha / 2))
        centre = math.log(ratio)
        log_ratio = centre + fac * (log_ratio - centre)
        params["expansion_t_over_z"] = fac
    lo, hi = (float(x) for x in np.exp(np.quantile(log_ratio, [alpha / 2, 1 - alpha / 2])))
    k = min(int((log_ratio <= 0).sum()), int((log_ratio >= 0).sum()))
    p_pct = min(1.0, 2 * (k + 1) / (params["n_resamples"] + 1))
    # p-value for FDR: Welch t on the bootstrap SE of log(ratio). The percentile-count p-value (kept in params) is
    # unreliable in the far tail with 3-10 runs, and Benjamini-Hochberg works in exactly that tail.
    p = float(2 * stats.t.sf(abs(math.log(ratio)) / se, df_w)) if se > 0 else None
    params |= {
        "welch_df": df_w,
        "se_log_ratio": se,
        "p_value_method": "Welch t on bootstrap SE of log ratio",
        "p_value_percentile": p_pct,
        "mannwhitney_iterations_dependent": True,
    }
    mw_runs = float(stats.mannwhitneyu(run_stats[1], run_stats[0], alternative="two-sided").pvalue)
    mw_iter = float(
        stats.mannwhitneyu(np.concatenate(sides[1]), np.concatenate(sides[0]), alternative="two-sided").pvalue
    )
    reason = (
        f"{confidence:.0%} CI [{lo:.4f}, {hi:.4f}] {'excludes' if lo > 1 or hi < 1 else 'includes'} 1; "
        f"|ratio - 1| = {abs(ratio - 1):.2%} vs threshold {threshold:.1%}"
    )
    effect, power, min_runs = params["power_effect"], params["power"], params["min_runs"]
    need = repeats_needed(cv, effect, alpha, power, min_runs) if cv is not None else None
    return RunComparison(
        **common,
        verdict=_verdict(ratio, lo > 1, hi < 1, threshold, params["kind"]),
        ci_low=lo,
        ci_high=hi,
        p_value=p,
        mannwhitney_runs_p=mw_runs,
        mannwhitney_iterations_p=mw_iter,
        repeats_needed=need,
        reason=reason,
    )


def _inner_replicates(
    sides: Sequence[Sequence[np.ndarray]],
    f: Callable[[np.ndarray], float],
    rng: np.random.Generator,
    params: dict[str, Any],
    block_length: float | None,
) -> list[np.ndarray]:
    """Per side, ``(runs, n_inner)`` block-bootstrap replicates of each run's statistic (arch's stationary or
    moving-block bootstrap; a run of one value repeats it); records the block length in ``params``."""
    from arch.bootstrap import MovingBlockBootstrap, StationaryBootstrap, optimal_block_length

    bootstrap, n_inner = params["bootstrap"], params["n_inner"]
    if block_length is None:
        col = "stationary" if bootstrap == "stationary" else "circular"
        bls = [float(optimal_block_length(r)[col].iloc[0]) for side in sides for r in side if len(r) >= 10]
        block_length = max(1.0, float(np.median(bls))) if bls else 1.0
    params["block_length"] = float(block_length)
    cls = StationaryBootstrap if bootstrap == "stationary" else MovingBlockBootstrap
    blk = float(block_length) if bootstrap == "stationary" else max(1, round(block_length))
    inner = []
    for side in sides:
        reps = []
        for r in side:
            child = np.random.default_rng(rng.integers(2**63))
            if len(r) < 2:
                reps.append(np.full(n_inner, f(r)))
            else:
                reps.append(cls(blk, r, seed=child).apply(lambda x: np.array([f(x)]), n_inner)[:, 0])
        inner.append(np.vstack(reps))
    return inner


def _outer_bootstrap(
    inner: Sequence[np.ndarray], rng: np.random.Generator, side_values: tuple[float, float], params: dict[str, Any]
) -> tuple[np.ndarray, list[float]]:
    """Run-level bootstrap: per replicate each side draws its runs with replacement, each run one of its inner
    replicates; returns the replicates of ``log S(B) - log S(A)`` and each side's variance of ``log S``
    (``small_sample`` ``expanded``: each side's spread widened by ``sqrt(n / (n - 1))``)."""
    n_resamples, n_inner = params["n_resamples"], params["n_inner"]
    log_side, var_side = [], []
    for i, reps in enumerate(inner):
        n = reps.shape[0]
        pick_run = rng.integers(0, n, size=(n_resamples, n))
        pick_rep = rng.integers(0, n_inner, size=(n_resamples, n))
        boot = np.log(reps[pick_run, pick_rep].mean(axis=1))
        if params["small_sample"] == "expanded":  # undo the (n-1)/n variance of resampling n runs
            boot = math.log(side_values[i]) + math.sqrt(n / (n - 1)) * (boot - boot.mean())
        log_side.append(boot)
        var_side.append(float(boot.var()))
    return log_side[1] - log_side[0], var_side


def apply_fdr(results: Sequence[RunComparison], alpha: float = 0.05, method: str = "bh") -> list[RunComparison]:
    """Control the false discovery rate across many comparisons.

    q-values are ``scipy.stats.false_discovery_control(p, method=method)`` over the p-values of the results that have
    one; each of those verdicts is re-derived: ``faster``/``slower`` needs ``q <= alpha`` *and* the result's CI on
    that side of 1 (and its own threshold exceeded). ``insufficient`` results pass through unchanged.
    """
    idx = [i for i, r in enumerate(results) if r.p_value is not None]
    out = list(results)
    if not idx:
        return out
    q = stats.false_discovery_control([results[i].p_value for i in idx], method=method)
    for i, qi in zip(idx, q):
        r = results[i]
        sig = bool(qi <= alpha)
        up, down = sig and r.ci_low > 1, sig and r.ci_high < 1  # both the adjusted test and the CI must agree
        v = _verdict(r.ratio, up, down, r.params["threshold"], r.params["kind"])
        out[i] = dataclasses.replace(
            r,
            verdict=v,
            q_value=float(qi),
            reason=r.reason + f"; FDR ({method}, {len(idx)} tests) q = {qi:.3g} vs alpha {alpha:g}",
            params={**r.params, "fdr_method": method, "fdr_alpha": alpha, "fdr_tests": len(idx)},
        )
    return out


def summarize_runs(
    runs: Sequence[Sequence[float]],
    *,
    stat: str = "median",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float | None, float | None]:
    """One side on its own: ``(mean of run statistics, CI low, CI high)`` in the values' unit. The CI is
    ``scipy.stats.bootstrap`` (percentile) over the run statistics, None with fewer than 3 runs.

    Raises:
        CompareError: bad runs (see :func:`compare_runs`).
    """
    f = _run_stat(stat)
    vals = np.array([f(r) for r in _check_runs(runs, "-")])
    if len(vals) < 3:
        return float(vals.mean()), None, None
    res = stats.bootstrap(
        (vals,),
        np.mean,
        confidence_level=confidence,
        n_resamples=n_resamples,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(vals.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high)
