"""Which stored records carry usable figures, and one line that says what was skipped and why.

A record is usable when its ``outcome`` is ``completed`` (``launch/outcome.py`` decides it at ``collect``: the
scheduler's final state, whether the payload started, whether it left a result). Records stored before the
``outcome`` field existed count as usable when SLURM's ``state`` was ``COMPLETED`` (or absent: published rows).

``report`` and ``compare --source runs`` print :func:`skip_line`, e.g. ``3 records, none completed: 1 TIMEOUT,
2 CANCELLED`` or ``7 records, 5 used; skipped 2: 1 FAILED, 1 never_started``: scheduler states in SLURM's upper
case, bridgebench's own outcomes (``never_started``, ``no_result``) as they are stored.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

#: bridgebench's own outcomes (not SLURM states): shown as stored.
OWN = ("completed", "no_result", "never_started")


def outcome_of(record: Mapping[str, Any]) -> str:
    """The record's outcome: its ``outcome`` field, else (older records) ``completed`` for SLURM state COMPLETED
    or none, and the state in lower case otherwise."""
    if "payload_started" in record and record.get("outcome"):  # a record with the outcome fields (collect)
        return str(record["outcome"])
    state = record.get("state")
    return "completed" if state in (None, "COMPLETED") else str(state).split(" ")[0].lower()


def usable(record: Mapping[str, Any]) -> bool:
    """True when the record's figures may be used (outcome ``completed``)."""
    return outcome_of(record) == "completed"


def label(outcome: str) -> str:
    """``TIMEOUT`` for a scheduler state, ``never_started`` for bridgebench's own outcomes."""
    return outcome if outcome in OWN else outcome.upper()


def tally(records: Iterable[Mapping[str, Any]]) -> Counter:
    """Count of records per outcome label (:func:`label`)."""
    return Counter(label(outcome_of(r)) for r in records)


def skip_line(records: list[Mapping[str, Any]], used: int, noun: str = "record") -> str:
    """``N records, none completed: 1 TIMEOUT, 2 CANCELLED`` / ``N records, k used; skipped m: ...`` / ``N
    records, all used``. ``used``: how many of ``records`` the caller used (records it set aside for other reasons,
    e.g. no figures for the metric, count as skipped under ``outcome completed`` with ``no figures``)."""
    n = len(records)
    plural = f"{n} {noun}{'s' * (n != 1)}"
    counts = tally(r for r in records if not usable(r))
    no_fig = sum(1 for r in records if usable(r)) - used
    if no_fig > 0:
        counts["completed without the figures asked for"] = no_fig
    parts = ", ".join(f"{c} {k}" for k, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    if used == 0:
        done = sum(1 for r in records if usable(r))
        return f"{plural}, none {'completed' if not done else 'usable'}: {parts}" if parts else f"{plural}, none used"
    if not parts:
        return f"{plural}, all used"
    return f"{plural}, {used} used; skipped {n - used}: {parts}"
