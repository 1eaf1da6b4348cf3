"""Runtime on PostgreSQL + Redis: the public API (through Prolog's store_open/3)
reaches the back end by URL, and gives the packs the embedded store gives."""
from __future__ import annotations

import pytest

from ctxrelay import Runtime
from services import redis_url

CHAT = [("user", "How do I rotate the etcd client certificates?"),
        ("assistant", "Rotate the etcd certificates one member at a time, CA first."),
        ("user", "What is the restic retention for the backups?"),
        ("assistant", "Restic keeps 48 hourly and 30 daily snapshots."),
        ("user", "We must never defragment two etcd members at once."),
        ("assistant", "Agreed: defragment one member, wait for it to rejoin, then the next."),
        ("user", "Back to the etcd certificates: which CA signs them?"),
        ("assistant", "The etcd certificates are signed by the internal CA, valid 90 days.")]
QUESTIONS = ["which CA signs the etcd certificates?", "how many daily restic snapshots?",
             "can we defragment all members together?"]


@pytest.fixture
def urls(pg_schema):
    spec, schema = pg_schema
    return spec, f"{redis_url()}?prefix=rt{schema}"


def test_a_runtime_on_postgres_appends_searches_and_reopens(urls):
    spec, cache = urls
    with Runtime(spec, cache=cache) as rt:
        rt.create_session("ops")
        assert rt.append("ops", "user", "the raft election timeout is 1000 ms", key="m1") == 1
        assert rt.append("ops", "user", "the raft election timeout is 1000 ms", key="m1") == 1
        assert rt.append("ops", "assistant", "noted") == 2
        assert [h.turn_id for h in rt.search("ops", "raft timeout")] == [1]
    with Runtime(spec, cache=cache) as again:            # another open sees every write
        assert [t.content for t in again.history("ops")] == [
            "the raft election timeout is 1000 ms", "noted"]


def _fill(rt: Runtime) -> None:
    rt.create_session("ops")
    for role, text in CHAT:
        rt.append("ops", role, text)
    rt.derive("ops", embedder="hashing")


def test_the_same_content_gives_the_same_packs_and_turns_as_the_embedded_store(urls, tmp_path):
    spec, cache = urls
    policy = {"max_context_tokens": 520, "output_reserve": 64, "min_recent_turns": 2}
    with Runtime(str(tmp_path / "lmdb")) as lmdb, Runtime(spec, cache=cache) as pg:
        for rt in (lmdb, pg):
            _fill(rt)
        assert pg.threads("ops") == lmdb.threads("ops")
        for question in QUESTIONS:
            want = lmdb.assemble("ops", question, **policy)
            have = pg.assemble("ops", question, **policy)
            assert have.messages == want.messages, question
            assert have.pack == want.pack and have.utility == want.utility
        for n, question in enumerate(QUESTIONS):
            want = lmdb.managed_turn("ops", question, key=f"q{n}", **policy)
            have = pg.managed_turn("ops", question, key=f"q{n}", **policy)
            assert (have.messages, have.reply, have.user_turn, have.assistant_turn) == \
                (want.messages, want.reply, want.user_turn, want.assistant_turn)
        again = pg.managed_turn("ops", QUESTIONS[0], key="q0", **policy)    # a retry
        assert again.user_turn == 9 and pg.turn_count("ops") == lmdb.turn_count("ops") == 14


FACTS = [("etcd-quota", "The etcd database quota is 8 GiB on every member."),
         ("restic-retention", "Restic keeps 48 hourly and 30 daily snapshots of the backups."),
         ("ca-validity", "Certificates from the internal CA are valid for 90 days."),
         ("defrag-rule", "Defragment one etcd member at a time, never two at once.")]


def _named(messages: list[dict], names: dict[str, str]) -> list[dict]:
    """Messages with each fact id replaced by its key (ids are drawn per store)."""
    out = []
    for message in messages:
        text = message["content"]
        for fid, key in names.items():
            text = text.replace(fid, key)
        out.append({**message, "content": text})
    return out


