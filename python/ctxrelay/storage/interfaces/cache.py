"""The hot cache: retrieval results answered from memory, keyed by meaning.

Contract (every back end; ``tests/storage/conformance/test_cache.py``)
-----------------------------------------------------------------------
Keys
    ``key(embedding, etag, scope)`` makes a :class:`~ctxrelay.storage.cache.CacheKey`
    (CRP's logic: a sign-random-projection bucket of the unit embedding, the
    CKF state hash ``etag``, a ``scope``); a shared back end stores entries
    under ``CacheKey.digest()``.  An all-zero or non-finite embedding raises
    :class:`~ctxrelay.storage.cache.InvalidEmbeddingError`.
Lookups
    ``get`` answers only for an entry of the same scope, etag and bucket
    whose stored query is similar enough to the asked one (else ``default``);
    an entry past its TTL is a miss.  ``put`` replaces the entry of its key.
Invalidation
    ``invalidate(etag)`` drops every entry of that etag (a CKF mutation makes
    a new one, so old entries could not be found anyway), ``invalidate(scope=)``
    every entry of a scope, ``invalidate_all()`` everything; each returns how
    many went.
Durable and rebuildable
    Nothing: losing the cache costs latency, never correctness.  Values are
    stored as given; treat them as immutable.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ctxrelay.storage.cache import CacheKey, CacheStats

__all__ = ["HotCacheBackend"]


@runtime_checkable
class HotCacheBackend(Protocol):
    """What the router needs from a hot cache store (SPEC-038 §2.3)."""

    def key(self, embedding: "np.ndarray", etag: str, scope: str) -> "CacheKey": ...

    def get(self, key: "CacheKey", default: Any = None) -> Any: ...

    def put(self, key: "CacheKey", value: Any) -> None: ...

    def invalidate(self, etag: str | None = None, *, scope: str | None = None) -> int: ...

    def invalidate_all(self) -> int: ...

    def stats(self) -> "CacheStats": ...
