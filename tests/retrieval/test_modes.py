"""Context modes (CRP-SPEC-028 §7.5, §8): conversation, document, hybrid."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime
import janus_swi as janus
from ctxrelay.errors import CtxRelayError

POLICY = dict(max_context_tokens=1500, output_reserve=200, embedder="hashing")
CHAT = ["how do we rotate the TLS certificates on etcd?",
        "Use etcdctl with the new certificates and restart the members one by one.",
        "and what about backups of etcd?",
        "Take snapshots with etcdctl snapshot save every night.",
        "how big can the etcd quota be?",
        "The default quota is 2 GiB; 8 GiB is the recommended maximum."]
FACTS = ["etcd TLS certificates are rotated by replacing the peer and client certificates.",
         "etcd snapshots are taken with etcdctl snapshot save.",
         "The etcd backend quota defaults to 2 GiB.",
         "Kubernetes ingress routes HTTP traffic to services.",
         "Restore etcd from a snapshot with etcdutl snapshot restore."]


def subqueries(task: str, seeds: list[str] | None = None) -> list[str]:
    """ctxrelay_mode:subqueries/3, the one home of the decomposition."""
    return janus.query_once("ctxrelay_mode:subqueries(T, S, Q)",
                            {"T": task, "S": list(seeds or [])})["Q"]


@pytest.fixture
def rt(tmp_path: Path):
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(tmp_path / "store" / "ckf", embedder="hashing").close()
    with Runtime(tmp_path / "store") as runtime:
        runtime.create_session("s")
        for i, text in enumerate(CHAT):
            runtime.append("s", "user" if i % 2 == 0 else "assistant", text)
        for text in FACTS:
            runtime.add_fact(text, source="docs")
        yield runtime


def test_subqueries_split_the_task_and_drop_the_directive():
    qs = subqueries("Draft a report on etcd TLS, snapshots and quotas")
    assert qs[0] == "etcd TLS, snapshots and quotas"
    assert qs[1:] == ["etcd TLS", "snapshots", "quotas"]
    assert subqueries("write a guide about etcd") == ["etcd"]
    numbered = subqueries("Write a runbook covering:\n1. backups\n2. restores\n3. TLS rotation")
    assert {"backups", "restores", "TLS rotation"} <= set(numbered)


def test_subqueries_drop_near_duplicates_and_respect_the_limit():
    qs = subqueries("write a guide on etcd backups", ["etcd backups", "etcd backups!", "quota"])
    assert qs == ["etcd backups", "quota"]
    limit = janus.query_once("ctxrelay_mode:max_subqueries(N)")["N"]
    many = subqueries("write a guide on " + ", ".join(f"topic{i}" for i in range(20)))
    assert len(many) == limit


def test_seeds_are_the_first_sentence_of_each_user_turn():
    assert subqueries("write me a guide about what we discussed",
                      ["second topic here. more", "first question? more text"]) == \
        ["second topic here.", "first question?"]


def test_document_mode_is_detected_and_retrieves_per_subquery(rt):
    r = rt.assemble("s", "Draft a report on etcd TLS, snapshots and quotas", **POLICY)
    assert r.headers["CRP-Context-Mode"] == "document"
    assert r.headers["CRP-Context-Tier-Blend"] == "80/15/5"
    assert "graph" in r.headers["CRP-Context-Store-Used"].split(",")
    kn = r.status["knowledge"]
    assert kn["novelty"] == "on" and len(kn["subqueries"]) == 4
    covered = [c["facts"] for c in kn["coverage"]]
    flat = [f for ids in covered for f in ids]
    assert len(flat) == len(set(flat))           # a fact is offered once
    packed = {u.id for u in r.pack if u.kind == "fact"}
    assert packed and packed <= {f"f{f}" for f in flat}


def test_hybrid_mode_seeds_subqueries_from_the_conversation_and_logs_the_document(rt):
    r = rt.managed_turn("s", "write me a guide about what we just discussed", **POLICY)
    assert r.headers["CRP-Context-Mode"] == "hybrid"
    subs = r.status["knowledge"]["subqueries"]
    assert "how big can the etcd quota be?" in subs
    assert not any("discussed" in q for q in subs)
    reply = rt.turn("s", r.assistant_turn)
    assert reply.role == "assistant" and reply.metadata.get("mode") == "hybrid"
    # conversation context is in the request too
    assert any(m["content"] == CHAT[-1] for m in r.messages)


def test_conversation_mode_by_default_and_on_request(rt):
    r = rt.assemble("s", "how do snapshots work?", **POLICY)
    assert r.headers["CRP-Context-Mode"] == "conversation"
    forced = rt.assemble("s", "how do snapshots work?", mode="document", **POLICY)
    assert forced.headers["CRP-Context-Mode"] == "document"
    plain = rt.assemble("s", "write me a guide about what we just discussed", mode="conversation",
                        **POLICY)
    assert plain.headers["CRP-Context-Mode"] == "conversation"
    m = rt.managed_turn("s", "and the quota?", **POLICY)
    assert rt.turn("s", m.assistant_turn).metadata.get("mode") is None


def test_unknown_mode_is_refused(rt):
    with pytest.raises(CtxRelayError, match="mode"):
        rt.assemble("s", "x", mode="essay", **POLICY)
