"""Conformance: the HotCacheBackend contract (ctxrelay.storage.interfaces.cache)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.storage.cache import InvalidEmbeddingError
from ctxrelay.storage.interfaces.cache import HotCacheBackend
from protocol_view import through

STORE = "cache"
DIM = 64


@pytest.fixture
def cache(backend):
    return through(HotCacheBackend, backend.open().cache)


def _vec(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=DIM).astype(np.float32)


def test_a_value_is_found_under_its_key_only(cache):
    key = cache.key(_vec(1), "etag-1", "session:a")
    cache.put(key, ("items", 1))
    assert cache.get(key) == ("items", 1)
    assert cache.get(cache.key(_vec(1), "etag-1", "session:a")) == ("items", 1)   # same key
    assert cache.get(cache.key(_vec(1), "etag-2", "session:a")) is None          # new state
    assert cache.get(cache.key(_vec(1), "etag-1", "session:b")) is None          # other scope
    assert cache.get(cache.key(_vec(2), "etag-1", "session:a"), "miss") == "miss"
    near = _vec(1) + np.float32(1e-4) * _vec(3)                                   # the same meaning
    assert cache.get(cache.key(near, "etag-1", "session:a")) == ("items", 1)
    stats = cache.stats()
    assert stats.hits == 3 and stats.puts == 1 and stats.misses == 3


def test_invalidation_by_etag_scope_and_all(cache):
    keys = [cache.key(_vec(i), etag, scope) for i, (etag, scope) in
            enumerate([("e1", "a"), ("e1", "b"), ("e2", "a")])]
    for n, key in enumerate(keys):
        cache.put(key, n)
    assert cache.invalidate("e1") == 2
    assert [cache.get(k) for k in keys] == [None, None, 2]
    cache.put(keys[0], 0)
    assert cache.invalidate(scope="a") == 2 and cache.get(keys[2]) is None
    cache.put(keys[1], 1)
    assert cache.invalidate_all() == 1 and cache.get(keys[1]) is None


def test_an_embedding_with_no_direction_has_no_key(cache):
    with pytest.raises(InvalidEmbeddingError):
        cache.key(np.zeros(DIM, dtype=np.float32), "e", "s")
    with pytest.raises(InvalidEmbeddingError):
        cache.key(np.full(DIM, np.nan, dtype=np.float32), "e", "s")


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seeds=st.lists(st.integers(0, 10_000), min_size=1, max_size=10, unique=True),
       scope=st.text(min_size=1, max_size=20))
def test_the_latest_put_of_a_key_is_what_get_returns(cache, seeds, scope):
    keys = {seed: cache.key(_vec(seed), "etag", scope) for seed in seeds}
    for seed, key in keys.items():
        cache.put(key, seed)
    for seed, key in keys.items():
        sharing = [other for other in seeds if keys[other] == key]
        # Unrelated queries share a bucket rarely: then the last put of it holds it,
        # and the others' lookups miss (their query is not the stored one).
        assert cache.get(key) in ((seed,) if sharing == [seed] else (sharing[-1], None))
