"""An int8 sketch of the CKF's stored vectors, for bounding dot products in memory.

A CDGR walk scores up to 200 connector candidates by their similarity to the
query (SPEC-025 §2.5), but only a few are returned.  Reading 200 full vectors
from LMDB costs more than the whole rest of the walk; the sketch instead keeps,
per label, the unit vector quantised to int8 (one byte a dimension, a quarter
of float32) with its scale and norm, and gives every candidate an interval
that certainly holds its exact dot product with each query row.  The caller
reads exact vectors only for the candidates whose intervals leave them a
chance, so its result is the same as when it reads them all.

The bound, for a stored vector ``v = n·u`` (``‖u‖ = 1``) quantised as
``u ≈ s·c`` with ``c = round(u / s)``, ``s = max|u| / 127``::

    |v·q − n·s·(c·q)| ≤ n·(s/2·‖q‖₁ + ε·‖q‖₂)

``s/2·‖q‖₁`` is the rounding of each component; ``ε = 1e-3`` covers the
float32 dot product (at most ``dim·2⁻²⁴ ≈ 6e-5`` relative for 1024 dimensions)
with a wide margin.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ctxrelay.knowledge.labels import LabelPositions

__all__ = ["VectorSketch"]

_EPS = 1e-3
_EMPTY_I = np.zeros(0, dtype=np.int64)


def _quantise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(codes int8, scale = n·s, norm n)`` of float rows."""
    v = np.asarray(vectors, dtype=np.float64)
    norm = np.linalg.norm(v, axis=1)
    unit = v / np.where(norm > 0, norm, 1.0)[:, None]
    step = np.abs(unit).max(axis=1, initial=0.0) / 127.0
    codes = np.rint(unit / np.where(step > 0, step, 1.0)[:, None]).astype(np.int8)
    return codes, norm * step, norm


class VectorSketch:
    """int8 codes of vectors by integer label, with an overlay for changed rows.

    Like :class:`ctxrelay.knowledge.graph.Adjacency`: a sorted snapshot plus an
    overlay of rows set or dropped since, folded in when it grows past
    ``max(1000, 5 %)`` of the rows.  ``gen`` is the caller's version stamp of
    the state the rows reflect.  Memory: ``dim + 16`` bytes a row.
    """

    def __init__(self, dim: int, *, gen: int = 0) -> None:
        self.dim = int(dim)
        self.gen = int(gen)
        self._labels = _EMPTY_I
        self._pos = LabelPositions(_EMPTY_I)
        self._codes = np.zeros((0, self.dim), dtype=np.int8)
        self._scale = np.zeros(0)
        self._norm = np.zeros(0)
        self._over: dict[int, tuple[np.ndarray, float, float] | None] = {}

    @classmethod
    def build(cls, dim: int, chunks: Iterable[tuple[Sequence[int], np.ndarray]], *,
              gen: int = 0) -> "VectorSketch":
        """From ``(labels, vectors)`` chunks (distinct labels, any order), quantised a
        chunk at a time so the float64 scratch stays small."""
        self = cls(dim, gen=gen)
        parts = [(np.asarray(labels, dtype=np.int64),
                  *_quantise(np.asarray(vectors).reshape(len(labels), self.dim)))
                 for labels, vectors in chunks]
        if parts:
            self._set_base(*(np.concatenate(col) for col in zip(*parts)))
        return self

    def _set_base(self, labels: np.ndarray, codes: np.ndarray, scale: np.ndarray,
                  norm: np.ndarray) -> None:
        order = np.argsort(labels, kind="stable")
        self._labels, self._codes = labels[order], np.ascontiguousarray(codes[order])
        self._pos = LabelPositions(self._labels)
        self._scale, self._norm = scale[order], norm[order]

    def __len__(self) -> int:
        """Labels with a row."""
        base = len(self._labels) - sum(1 for k in self._over if self._in_base(k))
        return base + sum(1 for row in self._over.values() if row is not None)

    @property
    def nbytes(self) -> int:
        return self._codes.nbytes + self._pos.nbytes + self._scale.nbytes + \
            self._norm.nbytes + sum(self.dim + 16 for r in self._over.values() if r is not None)

    def _in_base(self, label: int) -> bool:
        i = int(np.searchsorted(self._labels, label))
        return i < len(self._labels) and int(self._labels[i]) == label

    def update(self, labels: Sequence[int], vectors: np.ndarray,
               drop: Sequence[int] = ()) -> None:
        """Set the rows of ``labels`` to ``vectors``; forget the rows of ``drop``."""
        if len(labels):
            codes, scale, norm = _quantise(np.asarray(vectors).reshape(len(labels), self.dim))
            for i, label in enumerate(labels):
                self._over[int(label)] = (codes[i], float(scale[i]), float(norm[i]))
        for label in drop:
            self._over[int(label)] = None
        if len(self._over) > max(1000, len(self._labels) // 20):
            self.compact()

    def compact(self) -> None:
        """Fold the overlay into a new snapshot."""
        if not self._over:
            return
        keys = np.fromiter(self._over, dtype=np.int64, count=len(self._over))
        keep = ~np.isin(self._labels, keys)
        rows = [(k, r) for k, r in self._over.items() if r is not None]
        labels = np.concatenate([self._labels[keep],
                                 np.array([k for k, _ in rows], dtype=np.int64)])
        codes = np.concatenate([self._codes[keep],
                                np.array([r[0] for _, r in rows], dtype=np.int8)
                                .reshape(len(rows), self.dim)])
        scale = np.concatenate([self._scale[keep], [r[1] for _, r in rows]])
        norm = np.concatenate([self._norm[keep], [r[2] for _, r in rows]])
        self._over = {}
        self._set_base(labels, codes, scale, norm)

    def dots(self, labels: Sequence[int] | np.ndarray,
             queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(approx, err)``, each ``len(labels) × len(queries)``: the exact dot
        product of label ``i``'s vector with query row ``k`` lies within
        ``approx[i, k] ± err[i, k]``.  A label without a row gets ``err = inf``."""
        labels = np.asarray(labels, dtype=np.int64)
        q = np.asarray(queries, dtype=np.float32).reshape(-1, self.dim)
        pos = self._pos.find(labels)
        hit = pos >= 0
        if hit.all():       # the usual case: one gather per array, no masked copies
            codes = self._codes[pos].astype(np.float32)
            scale, norm = self._scale[pos], self._norm[pos]
        else:
            codes = np.zeros((len(labels), self.dim), dtype=np.float32)
            scale = np.zeros(len(labels))
            norm = np.full(len(labels), np.inf)
            codes[hit] = self._codes[pos[hit]]
            scale[hit], norm[hit] = self._scale[pos[hit]], self._norm[pos[hit]]
        if self._over:
            for i, label in enumerate(labels.tolist()):
                if label in self._over:
                    row = self._over[label]
                    if row is None:
                        scale[i], norm[i] = 0.0, np.inf
                    else:
                        codes[i], scale[i], norm[i] = row
        approx = (codes @ q.T).astype(np.float64) * scale[:, None]
        q64 = q.astype(np.float64)
        l1, l2 = np.abs(q64).sum(axis=1), np.linalg.norm(q64, axis=1)
        with np.errstate(invalid="ignore"):       # inf · 0 for a zero query: unknown row
            err = norm[:, None] * (0.5 * (scale / np.where(norm > 0, norm, 1.0))[:, None]
                                   * l1[None, :] + _EPS * l2[None, :])
        err[~np.isfinite(norm)] = np.inf
        return approx, err
