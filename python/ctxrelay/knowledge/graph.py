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

from ctxrelay.knowledge.labels import LabelPositions
from ctxrelay.errors import CorruptStoreError, InvalidArgumentError
from ctxrelay.storage.interfaces.facts import community_label
from ctxrelay.text.bm25 import tokenize

__all__ = ["VectorIndex", "Adjacency", "anchor_reach", "anchor_links", "argsort_keys", "leiden",
           "community_keywords", "label_of", "fsync_dir"]

try:  # the graph extra; a clear error when it is missing
    import hnswlib
except ImportError:  # pragma: no cover - exercised only without the extra
    hnswlib = None


DIGEST_SUFFIX = ".xxh3"       # the index file's checksum (storage.lmdb.framing)


def _write_digest(data_path: str, digest_path: str) -> None:
    from ctxrelay.storage.lmdb.framing import file_digest
    tmp = f"{digest_path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as out:
        out.write(file_digest(data_path))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, digest_path)


def _check_digest(path: str) -> None:
    """ValueError if ``path`` does not match its checksum (no checksum: an older file)."""
    from ctxrelay.storage.lmdb.framing import file_digest
    try:
        with open(path + DIGEST_SUFFIX, "rb") as handle:
            want = handle.read()
    except FileNotFoundError:
        return
    if file_digest(path) != want:
        raise ValueError("the file does not match its checksum (damaged on disk)")


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
            _check_digest(path)     # hnswlib may crash (SIGSEGV) on a damaged file
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
        """Insert (or replace the vectors of) ``labels``; replacing unhides.

        One thread, whatever ``threads`` says: hnswlib's parallel insertion links
        each element against whatever the other thread has inserted so far, so the
        graph would depend on scheduling, and two indexes of the same facts (two
        back ends, two processes) would reach different neighbours.  Inserted one by
        one, the graph is a function of the insertion order: at 100k facts an index
        filled from an LMDB store and one filled from its PostgreSQL copy gave the
        same top 50 on 60 of 60 queries at ef 100 (the LMDB one built with two
        threads: 10 of 60).  The price is bulk insertion time (10k 1024-d vectors:
        20.5 s on one thread, 8.1 s on two, on a loaded 2-core machine); searches,
        a write's linking included, still use ``threads``.
        """
        labels = np.asarray(labels, dtype=np.uint64)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        if len(labels) != len(vectors):
            raise InvalidArgumentError(
                f"{len(labels)} labels for {len(vectors)} vectors; pass one label per row")
        if not len(labels):
            return
        self._reserve(len(labels))
        self._index.add_items(vectors, labels, num_threads=1)
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

    def search(self, vectors: np.ndarray, k: int, *, threads: int = 1,
               ef: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(labels, similarities)`` of the ``k`` nearest visible elements per row,
        searched with ``ef`` (default: the index's ``ef_search``; at least ``k``).

        ``k`` is capped by the number of visible elements.  When hidden
        elements cut the graph so that hnswlib cannot fill ``k`` columns, the
        ef is raised (up to the index size) and then ``k`` lowered one by one.
        """
        q = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        k = min(int(k), self.visible)
        ef = max(self.ef_search if ef is None else int(ef), k)
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

    def tune_ef(self, ceiling: int, *, k: int = 10, target: float = 0.98, samples: int = 100,
                seed: int = 0, ladder: Sequence[int] = (32, 48, 64, 80)) -> int:
        """The smallest ef (from ``ladder``, at most ``ceiling``) whose top-``k`` agree
        with a search at ``max(400, 4·ceiling)`` on at least ``target`` of the results.

        The search cost grows with ef, and the ef a recall needs depends on the data:
        clustered embeddings reach 0.99 at ef 32 while uniform random vectors need
        100.  Queries are stored vectors moved 45° in a random direction (off the
        data points, like real queries; seeded): on the data tried (hashed texts at
        10k and 100k, uniform random 64-d) their agreement tracked the recall of
        real queries against exact search within 0.02.  Queries unlike the stored
        vectors are not covered: on 64-d clusters, queries from other clusters had
        recall 0.81 at the ef tuned (32) and 0.96 at 100.  Leaves the index's ef as it was.
        """
        visible = [x for x in self.labels() if x not in self._hidden]
        if len(visible) < 2 * samples or ceiling <= min(ladder):
            return int(ceiling)
        rng = np.random.default_rng(seed)
        picked = rng.choice(np.asarray(visible, dtype=np.int64), size=samples, replace=False)
        vecs = self.vectors(picked.tolist())
        noise = rng.standard_normal(vecs.shape).astype(np.float32)
        noise /= np.maximum(np.linalg.norm(noise, axis=1, keepdims=True), 1e-12)
        q = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12) + noise
        q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        try:
            self._index.set_ef(max(400, 4 * int(ceiling)))
            truth, _ = self._index.knn_query(q, k=k)
            for ef in [e for e in ladder if e < ceiling]:
                self._index.set_ef(ef)
                found, _ = self._index.knn_query(q, k=k)
                agree = sum(len(set(a) & set(b)) for a, b in zip(found.tolist(), truth.tolist()))
                if agree >= target * truth.size:
                    return int(ef)
        finally:
            self._index.set_ef(self.ef_search)
        return int(ceiling)

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
            # The checksum beside the file: a crash between the two renames leaves
            # a mismatch, which only makes the next load rebuild the index.
            _write_digest(tmp, path + DIGEST_SUFFIX)
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
    alphabetically first term.  Terms come from :func:`ctxrelay.text.bm25.tokenize`
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


#: a community's human-readable label (its first keywords joined by ' / ')
label_of = community_label


# -- adjacency for graph walks ----------------------------------------------------

_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)


class Adjacency:
    """A weighted undirected graph over integer labels, held for graph walks.

    A CSR snapshot (``labels`` sorted, ``indptr``, neighbour labels, weights)
    plus an overlay of rows replaced since it was taken, so a write touches a
    few rows instead of forcing a rebuild; the overlay is folded into a new
    snapshot when it grows past ``max(1000, 5 %)`` of the rows.  Rows hold
    only the neighbours a walk may enter (the caller filters hidden ones).
    ``gen`` is the caller's version stamp of the state the rows reflect.
    """

    def __init__(self, labels: np.ndarray, indptr: np.ndarray, nbrs: np.ndarray,
                 weights: np.ndarray, *, gen: int = 0) -> None:
        self._labels = np.asarray(labels, dtype=np.int64)
        self._pos = LabelPositions(self._labels)
        self._indptr = np.asarray(indptr, dtype=np.int64)
        self._nbrs = np.asarray(nbrs, dtype=np.int64)
        self._w = np.asarray(weights, dtype=np.float32)   # float32 as stored: half the memory
        self._over: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._over_keys: np.ndarray | None = _EMPTY_I
        self.gen = int(gen)

    @classmethod
    def from_edges(cls, src: np.ndarray, dst: np.ndarray, weights: np.ndarray, *,
                   gen: int = 0) -> "Adjacency":
        """From directed entries (each undirected edge listed both ways), any order."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.float32)
        if len(src) and np.any(src[1:] < src[:-1]):
            order = np.lexsort((dst, src))
            src, dst, weights = src[order], dst[order], weights[order]
        labels, starts = np.unique(src, return_index=True)
        indptr = np.append(starts, len(src)).astype(np.int64)
        return cls(labels, indptr, dst, weights, gen=gen)

    def __len__(self) -> int:
        """Rows held (snapshot and overlay)."""
        return len(self._labels) + sum(1 for k in self._over if not self._in_base(k))

    @property
    def entries(self) -> int:
        """Directed entries held: twice the undirected edges."""
        return len(self._nbrs) + sum(len(n) for n, _ in self._over.values())

    def _in_base(self, label: int) -> bool:
        i = int(np.searchsorted(self._labels, label))
        return i < len(self._labels) and int(self._labels[i]) == label

    def row(self, label: int) -> tuple[np.ndarray, np.ndarray]:
        """``(neighbour labels, weights as float64)`` of one node (empty if none)."""
        label = int(label)
        found = self._over.get(label)
        if found is not None:
            return found[0], found[1].astype(np.float64)
        i = int(np.searchsorted(self._labels, label))
        if i < len(self._labels) and int(self._labels[i]) == label:
            lo, hi = self._indptr[i], self._indptr[i + 1]
            return self._nbrs[lo:hi], self._w[lo:hi].astype(np.float64)
        return _EMPTY_I, _EMPTY_F

    def set_rows(self, rows: Mapping[int, tuple[Sequence[int], Sequence[float]]]) -> None:
        """Replace rows (an empty row removes the node's neighbours).

        A row lists each neighbour once, as stored edge rows do: the walks keep one
        product per (node, anchor) pair on that promise, so a repeated neighbour is
        refused here rather than answered differently by the two walks."""
        checked = {}
        for label, (nbrs, weights) in rows.items():
            n = np.asarray(nbrs, dtype=np.int64)
            w = np.asarray(weights, dtype=np.float32)
            if n.shape != w.shape or n.ndim != 1:
                raise ValueError(f"row {int(label)}: {n.size} neighbours but {w.size} weights; "
                                 "give one weight per neighbour")
            if len(np.unique(n)) != len(n):
                raise ValueError(f"row {int(label)} lists a neighbour twice ({n.tolist()}); "
                                 "merge the duplicate edges (keep the larger weight) first")
            checked[int(label)] = (n, w)
        self._over.update(checked)
        self._over_keys = None
        if len(self._over) > max(1000, len(self._labels) // 20):
            self.compact()

    def compact(self) -> None:
        """Fold the overlay into a new snapshot."""
        if not self._over:
            return
        keys = np.fromiter(self._over, dtype=np.int64, count=len(self._over))
        src = np.repeat(self._labels, np.diff(self._indptr))
        keep = ~np.isin(src, keys)
        parts_s, parts_d, parts_w = [src[keep]], [self._nbrs[keep]], [self._w[keep]]
        for label, (nbrs, weights) in self._over.items():
            parts_s.append(np.full(len(nbrs), label, dtype=np.int64))
            parts_d.append(nbrs)
            parts_w.append(weights)
        fresh = Adjacency.from_edges(np.concatenate(parts_s), np.concatenate(parts_d),
                                     np.concatenate(parts_w), gen=self.gen)
        self._labels, self._indptr, self._nbrs, self._w = \
            fresh._labels, fresh._indptr, fresh._nbrs, fresh._w
        self._pos = fresh._pos
        self._over, self._over_keys = {}, _EMPTY_I

    def gather(self, frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every entry of the rows of ``frontier``: ``(position in frontier,
        neighbour label, weight as float64)``."""
        frontier = np.asarray(frontier, dtype=np.int64)
        pos = self._pos.find(frontier)
        over = None
        if self._over:
            if self._over_keys is None:
                self._over_keys = np.fromiter(self._over, dtype=np.int64, count=len(self._over))
            over = np.isin(frontier, self._over_keys)
            pos[over] = -1                      # the overlay's row replaces the snapshot's
        which = np.flatnonzero(pos >= 0)
        rows = pos[which]
        starts = self._indptr[rows]
        lens = self._indptr[rows + 1] - starts
        total = int(lens.sum())
        at = np.repeat(which, lens)
        idx = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(total)
        src, nbrs, w = at, self._nbrs[idx], self._w[idx].astype(np.float64)
        if over is not None and over.any():
            parts_s, parts_d, parts_w = [src], [nbrs], [w]
            for i in np.flatnonzero(over):
                n, wt = self._over[int(frontier[i])]
                parts_s.append(np.full(len(n), i, dtype=np.int64))
                parts_d.append(n)
                parts_w.append(wt.astype(np.float64))
            src, nbrs, w = np.concatenate(parts_s), np.concatenate(parts_d), \
                np.concatenate(parts_w)
        return src, nbrs, w


def _member(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """``np.isin(values, members)`` by binary search in the sorted members."""
    if not len(members):
        return np.zeros(len(values), dtype=bool)
    members = np.sort(members)
    pos = np.searchsorted(members, values)
    return members[np.minimum(pos, len(members) - 1)] == values


def argsort_keys(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of non-negative int64 keys.

    A walk sorts a few thousand keys whose order is close to random; a
    comparison sort mispredicts a branch on nearly every comparison (about
    30 ns a key), while numpy's stable sort of 16-bit integers is a radix
    sort without branches.  So keys below 2**32 are sorted as two 16-bit
    digits, least significant first: stable passes give the same permutation.
    """
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) < 256:
        return np.argsort(keys, kind="stable")
    top = int(keys.max())
    if top >= 1 << 32 or int(keys.min()) < 0:
        return np.argsort(keys, kind="stable")
    order = np.argsort(keys.astype(np.uint16), kind="stable")     # the low digit
    if top >= 1 << 16:
        high = (keys[order] >> 16).astype(np.uint16)
        order = order[np.argsort(high, kind="stable")]
    return order


def anchor_reach(adj: Adjacency, anchors: Sequence[int],
                 hops: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes other than the anchors within ``hops`` edges of two or more anchors.

    Returns ``(labels, hop, product)``, one column per anchor in order:
    ``hop[i, j]`` is the distance from anchor ``j`` (0: not reached) and
    ``product[i, j]`` the largest product of edge weights over the shortest
    paths.  The values of :func:`ctxrelay.knowledge.cdr.reach_layers` (breadth first,
    products multiplied in float64 in path order), computed for all anchors
    at once in numpy; ``labels`` ascend.

    Up to two hops (CDGR's default) every path is expanded first and sorted once
    by (node, anchor, hops): a pair's first entries are its shortest paths, whose
    best product is kept (the maximum of the same products in any order, so the
    same floats as :func:`_reach_by_layers`, which sorts each layer and then the
    union; three hops need the second layer's pairs before the third).
    """
    hops = int(hops)
    n_a = len(anchors)
    if hops > 2 or hops < 1 or not n_a:
        return _reach_by_layers(adj, anchors, hops)
    start = np.asarray(anchors, dtype=np.int64)
    src, nbrs, w = adj.gather(start)
    fresh = nbrs != start[src]          # a row lists a neighbour once: pairs are distinct
    key1, p1 = nbrs[fresh] * n_a + src[fresh], w[fresh]          # (products 1.0 * w)
    if hops == 1:
        order = argsort_keys(key1)
        return _rows(key1[order], np.ones(len(key1), dtype=np.int64), p1[order], start)
    src2, nbrs2, w2 = adj.gather(key1 // n_a)
    key2 = nbrs2 * n_a + (key1 % n_a)[src2]
    # hop 0 entries: the anchors' own pairs, which no later path may reach
    tagged = np.concatenate([(start * n_a + np.arange(n_a, dtype=np.int64)) * 4,
                             key1 * 4 + 1, key2 * 4 + 2])
    prod = np.concatenate([np.ones(n_a), p1, p1[src2] * w2])
    order = argsort_keys(tagged)
    tagged, prod = tagged[order], prod[order]
    first = np.ones(len(tagged), dtype=bool)
    first[1:] = tagged[1:] != tagged[:-1]
    starts = np.flatnonzero(first)
    prod = np.maximum.reduceat(prod, starts)            # best product per (pair, hops)
    tagged = tagged[starts]
    pair, hop = tagged >> 2, tagged & 3
    shortest = np.ones(len(pair), dtype=bool)
    shortest[1:] = pair[1:] != pair[:-1]
    keep = shortest & (hop > 0)
    return _rows(pair[keep], hop[keep], prod[keep], start)


def _reach_by_layers(adj: Adjacency, anchors: Sequence[int],
                     hops: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`anchor_reach` layer by layer: each layer's pairs are sorted to keep
    the best product of each and drop those reached before (any number of hops)."""
    n_a = len(anchors)
    start = np.asarray(anchors, dtype=np.int64)
    col = np.arange(n_a, dtype=np.int64)
    seen = start * n_a + col                    # (node, anchor) pairs reached so far
    frontier, f_col, prod = start, col, np.ones(n_a)
    out_k, out_h, out_p = [], [], []
    for hop in range(1, int(hops) + 1):
        if not len(frontier):
            break
        src, nbrs, w = adj.gather(frontier)
        cols = f_col[src]
        p = prod[src] * w
        key = nbrs * n_a + cols
        if hop == 1:    # a row lists a neighbour once, so only later hops meet a pair twice
            fresh = nbrs != start[src]          # (an edge to itself is the only pair seen)
            key, p = key[fresh], p[fresh]
        elif len(key):
            order = argsort_keys(key)
            key, p = key[order], p[order]
            first = np.ones(len(key), dtype=bool)
            first[1:] = key[1:] != key[:-1]
            starts = np.flatnonzero(first)
            p = np.maximum.reduceat(p, starts)       # best product per pair
            key = key[starts]
            # drop the pairs reached before: find the few seen keys among the sorted
            # ones (cheaper than testing each of thousands against them)
            pos = np.minimum(np.searchsorted(key, seen), len(key) - 1)
            fresh = np.ones(len(key), dtype=bool)
            fresh[pos[key[pos] == seen]] = False
            key, p = key[fresh], p[fresh]
        out_k.append(key)
        out_h.append(np.full(len(key), hop, dtype=np.int64))
        out_p.append(p)
        seen = np.concatenate([seen, key])
        frontier, f_col, prod = key // n_a, key % n_a, p
    if not out_k:
        return _EMPTY_I, np.zeros((0, n_a), dtype=np.int64), np.zeros((0, n_a))
    key = np.concatenate(out_k)
    order = argsort_keys(key)
    return _rows(key[order], np.concatenate(out_h)[order], np.concatenate(out_p)[order],
                 start)


def _rows(key: np.ndarray, hop: np.ndarray, prod: np.ndarray, start: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`anchor_reach`'s result from every (node, anchor) pair reached, once each,
    sorted by ``key = node * len(start) + anchor``, with its hops and product."""
    n_a = len(start)
    # Each (node, anchor) pair occurs once over all layers: sorting the pairs groups
    # a node's anchors together, and a group of two or more is a result row.
    labels, cols = key // n_a, key % n_a
    first = np.ones(len(key), dtype=bool)
    first[1:] = labels[1:] != labels[:-1]
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, len(key)))
    uniq = labels[starts]
    sel = (counts >= 2) & ~_member(uniq, start)
    n = int(sel.sum())
    row_of = np.full(len(uniq), -1, dtype=np.int64)
    row_of[sel] = np.arange(n)
    rows = np.repeat(row_of, counts)
    take = np.flatnonzero(rows >= 0)
    cell = rows[take] * n_a + cols[take]
    hop_m = np.zeros(n * n_a, dtype=np.int64)
    prod_m = np.zeros(n * n_a)
    hop_m[cell] = hop[take]
    prod_m[cell] = prod[take]
    return uniq[sel], hop_m.reshape(n, n_a), prod_m.reshape(n, n_a)


def anchor_links(adj: Adjacency, anchors: Sequence[int]) -> np.ndarray:
    """``linked[j, l]``: whether ``anchors[l]`` is a neighbour of ``anchors[j]``
    (distinct labels)."""
    start = np.asarray(anchors, dtype=np.int64)
    n_a = len(start)
    linked = np.zeros((n_a, n_a), dtype=bool)
    if not n_a:
        return linked
    src, nbrs, _ = adj.gather(start)
    order = np.argsort(start, kind="stable")
    ranked = start[order]
    pos = np.minimum(np.searchsorted(ranked, nbrs), n_a - 1)
    hit = ranked[pos] == nbrs
    linked[src[hit], order[pos[hit]]] = True
    return linked
