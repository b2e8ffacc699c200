"""Parse LLM pretraining logs into steps, steady-state statistics and an outcome class.

One streaming pass over a log (line by line, precompiled regexes behind cheap substring gates) yields a
:class:`ParsedLog`: the de-duplicated per-iteration :class:`Step` records of one rank's view, GPU memory reports,
every failure signal seen, and a single ``outcome`` picked by a fixed precedence (see :data:`OUTCOME_PRECEDENCE`).

Formats and the code that prints each line
==========================================

Megatron-LM (``format='megatron_lm'``)
    Iteration line, printed by ``print_rank_last`` (the last rank = last pipeline stage, the only one holding the
    loss) in ``training_log`` of ``megatron/training/training.py`` (Megatron-LM ``core_v0.19.0``, line ~2844)::

        [2026-01-16 07:32:24] iteration        5/     100 | consumed samples:        10240 |
        elapsed time per iteration (ms): 15800.0 | throughput per GPU (TFLOP/s/GPU): 490.0 |
        learning rate: 4.134000E-07 | global batch size:  2048 | lm loss: 1.344240E+01 | ... | loss scale: 1.0 |
        grad norm: 2.870 | num zeros: ... | params norm: ... | number of skipped iterations:   0 |
        number of nan iterations:   0 |

    (one physical line).  Units: ``elapsed time per iteration`` is milliseconds *averaged over the log interval*
    (``elapsed_time / total_iterations``); ``throughput per GPU`` is model TFLOP/s per GPU (only with
    ``--log-throughput``).  A loss is printed only when its interval average is ``>= 0.0``, so a NaN loss is *not*
    printed -- it shows up as ``number of nan iterations > 0`` instead.  Memory reports come from ``report_memory``
    in ``megatron/training/utils/common_utils.py`` (``core_v0.19.0``)::

        [Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... | ...

    with MB = 1024*1024 bytes.  End marker: ``print_datetime('after training is done')`` in ``pretrain()``.

Megatron-Bridge (``format='megatron_bridge'``)
    Same iteration line, built by ``training_log`` in ``src/megatron/bridge/training/utils/train_utils.py``
    (Megatron-Bridge ``v0.6.0``, lines 1176-1222, ``print_rank_last``).  Since v0.2.0 the same function first prints,
    with ``print_rank_0`` (rank 0, i.e. possibly a *different* rank than the iteration line)::

        Step Time : 9.09s GPU utilization: 663.5MODEL_TFLOP/s/GPU

    (``v0.6.0`` line 1135; ``TFLOP/s/GPU`` without ``MODEL_`` before commit 23fc54521, e.g. in the reduced-precision
    tutorial).  Step Time is the same interval-averaged seconds per iteration, GPU utilization the interval-average
    model TFLOP/s per GPU.  Memory reports since v0.2.0 are ``report_memory`` (``v0.6.0`` line 1245) output::

        [Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 63.4 | ... | mem-alloc-retires: 0 | ...

    where GB = 1e9 bytes (``memory_stats[...] / 1.0e9``); v0.1.x printed the Megatron-LM ``memory (MB)`` form
    (``v0.1.0rc1`` line 551).  Bridge-only markers used to tell it from Megatron-LM: the Step Time line, a
    ``memory (GB)`` report, and ``Setting rerun_state_machine.current_iteration to N...`` (``v0.6.0``
    ``src/megatron/bridge/training/train.py`` line 192, printed at every start of ``train()``, also used to cut
    restart segments).  A Bridge log without any of those is indistinguishable from Megatron-LM and is reported as
    ``megatron_lm``.  End marker: ``barrier_and_log("after training is done")`` in
    ``src/megatron/bridge/training/pretrain.py``.

NeMo 2 / Lightning (``format='nemo2'``)
    ``Training epoch 0, iteration 17/99 | lr: ... | global_step: 17 | reduced_train_loss: 11.03 |
    train_step_timing in s: 12.64 | consumed_samples: 2304`` (optionally ``TFLOPS_per_GPU: 456.7``), from NeMo's
    Lightning progress printer.  ``global_step`` (0-based) is used as the iteration; ``iteration i/M`` counts
    batches within the epoch (``M`` = last 0-based index).  ``train_step_timing in s`` is seconds per step.  End
    marker: Lightning's ``\\`Trainer.fit\\` stopped: \\`max_steps=N\\` reached.``  The NeMo(-Launcher)
    ``perf_metrics_utils`` summary ``train_step_timing in s: [11.85, 6.98, ...]`` is also read (one step per list
    entry, iterations numbered 1..N and flagged ``inferred_iteration``).

Log plumbing
    Rank prefixes are stripped (and used as the rank label): NeMo-Run ``name/0 `` / ``name/0: ``, srun ``--label``
    ``0: ``, mpirun ``--tag-output`` ``[1,0]<stdout>:``, torchrun ``[default3]:`` and ``[rank3]:``.  Records split
    over several physical lines (fragments ending in ``|``) are re-joined per rank label (an unprefixed fragment
    continues the single open record, as in cloudai's Megatron-Bridge fixture).  The step view is that of
    one rank: the rank label with the most iteration records carrying a loss (ties: the highest numeric label, i.e.
    the last pipeline stage).  Within it an iteration number equal to the previous one is a duplicate (dropped); a
    smaller one starts a new *segment* (a restart / resume), and the newer attempt's records supersede the older
    attempt's for the same iterations.

Outcome
=======
See :data:`OUTCOME_PRECEDENCE` and :func:`parse_log`.

Sources of the failure strings
==============================
SLURM slurmstepd (``*** JOB 123 ON node1 CANCELLED AT ... DUE TO TIME LIMIT ***`` / ``... DUE TO NODE FAILURE ***``);
Megatron-Bridge ``scripts/performance/setup_experiment.py`` (``check_slurm_timeout``: ``DUE TO TIME LIMIT``;
``is_flaky_failure``: ``torch.distributed.DistBackendError``, ``ncclRemoteError``, ``Watchdog caught collective
operation timeout``, ``Segmentation fault``, ``found NaN in``, ``illegal memory access``;
``check_training_finished``: ``after training is done``, ``exiting program at iteration``); Megatron-LM
``pretrain_gpt.py`` / Bridge ``src/megatron/bridge/training/losses.py`` (``found NaN in local forward loss
calculation``), ``megatron/core/rerun_state_machine.py`` (``RuntimeError: Rank r, node n, device d, iteration i:
Unexpected result nan (message='...')``); PyTorch's ``torch.OutOfMemoryError: CUDA out of memory``.
"""

