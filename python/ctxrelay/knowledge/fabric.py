"""The Contextual Knowledge Fabric (CKF): Tier P, persistent knowledge (CRP-SPEC-009).

A :class:`FactStore` keeps facts (SPEC-009 §2) with their embeddings, a
similarity-edge graph, Leiden communities and a term index, and retrieves them
five ways (SPEC-035 §2.1, §2.4):

- :meth:`FactStore.lookup_key` / :meth:`FactStore.fact` -- exact key → fact;
- :meth:`FactStore.search_terms` -- BM25 over the term → fact index;
- :meth:`FactStore.search_ann` / :meth:`FactStore.facts` -- hnswlib ANN;
- :meth:`FactStore.cdr` -- Coverage-Differential Retrieval (SPEC-024, with
  SPEC-027 §3's recency factor), formulas in :mod:`ctxrelay.knowledge.cdr`;
- :meth:`FactStore.cdgr` -- the graph walk for connector facts (SPEC-025).

CRP owns the logic, the operator owns the data (SPEC-038 §1): everything that
stores is behind :class:`CKFBackend`; :class:`NativeBackend` (LMDB + hnswlib,
"crp-native") is the default, and a PostgreSQL + pgvector backend would
implement the same methods.  The facade (:class:`FactStore`) validates input,
embeds, applies the source-type defaults, chunks documents and computes the
CDR/CDGR scores and the Leiden communities.

On-disk layout of the native backend under ``<path>`` (e.g. ``<store>/ckf/``)::

    <path>/db/        LMDB environment (the source of truth), named databases:
      meta            format, config (model id, dim, hnsw parameters), counters
      ns              namespace name -> JSON: id, generation, saved generation,
                      state digest, counts, community labels, change counters
      facts           ns(8) seq(8) -> fact id (36 ASCII) + status (1) + importance,
                      modified_at, ttl seconds (f64 each; NaN = none) + JSON record
      ids             fact id -> ns(8) seq(8)
      vectors         ns seq -> float32 embedding
      keys            ns(8) key (UTF-8) -> ns seq            (key -> fact, exact)
      edges           ns(8) a(8) b(8) -> float32 cosine + fact id of b (both ways)
      hidden          ns seq -> status of a QUARANTINED / DELETED fact
      ixlog           ns(8) generation(8) -> op ('A' show, 'H' hide) + seq(8)
      access          ns seq -> access count (u64) + last access (f64)
      members         ns seq -> community id (u32)
      sources         ns(8) source id -> JSON source record (SPEC-009 §4.5)
      expiry          ns(8) due(8, order-preserving f64) seq(8) -> fact id, for every
                      ACTIVE fact with a TTL (due = ingested_at + ttl): a TTL sweep
                      reads only what is due (namespaces made before it existed get
                      it built by their first sweep)
      terms.post/.docs/.ns   the BM25 term -> fact index (ctxrelay.storage.lmdb.textindex)
    <path>/hnsw/ns-<id>.bin   one hnswlib index per namespace (SPEC-009 §9.1)

The hnswlib files are snapshots.  Every change to what an index must hold is
logged in ``ixlog`` in the same LMDB transaction as the change itself; a file
is saved (temp file, fsync, ``os.replace``) when the log since the last save
reaches ``max(1000, 25 % of the index)`` operations, on :meth:`FactStore.flush`
and on close, and the log up to the saved generation is then dropped.  Opening
loads the file and replays the rest of the log (its operations are idempotent,
so replaying more than needed is harmless); a missing or unreadable file is
rebuilt from the stored vectors.  Another process's changes reach this one the
same way: each call compares the namespace's generation with the one applied
in memory and replays the difference.

Rebuild rule (SPEC-009 §3.3): an index is rebuilt from the stored vectors of
its retrievable facts when the labels hidden or replaced since its last
rebuild exceed 20 % of the elements it holds (hnswlib only marks deletions, so
the dead elements would otherwise stay in the graph forever).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import struct
import sys
import threading
import time
import unicodedata
import uuid
import warnings
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ctxrelay.knowledge import cdr as _cdr
from ctxrelay.knowledge.graph import (Adjacency, VectorIndex, anchor_links, anchor_reach, community_keywords,
                        label_of, leiden)
from ctxrelay.knowledge.labels import LabelPositions
from ctxrelay.knowledge.sketch import VectorSketch
from ctxrelay.text.embed import default_name, get_embedder
from ctxrelay.errors import (CtxRelayError, InvalidArgumentError, InvalidMetadataError,
                     StoreError)
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.types import copy_plain
from ctxrelay.storage.lmdb.textindex import TextIndex

__all__ = [
    "FactStore", "CKFBackend", "NativeBackend", "FactIds", "HeadArrays",
    "Fact", "ScoredFact", "Hit", "Community", "CoverageEntry", "IngestReport",
    "SourceRecord", "CKFStats", "Chunk", "chunk_text",
    "UnknownFactError", "FactKeyExistsError", "InvalidFactError", "StatusTransitionError",
    "EmbeddingModelMismatchError", "IngestSourceError",
    "STATUSES", "RETRIEVABLE", "TRANSITIONS", "SOURCE_TYPES", "DEFAULT_NAMESPACE",
]

# -- constants ----------------------------------------------------------------

STATUSES: tuple[str, ...] = ("ACTIVE", "STALE", "DELETED", "QUARANTINED")
#: Statuses a retrieval may return (SPEC-009 §2.2); STALE ones are penalised.
RETRIEVABLE: frozenset[str] = frozenset({"ACTIVE", "STALE"})
#: Allowed status changes: SPEC-009 §2.2, plus lifting a quarantine after
#: review (§8.4) and quarantining or deleting from any non-deleted status.
TRANSITIONS: Mapping[str, frozenset[str]] = {
    "ACTIVE": frozenset({"STALE", "DELETED", "QUARANTINED"}),
    "STALE": frozenset({"ACTIVE", "DELETED", "QUARANTINED"}),
    "QUARANTINED": frozenset({"ACTIVE", "STALE", "DELETED"}),
    "DELETED": frozenset(),
}
#: source type -> (importance, default TTL): SPEC-009 §4.4 base weights
#: (version-specific = official + 0.05) and SPEC-027 §3.5 default TTLs; the
#: types SPEC-027 gives no TTL for (and user-provided facts) never expire.
SOURCE_TYPES: Mapping[str, tuple[float, str | None]] = {
    "regulatory": (0.90, "P5Y"),
    "official": (0.80, "P1Y"),
    "version_specific": (0.85, "P6M"),
    "research": (0.75, None),
    "internal": (0.70, None),
    "web": (0.50, None),
    "news": (0.50, "P30D"),
    "user": (0.60, None),
}
DEFAULT_SOURCE_TYPE = "user"
DEFAULT_NAMESPACE = "default"
KNN = 20                      # SPEC-009 §5.2: neighbours looked at per fact
MIN_COMMUNITY_SIZE = 3        # SPEC-009 §5.3
EXPIRE_BATCH = 16             # facts marked STALE per write transaction of a TTL sweep (~1 ms)
BACKFILL_BATCH = 512          # records read per transaction building an old store's expiry index
DECODED_FACTS = 4096          # decoded fact records kept per store (validated on each read)
RECLUSTER_EVERY = 50          # SPEC-009 §5.5: new facts between automatic reclusterings
REBUILD_FRACTION = 0.20       # SPEC-009 §3.3
AUTO_EF_MIN = 5000            # visible elements from which ef_search is tuned per index
SAVE_EVERY = 1000             # index operations between snapshot saves (at least)
ID_CACHE_ENTRIES = 1_000_000  # fact id <-> LMDB key pairs kept in memory (they never change)
DEFAULT_DEPTH = 0.5           # SPEC-024 §3.1: depth weight of a coverage entry not given one
CHUNK_MAX_TOKENS = 512        # SPEC-009 §4.2
FACT_MIN_TOKENS = 10          # SPEC-009 §2.1
FACT_MAX_TOKENS = 2048        # SPEC-009 §2.1
CHUNK_OVERLAP = 0.10          # SPEC-009 §4.2
MAX_KEY_CHARS = 128
MAX_NAMESPACE_CHARS = 100
INGEST_SUFFIXES = (".md", ".markdown", ".txt")

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_ACCESS = struct.Struct(">Qd")
_HEAD = struct.Struct(">ddd")          # importance, modified_at, ttl seconds (NaN: none)
_F32 = struct.Struct("<f")
_STATUS_BYTE = {"ACTIVE": b"A", "STALE": b"S", "DELETED": b"D", "QUARANTINED": b"Q"}
_BYTE_STATUS = {v: k for k, v in _STATUS_BYTE.items()}
_ID_LEN = 36
_JSON_AT = _ID_LEN + 1 + _HEAD.size
_MOD = 1 << 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# -- errors -------------------------------------------------------------------

class UnknownFactError(CtxRelayError, KeyError):
    """No fact with this id or key in the namespace."""

    kind = "unknown_fact"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class FactKeyExistsError(CtxRelayError):
    """A fact key is already taken in the namespace."""

    kind = "fact_key_exists"


class InvalidFactError(InvalidArgumentError):
    """Fact content, key, importance, source type or status is malformed."""

    kind = "invalid_fact"


class StatusTransitionError(InvalidArgumentError):
    """A status change SPEC-009 §2.2 does not allow (e.g. out of DELETED)."""

    kind = "status_transition"


class EmbeddingModelMismatchError(CtxRelayError):
    """Vectors from another embedding model than the store's (SPEC-024 §2.5)."""

    kind = "embedding_model_mismatch"


class IngestSourceError(CtxRelayError):
    """A file or directory given to ingest cannot be read."""

    kind = "ingest_source"


# -- records ------------------------------------------------------------------

@functools.lru_cache(maxsize=1 << 16)
def _iso(ts: float | None) -> str | None:
    # Cached: every fact read formats three stored timestamps, and hot facts are
    # read again and again (a key lookup's budget is 50 µs).
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(
        timespec="microseconds").replace("+00:00", "Z")


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Fact:
    """One CKF fact node (SPEC-009 §2); the embedding is kept by the backend.

    Timestamps are ISO 8601 UTC strings; ``ttl`` is an ISO 8601 duration
    (``None`` = never expires) and ``ttl_seconds`` the same in seconds.
    A DELETED fact is a tombstone: its content, hash, key and metadata are
    erased (SPEC-009 §8.3), its id, source and timestamps kept.
    """

    fact_id: str
    namespace: str
    content: str
    content_hash: str
    key: str | None
    source_id: str | None
    source_location: str | None
    source_type: str
    importance: float
    status: str
    ttl: str | None
    ttl_seconds: float | None
    community: int | None
    community_label: str | None
    ingested_at: str
    modified_at: str
    access_count: int
    last_accessed_at: str | None
    metadata: Mapping[str, Any]
    model_id: str

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["metadata"] = copy_plain(dict(self.metadata))   # the caller's own copy
        return out


def _fresh_copy(fact: Fact) -> Fact:
    """A copy of a decoded fact with its own metadata dict: callers own what they get.
    Built through ``__dict__``, not the constructor: a frozen dataclass sets each of
    its twenty fields through ``object.__setattr__``, which costs more than the copy."""
    out = object.__new__(Fact)
    out.__dict__.update(fact.__dict__)
    if fact.metadata:
        out.__dict__["metadata"] = copy_plain(dict(fact.metadata))
    else:
        out.__dict__["metadata"] = {}
    return out


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
class SourceRecord:
    """An ingested document (SPEC-009 §4.5)."""

    source_id: str
    namespace: str
    title: str
    uri: str
    document_hash: str
    ingested_at: str
    fact_count: int
    status: str
    fact_ids: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["fact_ids"] = list(self.fact_ids)
        return out


@dataclass(frozen=True)
class IngestReport:
    """What :meth:`FactStore.ingest` did."""

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


@dataclass(frozen=True)
class HeadArrays:
    """The scoring heads of a list of facts as arrays (:meth:`CKFBackend.scoring_arrays`):
    status bytes (``b"A"``, ``b"S"``, ``b"D"``, ``b"Q"``; ``b""`` for an unknown
    fact), importance, ``modified_at`` epoch and TTL seconds (NaN: none)."""

    status: np.ndarray
    importance: np.ndarray
    modified: np.ndarray
    ttl: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[str, float, float, float | None] | None]
                  ) -> "HeadArrays":
        return cls(np.array([b"" if r is None else _STATUS_BYTE[r[0]] for r in rows], dtype="S1"),
                   np.array([0.0 if r is None else r[1] for r in rows], dtype=np.float64),
                   np.array([math.nan if r is None else r[2] for r in rows], dtype=np.float64),
                   np.array([math.nan if r is None or r[3] is None else r[3] for r in rows],
                            dtype=np.float64))

    def rows(self) -> list[tuple[str, float, float, float | None] | None]:
        """:meth:`CKFBackend.scoring`'s tuples."""
        return [None if st == b"" else (_BYTE_STATUS[st], imp, mod, None if t != t else t)
                for st, imp, mod, t in zip(self.status.tolist(), self.importance.tolist(),
                                           self.modified.tolist(), self.ttl.tolist())]

    def take(self, at: np.ndarray) -> "HeadArrays":
        return HeadArrays(self.status[at], self.importance[at], self.modified[at], self.ttl[at])

    @property
    def retrievable(self) -> np.ndarray:
        return (self.status == b"A") | (self.status == b"S")

    def recency(self, now: float) -> np.ndarray:
        """SPEC-027 §3.2's factor; a STALE fact is penalised like one past its TTL
        (SPEC-009 §2.2)."""
        r = _cdr.recency_factors(now - self.modified, self.ttl)
        stale = self.status == b"S"
        return np.where(stale, np.minimum(r, _cdr.STALE_FLOOR), r) if stale.any() else r


# -- the backend interface (SPEC-038 §2.1) --------------------------------------

