"""Rank labels: the launcher / torch.distributed prefix of a line (``3: ``, ``[rank3]:``) as a label, cached per prefix
bytes (:class:`RankLabels`)."""

from __future__ import annotations

import numpy as np

from bridgebench.logs import formats as F
from bridgebench.logs.fields import StateFields

_MISS = object()


def _label_of(prefix: str) -> str | None:
    """Rank label of a prefix: the prefix trimmed; torch.distributed's ``[rankN]:`` dropped when a launcher prefix
    precedes it (``3: [rank3]:`` -> ``3``), so a rank's traceback and ordinary lines share one label."""
    if not prefix:
        return None
    i = prefix.find("[rank")
    if i > 0:
        prefix = prefix[:i]
    return prefix.strip().rstrip(":").rstrip() or None


def split_prefix(line: str) -> tuple[str | None, str]:
    """(rank label or None, content without the rank prefixes)."""
    end = F.PREFIX_RE.match(line).end()
    if not end:
        return None, line
    return _label_of(line[:end]), line[end:]


class RankLabels(StateFields):
    """Rank labels of line prefixes, cached, and the set of ranks seen."""

    def _label_for(self, prefix: bytes) -> str | None:
        """Rank label of a prefix (cached)."""
        label = self._labels.get(prefix, _MISS)
        if label is _MISS:
            label = self._labels[prefix] = _label_of(prefix.decode("utf-8", "replace"))
        return label

    def _labels_of(self, prefixes: np.ndarray) -> np.ndarray:
        """Rank labels (object array) of the prefix bytes in the rows of ``prefixes`` (uint8 matrix)."""
        if (prefixes == prefixes[0]).all():
            out = np.empty(len(prefixes), object)
            out[:] = self._label_for(prefixes[0].tobytes())
            return out
        width = prefixes.shape[1]
        if width <= 8:  # pack each prefix into one integer
            packed = np.zeros((len(prefixes), 8), np.uint8)
            packed[:, :width] = prefixes
            uniq, inv = np.unique(packed.view(np.uint64).ravel(), return_inverse=True)
            keys = [u.tobytes()[:width] for u in uniq.view(np.uint8).reshape(-1, 8)]
        else:
            found = np.unique(prefixes, axis=0, return_inverse=True)  # (rows, inverse): one assignment crashes mypy
            uniq, inv = found[0], found[1]
            keys = [u.tobytes() for u in uniq]
        labs = np.empty(len(keys), object)
        labs[:] = [self._label_for(k) for k in keys]
        return labs[inv.ravel()]

    def _label(self, prefix: bytes) -> str | None:
        """Rank label of a prefix, counted among the ranks seen."""
        label = self._label_for(prefix)
        if label is not None:
            self.ranks.add(label)
        return label

    def _prefix_label(self, buf: bytes, ls: int, limit: int) -> tuple[int, str | None]:
        """(end of the rank prefix, its label) of the line starting at ``ls`` (:data:`F.PREFIX_RE_B`)."""
        pe = F.PREFIX_RE_B.match(buf, ls, limit).end()
        return pe, self._label(buf[ls:pe])
