"""Statistics for comparing throughput across releases: NVIDIA's published per-release tables and your own repeated
runs.

Pure functions over plain values and :class:`bridgebench.results.records.RunRecord` objects (no file or store I/O;
:mod:`bridgebench.results.compare` does that). Every result is a frozen dataclass carrying the parameters it was
computed with (``params``: thresholds, seed, bootstrap settings, library versions), so a verdict can be traced to how
it was reached and the same inputs give the same result.

Published tables (``results/reference/published_pretrain_throughput.csv``)
-------------------------------------------------------------------------
* A published number is an **interval**, not a point. How a release's table rounds is declared once, in
  ``configs/release/<release>.yaml`` (``published_rounding``, :func:`bridgebench.config.catalog.releases`):
  ``integer`` -> ``value +- 0.5``; ``whole_sequences_per_job`` (tokens/s/GPU in 26.04.01, 26.06.01, 26.08) ->
  ``(seq_s +- 0.5) * seq_length / num_gpus`` with ``seq_s = tokens/s/GPU * num_gpus / seq_length`` an integer.
  :func:`token_rounding_consistency` shows the evidence: that rule holds for every row of those releases, while the
  alternative reading of the research notes (8 significant bits, bf16) misses rows, and elsewhere neither holds.
* Adjacent releases of one :class:`ConfigKey` are compared on **model TFLOP/s/GPU when the FLOPs count is the same**
  in both releases (same ``flops_formula`` in ``configs/release``, or -- for a model bridgebench can count -- a
  formula change that leaves this model's FLOPs/token unchanged) and on **tokens/s/GPU otherwise** (e.g. GPT OSS at
  26.06, v1 -> v2); each step says which metric and why. The ratio interval is ``[lo_B / hi_A, hi_B / lo_A]``.
* A step is a **real change** when that interval lies entirely above ``1 + threshold`` or entirely below
  ``1 - threshold``: beyond the rounding of both values *and* larger than the threshold (default 1 %, an assumed
  run-to-run noise of a published figure: NVIDIA publishes no repeats or spread). ``=``: the interval contains 1;
  ``~``: beyond rounding but within the threshold.
* A step is **not like-for-like** (``†``) when TP, PP, VP, CP, EP, ETP, GBS, MBS or seq_length differ; the changed
  fields are listed. A field published in only one of the two releases is listed in ``unknown_fields``.
* Change points of a release series: ``ruptures`` PELT on the log of a chain-linked throughput index (comparable across
  a FLOPs-formula change), penalty from a stated noise level (:func:`detect_change_points`).

Own runs (each side: a list of runs, each run an array of per-iteration values)
-----------------------------------------------------------------------------
* Point estimate ``ratio = S(B) / S(A)``, ``S(side)`` = mean over the side's runs of each run's median (or mean):
  each run (SLURM job) weighs the same -- the job is the unit of replication (Kalibera & Jones, "Rigorous Benchmarking
  in Reasonable Time", ISMM 2013).
* CI: two-level bootstrap. Outer level: resample runs. Inner level: a block bootstrap of the run's iterations
  (``arch.bootstrap.StationaryBootstrap`` / ``MovingBlockBootstrap``; block length by ``optimal_block_length``,
  Politis & White 2004) keeps the autocorrelation of per-step times. With few runs a plain bootstrap under-covers, so
  by default the replicates are expanded by ``sqrt(n/(n-1))`` per side and by ``t_df / z`` on the log-ratio
  (Welch-Satterthwaite ``df``; Hesterberg 2015, "What teachers should know about the bootstrap", expanded percentile).
* Rank test: ``scipy.stats.mannwhitneyu`` on run-level statistics (valid) and on pooled iterations (reported only:
  per-step times are autocorrelated, not independent).
* Verdict for ``kind="time"`` (B/A > 1: B slower): ``slower`` if the CI lies above 1 and ``ratio - 1 > threshold``,
  ``faster`` if it lies below 1 and ``1 - ratio > threshold``, else ``no significant change``; for
  ``kind="throughput"`` the directions swap. ``insufficient`` when a side has fewer than ``min_runs`` runs, with the
  runs per side needed (:func:`repeats_needed`). ``no spread: cannot test`` when no value varies on either side
  (the bootstrap's standard error is 0): the ratio is reported, but no CI, no p-value (not p = 0) and no verdict --
  identical repeats say nothing about run-to-run noise (a cached result, a timer's resolution, a copied log).
* Many comparisons: :func:`apply_fdr` (``scipy.stats.false_discovery_control``, Benjamini-Hochberg).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np
from scipy import stats

from bridgebench.config.catalog import release_sort_key, releases
from bridgebench.errors import BridgebenchError
from bridgebench.results.records import RunRecord

#: Recipe fields whose change makes two published rows not like-for-like (``RunRecord`` field names).
LIKE_FOR_LIKE_FIELDS: tuple[str, ...] = ("tp", "pp", "vp", "cp", "ep", "etp", "gbs", "mbs", "seq_length")
#: Published-row facts beside the parallel sizes that make two releases not like-for-like when they differ:
#: ``moe_token_drop`` (25.09's MoE rows were token-drop runs, later releases token-dropless; records.load_published).
PUBLISHED_RECIPE_FACTS: tuple[str, ...] = ("moe_token_drop",)
RUN_VERDICTS = ("faster", "slower", "no significant change", "insufficient", "no spread: cannot test")
#: the verdict when neither side varies at all (every value identical): no test can say how far to trust the ratio
NO_SPREAD = RUN_VERDICTS[-1]
#: Libraries whose versions every result records.
LIBRARIES = ("bridgebench", "numpy", "scipy", "pandas", "pyarrow", "arch", "ruptures", "matplotlib")


class CompareError(BridgebenchError):
    """Bad input to a comparison (the message names the rule): no overlap, unknown release, bad runs or parameters."""


def library_versions() -> dict[str, str]:
    """Installed versions of the libraries a comparison depends on (recorded in every result)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