from __future__ import annotations

import io
import math
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, TextIO

import numpy as np

__all__ = [
    "OUTCOMES",
    "OUTCOME_PRECEDENCE",
    "ParsedLog",
    "SteadyState",
    "Step",
    "classify_line",
    "parse_log",
    "steady_state",
    "to_json",
]

#: Failure classes, most decisive first.  When a log shows several, the first one in this tuple wins:
#: a scheduler verdict (time limit, node failure) explains everything after it; an OOM on one rank makes the
#: other ranks hit NCCL watchdog timeouts; NCCL errors and NaN checks surface as Python tracebacks
#: (``RuntimeError``), so those beat the generic ``crash``.  A failure signal beats completion: a run that crashed
#: and was restarted in-job to the end is ``crash`` (``ParsedLog.reached_final_iteration`` still says it got there).
OUTCOME_PRECEDENCE: tuple[str, ...] = ("time_limit", "node_failure", "oom", "nccl_error", "nan", "crash")

#: Every outcome :func:`parse_log` can return: the failure classes, then ``completed`` (final iteration
#: ``N/N`` reached or an end-of-training marker, with no failure signal) and ``incomplete`` (neither).
OUTCOMES: tuple[str, ...] = OUTCOME_PRECEDENCE + ("completed", "incomplete")

# --------------------------------------------------------------------------------------------------------------
# Regexes (all precompiled; every one sits behind a substring gate in the hot loop)
# --------------------------------------------------------------------------------------------------------------

# Rank prefixes, in the order they nest: NeMo-Run 'job/0 ' or 'job/0: ', srun --label '0: ' (right-aligned),
# mpirun --tag-output '[1,0]<stdout>:', torchrun --tee '[default3]:', torch.distributed '[rank3]:'.
_PREFIX_RE = re.compile(
    r"(?:[\w.\-]{1,64}/\d+:? )?"
    r"(?: *\d+: )?"
    r"(?:\[\d+,\d+\]<std(?:out|err)>: ?)?"
    r"(?:\[default\d+\]:)?"
    r"(?:\[rank\d+\]: ?)?"
)
_MEG_HEAD_RE = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_NEMO_HEAD_RE = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)")
_STEP_TIME_RE = re.compile(
    r"Step Time\s*:\s*([0-9.]+|nan|inf)\s*s\s+GPU utilization\s*:\s*([0-9.]+|nan|inf)\s*(?:MODEL_)?TFLOP/s/GPU"
)
_MEM_HEAD_RE = re.compile(r"\[Rank (\d+)\] \(after (\d+) iterations\) memory \((MB|GB)\)")
_NEMO_LIST_RE = re.compile(r"train_step_timing in s: \[([^\]]*)\]")
_MAX_STEPS_RE = re.compile(r"max_steps(?:=|'\s*\(|\s+was set to\s+)(\d+)")
_NCCL_CODE_RE = re.compile(
    r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError)"
)
_ABORTED_RE = re.compile(r"\bAborted\b")
_EXC_LINE_RE = re.compile(r"^\s*((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Failure))(?::|\s*$)")


# Megatron iteration-line keys -> (Step attribute, converter).  Listed with and without the single leading space
# the trainer prints (" lm loss: ..."), so the hot path needs no strip().  Converters accept surrounding blanks.
def _ms_to_s(v: str) -> float:
    return float(v) / 1000.0


_MEG_KEYS: dict[str, tuple[str, Any]] = {}
for _k, _spec in {
    "elapsed time per iteration (ms)": ("step_time_s", _ms_to_s),
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu", float),
    "lm loss": ("lm_loss", float),
    "grad norm": ("grad_norm", float),
    "learning rate": ("learning_rate", float),
    "loss scale": ("loss_scale", float),
    "consumed samples": ("consumed_samples", int),
    "global batch size": ("global_batch_size", int),
    "number of skipped iterations": ("skipped", int),
    "number of nan iterations": ("nan_iterations", int),
}.items():
    _MEG_KEYS[_k] = _MEG_KEYS[" " + _k] = _spec
del _k, _spec
_NEMO_KEYS = {
    "reduced_train_loss": ("lm_loss", float),
    "train_step_timing in s": ("step_time_s", float),
    "TFLOPS_per_GPU": ("tflops_per_gpu", float),
    "lr": ("learning_rate", float),
    "global_batch_size": ("global_batch_size", int),
    "consumed_samples": ("consumed_samples", int),
    "grad_norm": ("grad_norm", float),
}
# Memory keys (both report_memory flavours) -> normalized name.  Values become MB (= 2**20 bytes).
_MEM_KEYS = {
    "allocated": "allocated_mb",
    "max allocated": "max_allocated_mb",
    "reserved": "reserved_mb",
    "max reserved": "max_reserved_mb",
    "mem-allocated-gigabytes": "allocated_mb",
    "mem-active-gigabytes": "active_mb",
    "mem-inactive-gigabytes": "inactive_mb",
    "mem-reserved-gigabytes": "reserved_mb",
    "mem-max-allocated-gigabytes": "max_allocated_mb",
    "mem-max-active-gigabytes": "max_active_mb",
    "mem-max-inactive-gigabytes": "max_inactive_mb",
    "mem-max-reserved-gigabytes": "max_reserved_mb",
    "mem-alloc-retires": "alloc_retries",  # sic: Megatron-Bridge's MEMORY_KEYS spelling
    "mem-allocated-count": "allocated_count",
}
_GB_TO_MB = 1.0e9 / (1024.0 * 1024.0)  # Bridge GB = 1e9 bytes; Megatron MB = 2**20 bytes

