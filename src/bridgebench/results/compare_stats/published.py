"""Published values as intervals, release series of one configuration key, adjacent-release steps and change
points (the published half of :mod:`bridgebench.results.compare_stats`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridgebench.config.catalog import release_sort_key, releases
from bridgebench.results.compare_stats.base import LIKE_FOR_LIKE_FIELDS, PUBLISHED_RECIPE_FACTS, CompareError
from bridgebench.results.records import RunRecord


@dataclass(frozen=True, kw_only=True)
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
        return Interval(value=value, lo=value - 0.5, hi=value + 0.5, rule="integer")
    if rule == "whole_sequences_per_job":
        half = 0.5 * seq_length / num_gpus
        seq_s = value * num_gpus / seq_length
        return Interval(value=value, lo=value - half, hi=value + half, rule=f"whole_sequences_per_job(seq_s={seq_s:g})")
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


@dataclass(frozen=True, kw_only=True)
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
    return ConfigKey(
        model=r.model or r.model_label,
        gpu=r.system or "unknown",
        precision=r.precision,
        num_gpus=r.num_gpus,
        optimizer=r.optimizer,
    )


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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
        return ChangePoints(
            releases=(),
            indices=(),
            segment_means=tuple(float(x) for x in idx),
            status="too short (n < 3)",
            params=params,
        )
    half = max(max(s.value_a.rel_halfwidth, s.value_b.rel_halfwidth) for s in steps)
    sigma2 = noise_cv**2 + half**2 / 3
    pen = penalty_scale * sigma2 * math.log(n)
    params |= {"sigma": math.sqrt(sigma2), "penalty": pen}
    y = np.log(idx).reshape(-1, 1)
    bkps = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(y).predict(pen=pen)
    cps = tuple(int(b) for b in bkps[:-1])
    bounds = (0, *cps, n)
    means = tuple(float(np.exp(y[s:e].mean())) for s, e in zip(bounds[:-1], bounds[1:]))
    return ChangePoints(
        releases=tuple(series[i].release for i in cps), indices=cps, segment_means=means, status="ok", params=params
    )
