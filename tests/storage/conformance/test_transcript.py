"""Conformance: the Transcript contract (ctxrelay.storage.interfaces.transcript)."""
from __future__ import annotations

import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.errors import (ArchivedSessionError, ImportFormatError, InvalidContentError,
                             InvalidRoleError, InvalidSessionIdError, KeyConflictError,
                             SessionExistsError, StoreError, TurnTooLargeError,
                             UnknownSessionError, UnknownTurnError)
from ctxrelay.storage.interfaces.transcript import Transcript
from protocol_view import through

STORE = "transcript"


@pytest.fixture
def transcript(backend):
    return through(Transcript, backend.open().transcript)


def _session(transcript, turns=()):
    sid = f"s-{uuid.uuid4().hex[:8]}"
    transcript.create_session(sid)
    for role, text in turns:
        transcript.append(sid, role, text)
    return sid


# -- sessions ---------------------------------------------------------------------------------

def test_sessions_are_created_once_listed_by_id_and_unknown_ones_raise(transcript):
    transcript.create_session("b", metadata={"project": "etcd", "n": 3})
    transcript.create_session("a")
    assert [s.session_id for s in transcript.sessions()] == ["a", "b"]
    info = transcript.session("b")
    assert info.metadata == {"project": "etcd", "n": 3} and info.turn_count == 0
    assert not info.archived and transcript.has_session("a") and not transcript.has_session("c")
    with pytest.raises(SessionExistsError):
        transcript.create_session("a")
    for read in (lambda: transcript.session("c"), lambda: transcript.turn_count("c"),
                 lambda: transcript.history("c"), lambda: transcript.last("c", 1),
                 lambda: transcript.append("c", "user", "x"),
                 lambda: transcript.search("c", "x"), lambda: transcript.stats("c")):
        with pytest.raises(UnknownSessionError):
            read()


@pytest.mark.parametrize("bad", ["", "x" * 257, "tab\there", "nul\x00", 42, None])
def test_bad_session_ids_raise_before_anything_is_written(transcript, bad):
    with pytest.raises(InvalidSessionIdError):
        transcript.create_session(bad)
    assert transcript.sessions() == []


# -- turns ----------------------------------------------------------------------------------

def test_turns_round_trip_with_contiguous_ids(transcript):
    sid = _session(transcript)
    first = transcript.append(sid, "user", "Which etcd member is slow?",
                              metadata={"source": "cli", "tags": ["a", 1]},
                              timestamp="2024-05-01T12:00:00+02:00")
    second = transcript.append(sid, "assistant", "", name="bot")
    third = transcript.append(sid, "tool", "ok", name="sh", tool_call_id="call_1")
    assert (first, second, third) == (1, 2, 3)
    turn = transcript.turn(sid, 1)
    assert (turn.session_id, turn.turn_id, turn.role) == (sid, 1, "user")
    assert turn.content == "Which etcd member is slow?"
    assert turn.metadata == {"source": "cli", "tags": ["a", 1]}
    assert turn.timestamp == "2024-05-01T10:00:00.000000Z"        # normalised to UTC
    assert isinstance(turn.tokens, int) and turn.tokens > 0
    assert (transcript.turn(sid, 3).name, transcript.turn(sid, 3).tool_call_id) == ("sh", "call_1")
    assert transcript.turn_count(sid) == 3
    with pytest.raises(UnknownTurnError):
        transcript.turn(sid, 4)
    with pytest.raises(InvalidRoleError):
        transcript.append(sid, "robot", "x")
    with pytest.raises(InvalidContentError):
        transcript.append(sid, "user", b"bytes")                   # type: ignore[arg-type]
    assert transcript.turn_count(sid) == 3                         # refused appends wrote nothing


