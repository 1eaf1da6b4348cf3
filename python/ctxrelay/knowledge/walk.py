"""What a CDGR walk holds in memory per namespace, kept current with the storage.

A walk at 100k facts is bound by memory latency: each query touches a few
hundred rows of structures of 1-400 MB, and random reads of the LMDB map cost
microseconds each.  So the first walk of a namespace builds, in one pass each:

- the similarity graph of the retrievable facts as a CSR
  (:class:`ctxrelay.knowledge.graph.Adjacency`), updated from the storage's change
  feed after writes (edges change only with an entry on one of their ends);
- an id table (fact ids by seq, sorted seqs with :class:`LabelPositions`) so a
  walk's few thousand names are one ``take`` and ids resolve to seqs by a dict;
- the scoring heads (status, importance, modified_at, ttl) by seq, valid as of
  the namespace's ``last_mod``: this process's own writes mark the rows they
  changed for re-reading, anyone else's (a different ``last_mod``) drops them;
- on the first connector scoring, an int8 sketch of the visible vectors
  (:class:`ctxrelay.knowledge.sketch.VectorSketch`) that bounds dot products, so
  only candidates whose bound can still reach the top are read in full.

:class:`Walks` reads the storage only through a :class:`FactReader`; the hnswlib
index (:class:`ctxrelay.knowledge.vectors.NamespaceIndex`) says which change
generation and which hidden seqs the structures must reflect.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ctxrelay.knowledge.graph import Adjacency, anchor_links, anchor_reach
from ctxrelay.knowledge.labels import LabelPositions
from ctxrelay.knowledge.records import FactIds
from ctxrelay.knowledge.sketch import VectorSketch
from ctxrelay.storage.interfaces.facts import (FactReader, HeadArrays, NamespaceState,
                                               UnknownFactError, Written)
from ctxrelay.knowledge.vectors import NamespaceIndex

__all__ = ["HeadTable", "WalkState", "Walks"]


class HeadTable:
    """The scoring heads of a namespace's facts by seq, as of ``stamp`` (its
    ``last_mod``).  Rows marked not fresh are read from the storage again."""

    def __init__(self, seqs: LabelPositions, heads: HeadArrays, stamp: float) -> None:
        self.seqs = seqs
        self.status = heads.status
        self.importance = heads.importance
        self.modified = heads.modified
        self.ttl = heads.ttl
        self.fresh = np.ones(len(seqs.labels), dtype=bool)
        self.stamp = stamp

    def stale(self, seqs: Iterable[int]) -> None:
        pos = self.seqs.find(np.fromiter(seqs, dtype=np.int64))
        self.fresh[pos[pos >= 0]] = False

    def arrays(self, seqs: np.ndarray) -> tuple[HeadArrays, np.ndarray]:
        """The heads of ``seqs`` and where they are known (held and fresh); the
        status of the others is ``b""``."""
        pos = self.seqs.find(seqs)
        ok = pos >= 0
        ok[ok] = self.fresh[pos[ok]]
        status = self.status[pos]
        status[~ok] = b""
        return HeadArrays(status, self.importance[pos], self.modified[pos], self.ttl[pos]), ok


@dataclass
class WalkState:
    """One namespace's walk structures (each None until first built)."""

    graph: Adjacency | None = None
    #: sorted seqs and fact ids by seq as of the graph's build (ids as str objects, so
    #: a walk's few thousand names are one ``tolist``)
    id_seqs: LabelPositions | None = None
    id_names: np.ndarray | None = None
    #: the seq of each id of ``id_names`` (ids never change, so it is never stale)
    seq_of: dict[str, int] | None = None
    sketch: VectorSketch | None = None
    heads: HeadTable | None = None
    #: the latest ids looked up in ``seq_of`` and their seqs: a walk asks about the
    #: same list of candidates twice (scoring heads, then bounds)
    resolved: tuple[list[str], np.ndarray] | None = None


