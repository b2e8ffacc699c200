"""The sweep pipeline, in one place and one direction: enumerate -> rules -> memory -> time (ranked, with how far to
trust the ranking). ``bridgebench sweep`` runs it over a space and then plans the top K (``bridgebench.launch.
sweep``); ``bridgebench predict`` is the same pipeline over one point (:func:`predict`); the published-table check
runs it over NVIDIA's published configurations (``bridgebench.validation.published_points``).

Stages (each a function over point records, plain dicts updated in place; a record's columns are declared once
by the typed row :class:`bridgebench.sweep.row.SweepRow`, through which ``points.parquet`` is written and read):

1. ``enumerate`` (:func:`bridgebench.sweep.points.enumerate_points`): every candidate, ``auto`` keys derived;
2. ``rules`` (:func:`bridgebench.sweep.points.check_rules`): the fast validity rules, duplicates;
3. ``memory`` (:func:`bridgebench.sweep.scoring.score_memory`): peak memory per GPU, pruned above the HBM;
4. ``time`` (:func:`bridgebench.sweep.scoring.score_time` then
   :func:`bridgebench.sweep.trust.rank_and_annotate`): predicted step time, the ranking, ties within the
   prediction band, indistinct points collapsed, the recipe's own configuration and expert groups beyond NVLink marked.

A :class:`StageStore` (the launch layer's sweep folder) may hand back a finished stage's rows and keeps each stage's
rows once it is done, so an interrupted sweep resumes without redoing a stage; the pipeline never calls back into
the layer that runs it otherwise.

Point statuses: ``enumerated`` (between stages 1 and 2), ``invalid`` (a rule: column ``rule``), ``duplicate``,
``valid`` (between 2 and 3), ``over_memory``, ``fits`` (between 3 and 4), ``ranked``, ``indistinct``; the launch
layer adds ``planned``, ``plan_failed``, ``submitted`` and ``skipped`` for the top K.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Iterable, Protocol, Sequence

from bridgebench.config import rules
from bridgebench.config.calibration import ModelCalibration
from bridgebench.config.time_knobs import shown_knobs
from bridgebench.model.placement import PlacementError
from bridgebench.model.steptime.config import TimeModelError
from bridgebench.sweep.bases import Base, arch_spec, base_of, compose_bases, effective
from bridgebench.sweep.points import check_rules, enumerate_points, rule_point
from bridgebench.sweep.row import SweepRow, records
from bridgebench.sweep.scoring import placement_json, score_memory, score_time, time_config
from bridgebench.sweep.space import Space, parse_space
from bridgebench.sweep.trust import published_place, rank_and_annotate

STAGES = ("enumerate", "rules", "memory", "time")
#: statuses a row has on entering each stage (what the stage counts as its input)
_STAGE_INPUT = {"rules": ("enumerated",), "memory": ("valid",), "time": ("fits", "over_memory")}


class Progress(Protocol):
    """What the pipeline reports while it runs (the CLI shows it with rich)."""

    def start(self, stage: str, total: int) -> None: ...

    def update(self, done: int, total: int) -> None: ...

    def log(self, message: str) -> None: ...


class StageStore(Protocol):
    """Where a sweep keeps its stages' rows (``bridgebench.launch.sweep``): ``load`` gives a finished stage's rows
    (``None``: run it), ``save`` records a stage as done with its rows, duration and input count."""

    def load(self, stage: str, index: int) -> list[dict[str, Any]] | None: ...

    def save(self, stage: str, index: int, rows: list[dict[str, Any]], seconds: float, points: int) -> None: ...


class Quiet:
    """A :class:`Progress` that says nothing (library callers, tests)."""

    def start(self, stage: str, total: int) -> None:
        pass

    def update(self, done: int, total: int) -> None:
        pass

    def log(self, message: str) -> None:
        pass


def prepare(
    overrides: Sequence[str],
    space: str | None = None,
    *,
    top_k: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Space, list[Base]]:
    """Parse a search space and compose its bases (one Hydra compose per combination of its group axes).

    Raises:
        bridgebench.sweep.space.SweepError: an empty space, an unknown field, a value of the wrong type or a
            non-positive size.
        bridgebench.config.compose.ConfigError: bad fixed overrides.
    """
    sp = parse_space(overrides, space, top_k=top_k)
    return sp, compose_bases(sp, progress=progress)


def run_pipeline(
    bases: Sequence[Base],
    calib: ModelCalibration,
    *,
    space: Space | None = None,
    pairs: Iterable[tuple[Base, dict[str, Any]]] | None = None,
    total: int | None = None,
    store: StageStore | None = None,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Run the four stages over a space's candidates (``space``) or explicit ``(base, delta)`` pairs; returns every
    point's record, checked against the row schema (:class:`bridgebench.sweep.row.SweepRow`: every column, in its
    order, as a stored sweep reads back). ``total`` is the number of pairs (for progress)."""
    say = progress or Quiet()
    rows: list[dict[str, Any]] = []
    steps: dict[str, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]] = {
        "enumerate": lambda _: enumerate_points(space, bases, say.update, pairs=pairs, total=total),
        "rules": lambda r: check_rules(r, bases, say.update),
        "memory": lambda r: score_memory(r, bases, calib, say.update),
        "time": lambda r: rank_and_annotate(score_time(r, bases, calib, say.update), bases),
    }
    for index, stage in enumerate(STAGES, 1):
        loaded = store.load(stage, index) if store is not None else None
        if loaded is not None:
            rows = loaded
            continue
        if stage == "enumerate":
            points = total if total is not None else _space_size(space, bases)
        else:
            points = sum(1 for r in rows if r["status"] in _STAGE_INPUT[stage])
        say.start(f"{index} {stage}", points)
        t0 = time.perf_counter()
        rows = steps[stage](rows)
        if store is not None:
            store.save(stage, index, rows, time.perf_counter() - t0, points)
    return records(rows)