# --------------------------------------------------------------------------------------------------------------------
# Published values as intervals
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A published value and the interval its rounding allows (``lo <= true value <= hi``), same unit as ``value``."""

    value: float
    lo: float
    hi: float
    rule: str  # how the interval was derived: "integer" or "whole_sequences_per_job(seq_s=62)"

    @property
    def rel_halfwidth(self) -> float:
        """Half-width relative to the value (dimensionless)."""
        return (self.hi - self.lo) / 2 / self.value

    def __str__(self) -> str:
        return f"{self.value:g} [{self.lo:g}, {self.hi:g}]"


def rounding_interval(value: float, rule: str, *, num_gpus: int = 1, seq_length: int = 1) -> Interval:
    """The interval a published ``value`` stands for under a ``configs/release`` ``published_rounding`` rule.

    Args:
        value: the published figure (TFLOP/s/GPU or tokens/s/GPU).
        rule: ``integer`` (``+-0.5``) or ``whole_sequences_per_job`` (tokens/s/GPU only: ``(seq_s +- 0.5) *
            seq_length / num_gpus``, ``seq_s = value * num_gpus / seq_length`` sequences/s for the whole job).
        num_gpus, seq_length: of the published row (GPUs; tokens per sequence).

    Raises:
        CompareError: an unknown rule.
    """
    value = float(value)
    if rule == "integer":
        return Interval(value, value - 0.5, value + 0.5, "integer")
    if rule == "whole_sequences_per_job":
        half = 0.5 * seq_length / num_gpus
        seq_s = value * num_gpus / seq_length
        return Interval(value, value - half, value + half, f"whole_sequences_per_job(seq_s={seq_s:g})")
    raise CompareError(f"unknown rounding rule {rule!r}; known: integer, whole_sequences_per_job")


def is_bf16(value: float) -> bool:
    """True when ``value`` has at most 8 significant bits (exactly representable in bfloat16)."""
    mant, _ = math.frexp(float(value))
    return mant * 256 == round(mant * 256)


def token_rounding_consistency(records: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Per release: how many published tokens/s/GPU values fit each rounding hypothesis (the evidence for
    ``configs/release/*.yaml`` ``published_rounding``).

    Returns one dict per release (release order): ``release, rows, declared`` (the declared rule),
    ``whole_sequences_per_job`` (rows with ``tok * gpus / seq_length`` integral), ``whole_sequences_per_gpu``
    (``tok / seq_length`` integral) and ``bf16`` (<= 8 significant bits).
    """
    facts = releases()
    out = []
    for rel in sorted({r.release for r in records}, key=release_sort_key):
        rows = [r for r in records if r.release == rel and r.tokens_per_sec_per_gpu]
        job = [r.tokens_per_sec_per_gpu * r.num_gpus / r.seq_length for r in rows]
        gpu = [r.tokens_per_sec_per_gpu / r.seq_length for r in rows]
        out.append(
            {
                "release": rel,
                "rows": len(rows),
                "declared": facts.get(rel, {}).get("published_rounding", {}).get("tokens_per_sec_per_gpu"),
                "whole_sequences_per_job": sum(x == round(x) for x in job),
                "whole_sequences_per_gpu": sum(x == round(x) for x in gpu),
                "bf16": sum(is_bf16(r.tokens_per_sec_per_gpu) for r in rows),
            }
        )
    return out