# Substring gates: a line reaches classify_line / the end-marker checks only if it contains one of these.  Each
# class's patterns contain a gate: 'rror' covers every *Error / error (OutOfMemoryError, RuntimeError, CUDA error,
# NCCL error, ncclRemoteError, DistBackendError, ChildFailedError, Fatal Python error, srun: error ...).  The same
# list is spelled out as one chained `in` expression in parse_log (cheaper than a loop); keep the two in sync.
_SIGNAL_GATES = (
    "rror",
    "Traceback",
    "DUE TO",
    "NODE_FAIL",
    "Watchdog",
    "ProcessGroupNCCL",
    "found ",
    "Seg",
    "SIG",
    "Abort",
    "training is done",
    "Trainer.fit",
    "exiting program",
    "max_steps",
)
_DETAIL_MAX = 500


# --------------------------------------------------------------------------------------------------------------
# Data classes
# --------------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Step:
    """One logged training step (for Megatron with ``log_interval > 1``: one log interval).

    Units: ``step_time_s`` seconds per iteration (Megatron: ``elapsed time per iteration (ms)`` / 1000, else the
    Bridge ``Step Time`` seconds; NeMo: ``train_step_timing in s``); ``tflops_per_gpu`` model TFLOP/s per GPU
    (Megatron ``throughput per GPU (TFLOP/s/GPU)``, else Bridge ``GPU utilization ... MODEL_TFLOP/s/GPU``; NeMo
    ``TFLOPS_per_GPU``); losses are the interval averages the trainer prints.  ``None`` = not in the log.
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
    extra: dict[str, float] = field(default_factory=dict)  # other numeric fields, e.g. 'load_balancing_loss'
    rank: str | None = None  # rank-prefix label of the line, None when unprefixed
    segment: int = 0  # 0 = first attempt; +1 at every restart/resume (iteration went backwards)
    line_no: int = 0  # 1-based physical line where the record started
    source: str = "megatron"  # 'megatron' | 'nemo2' | 'step_time' | 'nemo_list'
    inferred_iteration: bool = False  # iteration is an ordinal, not printed by the trainer

    @property
    def is_bad(self) -> bool:
        """NaN/inf loss or grad norm, or a trainer-reported skipped/NaN iteration."""
        return _bad_reason(self, True) is not None


_STEP_SLOTS: tuple[str, ...] = Step.__slots__


@dataclass(slots=True)
class SteadyState:
    """Steady-state summary of one metric over a window of steps (see :func:`steady_state`).

    ``median``/``mean``/``stdev``/``q1``/``q3``/``iqr``/``min``/``max`` are in the metric's unit (``step_time_s``:
    seconds, ``tflops_per_gpu``: TFLOP/s/GPU), computed with :mod:`statistics` over ``count`` steps, iterations
    ``first_iteration``..``last_iteration``.  ``window_ok`` is False -- with ``reason`` -- when the numbers must not
    be read as a clean steady state: too few steps (``insufficient``), NaN/skipped steps inside the window, or a
    run outcome other than ``completed``.  ``stdev`` is the sample standard deviation (ddof=1); ``q1``/``q3`` are
    linearly interpolated quartiles (= ``statistics.quantiles(method='inclusive')``); one step gives 0 spread.
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

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass
class ParsedLog:
    """Everything :func:`parse_log` extracts from one log.

    ``steps``: de-duplicated steps of one rank's view, ordered by iteration.  ``total_iters``: Megatron
    ``--train-iters`` (the ``M`` of ``iteration N/M``) or NeMo ``max_steps`` (else batches per epoch).
    ``memory``: GPU memory in MB (2**20 bytes, Megatron's unit; Bridge GB = 1e9 bytes are converted) from all
    ``[Rank r] (after N iterations) memory`` reports -- ``peak_allocated_mb`` / ``peak_reserved_mb`` (largest
    ``max allocated`` / ``max reserved`` of any rank and report), ``allocated_mb`` / ``reserved_mb`` (largest current
    value in any rank's latest report), ``alloc_retries``, ``source_unit`` ('MB' or 'GB' as printed),
    ``ranks_reported``, ``reports`` and ``per_rank``; empty when the log has no memory report.
    ``signals``: first line per failure class seen (the outcome is the first class in
    :data:`OUTCOME_PRECEDENCE` present here); ``signal_counts``: lines per class.  ``ranks_seen``: rank-prefix
    labels on the lines the parser consumed.  ``steady``: :class:`SteadyState` per metric
    ('step_time_s', 'tflops_per_gpu') computed with the outcome, ``warmup_steps`` and ``min_steps``.
    """

    path: str | None
    format: str
    outcome: str
    outcome_detail: str | None
    steps: list[Step]
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
    iteration_ranks: list[str] = field(default_factory=list)  # rank labels that printed iteration records
    orphan_step_time_lines: int = 0
    lines: int = 0
    chars: int = 0  # characters read (= bytes for ASCII logs)
    warmup_steps: int = 0
    min_steps: int = 0
    steady: dict[str, SteadyState] = field(default_factory=dict)

    @property
    def last_iteration(self) -> int | None:
        return self.steps[-1].iteration if self.steps else None


