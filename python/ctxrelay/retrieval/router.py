"""The storage router's executor (SPEC-035 §3): run a plan, cache first.

Which primitive serves an access is decided in Prolog (``prolog/ctxrelay/
router.pl``); this module carries a plan out.  A plan is a plain dict::

    {"steps": [{"op": "graph.ann", "query": "...", "k": 10, "namespace": None}, ...],
     "cache": "query text" or None,     # None: the plan is not cached
     "session": "session id" or None,
     "namespace": "ns" or None,
     "merge": "rrf" or "none", "limit": 10 or None}

An op is ``<primitive>.<operation>``; the primitives are SPEC-035 §6's header
names (``log``, ``index``, ``pointer``, ``graph``, and ``cache``):

``log.recent``      the session's rolling log, last ``n`` turns (pointer reads)
``index.key``       key -> fact, exact (the CKF's key index)
``index.terms``     BM25 over the CKF's term -> fact index
``graph.ann``       hnswlib nearest facts (cosine)
``graph.cdr``       Coverage-Differential Retrieval (SPEC-024); optional ``coverage``
                    (texts already in context) and ``novelty`` (on/off/partial)
``graph.cdgr``      the CDGR walk: CDR anchors plus connectors (SPEC-025); same options
``pointer.entry``   one scratch entry's summary, gated by freshness
``pointer.recent``  the session's newest ``n`` scratch entries, gated

Cache
-----
A cached plan is looked up in the :class:`~ctxrelay.storage.cache.HotCache` first.  The
key is the bucketed embedding of the plan's query, the CKF state hash of the
namespace (plus the transcript's turn count when the plan reads the session),
and a scope naming the namespace, the session and the plan's shape (its ops
and their arguments other than the query).  Any CKF mutation changes the state
hash and any append the turn count, so a stale entry is never found; the
entries of a superseded state hash are dropped when the router first sees the
new one.  Query embeddings are memoised by text, so a repeated query costs no
embedder call.

Blended plans fetch every step concurrently on one small shared thread pool
and merge by reciprocal-rank fusion (RRF, k = 60): an item found by several
steps (the same fact by ANN and by BM25) adds up its ``1 / (60 + rank)``.

Rolling log
-----------
Each store has its rolling log (``stores.rolling``; embedded: ``<store>/rolling``):
one ring per session of the session's most recent turns, appended by the
bridge after each transcript append (:meth:`Router.log_turn`).  The ring is derived data.  Every
read checks it against the transcript -- the ring's newest turn id must be the
session's turn count and its turn ids contiguous -- and re-syncs it from the
transcript tail when it lags (an import, a crash between the two writes, a
ring made after the turns, an append that bypassed the bridge).  The check
costs one LMDB read, and is skipped while the LMDB environment's last
transaction id is the one seen at the last check (no write since).

A rolling log shared by processes (Redis, with a ``redis://`` cache) is written
by :class:`~ctxrelay.retrieval.tail.SharedTail` instead: one conditional
append per commit, no lock, and a per-process mirror that answers reads it
ends at.  A shared tail is never trusted past the transcript: one ahead of
the turn count may have outlived its database, and one that cannot be read,
or brought in line, leaves the read to the transcript (``tail_misses``).

One router per store: :meth:`Router.of` makes it in the store's
:class:`~ctxrelay.storage.stores.Stores` (``stores.state``), which closes it
with the store.
"""
from __future__ import annotations

import hashlib
import threading
import time
import warnings
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from ctxrelay.errors import CtxRelayError, InvalidArgumentError, InvalidContentError
from ctxrelay.storage.cache import InvalidEmbeddingError
from ctxrelay.storage.interfaces.rolling import TurnOrderedLog
from ctxrelay.storage.rolling import EntryTooLargeError, RollingLogUnavailableError
from ctxrelay.storage.stores import RING_BYTES, RING_ENTRIES  # noqa: F401  (re-exported)
from ctxrelay.knowledge.scope import visible_to
from ctxrelay.retrieval.tail import (RING_DAMAGE, TURN_FIELDS, SharedTail,  # noqa: F401
                                     decode_json, entry_values, ring_entry_text)
from ctxrelay.types import RetrievalResult, Turn

