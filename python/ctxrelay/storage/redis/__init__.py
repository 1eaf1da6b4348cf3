"""The ``redis://`` cache back end: the hot tier shared by every relay of a store.

Redis holds only what can be rebuilt.  Today that is the hot cache of
retrievals (:mod:`ctxrelay.storage.redis.hotcache`): entries are keyed by
:meth:`~ctxrelay.storage.cache.CacheKey.digest`, which contains the CKF
state hash (ETag), so a fact written through one relay makes a new ETag and
every relay's next lookup misses the old entries -- no stale answer
crosses processes, with no message to deliver.  Losing Redis (flushed,
restarted, unreachable) costs latency only: a lookup that cannot reach it is
a miss and a put is dropped.

The rolling log is not kept in Redis yet (``open_rolling`` returns None): the
store back end's own one is used, which each process rebuilds from the
transcript when it lags.

Spec: ``redis://[:password@]host:port/db[?prefix=name]``; ``prefix`` (default
``ctxrelay``) separates the stores that share one Redis database.
"""
from ctxrelay.storage.redis.hotcache import RedisCache, RedisHotCache  # noqa: F401
