"""Finishing a parse: the step view (one rank, duplicates, segments, superseded attempts), the format, the outcome
and the windows (:func:`finish`), and a :class:`~bridgebench.logs.parsed.ParsedLog` made from steps
(:func:`parsed_from_steps`)."""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any

import numpy as np

from bridgebench.logs.fields import StateFields
from bridgebench.logs.parsed import ParsedLog
from bridgebench.logs.signals import OUTCOMES, decide_outcome
from bridgebench.logs.steady import StepColumns, log_interval, segment_starts, steady_state
from bridgebench.logs.step import Step

#: An iteration number beyond this is invalid data (no run logs 10**15 steps); such records are dropped and counted
#: (``ParsedLog.invalid_iterations``) -- they would not fit the int64 columns the windows are computed on.
MAX_ITERATION = 10**15
#: Formats :func:`bridgebench.logs.parser.parse_log` reports (``tensorboard`` for event files, see
#: :mod:`bridgebench.logs.events`).
FORMATS: tuple[str, ...] = ("megatron_bridge", "megatron_lm", "nemo2", "nemo1", "unknown")


_ITERATION = attrgetter("iteration")


def _pick_rank(records: dict[str | None, list[Step]]) -> str | None:
    def key(label: str | None) -> tuple:
        recs = records[label]
        nums = tuple(int(x) for x in re.findall(r"\d+", label)) if label else ()
        return (sum(r.lm_loss is not None for r in recs), len(recs), nums)

    if len(records) == 1:
        return next(iter(records))
    return max(records, key=key)


def _valid_records(S: StateFields) -> tuple[list[Step], np.ndarray | None, int]:
    """The step view's rank's records with a possible iteration number, their iterations (int64) and how many were
    dropped as invalid (< -1 or > :data:`MAX_ITERATION`)."""
    recs = S.records[_pick_rank(S.records)] if S.records else []
    try:
        its = np.fromiter(map(_ITERATION, recs), np.int64, len(recs)) if recs else None
    except OverflowError:  # beyond int64: certainly beyond MAX_ITERATION
        its = np.array([MAX_ITERATION + 1])
    invalid = 0
    if its is not None and (its.max() > MAX_ITERATION or its.min() < -1):
        # impossible iteration numbers: invalid data, dropped and counted (the rare path; the check above is numpy)
        kept = [r for r in recs if -1 <= r.iteration <= MAX_ITERATION]
        invalid = len(recs) - len(kept)
        recs = kept
        its = np.fromiter(map(_ITERATION, recs), np.int64, len(recs)) if recs else None
    return recs, its, invalid


def _segments(S: StateFields, recs: list[Step], starts: dict[int, int]) -> tuple[list[Step], int, int, int, int | None]:
    """Duplicates dropped, restarts into segments (a smaller iteration or a Bridge start marker), newer attempts
    superseding older ones: (steps by iteration, restarts, duplicates, superseded, where the last segment starts);
    fills ``starts`` (segment -> start iteration)."""
    restarts = dups = superseded = 0
    last_segment_start: int | None = None
    by_iter: dict[int, Step] = {}
    segment = 0
    last: int | None = None
    markers = iter(S.restart_markers)
    marker = next(markers, None)
    if marker is not None and recs and marker[0] < recs[0].offset:
        starts[0] = marker[1]
        marker = next(markers, None)
    for r in recs:
        new_segment_at = None
        while marker is not None and r.offset > marker[0]:
            if last is not None:
                segment += 1
                restarts += 1
                last = None
                starts[segment] = marker[1]
                new_segment_at = marker[0]
            marker = next(markers, None)
        if last is not None:
            if r.iteration == last:
                dups += 1
                continue
            if r.iteration < last:
                segment += 1
                restarts += 1
                new_segment_at = r.offset
        if new_segment_at is not None:
            last_segment_start = new_segment_at
        if r.iteration in by_iter:
            superseded += 1
        r.segment = segment
        by_iter[r.iteration] = r
        last = r.iteration
    return sorted(by_iter.values(), key=lambda s: s.iteration), restarts, dups, superseded, last_segment_start


def _inferred_steps(S: StateFields) -> list[Step]:
    """Steps of a log without iteration records: orphan Step Time lines, NeMo 2 fragments or a NeMo timing list."""
    if S.orphan_st:
        steps = [
            Step(iteration=i, step_time_s=a, tflops_per_gpu=b, offset=off, source="step_time", inferred_iteration=True)
            for i, (a, b, off) in enumerate(S.orphan_st, 1)
        ]
        S.orphan_st = []
        return steps
    if S.fragments:
        for i, s in enumerate(S.fragments, 1):
            s.iteration = i
        return S.fragments
    if S.nemo_list:
        return [
            Step(iteration=i, step_time_s=v, offset=S.nemo_list_offset, source="nemo_list", inferred_iteration=True)
            for i, v in enumerate(S.nemo_list, 1)
        ]
    return []


def _format_of(S: StateFields, steps: list[Step]) -> str:
    """The log's format (:data:`FORMATS`) from its steps' sources and the Bridge markers."""
    sources = {s.source for s in steps}
    if sources & {"nemo2", "nemo_list", "nemo_fragment"}:
        return "nemo2"
    if "nemo1" in sources:
        return "nemo1"
    if S.bridge_marker:
        return "megatron_bridge"
    if "megatron" in sources:
        return "megatron_lm"
    return "unknown"


