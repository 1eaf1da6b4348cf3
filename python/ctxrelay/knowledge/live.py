"""The CKF's in-memory side kept current with its storage, and the writes that keep it so.

:class:`LiveIndex` composes a :class:`FactStorage` (the durable facts) with the
per-namespace hnswlib indexes (:mod:`.vectors`) and walk structures (:mod:`.walk`).
Each read runs in one storage snapshot, catching the index up on the change feed
first; each write goes to the storage with a :class:`~.vectors.Link` that does the
index work inside the write's transaction (so a batch is linked against an index
that holds every fact committed before it, whichever process wrote them), then
records the write's receipt (applied generation, heads to re-read) and applies the
rebuild and snapshot rules.
"""
from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ctxrelay.knowledge.records import CKFStats, FactIds
from ctxrelay.knowledge.vectors import Link, NamespaceIndex, VectorIndexes
from ctxrelay.knowledge.walk import Walks
from ctxrelay.storage.interfaces.facts import (STATUSES, FactReader, FactStorage, HeadArrays,
                                               Written)

__all__ = ["LiveIndex"]

SEARCHES_KEPT = 8           # answers of search() kept (see LiveIndex.search)
SEARCH_SHAPES_KEPT = 2      # (namespace, k) pairs search_ahead() repeats


