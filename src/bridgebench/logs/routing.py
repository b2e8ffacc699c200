"""Line routing: a chunk's candidate lines (:mod:`bridgebench.logs.scanner`) go to the template reader (a whole chunk
at once, :mod:`bridgebench.logs.batch`), the byte fast paths (one standard line, which then becomes a template) or
the text handler (everything else, and every line while a split record or a traceback is open), in log order
(:class:`LineRouting`)."""

from __future__ import annotations

from typing import Callable

from bridgebench.logs import formats as F
from bridgebench.logs.batch import ChunkEvents
from bridgebench.logs.fields import MAX_PENDING_LINES
from bridgebench.logs.labels import split_prefix
from bridgebench.logs.scanner import RECORD, SCANNER, STEP_TIME
from bridgebench.logs.step import Step, clone_step
from bridgebench.logs.templates import DIGITS0, LineTemplate, rec_template, st_template

MAX_TEMPLATES = 64  # distinct line skeletons remembered per form (cleared when full)
BATCH_MIN_HITS = 256  # chunks with fewer candidate strings are read line by line
REBATCH_MISSES = 32  # record / Step Time lines left to the line-by-line path before the chunk's rest is re-read


class LineRouting(ChunkEvents):
    """Handles the complete lines of each chunk (:meth:`scan`)."""

    def scan(self, buf: bytes, end: int, base: int) -> None:
        """Handle the complete lines of ``buf[:end]`` (``base`` = byte offset of ``buf`` in the log).

        Candidate lines come from the multi-pattern scan; the first candidate of a line decides how it is handled.
        Record and Step Time lines with the digit skeleton of a line the fast path accepted before
        (:mod:`bridgebench.logs.templates`) are checked and read for the whole chunk at once (:meth:`_batch`); the
        rest go line by line (:meth:`_hit`), in log order, with the same state updates either way.
        """
        pos = 0
        if self.pending or self.tb_lines:
            pos = self._line_mode(buf, 0, end, base)
        hay = buf if end == len(buf) else memoryview(buf)[:end]
        hits = SCANNER.find_matches_as_indexes(hay)
        hit = self._hit
        first = 0
        if len(hits) < BATCH_MIN_HITS:
            first = len(hits)
        elif not (self._rec_tpls or self._st_tpls):  # line by line until the fast path has made templates
            first = min(len(hits), BATCH_MIN_HITS)
        for idx, s, e in hits[:first]:
            if s >= pos:
                pos = hit(buf, end, base, idx, s, e, pos)
        if first == len(hits):
            return
        if first:
            hits = hits[first:]
        self._route_events(buf, end, base, hits, pos)

    def _route_events(self, buf: bytes, end: int, base: int, hits: list[tuple[int, int, int]], pos: int) -> None:
        """Read ``hits`` (the chunk's candidates from the first one batched on) with the templates (:meth:`_batch`)
        and handle the events in log order from ``pos``: runs of (Step Time, record) pairs at once, single template
        lines here, the rest by :meth:`_hit`; the rest of the chunk is re-read once enough lines missed every template
        and a new template was learned."""
        hit = self._hit
        ev = self._batch(buf, hits)
        code, S = ev["code"].tolist(), ev["s"].tolist()
        cols = None  # ls, n, it, hit as lists: made when an event outside a run needs them
        ranks = self.ranks
        n_templates, misses = len(self._rec_tpls) + len(self._st_tpls), 0
        i, m = 0, len(code)
        while i < m:
            s = S[i]
            if s < pos:
                i += 1
                continue
            c = code[i]
            if c == 1:  # a Step Time line read by its template
                last = self._last_step
                j = int(ev["runend"][i])
                if j > i and (last is None or int(ev["it"][i + 1]) != last.iteration):
                    if j > i + 2 and ev["clone"][i + 2]:
                        pos = self._groups(buf, base, ev, i, j)
                        i = j
                        continue
                    if self.pending_st is None and self.last_record_has_st:
                        pos = self._pairs(buf, base, ev, i, j)
                        i = j
                        continue
                if cols is None:
                    cols = ls_, n_, it_, hit_of = [ev[k].tolist() for k in ("ls", "n", "it", "hit")]
                label = ev["label"][i]
                if label is not None and label not in ranks:
                    ranks.add(label)
                self.step_time(float(ev["x"][i]), float(ev["y"][i]), base + ls_[i])
                pos = ls_[i] + n_[i]
                i += 1
                continue
            if cols is None:
                cols = ls_, n_, it_, hit_of = [ev[k].tolist() for k in ("ls", "n", "it", "hit")]
            if c == 2:  # a record line read by its template
                ls, it, label = ls_[i], it_[i], ev["label"][i]
                if label is not None and label not in ranks:
                    ranks.add(label)
                pe, te = int(ev["pe"][i]), int(ev["te"][i])
                last = self._last_step
                if last is None or it != last.iteration:
                    y = None if ev["ynone"][i] else float(ev["y"][i])
                    step = Step(
                        it, float(ev["x"][i]), y, None if ev["znone"][i] else float(ev["z"][i]), None, None, None,
                        int(ev["tot"][i]), None, None, None, None, None, {}, label, 0, base + ls, "megatron", False,
                        ev["tail"][i],
                    )  # fmt: skip
                    self.add_record(step, None)
                    self._last_content, self._last_step = buf[ls + pe : ls + te], step
                    pos = ls + n_[i]
                    i += 1
                    continue
                if buf[ls + pe : ls + te] == self._last_content:  # the same record printed by another rank
                    self.add_record(clone_step(last, label, base + ls), None)
                    pos = ls + n_[i]
                    i += 1
                    continue
            idx, s, e = hits[hit_of[i]]
            pos = hit(buf, end, base, idx, s, e, pos)
            i += 1
            if idx == RECORD or idx == STEP_TIME:  # no template fitted this line: a new one may fit the rest
                misses += 1
                if misses >= REBATCH_MISSES and m - i >= BATCH_MIN_HITS:
                    if len(self._rec_tpls) + len(self._st_tpls) > n_templates:
                        hits = hits[hit_of[i] :]
                        ev = self._batch(buf, hits)
                        code, S, cols = ev["code"].tolist(), ev["s"].tolist(), None
                        n_templates, i, m = len(self._rec_tpls) + len(self._st_tpls), 0, len(code)
                    misses = 0

    def _hit(self, buf: bytes, end: int, base: int, idx: int, s: int, e: int, pos: int) -> int:
        """Handle the line of the candidate ``idx`` found at ``buf[s:e]`` (its first candidate); ``pos`` = start of
        the line after the last one handled.  Returns where the next line starts (past any lines a split record or
        a traceback consumed)."""
        if idx == RECORD and self._rec_tpl is not None:
            sk, n, rs, pe, ia, ib, ta, tb, ma, mb, fa, fb, la, lb, bar, le, za, zb = self._rec_tpl.tuple
            ls = pos if s - pos == rs else buf.rfind(b"\n", 0, s) + 1
            reg = buf[ls : ls + n]
            if reg.translate(DIGITS0) == sk and reg[za:zb] == F.ZERO_COUNTS_B:
                label = self._label(reg[:pe])
                it = int(reg[ia:ib])
                last = self._last_step
                if last is None or it != last.iteration:
                    step = Step(
                        it, float(reg[ma:mb]) / 1000.0, None if fa is None else float(reg[fa:fb]),
                        None if la is None else float(reg[la:lb]), None, None, None, int(reg[ta:tb]), None, None, None,
                        None, None, {}, label, 0, base + ls, "megatron", False, reg[bar:le],
                    )  # fmt: skip
                    self.add_record(step, None)
                    self._last_content, self._last_step = reg[pe:le], step
                    return ls + n
                if reg[pe:le] == self._last_content:  # the same record printed by another rank
                    self.add_record(clone_step(last, label, base + ls), None)
                    return ls + n
        elif idx == STEP_TIME and self._st_tpl is not None:
            sk, n, rs, pe, sa, sb, fa, fb = self._st_tpl.tuple
            ls = pos if s - pos == rs else buf.rfind(b"\n", 0, s) + 1
            reg = buf[ls : ls + n]
            if reg.translate(DIGITS0) == sk:
                self._label(reg[:pe])
                self.step_time(float(reg[sa:sb]), float(reg[fa:fb]), base + ls)
                return ls + n
        ls = buf.rfind(b"\n", 0, s) + 1
        le = buf.find(b"\n", s, end)
        if le < 0:
            le = end
        if idx == RECORD:
            prev = self._last_step
            done = self._record_fast(buf, ls, s, le, base)
            if done and self._last_step is not prev and le < end:
                self._rec_tpl = self._learn(self._rec_tpls, rec_template, buf, ls, s, le)
        elif idx == STEP_TIME:
            done = self._step_time_fast(buf, ls, s, e, le, base)
            if done and le < end:
                self._st_tpl = self._learn(self._st_tpls, st_template, buf, ls, s, le)
        else:
            done = False
        if not done:
            self.line(buf[ls:le].decode("utf-8", "replace"), base + ls)
        pos = le + 1
        if self.pending or self.tb_lines:
            pos = self._line_mode(buf, pos, end, base)
        return pos

    @staticmethod
    def _learn(cache: dict[bytes, LineTemplate], make: Callable, buf: bytes, ls: int, at: int, le: int):
        """The template of the line ``buf[ls:le]`` (newline at ``le``), from ``cache`` or made and cached."""
        tpl = cache.get(buf[ls : le + 1].translate(DIGITS0))
        if tpl is None:
            if len(cache) >= MAX_TEMPLATES:
                cache.clear()
            tpl = make(buf, ls, at, le)
            cache[tpl.skel] = tpl
        return tpl

    def _line_mode(self, buf: bytes, pos: int, end: int, base: int) -> int:
        """Line by line from ``pos`` while a split record or a traceback is open; returns where it stopped."""
        while pos < end and (self.pending or self.tb_lines):
            le = buf.find(b"\n", pos, end)
            if le < 0:
                le = end
            self.line(buf[pos:le].decode("utf-8", "replace"), base + pos)
            pos = le + 1
            if self.pending:
                self.pending_age += 1
                if self.pending_age > MAX_PENDING_LINES:  # a fragment nobody continues: take it as it is
                    self.close_all()
        return pos

    def _record_fast(self, buf: bytes, ls: int, s: int, le: int, base: int) -> bool:
        """A standard Megatron iteration line whose 'iteration ' starts at ``s``: timed fields now, rest later."""
        pe, label = self._prefix_label(buf, ls, s)
        content = buf[pe:le]
        if content == self._last_content:  # the same record printed by another rank
            self.add_record(clone_step(self._last_step, label, base + ls), None)
            return True
        if self.pending:
            return False
        tail_end = le
        while tail_end > s and buf[tail_end - 1] in b" \t\r":
            tail_end -= 1
        if not buf.endswith(F.ZERO_COUNTS_B, s, tail_end):
            return False
        lim = tail_end - len(F.ZERO_COUNTS_B)
        if buf.find(b"nan", s, lim) >= 0 or buf.find(b"inf", s, lim) >= 0:
            return False
        try:
            j = buf.find(b"/", s + 10, s + 40)
            bar = buf.find(b"|", j, j + 40)
            it, total = int(buf[s + 10 : j]), int(buf[j + 1 : bar])
            i = buf.find(F.ELAPSED_MS_B, bar, lim)
            if i < 0:
                return False
            k = buf.find(b"|", i, lim)
            st = float(buf[i + 32 : k]) / 1000.0
            tf = loss = None
            i = buf.find(F.THROUGHPUT_B, k, lim)
            if i >= 0:
                k = buf.find(b"|", i, lim)
                tf = float(buf[i + 33 : k])
            i = buf.find(F.LM_LOSS_B, k, lim)
            if i >= 0:
                loss = float(buf[i + 9 : buf.find(b"|", i, lim)])
        except ValueError:
            return False
        step = Step(it, st, tf, loss, None, None, None, total, rank=label, offset=base + ls, _tail=buf[bar + 1 : le])
        self.add_record(step, None)
        self._last_content, self._last_step = content, step
        return True

    def _step_time_fast(self, buf: bytes, ls: int, s: int, e: int, le: int, base: int) -> bool:
        """``Step Time : 9.09s GPU utilization: 663.5MODEL_TFLOP/s/GPU`` with 'Step Time' at ``s``..``e``."""
        j = buf.find(b"s GPU utilization:", e, le)
        k = buf.find(b"TFLOP/s/GPU", j, le)
        if j < 0 or k < 0:
            return False
        try:
            secs = float(buf[e:j].lstrip(b" :"))
            tf = float(buf[j + 18 : k].rstrip(b"MODEL_ "))
        except ValueError:
            return False
        self._prefix_label(buf, ls, s)
        self.step_time(secs, tf, base + ls)
        return True

    def line(self, line: str, off: int) -> None:
        """Handle one text line at byte offset ``off``: a split record's continuation, a record, else a signal."""
        if self.pending and self._continue_record(line):
            return
        label, content = split_prefix(line)
        if self.tb_lines:
            self.traceback_line(content)
        if self._record_line(label, content, off):
            return
        self.other_line(label, content, off)
