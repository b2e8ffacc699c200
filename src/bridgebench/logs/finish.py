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


def finish(S: StateFields, path: str | None, nbytes: int, warmup: int, min_steps: int) -> ParsedLog:
    if S.pending_st is not None:
        S.orphan_st.append(S.pending_st)
        S.pending_st = None

    steps: list[Step] = []
    restarts = dups = superseded = 0
    starts: dict[int, int] = {}
    last_segment_start: int | None = None
    invalid = 0
    iteration_ranks = sorted(label for label in S.records if label is not None)
    recs = S.records[_pick_rank(S.records)] if S.records else []
    try:
        its = np.fromiter(map(_ITERATION, recs), np.int64, len(recs)) if recs else None
    except OverflowError:  # beyond int64: certainly beyond MAX_ITERATION
        its = np.array([MAX_ITERATION + 1])
    if its is not None and (its.max() > MAX_ITERATION or its.min() < -1):
        # impossible iteration numbers: invalid data, dropped and counted (the rare path; the check above is numpy)
        kept = [r for r in recs if -1 <= r.iteration <= MAX_ITERATION]
        invalid = len(recs) - len(kept)
        recs = kept
        its = np.fromiter(map(_ITERATION, recs), np.int64, len(recs)) if recs else None
    if (
        recs
        and all(off < recs[0].offset for off, _ in S.restart_markers)
        and (len(recs) == 1 or bool((np.diff(its) > 0).all()))
    ):
        # one attempt, iterations increasing: no duplicate, no restart; the markers (if any) precede every record
        # and only the first sets the start of segment 0 (as in the loop below, where they pass with no record yet)
        if S.restart_markers:
            starts[0] = S.restart_markers[0][1]
        steps = list(recs)
    elif S.records:
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
        steps = sorted(by_iter.values(), key=lambda s: s.iteration)
    elif S.orphan_st:
        steps = [
            Step(iteration=i, step_time_s=a, tflops_per_gpu=b, offset=off, source="step_time", inferred_iteration=True)
            for i, (a, b, off) in enumerate(S.orphan_st, 1)
        ]
        S.orphan_st = []
    elif S.fragments:
        steps = S.fragments
        for i, s in enumerate(steps, 1):
            s.iteration = i
    elif S.nemo_list:
        steps = [
            Step(iteration=i, step_time_s=v, offset=S.nemo_list_offset, source="nemo_list", inferred_iteration=True)
            for i, v in enumerate(S.nemo_list, 1)
        ]

    sources = {s.source for s in steps}
    if sources & {"nemo2", "nemo_list", "nemo_fragment"}:
        fmt = "nemo2"
    elif "nemo1" in sources:
        fmt = "nemo1"
    elif S.bridge_marker:
        fmt = "megatron_bridge"
    elif "megatron" in sources:
        fmt = "megatron_lm"
    else:
        fmt = "unknown"

    total: int | None = None
    reached = False
    if steps and not steps[-1].inferred_iteration:
        last_step = steps[-1]
        if last_step.source == "nemo2":
            total = S.max_steps or last_step.total_iters
            reached = total is not None and last_step.iteration >= total - 1  # global_step is 0-based
        else:
            total = last_step.total_iters
            reached = total is not None and last_step.iteration >= total
    elif S.max_steps:
        total = S.max_steps

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
    recovered_detail = {
        c: (S.crash_exception if c == "crash" and S.crash_exception else S.signals[c]) for c in recovered
    }

    memory: dict[str, Any] = {}
    if S.memory:

        def peak(name: str) -> float | None:
            vals = [e[name] for e in S.memory.values() if name in e]
            return max(vals) if vals else None

        memory = {
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

    return parsed_from_steps(
        steps,
        path=path,
        format=fmt,
        outcome=outcome,
        outcome_detail=detail,
        total_iters=total,
        memory=memory,
        ranks_seen=sorted(S.ranks),
        signals=dict(S.signals),
        signal_counts=dict(S.signal_counts),
        end_marker=S.end_marker,
        reached_final_iteration=reached,
        restarts=restarts,
        duplicates_dropped=dups,
        superseded_steps=superseded,
        iteration_ranks=iteration_ranks,
        orphan_step_time_lines=len(S.orphan_st),
        bytes=nbytes,
        warmup_steps=warmup,
        min_steps=min_steps,
        recovered=recovered,
        recovered_detail=recovered_detail,
        starts=starts,
        skipped_is_nan=S.skipped_is_nan,
        invalid_iterations=invalid,
    )


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
