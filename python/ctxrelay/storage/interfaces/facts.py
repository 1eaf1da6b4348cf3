"""The durable part of the CKF (Tier P): facts, keys, vectors, edges, a change feed.

:class:`FactStorage` is what a knowledge fabric needs from a back end; the
embedded one is :class:`ctxrelay.storage.lmdb.facts.LmdbFacts`, a PostgreSQL +
pgvector one would implement the same methods.  What is computed stays in
:mod:`ctxrelay.knowledge` (embedding, the hnswlib index, the walk graph, CDR and
CDGR scoring, Leiden communities, chunking, input checks) and talks to a back end
only through these two Protocols, so ``tests/storage/conformance/test_facts.py``
is all a second back end has to pass.

Identity.  A fact has a ``fact_id`` (a UUID4 string the store draws) and a
``seq``: an integer unique in the whole store, increasing in insertion order,
never reused, that in-memory indexes use as their label.  Ids and seqs never
change.  A namespace (tenant) has a name, an integer ``id`` and its own keys,
statistics, communities and state hash; a fact id or seq of another namespace is
*unknown* there (reads return None / -1 / ``b""``, writes raise
:class:`UnknownFactError`).

Contract of every back end:

- **Writes are all or nothing.**  A write that raises changes nothing stored.
  ``add_facts`` with a key already taken (or given twice) raises
  :class:`FactKeyExistsError`; a change of status that :data:`TRANSITIONS` does
  not allow raises :class:`StatusTransitionError`; an id not of the namespace
  raises :class:`UnknownFactError`.
- **Statuses** (SPEC-009 §2.2): new facts are ACTIVE; ACTIVE and STALE are
  *retrievable* (:data:`RETRIEVABLE`): ``lookup_key`` (unless ``any_status``)
  and ``search_terms`` return only those.  DELETED is final and erases (§8.3):
  content, hash, key, metadata, source location, vector, terms, access counts,
  community membership and edges go in the same write; a tombstone with the id,
  source and timestamps stays.  Re-embedding a STALE fact makes it ACTIVE.
- **Time.**  Every write that changes a fact record gives it a ``modified_at``
  strictly after the namespace's previous one (``NamespaceState.last_mod``
  moves with it); ``ingested_at`` is set once.  Fact timestamps read back as ISO
  8601 UTC with microseconds (:func:`iso_time`).
- **The state hash** (SPEC-009 §6) of a namespace changes with every write that
  changes a fact record or the communities, and with nothing else (reads,
  ``record_access`` and no-op writes leave it); it is a function of the model
  id, the namespace, every fact's ``fact_id:content_hash:status:modified_at``
  and the communities.
- **The change feed.**  Every change to what a vector index of the namespace
  must hold is one entry of an ordered feed, written in the same transaction:
  ``show`` (a seq's vector is new, replaced or retrievable again) or ``hide``
  (a seq is no longer retrievable, or was re-hidden).  ``NamespaceState.gen``
  is the number of the latest entry; ``changes(ns, since, upto)`` returns the
  entries after ``since`` up to ``upto`` in order, or None when they are no
  longer all held (a checkpoint may drop entries up to its generation: the
  caller then reloads its snapshot or rebuilds from ``iter_vectors``).
  Applying the entries in order to a structure that reflected ``since`` (show:
  take the stored vector if there is one, hide: drop) gives one that reflects
  ``upto``; applying an entry twice is harmless.  Edges change only together
  with an entry on one of their ends.
- **The expiry index.**  ``due(ns, now)`` returns the ACTIVE facts with a TTL
  whose ``ingested_at`` (as read back) plus ``ttl_seconds`` is before ``now``, in
  seq order, without reading the other facts; ``expire`` marks those of the
  given ids that are still due STALE (a write in between wins).
- **Snapshots.**  ``snapshot(fn)`` runs ``fn(reader)`` against one consistent
  state; each read method called on the store itself is its own snapshot.
- **Links.**  ``add_facts`` and a re-embedding ``update_fact`` call ``link`` (if
  given) once per attempt of their transaction, before they change anything,
  with a reader of that transaction, the namespace state, the seqs the write
  gives or re-embeds, their vectors and whether they will be retrievable;
  ``link`` returns similarity edges ``(seq, other seq, weight)``, which the
  write stores both ways.  A back end that retries a transaction calls it again.
- **Receipts.**  Writes return :class:`Written`: the value, the namespace's
  ``gen`` and ``last_mod`` before and after, and the seqs whose records changed,
  so a caller's in-memory copies can tell its own writes from anyone else's.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

import numpy as np

from ctxrelay.errors import CtxRelayError, InvalidArgumentError, PlainMessage
from ctxrelay.types import copy_plain

__all__ = [
    "STATUSES", "RETRIEVABLE", "TRANSITIONS",
    "UnknownFactError", "FactKeyExistsError", "InvalidFactError", "StatusTransitionError",
    "EmbeddingModelMismatchError",
    "iso_time", "epoch_of", "community_label",
    "Fact", "SourceRecord", "HeadArrays", "NamespaceState", "Change", "FactTable",
    "Written", "Checkpoint", "Linker", "Saver", "FactReader", "FactStorage",
]

T = TypeVar("T")

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

_STATUS_BYTE = {"ACTIVE": b"A", "STALE": b"S", "DELETED": b"D", "QUARANTINED": b"Q"}
_BYTE_STATUS = {v: k for k, v in _STATUS_BYTE.items()}


# -- errors -------------------------------------------------------------------

class UnknownFactError(PlainMessage, CtxRelayError, KeyError):
    """No fact with this id or key in the namespace."""

    kind = "unknown_fact"


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


# -- time and labels ----------------------------------------------------------

@functools.lru_cache(maxsize=1 << 16)
def iso_time(ts: float | None) -> str | None:
    """An epoch time as a fact reads it back: ISO 8601 UTC, microseconds, ``Z``."""
    # Cached: every fact read formats three stored timestamps, and hot facts are
    # read again and again (a key lookup's budget is 50 µs).
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(
        timespec="microseconds").replace("+00:00", "Z")


def epoch_of(iso: str) -> float:
    """The epoch seconds of an :func:`iso_time` string."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def community_label(keywords: Sequence[str], *, words: int = 3) -> str:
    """A community's human-readable label: its first keywords joined by ' / '."""
    return " / ".join(keywords[:words]) if keywords else "(no keywords)"


