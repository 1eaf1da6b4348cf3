"""The scratch buffer (Tier E): tool outputs as blobs, their summaries in context.

Contract (every back end; ``tests/storage/conformance/test_scratch.py``)
-------------------------------------------------------------------------
Ids
    ``put`` returns an entry whose ``scratch_id`` is ``scr_`` and 32 random
    hex digits (unguessable); an id resolves only within the session that put
    it: another session's id, an evicted or a deleted entry raise
    :class:`~ctxrelay.storage.lmdb.scratch.UnknownScratchError`.  A malformed
    or path-like id raises ``InvalidScratchIdError`` / ``UnsafeScratchIdError``
    before anything is read.
Ordering
    ``list`` in put order; ``latest(n)`` the newest n, oldest first;
    ``most_recent`` the newest match.
Durability and atomicity
    A put makes the raw output durable (the blob) before the entry becomes
    visible, and writes the entry, its indexes and the usage totals in one
    transaction; a failed put leaves no entry (at most an orphan blob that
    ``check`` removes).  ``raw`` returns the output byte for byte (``str`` if
    it was put as ``str``) or raises ``ScratchBlobError`` when the blob is
    missing or altered.
Retention
    Unpinned entries go when their retention (``ttl``) ends or, least
    recently used first, when the blob bytes exceed the budget (every put
    evicts in its own transaction); pinned entries are never evicted.  An
    unpinned output that cannot fit raises ``ScratchFullError`` and stores
    nothing.  ``reference`` records a using turn and pins at the store's
    ``auto_pin_after`` distinct turns.
Freshness
    ``gate``/``render`` never present a stale reading as current (see
    :func:`ctxrelay.storage.lmdb.scratch.gate`); ``promote`` offers only
    pinned STABLE/STATIC entries (``NotPromotableError`` otherwise).
Errors
    The scratch errors above, InvalidArgumentError, InvalidContentError
    (output not str/bytes), StoreFullError, StoreError (closed),
    CorruptStoreError.
Copying (``ctxrelay migrate``)
    ``sessions()`` lists the sessions holding entries; ``blob`` reads an
    output's bytes without counting a use (the source of a copy keeps its
    LRU order); ``restore`` writes entries read from another store with their
    blobs as they are (ids, times, last use, insertion number, pins,
    references, so retention, LRU and expiry carry over), each blob checked
    against its entry's hash, and runs no eviction; it refuses
    (:class:`~ctxrelay.errors.SessionExistsError`) an id the store already
    holds, before writing anything.
Durable and rebuildable
    Entries and blobs are durable (but evictable by design); the usage
    totals and the order/LRU/expiry indexes are derived: ``verify()``
    compares, ``verify(repair=True)`` rewrites them; ``check()`` reconciles
    blobs with entries after a crash.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ctxrelay.storage.common.scratch.records import (CheckReport, EvictionReport, Promotion,
                                                         Rendered, ScratchEntry, ScratchStats)

__all__ = ["ScratchBuffer"]


@runtime_checkable
class ScratchBuffer(Protocol):
    """Tool outputs of every session (see the module doc)."""

    @property
    def closed(self) -> bool: ...

    @property
    def disk_budget_bytes(self) -> int: ...

    def close(self) -> None: ...

    def location(self) -> str:
        """Where the blobs live (SPEC-038 §4)."""

    # -- writing -----------------------------------------------------------------
    def put(self, session_id: str, tool_name: str, args: Mapping[str, Any],
            raw: str | bytes, *, freshness: str | None = None,
            freshness_ttl: float | None = ..., ttl: float | None = ...,
            pinned: bool = False, now: float | datetime | None = None) -> "ScratchEntry":
        """Store one tool output; its entry carries the summary."""

    def pin(self, session_id: str, scratch_id: str) -> "ScratchEntry": ...

    def unpin(self, session_id: str, scratch_id: str) -> "ScratchEntry": ...

    def reference(self, session_id: str, scratch_id: str, turn_id: int, *,
                  now: float | datetime | None = None) -> "ScratchEntry":
        """Record that turn ``turn_id`` used the entry (auto-pins, see Retention)."""

    def delete(self, session_id: str, scratch_id: str) -> None: ...

    def evict(self, now: float | datetime | None = None) -> "EvictionReport": ...

    # -- reading -------------------------------------------------------------------
    def get(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None, touch: bool = True) -> "ScratchEntry":
        """The entry (a use for LRU unless ``touch=False``)."""

    def entry_dict(self, session_id: str, scratch_id: str) -> dict[str, Any]:
        """``get(..., touch=False).to_dict()``: a new plain dict on every call."""

    def raw(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None) -> str | bytes:
        """The whole output, checked against its hash."""

    def list(self, session_id: str) -> list["ScratchEntry"]: ...

    def latest(self, session_id: str, n: int) -> list["ScratchEntry"]: ...

    def most_recent(self, session_id: str, tool_type: str | None = None, *,
                    kind: str | None = None) -> "ScratchEntry | None": ...

    def stats(self, session_id: str | None = None) -> "ScratchStats": ...

    # -- freshness and promotion ---------------------------------------------------------
    def gate(self, entry: "ScratchEntry", now: float | datetime | None = None, *,
             policy: str | None = None, can_reinvoke: bool = True) -> str: ...

    def render(self, entry: "ScratchEntry", now: float | datetime | None = None, *,
               policy: str | None = None, can_reinvoke: bool = True) -> "Rendered": ...

    def promote(self, session_id: str, scratch_id: str) -> "Promotion": ...

    # -- copying (ctxrelay migrate) ----------------------------------------------------------
    def sessions(self) -> list[str]:
        """The ids of the sessions holding entries, sorted."""

    def blob(self, session_id: str, scratch_id: str) -> bytes:
        """The stored output's bytes, checked against its hash; not a use (no LRU touch)."""

    def restore(self, entries: Iterable[tuple["ScratchEntry", bytes]]) -> int:
        """Write copies of ``(entry, blob)`` pairs as they are; returns how many
        (see Copying)."""

    # -- consistency -----------------------------------------------------------------------
    def check(self, *, grace_seconds: float = 60.0, verify: bool = False) -> "CheckReport":
        """Reconcile blobs and entries (orphans, unfinished writes, lost blobs)."""

    def verify(self, *, repair: bool = False) -> tuple[str, ...]:
        """The derived records' disagreements with the entries (rewritten with
        ``repair``)."""