# --------------------------------------------------------------------------------------------------------------------
# Published series and release steps
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigKey:
    """What stays fixed along a release history: model, system, precision, GPU count and optimizer.

    ``model`` / ``gpu`` are ``configs/model`` / ``configs/gpu`` names where bridgebench has one, else the published
    label (``GPT_OSS_120B``, ``DGX-GB300``).
    """

    model: str
    gpu: str
    precision: str
    num_gpus: int
    optimizer: str

    def label(self) -> str:
        return f"{self.model} {self.num_gpus}x{self.gpu} {self.precision} {self.optimizer}"

    def slug(self) -> str:
        text = f"{self.model}-{self.gpu}-{self.precision}-{self.num_gpus}gpu-{self.optimizer}"
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


def record_key(r: RunRecord) -> ConfigKey | None:
    """The :class:`ConfigKey` of a published record (None when the row states no precision: 25.09's table)."""
    if r.precision is None:
        return None
    return ConfigKey(r.model or r.model_label, r.system or "unknown", r.precision, r.num_gpus, r.optimizer)


@dataclass(frozen=True)
class SeriesPoint:
    """One release of a published history: values as intervals, the recipe, and where the row came from."""

    release: str
    formula: str  # configs/release flops_formula (v1, v2)
    tflops: Interval | None  # model TFLOP/s/GPU
    tokens: Interval  # tokens/s/GPU
    recipe: dict[str, int | None]
    model_name: str | None  # configs/model name (None: bridgebench cannot count this model's FLOPs)
    reference: str  # "<file>#<data row>"
    alternates: tuple[str, ...] = ()  # references of other rows of the same key and release, not chosen
    precision_inferred: str = ""  # why the precision is bridgebench's inference (a table without that column)


def _recipe(r: RunRecord) -> dict[str, int | None]:
    rec = {f: getattr(r, f) for f in LIKE_FOR_LIKE_FIELDS}
    if rec["vp"] == 1:  # VP 1 and "no VP" both mean no interleaving
        rec["vp"] = None
    for f in PUBLISHED_RECIPE_FACTS:
        if r.provenance.get(f) is not None:
            rec[f] = r.provenance[f]
    return rec


