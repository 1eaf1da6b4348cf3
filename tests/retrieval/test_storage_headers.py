"""Assembly results carry the storage headers (CRP-SPEC-035 §6)."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime

POLICY = dict(embedder="hashing", max_context_tokens=3000)
Q = "what is the etcd quota on production?"


def _used(r) -> set[str]:
    return set(r.headers["CRP-Context-Store-Used"].split(","))


@pytest.fixture
def rt(tmp_path: Path):
    with Runtime(tmp_path / "store") as runtime:
        runtime.create_session("s")
        for i in range(30):
            runtime.append("s", ("user", "assistant")[i % 2], f"turn {i} on deploying service {i}")
        yield runtime


def test_conversation_only_reads_log_and_index(rt, tmp_path):
    r = rt.assemble("s", Q, **POLICY)
    assert _used(r) == {"log", "index"}
    assert r.headers["CRP-Context-Cache-Hit"] == "false"
    assert float(r.headers["CRP-Context-Retrieval-Ms"]) >= 0
    assert not (tmp_path / "store" / "ckf").exists()


def test_knowledge_goes_through_the_cache_and_a_mutation_invalidates(rt, tmp_path):
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(tmp_path / "store" / "ckf", embedder="hashing").close()
    rt.add_fact("The etcd quota on production is 8 GiB.", key="etcd-quota")
    first = rt.assemble("s", Q, **POLICY)
    assert "graph" in _used(first) and first.headers["CRP-Context-Cache-Hit"] == "false"
    second = rt.assemble("s", Q, **POLICY)
    assert "cache" in _used(second) and "graph" not in _used(second)
    assert second.headers["CRP-Context-Cache-Hit"] == "true"
    assert [u.id for u in second.pack if u.kind == "fact"] == \
        [u.id for u in first.pack if u.kind == "fact"]
    rt.add_fact("The etcd quota on staging is 2 GiB.")
    third = rt.assemble("s", Q, **POLICY)
    assert third.headers["CRP-Context-Cache-Hit"] == "false" and "graph" in _used(third)


def test_tool_output_summaries_come_from_the_pointer_store(rt):
    rt.record_tool_output("s", "sql", {"q": "select quota"}, "cluster,quota\nprod,8\n")
    r = rt.assemble("s", "and the query result?", **POLICY)
    assert "pointer" in _used(r)
    assert any(u.kind == "scratch" for u in r.pack)


def test_a_message_without_content_words_is_retrieved_but_not_cached(rt, tmp_path):
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(tmp_path / "store" / "ckf", embedder="hashing").close()
    rt.add_fact("The etcd quota on production is 8 GiB.")
    for _ in range(2):                    # "and?" embeds to the zero vector under hashing
        r = rt.assemble("s", "and?", **POLICY)
        assert r.headers["CRP-Context-Cache-Hit"] == "false"
        assert "graph" in _used(r)