# --------------------------------------------------------------------------------------------------------------
# Line-level helpers
# --------------------------------------------------------------------------------------------------------------


def _split_prefix(line: str) -> tuple[str | None, str]:
    """(rank label or None, content without the rank prefixes).

    The label is the prefix text, trimmed; torch.distributed's ``[rankN]:`` is dropped from it when a launcher
    prefix precedes it (``3: [rank3]:`` -> ``3``, ``job/0 [default3]:[rank3]:`` -> ``job/0 [default3]``), so a
    rank's traceback lines and its ordinary lines share one label.
    """
    end = _PREFIX_RE.match(line).end()
    if not end:
        return None, line
    label = line[:end]
    i = label.find("[rank")
    if i > 0:
        label = label[:i]
    return label.strip().rstrip(":").rstrip() or None, line[end:]


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _int(s: str) -> int | None:
    try:
        return int(s)
    except ValueError:
        v = _num(s)
        return int(v) if v is not None and math.isfinite(v) else None


def classify_line(content: str) -> str | None:
    """Failure class of one log line (prefix already stripped), or None.  Checked in OUTCOME_PRECEDENCE order.

    * ``time_limit``: SLURM slurmstepd ``*** JOB n ON host CANCELLED AT t DUE TO TIME LIMIT ***``.
    * ``node_failure``: ``DUE TO NODE FAILURE`` (slurmstepd) or the ``NODE_FAIL`` job state.
    * ``oom``: ``CUDA out of memory`` / ``OutOfMemoryError`` (PyTorch caching allocator) / ``CUDA error: out of
      memory``.
    * ``nccl_error``: ``NCCL error`` (c10d), NCCL result codes (``ncclRemoteError`` ...), ``DistBackendError``,
      ``Watchdog caught collective operation timeout``, ``Some NCCL operations have failed or timed out``,
      ``ProcessGroupNCCL`` lines about a timeout / stuck watchdog.
    * ``nan``: Megatron's ``found NaN in ...`` / ``found Inf in ...`` rerun-state-machine checks (also when wrapped
      in the ``RuntimeError: ... Unexpected result nan`` they raise).
    * ``crash``: a Python ``Traceback``, ``RuntimeError:``, ``CUDA error:`` (e.g. ``an illegal memory access was
      encountered``), ``Segmentation fault``/``Segfault``/``SIGSEGV``, ``Aborted``/``SIGABRT``/``core dumped``,
      ``Fatal Python error``, torchrun's ``ChildFailedError``, ``uncorrectable ECC error``.
    """
    s = content
    if "DUE TO" in s:
        if "DUE TO TIME LIMIT" in s:
            return "time_limit"
        if "DUE TO NODE FAIL" in s:
            return "node_failure"
    if "NODE_FAIL" in s:
        return "node_failure"
    if "CUDA out of memory" in s or "OutOfMemoryError" in s or "CUDA error: out of memory" in s:
        return "oom"
    if "NCCL" in s or "nccl" in s or "Watchdog" in s or "DistBackendError" in s:
        if (
            "NCCL error" in s
            or "Watchdog caught collective operation timeout" in s
            or "DistBackendError" in s
            or "Some NCCL operations have failed or timed out" in s
            or _NCCL_CODE_RE.search(s)
            or ("ProcessGroupNCCL" in s and ("imeout" in s or "timed out" in s or "got stuck" in s))
        ):
            return "nccl_error"
    if "found NaN in" in s or "found Inf in" in s:
        return "nan"
    if (
        "Traceback (most recent call last)" in s
        or "RuntimeError:" in s
        or "CUDA error:" in s
        or "illegal memory access" in s
        or "Segmentation fault" in s
        or "Segfault" in s
        or "SIGSEGV" in s
        or "SIGABRT" in s
        or "SIGBUS" in s
        or "core dumped" in s
        or "Fatal Python error" in s
        or "ChildFailedError" in s
        or "uncorrectable ECC error" in s
        or ("Aborted" in s and _ABORTED_RE.search(s))
    ):
        return "crash"
    return None


def _bad_reason(step: Step, skipped_is_nan: bool) -> str | None:
    if step.lm_loss is not None and not math.isfinite(step.lm_loss):
        return f"lm loss {step.lm_loss}"
    if step.grad_norm is not None and not math.isfinite(step.grad_norm):
        return f"grad norm {step.grad_norm}"
    if step.nan_iterations:
        return f"number of nan iterations: {step.nan_iterations}"
    if skipped_is_nan and step.skipped:
        return f"number of skipped iterations: {step.skipped}"
    return None


def _parse_megatron_record(text: str, head: re.Match, rank: str | None, line_no: int) -> Step:
    """Fields of one Megatron(-Bridge) iteration record (possibly re-joined from fragments)."""
    step = Step(int(head.group(1)))
    step.total_iters = int(head.group(2))
    step.rank = rank
    step.line_no = line_no
    keys = _MEG_KEYS
    for part in text[head.end() :].split("|"):
        key, sep, val = part.partition(":")
        if not sep:
            continue
        spec = keys.get(key)
        if spec is None:
            key = key.strip()
            spec = keys.get(key)
            if spec is None:  # another loss or metric, e.g. 'load_balancing_loss', 'mtp_1 loss', 'params norm'
                try:
                    step.extra[key] = float(val)
                except ValueError:
                    pass
                continue
        attr, conv = spec
        try:
            setattr(step, attr, conv(val))
        except ValueError:
            if conv is int:  # e.g. '12.0'
                setattr(step, attr, _int(val))
        if attr == "nan_iterations":
            break  # the last field; anything after it is unrelated text glued onto the line
    return step