if TYPE_CHECKING:
    from ctxrelay.storage.interfaces.cache import HotCacheBackend
    from ctxrelay.storage.stores import Stores

# numpy (the hot cache) and the scratch store load on first use, not with the
# bridge: appends and recent-turn reads need neither, and CLI start-up counts.

__all__ = ["Router", "OPS", "PRIMITIVES", "RRF_K", "RING_ENTRIES",
           "RING_BYTES", "rrf"]

PRIMITIVES = ("cache", "log", "index", "pointer", "graph")
RRF_K = 60                       # Cormack et al.'s constant; ranks, not scores, are fused
TOUCH_GRANULARITY = 1.0         # seconds: scratch uses closer than this are not re-recorded
# Facts past their TTL are marked STALE by a background sweep this often (the
# first one a minute after the router is made, so a short-lived process that
# asks once does not pay for a scan it will not use).
EXPIRE_EVERY_S = 300.0
EXPIRE_FIRST_S = 60.0
EMBED_MEMO = 1024                # query texts whose embedding is kept
POOL_WORKERS = 4                 # the shared pool for blended fetches (2-core machines)


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=POOL_WORKERS,
                                           thread_name_prefix="ctxrelay-router")
    return _pool


def route_plan(plan: Any) -> dict[str, Any]:
    """A plan from Prolog (``ctxrelay_router:access_plan/3``) as :meth:`Router.execute`
    takes it: plain dicts.  Prolog's @none arrives as None; a query "none" stays text."""
    plan = dict(plan)
    plan["steps"] = [dict(s) for s in plan.get("steps") or []]
    return plan


# -- rolling log entries ------------------------------------------------------------

def turn_record(turn: Turn) -> dict[str, Any]:
    """A turn as plain types (``Turn.to_dict`` without ``asdict``'s deep copy)."""
    return {"session_id": turn.session_id, "turn_id": turn.turn_id, "role": turn.role,
            "content": turn.content, "name": turn.name, "tool_call_id": turn.tool_call_id,
            "metadata": turn.metadata, "timestamp": turn.timestamp, "key": turn.key,
            "tokens": turn.tokens, "tokens_exact": turn.tokens_exact}


_new = object.__new__

_RING_DAMAGE = RING_DAMAGE


def _turn(session_id: str, values: list[Any]) -> Turn:
    # A ring entry holds exactly Turn's other fields (written by ring_entry_text).  The
    # frozen dataclass __init__ sets each field through object.__setattr__, which
    # was a third of a last-8 read; filling __dict__ gives the same object.
    turn = _new(Turn)
    fields = turn.__dict__
    fields["session_id"] = session_id
    fields.update(zip(TURN_FIELDS, values))
    return turn


def _contiguous(entries: list[list[Any]]) -> bool:
    # Each id one more than the one before: a tail that two writers interleaved
    # ([3, 5, 4, 6]) has the right first and last ids but is not the transcript's.
    return all(b[0] - a[0] == 1 for a, b in zip(entries, entries[1:]))


# -- the router -----------------------------------------------------------------------

