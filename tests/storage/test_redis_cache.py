"""The Redis hot tier: shared between processes, and never required."""
from __future__ import annotations

import uuid

import numpy as np

from ctxrelay.storage.redis import RedisCache
from ctxrelay.storage.spec import parse_cache_spec
from services import redis_url


def _vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=32).astype(np.float32)


def _cache(url: str):
    return RedisCache(parse_cache_spec(url))


def test_an_entry_put_by_one_client_is_found_by_another():
    url = f"{redis_url()}?prefix=t{uuid.uuid4().hex[:12]}"
    first, second = _cache(url), _cache(url)      # two relays' connections
    try:
        a, b = first.open_hot_cache(), second.open_hot_cache()
        a.put(a.key(_vec(1), "etag-1", "s"), {"pack": [1, 2]})
        assert b.get(b.key(_vec(1), "etag-1", "s")) == {"pack": [1, 2]}
        # a CKF write makes a new etag: the other relay's next lookup misses
        assert b.get(b.key(_vec(1), "etag-2", "s")) is None
        assert b.invalidate_all() == 1 and a.get(a.key(_vec(1), "etag-1", "s")) is None
    finally:
        first.close()
        second.close()


def test_an_unreachable_redis_costs_a_miss_never_an_error():
    gone = _cache("redis://127.0.0.1:1/0")            # nothing listens there
    cache = gone.open_hot_cache()
    key = cache.key(_vec(1), "etag", "s")
    cache.put(key, "value")                          # dropped, not raised
    assert cache.get(key, "miss") == "miss"
    assert cache.invalidate("etag") == 0
    assert cache.stats().misses == 1 and cache.errors == 3
    gone.close()


def test_an_entry_that_does_not_unpickle_is_a_miss_not_a_failed_turn():
    url = f"{redis_url()}?prefix=t{uuid.uuid4().hex[:12]}"
    backend = _cache(url)
    try:
        cache = backend.open_hot_cache()
        key = cache.key(_vec(3), "etag", "s")
        cache.put(key, ("items", "used"))
        # damage the stored entry in place (a foreign writer, a torn value)
        backend.client.set(f"{backend.prefix}:hc:{key.digest()}", b"\x80\x05garbage")
        assert cache.get(key, "miss") == "miss"
        assert cache.stats().misses == 1 and cache.errors == 1
    finally:
        backend.close()
