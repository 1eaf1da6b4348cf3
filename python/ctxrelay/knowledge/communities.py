"""Leiden communities of a namespace's similarity graph (SPEC-009 §5).

:func:`recluster` runs leidenalg (:func:`ctxrelay.knowledge.graph.leiden`, seeded)
on the weighted graph of the retrievable facts, in seq order, so one seed gives
one partition; communities under ``min_size`` are dissolved; ids count from 0 by
size (largest first, ties by the earliest fact); labels are the members'
importance-weighted tf-idf keywords.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ctxrelay.knowledge.graph import community_keywords, leiden
from ctxrelay.knowledge.records import Community
from ctxrelay.storage.interfaces.facts import FactReader, community_label

__all__ = ["similarity_graph", "partition", "communities"]


def similarity_graph(view: FactReader, ns: str
                     ) -> tuple[list[str], list[tuple[int, int]], list[float]]:
    """The retrievable facts (seq order) and the edges between them as index pairs
    (each once, by stored order) with their weights."""
    table = view.fact_table(ns)
    keep = np.flatnonzero(table.heads.retrievable)
    ids = [table.ids[i] for i in keep.tolist()]
    pos = {seq: i for i, seq in enumerate(table.seqs[keep].tolist())}
    src, dst, w = view.edges(ns)
    edges: list[tuple[int, int]] = []
    weights: list[float] = []
    for a, b, x in zip(src.tolist(), dst.tolist(), w.tolist()):
        if a < b and a in pos and b in pos:
            edges.append((pos[a], pos[b]))
            weights.append(x)
    return ids, edges, weights


def partition(ids: Sequence[str], edges: Sequence[tuple[int, int]], weights: Sequence[float],
              *, resolution: float, iterations: int, seed: int,
              min_size: int) -> dict[str, int]:
    """fact id -> community id of the facts in a community of at least ``min_size``."""
    membership = leiden(len(ids), edges, weights, resolution=resolution,
                        n_iterations=iterations, seed=seed)
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(membership):
        groups.setdefault(c, []).append(i)
    kept = sorted((g for g in groups.values() if len(g) >= min_size),
                  key=lambda g: (-len(g), g[0]))
    return {ids[i]: cid for cid, g in enumerate(kept) for i in g}


def keywords(view: FactReader, ns: str,
             assign: Mapping[str, int]) -> dict[int, tuple[str, ...]]:
    """Each community's tf-idf keywords over its members' contents and importance."""
    facts = {f.fact_id: f for f in view.get(ns, list(assign)) if f is not None}
    members: dict[int, list[tuple[str, float]]] = {}
    for fid, cid in assign.items():
        members.setdefault(cid, []).append((facts[fid].content, facts[fid].importance))
    return community_keywords(members) if members else {}


def communities(view: FactReader, ns: str) -> list[Community]:
    """The namespace's communities as last saved."""
    membership, kws = view.communities(ns)
    groups: dict[int, list[str]] = {}
    for fid, cid in membership.items():
        groups.setdefault(cid, []).append(fid)
    return [Community(cid, ns, community_label(kws.get(cid, ())), tuple(kws.get(cid, ())),
                      len(groups[cid]), tuple(sorted(groups[cid])))
            for cid in sorted(groups)]