class Router:
    """Rolling-log sync, query memo and cache keys of one store (see the module doc).

    Reach it with :meth:`Router.of`; the parts it uses are the store's
    (``stores.rolling``, ``stores.cache``, ``stores.facts``, ``stores.scratch``).
    """

    def __init__(self, stores: "Stores", *,
                 expire_every: float = EXPIRE_EVERY_S) -> None:
        self._stores = stores
        self._st = stores.transcript
        self.rolling = stores.rolling
        self._ring_entries = self.rolling.capacity_entries
        self._sync_lock = threading.RLock()
        self._verified: dict[str, tuple[int, int]] = {}     # session -> (txn id, turns)
        # A tail shared by processes (Redis): conditional appends, no lock.
        self._tail = SharedTail(self.rolling, self._st, ring_entry_text, self._unverify) \
            if isinstance(self.rolling, TurnOrderedLog) else None
        self.tail_misses = 0          # reads served by the transcript: the tail unreachable
        self._memo: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._memo_lock = threading.Lock()
        # namespace -> (CKF state hash, composite ETags used with it, CKF txn id)
        self._etags: dict[str | None, tuple[str, set[str], int | None]] = {}
        self._touches: dict[tuple[str, str], Any] = {}
        self._pending: set[Any] = set()
        self.expire_every = float(expire_every)
        self._next_expiry = time.monotonic() + min(self.expire_every, EXPIRE_FIRST_S)
        self.expiry_error: BaseException | None = None

    @classmethod
    def of(cls, stores: "Stores") -> "Router":
        """The router of ``stores`` (one per store, made on first use)."""
        return stores.state("router", cls)

    def close(self) -> None:
        """Wait for the deferred work that uses the store's parts (they close next)."""
        self.drain()

    # -- handles ---------------------------------------------------------------------

    @property
    def cache(self) -> "HotCacheBackend":
        """The store's hot cache (``stores.cache``)."""
        return self._stores.cache

    def facts(self) -> Any:
        """The store's CKF (``stores.facts``)."""
        return self._stores.facts

    def scratch(self, *, create: bool = False) -> Any:
        """The store's scratch buffer, or None when there is none yet (unless ``create``)."""
        return self._stores.scratch if create else self._stores.scratch_if_present()

    # -- rolling log: writes ------------------------------------------------------

    def _generation(self) -> int | None:
        return self._st.write_generation()

    def _unverify(self, session_id: str) -> None:
        self._verified.pop(session_id, None)

    def _read(self, session_id: str, n: int, count: int | None = None) -> list[list[Any]]:
        """The ring's last ``n`` entries (decoded); ``count``, the turn count the
        caller checks them against, lets a shared tail's mirror answer."""
        if self._tail is not None:
            return self._tail.read(session_id, n, count)
        return [decode_json(e)[0] for e in self.rolling.read_recent(session_id, n)]

    @property
    def mirror_hits(self) -> int:
        """Reads of a shared tail answered by this process's mirror (no round trip)."""
        return 0 if self._tail is None else self._tail.mirror_hits

    def _last_logged(self, session_id: str) -> int:
        tail = self._read(session_id, 1)
        return tail[0][0] if tail else 0

    def _append(self, session_id: str, turn: Turn) -> None:
        try:
            self.rolling.append(session_id, ring_entry_text(turn))
        except (EntryTooLargeError, InvalidContentError):
            # A turn the ring cannot hold keeps its place as a pointer into the transcript.
            self.rolling.append(session_id, f"[{turn.turn_id}]")

    def log_turn(self, session_id: str, turn_id: int) -> None:
        """Bring the session's ring up to ``turn_id`` just appended to the transcript.

        Never raises for the ring: the transcript write already succeeded, and a
        ring left behind is re-synced by the next read.
        """
        if self._tail is not None:
            self.log_turns(session_id, [turn_id])
            return
        try:
            with self._sync_lock, self.rolling.exclusive():
                try:
                    last = self._last_logged(session_id)
                except _RING_DAMAGE:
                    self._resync(session_id)      # drops the damaged ring and refills it
                    return
                if last >= turn_id:
                    return                       # an idempotent replay, or already synced
                if last == turn_id - 1:
                    self._append(session_id, self._st.turn(session_id, turn_id))
                    return
                self._resync(session_id)
        except (CtxRelayError, OSError) as exc:
            self._verified.pop(session_id, None)
            warnings.warn(f"rolling log of session {session_id!r} not updated ({exc}); "
                          "it is re-synced from the transcript on the next read",
                          RuntimeWarning, stacklevel=2)

    def log_turns(self, session_id: str, turn_ids: list[int]) -> None:
        """:meth:`log_turn` for consecutive ``turn_ids`` just committed together (a
        managed turn's).  On a shared tail it is one transcript read and one
        conditional append (a round trip); a tail that does not end just before
        them is rebuilt."""
        if self._tail is None:
            for turn_id in turn_ids:
                self.log_turn(session_id, turn_id)
            return
        try:
            self._tail.log(session_id, turn_ids)
        except RollingLogUnavailableError:
            self._verified.pop(session_id, None)     # a miss: reads use the transcript
        except (CtxRelayError, OSError) as exc:
            self._verified.pop(session_id, None)
            warnings.warn(f"rolling log of session {session_id!r} not updated ({exc}); "
                          "it is re-synced from the transcript on the next read",
                          RuntimeWarning, stacklevel=2)

    def forget(self, session_id: str) -> bool:
        """Drop the session's ring (for an archived session: no appends can follow,
        so its footprint goes to zero); a later read rebuilds it from the
        transcript.  Returns False if it had none."""
        if self._tail is not None:
            self._verified.pop(session_id, None)
            return self._tail.forget(session_id)
        with self._sync_lock, self.rolling.exclusive():
            self._verified.pop(session_id, None)
            return self.rolling.drop(session_id)

    def sync(self, session_id: str, *, rebuild: bool = False) -> None:
        """Re-sync the session's ring from the transcript tail (rebuilding it if asked)."""
        if self._tail is not None:
            try:
                self._tail.sync(session_id, rebuild)
            except RollingLogUnavailableError:
                self._verified.pop(session_id, None)
            return
        with self._sync_lock, self.rolling.exclusive():
            self._resync(session_id, rebuild=rebuild)

    def _resync(self, session_id: str, *, rebuild: bool = False) -> None:
        count = self._st.turn_count(session_id)
        try:
            last = self._last_logged(session_id)
        except _RING_DAMAGE:
            self.rolling.drop(session_id)        # derived data: rebuild rather than fail
            last, rebuild = 0, True
        if rebuild or last > count or count - last >= self._ring_entries:
            self.rolling.roll_off(session_id, self._ring_entries)
            start = max(1, count - self._ring_entries + 1)
        else:
            start = last + 1
        for turn in self._st.iter_turns(session_id, start, count):
            self._append(session_id, turn)
        self._verified.pop(session_id, None)

    # -- rolling log: reads -----------------------------------------------------------

    def recent(self, session_id: str, n: int) -> list[Turn]:
        """The session's last ``n`` turns, oldest first: exactly the transcript's."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgumentError(f"n must be an int >= 0, got {n!r}; pass how many "
                                       "recent turns to read")
        try:
            found = self._recent(session_id, n)
        except RollingLogUnavailableError:
            found = None
        if found is None:
            # The tail cannot be reached, or could not be brought in line: the
            # transcript answers (latency, never a wrong turn).
            self._verified.pop(session_id, None)
            self.tail_misses += 1
            count = self._st.turn_count(session_id)
            return self._st.history(session_id, max(1, count - n + 1), count) \
                if n and count else []
        return found

    def _recent(self, session_id: str, n: int) -> list[Turn] | None:
        gen = self._generation()
        verified = self._verified.get(session_id)
        if verified is not None and verified[0] == gen:
            # No transcript write since the last check: the ring must still end at
            # the turn count seen then (a ring dropped or rolled off under us does not).
            try:
                entries = self._read(session_id, max(n, 1), verified[1])
                if (entries[-1][0] if entries else 0) == verified[1] \
                        and _contiguous(entries):
                    return self._turns(session_id, entries[-n:] if n else [], n)
            except _RING_DAMAGE:
                pass                                   # the slow path rebuilds it
        count = self._st.turn_count(session_id)      # also: UnknownSessionError
        entries = self._read_checked(session_id, n, count)
        if entries is None:
            return None
        if gen is not None:
            self._verified[session_id] = (gen, count)
        return self._turns(session_id, entries, n)

    def _read_checked(self, session_id: str, n: int,
                      count: int) -> list[list[Any]] | None:
        """The ring's last ``n`` entries, checked against the transcript's ``count``
        and re-synced if they do not match; None if even then they do not (another
        process changed the ring meanwhile, or it cannot be written): the caller
        reads the transcript."""
        probe = max(n, 1)
        try:
            entries = self._read(session_id, probe, count)
        except _RING_DAMAGE:
            entries, rebuild = None, True
        else:
            rebuild = not _contiguous(entries)
            last = entries[-1][0] if entries else 0
            # A ring ahead of ``count`` only saw an append made since; behind, it
            # lags.  A shared tail ahead may also have outlived its transcript (a
            # restored database): it is trusted only up to ``count``.
            if not rebuild and (last == count or (last > count and self._tail is None)):
                return entries[-n:] if n else []
            if not rebuild and last > count:
                return None
        self.sync(session_id, rebuild=rebuild)
        try:
            entries = self._read(session_id, probe)
        except _RING_DAMAGE:
            return None
        last = entries[-1][0] if entries else 0
        if not _contiguous(entries) or last < count or (last > count and self._tail):
            return None
        return entries[-n:] if n else []

    def _turns(self, session_id: str, entries: list[list[Any]], n: int) -> list[Turn]:
        st = self._st
        out = [_turn(session_id, e) if len(e) > 1 else st.turn(session_id, e[0])
               for e in entries]
        if len(out) < n and out and out[0].turn_id > 1:
            # The ring holds fewer turns than asked: the older ones come from the transcript.
            first = out[0].turn_id
            out = st.history(session_id, max(1, first - (n - len(out))), first - 1) + out
        return out

    # -- retrieval -----------------------------------------------------------------------

    def vector(self, text: str) -> Any:
        """The query's embedding under the CKF's embedder, memoised by text."""
        return self._embedded(text)[0]

    def prepare_query(self, text: str) -> None:
        """Embed ``text`` ahead of a plan that will ask with it (kept by text, as
        :meth:`vector` and the cache key need it); a text that cannot be embedded
        is left for the plan to report."""
        try:
            self._embedded(text)
        except CtxRelayError:
            pass

    def search_ahead(self, text: str) -> None:
        """The CKF's ANN search for ``text`` run ahead of the plan (``FactStore.search_ahead``):
        a text that cannot be embedded is left for the plan to report."""
        try:
            self.facts().search_ahead(self._embedded(text)[0])
        except CtxRelayError:
            pass

    def _embedded(self, text: str) -> tuple[Any, Any]:
        # (embedding, its cache-key template): a repeated query costs neither an
        # embedder call nor the bucketing projection.
        fs = self.facts()
        key = (fs.embedder.model_id, text)
        found = self._memo.get(key)
        if found is None:
            vec = fs.embedder.embed_batch([text])[0]
            vec.setflags(write=False)
            try:
                template = self.cache.key(vec, "-", "-")      # its bucket and unit vector
            except InvalidEmbeddingError:
                template = None      # no content words (e.g. "and?"): searchable, not cacheable
            found = (vec, template)
            with self._memo_lock:
                self._memo[key] = found
                while len(self._memo) > EMBED_MEMO:
                    self._memo.popitem(last=False)
        return found

    def _etag(self, namespace: str | None) -> str:
        fs = self.facts()
        # The state hash is derived from the CKF's stored records only, so it cannot
        # change without a committed write: while the store's version stays the
        # same, the hash read last is still right.
        gen = fs.version()
        seen = self._etags.get(namespace)
        if gen is not None and seen is not None and seen[2] == gen:
            return seen[0]
        etag = fs.etag(namespace=namespace)
        if seen is not None and seen[0] != etag:
            # The CKF changed: entries keyed by the old state hash can never hit again.
            for old in seen[1]:
                self.cache.invalidate(old)
            seen = None
        self._etags[namespace] = (etag, set() if seen is None else seen[1], gen)
        return etag

    def _cache_key(self, plan: dict[str, Any], query: str) -> Any:
        ns, session = plan.get("namespace"), plan.get("session")
        etag = self._etag(ns)
        reads_session = any(s["op"].startswith(("log.", "pointer.")) for s in plan["steps"])
        if reads_session and session is not None:
            verified = self._verified.get(session)
            count = verified[1] if verified is not None and verified[0] == self._generation() \
                else self._st.turn_count(session)
            etag = f"{etag}:t{count}"
        self._etags[ns][1].add(etag)
        shape = hashlib.blake2b(";".join(
            s["op"] + "(" + ",".join(f"{k}={v!r}" for k, v in sorted(s.items())
                                     if k != "op" and not (k == "query" and v == query)) + ")"
            for s in plan["steps"]).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        scope = f"ns={ns}|session={session if reads_session else ''}|{shape}|" \
                f"{plan.get('merge')}:{plan.get('limit')}"
        bucketed = self._embedded(query)[1]
        if bucketed is None:
            raise InvalidEmbeddingError(f"{query!r} has an all-zero embedding: not cached")
        return type(bucketed)(scope, etag, bucketed.dim, bucketed.bucket, bucketed.embedding)

    def execute(self, plan: dict[str, Any]) -> RetrievalResult:
        """Run ``plan`` (see the module doc): cache first, then the primitives."""
        start = time.perf_counter()
        steps = _check_plan(plan)
        self.expire_when_due()
        query = plan.get("cache")
        timings: dict[str, float] = {}
        key = None
        if query is not None:
            t0 = time.perf_counter()
            try:
                key = self._cache_key(plan, query)
            except InvalidEmbeddingError:
                key = None           # a text with no content words: nothing to bucket, no cache
            hit = self.cache.get(key) if key is not None else None
            t1 = time.perf_counter()
            timings["cache.get"] = (t1 - t0) * 1000
            if hit is not None:
                return RetrievalResult(items=_scoped(list(hit[0]), plan), store_used=["cache"],
                                       cache_hit=True, retrieval_ms=(t1 - start) * 1000,
                                       timings=timings)
        lists = self._fetch(steps, plan, timings)
        if plan.get("merge") == "rrf" and len(lists) > 1:
            items = rrf(lists, limit=plan.get("limit"))
        else:
            items = [item for found in lists for item in found]
            if plan.get("limit") is not None:
                items = items[:plan["limit"]]
        used = list(dict.fromkeys(s["op"].split(".", 1)[0] for s in steps))
        if key is not None:
            self.cache.put(key, (tuple(items), tuple(used)))
        return RetrievalResult(items=_scoped(items, plan), store_used=used, cache_hit=False,
                               retrieval_ms=(time.perf_counter() - start) * 1000,
                               timings=timings)

    def _fetch(self, steps: list[dict[str, Any]], plan: dict[str, Any],
               timings: dict[str, float]) -> list[list[dict[str, Any]]]:
        def run(step: dict[str, Any]) -> tuple[list[dict[str, Any]], float]:
            t0 = time.perf_counter()
            found = _OPS[step["op"]](self, step, plan)
            return found, (time.perf_counter() - t0) * 1000

        if len(steps) == 1:
            done = [run(steps[0])]
        else:
            if any(s.get("query") is not None for s in steps):
                for s in steps:                  # embed once, here, not on every worker
                    if s["op"].startswith("graph.") and s.get("query") is not None:
                        self.vector(s["query"])
            futures = [_shared_pool().submit(run, s) for s in steps[1:]]
            done = [run(steps[0])] + [f.result() for f in futures]
        for step, (_, ms) in zip(steps, done):
            name = step["op"]
            n = 2
            while name in timings:
                name = f"{step['op']}#{n}"
                n += 1
            timings[name] = ms
        return [found for found, _ in done]

    # -- deferred scratch touches ------------------------------------------------------

    def touch_later(self, session_id: str, scratch_id: str, last_access: float) -> None:
        """Record a scratch read for LRU eviction off the caller's path.

        ``ScratchStore.get`` counts a use with a synced LMDB write (milliseconds);
        a summary read must not wait for it.  Touches of one entry coalesce, and
        an entry used less than ``TOUCH_GRANULARITY`` seconds ago is not touched
        again: LRU eviction needs the order of uses, not each one.
        """
        if time.time() - last_access < TOUCH_GRANULARITY:
            return
        item = (session_id, scratch_id)
        with self._memo_lock:                 # _touch pops only after the future is stored
            if item not in self._touches:
                future = self._touches[item] = _shared_pool().submit(self._touch, item)
                self._pending.add(future)
                future.add_done_callback(self._pending.discard)

    # -- lifecycle: facts past their TTL (SPEC-009 §8.1) ----------------------------

    def expire_when_due(self) -> None:
        """Start a sweep of the CKF for facts past their TTL, off the caller's path,
        when ``expire_every`` seconds have passed since the last one.

        ``FactStore.expire`` reads only the due facts (the CKF keeps its facts
        with a TTL ordered by due time) and marks them in small transactions,
        so a sweep beside requests costs them little; it still runs on the
        router's pool, at most once per interval.  A fact it marks STALE
        changes the CKF state hash, so cached retrievals that held it are not
        served again.  A store without a CKF is skipped.
        """
        now = time.monotonic()
        if now < self._next_expiry:
            return
        with self._memo_lock:
            if now < self._next_expiry:
                return
            self._next_expiry = now + self.expire_every
            future = _shared_pool().submit(self._expire)
            self._pending.add(future)
            future.add_done_callback(self._pending.discard)

    def _expire(self) -> int:
        fs = self._stores.facts_if_present()
        if fs is None:
            return 0
        try:
            return sum(fs.expire(namespace=ns) for ns in fs.namespaces())
        except Exception as exc:   # a background sweep must not fail a later request
            self.expiry_error = exc
            return 0

    def drain(self) -> None:
        """Wait for the deferred scratch touches and expiry sweeps submitted so far."""
        for future in list(self._pending):
            future.result()

    def _touch(self, item: tuple[str, str]) -> None:
        with self._memo_lock:
            self._touches.pop(item, None)
        try:
            if self._stores.closed:
                return
            scratch = self._stores.scratch_if_present()
            if scratch is None or scratch.closed:
                return
            scratch.get(*item)
        except CtxRelayError:
            pass     # evicted, or the store closed since the read: nothing left to touch


# -- merging ------------------------------------------------------------------------------

def rrf(lists: list[list[dict[str, Any]]], *, limit: int | None = None,
        k: int = RRF_K) -> list[dict[str, Any]]:
    """Reciprocal-rank fusion of ranked item lists (best first); ties keep first-seen order.

    Items are the same when their ``(kind, id)`` are; the fused item keeps the
    first list's fields, with ``score`` the fused score and ``via`` every
    primitive that found it.
    """
    fused: dict[tuple[str, Any], dict[str, Any]] = {}
    scores: dict[tuple[str, Any], float] = {}
    for found in lists:
        for rank, item in enumerate(found, start=1):
            ident = (item["kind"], item["id"])
            if ident not in fused:
                fused[ident] = {**item, "via": list(item["via"])}
                scores[ident] = 0.0
            else:
                fused[ident]["via"] += [v for v in item["via"] if v not in fused[ident]["via"]]
            scores[ident] += 1.0 / (k + rank)
    order = sorted(fused, key=lambda i: -scores[i])        # stable: first seen wins ties
    out = []
    for ident in order[:limit] if limit is not None else order:
        item = fused[ident]
        item["score"] = scores[ident]
        out.append(item)
    return out


# -- the operations ---------------------------------------------------------------------

def _scoped(items: list[dict[str, Any]], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan for a session sees no fact another session owns (ctxrelay.knowledge.scope)."""
    session = plan.get("session")
    if session is None:
        return items
    return [i for i in items if i.get("kind") != "fact" or visible_to(i.get("record") or {},
                                                                       session)]


