"""Sessions and namespaces are isolation boundaries; ids and paths cannot escape.

A secret stored in one session (or CKF namespace) is hunted for from another
through every read path: search, context/3, assembly retrieval, scratch
lookups by the real (guessed) id, fact search and lookup by id or key.
Session ids and scratch ids shaped like paths must not create or reach files
outside the store directory.
"""
from __future__ import annotations

import json
import os

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import CtxRelayError, InvalidArgumentError
from ctxrelay.storage.lmdb.transcript import close_all

SECRET = "zebra42secret"
POLICY = dict(embedder="hashing", max_context_tokens=4000, output_reserve=300)


@pytest.fixture
def rt(tmp_path):
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(tmp_path / "store" / "ckf", embedder="hashing", recluster_every=None).close()
    with Runtime(tmp_path / "store") as runtime:
        for name in ("a", "b"):
            runtime.create_session(name)
        runtime.append("a", "user", f"the vault code is {SECRET}, keep it")
        runtime.append("a", "assistant", f"noted: {SECRET}")
        runtime.append("b", "user", "hello from tenant b, what is the vault code?")
        yield runtime
    close_all()


def test_search_context_and_assembly_never_cross_sessions(rt):
    assert rt.search("b", SECRET) == []
    assert rt.search("a", SECRET)                       # the secret is findable where it lives
    found = rt.context("b", f'search("{SECRET}")')
    assert SECRET not in json.dumps(found)
    for message in (f"what is {SECRET}?", "what was the vault code?", "turn 1", "the first one"):
        r = rt.assemble("b", message, **POLICY)
        visible = json.dumps(r.messages)
        assert visible.count(SECRET) == message.count(SECRET)   # only the question itself


def test_turn_reads_name_their_own_session(rt):
    with pytest.raises(CtxRelayError):
        rt.turn("b", 2)                                  # b has one turn; a's turn 2 stays a's
    assert [t.session_id for t in rt.history("b")] == ["b"]


def test_scratch_ids_from_another_session_resolve_to_nothing(rt):
    sid = rt.record_tool_output("a", "sql", {"q": "vault"}, f"code\n{SECRET}\n")
    assert rt.scratch_entries("b") == []
    for call in (lambda: rt.scratch("b", sid), lambda: rt.scratch("b", sid, raw=True),
                 lambda: rt.pin("b", sid)):
        with pytest.raises(CtxRelayError) as info:
            call()
        assert SECRET not in str(info.value)
    r = rt.assemble("b", "summarise the sql result", **POLICY)
    assert SECRET not in json.dumps(r.messages)


def test_facts_stay_in_their_namespace(rt):
    fid = rt.add_fact(f"Tenant A's vault code is {SECRET} for the staging cluster.",
                      namespace="tenant_a", key="vault")
    hits = rt.facts("vault code staging cluster", namespace="tenant_b", k=10)
    assert all(SECRET not in h["content"] for h in hits)
    for key_or_id in (fid, "vault"):
        with pytest.raises(CtxRelayError):
            rt.fact(key_or_id, namespace="tenant_b")
    assert rt.fact("vault", namespace="tenant_a")["fact_id"] == fid


@pytest.mark.parametrize("session_id", ["../escape", "../../../tmp/x", "/etc/passwd",
                                        "a/../../b", "..", "C:\\temp\\x"])
def test_path_shaped_session_ids_stay_inside_the_store(rt, tmp_path, session_id):
    before = set(os.listdir(tmp_path))
    rt.create_session(session_id)
    rt.append(session_id, "user", "content")
    sid = rt.record_tool_output(session_id, "cat", {}, "blob body")
    rt.publish_artifact(session_id, 1, 2, "summary")
    assert rt.scratch(session_id, sid, raw=True) == "blob body"
    assert set(os.listdir(tmp_path)) == before           # nothing beside the store
    store = tmp_path / "store"
    blobs = [p for p in (store / "scratch" / "blobs").rglob("*") if p.is_file()]
    assert blobs and all(p.resolve().is_relative_to(store.resolve()) for p in blobs)
    assert all(len(p.parent.name) == 64 for p in blobs)   # the session's hash, never its id


@pytest.mark.parametrize("scratch_id", ["../../transcript.lmdb/data", "scr_/../../x",
                                        "/etc/passwd", "scr_" + "0" * 32 + "/..", "~root",
                                        "scr_" + "0" * 31 + "\x00"])
def test_path_shaped_scratch_ids_are_refused(rt, scratch_id):
    rt.record_tool_output("a", "ls", {}, "x")
    with pytest.raises(InvalidArgumentError, match="scratch id"):
        rt.scratch("a", scratch_id, raw=True)


@pytest.mark.parametrize("scope_a, scope_b", [("tenant-a", "tenant-b"), ("a", "a\x00"),
                                              ("ab", "a"), ("session:1", "session:1 ")])
def test_hot_cache_scopes_never_share_an_entry(scope_a, scope_b):
    import numpy as np

    from ctxrelay.storage.cache import HotCache
    cache = HotCache(min_similarity=None)
    query = np.random.default_rng(3).normal(size=64)
    key_a = cache.key(query, "etag1", scope_a)
    key_b = cache.key(query, "etag1", scope_b)
    cache.put(key_a, SECRET)
    assert cache.get(key_b) is None                      # the same query, another scope
    assert key_a.digest() != key_b.digest()              # nor in an external store
    # scope and etag are length-prefixed in the digest: moving text across them differs
    assert cache.key(query, "x" + "etag1", "a").digest() != cache.key(query, "etag1", "ax").digest()
    assert cache.get(key_a) == SECRET


LAUNCH = "7741-ALPHA"


def test_a_value_named_in_one_session_reaches_no_other_sessions_pack_on_any_path(tmp_path):
    """A promoted fact belongs to its session: conversation (CDR and the CDGR
    walk), document and hybrid modes, the router and the managed turn of
    another session never offer it; its own session still does."""
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(tmp_path / "store" / "ckf", embedder="hashing", recluster_every=None).close()
    with Runtime(tmp_path / "store") as rt:
        for name in ("a", "b"):
            rt.create_session(name)
        rt.append("b", "user", "we are planning the zebra launch")
        rt.managed_turn("a", f"let's call {LAUNCH} the zebra launch code", **POLICY)
        owned = [f for f in rt.facts("zebra launch code", k=20) if LAUNCH in f["content"]]
        assert owned and all(f["metadata"]["session_id"] == "a" for f in owned)
        rt.add_fact("The zebra launch is planned for the spring release.", source="docs")
        asks = {"conversation": "what is the zebra launch code?",
                "document": "write a guide about the zebra launch code",
                "hybrid": "write a guide about what we discussed and the zebra launch code"}
        for mode, message in asks.items():
            for session, sees in (("b", False), ("a", True)):
                r = rt.assemble(session, message, mode=mode, **POLICY)
                assert (LAUNCH in json.dumps(r.messages)) is sees, (mode, session)
        drill = rt.assemble("b", "go deeper into the zebra launch code details", **POLICY)
        assert LAUNCH not in json.dumps(drill.messages)
        for access in ("facts", "search", "explore", "drill_down"):
            found = rt.retrieve("zebra launch code", session_id="b", access=access)
            assert LAUNCH not in json.dumps([i.get("text") for i in found.items]), access
        turn = rt.managed_turn("b", "remind me of the zebra launch code", **POLICY)
        assert LAUNCH not in json.dumps(turn.messages) and LAUNCH not in turn.reply
