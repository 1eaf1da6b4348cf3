"""Hot cache: repeat retrievals answered from memory (SPEC-035 §2.3).

``HotCache`` is an in-memory LRU of assembled results keyed by
(scope, CKF ETag, bucket of the query embedding):

* **Scope** (tenant or session) is part of the key, so two tenants never share
  an entry, even for identical queries.
* **ETag** (the CKF state hash) is part of the key, so after a CKF mutation
  (new ETag) the old entries can no longer be looked up; ``invalidate(etag)``
  also drops them at once, and ``invalidate_all()`` clears the cache.
* **Bucket**: sign random projection (SimHash).  ``bucket_bits`` = k hyperplanes
  with normal random coefficients, drawn from ``numpy.random.default_rng((seed,
  dim))`` so every process with the same seed buckets alike; bit i is 1 when the
  embedding lies on the positive side of hyperplane i.

Collision behaviour
-------------------
Two embeddings at angle θ agree on one bit with probability 1 - θ/π, so they
share a bucket with probability ``(1 - θ/π) ** k``.  With the default k = 16:
near-identical queries (cosine 0.9998, θ ≈ 0.02) share a bucket ~90% of the time
(the rest straddle a hyperplane: a miss, which only costs a recomputation);
unrelated queries (θ ≈ π/2) share one with probability 2^-16; but *related*
queries at cosine 0.9 (θ ≈ 0.45) still would 8% of the time.  A bucket match alone
would then return another query's result, so each entry also keeps its query's
unit embedding, and ``get`` only answers when the cosine between the stored and
the asked query is at least ``min_similarity`` (default 0.95); otherwise it is a
miss counted in ``rejected``.  ``min_similarity=None`` trusts the bucket alone.
Two different queries in the same bucket overwrite each other (last ``put``
wins).  More bits: fewer false bucket matches, more misses for near-identical
queries.

Expiry and bounds
-----------------
Entries expire ``ttl_seconds`` after their ``put`` (the clock is injectable);
an expired entry is dropped when it is next looked up, or by
``purge_expired()``.  At most ``max_entries`` entries are kept: a ``put`` beyond
that evicts the least recently used (a ``get`` hit makes an entry most recently
used).  Values are stored and returned as they are, not copied: treat them as
immutable.  Every method is thread-safe (one lock).
"""
from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:          # numpy loads on the first vector: a store command never needs it
    import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.interfaces.cache import HotCacheBackend  # noqa: F401  (re-exported)

__all__ = ["HotCache", "CacheKey", "CacheStats", "HotCacheBackend", "SignProjection",
           "InvalidEmbeddingError", "DEFAULT_MAX_ENTRIES", "DEFAULT_TTL_SECONDS",
           "DEFAULT_BUCKET_BITS", "DEFAULT_MIN_SIMILARITY"]

DEFAULT_MAX_ENTRIES = 1000
DEFAULT_TTL_SECONDS = 30.0
DEFAULT_BUCKET_BITS = 16
DEFAULT_MIN_SIMILARITY = 0.95
DEFAULT_SEED = 0


class InvalidEmbeddingError(InvalidArgumentError):
    """A query embedding is not a finite, non-zero 1-D float vector."""

    kind = "invalid_embedding"


@dataclass(frozen=True)
class CacheKey:
    """A hot-cache key: equal keys share an entry.

    ``embedding`` (the query's unit vector) is not part of equality; ``get``
    uses it to check the similarity guard.
    """

    scope: str
    etag: str
    dim: int
    bucket: int
    embedding: np.ndarray | None = field(default=None, compare=False, repr=False)

    def digest(self) -> str:
        """A stable string form (sha256 hex) for an external store such as Redis."""
        h = hashlib.sha256()
        for part in (self.scope, self.etag):
            raw = part.encode("utf-8", "surrogatepass")
            h.update(len(raw).to_bytes(8, "little") + raw)
        h.update(self.dim.to_bytes(8, "little") + self.bucket.to_bytes(8, "little"))
        return h.hexdigest()


@dataclass(frozen=True)
class CacheStats:
    entries: int
    max_entries: int
    hits: int
    misses: int            # every get that returned the default, including:
    expired: int           #   entries found past their TTL (then dropped)
    rejected: int          #   bucket matches below min_similarity
    evictions: int         # LRU evictions by put
    invalidated: int       # entries dropped by invalidate / invalidate_all
    puts: int

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