def _clone_step(step: Step, rank: str | None, line_no: int) -> Step:
    """Copy of ``step`` for an identical record line printed by another rank (cheaper than re-parsing)."""
    new = object.__new__(Step)
    for name in _STEP_SLOTS:
        setattr(new, name, getattr(step, name))
    new.extra = dict(step.extra)
    new.rank = rank
    new.line_no = line_no
    return new


def _parse_nemo_record(text: str, head: re.Match, rank: str | None, line_no: int) -> Step:
    """Fields of one NeMo 2 / Lightning ``Training epoch E, iteration i/M | ...`` line."""
    step = Step(iteration=int(head.group(2)), rank=rank, line_no=line_no, source="nemo2")
    step.total_iters = int(head.group(3)) + 1  # M is the last 0-based batch index of the epoch
    got_step = False
    for part in text[head.end() :].split("|"):
        key, sep, val = part.partition(":")
        if not sep:
            continue
        key = key.strip()
        val = val.strip()
        if key == "global_step":
            gs = _int(val)
            if gs is not None:
                step.iteration = gs
                got_step = True
        elif key in _NEMO_KEYS:
            attr, conv = _NEMO_KEYS[key]
            setattr(step, attr, _num(val) if conv is float else _int(val))
        else:
            v = _num(val)
            if v is not None:
                step.extra[key] = v
    if not got_step:
        step.extra["epoch"] = float(head.group(1))
    return step


# --------------------------------------------------------------------------------------------------------------
# The streaming parser
# --------------------------------------------------------------------------------------------------------------


class _State:
    """Mutable accumulator for one parse (kept out of ParsedLog so the hot loop touches plain attributes)."""

    def __init__(self, skipped_is_nan: bool) -> None:
        self.skipped_is_nan = skipped_is_nan
        self.records: dict[str | None, list[Step]] = {}
        self.pending: dict[str | None, tuple[list[str], int]] = {}  # split iteration records, per rank label
        self.pending_st: tuple[float | None, float | None] | None = None  # Bridge Step Time awaiting its record
        self.pending_st_line = 0
        self.last_record: Step | None = None
        self.last_record_has_st = False
        self.orphan_st: list[tuple[float | None, float | None, int]] = []
        self.nemo_list: list[float] | None = None
        self.nemo_list_line = 0
        self.signals: dict[str, str] = {}
        self.signal_counts: dict[str, int] = {}
        self.crash_exception: str | None = None
        self.end_marker: str | None = None
        self.max_steps: int | None = None
        self.ranks: set[str] = set()
        self.bridge_marker = False
        self.memory: dict[int, dict[str, Any]] = {}
        self.memory_units: set[str] = set()
        self.memory_reports = 0
        self.restart_markers: list[int] = []  # line numbers of Bridge train() starts

    # -- signals -------------------------------------------------------------------------------------------
    def signal(self, cls: str, detail: str) -> None:
        self.signal_counts[cls] = self.signal_counts.get(cls, 0) + 1
        if cls not in self.signals:
            self.signals[cls] = detail.strip()[:_DETAIL_MAX]

    # -- records -------------------------------------------------------------------------------------------
    def add_record(self, step: Step, raw: str) -> None:
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
        self.records.setdefault(step.rank, []).append(step)
        reason = _bad_reason(step, self.skipped_is_nan)
        if reason is not None:
            self.signal("nan", raw)

    def step_time_line(self, content: str, line_no: int) -> None:
        m = _STEP_TIME_RE.search(content)
        if not m:
            return
        self.bridge_marker = True
        secs, tf = _num(m.group(1)), _num(m.group(2))
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
            self.orphan_st.append((*self.pending_st, line_no))
        self.pending_st = (secs, tf)
        self.pending_st_line = line_no

    def finish_megatron(self, label: str | None, text: str, line_no: int) -> None:
        head = _MEG_HEAD_RE.search(text)
        if head is None:
            return
        self.add_record(_parse_megatron_record(text, head, label, line_no), text)

    # -- memory --------------------------------------------------------------------------------------------
    def memory_line(self, content: str) -> None:
        heads = list(_MEM_HEAD_RE.finditer(content))
        for i, h in enumerate(heads):
            body = content[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(content)]
            rank, after, unit = int(h.group(1)), int(h.group(2)), h.group(3)
            self.memory_units.add(unit)
            if unit == "GB":
                self.bridge_marker = True
            self.memory_reports += 1
            entry = self.memory.setdefault(rank, {})
            entry["after_iteration"] = max(after, entry.get("after_iteration", 0))
            entry["source_unit"] = unit
            for part in body.split("|"):
                key, sep, val = part.partition(":")
                name = _MEM_KEYS.get(key.strip()) if sep else None
                if name is None:
                    continue
                v = _num(val.strip())
                if v is None:
                    continue
                if name.endswith("_mb") and unit == "GB":
                    v *= _GB_TO_MB
                # peaks keep their maximum over reports; current values keep the latest report
                if name.startswith("max_") or name == "alloc_retries":
                    entry[name] = max(v, entry.get(name, v))
                else:
                    entry[name] = v


def _open_source(path_or_text: str | os.PathLike | TextIO) -> tuple[str | None, TextIO, bool]:
    """(path or None, text stream, whether we own the stream)."""
    if isinstance(path_or_text, os.PathLike):
        p = os.fspath(path_or_text)
        return p, open(p, encoding="utf-8", errors="replace"), True
    if isinstance(path_or_text, str):
        if "\n" not in path_or_text and len(path_or_text) < 4096 and os.path.isfile(path_or_text):
            return path_or_text, open(path_or_text, encoding="utf-8", errors="replace"), True
        return None, io.StringIO(path_or_text), True
    return getattr(path_or_text, "name", None), path_or_text, False