# -- records ------------------------------------------------------------------

@dataclass(frozen=True)
class Fact:
    """One CKF fact node (SPEC-009 §2); the embedding is kept apart.

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
class HeadArrays:
    """What a ranking reads of many facts, as arrays: status bytes (``b"A"``,
    ``b"S"``, ``b"D"``, ``b"Q"``; ``b""`` for an unknown fact), importance,
    ``modified_at`` epoch and TTL seconds (NaN: none)."""

    status: np.ndarray
    importance: np.ndarray
    modified: np.ndarray
    ttl: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[str, float, float, float | None] | None]
                  ) -> "HeadArrays":
        """From ``(status, importance, modified_at epoch, ttl seconds)`` rows (None: unknown)."""
        return cls(np.array([b"" if r is None else _STATUS_BYTE[r[0]] for r in rows], dtype="S1"),
                   np.array([0.0 if r is None else r[1] for r in rows], dtype=np.float64),
                   np.array([math.nan if r is None else r[2] for r in rows], dtype=np.float64),
                   np.array([math.nan if r is None or r[3] is None else r[3] for r in rows],
                            dtype=np.float64))

    def rows(self) -> list[tuple[str, float, float, float | None] | None]:
        """The inverse of :meth:`from_rows`."""
        return [None if st == b"" else (_BYTE_STATUS[st], imp, mod, None if t != t else t)
                for st, imp, mod, t in zip(self.status.tolist(), self.importance.tolist(),
                                           self.modified.tolist(), self.ttl.tolist())]

    def take(self, at: np.ndarray) -> "HeadArrays":
        return HeadArrays(self.status[at], self.importance[at], self.modified[at], self.ttl[at])

    def __len__(self) -> int:
        return len(self.status)

    @property
    def retrievable(self) -> np.ndarray:
        return (self.status == b"A") | (self.status == b"S")


@dataclass(frozen=True)
class NamespaceState:
    """A namespace as of one read.

    ``gen`` numbers the latest change-feed entry; ``saved_gen`` and ``ef`` are
    what the last :meth:`FactStorage.checkpoint` recorded; ``churn`` counts the
    seqs hidden or re-embedded since the last checkpoint marked ``rebuilt``;
    ``pending`` the facts added since :meth:`FactStorage.save_communities`;
    ``last_mod`` the latest ``modified_at`` (epoch) given in the namespace;
    ``communities`` how many communities were last saved (their keywords:
    :meth:`FactReader.communities`).
    """

    name: str
    id: int
    gen: int
    saved_gen: int
    churn: int
    pending: int
    edges: int
    last_mod: float
    counts: Mapping[str, int]
    communities: int
    ef: int | None


class Change(NamedTuple):
    """One change-feed entry: generation, hide (else show), seq."""

    gen: int
    hide: bool
    seq: int


@dataclass(frozen=True)
class FactTable:
    """Every fact of a namespace in seq order: seqs (int64), ids, their heads,
    and the namespace's ``last_mod`` they reflect."""

    seqs: np.ndarray
    ids: list[str]
    heads: HeadArrays
    stamp: float


