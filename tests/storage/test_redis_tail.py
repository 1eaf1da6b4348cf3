"""The rolling hot tail in Redis (issue 17, item 1): shared by the processes of a
store, written after the transcript commit, and never trusted over the transcript.

Every test runs on a PostgreSQL schema of its own; the Redis is the test server
under a prefix of the test's own, or a private one for flush and stop."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
import warnings

import pytest

from ctxrelay import Runtime
from ctxrelay.retrieval.router import Router
from ctxrelay.storage import close_all, open_stores
from ctxrelay.storage.redis.rolling import RedisRollingLog
from services import redis_url

POLICY = {"max_context_tokens": 700, "output_reserve": 64, "min_recent_turns": 4}
TEXTS = [f"turn {i}: the etcd member {i % 3} was defragmented at {10 + i}:00, quota "
         f"{8 + i % 4} GiB" for i in range(1, 25)]


@pytest.fixture
def cache():
    url = f"{redis_url()}?prefix=tail{uuid.uuid4().hex[:12]}"
    yield url
    import redis
    client = redis.Redis.from_url(redis_url())
    prefix = url.rpartition("=")[2]
    doomed = list(client.scan_iter(match=f"{prefix}:*"))
    if doomed:
        client.delete(*doomed)
    client.close()


def _tail(stores) -> RedisRollingLog:
    assert isinstance(stores.rolling, RedisRollingLog)
    return stores.rolling


def _tail_ids(stores, session: str) -> list[int]:
    return [json.loads(e)[0] for e in _tail(stores).read_recent(session, 1000)]


class TranscriptReads:
    """Counts the transcript reads a rebuild makes (``iter_turns``, ``history``)."""

    def __init__(self, transcript) -> None:
        self.t, self.calls = transcript, 0
        self._orig = (transcript.iter_turns, transcript.history)

    def __enter__(self) -> "TranscriptReads":
        iter_turns, history = self._orig

        def counted(fn):
            def call(*a, **kw):
                self.calls += 1
                return fn(*a, **kw)
            return call
        self.t.iter_turns, self.t.history = counted(iter_turns), counted(history)
        return self

    def __exit__(self, *exc: object) -> None:
        del self.t.iter_turns, self.t.history


_APPENDER = r"""
import os, sys
from ctxrelay import Runtime
from ctxrelay.storage import open_stores
spec, cache, mode, text = sys.argv[1:5]
if mode == "runtime":
    with Runtime(spec, cache=cache) as rt:
        print(rt.append("ops", "user", text))
else:      # a writer that dies between the transcript commit and the tail write
    stores = open_stores(spec, cache=cache)
    print(stores.transcript.append("ops", "user", text), flush=True)
    os._exit(9)
