"""Step pairing: a Megatron-Bridge ``Step Time`` line and the iteration record it belongs to (printed by different
ranks, in either order), one pair at a time (:meth:`StepPairing.step_time`, :meth:`StepPairing.add_record`) or a
chunk's run of pairs at once (:meth:`StepPairing._pairs`, :meth:`StepPairing._groups`) with the same result."""

from __future__ import annotations

import numpy as np

from bridgebench.logs.memory_lines import MemoryLines
from bridgebench.logs.steady import bad_reason
from bridgebench.logs.step import Step, fast_step


class StepPairing(MemoryLines):
    """Keeps each record's steps per rank label, the Step Time line waiting for its record, and the orphans."""

    def add_record(self, step: Step, raw: str | None) -> None:
        st = self.pending_st
        if st is not None and step.source == "megatron":
            if step.step_time_s is None:
                step.step_time_s = st[0]
            if step.tflops_per_gpu is None:
                step.tflops_per_gpu = st[1]
            self.pending_st = None
            self.last_record_has_st = True
        else:
            self.last_record_has_st = False
        self.last_record = step
        recs = self.records.get(step.rank)
        if recs is None:
            recs = self.records[step.rank] = []
        recs.append(step)
        if raw is not None and bad_reason(step, self.skipped_is_nan) is not None:
            self.signal("nan", raw, step.offset)

    def step_time(self, secs: float | None, tf: float | None, off: int) -> None:
        self.bridge_marker = True
        last = self.last_record
        # print_rank_0 (Step Time) and print_rank_last (iteration line) are different processes, so the Step Time
        # line can land after its iteration line: attach it there when the times agree to the printed precision.
        if (
            last is not None
            and not self.last_record_has_st
            and last.source == "megatron"
            and secs is not None
            and last.step_time_s is not None
            and abs(last.step_time_s - secs) <= 0.0051
        ):
            if last.tflops_per_gpu is None:
                last.tflops_per_gpu = tf
            self.last_record_has_st = True
            return
        if self.pending_st is not None:
            self.orphan_st.append(self.pending_st)
        self.pending_st = (secs, tf, off)

    def _pairs(self, buf: bytes, base: int, ev: dict[str, np.ndarray], i: int, j: int) -> int:
        """Events ``i:j``: Step Time line, record line, Step Time line, ... each record a new iteration, starting with
        no Step Time pending and the last record holding its own.  Each Step Time line then waits for the record
        after it (:meth:`step_time`), which takes it (:meth:`add_record`: its TFLOP/s where the record has none),
        so the state afterwards is the same; the steps are made at once.  Returns where the next line starts."""
        st, rc = slice(i, j, 2), slice(i + 1, j, 2)
        k = (j - i) // 2
        ls = ev["ls"][rc]
        tf = np.where(ev["ynone"][rc], ev["y"][st], ev["y"][rc]).tolist()
        loss = ev["z"][rc].astype(object)
        loss[ev["znone"][rc]] = None
        labels = ev["label"][rc].tolist()
        tails = ev["tail"][rc].tolist()
        steps = list(
            map(
                fast_step, ev["it"][rc].tolist(), ev["x"][rc].tolist(), tf, loss.tolist(), ev["tot"][rc].tolist(),
                labels, (base + ls).tolist(), tails,
            )
        )  # fmt: skip
        self._mark_run(ev, i, j)
        records = self.records
        if labels.count(labels[0]) == k:
            records.setdefault(labels[0], []).extend(steps)
        else:
            for step, label in zip(steps, labels):
                records.setdefault(label, []).append(step)
        last = steps[-1]
        self.pending_st, self.last_record_has_st, self.last_record, self._last_step = None, True, last, last
        e = j - 1
        a = int(ev["ls"][e])
        self._last_content = buf[a + int(ev["pe"][e]) : a + int(ev["te"][e])]
        return a + int(ev["n"][e])

    def _groups(self, buf: bytes, base: int, ev: dict[str, np.ndarray], i: int, j: int) -> int:
        """Events ``i:j``: groups of a Step Time line, a record line of a new iteration and the same record printed
        by other ranks (clones), every record with its own TFLOP/s.  The first Step Time line is handled as such
        (:meth:`step_time`); after it no Step Time value reaches a step -- each waits for the next new record
        (which has its TFLOP/s) or goes onto a clone that has it -- so the steps are made at once: each new record
        as :meth:`_pairs` makes it, each clone a copy of it (:func:`clone_step`).  Returns where the next line
        starts."""
        label = ev["label"][i]
        if label is not None:
            self.ranks.add(label)
        self.step_time(float(ev["x"][i]), float(ev["y"][i]), base + int(ev["ls"][i]))
        code, clone = ev["code"][i:j], ev["clone"][i:j]
        recs = np.flatnonzero(code == 2) + i
        news = np.flatnonzero((code == 2) & ~clone) + i
        of = news[np.searchsorted(news, recs, "right") - 1]  # each record's new record
        loss = ev["z"][of].astype(object)
        loss[ev["znone"][of]] = None
        labels = ev["label"][recs].tolist()
        steps = list(
            map(
                fast_step, ev["it"][of].tolist(), ev["x"][of].tolist(), ev["y"][of].tolist(), loss.tolist(),
                ev["tot"][of].tolist(), labels, (base + ev["ls"][recs]).tolist(), ev["tail"][of].tolist(),
            )
        )  # fmt: skip
        self._mark_run(ev, i, j)
        records = self.records
        for step, label in zip(steps, labels):
            recs_of = records.get(label)
            if recs_of is None:
                recs_of = records[label] = []
            recs_of.append(step)
        last_new = int(news[-1])
        a = int(ev["ls"][last_new])
        self._last_content = buf[a + int(ev["pe"][last_new]) : a + int(ev["te"][last_new])]
        self._last_step = steps[int(np.searchsorted(recs, last_new))]
        self.pending_st, self.last_record_has_st, self.last_record = None, False, steps[-1]
        e = j - 1
        return int(ev["ls"][e]) + int(ev["n"][e])

    def _mark_run(self, ev: dict[str, np.ndarray], i: int, j: int) -> None:
        """A run of events ``i:j`` read at once: a Bridge log (its Step Time lines), and every rank label in it seen."""
        self.bridge_marker = True
        for label in set(ev["label"][i:j].tolist()):
            if label is not None:
                self.ranks.add(label)
