"""The hot cache in Redis (see the package doc).

Layout (``P`` = the spec's prefix):

``P:hc:<digest>``   the entry: a pickle of (unit query vector bytes, value),
                    with the TTL as Redis expiry (``PX``).
``P:hc-etag:<etag>``, ``P:hc-scope:<scope>``
                    sets of the digests put under an ETag / a scope, for
                    ``invalidate``; an entry already expired is simply gone.

Values are pickled because the contract stores them "as given" (tuples stay
tuples).  A pickle runs code when loaded: the Redis of a deployment must be
as private as its PostgreSQL (``make services`` binds it to loopback).

Redis Cluster: every command here names one key, or keys of one slot, and
nothing runs in a ``MULTI`` across keys (an entry and its two index sets hash
to three slots, where Cluster refuses a transaction or a multi-key command
with CROSSSLOT).  Writing an entry and its indexes in one pipeline without a
transaction is enough: an entry whose index write was lost cannot be found by
``invalidate``, but it is never looked up once its ETag has moved on (below),
and it expires.

Every Redis error, and every entry that does not unpickle, is a miss (``get``)
or a dropped write (``put``), counted in ``stats().misses`` / ``errors``: the
hot tier is never required.

A Redis that fails is then left alone for a while (:class:`Breaker`): for
``RETRY_MIN`` seconds after the first error, doubling up to ``RETRY_MAX`` while
the errors go on, every call is a miss or a dropped write at once, counted in
``skipped``.  Without it a Redis that hangs (paused, partitioned: no refusal,
only silence) cost every lookup and every put its full socket timeout -- a
turn ~1.1 s slower at p50 with two relays (bench/relay_outage.py); with it, one
call per window waits.  Skipping is safe because no answer depends on an
invalidation arriving: every key holds the state it was computed from (the
CKF state hash, the turn count), so an entry of an older state is never
looked up again, whatever Redis still holds.
"""
from __future__ import annotations

import pickle
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import numpy as np

from ctxrelay.errors import InvalidArgumentError, StoreError
from ctxrelay.storage.cache import (DEFAULT_BUCKET_BITS, DEFAULT_MIN_SIMILARITY,
                                    DEFAULT_SEED, DEFAULT_TTL_SECONDS, CacheKey, CacheStats,
                                    HotCache)
from ctxrelay.storage.spec import CacheSpec

__all__ = ["RedisCache", "RedisHotCache", "parse_redis_url"]

DEFAULT_PREFIX = "ctxrelay"
SOCKET_TIMEOUT = 0.5          # seconds: a slow Redis is a miss, not a stalled turn
RETRY_MIN = 0.5               # seconds Redis is left alone after an error ...
RETRY_MAX = 5.0               # ... doubling while it keeps failing, up to this


def parse_redis_url(text: str) -> tuple[str, str]:
    """``(url for redis-py, key prefix)``."""
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefixes = [v for k, v in query if k == "prefix"]
    prefix = prefixes[-1] if prefixes else DEFAULT_PREFIX
    # No '{' or '}' either: the rolling log's keys carry a Redis Cluster hash tag
    # after the prefix, which must stay each key's first tag.
    if not prefix or any(c in prefix for c in ": \t\n*?[]{}"):
        raise InvalidArgumentError(
            f"prefix {prefix!r} in {text!r} must be non-empty, without ':', blanks, "
            "braces or glob characters; pass e.g. ?prefix=tenant1")
    rest = urlencode([(k, v) for k, v in query if k != "prefix"])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment)), prefix