"""


def _other_process(spec: str, cache: str, mode: str, text: str) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _APPENDER, spec, cache, mode, text],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == (0 if mode == "runtime" else 9), done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def test_a_turn_appended_by_another_process_is_read_from_the_shared_tail(pg_schema, cache):
    spec, _ = pg_schema
    with Runtime(spec, cache=cache) as rt, open_stores(spec) as stores:
        rt.create_session("ops")
        for text in TEXTS[:6]:
            rt.append("ops", "user", text)
        assert [t.turn_id for t in rt.recent("ops", 3)] == [4, 5, 6]
        router = Router.of(stores)
        assert _other_process(spec, cache, "runtime", "appended by relay B") == 7
        assert _tail_ids(stores, "ops") == [1, 2, 3, 4, 5, 6, 7]    # B wrote the tail
        with TranscriptReads(stores.transcript) as reads:
            recent = rt.recent("ops", 3)
        assert [(t.turn_id, t.content) for t in recent] == \
            [(5, TEXTS[4]), (6, TEXTS[5]), (7, "appended by relay B")]
        assert reads.calls == 0 and router.tail_misses == 0     # no rebuild: from Redis
        hits = router.mirror_hits
        assert [t.turn_id for t in rt.recent("ops", 3)] == [5, 6, 7]
        assert router.mirror_hits == hits + 1           # now this process's mirror


def test_a_tail_left_behind_by_a_crashed_writer_is_detected_and_rebuilt(pg_schema, cache):
    spec, _ = pg_schema
    with Runtime(spec, cache=cache) as rt, open_stores(spec) as stores:
        rt.create_session("ops")
        for text in TEXTS[:5]:
            rt.append("ops", "user", text)
        assert _other_process(spec, cache, "crash", "stored, then the writer died") == 6
        assert _tail_ids(stores, "ops") == [1, 2, 3, 4, 5]        # behind the transcript
        assert [t.content for t in rt.recent("ops", 2)] == [TEXTS[4],
                                                            "stored, then the writer died"]
        assert _tail_ids(stores, "ops") == [1, 2, 3, 4, 5, 6]     # caught up
        rt.append("ops", "user", TEXTS[6])                        # and followed again
        assert _tail_ids(stores, "ops")[-2:] == [6, 7]


@pytest.mark.parametrize("damage", ["gap", "interleaved", "outlived", "garbage"])
def test_an_inconsistent_tail_is_never_served(pg_schema, cache, damage):
    spec, _ = pg_schema
    with Runtime(spec, cache=cache) as rt, open_stores(spec) as stores:
        rt.create_session("ops")
        for text in TEXTS[:8]:
            rt.append("ops", "user", text)
        want = [(t.turn_id, t.content) for t in rt.history("ops")][-4:]
        tail = _tail(stores)

        def fake(ids):
            return [(i, json.dumps([i, "user", f"not turn {i}", None, None, None, 0.0, None,
                                    3, False])) for i in ids]
        if damage == "gap":
            tail.append_turns("ops", fake([4, 5, 6, 8]), replace=True)
        elif damage == "interleaved":           # right first and last ids, wrong order
            tail.append_turns("ops", fake([5, 7, 6, 8]), replace=True)
        elif damage == "outlived":              # a tail of a database since restored
            tail.append_turns("ops", fake(range(1, 11)), replace=True)
        else:
            import redis
            client = redis.Redis.from_url(redis_url())
            key = next(k for k in client.scan_iter(match=f"{cache.rpartition('=')[2]}:rl:*:l:ops"))
            client.rpush(key, b"not an element")
        assert [(t.turn_id, t.content) for t in rt.recent("ops", 4)] == want
        if damage == "outlived":
            # Served from the transcript; the next append finds other bytes under
            # its turn id in the tail and rebuilds it.
            assert rt.append("ops", "user", TEXTS[8]) == 9
            assert [(t.turn_id, t.content) for t in rt.recent("ops", 2)] == \
                [(8, TEXTS[7]), (9, TEXTS[8])]
        entries = tail.read_recent("ops", 1000)
        assert "not turn" not in "".join(entries)                 # rebuilt from PostgreSQL
        assert [json.loads(e)[0] for e in entries] == \
            list(range(1, rt.history("ops")[-1].turn_id + 1))


def _conversation(spec: str, cache: str, at=None) -> list:
    """Appends and assemblies on one session; ``at[i]()`` runs before step ``i``."""
    packs = []
    with Runtime(spec, cache=cache) as rt:
        rt.create_session("ops")
        for i, text in enumerate(TEXTS):
            if at and i in at:
                at[i]()
            rt.append("ops", "user" if i % 2 == 0 else "assistant", text)
            if i % 2:
                packs.append(rt.assemble("ops", f"what was the quota at step {i}?",
                                         **POLICY).messages)
                packs.append([(t.turn_id, t.content) for t in rt.recent("ops", 5)])
    return packs


def test_flushing_or_stopping_redis_mid_run_gives_identical_packs_and_a_rebuilt_tail(
        private_redis, pg_schemas):
    specs = [pg_schemas() for _ in range(2)]
    want = _conversation(specs[0][0], f"{private_redis.url}?prefix=ref")
    cache = f"{private_redis.url}?prefix=sub"
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # a miss is silent: no warning, no error
        have = _conversation(specs[1][0], cache, at={
            6: private_redis.flushall, 12: private_redis.stop, 18: private_redis.start})
    assert have == want
    with open_stores(specs[1][0], cache=cache) as stores:
        deadline = time.monotonic() + 15      # past the back-off window after the outage
        while True:
            recent = Router.of(stores).recent("ops", 3)
            try:
                ids = _tail_ids(stores, "ops")
            except Exception:
                ids = []
            if ids and ids[-1] == len(TEXTS) or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        assert [t.turn_id for t in recent] == [22, 23, 24]
        assert ids == list(range(1, len(TEXTS) + 1))          # rebuilt in Redis


def test_stores_that_share_a_redis_and_a_prefix_keep_their_tails_apart(cache, pg_schemas):
    specs = [pg_schemas() for _ in range(2)]
    for n, (spec, _) in enumerate(specs):
        with Runtime(spec, cache=cache) as rt:
            rt.create_session("ops")
            rt.append("ops", "user", f"store {n}")
    for n, (spec, _) in enumerate(specs):
        with Runtime(spec, cache=cache) as rt:
            assert [t.content for t in rt.recent("ops", 5)] == [f"store {n}"]


def _respelled(spec: str) -> str:
    """``spec`` as another relay may write it: the other scheme name, the host by
    name or by address, the user as a parameter, options of libpq's own."""
    from urllib.parse import urlsplit
    parts = urlsplit(spec)
    host = "localhost" if parts.hostname in ("127.0.0.1", "::1") else "127.0.0.1"
    scheme = "postgres" if parts.scheme == "postgresql" else "postgresql"
    user = f"&user={parts.username}" if parts.username else ""
    password = f"&password={parts.password}" if parts.password else ""
    return (f"{scheme}://{host}:{parts.port or 5432}{parts.path}?connect_timeout=7"
            f"&application_name=relay_b{user}{password}&{parts.query}")


