"""Hot cache (ctxrelay.storage.cache): LRU, TTL, ETag and scope in the key, bucketing rates."""
from __future__ import annotations

import math
import random
import threading

import numpy as np
import pytest

from ctxrelay.storage.cache import (HotCache, HotCacheBackend, InvalidEmbeddingError,
                            SignProjection)
from ctxrelay.errors import CtxRelayError, InvalidArgumentError

DIM = 384


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def unit(rng: np.random.Generator, dim: int = DIM) -> np.ndarray:
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def near(rng: np.random.Generator, v: np.ndarray, sigma: float) -> np.ndarray:
    w = v + rng.normal(0, sigma, v.shape[0]).astype(np.float32)
    return (w / np.linalg.norm(w)).astype(np.float32)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def test_hit_and_miss_counters(rng):
    cache = HotCache(max_entries=10)
    q = unit(rng)
    key = cache.key(q, "etag-1", "tenant-a")
    assert cache.get(key) is None
    assert cache.get(key, "dflt") == "dflt"
    cache.put(key, {"envelope": 1})
    assert cache.get(key) == {"envelope": 1}
    assert cache.get(cache.key(q.copy(), "etag-1", "tenant-a")) == {"envelope": 1}
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.puts, stats.entries) == (2, 2, 1, 1)
    assert stats.hit_rate == 0.5
    assert isinstance(cache, HotCacheBackend)


def test_lru_eviction_order(rng):
    cache = HotCache(max_entries=3, ttl_seconds=None)
    keys = [cache.key(unit(rng), "e", "s") for _ in range(5)]
    assert len({k.bucket for k in keys}) == 5
    for i in range(3):
        cache.put(keys[i], i)
    assert cache.get(keys[0]) == 0                  # 0 becomes most recently used
    cache.put(keys[3], 3)                           # evicts 1, the least recently used
    assert keys[1] not in cache and keys[0] in cache
    cache.put(keys[2], "2 again")                   # a put refreshes recency too
    cache.put(keys[4], 4)                           # evicts 0
    assert [k in cache for k in keys] == [False, False, True, True, True]
    assert cache.stats().evictions == 2
    assert len(cache) == 3
    assert cache.get(keys[2]) == "2 again"


def test_ttl_expiry_with_a_fake_clock(rng):
    clock = FakeClock()
    cache = HotCache(max_entries=10, ttl_seconds=10, clock=clock)
    a, b = (cache.key(unit(rng), "e", "s") for _ in range(2))
    cache.put(a, "a")
    clock.now += 9.999
    assert cache.get(a) == "a"                      # a hit does not extend the TTL
    cache.put(b, "b")
    clock.now += 0.001
    assert cache.get(a) is None and a not in cache   # expired at exactly ttl, dropped
    assert cache.get(b) == "b"
    clock.now += 9.999
    assert cache.purge_expired() == 1
    assert len(cache) == 0
    stats = cache.stats()
    assert (stats.expired, stats.hits, stats.misses) == (2, 2, 1)
    forever = HotCache(ttl_seconds=None, clock=clock)
    forever.put(a, "a")
    clock.now += 1e9
    assert forever.get(a) == "a"


def test_etag_change_misses_and_invalidate_drops(rng):
    cache = HotCache(max_entries=100)
    q = unit(rng)
    old = cache.key(q, "ckf-v1", "t")
    cache.put(old, "assembled under v1")
    other = cache.key(unit(rng), "ckf-v1", "t")
    cache.put(other, "other under v1")
    cache.put(cache.key(q, "ckf-v1", "u"), "tenant u under v1")
    new = cache.key(q, "ckf-v2", "t")
    assert new != old and new.bucket == old.bucket
    assert cache.get(new) is None                   # a new ETag never sees old entries
    cache.put(new, "assembled under v2")
    assert cache.invalidate("ckf-v1", scope="t") == 2
    assert old not in cache and other not in cache
    assert cache.get(new) == "assembled under v2"
    assert cache.invalidate("ckf-v1") == 1           # tenant u's v1 entry
    assert cache.invalidate("no-such-etag") == 0
    cache.put(old, "again")
    assert cache.invalidate(scope="t") == 2
    cache.put(old, "again")
    assert cache.invalidate_all() == 1
    cache.put(old, "again")
    assert cache.invalidate() == 1                   # no filter: everything
    assert len(cache) == 0
    assert cache.stats().invalidated == 2 + 1 + 2 + 1 + 1