class CKFBackend(ABC):
    """Where a CKF keeps its facts, vectors, edges and communities.

    SPEC-038 §2.1 names ``upsert_fact``, ``search``, ``neighbours``, ``delete``
    and ``stats``; the facade also needs exact key and term lookups, status
    changes, the state hash and community storage.  Every write method is all
    or nothing.  Facts are passed as plain records (dicts with the keys of
    :class:`Fact` that the caller sets) and returned as :class:`Fact`.  Only
    ACTIVE and STALE facts may come back from ``search``, ``search_terms``,
    ``lookup_key`` and ``neighbourhood``; ``get`` returns any status.
    """

    name: ClassVar[str] = "custom"
    model_id: str
    dim: int

    @property
    @abstractmethod
    def location(self) -> str: ...

    # writing
    @abstractmethod
    def add_facts(self, namespace: str, records: Sequence[Mapping[str, Any]],
                  vectors: np.ndarray, *, knn: int, edge_threshold: float, now: float,
                  source: Mapping[str, Any] | None = None,
                  supersede: Sequence[str] = ()) -> list[str]:
        """Insert facts, link each to its ``knn`` nearest with cosine >=
        ``edge_threshold``; optionally record ``source`` and mark ``supersede``
        STALE in the same transaction.  Returns the new fact ids."""

    @abstractmethod
    def update_fact(self, namespace: str, fact_id: str, changes: Mapping[str, Any],
                    vector: np.ndarray | None, *, knn: int, edge_threshold: float,
                    now: float) -> Fact: ...

    @abstractmethod
    def set_status(self, namespace: str, fact_ids: Sequence[str], status: str, *,
                   now: float) -> int: ...

    @abstractmethod
    def delete(self, namespace: str, fact_ids: Sequence[str], *, now: float) -> int: ...

    @abstractmethod
    def record_access(self, namespace: str, fact_ids: Sequence[str], *, now: float) -> None: ...

    @abstractmethod
    def save_communities(self, namespace: str, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], *, now: float) -> bool: ...

    # reading
    @abstractmethod
    def get(self, namespace: str, fact_ids: Sequence[str]) -> list[Fact | None]: ...

    @abstractmethod
    def vectors(self, namespace: str, fact_ids: Sequence[str]) -> np.ndarray: ...

    def scoring(self, namespace: str, fact_ids: Sequence[str]) -> list[tuple[str, float, float,
                                                                          float | None] | None]:
        """``(status, importance, modified_at epoch, ttl seconds)`` per fact: what a
        ranking needs, cheaper than :meth:`get` where the store can do better."""
        return [None if f is None else (f.status, f.importance, _epoch(f.modified_at),
                                        f.ttl_seconds) for f in self.get(namespace, fact_ids)]

    def scoring_arrays(self, namespace: str, fact_ids: Sequence[str]) -> HeadArrays:
        """:meth:`scoring` as arrays, which a ranking of hundreds of facts reads."""
        return HeadArrays.from_rows(self.scoring(namespace, fact_ids))

    @abstractmethod
    def lookup_key(self, namespace: str, key: str, *, any_status: bool = False) -> str | None:
        """The id of the fact named ``key``: retrievable ones only unless ``any_status``."""

    @abstractmethod
    def search(self, namespace: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]: ...

    @abstractmethod
    def search_terms(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]: ...

    @abstractmethod
    def neighbourhood(self, namespace: str, fact_ids: Sequence[str],
                      hops: int) -> dict[str, dict[str, float]]:
        """Adjacency (neighbour -> edge weight) of every retrievable fact
        within ``hops - 1`` edges of ``fact_ids``: what a walk of ``hops``
        edges from them reads."""

    def anchor_reach(self, namespace: str, anchor_ids: Sequence[str], hops: int
                     ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """What a CDGR walk of ``hops`` edges from ``anchor_ids`` finds (SPEC-025 §2.3).

        ``(nodes, hop, product, linked)``: the retrievable facts other than
        the anchors within ``hops`` edges of two or more anchors; ``hop[i, j]``
        is the distance of ``nodes[i]`` from anchor ``j`` (0: not reached) and
        ``product[i, j]`` the largest product of edge weights over the
        shortest paths between them; ``linked[j, l]`` whether anchors ``j``
        and ``l`` share an edge.  This default reads :meth:`neighbourhood`
        and walks it in Python; a store that can do better overrides it.
        """
        adj = self.neighbourhood(namespace, anchor_ids, hops)
        empty: dict[str, float] = {}
        layers = [_cdr.reach_layers(a, lambda n: adj.get(n, empty), hops) for a in anchor_ids]
        anchors = set(anchor_ids)
        count: Counter[str] = Counter()
        for hops_of, _ in layers:
            count.update(n for n in hops_of if n not in anchors)
        nodes = [n for n, c in count.items() if c >= 2]
        hop = np.zeros((len(nodes), len(anchor_ids)), dtype=np.int64)
        product = np.zeros((len(nodes), len(anchor_ids)))
        for j, (hops_of, prod) in enumerate(layers):
            for i, n in enumerate(nodes):
                if n in hops_of:
                    hop[i, j], product[i, j] = hops_of[n], prod[n]
        linked = np.array([[b in adj.get(a, empty) for b in anchor_ids] for a in anchor_ids],
                          dtype=bool).reshape(len(anchor_ids), len(anchor_ids))
        return nodes, hop, product, linked

    def similarity_bounds(self, namespace: str, fact_ids: Sequence[str], vectors: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray] | None:
        """Bounds on the dot products of the facts' stored vectors with ``vectors``
        (rows), without reading the stored vectors: ``(approx, err)`` with
        ``|stored[i] · vectors[k] - approx[i, k]| <= err[i, k]`` (``err`` is
        ``inf`` where nothing is known).  None when the backend keeps nothing to
        bound them with; the caller then reads the vectors (:meth:`vectors`).
        """
        return None

    @abstractmethod
    def graph(self, namespace: str) -> tuple[list[str], list[tuple[int, int]], list[float]]:
        """Retrievable facts (stable order) and their edges as index pairs + weights."""

    @abstractmethod
    def communities(self, namespace: str) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]: ...

    @abstractmethod
    def scan(self, namespace: str) -> Iterable[Fact]: ...

    def due_facts(self, namespace: str, *, now: float) -> list[str]:
        """The ACTIVE facts whose ``ingested_at + ttl`` is before ``now`` (SPEC-009
        §8.1), in store order.  This default reads every fact; a store that keeps
        them ordered by due time reads only those (the native one does)."""
        return [f.fact_id for f in self.scan(namespace) if f.status == "ACTIVE"
                and f.ttl_seconds is not None and now > _epoch(f.ingested_at) + f.ttl_seconds]

    def expire_facts(self, namespace: str, fact_ids: Sequence[str], *, now: float) -> int:
        """Mark those of ``fact_ids`` still ACTIVE and past their TTL STALE; how many."""
        due = set(self.due_facts(namespace, now=now))
        return self.set_status(namespace, [f for f in fact_ids if f in due], "STALE", now=now)

    @abstractmethod
    def source(self, namespace: str, source_id: str) -> SourceRecord | None: ...

    @abstractmethod
    def state_hash(self, namespace: str) -> str: ...

    @abstractmethod
    def namespaces(self) -> list[str]: ...

    @abstractmethod
    def pending_recluster(self, namespace: str) -> int: ...

    @abstractmethod
    def stats(self) -> CKFStats: ...

    # maintenance
    def rebuild_index(self, namespace: str) -> None:
        """Rebuild the ANN index of ``namespace`` (a no-op where the store does it)."""

    def flush(self) -> None:
        """Make everything durable (index snapshots included)."""

    def write_generation(self) -> int | None:
        """A number that moves with every committed write, or None if unknown."""
        return None

    @abstractmethod
    def close(self) -> None: ...


class FactIds(tuple):
    """Fact ids as a backend returned them, with its own handle for each (the native
    backend: the facts' LMDB seqs in one namespace).  Passed back to the same backend
    they spare it looking every id up again; a tuple, so ids and handles stay aligned."""

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


def _pick(ids: Sequence[str], at: Sequence[int] | np.ndarray) -> Sequence[str]:
    """``ids`` at positions ``at``, keeping a backend's handles (:class:`FactIds`)."""
    if isinstance(ids, FactIds):
        return ids.pick(at)
    return [ids[i] for i in np.asarray(at, dtype=np.int64).tolist()]


class _Candidates(dict):
    """CDGR's connector candidates, ``id -> (approximate bridge value, row)``, with
    the rows' bridged pair counts (``n_pairs``)."""

    n_pairs: np.ndarray


@dataclass(frozen=True)
class _Window:
    """What a retrieval call scores facts against (SPEC-024): the coverage and
    residual sets as vectors, the n-gram blacklist, the novelty mode, the time."""

    coverage: np.ndarray
    weights: np.ndarray
    residual: np.ndarray
    blacklist: set[tuple[str, ...]]
    novelty: str
    now: float


# -- the native backend -----------------------------------------------------------

class _FactDb(LmdbStore):
    KIND = "fact store"
    FORMAT = b"ctxrelay.knowledge.fabric/1"
    DB_NAMES = (b"meta", b"ns", b"facts", b"ids", b"vectors", b"keys", b"edges", b"hidden",
                b"ixlog", b"access", b"members", b"sources", b"expiry")

    def text_index(self, prefix: str) -> TextIndex:
        """The BM25 index kept in this environment (its three databases are created once)."""
        return self.write(lambda txn: TextIndex(self._env, txn=txn, prefix=prefix))


_HEAD_ROW = np.dtype([("id", f"S{_ID_LEN}"), ("status", "S1"), ("importance", ">f8"),
                      ("modified", ">f8"), ("ttl", ">f8")])


class _Heads:
    """The scoring heads (status, importance, modified_at, ttl) of a namespace's
    facts by seq, as of ``stamp`` (the namespace's ``last_mod``, which every write
    that changes a record moves).  The writes of this backend mark the rows they
    touch as not fresh (read from LMDB again) and move ``stamp`` along; any other
    change of ``last_mod`` means a writer this backend did not see, and the heads
    are read again whole."""

    def __init__(self, seqs: LabelPositions, rows: np.ndarray, stamp: float) -> None:
        self.seqs = seqs
        self.status = rows["status"].copy()
        self.importance = rows["importance"].astype(np.float64)
        self.modified = rows["modified"].astype(np.float64)
        self.ttl = rows["ttl"].astype(np.float64)
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
class _NsMem:
    """What one process holds in memory for a namespace."""

    name: str
    nid: int
    index: VectorIndex
    applied_gen: int
    hidden: set[int]
    ops_since_save: int = 0
    #: the similarity edges between visible facts, for walks (built on the first walk)
    graph: Adjacency | None = None
    #: fact ids by seq as of the graph's build (sorted seqs; ids as str objects, so a
    #: walk's few thousand names are one ``tolist``)
    id_seqs: LabelPositions | None = None
    id_names: np.ndarray | None = None
    #: the seq of each id of ``id_names`` (ids never change, so it is never stale)
    seq_of: dict[str, int] | None = None
    #: int8 sketch of the visible facts' vectors, for CDGR's bounds (built on first use)
    sketch: VectorSketch | None = None
    #: scoring heads by seq (built with the graph)
    heads: _Heads | None = None
    #: the latest ids looked up in ``seq_of`` and their seqs: a walk asks about the
    #: same list of candidates twice (scoring heads, then bounds)
    resolved: tuple[list[str], np.ndarray] | None = None


def _fkey(nid: int, seq: int) -> bytes:
    return _U64.pack(nid) + _U64.pack(seq)


def _due(status: str, rec: Mapping[str, Any]) -> float | None:
    """When an ACTIVE fact with a TTL is past it (SPEC-009 §8.1): ``ingested_at + ttl``,
    with ``ingested_at`` as a read returns it (ISO, microseconds), as expire always
    compared it.  None for a fact the sweep never changes."""
    ttl = rec.get("ttl_seconds")
    if status != "ACTIVE" or ttl is None:
        return None
    # _epoch(_iso(t)) without the formatting (and without filling _iso's cache)
    return datetime.fromtimestamp(rec["ingested_at"], timezone.utc).timestamp() + ttl


def _due_bytes(due: float) -> bytes:
    """An f64 as 8 bytes that sort like the numbers (sign bit flipped, negatives
    inverted), so the expiry index is read in order of due time."""
    bits = _U64.unpack(struct.pack(">d", due))[0]
    return _U64.pack(bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63)


def _due_of_bytes(raw: bytes) -> float:
    bits = _U64.unpack(raw)[0]
    bits = bits ^ (1 << 63) if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
    return struct.unpack(">d", _U64.pack(bits))[0]


def _component(fact_id: str, content_hash: str, status: str, modified: float) -> int:
    text = f"{fact_id}:{content_hash}:{status}:{modified!r}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


def _prefix_items(txn: Any, db: Any, prefix: bytes) -> Iterable[tuple[bytes, bytes]]:
    cursor = txn.cursor(db=db)
    if not cursor.set_range(prefix):
        return
    for key, value in cursor.iternext():
        if not key.startswith(prefix):
            return
        yield key, value


