"""Where integer labels sit in a sorted label array, for the CKF's in-memory walk structures.

The adjacency, the vector sketch and the scoring heads each hold rows for a
namespace's fact seqs in a sorted array, and a CDGR walk looks up a few
hundred seqs in each.  A binary search over 100,000 labels misses the CPU
cache on nearly every step (about 60 ns a label); the seqs of one namespace
are nearly consecutive, so a table indexed by ``label - first`` answers with
one read.  Labels spread too thinly for a table (a small namespace among
large ones: seqs are numbered store-wide) keep the binary search.
"""
from __future__ import annotations

import numpy as np

__all__ = ["LabelPositions"]

#: a table is kept while it has at most this many slots per label (plus a floor)
_SLOTS_PER_LABEL = 4
_MIN_SLOTS = 4096


class LabelPositions:
    """The position of each label in ``labels`` (sorted, distinct, int64), or -1."""

    __slots__ = ("labels", "_lo", "_table")

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = np.asarray(labels, dtype=np.int64)
        self._table: np.ndarray | None = None
        self._lo = 0
        n = len(self.labels)
        if not n or n >= 1 << 31:
            return
        span = int(self.labels[-1]) - int(self.labels[0]) + 1
        if span <= _SLOTS_PER_LABEL * n + _MIN_SLOTS:
            # slot 0 and the last slot hold -1: out-of-range labels clip onto them
            self._lo = int(self.labels[0]) - 1
            table = np.full(span + 2, -1, dtype=np.int32)
            table[self.labels - self._lo] = np.arange(n, dtype=np.int32)
            self._table = table

    @property
    def nbytes(self) -> int:
        return self.labels.nbytes + (0 if self._table is None else self._table.nbytes)

    def find(self, query: np.ndarray) -> np.ndarray:
        """Positions (int64) of the ``query`` labels; -1 for a label not held."""
        query = np.asarray(query, dtype=np.int64)
        table = self._table
        if table is not None:
            return table.take(query - self._lo, mode="clip").astype(np.int64)
        n = len(self.labels)
        if not n:
            return np.full(len(query), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.labels, query), n - 1)
        return np.where(self.labels[pos] == query, pos, -1)
