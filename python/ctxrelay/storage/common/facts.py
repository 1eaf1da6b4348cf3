"""The parts of a fact store that do not depend on where its records live.

:class:`FactWrites` shapes the arguments of two writes for the back end's
``_write``; :class:`SnapshotReads` gives a :class:`~ctxrelay.storage.interfaces.facts.FactStorage`
every read of the :class:`FactReader` contract, each in its own
:meth:`snapshot`; :class:`NamespaceSteps` is the bookkeeping a writer does on a
namespace's record (modification time, digest); :func:`still_due` and
:func:`source_record` are what both back ends compute from a stored record.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.interfaces.facts import (TRANSITIONS, EmbeddingModelMismatchError, Fact,
                                               FactReader, FactTable, HeadArrays, Linker,
                                               NamespaceState, SourceRecord,
                                               StatusTransitionError, Written, iso_time)
from ctxrelay.storage.common import factstate

__all__ = ["SnapshotReads", "FactWrites", "NamespaceSteps", "configured", "check_transition",
           "still_due", "source_record"]

T = TypeVar("T")


class SnapshotReads:
    """A fact store's reads, each one :meth:`snapshot` of the back end's view.

    A back end defines :meth:`snapshot`; every read of the contract follows.
    One call, one snapshot: nothing here sits inside a per-record loop.
    """

    def snapshot(self, fn: Callable[[FactReader], T]) -> T:
        raise NotImplementedError

    def namespaces(self) -> list[str]:
        return self.snapshot(lambda v: v.namespaces())

    def namespace(self, ns: str) -> NamespaceState | None:
        return self.snapshot(lambda v: v.namespace(ns))

    def state_hash(self, ns: str) -> str:
        return self.snapshot(lambda v: v.state_hash(ns))

    def locate(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        return self.snapshot(lambda v: v.locate(ns, ids))

    def get(self, ns: str, ids: Sequence[str]) -> list[Fact | None]:
        return self.snapshot(lambda v: v.get(ns, ids))

    def lookup_key(self, ns: str, key: str, *, any_status: bool = False) -> str | None:
        return self.snapshot(lambda v: v.lookup_key(ns, key, any_status=any_status))

    def vectors(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        return self.snapshot(lambda v: v.vectors(ns, ids))

    def heads(self, ns: str, ids: Sequence[str]) -> HeadArrays:
        return self.snapshot(lambda v: v.heads(ns, ids))

    def scan(self, ns: str) -> list[Fact]:
        return self.snapshot(lambda v: v.scan(ns))

    def search_terms(self, ns: str, query: str, k: int) -> list[tuple[str, float]]:
        return self.snapshot(lambda v: v.search_terms(ns, query, k))

    def source(self, ns: str, source_id: str) -> SourceRecord | None:
        return self.snapshot(lambda v: v.source(ns, source_id))

    def communities(self, ns: str) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]:
        return self.snapshot(lambda v: v.communities(ns))

    def ids_at(self, ns: str, seqs: Sequence[int]) -> list[str | None]:
        return self.snapshot(lambda v: v.ids_at(ns, seqs))

    def heads_at(self, ns: str, seqs: Sequence[int]) -> HeadArrays:
        return self.snapshot(lambda v: v.heads_at(ns, seqs))

    def vectors_at(self, ns: str, seqs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        return self.snapshot(lambda v: v.vectors_at(ns, seqs))

    def fact_table(self, ns: str) -> FactTable:
        return self.snapshot(lambda v: v.fact_table(ns))

    def iter_vectors(self, ns: str, chunk: int, *, skip: Any = ()
                     ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # read whole inside the snapshot: a generator would outlive its transaction
        return iter(self.snapshot(lambda v: list(v.iter_vectors(ns, chunk, skip=skip))))

    def hidden(self, ns: str) -> set[int]:
        return self.snapshot(lambda v: v.hidden(ns))

    def edges(self, ns: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.snapshot(lambda v: v.edges(ns))

    def edge_rows(self, ns: str, seqs: Any) -> dict[int, tuple[list[int], list[float]]]:
        return self.snapshot(lambda v: v.edge_rows(ns, list(seqs)))

    def changes(self, ns: str, since: int, upto: int) -> list[Any] | None:
        return self.snapshot(lambda v: v.changes(ns, since, upto))

    def due(self, ns: str, *, now: float) -> list[str]:
        return self.snapshot(lambda v: v.due(ns, now))


class FactWrites:
    """The writes of a fact store that only shape their arguments before the back
    end's ``_write(ns, body)`` runs ``body(writer)`` in one transaction."""

    dim: int

    def _write(self, ns: str, body: Callable[[Any], T]) -> Written[T]:
        raise NotImplementedError

    def add_facts(self, ns: str, records: Sequence[Mapping[str, Any]], vectors: np.ndarray, *,
                  now: float, link: Linker | None = None,
                  source: Mapping[str, Any] | None = None,
                  supersede: Sequence[str] = ()) -> Written[list[str]]:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(records), self.dim)
        return self._write(ns, lambda w: w.add_facts(records, vectors, now=now, link=link,
                                                     source=source, supersede=supersede))

    def update_fact(self, ns: str, fact_id: str, changes: Mapping[str, Any],
                    vector: np.ndarray | None = None, *, now: float,
                    link: Linker | None = None) -> Written[None]:
        if vector is not None and "content" not in changes:
            raise InvalidArgumentError("a new vector comes with new content: pass both")
        return self._write(ns, lambda w: w.update_fact(fact_id, changes, vector, now=now,
                                                       link=link))


