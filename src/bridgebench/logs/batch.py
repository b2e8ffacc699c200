"""Chunk events: a chunk's candidate lines read at once with numpy where their digit skeleton matches a line template
(:mod:`bridgebench.logs.templates`), as arrays in log order (:meth:`ChunkEvents._batch`)."""

from __future__ import annotations

from operator import itemgetter

import numpy as np

from bridgebench.logs.assembly import RecordAssembly
from bridgebench.logs.scanner import RECORD, STEP_TIME
from bridgebench.logs.templates import LineTemplate, read_rows

_FIRST, _SECOND = itemgetter(0), itemgetter(1)
BATCH_TEMPLATES = 4  # templates per form tried on a chunk, most recently learned first
PROBE_ROWS = 32  # rows a template other than the current one is first tried on


class ChunkEvents(RecordAssembly):
    """Reads a chunk's candidates with the learned line templates."""

    def _batch(self, buf: bytes, hits: list[tuple[int, int, int]]) -> dict[str, np.ndarray]:
        """The chunk's candidates as events, in log order (arrays): ``code`` 2: a record line with a known skeleton
        (``x``, ``y``, ``z`` = step time in s, TFLOP/s, loss; ``ynone`` / ``znone`` where the form has none; ``it``,
        ``tot``), 1: a Step Time line (``x``, ``y`` = seconds, TFLOP/s), 0: anything else (for :meth:`_hit`); ``hit``:
        index into ``hits``; ``s``: its start; ``ls``, ``n``, ``pe``, ``tl``, ``te``: line start, length, and the
        prefix end, tail start and line end relative to it; ``label``: rank label; ``runend``: for a Step Time event
        starting a run of (Step Time, record) pairs whose records are all new iterations, the index after the run
        (else -1).  The other candidates inside a code 1/2 line are dropped, as the line-by-line loop skips them."""
        nh = len(hits)
        kinds = np.fromiter(map(_FIRST, hits), np.int64, nh)
        S = np.fromiter(map(_SECOND, hits), np.int64, nh)
        cols = _Columns(nh)
        arr = np.frombuffer(buf, np.uint8)
        for kind, c, current, cache in (
            (RECORD, 2, self._rec_tpl, self._rec_tpls),
            (STEP_TIME, 1, self._st_tpl, self._st_tpls),
        ):
            latest = self._read_form(arr, S, np.flatnonzero(kinds == kind), c, current, cache, cols)
            if latest is not None:  # the form of the chunk's last such line: the likeliest for the next chunk
                if c == 2:
                    self._rec_tpl = latest
                else:
                    self._st_tpl = latest
        ev = _kept_events(S, cols)
        tid = cols.tid[ev]
        used = cols.used
        per = {
            name: np.array([getattr(tp, attr) if not idx else getattr(tp, attr)[idx - 1] for tp in used] or [0])[tid]
            for name, attr, idx in (("n", "n", 0), ("pe", "pe", 0), ("tl", "tail", 1), ("te", "tail", 2))
        }
        out = {
            "code": cols.code[ev],
            "kind": kinds[ev],
            "hit": ev,
            "s": S[ev],
            "ls": cols.ls[ev],
            "x": cols.xs[ev],
            "y": cols.ys[ev],
            "z": cols.zs[ev],
            "ynone": cols.ynone[ev],
            "znone": cols.znone[ev],
            "it": cols.its[ev],
            "tot": cols.tots[ev],
            "label": cols.labels[ev],
            "tail": cols.tails[ev],
            **per,
        }
        out["clone"] = _clones(out["code"], out["it"], tid, cols.contents, cols.row_of[ev])
        out["runend"] = _run_ends(out["code"], out["it"], out["clone"], out["ynone"])
        return out

    def _read_form(
        self,
        arr: np.ndarray,
        S: np.ndarray,
        sel: np.ndarray,
        c: int,
        current: LineTemplate | None,
        cache: dict[bytes, LineTemplate],
        cols: _Columns,
    ) -> LineTemplate | None:
        """Read the candidates ``sel`` of one form (``c`` 2: record lines, 1: Step Time lines) with the current
        template, then the form's most recently used others, into ``cols``; returns the template of the form's last
        line read (None if no template fitted any)."""
        tpls = [current] if current is not None else []
        tpls += [tp for tp in reversed(cache.values()) if tp is not current][: BATCH_TEMPLATES - len(tpls)]
        latest, latest_row = None, -1
        for tpl in tpls:
            if not len(sel) or not tpl.vector:
                continue
            if len(sel) > 2 * PROBE_ROWS and tpl is not current:  # try a few rows first
                if not read_rows(arr, S[sel[:PROBE_ROWS]] - tpl.rs, tpl)[0].any():
                    continue
            ok, vals, pfx = read_rows(arr, S[sel] - tpl.rs, tpl)
            if not ok.any():
                continue
            rows, sel = sel[ok], sel[~ok]
            cols.row_of[rows] = np.arange(len(rows))
            cache[tpl.skel] = cache.pop(tpl.skel, tpl)  # most recently used last
            if rows[-1] > latest_row:
                latest, latest_row = tpl, rows[-1]
            cols.code[rows] = c
            cols.ls[rows] = S[rows] - tpl.rs
            cols.tid[rows] = len(cols.used)
            cols.used.append(tpl)
            if c == 2:
                cols.tails[rows] = vals["tail"]
                cols.contents[len(cols.used) - 1] = vals["content"]
                cols.its[rows], cols.tots[rows], cols.xs[rows] = vals["it"], vals["tot"], vals["ms"] / 1000.0
                cols.ys[rows] = vals.get("tf", 0.0)
                cols.zs[rows] = vals.get("loss", 0.0)
                cols.ynone[rows] = "tf" not in vals
                cols.znone[rows] = "loss" not in vals
            else:
                cols.xs[rows], cols.ys[rows] = vals["secs"], vals["tf"]
            if tpl.pe:
                cols.labels[rows] = self._labels_of(pfx)
        return latest