def parse_log(
    path_or_text: str | os.PathLike | TextIO,
    *,
    warmup_steps: int = 10,
    min_steps: int = 5,
    skipped_is_nan: bool = True,
) -> ParsedLog:
    """Parse one pretraining log in a single streaming pass.

    ``path_or_text``: a :class:`~pathlib.Path`, a path string (an existing file, no newline), the log text itself,
    or an open text stream.  ``warmup_steps`` / ``min_steps`` configure the steady-state window stored in
    ``ParsedLog.steady`` (see :func:`steady_state`).  ``skipped_is_nan``: count ``number of skipped iterations > 0``
    as a ``nan`` signal (True by default; with fp16 dynamic loss scaling early skipped iterations are normal --
    pass False there).

    Outcome: the first class of :data:`OUTCOME_PRECEDENCE` with a signal anywhere in the log (``outcome_detail`` =
    its first matching line; for ``crash`` the exception line after the first traceback when there is one);
    otherwise ``completed`` if the last iteration reached ``total_iters`` or an end-of-training marker was printed
    (``after training is done``, ``exiting program at iteration``, ``exiting program after N minutes``, Lightning's
    ``Trainer.fit stopped``), else ``incomplete``.  NaN signals also come from the records: a non-finite loss or grad
    norm, ``number of nan iterations > 0`` or (``skipped_is_nan``) ``number of skipped iterations > 0``.
    """
    path, stream, own = _open_source(path_or_text)
    S = _State(skipped_is_nan)
    pending = S.pending
    ranks = S.ranks
    split_prefix = _split_prefix
    n = 0
    nchars = 0
    tb_open = False  # inside the first Python traceback, looking for its closing exception line
    last_content: str | None = None  # last single-line Megatron record parsed, and its Step
    last_step: Step | None = None
    try:
        for line in stream:
            n += 1
            nchars += len(line)
            # ---- continuation of a record split over physical lines (rare; only while one is open) ----------
            if pending:
                if not line.strip():
                    continue
                label, content = split_prefix(line)
                if label is None and label not in pending and len(pending) == 1:
                    label = next(iter(pending))  # unprefixed fragment of the one open record
                if label in pending:
                    frags, start = pending[label]
                    c = content.strip()
                    if "|" in c and ":" in c and _MEG_HEAD_RE.search(c) is None and "[Rank " not in c:
                        frags.append(c)
                        if "number of nan iterations" in c or len(frags) > 16:
                            del pending[label]
                            S.finish_megatron(label, " ".join(frags), start)
                        continue
                    del pending[label]
                    S.finish_megatron(label, " ".join(frags), start)
            # ---- iteration records, memory reports --------------------------------------------------------
            if "iteration" in line:
                if "|" in line:
                    label, content = split_prefix(line)
                    if "Training epoch" in content:
                        head = _NEMO_HEAD_RE.search(content)
                        if head is not None:
                            if label:
                                ranks.add(label)
                            S.add_record(_parse_nemo_record(content, head, label, n), content)
                            continue
                    elif "[Rank " in content and "memory (" in content:
                        if label:
                            ranks.add(label)
                        S.memory_line(content)
                        continue
                    else:
                        head = _MEG_HEAD_RE.search(content)
                        if head is not None:
                            if label:
                                ranks.add(label)
                            if label in pending:  # a new record closes an unfinished one
                                frags, start = pending.pop(label)
                                S.finish_megatron(label, " ".join(frags), start)
                            if "number of nan iterations" in content:
                                if content == last_content:  # the same record printed by another rank
                                    step = _clone_step(last_step, label, n)
                                else:
                                    step = last_step = _parse_megatron_record(content, head, label, n)
                                    last_content = content
                                S.add_record(step, content)
                            elif content.rstrip().endswith("|"):
                                pending[label] = ([content.strip()], n)  # fragment: wait for the rest
                            else:
                                S.add_record(_parse_megatron_record(content, head, label, n), content)
                            continue
                if "current_iteration to" in line and "Setting rerun_state_machine" in line:
                    S.bridge_marker = True  # Bridge train() start: printed once per (re)start
                    S.restart_markers.append(n)
                    continue
            elif "Step Time" in line:
                label, content = split_prefix(line)
                if label:
                    ranks.add(label)
                S.step_time_line(content, n)
                continue
            elif "train_step_timing in s: [" in line:
                m = _NEMO_LIST_RE.search(line)
                if m:
                    S.nemo_list = [v for v in (_num(x) for x in m.group(1).split(",")) if v is not None]
                    S.nemo_list_line = n
                    continue
            # ---- failure signals and end-of-training markers ----------------------------------------------
            if tb_open:
                content = split_prefix(line)[1]
                if _EXC_LINE_RE.match(content):
                    # the exception line that closes the first traceback, e.g. 'Exception: ...', 'ValueError: ...'
                    S.crash_exception = content.strip()[:_DETAIL_MAX]
                    tb_open = False
            if not (
                "rror" in line
                or "Traceback" in line
                or "DUE TO" in line
                or "NODE_FAIL" in line
                or "Watchdog" in line
                or "ProcessGroupNCCL" in line
                or "found " in line
                or "Seg" in line
                or "SIG" in line
                or "Abort" in line
                or "training is done" in line
                or "Trainer.fit" in line
                or "exiting program" in line
                or "max_steps" in line
            ):
                continue
            label, content = split_prefix(line)
            cls = classify_line(content)
            if cls is not None:
                if label:
                    ranks.add(label)
                S.signal(cls, content)
                if cls == "crash" and S.crash_exception is None and "Traceback" in content:
                    tb_open = True
                continue
            if (
                "after training is done" in content
                or "Trainer.fit` stopped" in content
                or ("exiting program" in content and "SIGTERM" not in content)
            ):
                if S.end_marker is None:
                    S.end_marker = content.strip()[:_DETAIL_MAX]
            if "max_steps" in content:
                m = _MAX_STEPS_RE.search(content)
                if m:
                    S.max_steps = int(m.group(1))
        for label, (frags, start) in list(pending.items()):
            S.finish_megatron(label, " ".join(frags), start)
        pending.clear()
    finally:
        if own:
            stream.close()
    return _finish(S, path, n, nchars, warmup_steps, min_steps)


