"""The rolling log in Redis: each session's hot tail, shared by every relay of a store.

Why: with a process-local ring, a turn stored through relay A left relay B's
ring behind, and B rebuilt it from PostgreSQL on its next read of the session
(up to ``capacity_entries`` turns).  In Redis the tail a relay writes after
its transcript commit is the tail every other relay reads.

Nothing here is the truth.  The transcript is; the router
(:mod:`ctxrelay.retrieval.router`) checks every read against it (the newest
turn id must be the session's turn count, the turn ids contiguous) and
rebuilds the tail when it is missing, behind or inconsistent.  A Redis that is
down, hung or flushed makes every call here raise
:class:`RollingLogUnavailableError` at once (after one failed call, the
:class:`~ctxrelay.storage.redis.hotcache.Breaker` keeps calls away for a
back-off window), and the router then reads the transcript instead: losing
Redis costs latency, never correctness.

Layout (``P`` the cache spec's prefix, ``S`` the store's id, below; ``D`` a
digest of the session id, 16 hex digits)::

    P:rl:S:{D}:l:<session id>   a list, oldest entry first; an element is
                                a 33-byte header -- seq (16 hex digits), tag
                                (16 hex digits), kind ("0" str, "1" JSON) --
                                then the payload bytes (UTF-8; U+0000 and any
                                length are fine, Redis values are bytes)
    P:rl:S:{D}:m:<session id>   a hash: ``seq`` (the last number handed out),
                                ``bytes`` (payload bytes held), ``listed``
                                (when the session was last added to the set
                                below, Redis's clock in seconds)
    P:rl:S:sessions             a set of the session ids that have a tail
    P:rl:S:lock                 :meth:`exclusive`'s lock

Redis Cluster: ``{D}`` is a hash tag, so a session's two keys live in one slot
and every script and every multi-key command here touches one slot (Cluster
refuses anything else with CROSSSLOT).  The tag is a digest, not the session
id itself, because a session id may hold ``{`` or ``}`` (any text); the prefix
may hold neither (:func:`~ctxrelay.storage.redis.hotcache.parse_redis_url`) and
``S`` is hex, so ``{D}`` is always a key's first tag.  (The layout is ready
for Cluster; the client, :class:`~ctxrelay.storage.redis.hotcache.RedisCache`'s,
is redis-py's plain one, which talks to one server.)  The set of sessions is
in another slot, so no script touches it: the append script says when the
session is to be (re)listed -- its first append, after the hash was lost, or
a day after the last listing (which also renews the set's expiry) -- and the
client then adds it, one more round trip about once per session per day.  A
listing that fails, or a set evicted by LRU, leaves :meth:`sessions` short of
those tails until their next listing; nothing reads the set to serve turns.

Tails are a cache: keys of an older layout (``P:rl:S:l:<session id>``, before
the tags; ``S`` a digest of the spec, before the store's own id) are never
read again and expire within ``TAIL_TTL_S``, and each session's tail is
rebuilt from the transcript on its first read -- a layout change costs one
rebuild per session, nothing else.

``S`` is the store's own id (:meth:`Stores.identity
<ctxrelay.storage.stores.Stores.identity>`; for PostgreSQL a random id made
with the schema and read from it, with the database's and the schema's names),
so two stores that share a Redis and a prefix never read each other's tails,
and every relay of one store shares them however it spells the store's URL
(``postgres://localhost`` or ``postgresql://127.0.0.1``, other options).  The tail's keys expire ``TAIL_TTL_S``
after the session's last append (an idle session costs no memory; its next
read rebuilds it), and Redis's ``maxmemory`` LRU may evict them sooner: a
list evicted without its hash, or the reverse, is recovered from what is left.

Every change of a tail is one Lua script (atomic in Redis, one round trip):
the append with its trimming by count and by bytes, the roll-off; a drop is
one ``DEL`` of both keys.  The *tag*
is the router's turn id (:meth:`RedisRollingLog.append_turns`): appending the
turns just committed is conditional on the tail ending at the turn before
them, so two relays that append to one session never interleave a tail, with
no lock and one round trip per managed turn.
"""
from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ctxrelay.errors import StoreError
from ctxrelay.storage.interfaces.rolling import Entry
from ctxrelay.storage.rolling.common import (RingBounds, CorruptRingError, LogRecord, LogStats,
                                             RingStats, RollingLogUnavailableError,
                                             check_count, decode, encode, session_bytes,
                                             too_large)

__all__ = ["RedisRollingLog", "TAIL_TTL_S", "APPENDED", "ALREADY", "GAP", "STALE"]

