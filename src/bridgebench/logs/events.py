"""TensorBoard event files as a source of step figures: no regular expressions, the trainer's own numbers.

Read with the ``tensorboard`` package's ``EventAccumulator`` (every scalar kept; events of a restarted run that a
later file supersedes are purged by it, as TensorBoard itself does).  Every tag is written with
``writer.add_scalar(tag, value, iteration)`` by the last rank only (Megatron-Bridge 0.6.2
``training/state.py`` lines 178-186; Megatron-LM ``megatron/training/global_vars.py`` lines 217-221).

Tags read (Megatron-Bridge 0.6.2 wheel, ``megatron/bridge/training/utils/train_utils.py``, ``training_log``;
Megatron-LM ``core_v0.19.0``, ``megatron/training/training.py``, ``training_log``):

* ``iteration-time``: seconds per iteration (interval average), every ``log_interval`` iterations -- Bridge line
  1165, Megatron-LM line 2841; only with ``logger.log_timers_to_tensorboard`` (the Bridge recipes set it).
* ``throughput/tflops/device``: model TFLOP/s per GPU (the Step Time line's number) -- Bridge line 1141; only with
  ``logger.log_throughput_to_tensorboard``.
* ``throughput``: model TFLOP/s per GPU -- Megatron-LM line 2858; ``--log-throughput`` and
  ``--log-timers-to-tensorboard``.
* ``throughput/device/tokens_per_sec``: tokens/s per GPU -- Bridge lines 857-867 (``report_throughput``: rolling
  average over ``throughput_window_size`` iterations, padded tokens); ``log_throughput_to_tensorboard``.
* ``lm loss``: this iteration's loss (not an interval average) -- Bridge line 967, Megatron-LM line 2705.

NeMo 2 logs through Lightning's TensorBoardLogger with x = ``trainer.global_step``: ``train_step_timing in s``
(``TimingCallback``, ``nemo/utils/exp_manager.py``) and ``TFLOPS_per_GPU`` / ``tflops_per_sec_per_gpu``
(``FLOPsMeasurementCallback``); read too.
"""

from __future__ import annotations

import os
from pathlib import Path

from bridgebench.logs.parser import LogReadError, ParsedLog, Step, parsed_from_steps

#: tag -> Step attribute, in order of preference per attribute (the first present wins).
TAGS: tuple[tuple[str, str], ...] = (
    ("iteration-time", "step_time_s"),
    ("train_step_timing in s", "step_time_s"),
    ("throughput/tflops/device", "tflops_per_gpu"),
    ("throughput", "tflops_per_gpu"),
    ("TFLOPS_per_GPU", "tflops_per_gpu"),
    ("tflops_per_sec_per_gpu", "tflops_per_gpu"),
    ("throughput/device/tokens_per_sec", "tokens_per_s_per_gpu"),
    ("lm loss", "lm_loss"),
    ("reduced_train_loss", "lm_loss"),
)


def event_files(path: str | os.PathLike) -> list[Path]:
    """``events.out.tfevents.*`` files at ``path`` (a file, or a directory searched recursively), sorted."""
    p = Path(path)
    if p.is_file():
        return [p] if ".tfevents." in p.name else []
    return sorted(f for f in p.rglob("events.out.tfevents.*") if f.is_file())


def is_events(path: str | os.PathLike) -> bool:
    """True for an event file or a directory holding at least one."""
    return bool(event_files(path))


#: the window quality of figures read from damaged event files (logs/steady.py QUALITIES)
DAMAGED = "damaged"