def test_scopes_never_share_entries_even_for_identical_queries(rng):
    cache = HotCache(max_entries=100)
    q = unit(rng)
    ka, kb = cache.key(q, "e", "tenant-a"), cache.key(q, "e", "tenant-b")
    assert ka.bucket == kb.bucket and ka != kb and ka.digest() != kb.digest()
    cache.put(ka, "a's envelope")
    assert cache.get(kb) is None
    cache.put(kb, "b's envelope")
    assert (cache.get(ka), cache.get(kb)) == ("a's envelope", "b's envelope")
    assert cache.invalidate(scope="tenant-a") == 1
    assert cache.get(kb) == "b's envelope"


def test_bucketing_rates_match_sign_projection_theory():
    """Near-identical queries share a key, unrelated ones do not, at the rates the
    documented formula (1 - theta/pi) ** k predicts for the actual angles."""
    cache = HotCache(max_entries=10, bucket_bits=16)
    rng = np.random.default_rng(2024)
    same, expected, different = 0, 0.0, 0
    samples = 4000
    for _ in range(samples):
        q = unit(rng)
        n = near(rng, q, sigma=0.001)                 # cosine ~0.9998
        theta = math.acos(min(1.0, float(q @ n)))
        expected += (1 - theta / math.pi) ** 16
        same += cache.key(q, "e", "s") == cache.key(n, "e", "s")
        different += cache.key(q, "e", "s") == cache.key(unit(rng), "e", "s")
    near_rate, expected_rate = same / samples, expected / samples
    assert near_rate >= 0.85
    assert abs(near_rate - expected_rate) < 0.03          # ~4 sigma of the binomial
    assert different / samples <= 0.001                  # theory: 2 ** -16


def test_near_identical_queries_hit_through_the_cache_and_unrelated_ones_miss():
    cache = HotCache(max_entries=10_000, ttl_seconds=None)
    rng = np.random.default_rng(77)
    queries = [unit(rng) for _ in range(1000)]
    for i, q in enumerate(queries):
        cache.put(cache.key(q, "e", "s"), i)
    hits = sum(cache.get(cache.key(near(rng, q, 0.001), "e", "s")) == i
               for i, q in enumerate(queries))
    wrong = sum(cache.get(cache.key(unit(rng), "e", "s")) is not None for _ in range(1000))
    assert hits >= 850
    assert wrong == 0


def test_similarity_guard_rejects_a_bucket_collision():
    """With 2 bits, unrelated queries often share a bucket: the guard turns that into a
    miss; without the guard the other query's value would be returned."""
    rng = np.random.default_rng(5)
    guarded = HotCache(bucket_bits=2, min_similarity=0.95)
    trusting = HotCache(bucket_bits=2, min_similarity=None)
    q = unit(rng)
    k = guarded.key(q, "e", "s")
    while True:
        other = unit(rng)
        k2 = guarded.key(other, "e", "s")
        if k2 == k:
            break
    for cache in (guarded, trusting):
        cache.put(k, "q's envelope")
    assert guarded.get(k2) is None
    assert guarded.stats().rejected == 1
    assert guarded.get(k) == "q's envelope"
    assert trusting.get(trusting.key(other, "e", "s")) == "q's envelope"


