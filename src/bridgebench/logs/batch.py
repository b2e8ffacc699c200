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
        arr = np.frombuffer(buf, np.uint8)
        code = np.zeros(nh, np.int8)
        ls = np.zeros(nh, np.int64)
        tid = np.zeros(nh, np.int64)
        xs, ys, zs = np.zeros(nh), np.zeros(nh), np.zeros(nh)
        its = np.zeros(nh, np.int64)
        tots = np.zeros(nh, np.int64)
        ynone = np.zeros(nh, bool)
        znone = np.zeros(nh, bool)
        labels = np.full(nh, None, object)
        tails = np.full(nh, None, object)
        row_of = np.zeros(nh, np.int64)  # row of the line in its template's content matrix
        contents: dict[int, np.ndarray] = {}
        used: list[LineTemplate] = []
        for kind, c, current, cache in (
            (RECORD, 2, self._rec_tpl, self._rec_tpls),
            (STEP_TIME, 1, self._st_tpl, self._st_tpls),
        ):
            sel = np.flatnonzero(kinds == kind)
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
                row_of[rows] = np.arange(len(rows))
                cache[tpl.skel] = cache.pop(tpl.skel, tpl)  # most recently used last
                if rows[-1] > latest_row:
                    latest, latest_row = tpl, rows[-1]
                code[rows] = c
                ls[rows] = S[rows] - tpl.rs
                tid[rows] = len(used)
                used.append(tpl)
                if c == 2:
                    tails[rows] = vals["tail"]
                    contents[len(used) - 1] = vals["content"]
                    its[rows], tots[rows], xs[rows] = vals["it"], vals["tot"], vals["ms"] / 1000.0
                    ys[rows] = vals.get("tf", 0.0)
                    zs[rows] = vals.get("loss", 0.0)
                    ynone[rows] = "tf" not in vals
                    znone[rows] = "loss" not in vals
                else:
                    xs[rows], ys[rows] = vals["secs"], vals["tf"]
                if tpl.pe:
                    labels[rows] = self._labels_of(pfx)
            if latest is not None:  # the form of the chunk's last such line: the likeliest for the next chunk
                if c == 2:
                    self._rec_tpl = latest
                else:
                    self._st_tpl = latest
        hot = np.flatnonzero(code)
        if len(hot):  # drop the candidates inside a hot line other than its first
            starts = ls[hot]
            ends = starts + np.array([tp.n for tp in used])[tid[hot]]
            k = np.searchsorted(starts, S, "right") - 1
            kc = np.maximum(k, 0)
            keep = (k < 0) | (S >= ends[kc]) | (S == S[hot][kc])
        else:
            keep = np.ones(nh, bool)
        ev = np.flatnonzero(keep)
        tid = tid[ev]
        per = {
            name: np.array([getattr(tp, attr) if not idx else getattr(tp, attr)[idx - 1] for tp in used] or [0])[tid]
            for name, attr, idx in (("n", "n", 0), ("pe", "pe", 0), ("tl", "tail", 1), ("te", "tail", 2))
        }
        out = {
            "code": code[ev],
            "kind": kinds[ev],
            "hit": ev,
            "s": S[ev],
            "ls": ls[ev],
            "x": xs[ev],
            "y": ys[ev],
            "z": zs[ev],
            "ynone": ynone[ev],
            "znone": znone[ev],
            "it": its[ev],
            "tot": tots[ev],
            "label": labels[ev],
            "tail": tails[ev],
            **per,
        }
        # a record line that repeats the record line before it (same form, same bytes after the rank prefix): the
        # same record printed by another rank, i.e. a clone of the last new record
        c, it, m = out["code"], out["it"], len(ev)
        clone = np.zeros(m, bool)
        cand = np.flatnonzero((c[1:] == 2) & (c[:-1] == 2) & (tid[1:] == tid[:-1]) & (it[1:] == it[:-1])) + 1
        for t in np.unique(tid[cand]).tolist():
            sel = cand[tid[cand] == t]
            content, rows = contents[t], row_of[ev]
            clone[sel[(content[rows[sel]] == content[rows[sel - 1]]).all(axis=1)]] = True
        out["clone"] = clone
        # runs of groups (Step Time line, new record line, its clones): runend[i] = index after the run starting at
        # i (else -1).  A run's groups all have clones or none has; its records are new iterations one after the
        # other; in a run with clones every new record has its TFLOP/s (so no Step Time value reaches a step).
        idx = np.arange(m)
        nonclone = np.append(np.flatnonzero(~clone), m)
        e = nonclone[np.minimum(np.searchsorted(nonclone, idx + 2), len(nonclone) - 1)]  # where group i ends
        group = np.zeros(m + 1, bool)
        group[: m - 1] = (c[:-1] == 1) & (c[1:] == 2) & ~clone[1:]
        has_cl = e > idx + 2
        new_it = np.full(m + 1, -1, np.int64)
        new_it[: m - 1] = it[1:]
        new_tf = np.zeros(m + 1, bool)
        new_tf[: m - 1] = ~out["ynone"][1:]
        group[:m] &= ~has_cl | new_tf[:m]
        has_cl = np.append(has_cl, False)
        link = group[:m] & group[e] & (new_it[e] != new_it[:m]) & (has_cl[e] == has_cl[:m])
        ptr = np.where(link, e, idx)
        while True:  # follow the links to the last group of each run (pointer doubling)
            nxt = ptr[ptr]
            if (nxt == ptr).all():
                break
            ptr = nxt
        runend = np.where(group[:m], e[ptr], -1)
        out["runend"] = runend
        return out