def test_a_turn_over_the_size_limit_is_refused_before_anything_is_written(transcript):
    sid = _session(transcript)
    limit = transcript.max_turn_bytes
    transcript.check_size("x" * limit)                          # at the limit: fine
    with pytest.raises(TurnTooLargeError, match="max_turn_bytes"):
        transcript.check_size("é" * (limit // 2 + 1))           # bytes, not characters
    with pytest.raises(TurnTooLargeError):
        transcript.append(sid, "user", "x" * (limit + 1))
    with pytest.raises(TurnTooLargeError):
        transcript.append_many(sid, [{"role": "user", "content": "ok"},
                                     {"role": "user", "content": "x" * (limit + 1)}])
    assert transcript.turn_count(sid) == 0


def test_reads_in_order(transcript):
    sid = _session(transcript, [("user" if i % 2 else "assistant", f"turn {i}")
                                for i in range(1, 11)])
    assert [t.turn_id for t in transcript.history(sid)] == list(range(1, 11))
    assert [t.turn_id for t in transcript.history(sid, 3, 5)] == [3, 4, 5]
    assert [t.turn_id for t in transcript.history(sid, 9, 100)] == [9, 10]
    assert transcript.history(sid, 11) == []
    assert list(transcript.iter_turns(sid, 2, 7)) == transcript.history(sid, 2, 7)
    assert [t.turn_id for t in transcript.last(sid, 3)] == [8, 9, 10]
    assert transcript.last(sid, 0) == [] and len(transcript.last(sid, 50)) == 10
    assert [t.turn_id for t in transcript.turns(sid, [7, 2, 7])] == [7, 2, 7]
    with pytest.raises(UnknownTurnError, match="11"):
        transcript.turns(sid, [1, 11])


def test_a_keyed_append_is_stored_once(transcript):
    sid = _session(transcript)
    assert transcript.append(sid, "user", "hello", key="k1") == 1
    assert transcript.append(sid, "user", "hello", key="k1") == 1          # a retry
    assert transcript.turn_count(sid) == 1 and transcript.turn_for_key(sid, "k1") == 1
    assert transcript.turn_for_key(sid, "other") is None
    with pytest.raises(KeyConflictError):
        transcript.append(sid, "user", "something else", key="k1")
    with pytest.raises(KeyConflictError):
        transcript.append(sid, "assistant", "hello", key="k1")
    other = _session(transcript)
    assert transcript.append(other, "user", "hello", key="k1") == 1        # keys are per session
    transcript.archive_session(sid)
    assert transcript.append(sid, "user", "hello", key="k1") == 1          # still a retry
    with pytest.raises(ArchivedSessionError):
        transcript.append(sid, "user", "new")
    assert transcript.session(sid).archived and transcript.turn_count(sid) == 1


def test_several_turns_are_appended_all_or_none(transcript):
    sid = _session(transcript, [("user", "first")])
    ids = transcript.append_many(sid, [{"role": "user", "content": "a", "key": "ka"},
                                       {"role": "assistant", "content": "b", "name": "bot"}])
    assert ids == [2, 3] and transcript.turn(sid, 3).name == "bot"
    assert transcript.append_many(sid, [{"role": "user", "content": "a", "key": "ka"}]) == [2]
    with pytest.raises(InvalidRoleError):
        transcript.append_many(sid, [{"role": "user", "content": "c"},
                                     {"role": "robot", "content": "d"}])
    with pytest.raises(UnknownSessionError):
        transcript.append_many("new-one", [{"role": "user", "content": "x"}])
    assert transcript.turn_count(sid) == 3 and not transcript.has_session("new-one")
    assert transcript.append_many("new-one", [{"role": "user", "content": "x"}],
                                  create=True, session_metadata={"by": "test"}) == [1]
    assert transcript.session("new-one").metadata == {"by": "test"}


def test_concurrent_appends_get_contiguous_ids(transcript):
    sid = _session(transcript)
    errors: list[BaseException] = []

    def write(tag: str) -> None:
        try:
            for i in range(25):
                transcript.append(sid, "user", f"{tag}-{i}", key=f"{tag}-{i}")
        except BaseException as exc:    # reported below
            errors.append(exc)
    threads = [threading.Thread(target=write, args=(t,)) for t in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    turns = transcript.history(sid)
    assert [t.turn_id for t in turns] == list(range(1, 101))
    assert sorted(t.content for t in turns) == sorted(f"{g}-{i}" for g in "abcd" for i in range(25))


# -- the text index --------------------------------------------------------------------------

def test_search_ranks_best_first_and_ties_go_to_the_newer_turn(transcript):
    sid = _session(transcript, [("user", "the raft election timeout is 1000 ms"),
                                ("assistant", "defragment one etcd member at a time"),
                                ("user", "etcd etcd etcd is slow"),
                                ("user", "nothing related here"),
                                ("user", "defragment one etcd member at a time")])
    hits = transcript.search(sid, "raft timeout")
    assert hits[0].turn_id == 1 and hits[0].content.startswith("the raft")
    assert [h.turn_id for h in transcript.search(sid, "defragment member")][:2] == [5, 2]
    scores = [h.score for h in transcript.search(sid, "etcd", k=10)]
    assert scores == sorted(scores, reverse=True)
    assert [t for t, _ in transcript.rank(sid, "etcd", k=3)] == \
        [h.turn_id for h in transcript.search(sid, "etcd", k=3)]
    assert transcript.search(sid, "etcd", k=0) == [] and transcript.search(sid, "zebra") == []
    assert {h.turn_id for h in transcript.search(sid, "etcd", roles=["assistant"])} == {2}


def test_stats_are_the_totals_of_the_turns(transcript):
    sid = _session(transcript, [("user", "héllo"), ("assistant", "ok"), ("user", "bye")])
    stats = transcript.stats(sid)
    assert stats.turn_count == 3 and stats.by_role == {"user": 2, "assistant": 1}
    assert stats.bytes == len("héllo".encode()) + 2 + 3
    assert stats.tokens == sum(t.tokens for t in transcript.history(sid))
    assert stats.first_timestamp == transcript.turn(sid, 1).timestamp
    assert stats.last_timestamp == transcript.turn(sid, 3).timestamp


# -- moving sessions, derived data --------------------------------------------------------------

def test_export_and_import_round_trip_and_a_bad_file_writes_nothing(transcript):
    sid = _session(transcript)
    transcript.append(sid, "user", "line one\nwith a newline", metadata={"x": [1, 2]}, key="k")
    transcript.append(sid, "assistant", "reply \u2028 with a line separator")
    text = transcript.export_jsonl(sid)
    copy = transcript.import_jsonl(text, session_id="copy")
    assert copy == "copy"
    strip = lambda turns: [(t.turn_id, t.role, t.content, t.metadata, t.timestamp, t.key)
                           for t in turns]
    assert strip(transcript.history("copy")) == strip(transcript.history(sid))
    assert transcript.turn_for_key("copy", "k") == 1
    before = [s.session_id for s in transcript.sessions()]
    broken = text.replace('"type": "turn"', '"type": "nonsense"', 1)
    with pytest.raises(ImportFormatError, match="line 2"):
        transcript.import_jsonl(broken, session_id="broken")
    assert [s.session_id for s in transcript.sessions()] == before


def test_derived_records_agree_with_the_turns(transcript):
    empty = _session(transcript)
    assert transcript.check_derived(empty).ok         # issue 15 point 7: a new session passes
    sid = _session(transcript, [("user", f"turn {i} about etcd") for i in range(5)])
    transcript.append(sid, "user", "keyed", key="k")
    report = transcript.check_derived(sid)
    assert report.ok and report.repairable and report.problems == ()
    assert transcript.repair_derived(sid).ok         # nothing to repair: nothing changes
    assert transcript.search(sid, "keyed")[0].turn_id == 6


# -- lifetime -------------------------------------------------------------------------------

def test_reopen_keeps_every_committed_write(backend, transcript):
    sid = _session(transcript, [("user", "persisted words")])
    transcript.append(sid, "assistant", "and a keyed one", key="k")
    again = through(Transcript, backend.reopen().transcript)
    assert [t.content for t in again.history(sid)] == ["persisted words", "and a keyed one"]
    assert again.search(sid, "persisted")[0].turn_id == 1
    assert again.append(sid, "assistant", "and a keyed one", key="k") == 2
    assert again.append(sid, "user", "next") == 3


def test_a_closed_transcript_raises(transcript):
    sid = _session(transcript)
    generation = transcript.write_generation()
    transcript.append(sid, "user", "x")
    assert transcript.write_generation() != generation
    transcript.close()
    assert transcript.closed and transcript.write_generation() is None
    with pytest.raises(StoreError):
        transcript.append(sid, "user", "y")


# -- an invariant over any sequence of appends -----------------------------------------------------

_APPENDS = st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool", "system"]),
                              st.text(max_size=40),
                              st.one_of(st.none(), st.sampled_from(["k1", "k2", "k3"]))),
                    min_size=1, max_size=20)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=_APPENDS)
def test_ids_are_contiguous_and_keys_dedupe_whatever_the_appends(transcript, appends):
    sid = _session(transcript)
    model: list[tuple[str, str]] = []
    by_key: dict[str, int] = {}
    for role, text, key in appends:
        if key in by_key:
            stored = model[by_key[key] - 1]
            if stored == (role, text):
                assert transcript.append(sid, role, text, key=key) == by_key[key]
            else:
                with pytest.raises(KeyConflictError):
                    transcript.append(sid, role, text, key=key)
            continue
        turn_id = transcript.append(sid, role, text, key=key)
        model.append((role, text))
        assert turn_id == len(model)
        if key is not None:
            by_key[key] = turn_id
    assert [(t.role, t.content) for t in transcript.history(sid)] == model
    assert transcript.turn_count(sid) == len(model)
    assert transcript.check_derived(sid).ok