def published_series(records: Sequence[RunRecord], key: ConfigKey) -> list[SeriesPoint]:
    """The release history of ``key``, in release order, each value an :class:`Interval`.

    When a release publishes several rows for the key (25.09/25.11 ``x (y)`` pairs, or two GBS variants), the row whose
    recipe equals the previous release's choice is taken, else the first in file order; the others are listed in
    ``alternates``.

    Raises:
        CompareError: a release without ``configs/release`` facts.
    """
    facts = releases()
    rows = [r for r in records if record_key(r) == key]
    points: list[SeriesPoint] = []
    for rel in sorted({r.release for r in rows}, key=release_sort_key):
        if rel not in facts:
            raise CompareError(
                f"published release {rel!r} has no configs/release/{rel}.yaml (its rounding and "
                "FLOPs formula are declared there)"
            )
        same = [r for r in rows if r.release == rel]
        chosen = same[0]
        if points and len(same) > 1:
            chosen = next((r for r in same if _recipe(r) == points[-1].recipe), same[0])
        rounding = facts[rel]["published_rounding"]
        points.append(
            SeriesPoint(
                release=rel,
                formula=str(facts[rel]["flops_formula"]),
                tflops=(
                    rounding_interval(chosen.model_tflops_per_gpu, rounding["model_tflops_per_gpu"])
                    if chosen.model_tflops_per_gpu
                    else None
                ),
                tokens=rounding_interval(
                    chosen.tokens_per_sec_per_gpu,
                    rounding["tokens_per_sec_per_gpu"],
                    num_gpus=chosen.num_gpus,
                    seq_length=chosen.seq_length,
                ),
                recipe=_recipe(chosen),
                model_name=chosen.model,
                reference=str(chosen.provenance.get("reference", "")),
                alternates=tuple(str(r.provenance.get("reference", "")) for r in same if r is not chosen),
                precision_inferred=str(chosen.provenance.get("precision_inferred") or ""),
            )
        )
    return points


@dataclass(frozen=True)
class StepComparison:
    """Release A -> release B of one config key. ``ratio`` = B / A of a throughput (> 1: B faster)."""

    release_a: str
    release_b: str
    metric: str  # "tflops" or "tokens"
    metric_reason: str
    value_a: Interval
    value_b: Interval
    ratio: float
    ratio_lo: float
    ratio_hi: float
    direction: str  # "up", "down", "within rounding", "below threshold"
    like_for_like: bool
    changed_fields: dict[str, tuple[int | None, int | None]]
    unknown_fields: tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def real_change(self) -> bool:
        return self.direction in ("up", "down")

    @property
    def mark(self) -> str:
        """``▲``/``▼`` real change, ``=`` within rounding, ``~`` beyond rounding but below the threshold; ``†`` not
        like-for-like."""
        m = {"up": "▲", "down": "▼", "within rounding": "="}.get(self.direction, "~")
        return m + ("" if self.like_for_like else "†")


def ratio_interval(a: Interval, b: Interval) -> tuple[float, float, float]:
    """Point ratio ``b/a`` and the interval ``[b.lo / a.hi, b.hi / a.lo]`` of every ratio the rounding allows."""
    return b.value / a.value, b.lo / a.hi, b.hi / a.lo


#: ``(model_name, seq_length, tp, formula_a, formula_b) -> True`` when the model's FLOPs/token is the same under both
#: formulas; None when unknown. :mod:`bridgebench.results.compare` supplies one built on ``bridgebench.model.flops``.
FormulaEquivalence = Callable[[str, int, int, str, str], "bool | None"]


def compare_step(
    a: SeriesPoint, b: SeriesPoint, threshold: float = 0.01, same_count: FormulaEquivalence | None = None
) -> StepComparison:
    """Compare two releases of one key (rules in the module docstring).

    Args:
        threshold: relative change a real change must exceed (dimensionless, >= 0).
        same_count: tells whether a FLOPs-formula change leaves this model's count unchanged (then TFLOP/s stay
            comparable); without it any formula change switches to tokens/s.

    Raises:
        CompareError: a negative threshold.
    """
    if not threshold >= 0:
        raise CompareError(f"threshold must be >= 0, got {threshold!r}")
    reason = ""
    use_tflops = a.tflops is not None and b.tflops is not None
    if not use_tflops:
        reason = "TFLOP/s not published in both releases"
    elif a.formula == b.formula:
        reason = f"same FLOPs formula ({a.formula})"
    else:
        equal = None
        if same_count is not None and a.model_name and a.model_name == b.model_name:
            equal = same_count(
                a.model_name, int(b.recipe["seq_length"]), int(b.recipe["tp"] or 1), a.formula, b.formula
            )
        if equal:
            reason = f"FLOPs formula {a.formula} -> {b.formula} counts {a.model_name} the same"
        else:
            use_tflops = False
            reason = f"FLOPs formula changed ({a.formula} -> {b.formula})" + (
                "" if equal is False else "; bridgebench cannot count this model, so tokens/s"
            )
    metric, va, vb = ("tflops", a.tflops, b.tflops) if use_tflops else ("tokens", a.tokens, b.tokens)
    r, lo, hi = ratio_interval(va, vb)
    if lo > 1 + threshold:
        direction = "up"
    elif hi < 1 - threshold:
        direction = "down"
    elif lo <= 1 <= hi:
        direction = "within rounding"
    else:
        direction = "below threshold"
    changed, unknown = {}, []
    for f in LIKE_FOR_LIKE_FIELDS + PUBLISHED_RECIPE_FACTS:
        x, y = a.recipe.get(f), b.recipe.get(f)
        if x != y:
            if f != "vp" and (x is None or y is None):
                unknown.append(f)
            else:
                changed[f] = (x, y)
    return StepComparison(
        release_a=a.release,
        release_b=b.release,
        metric=metric,
        metric_reason=reason,
        value_a=va,
        value_b=vb,
        ratio=r,
        ratio_lo=lo,
        ratio_hi=hi,
        direction=direction,
        like_for_like=not changed,
        changed_fields=changed,
        unknown_fields=tuple(unknown),
        params={
            "threshold": threshold,
            "rounding_a": va.rule,
            "rounding_b": vb.rule,
            "references": [a.reference, b.reference],
        },
    )


