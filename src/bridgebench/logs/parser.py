"""Stream a pretraining log into steps, a window of figures with its quality, and an outcome class.

One pass over the log in large binary chunks (bounded memory: :data:`CHUNK_BYTES` plus the steps kept).  A
multi-pattern scan (``ahocorasick_rs``, SIMD-accelerated Aho-Corasick) finds the few candidate lines -- record heads,
Step Time lines, failure and end-of-training strings (:data:`bridgebench.logs.formats.RECORD_PATTERNS`,
:data:`bridgebench.logs.signals.SIGNAL_PATTERNS`); only those are decoded and parsed, the rest of the log is never
touched by Python code.  Standard Megatron iteration lines take a fast path that reads the timed fields at once and
keeps the rest of the line to be parsed when :attr:`ParsedLog.steps` is first read.  The fast path's offsets become
a *line template* (:mod:`bridgebench.logs.templates`): later lines with the same digit skeleton are checked and read
for a whole chunk at once with numpy, and runs of (Step Time line, record line) pairs make their steps in one go --
with the same results as line by line.  Records split over several physical lines (cloudai's fixture, terminal
wrapping) and Python tracebacks switch to a line-by-line mode until they close.

The line forms and their sources are in :mod:`bridgebench.logs.formats`; outcome classes and precedence in
:mod:`bridgebench.logs.signals`; windows, warm-up and quality in :mod:`bridgebench.logs.steady`.

Step view: one rank's records -- the rank label with the most records carrying a loss (ties: the highest numeric
label, i.e. the last pipeline stage).  Within it an iteration equal to the previous one is a duplicate (dropped); a
smaller one starts a new *segment* (a restart / resume; so does a Megatron-Bridge ``train()`` start line), and the
newer attempt's records supersede the older attempt's for the same iterations.
"""

from __future__ import annotations

import gc
import gzip
import io
import math
import os
import re
import stat
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any, BinaryIO, Callable, TextIO

import ahocorasick_rs
import numpy as np

from bridgebench.errors import BridgebenchError
from bridgebench.logs import formats as F
from bridgebench.logs.signals import (
    EXC_LINE_RE,
    OUTCOME_PRECEDENCE,
    OUTCOMES,
    SIGNAL_PATTERNS,
    classify_line,
    decide_outcome,
    end_marker,
)
from bridgebench.logs.steady import (
    QUALITIES,
    SteadyState,
    _Columns,
    bad_reason,
    log_interval,
    segment_starts,
    steady_state,
    window_summary,
)
from bridgebench.logs.templates import DIGITS0, LineTemplate, read_rows, rec_template, st_template

__all__ = [
    "CHUNK_BYTES",
    "FORMATS",
    "LogReadError",
    "OUTCOMES",
    "OUTCOME_PRECEDENCE",
    "ParsedLog",
    "QUALITIES",
    "SteadyState",
    "Step",
    "bad_reason",
    "classify_line",
    "parse_log",
    "parsed_from_steps",
    "steady_state",
    "to_json",
]

#: Bytes read per chunk; memory is this plus the current line's carry-over plus the steps kept.
CHUNK_BYTES = 4 << 20
#: A "line" longer than this with no newline (binary junk, a progress bar rewriting itself) is cut here.
MAX_LINE_BYTES = 1 << 20
#: An iteration number beyond this is invalid data (no run logs 10**15 steps); such records are dropped and counted
#: (``ParsedLog.invalid_iterations``) -- they would not fit the int64 columns the windows are computed on.
MAX_ITERATION = 10**15
#: Formats :func:`parse_log` reports (``tensorboard`` for event files, see :mod:`bridgebench.logs.events`).
FORMATS: tuple[str, ...] = ("megatron_bridge", "megatron_lm", "nemo2", "nemo1", "unknown")
_DETAIL_MAX = 500
_TRACEBACK_LOOKAHEAD = 400  # lines searched after the first 'Traceback' for the exception line that closes it
_MAX_FRAGMENTS = 16
_MAX_PENDING_LINES = 2000  # lines scanned one by one for the rest of a split record before giving up on it

_KINDS: list[str] = [k for _, k in F.RECORD_PATTERNS] + ["line"] * len(SIGNAL_PATTERNS)
_RECORD, _STEP_TIME = _KINDS.index("record"), _KINDS.index("step_time")
_SCANNER = ahocorasick_rs.BytesAhoCorasick(
    [p for p, _ in F.RECORD_PATTERNS] + list(SIGNAL_PATTERNS), matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST
)


_MAX_TEMPLATES = 64  # distinct line skeletons remembered per form (cleared when full)
_BATCH_MIN_HITS = 256  # chunks with fewer candidate strings are read line by line
_BATCH_TEMPLATES = 4  # templates per form tried on a chunk, most recently learned first
_PROBE_ROWS = 32  # rows a template other than the current one is first tried on
_REBATCH_MISSES = 32  # record / Step Time lines left to the line-by-line path before the chunk's rest is re-read
_MISS = object()


class LogReadError(BridgebenchError):
    """A log that cannot be read as text: empty, binary, or unreadable (the message says which)."""


# --------------------------------------------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Step:
    """One logged training step (with ``log_interval > 1``: one log interval, its figures interval averages).

    Units: ``step_time_s`` seconds per iteration (Megatron ``elapsed time per iteration (ms)`` / 1000 or ``(s)``,
    Bridge ``Step Time``, NeMo ``train_step_timing in s``); ``tflops_per_gpu`` model TFLOP/s per GPU (Megatron
    ``throughput per GPU (TFLOP/s/GPU)``, Bridge ``GPU utilization ... TFLOP/s/GPU``, Megatron-DeepSpeed ``TFLOPs``,
    NeMo ``TFLOPS_per_GPU``); ``tokens_per_s_per_gpu`` tokens/s per GPU (Megatron-DeepSpeed ``tokens per gpu per
    second (tgs)``); losses are the interval averages the trainer prints.  ``None`` = not in the log.  ``offset`` is
    the byte offset of the record's line in the log.
    """

    iteration: int
    step_time_s: float | None = None
    tflops_per_gpu: float | None = None
    lm_loss: float | None = None
    grad_norm: float | None = None
    skipped: int | None = None
    nan_iterations: int | None = None
    total_iters: int | None = None
    consumed_samples: int | None = None
    global_batch_size: int | None = None
    learning_rate: float | None = None
    loss_scale: float | None = None
    tokens_per_s_per_gpu: float | None = None
    extra: dict[str, float] = field(default_factory=dict)  # other numeric fields, e.g. 'load_balancing_loss'
    rank: str | None = None  # rank-prefix label of the line, None when unprefixed
    segment: int = 0  # 0 = first attempt; +1 at every restart/resume
    offset: int = 0
    source: str = "megatron"  # megatron | step_time | nemo2 | nemo_fragment | nemo_list | nemo1 | tensorboard
    inferred_iteration: bool = False  # iteration is an ordinal, not printed by the trainer
    _tail: bytes | None = field(default=None, repr=False, compare=False)  # unparsed rest of a fast-path record

    def complete(self) -> Step:
        """Parse the fields a fast-path record left for later (idempotent); returns self."""
        tail = self._tail
        if tail is not None:
            self._tail = None
            _fill_megatron(self, tail.decode("utf-8", "replace"))
        return self

    @property
    def is_bad(self) -> bool:
        """NaN/inf loss or grad norm, or a trainer-reported NaN iteration or (bf16) skipped iteration."""
        return bad_reason(self.complete(), True) is not None


