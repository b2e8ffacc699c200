"""Outcome classes of a training log: failure signals, their precedence, and how completion is decided.

Sources of the failure strings: SLURM slurmstepd (``slurmstepd: error: *** JOB 123 ON node1 CANCELLED AT ... DUE TO
TIME LIMIT ***`` / ``... DUE TO NODE FAILURE ***``); Megatron-Bridge ``scripts/performance/setup_experiment.py``
(``check_slurm_timeout``: ``DUE TO TIME LIMIT``; ``is_flaky_failure``: ``torch.distributed.DistBackendError``,
``ncclRemoteError``, ``Watchdog caught collective operation timeout``, ``Segmentation fault``, ``found NaN in``,
``illegal memory access``; ``check_training_finished``: ``after training is done``, ``exiting program at
iteration``); Megatron-LM ``pretrain_gpt.py`` / Bridge ``src/megatron/bridge/training/losses.py`` (``found NaN in
local forward loss calculation``), ``megatron/core/rerun_state_machine.py`` (``RuntimeError: Rank r, node n, device
d, iteration i: Unexpected result nan (message='...')``); PyTorch's ``torch.OutOfMemoryError: CUDA out of memory``
and c10d ``ProcessGroupNCCL`` watchdog messages; the host out-of-memory lines of SLURM 22.05's ``slurmstepd`` and
``srun`` (as the local cluster prints them: launch/cluster, task/cgroup and jobacct_gather OverMemoryKill).
"""

from __future__ import annotations

import re

#: Failure classes, most decisive first.  When a log shows several, the first one in this tuple wins: a scheduler
#: verdict (time limit, node failure) explains everything after it; an OOM on one rank makes the other ranks hit NCCL
#: watchdog timeouts; NCCL errors and NaN checks surface as Python tracebacks (``RuntimeError``), so those beat the
#: generic ``crash``.  A failure signal beats completion, except when every signal of the log came before a restart
#: inside the same job whose last attempt then completed: that run is ``completed`` with its restarts counted.
OUTCOME_PRECEDENCE: tuple[str, ...] = ("time_limit", "node_failure", "oom", "nccl_error", "nan", "crash")

#: Every outcome :func:`bridgebench.logs.parser.parse_log` can return: the failure classes, then ``completed`` (final
#: iteration reached or an end-of-training marker, with no failure signal after the last restart) and
#: ``incomplete`` (neither: the log stops before an end -- the job is still running, was killed without a word in
#: its log, or the file is an excerpt; a log alone cannot tell which, so only a caller that knows the job is running
#: says ``running``: ``bridgebench logs parse`` asks the job ledger, ``status`` / ``logs follow`` show live jobs).
OUTCOMES: tuple[str, ...] = OUTCOME_PRECEDENCE + ("completed", "incomplete")

#: Substrings that make a line a candidate for :func:`classify_line` or an end-of-training marker (the pre-filter's
#: failure half; record patterns are in :data:`bridgebench.logs.formats.RECORD_PATTERNS`).  Each class's strings in
#: :func:`classify_line` contain one of these: 'rror' covers every *Error / error (OutOfMemoryError, RuntimeError,
#: CUDA error, NCCL error, ncclRemoteError, DistBackendError, ChildFailedError, Fatal Python error, slurmstepd:
#: error: ..., srun: error: ...).  Longer strings keep the multi-pattern scan fast.
SIGNAL_PATTERNS: tuple[bytes, ...] = (
    b"rror",
    b"Traceback",
    b"DUE TO",
    b"NODE_FAIL",
    b"Watchdog",
    b"ProcessGroupNCCL",
    b"NCCL operations",
    b"CUDA out of memory",
    b"found NaN",
    b"found Inf",
    b"Segmentation",
    b"Segfault",
    b"SIGSEGV",
    b"SIGABRT",
    b"SIGBUS",
    b"Aborted",
    b"core dumped",
    b"training is done",
    b"Trainer.fit",
    b"exiting program",
    b"max_steps",
)

_NCCL_CODE_RE = re.compile(
    r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError)"
)
_ABORTED_RE = re.compile(r"\bAborted\b")
#: The exception line that closes a Python traceback, e.g. ``ValueError: x`` or ``Exception: Simulating a crash``.
EXC_LINE_RE = re.compile(r"^\s*((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Failure))(?::|\s*$)")


def classify_line(content: str) -> str | None:
    """Failure class of one log line (rank prefix already stripped), or None.  Checked in OUTCOME_PRECEDENCE order.

    * ``time_limit``: SLURM slurmstepd ``*** JOB n ON host CANCELLED AT t DUE TO TIME LIMIT ***``.
    * ``node_failure``: ``DUE TO NODE FAILURE`` (slurmstepd), srun's ``srun: error: Node failure on <nodes>``
      (SLURM's srun ``_node_fail_handler``, on the controller's SRUN_NODE_FAIL message; which of the two reaches
      the log first varies from run to run) or the ``NODE_FAIL`` job state.
    * ``oom``: ``CUDA out of memory`` / ``OutOfMemoryError`` (PyTorch caching allocator) / ``CUDA error: out of
      memory``; host memory: SLURM's ``slurmstepd: error: Detected 1 oom-kill event(s) in StepId=N.0 ...``
      (task/cgroup: the kernel's OOM killer in the step's memory cgroup), ``srun: error: node: task 0: Out Of
      Memory`` and ``slurmstepd: error: Exceeded job memory limit`` (jobacct_gather ``OverMemoryKill``).
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
    if "NODE_FAIL" in s or "Node failure on " in s:
        return "node_failure"
    if "CUDA out of memory" in s or "OutOfMemoryError" in s or "CUDA error: out of memory" in s:
        return "oom"
    if "oom-kill event" in s or ": Out Of Memory" in s or "Exceeded job memory limit" in s:
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


def end_marker(content: str) -> bool:
    """True for an end-of-training line: ``after training is done`` (Megatron-LM / Bridge ``print_datetime``),
    Lightning's ``Trainer.fit` stopped``, ``exiting program at iteration`` / ``after N minutes`` (Megatron's
    ``--exit-interval`` / ``--exit-duration-in-mins``) -- but not ``exiting program after receiving SIGTERM``."""
    return (
        "after training is done" in content
        or "Trainer.fit` stopped" in content
        or ("exiting program" in content and "SIGTERM" not in content)
    )


def decide_outcome(
    signals: dict[str, str],
    last_offsets: dict[str, int],
    *,
    reached_end: bool,
    last_segment_start: int | None,
) -> tuple[str, list[str]]:
    """(outcome, failure classes recovered from).

    The first class of :data:`OUTCOME_PRECEDENCE` with a signal wins -- unless the run reached its end
    (``reached_end``: final iteration or an end marker) and every signal's last occurrence (byte offset in
    ``last_offsets``) lies before ``last_segment_start``, the start of the last attempt after an in-job restart:
    then the run is ``completed`` and the classes it recovered from are returned.  Without signals: ``completed`` if
    ``reached_end`` else ``incomplete``.
    """
    present = [c for c in OUTCOME_PRECEDENCE if c in signals]
    if present and reached_end and last_segment_start is not None:
        if all(last_offsets.get(c, 0) < last_segment_start for c in present):
            return "completed", present
    if present:
        return present[0], []
    return ("completed" if reached_end else "incomplete"), []