def compare_adjacent(
    series: Sequence[SeriesPoint], threshold: float = 0.01, same_count: FormulaEquivalence | None = None
) -> list[StepComparison]:
    """:func:`compare_step` for each adjacent pair of a release series."""
    return [compare_step(a, b, threshold, same_count) for a, b in zip(series[:-1], series[1:])]


def chained_index(series: Sequence[SeriesPoint], steps: Sequence[StepComparison]) -> np.ndarray:
    """A throughput index comparable across FLOPs-formula changes, shape ``(len(series),)``: the first release's
    TFLOP/s/GPU (tokens/s/GPU if it has none) times the product of the step ratios so far. It equals the published
    TFLOP/s until the first step that had to be measured on tokens/s."""
    if not series:
        return np.array([])
    start = series[0].tflops.value if series[0].tflops is not None else series[0].tokens.value
    return start * np.cumprod([1.0] + [s.ratio for s in steps])


@dataclass(frozen=True)
class ChangePoints:
    """Change points of a release series: ``releases[i]`` is the first release of a new segment."""

    releases: tuple[str, ...]
    indices: tuple[int, ...]
    segment_means: tuple[float, ...]  # chained-index units
    status: str  # "ok" or "too short (n < 3)"
    params: dict[str, Any] = field(default_factory=dict)


def detect_change_points(
    series: Sequence[SeriesPoint],
    steps: Sequence[StepComparison],
    noise_cv: float = 0.01,
    penalty_scale: float = 2.0,
    min_size: int = 1,
) -> ChangePoints:
    """Change points by ``ruptures.Pelt(model="l2", min_size=min_size, jump=1)`` on ``log(chained_index)``.

    Why PELT and not Otava's E-divisive (the research notes' choice for long series): a release series has 3-9 points.
    E-divisive tests each split with a t-test on the spread *within* segments (Otava, ``window_len=50``,
    ``max_pvalue=0.001``); published values have almost no within-segment spread, so it flags tiny steps at loose
    p and misses the newest ones at strict p. PELT finds the exact optimum of cost + penalty, is deterministic, allows
    one-point segments (a step at the newest release can be flagged) and its rule is readable: one split into sizes
    n1, n2 is kept iff ``delta**2 * n1 * n2 / n > penalty`` (``delta`` = change in log throughput).

    Penalty: ``penalty_scale * sigma**2 * log(n)`` (BIC-type, for known noise), ``sigma**2 = noise_cv**2 +
    max_rel_halfwidth**2 / 3`` -- an assumed run-to-run CV of a published number (NVIDIA publishes none) plus the
    variance of a uniform rounding error of the coarsest value used. Series of fewer than 3 points: no change points,
    ``status="too short (n < 3)"``.

    Raises:
        CompareError: ``noise_cv`` < 0.
    """
    if not noise_cv >= 0:
        raise CompareError(f"noise_cv must be >= 0, got {noise_cv!r}")
    import ruptures as rpt

    n = len(series)
    params: dict[str, Any] = {
        "method": "ruptures.Pelt",
        "model": "l2",
        "min_size": min_size,
        "jump": 1,
        "noise_cv": noise_cv,
        "penalty_scale": penalty_scale,
        "n": n,
    }
    idx = chained_index(series, steps)
    if n < 3:
        return ChangePoints((), (), tuple(float(x) for x in idx), "too short (n < 3)", params)
    half = max(max(s.value_a.rel_halfwidth, s.value_b.rel_halfwidth) for s in steps)
    sigma2 = noise_cv**2 + half**2 / 3
    pen = penalty_scale * sigma2 * math.log(n)
    params |= {"sigma": math.sqrt(sigma2), "penalty": pen}
    y = np.log(idx).reshape(-1, 1)
    bkps = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(y).predict(pen=pen)
    cps = tuple(int(b) for b in bkps[:-1])
    bounds = (0, *cps, n)
    means = tuple(float(np.exp(y[s:e].mean())) for s, e in zip(bounds[:-1], bounds[1:]))
    return ChangePoints(tuple(series[i].release for i in cps), cps, means, "ok", params)