def damage(path: str | os.PathLike) -> list[str]:
    """Damage in one TensorBoard event file, checked record by record the way TensorFlow's ``TFRecordReader``
    frames them (tensorflow/core/lib/io/record_reader.cc; tensorboard ``summary/writer/record_writer.py``): a
    little-endian uint64 length, the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data.
    TensorBoard's own loader stops quietly at a truncated record and skips a record whose CRC is wrong (logged, not
    raised), so its scalars of a damaged file read as a clean, shorter run. Returns ``"<file>: <what>"`` per
    problem found (empty for an intact file); stops at the first broken frame (what follows cannot be framed).
    Memory: one record at a time."""
    import struct

    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    out: list[str] = []
    p = Path(path)
    size = p.stat().st_size
    with p.open("rb") as f:
        offset, n = 0, 0
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                out.append(f"{p}: truncated after record {n} (byte {offset} of {size}: {len(header)} stray bytes)")
                break
            length, length_crc = struct.unpack("<QI", header)
            if masked_crc32c(header[:8]) != length_crc:
                out.append(f"{p}: record {n + 1} at byte {offset}: its length fails its CRC (corrupt)")
                break
            if offset + 12 + length + 4 > size:
                out.append(f"{p}: record {n + 1} at byte {offset} is cut short (truncated file)")
                break
            data = f.read(length)
            (data_crc,) = struct.unpack("<I", f.read(4))
            if masked_crc32c(data) != data_crc:
                out.append(f"{p}: record {n + 1} at byte {offset}: its data fail their CRC (corrupt)")
            offset += 12 + length + 4
            n += 1
    return out


def parse_events(path: str | os.PathLike, *, warmup_steps: int = 10, min_steps: int = 5) -> ParsedLog:
    """Steps and windows from TensorBoard scalars (see the module docstring for tags and units).

    ``path``: an event file or a directory (all event files under it; each directory is one run, the one with the
    most timed steps is used).  The result has ``format='tensorboard'`` and ``outcome='unknown'`` (events carry no
    outcome: read it from the job's log).  Iterations are the tags' x values (Megatron: the 1-based iteration).

    A truncated or corrupt event file (:func:`damage`) gives every window the quality ``damaged`` (never
    ``steady``), ``window_ok`` False and the damage in ``reason`` and ``outcome_detail``.

    Raises:
        LogReadError: no event file at ``path``, a file TensorBoard cannot read, or an event "file" that is not a
            regular file (a FIFO or device would block TensorBoard's reader forever).
    """
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    files = event_files(path)
    if not files:
        raise LogReadError(f"{path}: no TensorBoard event files (events.out.tfevents.*)")
    for run_dir in {f.parent for f in files}:  # the accumulator reads every tfevents entry of the folder
        for entry in os.scandir(run_dir):
            if ".tfevents." in entry.name and not entry.is_file(follow_symlinks=False):
                raise LogReadError(f"{entry.path}: not a regular file (a FIFO, device, socket or symlink): not read")
    best: list[Step] = []
    for run_dir in sorted({f.parent for f in files}):
        acc = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
        try:
            acc.Reload()
        except Exception as err:  # tensorboard raises its own DataLoss / OSError types
            raise LogReadError(f"{run_dir}: TensorBoard cannot read these events ({err})") from err
        present = set(acc.Tags().get("scalars", []))
        by_iter: dict[int, Step] = {}
        done: set[str] = set()
        for tag, attr in TAGS:
            if tag not in present or attr in done:
                continue
            done.add(attr)
            for ev in acc.Scalars(tag):
                step = by_iter.get(ev.step)
                if step is None:
                    step = by_iter[ev.step] = Step(iteration=int(ev.step), source="tensorboard")
                setattr(step, attr, float(ev.value))
        steps = sorted(by_iter.values(), key=lambda s: s.iteration)
        if sum(s.step_time_s is not None for s in steps) > sum(s.step_time_s is not None for s in best):
            best = steps
    parsed = parsed_from_steps(
        best,
        warmup_steps=warmup_steps,
        min_steps=min_steps,
        path=str(path),
        format="tensorboard",
        outcome="unknown",
        outcome_detail="TensorBoard events carry no outcome: read the job's log",
        total_iters=None,
    )
    broken = [d for f in files for d in damage(f)]
    if broken:  # the scalars TensorBoard could read are kept, but never as a steady window
        for st in parsed.steady.values():
            if st.count:
                st.quality, st.window_ok = DAMAGED, False
                st.reason = "damaged event file(s): " + "; ".join(broken)
        parsed.outcome_detail = "damaged TensorBoard event file(s): " + "; ".join(broken)
    return parsed