def test_tool_outputs_and_facts_are_kept(urls):
    spec, cache = urls
    with Runtime(spec, cache=cache) as rt:
        fid = rt.add_fact("the etcd quota is 8 GiB", key="etcd-quota")
        assert rt.fact("etcd-quota")["fact_id"] == fid
        assert rt.facts("etcd quota", k=1)[0]["fact_id"] == fid
        rt.create_session("ops")
        scratch_id = rt.record_tool_output("ops", "kubectl", {"cmd": "get pods"},
                                           "pod-1 Running\npod-2 Pending\n")
        assert rt.scratch("ops", scratch_id, raw=True) == "pod-1 Running\npod-2 Pending\n"
    with Runtime(spec, cache=cache) as again:
        assert again.fact(fid)["content"] == "the etcd quota is 8 GiB"


def test_facts_give_the_same_packs_as_the_embedded_store(urls, tmp_path):
    spec, cache = urls
    policy = {"max_context_tokens": 700, "output_reserve": 64, "min_recent_turns": 2}
    with Runtime(str(tmp_path / "lmdb")) as lmdb, Runtime(spec, cache=cache) as pg:
        names: dict[str, str] = {}
        for rt in (lmdb, pg):
            _fill(rt)
            for key, text in FACTS:
                names[rt.add_fact(text, key=key)] = key
        assert len(names) == 2 * len(FACTS)
        with_facts = 0
        for question in QUESTIONS + ["what is the etcd quota?"]:
            want = lmdb.assemble("ops", question, **policy)
            have = pg.assemble("ops", question, **policy)
            assert _named(have.messages, names) == _named(want.messages, names), question
            with_facts += any("[knowledge" in m["content"] for m in have.messages)
            assert [names[f["fact_id"]] for f in pg.facts(question, k=3)] == \
                [names[f["fact_id"]] for f in lmdb.facts(question, k=3)]
        assert with_facts >= 2                  # the packs compared hold facts


_WRITER = """
import sys
from ctxrelay import Runtime
from ctxrelay.storage import open_stores
spec, step = sys.argv[1], sys.argv[2]
if step == "add":
    with Runtime(spec) as rt:
        print(rt.add_fact("The etcd database quota is 16 GiB since the resize.", key="etcd-quota"))
else:
    with open_stores(spec) as stores:
        stores.facts.update_fact("etcd-quota", content="The etcd quota went back to 8 GiB.")
"""


def test_a_fact_written_by_another_process_is_in_the_next_assembly(urls):
    """Staleness bound: none.  Every assembly reads the namespace's generation and
    state hash from PostgreSQL (the etag the hot cache is keyed by), and the ANN
    index replays the change feed up to it, so a write committed by another
    process before an assembly starts is in that assembly."""
    import os
    import subprocess
    import sys
    spec, cache = urls
    policy = {"max_context_tokens": 700, "output_reserve": 64, "min_recent_turns": 1}
    question = "what is the etcd database quota?"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def other_process(step: str) -> str:
        return subprocess.run([sys.executable, "-c", _WRITER, spec, step], env=env,
                              check=True, capture_output=True, text=True,
                              timeout=120).stdout.strip()

    def knowledge(rt: Runtime) -> str:
        return "".join(m["content"] for m in rt.assemble("ops", question, **policy).messages
                       if m["content"].startswith("[knowledge"))

    with Runtime(spec, cache=cache) as rt:
        rt.create_session("ops")
        rt.append("ops", "user", "we resized the etcd members last week")
        rt.add_fact("Restic keeps 30 daily snapshots.", key="restic")
        assert "16 GiB" not in knowledge(rt)               # the index and cache are warm
        fid = other_process("add")
        assert fid in knowledge(rt) and "16 GiB" in knowledge(rt)
        other_process("update")
        seen = knowledge(rt)
        assert "8 GiB" in seen and "16 GiB" not in seen and fid in seen


def test_a_store_whose_redis_is_gone_still_assembles_the_same_packs(urls, tmp_path):
    spec, cache = urls
    policy = {"max_context_tokens": 520, "output_reserve": 64, "min_recent_turns": 2}
    with Runtime(str(tmp_path / "lmdb")) as lmdb:
        _fill(lmdb)
        want = [lmdb.assemble("ops", q, **policy).messages for q in QUESTIONS]
    with Runtime(spec, cache=cache) as pg:
        _fill(pg)
    # the same store, its hot tier on a port where nothing listens
    with Runtime(spec, cache="redis://127.0.0.1:1/0") as pg:
        assert [pg.assemble("ops", q, **policy).messages for q in QUESTIONS] == want