def _fast_step(it, secs, tflops, loss, total, rank, offset, tail) -> Step:
    """``Step(it, secs, tflops, loss, total_iters=total, rank=rank, offset=offset, _tail=tail)`` -- every other
    field at its default -- set slot by slot (the dataclass ``__init__`` with its 20 parameters costs more)."""
    s = _new_step(Step)
    s.iteration, s.step_time_s, s.tflops_per_gpu, s.lm_loss = it, secs, tflops, loss
    s.grad_norm = s.skipped = s.nan_iterations = None
    s.total_iters = total
    s.consumed_samples = s.global_batch_size = s.learning_rate = s.loss_scale = s.tokens_per_s_per_gpu = None
    s.extra = {}
    s.rank, s.segment, s.offset, s.source, s.inferred_iteration, s._tail = rank, 0, offset, "megatron", False, tail
    return s


_new_step = object.__new__


def _clone(step: Step, rank: str | None, offset: int) -> Step:
    """A copy of ``step`` (its current field values, its own ``extra`` dict) with another rank label and offset."""
    s = step
    return Step(
        s.iteration,
        s.step_time_s,
        s.tflops_per_gpu,
        s.lm_loss,
        s.grad_norm,
        s.skipped,
        s.nan_iterations,
        s.total_iters,
        s.consumed_samples,
        s.global_batch_size,
        s.learning_rate,
        s.loss_scale,
        s.tokens_per_s_per_gpu,
        dict(s.extra),
        rank,
        s.segment,
        offset,
        s.source,
        s.inferred_iteration,
        s._tail,
    )


def _num(s: str | bytes) -> float | None:
    try:
        return float(s)
    except ValueError:
        t = s.strip().lower() if isinstance(s, str) else s.strip().lower().decode("ascii", "replace")
        if t.startswith("nan"):  # tqdm renders NaN as 'nan.0'
            return math.nan
        return None


def _int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        v = _num(s)
        return int(v) if v is not None and math.isfinite(v) else None


def _convert(conv, val: str):
    if conv is int:
        return _int(val)
    if conv is float:
        return _num(val)
    try:
        return conv(val)
    except ValueError:
        return None


def _fill_megatron(step: Step, text: str) -> None:
    """Fields of a Megatron(-Bridge / -DeepSpeed) iteration record after its head (``key: value |`` pairs; the 2019
    form without colons too).  Text after the last ``|`` is never a complete field (glued output, a cut line)."""
    keys = F.MEG_KEYS
    parts = text.split("|")
    for part in parts[:-1]:
        key, sep, val = part.partition(":")
        if not sep:  # 2019 form 'learning rate 2.020E-06', 'lm loss 9.44E+00'
            key, _, val = part.strip().rpartition(" ")
            if not key:
                continue
        key = key.strip()
        spec = keys.get(key)
        if spec is None:  # another loss or metric, e.g. 'load_balancing_loss', 'mtp_1 loss', 'params norm'
            v = _num(val)
            if v is not None and sep:
                step.extra[key] = v
            elif v is not None and key.endswith("loss"):
                step.extra[key] = v
            continue
        attr, conv = spec
        value = _convert(conv, val)
        if value is not None:
            setattr(step, attr, value)


def _megatron_record(text: str, head: re.Match, rank: str | None, offset: int) -> Step:
    step = Step(int(head.group(1)), total_iters=int(head.group(2)), rank=rank, offset=offset)
    _fill_megatron(step, text[head.end() :])
    return step


def _nemo_record(text: str, head: re.Match, rank: str | None, offset: int) -> Step:
    """Fields of one NeMo 2 / Lightning ``Training epoch E, iteration i/M | ...`` line."""
    step = Step(iteration=int(head.group(2)), rank=rank, offset=offset, source="nemo2")
    step.total_iters = int(head.group(3)) + 1  # M is the last 0-based batch index of the epoch
    if not _fill_nemo(step, text[head.end() :], "|", ":"):
        step.extra["epoch"] = float(head.group(1))
    return step


def _fill_nemo(step: Step, text: str, sep: str, kv: str) -> bool:
    """NeMo ``key: value`` (ProgressPrinter) or ``key=value`` (progress bar) pairs; True if ``global_step`` set the
    iteration."""
    got_step = False
    for part in text.split(sep):
        key, s, val = part.partition(kv)
        if not s:
            continue
        key = key.strip()
        if key == "global_step":
            gs = _int(val.strip())
            if gs is not None:
                step.iteration = gs
                got_step = True
        elif key in F.NEMO_KEYS:
            attr, conv = F.NEMO_KEYS[key]
            setattr(step, attr, _convert(conv, val.strip()))
        else:
            v = _num(val)
            if v is not None:
                step.extra[key] = v
    return got_step


def _progress_bar(segment: str, rank: str | None, offset: int) -> Step | None:
    """One refresh of a NeMo 1 / Lightning tqdm bar: iteration = bar count N of ``N/M``."""
    m = F.PROGRESS_BAR_RE.search(segment)
    if m is None:
        return None
    n, total = int(m.group(1)), int(m.group(2))
    step = Step(iteration=n, total_iters=total, rank=rank, offset=offset, source="nemo1")
    pairs = m.group(3).split(",")
    _fill_nemo(step, ",".join(p for p in pairs if "=" in p), ",", "=")
    step.iteration = n  # global_step lags the bar by one within an epoch; the bar count is what was done
    step.extra.pop("v_num", None)
    return step


# --------------------------------------------------------------------------------------------------------------
# Result
# --------------------------------------------------------------------------------------------------------------


