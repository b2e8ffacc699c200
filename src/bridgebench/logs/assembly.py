"""Record assembly: which text line is a record (Megatron, NeMo 2, NeMo 1 progress bar, NeMo list, a Step Time or
memory line, a Bridge ``train()`` start), and records split over several physical lines (printed in pieces, cut or
wrapped) put back together before they are read (:class:`RecordAssembly`)."""

from __future__ import annotations

import re

from bridgebench.logs import formats as F
from bridgebench.logs.fields import MAX_FRAGMENTS
from bridgebench.logs.labels import split_prefix
from bridgebench.logs.pairing import StepPairing
from bridgebench.logs.step import Step, fill_nemo, megatron_record, nemo_record, progress_bar_step, to_number


class RecordAssembly(StepPairing):
    """Routes a text line's record to its reader and keeps the split records open per rank until they close."""

    def _record_line(self, label: str | None, content: str, off: int) -> bool:
        """Records, memory reports, Step Time, NeMo lines, Bridge start lines; True if the line was one."""
        if "iteration" in content:
            if "|" in content:
                if "Training epoch" in content:
                    head = F.NEMO_HEAD_RE.search(content)
                    if head is not None:
                        self._rank(label)
                        self.add_record(nemo_record(content, head, label, off), content)
                        return True
                elif "memory (" in content:
                    self._rank(label)
                    self.memory_line(content)
                    return True
                else:
                    head = F.MEG_HEAD_RE.search(content)
                    if head is not None:
                        self._rank(label)
                        self._megatron_line(label, content, head, off)
                        return True
            if "current_iteration to" in content and "Setting rerun_state_machine" in content:
                self.bridge_marker = True  # Bridge train() start: printed once per (re)start
                m = F.BRIDGE_START_RE.search(content)
                self.restart_markers.append((off, int(m.group(1)) if m else 0))
                return True
        if "Step Time" in content:
            m = F.STEP_TIME_RE.search(content)
            if m:
                self._rank(label)
                self.step_time(to_number(m.group(1)), to_number(m.group(2)), off)
                return True
        if "train_step_timing in s" in content or "global_step=" in content:
            m = F.NEMO_LIST_RE.search(content)
            if m:
                self.nemo_list = [v for v in (to_number(x) for x in m.group(1).split(",")) if v is not None]
                self.nemo_list_offset = off
                return True
            if "=" in content and ("global_step=" in content or "train_step_timing in s=" in content):
                got = False
                for seg in content.split("\r"):  # tqdm refreshes share a physical line
                    step = progress_bar_step(seg, label, off) if "=" in seg else None
                    if step is not None:
                        self._rank(label)
                        self.add_record(step, seg)
                        got = True
                return got
            if "train_step_timing in s:" in content:  # a NeMo 2 line fragment without its header
                step = Step(iteration=0, rank=label, offset=off, source="nemo_fragment", inferred_iteration=True)
                fill_nemo(step, content, "|", ":")
                if step.step_time_s is not None:
                    self._rank(label)
                    self.fragments.append(step)
                    return True
        return False

    def _rank(self, label: str | None) -> None:
        if label:
            self.ranks.add(label)

    def _megatron_line(self, label: str | None, content: str, head: re.Match, off: int) -> None:
        if label in self.pending:  # a new record closes an unfinished one
            self._close(label)
        complete = F.NAN_FIELD_B.decode() in content
        if not complete:
            stripped = content.rstrip()
            if stripped.endswith("|") and "elapsed time per iteration" in content:
                complete = True  # 2019/2020 forms end with the last field they have
            else:
                # fragment ending in '|' (printed in pieces) or a line cut / wrapped mid-field: wait for the rest
                wrapped = not stripped.endswith("|")
                frag = content.rstrip("\r") if wrapped else content.strip()
                self.pending[label] = ([frag], off, wrapped, self.pending_st)
                self.pending_st = None  # it belongs to this record
                self.pending_age = 0
                return
        self.add_record(megatron_record(content, head, label, off), content)

    def _continue_record(self, line: str) -> bool:
        """Append ``line`` to the open split record of its rank if it continues it; True if consumed."""
        if not line.strip():
            return True  # blank lines between fragments do not close a record
        label, content = split_prefix(line)
        if label is None and len(self.pending) == 1:
            label = next(iter(self.pending))  # an unprefixed fragment continues the single open record
        if label not in self.pending:
            return False
        frags, start, wrapped, st = self.pending[label]
        c = content.strip()
        if (
            "|" in c
            and (wrapped or ":" in c)
            and F.MEG_HEAD_RE.search(c) is None
            and "[Rank " not in c
            and "memory (" not in c
            and "Step Time" not in c
            and not c.startswith("time (ms)")
        ):
            frags.append(content.rstrip("\r") if wrapped else " " + c)
            joined = "".join(frags)
            if (F.NAN_FIELD_B.decode() in c and joined.rstrip().endswith("|")) or len(frags) > MAX_FRAGMENTS:
                self._close(label)
            else:
                self.pending[label] = (frags, start, wrapped and not c.endswith("|"), st)
            return True
        self._close(label)
        return False

    def _close(self, label: str | None) -> None:
        frags, start, wrapped, st = self.pending.pop(label)
        text = "".join(frags)
        head = F.MEG_HEAD_RE.search(text)
        if head is not None:
            later, self.pending_st = self.pending_st, st
            self.add_record(megatron_record(text, head, label, start), text)
            if later is not None:
                if self.pending_st is not None:
                    self.orphan_st.append(self.pending_st)
                self.pending_st = later

    def close_all(self) -> None:
        for label in list(self.pending):
            self._close(label)