def _pick_rank(records: dict[str | None, list[Step]]) -> str | None:
    """Rank label whose iteration records form the step view: most records with a loss, then most records, then
    the highest numeric label (the last pipeline stage prints the loss)."""

    def key(label: str | None) -> tuple:
        recs = records[label]
        nums = tuple(int(x) for x in re.findall(r"\d+", label)) if label else ()
        return (sum(r.lm_loss is not None for r in recs), len(recs), nums)

    return max(records, key=key)


def _finish(S: _State, path: str | None, n: int, nchars: int, warmup: int, min_steps: int) -> ParsedLog:
    if S.pending_st is not None:
        S.orphan_st.append((*S.pending_st, S.pending_st_line))
        S.pending_st = None

    # ---- step view: one rank, de-duplicated, restarts as segments ----------------------------------------------
    steps: list[Step] = []
    restarts = dups = superseded = 0
    iteration_ranks = sorted(label for label in S.records if label is not None)
    if S.records:
        recs = S.records[_pick_rank(S.records)]
        by_iter: dict[int, Step] = {}
        segment = 0
        last: int | None = None
        markers = iter(S.restart_markers[1:])  # the first Bridge train() start is not a restart
        next_marker = next(markers, None)
        for r in recs:
            while next_marker is not None and r.line_no > next_marker:
                if last is not None:
                    segment += 1
                    restarts += 1
                    last = None
                next_marker = next(markers, None)
            if last is not None:
                if r.iteration == last:
                    dups += 1
                    continue
                if r.iteration < last:
                    segment += 1
                    restarts += 1
            if r.iteration in by_iter:
                superseded += 1
            r.segment = segment
            by_iter[r.iteration] = r
            last = r.iteration
        steps = sorted(by_iter.values(), key=lambda s: s.iteration)
    elif S.orphan_st:
        # Bridge Step Time lines without iteration lines: steps numbered 1..N
        steps = [
            Step(iteration=i, step_time_s=a, tflops_per_gpu=b, line_no=ln, source="step_time", inferred_iteration=True)
            for i, (a, b, ln) in enumerate(S.orphan_st, 1)
        ]
        S.orphan_st = []
    elif S.nemo_list:
        steps = [
            Step(iteration=i, step_time_s=v, line_no=S.nemo_list_line, source="nemo_list", inferred_iteration=True)
            for i, v in enumerate(S.nemo_list, 1)
        ]

    # ---- format -----------------------------------------------------------------------------------------------
    sources = {s.source for s in steps}
    if sources & {"nemo2", "nemo_list"}:
        fmt = "nemo2"
    elif S.bridge_marker:
        fmt = "megatron_bridge"
    elif "megatron" in sources:
        fmt = "megatron_lm"
    else:
        fmt = "unknown"

    # ---- totals / completion ----------------------------------------------------------------------------------
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

    # ---- outcome ----------------------------------------------------------------------------------------------
    outcome, detail = "incomplete", None
    for cls in OUTCOME_PRECEDENCE:
        if cls in S.signals:
            outcome, detail = cls, S.signals[cls]
            if cls == "crash" and S.crash_exception:
                detail = S.crash_exception
            break
    else:
        if reached or S.end_marker:
            outcome = "completed"
            detail = S.end_marker or (f"iteration {steps[-1].iteration}/{total}" if steps else None)

    # ---- memory -----------------------------------------------------------------------------------------------
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

    parsed = ParsedLog(
        path=path,
        format=fmt,
        outcome=outcome,
        outcome_detail=detail,
        steps=steps,
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
        lines=n,
        chars=nchars,
        warmup_steps=warmup,
        min_steps=min_steps,
    )
    for metric in ("step_time_s", "tflops_per_gpu"):
        parsed.steady[metric] = steady_state(
            steps,
            warmup=warmup,
            min_steps=min_steps,
            metric=metric,
            outcome=outcome,
            skipped_is_nan=S.skipped_is_nan,
        )
    return parsed


# --------------------------------------------------------------------------------------------------------------
# Steady state
# --------------------------------------------------------------------------------------------------------------


