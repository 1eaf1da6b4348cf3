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
    # the put failed; the get and the invalidation came within the back-off: skipped
    assert cache.stats().misses == 1 and (cache.errors, cache.skipped) == (1, 2)
    gone.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_redis_is_left_alone_for_a_doubling_while_then_tried_again():
    from ctxrelay.storage.redis.hotcache import RETRY_MAX, RETRY_MIN, Breaker
    gone = _cache("redis://127.0.0.1:1/0")
    cache = gone.open_hot_cache()
    clock = _Clock()
    cache.breaker = Breaker(clock)
    key = cache.key(_vec(1), "etag", "s")

    def tried_at(t: float) -> bool:
        """Whether a lookup t seconds after the first went to Redis (and failed)."""
        clock.now = 1000.0 + t
        errors = cache.errors
        assert cache.get(key, "miss") == "miss"
        return cache.errors > errors

    # errors at 0, 0.5, 1.5, 3.5: each window twice the last (0.5 s, 1 s, 2 s)
    assert [tried_at(t) for t in (0, 0.4, 0.5, 1.4, 1.5, 3.4, 3.5)] == \
        [True, False, True, False, True, False, True]
    assert cache.skipped == 3
    breaker = Breaker(clock)
    waits = []
    for _ in range(6):
        breaker.failed()
        waits.append(breaker._wait)
    assert waits == [RETRY_MIN, 2 * RETRY_MIN, 4 * RETRY_MIN, 8 * RETRY_MIN, RETRY_MAX, RETRY_MAX]
    gone.close()


def test_a_redis_that_comes_back_is_used_again(private_redis):
    url = f"{private_redis.url}?prefix=back"
    backend = _cache(url)
    try:
        cache = backend.open_hot_cache()
        cache.breaker = type(cache.breaker)(clock := _Clock())
        key = cache.key(_vec(2), "etag", "s")
        cache.put(key, "v1")
        assert cache.get(key) == "v1"
        private_redis.stop()
        assert cache.get(key, "miss") == "miss" and cache.errors == 1
        private_redis.start()                        # empty: no persistence
        assert cache.get(key, "miss") == "miss" and cache.skipped == 1   # still waiting
        clock.now += 1.0
        cache.put(key, "v2")                         # the window is over: tried, and works
        assert cache.get(key) == "v2" and cache.errors == 1
        assert cache.breaker.closed() and cache.breaker._wait == 0
    finally:
        backend.close()


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