TAIL_TTL_S = 7 * 24 * 3600     # an idle session's tail expires a week after its last append
LOCK_TIMEOUT_S = 30.0          # a crashed holder's lock expires
LOCK_WAIT_S = 5.0
LIST_EVERY_S = 24 * 3600       # a session with a tail is put in the set of sessions again
HEADER = 33                    # seq (16 hex) + tag (16 hex) + kind (1)

# append_turns results
APPENDED, ALREADY, GAP, STALE = "appended", "already", "gap", "stale"


# -- the scripts (each one round trip, atomic) ----------------------------------------

# Shared by the scripts: the newest element's seq and tag, and the meta hash
# recovered from the list when LRU or a crash left one without the other.
_COMMON = """
local HEADER = 33
local function seq_of(e) return tonumber(string.sub(e, 1, 16), 16) end
local function tag_of(e) return tonumber(string.sub(e, 17, 32), 16) end
local function meta(list, m)
  local seq = tonumber(redis.call('HGET', m, 'seq'))
  local used = tonumber(redis.call('HGET', m, 'bytes'))
  if seq == nil or used == nil then
    local all = redis.call('LRANGE', list, 0, -1)
    used = 0
    for _, e in ipairs(all) do used = used + #e - HEADER end
    local last = all[#all]
    local from_list = last and seq_of(last) or 0
    if seq == nil or seq < from_list then seq = from_list end
  end
  return seq, used
end
"""

# KEYS: list, meta (one slot: see the module doc).  ARGV: cap_entries, cap_bytes,
# ttl_ms, list_every_s, mode ("plain", "next", "replace"), then items (tag hex +
# kind + payload).  Returns {status, last seq, relist}: status 1 appended, 0
# already there, -1 a gap, -2 the tail holds other bytes under one of these turn
# ids; relist 1 when the caller is to add the session to the set of sessions.
_APPEND = _COMMON + """
local list, m = KEYS[1], KEYS[2]
local cap_e, cap_b, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local mode = ARGV[5]
local first = 6
local seq, used = meta(list, m)
if mode == 'replace' then
  redis.call('DEL', list)
  used = 0
elseif mode == 'next' then
  local newest = redis.call('LINDEX', list, -1)
  local have = newest and tag_of(newest) or 0
  local want_first = tonumber(string.sub(ARGV[first], 1, 16), 16)
  local want_last = tonumber(string.sub(ARGV[#ARGV], 1, 16), 16)
  if have < want_first - 1 then return {-1, seq, 0} end
  -- Turns the tail holds already must be these very turns (a replay, or a
  -- race with another relay); other bytes under their ids mean the tail
  -- outlived its transcript (a restored database): -2, rebuild it.
  local n = redis.call('LLEN', list)
  while first <= #ARGV and tonumber(string.sub(ARGV[first], 1, 16), 16) <= have do
    local back = have - tonumber(string.sub(ARGV[first], 1, 16), 16)
    local held = back < n and redis.call('LINDEX', list, -1 - back) or false
    if held and string.sub(held, 17) ~= ARGV[first] then return {-2, seq, 0} end
    first = first + 1
  end
  if first > #ARGV then return {0, seq, 0} end
end
for i = first, #ARGV do
  local item = ARGV[i]
  local size = #item - 17
  while true do
    local n = redis.call('LLEN', list)
    if n == 0 or (n < cap_e and used + size <= cap_b) then break end
    local gone = redis.call('LPOP', list)
    used = used - (#gone - HEADER)
  end
  seq = seq + 1
  redis.call('RPUSH', list, string.format('%016x', seq) .. item)
  used = used + size
end
redis.call('HSET', m, 'seq', seq, 'bytes', used)
-- The server's clock (scripts are replicated by their effects, so TIME is allowed).
local now = tonumber(redis.call('TIME')[1])
local listed = tonumber(redis.call('HGET', m, 'listed'))
local relist = 0
if listed == nil or now - listed >= tonumber(ARGV[4]) or now < listed then
  redis.call('HSET', m, 'listed', now)
  relist = 1
end
redis.call('PEXPIRE', list, ttl)
redis.call('PEXPIRE', m, ttl)
return {1, seq, relist}
"""

# KEYS: list, meta.  ARGV: n.  Returns how many were dropped.
_ROLL_OFF = _COMMON + """
local list, m = KEYS[1], KEYS[2]
local seq, used = meta(list, m)
local n = tonumber(ARGV[1])
local dropped = 0
while dropped < n do
  local gone = redis.call('LPOP', list)
  if not gone then break end
  used = used - (#gone - HEADER)
  dropped = dropped + 1
end
if dropped > 0 or redis.call('EXISTS', m) == 1 then
  redis.call('HSET', m, 'seq', seq, 'bytes', used)
end
return dropped
"""