@dataclass
class ParsedLog:
    """Everything :func:`parse_log` extracts from one log.

    ``steps``: de-duplicated steps of one rank's view, ordered by iteration (fields of fast-path records are parsed
    on first access).  ``total_iters``: Megatron ``--train-iters`` (the ``M`` of ``iteration N/M``), NeMo
    ``max_steps`` or the bar total.  ``memory``: GPU memory in MB (2**20 bytes; Bridge GB = 1e9 bytes converted) from
    every ``memory`` report -- ``peak_allocated_mb`` / ``peak_reserved_mb`` (largest ``max allocated`` / ``max
    reserved`` of any rank and report), ``allocated_mb`` / ``reserved_mb`` (largest current value in any rank's
    latest report), ``alloc_retries``, ``source_unit``, ``ranks_reported``, ``reports``, ``per_rank``; empty when the
    log has none.  ``signals``: first line per failure class seen; ``signal_counts``: lines per class;
    ``recovered``: failure classes the run recovered from by an in-job restart (outcome then ``completed``).
    ``steady``: :class:`SteadyState` per metric ('step_time_s', 'tflops_per_gpu', 'tokens_per_s_per_gpu').
    ``starts``: segment -> iteration it started from, where the log says (Bridge start lines).
    ``invalid_iterations``: records dropped for an impossible iteration number (< -1 or > :data:`MAX_ITERATION`).
    """

    path: str | None
    format: str
    outcome: str
    outcome_detail: str | None
    _steps: list[Step]
    total_iters: int | None
    memory: dict[str, Any]
    ranks_seen: list[str]
    signals: dict[str, str] = field(default_factory=dict)
    signal_counts: dict[str, int] = field(default_factory=dict)
    end_marker: str | None = None
    reached_final_iteration: bool = False
    restarts: int = 0
    duplicates_dropped: int = 0
    superseded_steps: int = 0
    iteration_ranks: list[str] = field(default_factory=list)
    orphan_step_time_lines: int = 0
    bytes: int = 0
    warmup_steps: int = 0
    min_steps: int = 0
    recovered: list[str] = field(default_factory=list)
    recovered_detail: dict[str, str] = field(default_factory=dict)  # class -> its first line (crash: the exception)
    starts: dict[int, int] = field(default_factory=dict)
    steady: dict[str, SteadyState] = field(default_factory=dict)
    invalid_iterations: int = 0  # records dropped: iteration number < -1 or > MAX_ITERATION (invalid data)

    @property
    def steps(self) -> list[Step]:
        for s in self._steps:
            if s._tail is not None:
                s.complete()
        return self._steps

    @property
    def step_count(self) -> int:
        return len(self._steps)

    @property
    def last_iteration(self) -> int | None:
        return self._steps[-1].iteration if self._steps else None

    @property
    def quality(self) -> str | None:
        """The step-time window's quality; ``invalid`` also when every record had an impossible iteration number."""
        st = self.steady.get("step_time_s")
        if (st is None or not st.count) and self.invalid_iterations:
            return "invalid"
        return st.quality if st else None


# --------------------------------------------------------------------------------------------------------------
# The streaming state
# --------------------------------------------------------------------------------------------------------------


def _label_of(prefix: str) -> str | None:
    """Rank label of a prefix: the prefix trimmed; torch.distributed's ``[rankN]:`` dropped when a launcher prefix
    precedes it (``3: [rank3]:`` -> ``3``), so a rank's traceback and ordinary lines share one label."""
    if not prefix:
        return None
    i = prefix.find("[rank")
    if i > 0:
        prefix = prefix[:i]
    return prefix.strip().rstrip(":").rstrip() or None


def split_prefix(line: str) -> tuple[str | None, str]:
    """(rank label or None, content without the rank prefixes)."""
    end = F.PREFIX_RE.match(line).end()
    if not end:
        return None, line
    return _label_of(line[:end]), line[end:]


