"""The numbers the thread rules decide on (ctxrelay.text.threads)."""
from __future__ import annotations

import numpy as np
import pytest

from ctxrelay.text import threads as th
from ctxrelay.text.threads import (ThreadBook, ThreadEntry, ThreadState, add_terms,
                                        content_words, label_words, make_label, with_override)
from ctxrelay.types import Turn


@pytest.mark.parametrize("text, label", [
    ("How do I configure etcd for a three node cluster?", "etcd-config"),
    ("How do I configure etcd?", "etcd-config"),
    ("Actually, what's a good backup strategy for our Postgres database?", "postgres-backup"),
    ("Actually, what's a good backup?", "backup"),
    ("Unrelated, but which laptop should I buy for writing?", "laptop-writing"),
    ("Thanks!", ""),
    ("hi, our etcd quota is 8 GiB", "etcd-quota"),        # a greeting names no topic
])
def test_labels_name_the_topic(text, label):
    assert "-".join(label_words(text)) == label


@pytest.mark.parametrize("greeting", ["hi", "Hello!", "Hey there,", "hiya -", "Cheers."])
def test_a_greeting_is_no_part_of_a_label(greeting):
    for text in ("How do I rotate the nginx certificates?", "our etcd quota is 8 GiB"):
        assert label_words(f"{greeting} {text}") == label_words(text)


def test_labels_are_unique_in_a_session():
    taken = {"etcd-config", "etcd-config-2"}
    assert make_label("How do I configure etcd?", taken.__contains__) == "etcd-config-3"
    assert make_label("ok", taken.__contains__) == "topic"


def test_content_words_drop_generic_words_and_numbers():
    assert content_words("What's a good way to run etcd v3.5 on 3 nodes? Thanks!") == \
        ["run", "etcd", "v3.5", "nodes"]
    assert content_words("slow-roasted lamb") == ["slow-roasted", "slow", "roasted", "lamb"]


def _vec(*xs):
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def _entry(tid, text, vec):
    return ThreadEntry({"thread_id": tid, "label": tid, "turn_ids": [1], "terms": add_terms({}, text),
                        "turn_count": 1}, [vec])


def test_features_give_similarity_overlap_and_the_shared_words():
    etcd = _entry("T1", "configure etcd peers with TLS certificates", _vec(1, 0, 0))
    backup = _entry("T2", "postgres backups with pgbackrest and WAL archiving", _vec(0, 1, 0))
    book = ThreadBook([backup, etcd], "T2", {"thread_join": 0.5, "topic_same": 0.3})
    feats = {f["thread"]: f for f in book.features("Back to etcd: rotate the certificate?",
                                                    _vec(1, 1, 0))}
    assert feats["T2"]["rank"] == 0 and feats["T1"]["rank"] == 1
    assert feats["T1"]["sim"] == pytest.approx(0.7071, abs=1e-3)
    assert feats["T1"]["shared"] == ["etcd", "certificate"]     # stems meet: certificates
    assert feats["T2"]["shared"] == [] and feats["T2"]["overlap"] == 0
    assert 0 < feats["T1"]["overlap"] < 1


def test_bridge_is_the_similarity_to_the_latest_exchange_only():
    # A thread whose older turn matches the message but whose latest exchange
    # (its last user turn and the answer after it) does not: sim is high, the
    # bridge low.
    rec = {"thread_id": "T1", "label": "T1", "turn_ids": [1, 2, 3, 4], "user_turns": [1, 3],
           "recent_turns": [1, 2, 3, 4], "terms": add_terms({}, "japan trip"), "turn_count": 4}
    entry = ThreadEntry(rec, [_vec(1, 0, 0), _vec(1, 0, 0), _vec(0, 1, 0), _vec(0, 0, 1)])
    book = ThreadBook([entry], "T1", {"thread_join": 0.5, "topic_same": 0.3})
    (feat,) = book.features("How do we get mobile data there?", _vec(1, 0, 0))
    assert feat["sim"] == pytest.approx(1.0) and feat["bridge"] == pytest.approx(0.0, abs=1e-6)
    (feat,) = book.features("How do we get mobile data there?", _vec(0, 0, 1))
    assert feat["bridge"] == pytest.approx(1.0)


