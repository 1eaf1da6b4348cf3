"""Cold recall: lexical + dense + the conversation's structure (ctxrelay.retrieval.recall)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from ctxrelay.retrieval.recall import (RecallIndex, _aligned, analyze, date_closeness,
                                       date_mentions, recall, score_turns, strip_names)
from ctxrelay.storage import Stores, open_stores


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    from ctxrelay.storage import close_all
    close_all()


def _store(tmp_path: Path, turns: list[tuple[str, str, str, str]]) -> Stores:
    """turns: (role, name, timestamp, content)."""
    st = open_stores(tmp_path / "store")
    st.transcript.create_session("s")
    for role, name, ts, content in turns:
        st.transcript.append("s", role, content, name=name, timestamp=ts)
    return st


def index_for(st: Stores):
    return RecallIndex.of(st)


def _ts(day: int, minute: int) -> str:
    return (dt.datetime(2023, 5, day, 10, tzinfo=dt.timezone.utc)
            + dt.timedelta(minutes=minute)).isoformat()


def test_analyze_stems_and_drops_stopwords():
    assert analyze("The runners kept running races") == ["runner", "kept", "run", "race"]


def test_strip_names_removes_names_and_possessives():
    assert strip_names("What is Caroline's job and did Mel agree?", ["Caroline", "Mel"]) == \
        "What is job and did agree?"
    assert strip_names("nothing here", []) == "nothing here"


def test_date_mentions_prefer_the_most_specific_form():
    [m] = date_mentions("What happened on 8 May, 2023?")
    assert m.start == m.end == dt.date(2023, 5, 8)
    [m] = date_mentions("anything in June 2023?")
    assert (m.start, m.end) == (dt.date(2023, 6, 1), dt.date(2023, 6, 30))
    [m] = date_mentions("what did she do in July")
    assert m.month == 7 and m.start is None
    [m] = date_mentions("on 31 February 2023")          # no such day: the month it names
    assert (m.start, m.end) == (dt.date(2023, 2, 1), dt.date(2023, 2, 28))
    assert date_closeness(date_mentions("8 May 2023"), dt.date(2023, 5, 8)) == 1.0
    assert 0 < date_closeness(date_mentions("8 May 2023"), dt.date(2023, 5, 15)) < 0.5
    assert date_closeness(date_mentions("in July"), dt.date(2021, 7, 3)) == 1.0
    assert date_closeness(date_mentions("in July"), None) == 0.0


def _conversation():
    return [
        ("user", "Ann", _ts(1, 0), "I adopted a puppy named Rex last weekend."),
        ("assistant", "Bob", _ts(1, 1), "Congrats! What breed is he?"),
        ("user", "Ann", _ts(1, 2), "A beagle, very energetic."),
        ("assistant", "Bob", _ts(1, 3), "I started painting landscapes again."),
        ("user", "Ann", _ts(9, 0), "Work has been busy with the quarterly audit."),
        ("assistant", "Bob", _ts(9, 1), "I ran a charity race for the shelter on Saturday."),
        ("user", "Ann", _ts(9, 2), "That is great, how far was it?"),
        ("assistant", "Bob", _ts(9, 3), "Ten kilometres, finished in 55 minutes."),
    ]


def test_neighbours_of_a_match_are_lifted(tmp_path):
    st = _store(tmp_path, _conversation())
    ranked, _ = recall(st, "s", "What breed is the puppy?", upto=8)
    order = [r.turn_id for r in ranked]
    # turn 2 matches "breed", turn 1 "puppy"; the answer (turn 3) has neither word
    # but sits next to them and outranks every turn of the other sitting.
    assert order.index(3) < min(order.index(t) for t in (5, 6, 7, 8))
    assert ranked[0].score == 1.0 and all(0 <= r.score <= 1.0 for r in ranked)


def test_a_named_speaker_and_a_named_date_pull_their_turns(tmp_path):
    st = _store(tmp_path, _conversation())
    st.transcript.append("s", "user", "I love hiking in the hills.", name="Ann", timestamp=_ts(9, 5))
    st.transcript.append("s", "assistant", "Hiking is fun, I go every month.", name="Bob", timestamp=_ts(9, 6))
    ranked, _ = recall(st, "s", "How often does Bob go hiking?", upto=10)
    assert ranked[0].turn_id == 10
    ranked, _ = recall(st, "s", "How often does Ann go hiking?", upto=10)
    assert ranked[0].turn_id == 9
    ranked, _ = recall(st, "s", "what race happened on 9 May 2023?", upto=8)
    assert ranked[0].turn_id == 6
    # "race" (9 May) and "puppy" (1 May) match alike; the named day decides
    ranked, _ = recall(st, "s", "on 1 May 2023 was it the race or the puppy?", upto=8)
    assert ranked[0].turn_id == 1
    ranked, _ = recall(st, "s", "on 9 May 2023 was it the race or the puppy?", upto=8)
    assert ranked[0].turn_id == 6


def test_sittings_follow_time_gaps_or_the_session_marker(tmp_path):
    st = _store(tmp_path, _conversation())
    idx = index_for(st).session(st.transcript, "s", 8)
    assert idx.sittings == [0, 0, 0, 0, 1, 1, 1, 1]
    st.transcript.append("s", "user", "new day", name="Ann", timestamp=_ts(9, 4),
                         metadata={"session": 7})
    idx = index_for(st).session(st.transcript, "s", 9)
    assert idx.sittings[-1] == 2 and idx.upto == 9


def test_dense_scores_join_the_lexical_ones(tmp_path):
    st = _store(tmp_path, _conversation())
    idx = index_for(st).session(st.transcript, "s", 8)
    lexical = score_turns(idx, "xylophone", None)
    assert not lexical.any()                        # no term matches: nothing to go on
    # Cosines come for the turns that have a vector, in any order; turn 2 has none.
    ids = np.array([t for t in reversed(idx.ids) if t != 2], dtype=np.int64)
    cosines = np.where(ids == 4, 1.0, 0.0)
    fused = score_turns(idx, "xylophone", (ids, cosines))
    assert int(np.argmax(fused)) == idx.ids.index(4)
    aligned = _aligned(np.asarray(idx.ids), ids, cosines)
    assert np.isnan(aligned[idx.ids.index(2)])      # no vector: no dense evidence
    assert aligned[idx.ids.index(4)] == 1.0 and aligned[idx.ids.index(3)] == 0.0


def test_index_is_bounded_by_the_horizon_and_older_turns_come_from_search(tmp_path, monkeypatch):
    import ctxrelay.retrieval.recall as recall_module
    monkeypatch.setattr(recall_module, "HORIZON", 40)
    HORIZON = 40
    st = open_stores(tmp_path / "store")
    st.transcript.create_session("s")
    st.transcript.append("s", "user", "the zebra password is tango-7")
    n = HORIZON + HORIZON // 4 + 10
    for i in range(n):
        st.transcript.append("s", "assistant" if i % 2 else "user", f"filler message number {i}")
    ranked, info = recall(st, "s", "what is the zebra password?", upto=n + 1)
    assert info["horizon_turns"] <= HORIZON + HORIZON // 4
    assert info["older_hits"] >= 1
    assert ranked[-1].turn_id == 1 or 1 in [r.turn_id for r in ranked]


def test_empty_history(tmp_path):
    st = open_stores(tmp_path / "store")
    st.transcript.create_session("s")
    ranked, info = recall(st, "s", "anything?", upto=0)
    assert len(ranked) == 0 and list(ranked) == [] and info["horizon_turns"] == 0


def test_a_ranking_reads_as_a_sequence_of_scored_turns(tmp_path):
    st = _store(tmp_path, _conversation())
    ranked, _ = recall(st, "s", "What breed is the puppy?", upto=8)
    items = list(ranked)
    assert len(items) == len(ranked) == len(ranked.ids) == 8
    assert items[0] == ranked[0] == (ranked.ids[0], ranked.scores[0])
    assert items[0].score == 1.0                          # normalised to the best
    assert ranked[1:3] == items[1:3] and ranked[-1] == items[-1]
    assert ranked.scores == sorted(ranked.scores, reverse=True)


def test_a_recall_reads_its_index_while_another_thread_extends_it(tmp_path, monkeypatch):
    # Two threads on one session shared its index unlocked: one extended it (for a
    # turn appended meanwhile) while the other scored it, so the reader ranked turns
    # past its `upto`, or its arrays changed length mid-way (numpy: "all keys need to
    # be the same shape", a managed turn failed).  Now the reader holds the index:
    # the writer waits for it.
    import threading
    from ctxrelay.retrieval import recall as recall_module
    st = _store(tmp_path, _conversation())
    recall(st, "s", "puppy", upto=8)                     # the index exists, upto 8
    scoring, extended = threading.Event(), threading.Event()
    real = recall_module.score_turns

    def slow_score(*args, **kwargs):
        if threading.current_thread().name == "reader":
            scoring.set()
            extended.wait(1.0)                           # the writer cannot get in now
        return real(*args, **kwargs)

    monkeypatch.setattr(recall_module, "score_turns", slow_score)
    found: dict[str, object] = {}

    def reader():
        try:
            found["ranked"] = recall(st, "s", "puppy race audit", upto=8)[0]
        except Exception as exc:                       # noqa: BLE001 (reported below)
            found["error"] = exc

    def writer():
        scoring.wait(5.0)
        for text in ("a puppy race", "another puppy audit"):
            st.transcript.append("s", "user", text, name="Ann", timestamp=_ts(9, 9))
        found["writer"] = recall(st, "s", "puppy", upto=10)[0]
        extended.set()

    threads = [threading.Thread(target=reader, name="reader"), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert "error" not in found, found.get("error")
    assert {r.turn_id for r in found["ranked"]} == set(range(1, 9))
    assert {r.turn_id for r in found["writer"]} == set(range(1, 11))
