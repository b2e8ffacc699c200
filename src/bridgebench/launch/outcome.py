"""What happened to one attempt, told truthfully: the scheduler's final state, the exit code, the log's reason, and
whether the payload ever started.

A record's ``outcome`` (``launch/collect.py``) is decided here, in this order:

1. the payload never started -- its log has no ``BRIDGEBENCH_START`` line (``payloads/markers.py``), no result line
   and it left no result -- and the
   scheduler says ``COMPLETED`` or ``FAILED``: ``never_started`` (the command was not found, a path did not resolve on
   the node, a wrapper failed or exited 0 without running it; the job itself ran, the benchmark did not);
2. any other final state than ``COMPLETED``: that state in lower case -- ``failed``, ``timeout``, ``cancelled``,
   ``out_of_memory``, ``node_fail``, ``boot_fail``, ``deadline``, ``preempted`` (a job cancelled or timed out before
   its payload started keeps the scheduler's verdict, with ``payload_started`` false: that verdict is the cause);
3. ``COMPLETED`` with the payload's result (``optstep.json`` or its ``BRIDGEBENCH_OPTSTEP`` line; for pretrain the
   ``BRIDGEBENCH_RUN`` line and no failure in the log): ``completed``;
4. ``COMPLETED`` without it: ``no_result``.

The reason beside it (``outcome_detail``) is the log's: the failure class the log parser found
(:func:`bridgebench.logs.parser.parse_log`: time limit, OOM, NCCL, NaN, crash with its exception line), else the last
error line of the job's logs (``bash: python: command not found``, ``error: ...``), else SLURM's exit code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from bridgebench.payloads.markers import OPTSTEP, RUN, START

#: Lines that prove the payload ran: its start line, or a result line (payloads of bridgebench versions before the
#: start line printed only those).
_STARTED = (START, OPTSTEP, RUN)

#: Outcomes of an attempt, besides the scheduler's own final states in lower case.
COMPLETED = "completed"
NO_RESULT = "no_result"
NEVER_STARTED = "never_started"

#: Log lines that say why a command failed (shell, Python, SLURM, click/typer usage errors).
_ERROR_LINE = re.compile(
    r"(?i)(error\b|no such file or directory|command not found|permission denied|not found|cannot |"
    r"invalid value|killed|exception|traceback)"
)
_SCRIPT_PREFIX = re.compile(r"^(/\S+\.sh): line ")
#: Lines that never explain a failure: bash xtrace of nemo-run's sbatch script (``set -evx``), its exit summary.
_NOISE = re.compile(r"^\s*(\+|job exited with code|exitcode=|if \[|fi$|exit \$exitcode|scontrol requeue)")


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """``outcome`` (see the module docstring), ``payload_started`` (the ``BRIDGEBENCH_START`` line was seen; None
    when no log could be read) and ``detail`` (the log's reason, or None)."""

    outcome: str
    payload_started: bool | None
    detail: str | None


def payload_started(logs: Iterable[Path]) -> bool | None:
    """True when a log has the payload's start line or one of its result lines (:data:`_STARTED`), False when none
    has, None when there is no readable log."""
    seen_any = False
    for log in logs:
        try:
            with open(log, errors="replace") as f:
                seen_any = True
                if any(m in line for line in f for m in _STARTED):
                    return True
        except OSError:
            continue
    return False if seen_any else None


def last_error_line(logs: Iterable[Path], limit: int = 300) -> str | None:
    """The last line of the logs that says why something failed (see :data:`_ERROR_LINE`), srun logs
    (``log-*``) before nemo-run's sbatch log; None when no line does."""
    ordered = sorted(logs, key=lambda p: (not Path(p).name.startswith("log-"), str(p)))
    for log in ordered:
        found = None
        try:
            with open(log, errors="replace") as f:
                for line in f:
                    text = line.strip()
                    if text and not _NOISE.match(text) and START not in text and _ERROR_LINE.search(text):
                        found = text
        except OSError:
            continue
        if found:
            # bash names the payload script by its full path first: keep its file name ("x.sh: line 2: ...")
            return _SCRIPT_PREFIX.sub(lambda m: f"{Path(m.group(1)).name}: line ", found)[:limit]
    return None


def log_reason(logs: list[Path]) -> tuple[str | None, str | None]:
    """(failure class, detail) from the logs: the log parser's decisive failure class (``time_limit``, ``oom``,
    ``nccl_error``, ``nan``, ``crash``, ``node_failure``) with its line, else (None, the last error line)."""
    from bridgebench.logs.parser import LogReadError, parse_log
    from bridgebench.logs.signals import OUTCOME_PRECEDENCE

    for log in logs:
        try:
            parsed = parse_log(log)
        except LogReadError:
            continue
        if parsed.outcome in OUTCOME_PRECEDENCE:
            return parsed.outcome, (parsed.outcome_detail or "")[:300] or None
    return None, last_error_line(logs)


def failure_reason(state: str, exit_code: str | None, slurm_reason: str | None, logs: list[Path]) -> str:
    """``<class>: <detail>`` for an attempt that ended ``state``: the log's failure class and line, else the
    scheduler's state with the exit code, SLURM's reason and the log's last error line."""
    cls, detail = log_reason(logs)
    if cls is not None:
        return f"{cls}: {detail}" if detail else cls
    parts = [f"exit code {exit_code}"] if exit_code else []
    if slurm_reason and slurm_reason not in ("None", ""):
        parts.append(slurm_reason)
    if detail:
        parts.append(detail)
    return f"{state.lower()}: {', '.join(parts)}" if parts else state.lower()


def decide(state: str, exit_code: str | None, logs: list[Path], *, has_result: bool, reason: str | None) -> Outcome:
    """The attempt's :class:`Outcome` from the scheduler's final ``state`` (``COMPLETED``, ``FAILED``, ...), its
    ``exit_code`` (``N:M``), its ``logs``, whether the payload's result was found, and the reason the ledger holds
    (``launch/tracking.py`` fills it for failed states from :func:`failure_reason`)."""
    base = state.split(" ")[0].upper()
    started = True if has_result else payload_started(logs)
    if started is False and base in ("COMPLETED", "FAILED"):
        cls, detail = log_reason(logs)
        why = (f"{cls}: {detail}" if cls else detail) or (f"exit code {exit_code}" if exit_code else None)
        if base == "COMPLETED":
            why = f"the job completed (exit code {exit_code or '0:0'}) but its payload never started" + (
                f"; last error line: {why}" if why and not why.startswith("exit code") else ""
            )
        return Outcome(outcome=NEVER_STARTED, payload_started=False, detail=why)
    if base != "COMPLETED":
        return Outcome(
            outcome=base.lower(), payload_started=started, detail=reason or failure_reason(base, exit_code, None, logs)
        )
    if has_result:
        return Outcome(outcome=COMPLETED, payload_started=started, detail=None)
    cls, detail = log_reason(logs)
    why = f"{cls}: {detail}" if cls else detail
    return Outcome(
        outcome=NO_RESULT,
        payload_started=started,
        detail=why or "the payload started but left no result (no optstep.json / result line)",
    )