def test_relays_that_spell_one_store_differently_share_one_tail(pg_schema, cache):
    spec, _ = pg_schema
    other = _respelled(spec)
    assert other != spec
    with Runtime(spec, cache=cache) as rt, open_stores(spec) as a, \
            open_stores(other, cache=cache) as b:
        assert b is not a                      # two opens: two pools, routers, mirrors
        rt.create_session("ops")
        for text in TEXTS[:6]:
            rt.append("ops", "user", text)
        assert _tail_ids(b, "ops") == [1, 2, 3, 4, 5, 6]          # relay A's tail
        router = Router.of(b)
        with TranscriptReads(b.transcript) as reads:
            recent = router.recent("ops", 3)
        assert [(t.turn_id, t.content) for t in recent] == \
            [(4, TEXTS[3]), (5, TEXTS[4]), (6, TEXTS[5])]
        assert reads.calls == 0 and router.tail_misses == 0      # a Redis hit, no rebuild
        assert b.identity() == a.identity()


def test_two_schemas_named_alike_otherwise_never_share_a_tail(cache, pg_schemas):
    specs = [pg_schemas() for _ in range(2)]
    with Runtime(specs[0][0], cache=cache) as rt, \
            open_stores(specs[0][0]) as first, \
            open_stores(_respelled(specs[1][0]), cache=cache) as second:
        rt.create_session("ops")
        rt.append("ops", "user", "in the first schema")
        assert _tail_ids(first, "ops") == [1]
        assert _tail_ids(second, "ops") == []
        assert first.identity() != second.identity()


def test_large_texts_and_nul_characters_round_trip(pg_schema, cache):
    spec, _ = pg_schema
    # 400,000 bytes is more than a ring holds (256 KiB): kept as a pointer; 200,000 fit
    texts = ["nul \x00 inside \x00", "é" * 200_000, "plain", "x" * 200_000 + "\x00"]
    with Runtime(spec, cache=cache) as rt, open_stores(spec) as stores:
        rt.create_session("ops")
        for text in texts:
            rt.append("ops", "user", text)
        assert [t.content for t in rt.recent("ops", 4)] == texts
        held = [json.loads(e) for e in _tail(stores).read_recent("ops", 4)]
        assert held[1] == [2]                                     # a pointer
        assert [held[i][2] for i in (0, 2, 3)] == [texts[0], texts[2], texts[3]]  # whole
        Router.of(stores)._tail.forget_mirror("ops")
        assert [t.content for t in rt.recent("ops", 4)] == texts  # read back from Redis


#: Redis round trips of a managed turn on a PostgreSQL store (echo provider, no
#: facts): one conditional append of the user's message and the reply together.
#: The recent window's read costs none while this process wrote the session's
#: last turn (its mirror of the tail ends at the turn count); it was 2 before
#: that mirror.  Hot-cache lookups of fact retrieval come on top when a session
#: has facts.
REDIS_MANAGED_TURN_BUDGET = 1


