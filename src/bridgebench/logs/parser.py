"""Stream a pretraining log into steps, a window of figures with its quality, and an outcome class.

One pass over the log in large binary chunks (bounded memory: :data:`CHUNK_BYTES` plus the steps kept).  A
multi-pattern scan (``ahocorasick_rs``, SIMD-accelerated Aho-Corasick) finds the few candidate lines -- record heads,
Step Time lines, failure and end-of-training strings (:data:`bridgebench.logs.formats.RECORD_PATTERNS`,
:data:`bridgebench.logs.signals.SIGNAL_PATTERNS`); only those are decoded and parsed, the rest of the log is never
touched by Python code.  Standard Megatron iteration lines take a fast path that reads the timed fields at once and
keeps the rest of the line to be parsed when :attr:`ParsedLog.steps` is first read.  The fast path's offsets become
a *line template* (:mod:`bridgebench.logs.templates`): later lines with the same digit skeleton are checked and read
for a whole chunk at once with numpy, and runs of (Step Time line, record line) pairs make their steps in one go --
with the same results as line by line.  Records split over several physical lines (cloudai's fixture, terminal
wrapping) and Python tracebacks switch to a line-by-line mode until they close.

The parser is one module per concern; this module is its public face (every name callers use is importable here):

- :mod:`~bridgebench.logs.reader` -- the source and its chunks, :func:`parse_log`;
- :mod:`~bridgebench.logs.scanner` -- the multi-pattern scan;
- :mod:`~bridgebench.logs.routing` -- line routing (template reader, byte fast paths, text handler);
- :mod:`~bridgebench.logs.batch` -- a chunk's template-read lines as arrays;
- :mod:`~bridgebench.logs.assembly` -- record assembly (which line is a record; split records joined);
- :mod:`~bridgebench.logs.pairing` -- step pairing (Step Time line and its record);
- :mod:`~bridgebench.logs.signal_lines` -- signals, tracebacks, end markers;
- :mod:`~bridgebench.logs.memory_lines` -- memory reports per rank;
- :mod:`~bridgebench.logs.labels` -- rank labels; :mod:`~bridgebench.logs.fields` -- the state's fields;
  :mod:`~bridgebench.logs.state` -- the concerns stacked into one state;
- :mod:`~bridgebench.logs.step` -- :class:`Step` and the record readers; :mod:`~bridgebench.logs.parsed` --
  :class:`ParsedLog`; :mod:`~bridgebench.logs.finish` -- the step view, outcome and windows;
  :mod:`~bridgebench.logs.report` -- :func:`to_json`, :func:`explain`.

The line forms and their sources are in :mod:`bridgebench.logs.formats`; outcome classes and precedence in
:mod:`bridgebench.logs.signals`; windows, warm-up and quality in :mod:`bridgebench.logs.steady`.

Step view: one rank's records -- the rank label with the most records carrying a loss (ties: the highest numeric
label, i.e. the last pipeline stage).  Within it an iteration equal to the previous one is a duplicate (dropped); a
smaller one starts a new *segment* (a restart / resume; so does a Megatron-Bridge ``train()`` start line), and the
newer attempt's records supersede the older attempt's for the same iterations.
"""

from __future__ import annotations

from bridgebench.logs.finish import FORMATS, MAX_ITERATION, parsed_from_steps
from bridgebench.logs.labels import split_prefix
from bridgebench.logs.parsed import ParsedLog
from bridgebench.logs.reader import CHUNK_BYTES, MAX_LINE_BYTES, LogReadError, parse_log
from bridgebench.logs.report import explain, to_json
from bridgebench.logs.signals import OUTCOME_PRECEDENCE, OUTCOMES, classify_line
from bridgebench.logs.steady import QUALITIES, SteadyState, bad_reason, steady_state
from bridgebench.logs.step import Step

__all__ = [
    "CHUNK_BYTES",
    "FORMATS",
    "LogReadError",
    "MAX_ITERATION",
    "MAX_LINE_BYTES",
    "OUTCOMES",
    "OUTCOME_PRECEDENCE",
    "ParsedLog",
    "QUALITIES",
    "SteadyState",
    "Step",
    "bad_reason",
    "classify_line",
    "explain",
    "parse_log",
    "parsed_from_steps",
    "split_prefix",
    "steady_state",
    "to_json",
]