def _fact_item(fact: Any, score: float, via: str) -> dict[str, Any]:
    return {"kind": "fact", "id": fact.fact_id, "score": float(score), "via": [via],
            "text": fact.content, "record": fact.to_dict()}


def _scratch_item(router: Router, scratch: Any, entry: Any) -> dict[str, Any]:
    shown = scratch.render(entry)
    record = entry.to_dict()
    record["gate"] = shown.action
    record["freshness_header"] = shown.header
    # A stale entry is never shown as current: its text is the gate's, or None.
    return {"kind": "scratch", "id": entry.scratch_id, "score": 1.0, "via": ["pointer"],
            "text": shown.text, "record": record}


def _session(step: dict[str, Any], plan: dict[str, Any]) -> str:
    session = step.get("session", plan.get("session"))
    if session is None:
        raise InvalidArgumentError(f"{step['op']} reads a session: pass session_id= "
                                   "(Prolog: the session(Id) option)")
    return session


def _ns(step: dict[str, Any], plan: dict[str, Any]) -> str | None:
    return step.get("namespace", plan.get("namespace"))


def _op_log_recent(router: Router, step: dict[str, Any], plan: dict[str, Any]) -> list:
    session = _session(step, plan)
    turns = router.recent(session, step["n"])
    # Ranked newest first for fusion; a log-only plan keeps reading order (see execute).
    items = [{"kind": "turn", "id": t.turn_id, "score": 1.0, "via": ["log"],
              "text": t.content, "record": turn_record(t)} for t in turns]
    return items[::-1] if plan.get("merge") == "rrf" else items