class LiveIndex:
    """ANN search, walks and index upkeep over one :class:`FactStorage` (thread-safe).

    ``directory`` holds the hnswlib snapshot files; the index build parameters
    come from the storage's ``config``.
    """

    def __init__(self, storage: FactStorage, directory: str, *, ef_search: int = 100,
                 auto_ef: bool = True, threads: int = 1) -> None:
        self.storage = storage
        c = storage.config
        self.ann = VectorIndexes(directory, dim=storage.dim, m=c["m"],
                                      ef_construction=c["ef_construction"],
                                      random_seed=c["random_seed"], ef_search=ef_search,
                                      auto_ef=auto_ef, threads=threads)
        self.walks = Walks(storage.dim)
        self._lock = threading.RLock()
        # search(): recent answers with the index state they saw, and the
        # (namespace, k) recently asked (what search_ahead repeats)
        self._searched: OrderedDict[tuple[str, int, bytes], Any] = OrderedDict()
        self._asked: deque[tuple[str, int]] = deque(maxlen=SEARCH_SHAPES_KEPT)

    @property
    def ef_search(self) -> int:
        return self.ann.ef_search

    @property
    def auto_ef(self) -> bool:
        return self.ann.auto_ef

    def set_ef_search(self, ef_search: int) -> None:
        with self._lock:
            self.ann.set_ef_search(ef_search)

    def index(self, ns: str) -> NamespaceIndex | None:
        """The namespace's index brought up to date (None for a namespace never written)."""
        with self._lock:
            return self.storage.snapshot(lambda v: self.ann.current(v, ns))

    def index_counts(self, ns: str) -> tuple[int, int]:
        """Elements held and hidden in the namespace's index (0, 0 if not loaded)."""
        idx = self.ann.get(ns)
        return (0, 0) if idx is None else (len(idx.index), len(idx.index.hidden))

    # -- reads ----------------------------------------------------------------------------

    def search(self, ns: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` nearest retrievable facts: ``(fact id, cosine)``, nearest first,
        equal cosines by fact id (:meth:`VectorIndexes.nearest`: why the same on
        every back end for the same facts, and when not).

        The answers of the last few searches are kept with the index state they
        saw (the index object, its applied generation and ef): a search asked
        again of the same state is answered from them, which is what lets
        :meth:`search_ahead` run an assembly's search before its plan comes."""
        vector = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
        key = (ns, int(k), vector.tobytes())

        def fn(view: FactReader) -> list[tuple[str, float]]:
            idx = self.ann.current(view, ns)
            if idx is None:
                return []
            state = (idx, idx.applied_gen, idx.index.ef_search)
            kept = self._searched.get(key)
            if kept is not None and kept[0][0] is idx and kept[0][1:] == state[1:]:
                return list(kept[1])

            def ids_of(labels: np.ndarray) -> list[str]:
                ids = self.walks.ids_of(view, ns, labels)
                if None in ids:     # the index holds a fact the storage cannot find
                    from ctxrelay.errors import CorruptStoreError
                    raise CorruptStoreError(
                        f"the vector index of namespace {ns!r} names a fact the store "
                        "cannot find (a damaged record key); run 'ctxrelay check' and "
                        "re-ingest the facts or restore a backup")
                return ids
            found = self.ann.nearest(idx, vector, k, ids_of)
            self._searched[key] = (state, tuple(found))
            self._searched.move_to_end(key)
            while len(self._searched) > SEARCHES_KEPT:
                self._searched.popitem(last=False)
            asked = (ns, int(k))
            if asked in self._asked:
                self._asked.remove(asked)
            self._asked.append(asked)
            return found
        with self._lock:
            return self.storage.snapshot(fn)

    def search_ahead(self, vector: np.ndarray) -> None:
        """Search for ``vector`` as the recent searches asked (namespace and ``k``),
        ahead of the plan that will ask: an assembly embeds its Tier P query while
        Prolog analyses the message, and the plan that follows nearly always
        searches the same namespace with the same candidate pool (CDR's and
        CDGR's pool is ``max(4k, 50)``).  What the plan then asks is answered from
        :meth:`search`'s kept answers when the index has not moved; a guess
        that misses costs one search and changes nothing."""
        for ns, k in list(self._asked):
            self.search(ns, vector, k)

    def heads(self, ns: str, ids: Sequence[str]) -> HeadArrays:
        """The scoring heads of ``ids`` (from memory where the walk holds them)."""
        return self.storage.snapshot(
            lambda view: self.walks.heads(view, view.namespace(ns), ns, ids))

    def scoring(self, ns: str, ids: Sequence[str]) -> list[tuple[str, float, float,
                                                                 float | None] | None]:
        """:meth:`heads` as ``(status, importance, modified_at, ttl)`` rows."""
        return self.heads(ns, ids).rows()

    def vectors(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        """The stored vectors of ``ids`` (by the walk's seqs where it has them).
        @raise UnknownFactError for an id not of the namespace."""
        def fn(view: FactReader) -> np.ndarray:
            state = view.namespace(ns)
            seqs = None if state is None else self.walks.resolve(ns, state.id, ids)
            if seqs is None or (seqs < 0).any():
                return view.vectors(ns, ids)
            return view.vectors_at(ns, seqs)[0]
        return self.storage.snapshot(fn)

    def _walk(self, ns: str, fn: Any, empty: Any) -> Any:
        def run(view: FactReader) -> Any:
            state = view.namespace(ns)
            idx = None if state is None else self.ann.current(view, ns, state)
            return empty() if idx is None else fn(view, idx, state)
        with self._lock:
            return self.storage.snapshot(run)

    def anchor_reach(self, ns: str, anchor_ids: Sequence[str], hops: int
                     ) -> tuple[FactIds | list[str], np.ndarray, np.ndarray, np.ndarray]:
        """See :meth:`ctxrelay.knowledge.walk.Walks.anchor_reach`."""
        n_a = len(anchor_ids)
        return self._walk(
            ns, lambda v, idx, st: self.walks.anchor_reach(v, idx, st, anchor_ids, hops),
            lambda: ([], np.zeros((0, n_a), np.int64), np.zeros((0, n_a)),
                     np.zeros((n_a, n_a), bool)))

    def neighbourhood(self, ns: str, ids: Sequence[str],
                      hops: int) -> dict[str, dict[str, float]]:
        """See :meth:`ctxrelay.knowledge.walk.Walks.neighbourhood`."""
        return self._walk(
            ns, lambda v, idx, st: self.walks.neighbourhood(v, idx, st, ids, hops), dict)

    def similarity_bounds(self, ns: str, ids: Sequence[str], vectors: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray] | None:
        """See :meth:`ctxrelay.knowledge.walk.Walks.bounds` (None before any write)."""
        return self._walk(ns, lambda v, idx, st: self.walks.bounds(v, idx, ids, vectors),
                          lambda: None)

    # -- writes ----------------------------------------------------------------------------

    def _committed(self, ns: str, done: Written, link: Link | None) -> Any:
        """Bring the in-memory side up to a committed write, then apply the rules."""
        self.walks.written(ns, done)
        if link is not None and link.idx is not None and link.applied_at == done.gen_before:
            link.idx.applied_gen = done.gen_after      # the link applied the write's entries
            link.idx.ops_since_save += done.gen_after - done.gen_before
        else:
            self.storage.snapshot(lambda v: self.ann.current(v, ns))
        self._after_write(ns)
        return done.value

    def _linked(self, ns: str, link: Link, write: Any) -> Any:
        with self._lock:
            try:
                done = write()
            except BaseException:
                link.undo()
                raise
            return self._committed(ns, done, link)

    def add_facts(self, ns: str, records: Sequence[Mapping[str, Any]], vectors: np.ndarray, *,
                  knn: int, threshold: float, now: float,
                  source: Mapping[str, Any] | None = None,
                  supersede: Sequence[str] = ()) -> list[str]:
        """Store facts, each linked to its ``knn`` nearest with cosine >= ``threshold``."""
        # The link catches the index up inside the write, where the store's writers
        # wait (every process, on PostgreSQL): a first build takes minutes at 100k
        # facts, so it is done before, in a read snapshot; the link then replays
        # only what was committed in between.
        self.index(ns)
        link = self.ann.link(ns, knn=knn, threshold=threshold)
        return self._linked(ns, link, lambda: self.storage.add_facts(
            ns, records, vectors, now=now, link=link, source=source, supersede=supersede))

    def update_fact(self, ns: str, fact_id: str, changes: Mapping[str, Any],
                    vector: np.ndarray | None, *, knn: int, threshold: float,
                    now: float) -> None:
        """Change a fact; a ``vector`` re-embeds and re-links it."""
        if vector is not None:
            self.index(ns)          # caught up before the write (see add_facts)
        link = self.ann.link(ns, knn=knn, threshold=threshold, replace=True)
        self._linked(ns, link, lambda: self.storage.update_fact(
            ns, fact_id, changes, vector, now=now, link=link if vector is not None else None))

    def _write(self, ns: str, write: Any) -> Any:
        with self._lock:
            return self._committed(ns, write(), None)

    def set_status(self, ns: str, ids: Sequence[str], status: str, *, now: float) -> int:
        return self._write(ns, lambda: self.storage.set_status(ns, ids, status, now=now))

    def expire(self, ns: str, ids: Sequence[str], *, now: float) -> int:
        return self._write(ns, lambda: self.storage.expire(ns, ids, now=now))

    def save_communities(self, ns: str, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], *, now: float) -> bool:
        return self._write(ns, lambda: self.storage.save_communities(
            ns, membership, keywords, now=now))

    # -- maintenance ------------------------------------------------------------------------

    def _after_write(self, ns: str) -> None:
        """Rebuild (SPEC-009 §3.3) or snapshot the index when due."""
        idx = self.ann.get(ns)
        if idx is None:
            return
        state = self.storage.namespace(ns)
        if self.ann.due_for_rebuild(idx, state):
            self.rebuild(ns)
        elif self.ann.due_for_save(idx):
            self.save(ns)

    def save(self, ns: str) -> None:
        """Snapshot the namespace's index (and let the storage drop the feed up to it)."""
        with self._lock:
            if self.storage.checkpoint(ns, self.ann.saver(ns, self.walks.settle)):
                idx = self.ann.get(ns)
                if idx is not None:
                    idx.ops_since_save = 0

    def rebuild(self, ns: str) -> None:
        """Rebuild the namespace's index from the stored vectors of its retrievable facts."""
        built: list[NamespaceIndex] = []
        with self._lock:
            self.storage.checkpoint(ns, self.ann.rebuilder(ns, self.walks.settle, built))
            if built:
                self.ann.replace(built[0])

    def flush(self) -> None:
        """Snapshot every index with changes since its last snapshot."""
        with self._lock:
            for name, idx in self.ann.loaded().items():
                if idx.ops_since_save:
                    self.save(name)

    def close(self) -> None:
        """Flush (unless the storage was closed underneath), then forget what is held."""
        with self._lock:
            try:
                if not self.storage.closed:
                    self.flush()
            finally:
                self.ann.clear()
                self.walks.clear()

    def stats(self, location: str) -> CKFStats:
        """The store's counts (SPEC-038 §4) with this process's index sizes."""
        with self._lock:
            states = self.storage.snapshot(
                lambda view: [view.namespace(name) for name in view.namespaces()])
            counts = {s: 0 for s in STATUSES}
            edges = communities = elements = hidden = pending = 0
            for state in states:
                for s in STATUSES:
                    counts[s] += state.counts[s]
                edges += state.edges
                communities += state.communities
                pending += state.pending
                held, gone = self.index_counts(state.name)
                elements += held
                hidden += gone
        storage = self.storage
        return CKFStats(backend=storage.name, location=location, model_id=storage.model_id,
                        dim=storage.dim, namespaces=tuple(s.name for s in states),
                        fact_count=sum(counts.values()) - counts["DELETED"],
                        by_status=counts, edges=edges, communities=communities,
                        index_elements=elements, index_hidden=hidden,
                        pending_recluster=pending)