def test_keys_are_deterministic_and_scale_invariant(rng):
    q = unit(rng)
    a, b = HotCache(seed=7), HotCache(seed=7)
    assert a.key(q, "e", "s") == b.key(q * 3.5, "e", "s")
    assert a.key(q, "e", "s").digest() == b.key(q.astype(np.float64), "e", "s").digest()
    different_seed = HotCache(seed=8)
    buckets = [(a.key(v, "e", "s").bucket, different_seed.key(v, "e", "s").bucket)
               for v in (unit(rng) for _ in range(50))]
    assert any(x != y for x, y in buckets)
    assert all(0 <= x < 2 ** 16 for x, _ in buckets)
    wide = HotCache(bucket_bits=64)
    assert any(wide.key(unit(rng), "e", "s").bucket >= 2 ** 63 for _ in range(50))
    small = a.key(unit(rng, 8), "e", "s")            # other dimensions get their own planes
    assert small.dim == 8
    assert SignProjection(16, seed=7).planes(DIM).shape == (16, DIM)


@pytest.mark.parametrize("bad", [np.zeros(DIM, np.float32),
                                 np.full(DIM, np.nan, np.float32),
                                 np.array([1.0, np.inf], np.float32),
                                 np.ones((2, DIM), np.float32),
                                 np.ones(DIM, np.int64),
                                 np.array([], np.float32),
                                 "not a vector"])
def test_bad_embeddings_are_rejected(bad):
    with pytest.raises(InvalidEmbeddingError) as info:
        HotCache().key(bad, "e", "s")
    assert isinstance(info.value, InvalidArgumentError)
    assert isinstance(info.value, CtxRelayError)


def test_bad_arguments_are_rejected(rng):
    cache = HotCache()
    q = unit(rng)
    for etag, scope in (("", "s"), ("e", ""), (None, "s"), ("e", 3)):
        with pytest.raises(InvalidArgumentError):
            cache.key(q, etag, scope)
    with pytest.raises(InvalidArgumentError, match="CacheKey"):
        cache.get(("s", "e", 1))
    with pytest.raises(InvalidArgumentError, match="CacheKey"):
        cache.put("key", 1)
    for kwargs in ({"max_entries": 0}, {"ttl_seconds": 0}, {"ttl_seconds": -1},
                   {"bucket_bits": 0}, {"bucket_bits": 65}, {"min_similarity": 1.5},
                   {"seed": -1}, {"clock": 3}):
        with pytest.raises(InvalidArgumentError):
            HotCache(**kwargs)


def test_key_copies_the_embedding(rng):
    cache = HotCache()
    q = unit(rng)
    key = cache.key(q, "e", "s")
    cache.put(key, "v")
    q[:] = -q                                        # the caller reuses its buffer
    assert cache.get(key) == "v"
    with pytest.raises(ValueError):
        key.embedding[0] = 1.0                        # the key's copy is read-only


def test_thread_safety_smoke():
    cache = HotCache(max_entries=64, ttl_seconds=None)
    vectors = [unit(np.random.default_rng(i)) for i in range(200)]
    keys = [cache.key(v, f"e{i % 3}", f"s{i % 4}") for i, v in enumerate(vectors)]
    gets = [0] * 8
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        r = random.Random(worker)
        try:
            for _ in range(5000):
                i = r.randrange(len(keys))
                op = r.random()
                if op < 0.5:
                    value = cache.get(keys[i])
                    gets[worker] += 1
                    assert value is None or value[0] == i
                elif op < 0.95:
                    cache.put(keys[i], (i, worker))
                elif op < 0.98:
                    cache.invalidate(f"e{r.randrange(3)}", scope=f"s{r.randrange(4)}")
                else:
                    cache.key(vectors[i], "e", "s")
        except BaseException as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    stats = cache.stats()
    assert stats.hits + stats.misses == sum(gets)
    assert stats.entries == len(cache) <= 64
    assert stats.hits > 0 and stats.evictions > 0
    # the etag/scope indexes stayed consistent with the entries
    assert sum(cache.invalidate(f"e{e}") for e in range(3)) == stats.entries
    assert len(cache) == 0
