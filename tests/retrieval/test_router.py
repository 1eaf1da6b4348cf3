"""The storage router: rolling log in the write path, hot cache first, blended fetches.

Rolling-log tests drive ``ctxrelay.bridge.stores`` directly (the functions Prolog
calls on every append), so they cover the hook without paying a janus
crossing per turn; the facade tests go through ``Runtime`` and Prolog.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay import Runtime
from ctxrelay.bridge import stores as bridge
from ctxrelay.retrieval import router as router_mod
from ctxrelay.knowledge.fabric import FactStore
from ctxrelay.errors import InvalidArgumentError, UnknownSessionError
from ctxrelay.retrieval.router import Router, entry_values, rrf
from ctxrelay.storage import Stores, open_stores
from ctxrelay.types import RetrievalResult, Turn


def _store(path: Path, **ring) -> Stores:
    """The store's parts, as the bridge gets them; ``ring``: ring_entries, ring_bytes."""
    return open_stores(str(path), **ring)


def router_for(store: Stores) -> Router:
    return Router.of(store)


def _ring_ids(store: Stores, session: str, n: int = 10_000) -> list[int]:
    return [entry_values(e)[0] for e in router_for(store).rolling.read_recent(session, n)]


def _say(store: Stores, session: str, text: str, **opts) -> int:
    return bridge.append(store, session, "user", text, opts)


# -- the write path ---------------------------------------------------------------

def test_every_bridge_append_lands_in_the_ring(tmp_path):
    store = _store(tmp_path / "s")
    bridge.create_session(store, "a", None)
    ids = [_say(store, "a", f"turn {i}") for i in range(5)]
    # Read the ring itself, not through recent(): the hook wrote it, no re-sync did.
    assert _ring_ids(store, "a") == ids == [1, 2, 3, 4, 5]
    assert entry_values(router_for(store).rolling.read_recent("a", 1)[0])[2] == "turn 4"
    store.close()


def test_a_keyed_retry_does_not_duplicate_the_ring_entry(tmp_path):
    store = _store(tmp_path / "s")
    bridge.create_session(store, "a", None)
    first = _say(store, "a", "hello", key="k1")
    assert _say(store, "a", "hello", key="k1") == first
    assert _ring_ids(store, "a") == [1]
    store.close()


def test_tool_outputs_and_imports_land_in_the_ring(tmp_path):
    store = _store(tmp_path / "s")
    bridge.create_session(store, "a", None)
    _say(store, "a", "run the query")
    out = bridge.record_tool_output(store, "a", "sql", {"q": "select"}, "a,b\n1,2\n", {})
    assert _ring_ids(store, "a") == [1, out["call_turn"], out["tool_turn"]]
    text = bridge.export_jsonl(store, "a", None)
    new = bridge.import_jsonl(store, text, False, "copy")
    assert _ring_ids(store, new) == [1, 2, 3]
    store.close()


def test_a_turn_larger_than_the_ring_is_kept_as_a_pointer(tmp_path):
    store = _store(tmp_path / "s", ring_entries=8, ring_bytes=600)
    bridge.create_session(store, "a", None)
    _say(store, "a", "small")
    big = "x" * 5000
    _say(store, "a", big)
    assert router_for(store).rolling.read_recent("a", 1) == ["[2]"]
    assert [t.content for t in router_for(store).recent("a", 2)] == ["small", big]
    store.close()


# -- re-sync: recent(N) is always the transcript's last N ------------------------------

def test_direct_transcript_appends_are_picked_up(tmp_path):
    store = _store(tmp_path / "s")
    bridge.create_session(store, "a", None)
    _say(store, "a", "through the bridge")
    store.transcript.append("a", "assistant", "behind the bridge's back")    # the ring lags by one
    assert router_for(store).recent("a", 5) == store.transcript.last("a", 5)
    assert _ring_ids(store, "a") == [1, 2]
    store.close()


