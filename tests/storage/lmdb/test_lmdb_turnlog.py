"""The turn log: derived fields beside the transcript, topic threads, thread state."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ctxrelay.text.embed import CallableEmbedder, get_embedder
from ctxrelay.errors import InvalidArgumentError, UnknownSessionError, UnknownThreadError
from ctxrelay.storage.lmdb.transcript import TranscriptStore
from ctxrelay.storage.lmdb.turnlog import TurnLog
from ctxrelay.storage.turnlog_derivation import extract_entities
from ctxrelay.text.threads import derive_state
from ctxrelay.types import Turn

from support import ROOT


@pytest.fixture
def stores(tmp_path):
    st = TranscriptStore(tmp_path / "t")
    tl = TurnLog.open(tmp_path / "tl")
    yield st, tl
    tl.close()
    st.close()


def topic_embedder(topics: list[str]) -> CallableEmbedder:
    """One axis per topic word: a turn points at the topics it names (exact, for tests)."""
    def fn(texts):
        m = np.zeros((len(texts), len(topics) + 1), dtype=np.float32)
        for i, t in enumerate(texts):
            low = t.lower()
            for j, topic in enumerate(topics):
                if topic in low:
                    m[i, j] = 1.0
            if not m[i].any():
                m[i, -1] = 1.0
        return m
    return CallableEmbedder(fn, dim=len(topics) + 1, model_id="topics-test",
                            thresholds={"thread_join": 0.5, "topic_same": 0.5, "edge": 0.7})


SPEC_EXAMPLE = [
    ("user", "How do I configure etcd?"),
    ("assistant", "Set --name, --data-dir and --initial-cluster on each etcd member."),
    ("user", "Actually, what's a good backup tool?"),
    ("assistant", "Use etcdctl snapshot save on a schedule and ship snapshots with restic."),
    ("user", "Back to etcd - what about TLS?"),
]


def replay(st, session, turns):
    st.create_session(session)
    for role, text in turns:
        st.append(session, role, text)


def test_spec_example_thread_resumes_with_a_topic_embedder(stores):
    st, tl = stores
    replay(st, "s", SPEC_EXAMPLE)
    tl.sync(st, "s", topic_embedder(["etcd", "backup"]))
    threads = {t.thread_id: t.turn_ids for t in tl.threads("s")}
    assert threads == {"T1": [1, 2, 5], "T2": [3, 4]}
    assert tl.active_thread("s") == "T1"            # RESUMED
    assert tl.derived("s", 4).thread_id == "T2"      # the reply stays with its question


def test_spec_example_with_the_default_embedder(stores):
    # The example with the best embedder installed (minilm with the
    # semantic extra, else hashing): turn 5 rejoins turn 1's thread.
    st, tl = stores
    replay(st, "s", SPEC_EXAMPLE)
    tl.sync(st, "s", get_embedder())
    assert tl.derived("s", 5).thread_id == tl.derived("s", 1).thread_id
    assert tl.derived("s", 3).thread_id != tl.derived("s", 1).thread_id


def test_sync_is_incremental_and_recompute_redoes(stores):
    st, tl = stores
    replay(st, "s", SPEC_EXAMPLE[:3])
    emb = topic_embedder(["etcd", "backup"])
    assert tl.sync(st, "s", emb) == 3
    assert tl.sync(st, "s", emb) == 0
    st.append("s", "assistant", "restic it is")
    assert tl.sync(st, "s", emb) == 1
    other = get_embedder("hashing")
    with pytest.raises(InvalidArgumentError, match="recompute"):
        tl.sync(st, "s", other)
    assert tl.recompute(st, "s", other, progress=False) == 4
    assert tl.derived("s", 1).model_id == other.model_id
    vec = tl.vectors("s", [1])[1]
    assert vec.shape == (other.dim,) and abs(float(np.linalg.norm(vec)) - 1) < 1e-5


def test_transcript_is_untouched(stores):
    st, tl = stores
    replay(st, "s", SPEC_EXAMPLE)
    before = st.export_jsonl("s")
    tl.sync(st, "s", get_embedder("hashing"))
    assert st.export_jsonl("s") == before


def test_unknown_session(stores):
    st, tl = stores
    with pytest.raises(UnknownSessionError):
        tl.sync(st, "nope", get_embedder("hashing"))


def test_thread_state_is_derived_and_settable(stores):
    st, tl = stores
    replay(st, "s", [
        ("user", "We run etcd v3.5 on a 3-node cluster. Our quota is 8 GiB."),
        ("assistant", "Decision: keep auto-compaction at 1h. The TLS approach is not yet decided."),
        ("user", "We must not restart all members at once. Don't use cert-manager."),
        ("assistant", "Understood, rolling restarts only."),
        ("user", "Which CA should sign the peer certs?"),
    ])
    tl.sync(st, "s", topic_embedder([]))            # one topic: one thread
    info = tl.thread("s", "T1", st)
    state = info.state
    assert any("8 GiB" in s for s in state.established)
    assert any(s.startswith("Decision") for s in state.established)
    assert any("restart all members" in s for s in state.user_constraints)
    # What the user states about the setup is established (SPEC-028 §6.1:
    # "Established: user runs v3.5, 3-node cluster"), pointing at its turn.
    at = next(i for i, s in enumerate(state.established) if "We run etcd" in s)
    assert state.sources["established"][at] == [1]
    assert any("cert-manager" in s for s in state.user_constraints)
    assert "Which CA should sign the peer certs?" in state.open_questions   # not answered yet
    assert any("not yet decided" in s for s in state.open_questions)
    assert state.last_active_turn == 5
    summary = state.summary(info.label)
    assert summary.startswith("Active thread: etcd-cluster.") and "\nOpen: " in summary
    tl.set_thread_state("s", "T1", established=["hand-set"], open_questions=[])
    assert tl.thread("s", "T1", st).state.established == ["hand-set"]
    with pytest.raises(UnknownThreadError):
        tl.set_thread_state("s", "T9", established=[])


def test_answered_questions_are_not_open():
    turns = [Turn("s", 1, "user", "How big is the DB?"), Turn("s", 2, "assistant", "2.1 GiB.")]
    assert derive_state("T1", turns).open_questions == []


def test_entities_and_tool_calls(stores):
    st, tl = stores
    st.create_session("s")
    st.append("s", "user", "Is etcd-2.prod.internal the leader? Check `etcdctl endpoint status`.")
    st.append("s", "assistant", "Querying.", metadata={"tool_calls": [{"id": "call_1", "name": "sh"}]})
    tl.sync(st, "s", get_embedder("hashing"))
    ents = tl.derived("s", 1).entities
    assert "etcd-2.prod.internal" in ents and "etcdctl endpoint status" in ents
    assert tl.derived("s", 2).tool_calls == ["call_1"]
    tl.set_references("s", 2, [1, 1])
    assert tl.derived("s", 2).references == [1]


def test_extract_entities_plain_words_are_not_entities():
    assert extract_entities("we should go now and then") == []


def test_example_conversation_threads_are_bounded_and_labelled(stores):
    st, tl = stores
    st.create_session("ops")
    for line in (ROOT / "examples" / "conversations" / "etcd_ops.jsonl").read_text().splitlines():
        t = json.loads(line)
        st.append("ops", t["role"], t["content"], metadata=t.get("metadata"),
                  tool_call_id=t.get("tool_call_id"))
    tl.sync(st, "ops", get_embedder())
    threads = tl.threads("ops")
    covered = sorted(t for th in threads for t in th.turn_ids)
    assert covered == list(range(2, 76))             # every non-system turn, once
    assert 2 <= len(threads) <= 30
    assert len({th.label for th in threads}) == len(threads)
