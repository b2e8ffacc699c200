"""Line forms of the training logs bridgebench reads: what each trainer prints, with the code that prints it.

Everything here is data (regexes, key maps, the candidate patterns of the pre-filter); the streaming state that uses
it is :mod:`bridgebench.logs.parser`.

Megatron-LM (``megatron_lm``)
    ``training_log`` in ``megatron/training/training.py`` (Megatron-LM ``core_v0.19.0``, print block lines 2816-2951,
    ``print_rank_last``, i.e. the last rank = last pipeline stage, the only one holding the loss)::

        [2026-01-16 07:32:24.123456] iteration        5/     100 | consumed samples:        10240 |
        elapsed time per iteration (ms): 15800.0 | throughput per GPU (TFLOP/s/GPU): 490.0 |
        learning rate: 4.134000E-07 | global batch size:  2048 | lm loss: 1.344240E+01 | ... | loss scale: 1.0 |
        grad norm: 2.870 | num zeros: ... | params norm: ... | number of skipped iterations:   0 |
        number of nan iterations:   0 |

    one physical line.  ``elapsed time per iteration`` is milliseconds *averaged over the log interval*
    (``elapsed_time / total_iterations``, line 2825); ``throughput per GPU`` is model TFLOP/s per GPU, only with
    ``--log-throughput`` (line 2855).  A loss is printed only when its interval average is ``>= 0.0`` (line 2882), so
    a NaN loss shows up as ``number of nan iterations > 0`` instead.  Since ``core_v0.16.0`` (commit 2dc8873d) the
    first iteration is always printed.  History (``git log -S``): ``consumed samples:`` since 29a69547 (2020-12-11),
    ``throughput per GPU`` since 2748e7c7 (2023-11-26), the ``[date]`` prefix since f427c6f0 (2024-01-24).  The 2019
    form has no colon after ``learning rate`` / ``lm loss`` (``learning rate 2.020E-06 | lm loss 9.44E+00 |``).
    Memory: ``report_memory`` (``megatron/training/utils/common_utils.py`` lines 313-333)::

        [Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max allocated: ... | reserved: ... | ...

    with MB = 2**20 bytes (2019-2020: ``after 5 iterations memory (MB) | ... | cached: ... | max cached: ...``,
    no ``[Rank r]``; ``cached`` is what PyTorch later renamed ``reserved``).  End: ``print_datetime('after training
    is done')`` in ``pretrain()``.

Megatron-Bridge (``megatron_bridge``)
    The same iteration line from ``training_log`` in ``megatron/bridge/training/utils/train_utils.py`` (Megatron-Bridge
    0.6.2 wheel, lines 1173-1225), and before it, printed by rank 0 (``print_rank_0``, lines 1134-1136)::

        Step Time : 8.63s GPU utilization: 1562.8MODEL_TFLOP/s/GPU

    -- seconds per iteration averaged over the interval (``{:.2f}``) and the interval's model TFLOP/s per GPU
    (``{:.1f}``; ``num_flops / elapsed_time / world_size / 1e12``, line 1133), printed whenever the model config has
    ``kv_channels`` and ``num_attention_heads``, independent of ``log_throughput``.  History (NVIDIA-NeMo/Megatron-
    Bridge): added by d42316e94 (PR #388) as ``...TFLOP/s/GPU`` (the PR text shows ``528.1 TFLOP/s/GPU`` with a
    space), renamed ``MODEL_TFLOP/s/GPU`` by 23fc54521 (PR #1008).  Rank 0 and the last rank are different processes,
    so in a multi-rank log the Step Time line can land before or after its iteration line.  Memory (lines 1226-1239)::

        [Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 63.4 | ... | mem-alloc-retires: 0 | ...

    GB = 1e9 bytes (``memory_stats[...] / 1.0e9``, ``report_memory`` lines 1245-1298).  Bridge-only markers that tell
    it from Megatron-LM: a Step Time line, a ``memory (GB)`` report, and ``Setting rerun_state_machine.
    current_iteration to N...`` (``megatron/bridge/training/train.py``, printed at every start of ``train()`` with the
    iteration it starts from).  End: ``barrier_and_log("after training is done")``; a SIGTERM exit prints ``exiting
    program after receiving SIGTERM.`` (not completion).

Megatron-DeepSpeed forks (reported as ``megatron_lm``)
    bigscience-workshop/Megatron-DeepSpeed, microsoft/Megatron-DeepSpeed and argonne-lcf/Megatron-DeepSpeed append
    ``samples per second: S |``, optionally ``tokens per gpu per second (tgs): T |`` (tokens/s per GPU) and
    ``TFLOPs: Y |`` (model TFLOP/s per GPU: ``flops_per_iteration / (elapsed_time_per_iter * world_size * 1e12)``,
    ``megatron/utils.py::throughput_calculator``); the bigscience variant prints ``elapsed time per iteration (s):``
    in seconds.

NeMo 2 / Lightning (``nemo2``)
    ``Training epoch 0, iteration 17/99 | lr: ... | global_step: 17 | reduced_train_loss: 11.03 |
    train_step_timing in s: 12.64 | consumed_samples: 2304`` from ``ProgressPrinter`` (``nemo/lightning/pytorch/
    callbacks/progress_printer.py``: ``f" | {metric}: {val:.4}"``); values are averages over the print interval.
    ``global_step`` (0-based) is used as the iteration when present (``iteration N/M`` counts batches of the epoch;
    its N/M semantics changed between NeMo versions).  ``train_step_timing in s`` comes from ``TimingCallback``
    (``nemo/utils/exp_manager.py``), TFLOP/s per GPU from ``FLOPsMeasurementCallback`` (``TFLOPS_per_GPU``, the name
    NVIDIA/dgxc-benchmarking ``common/parse_train_timing.sh`` lines 241-253 matches).  A line fragment without the
    ``Training epoch`` header (READMEs trim it) still gives a timed step.  End: Lightning's ``\\`Trainer.fit\\`
    stopped: \\`max_steps=N\\` reached.``  NeMo-Launcher's ``perf_metrics_utils`` summary ``train_step_timing in s:
    [11.85, 6.98, ...]`` gives one step per entry.

NeMo 1 / NeMo-Framework-Launcher progress bar (``nemo1``)
    PyTorch Lightning's tqdm bar (``MegatronProgressBar``)::

        Epoch 0: : 100%|##########| 50/50 [31:51<00:00, reduced_train_loss=6.130, global_step=50.0,
        consumed_samples=76800.0, train_step_timing in s=5.900, val_loss=6.250]

    ``key=value`` pairs with tqdm's 3-significant-digit formatting (``9e+3``, ``nan.0``); ``N/M`` is the bar count
    (batches done / total) and is used as the iteration; successive refreshes may share one physical line separated
    by carriage returns.  tqdm's own ``41.36s/it`` is a running average, never read as a step time.

Log plumbing
    Rank prefixes (stripped, kept as the rank label): NeMo-Run ``name/0 `` / ``name/0: ``, srun ``--label`` ``0: ``,
    mpirun ``--tag-output`` ``[1,0]<stdout>:``, torchrun ``[default3]:`` (also with a leading space) and
    ``[rank3]:``.
"""

