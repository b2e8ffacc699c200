"""The window of steps a log's figures come from: warm-up by iteration number, quality flag, statistics.

Always the best available figure: any log with at least one timed step gets a window and figures; the window's
``quality`` says how far to trust them:

* ``steady`` -- at least ``min_steps`` timed steps after warm-up, evenly spaced, from a job that has ended;
* ``short`` -- fewer than ``min_steps`` after warm-up, or none after warm-up (then the window is every timed step);
* ``excerpt`` -- logged iterations are missing inside the window (uneven spacing: an excerpt pasted with gaps);
* ``incomplete`` -- enough evenly spaced steps, but the log stops before the run's end (outcome ``incomplete``: still
  running, killed without a word, or an excerpt).
* ``invalid`` -- the window holds values no measurement can have (:data:`VALID_RANGE`: a step time <= 0, non-finite or
  beyond a day; a throughput <= 0 or non-finite): invalid data, never ``steady``; the statistics are over the valid
  values only and the headline figure is withheld (:func:`bridgebench.logs.parser.to_json`).
* ``damaged`` -- the figures come from TensorBoard event files that are truncated or fail their CRCs
  (:func:`bridgebench.logs.events.damage`): what could be read is kept, never called ``steady``.

The outcome (completed, failed, ...) is separate: a failed run's healthy window is still ``steady``; ``window_ok``
is the strict flag -- a steady window of a completed run without NaN/skipped steps.

Warm-up is skipped by iteration number, per attempt (segment): in the first attempt the steps with ``iteration -
start <= warmup`` are warm-up, where ``start`` is the iteration the attempt started from -- Megatron-Bridge prints it
(``Setting rerun_state_machine.current_iteration to N``); otherwise 0 (Megatron iterations are 1-based: iteration
``i`` ends the ``i``-th step; NeMo's 0-based ``global_step`` uses -1).  A later attempt (an in-job restart, or a
resume appended to the same log) starts at its start line or at ``first logged iteration - log interval``; its
warm-up is its own first :data:`RESTART_WARMUP` step(s), and never less than the run's first ``warmup`` iterations.
A log that starts mid-run (an excerpt from iteration 71) therefore has no warm-up inside it.  Statistics: mean (the
headline: upstream's performance check averages step times after skipping the first iterations -- Megatron-Bridge
``scripts/performance/utils/evaluate.py::validate_performance``, ``np.mean``), median, sample standard deviation
(ddof=1), quartiles (linear interpolation = ``statistics.quantiles(method='inclusive')``), min, max.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Iterable

import numpy as np

QUALITIES: tuple[str, ...] = ("steady", "short", "excerpt", "incomplete", "invalid", "damaged")
#: Steps of warm-up after an in-job restart (or a resume appended to the same log), counted from the iteration the
#: attempt resumed at: a restarted process pays its own start-up again (checkpoint load, first-step allocation and
#: compilation) in its first step -- NeMo's resiliency demo log: 10.26 s for the first step after the restart
#: against 7.59 s steady (``tests/data/logs/nemo2_resiliency_crash_injob_restart.log``) -- but does not repeat the
#: run's warm-up of ``warmup`` iterations, which would leave a short attempt no steps at all.
RESTART_WARMUP = 1
#: (exclusive low, inclusive high) of a valid value per metric; others: finite and > 0. A step time of 0 or less
#: cannot be measured, and one beyond a day is a unit or logging error (no trainer logs one step per day).
VALID_RANGE: dict[str, tuple[float, float]] = {
    "step_time_s": (0.0, 86400.0),
    "tflops_per_gpu": (0.0, 1e6),  # TFLOP/s per GPU: 1e6 is ~70x the densest FP4 peak of any GPU (GB300: 15,000)
    "tokens_per_s_per_gpu": (0.0, 1e9),
}


@dataclass(slots=True, kw_only=True)
class SteadyState:
    """Summary of one metric over a window of steps (see :func:`steady_state`).

    ``median``/``mean``/``stdev``/``q1``/``q3``/``iqr``/``min``/``max`` are in the metric's unit (``step_time_s``:
    seconds, ``tflops_per_gpu``: TFLOP/s/GPU) over ``count`` steps, iterations ``first_iteration``..
    ``last_iteration``.  ``quality`` is one of :data:`QUALITIES` (None when no step has the metric);
    ``warmup_skipped`` timed steps fell inside the warm-up; ``fallback`` is True when none was left after it and the
    window is every timed step.  ``window_ok`` is the strict flag (steady, no NaN/skipped step, outcome completed or
    not given); ``reason`` lists every problem ('ok' when none); ``note`` says in words where the figures come from.
    """

    metric: str
    count: int
    median: float | None
    mean: float | None
    stdev: float | None
    q1: float | None
    q3: float | None
    iqr: float | None
    min: float | None
    max: float | None
    first_iteration: int | None
    last_iteration: int | None
    warmup: int
    min_steps: int
    insufficient: bool
    window_ok: bool
    reason: str
    segments: int = 0  # number of distinct restart segments the window draws from
    quality: str | None = None
    warmup_skipped: int = 0
    fallback: bool = False
    gaps: int = 0  # spacings inside the window that differ from the log interval
    interval: int = 1  # log interval (smallest positive spacing of consecutive logged iterations)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


class StepColumns:
    """Per-step columns of one step list, shared by its windows: ``its`` / ``segs`` (int64 iteration and segment
    of every step), metric values and which steps still hold an unparsed tail, read once each."""

    __slots__ = ("steps", "its", "segs", "_values", "_tail_none")

    def __init__(self, steps: list) -> None:
        self.steps = steps
        n = len(steps)
        self.its = np.fromiter(map(_ITERATION, steps), np.int64, n)
        self.segs = np.fromiter(map(_SEGMENT, steps), np.int64, n)
        self._values: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._tail_none: np.ndarray | None = None

    def values(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(has the metric, its value as float: nan where absent) for every step; ``float(v)`` of each value."""
        got = self._values.get(metric)
        if got is None:
            vals = list(map(attrgetter(metric), self.steps))
            n = len(vals)
            arr = np.array(vals, dtype=float) if n and vals[0] is not None else None  # None -> nan
            if arr is not None and not np.isnan(arr).any():  # every step has it (and none is NaN)
                got = (np.ones(n, bool), arr)
            elif vals.count(None) == n:
                got = (np.zeros(n, bool), np.full(n, np.nan))
            else:
                obj = np.empty(n, object)
                obj[:] = vals
                timed = np.not_equal(obj, None)
                arr = np.full(n, np.nan)
                arr[timed] = obj[timed].astype(float)
                got = (timed, arr)
            self._values[metric] = got
        return got

    def tail_none(self) -> np.ndarray:
        """True for the steps whose fields are all parsed (no lazily kept tail)."""
        if self._tail_none is None:
            tails = list(map(attrgetter("_tail"), self.steps))
            n, nones = len(tails), tails.count(None)
            if nones in (0, n):
                self._tail_none = np.full(n, nones == n)
            else:
                self._tail_none = np.fromiter((x is None for x in tails), bool, n)
        return self._tail_none


