"""``bridgebench compare``: published release histories and your own runs, with the statistics of
:mod:`bridgebench.results.compare_stats`, written as tables, plots and a provenance file.

Sources:

* **published** -- NVIDIA's per-release tables (``configs/paths`` ``reference``), one history per
  :class:`~bridgebench.results.compare_stats.ConfigKey` (model, GPU, precision, GPU count, optimizer) that matches the
  selection, every value an interval, every step marked (real change, within rounding, below threshold,
  not like-for-like with the changed fields), change points flagged.
* **runs** -- records of the results store (``configs/paths`` ``results``). Either two sides chosen by filters
  (``--a optimizer=adamw --b optimizer=muon``) compared with :func:`~bridgebench.results.compare_stats.compare_runs`
  (for optimizer-step records also per matrix family, FDR-controlled together), or, without sides, each config key's
  own release history (adjacent releases compared, FDR across all steps).
* **both** -- the published history with your runs of the same key beside it: per release your mean with a CI and
  its ratio to the published interval.

Per-iteration values of a record: ``record["series"]`` = ``{"iteration": [...], "step_time_s": [...],
"tflops_per_gpu": [... or null]}`` (written by ``bridgebench collect``); an optimizer-step record without one falls
back to the per-repeat times of its payload, a record with neither to its single run-level figure (then the run has
no within-run spread and the inner bootstrap level is skipped for it).

Everything a result used is listed in its provenance: reference rows (``<file>#<data row>``) with the file's sha256,
store record ids, parameters, seed and library versions. Same command, same store: same tables.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import math
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bridgebench.config.catalog import options, precision_names, release_sort_key, releases
from bridgebench.errors import BridgebenchError
from bridgebench.model.optimizer import family
from bridgebench.paths import REPO_ROOT
from bridgebench.results import compare_stats as cs
from bridgebench.results.compare_stats import CompareError, ConfigKey, RunComparison
from bridgebench.results.optstep_series import optstep_series
from bridgebench.results.optstep_stats import CONTENDED_OTHER_SHARE
from bridgebench.results.outcomes import label, outcome_of, skip_line, usable
from bridgebench.results.records import PUBLISHED_CSV, RunRecord, load_published

SOURCES = ("auto", "published", "runs", "both")
#: Record fields two sides must share unless the selection names them (else the comparison is not like-for-like).
SIDE_KEY_FIELDS = ("kind", "model", "gpu", "device", "precision", "num_gpus", "global_batch_size", "seq_length")
#: ``--metric`` choices: (kind, description). Optimizer-step metrics read the payload's ``total`` (and families).
METRICS: dict[str, tuple[str, str]] = {
    "step_time": ("time", "seconds per step (optimizer-step records: one step of the record's optimizer)"),
    "tflops": ("throughput", "model TFLOP/s per GPU as logged per iteration"),
    "tokens": ("throughput", "tokens/s per GPU = global_batch_size x seq_length / (step time x num_gpus)"),
    "muon_step": ("time", "optimizer-step records: seconds of one Muon step"),
    "adamw_step": ("time", "optimizer-step records: seconds of one AdamW step"),
    "ns_time": ("time", "optimizer-step records: seconds of Newton-Schulz alone"),
}
_OPTSTEP_LISTS = {"muon_step": "muon_step_times_s", "adamw_step": "adamw_step_times_s", "ns_time": "ns_times_s"}
#: Aliases of selection keys on store records (left: what users type, Hydra / Megatron-Bridge names; right: field).
RUN_KEY_ALIASES = {
    "system": "gpu",
    "gpus": "num_gpus",
    "train.global_batch_size": "global_batch_size",
    "gbs": "global_batch_size",
    "model.seq_length": "seq_length",
    "seq_len": "seq_length",
    "config_hash": "provenance.config_hash",
    "hash": "provenance.config_hash",
    "release": "provenance.release",
    "experiment_id": "provenance.experiment_id",
    "run_id": "provenance.run_id",
}


# --------------------------------------------------------------------------------------------------------------------
# Selection
# --------------------------------------------------------------------------------------------------------------------


def _norm(text: Any) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


@dataclass(frozen=True)
class Selection:
    """``key=value`` filters (values: comma-separated alternatives; ``release=A..B`` a range, inclusive).

    ``model``, ``gpu`` (``system``), ``precision``, ``num_gpus`` (``gpus``), ``optimizer`` and ``release`` are checked
    against the shipped catalogue; on store records any other key is a field path (``optstep.layers``,
    ``provenance.node_list``; ``job.X`` means ``optstep.X``; aliases in :data:`RUN_KEY_ALIASES`).
    """

    items: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.items)

    def get(self, key: str) -> tuple[str, ...] | None:
        return dict(self.items).get(key)

    def __add__(self, other: Selection) -> Selection:
        merged = dict(self.items)
        merged.update(other.items)
        return Selection(tuple(merged.items()))

    def text(self) -> str:
        return " ".join(f"{k}={','.join(v)}" for k, v in self.items) or "(everything)"


def _expand_releases(values: Sequence[str]) -> tuple[str, ...]:
    known = list(releases())
    out: list[str] = []
    for v in values:
        lo, sep, hi = v.partition("..")
        ends = [lo, hi] if sep else [v]
        for e in ends:
            if e and e not in known:
                raise CompareError(f"release {e!r} does not exist; known releases: {known}")
        if sep:
            a = known.index(lo) if lo else 0
            b = known.index(hi) if hi else len(known) - 1
            if a > b:
                raise CompareError(f"release range {v!r} is empty (from {lo} to {hi}); known releases: {known}")
            out += known[a : b + 1]
        else:
            out.append(v)
    return tuple(dict.fromkeys(out))


def parse_selection(tokens: Iterable[str] | str | None) -> Selection:
    """Parse ``key=value`` tokens (a string is split on whitespace) into a :class:`Selection`.

    Values are checked where the catalogue knows them: a model must be a ``configs/model`` name or a published model
    label, a GPU a ``configs/gpu`` name or published system, a precision a ``configs/precision`` spelling, an optimizer
    Muon or AdamW, ``num_gpus`` a positive integer, a release a ``configs/release`` name.

    Raises:
        CompareError: a token without ``=``, an empty value, or a value the catalogue does not know (listing the
            known ones).
    """
    if tokens is None:
        return Selection()
    if isinstance(tokens, str):
        tokens = tokens.split()
    items: dict[str, tuple[str, ...]] = {}
    for tok in tokens:
        key, sep, raw = str(tok).partition("=")
        key = key.strip().lstrip("+")
        values = tuple(v.strip().strip("'\"") for v in raw.split(",") if v.strip())
        if not sep or not key or not values:
            raise CompareError(f"selection {tok!r}: expected key=value (e.g. model=kimi_k2 gpu=gb300 release=26.04)")
        key = {"system": "gpu", "gpus": "num_gpus"}.get(key, key)
        if key == "model":
            known = set(options("model")) | {_norm(x) for x in _published_labels("model")}
            bad = [v for v in values if v not in known and _norm(v) not in known]
            if bad:
                raise CompareError(
                    f"unknown model {bad[0]!r}; configs/model: {options('model')}; published labels: "
                    f"{sorted(_published_labels('model'))}"
                )
        elif key == "gpu":
            values = tuple(_norm(v).removeprefix("dgx_") for v in values)
            bad = [v for v in values if v not in options("gpu")]
            if bad:
                raise CompareError(f"unknown gpu {bad[0]!r}; known: {options('gpu')}")
        elif key == "precision":
            names = precision_names()
            bad = [v for v in values if v not in names and v.lower() not in names]
            if bad:
                raise CompareError(f"unknown precision {bad[0]!r}; known: {options('precision')}")
            values = tuple(names.get(v) or names[v.lower()] for v in values)
        elif key == "optimizer":
            values = tuple(family(v) for v in values)
            bad = [v for v in values if v not in ("adamw", "muon")]
            if bad:
                raise CompareError(f"unknown optimizer {bad[0]!r}; compare knows adamw (adam) and muon (dist_muon)")
        elif key == "num_gpus":
            if not all(v.isdigit() and int(v) > 0 for v in values):
                raise CompareError(f"num_gpus must be positive integers, got {','.join(values)}")
        elif key == "release":
            values = _expand_releases(values)
        items[key] = values
    return Selection(tuple(items.items()))


@functools.cache
def _published_labels(column: str) -> frozenset[str]:
    df = pd.read_csv(PUBLISHED_CSV, dtype=str, usecols=[column])
    return frozenset(df[column].dropna())


def _published_matches(r: RunRecord, sel: Selection) -> bool:
    for key, values in sel.items:
        if key == "model":
            ok = any(_norm(v) in (_norm(r.model or ""), _norm(r.model_label)) for v in values)
        elif key == "gpu":
            ok = r.system in values
        elif key == "precision":
            ok = r.precision in values
        elif key == "num_gpus":
            ok = str(r.num_gpus) in values
        elif key == "optimizer":
            ok = r.optimizer in values
        elif key == "release":
            ok = r.release in values
        else:
            raise CompareError(
                f"selection key {key!r} does not apply to published rows; they have model, gpu, "
                "precision, num_gpus, optimizer, release"
            )
        if not ok:
            return False
    return True


# --------------------------------------------------------------------------------------------------------------------
# Published histories
# --------------------------------------------------------------------------------------------------------------------


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


@dataclass
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


@dataclass
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


def _reference_provenance(path: Path) -> dict[str, Any]:
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
        {k for r in records if _published_matches(r, sel) and (k := cs.record_key(r)) is not None},
        key=lambda k: k.label(),
    )
    if keys:
        return keys
    hint = ""
    for anchor in ("model", "gpu"):
        if sel.get(anchor):
            near = [r for r in records if _published_matches(r, Selection(((anchor, sel.get(anchor)),)))]
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
    return History(key, series, steps, cps, cs.chained_index(series, steps))


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
        if _published_matches(SimpleNamespace(**row), sel):
            out.append(_left(row["reference"], row["release"], row["model"] or row["model_label"], row))
    for r in records:
        if cs.record_key(r) is None and _published_matches(r, sel):
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


# --------------------------------------------------------------------------------------------------------------------
# Own runs: per-iteration values of a record
# --------------------------------------------------------------------------------------------------------------------


def _get_path(record: Mapping[str, Any], path: str) -> Any:
    node: Any = record
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def record_values(record: Mapping[str, Any], metric: str, *, optstep_family: str = "total") -> np.ndarray | None:
    """The per-iteration values of ``metric`` in one store record, shape ``(iterations,)``, or None when it has none.

    Series values are restricted to the record's steady window (``record["window"]`` first..last iteration, set by
    collect's log / TensorBoard parser, warm-up excluded) when it has one; optimizer-step series (the payload's timed
    repeats, warm-up already untimed) are taken whole.

    ``step_time`` (s): ``series.step_time_s``; optimizer-step records without a series: their optimizer's per-repeat
    times, else its median (one value); other records without a series: ``step_time_s`` (one value).
    ``tflops`` (TFLOP/s/GPU): ``series.tflops_per_gpu`` (nulls dropped), else ``tflops_per_gpu`` (one value).
    ``tokens`` (tokens/s/GPU): from the step times, ``global_batch_size * seq_length / (step * num_gpus)`` (not for
    optimizer-step records: one optimizer step processes no tokens).
    ``muon_step`` / ``adamw_step`` / ``ns_time`` (s): optimizer-step payload (``optstep_family`` = ``total`` or a
    matrix family), per-repeat lists when kept, else the median.

    Raises:
        CompareError: an unknown metric.
    """
    if metric not in METRICS:
        raise CompareError(f"unknown metric {metric!r}; known: {list(METRICS)}")
    series = record.get("series") if isinstance(record.get("series"), Mapping) else None
    payload = record.get("optstep") if isinstance(record.get("optstep"), Mapping) else None

    def arr(values: Any) -> np.ndarray | None:
        if values is None:
            return None
        if not isinstance(values, (list, tuple)):
            values = [values]
        x = np.array([float(v) for v in values if v is not None], dtype=float)
        return x if len(x) else None

    def from_series(key: str) -> np.ndarray | None:
        values = series.get(key) if series is not None else None
        if not isinstance(values, (list, tuple)):
            return None
        its = series.get("iteration") or list(range(1, len(values) + 1))
        lo, hi = _window(record)
        x = [float(v) for i, v in zip(its, values) if v is not None and (lo is None or lo <= i <= hi)]
        return np.array(x, dtype=float) if x else None

    if metric in _OPTSTEP_LISTS:
        if payload is None:
            return None
        fam = payload.get("total") if optstep_family == "total" else (payload.get("families") or {}).get(optstep_family)
        if not fam:
            return None
        return arr(fam.get(_OPTSTEP_LISTS[metric])) if fam.get(_OPTSTEP_LISTS[metric]) else arr(fam.get(metric + "_s"))
    if metric == "tflops":
        x = from_series("tflops_per_gpu")
        return x if x is not None else arr(record.get("tflops_per_gpu"))
    if payload is not None and optstep_family != "total":
        opt = "muon_step" if family(str(record.get("optimizer"))) == "muon" else "adamw_step"
        return record_values(record, opt, optstep_family=optstep_family)
    steps = from_series("step_time_s")
    if steps is None and payload is not None:
        s = optstep_series(payload, str(record.get("optimizer")))
        steps = (
            arr(s["step_time_s"])
            if s
            else record_values(record, "muon_step" if family(str(record.get("optimizer"))) == "muon" else "adamw_step")
        )
    if steps is None:
        steps = arr(record.get("step_time_s"))
    if steps is None or metric == "step_time" or payload is not None:  # tokens/s: not of an optimizer step alone
        return steps if metric == "step_time" else None
    try:
        tokens = int(record["global_batch_size"]) * int(record["seq_length"]) / int(record["num_gpus"])
    except (KeyError, TypeError, ValueError):
        return None
    return tokens / steps


def _window(record: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """First and last iteration of the record's steady window (None, None: none, or an optimizer-step record, whose
    log iterations are per-family Muon steps, not the repeats of its series)."""
    win = record.get("window")
    if record.get("kind") == "optstep" or not isinstance(win, Mapping):
        return None, None
    lo, hi = win.get("first_iteration"), win.get("last_iteration")
    return (int(lo), int(hi)) if isinstance(lo, int) and isinstance(hi, int) else (None, None)


def run_values(
    record: Mapping[str, Any], metric: str, *, skip_fraction: float = 0.1, optstep_family: str = "total"
) -> np.ndarray | None:
    """:func:`record_values` of one run as compared: within its steady window when the record has one, else with the
    first ``skip_fraction`` of its iterations dropped as warm-up."""
    v = record_values(record, metric, optstep_family=optstep_family)
    if v is None or _window(record)[0] is not None:
        return v
    return _trim(v, skip_fraction)


def _record_field(record: Mapping[str, Any], key: str) -> Any:
    """A selection key's value in a store record: the record's own field (aliases: :data:`RUN_KEY_ALIASES`), else
    the resolved config the job ran (``record["config"]``: any Hydra key, ``gpu`` / ``precision`` / ``release`` ...
    meaning the option's ``name``); ``optimizer`` as its family (adamw, muon)."""
    if key == "optimizer":
        name = record.get("optimizer") or _get_path(record, "config.optimizer.optimizer")
        return family(str(name)) if name not in (None, _MISSING) else _MISSING
    got = _get_path(record, RUN_KEY_ALIASES.get(key, key))
    if got is _MISSING and key == "gpu":
        got = _get_path(record, "gpu_planned")
    if got is _MISSING and key.startswith("job."):
        got = _get_path(record, "optstep." + key[4:])
    if got is _MISSING and isinstance(record.get("config"), Mapping):
        got = _get_path(record["config"], key)
        if isinstance(got, Mapping) and "name" in got:
            got = got["name"]
    return got


def _run_matches(record: Mapping[str, Any], sel: Selection) -> bool:
    for key, values in sel.items:
        if key == "model":
            got = _record_field(record, key)
            ok = got is not _MISSING and any(_norm(v) == _norm(got) for v in values)
        elif key in ("config_hash", "hash", "run_id"):
            got = _record_field(record, key)
            ok = got is not _MISSING and any(str(got).startswith(v) for v in values)
        elif key == "name":
            got = record.get("name")
            ok = got is not None and any(fnmatch.fnmatchcase(str(got), v) for v in values)
        else:
            got = _record_field(record, key)
            ok = got is not _MISSING and any(_same_value(got, v) for v in values)
        if not ok:
            return False
    return True


def _same_value(got: Any, want: str) -> bool:
    if isinstance(got, bool):
        return str(got).lower() == want.lower()
    if isinstance(got, (int, float)):
        try:
            return float(got) == float(want)
        except ValueError:
            return False
    return str(got) == want


def _check_run_keys(records: Sequence[Mapping[str, Any]], sel: Selection, where: str) -> None:
    for key in sel.keys:
        if key in ("model", "gpu", "precision", "num_gpus", "optimizer", "name"):
            continue
        if not any(_record_field(r, key) is not _MISSING for r in records):
            available = sorted({k for r in records for k in r if not isinstance(r[k], (Mapping, list))})
            raise CompareError(
                f"{where}: no record of the store has a field {key!r}; top-level fields: {available}; "
                f"also provenance.<field>, optstep.<field> (job.<field>) and {sorted(RUN_KEY_ALIASES)}"
            )


@dataclass
class Side:
    """One side of a comparison: its records and their per-iteration values (warm-up dropped)."""

    name: str
    selection: Selection
    records: list[dict[str, Any]]
    values: list[np.ndarray]
    skipped: list[str]  # "record_id: why"
    flags: list[str] = field(default_factory=list)  # kept, but noisier: "record_id: why"
    summary: str = ""  # "5 records, 3 used; skipped 2: 1 TIMEOUT, 1 never_started" (results/outcomes.py)

    @property
    def record_ids(self) -> list[str]:
        return [r["record_id"] for r in self.records]


def _trim(values: np.ndarray, skip_fraction: float) -> np.ndarray:
    k = int(math.floor(skip_fraction * len(values)))
    return values[k:] if len(values) - k >= 1 else values


def build_side(
    records: Sequence[Mapping[str, Any]],
    sel: Selection,
    name: str,
    metric: str,
    *,
    skip_fraction: float = 0.1,
    optstep_family: str = "total",
) -> Side:
    """The completed records matching ``sel`` and their values of ``metric`` (first ``skip_fraction`` of each run's
    iterations dropped as warm-up; records without the metric are skipped, each with the reason).

    Raises:
        CompareError: no record matches (naming the selection and listing the values the store has for its keys).
    """
    matched = [dict(r) for r in records if _run_matches(r, sel)]
    if not matched:
        have = {k: sorted({str(v) for r in records if (v := _record_field(r, k)) is not _MISSING}) for k in sel.keys}
        raise CompareError(
            f"side {name}: no record in the store matches {sel.text()}; the store has "
            + ", ".join(f"{k} in {v}" for k, v in have.items())
        )
    side = Side(name, sel, [], [], [], [])
    for r in sorted(matched, key=lambda r: r["record_id"]):
        if not usable(r):  # the attempt's outcome (results/outcomes.py): only completed runs count
            why = r.get("outcome_detail") or r.get("reason")
            side.skipped.append(f"{r['record_id']}: {label(outcome_of(r))}" + (f" ({why})" if why else ""))
            continue
        v = run_values(r, metric, skip_fraction=skip_fraction, optstep_family=optstep_family)
        if v is None:
            side.skipped.append(f"{r['record_id']}: no {metric} values")
            continue
        side.records.append(r)
        side.values.append(v)
        share = _get_path(r, "optstep.load.other_share")
        if isinstance(share, (int, float)) and share >= CONTENDED_OTHER_SHARE:
            side.flags.append(f"{r['record_id']}: contended (other processes used {share:.0%} of the node's CPU)")
    side.summary = skip_line(matched, len(side.records))
    if not side.records:
        raise CompareError(f"side {name}: {side.summary} (matching {sel.text()}): " + "; ".join(side.skipped[:5]))
    return side


def check_like_for_like(a: Side, b: Side, chosen: Iterable[str]) -> None:
    """Both sides must agree on :data:`SIDE_KEY_FIELDS` (and each side on one config hash) except on the keys the
    selection chose to differ on.

    Raises:
        CompareError: a side mixing configurations, or the sides differing in a field nobody selected on.
    """
    chosen = set(chosen)
    for side in (a, b):
        hashes = sorted(
            {
                str(_get_path(r, "provenance.config_hash"))
                for r in side.records
                if _get_path(r, "provenance.config_hash") is not _MISSING
            }
        )
        if len(hashes) > 1 and not chosen & {"config_hash", "hash"}:
            raise CompareError(
                f"side {side.name} ({side.selection.text()}) mixes {len(hashes)} configurations "
                f"(config hashes {', '.join(h[:12] for h in hashes)}); narrow it, e.g. with "
                f"config_hash={hashes[0][:8]}"
            )
    chosen |= {RUN_KEY_ALIASES.get(k, k) for k in chosen}
    if "gpu" in chosen:  # choosing another GPU means running on another device
        chosen.add("device")
    for f in SIDE_KEY_FIELDS:
        if f in chosen:
            continue
        va = sorted({str(None if (v := _record_field(r, f)) is _MISSING else v) for r in a.records})
        vb = sorted({str(None if (v := _record_field(r, f)) is _MISSING else v) for r in b.records})
        if va != vb:
            raise CompareError(
                f"sides differ in {f} ({','.join(va)} vs {','.join(vb)}), which the selection does "
                f"not name: not like-for-like (keys with no overlap); put {f}=... in the common keys "
                "or name it in --a/--b if that difference is the point"
            )


@dataclass
class SidesResult:
    """``--a`` vs ``--b``: the main comparison (``label`` total) and, for optimizer-step records, one per family."""

    a: Side
    b: Side
    metric: str
    comparisons: list[tuple[str, RunComparison]]


def compare_sides(
    records: Sequence[Mapping[str, Any]],
    common: Selection,
    sel_a: Selection,
    sel_b: Selection,
    *,
    metric: str = "step_time",
    skip_fraction: float = 0.1,
    fdr_alpha: float = 0.05,
    **stat_params: Any,
) -> SidesResult:
    """Side A (``common + sel_a``) vs side B (``common + sel_b``) on ``metric``: :func:`compare_runs` on the totals and,
    for optimizer-step records whose payload keeps per-family repeats, on each matrix family; Benjamini-Hochberg
    across those comparisons when there are several.

    Raises:
        CompareError: empty store, no match, not like-for-like (see :func:`check_like_for_like`), bad parameters.
    """
    if not records:
        raise CompareError("the results store has no records: submit runs and `bridgebench collect` first")
    if not sel_a.items or not sel_b.items:
        raise CompareError("--a and --b each need at least one key=value (e.g. --a optimizer=adamw --b optimizer=muon)")
    sa, sb = common + sel_a, common + sel_b
    _check_run_keys(records, sa, "--a")
    _check_run_keys(records, sb, "--b")
    a = build_side(records, sa, "A", metric, skip_fraction=skip_fraction)
    b = build_side(records, sb, "B", metric, skip_fraction=skip_fraction)
    overlap = set(a.record_ids) & set(b.record_ids)
    if overlap:
        raise CompareError(f"--a and --b select the same record(s) {sorted(overlap)[:3]}: the sides must not overlap")
    check_like_for_like(a, b, set(sel_a.keys) | set(sel_b.keys))
    kind = METRICS[metric][0]
    comps = [("total", cs.compare_runs(a.values, b.values, kind=kind, **stat_params))]
    families = _shared_families(a, b) if metric in ("step_time", *_OPTSTEP_LISTS) else []
    for fam in families:
        fa = [run_values(r, metric, skip_fraction=skip_fraction, optstep_family=fam) for r in a.records]
        fb = [run_values(r, metric, skip_fraction=skip_fraction, optstep_family=fam) for r in b.records]
        comps.append((fam, cs.compare_runs(fa, fb, kind=kind, **stat_params)))
    if len(comps) > 1:
        adjusted = cs.apply_fdr([c for _, c in comps], alpha=fdr_alpha)
        comps = [(label, c) for (label, _), c in zip(comps, adjusted)]
    return SidesResult(a, b, metric, comps)


def _shared_families(a: Side, b: Side) -> list[str]:
    """Matrix families every optimizer-step record of both sides has per-repeat times for."""
    fams = None
    for r in a.records + b.records:
        payload = r.get("optstep")
        if not isinstance(payload, Mapping):
            return []
        have = {
            f
            for f, v in (payload.get("families") or {}).items()
            if isinstance(v, Mapping) and v.get("muon_step_times_s") and v.get("adamw_step_times_s")
        }
        fams = have if fams is None else fams & have
    return sorted(fams or [])


@dataclass
class OwnHistory:
    """Your runs of one config key across releases: per release a summary, adjacent releases compared."""

    key: tuple[str, ...]  # (model, gpu, precision, num_gpus, optimizer)
    metric: str
    groups: dict[str, Side]  # release -> side
    steps: list[tuple[str, str, RunComparison]]


def _run_key(r: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(
        str(None if (v := _record_field(r, k)) is _MISSING else v)
        for k in ("model", "gpu", "precision", "num_gpus", "optimizer")
    )


def own_histories(
    records: Sequence[Mapping[str, Any]],
    sel: Selection,
    *,
    metric: str = "step_time",
    skip_fraction: float = 0.1,
    fdr_alpha: float = 0.05,
    **stat_params: Any,
) -> list[OwnHistory]:
    """Group the matching completed records by config key and release; compare adjacent releases of each key
    (:func:`compare_runs`), Benjamini-Hochberg across every step of every key.

    Raises:
        CompareError: no matching record, or nothing to compare (a single release per key: use --a/--b).
    """
    if not records:
        raise CompareError("the results store has no records: submit runs and `bridgebench collect` first")
    _check_run_keys(records, sel, "selection")
    candidates = [r for r in records if _run_matches(r, sel)]
    matched = [r for r in candidates if usable(r)]
    if not matched:
        why = f": {skip_line(candidates, 0)}" if candidates else ""
        raise CompareError(f"no completed record in the store matches {sel.text()}{why}")
    by_key: dict[tuple[str, ...], dict[str, list]] = {}
    for r in matched:
        rel = _get_path(r, "provenance.release")
        by_key.setdefault(_run_key(r), {}).setdefault("unknown" if rel is _MISSING else str(rel), []).append(r)
    out: list[OwnHistory] = []
    flat: list[RunComparison] = []
    kind = METRICS[metric][0]
    for key, rels in sorted(by_key.items()):
        groups = {}
        for rel in sorted(rels, key=lambda x: release_sort_key(x) if x != "unknown" else (999,)):
            try:
                groups[rel] = build_side(rels[rel], Selection(), rel, metric, skip_fraction=skip_fraction)
            except CompareError:
                continue
        names = list(groups)
        steps = [
            (x, y, cs.compare_runs(groups[x].values, groups[y].values, kind=kind, **stat_params))
            for x, y in zip(names[:-1], names[1:])
        ]
        flat += [c for *_, c in steps]
        out.append(OwnHistory(key, metric, groups, steps))
    if not flat:
        raise CompareError(
            f"nothing to compare: the matching records ({len(matched)}) cover one release per config "
            f"key ({', '.join('/'.join(k) for k in by_key)}); compare two selections with --a/--b"
        )
    adjusted = iter(cs.apply_fdr(flat, alpha=fdr_alpha))
    for h in out:
        h.steps = [(x, y, next(adjusted)) for x, y, _ in h.steps]
    return out


def attach_own_runs(
    histories: Sequence[History],
    records: Sequence[Mapping[str, Any]],
    *,
    skip_fraction: float = 0.1,
    fdr_alpha: float = 0.05,
    seed: int = 0,
    **stat_params: Any,
) -> list[str]:
    """Source ``both``: put your completed pretrain runs of each history's key beside the published values
    (TFLOP/s/GPU where every run logged it, else tokens/s/GPU from step times), and compare your adjacent releases
    (FDR across all). Returns the record ids used."""
    used: list[str] = []
    flat: list[RunComparison] = []
    for h in histories:
        k = h.key
        mine = [
            r
            for r in records
            if r.get("kind") == "pretrain"
            and usable(r)
            and _run_key(r) == (k.model, k.gpu, k.precision, str(k.num_gpus), k.optimizer)
        ]
        by_rel: dict[str, list] = {}
        for r in mine:
            rel = _get_path(r, "provenance.release")
            if rel is not _MISSING:
                by_rel.setdefault(str(rel), []).append(r)
        pub = {p.release: p for p in h.points}
        groups = {}
        for rel in sorted(by_rel, key=release_sort_key):
            metric = "tflops" if all(record_values(r, "tflops") is not None for r in by_rel[rel]) else "tokens"
            try:
                side = build_side(by_rel[rel], Selection(), rel, metric, skip_fraction=skip_fraction)
            except CompareError:
                continue
            groups[rel] = side
            used += side.record_ids
            value, lo, hi = cs.summarize_runs(side.values, seed=seed)
            p = pub.get(rel)
            ref = (p.tflops if metric == "tflops" else p.tokens) if p else None
            if ref is None:
                h.own.append(
                    OwnRelease(
                        rel,
                        metric,
                        len(side.values),
                        value,
                        lo,
                        hi,
                        None,
                        None,
                        None,
                        None,
                        "no published row",
                        side.record_ids,
                    )
                )
                continue
            r_lo = (lo if lo is not None else value) / ref.hi
            r_hi = (hi if hi is not None else value) / ref.lo
            verdict = (
                "consistent with published"
                if r_lo <= 1 <= r_hi
                else "above published"
                if r_lo > 1
                else "below published"
            )
            if lo is None:
                verdict += f" (no CI: {len(side.values)} run(s), need >= 3)"
            h.own.append(
                OwnRelease(
                    rel,
                    metric,
                    len(side.values),
                    value,
                    lo,
                    hi,
                    ref,
                    value / ref.value,
                    r_lo,
                    r_hi,
                    verdict,
                    side.record_ids,
                )
            )
        names = list(groups)
        for x, y in zip(names[:-1], names[1:]):
            mx = "tflops" if h.own[names.index(x)].metric == h.own[names.index(y)].metric == "tflops" else "tokens"
            c = cs.compare_runs(
                [run_values(r, mx, skip_fraction=skip_fraction) for r in groups[x].records],
                [run_values(r, mx, skip_fraction=skip_fraction) for r in groups[y].records],
                kind="throughput",
                seed=seed,
                **stat_params,
            )
            h.own_steps.append((x, y, c))
            flat.append(c)
    if flat:
        adjusted = iter(cs.apply_fdr(flat, alpha=fdr_alpha))
        for h in histories:
            h.own_steps = [(x, y, next(adjusted)) for x, y, _ in h.own_steps]
    return used


# --------------------------------------------------------------------------------------------------------------------
# The whole comparison, its tables, files and provenance
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class CompareResult:
    """Everything one ``bridgebench compare`` computed, with its provenance."""

    source: str
    histories: list[History] = field(default_factory=list)
    sides: SidesResult | None = None
    own: list[OwnHistory] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: published rows matching the selection that are in no history: ``{reference, release, label, reason}`` each
    left_out: list[dict[str, Any]] = field(default_factory=list)

    def left_out_line(self) -> str:
        """One line counting the left-out published rows by reason (empty when none)."""
        if not self.left_out:
            return ""
        by: dict[str, list[str]] = {}
        for row in self.left_out:
            by.setdefault(row["reason"], []).append(f"{row['label']} {row['release']}")
        parts = [f"{len(v)} {why}: {', '.join(v)}" for why, v in by.items()]
        return f"{len(self.left_out)} published row(s) matching the selection are in no history -- " + "; ".join(parts)

    def tables(self) -> dict[str, pd.DataFrame]:
        """Name -> table: ``history`` (published), ``speedups`` (config x release), ``runs`` (side comparisons or
        own release steps), ``run_values`` (per run: record id, side, statistic)."""
        out: dict[str, pd.DataFrame] = {}
        if self.histories:
            out["history"] = pd.concat([h.frame() for h in self.histories], ignore_index=True)
            ratio, _, _ = speedup_matrix(self.histories)
            out["speedups"] = ratio.rename_axis("config").reset_index()
        rows, values = [], []
        if self.sides is not None:
            for label, c in self.sides.comparisons:
                rows.append(
                    _comparison_row(
                        c,
                        comparison=f"B vs A ({label})",
                        metric=self.sides.metric,
                        a=self.sides.a.selection.text(),
                        b=self.sides.b.selection.text(),
                    )
                )
            for side in (self.sides.a, self.sides.b):
                for r, v in zip(side.records, side.values):
                    values.append(
                        {
                            "side": side.name,
                            "record_id": r["record_id"],
                            "iterations": len(v),
                            "median": float(np.median(v)),
                            "mean": float(np.mean(v)),
                        }
                    )
        for h in self.own:
            for x, y, c in h.steps:
                rows.append(
                    _comparison_row(c, comparison=f"{y} vs {x}", metric=h.metric, a=x, b=y, key="/".join(h.key))
                )
            for rel, side in h.groups.items():
                for r, v in zip(side.records, side.values):
                    values.append(
                        {
                            "side": rel,
                            "key": "/".join(h.key),
                            "record_id": r["record_id"],
                            "iterations": len(v),
                            "median": float(np.median(v)),
                            "mean": float(np.mean(v)),
                        }
                    )
        for h in self.histories:
            for x, y, c in h.own_steps:
                rows.append(
                    _comparison_row(
                        c, comparison=f"own {y} vs {x}", metric=h.own[0].metric, a=x, b=y, key=h.key.label()
                    )
                )
        if rows:
            out["runs"] = pd.DataFrame(rows)
        if values:
            out["run_values"] = pd.DataFrame(values)
        return out

    def to_json(self) -> dict[str, Any]:
        tables = {k: json.loads(v.to_json(orient="records")) for k, v in self.tables().items()}
        return {
            "source": self.source,
            **tables,
            "notes": self.notes,
            "left_out": self.left_out,
            "provenance": self.provenance,
        }


def side_statistic(params: Mapping[str, Any]) -> str:
    """What a side's value is, in words, from a comparison's ``params`` (``compare_stats.compare_runs``): the mean over
    the side's runs of each run's median (or mean) -- printed beside every side value, so that ``compare``'s means
    are never read as ``report``'s medians."""
    return f"mean of run {params.get('stat', 'median')}s"


def _comparison_row(c: RunComparison, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "verdict": c.verdict,
        "ratio": c.ratio,
        "ci_low": c.ci_low,
        "ci_high": c.ci_high,
        "confidence": c.params["confidence"],
        "threshold": c.params["threshold"],
        "p_value": c.p_value,
        "q_value": c.q_value,
        "mannwhitney_runs_p": c.mannwhitney_runs_p,
        "runs_a": c.n_runs[0],
        "runs_b": c.n_runs[1],
        "value_a": c.side_values[0],
        "value_b": c.side_values[1],
        "value_statistic": side_statistic(c.params),
        "between_run_cv": c.between_run_cv,
        "repeats_needed": c.repeats_needed,
        "block_length": c.params.get("block_length"),
        "reason": c.reason,
    }


def run_compare(
    source: str,
    common: Selection,
    *,
    sel_a: Selection | None = None,
    sel_b: Selection | None = None,
    store_records: Sequence[Mapping[str, Any]] | None = None,
    store_root: Path | None = None,
    reference: Path = PUBLISHED_CSV,
    metric: str = "step_time",
    threshold: float = 0.01,
    noise_cv: float = 0.01,
    skip_fraction: float = 0.1,
    fdr_alpha: float = 0.05,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    n_inner: int = 200,
    bootstrap: str = "stationary",
    block_length: float | None = None,
    min_runs: int = 3,
    seed: int = 0,
    command: Sequence[str] = (),
) -> CompareResult:
    """Run one comparison (see the module docstring for the sources); the result carries its provenance.

    Args:
        source: ``auto`` (``runs`` when sides are given, else ``published`` plus your runs when the store has any of
            the same keys), ``published``, ``runs`` or ``both``.
        common: keys both sides (or every history) share. sel_a / sel_b: the sides (source ``runs``).
        store_records: the store's records (None: not read). store_root: for provenance.
        metric: for ``runs`` (:data:`METRICS`). threshold: relative change a verdict or a real change must exceed.
        noise_cv: assumed run-to-run CV of a published value (change-point penalty).
        skip_fraction: leading fraction of each run's iterations dropped as warm-up.

    Raises:
        CompareError: bad source, selection or data (messages name the rule).
    """
    if source not in SOURCES:
        raise CompareError(f"--source must be one of {list(SOURCES)}, got {source!r}")
    if (sel_a is None) != (sel_b is None):
        raise CompareError("give both --a and --b (two selections to compare), or neither")
    if not 0 <= skip_fraction < 1:
        raise CompareError(f"skip fraction must be in [0, 1), got {skip_fraction!r}")
    if metric not in METRICS:
        raise CompareError(f"unknown metric {metric!r}; known: {list(METRICS)}")
    if source == "auto" and sel_a is not None:
        source = "runs"
    if source in ("published", "both") and sel_a is not None:
        raise CompareError("--a/--b select own runs: use them with --source runs")
    stat_params = {
        "confidence": confidence,
        "threshold": threshold,
        "n_resamples": n_resamples,
        "n_inner": n_inner,
        "bootstrap": bootstrap,
        "block_length": block_length,
        "min_runs": min_runs,
        "seed": seed,
    }
    result = CompareResult(source)
    prov: dict[str, Any] = {
        "command": list(command),
        "selection": common.text(),
        "parameters": {
            "metric": metric,
            "threshold": threshold,
            "noise_cv": noise_cv,
            "skip_fraction": skip_fraction,
            "fdr_alpha": fdr_alpha,
            "fdr_method": "bh",
            **stat_params,
        },
        "versions": cs.library_versions(),
    }
    if source in ("auto", "published", "both"):
        records = load_published(reference, infer_precision=True)
        keys = published_keys(records, common)
        result.histories = [
            published_history(records, k, sel=common, threshold=threshold, noise_cv=noise_cv) for k in keys
        ]
        result.left_out = left_out_rows(records, result.histories, common, reference)
        result.notes += [result.left_out_line()] if result.left_out else []
        inferred: dict[str, set[str]] = {}
        for h in result.histories:
            for p in h.points:
                if p.precision_inferred:
                    inferred.setdefault(p.precision_inferred, set()).add(f"{p.release} {h.key.precision}")
        result.notes += [f"* precision {why} ({', '.join(sorted(rows))})" for why, rows in inferred.items()]
        prov["reference"] = {
            **_reference_provenance(reference),
            "rows": sorted(
                {ref for h in result.histories for p in h.points for ref in (p.reference, *p.alternates)},
                key=lambda s: int(s.rsplit("#", 1)[1]),
            ),
        }
        prov["change_points"] = {h.key.label(): h.change_points.params for h in result.histories}
        prov["flops_formula_equivalence"] = "bridgebench.model.flops v1 vs v2 of the configs/model entry"
        if source != "published":
            used = attach_own_runs(
                result.histories, store_records or [], skip_fraction=skip_fraction, fdr_alpha=fdr_alpha, **stat_params
            )
            if source == "both" and not used:
                raise CompareError(
                    f"--source both: the results store has no completed pretrain runs of "
                    f"{', '.join(h.key.label() for h in result.histories)}"
                )
            prov["store_records"] = sorted(used)
            result.source = "both" if used else "published"
    elif sel_a is not None:
        result.sides = compare_sides(
            store_records or [],
            common,
            sel_a,
            sel_b,
            metric=metric,
            skip_fraction=skip_fraction,
            fdr_alpha=fdr_alpha,
            **stat_params,
        )
        prov["sides"] = {
            s.name: {
                "selection": s.selection.text(),
                "records": s.record_ids,
                "skipped": s.skipped,
                "summary": s.summary,
                "flagged": s.flags,
            }
            for s in (result.sides.a, result.sides.b)
        }
        prov["store_records"] = sorted(result.sides.a.record_ids + result.sides.b.record_ids)
    else:
        result.own = own_histories(
            store_records or [], common, metric=metric, skip_fraction=skip_fraction, fdr_alpha=fdr_alpha, **stat_params
        )
        prov["store_records"] = sorted(r for h in result.own for s in h.groups.values() for r in s.record_ids)
    prov["source"] = result.source
    if store_root is not None and prov.get("store_records"):
        prov["store"] = str(store_root)
    result.provenance = prov
    return result


# --------------------------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------------------------


def output_dir(tables_root: Path, result: CompareResult, common: Selection, sides: Sequence[Selection] = ()) -> Path:
    """``<tables>/compare/<source>_<selection slug>[_A_<side A>_vs_B_<side B>]`` (``configs/paths`` ``tables``)."""

    def slug_of(sel: Selection) -> str:
        text = "_".join(f"{k}-{'+'.join(v)}" for k, v in sel.items if k != "release")
        if sel.get("release"):
            text += f"_{sel.get('release')[0]}..{sel.get('release')[-1]}"
        return text.strip("_")

    slug = slug_of(common) or "all"
    if len(sides) == 2:
        slug += f"_A_{slug_of(sides[0])}_vs_B_{slug_of(sides[1])}"
    slug = "".join(c if c.isalnum() or c in "-_.+" else "_" for c in slug)
    if len(slug) > 120:  # keep names short and still distinct
        slug = slug[:100] + "_" + hashlib.sha256(slug.encode()).hexdigest()[:12]
    return Path(tables_root) / "compare" / f"{result.source}_{slug}"


def _tracked(paths: Sequence[Path]) -> list[Path]:
    """Those of ``paths`` git tracks in the repository (empty when git or the repository is unavailable)."""
    inside = []
    for p in paths:
        try:
            inside.append(str(Path(p).resolve().relative_to(REPO_ROOT)))
        except ValueError:
            continue
    if not inside or not (REPO_ROOT / ".git").exists():
        return []
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "ls-files", "--", *inside], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    tracked = set(out.stdout.split())
    return [Path(REPO_ROOT / t) for t in inside if t in tracked]


def write_outputs(
    result: CompareResult, out_dir: Path, *, plots: bool = True, progress: Callable[[str], None] = lambda s: None
) -> list[Path]:
    """Write the tables (CSV and Parquet, the provenance in the Parquet metadata), ``provenance.json`` and the plots
    (``history.png``, ``speedup_heatmap.png``, ``runs.png``) into ``out_dir``.

    Everything is written into a temporary folder beside ``out_dir`` first and then renamed into place file by file,
    so a failure leaves the previous outputs intact and a reader never sees half a file.

    Raises:
        CompareError: a target file is tracked by git (the outputs never overwrite the repository's files).
    """
    out_dir = Path(out_dir)
    tables = result.tables()
    names = [f"{n}.{ext}" for n in tables for ext in ("csv", "parquet")] + ["provenance.json"]
    if plots:
        names += (["history.png", "speedup_heatmap.png"] if result.histories else []) + (
            ["runs.png"] if (result.sides or result.own) else []
        )
    targets = [out_dir / n for n in names]
    tracked = _tracked(targets)
    if tracked:
        raise CompareError(
            f"refusing to overwrite tracked file(s) {[str(t) for t in tracked]}; choose another --out "
            "or BRIDGEBENCH_TABLES"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".compare-", dir=out_dir.parent) as tmp:
        tmp = Path(tmp)
        meta = json.dumps(result.provenance, sort_keys=True, default=str)
        for name, df in tables.items():
            df.to_csv(tmp / f"{name}.csv", index=False, float_format="%.6g")
            _parquet(df, tmp / f"{name}.parquet", meta)
        (tmp / "provenance.json").write_text(
            json.dumps(result.provenance, indent=2, sort_keys=True, default=str) + "\n"
        )
        if plots:
            from bridgebench.results import compare_plots as cp

            if result.histories:
                progress("plotting the release histories ...")
                cp.history_plot(result.histories, tmp / "history.png")
                cp.speedup_heatmap(*speedup_matrix(result.histories), tmp / "speedup_heatmap.png")
            if result.sides or result.own:
                progress("plotting the run comparison ...")
                cp.runs_plot(result, tmp / "runs.png")
        out_dir.mkdir(parents=True, exist_ok=True)
        for n in names:
            os.replace(tmp / n, out_dir / n)
    return targets


def _parquet(df: pd.DataFrame, path: Path, provenance: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), b"bridgebench.provenance": provenance.encode()}
    )
    pq.write_table(table, path)


def parquet_provenance(path: Path) -> dict[str, Any]:
    """The provenance stored in a compare Parquet file's metadata."""
    import pyarrow.parquet as pq

    return json.loads(pq.read_schema(path).metadata[b"bridgebench.provenance"])
