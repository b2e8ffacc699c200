"""Published release histories: one :class:`History` per :class:`~bridgebench.results.compare_stats.ConfigKey` of
NVIDIA's tables that matches a selection, its steps marked, the rows left out and why, and the release x config
speedup matrix."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bridgebench.config.catalog import release_sort_key
from bridgebench.errors import BridgebenchError
from bridgebench.paths import REPO_ROOT
from bridgebench.results import compare_stats as cs
from bridgebench.results.compare.selection import Selection, published_matches
from bridgebench.results.compare_stats import CompareError, ConfigKey, RunComparison
from bridgebench.results.records import PUBLISHED_CSV, RunRecord


@functools.cache
def same_flops_count(model: str, seq_length: int, tp: int, formula_a: str, formula_b: str) -> bool | None:
    """True when ``model`` (a ``configs/model`` name) at ``seq_length`` and TP ``tp`` has the same model FLOPs/token
    under both formula versions (:mod:`bridgebench.model.flops`); None when bridgebench cannot count it."""
    from bridgebench.config.compose import compose, model_spec
    from bridgebench.model.flops import model_flops_per_token

    try:
        spec = model_spec(compose([f"model={model}"])).replace(seq_length=seq_length)
        fa = model_flops_per_token(spec, tensor_model_parallel_size=tp, formula=formula_a)
        fb = model_flops_per_token(spec, tensor_model_parallel_size=tp, formula=formula_b)
    except BridgebenchError:
        return None
    return fa == fb


@dataclass(kw_only=True)
class OwnRelease:
    """Your runs of one key and release beside the published value (source ``both``)."""

    release: str
    metric: str  # "tflops" or "tokens"
    n_runs: int
    value: float  # mean of run medians
    ci_low: float | None
    ci_high: float | None
    published: cs.Interval | None
    ratio_to_published: float | None
    ratio_lo: float | None
    ratio_hi: float | None
    verdict: str  # "consistent with published", "above published", "below published", "no published row", ...
    record_ids: list[str]


@dataclass(kw_only=True)
class History:
    """One config key's published release history (and your runs of it, for source ``both``)."""

    key: ConfigKey
    points: list[cs.SeriesPoint]
    steps: list[cs.StepComparison]
    change_points: cs.ChangePoints
    index: np.ndarray
    own: list[OwnRelease] = field(default_factory=list)
    own_steps: list[tuple[str, str, RunComparison]] = field(default_factory=list)

    def frame(self) -> pd.DataFrame:
        """One row per release: values with their intervals, the step from the previous release, marks."""
        rows = []
        own = {o.release: o for o in self.own}
        for i, p in enumerate(self.points):
            s = self.steps[i - 1] if i else None
            o = own.get(p.release)
            rows.append(
                {
                    "model": self.key.model,
                    "gpu": self.key.gpu,
                    "precision": self.key.precision,
                    "num_gpus": self.key.num_gpus,
                    "optimizer": self.key.optimizer,
                    "release": p.release,
                    "flops_formula": p.formula,
                    "tflops": p.tflops.value if p.tflops else None,
                    "tflops_lo": p.tflops.lo if p.tflops else None,
                    "tflops_hi": p.tflops.hi if p.tflops else None,
                    "tokens": p.tokens.value,
                    "tokens_lo": p.tokens.lo,
                    "tokens_hi": p.tokens.hi,
                    "tokens_rounding": p.tokens.rule,
                    "step_metric": s.metric if s else None,
                    "step_metric_reason": s.metric_reason if s else None,
                    "ratio": s.ratio if s else None,
                    "ratio_lo": s.ratio_lo if s else None,
                    "ratio_hi": s.ratio_hi if s else None,
                    "direction": s.direction if s else None,
                    "real_change": s.real_change if s else None,
                    "mark": s.mark if s else "",
                    "like_for_like": s.like_for_like if s else None,
                    "config_changes": ", ".join(f"{k} {a}->{b}" for k, (a, b) in s.changed_fields.items()) if s else "",
                    "unknown_fields": ",".join(s.unknown_fields) if s else "",
                    "index": float(self.index[i]),
                    "change_point": i in self.change_points.indices,
                    **{f: p.recipe.get(f) for f in cs.LIKE_FOR_LIKE_FIELDS + cs.PUBLISHED_RECIPE_FACTS},
                    "precision_inferred": p.precision_inferred,
                    "reference": p.reference,
                    "alternates": ";".join(p.alternates),
                    "own_runs": o.n_runs if o else None,
                    "own_value": o.value if o else None,
                    "own_ci_low": o.ci_low if o else None,
                    "own_ci_high": o.ci_high if o else None,
                    "own_vs_published": o.verdict if o else None,
                }
            )
        return pd.DataFrame(rows)