def _op_index_key(router: Router, step: dict[str, Any], plan: dict[str, Any]) -> list:
    fact = router.facts().lookup_key(step["key"], namespace=_ns(step, plan))
    return [] if fact is None else [_fact_item(fact, 1.0, "index")]


def _op_index_terms(router: Router, step: dict[str, Any], plan: dict[str, Any]) -> list:
    fs, ns = router.facts(), _ns(step, plan)
    hits = fs.search_terms(step["query"], k=step["k"], namespace=ns)
    facts = fs.backend.get(ns or "default", [h.fact_id for h in hits]) if hits else []
    return [_fact_item(f, h.score, "index") for h, f in zip(hits, facts) if f is not None]


def _graph(method: str) -> Callable[[Router, dict[str, Any], dict[str, Any]], list]:
    def op(router: Router, step: dict[str, Any], plan: dict[str, Any]) -> list:
        fs = router.facts()
        extra = {}
        if method != "facts":
            # CDR/CDGR's novelty terms (SPEC-024): what the window already covers.
            extra = {k: step[k] for k in ("coverage", "novelty") if step.get(k) is not None}
        found = getattr(fs, method)(router.vector(step["query"]), k=step["k"],
                                    namespace=_ns(step, plan), **extra)
        items = []
        for s in found:
            item = _fact_item(s.fact, s.score, "graph")
            item["role"] = s.role
            items.append(item)
        return items
    return op


