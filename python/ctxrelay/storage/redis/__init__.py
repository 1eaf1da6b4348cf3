"""The ``redis://`` cache back end: the hot tier shared by every relay of a store.

Redis holds only what can be rebuilt:

- the hot cache of retrievals (:mod:`ctxrelay.storage.redis.hotcache`):
  entries are keyed by :meth:`~ctxrelay.storage.cache.CacheKey.digest`, which
  contains the CKF state hash (ETag), so a fact written through one relay
  makes a new ETag and every relay's next lookup misses the old entries -- no
  stale answer crosses processes, with no message to deliver;
- the rolling log (:mod:`ctxrelay.storage.redis.rolling`): each session's hot
  tail, written after the transcript commit by the relay that stored the turn
  and read by every relay, checked against the transcript on every read.

Losing Redis (flushed, restarted, unreachable) costs latency only: a lookup
that cannot reach it is a miss, a put is dropped, and a tail read is served
by the transcript.

Spec: ``redis://[:password@]host:port/db[?prefix=name]``; ``prefix`` (default
``ctxrelay``) separates the stores that share one Redis database.
"""
from ctxrelay.storage.redis.hotcache import RedisCache, RedisHotCache  # noqa: F401
from ctxrelay.storage.redis.rolling import RedisRollingLog  # noqa: F401
