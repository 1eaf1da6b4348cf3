"""What a back end provides: the openers of a store's parts.

:func:`ctxrelay.storage.open_stores` finds the back end of a spec by scheme
(:func:`ctxrelay.storage.spec.register_backend`) and asks it for each part on
first use; the cache spec's back end (:func:`~ctxrelay.storage.spec.register_cache`)
gives the hot cache and, if it keeps one (Redis), the rolling log.  Each part
it returns implements its Protocol in this package and passes its
conformance suite under ``tests/storage/conformance``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ctxrelay.storage.interfaces.cache import HotCacheBackend
    from ctxrelay.storage.interfaces.rolling import RollingLogBackend
    from ctxrelay.storage.interfaces.scratch import ScratchBuffer
    from ctxrelay.storage.interfaces.transcript import Transcript
    from ctxrelay.storage.interfaces.turnlog import TurnLogStore
    from ctxrelay.storage.interfaces.warm import WarmArtifacts

__all__ = ["Backend", "CacheBackend", "PARTS"]

#: The parts a store may hold besides its transcript (the names ``has`` takes).
PARTS = ("turnlog", "warm", "scratch", "facts")


@runtime_checkable
class Backend(Protocol):
    """Opens the durable parts of one store (``opener(spec, *, map_size, max_turn_bytes)``
    makes it)."""

    def open_transcript(self) -> "Transcript": ...

    def open_turnlog(self) -> "TurnLogStore": ...

    def open_warm(self) -> "WarmArtifacts": ...

    def open_scratch(self) -> "ScratchBuffer": ...

    def open_facts(self) -> Any: ...

    def open_rolling(self, *, capacity_entries: int,
                     capacity_bytes: int) -> "RollingLogBackend": ...

    def identity(self) -> str:
        """A short id of this store, stable across processes and opens, and the same
        for every spelling of its spec that reaches it (for PostgreSQL: an id made
        with the schema and read from it, so ``postgres://localhost`` and
        ``postgresql://127.0.0.1?sslmode=...`` agree).  Caches shared by processes
        key their per-store entries by it (the Redis hot tails), so two stores never
        share one and every relay of a store finds the same.  A back end without
        this method gets :func:`ctxrelay.storage.spec.store_identity` of its spec."""

    def has(self, part: str) -> bool:
        """Whether the store holds ``part`` (one of :data:`PARTS`) already;
        nothing is created."""

    def close(self) -> None: ...


@runtime_checkable
class CacheBackend(Protocol):
    """Opens the rebuildable hot tier (``opener(spec)`` makes it)."""

    def open_hot_cache(self) -> "HotCacheBackend": ...

    def open_rolling(self, *, capacity_entries: int, capacity_bytes: int,
                     store: str) -> "RollingLogBackend | None":
        """The rolling log, or None to use the store back end's own.  ``store``
        names the store (the store back end's :meth:`Backend.identity`), so stores
        that share the cache keep their rolling logs apart and every process of one
        store shares its rolling log."""

    def close(self) -> None: ...