def reference_provenance(path: Path) -> dict[str, Any]:
    data = Path(path).read_bytes()
    try:
        shown = str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        shown = str(path)
    return {"file": shown, "sha256": hashlib.sha256(data).hexdigest()}


def _describe_keys(records: Sequence[RunRecord]) -> str:
    by_key: dict[ConfigKey, list[str]] = {}
    for r in records:
        k = cs.record_key(r)
        if k is not None:
            by_key.setdefault(k, []).append(r.release)
    if not by_key:
        return "none"
    return "; ".join(
        f"{k.label()} ({', '.join(sorted(set(v), key=release_sort_key))})"
        for k, v in sorted(by_key.items(), key=lambda kv: kv[0].label())
    )


def published_keys(records: Sequence[RunRecord], sel: Selection) -> list[ConfigKey]:
    """Config keys with a published row matching ``sel`` (release filter included), sorted by label.

    Raises:
        CompareError: nothing matches -- naming the selection and listing what is published for the nearest match
            (the same model, else the same GPU).
    """
    keys = sorted(
        {k for r in records if published_matches(r, sel) and (k := cs.record_key(r)) is not None},
        key=lambda k: k.label(),
    )
    if keys:
        return keys
    hint = ""
    for anchor in ("model", "gpu"):
        if sel.get(anchor):
            near = [r for r in records if published_matches(r, Selection(items=((anchor, sel.get(anchor)),)))]
            hint = f"; published for {anchor}={','.join(sel.get(anchor))}: {_describe_keys(near)}"
            break
    raise CompareError(f"no published row matches {sel.text()} (keys with no overlap){hint}")


def published_history(
    records: Sequence[RunRecord],
    key: ConfigKey,
    *,
    sel: Selection = Selection(),
    threshold: float = 0.01,
    noise_cv: float = 0.01,
) -> History:
    """The history of one key (releases restricted by ``sel``'s ``release`` values), steps and change points."""
    series = cs.published_series(records, key)
    rels = sel.get("release")
    if rels:
        series = [p for p in series if p.release in rels]
    steps = cs.compare_adjacent(series, threshold, same_flops_count)
    cps = cs.detect_change_points(series, steps, noise_cv=noise_cv)
    return History(key=key, points=series, steps=steps, change_points=cps, index=cs.chained_index(series, steps))


def left_out_rows(
    records: Sequence[RunRecord], histories: Sequence[History], sel: Selection, reference: Path = PUBLISHED_CSV
) -> list[dict[str, Any]]:
    """Published rows that match ``sel`` but are in no history, each with why: a row without tokens/s
    (:func:`bridgebench.results.records.skipped_published`), a row that states no precision its release can infer,
    or another row of the same key and release that the history did not choose (``alternates``)."""
    from types import SimpleNamespace

    from bridgebench.results.records import skipped_published

    out = []
    for row in skipped_published(reference):
        if published_matches(SimpleNamespace(**row), sel):
            out.append(_left(row["reference"], row["release"], row["model"] or row["model_label"], row))
    for r in records:
        if cs.record_key(r) is None and published_matches(r, sel):
            row = {"reason": "no precision stated and none inferred for its release"}
            out.append(_left(str(r.provenance.get("reference", "")), r.release, r.model or r.model_label, row))
    for h in histories:
        for p in h.points:
            for ref in p.alternates:
                why = {"reason": f"another row of the same key and release was used ({p.reference})"}
                out.append(_left(ref, p.release, h.key.label(), why))
    return sorted(out, key=lambda d: int(d["reference"].rsplit("#", 1)[1]) if "#" in d["reference"] else 0)


def _left(reference: str, release: str, label: str, row: Mapping[str, Any]) -> dict[str, Any]:
    return {"reference": reference, "release": release, "label": label, "reason": row["reason"]}


def speedup_matrix(histories: Sequence[History]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Config x release matrices for the heatmap: ``ratio`` (vs the previous release the config was published in; NaN
    where none), ``real`` (real change) and ``like`` (like-for-like)."""
    rels = sorted({p.release for h in histories for p in h.points}, key=release_sort_key)
    index = [h.key.label() for h in histories]
    ratio = pd.DataFrame(np.nan, index=index, columns=rels)
    real = pd.DataFrame(False, index=index, columns=rels)
    like = pd.DataFrame(True, index=index, columns=rels)
    for h in histories:
        for s in h.steps:
            ratio.loc[h.key.label(), s.release_b] = s.ratio
            real.loc[h.key.label(), s.release_b] = s.real_change
            like.loc[h.key.label(), s.release_b] = s.like_for_like
    return ratio, real, like