def test_a_managed_turn_costs_one_redis_round_trip(pg_schema):
    from urllib.parse import urlsplit

    from pg_proxy import TcpProxy
    spec, schema = pg_schema
    target = urlsplit(redis_url())
    proxy = TcpProxy((target.hostname, target.port))
    try:
        cache = f"redis://127.0.0.1:{proxy.port}{target.path or '/0'}?prefix=rt{schema}"
        with Runtime(spec, cache=cache) as rt:
            rt.create_session("s")
            for i in range(30):
                rt.managed_turn("s", f"message {i} about the etcd quota and raft {i}",
                                provider="echo")
            before = proxy.round_trips
            rt.managed_turn("s", "one more question about the etcd quota", provider="echo")
            assert proxy.round_trips - before == REDIS_MANAGED_TURN_BUDGET
            with open_stores(spec) as stores:
                assert _tail_ids(stores, "s")[-2:] == [61, 62]
    finally:
        close_all()
        proxy.close()
        import redis
        client = redis.Redis.from_url(redis_url())
        doomed = list(client.scan_iter(match=f"rt{schema}:*"))
        if doomed:
            client.delete(*doomed)
        client.close()



def test_the_conditional_append_of_turns(tmp_path, cache):
    from ctxrelay.storage.redis.rolling import ALREADY, APPENDED, GAP, STALE
    with open_stores(tmp_path / "store", cache=cache, ring_entries=4,
                     ring_bytes=1000) as stores:
        tail = _tail(stores)
        assert tail.append_turns("s", [(3, "c")]) == GAP                 # empty: not at 2
        assert tail.append_turns("s", [(1, "a"), (2, "b")]) == APPENDED
        assert tail.append_turns("s", [(2, "b")]) == ALREADY             # a replay
        assert tail.append_turns("s", [(2, "B")]) == STALE               # other bytes
        assert tail.append_turns("s", [(4, "d")]) == GAP                 # 3 is missing
        assert tail.append_turns("s", [(2, "b"), (3, "c")]) == APPENDED  # 2 skipped
        assert tail.read_recent("s", 10) == ["a", "b", "c"]
        for i in range(4, 8):
            assert tail.append_turns("s", [(i, f"t{i}")]) == APPENDED
        assert tail.read_recent("s", 10) == ["t4", "t5", "t6", "t7"]     # capped at 4
        assert tail.append_turns("s", [(1, "a")]) == ALREADY             # rolled off
        assert tail.append_turns("s", [(9, "x"), (10, "y")], replace=True) == APPENDED
        assert [r.seq for r in tail.read_recent_with_seq("s", 10)] == [8, 9]


def test_a_tail_evicted_in_part_is_recovered_from_what_is_left(tmp_path, cache):
    import redis
    with open_stores(tmp_path / "store", cache=cache) as stores:
        tail = _tail(stores)
        for i in range(1, 4):
            tail.append("s", f"e{i}")
        client = redis.Redis.from_url(redis_url())
        [meta] = list(client.scan_iter(match=f"{cache.rpartition('=')[2]}:rl:*:m:s"))
        [listing] = list(client.scan_iter(match=f"{cache.rpartition('=')[2]}:rl:*:sessions"))
        client.delete(meta, listing)                 # LRU took the hash and the set of
        assert tail.sessions() == []                 # sessions, not the list
        assert tail.append("s", "e4") == 4           # numbers still never go back
        assert tail.stats("s").bytes_used == 8
        assert tail.sessions() == ["s"]              # listed again with its new hash
        client.close()


def test_an_unreachable_redis_is_a_miss_that_backs_off(pg_schema):
    from ctxrelay.storage.rolling import RollingLogUnavailableError
    spec, _ = pg_schema
    with Runtime(spec, cache="redis://127.0.0.1:1/0?prefix=gone") as rt, \
            open_stores(spec) as stores:
        rt.create_session("ops")
        for text in TEXTS[:5]:
            rt.append("ops", "user", text)
        assert [t.content for t in rt.recent("ops", 2)] == TEXTS[3:5]
        tail = _tail(stores)
        assert tail.errors >= 1 and tail.skipped >= 1        # one failure, then skipped
        with pytest.raises(RollingLogUnavailableError, match="transcript"):
            tail.read_recent("ops", 2)
        assert Router.of(stores).tail_misses >= 1