def test_a_thread_keeps_its_follow_ups_bridges():
    book = ThreadBook([], None, {"thread_join": 0.5, "topic_same": 0.3})
    book.add(ThreadEntry({"thread_id": "T1", "label": "T1", "turn_ids": [], "user_turns": [],
                          "recent_turns": [], "terms": {}, "turn_count": 0}))
    script = [("user", _vec(1, 0, 0)), ("assistant", _vec(1, 0, 0)),
              ("user", _vec(1, 1, 0)), ("assistant", _vec(0, 1, 0)), ("user", _vec(0, 0, 1))]
    for i, (role, vec) in enumerate(script, 1):
        book.record_turn("T1", Turn("s", i, role, "words"), vec)
    # the first user turn has nothing before it; the second met (1,0,0) at 0.707,
    # the third met the exchange of the second, (1,1,0) and (0,1,0), at 0
    assert book.entries["T1"].record["bridges"] == pytest.approx([0.7071, 0.0], abs=1e-3)
    (feat,) = book.features("anything", _vec(0, 1, 0))
    assert feat["bridge_mean"] == pytest.approx(0.3536, abs=1e-3)


def test_rarer_shared_words_weigh_more():
    a = _entry("T1", "etcd cluster", _vec(1, 0))
    b = _entry("T2", "postgres cluster", _vec(0, 1))
    book = ThreadBook([a, b], "T1", {"thread_join": 0.5, "topic_same": 0.3})
    feats = {f["thread"]: f for f in book.features("etcd cluster", _vec(1, 1))}
    # Both words are T1's, one is T2's too: "cluster" tells the threads apart
    # less than "etcd", so T2 gets less than half of T1's share.
    assert 0 < 2 * feats["T2"]["overlap"] < feats["T1"]["overlap"]


def test_placement_goes_through_the_rules():
    etcd = _entry("T1", "configure etcd peers", _vec(1, 0, 0))
    backup = _entry("T2", "postgres backups", _vec(0, 1, 0))
    book = ThreadBook([backup, etcd], "T2", {"thread_join": 0.5, "topic_same": 0.3})
    placed = book.place("Back to etcd - what about TLS?", _vec(0, 0, 1))
    assert (placed.action, placed.thread_id, placed.rule) == ("resume", "T1", "return_cue")
    assert placed.resumed and placed.candidates == 2


def test_profiles_are_bounded_and_keep_the_most_used(monkeypatch):
    monkeypatch.setattr(th, "PROFILE_TERMS", 3)
    p = add_terms({}, "etcd etcd-peer")
    p = add_terms(p, "etcd cluster quorum raft")
    assert len(p) == 3 and p["etcd"] == 2


def test_recency_order_is_bounded(monkeypatch):
    monkeypatch.setattr(th, "RECENT_THREADS", 2)
    book = ThreadBook([], None, {"thread_join": 0.5, "topic_same": 0.3})
    for tid in ("T1", "T2", "T3"):
        book.add(ThreadEntry({"thread_id": tid}))
    book.touch("T2")
    assert book.order == ["T2", "T3"]


def test_overrides_replace_only_the_fields_given():
    derived = ThreadState("T1", established=["a"], open_questions=["q?"],
                          sources={"established": [[1]], "open_questions": [[2]],
                                   "user_constraints": []})
    edited = with_override(derived, {"open_questions": ["mine"]})
    assert edited.established == ["a"] and edited.sources["established"] == [[1]]
    assert edited.open_questions == ["mine"] and edited.sources["open_questions"] == [[]]
    copy = with_override(derived, None)
    copy.established.append("x")
    assert derived.established == ["a"]


def test_state_and_summary_come_from_the_rules():
    turns = [Turn("s", 1, "user", "We run etcd v3.5. Which CA signs the peer certs?"),
             Turn("s", 2, "assistant", "Use the internal CA."),
             Turn("s", 3, "user", "We must not restart all members at once.")]
    state = th.derive_state("T1", turns)
    # The user's setup, and an answer that names something (a concrete value).
    assert state.established == ["We run etcd v3.5.", "Use the internal CA."]
    assert state.sources["established"] == [[1], [2]]
    assert state.open_questions == []                       # answered by turn 2
    assert state.user_constraints == ["We must not restart all members at once."]
    assert state.summary("etcd-config") == (
        "Active thread: etcd-config.\nEstablished: We run etcd v3.5; Use the internal CA.\n"
        "User constraints: We must not restart all members at once.")
