"""Own runs: per-iteration values of a store record (:func:`record_values`), two sides chosen by filters compared
like-for-like (:func:`build_side`, :func:`compare_sides`), each config key's own release history
(:func:`own_histories`) and own runs beside a published history (:func:`attach_own_runs`)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridgebench.config.catalog import release_sort_key
from bridgebench.model.optimizer import family
from bridgebench.results import compare_stats as cs
from bridgebench.results.compare.histories import History, OwnRelease
from bridgebench.results.compare.selection import (
    METRICS,
    OPTSTEP_LISTS,
    RUN_KEY_ALIASES,
    SIDE_KEY_FIELDS,
    Selection,
    normalize,
)
from bridgebench.results.compare_stats import CompareError, ConfigKey, RunComparison
from bridgebench.results.optstep_series import optstep_series
from bridgebench.results.optstep_stats import CONTENDED_OTHER_SHARE
from bridgebench.results.outcomes import label, outcome_of, skip_line, usable


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

    if metric in OPTSTEP_LISTS:
        if payload is None:
            return None
        fam = payload.get("total") if optstep_family == "total" else (payload.get("families") or {}).get(optstep_family)
        if not fam:
            return None
        return arr(fam.get(OPTSTEP_LISTS[metric])) if fam.get(OPTSTEP_LISTS[metric]) else arr(fam.get(metric + "_s"))
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


def run_matches(record: Mapping[str, Any], sel: Selection) -> bool:
    """Whether a store record matches every run filter of ``sel`` (keys through :data:`RUN_KEY_ALIASES`)."""
    for key, values in sel.items:
        if key == "model":
            got = _record_field(record, key)
            ok = got is not _MISSING and any(normalize(v) == normalize(got) for v in values)
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


@dataclass(kw_only=True)
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

    def provenance(self) -> dict[str, Any]:
        """The side in a comparison's provenance: its selection, records used and skipped, summary, flags."""
        return {
            "selection": self.selection.text(),
            "records": self.record_ids,
            "skipped": self.skipped,
            "summary": self.summary,
            "flagged": self.flags,
        }


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
    matched = [dict(r) for r in records if run_matches(r, sel)]
    if not matched:
        have = {k: sorted({str(v) for r in records if (v := _record_field(r, k)) is not _MISSING}) for k in sel.keys}
        raise CompareError(
            f"side {name}: no record in the store matches {sel.text()}; the store has "
            + ", ".join(f"{k} in {v}" for k, v in have.items())
        )
    side = Side(name=name, selection=sel, records=[], values=[], skipped=[], flags=[])
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


@dataclass(kw_only=True)
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
    families = _shared_families(a, b) if metric in ("step_time", *OPTSTEP_LISTS) else []
    for fam in families:
        fa = [run_values(r, metric, skip_fraction=skip_fraction, optstep_family=fam) for r in a.records]
        fb = [run_values(r, metric, skip_fraction=skip_fraction, optstep_family=fam) for r in b.records]
        comps.append((fam, cs.compare_runs(fa, fb, kind=kind, **stat_params)))
    if len(comps) > 1:
        adjusted = cs.apply_fdr([c for _, c in comps], alpha=fdr_alpha)
        comps = [(label, c) for (label, _), c in zip(comps, adjusted)]
    return SidesResult(a=a, b=b, metric=metric, comparisons=comps)


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


@dataclass(kw_only=True)
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
    candidates = [r for r in records if run_matches(r, sel)]
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
        out.append(OwnHistory(key=key, metric=metric, groups=groups, steps=steps))
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
        by_rel = _runs_by_release(records, h.key)
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
            h.own.append(_own_release(rel, metric, side, pub.get(rel), seed))
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


def _runs_by_release(records: Sequence[Mapping[str, Any]], k: ConfigKey) -> dict[str, list[Mapping[str, Any]]]:
    """The usable completed pretrain records of a config key, by the release they ran."""
    by_rel: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if r.get("kind") != "pretrain" or not usable(r):
            continue
        if _run_key(r) != (k.model, k.gpu, k.precision, str(k.num_gpus), k.optimizer):
            continue
        rel = _get_path(r, "provenance.release")
        if rel is not _MISSING:
            by_rel.setdefault(str(rel), []).append(r)
    return by_rel


def _own_release(rel: str, metric: str, side: Side, published: Any, seed: int) -> OwnRelease:
    """Your runs of one release beside its published value: mean with CI and the ratio interval to the published
    interval (``[lo / hi_pub, hi / lo_pub]``), and whether it is consistent with, above or below it."""
    value, lo, hi = cs.summarize_runs(side.values, seed=seed)
    ref = (published.tflops if metric == "tflops" else published.tokens) if published else None
    n = len(side.values)
    ratio: float | None = None
    r_lo: float | None = None
    r_hi: float | None = None
    verdict = "no published row"
    if ref is not None:
        ratio = value / ref.value
        r_lo = (lo if lo is not None else value) / ref.hi
        r_hi = (hi if hi is not None else value) / ref.lo
        verdict = (
            "consistent with published" if r_lo <= 1 <= r_hi else "above published" if r_lo > 1 else "below published"
        )
        if lo is None:
            verdict += f" (no CI: {n} run(s), need >= 3)"
    return OwnRelease(
        release=rel,
        metric=metric,
        n_runs=n,
        value=value,
        ci_low=lo,
        ci_high=hi,
        published=ref,
        ratio_to_published=ratio,
        ratio_lo=r_lo,
        ratio_hi=r_hi,
        verdict=verdict,
        record_ids=side.record_ids,
    )
