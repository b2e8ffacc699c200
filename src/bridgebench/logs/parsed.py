"""What :func:`bridgebench.logs.parser.parse_log` returns: :class:`ParsedLog`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bridgebench.logs.steady import SteadyState
from bridgebench.logs.step import Step


@dataclass(kw_only=True)
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
