"""The graph side of the CKF: an hnswlib vector index, Leiden communities, keyword labels.

:class:`VectorIndex` wraps one ``hnswlib.Index`` (space ``cosine``, SPEC-009
§3.2 defaults ``M=16``, ``ef_construction=200``, ``ef_search=100``, a fixed
``random_seed``): labels are unsigned ints chosen by the caller, deletes are
``mark_deleted`` marks that can be lifted (quarantine, SPEC-009 §8.4), every
delete and undelete is idempotent (so a journal can be replayed), the index
grows by doubling, and :meth:`VectorIndex.save` writes a temporary file,
fsyncs it and ``os.replace``-s it over the target.

:func:`leiden` runs ``leidenalg`` (RBConfiguration, i.e. modularity with a
resolution parameter, SPEC-009 §5.3) on a weighted undirected igraph graph with
a fixed seed; :func:`community_keywords` labels communities by tf-idf
(SPEC-009 §5.4).
"""
from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import CorruptStoreError, InvalidArgumentError
from .textindex import tokenize

__all__ = ["VectorIndex", "leiden", "community_keywords", "label_of", "fsync_dir"]

try:  # the graph extra; a clear error when it is missing
    import hnswlib
except ImportError:  # pragma: no cover - exercised only without the extra
    hnswlib = None


def _require_hnswlib() -> Any:
    if hnswlib is None:
        raise InvalidArgumentError(
            "the CKF needs hnswlib: reinstall ctxrelay (pip install -e .; hnswlib, leidenalg and igraph are its dependencies)")
    return hnswlib


