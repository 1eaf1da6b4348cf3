"""The turn log and topic threads through the public API (Python and Prolog)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import CtxRelayError, UnknownSessionError, UnknownThreadError

from conftest import run_swipl

CHAT = [("user", "How do I rotate the etcd TLS certificates? We run etcd 3.5."),
        ("assistant", "Replace the peer and client certificates, then restart members one by one."),
        ("user", "Do we need downtime for the certificate rotation?"),
        ("assistant", "No, a rolling restart keeps quorum."),
        ("user", "Separate topic: which Grafana dashboard shows the ingress latency?"),
        ("assistant", "The ingress-nginx dashboard, panel p99 latency.")]


@pytest.fixture
def rt(tmp_path: Path):
    with Runtime(tmp_path / "store") as runtime:
        runtime.create_session("s")
        for role, text in CHAT:
            runtime.append("s", role, text)
        yield runtime


def test_derive_then_threads_and_their_state(rt):
    out = rt.derive("s", embedder="hashing")
    assert out["derived"] == len(CHAT) and out["embedder"].startswith("hashing")
    assert rt.derive("s", embedder="hashing")["derived"] == 0        # already up to date
    d = rt.derived("s", 1)
    assert d["turn_id"] == 1 and d["thread_id"] and d["model_id"].startswith("hashing")
    assert rt.derived("s", 99) is None
    threads = rt.threads("s")
    assert threads and all(t["thread_id"].startswith("T") for t in threads)
    assert set(threads[0]) == {"thread_id", "label", "turn_ids", "turn_count", "recent_turns",
                               "user_turns", "last_active_turn", "state"}   # as documented
    first = rt.thread("s", d["thread_id"])
    assert 1 in first["turn_ids"]
    assert any("we run etcd" in c.lower() for c in first["state"]["established"])


def test_derived_of_an_unknown_session_is_an_error(rt):
    # It returned None, as for a turn not derived yet; threads() of the same id raises.
    from ctxrelay.errors import UnknownSessionError
    rt.derive("s", embedder="hashing")
    for call in (lambda: rt.derived("nope", 1), lambda: rt.threads("nope")):
        with pytest.raises(UnknownSessionError, match="nope"):
            call()
    assert rt.derived("s", 99) is None                  # a turn not derived: None, as before


def test_set_thread_state_overrides_the_derived_one(rt):
    rt.derive("s", embedder="hashing")
    tid = rt.derived("s", 1)["thread_id"]
    rt.set_thread_state("s", tid, established=["certificates rotate without downtime"],
                        open_questions=["which CA signs the peer certs?"])
    state = rt.thread("s", tid)["state"]
    assert state["established"] == ["certificates rotate without downtime"]
    assert state["open_questions"] == ["which CA signs the peer certs?"]
    with pytest.raises(UnknownThreadError, match="no thread 'T999' in session 's'"):
        rt.set_thread_state("s", "T999", established=["x"])
    with pytest.raises(UnknownThreadError):
        rt.thread("s", "T999")
    with pytest.raises(UnknownSessionError):
        rt.thread("nobody", tid)


def test_recompute_with_another_embedder(rt):
    from ctxrelay.text.embed import HashingEmbedder, register
    register("hashing-512", lambda: HashingEmbedder(dim=512))
    rt.derive("s", embedder="hashing")
    with pytest.raises(CtxRelayError, match="recompute"):
        rt.derive("s", embedder="hashing-512")
    out = rt.derive("s", embedder="hashing-512", recompute=True)
    assert out["derived"] == len(CHAT) and out["embedder"] == "hashing-v1-512"


def test_managed_turn_records_resolved_references(rt):
    r = rt.managed_turn("s", "about your last answer: is that true for etcd 3.4 too?",
                        embedder="hashing")
    assert r.status["references"] >= 1
    refs = rt.derived("s", r.user_turn)["references"]
    assert refs and all(1 <= t < r.user_turn for t in refs)


def test_unknown_session_is_an_error(rt):
    with pytest.raises(CtxRelayError):
        rt.threads("nope")


def test_prolog_predicates(tmp_path):
    goal = (
        "ctxrelay:store_open('%s', St), ctxrelay:session_create(St, s, []), "
        "ctxrelay:turn_append(St, s, message(user, \"we run etcd 3.5; how do I rotate certs?\"), _), "
        "ctxrelay:turnlog_derive(St, s, [embedder(hashing), result(R)]), "
        "get_dict(derived, R, 1), ctxrelay:topic_threads(St, s, [T|_]), "
        "get_dict(thread_id, T, Id), "
        "ctxrelay:thread_state_set(St, s, Id, _{established:[\"done\"]}), "
        "ctxrelay:topic_thread(St, s, Id, T2), get_dict(state, T2, S2), "
        "get_dict(established, S2, [\"done\"]), "
        "catch(ctxrelay:thread_state_set(St, s, Id, notadict), error(type_error(dict, _), _), true), "
        "catch(ctxrelay:topic_thread(St, s, 'T999', _), error(E1, _), true), "
        "E1 == existence_error(thread, s-'T999'), "
        "catch(ctxrelay:thread_state_set(St, s, 'T999', _{}), error(E2, _), true), "
        "E2 == existence_error(thread, s-'T999'), "
        "catch(ctxrelay:topic_thread(St, nobody, Id, _), error(E3, _), true), "
        "E3 == existence_error(session, nobody), "
        "writeln(ok)" % (tmp_path / "store"))
    proc = run_swipl(["-g", "use_module(library(ctxrelay))", "-g", goal, "-t", "halt"])
    assert proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def test_thread_assignment_considers_the_latest_threads_only(tmp_path, monkeypatch):
    import ctxrelay.text.threads as threads
    monkeypatch.setattr(threads, "RECENT_THREADS", 3)
    topics = ["Which zebra migration patterns cross the savanna parks?",
              "Unrelated: how do quantum error correction codes protect qubits?",
              "Different question: what hydration levels suit a sourdough starter?",
              "Another topic: which siege engines broke medieval castle walls?",
              "By the way, what water temperatures bleach coral reefs?"]
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("s")
        for text in topics:
            rt.append("s", "user", text)
        rt.append("s", "user", topics[-1])                         # the active topic rejoins
        rt.derive("s", embedder="hashing")
        rt.append("s", "user", topics[0])                          # five threads back: new thread
        rt.derive("s", embedder="hashing")
        ids = [rt.derived("s", t)["thread_id"] for t in range(1, 8)]
        assert len(set(ids[:5])) == 5
        assert ids[5] == ids[4]
        assert ids[6] not in ids[:6]


def test_thread_state_follows_new_turns_and_callers_cannot_alter_it(rt):
    rt.derive("s", embedder="hashing")
    tid = rt.derived("s", 1)["thread_id"]
    stores = rt._store                                  # the Runtime's Stores
    store, log = stores.transcript, stores.turnlog
    first = log.thread("s", tid, store)
    first.state.user_constraints.append("a caller's own note")
    again = log.thread("s", tid, store)
    assert "a caller's own note" not in again.state.user_constraints
    # A new turn of the same thread derives a new state (the members changed).
    rt.append("s", "user", "For the etcd certificate rotation we must use our internal CA.")
    rt.derive("s", embedder="hashing")
    joined = rt.derived("s", len(CHAT) + 1)["thread_id"]
    later = log.thread("s", joined, store)
    assert any("internal ca" in c.lower() for c in later.state.user_constraints)


def test_a_sessions_embedder_is_its_own(rt):
    """After re-deriving with another embedder (the README's example), turns whose
    policy names no embedder use the session's: nothing asks for recompute."""
    from ctxrelay.text.embed import HashingEmbedder, register
    register("hashing-256", lambda: HashingEmbedder(dim=256))
    rt.derive("s", embedder="hashing-256", recompute=True)
    r = rt.managed_turn("s", "and what about the etcd certificates?")     # no embedder named
    assert r.status["embedder"] == "hashing-v1-256"
    again = rt.managed_turn("s", "thanks, go on")
    assert again.status["embedder"] == "hashing-v1-256"
    # A policy that names another embedder is a mismatch the caller must resolve.
    with pytest.raises(CtxRelayError, match="re-derive"):
        rt.managed_turn("s", "x", embedder="hashing")
