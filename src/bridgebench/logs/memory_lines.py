"""Memory lines: Megatron's ``[Rank N] (after K iterations) memory (MB)`` and Megatron-Bridge's ``(GB)`` reports, per
rank (:class:`MemoryLines`; MB = 2**20 bytes, Bridge GB = 1e9 bytes converted)."""

from __future__ import annotations

from bridgebench.logs import formats as F
from bridgebench.logs.signal_lines import SignalLines
from bridgebench.logs.step import to_number


class MemoryLines(SignalLines):
    """Per rank: the latest current values and the largest peaks over its memory reports."""

    def memory_line(self, content: str) -> None:
        heads = list(F.MEM_HEAD_RE.finditer(content))
        for i, h in enumerate(heads):
            body = content[h.end() : heads[i + 1].start() if i + 1 < len(heads) else len(content)]
            rank, unit = int(h.group(1) or 0), h.group(3)
            self.memory_units.add(unit)
            if unit == "GB":
                self.bridge_marker = True
            self.memory_reports += 1
            entry = self.memory.setdefault(rank, {})
            entry["after_iteration"] = max(int(h.group(2)), entry.get("after_iteration", 0))
            entry["source_unit"] = unit
            for part in body.split("|"):
                key, sep, val = part.partition(":")
                name = F.MEM_KEYS.get(key.strip()) if sep else None
                if name is None:
                    continue
                v = to_number(val.strip())
                if v is None:
                    continue
                if name.endswith("_mb") and unit == "GB":
                    v *= F.GB_TO_MB
                # peaks keep their maximum over reports; current values keep the latest report
                if name.startswith("max_") or name == "alloc_retries":
                    entry[name] = max(v, entry.get(name, v))
                else:
                    entry[name] = v
