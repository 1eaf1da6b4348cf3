"""The CKF's ANN side: one hnswlib index per namespace, kept current with the storage.

The indexes live in memory and in snapshot files ``<dir>/ns-<namespace id>.bin``
(SPEC-009 §9.1); the storage (:class:`ctxrelay.storage.interfaces.facts.FactStorage`)
is the source of truth.  Every change to what an index must hold is an entry of the
storage's change feed, written in the same transaction as the change; an index
knows the generation it reflects (``applied_gen``) and replays the entries after it.
A snapshot is saved (temp file, fsync, ``os.replace``) when the entries since the
last one reach ``max(SAVE_EVERY, 25 % of the index)``, on flush and on close,
inside a storage checkpoint, which records its generation and lets the storage drop
the entries up to it.  Opening loads the file and replays the rest; a missing or
unreadable file is rebuilt from the stored vectors.  Another process's writes reach
this one the same way.

Rebuild rule (SPEC-009 §3.3): an index is rebuilt from the stored vectors of its
retrievable facts when the seqs hidden or re-embedded since its last rebuild
(``NamespaceState.churn``) exceed 20 % of the elements it holds (hnswlib only
marks deletions, so dead elements would otherwise stay in the graph forever).

ef_search: with ``auto_ef`` an index of ``AUTO_EF_MIN`` facts or more is tuned at
each snapshot (:meth:`VectorIndex.tune_ef`) and the storage keeps the tuned value;
that ef is the one a write's linking search uses.

Reads (:meth:`VectorIndexes.nearest`) are meant to give the same answer on every
back end and in every process for the same stored facts, although each process
holds an index of its own.  Two indexes differ in which neighbours a search
reaches, not in the similarity of a neighbour both reach (the same stored float32
vectors, the same distance code); insertion is one element at a time
(:meth:`ctxrelay.knowledge.graph.VectorIndex.add`), so indexes with the same
insertion history are the same graph and answer alike.  For indexes whose
histories differ (a rebuild at another time, a re-embedded fact moved in place in
one and filled fresh in the other) a read

- searches wider than the tuned ef: ``max(ef_search, READ_EF_PER_RESULT · k)``, the
  same on every back end whatever ef the index was tuned to;
- takes ``CANDIDATES_PER_RESULT · k`` candidates from that search and orders them
  by :func:`nearest_first` (similarity, then fact id: one tie-break for every back
  end; seqs are not kept by a copy between back ends, fact ids are);
- widens the candidates while a tie at the k-th place reaches their end (exact
  duplicates: which of them a graph lists first is its insertion order).

Measured at 100k facts of the assembly bench (hashing embedder, k = 50, an LMDB
index grown on two threads against PostgreSQL's filled on one): packs the same on
38 of 60 queries before, 50 with a factor of 4, 53 with 8, 57 with 16; CDGR p50 on
the same store +11 %, +79 %, +110 %.  4 is the factor: with one-thread insertion
the usual case (a copy, a process filling its index) is the same graph anyway.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ctxrelay.errors import StoreError
from ctxrelay.knowledge.graph import VectorIndex
from ctxrelay.storage.interfaces.facts import Checkpoint, FactReader, NamespaceState

__all__ = ["NamespaceIndex", "VectorIndexes", "Link", "nearest_first", "AUTO_EF_MIN",
           "SAVE_EVERY", "REBUILD_FRACTION", "READ_EF_PER_RESULT", "CANDIDATES_PER_RESULT"]

REBUILD_FRACTION = 0.20       # SPEC-009 §3.3
AUTO_EF_MIN = 5000            # visible elements from which ef_search is tuned per index
SAVE_EVERY = 1000             # index operations between snapshot saves (at least)
READ_EF_PER_RESULT = 4        # a read's ef per result asked (see the module doc)
CANDIDATES_PER_RESULT = 2     # candidates a read orders per result asked


def nearest_first(ids: Sequence[str], sims: Sequence[float]) -> list[tuple[str, float]]:
    """``(fact id, similarity)`` pairs, most similar first, equal similarities by fact
    id: the one order of ANN results on every back end."""
    return sorted(zip(ids, sims), key=lambda hit: (-hit[1], hit[0]))


@dataclass
class NamespaceIndex:
    """One namespace's hnswlib index as this process holds it."""

    name: str
    nid: int
    index: VectorIndex
    #: the change-feed generation the index reflects
    applied_gen: int
    #: seqs of the namespace's facts that are not retrievable (as of ``applied_gen``)
    hidden: set[int] = field(default_factory=set)
    #: change-feed entries applied since the last snapshot
    ops_since_save: int = 0