class NamespaceSteps:
    """A writer's bookkeeping on its namespace's record (``self.ns_info``, the
    decoded namespace record the back end's writer holds for one transaction)."""

    ns_info: dict[str, Any]

    def tick(self, now: float) -> float:
        """A modification time strictly after the namespace's last one."""
        info = self.ns_info
        t = max(float(now), info["last_mod"] + 1e-6)
        info["last_mod"] = t
        return t

    def redigest(self, old: int | None, new: int | None) -> None:
        d = int(self.ns_info["digest"], 16)
        if old is not None:
            d -= old
        if new is not None:
            d += new
        self.ns_info["digest"] = format(d % factstate.DIGEST_MOD, "x")


def configured(where: str, found: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The stored configuration ``found`` of the CKF ``where`` ("at <path>"), checked
    against the one a caller opened it with (``wanted``; ``model_id`` None: any)."""
    if wanted["model_id"] is None:
        return found
    if found["model_id"] != wanted["model_id"] or found["dim"] != wanted["dim"]:
        raise EmbeddingModelMismatchError(
            f"the CKF {where} holds vectors of {found['model_id']!r} "
            f"(dim {found['dim']}), not {wanted['model_id']!r} (dim {wanted['dim']}); "
            f"open it with embedder={found.get('embedder') or found['model_id']!r}, or "
            "build a new store and ingest again with the new model (SPEC-009 §3.4)")
    return found


def check_transition(fact_id: str, old: str, status: str) -> None:
    """Raise :class:`StatusTransitionError` unless a fact may go from ``old`` to
    ``status`` (SPEC-009 §2.2)."""
    if status not in TRANSITIONS[old]:
        raise StatusTransitionError(
            f"fact {fact_id} is {old}; it cannot become {status} (SPEC-009 §2.2). "
            + ("A DELETED fact is erased for good; add it again as a new fact"
               if old == "DELETED" else
               f"allowed from {old}: {', '.join(sorted(TRANSITIONS[old]))}"))


def still_due(now: float) -> Callable[[str, dict[str, Any]], bool]:
    """Whether a fact (its status and record) is still past its due time at ``now``:
    :meth:`expire` checks it again inside its write, as a write may have come first."""
    def check(status: str, rec: dict[str, Any]) -> bool:
        due = factstate.due_time(status, rec)
        return due is not None and now > due
    return check


def source_record(ns: str, raw: str | bytes) -> SourceRecord:
    """A stored source record (JSON) of namespace ``ns`` as a :class:`SourceRecord`."""
    src = json.loads(raw)
    return SourceRecord(source_id=src["source_id"], namespace=ns, title=src["title"],
                        uri=src["uri"], document_hash=src["document_hash"],
                        ingested_at=iso_time(src["ingested_at"]),
                        fact_count=src["fact_count"], status=src["status"],
                        fact_ids=tuple(src["fact_ids"]))
