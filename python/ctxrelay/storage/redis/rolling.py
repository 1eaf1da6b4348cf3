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

Layout (``P`` the cache spec's prefix, ``S`` the store's id, below)::

    P:rl:S:l:<session id>   a list, oldest entry first; an element is
                            a 33-byte header -- seq (16 hex digits), tag
                            (16 hex digits), kind ("0" str, "1" JSON) --
                            then the payload bytes (UTF-8; U+0000 and any
                            length are fine, Redis values are bytes)
    P:rl:S:m:<session id>   a hash: ``seq`` (the last number handed out),
                            ``bytes`` (payload bytes held)
    P:rl:S:sessions         a set of the session ids that have a tail
    P:rl:S:lock             :meth:`exclusive`'s lock

``S`` is the store's own id (:meth:`Stores.identity
<ctxrelay.storage.stores.Stores.identity>`; for PostgreSQL a random id made
with the schema and read from it, with the database's and the schema's names),
so two stores that share a Redis and a prefix never read each other's tails,
and every relay of one store shares them however it spells the store's URL
(``postgres://localhost`` or ``postgresql://127.0.0.1``, other options).  The tail's keys expire ``TAIL_TTL_S``
after the session's last append (an idle session costs no memory; its next
read rebuilds it), and Redis's ``maxmemory`` LRU may evict them sooner: a
list evicted without its hash, or the reverse, is recovered from what is left.

Every change is one Lua script (atomic in Redis, one round trip): the append
with its trimming by count and by bytes, the roll-off, the drop.  The *tag*
is the router's turn id (:meth:`RedisRollingLog.append_turns`): appending the
turns just committed is conditional on the tail ending at the turn before
them, so two relays that append to one session never interleave a tail, with
no lock and one round trip per managed turn.
"""
from __future__ import annotations

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

# KEYS: list, meta, sessions.  ARGV: cap_entries, cap_bytes, ttl_ms, session id,
# mode ("plain", "next", "replace"), then items (tag hex + kind + payload).
# Returns {status, last seq}: status 1 appended, 0 already there, -1 a gap,
# -2 the tail holds other bytes under one of these turn ids.
_APPEND = _COMMON + """
local list, m, sessions = KEYS[1], KEYS[2], KEYS[3]
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
  if have < want_first - 1 then return {-1, seq} end
  -- Turns the tail holds already must be these very turns (a replay, or a
  -- race with another relay); other bytes under their ids mean the tail
  -- outlived its transcript (a restored database): -2, rebuild it.
  local n = redis.call('LLEN', list)
  while first <= #ARGV and tonumber(string.sub(ARGV[first], 1, 16), 16) <= have do
    local back = have - tonumber(string.sub(ARGV[first], 1, 16), 16)
    local held = back < n and redis.call('LINDEX', list, -1 - back) or false
    if held and string.sub(held, 17) ~= ARGV[first] then return {-2, seq} end
    first = first + 1
  end
  if first > #ARGV then return {0, seq} end
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
redis.call('PEXPIRE', list, ttl)
redis.call('PEXPIRE', m, ttl)
redis.call('SADD', sessions, ARGV[4])
redis.call('PEXPIRE', sessions, ttl)
return {1, seq}
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

# KEYS: list, meta, sessions.  ARGV: session id.  Returns 1 if it had a tail.
_DROP = """
local had = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('SREM', KEYS[3], ARGV[1])
if had > 0 then return 1 else return 0 end
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
        self._drop_script = client.register_script(_DROP)
        self._held = threading.local()
        self._local = threading.RLock()
        self.errors = self.skipped = 0
        self._closed = False

    # -- keys and calls -------------------------------------------------------------------

    def _keys(self, session_id: str) -> tuple[bytes, bytes, bytes]:
        raw = session_bytes(session_id)
        base = self._base.encode("utf-8")
        return base + b"l:" + raw, base + b"m:" + raw, base + b"sessions"

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
        status, seq = self._call(
            self._append_script, keys=list(keys),
            args=[self._cap_entries, self._cap_bytes, int(TAIL_TTL_S * 1000),
                  session_bytes(session_id), mode, *items])
        return int(status), int(seq)

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
        return int(self._call(self._roll_off_script, keys=list(keys[:2]), args=[n]))

    def drop(self, session_id: str) -> bool:
        keys = self._keys(session_id)
        return bool(self._call(self._drop_script, keys=list(keys),
                               args=[session_bytes(session_id)]))

    def sessions(self) -> list[str]:
        base = self._base.encode("utf-8")
        members = sorted(self._call(self._client.smembers, base + b"sessions"))

        def exists() -> list[Any]:
            with self._client.pipeline(transaction=False) as pipe:
                for m in members:
                    pipe.exists(base + b"l:" + m, base + b"m:" + m)
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