def test_crash_between_the_two_writes_is_repaired(tmp_path, monkeypatch):
    path = tmp_path / "s"
    store = _store(path)
    bridge.create_session(store, "a", None)
    _say(store, "a", "run it")
    # The process dies after the transcript commits and before the ring append:
    # here, the ring hook does nothing for the two turns of a tool output.
    monkeypatch.setattr(Router, "log_turn", lambda self, session_id, turn_id: None)
    bridge.record_tool_output(store, "a", "sh", {"cmd": "ls"}, "a\nb\n", {})
    monkeypatch.undo()
    store.close()
    store = _store(path)                             # the next process
    assert _ring_ids(store, "a") == [1]              # the ring lags the transcript
    assert router_for(store).recent("a", 3) == store.transcript.last("a", 3)
    assert _ring_ids(store, "a") == [1, 2, 3]
    store.close()


def test_a_ring_made_after_the_fact_is_filled_from_the_transcript(tmp_path):
    path = tmp_path / "s"
    store = _store(path)
    store.transcript.create_session("a")
    for i in range(30):
        store.transcript.append("a", "user", f"old turn {i}")          # no ring at all yet
    assert router_for(store).recent("a", 10) == store.transcript.last("a", 10)
    assert _ring_ids(store, "a") == list(range(1, 31))
    store.close()


def test_a_corrupt_ring_is_rebuilt(tmp_path):
    path = tmp_path / "s"
    store = _store(path)
    bridge.create_session(store, "a", None)
    for i in range(3):
        _say(store, "a", f"t{i}")
    ring_file = next((path / "rolling").glob("*.ring"))
    store.close()
    ring_file.write_bytes(b"not a ring at all" * 10)
    store = _store(path)                             # the next process finds it damaged
    assert router_for(store).recent("a", 3) == store.transcript.last("a", 3)
    store.close()


def test_foreign_ring_entries_are_rebuilt(tmp_path):
    store = _store(tmp_path / "s")
    bridge.create_session(store, "a", None)
    _say(store, "a", "one")
    router = router_for(store)
    router.rolling.append("a", "not a turn")             # a ring entry we never wrote
    router.rolling.append("a", {"some": "dict"})
    _say(store, "a", "two")                              # the hook rebuilds, no raise
    assert _ring_ids(store, "a") == [1, 2]
    assert router.recent("a", 2) == store.transcript.last("a", 2)
    store.close()