class NativeBackend(CKFBackend):
    """The default ``crp-native`` backend: LMDB + hnswlib (see the module doc)."""

    name = "crp-native"

    def __init__(self, path: str | os.PathLike[str], *, model_id: str | None, dim: int | None,
                 embedder_name: str | None = None, m: int = 16, ef_construction: int = 200,
                 ef_search: int = 100, random_seed: int = 100, threads: int = 1,
                 map_size: int = 1 << 30, auto_ef: bool = True) -> None:
        self._root = os.path.abspath(os.fspath(path))
        if os.path.exists(self._root) and not os.path.isdir(self._root):
            raise StoreError(f"CKF path {self._root} is a file; pass a directory (created "
                             "if missing), e.g. <store>/ckf")
        self._hnsw_dir = os.path.join(self._root, "hnsw")
        self._db = _FactDb(os.path.join(self._root, "db"), map_size=map_size)
        self._lock = threading.RLock()
        self._mems: dict[str, _NsMem] = {}
        # Read paths parse the namespace record once per change, not once per call
        # (it holds the community labels: tens of kB at 100k facts).
        self._infos: dict[str, tuple[bytes, dict[str, Any]]] = {}
        # fact id <-> LMDB key (ns + seq): fixed when a fact is added, so never stale.
        self._fkeys: dict[str, bytes] = {}
        self._names: dict[bytes, str] = {}
        self._written: list[bytes] = []     # record keys put by the running write
        self._token = object()              # the owner of the FactIds this backend hands out
        # fact key -> (record, access, membership bytes, label keywords, Fact): a
        # retrieval reads the same few facts again and again, and decoding the JSON
        # record costs more than reading the three values that validate the entry
        self._decoded: dict[bytes, tuple[bytes, bytes | None, bytes | None, Any, Fact]] = {}
        self.threads = max(1, int(threads))
        try:
            os.makedirs(self._hnsw_dir, exist_ok=True)
            self._terms = self._db.text_index("terms")
            config = {"model_id": model_id, "dim": None if dim is None else int(dim),
                      "embedder": embedder_name,
                      "m": int(m), "ef_construction": int(ef_construction),
                      "random_seed": int(random_seed)}
            self.config = self._db.write(lambda txn: self._init_config(txn, config))
        except BaseException:
            self._db.close()
            raise
        self.model_id = self.config["model_id"]
        self.dim = int(self.config["dim"])
        self.ef_search = int(ef_search)
        self.auto_ef = bool(auto_ef)

    def _init_config(self, txn: Any, config: dict[str, Any]) -> dict[str, Any]:
        meta = self._db.dbs[b"meta"]
        raw = txn.get(b"config", db=meta)
        if raw is None and config["model_id"] is None:
            raise StoreError(f"no CKF at {self._root} yet; create it with an embedder "
                             "(FactStore(path, embedder='hashing'))")
        if raw is None:
            txn.put(b"config", json.dumps(config).encode(), db=meta)
            txn.put(b"next_seq", _U64.pack(1), db=meta)
            txn.put(b"next_ns", _U64.pack(1), db=meta)
            return config
        found = json.loads(raw)
        if config["model_id"] is None:
            return found
        if found["model_id"] != config["model_id"] or found["dim"] != config["dim"]:
            raise EmbeddingModelMismatchError(
                f"the CKF at {self._root} holds vectors of {found['model_id']!r} "
                f"(dim {found['dim']}), not {config['model_id']!r} (dim {config['dim']}); "
                f"open it with embedder={found.get('embedder') or found['model_id']!r}, or "
                "build a new store and ingest again with the new model (SPEC-009 §3.4)")
        return found

    @property
    def location(self) -> str:
        return self._root

    @staticmethod
    def exists(path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` already holds a native CKF."""
        return os.path.exists(os.path.join(os.fspath(path), "db", "data.mdb"))

    # -- namespaces and the in-memory index ----------------------------------------

    def _info(self, txn: Any, namespace: str) -> dict[str, Any] | None:
        raw = txn.get(namespace.encode(), db=self._db.dbs[b"ns"])
        return None if raw is None else json.loads(raw)

    def _info_ro(self, txn: Any, namespace: str) -> dict[str, Any] | None:
        """:meth:`_info` for readers: a shared dict, not to be changed."""
        raw = txn.get(namespace.encode(), db=self._db.dbs[b"ns"])
        if raw is None:
            return None
        found = self._infos.get(namespace)
        if found is not None and found[0] == raw:
            return found[1]
        info = json.loads(raw)
        self._infos[namespace] = (raw, info)
        return info

    def _fkey_of(self, txn: Any, info: dict[str, Any] | None, fact_id: Any) -> bytes | None:
        """The LMDB key of ``fact_id`` if it is a fact of the namespace of ``info``."""
        if info is None or not isinstance(fact_id, str):
            return None
        fkey = self._fkeys.get(fact_id)
        if fkey is None:
            fkey = txn.get(fact_id.encode(), db=self._db.dbs[b"ids"])
            if fkey is None:
                return None
            self._remember(fact_id, fkey)
        return fkey if _U64.unpack(fkey[:8])[0] == info["id"] else None

    def _fkeys_of(self, txn: Any, info: dict[str, Any] | None,
                  fact_ids: Sequence[str]) -> list[bytes | None]:
        """:meth:`_fkey_of` of many ids (the cache hits without a call each)."""
        if info is None:
            return [None] * len(fact_ids)
        nsb = _U64.pack(info["id"])
        seqs = self._seqs_by_name(info["id"], fact_ids)
        if seqs is not None:
            keys = np.empty((len(seqs), 2), dtype=">u8")
            keys[:, 0], keys[:, 1] = info["id"], np.maximum(seqs, 0)
            buf = keys.tobytes()
            found = [buf[16 * i:16 * i + 16] if s >= 0 else None
                     for i, s in enumerate(seqs.tolist())]
        else:
            found = [None] * len(fact_ids)
        cached = self._fkeys.get
        out: list[bytes | None] = []
        for fid, fkey in zip(fact_ids, found):
            if fkey is None:
                fkey = cached(fid) if isinstance(fid, str) else None
                if fkey is None:
                    fkey = self._fkey_of(txn, info, fid)
            out.append(fkey if fkey is not None and fkey[:8] == nsb else None)
        return out

    def _seqs_by_name(self, nid: int, fact_ids: Sequence[str]) -> np.ndarray | None:
        """Seqs of ``fact_ids`` in namespace ``nid`` from its in-memory id table (-1
        where it has none: ids added since it was built, other namespaces, not
        ids), or None when there is no table."""
        if isinstance(fact_ids, FactIds) and fact_ids.owner == (self._token, nid):
            return fact_ids.handles.copy()
        mem = next((m for m in self._mems.values() if m.nid == nid), None)
        if mem is None or mem.seq_of is None:
            return None
        last = mem.resolved
        if last is not None and len(last[0]) == len(fact_ids) and \
                all(a is b for a, b in zip(last[0], fact_ids)):
            return last[1].copy()
        get = mem.seq_of.get
        try:
            found = np.array([get(f, -1) for f in fact_ids], dtype=np.int64)
        except TypeError:           # an unhashable "id"
            return None
        if len(fact_ids) >= 16:
            mem.resolved = (list(fact_ids), found.copy())
        return found

    def _name_of(self, txn: Any, fkey: bytes) -> str:
        """The fact id stored under ``fkey`` (which must exist)."""
        name = self._names.get(fkey)
        if name is None:
            name = txn.get(fkey, db=self._db.dbs[b"facts"])[:_ID_LEN].decode()
            self._remember(name, fkey)
        return name

    def _remember(self, fact_id: str, fkey: bytes) -> None:
        if len(self._names) >= ID_CACHE_ENTRIES:
            self._fkeys.clear()
            self._names.clear()
        self._fkeys[fact_id] = fkey
        self._names[fkey] = fact_id

    def _put_info(self, txn: Any, namespace: str, info: dict[str, Any]) -> None:
        txn.put(namespace.encode(), json.dumps(info).encode(), db=self._db.dbs[b"ns"])

    def _info_for_write(self, txn: Any, namespace: str) -> dict[str, Any]:
        info = self._info(txn, namespace)
        if info is not None:
            return info
        meta = self._db.dbs[b"meta"]
        nid = _U64.unpack(txn.get(b"next_ns", db=meta))[0]
        txn.put(b"next_ns", _U64.pack(nid + 1), db=meta)
        info = {"id": nid, "gen": 0, "saved_gen": 0, "changed": 0, "adds": 0,
                "digest": "0", "cdigest": "", "labels": {}, "edges": 0, "last_mod": 0.0,
                "counts": {s: 0 for s in STATUSES}, "expiry": 1}
        self._put_info(txn, namespace, info)
        return info

    def _index_path(self, nid: int) -> str:
        return os.path.join(self._hnsw_dir, f"ns-{nid}.bin")

    def _new_index(self, capacity: int = 1024) -> VectorIndex:
        c = self.config
        return VectorIndex(self.dim, m=c["m"], ef_construction=c["ef_construction"],
                           ef_search=self.ef_search, random_seed=c["random_seed"],
                           capacity=capacity, threads=self.threads)

    def _mem(self, txn: Any, namespace: str, info: dict[str, Any] | None = None) -> _NsMem | None:
        """The namespace's in-memory state, loaded and brought up to date."""
        if info is None:
            info = self._info_ro(txn, namespace)
            if info is None:
                return None
        mem = self._mems.get(namespace)
        if mem is None or info["saved_gen"] > mem.applied_gen:
            mem = self._load(txn, namespace, info)
            self._mems[namespace] = mem
        if info["gen"] > mem.applied_gen:
            self._replay(txn, mem, info["gen"])
        ef = self._ef_for(info)
        if mem.index.ef_search != ef:
            mem.index.set_ef(ef)
        return mem

    def _ef_for(self, info: dict[str, Any]) -> int:
        """ef_search of a namespace's index: the one tuned at its last snapshot
        (:meth:`VectorIndex.tune_ef`, never above ``ef_search``), else ``ef_search``."""
        tuned = info.get("ef") if self.auto_ef else None
        return self.ef_search if tuned is None else min(int(tuned), self.ef_search)

    def _tune(self, info: dict[str, Any], mem: _NsMem) -> None:
        """Tune ef at a snapshot; small indexes keep ``ef_search`` (searching them is cheap)."""
        if self.auto_ef and mem.index.visible >= AUTO_EF_MIN:
            info["ef"] = mem.index.tune_ef(self.ef_search, seed=mem.nid)
        else:
            info.pop("ef", None)
        mem.index.set_ef(self._ef_for(info))

    def _load(self, txn: Any, namespace: str, info: dict[str, Any]) -> _NsMem:
        nid = info["id"]
        hidden = {_U64.unpack(k[8:])[0] for k, _ in
                  _prefix_items(txn, self._db.dbs[b"hidden"], _U64.pack(nid))}
        path = self._index_path(nid)
        index = None
        if os.path.exists(path):
            try:
                index = VectorIndex.load(path, self.dim, ef_search=self.ef_search,
                                         threads=self.threads, hidden=hidden)
            except StoreError as exc:
                warnings.warn(f"{exc}; rebuilding it", RuntimeWarning, stacklevel=4)
        if index is None:
            mem = _NsMem(namespace, nid, self._new_index(), 0, hidden)
            self._fill(txn, mem)
            mem.applied_gen = info["gen"]
            mem.ops_since_save = info["gen"] - info["saved_gen"] + 1
            return mem
        mem = _NsMem(namespace, nid, index, info["saved_gen"], hidden)
        return mem

    def _visible_vectors(self, txn: Any, mem: _NsMem,
                         chunk: int) -> Iterator[tuple[list[int], list[bytes]]]:
        """The stored vectors of the namespace's retrievable facts, in seq order, as
        ``(labels, raw float32 rows)`` chunks of at most ``chunk``."""
        labels: list[int] = []
        rows: list[bytes] = []
        for key, value in _prefix_items(txn, self._db.dbs[b"vectors"], _U64.pack(mem.nid)):
            seq = _U64.unpack(key[8:])[0]
            if seq in mem.hidden:
                continue
            labels.append(seq)
            rows.append(value)
            if len(labels) >= chunk:
                yield labels, rows
                labels, rows = [], []
        if labels:
            yield labels, rows

    def _fill(self, txn: Any, mem: _NsMem, chunk: int = 4096) -> None:
        """Add every stored vector of a retrievable fact of the namespace, in seq order."""
        for labels, rows in self._visible_vectors(txn, mem, chunk):
            self._add_rows(mem.index, labels, rows)

    def _add_rows(self, index: VectorIndex, labels: list[int], rows: list[bytes]) -> None:
        vecs = np.frombuffer(b"".join(rows), dtype=np.float32).reshape(len(rows), self.dim)
        index.add(labels, vecs)

    def _replay(self, txn: Any, mem: _NsMem, upto: int) -> None:
        start = _U64.pack(mem.nid) + _U64.pack(mem.applied_gen + 1)
        cursor = txn.cursor(db=self._db.dbs[b"ixlog"])
        prefix = _U64.pack(mem.nid)
        if cursor.set_range(start):
            for key, value in cursor.iternext():
                if not key.startswith(prefix):
                    break
                gen = _U64.unpack(key[8:])[0]
                if gen > upto:
                    break
                self._apply(txn, mem, value[:1], _U64.unpack(value[1:9])[0])
                mem.ops_since_save += 1
        mem.applied_gen = upto

    def _apply(self, txn: Any, mem: _NsMem, op: bytes, seq: int) -> None:
        if op == b"H":
            mem.hidden.add(seq)
            mem.index.hide(seq)
            return
        mem.hidden.discard(seq)
        if not mem.index.unhide(seq):
            raw = txn.get(_fkey(mem.nid, seq), db=self._db.dbs[b"vectors"])
            if raw is not None:
                mem.index.add([seq], np.frombuffer(raw, dtype=np.float32)[None, :])

    def _log(self, txn: Any, info: dict[str, Any], op: bytes, seq: int) -> None:
        info["gen"] += 1
        txn.put(_U64.pack(info["id"]) + _U64.pack(info["gen"]), op + _U64.pack(seq),
                db=self._db.dbs[b"ixlog"])

    def _after_write(self, namespace: str) -> None:
        """Rebuild (SPEC-009 §3.3) or snapshot the index when due."""
        mem = self._mems.get(namespace)
        if mem is None:
            return
        info = self._db.read(lambda txn: self._info_ro(txn, namespace))
        if info["changed"] > REBUILD_FRACTION * max(1, len(mem.index)):
            self.rebuild_index(namespace)
        elif mem.ops_since_save >= max(SAVE_EVERY, len(mem.index) // 4):
            self._save(namespace)

    def _save(self, namespace: str) -> None:
        def fn(txn: Any) -> None:
            mem = self._mem(txn, namespace)
            if mem is None:
                return
            info = self._info(txn, namespace)
            self._tune(info, mem)
            mem.index.save(self._index_path(mem.nid))
            self._settle_graph(txn, mem)    # before the log it would catch up from goes
            self._prune(txn, info, mem.applied_gen)
            info["saved_gen"] = mem.applied_gen
            self._put_info(txn, namespace, info)
            mem.ops_since_save = 0
        with self._lock:
            self._db.write(fn)

    # -- the walk graph ------------------------------------------------------------------

    def _edge_row(self, cursor: Any, nid: int, seq: int,
                  hidden: set[int] | None) -> tuple[list[int], list[float]]:
        """The stored edges of ``seq``: neighbours and weights, hidden ones left out
        (all of them with ``hidden=None``)."""
        prefix = _U64.pack(nid) + _U64.pack(seq)
        nbrs: list[int] = []
        weights: list[float] = []
        if cursor.set_range(prefix):
            for key, value in cursor.iternext():
                if key[:16] != prefix:
                    break
                other = _U64.unpack(key[16:])[0]
                if hidden is None or other not in hidden:
                    nbrs.append(other)
                    weights.append(_F32.unpack(value[:4])[0])
        return nbrs, weights

    def _build_graph(self, txn: Any, mem: _NsMem) -> Adjacency:
        """Every edge between visible facts of the namespace, read in one pass."""
        nsb = _U64.pack(mem.nid)
        keys: list[bytes] = []
        weights: list[bytes] = []
        cursor = txn.cursor(db=self._db.dbs[b"edges"])
        if cursor.set_range(nsb):
            for key, value in cursor.iternext():
                if key[:8] != nsb:
                    break
                keys.append(key)
                weights.append(value[:4])
        triples = np.frombuffer(b"".join(keys), dtype=">u8").reshape(-1, 3)
        src = triples[:, 1].astype(np.int64)
        dst = triples[:, 2].astype(np.int64)
        w = np.frombuffer(b"".join(weights), dtype="<f4")
        if mem.hidden and len(src):
            hidden = np.fromiter(mem.hidden, dtype=np.int64, count=len(mem.hidden))
            keep = ~(np.isin(src, hidden) | np.isin(dst, hidden))
            src, dst, w = src[keep], dst[keep], w[keep]
        self._scan_facts(txn, mem)
        return Adjacency.from_edges(src, dst, w, gen=mem.applied_gen)

    def _scan_facts(self, txn: Any, mem: _NsMem) -> None:
        """Read the ids and scoring heads of every fact of the namespace in one pass.

        A walk names hundreds of facts and scores hundreds: array lookups by seq,
        not an LMDB read each (random reads into the map cost microseconds each),
        and ids found by a sorted array, not the id cache's dict, which misses the
        CPU cache on nearly every one of a walk's ids.
        """
        stamp = self._info_ro(txn, mem.name)["last_mod"]
        seqs: list[bytes] = []
        heads: list[bytes] = []
        for key, value in _prefix_items(txn, self._db.dbs[b"facts"], _U64.pack(mem.nid)):
            seqs.append(key[8:])
            heads.append(value[:_JSON_AT])
        rows = np.frombuffer(b"".join(heads), dtype=_HEAD_ROW)
        labels = np.frombuffer(b"".join(seqs), dtype=">u8").astype(np.int64)
        mem.id_seqs = LabelPositions(labels)
        names = [n.decode() for n in rows["id"].tolist()]
        mem.id_names = np.array(names, dtype=object)
        mem.seq_of = dict(zip(names, labels.tolist()))
        mem.resolved = None
        mem.heads = _Heads(mem.id_seqs, rows, stamp)

    def _ids_of(self, txn: Any, mem: _NsMem, seqs: np.ndarray) -> list[str]:
        """Fact ids of ``seqs`` (from the array built with the graph where it has them)."""
        seqs = np.asarray(seqs, dtype=np.int64)
        if mem.id_seqs is None or not len(seqs):
            pos = np.full(len(seqs), -1, dtype=np.int64)
        else:
            pos = mem.id_seqs.find(seqs)
            if (pos >= 0).all():
                return mem.id_names[pos].tolist()
        nsb = _U64.pack(mem.nid)
        return [mem.id_names[p] if p >= 0 else self._name_of(txn, nsb + _U64.pack(seq))
                for p, seq in zip(pos.tolist(), seqs.tolist())]

    def _sync_graph(self, txn: Any, mem: _NsMem) -> Adjacency | None:
        """Bring ``mem.graph`` (if built) up to ``mem.applied_gen``.

        Edges change only together with a logged operation on one of their
        ends (a link on add or re-embed, an unlink on erase, a hide or unhide),
        so the rows to re-read are those of each logged fact and of its
        neighbours before and after.  A log already pruned past the graph's
        generation means a full rebuild.
        """
        graph = mem.graph
        if graph is None or graph.gen == mem.applied_gen:
            return graph
        seqs = self._logged(txn, mem, graph.gen)
        if seqs is None:
            mem.graph = self._build_graph(txn, mem)
            return mem.graph
        edges = txn.cursor(db=self._db.dbs[b"edges"])
        affected: set[int] = set()
        for seq in set(seqs):
            affected.add(seq)
            affected.update(graph.row(seq)[0].tolist())
            affected.update(self._edge_row(edges, mem.nid, seq, None)[0])
        hidden = mem.hidden
        graph.set_rows({x: (([], []) if x in hidden else self._edge_row(edges, mem.nid, x, hidden))
                        for x in affected})
        graph.gen = mem.applied_gen
        return graph

    def _logged(self, txn: Any, mem: _NsMem, since: int) -> list[int] | None:
        """The seqs of the logged operations after generation ``since`` up to
        ``mem.applied_gen``, or None when the log no longer holds them all."""
        seqs: list[int] = []
        start = _U64.pack(mem.nid) + _U64.pack(since + 1)
        cursor = txn.cursor(db=self._db.dbs[b"ixlog"])
        expect = since + 1
        if cursor.set_range(start):
            for key, value in cursor.iternext():
                gen = _U64.unpack(key[8:])[0] if key[:8] == start[:8] else None
                if gen is None or gen > mem.applied_gen:
                    break
                if gen != expect:
                    break
                seqs.append(_U64.unpack(value[1:9])[0])
                expect += 1
        return seqs if expect == mem.applied_gen + 1 else None

    def _build_sketch(self, txn: Any, mem: _NsMem, chunk: int = 2048) -> VectorSketch:
        """The sketch of every visible fact's stored vector, read in one pass."""
        chunks = ((labels, np.frombuffer(b"".join(rows), dtype=np.float32))
                  for labels, rows in self._visible_vectors(txn, mem, chunk))
        return VectorSketch.build(self.dim, chunks, gen=mem.applied_gen)

    def _sync_sketch(self, txn: Any, mem: _NsMem) -> VectorSketch | None:
        """Bring ``mem.sketch`` (if built) up to ``mem.applied_gen``: a vector changes
        only with a logged operation on its fact (add, re-embed, hide, unhide)."""
        sketch = mem.sketch
        if sketch is None or sketch.gen == mem.applied_gen:
            return sketch
        seqs = self._logged(txn, mem, sketch.gen)
        if seqs is None:
            mem.sketch = self._build_sketch(txn, mem)
            return mem.sketch
        vectors = self._db.dbs[b"vectors"]
        put: list[int] = []
        rows: list[bytes] = []
        drop: list[int] = []
        for seq in sorted(set(seqs)):
            raw = None if seq in mem.hidden else txn.get(_fkey(mem.nid, seq), db=vectors)
            if raw is None:
                drop.append(seq)
            else:
                put.append(seq)
                rows.append(raw)
        sketch.update(put, np.frombuffer(b"".join(rows), dtype=np.float32)
                      .reshape(len(rows), self.dim), drop)
        sketch.gen = mem.applied_gen
        return sketch

    def _settle_graph(self, txn: Any, mem: _NsMem) -> None:
        """Catch the graph and the sketch up, or drop them when far behind (one scan
        at the next walk is cheaper than re-reading that many rows one by one)."""
        graph = mem.graph
        if graph is not None and mem.applied_gen - graph.gen > max(1000, len(graph) // 10):
            mem.graph = None
        sketch = mem.sketch
        if sketch is not None and mem.applied_gen - sketch.gen > max(1000, len(sketch) // 10):
            mem.sketch = None
        self._sync_graph(txn, mem)
        self._sync_sketch(txn, mem)

    def _walk_graph(self, txn: Any, mem: _NsMem) -> Adjacency:
        if mem.graph is None:
            mem.graph = self._build_graph(txn, mem)
        elif mem.heads is None or mem.heads.stamp != self._info_ro(txn, mem.name)["last_mod"]:
            self._scan_facts(txn, mem)      # a write this backend did not make
        return self._sync_graph(txn, mem)

    def _prune(self, txn: Any, info: dict[str, Any], upto: int) -> None:
        prefix = _U64.pack(info["id"])
        cursor = txn.cursor(db=self._db.dbs[b"ixlog"])
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix) and _U64.unpack(cursor.key()[8:])[0] <= upto:
                if not cursor.delete():
                    break

    def rebuild_index(self, namespace: str) -> None:
        def fn(txn: Any) -> None:
            info = self._info(txn, namespace)
            if info is None:
                return
            old = self._mem(txn, namespace, info)
            mem = _NsMem(namespace, info["id"], self._new_index(max(1024, old.index.visible + 1024)),
                         info["gen"], set(old.hidden))
            self._fill(txn, mem)
            self._tune(info, mem)
            mem.index.save(self._index_path(mem.nid))
            self._settle_graph(txn, old)
            mem.graph, mem.id_seqs, mem.id_names = old.graph, old.id_seqs, old.id_names
            mem.sketch, mem.seq_of, mem.heads = old.sketch, old.seq_of, old.heads
            self._prune(txn, info, info["gen"])
            info["saved_gen"] = info["gen"]
            info["changed"] = 0
            self._put_info(txn, namespace, info)
            self._mems[namespace] = mem
        with self._lock:
            self._db.write(fn)

    # -- shared write steps ----------------------------------------------------------------

    def _record(self, txn: Any, fkey: bytes) -> tuple[str, str, dict[str, Any]] | None:
        raw = txn.get(fkey, db=self._db.dbs[b"facts"])
        if raw is None:
            return None
        return raw[:_ID_LEN].decode(), _BYTE_STATUS[raw[_ID_LEN:_ID_LEN + 1]], \
            json.loads(raw[_JSON_AT:])

    def _put_record(self, txn: Any, fkey: bytes, fact_id: str, rec: dict[str, Any]) -> None:
        self._written.append(fkey)
        ttl = rec.get("ttl_seconds")
        head = _HEAD.pack(rec["importance"], rec["modified_at"], math.nan if ttl is None else ttl)
        txn.put(fkey, fact_id.encode() + _STATUS_BYTE[rec["status"]] + head +
                json.dumps(rec).encode(), db=self._db.dbs[b"facts"])

    def _move_due(self, txn: Any, fkey: bytes, fact_id: str, old: float | None,
                  new: float | None) -> None:
        """Keep the expiry index entry of one fact at its due time (or none)."""
        if old == new:
            return
        nsb, seq = fkey[:8], fkey[8:]
        if old is not None:
            txn.delete(nsb + _due_bytes(old) + seq, db=self._db.dbs[b"expiry"])
        if new is not None:
            txn.put(nsb + _due_bytes(new) + seq, fact_id.encode(), db=self._db.dbs[b"expiry"])

    def _locate(self, txn: Any, info: dict[str, Any], fact_id: str) -> bytes:
        raw = txn.get(fact_id.encode(), db=self._db.dbs[b"ids"]) if isinstance(fact_id, str) else None
        if raw is None or _U64.unpack(raw[:8])[0] != info["id"]:
            raise UnknownFactError(f"no fact {fact_id!r} in this namespace; check the id "
                                   "(fact ids are UUIDs) and the namespace")
        return raw

    def _tick(self, info: dict[str, Any], now: float) -> float:
        """A modification time strictly after the namespace's last one."""
        t = max(float(now), info["last_mod"] + 1e-6)
        info["last_mod"] = t
        return t

    def _redigest(self, info: dict[str, Any], old: int | None, new: int | None) -> None:
        d = int(info["digest"], 16)
        if old is not None:
            d -= old
        if new is not None:
            d += new
        info["digest"] = format(d % _MOD, "x")

    def _link(self, txn: Any, info: dict[str, Any], mem: _NsMem, seqs: Sequence[int],
              ids: Sequence[str], vectors: np.ndarray, knn: int, threshold: float) -> None:
        """Similarity edges (SPEC-009 §5.2) of newly indexed ``seqs``, both directions."""
        if not len(seqs) or knn <= 0:
            return
        labels, sims = mem.index.search(vectors, knn + 1, threads=self.threads)
        edges_db = self._db.dbs[b"edges"]
        nsb = _U64.pack(info["id"])
        id_of = dict(zip(seqs, ids))
        for row, seq in enumerate(seqs):
            for label, sim in zip(labels[row], sims[row]):
                other = int(label)
                if other == seq or sim < threshold:
                    continue
                other_id = id_of.get(other)
                if other_id is None:
                    other_id = txn.get(_fkey(info["id"], other),
                                       db=self._db.dbs[b"facts"])[:_ID_LEN].decode()
                w = _F32.pack(float(sim))
                if txn.put(nsb + _U64.pack(seq) + _U64.pack(other), w + other_id.encode(),
                           db=edges_db, overwrite=False):
                    info["edges"] += 1
                txn.put(nsb + _U64.pack(other) + _U64.pack(seq), w + id_of[seq].encode(),
                        db=edges_db, overwrite=False)

    def _unlink(self, txn: Any, info: dict[str, Any], seq: int) -> None:
        edges_db = self._db.dbs[b"edges"]
        nsb = _U64.pack(info["id"])
        prefix = nsb + _U64.pack(seq)
        others = [key[16:24] for key, _ in _prefix_items(txn, edges_db, prefix)]
        for other in others:
            txn.delete(prefix + other, db=edges_db)
            txn.delete(nsb + other + _U64.pack(seq), db=edges_db)
        info["edges"] -= len(others)

    def _status_change(self, txn: Any, info: dict[str, Any], fkey: bytes, status: str,
                       now: float, only_if: Callable[[str, dict[str, Any]], bool] | None = None
                       ) -> bool:
        fact_id, old, rec = self._record(txn, fkey)
        if old == status or (only_if is not None and not only_if(old, rec)):
            return False
        if status not in TRANSITIONS[old]:
            raise StatusTransitionError(
                f"fact {fact_id} is {old}; it cannot become {status} (SPEC-009 §2.2). "
                + ("A DELETED fact is erased for good; add it again as a new fact"
                   if old == "DELETED" else
                   f"allowed from {old}: {', '.join(sorted(TRANSITIONS[old]))}"))
        seq = _U64.unpack(fkey[8:])[0]
        old_c = _component(fact_id, rec["content_hash"], old, rec["modified_at"])
        self._move_due(txn, fkey, fact_id, _due(old, rec), _due(status, rec))
        rec["status"] = status
        rec["modified_at"] = self._tick(info, now)
        if status == "DELETED":
            self._erase(txn, info, fkey, rec)
        self._put_record(txn, fkey, fact_id, rec)
        self._redigest(info, old_c, _component(fact_id, rec["content_hash"], status,
                                               rec["modified_at"]))
        info["counts"][old] -= 1
        info["counts"][status] += 1
        if old in RETRIEVABLE and status not in RETRIEVABLE:
            txn.put(fkey, _STATUS_BYTE[status], db=self._db.dbs[b"hidden"])
            self._log(txn, info, b"H", seq)
            info["changed"] += 1
        elif old not in RETRIEVABLE and status in RETRIEVABLE:
            txn.delete(fkey, db=self._db.dbs[b"hidden"])
            self._log(txn, info, b"A", seq)
        elif status not in RETRIEVABLE:
            txn.put(fkey, _STATUS_BYTE[status], db=self._db.dbs[b"hidden"])
            self._log(txn, info, b"H", seq)      # idempotent; tells caches the edges went
        return True

    def _erase(self, txn: Any, info: dict[str, Any], fkey: bytes, rec: dict[str, Any]) -> None:
        """Erasure (SPEC-009 §8.3): content, vector, key, terms, edges go; a tombstone stays."""
        seq = _U64.unpack(fkey[8:])[0]
        self._terms.remove(txn, info["id"], seq, rec["content"])
        if rec.get("key"):
            txn.delete(_U64.pack(info["id"]) + rec["key"].encode(), db=self._db.dbs[b"keys"])
        txn.delete(fkey, db=self._db.dbs[b"vectors"])
        txn.delete(fkey, db=self._db.dbs[b"members"])
        txn.delete(fkey, db=self._db.dbs[b"access"])
        self._unlink(txn, info, seq)
        rec.update(content="", content_hash="", key=None, metadata={}, source_location=None)

    def _write(self, namespace: str, fn: Callable[[Any, dict[str, Any], _NsMem], Any],
               undo: Callable[[], None] | None = None) -> Any:
        """Run ``fn(txn, info, mem)`` in one write transaction; ``info`` is saved after it.

        In-memory index changes made by ``fn`` itself are kept when the
        transaction commits (``undo`` reverts them when it does not); the log
        entries it wrote are marked applied.  Index operations it only logged
        are applied afterwards by replay.
        """
        state: dict[str, Any] = {}

        def run(txn: Any) -> Any:
            info = self._info_for_write(txn, namespace)
            mem = self._mem(txn, namespace, info)
            state["before"], state["mod_before"] = info["gen"], info["last_mod"]
            self._written = []
            result = fn(txn, info, mem)
            self._put_info(txn, namespace, info)
            state["mem"], state["after"], state["direct"] = mem, info["gen"], result
            state["mod_after"] = info["last_mod"]
            return result

        with self._lock:
            try:
                result = self._db.write(run)
            except BaseException:
                if undo is not None:
                    undo()
                raise
            mem = state["mem"]
            heads = mem.heads
            if heads is not None:       # the records this write changed are read again
                if heads.stamp == state["mod_before"]:
                    heads.stale(_U64.unpack(k[8:])[0] for k in self._written)
                    heads.stamp = state["mod_after"]
                else:
                    mem.heads = None
            if isinstance(result, _Applied):
                mem.applied_gen = state["after"]
                mem.ops_since_save += state["after"] - state["before"]
                result = result.value
            else:
                self._db.read(lambda txn: self._mem(txn, namespace))
            self._after_write(namespace)
            return result

    # -- writing ---------------------------------------------------------------------

    def add_facts(self, namespace: str, records: Sequence[Mapping[str, Any]],
                  vectors: np.ndarray, *, knn: int, edge_threshold: float, now: float,
                  source: Mapping[str, Any] | None = None,
                  supersede: Sequence[str] = ()) -> list[str]:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(records), self.dim)
        added: list[int] = []
        mems: list[_NsMem] = []

        def fn(txn: Any, info: dict[str, Any], mem: _NsMem) -> _Applied:
            mems.append(mem)
            nid = info["id"]
            nsb = _U64.pack(nid)
            keys_db = self._db.dbs[b"keys"]
            taken: set[str] = set()
            for rec in records:
                key = rec.get("key")
                if key is None:
                    continue
                if key in taken or txn.get(nsb + key.encode(), db=keys_db) is not None:
                    raise FactKeyExistsError(
                        f"key {key!r} is already taken in namespace {namespace!r}; change its "
                        "fact with update_fact(key, content=...), or delete it first")
                taken.add(key)
            supersede_keys = [self._locate(txn, info, fid) for fid in supersede]
            meta = self._db.dbs[b"meta"]
            first = _U64.unpack(txn.get(b"next_seq", db=meta))[0]
            seqs = list(range(first, first + len(records)))
            txn.put(b"next_seq", _U64.pack(first + len(records)), db=meta)
            ids = [str(uuid.uuid4()) for _ in records]
            added[:] = seqs
            mem.index.add(seqs, vectors)
            self._link(txn, info, mem, seqs, ids, vectors, knn, edge_threshold)
            for seq, fact_id, rec0, vec in zip(seqs, ids, records, vectors):
                fkey = _fkey(nid, seq)
                t = self._tick(info, now)
                rec = dict(rec0, status="ACTIVE", ingested_at=t, modified_at=t)
                self._put_record(txn, fkey, fact_id, rec)
                self._move_due(txn, fkey, fact_id, None, _due("ACTIVE", rec))
                txn.put(fact_id.encode(), fkey, db=self._db.dbs[b"ids"])
                txn.put(fkey, vec.tobytes(), db=self._db.dbs[b"vectors"])
                if rec.get("key") is not None:
                    txn.put(nsb + rec["key"].encode(), fkey, db=keys_db)
                self._terms.add(txn, nid, seq, rec["content"])
                self._log(txn, info, b"A", seq)
                self._redigest(info, None, _component(fact_id, rec["content_hash"], "ACTIVE", t))
            info["counts"]["ACTIVE"] += len(records)
            info["adds"] += len(records)
            for fkey in supersede_keys:
                if self._record(txn, fkey)[1] == "ACTIVE":
                    self._status_change(txn, info, fkey, "STALE", now)
            if source is not None:
                src = dict(source, fact_ids=list(ids), fact_count=len(ids), ingested_at=now)
                txn.put(nsb + src["source_id"].encode(), json.dumps(src).encode(),
                        db=self._db.dbs[b"sources"])
            return _Applied(ids)

        def undo() -> None:
            for mem in mems[-1:]:
                for seq in added:
                    mem.index.hide(seq)

        return self._write(namespace, fn, undo)

    def update_fact(self, namespace: str, fact_id: str, changes: Mapping[str, Any],
                    vector: np.ndarray | None, *, knn: int, edge_threshold: float,
                    now: float) -> Fact:
        saved: dict[str, Any] = {}

        def fn(txn: Any, info: dict[str, Any], mem: _NsMem) -> _Applied:
            fkey = self._locate(txn, info, fact_id)
            _, status, rec = self._record(txn, fkey)
            if status == "DELETED":
                raise StatusTransitionError(
                    f"fact {fact_id} is DELETED (erased); add its content again as a new fact")
            seq = _U64.unpack(fkey[8:])[0]
            nid = info["id"]
            nsb = _U64.pack(nid)
            keys_db = self._db.dbs[b"keys"]
            if "key" in changes and changes["key"] != rec.get("key"):
                new_key = changes["key"]
                if new_key is not None and txn.get(nsb + new_key.encode(), db=keys_db) is not None:
                    raise FactKeyExistsError(
                        f"key {new_key!r} is already taken in namespace {namespace!r}; "
                        "pick another or delete that fact first")
                if rec.get("key") is not None:
                    txn.delete(nsb + rec["key"].encode(), db=keys_db)
                if new_key is not None:
                    txn.put(nsb + new_key.encode(), fkey, db=keys_db)
            old_c = _component(fact_id, rec["content_hash"], status, rec["modified_at"])
            due_before = _due(status, rec)
            if vector is not None:
                self._terms.remove(txn, nid, seq, rec["content"])
                self._terms.add(txn, nid, seq, changes["content"])
                old_vec = txn.get(fkey, db=self._db.dbs[b"vectors"])
                saved.update(mem=mem, seq=seq, vec=old_vec, hidden=status not in RETRIEVABLE)
                vec = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self.dim)
                txn.put(fkey, vec.tobytes(), db=self._db.dbs[b"vectors"])
                self._unlink(txn, info, seq)
                mem.index.add([seq], vec)
                if status not in RETRIEVABLE:
                    mem.index.hide(seq)
                self._link(txn, info, mem, [seq], [fact_id], vec, knn, edge_threshold)
                self._log(txn, info, b"A" if status in RETRIEVABLE else b"H", seq)
                info["changed"] += 1
                if status == "STALE":   # re-ingested: current again (SPEC-009 §2.2)
                    info["counts"]["STALE"] -= 1
                    info["counts"]["ACTIVE"] += 1
                    status = rec["status"] = "ACTIVE"
            rec.update({k: v for k, v in changes.items()})
            rec["modified_at"] = self._tick(info, now)
            self._put_record(txn, fkey, fact_id, rec)
            self._move_due(txn, fkey, fact_id, due_before, _due(status, rec))
            self._redigest(info, old_c, _component(fact_id, rec["content_hash"], status,
                                                   rec["modified_at"]))
            return _Applied(fkey)

        def undo() -> None:
            if saved.get("vec") is not None:
                mem = saved["mem"]
                mem.index.add([saved["seq"]], np.frombuffer(saved["vec"], dtype=np.float32)[None, :])
                if saved["hidden"]:
                    mem.index.hide(saved["seq"])

        self._write(namespace, fn, undo)
        return self.get(namespace, [fact_id])[0]

    def set_status(self, namespace: str, fact_ids: Sequence[str], status: str, *,
                   now: float) -> int:
        def fn(txn: Any, info: dict[str, Any], mem: _NsMem) -> int:
            fkeys = [self._locate(txn, info, fid) for fid in fact_ids]
            return sum(self._status_change(txn, info, fkey, status, now) for fkey in fkeys)
        with self._lock:
            if not self._exists(namespace):
                if fact_ids:
                    raise UnknownFactError(f"no fact {fact_ids[0]!r} in namespace {namespace!r}")
                return 0
            return self._write(namespace, fn)

    def delete(self, namespace: str, fact_ids: Sequence[str], *, now: float) -> int:
        return self.set_status(namespace, fact_ids, "DELETED", now=now)

    def _exists(self, namespace: str) -> bool:
        return self._db.read(lambda txn: self._info(txn, namespace)) is not None

    def record_access(self, namespace: str, fact_ids: Sequence[str], *, now: float) -> None:
        def fn(txn: Any) -> None:
            info = self._info(txn, namespace)
            if info is None:
                raise UnknownFactError(f"namespace {namespace!r} has no facts")
            for fid in fact_ids:
                fkey = self._locate(txn, info, fid)
                raw = txn.get(fkey, db=self._db.dbs[b"access"])
                count = _ACCESS.unpack(raw)[0] if raw else 0
                txn.put(fkey, _ACCESS.pack(count + 1, float(now)), db=self._db.dbs[b"access"])
        with self._lock:
            self._db.write(fn)

    def save_communities(self, namespace: str, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], *, now: float) -> bool:
        payload = json.dumps([sorted(membership.items()),
                              sorted((int(c), list(k)) for c, k in keywords.items())])
        digest = hashlib.sha256(payload.encode()).hexdigest()

        def fn(txn: Any, info: dict[str, Any], mem: _NsMem) -> bool:
            info["adds"] = 0
            if info["cdigest"] == digest:
                return False
            members = self._db.dbs[b"members"]
            nsb = _U64.pack(info["id"])
            for key in [k for k, _ in _prefix_items(txn, members, nsb)]:
                txn.delete(key, db=members)
            for fid, cid in membership.items():
                txn.put(self._locate(txn, info, fid), _U32.pack(int(cid)), db=members)
            info["labels"] = {str(c): list(k) for c, k in keywords.items()}
            info["cdigest"] = digest
            self._tick(info, now)
            return True

        return self._write(namespace, fn)

    # -- reading -------------------------------------------------------------------------

    def _fact(self, txn: Any, info: dict[str, Any], fkey: bytes, namespace: str) -> Fact:
        dbs = self._db.dbs
        record = txn.get(fkey, db=dbs[b"facts"])
        access = txn.get(fkey, db=dbs[b"access"])
        member = txn.get(fkey, db=dbs[b"members"])
        community = _U32.unpack(member)[0] if member else None
        kws = None if community is None else info["labels"].get(str(community))
        known = self._decoded.get(fkey)
        if known is not None and known[0] == record and known[1] == access \
                and known[2] == member and known[3] == kws:
            return _fresh_copy(known[4])
        fact = self._decode_fact(record, access, community, kws, namespace)
        if len(self._decoded) >= DECODED_FACTS:
            self._decoded.clear()
        self._decoded[fkey] = (record, access, member, kws, fact)
        return _fresh_copy(fact)

    def _decode_fact(self, record: bytes, access: bytes | None, community: int | None,
                     kws: Any, namespace: str) -> Fact:
        fact_id, status = record[:_ID_LEN].decode(), _BYTE_STATUS[record[_ID_LEN:_ID_LEN + 1]]
        rec = json.loads(record[_JSON_AT:])
        count, last = _ACCESS.unpack(access) if access else (0, None)
        label = label_of(kws) if kws is not None else None
        return Fact(fact_id=fact_id, namespace=namespace, content=rec["content"],
                    content_hash=rec["content_hash"], key=rec.get("key"),
                    source_id=rec.get("source_id"), source_location=rec.get("source_location"),
                    source_type=rec["source_type"], importance=rec["importance"], status=status,
                    ttl=rec.get("ttl"), ttl_seconds=rec.get("ttl_seconds"), community=community,
                    community_label=label, ingested_at=_iso(rec["ingested_at"]),
                    modified_at=_iso(rec["modified_at"]), access_count=int(count),
                    last_accessed_at=_iso(last), metadata=rec.get("metadata") or {},
                    model_id=self.model_id)

    def get(self, namespace: str, fact_ids: Sequence[str]) -> list[Fact | None]:
        def fn(txn: Any) -> list[Fact | None]:
            info = self._info_ro(txn, namespace)
            return [None if fkey is None else self._fact(txn, info, fkey, namespace)
                    for fkey in self._fkeys_of(txn, info, fact_ids)]
        return self._db.read(fn)

    def scoring(self, namespace: str, fact_ids: Sequence[str]) -> list[tuple[str, float, float,
                                                                          float | None] | None]:
        return self.scoring_arrays(namespace, fact_ids).rows()

    def scoring_arrays(self, namespace: str, fact_ids: Sequence[str]) -> HeadArrays:
        def fn(txn: Any) -> HeadArrays:
            info = self._info_ro(txn, namespace)
            mem = self._mems.get(namespace)
            heads = None if mem is None or info is None else mem.heads
            seqs = None
            if heads is not None and heads.stamp == info["last_mod"]:
                seqs = self._seqs_by_name(mem.nid, fact_ids)
            if seqs is None:
                return HeadArrays.from_rows(self._heads_of(txn, info, fact_ids))
            out, ok = heads.arrays(seqs)
            missing = np.flatnonzero(~ok)
            if len(missing):
                read = HeadArrays.from_rows(self._heads_of(
                    txn, info, [fact_ids[i] for i in missing.tolist()]))
                for mine, theirs in ((out.status, read.status), (out.importance, read.importance),
                                     (out.modified, read.modified), (out.ttl, read.ttl)):
                    mine[missing] = theirs
            return out
        return self._db.read(fn)

    def _heads_of(self, txn: Any, info: dict[str, Any] | None,
                  fact_ids: Sequence[str]) -> list[tuple[str, float, float, float | None] | None]:
        """:meth:`scoring` read from the records."""
        facts = self._db.dbs[b"facts"]
        get, head, status = txn.get, _HEAD.unpack_from, _BYTE_STATUS
        out: list[Any] = []
        for fkey in self._fkeys_of(txn, info, fact_ids):
            if fkey is None:
                out.append(None)
                continue
            raw = get(fkey, db=facts)
            imp, mod, ttl = head(raw, _ID_LEN + 1)
            out.append((status[raw[_ID_LEN:_ID_LEN + 1]], imp, mod,
                        None if ttl != ttl else ttl))     # NaN: no TTL
        return out

    def vectors(self, namespace: str, fact_ids: Sequence[str]) -> np.ndarray:
        def fn(txn: Any) -> np.ndarray:
            info = self._info_ro(txn, namespace)
            vectors = self._db.dbs[b"vectors"]
            rows: list[bytes] = []
            at: list[int] = []
            for i, (fid, fkey) in enumerate(zip(fact_ids, self._fkeys_of(txn, info, fact_ids))):
                if fkey is None and info:
                    self._locate(txn, info, fid)        # raises UnknownFactError
                raw = txn.get(fkey, db=vectors) if fkey else None
                if raw is not None:
                    rows.append(raw)
                    at.append(i)
            found = np.frombuffer(b"".join(rows), dtype=np.float32).reshape(-1, self.dim)
            if len(rows) == len(fact_ids):
                return found.copy()     # writable, one copy
            out = np.zeros((len(fact_ids), self.dim), dtype=np.float32)
            out[at] = found
            return out
        return self._db.read(fn)

    def lookup_key(self, namespace: str, key: str, *, any_status: bool = False) -> str | None:
        def fn(txn: Any) -> str | None:
            info = self._info_ro(txn, namespace)
            if info is None:
                return None
            fkey = txn.get(_U64.pack(info["id"]) + key.encode(), db=self._db.dbs[b"keys"])
            if fkey is None:
                return None
            raw = txn.get(fkey, db=self._db.dbs[b"facts"])
            if not any_status and _BYTE_STATUS[raw[_ID_LEN:_ID_LEN + 1]] not in RETRIEVABLE:
                return None
            return raw[:_ID_LEN].decode()
        return self._db.read(fn)

    def search(self, namespace: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        def fn(txn: Any) -> list[tuple[str, float]]:
            mem = self._mem(txn, namespace)
            if mem is None:
                return []
            labels, sims = mem.index.search(vector, k)
            return list(zip(self._ids_of(txn, mem, labels[0]), sims[0].tolist()))
        with self._lock:
            return self._db.read(fn)

    def search_terms(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        def fn(txn: Any) -> list[tuple[str, float]]:
            info = self._info(txn, namespace)
            if info is None:
                return []
            facts = self._db.dbs[b"facts"]
            nsb = _U64.pack(info["id"])
            names: dict[int, str] = {}

            def accept(seq: int) -> bool:
                raw = txn.get(nsb + _U64.pack(seq), db=facts)
                if raw is None or _BYTE_STATUS[raw[_ID_LEN:_ID_LEN + 1]] not in RETRIEVABLE:
                    return False
                names[seq] = raw[:_ID_LEN].decode()
                return True
            hits = self._terms.search(txn, info["id"], query, k=k, accept=accept)
            return [(names[seq], float(score)) for seq, score in hits]
        return self._db.read(fn)

    def neighbourhood(self, namespace: str, fact_ids: Sequence[str],
                      hops: int) -> dict[str, dict[str, float]]:
        def fn(txn: Any) -> dict[str, dict[str, float]]:
            mem = self._mem(txn, namespace)
            if mem is None:
                return {}
            info = self._info_ro(txn, namespace)
            graph = self._walk_graph(txn, mem)
            nsb = _U64.pack(mem.nid)
            frontier = [(_U64.unpack(self._locate(txn, info, fid)[8:])[0], fid)
                        for fid in fact_ids]
            adj: dict[str, dict[str, float]] = {}
            seen: set[int] = set()
            for _ in range(max(0, hops)):
                nxt: list[tuple[int, str]] = []
                for seq, fid in frontier:
                    if seq in seen or seq in mem.hidden:
                        continue
                    seen.add(seq)
                    nbrs, weights = graph.row(seq)
                    out: dict[str, float] = {}
                    for other, w in zip(nbrs.tolist(), weights.tolist()):
                        oid = self._name_of(txn, nsb + _U64.pack(other))
                        out[oid] = w
                        if other not in seen:
                            nxt.append((other, oid))
                    adj[fid] = out
                frontier = nxt
            return adj
        with self._lock:
            return self._db.read(fn)

    def anchor_reach(self, namespace: str, anchor_ids: Sequence[str], hops: int
                     ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        n_a = len(anchor_ids)

        def fn(txn: Any) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
            mem = self._mem(txn, namespace)
            if mem is None:
                return [], np.zeros((0, n_a), np.int64), np.zeros((0, n_a)), \
                    np.zeros((n_a, n_a), bool)
            info = self._info_ro(txn, namespace)
            graph = self._walk_graph(txn, mem)
            seqs = [_U64.unpack((fkey or self._locate(txn, info, fid))[8:])[0] for fid, fkey
                    in zip(anchor_ids, self._fkeys_of(txn, info, anchor_ids))]
            visible = [s for s in seqs if s not in mem.hidden]
            labels, hop, product = anchor_reach(graph, visible, hops)
            if len(visible) != n_a:     # a hidden anchor reaches nothing: its column stays 0
                cols = [j for j, s in enumerate(seqs) if s not in mem.hidden]
                full_h = np.zeros((len(labels), n_a), np.int64)
                full_p = np.zeros((len(labels), n_a))
                full_h[:, cols], full_p[:, cols] = hop, product
                hop, product = full_h, full_p
            # a hidden anchor's row is empty and no row names it: its row and column stay False
            linked = anchor_links(graph, seqs)
            names = FactIds(self._ids_of(txn, mem, labels), np.asarray(labels, dtype=np.int64),
                            (self._token, mem.nid))
            return names, hop, product, linked
        with self._lock:
            return self._db.read(fn)

    def similarity_bounds(self, namespace: str, fact_ids: Sequence[str], vectors: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray] | None:
        def fn(txn: Any) -> tuple[np.ndarray, np.ndarray] | None:
            mem = self._mem(txn, namespace)
            if mem is None:
                return None
            if mem.sketch is None:
                mem.sketch = self._build_sketch(txn, mem)
            sketch = self._sync_sketch(txn, mem)
            info = self._info_ro(txn, namespace)
            seqs = self._seqs_by_name(mem.nid, fact_ids)
            if seqs is None or (seqs < 0).any():
                seqs = np.array([-1 if fkey is None else _U64.unpack(fkey[8:])[0]
                                 for fkey in self._fkeys_of(txn, info, fact_ids)], np.int64)
            return sketch.dots(seqs, vectors)
        with self._lock:
            return self._db.read(fn)

    def graph(self, namespace: str) -> tuple[list[str], list[tuple[int, int]], list[float]]:
        def fn(txn: Any) -> tuple[list[str], list[tuple[int, int]], list[float]]:
            mem = self._mem(txn, namespace)
            if mem is None:
                return [], [], []
            nsb = _U64.pack(mem.nid)
            ids: list[str] = []
            pos: dict[int, int] = {}
            for key, value in _prefix_items(txn, self._db.dbs[b"facts"], nsb):
                if _BYTE_STATUS[value[_ID_LEN:_ID_LEN + 1]] in RETRIEVABLE:
                    pos[_U64.unpack(key[8:])[0]] = len(ids)
                    ids.append(value[:_ID_LEN].decode())
            edges: list[tuple[int, int]] = []
            weights: list[float] = []
            for key, value in _prefix_items(txn, self._db.dbs[b"edges"], nsb):
                a, b = _U64.unpack(key[8:16])[0], _U64.unpack(key[16:24])[0]
                if a < b and a in pos and b in pos:
                    edges.append((pos[a], pos[b]))
                    weights.append(_F32.unpack(value[:4])[0])
            return ids, edges, weights
        with self._lock:
            return self._db.read(fn)

    def communities(self, namespace: str) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]:
        def fn(txn: Any) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]:
            info = self._info(txn, namespace)
            if info is None:
                return {}, {}
            facts = self._db.dbs[b"facts"]
            membership = {}
            for key, value in _prefix_items(txn, self._db.dbs[b"members"], _U64.pack(info["id"])):
                raw = txn.get(key, db=facts)
                if _BYTE_STATUS[raw[_ID_LEN:_ID_LEN + 1]] in RETRIEVABLE:
                    membership[raw[:_ID_LEN].decode()] = _U32.unpack(value)[0]
            return membership, {int(c): tuple(k) for c, k in info["labels"].items()}
        return self._db.read(fn)

    def scan(self, namespace: str) -> Iterable[Fact]:
        def fn(txn: Any) -> list[Fact]:
            info = self._info(txn, namespace)
            if info is None:
                return []
            return [self._fact(txn, info, key, namespace) for key, _ in
                    _prefix_items(txn, self._db.dbs[b"facts"], _U64.pack(info["id"]))]
        return self._db.read(fn)

    def due_facts(self, namespace: str, *, now: float) -> list[str]:
        self._index_expiry(namespace)

        def fn(txn: Any) -> list[str]:
            info = self._info_ro(txn, namespace)
            if info is None:
                return []
            prefix = _U64.pack(info["id"])
            found: list[tuple[bytes, str]] = []
            cursor = txn.cursor(db=self._db.dbs[b"expiry"])
            if cursor.set_range(prefix):
                for key, value in cursor.iternext():
                    if key[:8] != prefix or not now > _due_of_bytes(key[8:16]):
                        break
                    found.append((key[16:], value.decode()))
            found.sort()        # seq order, as a scan would give them
            return [fid for _, fid in found]
        return self._db.read(fn)

    def expire_facts(self, namespace: str, fact_ids: Sequence[str], *, now: float) -> int:
        def still_due(status: str, rec: dict[str, Any]) -> bool:   # a write may have come first
            due = _due(status, rec)
            return due is not None and now > due

        def fn(txn: Any, info: dict[str, Any], mem: _NsMem) -> int:
            fkeys = [self._fkey_of(txn, info, fid) for fid in fact_ids]
            return sum(self._status_change(txn, info, fkey, "STALE", now, still_due)
                       for fkey in fkeys if fkey is not None)
        with self._lock:
            if not self._exists(namespace):
                return 0
            return self._write(namespace, fn)

    def _index_expiry(self, namespace: str) -> None:
        """Build the expiry index of a namespace made before there was one.

        In transactions of ``BACKFILL_BATCH`` records, so a request waits for one
        batch at most; writes made meanwhile keep the entries of the facts they
        touch, so the index is whole once the last batch sets ``expiry``.
        """
        info = self._db.read(lambda txn: self._info_ro(txn, namespace))
        start: int | None = None if info is None or info.get("expiry") else 0
        while start is not None:
            def fn(txn: Any, start: int = start) -> int | None:
                info = self._info(txn, namespace)
                if info is None or info.get("expiry"):
                    return None
                prefix = _U64.pack(info["id"])
                done = 0
                cursor = txn.cursor(db=self._db.dbs[b"facts"])
                found = cursor.set_range(prefix + _U64.pack(start))
                for key, value in (cursor.iternext() if found else ()):
                    if key[:8] != prefix:
                        break
                    if done >= BACKFILL_BATCH:
                        return _U64.unpack(key[8:])[0]
                    done += 1
                    ttl = _HEAD.unpack_from(value, _ID_LEN + 1)[2]
                    if value[_ID_LEN:_ID_LEN + 1] != b"A" or ttl != ttl:    # NaN: no TTL
                        continue
                    rec = json.loads(value[_JSON_AT:])
                    self._move_due(txn, key, value[:_ID_LEN].decode(), None, _due("ACTIVE", rec))
                info["expiry"] = 1
                self._put_info(txn, namespace, info)
                return None
            with self._lock:
                start = self._db.write(fn)
            if start is not None:
                time.sleep(0)       # let waiting threads run between batches

    def source(self, namespace: str, source_id: str) -> SourceRecord | None:
        def fn(txn: Any) -> SourceRecord | None:
            info = self._info(txn, namespace)
            raw = txn.get(_U64.pack(info["id"]) + source_id.encode(),
                          db=self._db.dbs[b"sources"]) if info else None
            if raw is None:
                return None
            src = json.loads(raw)
            return SourceRecord(source_id=src["source_id"], namespace=namespace,
                                title=src["title"], uri=src["uri"],
                                document_hash=src["document_hash"],
                                ingested_at=_iso(src["ingested_at"]),
                                fact_count=src["fact_count"], status=src["status"],
                                fact_ids=tuple(src["fact_ids"]))
        return self._db.read(fn)

    def state_hash(self, namespace: str) -> str:
        info = self._db.read(lambda txn: self._info(txn, namespace))
        digest, cdigest = (info["digest"], info["cdigest"]) if info else ("0", "")
        text = f"crp-ckf-state/1|{self.model_id}|{namespace}|{digest}|{cdigest}"
        return hashlib.sha256(text.encode()).hexdigest()

    def namespaces(self) -> list[str]:
        return self._db.read(lambda txn: sorted(
            k.decode() for k, _ in txn.cursor(db=self._db.dbs[b"ns"])))

    def pending_recluster(self, namespace: str) -> int:
        info = self._db.read(lambda txn: self._info(txn, namespace))
        return 0 if info is None else int(info["adds"])

    def stats(self) -> CKFStats:
        def fn(txn: Any) -> CKFStats:
            names = sorted(k.decode() for k, _ in txn.cursor(db=self._db.dbs[b"ns"]))
            counts = {s: 0 for s in STATUSES}
            edges = communities = elements = hidden = pending = 0
            for name in names:
                info = self._info(txn, name)
                for s in STATUSES:
                    counts[s] += info["counts"][s]
                edges += info["edges"]
                communities += len(info["labels"])
                pending += info["adds"]
                mem = self._mems.get(name)
                if mem is not None:
                    elements += len(mem.index)
                    hidden += len(mem.index.hidden)
            return CKFStats(backend=self.name, location=f"file://{self._root}",
                            model_id=self.model_id, dim=self.dim, namespaces=tuple(names),
                            fact_count=sum(counts.values()) - counts["DELETED"],
                            by_status=counts, edges=edges, communities=communities,
                            index_elements=elements, index_hidden=hidden,
                            pending_recluster=pending)
        with self._lock:
            return self._db.read(fn)

    def set_ef_search(self, ef_search: int) -> None:
        """Search every index (loaded now or later) in this process with this
        ``ef_search``, tuned values aside (``auto_ef`` off)."""
        with self._lock:
            self.ef_search = max(1, int(ef_search))
            self.auto_ef = False
            for mem in self._mems.values():
                mem.index.set_ef(self.ef_search)

    def flush(self) -> None:
        with self._lock:
            for name, mem in list(self._mems.items()):
                if mem.ops_since_save:
                    self._save(name)

    def write_generation(self) -> int | None:
        return self._db.write_generation()

    def close(self) -> None:
        with self._lock:
            if self._db.closed:
                return
            try:
                self.flush()
            finally:
                self._mems.clear()
                self._db.close()


@dataclass(frozen=True)
class _Applied:
    """A write result whose index operations ``fn`` already applied in memory."""

    value: Any


# -- chunking (SPEC-009 §4.2) ------------------------------------------------------

@dataclass(frozen=True)
class Chunk:
    """One chunk of a document: its text and where it came from."""

    text: str
    paragraph: int
    page: int
    section: str | None
    part: int = 0

    @property
    def location(self) -> str:
        where = f"paragraph {self.paragraph}" + (f" part {self.part + 1}" if self.part else "")
        return (f"page {self.page}, " if self.page > 1 else "") + where

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "paragraph": self.paragraph, "page": self.page,
                "section": self.section, "part": self.part, "location": self.location}


_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BLANK_LINES = re.compile(r"\n[ \t]*\n+")
_SENTENCE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z0-9\"'(\[*`-])")