class Breaker:
    """Whether to call Redis now: not within the back-off window after an error (see
    the module doc).  ``clock`` is injectable for tests."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._until = 0.0
        self._wait = 0.0

    def closed(self) -> bool:
        """True when a call may go to Redis (no recent error, or its window is over)."""
        return self._clock() >= self._until

    def failed(self) -> None:
        with self._lock:
            self._wait = min(RETRY_MAX, self._wait * 2) if self._wait else RETRY_MIN
            self._until = self._clock() + self._wait

    def succeeded(self) -> None:
        if self._wait:
            with self._lock:
                self._wait, self._until = 0.0, 0.0


class RedisCache:
    """The ``redis://`` cache back end (``register_cache`` opener)."""

    def __init__(self, spec: CacheSpec) -> None:
        try:
            import redis
        except ImportError as exc:
            raise StoreError(f"the redis:// cache needs redis-py ({exc}); install it with: "
                             "pip install 'ctxrelay[postgres]'") from None
        self.spec = spec
        url, self.prefix = parse_redis_url(spec.text)
        self.client = redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT,
                                           socket_connect_timeout=SOCKET_TIMEOUT)
        # One Redis, one back-off: a failure seen by the rolling log spares the
        # hot cache its own timeout, and the reverse.
        self.breaker = Breaker()

    def open_hot_cache(self) -> "RedisHotCache":
        return RedisHotCache(self.client, self.prefix, breaker=self.breaker)

    def open_rolling(self, *, capacity_entries: int, capacity_bytes: int,
                     store: str) -> Any:
        """The rolling log's tails in Redis, shared by every process on the store
        (``store`` is the store back end's
        :meth:`~ctxrelay.storage.interfaces.backend.Backend.identity`)."""
        from ctxrelay.storage.redis.rolling import RedisRollingLog
        parts = urlsplit(self.spec.text)
        where = f"redis://{parts.hostname}:{parts.port or 6379}{parts.path}?prefix={self.prefix}"
        return RedisRollingLog(self.client, self.prefix, store,
                               capacity_entries=capacity_entries,
                               capacity_bytes=capacity_bytes, breaker=self.breaker,
                               location=where)

    def close(self) -> None:
        self.client.close()