class RedisRollingLog(RingBounds):
    """A :class:`~ctxrelay.storage.interfaces.rolling.RollingLogBackend` in Redis
    (see the module doc); ``client`` belongs to the cache back end, ``breaker`` is
    shared with the hot cache (one Redis, one back-off)."""

    def __init__(self, client: Any, prefix: str, store: str, *, capacity_entries: int,
                 capacity_bytes: int, breaker: Any, location: str = "redis") -> None:
        import redis
        self._errors_caught = (redis.RedisError, OSError)
        self._client = client
        self._base = f"{prefix}:rl:{store}:"
        super().__init__(capacity_entries, capacity_bytes)
        self.breaker = breaker
        self.location = location
        self._append_script = client.register_script(_APPEND)
        self._roll_off_script = client.register_script(_ROLL_OFF)
        self._held = threading.local()
        self._local = threading.RLock()
        self.errors = self.skipped = 0
        self._closed = False

    # -- keys and calls -------------------------------------------------------------------

    def _keys(self, session_id: str) -> tuple[bytes, bytes]:
        """The session's list and hash: one hash tag, one Cluster slot."""
        return self._raw_keys(session_bytes(session_id))

    def _raw_keys(self, raw: bytes) -> tuple[bytes, bytes]:
        tag = hashlib.blake2b(raw, digest_size=8).hexdigest().encode("ascii")
        base = self._base.encode("utf-8") + b"{" + tag + b"}:"
        return base + b"l:" + raw, base + b"m:" + raw

    @property
    def _sessions_key(self) -> bytes:
        return self._base.encode("utf-8") + b"sessions"

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)`` against Redis; an error (or the back-off window) is
        :class:`RollingLogUnavailableError`."""
        if self._closed:
            raise StoreError("the Redis rolling log is closed; open the store again")
        if not self.breaker.closed():
            self.skipped += 1
            raise RollingLogUnavailableError(
                "Redis is in its back-off window after a failure; the tail is a miss "
                "(read the transcript)")
        try:
            out = fn(*args, **kwargs)
        except self._errors_caught as exc:
            self.breaker.failed()
            self.errors += 1
            raise RollingLogUnavailableError(
                f"Redis did not answer ({type(exc).__name__}: {exc}); the tail is a miss "
                "(read the transcript); check the --cache redis:// URL and the server") \
                from None
        self.breaker.succeeded()
        return out

    def _run_append(self, session_id: str, items: list[bytes], mode: str) -> tuple[int, int]:
        keys = self._keys(session_id)
        status, seq, relist = self._call(
            self._append_script, keys=list(keys),
            args=[self._cap_entries, self._cap_bytes, int(TAIL_TTL_S * 1000),
                  LIST_EVERY_S, mode, *items])
        if relist:
            self._list(session_bytes(session_id))
        return int(status), int(seq)

    def _list(self, raw: bytes) -> None:
        """Put a session in the set of sessions (its own slot: not in the script)
        and renew the set's expiry.  The tail is written already: a failure here
        only leaves :meth:`sessions` without it until its next listing."""
        def add() -> None:
            with self._client.pipeline(transaction=False) as pipe:
                pipe.sadd(self._sessions_key, raw)
                pipe.pexpire(self._sessions_key, int(TAIL_TTL_S * 1000))
                pipe.execute()
        try:
            self._call(add)
        except RollingLogUnavailableError:
            pass

    def _item(self, tag: int, entry: Entry) -> bytes:
        kind, payload = encode(entry)
        if len(payload) > self._cap_bytes:
            raise too_large(len(payload), self._cap_bytes)
        return b"%016x%d" % (tag, kind) + payload

    @staticmethod
    def _record(element: bytes) -> tuple[int, int, Entry]:
        try:
            return (int(element[:16], 16), int(element[16:32], 16),
                    decode(int(element[32:33]), element[HEADER:]))
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptRingError(f"a Redis tail element does not decode ({exc}); "
                                   "the router rebuilds the tail from the transcript") \
                from None

    # -- the Protocol ---------------------------------------------------------------------

    def append(self, session_id: str, entry: Entry) -> int:
        session_bytes(session_id)
        return self._run_append(session_id, [self._item(0, entry)], "plain")[1]

    def _elements(self, session_id: str, n: int) -> list[bytes]:
        keys = self._keys(session_id)
        n = check_count(n, "n")
        if n == 0:
            return []
        return self._call(self._client.lrange, keys[0], -n, -1)

    def read_recent(self, session_id: str, n: int) -> list[Entry]:
        return [self._record(e)[2] for e in self._elements(session_id, n)]

    def read_recent_with_seq(self, session_id: str, n: int) -> list[LogRecord]:
        out = []
        for element in self._elements(session_id, n):
            seq, _, entry = self._record(element)
            out.append(LogRecord(seq, entry))
        return out

    def roll_off(self, session_id: str, n: int = 1) -> int:
        keys = self._keys(session_id)
        n = check_count(n, "n")
        if n == 0:
            return 0
        return int(self._call(self._roll_off_script, keys=list(keys), args=[n]))

    def drop(self, session_id: str) -> bool:
        keys = self._keys(session_id)

        def drop() -> list[Any]:
            # Not one transaction: the two keys share a slot, the set has its own.
            with self._client.pipeline(transaction=False) as pipe:
                pipe.delete(*keys)
                pipe.srem(self._sessions_key, session_bytes(session_id))
                return pipe.execute()
        return self._call(drop)[0] > 0

    def sessions(self) -> list[str]:
        members = sorted(self._call(self._client.smembers, self._sessions_key))

        def exists() -> list[Any]:
            with self._client.pipeline(transaction=False) as pipe:
                for m in members:
                    pipe.exists(*self._raw_keys(m))
                return pipe.execute()
        found = self._call(exists) if members else []
        return [m.decode("utf-8", "surrogatepass") for m, n in zip(members, found) if n]

    def stats(self, session_id: str | None = None) -> RingStats | LogStats:
        if session_id is None:
            every = self.sessions()
            rings = [self.stats(s) for s in every]
            return LogStats(location=self.location, sessions=len(every),
                            entries=sum(r.entries for r in rings),
                            bytes_used=sum(r.bytes_used for r in rings), file_bytes=0)
        keys = self._keys(session_id)

        def read() -> list[Any]:
            with self._client.pipeline(transaction=True) as pipe:
                pipe.lrange(keys[0], 0, -1)
                pipe.hget(keys[1], "seq")
                return pipe.execute()
        elements, seq = self._call(read)
        seqs = [int(e[:16], 16) for e in elements]
        last = max([int(seq or 0), *seqs])
        return RingStats(session_id=session_id, entries=len(elements),
                         bytes_used=sum(len(e) - HEADER for e in elements),
                         capacity_entries=self._cap_entries, capacity_bytes=self._cap_bytes,
                         first_seq=seqs[0] if seqs else None,
                         last_seq=seqs[-1] if seqs else None, next_seq=last + 1,
                         file_bytes=0)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """A lock shared by every thread and every process on this store's tails
        (a Redis lock that expires after ``LOCK_TIMEOUT_S`` if its holder dies);
        re-entrant within a thread."""
        depth = getattr(self._held, "depth", 0)
        if depth:
            self._held.depth = depth + 1
            try:
                yield
            finally:
                self._held.depth -= 1
            return
        with self._local:
            lock = self._client.lock(self._base + "lock", timeout=LOCK_TIMEOUT_S,
                                     blocking_timeout=LOCK_WAIT_S, thread_local=False)
            if not self._call(lock.acquire):
                raise RollingLogUnavailableError(
                    f"the rolling log's lock in Redis was not free within {LOCK_WAIT_S} s; "
                    "the tail is a miss (read the transcript)")
            self._held.depth = 1
            try:
                yield
            finally:
                self._held.depth = 0
                try:
                    lock.release()
                except Exception:        # expired or Redis gone: the lock times out by itself
                    pass

    def close(self) -> None:
        """The client belongs to the cache back end, which closes it."""
        self._closed = True

    # -- the router's tail: turns in order, one round trip ---------------------------------

    def append_turns(self, session_id: str, turns: Sequence[tuple[int, Entry]], *,
                     replace: bool = False) -> str:
        """Append ``turns`` -- ``(turn id, entry)`` pairs, ids consecutive -- in one
        round trip.  Without ``replace``: only if the tail ends at the turn before
        the first (an empty tail counts as ending at 0); turns it holds already,
        byte for byte, are skipped.  Returns :data:`APPENDED`, :data:`ALREADY` (it
        held them all), :data:`GAP` (it ends earlier, or is empty) or :data:`STALE`
        (it holds other bytes under one of these ids); on the last two nothing
        was written: rebuild it.
        With ``replace``: the tail becomes exactly ``turns`` (sequence numbers go on).

        @raises EntryTooLargeError (nothing written), RollingLogUnavailableError.
        """
        session_bytes(session_id)
        items = [self._item(int(tag), entry) for tag, entry in turns]
        if not items:
            return ALREADY
        status, _ = self._run_append(session_id, items, "replace" if replace else "next")
        return {1: APPENDED, 0: ALREADY, -1: GAP, -2: STALE}[status]