def _count_tokens(text: str) -> int:
    from ctxrelay.text.tokens import count
    return count(text, "cl100k_base").n


def chunk_text(text: str, *, max_tokens: int = CHUNK_MAX_TOKENS,
               min_tokens: int = FACT_MIN_TOKENS, overlap: float = CHUNK_OVERLAP,
               count_tokens: Callable[[str], int] | None = None) -> list[Chunk]:
    """Split a document into fact-sized chunks (SPEC-009 §4.2).

    1. Paragraphs are blocks separated by blank lines; form feeds start pages.
       A Markdown ATX heading (``# ...``) names the section of the paragraphs
       after it and is not a chunk itself.
    2. A paragraph over ``max_tokens`` is split at sentence ends (and a
       sentence over ``max_tokens`` at word boundaries) into parts of at most
       ``max_tokens``.
    3. Adjacent parts of one paragraph overlap: each part after the first
       starts with the last ``overlap`` (10 %) of the previous part's words.
       Paragraphs themselves are natural boundaries and do not overlap.
    4. A paragraph under ``min_tokens`` (SPEC-009 §2.1's minimum of 10) is
       joined to the next paragraph of its section, or to the previous one
       at the end of a section; a section with one short paragraph keeps it.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"chunk_text takes a str, not {type(text).__name__}")
    counter = count_tokens or _count_tokens
    pieces: list[tuple[str, int, int, str | None]] = []   # text, paragraph, page, section
    paragraph = 0
    section: str | None = None
    for page_no, page in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\f"), 1):
        for block in _BLANK_LINES.split(page):
            lines = [ln for ln in block.split("\n")]
            while lines and _HEADING.match(lines[0]):
                section = _HEADING.match(lines[0]).group(2) or section
                lines = lines[1:]
            body = "\n".join(lines).strip()
            if not body:
                continue
            paragraph += 1
            pieces.append((body, paragraph, page_no, section))
    merged: list[list[Any]] = []          # [text, paragraph, page, section, tokens]
    pending: list[Any] | None = None      # a short paragraph waiting for the next one

    def same_place(a: list[Any], b: list[Any]) -> bool:
        return a[2] == b[2] and a[3] == b[3]

    def settle(item: list[Any]) -> None:
        """A short paragraph with no follower in its section joins the previous one."""
        last = merged[-1] if merged else None
        if last is not None and same_place(last, item) and last[4] + item[4] <= max_tokens:
            last[0] += "\n\n" + item[0]
            last[4] += item[4]
        else:
            merged.append(item)

    for body, para, page_no, section in pieces:
        item = [body, para, page_no, section, 0]
        if pending is not None and same_place(pending, item):
            item[0], item[1] = pending[0] + "\n\n" + body, pending[1]
        elif pending is not None:
            settle(pending)
        pending = None
        item[4] = counter(item[0])
        if item[4] < min_tokens:
            pending = item
        else:
            merged.append(item)
    if pending is not None:
        settle(pending)
    out: list[Chunk] = []
    for body, para, page_no, section, n in merged:
        if n <= max_tokens:
            out.append(Chunk(body, para, page_no, section))
            continue
        for part, piece in enumerate(_split_long(body, n, max_tokens, overlap, counter)):
            out.append(Chunk(piece, para, page_no, section, part))
    return out


def _split_long(body: str, n_tokens: int, max_tokens: int, overlap: float,
                counter: Callable[[str], int]) -> list[str]:
    units: list[str] = []
    for sentence in _SENTENCE.split(body):
        sentence = sentence.strip()
        if not sentence:
            continue
        if counter(sentence) <= max_tokens:
            units.append(sentence)
            continue
        words = sentence.split()
        step = max(1, int(len(words) * max_tokens / max(1, counter(sentence)) * 0.9))
        units.extend(" ".join(words[i:i + step]) for i in range(0, len(words), step))
    parts: list[str] = []
    current: list[tuple[str, int]] = []
    size = 0
    for unit in units:
        n = counter(unit)
        if current and size + n > max_tokens:
            parts.append(" ".join(u for u, _ in current))
            current, size = _overlap(current, size, overlap, max_tokens - n, counter)
        current.append((unit, n))
        size += n
    if current:
        parts.append(" ".join(u for u, _ in current))
    return parts


def _overlap(units: list[tuple[str, int]], size: int, overlap: float, room: int,
             counter: Callable[[str], int]) -> tuple[list[tuple[str, int]], int]:
    """The tail of a finished part that starts the next one: whole trailing
    sentences worth at most ``overlap`` of its tokens, else its last words."""
    budget = min(int(overlap * size), room)
    if budget <= 0:
        return [], 0
    tail: list[tuple[str, int]] = []
    used = 0
    for unit, n in reversed(units):
        if used + n > budget:
            break
        tail.insert(0, (unit, n))
        used += n
    if tail:
        return tail, used
    words = units[-1][0].split()
    keep = max(1, int(len(words) * budget / max(1, units[-1][1])))
    text = " ".join(words[-keep:])
    n = counter(text)
    return ([(text, n)], n) if n <= budget else ([], 0)


# -- input checks ----------------------------------------------------------------------

def _check_namespace(namespace: Any) -> str:
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not namespace.strip() or namespace != namespace.strip() \
            or len(namespace) > MAX_NAMESPACE_CHARS or _CONTROL.search(namespace):
        raise InvalidArgumentError(
            f"namespace must be a non-empty str of at most {MAX_NAMESPACE_CHARS} characters "
            f"without surrounding blanks or control characters (a tenant name), not {namespace!r}")
    return namespace


def _check_key(key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or key != key.strip() or len(key) > MAX_KEY_CHARS \
            or _CONTROL.search(key):
        raise InvalidFactError(
            f"key must be a non-empty str of at most {MAX_KEY_CHARS} characters without "
            f"surrounding blanks or control characters (e.g. 'budget_q3'), not {key!r}")
    if _UUID.match(key.lower()):
        raise InvalidFactError(
            f"key {key!r} looks like a fact id (a UUID), so fact(key) would be ambiguous; "
            "pick a name such as 'budget_q3'")
    return key


def _check_content(content: Any) -> str:
    if not isinstance(content, str):
        raise InvalidFactError(
            f"fact content must be a str, not {type(content).__name__}; convert it first")
    text = unicodedata.normalize("NFC", content).strip()
    if not text:
        raise InvalidFactError("fact content is empty; pass the text of the fact")
    return text


def _check_importance(value: Any, source_type: str) -> float:
    if value is None:
        return SOURCE_TYPES[source_type][0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidFactError(
            f"importance must be a number in [0, 1] (SPEC-009 §2), not {value!r}; or leave "
            f"it out for the source type's default ({SOURCE_TYPES[source_type][0]})")
    return float(value)


def _check_source_type(value: Any) -> str:
    if value is None:
        return DEFAULT_SOURCE_TYPE
    if value not in SOURCE_TYPES:
        raise InvalidFactError(
            f"source_type must be one of {', '.join(SOURCE_TYPES)}, not {value!r}")
    return str(value)


def _check_metadata(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidMetadataError(
            f"metadata must be a dict with str keys, not {type(value).__name__}")
    try:
        return json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidMetadataError(
            f"metadata must be JSON-serialisable ({exc}); convert values to str, numbers, "
            "lists or dicts") from None


def _check_count(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo \
            or (hi is not None and value > hi):
        span = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise InvalidArgumentError(f"{name} must be an int {span}, not {value!r}")
    return value


def _check_fraction(name: str, value: Any, lo: float = 0.0, hi: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be a number in [{lo}, {hi}], not {value!r}")
    return float(value)


def _check_status(value: Any) -> str:
    if value not in STATUSES:
        raise InvalidFactError(f"status must be one of {', '.join(STATUSES)}, not {value!r}")
    return str(value)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


# -- the store -----------------------------------------------------------------------

_stores: dict[str, "FactStore"] = {}
_stores_lock = threading.RLock()


class FactStore:
    """The CKF of one directory; see the module doc.

    ``embedder`` is a name for :func:`ctxrelay.text.embed.get_embedder` or an
    embedder object; by default the one the store was built with (a new store
    takes :func:`ctxrelay.text.embed.default_name`).  ``edge_threshold`` defaults
    to the embedder's ``thresholds["edge"]``.  SPEC-024's relevance gate
    (0.55) and SPEC-025's connector relevance floor (0.30) are written for
    sentence embeddings whose edge threshold is SPEC-009's 0.60; by default
    both are scaled by ``edge_threshold / 0.60`` so they keep their meaning
    under the embedder's calibration (hashing: 0.275 and 0.15).  ``clock``
    returns the current time in epoch seconds (tests inject one).

    ``ef_search`` (SPEC-009 §3.2: 100) is the search-time ceiling.  With
    ``auto_ef`` an index of 5,000 facts or more is searched with the smallest
    ef (32, 48, 64, 80 or the ceiling) whose top 10 agree with a far wider
    search on 98 % of the results, re-tuned at every index snapshot: the
    latency of ANN search grows with ef, and clustered embeddings need much
    less of it than the ceiling chosen for the worst case.  The probe queries
    resemble stored facts; for queries unlike anything stored pass
    ``auto_ef=False`` (see :meth:`ctxrelay.knowledge.graph.VectorIndex.tune_ef`).
    """

    def __init__(self, path: str | os.PathLike[str], *, embedder: Any = None,
                 backend: CKFBackend | None = None, knn: int = KNN,
                 edge_threshold: float | None = None, min_relevance: float | None = None,
                 min_connector_relevance: float | None = None,
                 recluster_every: int | None = RECLUSTER_EVERY, resolution: float = 1.0,
                 leiden_iterations: int = 10, seed: int = 42,
                 min_community_size: int = MIN_COMMUNITY_SIZE, m: int = 16,
                 ef_construction: int = 200, ef_search: int = 100, random_seed: int = 100,
                 threads: int = 1, clock: Callable[[], float] = time.time,
                 auto_ef: bool = True) -> None:
        self._path = os.path.abspath(os.fspath(path))
        self._key = os.path.realpath(self._path)
        self._clock = clock
        self.knn = _check_count("knn", knn, 0, 1000)
        self.recluster_every = None if recluster_every is None else \
            _check_count("recluster_every", recluster_every, 1)
        self.resolution = float(resolution)
        self.leiden_iterations = _check_count("leiden_iterations", leiden_iterations, -1)
        self.seed = int(seed)
        self.min_community_size = _check_count("min_community_size", min_community_size, 1)
        with _stores_lock:
            found = _stores.get(self._key)
            if found is not None and not found.closed:
                raise StoreError(f"the CKF at {self._path} is already open in this process; "
                                 "use FactStore.open(path) to share it")
            if backend is None:
                backend, self.embedder = self._open_native(
                    embedder, m=m, ef_construction=ef_construction, ef_search=ef_search,
                    random_seed=random_seed, threads=threads, auto_ef=auto_ef)
            else:
                self.embedder = get_embedder(embedder) if embedder is None or \
                    isinstance(embedder, str) else embedder
                if backend.model_id != self.embedder.model_id:
                    raise EmbeddingModelMismatchError(
                        f"backend holds vectors of {backend.model_id!r}, the embedder is "
                        f"{self.embedder.model_id!r}; pass the embedder the backend was "
                        "built with")
            self.backend = backend
            _stores[self._key] = self
        edge = self.embedder.thresholds["edge"] if edge_threshold is None else edge_threshold
        self.edge_threshold = _check_fraction("edge_threshold", edge, -1.0, 1.0)
        scale = self.edge_threshold / _cdr.SPEC_EDGE_THRESHOLD
        self.min_relevance = _check_fraction(
            "min_relevance", _cdr.CDR_MIN_RELEVANCE * scale if min_relevance is None
            else min_relevance, -1.0, 1.0)
        self.min_connector_relevance = _check_fraction(
            "min_connector_relevance", _cdr.MIN_CONNECTOR_RELEVANCE * scale
            if min_connector_relevance is None else min_connector_relevance, 0.0, 1.0)

    def _open_native(self, embedder: Any, **kw: Any) -> tuple[NativeBackend, Any]:
        """Open (or create) the native backend and the embedder that goes with it."""
        if embedder is None and NativeBackend.exists(self._path):
            backend = NativeBackend(self._path, model_id=None, dim=None, **kw)
            try:
                name = backend.config.get("embedder")
                if not name:
                    raise EmbeddingModelMismatchError(
                        f"the CKF at {self._path} was built with a custom embedder "
                        f"({backend.model_id!r}); pass it: FactStore(path, embedder=...)")
                emb = get_embedder(name)
                if emb.model_id != backend.model_id:
                    raise EmbeddingModelMismatchError(
                        f"the CKF at {self._path} holds vectors of {backend.model_id!r} but "
                        f"the embedder {name!r} now is {emb.model_id!r}; pass an embedder "
                        f"with model id {backend.model_id!r}, or re-ingest into a new store")
            except BaseException:
                backend.close()
                raise
            return backend, emb
        if embedder is None or isinstance(embedder, str):
            name = embedder or default_name()
            emb = get_embedder(name)
        else:
            name, emb = None, embedder
        return NativeBackend(self._path, model_id=emb.model_id, dim=int(emb.dim),
                             embedder_name=name, **kw), emb

    @classmethod
    def open(cls, path: str | os.PathLike[str], **kw: Any) -> "FactStore":
        """The one shared store of ``path`` in this process (opened if needed)."""
        key = os.path.realpath(os.path.abspath(os.fspath(path)))
        with _stores_lock:
            found = _stores.get(key)
            if found is not None and not found.closed:
                return found
            return cls(path, **kw)

    @property
    def path(self) -> str:
        return self._path

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def write_generation(self) -> int | None:
        """A number that moves with every committed write by any process (None:
        the backend cannot tell); equal numbers mean the state hash is unchanged."""
        return self.backend.write_generation()

    def close(self) -> None:
        """Save the index snapshots and close (idempotent)."""
        with _stores_lock:
            if self.closed:
                return
            try:
                self.backend.close()
            finally:
                self._closed = True
                if _stores.get(self._key) is self:
                    del _stores[self._key]

    def flush(self) -> None:
        """Save every changed index snapshot now."""
        self.backend.flush()

    def __enter__(self) -> "FactStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FactStore({self._path!r}, model_id={self.embedder.model_id!r})"

    def _live(self) -> None:
        if self.closed:
            raise StoreError(f"the CKF at {self._path} is closed; open it again")

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vecs = np.asarray(self.embedder.embed_batch(list(texts)), dtype=np.float32)
        if vecs.shape != (len(texts), self.backend.dim):
            raise EmbeddingModelMismatchError(
                f"the embedder returned shape {vecs.shape} for {len(texts)} texts; the store "
                f"holds {self.backend.dim}-dimensional vectors")
        return vecs

    def _query_vector(self, query: Any) -> np.ndarray:
        if isinstance(query, str):
            return self._embed([query])[0]
        vec = np.asarray(query, dtype=np.float32).reshape(-1)
        if vec.shape != (self.backend.dim,) or not np.isfinite(vec).all():
            raise InvalidArgumentError(
                f"query must be a str or a finite vector of dimension {self.backend.dim} from "
                f"{self.embedder.model_id!r}, not shape {vec.shape}")
        return vec

    # -- writing ----------------------------------------------------------------------

    def _record(self, content: Any, *, key: Any = None, source: Any = None,
                source_location: Any = None, source_type: Any = None, importance: Any = None,
                ttl: Any = None, metadata: Any = None) -> dict[str, Any]:
        text = _check_content(content)
        stype = _check_source_type(source_type)
        if ttl is None:
            ttl = SOURCE_TYPES[stype][1]
        ttl_text, ttl_s = _cdr.parse_ttl(ttl)
        if source is not None and not isinstance(source, str):
            raise InvalidFactError(f"source must be a str (a source id or URI), not {source!r}")
        return {"content": text, "content_hash": _sha256(text), "key": _check_key(key),
                "source_id": source, "source_location": source_location,
                "source_type": stype, "importance": _check_importance(importance, stype),
                "ttl": ttl_text, "ttl_seconds": ttl_s, "metadata": _check_metadata(metadata)}

    def add_fact(self, content: str, *, key: str | None = None, source: str | None = None,
                 importance: float | None = None, ttl: Any = None,
                 namespace: str | None = None, metadata: Mapping[str, Any] | None = None,
                 source_type: str | None = None) -> str:
        """Store one fact; returns its id (a UUID).

        ``key`` names it for :meth:`lookup_key` (unique per namespace).
        ``importance`` and ``ttl`` default by ``source_type`` (default
        ``"user"``: 0.60, never expires); ``ttl`` is an ISO 8601 duration
        (``"P90D"``), seconds, or ``"none"`` for timeless.
        @raise FactKeyExistsError if ``key`` is taken in the namespace.
        """
        return self.add_facts([{"content": content, "key": key, "source": source,
                                "importance": importance, "ttl": ttl, "metadata": metadata,
                                "source_type": source_type}], namespace=namespace)[0]

    def add_facts(self, items: Iterable[str | Mapping[str, Any]], *,
                  namespace: str | None = None, vectors: np.ndarray | None = None,
                  batch_size: int = 1024, progress: bool | None = None) -> list[str]:
        """Store many facts, ``batch_size`` per transaction; returns their ids.

        Each item is a str (the content) or a dict with the keyword arguments
        of :meth:`add_fact` (``content`` required).  ``vectors`` skips the
        embedder: one row per item, from this store's embedder (same model).
        Each batch is all or nothing; a bad item fails the call before any
        batch is written.
        """
        self._live()
        ns = _check_namespace(namespace)
        allowed = {"content", "key", "source", "source_location", "source_type",
                   "importance", "ttl", "metadata"}
        records = []
        for i, item in enumerate(items):
            if isinstance(item, str):
                item = {"content": item}
            if not isinstance(item, Mapping) or "content" not in item \
                    or set(item) - allowed:
                raise InvalidFactError(
                    f"item {i} must be a str or a dict with 'content' and optionally "
                    f"{', '.join(sorted(allowed - {'content'}))}; got {item!r}"[:300])
            records.append(self._record(**item))
        keys = [r["key"] for r in records if r["key"] is not None]
        if len(keys) != len(set(keys)):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise FactKeyExistsError(f"key {dup!r} is given to two facts; keys are unique "
                                     "per namespace")
        if vectors is not None:
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.shape != (len(records), self.backend.dim) or not np.isfinite(vectors).all():
                raise InvalidArgumentError(
                    f"vectors must be a finite ({len(records)}, {self.backend.dim}) array, "
                    f"one row per item, not shape {vectors.shape}")
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            vectors = vectors / norms
        batch_size = _check_count("batch_size", batch_size, 1)
        bar = _bar(len(records), progress, "adding facts", "fact")
        ids: list[str] = []
        try:
            for lo in range(0, len(records), batch_size):
                chunk = records[lo:lo + batch_size]
                vecs = vectors[lo:lo + batch_size] if vectors is not None else \
                    self._embed([r["content"] for r in chunk])
                ids += self.backend.add_facts(ns, chunk, vecs, knn=self.knn,
                                              edge_threshold=self.edge_threshold,
                                              now=self._clock())
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        self._maybe_recluster(ns)
        return ids

    def update_fact(self, key_or_id: str, *, content: str | None = None,
                    importance: float | None = None, ttl: Any = None,
                    metadata: Mapping[str, Any] | None = None, key: Any = ...,
                    namespace: str | None = None) -> Fact:
        """Change a fact in place (same id).  New content is re-embedded and
        re-linked (SPEC-009 §3.3) and makes a STALE fact ACTIVE again."""
        self._live()
        ns = _check_namespace(namespace)
        fact = self.fact(key_or_id, namespace=ns)
        changes: dict[str, Any] = {}
        vector = None
        if content is not None:
            text = _check_content(content)
            if text != fact.content:
                changes.update(content=text, content_hash=_sha256(text))
                vector = self._embed([text])[0]
        if importance is not None:
            changes["importance"] = _check_importance(importance, fact.source_type)
        if ttl is not None:
            changes["ttl"], changes["ttl_seconds"] = _cdr.parse_ttl(ttl)
        if metadata is not None:
            changes["metadata"] = _check_metadata(metadata)
        if key is not ...:
            changes["key"] = _check_key(key)
        if not changes:
            return fact
        return self.backend.update_fact(ns, fact.fact_id, changes, vector, knn=self.knn,
                                        edge_threshold=self.edge_threshold, now=self._clock())

    def set_status(self, key_or_id: str | Sequence[str], status: str, *,
                   namespace: str | None = None) -> int:
        """Change the status of one fact (id or key) or of a list of ids; returns how
        many changed.  DELETED erases the content (same as :meth:`delete`).
        @raise StatusTransitionError for a change SPEC-009 §2.2 forbids."""
        self._live()
        ns = _check_namespace(namespace)
        status = _check_status(status)
        ids = [self._resolve_id(x, ns) for x in
               ([key_or_id] if isinstance(key_or_id, str) else list(key_or_id))]
        return self.backend.set_status(ns, ids, status, now=self._clock())

    def delete(self, key_or_id: str | Sequence[str], *, namespace: str | None = None) -> int:
        """Erase facts (GDPR, SPEC-009 §8.3): never retrieved again, content gone."""
        return self.set_status(key_or_id, "DELETED", namespace=namespace)

    def expire(self, *, namespace: str | None = None) -> int:
        """Mark ACTIVE facts whose ``ingested_at + ttl`` has passed STALE (SPEC-009 §8.1);
        returns how many.

        The native backend reads only the due facts from its expiry index, and
        they are marked ``EXPIRE_BATCH`` per transaction: a sweep run beside
        requests (the router's) never holds the store, or the GIL, for long.
        """
        self._live()
        ns = _check_namespace(namespace)
        now = self._clock()
        due = self.backend.due_facts(ns, now=now)
        changed = 0
        for lo in range(0, len(due), EXPIRE_BATCH):
            if lo:
                time.sleep(0)           # let waiting threads run between batches
            changed += self.backend.expire_facts(ns, due[lo:lo + EXPIRE_BATCH], now=now)
        return changed

    def record_access(self, fact_ids: Sequence[str], *, namespace: str | None = None) -> None:
        """Count an envelope inclusion of each fact (does not change the ETag)."""
        self._live()
        ids = [fact_ids] if isinstance(fact_ids, str) else list(fact_ids)
        self.backend.record_access(_check_namespace(namespace), ids, now=self._clock())

    # -- reading ----------------------------------------------------------------------

    def _resolve_id(self, key_or_id: Any, ns: str) -> str:
        if not isinstance(key_or_id, str) or not key_or_id:
            raise InvalidArgumentError(
                f"pass a fact id (UUID) or key (str), not {key_or_id!r}")
        if _UUID.match(key_or_id):
            return key_or_id
        fid = self.backend.lookup_key(ns, key_or_id, any_status=True)
        if fid is None:
            raise UnknownFactError(f"no fact with key {key_or_id!r} in namespace {ns!r}; "
                                   "check the key and the namespace")
        return fid

    def fact(self, key_or_id: str, *, namespace: str | None = None) -> Fact:
        """The fact with this id or key, whatever its status (inspection; retrieval
        methods return ACTIVE and STALE facts only).
        @raise UnknownFactError if the namespace has none."""
        self._live()
        ns = _check_namespace(namespace)
        found = self.backend.get(ns, [self._resolve_id(key_or_id, ns)])[0]
        if found is None:
            raise UnknownFactError(f"no fact {key_or_id!r} in namespace {ns!r}; check the id "
                                   "and the namespace")
        return found

    def lookup_key(self, key: str, *, namespace: str | None = None) -> Fact | None:
        """The retrievable fact named ``key`` (exact match), or None (SPEC-035 §2.4)."""
        self._live()
        ns = _check_namespace(namespace)
        if not isinstance(key, str):
            raise InvalidArgumentError(f"key must be a str, not {type(key).__name__}")
        fid = self.backend.lookup_key(ns, key)
        return None if fid is None else self.backend.get(ns, [fid])[0]

    def search_ann(self, query: Any, *, k: int = 10, namespace: str | None = None) -> list[Hit]:
        """The ``k`` nearest retrievable facts by cosine similarity (hnswlib).
        ``query`` is a text or a vector from the store's embedder."""
        self._live()
        k = _check_count("k", k, 0)
        ns = _check_namespace(namespace)
        vec = self._query_vector(query)
        return [Hit(fid, sim) for fid, sim in self.backend.search(ns, vec, k)]

    def search_terms(self, query: str, *, k: int = 10,
                     namespace: str | None = None) -> list[Hit]:
        """BM25 over the term index (exact word forms; see ctxrelay.storage.lmdb.textindex)."""
        self._live()
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, not {type(query).__name__}")
        k = _check_count("k", k, 0)
        return [Hit(fid, s) for fid, s in
                self.backend.search_terms(_check_namespace(namespace), query, k)]

    def facts(self, query: Any, *, k: int = 10,
              namespace: str | None = None) -> list[ScoredFact]:
        """Semantic search: the ``k`` most similar retrievable facts, score = cosine."""
        ns = _check_namespace(namespace)
        hits = self.search_ann(query, k=k, namespace=ns)
        facts = self.backend.get(ns, [h.fact_id for h in hits])
        return [ScoredFact(f, h.score, h.score) for h, f in zip(hits, facts) if f is not None]

    # -- CDR (SPEC-024 + SPEC-027 §3) ----------------------------------------------------

    def _entries(self, items: Any, what: str) -> tuple[list[str], list[np.ndarray | None],
                                                         list[float]]:
        if isinstance(items, (str, CoverageEntry, Mapping)):
            items = [items]
        texts: list[str] = []
        vecs: list[np.ndarray | None] = []
        weights: list[float] = []
        for i, item in enumerate(items or ()):
            if isinstance(item, str):
                item = CoverageEntry(text=item)
            elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
                item = CoverageEntry(text=item[0], depth_weight=item[1])
            elif isinstance(item, Mapping):
                try:
                    item = CoverageEntry(**item)
                except TypeError:
                    item = None
            if not isinstance(item, CoverageEntry) or (item.text is None) == (item.embedding is None):
                raise InvalidArgumentError(
                    f"{what} entry {i} must be a str, a (text, depth_weight) pair, or a "
                    "CoverageEntry/dict with exactly one of text or embedding")
            w = _check_fraction(f"{what} entry {i} depth_weight", item.depth_weight)
            if item.embedding is not None:
                if item.model_id != self.embedder.model_id:
                    raise EmbeddingModelMismatchError(
                        f"{what} entry {i} was embedded with {item.model_id!r}, the CKF with "
                        f"{self.embedder.model_id!r}; embed it with the CKF's model or pass "
                        "its text (SPEC-024 §2.5)")
                texts.append("")
                vecs.append(self._query_vector(item.embedding))
            else:
                if not isinstance(item.text, str):
                    raise InvalidArgumentError(f"{what} entry {i} text must be a str")
                texts.append(item.text)
                vecs.append(None)
            weights.append(w)
        return texts, vecs, weights

    def _window(self, coverage: Any, residual: Any, recent_outputs: Any, novelty: str,
                now: float | None) -> _Window:
        """The request's side of the CDR terms, embedded once per call."""
        _cdr.check_novelty_mode(novelty)
        ctexts, cvecs, cw = self._entries(coverage, "coverage")
        rtexts, rvecs, _ = self._entries(residual, "residual")
        pending = [t for t, v in zip(ctexts + rtexts, cvecs + rvecs) if v is None]
        embedded = iter(self._embed(pending)) if pending else iter(())
        dim = self.backend.dim
        cov = np.array([v if v is not None else next(embedded) for v in cvecs],
                       dtype=np.float32).reshape(-1, dim)
        res = np.array([v if v is not None else next(embedded) for v in rvecs],
                       dtype=np.float32).reshape(-1, dim)
        if isinstance(recent_outputs, str):
            recent_outputs = [recent_outputs]
        return _Window(cov, np.asarray(cw, dtype=np.float64), res,
                       _cdr.ngram_blacklist(recent_outputs or ()), novelty,
                       self._clock() if now is None else float(now))

    def _score(self, ns: str, ids: Sequence[str], heads: HeadArrays,
               relevance: np.ndarray, win: _Window,
               vecs: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The CDR terms of facts given their scoring heads; vectors
        (``vecs`` if given) are read only for a coverage or residual set, contents
        only for the n-gram guard."""
        n = len(ids)
        if len(win.coverage) or len(win.residual):
            if vecs is None:
                vecs = self.backend.vectors(ns, ids)
            coverage_s = _cdr.coverage_scores(vecs, win.coverage, win.weights)
            pull = _cdr.residual_pulls(vecs, win.residual)
        else:
            coverage_s, pull = np.zeros(n), np.zeros(n)
        if win.blacklist:
            ngp = np.array([_cdr.ngram_penalty(_cdr.ngram_overlap(f.content, win.blacklist))
                            for f in self.backend.get(ns, ids)], dtype=np.float64)
        else:
            ngp = np.zeros(n)
        return {"relevance": np.asarray(relevance, dtype=np.float64), "coverage": coverage_s,
                "pull": pull, "novelty": _cdr.novelty(coverage_s, win.novelty),
                "recency": heads.recency(win.now), "ngram": ngp,
                "importance": heads.importance}

    def cdr(self, query: Any, *, coverage: Any = (), residual: Any = (),
            recent_outputs: Any = (), k: int = 10, novelty: str = "on",
            namespace: str | None = None, min_relevance: float | None = None,
            candidates: int | None = None, now: float | None = None) -> list[ScoredFact]:
        """Coverage-Differential Retrieval (SPEC-024 §7.1 with SPEC-027 §3.3).

        ``coverage``: what prior windows addressed -- texts, ``(text,
        depth_weight)`` pairs or :class:`CoverageEntry`; ``residual``: what
        is still to be addressed; ``recent_outputs``: prior window outputs for
        the 6-gram guard (§5).  ``novelty``: ``"on"`` (SPEC-024), ``"off"``
        (relevance only) or ``"partial"`` (half the coverage penalty).
        Candidates are the ``candidates`` (default ``max(4k, 50)``) nearest
        facts; those below ``min_relevance`` are dropped before scoring (§2.6).
        """
        self._live()
        k = _check_count("k", k, 0)
        ns = _check_namespace(namespace)
        q = self._query_vector(query)
        return self._rank(q, ns, self._window(coverage, residual, recent_outputs, novelty, now),
                          k, min_relevance, candidates)

    def _rank(self, q: np.ndarray, ns: str, win: _Window, k: int, min_relevance: float | None,
              candidates: int | None, role: str = "anchor") -> list[ScoredFact]:
        gate = self.min_relevance if min_relevance is None else \
            _check_fraction("min_relevance", min_relevance, -1.0, 1.0)
        pool = max(4 * k, 50) if candidates is None else _check_count("candidates", candidates, 1)
        if k == 0:
            return []
        hits = [(fid, sim) for fid, sim in self.backend.search(ns, q, max(pool, k))
                if sim >= gate]
        if not hits:
            return []
        ids = [fid for fid, _ in hits]
        heads = self.backend.scoring_arrays(ns, ids)
        keep = np.flatnonzero(heads.retrievable)
        relevance = np.array([sim for _, sim in hits], dtype=np.float64)[keep]
        ids = [ids[i] for i in keep.tolist()]
        t = self._score(ns, ids, heads.take(keep), relevance, win)
        scores = _cdr.cdr_scores(t["importance"], t["relevance"], t["pull"], t["novelty"],
                                 t["recency"], t["ngram"])
        rel = t["relevance"].tolist()
        score_of = scores.tolist()
        order = sorted(range(len(ids)), key=lambda i: (-score_of[i], -rel[i], ids[i]))[:k]
        facts = dict(zip([ids[i] for i in order], self.backend.get(ns, [ids[i] for i in order])))
        scores_l = scores.tolist()
        terms = {name: t[name][order].tolist() for name in ("relevance", "novelty", "recency",
                                                           "coverage", "pull", "ngram")}
        return [ScoredFact(facts[ids[i]], scores_l[i], terms["relevance"][x], role=role,
                           novelty=terms["novelty"][x], recency=terms["recency"][x],
                           coverage=terms["coverage"][x], residual_pull=terms["pull"][x],
                           ngram_penalty=terms["ngram"][x]) for x, i in enumerate(order)]

    # -- CDGR (SPEC-025) ------------------------------------------------------------------

    def cdgr(self, query: Any, *, k: int = 10, hops: int = _cdr.DEFAULT_MAX_HOPS,
             connector_budget: float = _cdr.DEFAULT_CONNECTOR_BUDGET, coverage: Any = (),
             residual: Any = (), recent_outputs: Any = (), novelty: str = "on",
             namespace: str | None = None, min_relevance: float | None = None,
             now: float | None = None) -> list[ScoredFact]:
        """Coverage-Differential Graph Retrieval (SPEC-025), in reading order.

        Anchors: the top ``⌊(1 - connector_budget)·k⌋`` CDR facts.  Connectors:
        facts within ``hops`` edges of at least two anchors, scored
        ``bridge_value · novelty · recency · max(relevance,
        min_connector_relevance)`` (§2.5, SPEC-027 §3.3); the best
        ``k - anchors`` with a positive score are placed next to an anchor
        they bridge (§2.6, :func:`ctxrelay.knowledge.cdr.assemble_order`).  Without
        edges this is CDR (§6).
        """
        self._live()
        k = _check_count("k", k, 0)
        hops = _check_count("hops", hops, 0, 3)
        budget = _check_fraction("connector_budget", connector_budget, 0.0, 0.5)
        ns = _check_namespace(namespace)
        q = self._query_vector(query)
        win = self._window(coverage, residual, recent_outputs, novelty, now)
        if k == 0:
            return []
        n_anchor, n_conn = _cdr.split_budget(k, budget)
        anchors = self._rank(q, ns, win, n_anchor, min_relevance, None)
        if len(anchors) < 2 or n_conn == 0 or hops == 0:
            return anchors
        anchor_ids = [a.fact_id for a in anchors]
        nodes, hop, product, linked = self.backend.anchor_reach(ns, anchor_ids, hops)
        if not len(nodes):
            return anchors
        link = (linked | linked.T) & ~np.eye(len(anchor_ids), dtype=bool)
        bridged = self._bridged(nodes, hop, product, link)
        if not bridged:
            return anchors
        ids = _pick(nodes, [bridged[x][1] for x in sorted(bridged)])
        n_pairs = bridged.n_pairs
        exact: dict[str, tuple[float, list[float]]] = {}

        def value_of(node: str) -> float:
            """The exact bridge value (Python strengths) of a candidate."""
            if node not in exact:
                r = bridged[node][1]
                strength = [p ** (1.0 / h) for h, p in
                            zip(hop[r].tolist(), product[r].tolist()) if h]
                exact[node] = (int(n_pairs[r]) * (sum(strength) / len(strength)), strength)
            return exact[node][0]

        chosen, t = self._connectors(q, ns, win, ids,
                                     np.array([bridged[x][0] for x in ids]), value_of, n_conn)
        facts = dict(zip([c[1] for c in chosen], self.backend.get(ns, [c[1] for c in chosen])))
        rank = {a: i for i, a in enumerate(anchor_ids)}
        by_id = {a.fact_id: a for a in anchors}
        placed: list[tuple[str, tuple[str, str]]] = []
        touched: dict[str, dict[str, _cdr.Reach]] = {}
        linked_to = link.tolist()               # Python lists: a few lookups each, no numpy scalars
        terms = {name: t[name].tolist() for name in ("relevance", "novelty", "recency",
                                                    "coverage", "pull", "ngram")}
        for score, node, i in chosen:
            r, strength = bridged[node][1], exact[node][1]
            reached = [(a, h) for a, h in zip(anchor_ids, hop[r].tolist()) if h]
            touched[node] = {a: _cdr.Reach(h, s) for (a, h), s in zip(reached, strength)}
            names = [a for a, _ in reached]
            pairs = [(a, b) for x, a in enumerate(names)
                     for b in names[x + 1:] if not linked_to[rank[a]][rank[b]]]
            best = min(pairs, key=lambda p: (max(rank[p[0]], rank[p[1]]),
                                             min(rank[p[0]], rank[p[1]])))
            placed.append((node, best))
            by_id[node] = ScoredFact(
                facts[node], score, terms["relevance"][i], role="connector",
                novelty=terms["novelty"][i], recency=terms["recency"][i],
                coverage=terms["coverage"][i], residual_pull=terms["pull"][i],
                ngram_penalty=terms["ngram"][i], bridge=exact[node][0],
                bridges=tuple(pairs), hops=min(h for _, h in reached))
        order = _cdr.assemble_order(
            anchor_ids, placed, distance=lambda c, a: touched[c][a].hops if a in touched[c] else 99)
        return [by_id[x] for x in order]

    @staticmethod
    def _bridged(nodes: Sequence[str], hop: np.ndarray, product: np.ndarray,
                 link: np.ndarray) -> "_Candidates":
        """SPEC-025 §2.4 for the connector candidates: ``node -> (bridge value, row)``
        for those with a positive value, the value from numpy's strengths (within
        ``1e-12`` of the exact one; the caller asks :meth:`cdgr`'s ``value_of`` for
        exact values where they decide something).

        The candidates are the ``MAX_CONNECTOR_CANDIDATES`` rows reaching the
        most anchors, by strongest way to one of them, then by id.  A value is
        the anchor pairs a row reaches minus those joined by an edge, times its
        mean strength.  Strengths that decide the cut are Python floats: numpy's
        vectorised pow may differ from libm's in the last bit, and the results
        must not depend on which one ran.
        """
        reached = hop > 0
        n_reached = reached.sum(axis=1)
        # float64 BLAS: the counts are small integers, exact in floats
        rf = reached.astype(np.float64)
        linked_pairs = ((rf @ link.astype(np.float64)) * rf).sum(1).astype(np.int64) // 2
        n_pairs = n_reached * (n_reached - 1) // 2 - linked_pairs
        cap = _cdr.MAX_CONNECTOR_CANDIDATES
        # strength = product ** (1 / hops), within an ulp or two of libm's pow (an
        # unreached cell has product 0, so its square root is 0 too)
        approx = np.sqrt(product)
        np.copyto(approx, product, where=hop == 1)
        deep = hop == 3
        if deep.any():
            np.copyto(approx, np.cbrt(product), where=deep)
        if len(nodes) <= cap:
            rows = np.arange(len(nodes))
        else:
            # The cut-off is the cap-th row by (anchors reached desc, strongest way
            # desc): its anchor count from the counts, its strength by partition.
            best = approx.max(axis=1)           # strengths are >= 0 and unreached cells 0
            counts = np.bincount(n_reached)
            ahead = np.cumsum(counts[::-1])[::-1]       # rows reaching >= c anchors
            n_edge = int(np.flatnonzero(ahead >= cap)[-1])
            sure = np.flatnonzero(n_reached > n_edge)
            same = n_reached == n_edge
            m = cap - len(sure)
            b_edge = -np.partition(-best[same], m - 1)[m - 1]
            # Rows with the cut-off row's anchor count and a strength beyond rounding
            # of its strength are in (above) or out (below) whatever the rounding; those
            # within it are ranked again with exact strengths (libm's pow, as value_of).
            tol = 1e-9 * max(1.0, abs(b_edge))
            above = np.flatnonzero(same & (best > b_edge + tol))
            band = np.flatnonzero(same & (best >= b_edge - tol) & (best <= b_edge + tol))
            exact = {r: max(p ** (1.0 / h) for h, p in zip(hs, ps) if h) for r, hs, ps in
                     zip(band.tolist(), hop[band].tolist(), product[band].tolist())}
            ranked = sorted(exact, key=lambda r: (-exact[r], nodes[r]))
            rows = np.concatenate([sure, above, np.asarray(
                ranked[:cap - len(sure) - len(above)], dtype=np.int64)])
        # a strength is positive exactly when its product is, in numpy as in libm
        values = n_pairs[rows] * (approx[rows].sum(axis=1) / n_reached[rows])
        keep = (n_pairs[rows] > 0) & (product[rows] > 0).any(axis=1)
        out = _Candidates({nodes[r]: (v, r) for r, v in
                           zip(rows[keep].tolist(), values[keep].tolist())})
        out.n_pairs = n_pairs
        return out

    def _connectors(self, q: np.ndarray, ns: str, win: _Window, ids: list[str],
                    values: np.ndarray, value_of: Callable[[str], float], n_conn: int
                    ) -> tuple[list[tuple[float, str, int]], dict[str, np.ndarray]]:
        """The best ``n_conn`` connectors with a positive score (SPEC-025 §2.5) as
        ``(score, id, i)`` best first, and the CDR terms of the ``ids[i]`` scored.
        ``values`` are the bridge values within ``1e-12`` (relative), ``value_of``
        gives the exact one.

        score = bridge value · novelty · recency · max(relevance,
        min_connector_relevance).  Relevance (and coverage) need the stored
        vectors; where the backend can bound them (:meth:`CKFBackend.similarity_bounds`)
        only the candidates whose upper bound reaches the ``n_conn``-th best
        lower bound are read and scored exactly, which gives the same result.
        """
        heads = self.backend.scoring_arrays(ns, ids)
        recency = heads.recency(win.now)
        floor = self.min_connector_relevance
        exact = np.arange(len(ids))
        if len(ids) > n_conn:
            bounds = self.backend.similarity_bounds(
                ns, ids, np.vstack([q[None, :], win.coverage]))
            if bounds is not None:
                approx, err = bounds
                rel_lo, rel_hi = approx[:, 0] - err[:, 0], approx[:, 0] + err[:, 0]
                total = float(win.weights.sum()) if len(win.coverage) else 0.0
                if total > 0:
                    w = win.weights / total
                    cov_lo = (approx[:, 1:] - err[:, 1:]) @ w
                    cov_hi = (approx[:, 1:] + err[:, 1:]) @ w
                else:
                    cov_lo = cov_hi = np.zeros(len(ids))
                base = values * recency
                with np.errstate(invalid="ignore"):
                    lo = base * _cdr.novelty(cov_hi, win.novelty) * np.maximum(rel_lo, floor)
                    hi = base * _cdr.novelty(cov_lo, win.novelty) * np.maximum(rel_hi, floor)
                # values are within 1e-12 and the products round: widen by far more
                lo = np.where(np.isnan(lo), -np.inf, lo) - 1e-9 * np.abs(lo)
                hi = np.where(np.isnan(hi), np.inf, hi) + 1e-9 * np.abs(hi)
                cut = np.partition(lo, len(lo) - n_conn)[len(lo) - n_conn]
                exact = np.flatnonzero(hi >= cut)
        sub = _pick(ids, exact)
        vecs = self.backend.vectors(ns, sub)
        # float64 row by row: a fact's relevance must not depend on which others
        # are scored with it (BLAS kernels round differently by batch shape)
        relevance = (vecs.astype(np.float64) * q.astype(np.float64)).sum(axis=1)
        t = self._score(ns, sub, heads.take(exact), relevance, win, vecs)
        exact_values = np.array([value_of(x) for x in sub], dtype=np.float64)
        scores = (exact_values * t["novelty"] * t["recency"] *
                  np.maximum(t["relevance"], floor)).tolist()
        scored = [(score, node, i) for i, (score, node) in enumerate(zip(scores, sub))
                  if score > 0]
        scored.sort(key=lambda s: (-s[0], s[1]))
        return scored[:n_conn], t

    # -- communities (SPEC-009 §5) ----------------------------------------------------------

    def _maybe_recluster(self, ns: str) -> None:
        if self.recluster_every is not None and \
                self.backend.pending_recluster(ns) >= self.recluster_every:
            self.recluster(namespace=ns)

    def recluster(self, *, namespace: str | None = None) -> list[Community]:
        """Run Leiden (seeded) on the namespace's similarity graph and relabel.

        Communities smaller than ``min_community_size`` (3) are dissolved:
        their facts have no community.  Ids are 0, 1, ... by size (largest
        first), ties by the earliest fact.  Changes the ETag when the
        partition or the labels change (SPEC-009 §5.5).
        """
        self._live()
        ns = _check_namespace(namespace)
        ids, edges, weights = self.backend.graph(ns)
        membership = leiden(len(ids), edges, weights, resolution=self.resolution,
                            n_iterations=self.leiden_iterations, seed=self.seed)
        groups: dict[int, list[int]] = {}
        for i, c in enumerate(membership):
            groups.setdefault(c, []).append(i)
        kept = sorted((g for g in groups.values() if len(g) >= self.min_community_size),
                      key=lambda g: (-len(g), g[0]))
        assign = {ids[i]: cid for cid, g in enumerate(kept) for i in g}
        facts = {f.fact_id: f for f in self.backend.get(ns, list(assign)) if f is not None}
        members: dict[int, list[tuple[str, float]]] = {}
        for fid, cid in assign.items():
            members.setdefault(cid, []).append((facts[fid].content, facts[fid].importance))
        keywords = community_keywords(members) if members else {}
        self.backend.save_communities(ns, assign, keywords, now=self._clock())
        return self.communities(namespace=ns)

    def communities(self, *, namespace: str | None = None) -> list[Community]:
        """The namespace's communities as of the last :meth:`recluster`."""
        self._live()
        ns = _check_namespace(namespace)
        membership, keywords = self.backend.communities(ns)
        groups: dict[int, list[str]] = {}
        for fid, cid in membership.items():
            groups.setdefault(cid, []).append(fid)
        return [Community(cid, ns, label_of(keywords.get(cid, ())), tuple(keywords.get(cid, ())),
                          len(groups[cid]), tuple(sorted(groups[cid])))
                for cid in sorted(groups)]

    # -- state, stats -------------------------------------------------------------------------

    def etag(self, *, namespace: str | None = None) -> str:
        """The namespace's CKF state hash (SPEC-009 §6), the source of the ETag.

        SHA-256 over the embedding model id, the namespace, a digest of every
        fact's ``fact_id:content_hash:status:modified_at`` (a sum of SHA-256s
        mod 2^256, kept up to date by each write) and a digest of the
        communities.  Every mutation changes it (each one advances the fact's
        ``modified_at``); reads and access counts do not.
        """
        self._live()
        return self.backend.state_hash(_check_namespace(namespace))

    def namespaces(self) -> list[str]:
        self._live()
        return self.backend.namespaces()

    def stats(self) -> CKFStats:
        self._live()
        return self.backend.stats()

    def source(self, source_id: str, *, namespace: str | None = None) -> SourceRecord | None:
        """The source registry record of an ingested document (SPEC-009 §4.5)."""
        self._live()
        return self.backend.source(_check_namespace(namespace), source_id)

    def rebuild_index(self, *, namespace: str | None = None) -> None:
        """Rebuild the namespace's ANN index now (it also happens by the 20 % rule)."""
        self._live()
        self.backend.rebuild_index(_check_namespace(namespace))

    # -- ingestion (SPEC-009 §4) ----------------------------------------------------------------

    def ingest(self, items: Any, *, namespace: str | None = None,
               source_type: str | None = None, importance: float | None = None,
               ttl: Any = None, progress: bool | None = None) -> IngestReport:
        """Chunk documents into facts (:func:`chunk_text`) and store them.

        ``items``: one item or a list of them; a ``pathlib.Path`` (a file, or a
        directory searched recursively for .md/.markdown/.txt files, sorted)
        or ``{"path": ...}``; a str is a document's text, ``{"text": ...,
        "title": ..., "uri": ...}`` the same with a name.  Each document is a
        source (SPEC-009 §4.5) whose id derives from its URI (a file's path,
        or a text's SHA-256): ingesting an unchanged document again does
        nothing; a changed one adds the new facts and marks the old ones
        STALE in the same transaction.  A progress bar shows on a terminal.
        """
        self._live()
        ns = _check_namespace(namespace)
        stype = _check_source_type(source_type)
        _check_importance(importance, stype)
        if ttl is not None:
            _cdr.parse_ttl(ttl)
        docs = list(_documents(items))
        bar = _bar(len(docs), progress, "ingesting", "doc")
        added: list[str] = []
        sources: list[str] = []
        unchanged = updated = stale = 0
        try:
            for doc in docs:
                doc_hash = _sha256(doc["text"])
                sid = str(uuid.uuid5(uuid.NAMESPACE_URL, doc["uri"]))
                sources.append(sid)
                old = self.backend.source(ns, sid)
                if old is not None and old.document_hash == doc_hash:
                    unchanged += 1
                else:
                    chunks = chunk_text(doc["text"])
                    records = [self._record(
                        c.text, source=sid, source_location=c.location, source_type=stype,
                        importance=importance, ttl=ttl,
                        metadata={"section": c.section, "page": c.page,
                                  "paragraph": c.paragraph, "part": c.part,
                                  "title": doc["title"]}) for c in chunks]
                    supersede = [] if old is None else [
                        f.fact_id for f in self.backend.get(ns, list(old.fact_ids))
                        if f is not None and f.status == "ACTIVE"]
                    src = {"source_id": sid, "title": doc["title"], "uri": doc["uri"],
                           "document_hash": doc_hash,
                           "status": "ACTIVE" if old is None else "UPDATED"}
                    vecs = self._embed([r["content"] for r in records]) if records else \
                        np.zeros((0, self.backend.dim), dtype=np.float32)
                    added += self.backend.add_facts(
                        ns, records, vecs, knn=self.knn, edge_threshold=self.edge_threshold,
                        now=self._clock(), source=src, supersede=supersede)
                    updated += old is not None
                    stale += len(supersede)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        self._maybe_recluster(ns)
        return IngestReport(ns, len(docs), len(added), unchanged, updated, stale,
                            tuple(added), tuple(sources))


def _bar(total: int, wanted: bool | None, desc: str, unit: str) -> Any:
    if wanted is False or (wanted is None and not _is_tty()) or total <= 0:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit)


