"""One logged training step (:class:`Step`) and the readers that make steps out of record lines: Megatron(-Bridge /
-DeepSpeed) iteration records, NeMo 2 ``Training epoch`` lines and NeMo 1 / Lightning progress bars (the forms and
their sources: :mod:`bridgebench.logs.formats`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from bridgebench.logs import formats as F
from bridgebench.logs.steady import bad_reason


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


def fast_step(it, secs, tflops, loss, total, rank, offset, tail) -> Step:
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


def clone_step(step: Step, rank: str | None, offset: int) -> Step:
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


def to_number(s: str | bytes) -> float | None:
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
        v = to_number(s)
        return int(v) if v is not None and math.isfinite(v) else None


def _convert(conv, val: str):
    if conv is int:
        return _int(val)
    if conv is float:
        return to_number(val)
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
            v = to_number(val)
            if v is not None and sep:
                step.extra[key] = v
            elif v is not None and key.endswith("loss"):
                step.extra[key] = v
            continue
        attr, conv = spec
        value = _convert(conv, val)
        if value is not None:
            setattr(step, attr, value)


def megatron_record(text: str, head: re.Match, rank: str | None, offset: int) -> Step:
    step = Step(int(head.group(1)), total_iters=int(head.group(2)), rank=rank, offset=offset)
    _fill_megatron(step, text[head.end() :])
    return step


def nemo_record(text: str, head: re.Match, rank: str | None, offset: int) -> Step:
    """Fields of one NeMo 2 / Lightning ``Training epoch E, iteration i/M | ...`` line."""
    step = Step(iteration=int(head.group(2)), rank=rank, offset=offset, source="nemo2")
    step.total_iters = int(head.group(3)) + 1  # M is the last 0-based batch index of the epoch
    if not fill_nemo(step, text[head.end() :], "|", ":"):
        step.extra["epoch"] = float(head.group(1))
    return step


def fill_nemo(step: Step, text: str, sep: str, kv: str) -> bool:
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
            v = to_number(val)
            if v is not None:
                step.extra[key] = v
    return got_step


def progress_bar_step(segment: str, rank: str | None, offset: int) -> Step | None:
    """One refresh of a NeMo 1 / Lightning tqdm bar: iteration = bar count N of ``N/M``."""
    m = F.PROGRESS_BAR_RE.search(segment)
    if m is None:
        return None
    n, total = int(m.group(1)), int(m.group(2))
    step = Step(iteration=n, total_iters=total, rank=rank, offset=offset, source="nemo1")
    pairs = m.group(3).split(",")
    fill_nemo(step, ",".join(p for p in pairs if "=" in p), ",", "=")
    step.iteration = n  # global_step lags the bar by one within an epoch; the bar count is what was done
    step.extra.pop("v_num", None)
    return step