def _op_pointer_entry(router: Router, step: dict[str, Any], plan: dict[str, Any]) -> list:
    session = _session(step, plan)
    scratch = router.scratch(create=True)
    entry = scratch.get(session, step["scratch_id"], touch=False)
    router.touch_later(session, entry.scratch_id, entry.last_access)
    return [_scratch_item(router, scratch, entry)]


def _op_pointer_recent(router: Router, step: dict[str, Any], plan: dict[str, Any]) -> list:
    from ctxrelay.storage.common.scratch.errors import UnknownScratchError        # loaded already: router.scratch() opened it
    session, n = _session(step, plan), step["n"]
    scratch = router.scratch()
    if scratch is None or n == 0:
        return []
    # The tool turns of the recent window point at their scratch entries: a few
    # pointer reads instead of listing every entry the session ever stored.
    window = router.recent(session, max(16, 4 * n))
    ids = list(dict.fromkeys(
        t.metadata["scratch_id"] for t in reversed(window)
        if t.role == "tool" and isinstance(t.metadata.get("scratch_id"), str)))
    entries = []
    for sid in ids:
        try:
            entries.append(scratch.get(session, sid, touch=False))
        except UnknownScratchError:
            continue                                  # evicted since
        if len(entries) == n:
            break
    if len(entries) < n and window and window[0].turn_id > 1:
        entries = scratch.list(session)[-n:][::-1]    # older than the window: list them
    return [_scratch_item(router, scratch, e) for e in entries]