class RedisHotCache:
    """A :class:`~ctxrelay.storage.interfaces.cache.HotCacheBackend` in Redis."""

    def __init__(self, client: Any, prefix: str, *, ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 bucket_bits: int = DEFAULT_BUCKET_BITS, seed: int = DEFAULT_SEED,
                 min_similarity: float | None = DEFAULT_MIN_SIMILARITY,
                 breaker: "Breaker | None" = None) -> None:
        import redis
        self._errors_caught = (redis.RedisError, OSError)
        self._client = client
        self._p = prefix
        # The key maker of the in-process cache: the same buckets in every process.
        self._keys = HotCache(bucket_bits=bucket_bits, seed=seed)
        self.ttl_ms = int(ttl_seconds * 1000)
        self.min_similarity = min_similarity
        self._lock = threading.Lock()
        self._hits = self._misses = self._rejected = self._puts = 0
        self._invalidated = self.errors = self.skipped = 0
        self.breaker = Breaker() if breaker is None else breaker

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                attr = name if name in ("errors", "skipped") else "_" + name
                setattr(self, attr, getattr(self, attr) + delta)

    def key(self, embedding: np.ndarray, etag: str, scope: str) -> CacheKey:
        return self._keys.key(embedding, etag, scope)

    def _entry(self, key: CacheKey) -> str:
        return f"{self._p}:hc:{key.digest()}"

    def get(self, key: CacheKey, default: Any = None) -> Any:
        if not isinstance(key, CacheKey):
            raise InvalidArgumentError(
                f"key must be a CacheKey (from key()), not {type(key).__name__}")
        if not self.breaker.closed():
            self._count(skipped=1, misses=1)
            return default
        try:
            raw = self._client.get(self._entry(key))
        except self._errors_caught:
            self.breaker.failed()
            self._count(errors=1, misses=1)
            return default
        self.breaker.succeeded()
        if raw is None:
            self._count(misses=1)
            return default
        try:
            stored, value = pickle.loads(raw)
        except Exception:
            # A value this cache cannot read (damaged, or written by another
            # version) is a miss like any other Redis fault: the hot tier is
            # rebuildable, and a turn must not fail because of it.
            self._count(errors=1, misses=1)
            return default
        if self.min_similarity is not None and key.embedding is not None and stored:
            vector = np.frombuffer(stored, dtype=np.float32)
            if float(vector @ key.embedding) < self.min_similarity:
                self._count(rejected=1, misses=1)
                return default
        self._count(hits=1)
        return value

    def put(self, key: CacheKey, value: Any) -> None:
        if not isinstance(key, CacheKey):
            raise InvalidArgumentError(
                f"key must be a CacheKey (from key()), not {type(key).__name__}")
        vector = b"" if key.embedding is None else key.embedding.astype(np.float32).tobytes()
        payload = pickle.dumps((vector, value), protocol=pickle.HIGHEST_PROTOCOL)
        digest = key.digest()
        if not self.breaker.closed():
            self._count(skipped=1)
            return
        try:
            # One round trip, no MULTI: three slots (see the module doc).
            with self._client.pipeline(transaction=False) as pipe:
                pipe.set(f"{self._p}:hc:{digest}", payload, px=self.ttl_ms)
                for index in (f"{self._p}:hc-etag:{key.etag}", f"{self._p}:hc-scope:{key.scope}"):
                    pipe.sadd(index, digest)
                    pipe.pexpire(index, self.ttl_ms * 2)
                pipe.execute()
        except self._errors_caught:
            self.breaker.failed()
            self._count(errors=1)
            return
        self.breaker.succeeded()
        self._count(puts=1)

    def invalidate(self, etag: str | None = None, *, scope: str | None = None) -> int:
        """Drop the entries of ``etag`` (and/or of ``scope``: both, the entries of
        both); neither drops everything.  Returns how many went."""
        if etag is None and scope is None:
            return self.invalidate_all()
        by_etag, by_scope = f"{self._p}:hc-etag:{etag}", f"{self._p}:hc-scope:{scope}"
        if not self.breaker.closed():       # the entries expire; no key can find them
            self._count(skipped=1)
            return 0
        try:
            # SMEMBERS twice and the intersection here, not SINTER: the two sets
            # are in two Cluster slots.
            if etag is not None and scope is not None:
                with self._client.pipeline(transaction=False) as pipe:
                    pipe.smembers(by_etag)
                    pipe.smembers(by_scope)
                    of_etag, of_scope = pipe.execute()
                digests = of_etag & of_scope
            else:
                digests = self._client.smembers(by_etag if etag is not None else by_scope)
            dropped = 0
            if digests:
                dropped = sum(self._delete_each(f"{self._p}:hc:{d.decode()}" for d in digests))
                with self._client.pipeline(transaction=False) as pipe:
                    for index in (by_etag, by_scope):
                        pipe.srem(index, *digests)
                    pipe.execute()
        except self._errors_caught:
            self.breaker.failed()
            self._count(errors=1)
            return 0
        self._count(invalidated=dropped)
        return int(dropped)

    def invalidate_all(self) -> int:
        dropped = 0
        try:
            for pattern in (f"{self._p}:hc:*", f"{self._p}:hc-etag:*", f"{self._p}:hc-scope:*"):
                batch = list(self._client.scan_iter(match=pattern, count=1000))
                if batch:
                    gone = sum(self._delete_each(batch))
                    dropped += gone if pattern.endswith("hc:*") else 0
        except self._errors_caught:
            self.breaker.failed()
            self._count(errors=1)
            return dropped
        self._count(invalidated=dropped)
        return int(dropped)

    def _delete_each(self, keys: Any) -> list[int]:
        """``DEL`` of each key on its own, in one pipeline (one round trip): a
        ``DEL`` of many keys spans Cluster slots."""
        with self._client.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.delete(key)
            return pipe.execute()

    def stats(self) -> CacheStats:
        try:
            entries = sum(1 for _ in self._client.scan_iter(match=f"{self._p}:hc:*", count=1000))
        except self._errors_caught:
            entries = 0
        with self._lock:
            # Redis bounds the entries (TTL, maxmemory), not a count: max_entries 0.
            return CacheStats(entries=entries, max_entries=0, hits=self._hits,
                              misses=self._misses, expired=0, rejected=self._rejected,
                              evictions=0, invalidated=self._invalidated, puts=self._puts)

    def close(self) -> None:
        """The client belongs to the cache back end, which closes it."""
