"""Signals: failure classes, tracebacks, end-of-training markers and ``max_steps`` seen on the lines that are no
record (:class:`SignalLines`; the classes and their precedence: :mod:`bridgebench.logs.signals`)."""

from __future__ import annotations

from bridgebench.logs import formats as F
from bridgebench.logs.fields import DETAIL_MAX, TRACEBACK_LOOKAHEAD
from bridgebench.logs.labels import RankLabels
from bridgebench.logs.signals import EXC_LINE_RE, classify_line, end_marker


class SignalLines(RankLabels):
    """Counts signals (first detail, last offset per class), follows a traceback to its exception line, and keeps
    the end-of-training marker and ``max_steps``."""

    def signal(self, cls: str, detail: str, off: int) -> None:
        self.signal_counts[cls] = self.signal_counts.get(cls, 0) + 1
        self.signal_last[cls] = off
        if cls not in self.signals:
            self.signals[cls] = detail.strip()[:DETAIL_MAX]

    def traceback_line(self, content: str) -> None:
        """Inside an open traceback: one line less to search; its exception line closes it."""
        self.tb_lines -= 1
        if EXC_LINE_RE.match(content):
            self.crash_exception = content.strip()[:DETAIL_MAX]
            self.tb_lines = 0

    def other_line(self, label: str | None, content: str, off: int) -> None:
        """A line that is no record: a signal (and the traceback it opens), an end marker, ``max_steps``."""
        cls = classify_line(content)
        if cls is not None:
            if label:
                self.ranks.add(label)
            self.signal(cls, content, off)
            if cls == "crash" and self.crash_exception is None and "Traceback" in content:
                self.tb_lines = TRACEBACK_LOOKAHEAD
            return
        if end_marker(content) and self.end_marker is None:
            self.end_marker = content.strip()[:DETAIL_MAX]
            self.end_offset = off
        if "max_steps" in content:
            m = F.MAX_STEPS_RE.search(content)
            if m:
                self.max_steps = int(m.group(1))
