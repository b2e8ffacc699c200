"""The fields of one parse's streaming state (:class:`StateFields`), shared by the concerns that update them: rank
labels (:mod:`~bridgebench.logs.labels`), signals (:mod:`~bridgebench.logs.signal_lines`), memory lines
(:mod:`~bridgebench.logs.memory_lines`), step pairing (:mod:`~bridgebench.logs.pairing`), record assembly
(:mod:`~bridgebench.logs.assembly`), chunk events (:mod:`~bridgebench.logs.batch`) and line routing
(:mod:`~bridgebench.logs.routing`), stacked in that order into :class:`bridgebench.logs.state.ParseState`."""

from __future__ import annotations

from typing import Any

from bridgebench.logs.step import Step
from bridgebench.logs.templates import LineTemplate

#: characters of a signal's or a marker's line kept as its detail
DETAIL_MAX = 500
#: lines searched after the first 'Traceback' for the exception line that closes it
TRACEBACK_LOOKAHEAD = 400
#: physical lines a split record may have before it is taken as it is
MAX_FRAGMENTS = 16
#: lines scanned one by one for the rest of a split record before giving up on it
MAX_PENDING_LINES = 2000


class StateFields:
    """Mutable accumulator of one parse: every field the concerns share."""

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