class _State:
    """Mutable accumulator of one parse."""

    def __init__(self, skipped_is_nan: bool) -> None:
        self.skipped_is_nan = skipped_is_nan
        self.records: dict[str | None, list[Step]] = {}
        # label -> (fragments, offset, wrapped, the Step Time line waiting for this record)
        self.pending: dict[str | None, tuple[list[str], int, bool, Any]] = {}
        self.pending_age = 0
        self.pending_st: tuple[float | None, float | None, int] | None = None  # Step Time awaiting its record
        self.last_record: Step | None = None
        self.last_record_has_st = False
        self.orphan_st: list[tuple[float | None, float | None, int]] = []
        self.fragments: list[Step] = []  # NeMo 2 lines without a header
        self.nemo_list: list[float] | None = None
        self.nemo_list_offset = 0
        self.signals: dict[str, str] = {}
        self.signal_counts: dict[str, int] = {}
        self.signal_last: dict[str, int] = {}
        self.crash_exception: str | None = None
        self.tb_lines = 0
        self.end_marker: str | None = None
        self.end_offset: int | None = None
        self.max_steps: int | None = None
        self.ranks: set[str] = set()
        self.bridge_marker = False
        self.memory: dict[int, dict[str, Any]] = {}
        self.memory_units: set[str] = set()
        self.memory_reports = 0
        self.restart_markers: list[tuple[int, int]] = []  # (offset, start iteration) of Bridge train() starts
        self._labels: dict[bytes, str | None] = {b"": None}
        self._last_content: bytes | None = None
        self._last_step: Step | None = None
        # line templates of the two hot line forms (templates.rec_template / st_template): skeleton -> template, and the
        # one used last
        self._rec_tpls: dict[bytes, LineTemplate] = {}
        self._st_tpls: dict[bytes, LineTemplate] = {}
        self._rec_tpl: LineTemplate | None = None
        self._st_tpl: LineTemplate | None = None

    # -- scanning ------------------------------------------------------------------------------------------
    def scan(self, buf: bytes, end: int, base: int) -> None:
        """Handle the complete lines of ``buf[:end]`` (``base`` = byte offset of ``buf`` in the log).

        Candidate lines come from the multi-pattern scan; the first candidate of a line decides how it is handled.
        Record and Step Time lines with the digit skeleton of a line the fast path accepted before
        (:mod:`bridgebench.logs.templates`) are checked and read for the whole chunk at once (:meth:`_batch`); the
        rest go line by line (:meth:`_hit`), in log order, with the same state updates either way.
        """
        pos = 0
        if self.pending or self.tb_lines:
            pos = self._line_mode(buf, 0, end, base)
        hay = buf if end == len(buf) else memoryview(buf)[:end]
        hits = _SCANNER.find_matches_as_indexes(hay)
        hit = self._hit
        first = 0
        if len(hits) < _BATCH_MIN_HITS:
            first = len(hits)
        elif not (self._rec_tpls or self._st_tpls):  # line by line until the fast path has made templates
            first = min(len(hits), _BATCH_MIN_HITS)
        for idx, s, e in hits[:first]:
            if s >= pos:
                pos = hit(buf, end, base, idx, s, e, pos)
        if first == len(hits):
            return
        if first:
            hits = hits[first:]
        ev = self._batch(buf, hits)
        code, S = ev["code"].tolist(), ev["s"].tolist()
        cols = None  # ls, n, it, hit as lists: made when an event outside a run needs them
        ranks = self.ranks
        n_templates, misses = len(self._rec_tpls) + len(self._st_tpls), 0
        i, m = 0, len(code)
        while i < m:
            s = S[i]
            if s < pos:
                i += 1
                continue
            c = code[i]
            if c == 1:  # a Step Time line read by its template
                last = self._last_step
                j = int(ev["runend"][i])
                if j > i and (last is None or int(ev["it"][i + 1]) != last.iteration):
                    if j > i + 2 and ev["clone"][i + 2]:
                        pos = self._groups(buf, base, ev, i, j)
                        i = j
                        continue
                    if self.pending_st is None and self.last_record_has_st:
                        pos = self._pairs(buf, base, ev, i, j)
                        i = j
                        continue
                if cols is None:
                    cols = ls_, n_, it_, hit_of = [ev[k].tolist() for k in ("ls", "n", "it", "hit")]
                label = ev["label"][i]
                if label is not None and label not in ranks:
                    ranks.add(label)
                self.step_time(float(ev["x"][i]), float(ev["y"][i]), base + ls_[i])
                pos = ls_[i] + n_[i]
                i += 1
                continue
            if cols is None:
                cols = ls_, n_, it_, hit_of = [ev[k].tolist() for k in ("ls", "n", "it", "hit")]
            if c == 2:  # a record line read by its template
                ls, it, label = ls_[i], it_[i], ev["label"][i]
                if label is not None and label not in ranks:
                    ranks.add(label)
                pe, te = int(ev["pe"][i]), int(ev["te"][i])
                last = self._last_step
                if last is None or it != last.iteration:
                    y = None if ev["ynone"][i] else float(ev["y"][i])
                    step = Step(
                        it, float(ev["x"][i]), y, None if ev["znone"][i] else float(ev["z"][i]), None, None, None,
                        int(ev["tot"][i]), None, None, None, None, None, {}, label, 0, base + ls, "megatron", False,
                        ev["tail"][i],
                    )  # fmt: skip
                    self.add_record(step, None)
                    self._last_content, self._last_step = buf[ls + pe : ls + te], step
                    pos = ls + n_[i]
                    i += 1
                    continue
                if buf[ls + pe : ls + te] == self._last_content:  # the same record printed by another rank
                    self.add_record(_clone(last, label, base + ls), None)
                    pos = ls + n_[i]
                    i += 1
                    continue
            idx, s, e = hits[hit_of[i]]
            pos = hit(buf, end, base, idx, s, e, pos)
            i += 1
            if idx == _RECORD or idx == _STEP_TIME:  # no template fitted this line: a new one may fit the rest
                misses += 1
                if misses >= _REBATCH_MISSES and m - i >= _BATCH_MIN_HITS:
                    if len(self._rec_tpls) + len(self._st_tpls) > n_templates:
                        hits = hits[hit_of[i] :]
                        ev = self._batch(buf, hits)
                        code, S, cols = ev["code"].tolist(), ev["s"].tolist(), None
                        n_templates, i, m = len(self._rec_tpls) + len(self._st_tpls), 0, len(code)
                    misses = 0

    def _pairs(self, buf: bytes, base: int, ev: dict[str, np.ndarray], i: int, j: int) -> int:
        """Events ``i:j``: Step Time line, record line, Step Time line, ... each record a new iteration, starting with
        no Step Time pending and the last record holding its own.  Each Step Time line then waits for the record
        after it (:meth:`step_time`), which takes it (:meth:`add_record`: its TFLOP/s where the record has none),
        so the state afterwards is the same; the steps are made at once.  Returns where the next line starts."""
        st, rc = slice(i, j, 2), slice(i + 1, j, 2)
        k = (j - i) // 2
        ls = ev["ls"][rc]
        tf = np.where(ev["ynone"][rc], ev["y"][st], ev["y"][rc]).tolist()
        loss = ev["z"][rc].astype(object)
        loss[ev["znone"][rc]] = None
        labels = ev["label"][rc].tolist()
        tails = ev["tail"][rc].tolist()
        steps = list(
            map(
                _fast_step, ev["it"][rc].tolist(), ev["x"][rc].tolist(), tf, loss.tolist(), ev["tot"][rc].tolist(),
                labels, (base + ls).tolist(), tails,
            )
        )  # fmt: skip
        self.bridge_marker = True
        for label in set(ev["label"][i:j].tolist()):
            if label is not None:
                self.ranks.add(label)
        records = self.records
        if labels.count(labels[0]) == k:
            records.setdefault(labels[0], []).extend(steps)
        else:
            for step, label in zip(steps, labels):
                records.setdefault(label, []).append(step)
        last = steps[-1]
        self.pending_st, self.last_record_has_st, self.last_record, self._last_step = None, True, last, last
        e = j - 1
        a = int(ev["ls"][e])
        self._last_content = buf[a + int(ev["pe"][e]) : a + int(ev["te"][e])]
        return a + int(ev["n"][e])

    def _groups(self, buf: bytes, base: int, ev: dict[str, np.ndarray], i: int, j: int) -> int:
        """Events ``i:j``: groups of a Step Time line, a record line of a new iteration and the same record printed
        by other ranks (clones), every record with its own TFLOP/s.  The first Step Time line is handled as such
        (:meth:`step_time`); after it no Step Time value reaches a step -- each waits for the next new record
        (which has its TFLOP/s) or goes onto a clone that has it -- so the steps are made at once: each new record
        as :meth:`_pairs` makes it, each clone a copy of it (:func:`_clone`).  Returns where the next line
        starts."""
        label = ev["label"][i]
        if label is not None:
            self.ranks.add(label)
        self.step_time(float(ev["x"][i]), float(ev["y"][i]), base + int(ev["ls"][i]))
        code, clone = ev["code"][i:j], ev["clone"][i:j]
        recs = np.flatnonzero(code == 2) + i
        news = np.flatnonzero((code == 2) & ~clone) + i
        of = news[np.searchsorted(news, recs, "right") - 1]  # each record's new record
        loss = ev["z"][of].astype(object)
        loss[ev["znone"][of]] = None
        labels = ev["label"][recs].tolist()
        steps = list(
            map(
                _fast_step, ev["it"][of].tolist(), ev["x"][of].tolist(), ev["y"][of].tolist(), loss.tolist(),
                ev["tot"][of].tolist(), labels, (base + ev["ls"][recs]).tolist(), ev["tail"][of].tolist(),
            )
        )  # fmt: skip
        self.bridge_marker = True
        for label in set(ev["label"][i:j].tolist()):
            if label is not None:
                self.ranks.add(label)
        records = self.records
        for step, label in zip(steps, labels):
            recs_of = records.get(label)
            if recs_of is None:
                recs_of = records[label] = []
            recs_of.append(step)
        last_new = int(news[-1])
        a = int(ev["ls"][last_new])
        self._last_content = buf[a + int(ev["pe"][last_new]) : a + int(ev["te"][last_new])]
        self._last_step = steps[int(np.searchsorted(recs, last_new))]
        self.pending_st, self.last_record_has_st, self.last_record = None, False, steps[-1]
        e = j - 1
        return int(ev["ls"][e]) + int(ev["n"][e])

    def _batch(self, buf: bytes, hits: list[tuple[int, int, int]]) -> dict[str, np.ndarray]:
        """The chunk's candidates as events, in log order (arrays): ``code`` 2: a record line with a known skeleton
        (``x``, ``y``, ``z`` = step time in s, TFLOP/s, loss; ``ynone`` / ``znone`` where the form has none; ``it``,
        ``tot``), 1: a Step Time line (``x``, ``y`` = seconds, TFLOP/s), 0: anything else (for :meth:`_hit`); ``hit``:
        index into ``hits``; ``s``: its start; ``ls``, ``n``, ``pe``, ``tl``, ``te``: line start, length, and the
        prefix end, tail start and line end relative to it; ``label``: rank label; ``runend``: for a Step Time event
        starting a run of (Step Time, record) pairs whose records are all new iterations, the index after the run
        (else -1).  The other candidates inside a code 1/2 line are dropped, as the line-by-line loop skips them."""
        nh = len(hits)
        kinds = np.fromiter(map(_FIRST, hits), np.int64, nh)
        S = np.fromiter(map(_SECOND, hits), np.int64, nh)
        arr = np.frombuffer(buf, np.uint8)
        code = np.zeros(nh, np.int8)
        ls = np.zeros(nh, np.int64)
        tid = np.zeros(nh, np.int64)
        xs, ys, zs = np.zeros(nh), np.zeros(nh), np.zeros(nh)
        its = np.zeros(nh, np.int64)
        tots = np.zeros(nh, np.int64)
        ynone = np.zeros(nh, bool)
        znone = np.zeros(nh, bool)
        labels = np.full(nh, None, object)
        tails = np.full(nh, None, object)
        row_of = np.zeros(nh, np.int64)  # row of the line in its template's content matrix
        contents: dict[int, np.ndarray] = {}
        used: list[LineTemplate] = []
        for kind, c, current, cache in (
            (_RECORD, 2, self._rec_tpl, self._rec_tpls),
            (_STEP_TIME, 1, self._st_tpl, self._st_tpls),
        ):
            sel = np.flatnonzero(kinds == kind)
            tpls = [current] if current is not None else []
            tpls += [tp for tp in reversed(cache.values()) if tp is not current][: _BATCH_TEMPLATES - len(tpls)]
            latest, latest_row = None, -1
            for tpl in tpls:
                if not len(sel) or not tpl.vector:
                    continue
                if len(sel) > 2 * _PROBE_ROWS and tpl is not current:  # try a few rows first
                    if not read_rows(arr, S[sel[:_PROBE_ROWS]] - tpl.rs, tpl)[0].any():
                        continue
                ok, vals, pfx = read_rows(arr, S[sel] - tpl.rs, tpl)
                if not ok.any():
                    continue
                rows, sel = sel[ok], sel[~ok]
                row_of[rows] = np.arange(len(rows))
                cache[tpl.skel] = cache.pop(tpl.skel, tpl)  # most recently used last
                if rows[-1] > latest_row:
                    latest, latest_row = tpl, rows[-1]
                code[rows] = c
                ls[rows] = S[rows] - tpl.rs
                tid[rows] = len(used)
                used.append(tpl)
                if c == 2:
                    tails[rows] = vals["tail"]
                    contents[len(used) - 1] = vals["content"]
                    its[rows], tots[rows], xs[rows] = vals["it"], vals["tot"], vals["ms"] / 1000.0
                    ys[rows] = vals.get("tf", 0.0)
                    zs[rows] = vals.get("loss", 0.0)
                    ynone[rows] = "tf" not in vals
                    znone[rows] = "loss" not in vals
                else:
                    xs[rows], ys[rows] = vals["secs"], vals["tf"]
                if tpl.pe:
                    labels[rows] = self._labels_of(pfx)
            if latest is not None:  # the form of the chunk's last such line: the likeliest for the next chunk
                if c == 2:
                    self._rec_tpl = latest
                else:
                    self._st_tpl = latest
        hot = np.flatnonzero(code)
        if len(hot):  # drop the candidates inside a hot line other than its first
            starts = ls[hot]
            ends = starts + np.array([tp.n for tp in used])[tid[hot]]
            k = np.searchsorted(starts, S, "right") - 1
            kc = np.maximum(k, 0)
            keep = (k < 0) | (S >= ends[kc]) | (S == S[hot][kc])
        else:
            keep = np.ones(nh, bool)
        ev = np.flatnonzero(keep)
        tid = tid[ev]
        per = {
            name: np.array([getattr(tp, attr) if not idx else getattr(tp, attr)[idx - 1] for tp in used] or [0])[tid]
            for name, attr, idx in (("n", "n", 0), ("pe", "pe", 0), ("tl", "tail", 1), ("te", "tail", 2))
        }
        out = {
            "code": code[ev],
            "kind": kinds[ev],
            "hit": ev,
            "s": S[ev],
            "ls": ls[ev],
            "x": xs[ev],
            "y": ys[ev],
            "z": zs[ev],
            "ynone": ynone[ev],
            "znone": znone[ev],
            "it": its[ev],
            "tot": tots[ev],
            "label": labels[ev],
            "tail": tails[ev],
            **per,
        }
        # a record line that repeats the record line before it (same form, same bytes after the rank prefix): the
        # same record printed by another rank, i.e. a clone of the last new record
        c, it, m = out["code"], out["it"], len(ev)
        clone = np.zeros(m, bool)
        cand = np.flatnonzero((c[1:] == 2) & (c[:-1] == 2) & (tid[1:] == tid[:-1]) & (it[1:] == it[:-1])) + 1
        for t in np.unique(tid[cand]).tolist():
            sel = cand[tid[cand] == t]
            content, rows = contents[t], row_of[ev]
            clone[sel[(content[rows[sel]] == content[rows[sel - 1]]).all(axis=1)]] = True
        out["clone"] = clone
        # runs of groups (Step Time line, new record line, its clones): runend[i] = index after the run starting at
        # i (else -1).  A run's groups all have clones or none has; its records are new iterations one after the
        # other; in a run with clones every new record has its TFLOP/s (so no Step Time value reaches a step).
        idx = np.arange(m)
        nonclone = np.append(np.flatnonzero(~clone), m)
        e = nonclone[np.minimum(np.searchsorted(nonclone, idx + 2), len(nonclone) - 1)]  # where group i ends
        group = np.zeros(m + 1, bool)
        group[: m - 1] = (c[:-1] == 1) & (c[1:] == 2) & ~clone[1:]
        has_cl = e > idx + 2
        new_it = np.full(m + 1, -1, np.int64)
        new_it[: m - 1] = it[1:]
        new_tf = np.zeros(m + 1, bool)
        new_tf[: m - 1] = ~out["ynone"][1:]
        group[:m] &= ~has_cl | new_tf[:m]
        has_cl = np.append(has_cl, False)
        link = group[:m] & group[e] & (new_it[e] != new_it[:m]) & (has_cl[e] == has_cl[:m])
        ptr = np.where(link, e, idx)
        while True:  # follow the links to the last group of each run (pointer doubling)
            nxt = ptr[ptr]
            if (nxt == ptr).all():
                break
            ptr = nxt
        runend = np.where(group[:m], e[ptr], -1)
        out["runend"] = runend
        return out

    def _hit(self, buf: bytes, end: int, base: int, idx: int, s: int, e: int, pos: int) -> int:
        """Handle the line of the candidate ``idx`` found at ``buf[s:e]`` (its first candidate); ``pos`` = start of
        the line after the last one handled.  Returns where the next line starts (past any lines a split record or
        a traceback consumed)."""
        if idx == _RECORD and self._rec_tpl is not None:
            sk, n, rs, pe, ia, ib, ta, tb, ma, mb, fa, fb, la, lb, bar, le, za, zb = self._rec_tpl.tuple
            ls = pos if s - pos == rs else buf.rfind(b"\n", 0, s) + 1
            reg = buf[ls : ls + n]
            if reg.translate(DIGITS0) == sk and reg[za:zb] == F.ZERO_COUNTS_B:
                label = self._label(reg[:pe])
                it = int(reg[ia:ib])
                last = self._last_step
                if last is None or it != last.iteration:
                    step = Step(
                        it, float(reg[ma:mb]) / 1000.0, None if fa is None else float(reg[fa:fb]),
                        None if la is None else float(reg[la:lb]), None, None, None, int(reg[ta:tb]), None, None, None,
                        None, None, {}, label, 0, base + ls, "megatron", False, reg[bar:le],
                    )  # fmt: skip
                    self.add_record(step, None)
                    self._last_content, self._last_step = reg[pe:le], step
                    return ls + n
                if reg[pe:le] == self._last_content:  # the same record printed by another rank
                    self.add_record(_clone(last, label, base + ls), None)
                    return ls + n
        elif idx == _STEP_TIME and self._st_tpl is not None:
            sk, n, rs, pe, sa, sb, fa, fb = self._st_tpl.tuple
            ls = pos if s - pos == rs else buf.rfind(b"\n", 0, s) + 1
            reg = buf[ls : ls + n]
            if reg.translate(DIGITS0) == sk:
                self._label(reg[:pe])
                self.step_time(float(reg[sa:sb]), float(reg[fa:fb]), base + ls)
                return ls + n
        ls = buf.rfind(b"\n", 0, s) + 1
        le = buf.find(b"\n", s, end)
        if le < 0:
            le = end
        if idx == _RECORD:
            prev = self._last_step
            done = self._record_fast(buf, ls, s, le, base)
            if done and self._last_step is not prev and le < end:
                self._rec_tpl = self._learn(self._rec_tpls, rec_template, buf, ls, s, le)
        elif idx == _STEP_TIME:
            done = self._step_time_fast(buf, ls, s, e, le, base)
            if done and le < end:
                self._st_tpl = self._learn(self._st_tpls, st_template, buf, ls, s, le)
        else:
            done = False
        if not done:
            self.line(buf[ls:le].decode("utf-8", "replace"), base + ls)
        pos = le + 1
        if self.pending or self.tb_lines:
            pos = self._line_mode(buf, pos, end, base)
        return pos

    @staticmethod
    def _learn(cache: dict[bytes, LineTemplate], make: Callable, buf: bytes, ls: int, at: int, le: int):
        """The template of the line ``buf[ls:le]`` (newline at ``le``), from ``cache`` or made and cached."""
        tpl = cache.get(buf[ls : le + 1].translate(DIGITS0))
        if tpl is None:
            if len(cache) >= _MAX_TEMPLATES:
                cache.clear()
            tpl = make(buf, ls, at, le)
            cache[tpl.skel] = tpl
        return tpl

    def _line_mode(self, buf: bytes, pos: int, end: int, base: int) -> int:
        """Line by line from ``pos`` while a split record or a traceback is open; returns where it stopped."""
        while pos < end and (self.pending or self.tb_lines):
            le = buf.find(b"\n", pos, end)
            if le < 0:
                le = end
            self.line(buf[pos:le].decode("utf-8", "replace"), base + pos)
            pos = le + 1
            if self.pending:
                self.pending_age += 1
                if self.pending_age > _MAX_PENDING_LINES:  # a fragment nobody continues: take it as it is
                    self.close_all()
        return pos

    def _label_for(self, prefix: bytes) -> str | None:
        """Rank label of a prefix (cached)."""
        label = self._labels.get(prefix, _MISS)
        if label is _MISS:
            label = self._labels[prefix] = _label_of(prefix.decode("utf-8", "replace"))
        return label

    def _labels_of(self, prefixes: np.ndarray) -> np.ndarray:
        """Rank labels (object array) of the prefix bytes in the rows of ``prefixes`` (uint8 matrix)."""
        if (prefixes == prefixes[0]).all():
            out = np.empty(len(prefixes), object)
            out[:] = self._label_for(prefixes[0].tobytes())
            return out
        width = prefixes.shape[1]
        if width <= 8:  # pack each prefix into one integer
            packed = np.zeros((len(prefixes), 8), np.uint8)
            packed[:, :width] = prefixes
            uniq, inv = np.unique(packed.view(np.uint64).ravel(), return_inverse=True)
            keys = [u.tobytes()[:width] for u in uniq.view(np.uint8).reshape(-1, 8)]
        else:
            uniq, inv = np.unique(prefixes, axis=0, return_inverse=True)
            keys = [u.tobytes() for u in uniq]
        labs = np.empty(len(keys), object)
        labs[:] = [self._label_for(k) for k in keys]
        return labs[inv.ravel()]

    def _label(self, prefix: bytes) -> str | None:
        """Rank label of a prefix, counted among the ranks seen."""
        label = self._label_for(prefix)
        if label is not None:
            self.ranks.add(label)
        return label

    # -- fast paths (bytes) ------------------------------------------------------------------------------
    def _prefix_label(self, buf: bytes, ls: int, limit: int) -> tuple[int, str | None]:
        """(end of the rank prefix, its label) of the line starting at ``ls`` (:data:`F.PREFIX_RE_B`)."""
        pe = F.PREFIX_RE_B.match(buf, ls, limit).end()
        return pe, self._label(buf[ls:pe])

    def _record_fast(self, buf: bytes, ls: int, s: int, le: int, base: int) -> bool:
        """A standard Megatron iteration line whose 'iteration ' starts at ``s``: timed fields now, rest later."""
        pe, label = self._prefix_label(buf, ls, s)
        content = buf[pe:le]
        if content == self._last_content:  # the same record printed by another rank
            self.add_record(_clone(self._last_step, label, base + ls), None)
            return True
        if self.pending:
            return False
        tail_end = le
        while tail_end > s and buf[tail_end - 1] in b" \t\r":
            tail_end -= 1
        if not buf.endswith(F.ZERO_COUNTS_B, s, tail_end):
            return False
        lim = tail_end - len(F.ZERO_COUNTS_B)
        if buf.find(b"nan", s, lim) >= 0 or buf.find(b"inf", s, lim) >= 0:
            return False
        try:
            j = buf.find(b"/", s + 10, s + 40)
            bar = buf.find(b"|", j, j + 40)
            it, total = int(buf[s + 10 : j]), int(buf[j + 1 : bar])
            i = buf.find(F.ELAPSED_MS_B, bar, lim)
            if i < 0:
                return False
            k = buf.find(b"|", i, lim)
            st = float(buf[i + 32 : k]) / 1000.0
            tf = loss = None
            i = buf.find(F.THROUGHPUT_B, k, lim)
            if i >= 0:
                k = buf.find(b"|", i, lim)
                tf = float(buf[i + 33 : k])
            i = buf.find(F.LM_LOSS_B, k, lim)
            if i >= 0:
                loss = float(buf[i + 9 : buf.find(b"|", i, lim)])
        except ValueError:
            return False
        step = Step(it, st, tf, loss, None, None, None, total, rank=label, offset=base + ls, _tail=buf[bar + 1 : le])
        self.add_record(step, None)
        self._last_content, self._last_step = content, step
        return True

    def _step_time_fast(self, buf: bytes, ls: int, s: int, e: int, le: int, base: int) -> bool:
        """``Step Time : 9.09s GPU utilization: 663.5MODEL_TFLOP/s/GPU`` with 'Step Time' at ``s``..``e``."""
        j = buf.find(b"s GPU utilization:", e, le)
        k = buf.find(b"TFLOP/s/GPU", j, le)
        if j < 0 or k < 0:
            return False
        try:
            secs = float(buf[e:j].lstrip(b" :"))
            tf = float(buf[j + 18 : k].rstrip(b"MODEL_ "))
        except ValueError:
            return False
        self._prefix_label(buf, ls, s)
        self.step_time(secs, tf, base + ls)
        return True

    # -- the general line handler (text) ----------------------------------------------------------------
    def line(self, line: str, off: int) -> None:
        if self.pending and self._continue_record(line):
            return
        label, content = split_prefix(line)
        if self.tb_lines:
            self.tb_lines -= 1
            if EXC_LINE_RE.match(content):
                self.crash_exception = content.strip()[:_DETAIL_MAX]
                self.tb_lines = 0
        if self._record_line(label, content, off):
            return
        cls = classify_line(content)
        if cls is not None:
            if label:
                self.ranks.add(label)
            self.signal(cls, content, off)
            if cls == "crash" and self.crash_exception is None and "Traceback" in content:
                self.tb_lines = _TRACEBACK_LOOKAHEAD
            return
        if end_marker(content) and self.end_marker is None:
            self.end_marker = content.strip()[:_DETAIL_MAX]
            self.end_offset = off
        if "max_steps" in content:
            m = F.MAX_STEPS_RE.search(content)
            if m:
                self.max_steps = int(m.group(1))

    def _record_line(self, label: str | None, content: str, off: int) -> bool:
        """Records, memory reports, Step Time, NeMo lines, Bridge start lines; True if the line was one."""
        if "iteration" in content:
            if "|" in content:
                if "Training epoch" in content:
                    head = F.NEMO_HEAD_RE.search(content)
                    if head is not None:
                        self._rank(label)
                        self.add_record(_nemo_record(content, head, label, off), content)
                        return True
                elif "memory (" in content:
                    self._rank(label)
                    self.memory_line(content)
                    return True
                else:
                    head = F.MEG_HEAD_RE.search(content)
                    if head is not None:
                        self._rank(label)
                        self._megatron_line(label, content, head, off)
                        return True
            if "current_iteration to" in content and "Setting rerun_state_machine" in content:
                self.bridge_marker = True  # Bridge train() start: printed once per (re)start
                m = F.BRIDGE_START_RE.search(content)
                self.restart_markers.append((off, int(m.group(1)) if m else 0))
                return True
        if "Step Time" in content:
            m = F.STEP_TIME_RE.search(content)
            if m:
                self._rank(label)
                self.step_time(_num(m.group(1)), _num(m.group(2)), off)
                return True
        if "train_step_timing in s" in content or "global_step=" in content:
            m = F.NEMO_LIST_RE.search(content)
            if m:
                self.nemo_list = [v for v in (_num(x) for x in m.group(1).split(",")) if v is not None]
                self.nemo_list_offset = off
                return True
            if "=" in content and ("global_step=" in content or "train_step_timing in s=" in content):
                got = False
                for seg in content.split("\r"):  # tqdm refreshes share a physical line
                    step = _progress_bar(seg, label, off) if "=" in seg else None
                    if step is not None:
                        self._rank(label)
                        self.add_record(step, seg)
                        got = True
                return got
            if "train_step_timing in s:" in content:  # a NeMo 2 line fragment without its header
                step = Step(iteration=0, rank=label, offset=off, source="nemo_fragment", inferred_iteration=True)
                _fill_nemo(step, content, "|", ":")
                if step.step_time_s is not None:
                    self._rank(label)
                    self.fragments.append(step)
                    return True
        return False

    def _rank(self, label: str | None) -> None:
        if label:
            self.ranks.add(label)

    def _megatron_line(self, label: str | None, content: str, head: re.Match, off: int) -> None:
        if label in self.pending:  # a new record closes an unfinished one
            self._close(label)
        complete = F.NAN_FIELD_B.decode() in content
        if not complete:
            stripped = content.rstrip()
            if stripped.endswith("|") and "elapsed time per iteration" in content:
                complete = True  # 2019/2020 forms end with the last field they have
            else:
                # fragment ending in '|' (printed in pieces) or a line cut / wrapped mid-field: wait for the rest
                wrapped = not stripped.endswith("|")
                frag = content.rstrip("\r") if wrapped else content.strip()
                self.pending[label] = ([frag], off, wrapped, self.pending_st)
                self.pending_st = None  # it belongs to this record
                self.pending_age = 0
                return
        self.add_record(_megatron_record(content, head, label, off), content)

    def _continue_record(self, line: str) -> bool:
        """Append ``line`` to the open split record of its rank if it continues it; True if consumed."""
        if not line.strip():
            return True  # blank lines between fragments do not close a record
        label, content = split_prefix(line)
        if label is None and len(self.pending) == 1:
            label = next(iter(self.pending))  # an unprefixed fragment continues the single open record
        if label not in self.pending:
            return False
        frags, start, wrapped, st = self.pending[label]
        c = content.strip()
        if (
            "|" in c
            and (wrapped or ":" in c)
            and F.MEG_HEAD_RE.search(c) is None
            and "[Rank " not in c
            and "memory (" not in c
            and "Step Time" not in c
            and not c.startswith("time (ms)")
        ):
            frags.append(content.rstrip("\r") if wrapped else " " + c)
            joined = "".join(frags)
            if (F.NAN_FIELD_B.decode() in c and joined.rstrip().endswith("|")) or len(frags) > _MAX_FRAGMENTS:
                self._close(label)
            else:
                self.pending[label] = (frags, start, wrapped and not c.endswith("|"), st)
            return True
        self._close(label)
        return False

    def _close(self, label: str | None) -> None:
        frags, start, wrapped, st = self.pending.pop(label)
        text = "".join(frags)
        head = F.MEG_HEAD_RE.search(text)
        if head is not None:
            later, self.pending_st = self.pending_st, st
            self.add_record(_megatron_record(text, head, label, start), text)
            if later is not None:
                if self.pending_st is not None:
                    self.orphan_st.append(self.pending_st)
                self.pending_st = later

    def close_all(self) -> None:
        for label in list(self.pending):
            self._close(label)

    # -- events ----------------------------------------------------------------------------------------------
    def signal(self, cls: str, detail: str, off: int) -> None:
        self.signal_counts[cls] = self.signal_counts.get(cls, 0) + 1
        self.signal_last[cls] = off
        if cls not in self.signals:
            self.signals[cls] = detail.strip()[:_DETAIL_MAX]

    def add_record(self, step: Step, raw: str | None) -> None:
        st = self.pending_st
        if st is not None and step.source == "megatron":
            if step.step_time_s is None:
                step.step_time_s = st[0]
            if step.tflops_per_gpu is None:
                step.tflops_per_gpu = st[1]
            self.pending_st = None
            self.last_record_has_st = True
        else:
            self.last_record_has_st = False
        self.last_record = step
        recs = self.records.get(step.rank)
        if recs is None:
            recs = self.records[step.rank] = []
        recs.append(step)
        if raw is not None and bad_reason(step, self.skipped_is_nan) is not None:
            self.signal("nan", raw, step.offset)

    def step_time(self, secs: float | None, tf: float | None, off: int) -> None:
        self.bridge_marker = True
        last = self.last_record
        # print_rank_0 (Step Time) and print_rank_last (iteration line) are different processes, so the Step Time
        # line can land after its iteration line: attach it there when the times agree to the printed precision.
        if (
            last is not None
            and not self.last_record_has_st
            and last.source == "megatron"
            and secs is not None
            and last.step_time_s is not None
            and abs(last.step_time_s - secs) <= 0.0051
        ):
            if last.tflops_per_gpu is None:
                last.tflops_per_gpu = tf
            self.last_record_has_st = True
            return
        if self.pending_st is not None:
            self.orphan_st.append(self.pending_st)
        self.pending_st = (secs, tf, off)

    def memory_line(self, content: str) -> None:
        heads = list(F.MEM_HEAD_RE.finditer(content))
        for i, h in enumerate(heads):
            body = content[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(content)]
            rank, unit = int(h.group(1) or 0), h.group(3)
            self.memory_units.add(unit)
            if unit == "GB":
                self.bridge_marker = True
            self.memory_reports += 1
            entry = self.memory.setdefault(rank, {})
            entry["after_iteration"] = max(int(h.group(2)), entry.get("after_iteration", 0))
            entry["source_unit"] = unit
            for part in body.split("|"):
                key, sep, val = part.partition(":")
                name = F.MEM_KEYS.get(key.strip()) if sep else None
                if name is None:
                    continue
                v = _num(val.strip())
                if v is None:
                    continue
                if name.endswith("_mb") and unit == "GB":
                    v *= F.GB_TO_MB
                # peaks keep their maximum over reports; current values keep the latest report
                if name.startswith("max_") or name == "alloc_retries":
                    entry[name] = max(v, entry.get(name, v))
                else:
                    entry[name] = v