class VectorIndexes:
    """The hnswlib indexes of every namespace of one store (see the module doc).

    Not thread-safe by itself: :class:`ctxrelay.knowledge.live.LiveIndex` calls it
    under its lock.  ``m``, ``ef_construction`` and ``random_seed`` are the build
    parameters recorded with the store; ``ef_search`` is the search-time ceiling.
    """

    def __init__(self, directory: str, *, dim: int, m: int, ef_construction: int,
                 random_seed: int, ef_search: int = 100, auto_ef: bool = True,
                 threads: int = 1) -> None:
        self.directory = directory
        self.dim = int(dim)
        self.m, self.ef_construction, self.random_seed = int(m), int(ef_construction), \
            int(random_seed)
        self.ef_search = int(ef_search)
        self.auto_ef = bool(auto_ef)
        self.threads = max(1, int(threads))
        self._by_ns: dict[str, NamespaceIndex] = {}
        os.makedirs(directory, exist_ok=True)

    def loaded(self) -> dict[str, NamespaceIndex]:
        """The namespaces held in memory now (a copy of the map)."""
        return dict(self._by_ns)

    def get(self, ns: str) -> NamespaceIndex | None:
        """The namespace's index as held, without catching up."""
        return self._by_ns.get(ns)

    def path_of(self, nid: int) -> str:
        return os.path.join(self.directory, f"ns-{nid}.bin")

    def new_index(self, capacity: int = 1024) -> VectorIndex:
        return VectorIndex(self.dim, m=self.m, ef_construction=self.ef_construction,
                           ef_search=self.ef_search, random_seed=self.random_seed,
                           capacity=capacity, threads=self.threads)

    # -- keeping current ----------------------------------------------------------------

    def current(self, view: FactReader, ns: str,
                state: NamespaceState | None = None) -> NamespaceIndex | None:
        """The namespace's index, loaded and brought up to ``state`` (read if not given)."""
        if state is None:
            state = view.namespace(ns)
            if state is None:
                return None
        idx = self._by_ns.get(ns)
        if idx is None or state.saved_gen > idx.applied_gen:
            idx = self._by_ns[ns] = self._load(view, ns, state)
        if state.gen > idx.applied_gen:
            idx = self._replay(view, idx, state)
        ef = self.ef_for(state.ef)
        if idx.index.ef_search != ef:
            idx.index.set_ef(ef)
        return idx

    def read_ef(self, k: int) -> int:
        """The ef of a read for ``k`` results (the tuned ef aside: see the module doc)."""
        return max(self.ef_search, READ_EF_PER_RESULT * int(k))

    def nearest(self, idx: NamespaceIndex, vector: np.ndarray, k: int,
                ids_of: Callable[[np.ndarray], list[str]]) -> list[tuple[str, float]]:
        """The ``k`` nearest visible facts of ``idx`` to ``vector`` in
        :func:`nearest_first` order (``ids_of`` names the labels; see the module doc)."""
        want = min(int(k), idx.index.visible)
        if want <= 0:
            return []
        ef = self.read_ef(want)
        wide = min(idx.index.visible, CANDIDATES_PER_RESULT * want)
        while True:
            labels, sims = idx.index.search(vector, wide, ef=max(ef, wide))
            hits = nearest_first(ids_of(labels[0]), sims[0].tolist())
            if len(hits) < wide or len(hits) <= want or hits[want - 1][1] > hits[-1][1] \
                    or wide >= idx.index.visible:
                return hits[:want]
            wide = min(idx.index.visible, 2 * wide)     # the tie may go on past the end

    def ef_for(self, tuned: int | None) -> int:
        """ef_search of an index: the one tuned at its last snapshot (never above
        ``ef_search``) when tuning is on, else ``ef_search``."""
        tuned = tuned if self.auto_ef else None
        return self.ef_search if tuned is None else min(int(tuned), self.ef_search)

    def tune(self, idx: NamespaceIndex) -> int | None:
        """Tune ef at a snapshot; small indexes keep ``ef_search`` (searching them is
        cheap).  Returns the tuned ef to record, None for none."""
        tuned = None
        if self.auto_ef and idx.index.visible >= AUTO_EF_MIN:
            tuned = idx.index.tune_ef(self.ef_search, seed=idx.nid)
        idx.index.set_ef(self.ef_for(tuned))
        return tuned

    def _load(self, view: FactReader, ns: str, state: NamespaceState) -> NamespaceIndex:
        hidden = view.hidden(ns)
        path = self.path_of(state.id)
        index = None
        if os.path.exists(path):
            try:
                index = VectorIndex.load(path, self.dim, ef_search=self.ef_search,
                                         threads=self.threads, hidden=hidden)
            except StoreError as exc:
                warnings.warn(f"{exc}; rebuilding it", RuntimeWarning, stacklevel=6)
        if index is None:
            return self._fresh(view, ns, state, hidden)
        return NamespaceIndex(ns, state.id, index, state.saved_gen, hidden)

    def _fresh(self, view: FactReader, ns: str, state: NamespaceState,
               hidden: set[int]) -> NamespaceIndex:
        """An index filled from the stored vectors, as of ``state``."""
        idx = NamespaceIndex(ns, state.id, self.new_index(), 0, hidden)
        self.fill(view, idx)
        idx.applied_gen = state.gen
        idx.ops_since_save = state.gen - state.saved_gen + 1
        return idx

    def fill(self, view: FactReader, idx: NamespaceIndex, chunk: int = 4096) -> None:
        """Add every stored vector of a retrievable fact of the namespace, in seq order."""
        for seqs, rows in view.iter_vectors(idx.name, chunk, skip=idx.hidden):
            idx.index.add(seqs, rows)

    def _replay(self, view: FactReader, idx: NamespaceIndex,
                state: NamespaceState) -> NamespaceIndex:
        changes = view.changes(idx.name, idx.applied_gen, state.gen)
        if changes is None:     # entries gone that no snapshot holds: start over
            idx = self._by_ns[idx.name] = self._fresh(view, idx.name, state, view.hidden(idx.name))
            return idx
        for change in changes:
            self.apply(view, idx, change.hide, change.seq)
            idx.ops_since_save += 1
        idx.applied_gen = state.gen
        return idx

    def apply(self, view: FactReader, idx: NamespaceIndex, hide: bool, seq: int) -> None:
        """One change-feed entry (idempotent)."""
        if hide:
            idx.hidden.add(seq)
            idx.index.hide(seq)
            return
        idx.hidden.discard(seq)
        if not idx.index.unhide(seq):
            rows, found = view.vectors_at(idx.name, [seq])
            if found[0]:
                idx.index.add([seq], rows[:1])

    # -- writes --------------------------------------------------------------------------

    def link(self, ns: str, *, knn: int, threshold: float, replace: bool = False) -> "Link":
        """The :data:`Linker` of one write (see :class:`Link`)."""
        return Link(self, ns, knn=knn, threshold=threshold, replace=replace)

    def due_for_rebuild(self, idx: NamespaceIndex, state: NamespaceState) -> bool:
        return state.churn > REBUILD_FRACTION * max(1, len(idx.index))

    def due_for_save(self, idx: NamespaceIndex) -> bool:
        return idx.ops_since_save >= max(SAVE_EVERY, len(idx.index) // 4)

    def saver(self, ns: str, settle: Callable[[FactReader, NamespaceIndex], None]
              ) -> Callable[[FactReader, NamespaceState], Checkpoint]:
        """A checkpoint that snapshots the namespace's index (``settle`` runs before the
        storage drops the change-feed entries: other structures catch up on them)."""
        def save(view: FactReader, state: NamespaceState) -> Checkpoint:
            idx = self.current(view, ns, state)
            ef = self.tune(idx)
            idx.index.save(self.path_of(idx.nid))
            settle(view, idx)
            return Checkpoint(idx.applied_gen, ef)
        return save

    def rebuilder(self, ns: str, settle: Callable[[FactReader, NamespaceIndex], None],
                  built: list[NamespaceIndex]) -> Callable[[FactReader, NamespaceState],
                                                           Checkpoint]:
        """A checkpoint that rebuilds the namespace's index from the stored vectors of
        its retrievable facts; the new index is appended to ``built``."""
        def rebuild(view: FactReader, state: NamespaceState) -> Checkpoint:
            old = self.current(view, ns, state)
            idx = NamespaceIndex(ns, state.id,
                                 self.new_index(max(1024, old.index.visible + 1024)),
                                 state.gen, set(old.hidden))
            self.fill(view, idx)
            ef = self.tune(idx)
            idx.index.save(self.path_of(idx.nid))
            settle(view, old)
            built[:] = [idx]
            return Checkpoint(state.gen, ef, rebuilt=True)
        return rebuild

    def replace(self, idx: NamespaceIndex) -> None:
        """Hold ``idx`` (a rebuilt index) for its namespace."""
        self._by_ns[idx.name] = idx

    def set_ef_search(self, ef_search: int) -> None:
        """Search every index (loaded now or later) with this ``ef_search``, tuned values
        aside (``auto_ef`` off)."""
        self.ef_search = max(1, int(ef_search))
        self.auto_ef = False
        for idx in self._by_ns.values():
            idx.index.set_ef(self.ef_search)

    def clear(self) -> None:
        self._by_ns.clear()


class Link:
    """A write's :data:`Linker`: inside the storage's transaction it brings the
    namespace's index up to the state the write starts from, puts the write's vectors
    in (hiding them if they will not be retrievable) and returns the similarity edges
    (SPEC-009 §5.2) of each to its ``knn`` nearest with cosine >= ``threshold``.

    If the transaction fails, :meth:`undo` takes the vectors out again (hnswlib only
    marks deletions, so a rolled-back add stays in the graph, hidden); if it commits,
    ``applied_at`` is the generation the index was at before the write, so the caller
    can count the write's own entries as applied.
    """

    def __init__(self, owner: VectorIndexes, ns: str, *, knn: int, threshold: float,
                 replace: bool) -> None:
        self._owner = owner
        self.ns = ns
        self.knn, self.threshold, self.replace = knn, threshold, replace
        self.idx: NamespaceIndex | None = None
        self.applied_at: int | None = None
        self._added: list[int] = []
        self._old: tuple[int, np.ndarray | None, bool] | None = None

    def __call__(self, view: FactReader, state: NamespaceState, seqs: Sequence[int],
                 vectors: np.ndarray, retrievable: bool) -> list[tuple[int, int, float]]:
        idx = self._owner.current(view, self.ns, state)
        self.idx, self.applied_at = idx, state.gen
        if self.replace:
            (seq,) = seqs
            rows, found = view.vectors_at(self.ns, [seq])
            self._old = (seq, rows[0] if found[0] else None, not retrievable)
            idx.index.add([seq], vectors)
            if not retrievable:
                idx.index.hide(seq)
        else:
            self._added = list(seqs)
            idx.index.add(seqs, vectors)
        return list(self._edges(idx, seqs, vectors))

    def _edges(self, idx: NamespaceIndex, seqs: Sequence[int],
               vectors: np.ndarray) -> Iterable[tuple[int, int, float]]:
        if not len(seqs) or self.knn <= 0:
            return
        labels, sims = idx.index.search(vectors, self.knn + 1, threads=self._owner.threads)
        for row, seq in enumerate(seqs):
            for label, sim in zip(labels[row], sims[row]):
                other = int(label)
                if other == seq or sim < self.threshold:
                    continue
                yield seq, other, sim

    def undo(self) -> None:
        idx = self.idx
        if idx is None:
            return
        for seq in self._added:
            idx.index.hide(seq)
        if self._old is not None:
            seq, old, hidden = self._old
            if old is not None:
                idx.index.add([seq], old[None, :])
                if hidden:
                    idx.index.hide(seq)