_ITERATION, _SEGMENT = attrgetter("iteration"), attrgetter("segment")


def log_interval(steps: list, _cols: StepColumns | None = None) -> int:
    """Smallest positive spacing between consecutive logged iterations of one segment (1 when unknown)."""
    if len(steps) < 2:
        return 1
    cols = _cols if _cols is not None else StepColumns(steps)
    d = np.diff(cols.its)
    d = d[(cols.segs[1:] == cols.segs[:-1]) & (d > 0)]
    return int(d.min()) if len(d) else 1


def segment_starts(
    steps: list, starts: dict[int, int] | None = None, interval: int | None = None, _cols: StepColumns | None = None
) -> dict[int, int]:
    """Start iteration of each segment: ``starts`` where known (Bridge start lines), else 0 (or -1 for 0-based NeMo
    ``global_step``) for segment 0 and ``first logged - log interval`` for later segments."""
    out: dict[int, int] = dict(starts or {})
    cols = _cols if _cols is not None else StepColumns(steps)
    interval = interval or log_interval(steps, cols)
    _, first = np.unique(cols.segs, return_index=True)
    for i in np.sort(first).tolist():  # each segment's first step, in log order
        s = steps[i]
        if s.segment in out:
            continue
        if s.segment == 0:
            out[0] = -1 if s.source == "nemo2" else 0
        else:
            out[s.segment] = s.iteration - interval
    return out


