"""The multi-pattern scan that finds a chunk's candidate lines: record heads, Step Time lines, failure and
end-of-training strings (``ahocorasick_rs``, SIMD-accelerated Aho-Corasick, leftmost-first).  A hit is ``(pattern
index, start, end)``; :data:`KINDS` says what each pattern index is (``record``, ``step_time``, ``line``)."""

from __future__ import annotations

import ahocorasick_rs

from bridgebench.logs import formats as F
from bridgebench.logs.signals import SIGNAL_PATTERNS

KINDS: list[str] = [k for _, k in F.RECORD_PATTERNS] + ["line"] * len(SIGNAL_PATTERNS)
RECORD, STEP_TIME = KINDS.index("record"), KINDS.index("step_time")
SCANNER = ahocorasick_rs.BytesAhoCorasick(
    [p for p, _ in F.RECORD_PATTERNS] + list(SIGNAL_PATTERNS), matchkind=ahocorasick_rs.MATCHKIND_LEFTMOST_FIRST
)