from __future__ import annotations

import re

# --------------------------------------------------------------------------------------------------------------
# Rank prefixes (str and bytes forms: the hot path works on bytes, rare lines on decoded text)
# --------------------------------------------------------------------------------------------------------------
_PREFIX = (
    r"(?:[\w.\-]{1,64}/\d+:? )?"  # NeMo-Run 'job/0 ' or 'job/0: '
    r"(?: *\d+: )?"  # srun --label, right-aligned
    r"(?:\[\d+,\d+\]<std(?:out|err)>: ?)?"  # mpirun --tag-output
    r"(?: ?\[default\d+\]: ?)?"  # torchrun --tee / --log-dir (bigscience logs print ' [default7]: ')
    r"(?:\[rank\d+\]: ?)?"  # torch.distributed
)
PREFIX_RE = re.compile(_PREFIX)
PREFIX_RE_B = re.compile(_PREFIX.encode())

# --------------------------------------------------------------------------------------------------------------
# Record heads and whole-line forms
# --------------------------------------------------------------------------------------------------------------
MEG_HEAD_RE = re.compile(r"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
MEG_HEAD_RE_B = re.compile(rb"iteration\s+(\d+)\s*/\s*(\d+)\s*\|")
NEMO_HEAD_RE = re.compile(r"Training epoch (\d+), iteration (\d+)/(\d+)")
#: Megatron-Bridge Step Time line, with or without ``MODEL_``, with or without a space before the unit (PR #388 text).
STEP_TIME_RE = re.compile(
    r"Step Time\s*:\s*([0-9.]+|nan|inf)\s*s\s+GPU utilization\s*:\s*([0-9.]+|nan|inf)\s*(?:MODEL_)?TFLOP/s/GPU"
)
STEP_TIME_RE_B = re.compile(STEP_TIME_RE.pattern.encode())
MEM_HEAD_RE = re.compile(r"(?:\[Rank (\d+)\] )?\(?after (\d+) iterations\)? memory \((MB|GB)\)")
NEMO_LIST_RE = re.compile(r"train_step_timing in s: \[([^\]]*)\]")
#: tqdm bar count ``| 50/50 [`` and the ``key=value`` list that follows the elapsed/remaining times.
PROGRESS_BAR_RE = re.compile(r"\|\s*(\d+)/(\d+)\s*\[([^\]]*)\]?")
MAX_STEPS_RE = re.compile(r"max_steps(?:=|'\s*\(|\s+was set to\s+)(\d+)")
BRIDGE_START_RE = re.compile(r"current_iteration to (\d+)")

# Hot-path literals of the standard Megatron line (bytes)
ELAPSED_MS_B = b"elapsed time per iteration (ms):"
THROUGHPUT_B = b"throughput per GPU (TFLOP/s/GPU):"
LM_LOSS_B = b" lm loss:"
NAN_FIELD_B = b"number of nan iterations"
#: Both counters zero, as ``{:3d}`` renders them (the common case; anything else is parsed in full).
ZERO_COUNTS_B = b"number of skipped iterations:   0 | number of nan iterations:   0 |"


def _ms_to_s(v: str) -> float:
    return float(v) / 1000.0


#: Megatron iteration-line keys -> (Step attribute, converter).  Keys are matched stripped.
MEG_KEYS: dict[str, tuple[str, object]] = {
    "elapsed time per iteration (ms)": ("step_time_s", _ms_to_s),
    "elapsed time per iteration (s)": ("step_time_s", float),  # bigscience Megatron-DeepSpeed
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu", float),
    "TFLOPs": ("tflops_per_gpu", float),  # Megatron-DeepSpeed forks: per GPU (throughput_calculator)
    "tokens per gpu per second (tgs)": ("tokens_per_s_per_gpu", float),
    "lm loss": ("lm_loss", float),
    "grad norm": ("grad_norm", float),
    "learning rate": ("learning_rate", float),
    "loss scale": ("loss_scale", float),
    "consumed samples": ("consumed_samples", int),
    "global batch size": ("global_batch_size", int),
    "number of skipped iterations": ("skipped", int),
    "number of nan iterations": ("nan_iterations", int),
}
#: NeMo 2 ProgressPrinter and NeMo 1 progress-bar keys -> (Step attribute, converter).
NEMO_KEYS: dict[str, tuple[str, object]] = {
    "reduced_train_loss": ("lm_loss", float),
    "train_step_timing in s": ("step_time_s", float),
    "TFLOPS_per_GPU": ("tflops_per_gpu", float),
    "tflops_per_sec_per_gpu": ("tflops_per_gpu", float),  # NeMo FLOPsMeasurementCallback, older name
    "lr": ("learning_rate", float),
    "global_batch_size": ("global_batch_size", int),
    "consumed_samples": ("consumed_samples", int),
    "grad_norm": ("grad_norm", float),
}
#: Memory keys (both ``report_memory`` flavours and the 2019 ``cached`` names) -> normalized name (MB = 2**20 bytes).
MEM_KEYS = {
    "allocated": "allocated_mb",
    "max allocated": "max_allocated_mb",
    "reserved": "reserved_mb",
    "max reserved": "max_reserved_mb",
    "cached": "reserved_mb",
    "max cached": "max_reserved_mb",
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
GB_TO_MB = 1.0e9 / (1024.0 * 1024.0)  # Bridge GB = 1e9 bytes; Megatron MB = 2**20 bytes

# --------------------------------------------------------------------------------------------------------------
# Candidate patterns of the pre-filter: a line is handed to the parser only if it contains one of these (record
# patterns here, failure/end patterns in bridgebench.logs.signals.SIGNAL_PATTERNS).  'iteration  ' (two spaces)
# starts every Megatron record head (leftmost-first matching prefers it to 'iteration ', which catches NeMo 2 heads
# and the Bridge 'current_iteration to N' start line); 'iterations) memory' and
# 'iterations memory' the memory reports; 'train_step_timing in s' NeMo 2 fragments, the NeMo-Launcher list and the
# NeMo 1 progress bar; 'global_step=' a progress bar without timing.
# --------------------------------------------------------------------------------------------------------------
RECORD_PATTERNS: tuple[tuple[bytes, str], ...] = (
    (b"iteration  ", "record"),  # Megatron's '{:8d}' pads every iteration < 10**7: one match per record line
    (b"Step Time", "step_time"),
    (b"iteration ", "line"),  # NeMo 'iteration 17/99', Megatron >= 10**7, the Bridge start line
    (b"train_step_timing in s", "line"),
    (b"global_step=", "line"),
    (b"iterations) memory", "line"),
    (b"iterations memory", "line"),
)