def bad_reason(step, skipped_is_nan: bool = True) -> str | None:
    """Why ``step`` is a bad (NaN) step, or None.

    Skipped iterations count only when the loss scale is 1 (bf16 / fp32: Megatron then skips a step only on NaN/inf
    gradients); with fp16 dynamic loss scaling (loss scale > 1) skips are the scaler's overflow search
    (``megatron/core/optimizer/grad_scaler.py::DynamicGradScaler``), not a failure.  A fast-path record still
    holding its unparsed tail was kept lazy only because both counters were 0 and it had no nan/inf: not bad.
    """
    if getattr(step, "_tail", None) is not None:
        return None
    if step.lm_loss is not None and not math.isfinite(step.lm_loss):
        return f"lm loss {step.lm_loss}"
    if step.grad_norm is not None and not math.isfinite(step.grad_norm):
        return f"grad norm {step.grad_norm}"
    if step.nan_iterations:
        return f"number of nan iterations: {step.nan_iterations}"
    if skipped_is_nan and step.skipped and (step.loss_scale is None or step.loss_scale == 1.0):
        return f"number of skipped iterations: {step.skipped}"
    return None


def steady_state(
    steps: Iterable,
    *,
    warmup: int,
    min_steps: int,
    metric: str = "step_time_s",
    outcome: str | None = None,
    skipped_is_nan: bool = True,
    starts: dict[int, int] | None = None,
    _base: dict[int, int] | None = None,
    _interval: int | None = None,
    _cols: StepColumns | None = None,
) -> SteadyState:
    """Window statistics of ``metric`` ('step_time_s', 'tflops_per_gpu', or any numeric Step attribute).

    Window: the steps that have ``metric`` and lie after the warm-up of their segment (``iteration - start >
    warmup``; see the module docstring; ``starts`` maps segment -> start iteration where the log says it).  When no
    timed step is left after the warm-up, the window is every timed step (``fallback``, quality ``short``).
    ``reason`` lists: too few steps (``insufficient``), uneven spacing (gaps), NaN/skipped steps inside the window,
    non-finite values, and an ``outcome`` other than ``completed`` (when given).  Statistics are over the finite
    values (mean, median, numpy ``std(ddof=1)`` and ``percentile(25, 75)``; one value gives zero spread).
    """
    steps = steps if isinstance(steps, list) else list(steps)
    cols = _cols if _cols is not None else StepColumns(steps)
    base = _base if _base is not None else segment_starts(steps, starts, _cols=cols)
    interval = _interval if _interval is not None else log_interval(steps, cols)
    timed, vals = cols.values(metric)
    its, segs = cols.its, cols.segs
    in_window = timed & _after_warmup(its, segs, base, warmup)
    n_timed = int(timed.sum())
    fallback = n_timed > 0 and not in_window.any()
    widx = np.flatnonzero(timed if fallback else in_window)
    skipped = 0 if fallback else n_timed - len(widx)
    arr = vals[widx]
    lo_ok, hi_ok = VALID_RANGE.get(metric, (0.0, math.inf))
    with np.errstate(invalid="ignore"):
        finite_mask = np.isfinite(arr) & (arr > lo_ok) & (arr <= hi_ok)  # the valid values (module docstring)
    finite_arr = arr[finite_mask]
    count = len(widx)

    gaps = _gaps(its[widx], segs[widx], interval) if count > 1 else 0

    problems: list[str] = []
    insufficient = count < min_steps
    if fallback:
        problems.append(
            f"insufficient: {count} timed step{'s' * (count != 1)}, none after warm-up {warmup}: "
            f"figures from all {count}"
        )
    elif insufficient:
        problems.append(f"insufficient: {count} steps after warmup={warmup}, need min_steps={min_steps}")
    if gaps:
        problems.append(f"{gaps} gap{'s' * (gaps != 1)} in the logged iterations (log interval {interval})")
    parsed_idx = widx[cols.tail_none()[widx]].tolist()
    bad = [steps[i] for i in parsed_idx if bad_reason(steps[i], skipped_is_nan) is not None]
    if bad:
        problems.append(f"{len(bad)} NaN/skipped steps in window (first at iteration {bad[0].iteration})")
    n_finite = int(finite_mask.sum())
    if n_finite != count:
        problems.append(f"{count - n_finite} invalid {metric} values in window ({_range_text(metric)}): invalid data")
    if outcome is not None and outcome != "completed":
        problems.append(f"run outcome is {outcome!r}, not 'completed'")

    quality = _quality(count, n_finite, fallback or insufficient, gaps, outcome)
    med, mean, sd, q1, q3, iqr, lo, hi = _spread(finite_arr)
    ok = quality == "steady" and not problems
    return SteadyState(
        metric=metric, count=count, median=med, mean=mean, stdev=sd, q1=q1, q3=q3, iqr=iqr, min=lo, max=hi,
        first_iteration=steps[widx[0]].iteration if count else None,
        last_iteration=steps[widx[-1]].iteration if count else None,
        warmup=warmup, min_steps=min_steps, insufficient=insufficient, window_ok=ok,
        reason="; ".join(problems) if problems else "ok", segments=len(np.unique(segs[widx])), quality=quality,
        warmup_skipped=skipped, fallback=fallback, gaps=gaps, interval=interval,
        note=_note(count, quality, fallback, skipped, warmup, min_steps, gaps, outcome, len(base) - 1,
                   (metric, count - n_finite)),
    )  # fmt: skip