def fsync_dir(path: str) -> None:
    """fsync a directory so a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class VectorIndex:
    """One hnswlib index over L2-normalised vectors; similarity = 1 - cosine distance."""

    def __init__(self, dim: int, *, m: int = 16, ef_construction: int = 200,
                 ef_search: int = 100, random_seed: int = 100, capacity: int = 1024,
                 threads: int = 1) -> None:
        lib = _require_hnswlib()
        self.dim = int(dim)
        self.ef_search = int(ef_search)
        self.threads = max(1, int(threads))
        self._index = lib.Index(space="cosine", dim=self.dim)
        self._index.init_index(max_elements=max(16, int(capacity)), M=int(m),
                               ef_construction=int(ef_construction),
                               random_seed=int(random_seed))
        self._index.set_ef(self.ef_search)
        self._hidden: set[int] = set()

    @classmethod
    def load(cls, path: str, dim: int, *, ef_search: int = 100, threads: int = 1,
             extra_capacity: int = 1024, hidden: Iterable[int] = ()) -> "VectorIndex":
        """Load a saved index; CorruptStoreError if the file is not one.

        hnswlib does not report which labels a saved file has marked deleted,
        so the caller passes every label it knows to be hidden (``hidden``):
        each present one is marked (idempotently) and counted, which keeps
        :attr:`visible` exact.
        """
        lib = _require_hnswlib()
        self = cls.__new__(cls)
        self.dim = int(dim)
        self.ef_search = int(ef_search)
        self.threads = max(1, int(threads))
        self._hidden = set()
        self._index = lib.Index(space="cosine", dim=self.dim)
        try:
            stored = _stored_dim(path)
            if stored != self.dim:
                raise ValueError(f"the file holds vectors of dimension {stored}")
            self._index.load_index(path)
            self._index.resize_index(self._index.get_current_count() + max(16, extra_capacity))
        except (RuntimeError, ValueError, OSError, MemoryError) as exc:
            raise CorruptStoreError(
                f"{path} is not a loadable hnswlib index of dimension {dim} ({exc}); "
                "delete it and the CKF rebuilds the index from its stored vectors") from None
        self._index.set_ef(self.ef_search)
        for label in hidden:
            self.hide(int(label))
        return self

    # -- size -----------------------------------------------------------

    def __len__(self) -> int:
        """Elements held, hidden ones included."""
        return int(self._index.get_current_count())

    @property
    def visible(self) -> int:
        """Elements a search can return (held minus hidden)."""
        return len(self) - len(self._hidden)

    @property
    def hidden(self) -> frozenset[int]:
        return frozenset(self._hidden)

    def set_ef(self, ef_search: int) -> None:
        """Set the search-time candidate list size (SPEC-009 §3.2 ``ef_search``)."""
        self.ef_search = max(1, int(ef_search))
        self._index.set_ef(self.ef_search)

    def labels(self) -> list[int]:
        """Every label held, hidden ones included."""
        return [int(x) for x in self._index.get_ids_list()]

    @property
    def capacity(self) -> int:
        return int(self._index.get_max_elements())

    def _reserve(self, extra: int) -> None:
        need = len(self) + extra
        if need > self.capacity:
            self._index.resize_index(max(need, 2 * self.capacity))

    # -- writing ----------------------------------------------------------

    def add(self, labels: Sequence[int] | np.ndarray, vectors: np.ndarray) -> None:
        """Insert (or replace the vectors of) ``labels``; replacing unhides."""
        labels = np.asarray(labels, dtype=np.uint64)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        if len(labels) != len(vectors):
            raise InvalidArgumentError(
                f"{len(labels)} labels for {len(vectors)} vectors; pass one label per row")
        if not len(labels):
            return
        self._reserve(len(labels))
        self._index.add_items(vectors, labels, num_threads=self.threads)
        self._hidden.difference_update(int(x) for x in labels)

    def hide(self, label: int) -> bool:
        """Exclude ``label`` from searches; False if it is absent (idempotent)."""
        label = int(label)
        try:
            self._index.mark_deleted(label)
        except RuntimeError as exc:
            if "already deleted" not in str(exc):
                return False
        self._hidden.add(label)
        return True

    def unhide(self, label: int) -> bool:
        """Lift :meth:`hide` (idempotent); False if ``label`` is not in the index at all."""
        label = int(label)
        try:
            self._index.unmark_deleted(label)
        except RuntimeError as exc:
            if "not deleted" not in str(exc):
                return False
        self._hidden.discard(label)
        return True

    def vectors(self, labels: Sequence[int]) -> np.ndarray:
        """The stored (normalised) vectors of visible ``labels``."""
        return np.asarray(self._index.get_items([int(x) for x in labels]), dtype=np.float32)

    # -- reading ----------------------------------------------------------

    def search(self, vectors: np.ndarray, k: int, *,
               threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """``(labels, similarities)`` of the ``k`` nearest visible elements per row.

        ``k`` is capped by the number of visible elements.  When hidden
        elements cut the graph so that hnswlib cannot fill ``k`` columns, the
        ef is raised (up to the index size) and then ``k`` lowered one by one.
        """
        q = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        k = min(int(k), self.visible)
        ef = max(self.ef_search, k)
        try:
            while k > 0:
                if ef != self.ef_search:
                    self._index.set_ef(ef)
                try:
                    labels, dist = self._index.knn_query(q, k=k, num_threads=threads)
                    return labels.astype(np.int64), 1.0 - dist.astype(np.float64)
                except RuntimeError:
                    if ef < len(self):
                        ef = min(len(self), ef * 4)
                    else:
                        k -= 1
        finally:
            if ef != self.ef_search:
                self._index.set_ef(self.ef_search)
        return np.zeros((len(q), 0), dtype=np.int64), np.zeros((len(q), 0), dtype=np.float64)

    def save(self, path: str) -> None:
        """Write the index to ``path`` atomically (temp file, fsync, os.replace)."""
        tmp = f"{path}.tmp-{os.getpid()}"
        try:
            self._index.save_index(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        fsync_dir(os.path.dirname(path) or ".")


def _stored_dim(path: str) -> int:
    """Vector dimension recorded in an hnswlib file header (float32 vectors).

    hnswlib loads a file of another dimension without complaint and then reads
    out of bounds, so the header is checked first: it starts with the size_t
    fields offsetLevel0, max_elements, cur_element_count, size_data_per_element,
    label_offset and offsetData, and a vector takes label_offset - offsetData bytes.
    """
    with open(path, "rb") as fh:
        head = fh.read(48)
    if len(head) < 48:
        raise ValueError("the file is shorter than an hnswlib header")
    fields = np.frombuffer(head, dtype="<u8")
    size = int(fields[4]) - int(fields[5])
    if size <= 0 or size % 4:
        raise ValueError("the header is not an hnswlib one")
    return size // 4


# -- communities ----------------------------------------------------------------

def leiden(n_vertices: int, edges: Sequence[tuple[int, int]], weights: Sequence[float], *,
           resolution: float = 1.0, n_iterations: int = 10, seed: int = 42) -> list[int]:
    """Leiden membership of ``n_vertices`` vertices (RBConfiguration, weighted, seeded)."""
    try:
        import igraph
        import leidenalg
    except ImportError:
        raise InvalidArgumentError(
            "community detection needs leidenalg and igraph, dependencies of ctxrelay: "
            "reinstall it (pip install -e .)") from None
    if n_vertices == 0:
        return []
    graph = igraph.Graph(n=n_vertices, edges=list(edges), directed=False)
    graph.es["weight"] = [float(w) for w in weights]
    partition = leidenalg.find_partition(
        graph, leidenalg.RBConfigurationVertexPartition, weights="weight",
        resolution_parameter=float(resolution), n_iterations=int(n_iterations), seed=int(seed))
    return [int(c) for c in partition.membership]


def _keyword_terms(text: str) -> list[str]:
    return [t for t in tokenize(text) if len(t) >= 3 and not t.isdigit() and t.strip("_")]


def community_keywords(groups: Mapping[int, Sequence[tuple[str, float]]], *,
                       top: int = 5) -> dict[int, tuple[str, ...]]:
    """Top tf-idf terms of each community (SPEC-009 §5.4).

    ``groups`` maps a community to its members' ``(content, importance)``.
    tf is the importance-weighted share of a term among the community's terms;
    idf is ``ln((1 + C) / (1 + df)) + 1`` over the C communities; ties go to the
    alphabetically first term.  Terms come from :func:`ctxrelay.textindex.tokenize`
    (stopwords dropped) and must have at least 3 characters and not be numbers.
    """
    tfs: dict[int, dict[str, float]] = {}
    df: Counter[str] = Counter()
    for cid, members in groups.items():
        counts: dict[str, float] = {}
        total = 0.0
        for text, importance in members:
            weight = max(float(importance), 1e-6)
            for term in _keyword_terms(text):
                counts[term] = counts.get(term, 0.0) + weight
                total += weight
        tfs[cid] = {t: c / total for t, c in counts.items()} if total else {}
        df.update(tfs[cid].keys())
    n = len(groups)
    out: dict[int, tuple[str, ...]] = {}
    for cid, tf in tfs.items():
        scored = sorted(((-(v * (math.log((1 + n) / (1 + df[t])) + 1.0)), t)
                         for t, v in tf.items()))
        out[cid] = tuple(t for _, t in scored[:top])
    return out


def label_of(keywords: Sequence[str], *, words: int = 3) -> str:
    """A community's human-readable label: its first keywords joined by ' / '."""
    return " / ".join(keywords[:words]) if keywords else "(no keywords)"