class Walks:
    """The walk structures of every namespace of one store (see the module doc)."""

    def __init__(self, dim: int) -> None:
        self.dim = int(dim)
        self._by_ns: dict[str, WalkState] = {}
        self._token = object()      # the owner of the FactIds handed out here

    def state(self, ns: str) -> WalkState:
        found = self._by_ns.get(ns)
        if found is None:
            found = self._by_ns[ns] = WalkState()
        return found

    def peek(self, ns: str) -> WalkState | None:
        return self._by_ns.get(ns)

    def clear(self) -> None:
        self._by_ns.clear()

    # -- ids ---------------------------------------------------------------------------

    def resolve(self, ns: str, nid: int, ids: Sequence[str]) -> np.ndarray | None:
        """Seqs of ``ids`` from the namespace's id table (-1 where it has none: ids
        added since it was built, other namespaces, not ids), or None when there is no
        table."""
        if isinstance(ids, FactIds) and ids.owner == (self._token, nid):
            return ids.handles.copy()
        ws = self._by_ns.get(ns)
        if ws is None or ws.seq_of is None:
            return None
        last = ws.resolved
        if last is not None and len(last[0]) == len(ids) and \
                all(a is b for a, b in zip(last[0], ids)):
            return last[1].copy()
        get = ws.seq_of.get
        try:
            found = np.array([get(f, -1) for f in ids], dtype=np.int64)
        except TypeError:           # an unhashable "id"
            return None
        if len(ids) >= 16:
            ws.resolved = (list(ids), found.copy())
        return found

    def ids_of(self, view: FactReader, ns: str, seqs: np.ndarray) -> list[str]:
        """Fact ids of ``seqs`` (from the id table where it has them)."""
        seqs = np.asarray(seqs, dtype=np.int64)
        ws = self._by_ns.get(ns)
        if ws is None or ws.id_seqs is None or not len(seqs):
            pos = np.full(len(seqs), -1, dtype=np.int64)
        else:
            pos = ws.id_seqs.find(seqs)
            if (pos >= 0).all():
                return ws.id_names[pos].tolist()
        missing = [s for p, s in zip(pos.tolist(), seqs.tolist()) if p < 0]
        found = iter(view.ids_at(ns, missing))
        return [ws.id_names[p] if p >= 0 else next(found) for p in pos.tolist()]

    def seqs_of(self, view: FactReader, ns: str, nid: int, ids: Sequence[str]) -> np.ndarray:
        """Seqs of ``ids``; UnknownFactError for one not of the namespace."""
        seqs = self.resolve(ns, nid, ids)
        if seqs is None or (seqs < 0).any():
            seqs = view.locate(ns, ids)
        if (seqs < 0).any():
            bad = ids[int(np.flatnonzero(seqs < 0)[0])]
            raise UnknownFactError(f"no fact {bad!r} in this namespace; check the id "
                                   "(fact ids are UUIDs) and the namespace")
        return seqs

    # -- building and catching up ----------------------------------------------------------

    def _scan_facts(self, view: FactReader, ns: str, ws: WalkState) -> None:
        """Ids and scoring heads of every fact of the namespace, in one pass."""
        table = view.fact_table(ns)
        ws.id_seqs = LabelPositions(table.seqs)
        ws.id_names = np.array(table.ids, dtype=object)
        ws.seq_of = dict(zip(table.ids, table.seqs.tolist()))
        ws.resolved = None
        ws.heads = HeadTable(ws.id_seqs, table.heads, table.stamp)

    def _build_graph(self, view: FactReader, idx: NamespaceIndex, ws: WalkState) -> Adjacency:
        """Every edge between visible facts of the namespace, read in one pass."""
        src, dst, w = view.edges(idx.name)
        if idx.hidden and len(src):
            hidden = np.fromiter(idx.hidden, dtype=np.int64, count=len(idx.hidden))
            keep = ~(np.isin(src, hidden) | np.isin(dst, hidden))
            src, dst, w = src[keep], dst[keep], w[keep]
        self._scan_facts(view, idx.name, ws)
        return Adjacency.from_edges(src, dst, w, gen=idx.applied_gen)

    def _logged(self, view: FactReader, idx: NamespaceIndex, since: int) -> list[int] | None:
        """The seqs of the change-feed entries after ``since`` up to the index's
        generation, or None when the storage no longer holds them all."""
        changes = view.changes(idx.name, since, idx.applied_gen)
        return None if changes is None else [c.seq for c in changes]

    def _sync_graph(self, view: FactReader, idx: NamespaceIndex,
                    ws: WalkState) -> Adjacency | None:
        """Bring the graph (if built) up to the index's generation: the rows to re-read
        are those of each logged fact and of its neighbours before and after; entries
        already dropped by a checkpoint mean a full rebuild."""
        graph = ws.graph
        if graph is None or graph.gen == idx.applied_gen:
            return graph
        seqs = self._logged(view, idx, graph.gen)
        if seqs is None:
            ws.graph = self._build_graph(view, idx, ws)
            return ws.graph
        logged = set(seqs)
        stored = view.edge_rows(idx.name, logged)
        affected: set[int] = set()
        for seq in logged:
            affected.add(seq)
            affected.update(graph.row(seq)[0].tolist())
            affected.update(stored[seq][0])
        hidden = idx.hidden
        rows = view.edge_rows(idx.name, [x for x in affected if x not in hidden])
        graph.set_rows({x: (([], []) if x in hidden else _visible(rows[x], hidden))
                        for x in affected})
        graph.gen = idx.applied_gen
        return graph

    def _build_sketch(self, view: FactReader, idx: NamespaceIndex,
                      chunk: int = 2048) -> VectorSketch:
        """The sketch of every visible fact's stored vector, read in one pass."""
        return VectorSketch.build(self.dim, view.iter_vectors(idx.name, chunk, skip=idx.hidden),
                                  gen=idx.applied_gen)

    def _sync_sketch(self, view: FactReader, idx: NamespaceIndex,
                     ws: WalkState) -> VectorSketch | None:
        """Bring the sketch (if built) up to the index's generation: a vector changes
        only with a logged operation on its fact (add, re-embed, hide, unhide)."""
        sketch = ws.sketch
        if sketch is None or sketch.gen == idx.applied_gen:
            return sketch
        seqs = self._logged(view, idx, sketch.gen)
        if seqs is None:
            ws.sketch = self._build_sketch(view, idx)
            return ws.sketch
        candidates = sorted(set(seqs))
        shown = [s for s in candidates if s not in idx.hidden]
        vecs, found = view.vectors_at(idx.name, shown)
        row_of = {s: i for i, s in enumerate(shown)}
        put: list[int] = []
        rows: list[int] = []
        drop: list[int] = []
        for seq in candidates:
            i = row_of.get(seq)
            if i is None or not found[i]:
                drop.append(seq)
            else:
                put.append(seq)
                rows.append(i)
        sketch.update(put, vecs[rows].reshape(len(rows), self.dim), drop)
        sketch.gen = idx.applied_gen
        return sketch

    def settle(self, view: FactReader, idx: NamespaceIndex) -> None:
        """Catch the graph and the sketch up before the change feed they would catch up
        from is dropped, or drop them when far behind (one scan at the next walk is
        cheaper than re-reading that many rows one by one)."""
        ws = self._by_ns.get(idx.name)
        if ws is None:
            return
        graph = ws.graph
        if graph is not None and idx.applied_gen - graph.gen > max(1000, len(graph) // 10):
            ws.graph = None
        sketch = ws.sketch
        if sketch is not None and idx.applied_gen - sketch.gen > max(1000, len(sketch) // 10):
            ws.sketch = None
        self._sync_graph(view, idx, ws)
        self._sync_sketch(view, idx, ws)

    def graph(self, view: FactReader, idx: NamespaceIndex, state: NamespaceState) -> Adjacency:
        """The walk graph, built or caught up (and the id table and heads with it)."""
        ws = self.state(idx.name)
        if ws.graph is None:
            ws.graph = self._build_graph(view, idx, ws)
        elif ws.heads is None or ws.heads.stamp != state.last_mod:
            self._scan_facts(view, idx.name, ws)      # a write this process did not make
        return self._sync_graph(view, idx, ws)

    def written(self, ns: str, done: Written) -> None:
        """After a write of this process: the heads it changed are read again; a
        ``last_mod`` moved by anyone else drops them."""
        ws = self._by_ns.get(ns)
        heads = None if ws is None else ws.heads
        if heads is None:
            return
        if heads.stamp == done.stamp_before:
            heads.stale(done.seqs)
            heads.stamp = done.stamp_after
        else:
            ws.heads = None

    # -- what a walk reads -------------------------------------------------------------------

    def heads(self, view: FactReader, state: NamespaceState | None, ns: str,
              ids: Sequence[str]) -> HeadArrays:
        """The scoring heads of ``ids``: from memory where held and fresh."""
        ws = self._by_ns.get(ns)
        heads = None if ws is None or state is None else ws.heads
        seqs = None
        if heads is not None and heads.stamp == state.last_mod:
            seqs = self.resolve(ns, state.id, ids)
        if seqs is None:
            return view.heads(ns, ids)
        out, ok = heads.arrays(seqs)
        missing = np.flatnonzero(~ok)
        if len(missing):
            read = view.heads(ns, [ids[i] for i in missing.tolist()])
            for mine, theirs in ((out.status, read.status), (out.importance, read.importance),
                                 (out.modified, read.modified), (out.ttl, read.ttl)):
                mine[missing] = theirs
        return out

    def anchor_reach(self, view: FactReader, idx: NamespaceIndex, state: NamespaceState,
                     anchor_ids: Sequence[str], hops: int
                     ) -> tuple[FactIds, np.ndarray, np.ndarray, np.ndarray]:
        """What a CDGR walk of ``hops`` edges from ``anchor_ids`` finds (SPEC-025 §2.3).

        ``(nodes, hop, product, linked)``: the retrievable facts other than the
        anchors within ``hops`` edges of two or more anchors; ``hop[i, j]`` is the
        distance of ``nodes[i]`` from anchor ``j`` (0: not reached) and
        ``product[i, j]`` the largest product of edge weights over the shortest paths
        between them; ``linked[j, l]`` whether anchors ``j`` and ``l`` share an edge.
        """
        n_a = len(anchor_ids)
        graph = self.graph(view, idx, state)
        seqs = self.seqs_of(view, idx.name, idx.nid, anchor_ids).tolist()
        visible = [s for s in seqs if s not in idx.hidden]
        labels, hop, product = anchor_reach(graph, visible, hops)
        if len(visible) != n_a:     # a hidden anchor reaches nothing: its column stays 0
            cols = [j for j, s in enumerate(seqs) if s not in idx.hidden]
            full_h = np.zeros((len(labels), n_a), np.int64)
            full_p = np.zeros((len(labels), n_a))
            full_h[:, cols], full_p[:, cols] = hop, product
            hop, product = full_h, full_p
        # a hidden anchor's row is empty and no row names it: its row and column stay False
        linked = anchor_links(graph, seqs)
        names = FactIds(self.ids_of(view, idx.name, labels), np.asarray(labels, dtype=np.int64),
                        (self._token, idx.nid))
        return names, hop, product, linked

    def neighbourhood(self, view: FactReader, idx: NamespaceIndex, state: NamespaceState,
                      ids: Sequence[str], hops: int) -> dict[str, dict[str, float]]:
        """Adjacency (neighbour -> edge weight) of every retrievable fact within
        ``hops - 1`` edges of ``ids``: what a walk of ``hops`` edges from them reads."""
        graph = self.graph(view, idx, state)
        frontier = list(zip(self.seqs_of(view, idx.name, idx.nid, ids).tolist(), ids))
        adj: dict[str, dict[str, float]] = {}
        seen: set[int] = set()
        for _ in range(max(0, hops)):
            nxt: list[tuple[int, str]] = []
            for seq, fid in frontier:
                if seq in seen or seq in idx.hidden:
                    continue
                seen.add(seq)
                nbrs, weights = graph.row(seq)
                names = self.ids_of(view, idx.name, nbrs)
                out: dict[str, float] = {}
                for other, oid, w in zip(nbrs.tolist(), names, weights.tolist()):
                    out[oid] = w
                    if other not in seen:
                        nxt.append((other, oid))
                adj[fid] = out
            frontier = nxt
        return adj

    def bounds(self, view: FactReader, idx: NamespaceIndex, ids: Sequence[str],
               vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on the dot products of the facts' stored vectors with ``vectors`` (rows):
        ``(approx, err)`` with ``|stored[i] · vectors[k] - approx[i, k]| <= err[i, k]``
        (``err`` is ``inf`` for a fact the sketch does not hold)."""
        ws = self.state(idx.name)
        if ws.sketch is None:
            ws.sketch = self._build_sketch(view, idx)
        sketch = self._sync_sketch(view, idx, ws)
        seqs = self.resolve(idx.name, idx.nid, ids)
        if seqs is None or (seqs < 0).any():
            seqs = view.locate(idx.name, ids)
        return sketch.dots(seqs, vectors)


def _visible(row: tuple[list[int], list[float]], hidden: set[int]
             ) -> tuple[list[int], list[float]]:
    nbrs, weights = row
    keep = [i for i, n in enumerate(nbrs) if n not in hidden]
    if len(keep) == len(nbrs):
        return row
    return [nbrs[i] for i in keep], [weights[i] for i in keep]