class SignProjection:
    """Sign random projection of unit vectors to ``bits``-bit ints, fixed by ``seed``."""

    def __init__(self, bits: int = DEFAULT_BUCKET_BITS, *, seed: int = DEFAULT_SEED) -> None:
        if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 64:
            raise InvalidArgumentError(f"bucket_bits must be an int in 1..64, got {bits!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise InvalidArgumentError(f"seed must be a non-negative int, got {seed!r}")
        self.bits = bits
        self.seed = seed
        self._planes: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def planes(self, dim: int) -> np.ndarray:
        planes = self._planes.get(dim)
        if planes is None:
            with self._lock:
                planes = self._planes.get(dim)
                if planes is None:
                    import numpy as np
                    rng = np.random.default_rng((self.seed, dim))
                    planes = rng.standard_normal((self.bits, dim)).astype(np.float32)
                    planes.setflags(write=False)
                    self._planes[dim] = planes
        return planes

    def bucket(self, vector: np.ndarray) -> int:
        import numpy as np
        side = (self.planes(vector.shape[0]) @ vector) > 0
        return int.from_bytes(np.packbits(side, bitorder="little").tobytes(), "little")


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(
            f"{what} must be a non-empty str, got {value!r}; "
            + ("pass the tenant or session id" if what == "scope"
               else "pass the CKF state hash (ETag)"))
    return value


def _unit(embedding: Any) -> np.ndarray:
    import numpy as np
    vector = np.asarray(embedding)
    if vector.ndim != 1 or vector.shape[0] == 0 or vector.dtype.kind != "f":
        raise InvalidEmbeddingError(
            f"embedding must be a non-empty 1-D float array, got shape {vector.shape} "
            f"dtype {vector.dtype}; pass the query's embedding vector (float32)")
    if vector.dtype != np.float32:
        vector = vector.astype(np.float32)
    norm = float(np.dot(vector, vector)) ** 0.5
    if not 0.0 < norm < float("inf"):
        raise InvalidEmbeddingError(
            f"embedding has norm {norm}; it must be finite and non-zero (check the "
            "embedder's output for NaN, inf or an all-zero vector)")
    unit = vector / np.float32(norm)
    unit.setflags(write=False)
    return unit


class _Entry:
    __slots__ = ("value", "expires", "embedding")

    def __init__(self, value: Any, expires: float | None, embedding: np.ndarray | None):
        self.value = value
        self.expires = expires
        self.embedding = embedding


class HotCache:
    """In-memory LRU keyed by (scope, ETag, embedding bucket); see the module docs."""

    def __init__(self, *, max_entries: int = DEFAULT_MAX_ENTRIES,
                 ttl_seconds: float | None = DEFAULT_TTL_SECONDS,
                 bucket_bits: int = DEFAULT_BUCKET_BITS, seed: int = DEFAULT_SEED,
                 min_similarity: float | None = DEFAULT_MIN_SIMILARITY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidArgumentError(f"max_entries must be an int >= 1, got {max_entries!r}")
        if ttl_seconds is not None and (isinstance(ttl_seconds, bool)
                                        or not isinstance(ttl_seconds, (int, float))
                                        or not 0 < ttl_seconds < float("inf")):
            raise InvalidArgumentError(
                f"ttl_seconds must be a positive number or None (no expiry), got {ttl_seconds!r}")
        if min_similarity is not None and (isinstance(min_similarity, bool)
                                           or not isinstance(min_similarity, (int, float))
                                           or not -1.0 <= min_similarity <= 1.0):
            raise InvalidArgumentError(
                f"min_similarity must be a cosine in [-1, 1] or None, got {min_similarity!r}")
        if not callable(clock):
            raise InvalidArgumentError("clock must be a callable returning seconds")
        self.max_entries = max_entries
        self.ttl_seconds = None if ttl_seconds is None else float(ttl_seconds)
        self.min_similarity = None if min_similarity is None else float(min_similarity)
        self.projection = SignProjection(bucket_bits, seed=seed)
        self._clock = clock
        self._lock = threading.Lock()
        self._data: OrderedDict[CacheKey, _Entry] = OrderedDict()
        self._by_etag: dict[str, set[CacheKey]] = {}
        self._by_scope: dict[str, set[CacheKey]] = {}
        self._hits = self._misses = self._expired = self._rejected = 0
        self._evictions = self._invalidated = self._puts = 0

    @property
    def bucket_bits(self) -> int:
        return self.projection.bits

    def key(self, embedding: np.ndarray, etag: str, scope: str) -> CacheKey:
        """The key of a query: its embedding's bucket under ``etag`` in ``scope``.

        ``embedding`` is a 1-D float vector (normalised or not: bucketing is
        scale-invariant); it is copied as a unit vector into the key.
        """
        etag = _text(etag, "etag")
        scope = _text(scope, "scope")
        unit = _unit(embedding)
        return CacheKey(scope, etag, unit.shape[0], self.projection.bucket(unit), unit)

    # lookups ---------------------------------------------------------------

    def get(self, key: CacheKey, default: Any = None) -> Any:
        """The cached value for ``key``, or ``default`` on a miss."""
        if not isinstance(key, CacheKey):
            raise InvalidArgumentError(
                f"key must be a CacheKey (from HotCache.key), not {type(key).__name__}")
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                self._misses += 1
                return default
            if entry.expires is not None and self._clock() >= entry.expires:
                self._remove(key)
                self._expired += 1
                self._misses += 1
                return default
            if (self.min_similarity is not None and key.embedding is not None
                    and entry.embedding is not None
                    and float(entry.embedding @ key.embedding) < self.min_similarity):
                self._rejected += 1
                self._misses += 1
                return default
            self._data.move_to_end(key)
            self._hits += 1
            return entry.value

    def __contains__(self, key: Hashable) -> bool:
        """Whether an entry is stored under ``key`` (expired or not; no counters)."""
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    # updates -------------------------------------------------------------------

    def put(self, key: CacheKey, value: Any) -> None:
        """Store ``value`` under ``key`` (replacing any entry there) as most recently used."""
        if not isinstance(key, CacheKey):
            raise InvalidArgumentError(
                f"key must be a CacheKey (from HotCache.key), not {type(key).__name__}")
        with self._lock:
            expires = None if self.ttl_seconds is None else self._clock() + self.ttl_seconds
            self._puts += 1
            if key in self._data:
                self._data[key] = _Entry(value, expires, key.embedding)
                self._data.move_to_end(key)
                return
            self._data[key] = _Entry(value, expires, key.embedding)
            self._by_etag.setdefault(key.etag, set()).add(key)
            self._by_scope.setdefault(key.scope, set()).add(key)
            while len(self._data) > self.max_entries:
                oldest = next(iter(self._data))
                self._remove(oldest)
                self._evictions += 1

    def _remove(self, key: CacheKey) -> None:
        del self._data[key]
        for index, name in ((self._by_etag, key.etag), (self._by_scope, key.scope)):
            keys = index[name]
            keys.discard(key)
            if not keys:
                del index[name]

    def invalidate(self, etag: str | None = None, *, scope: str | None = None) -> int:
        """Drop the entries with this ``etag`` (and/or in this ``scope``); returns how many.

        With neither, drops everything (as :meth:`invalidate_all`).  Call it with the
        old ETag when the CKF changes; keys made with the new ETag never see the old
        entries anyway.
        """
        if etag is None and scope is None:
            return self.invalidate_all()
        with self._lock:
            if etag is not None:
                keys = self._by_etag.get(etag, set())
                if scope is not None:
                    keys = {k for k in keys if k.scope == scope}
            else:
                keys = self._by_scope.get(scope, set())
            doomed = list(keys)
            for key in doomed:
                self._remove(key)
            self._invalidated += len(doomed)
            return len(doomed)

    def invalidate_all(self) -> int:
        """Drop every entry; returns how many there were."""
        with self._lock:
            dropped = len(self._data)
            self._data.clear()
            self._by_etag.clear()
            self._by_scope.clear()
            self._invalidated += dropped
            return dropped

    def purge_expired(self) -> int:
        """Drop every entry past its TTL now; returns how many."""
        with self._lock:
            if self.ttl_seconds is None:
                return 0
            now = self._clock()
            doomed = [k for k, e in self._data.items() if now >= e.expires]
            for key in doomed:
                self._remove(key)
            self._expired += len(doomed)
            return len(doomed)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(entries=len(self._data), max_entries=self.max_entries,
                              hits=self._hits, misses=self._misses, expired=self._expired,
                              rejected=self._rejected, evictions=self._evictions,
                              invalidated=self._invalidated, puts=self._puts)