def _space_size(space: Space | None, bases: Sequence[Base]) -> int:
    if space is None:
        return 0
    if space.points is not None:
        return len(space.points)
    size = 1
    for a in space.axes:
        if not a.group:
            size *= len(a.values)
    return size * len(bases)


def predict(overrides: Sequence[str], calib: ModelCalibration) -> SweepRow:
    """One point through the sweep pipeline (no second path): its typed row (:class:`SweepRow`) with ``fits`` and
    ``pruned_by`` set. A point a validity rule refuses is still scored for memory and time where the models can (its
    row says so in ``pruned_by``), so the numbers that would have mattered are shown.

    The row also carries ``knobs`` (:func:`bridgebench.config.time_knobs.shown_knobs`: the settings users do not
    type, as they run) and ``placement`` (:func:`bridgebench.sweep.scoring.placement_json`).

    Raises:
        bridgebench.config.compose.ConfigError: bad overrides, or an override that sweeps values.
        bridgebench.config.rules.RuleError: a rule with a known fix is broken (:func:`_refuse_with_fix`).
    """
    base = base_of(overrides)
    row = run_pipeline([base], calib, pairs=[(base, {})], total=1)[0]
    _refuse_with_fix(base, row)
    if row["status"] == "invalid" and row.get("rule") not in ("model_spec", "memory_model", "time_model"):
        probe = {**row, "status": "valid"}
        score_memory([probe], [base], calib)
        if probe["status"] in ("fits", "over_memory"):
            score_time([probe], [base], calib)
        row.update({k: v for k, v in probe.items() if k.startswith(("mem_", "t_", "hbm_")) or k in _TIME_KEYS})
    row["fits"] = row["status"] in ("ranked", "fits", "indistinct")
    row["pruned_by"] = None if row["fits"] else {"rule": row.get("rule"), "reason": row.get("reason")}
    delta = json.loads(row["delta"])
    v = effective(base, delta)
    spec = arch_spec(base, delta, {})
    spec = base.spec if isinstance(spec, Exception) else spec
    row["knobs"] = shown_knobs(v, spec.is_moe)
    try:
        row["placement"] = placement_json(time_config(v, base.gpu, spec), spec)
    except (TimeModelError, PlacementError, TypeError, ValueError):
        row["placement"] = None
    return SweepRow.from_record(row)


def _refuse_with_fix(base: Base, row: dict[str, Any]) -> None:
    """``predict`` refuses (as ``plan`` does) a point whose broken rules all have a known fix -- MoE with TP > 1 and
    no sequence parallelism, HybridEP beyond its NVLink domain, layers that do not split over PP x VP -- naming the
    override that fixes each, instead of pricing what upstream would refuse. A point that also breaks a rule
    without a fix stays a pruned row (``pruned_by`` lists every rule, fixes included).

    Raises:
        bridgebench.config.rules.RuleError: the violations that have a fix.
    """
    if row["status"] != "invalid" or row.get("rule") in ("model_spec", "memory_model", "time_model", None):
        return
    delta = json.loads(row["delta"])
    spec = arch_spec(base, delta, {})
    if isinstance(spec, Exception):
        return
    found = rules.check(rule_point(effective(base, delta), spec, base.rule_env(delta)))
    if found and all(f.fix for f in found):
        raise rules.RuleError(found)


#: rule ids that are upstream's start-up assertions (Megatron-Core, Megatron-Bridge's launcher, the dispatchers):
#: every rule of the table but bridgebench's own
UPSTREAM_IDS = frozenset(k for k, r in rules.RULES.items() if not r.source.startswith("bridgebench"))

_TIME_KEYS = ("step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu", "band_pct", "time_release", "score")


def summarize(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts per status and per pruning rule (``by_rule``: the first rule a point breaks; ``upstream_rules``: every
    upstream start-up assertion a point breaks, :data:`UPSTREAM_IDS`), the ties with the best, the points whose
    expert group leaves the NVLink domain, and where the recipe's own configuration landed
    (:func:`published_place`)."""
    rows = list(rows)
    by_status: dict[str, int] = {}
    by_rule: dict[str, int] = {}
    for r in rows:
        by_status[r["status"]] = by_status.get(r["status"], 0) + 1
        if r.get("rule"):
            by_rule[r["rule"]] = by_rule.get(r["rule"], 0) + 1
    upstream: dict[str, int] = {}
    for r in rows:
        for rule in (r.get("rules") or "").split(","):
            if rule in UPSTREAM_IDS:
                upstream[rule] = upstream.get(rule, 0) + 1
    return {
        "by_status": by_status,
        "by_rule": dict(sorted(by_rule.items(), key=lambda x: -x[1])),
        "upstream_rules": dict(sorted(upstream.items(), key=lambda x: -x[1])),
        "ties": sum(1 for r in rows if r.get("tie") and r.get("rank") is not None),
        "ep_leaves_nvlink": sum(1 for r in rows if r.get("ep_leaves_nvlink") and r.get("rank") is not None),
        "published": published_place(rows),
    }
