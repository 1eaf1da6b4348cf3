"""The CKF's result records (frozen dataclasses with ``to_dict()`` of plain types, for
janus) and :class:`FactIds`, fact ids that carry the seqs a walk found them by.

:class:`Fact` and :class:`SourceRecord` are the storage's own records
(:mod:`ctxrelay.storage.interfaces.facts`), re-exported here.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxrelay.storage.interfaces.facts import Fact, HeadArrays, SourceRecord

__all__ = ["Fact", "SourceRecord", "HeadArrays", "Hit", "ScoredFact", "Community",
           "CoverageEntry", "IngestReport", "CKFStats", "FactIds", "pick", "DEFAULT_DEPTH"]

DEFAULT_DEPTH = 0.5           # SPEC-024 §3.1: depth weight of a coverage entry not given one


@dataclass(frozen=True)
class Hit:
    """A fact id with a score (ANN cosine similarity or BM25)."""

    fact_id: str
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {"fact_id": self.fact_id, "score": float(self.score)}


@dataclass(frozen=True)
class ScoredFact:
    """A retrieved fact with the terms of its score.

    ``role`` is ``"match"`` (plain semantic search), ``"anchor"`` (a CDR
    result, also in CDGR) or ``"connector"`` (CDGR, SPEC-025); for a
    connector ``bridge`` is its bridge value, ``bridges`` the anchor pairs it
    links and ``hops`` its distance to the nearest anchor.
    """

    fact: Fact
    score: float
    relevance: float
    role: str = "match"
    novelty: float = 1.0
    recency: float = 1.0
    coverage: float = 0.0
    residual_pull: float = 0.0
    ngram_penalty: float = 0.0
    bridge: float = 0.0
    bridges: tuple[tuple[str, str], ...] = ()
    hops: int = 0

    @property
    def fact_id(self) -> str:
        return self.fact.fact_id

    def to_dict(self) -> dict[str, Any]:
        return {"fact": self.fact.to_dict(), "fact_id": self.fact.fact_id,
                "score": float(self.score), "relevance": float(self.relevance),
                "role": self.role, "novelty": float(self.novelty),
                "recency": float(self.recency), "coverage": float(self.coverage),
                "residual_pull": float(self.residual_pull),
                "ngram_penalty": float(self.ngram_penalty), "bridge": float(self.bridge),
                "bridges": [list(p) for p in self.bridges], "hops": int(self.hops)}


@dataclass(frozen=True)
class Community:
    """A Leiden community of one namespace (SPEC-009 §5)."""

    community_id: int
    namespace: str
    label: str
    keywords: tuple[str, ...]
    size: int
    fact_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"community_id": self.community_id, "namespace": self.namespace,
                "label": self.label, "keywords": list(self.keywords), "size": self.size,
                "fact_ids": list(self.fact_ids)}


@dataclass(frozen=True)
class CoverageEntry:
    """A coverage (or residual) set entry (SPEC-024 §2.1).

    Give ``text`` (embedded with the store's embedder) or ``embedding`` with
    the ``model_id`` it came from; a different model id is refused (§2.5).
    """

    text: str | None = None
    depth_weight: float = DEFAULT_DEPTH
    window_number: int = 0
    embedding: Any = None
    model_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        emb = None if self.embedding is None else [float(x) for x in np.ravel(self.embedding)]
        return {"text": self.text, "depth_weight": float(self.depth_weight),
                "window_number": int(self.window_number), "embedding": emb,
                "model_id": self.model_id}


@dataclass(frozen=True)
class IngestReport:
    """What :meth:`ctxrelay.knowledge.fabric.FactStore.ingest` did."""

    namespace: str
    documents: int
    facts_added: int
    unchanged: int
    updated: int
    stale_marked: int
    fact_ids: tuple[str, ...]
    sources: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["fact_ids"], out["sources"] = list(self.fact_ids), list(self.sources)
        return out


@dataclass(frozen=True)
class CKFStats:
    """Counts and locations of one store (SPEC-038 §4)."""

    backend: str
    location: str
    model_id: str
    dim: int
    namespaces: tuple[str, ...]
    fact_count: int
    by_status: Mapping[str, int]
    edges: int
    communities: int
    index_elements: int
    index_hidden: int
    pending_recluster: int

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["namespaces"], out["by_status"] = list(self.namespaces), dict(self.by_status)
        return out


class FactIds(tuple):
    """Fact ids with the seqs they were found by in one namespace of one store (a
    walk's).  Passed back to the structures that handed them out they spare looking
    every id up again; a tuple, so ids and handles stay aligned."""

    handles: np.ndarray
    owner: Any

    def __new__(cls, ids: Iterable[str], handles: np.ndarray, owner: Any) -> "FactIds":
        self = super().__new__(cls, ids)
        self.handles, self.owner = handles, owner
        return self

    def pick(self, at: Sequence[int] | np.ndarray) -> "FactIds":
        """The ids at positions ``at``, with their handles."""
        at = np.asarray(at, dtype=np.int64)
        return FactIds([self[i] for i in at.tolist()], self.handles[at], self.owner)


def pick(ids: Sequence[str], at: Sequence[int] | np.ndarray) -> Sequence[str]:
    """``ids`` at positions ``at``, keeping their handles (:class:`FactIds`)."""
    if isinstance(ids, FactIds):
        return ids.pick(at)
    return [ids[i] for i in np.asarray(at, dtype=np.int64).tolist()]