# --------------------------------------------------------------------------------------------------------------------
# Own runs
# --------------------------------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class RunComparison:
    """Side B vs side A on per-iteration values. ``ratio = S(B) / S(A)`` (module docstring)."""

    verdict: str
    ratio: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None  # two-sided; Welch t on the bootstrap SE of log(ratio); used for FDR
    n_runs: tuple[int, int]
    side_values: tuple[float, float]  # S(A), S(B), in the metric's unit
    between_run_cv: float | None  # pooled CV of the run-level statistics
    mannwhitney_runs_p: float | None
    mannwhitney_iterations_p: float | None  # dependent samples: informational only
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
    if kind not in ("time", "throughput"):
        raise CompareError(f"kind must be 'time' or 'throughput', got {kind!r}")
    if bootstrap not in ("stationary", "moving"):
        raise CompareError(f"bootstrap must be 'stationary' or 'moving', got {bootstrap!r}")
    if small_sample not in ("expanded", "none"):
        raise CompareError(f"small_sample must be 'expanded' or 'none', got {small_sample!r}")
    if not 0 < confidence < 1 or not threshold >= 0 or n_resamples < 100 or n_inner < 1 or min_runs < 2:
        raise CompareError("need 0 < confidence < 1, threshold >= 0, n_resamples >= 100, n_inner >= 1, min_runs >= 2")
    from arch.bootstrap import MovingBlockBootstrap, StationaryBootstrap, optimal_block_length

    alpha = 1 - confidence
    f = _run_stat(stat)
    sides = [_check_runs(a, "A"), _check_runs(b, "B")]
    run_stats = [np.array([f(r) for r in side]) for side in sides]
    n_a, n_b = len(sides[0]), len(sides[1])
    cv = _pooled_cv(run_stats)
    effect = power_effect if power_effect is not None else max(threshold, 0.02)
    side_values = (float(run_stats[0].mean()), float(run_stats[1].mean()))
    ratio = side_values[1] / side_values[0]
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
        "power_effect": effect,
        "assumed_cv": assumed_cv,
        "seed": seed,
        "ci_method": "percentile on log ratio, two-level bootstrap",
        "iterations_per_run": [[len(r) for r in side] for side in sides],
        "versions": library_versions(),
    }
    if min(n_a, n_b) < min_runs:
        need = repeats_needed(cv if cv is not None else assumed_cv, effect, alpha, power, min_runs)
        cv_src = f"observed {cv:.2%}" if cv is not None else f"assumed {assumed_cv:.0%}: no side has 2 runs"
        return RunComparison(
            "insufficient",
            ratio,
            None,
            None,
            None,
            (n_a, n_b),
            side_values,
            cv,
            None,
            None,
            need,
            f"insufficient: {n_a} vs {n_b} runs (fewer than {min_runs} per side); need {need} runs per side to "
            f"detect a {effect:.1%} change with power {power:.0%} at alpha {alpha:g} (between-run CV {cv_src})",
            params=params,
        )

    if all(np.ptp(np.concatenate(side)) == 0 for side in sides):  # nothing varies: nothing to test (not p = 0)
        values = ", ".join(f"{n} {np.unique(np.concatenate(sd)).tolist()[:3]}" for n, sd in zip("AB", sides))
        return RunComparison(
            NO_SPREAD,
            ratio,
            None,
            None,
            None,
            (n_a, n_b),
            side_values,
            cv,
            None,
            None,
            None,
            f"no spread: every value on both sides is identical within its side ({values}); the ratio "
            f"{ratio:.4f} is exact arithmetic, but identical repeats say nothing about run-to-run noise, so no test "
            "can be made (check that the repeats really ran: a cached result, a timer's resolution, a copied log)",
            params=params,
        )
    rng = np.random.default_rng(seed)
    if block_length is None:
        col = "stationary" if bootstrap == "stationary" else "circular"
        bls = [float(optimal_block_length(r)[col].iloc[0]) for side in sides for r in side if len(r) >= 10]
        block_length = max(1.0, float(np.median(bls))) if bls else 1.0
    params["block_length"] = float(block_length)
    cls = StationaryBootstrap if bootstrap == "stationary" else MovingBlockBootstrap
    blk = float(block_length) if bootstrap == "stationary" else max(1, round(block_length))

    inner = []  # per side: (runs, n_inner) replicates of each run's statistic
    for side in sides:
        reps = []
        for r in side:
            child = np.random.default_rng(rng.integers(2**63))
            if len(r) < 2:
                reps.append(np.full(n_inner, f(r)))
            else:
                reps.append(cls(blk, r, seed=child).apply(lambda x: np.array([f(x)]), n_inner)[:, 0])
        inner.append(np.vstack(reps))
    log_side, var_side = [], []
    for i, reps in enumerate(inner):
        n = reps.shape[0]
        pick_run = rng.integers(0, n, size=(n_resamples, n))
        pick_rep = rng.integers(0, n_inner, size=(n_resamples, n))
        boot = np.log(reps[pick_run, pick_rep].mean(axis=1))
        if small_sample == "expanded":  # undo the (n-1)/n variance of resampling n runs
            boot = math.log(side_values[i]) + math.sqrt(n / (n - 1)) * (boot - boot.mean())
        log_side.append(boot)
        var_side.append(float(boot.var()))
    log_ratio = log_side[1] - log_side[0]
    den = var_side[0] ** 2 / (n_a - 1) + var_side[1] ** 2 / (n_b - 1)
    df_w = (var_side[0] + var_side[1]) ** 2 / den if den > 0 else float(n_a + n_b - 2)
    se = float(log_ratio.std())
    if small_sample == "expanded":
        fac = float(stats.t.ppf(1 - alpha / 2, df_w) / stats.norm.ppf(1 - alpha / 2))
        centre = math.log(ratio)
        log_ratio = centre + fac * (log_ratio - centre)
        params["expansion_t_over_z"] = fac
    lo, hi = (float(x) for x in np.exp(np.quantile(log_ratio, [alpha / 2, 1 - alpha / 2])))
    k = min(int((log_ratio <= 0).sum()), int((log_ratio >= 0).sum()))
    p_pct = min(1.0, 2 * (k + 1) / (n_resamples + 1))
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
    verdict = _verdict(ratio, lo > 1, hi < 1, threshold, kind)
    reason = (
        f"{confidence:.0%} CI [{lo:.4f}, {hi:.4f}] {'excludes' if lo > 1 or hi < 1 else 'includes'} 1; "
        f"|ratio - 1| = {abs(ratio - 1):.2%} vs threshold {threshold:.1%}"
    )
    need = repeats_needed(cv, effect, alpha, power, min_runs) if cv is not None else None
    return RunComparison(
        verdict, ratio, lo, hi, p, (n_a, n_b), side_values, cv, mw_runs, mw_iter, need, reason, params=params
    )


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