@dataclass(frozen=True)
class Written(Generic[T]):
    """A committed write: its value and what it moved in the namespace."""

    value: T
    namespace: str
    gen_before: int = 0
    gen_after: int = 0
    stamp_before: float = 0.0
    stamp_after: float = 0.0
    #: seqs whose fact records the write changed
    seqs: tuple[int, ...] = ()


@dataclass(frozen=True)
class Checkpoint:
    """What a :data:`Saver` made durable outside the store: everything up to
    change ``gen``, with the tuned ``ef`` (None: none); ``rebuilt`` resets ``churn``."""

    gen: int
    ef: int | None = None
    rebuilt: bool = False


#: ``link(reader, state, seqs, vectors, retrievable) -> [(seq, other, weight)]``
Linker = Callable[["FactReader", NamespaceState, Sequence[int], np.ndarray, bool],
                  Iterable[tuple[int, int, float]]]
#: ``save(reader, state) -> Checkpoint``, run inside a checkpoint's transaction
Saver = Callable[["FactReader", NamespaceState], Checkpoint]


# -- the protocols ------------------------------------------------------------

@runtime_checkable
class FactReader(Protocol):
    """Reads of one consistent state (see the module doc for the contract).

    Methods taking ``ids`` accept any sequence of str; unknown ids give None,
    -1 or ``b""`` except in :meth:`vectors`.
    """

    model_id: str
    dim: int

    def namespaces(self) -> list[str]:
        """Every namespace with a write, sorted."""

    def namespace(self, ns: str) -> NamespaceState | None:
        """The namespace's state, None before its first write."""

    def state_hash(self, ns: str) -> str:
        """SPEC-009 §6's state hash (a namespace never written has one too)."""

    def locate(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        """The seqs of ``ids`` (int64, -1 for an id not of the namespace)."""

    def get(self, ns: str, ids: Sequence[str]) -> list[Fact | None]:
        """The facts, any status; each a copy the caller may change."""

    def lookup_key(self, ns: str, key: str, *, any_status: bool = False) -> str | None:
        """The id of the fact named ``key``; retrievable ones only unless ``any_status``."""

    def vectors(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        """float32 rows, one per id (zeros for a fact without a vector: a deleted one).
        @raise UnknownFactError for an id not of an existing namespace."""

    def heads(self, ns: str, ids: Sequence[str]) -> HeadArrays:
        """The ranking heads of ``ids``."""

    def scan(self, ns: str) -> list[Fact]:
        """Every fact, any status, in seq order."""

    def search_terms(self, ns: str, query: str, k: int) -> list[tuple[str, float]]:
        """BM25 over the retrievable facts' terms: ``(fact id, score)``, best first."""

    def source(self, ns: str, source_id: str) -> SourceRecord | None: ...

    def communities(self, ns: str) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]:
        """Membership of the retrievable facts and every community's keywords."""

    # by seq, for in-memory structures kept by the caller
    def ids_at(self, ns: str, seqs: Sequence[int]) -> list[str | None]: ...

    def heads_at(self, ns: str, seqs: Sequence[int]) -> HeadArrays: ...

    def vectors_at(self, ns: str, seqs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, found)``: float32 rows (zeros where ``found`` is False)."""

    def fact_table(self, ns: str) -> FactTable: ...

    def iter_vectors(self, ns: str, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every stored vector in seq order as ``(seqs, rows)`` chunks of at most ``chunk``."""

    def hidden(self, ns: str) -> set[int]:
        """The seqs of the facts that are not retrievable."""

    def edges(self, ns: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every stored edge in both directions, ordered by (src, dst): int64 src and dst,
        float32 weights."""

    def edge_rows(self, ns: str, seqs: Iterable[int]) -> dict[int, tuple[list[int], list[float]]]:
        """The stored edges of each seq: neighbours (ascending) and weights."""

    def changes(self, ns: str, since: int, upto: int) -> list[Change] | None:
        """The change-feed entries after ``since`` up to ``upto``, or None when not all held."""


@runtime_checkable
class FactStorage(FactReader, Protocol):
    """The durable store of a CKF; its read methods each run in their own snapshot."""

    name: str
    config: Mapping[str, Any]

    @property
    def location(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...

    def snapshot(self, fn: Callable[[FactReader], T]) -> T:
        """``fn(reader)`` against one consistent state."""

    def version(self) -> int:
        """A number that grows with every committed write to the store (it may grow
        with writes that change nothing a reader sees)."""

    def due(self, ns: str, *, now: float) -> list[str]:
        """The ACTIVE facts past ``ingested_at + ttl`` at ``now``, in seq order."""

    def add_facts(self, ns: str, records: Sequence[Mapping[str, Any]], vectors: np.ndarray, *,
                  now: float, link: Linker | None = None,
                  source: Mapping[str, Any] | None = None,
                  supersede: Sequence[str] = ()) -> Written[list[str]]:
        """Insert ACTIVE facts (creating the namespace); returns their new ids.

        A record holds ``content``, ``content_hash``, ``key``, ``source_id``,
        ``source_location``, ``source_type``, ``importance``, ``ttl``,
        ``ttl_seconds``, ``metadata``.  ``source`` (``source_id``, ``title``,
        ``uri``, ``document_hash``, ``status``) is recorded with the new ids, and
        the ACTIVE ones of ``supersede`` become STALE, in the same transaction.
        """

    def update_fact(self, ns: str, fact_id: str, changes: Mapping[str, Any],
                    vector: np.ndarray | None = None, *, now: float,
                    link: Linker | None = None) -> Written[None]:
        """Change a fact's fields (any of the record's and ``key``); a ``vector``
        (with new ``content``) re-embeds it: edges go, ``link``'s come."""

    def set_status(self, ns: str, ids: Sequence[str], status: str, *,
                   now: float) -> Written[int]:
        """Move facts to ``status``; how many changed (same status: no change)."""

    def expire(self, ns: str, ids: Sequence[str], *, now: float) -> Written[int]:
        """Mark those of ``ids`` that are still due (see :meth:`due`) STALE; how many."""

    def record_access(self, ns: str, ids: Sequence[str], *, now: float) -> None:
        """Count one access of each fact (the state hash does not change)."""

    def save_communities(self, ns: str, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], *,
                         now: float) -> Written[bool]:
        """Replace the communities; False (and no new state hash) when they are the same."""

    def checkpoint(self, ns: str, save: Saver) -> Checkpoint | None:
        """Run ``save(reader, state)`` in a write transaction of the namespace and record
        its :class:`Checkpoint` (None for a namespace not written yet)."""
