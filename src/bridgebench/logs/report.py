"""A parsed log as JSON (:func:`to_json`) and in words (:func:`explain`)."""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any

import numpy as np

from bridgebench.logs.finish import MAX_ITERATION
from bridgebench.logs.parsed import ParsedLog
from bridgebench.logs.steady import SteadyState, window_summary


def _fin(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


_ITERATION = attrgetter("iteration")
_STEP_TIME_S, _TFLOPS = attrgetter("step_time_s"), attrgetter("tflops_per_gpu")


def _finite_list(values) -> list[float | None]:
    """``[_fin(v) for v in values]``; one numpy check when every value is a finite float (the common case)."""
    vals = list(values)
    if vals and np.isfinite(np.array(vals, dtype=float)).all():  # None -> nan, so this also rules None out
        return vals
    return [_fin(v) for v in vals]


def to_json(parsed: ParsedLog, *, series: bool = True) -> dict[str, Any]:
    """JSON-ready summary (strict JSON: NaN/inf become null).

    Top level: ``format``, ``outcome``, ``outcome_detail``, ``steps`` (iterations parsed); the headline figures
    ``step_time_s`` (s/iteration), ``tflops_per_gpu`` (model TFLOP/s/GPU) and ``tokens_per_s_per_gpu`` -- means over
    each metric's window, present whenever the log has a timed step, whatever the quality or outcome; ``quality``
    (see :mod:`bridgebench.logs.steady`), ``note`` (why a figure is short or missing, in words), ``window_ok`` /
    ``window_reason`` (the strict judgement), ``window`` (:func:`~bridgebench.logs.steady.window_summary`),
    ``series`` (per-iteration ``iteration`` / ``step_time_s`` / ``tflops_per_gpu`` of the step view; omitted with
    ``series=False``) and ``detail`` (everything else).
    """
    st = parsed.steady.get("step_time_s")
    tf = parsed.steady.get("tflops_per_gpu")
    tk = parsed.steady.get("tokens_per_s_per_gpu")
    steps = parsed._steps
    last = steps[-1].complete() if steps else None

    def headline(ss: SteadyState | None) -> float | None:  # invalid data gives no figure
        return _fin(ss.mean) if ss is not None and ss.count and ss.quality != "invalid" else None

    out: dict[str, Any] = {
        "path": parsed.path,
        "format": parsed.format,
        "outcome": parsed.outcome,
        "outcome_detail": parsed.outcome_detail,
        "steps": len(steps),
        "step_time_s": headline(st),
        # the headline is the window's mean (upstream's performance check averages); the median beside it
        "statistic": "mean",
        "step_time_s_mean": headline(st),
        "step_time_s_median": _fin(st.median) if st is not None and st.count else None,
        "tflops_per_gpu": headline(tf),
        "tokens_per_s_per_gpu": headline(tk),
        "quality": parsed.quality,
        "note": explain(parsed),
        "window_ok": bool(st and st.window_ok),
        "window_reason": st.reason if st and st.count else "no timed steps",
        "window": window_summary(st, tf) if st is not None else None,
    }
    if series:
        out["series"] = {
            "iteration": list(map(_ITERATION, steps)),
            "step_time_s": _finite_list(map(_STEP_TIME_S, steps)),
            "tflops_per_gpu": _finite_list(map(_TFLOPS, steps)),
        }
    out["detail"] = {
        "total_iters": parsed.total_iters,
        "first_iteration": steps[0].iteration if steps else None,
        "last_iteration": parsed.last_iteration,
        "reached_final_iteration": parsed.reached_final_iteration,
        "end_marker": parsed.end_marker,
        "last_lm_loss": _fin(last.lm_loss) if last else None,
        "restarts": parsed.restarts,
        "recovered_from": list(parsed.recovered),
        "duplicates_dropped": parsed.duplicates_dropped,
        "superseded_steps": parsed.superseded_steps,
        "orphan_step_time_lines": parsed.orphan_step_time_lines,
        "invalid_iterations": parsed.invalid_iterations,
        "signals": dict(parsed.signals),
        "signal_counts": dict(parsed.signal_counts),
        "ranks_seen": list(parsed.ranks_seen),
        "iteration_ranks": list(parsed.iteration_ranks),
        "memory": {k: v for k, v in parsed.memory.items() if k != "per_rank"}
        | ({"per_rank": {str(r): e for r, e in parsed.memory["per_rank"].items()}} if parsed.memory else {}),
        "steady_state": {
            k: {kk: (_fin(vv) if isinstance(vv, float) else vv) for kk, vv in v.as_dict().items()}
            for k, v in parsed.steady.items()
        },
        "bytes": parsed.bytes,
    }
    return out


def explain(parsed: ParsedLog) -> str:
    """One plain sentence: where the figures come from, or why there are none."""
    st = parsed.steady.get("step_time_s")
    dropped = (
        f"{parsed.invalid_iterations} record(s) with an impossible iteration number (< -1 or > {MAX_ITERATION:.0e}) "
        "dropped as invalid data"
        if parsed.invalid_iterations
        else ""
    )
    if st is not None and st.count:
        return f"{st.note}; {dropped}" if dropped else st.note
    if dropped:
        return f"no valid steps: {dropped}"
    if parsed._steps:
        return f"{len(parsed._steps)} logged iterations, none with a step time"
    if parsed.signals:
        return f"no timed steps; failure lines seen ({', '.join(parsed.signals)})"
    return "no timed steps: no iteration, Step Time or NeMo timing lines in this log"