class _Columns:
    """Per candidate (``nh`` of them) what the templates read: ``code`` (2 record, 1 Step Time, 0 unread), line
    start ``ls``, template index ``tid`` into ``used``, values ``xs``/``ys``/``zs`` (s, TFLOP/s, loss), iteration
    ``its`` and total ``tots``, ``ynone``/``znone`` (the form has no TFLOP/s / loss), rank ``labels``, record
    ``tails``, ``row_of`` (row in its template's content matrix ``contents[tid]``)."""

    __slots__ = ("code", "ls", "tid", "xs", "ys", "zs", "its", "tots", "ynone", "znone", "labels", "tails")
    __slots__ += ("row_of", "contents", "used")

    def __init__(self, nh: int) -> None:
        self.code = np.zeros(nh, np.int8)
        self.ls = np.zeros(nh, np.int64)
        self.tid = np.zeros(nh, np.int64)
        self.xs, self.ys, self.zs = np.zeros(nh), np.zeros(nh), np.zeros(nh)
        self.its = np.zeros(nh, np.int64)
        self.tots = np.zeros(nh, np.int64)
        self.ynone = np.zeros(nh, bool)
        self.znone = np.zeros(nh, bool)
        self.labels = np.full(nh, None, object)
        self.tails = np.full(nh, None, object)
        self.row_of = np.zeros(nh, np.int64)
        self.contents: dict[int, np.ndarray] = {}
        self.used: list[LineTemplate] = []


def _kept_events(S: np.ndarray, cols: _Columns) -> np.ndarray:
    """Indexes of the candidates kept as events: all but those inside a line a template read, other than its
    first."""
    code, ls = cols.code, cols.ls
    hot = np.flatnonzero(code)
    if not len(hot):
        return np.arange(len(S))
    starts = ls[hot]
    ends = starts + np.array([tp.n for tp in cols.used])[cols.tid[hot]]
    k = np.searchsorted(starts, S, "right") - 1
    kc = np.maximum(k, 0)
    return np.flatnonzero((k < 0) | (S >= ends[kc]) | (S == S[hot][kc]))


def _clones(
    c: np.ndarray, it: np.ndarray, tid: np.ndarray, contents: dict[int, np.ndarray], rows: np.ndarray
) -> np.ndarray:
    """Per event: a record line that repeats the record line before it (same form, same bytes after the rank
    prefix), i.e. the same record printed by another rank, a clone of the last new record."""
    clone = np.zeros(len(c), bool)
    cand = np.flatnonzero((c[1:] == 2) & (c[:-1] == 2) & (tid[1:] == tid[:-1]) & (it[1:] == it[:-1])) + 1
    for t in np.unique(tid[cand]).tolist():
        sel = cand[tid[cand] == t]
        content = contents[t]
        clone[sel[(content[rows[sel]] == content[rows[sel - 1]]).all(axis=1)]] = True
    return clone


def _run_ends(c: np.ndarray, it: np.ndarray, clone: np.ndarray, ynone: np.ndarray) -> np.ndarray:
    """Runs of groups (Step Time line, new record line, its clones): ``runend[i]`` = index after the run starting at
    ``i`` (else -1).  A run's groups all have clones or none has; its records are new iterations one after the
    other; in a run with clones every new record has its TFLOP/s (so no Step Time value reaches a step)."""
    m = len(c)
    idx = np.arange(m)
    nonclone = np.append(np.flatnonzero(~clone), m)
    e = nonclone[np.minimum(np.searchsorted(nonclone, idx + 2), len(nonclone) - 1)]  # where group i ends
    group = np.zeros(m + 1, bool)
    group[: m - 1] = (c[:-1] == 1) & (c[1:] == 2) & ~clone[1:]
    has_cl = e > idx + 2
    new_it = np.full(m + 1, -1, np.int64)
    new_it[: m - 1] = it[1:]
    new_tf = np.zeros(m + 1, bool)
    new_tf[: m - 1] = ~ynone[1:]
    group[:m] &= ~has_cl | new_tf[:m]
    has_cl = np.append(has_cl, False)
    link = group[:m] & group[e] & (new_it[e] != new_it[:m]) & (has_cl[e] == has_cl[:m])
    ptr = np.where(link, e, idx)
    while True:  # follow the links to the last group of each run (pointer doubling)
        nxt = ptr[ptr]
        if (nxt == ptr).all():
            break
        ptr = nxt
    return np.where(group[:m], e[ptr], -1)