def steady_state(
    steps: Iterable[Step],
    *,
    warmup: int,
    min_steps: int,
    metric: str = "step_time_s",
    outcome: str | None = None,
    skipped_is_nan: bool = True,
) -> SteadyState:
    """Steady-state statistics of ``metric`` ('step_time_s' or 'tflops_per_gpu', or any numeric Step attribute).

    Window: every step except the first ``warmup`` logged steps *of each segment* (a restart re-warms: compiles,
    allocator, NCCL communicators), and except steps where ``metric`` is missing.  ``warmup`` counts logged records,
    which equals iterations with ``log_interval=1``.  Statistics (``statistics.median``/``fmean``, numpy
    ``std(ddof=1)``/``percentile(25, 75)``) are computed over whatever is in the window, but ``window_ok`` is False
    -- never silently -- when:

    * fewer than ``min_steps`` steps remain (``insufficient=True``; medians are None when the window is empty);
    * the window contains a bad step (NaN/inf loss or grad norm, NaN or -- with ``skipped_is_nan`` -- skipped
      iterations reported by the trainer);
    * ``outcome`` is given and is not ``completed`` (a failed or still-running/cut-off run).

    ``reason`` lists every problem ('ok' when none).
    """
    steps = list(steps)
    seen: dict[int, int] = {}
    window: list[Step] = []
    for s in steps:
        k = seen.get(s.segment, 0)
        seen[s.segment] = k + 1
        if k < warmup:
            continue
        if getattr(s, metric) is None:
            continue
        window.append(s)
    values = [float(getattr(s, metric)) for s in window]
    finite = [v for v in values if math.isfinite(v)]
    count = len(values)
    problems: list[str] = []
    insufficient = count < min_steps
    if insufficient:
        problems.append(f"insufficient: {count} steps after warmup={warmup}, need min_steps={min_steps}")
    bad = [s for s in window if _bad_reason(s, skipped_is_nan) is not None]
    if bad:
        problems.append(f"{len(bad)} NaN/skipped steps in window (first at iteration {bad[0].iteration})")
    if len(finite) != count:
        problems.append(f"{count - len(finite)} non-finite {metric} values in window")
    if outcome is not None and outcome != "completed":
        problems.append(f"run outcome is {outcome!r}, not 'completed'")
    segs = len({s.segment for s in window})

    med = mean = sd = q1 = q3 = iqr = lo = hi = None
    if finite:
        med = statistics.median(finite)
        mean = statistics.fmean(finite)
        lo, hi = min(finite), max(finite)
        if len(finite) >= 2:
            # numpy for the spread: statistics.stdev is exact (Fraction-based) and ~10 ms per 10k steps;
            # np.percentile's default 'linear' method is statistics.quantiles(method='inclusive').
            arr = np.asarray(finite, dtype=float)
            sd = float(np.std(arr, ddof=1))
            q1, q3 = (float(q) for q in np.percentile(arr, (25.0, 75.0)))
            iqr = q3 - q1
        else:
            sd, q1, q3, iqr = 0.0, finite[0], finite[0], 0.0
    return SteadyState(
        metric=metric,
        count=count,
        median=med,
        mean=mean,
        stdev=sd,
        q1=q1,
        q3=q3,
        iqr=iqr,
        min=lo,
        max=hi,
        first_iteration=window[0].iteration if window else None,
        last_iteration=window[-1].iteration if window else None,
        warmup=warmup,
        min_steps=min_steps,
        insufficient=insufficient,
        window_ok=not problems,
        reason="; ".join(problems) if problems else "ok",
        segments=segs,
    )


# --------------------------------------------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------------------------------------------


def _finite_or_none(v: float | None) -> float | None:
    return v if v is None or math.isfinite(v) else None


def to_json(parsed: ParsedLog) -> dict[str, Any]:
    """JSON-ready summary.

    Top level: ``format``, ``outcome``, ``outcome_detail``, ``steps`` (number of iterations parsed),
    ``step_time_s`` (s/iteration) and ``tflops_per_gpu`` (model TFLOP/s/GPU) -- the steady-state medians, ``null``
    when absent *or when the window is not OK* -- and ``window_ok`` / ``window_reason`` for the step-time window.
    ``detail``: everything else, including both :class:`SteadyState` objects (whose medians are present even when
    the window is flagged), memory, signals, totals and rank information.
    """
    st = parsed.steady.get("step_time_s")
    tf = parsed.steady.get("tflops_per_gpu")

    def headline(ss: SteadyState | None) -> float | None:
        return _finite_or_none(ss.median) if ss is not None and ss.window_ok else None

    last = parsed.steps[-1] if parsed.steps else None
    return {
        "path": parsed.path,
        "format": parsed.format,
        "outcome": parsed.outcome,
        "outcome_detail": parsed.outcome_detail,
        "steps": len(parsed.steps),
        "step_time_s": headline(st),
        "tflops_per_gpu": headline(tf),
        "window_ok": bool(st and st.window_ok),
        "window_reason": st.reason if st else "no steps",
        "detail": {
            "total_iters": parsed.total_iters,
            "first_iteration": parsed.steps[0].iteration if parsed.steps else None,
            "last_iteration": parsed.last_iteration,
            "reached_final_iteration": parsed.reached_final_iteration,
            "end_marker": parsed.end_marker,
            "last_lm_loss": _finite_or_none(last.lm_loss) if last else None,
            "restarts": parsed.restarts,
            "duplicates_dropped": parsed.duplicates_dropped,
            "superseded_steps": parsed.superseded_steps,
            "orphan_step_time_lines": parsed.orphan_step_time_lines,
            "signals": dict(parsed.signals),
            "signal_counts": dict(parsed.signal_counts),
            "ranks_seen": list(parsed.ranks_seen),
            "iteration_ranks": list(parsed.iteration_ranks),
            "memory": {k: v for k, v in parsed.memory.items() if k != "per_rank"}
            | ({"per_rank": {str(r): e for r, e in parsed.memory["per_rank"].items()}} if parsed.memory else {}),
            "steady_state": {
                k: {kk: (_finite_or_none(vv) if isinstance(vv, float) else vv) for kk, vv in v.as_dict().items()}
                for k, v in parsed.steady.items()
            },
            "lines": parsed.lines,
            "chars": parsed.chars,
        },
    }


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", type=Path)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--min-steps", type=int, default=5)
    args = ap.parse_args(argv)
    out = [to_json(parse_log(p, warmup_steps=args.warmup, min_steps=args.min_steps)) for p in args.logs]
    print(json.dumps(out if len(out) > 1 else out[0], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