_OPS: dict[str, Callable[[Router, dict[str, Any], dict[str, Any]], list]] = {
    "log.recent": _op_log_recent,
    "index.key": _op_index_key,
    "index.terms": _op_index_terms,
    "graph.ann": _graph("facts"),
    "graph.cdr": _graph("cdr"),
    "graph.cdgr": _graph("cdgr"),
    "pointer.entry": _op_pointer_entry,
    "pointer.recent": _op_pointer_recent,
}
OPS = tuple(_OPS)

_REQUIRED = {"log.recent": ("n",), "index.key": ("key",), "index.terms": ("query", "k"),
             "graph.ann": ("query", "k"), "graph.cdr": ("query", "k"),
             "graph.cdgr": ("query", "k"), "pointer.entry": ("scratch_id",),
             "pointer.recent": ("n",)}


def _check_plan(plan: Any) -> list[dict[str, Any]]:
    if not isinstance(plan, dict) or not isinstance(plan.get("steps"), list) \
            or not plan["steps"]:
        raise InvalidArgumentError(
            "a plan is a dict with a non-empty 'steps' list; build it with the Prolog "
            "router (ctxrelay:retrieve/4) rather than by hand")
    for step in plan["steps"]:
        op = step.get("op") if isinstance(step, dict) else None
        if op not in _OPS:
            raise InvalidArgumentError(f"unknown router op {op!r}; known: {', '.join(OPS)}")
        missing = [a for a in _REQUIRED[op] if step.get(a) is None]
        if missing:
            raise InvalidArgumentError(f"router op {op} needs {', '.join(missing)}")
    return plan["steps"]
