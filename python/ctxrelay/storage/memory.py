"""The ``memory://`` cache back end: the hot cache in this process.

It keeps no rolling log of its own (``open_rolling`` returns None), so the
store's back end provides it (for LMDB: mmap rings beside the store).
"""
from __future__ import annotations

from typing import Any

from ctxrelay.storage.spec import CacheSpec

__all__ = ["MemoryCache"]


class MemoryCache:
    """An in-process :class:`~ctxrelay.storage.cache.HotCache` per store."""

    def __init__(self, spec: CacheSpec) -> None:
        self.spec = spec

    def open_hot_cache(self) -> Any:
        # numpy loads with the cache, on first use: appends and recent-turn reads
        # need neither, and CLI start-up counts.
        from ctxrelay.storage.cache import HotCache
        return HotCache()

    def open_rolling(self, *, capacity_entries: int, capacity_bytes: int,
                     store: str) -> None:
        return None

    def close(self) -> None:
        """Nothing to release: the hot cache is garbage with the store."""