# --------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------


def _open_source(src: str | os.PathLike | TextIO | BinaryIO) -> tuple[str | None, Any, bool, int | None]:
    """(path or None, binary-or-text reader, whether we own it, size in bytes if known). A path must name a regular
    file: it is opened without blocking and checked (``fstat``) before anything is read, so a FIFO, a device or a
    socket is refused at once instead of hanging or never ending."""
    if isinstance(src, str) and ("\n" in src or len(src) >= 4096 or not os.path.lexists(src)):
        data = src.encode("utf-8", "surrogateescape")
        return None, io.BytesIO(data), True, len(data)
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as err:
            raise LogReadError(f"{path}: cannot be read ({err.strerror or err})") from err
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise LogReadError(f"{path}: {_not_regular(st.st_mode)}, not a regular file: not read")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
        magic = f.read(2)
        f.seek(0)
        if magic == b"\x1f\x8b":
            g = gzip.GzipFile(fileobj=f, mode="rb")
            g.myfileobj = f  # closing the reader closes the file (what gzip.open(path) does)
            return path, g, True, None
        return path, f, True, st.st_size
    return getattr(src, "name", None), src, False, None


def _not_regular(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "a special file"


def _read(reader, n: int) -> bytes:
    data = reader.read(n)
    if isinstance(data, str):
        return data.encode("utf-8", "surrogateescape")
    return data


def parse_log(
    path_or_text: str | os.PathLike | TextIO | BinaryIO,
    *,
    warmup_steps: int = 10,
    min_steps: int = 5,
    skipped_is_nan: bool = True,
    progress: Callable[[int, int | None], None] | None = None,
) -> ParsedLog:
    """Parse one pretraining log in a single streaming pass.

    ``path_or_text``: a :class:`~pathlib.Path` or path string (plain or gzip-compressed, detected by its magic
    bytes), the log text itself (a string with a newline), or an open text or binary stream.  ``warmup_steps`` /
    ``min_steps`` configure the windows in ``ParsedLog.steady`` (:func:`steady_state`: warm-up by iteration number).
    ``skipped_is_nan``: count ``number of skipped iterations > 0`` at loss scale 1 as a ``nan`` signal.
    ``progress(bytes_done, total_bytes_or_None)`` is called after every chunk.

    Outcome: see :func:`bridgebench.logs.signals.decide_outcome` -- the most decisive failure class seen, unless
    the run completed after an in-job restart that followed every failure; otherwise ``completed`` when the final
    iteration or an end-of-training marker was reached, else ``incomplete`` (the log stops before an end).

    The cyclic garbage collector is paused during the parse (and restored after): the parse makes no reference
    cycles, and collections triggered by the hundreds of thousands of steps it creates cost about a quarter of its
    time on a long log.

    Raises:
        LogReadError: the file cannot be opened, is empty, or is binary (a NUL byte in its first 64 KiB).
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(path_or_text, warmup_steps, min_steps, skipped_is_nan, progress)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse(path_or_text, warmup_steps: int, min_steps: int, skipped_is_nan: bool, progress) -> ParsedLog:
    path, reader, own, size = _open_source(path_or_text)
    name = path or "log text"
    S = _State(skipped_is_nan)
    done = 0
    carry = b""
    first = True
    rewind = own and size is not None  # a plain file or the log text: seekable, no decompression to redo
    try:
        while True:
            try:
                data = _read(reader, CHUNK_BYTES)
            except (OSError, EOFError, gzip.BadGzipFile) as err:
                raise LogReadError(f"{name}: cannot be read ({err})") from err
            if first:
                first = False
                if not data:
                    raise LogReadError(f"{name}: empty log (0 bytes): nothing to parse")
                if b"\x00" in data[:65536]:
                    raise LogReadError(f"{name}: binary file (NUL bytes), not a text log")
            eof = not data
            buf = carry + data if carry else data
            if eof:
                cut = len(buf)
            else:
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    if len(buf) < MAX_LINE_BYTES:
                        carry = buf
                        continue
                    cut = len(buf)
            if cut:
                S.scan(buf, cut, done)
            if rewind and cut < len(buf):  # read the cut line again with the next chunk instead of copying
                reader.seek(cut - len(buf), io.SEEK_CUR)
                carry = b""
            else:
                carry = buf[cut:]
            done += cut
            if progress is not None:
                progress(done, size)
            if eof:
                break
        S.close_all()
    finally:
        if own:
            reader.close()
    return _finish(S, path, done, warmup_steps, min_steps)


# --------------------------------------------------------------------------------------------------------------
# Finishing: step view, format, outcome, windows
# --------------------------------------------------------------------------------------------------------------


_ITERATION = attrgetter("iteration")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def _pick_rank(records: dict[str | None, list[Step]]) -> str | None:
    def key(label: str | None) -> tuple:
        recs = records[label]
        nums = tuple(int(x) for x in re.findall(r"\d+", label)) if label else ()
        return (sum(r.lm_loss is not None for r in recs), len(recs), nums)

    if len(records) == 1:
        return next(iter(records))
    return max(records, key=key)


def _finish(S: _State, path: str | None, nbytes: int, warmup: int, min_steps: int) -> ParsedLog:
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
    cols = _Columns(steps)
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


# --------------------------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------------------------


def _fin(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


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
