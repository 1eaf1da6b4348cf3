"""CRP-SPEC-028's own example through Runtime.managed_turn (issue 18), with the
default embedder and with hashing: threads, intents, labels, resumption and the
resumed thread's state in the pack; the assembly places each message where the
turn log then derives it."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime
from ctxrelay.text.embed import default_name

# The issue's words, then the spec's own (§3.3).
ISSUE = ["How do I configure etcd for a three node cluster?",
         "Actually, what's a good backup strategy for our Postgres database?",
         "Back to etcd - what about TLS between the peers?",
         "What do you mean by peer certificates? Explain again.",
         "Go on."]
SPEC = ["How do I configure etcd?",
        "Actually, what's a good backup?",
        "Back to etcd - what about TLS?",
        "What do you mean by peer certificates? Explain again.",
        "Go on."]
EMBEDDERS = sorted({"hashing", default_name()})


def run(rt: Runtime, messages: list[str], embedder: str) -> list:
    rt.create_session("s")
    return [rt.managed_turn("s", m, embedder=embedder) for m in messages]


@pytest.mark.parametrize("embedder", EMBEDDERS)
@pytest.mark.parametrize("words", [ISSUE, SPEC], ids=["issue", "spec"])
def test_the_spec_example(tmp_path: Path, embedder: str, words: list[str]):
    with Runtime(tmp_path / "store") as rt:
        results = run(rt, words, embedder)
        threads = [r.status["thread"]["id"] for r in results]
        etcd, backup = threads[0], threads[1]
        assert etcd != backup
        assert threads == [etcd, backup, etcd, etcd, etcd]
        assert [r.status["thread"]["action"] for r in results] == \
            ["new", "new", "resume", "continue", "continue"]
        assert results[2].status["thread"]["resumed"] is True
        intents = [r.headers["CRP-Context-Turn-Intent"] for r in results]
        assert intents[:2] == ["EXPLORE", "EXPLORE"]
        assert intents[2] in ("CONTINUE", "DRILL_DOWN")
        assert intents[3:] == ["CLARIFY", "CONTINUE"]
        labels = [r.headers["CRP-Context-Active-Thread"] for r in results]
        assert labels[0] == "etcd-config" and labels[2:] == ["etcd-config"] * 3
        assert labels[1] == ("postgres-backup" if words is ISSUE else "backup")
        # The assembly placed each message where the turn log derives it.
        for r in results:
            assert rt.derived("s", r.user_turn)["thread_id"] == r.status["thread"]["id"]
            assert rt.derived("s", r.assistant_turn)["thread_id"] == r.status["thread"]["id"]
        # The resumed turn's pack holds the etcd turns and the etcd thread's state.
        resumed = results[2]
        packed = {t for u in resumed.pack for t in u.turn_ids}
        assert {1, 2} <= packed
        summary = [m for m in resumed.messages if m.get("name") == "thread_state"]
        assert len(summary) == 1 and summary[0]["content"].startswith("Active thread: etcd-config.")
        assert [t["label"] for t in rt.threads("s")] == \
            ["etcd-config", "postgres-backup" if words is ISSUE else "backup"]


def test_a_resumed_thread_brings_back_its_dormant_turns_and_state(tmp_path: Path):
    etcd = ["How do I configure etcd for a three node cluster? We run v3.5.",
            "We must not restart all members at once.",
            "Which port do the peers use?"]
    backup = [f"For our Postgres backups, how should we schedule pgBackRest job number {i}, "
              "which copies the base backup of the orders database to object storage, archives "
              "the write-ahead log continuously and keeps fourteen days of retention before the "
              "nightly reporting batch starts at two in the morning?" for i in range(1, 9)]
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("s")
        backup[0] = "Different question: " + backup[0]
        placed = [rt.managed_turn("s", m, embedder="hashing").status["thread"]["id"]
                  for m in etcd + backup]
        assert len(set(placed[:3])) == 1 and len(set(placed[3:])) == 1 and placed[0] != placed[3]
        # A small window: the etcd turns are no longer recent, only the thread brings them back.
        r = rt.managed_turn("s", "Back to etcd - what about TLS between the peers?",
                            embedder="hashing", max_context_tokens=900, output_reserve=64,
                            min_recent_turns=2, retrieval=False)
        assert r.status["thread"]["resumed"] is True
        kinds = {u.kind for u in r.pack}
        assert "thread" in kinds and "thread_summary" in kinds
        dormant = {t for u in r.pack if u.kind == "thread" for t in u.turn_ids}
        assert dormant and dormant <= {1, 2, 3, 4, 5, 6}
        assert r.status["thread"]["id"] == rt.derived("s", 1)["thread_id"]
        summary = next(m["content"] for m in r.messages if m.get("name") == "thread_state")
        assert summary.startswith("Active thread: etcd-config.")
        assert "We run v3.5" in summary
        assert "User constraints: We must not restart all members at once" in summary
        state = rt.thread("s", r.status["thread"]["id"])["state"]
        assert state["sources"]["user_constraints"] == [[3]]
        # Callers can still edit it: the edited field wins, the others stay derived.
        rt.set_thread_state("s", r.status["thread"]["id"], open_questions=["Which CA signs?"])
        state = rt.thread("s", r.status["thread"]["id"])["state"]
        assert state["open_questions"] == ["Which CA signs?"]
        assert state["user_constraints"] == ["We must not restart all members at once."]


ETCD_THEN_BACKUP = [
    ("user", "How do I configure etcd for a three node cluster?"),
    ("assistant", "Give each member a unique --name and list the peer URLs in --initial-cluster."),
    ("user", "How many members can fail before we lose quorum?"),
    ("assistant", "With three members the cluster tolerates one failure."),
    ("user", "Actually, what's a good backup strategy for our Postgres database?"),
    ("assistant", "Nightly base backups with pg_basebackup and continuous WAL archiving."),
]


@pytest.mark.parametrize("cue", ["Back to etcd - what about TLS between the peers?",
                                 "Returning to etcd: how do I add a fourth member?",
                                 "About etcd again, which port do the peers use?",
                                 "As for etcd, should the peers use TLS?",
                                 "One more thing about etcd: how do I take a snapshot?"])
def test_return_cues_resolve_to_the_thread_by_its_words(tmp_path: Path, cue: str):
    """Issue 18 §1: an explicit return names the topic; the thread that used its words
    is resumed (same id), whatever the embedder says."""
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("s")
        for role, text in ETCD_THEN_BACKUP:
            rt.append("s", role, text)
        r = rt.managed_turn("s", cue, embedder="hashing")
        first = rt.derived("s", 1)["thread_id"]
        assert rt.derived("s", 3)["thread_id"] == first          # the follow-up stayed
        assert rt.derived("s", 5)["thread_id"] != first          # the backup digression did not
        assert r.status["thread"]["id"] == first and r.status["thread"]["resumed"] is True


def test_state_and_labels_are_deterministic_and_stable(tmp_path: Path):
    """Issue 18 §2-3: the same turns give the same threads, labels and state; a label
    does not change as its thread grows."""
    def replay(root: Path) -> tuple[list[dict], list[str]]:
        with Runtime(root) as rt:
            rt.create_session("s")
            labels = []
            for role, text in ETCD_THEN_BACKUP + [
                    ("user", "Back to etcd - we must not restart all members at once."),
                    ("assistant", "Then roll the restart: one member at a time, port 2380 stays up.")]:
                rt.append("s", role, text)
                rt.derive("s", embedder="hashing")
                labels.append(rt.threads("s")[0]["label"])
            return rt.threads("s"), labels
    first, labels = replay(tmp_path / "a")
    again, _ = replay(tmp_path / "b")
    assert first == again
    assert set(labels) == {"etcd-config"}
    etcd = first[0]["state"]
    assert etcd["user_constraints"] == ["Back to etcd - we must not restart all members at once."]
    assert etcd["sources"]["user_constraints"] == [[7]]


@pytest.mark.parametrize("embedder", EMBEDDERS)
def test_the_intent_reads_the_thread_the_conversation_is_in(tmp_path: Path, embedder: str):
    """§5.2 compares the message with the active thread: a question the rules move
    to an earlier thread without a cue changes the topic from the current one
    (EXPLORE); a question in the current thread's words continues it."""
    with Runtime(tmp_path / "store") as rt:
        run(rt, ["How do I configure etcd for a three node cluster?",
                 "Actually, what's a good backup strategy for our Postgres database?",
                 "How long should we keep the WAL archive?"], embedder)
        moved = rt.assemble("s", "How many etcd members can fail before the cluster loses "
                                 "quorum?", embedder=embedder)
        assert moved.status["thread"]["action"] == "join"
        assert moved.status["thread"]["label"] == "etcd-config"
        assert moved.headers["CRP-Context-Turn-Intent"] == "EXPLORE"
        stays = rt.assemble("s", "Should the WAL archive be compressed?", embedder=embedder)
        assert stays.status["thread"]["action"] == "continue"
        assert stays.headers["CRP-Context-Turn-Intent"] == "CONTINUE"


def test_the_first_message_of_a_session_starts_its_first_thread(tmp_path: Path):
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("s")
        r = rt.assemble("s", "How do I configure etcd for a three node cluster?",
                        embedder="hashing")
        thread = r.status["thread"]
        assert (thread["id"], thread["label"], thread["action"], thread["rule"]) == \
            ("T1", "etcd-config", "new", "first")
        assert r.headers["CRP-Context-Turn-Intent"] == "EXPLORE"