def test_concurrent_appenders_keep_the_ring_in_order(tmp_path):
    import threading
    store = _store(tmp_path / "s")
    bridge.create_session(store, "a", None)

    def write(tag: str) -> None:
        for i in range(15):
            _say(store, "a", f"{tag}{i}")
    threads = [threading.Thread(target=write, args=(t,)) for t in "xyz"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _ring_ids(store, "a") == list(range(1, 46))   # the hooks alone, no re-sync
    assert router_for(store).recent("a", 45) == store.transcript.history("a")
    store.close()


def test_more_than_the_ring_holds_comes_from_the_transcript(tmp_path):
    store = _store(tmp_path / "s", ring_entries=4, ring_bytes=10_000)
    bridge.create_session(store, "a", None)
    for i in range(10):
        _say(store, "a", f"t{i}")
    assert _ring_ids(store, "a") == [7, 8, 9, 10]
    assert router_for(store).recent("a", 7) == store.transcript.last("a", 7)
    assert router_for(store).recent("a", 100) == store.transcript.history("a")
    store.close()


def test_recent_checks_its_arguments(tmp_path):
    store = _store(tmp_path / "s")
    with pytest.raises(UnknownSessionError):
        router_for(store).recent("nobody", 3)
    with pytest.raises(InvalidArgumentError, match="n must be an int >= 0"):
        router_for(store).recent("nobody", -1)
    store.close()


_OPS = st.lists(st.one_of(
    st.tuples(st.just("bridge"), st.text(max_size=40)),
    st.tuples(st.just("direct"), st.text(max_size=40)),
    st.tuples(st.just("big"), st.integers(700, 2000)),
    st.tuples(st.just("roll_off"), st.integers(1, 5)),
    st.tuples(st.just("read"), st.integers(0, 14)),
), max_size=25)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_recent_always_equals_the_transcript_tail(tmp_path, ops):
    # Small rings (6 entries, 600 bytes) so roll-off, pointer entries and the
    # transcript fallback all happen; "direct" and "roll_off" make the ring lag.
    path = Path(tempfile.mkdtemp(dir=tmp_path))
    store = _store(path, ring_entries=6, ring_bytes=600)
    router = router_for(store)
    store.transcript.create_session("p")
    try:
        for op, arg in ops:
            if op == "bridge":
                _say(store, "p", arg)
            elif op == "direct":
                store.transcript.append("p", "assistant", arg)
            elif op == "big":
                _say(store, "p", "y" * arg)
            elif op == "roll_off":
                router.rolling.roll_off("p", arg)
            else:
                assert router.recent("p", arg) == store.transcript.last("p", arg)
        for n in (0, 1, 6, 7, 100):
            assert router.recent("p", n) == store.transcript.last("p", n)
    finally:
        store.close()


# -- retrieval ------------------------------------------------------------------------

FACTS = [
    ("The Q3 budget figure is 1200 dollars per month for etcd hosting.", "budget_q3"),
    ("Restic keeps 48 hourly, 30 daily and 12 weekly snapshots.", "restic"),
    ("The Prometheus alert etcdHighFsyncDurations fired on etcd-2.", None),
    ("Defragment one etcd member at a time, never the leader first.", None),
    ("The raft election timeout is 1000 ms and the heartbeat 100 ms.", "raft_timeouts"),
]


@pytest.fixture
def rt(tmp_path):
    store_dir = tmp_path / "store"
    FactStore(store_dir / "ckf", embedder="hashing").close()    # tests use the hashing embedder
    with Runtime(store_dir) as runtime:
        for text, key in FACTS:
            runtime.add_fact(text, key=key)
        runtime.create_session("s")
        for i in range(12):
            runtime.append("s", "user" if i % 2 == 0 else "assistant", f"turn {i} about etcd")
        yield runtime


def test_runtime_recent_is_the_transcript_tail(rt):
    got = rt.recent("s", 5)
    assert all(isinstance(t, Turn) for t in got)
    assert got == rt.last("s", 5)
    rt.append("s", "user", "one more")
    assert rt.recent("s", 2) == rt.last("s", 2)


@pytest.mark.parametrize("call, named", [
    (lambda rt: rt.retrieve("x", access="recent"), "session_id"),
    (lambda rt: rt.retrieve("x", k=0), "k: "),
    (lambda rt: rt.retrieve("x", k="3"), "k: "),
])
def test_a_bad_retrieve_call_is_an_invalid_argument_that_names_it(rt, call, named):
    # A session access without session_id raised the base CtxRelayError, worded for
    # Prolog ("pass session(Id)"); k=0 said "expected an int > 0, got 0" unnamed.
    with pytest.raises(InvalidArgumentError) as info:
        call(rt)
    assert named in str(info.value)


def test_search_fuses_ann_and_bm25_and_the_repeat_is_a_cache_hit(rt):
    first = rt.retrieve("how many daily restic snapshots do we keep?", k=3)
    assert isinstance(first, RetrievalResult)
    assert first.cache_hit is False
    assert first.store_used == ["graph", "index"]
    assert set(first.timings) == {"cache.get", "graph.ann", "index.terms"}
    assert first.items[0]["text"].startswith("Restic")
    assert first.items[0]["via"] == ["graph", "index"]        # found by both, fused first
    assert len(first.items) <= 3
    again = rt.retrieve("how many daily restic snapshots do we keep?", k=3)
    assert again.cache_hit is True and again.store_used == ["cache"]
    assert [i["id"] for i in again.items] == [i["id"] for i in first.items]
    assert again.headers() == {"CRP-Context-Store-Used": "cache",
                               "CRP-Context-Cache-Hit": "true",
                               "CRP-Context-Retrieval-Ms": f"{again.retrieval_ms:.3f}"}


def test_a_ckf_mutation_invalidates_the_cache(rt):
    query = "which alert fired on etcd-2?"
    rt.retrieve(query)
    assert rt.retrieve(query).cache_hit
    router = router_for(rt._store)
    dropped_before = router.cache.stats().invalidated
    fid = rt.add_fact("The alert that fired on etcd-2 was etcdNoLeader, not fsync.")
    after = rt.retrieve(query)
    assert after.cache_hit is False
    assert fid in [i["id"] for i in after.items]
    assert router.cache.stats().invalidated > dropped_before   # the old state's entries went


def test_cache_scope_separates_access_types_namespaces_and_k(rt):
    query = "raft election timeout"
    rt.retrieve(query)
    assert rt.retrieve(query, access="explore").cache_hit is False
    assert rt.retrieve(query, namespace="other").cache_hit is False
    assert rt.retrieve(query, k=2).cache_hit is False
    assert rt.retrieve(query, cache=False).cache_hit is False
    assert rt.retrieve(query).cache_hit is True


def test_key_lookup_goes_to_the_index_uncached(rt):
    got = rt.retrieve("budget_q3", access="key")
    assert got.store_used == ["index"] and got.cache_hit is False
    assert "cache.get" not in got.timings
    assert [i["record"]["key"] for i in got.items] == ["budget_q3"]
    assert rt.retrieve("no_such_key", access="key").items == []


def test_recent_access_reads_the_log_in_reading_order(rt):
    got = rt.retrieve("", access="recent", k=3, session_id="s")
    assert got.store_used == ["log"]
    assert [i["id"] for i in got.items] == [10, 11, 12]


def test_intents_route_to_their_primitives(rt):
    assert rt.retrieve("etcd hosting budget", access="explore").store_used == ["graph"]
    assert rt.retrieve("etcd hosting budget", access="drill_down").store_used == ["graph"]
    cont = rt.retrieve("go on", access="continue", session_id="s")
    assert cont.store_used == ["log"] and len(cont.items) == 8
    sid = rt.record_tool_output("s", "sql", {"q": "select 1"}, "a,b\n1,2\n3,4\n")
    tool = rt.retrieve("the query result", access="tool_reference", session_id="s")
    assert tool.store_used == ["pointer"] and tool.items[0]["id"] == sid
    assert tool.items[0]["record"]["gate"] == "fresh"
    one = rt.retrieve(sid, access="scratch", session_id="s")
    assert one.items[0]["text"].startswith("[tool output")


def test_a_blend_fetches_each_primitive_and_fuses(rt):
    got = rt.retrieve("raft election timeout", access=["continue", "explore", "key"],
                      session_id="s")
    assert got.store_used == ["log", "graph", "index"]
    assert {"log.recent", "graph.cdr", "index.key"} <= set(got.timings)
    kinds = {i["kind"] for i in got.items}
    assert kinds == {"turn", "fact"}
    # Cached (it has graph steps), and an append changes the session part of the key.
    assert rt.retrieve("raft election timeout", access=["continue", "explore", "key"],
                       session_id="s").cache_hit
    rt.append("s", "user", "new turn")
    fresh = rt.retrieve("raft election timeout", access=["continue", "explore", "key"],
                        session_id="s")
    assert fresh.cache_hit is False
    assert any(i["kind"] == "turn" and i["text"] == "new turn" for i in fresh.items)


def test_pointer_accesses_are_never_cached(rt):
    sid = rt.record_tool_output("s", "sql", {"q": "x"}, "a,b\n1,2\n")
    rt.retrieve(sid, access=["scratch", "explore"], session_id="s")
    again = rt.retrieve(sid, access=["scratch", "explore"], session_id="s")
    assert again.cache_hit is False and "pointer" in again.store_used


def test_bad_accesses_are_specific_errors(rt):
    with pytest.raises(InvalidArgumentError, match="unknown access 'nearest'"):
        rt.retrieve("q", access="nearest")
    with pytest.raises(InvalidArgumentError, match="query must be a str"):
        rt.retrieve(42)
    with pytest.raises(Exception, match="session"):
        rt.retrieve("go on", access="continue")
    with pytest.raises(InvalidArgumentError):
        rt.retrieve("q", k=0)


def test_scratch_summary_reads_record_their_use_off_the_path(rt, monkeypatch):
    monkeypatch.setattr(router_mod, "TOUCH_GRANULARITY", 0.0)
    sid = rt.record_tool_output("s", "sql", {"q": "x"}, "a,b\n1,2\n")
    router = router_for(rt._store)
    before = router.scratch().get("s", sid, touch=False).last_access
    time.sleep(0.01)
    assert rt.scratch("s", sid)["summary"].startswith("[tool output")
    router.drain()
    assert router.scratch().get("s", sid, touch=False).last_access > before


def test_rrf_adds_reciprocal_ranks():
    a = [{"kind": "fact", "id": x, "via": ["graph"]} for x in ("f1", "f2", "f3")]
    b = [{"kind": "fact", "id": x, "via": ["index"]} for x in ("f3", "f4")]
    fused = rrf([a, b])
    # f3 is 3rd and 1st: 1/63 + 1/61 beats f1's 1/61 alone.
    assert [i["id"] for i in fused] == ["f3", "f1", "f2", "f4"]
    assert fused[0]["via"] == ["graph", "index"]
    assert fused[0]["score"] == pytest.approx(1 / 63 + 1 / 61)
    assert [i["id"] for i in rrf([a, b], limit=2)] == ["f3", "f1"]


def test_a_hand_made_plan_is_checked():
    router = Router.__new__(Router)
    with pytest.raises(InvalidArgumentError, match="unknown router op"):
        router.execute({"steps": [{"op": "graph.teleport"}]})
    with pytest.raises(InvalidArgumentError, match="needs query, k"):
        router.execute({"steps": [{"op": "graph.ann"}]})


def test_tool_reference_finds_outputs_older_than_the_window(rt):
    sids = [rt.record_tool_output("s", "sh", {"cmd": f"ls {i}"}, f"file{i}\n") for i in range(3)]
    near = rt.retrieve("that output", access="tool_reference", session_id="s")
    assert [i["id"] for i in near.items] == sids[::-1]           # newest first, via the log
    for i in range(40):
        rt.append("s", "user", f"chatter {i}")                  # the outputs leave the window
    far = rt.retrieve("that output", access="tool_reference", session_id="s")
    assert [i["id"] for i in far.items] == sids[::-1]


def test_cdr_steps_take_the_window_as_coverage(rt):
    router = router_for(rt._store)
    query = "Restic daily snapshots"
    plan = {"steps": [{"op": "graph.cdr", "query": query, "k": 3}], "cache": None,
            "session": None, "namespace": None, "merge": "none", "limit": None}
    plain = {i["id"]: i["score"] for i in router.execute(plan).items}
    covered = dict(plan, steps=[{"op": "graph.cdr", "query": query, "k": 3,
                                 "coverage": [FACTS[1][0]], "novelty": "on"}])
    scored = {i["id"]: i["score"] for i in router.execute(covered).items}
    restic = rt.fact("restic")["fact_id"]
    # A fact the context already covers is worth less (SPEC-024 novelty).
    assert scored.get(restic, 0.0) < plain[restic]


def test_facts_past_their_ttl_are_swept_off_the_request_path(rt, monkeypatch):
    # The sweep runs on the router's pool when due; a fake clock makes the TTL pass.
    router = router_for(rt._store)
    clock = [time.time()]
    monkeypatch.setattr(router.facts(), "_clock", lambda: clock[0])   # the shared CKF
    fid = rt.add_fact("The staging cluster's admin token is tok-7, valid for an hour.",
                      ttl="PT1H")
    query = "what is the staging admin token?"
    assert fid in [i["id"] for i in rt.retrieve(query).items]
    assert rt.fact(fid)["status"] == "ACTIVE"
    clock[0] += 2 * 3600
    router.expire_every = 0.0
    router._next_expiry = 0.0
    rt.retrieve(query)                          # due: starts the sweep, does not wait for it
    router.drain()
    assert router.expiry_error is None
    assert rt.fact(fid)["status"] == "STALE"
    other = rt.retrieve(query)
    assert other.cache_hit is False             # the state hash moved with the sweep


def test_the_sweep_waits_for_its_interval(rt):
    router = router_for(rt._store)
    calls = []
    router._expire = lambda: calls.append(1) or 0
    router.expire_every, router._next_expiry = 3600.0, 0.0
    for _ in range(5):
        router.expire_when_due()
    router.drain()
    assert calls == [1]                          # one sweep, then not before the hour is up


def test_archiving_a_session_drops_its_ring_and_reads_still_work(rt):
    router = router_for(rt._store)
    assert "s" in router.rolling.sessions()
    tail = rt.last("s", 5)
    rt.archive_session("s")
    assert "s" not in router.rolling.sessions(), "an archived session holds no ring"
    assert rt.recent("s", 5) == tail              # rebuilt from the transcript on read
    assert "s" in router.rolling.sessions()