def _quality(count: int, n_finite: int, short: bool, gaps: int, outcome: str | None) -> str | None:
    """The window's quality (:data:`QUALITIES`): None without steps, else invalid > short > excerpt > incomplete >
    steady, the first that holds."""
    if count == 0:
        return None
    if n_finite != count:
        return "invalid"
    if short:
        return "short"
    if gaps:
        return "excerpt"
    return "incomplete" if outcome == "incomplete" else "steady"


def _after_warmup(its: np.ndarray, segs: np.ndarray, base: dict[int, int], warmup: int) -> np.ndarray:
    """Which steps lie after the warm-up of their segment (bool per step): one threshold for one segment; else the
    run's first ``warmup`` iterations and each restart's own first steps (:data:`RESTART_WARMUP`)."""
    if len(base) <= 1:
        return its > next(iter(base.values()), 0) + warmup
    uniq, inv = np.unique(segs, return_inverse=True)
    first = int(uniq[0])
    origin = base.get(first, 0)
    again = min(warmup, RESTART_WARMUP)
    thresholds = [
        origin + warmup if s == first else max(origin + warmup, base.get(s, 0) + again) for s in uniq.tolist()
    ]
    return its > np.array(thresholds, np.int64)[inv.ravel()]


def _gaps(its_w: np.ndarray, segs_w: np.ndarray, interval: int) -> int:
    """Steps of the window whose distance to the previous one (same segment) is not the log interval (the first
    logged iteration 1 of an interval-N log excepted)."""
    d = np.diff(its_w)
    same = segs_w[1:] == segs_w[:-1]
    return int((same & (d != interval) & ~((its_w[:-1] == 1) & (d == interval - 1))).sum())