def _end_of(S: StateFields, steps: list[Step]) -> tuple[int | None, bool]:
    """(total iterations, whether the last step reached it)."""
    if steps and not steps[-1].inferred_iteration:
        last_step = steps[-1]
        if last_step.source == "nemo2":
            total = S.max_steps or last_step.total_iters
            return total, total is not None and last_step.iteration >= total - 1  # global_step is 0-based
        total = last_step.total_iters
        return total, total is not None and last_step.iteration >= total
    return (S.max_steps or None), False


def _memory_summary(S: StateFields) -> dict[str, Any]:
    """``ParsedLog.memory``: peaks over every rank and report (MB), per rank as reported; empty without reports."""
    if not S.memory:
        return {}

    def peak(name: str) -> float | None:
        vals = [e[name] for e in S.memory.values() if name in e]
        return max(vals) if vals else None

    return {
        "unit": "MB",
        "source_unit": "/".join(sorted(S.memory_units)),
        "peak_allocated_mb": peak("max_allocated_mb"),
        "peak_reserved_mb": peak("max_reserved_mb"),
        "allocated_mb": peak("allocated_mb"),
        "reserved_mb": peak("reserved_mb"),
        "alloc_retries": peak("alloc_retries"),
        "ranks_reported": sorted(S.memory),
        "reports": S.memory_reports,
        "per_rank": {r: dict(e) for r, e in sorted(S.memory.items())},
    }


def finish(S: StateFields, path: str | None, nbytes: int, warmup: int, min_steps: int) -> ParsedLog:
    """The :class:`~bridgebench.logs.parsed.ParsedLog` of a finished parse (``nbytes`` read; windows with ``warmup``
    / ``min_steps``): the step view, the format, the end, the outcome and its detail, memory."""
    if S.pending_st is not None:
        S.orphan_st.append(S.pending_st)
        S.pending_st = None
    restarts = dups = superseded = 0
    starts: dict[int, int] = {}
    last_segment_start: int | None = None
    iteration_ranks = sorted(label for label in S.records if label is not None)
    recs, its, invalid = _valid_records(S)
    if (
        recs
        and its is not None
        and all(off < recs[0].offset for off, _ in S.restart_markers)
        and (len(recs) == 1 or bool((np.diff(its) > 0).all()))
    ):
        # one attempt, iterations increasing: no duplicate, no restart; the markers (if any) precede every record
        # and only the first sets the start of segment 0 (as in _segments, where they pass with no record yet)
        if S.restart_markers:
            starts[0] = S.restart_markers[0][1]
        steps = list(recs)
    elif S.records:
        steps, restarts, dups, superseded, last_segment_start = _segments(S, recs, starts)
    else:
        steps = _inferred_steps(S)
    total, reached = _end_of(S, steps)
    outcome, recovered = decide_outcome(
        S.signals, S.signal_last, reached_end=reached or S.end_marker is not None, last_segment_start=last_segment_start
    )
    detail: str | None = None
    if outcome in S.signals:
        detail = S.signals[outcome]
        if outcome == "crash" and S.crash_exception:
            detail = S.crash_exception
    elif outcome == "completed":
        detail = S.end_marker or (f"iteration {steps[-1].iteration}/{total}" if steps else None)
        if recovered:
            detail = f"{detail} (after {restarts} in-job restart(s) following {', '.join(recovered)})"
    return parsed_from_steps(
        steps, path=path, format=_format_of(S, steps), outcome=outcome, outcome_detail=detail, total_iters=total,
        memory=_memory_summary(S), ranks_seen=sorted(S.ranks), signals=dict(S.signals),
        signal_counts=dict(S.signal_counts), end_marker=S.end_marker, reached_final_iteration=reached,
        restarts=restarts, duplicates_dropped=dups, superseded_steps=superseded, iteration_ranks=iteration_ranks,
        orphan_step_time_lines=len(S.orphan_st), bytes=nbytes, warmup_steps=warmup, min_steps=min_steps,
        recovered=recovered,
        recovered_detail={
            c: (S.crash_exception if c == "crash" and S.crash_exception else S.signals[c]) for c in recovered
        },
        starts=starts, skipped_is_nan=S.skipped_is_nan, invalid_iterations=invalid,
    )  # fmt: skip


def parsed_from_steps(
    steps: list[Step], *, warmup_steps: int, min_steps: int, skipped_is_nan: bool = True, **fields: Any
) -> ParsedLog:
    """A :class:`ParsedLog` for ``steps`` (ordered by iteration) with its windows computed.  ``fields`` are the
    other :class:`ParsedLog` fields (``path``, ``format``, ``outcome`` ... ; defaults: empty / None)."""
    fields.setdefault("path", None)
    fields.setdefault("format", "unknown")
    fields.setdefault("outcome", "incomplete")
    fields.setdefault("outcome_detail", None)
    fields.setdefault("total_iters", None)
    fields.setdefault("memory", {})
    fields.setdefault("ranks_seen", [])
    parsed = ParsedLog(_steps=steps, warmup_steps=warmup_steps, min_steps=min_steps, **fields)
    cols = StepColumns(steps)
    interval = log_interval(steps, cols)
    base = segment_starts(steps, parsed.starts, interval, cols)
    for metric in ("step_time_s", "tflops_per_gpu", "tokens_per_s_per_gpu"):
        parsed.steady[metric] = steady_state(
            steps,
            warmup=warmup_steps,
            min_steps=min_steps,
            metric=metric,
            outcome=parsed.outcome if parsed.outcome in OUTCOMES else None,
            skipped_is_nan=skipped_is_nan,
            starts=parsed.starts,
            _base=base,
            _interval=interval,
            _cols=cols,
        )
    return parsed