def _documents(items: Any) -> Iterable[dict[str, str]]:
    if isinstance(items, (str, os.PathLike, Mapping)):
        items = [items]
    for item in items:
        if isinstance(item, Mapping) and "path" in item:
            item = Path(item["path"])
        if isinstance(item, os.PathLike):
            yield from _path_documents(Path(item))
        elif isinstance(item, str):
            yield {"text": item, "title": item.strip().split("\n", 1)[0][:80],
                   "uri": f"text:sha256:{_sha256(item)}"}
        elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
            text = item["text"]
            yield {"text": text, "title": str(item.get("title") or text.strip()[:80]),
                   "uri": str(item.get("uri") or f"text:sha256:{_sha256(text)}")}
        else:
            raise InvalidArgumentError(
                f"ingest takes texts (str), paths (pathlib.Path or {{'path': p}}) or "
                f"{{'text': ..., 'title': ...}} dicts, not {type(item).__name__}")


def _path_documents(path: Path) -> Iterable[dict[str, str]]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file()
                       and p.suffix.lower() in INGEST_SUFFIXES
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
    elif path.is_file():
        files = [path]
    else:
        raise IngestSourceError(f"{path} does not exist; pass an existing file or directory "
                                "(for a text, pass the str itself)")
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise IngestSourceError(f"{f} is not UTF-8 text; convert it (iconv -t utf-8) or "
                                    "leave it out") from None
        except OSError as exc:
            raise IngestSourceError(f"cannot read {f} ({exc.strerror}); check its "
                                    "permissions") from None
        yield {"text": text, "title": f.name, "uri": f.resolve().as_uri()}