def _spread(x: np.ndarray) -> tuple[float | None, ...]:
    """(median, mean, stdev (ddof 1), q1, q3, iqr, min, max) of the valid window values; Nones when empty, zero
    spread for one value."""
    if not len(x):
        return (None,) * 8
    med, mean, lo, hi = float(np.median(x)), float(np.mean(x)), float(x.min()), float(x.max())
    if len(x) < 2:
        return med, mean, 0.0, lo, lo, 0.0, lo, hi
    q1, q3 = (float(q) for q in np.percentile(x, (25.0, 75.0)))
    return med, mean, float(np.std(x, ddof=1)), q1, q3, q3 - q1, lo, hi


def _range_text(metric: str) -> str:
    lo, hi = VALID_RANGE.get(metric, (0.0, math.inf))
    unit = " s" if metric == "step_time_s" else ""
    beyond = f", or beyond {hi:g}{unit}" if math.isfinite(hi) else ""
    return f"<= {lo:g}{unit}, non-finite{beyond}"


def _note(count, quality, fallback, skipped, warmup, min_steps, gaps, outcome, restarts=0, invalid=("", 0)) -> str:
    """One sentence saying where the figures come from and why they are short, in plain words."""
    n = f"{count} timed step{'s' * (count != 1)}"
    if quality is None:
        return "no timed steps"
    if quality == "invalid":
        metric, bad = invalid
        return (
            f"{bad} of {count} {metric} values in the window are impossible ({_range_text(metric)}): invalid data, "
            "no figure"
        )
    again = min(warmup, RESTART_WARMUP)
    wu = f"warm-up {warmup}"
    if restarts > 0 and again:
        wu += f" and {again} step{'s' * (again != 1)} after each of {restarts} restart{'s' * (restarts != 1)}"
    if fallback:
        return f"{n}, none after {wu}: figures from all {count}"
    used = f"{n} after {wu} ({skipped} skipped)" if skipped else f"{n} ({wu})"
    if quality == "short":
        return f"{used}, fewer than {min_steps}: figures from those"
    if quality == "excerpt":
        return f"{used} with {gaps} gap{'s' * (gaps != 1)} in the iterations: an excerpt"
    if quality == "incomplete":
        return f"{used}; the log stops before the run's end (outcome incomplete)"
    if outcome not in (None, "completed"):
        return f"{used}; healthy window of a run that ended {outcome}"
    return used


def window_summary(st: SteadyState, tf: SteadyState | None = None) -> dict[str, Any]:
    """``record["window"]``: the steps used, warm-up skipped, count, spread and quality of the step-time window
    (plus the TFLOP/s window's count and mean).  Units: seconds, TFLOP/s/GPU."""

    def fin(v):
        return v if v is None or not isinstance(v, float) or math.isfinite(v) else None

    out = {
        "quality": st.quality,
        "count": st.count,
        "first_iteration": st.first_iteration,
        "last_iteration": st.last_iteration,
        "warmup": st.warmup,
        "warmup_skipped": st.warmup_skipped,
        "fallback_all_steps": st.fallback,
        "min_steps": st.min_steps,
        "log_interval": st.interval,
        "gaps": st.gaps,
        "segments": st.segments,
        "mean_s": fin(st.mean),
        "median_s": fin(st.median),
        "spread": {"stdev_s": fin(st.stdev), "iqr_s": fin(st.iqr), "min_s": fin(st.min), "max_s": fin(st.max)},
        "window_ok": st.window_ok,
        "reason": st.reason,
        "note": st.note,
    }
    if tf is not None:
        out["tflops_count"] = tf.count
        out["tflops_mean"] = fin(tf.mean)
    return out
