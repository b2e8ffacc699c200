"""The whole comparison: :func:`run_compare` runs a selection through the published histories and the own runs, and
returns a :class:`CompareResult` (tables, provenance)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bridgebench.results import compare_stats as cs
from bridgebench.results.compare.histories import (
    History,
    left_out_rows,
    published_history,
    published_keys,
    reference_provenance,
    speedup_matrix,
)
from bridgebench.results.compare.own_runs import (
    OwnHistory,
    Side,
    SidesResult,
    attach_own_runs,
    compare_sides,
    own_histories,
)
from bridgebench.results.compare.selection import METRICS, SOURCES, Selection
from bridgebench.results.compare_stats import CompareError, RunComparison
from bridgebench.results.records import PUBLISHED_CSV, load_published


@dataclass(kw_only=True)
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
                values += _value_rows(side, side=side.name)
        for h in self.own:
            for x, y, c in h.steps:
                rows.append(
                    _comparison_row(c, comparison=f"{y} vs {x}", metric=h.metric, a=x, b=y, key="/".join(h.key))
                )
            for rel, side in h.groups.items():
                values += _value_rows(side, side=rel, key="/".join(h.key))
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
    source = _checked_source(source, sel_a, sel_b, skip_fraction, metric)
    stat_params = dict(confidence=confidence, threshold=threshold, n_resamples=n_resamples, n_inner=n_inner,
                       bootstrap=bootstrap, block_length=block_length, min_runs=min_runs, seed=seed)  # fmt: skip
    result = CompareResult(source=source)
    prov: dict[str, Any] = {
        "command": list(command),
        "selection": common.text(),
        "parameters": {
            "metric": metric, "threshold": threshold, "noise_cv": noise_cv, "skip_fraction": skip_fraction,
            "fdr_alpha": fdr_alpha, "fdr_method": "bh", **stat_params,
        },
        "versions": cs.library_versions(),
    }  # fmt: skip
    if source in ("auto", "published", "both"):
        _add_published(result, prov, common, reference, threshold=threshold, noise_cv=noise_cv)
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
    elif sel_a is not None and sel_b is not None:
        result.sides = compare_sides(
            store_records or [], common, sel_a, sel_b, metric=metric, skip_fraction=skip_fraction,
            fdr_alpha=fdr_alpha, **stat_params,
        )  # fmt: skip
        prov["sides"] = {s.name: s.provenance() for s in (result.sides.a, result.sides.b)}
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


def _checked_source(source: str, sel_a: Selection | None, sel_b: Selection | None, skip: float, metric: str) -> str:
    """The source a comparison runs (``auto`` with sides: ``runs``).

    Raises:
        CompareError: an unknown source or metric, one side without the other, a skip fraction outside [0, 1), sides
            with a published source.
    """
    if source not in SOURCES:
        raise CompareError(f"--source must be one of {list(SOURCES)}, got {source!r}")
    if (sel_a is None) != (sel_b is None):
        raise CompareError("give both --a and --b (two selections to compare), or neither")
    if not 0 <= skip < 1:
        raise CompareError(f"skip fraction must be in [0, 1), got {skip!r}")
    if metric not in METRICS:
        raise CompareError(f"unknown metric {metric!r}; known: {list(METRICS)}")
    if source == "auto" and sel_a is not None:
        source = "runs"
    if source in ("published", "both") and sel_a is not None:
        raise CompareError("--a/--b select own runs: use them with --source runs")
    return source


def _add_published(
    result: CompareResult,
    prov: dict[str, Any],
    common: Selection,
    reference: Path,
    *,
    threshold: float,
    noise_cv: float,
) -> None:
    """The published histories of the selection into ``result`` (with the rows left out and the notes) and their
    provenance into ``prov`` (reference rows with the file's hash, change-point parameters)."""
    records = load_published(reference, infer_precision=True)
    keys = published_keys(records, common)
    result.histories = [published_history(records, k, sel=common, threshold=threshold, noise_cv=noise_cv) for k in keys]
    result.left_out = left_out_rows(records, result.histories, common, reference)
    result.notes += [result.left_out_line()] if result.left_out else []
    inferred: dict[str, set[str]] = {}
    for h in result.histories:
        for p in h.points:
            if p.precision_inferred:
                inferred.setdefault(p.precision_inferred, set()).add(f"{p.release} {h.key.precision}")
    result.notes += [f"* precision {why} ({', '.join(sorted(rows))})" for why, rows in inferred.items()]
    prov["reference"] = {
        **reference_provenance(reference),
        "rows": sorted(
            {ref for h in result.histories for p in h.points for ref in (p.reference, *p.alternates)},
            key=lambda s: int(s.rsplit("#", 1)[1]),
        ),
    }
    prov["change_points"] = {h.key.label(): h.change_points.params for h in result.histories}
    prov["flops_formula_equivalence"] = "bridgebench.model.flops v1 vs v2 of the configs/model entry"


def _value_rows(of: Side, **labels: str) -> list[dict[str, Any]]:
    """One row per record of a side: its labels (``side``, ``key``), record id, iterations used, median and mean."""
    return [
        {**labels, "record_id": r["record_id"], "iterations": len(v), "median": float(np.median(v)),
         "mean": float(np.mean(v))}
        for r, v in zip(of.records, of.values)
    ]  # fmt: skip
