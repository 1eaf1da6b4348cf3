"""Tests of ctxrelay.storage.lmdb.warm: versioned warm artifacts in their own LMDB store."""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.errors import (
    ArtifactKeyConflictError,
    CorruptStoreError,
    CtxRelayError,
    InvalidArgumentError,
    InvalidArtifactError,
    InvalidMetadataError,
    InvalidRangeError,
    InvalidSessionIdError,
    KeyConflictError,
    StoreError,
    UnknownArtifactError,
    UnknownSessionError,
    UnknownTurnError,
)
from ctxrelay.storage.lmdb.transcript import TranscriptStore, open_store
from ctxrelay.storage.lmdb.warm import (
    VARIANTS,
    WarmStore,
    open_warm_store,
    variants,
)

SUMMARY = ("Alice and Bob compared Postgres with SQLite for the billing service. "
           "They chose Postgres because it handles concurrent writers. "
           "Bob will write the migration next week, after the schema review. "
           "Nobody has decided who owns the backups yet, and the budget is open.")
FULL = dict(decisions=["use Postgres", "Bob writes the migration"],
            facts=["billing has 3 concurrent writers", "SQLite locks the whole file"],
            unresolved=["who owns backups?"],
            entities=["Alice", "Bob", "Postgres"],
            producer="summariser:test", metadata={"model": "m1", "cost": [1, 2.5]})


@pytest.fixture
def warm(tmp_path: Path):
    store = WarmStore(tmp_path / "warm")
    yield store
    store.close()


class FakeTranscript:
    """The two methods publish needs of a transcript."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def has_session(self, session_id: str) -> bool:
        return session_id in self.counts

    def turn_count(self, session_id: str) -> int:
        return self.counts[session_id]


def canonical_hash(summary: str, **lists: list[str]) -> str:
    content = {"summary": summary, **{n: lists.get(n, []) for n in
                                      ("decisions", "facts", "unresolved", "entities")}}
    text = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- round trip ----------------------------------------------------------------

def test_publish_get_round_trip_of_all_fields(warm: WarmStore) -> None:
    before = datetime.now(timezone.utc)
    made = warm.publish("s1", 3, 7, SUMMARY, key="k-1", **FULL)
    after = datetime.now(timezone.utc)

    assert made.artifact_id == "s1:3-7"
    assert (made.session_id, made.start, made.end, made.version) == ("s1", 3, 7, 1)
    assert made.summary == SUMMARY
    assert made.decisions == ("use Postgres", "Bob writes the migration")
    assert made.facts == ("billing has 3 concurrent writers", "SQLite locks the whole file")
    assert made.unresolved == ("who owns backups?",)
    assert made.entities == ("Alice", "Bob", "Postgres")
    assert made.producer == "summariser:test"
    assert made.metadata == {"model": "m1", "cost": [1, 2.5]}
    assert made.key == "k-1"
    assert made.content_hash == canonical_hash(
        SUMMARY, decisions=FULL["decisions"], facts=FULL["facts"],
        unresolved=FULL["unresolved"], entities=FULL["entities"])
    assert made.created.endswith("Z")
    created = datetime.fromisoformat(made.created.replace("Z", "+00:00"))
    assert before <= created <= after

    assert warm.get("s1", 3, 7) == made
    assert warm.get("s1", 3, 7, version=1) == made

    plain = made.to_dict()
    assert plain["decisions"] == ["use Postgres", "Bob writes the migration"]
    assert all(type(plain[n]) is list for n in ("decisions", "facts", "unresolved", "entities"))
    assert json.loads(json.dumps(plain)) == plain          # only plain JSON types
    assert plain["artifact_id"] == "s1:3-7" and plain["version"] == 1


def test_defaults_and_tuple_inputs(warm: WarmStore) -> None:
    made = warm.publish("s1", 1, 1, "One turn.", facts=("a", "b"))
    assert made.producer == "api" and made.metadata == {} and made.key is None
    assert made.decisions == () and made.facts == ("a", "b")
    assert warm.get("s1", 1, 1).to_dict()["entities"] == []


def test_content_hash_ignores_producer_and_metadata(warm: WarmStore) -> None:
    a = warm.publish("s1", 1, 2, "Same text.", facts=["f"], producer="p1")
    b = warm.publish("s1", 1, 2, "Same text.", facts=["f"], producer="p2",
                     metadata={"x": 1})
    c = warm.publish("s1", 1, 2, "Same text.", facts=["g"])
    assert a.content_hash == b.content_hash != c.content_hash


# -- versioning ------------------------------------------------------------------

def test_republish_makes_a_new_version_and_keeps_the_old(warm: WarmStore) -> None:
    v1 = warm.publish("s1", 1, 4, "First summary.", facts=["old"])
    v2 = warm.publish("s1", 1, 4, "Second summary.", facts=["new"], producer="p2")
    assert (v1.version, v2.version) == (1, 2)
    assert v1.artifact_id == v2.artifact_id == "s1:1-4"

    assert warm.latest("s1") == [v2]
    assert warm.get("s1", 1, 4) == v2
    assert warm.versions("s1", 1, 4) == [v1, v2]
    assert warm.get("s1", 1, 4, version=1) == v1
    assert warm.get("s1", 1, 4, version=1).summary == "First summary."


def test_republishing_identical_content_without_key_is_a_new_version(warm: WarmStore) -> None:
    warm.publish("s1", 2, 2, "Same.")
    again = warm.publish("s1", 2, 2, "Same.")
    assert again.version == 2
    assert [a.version for a in warm.versions("s1", 2, 2)] == [1, 2]


def test_latest_orders_by_start_then_end(warm: WarmStore) -> None:
    for start, end in [(5, 9), (1, 10), (1, 4), (5, 6), (11, 12)]:
        warm.publish("s1", start, end, f"turns {start}-{end}.")
    warm.publish("s1", 1, 4, "turns 1-4 again.")
    got = [(a.start, a.end, a.version) for a in warm.latest("s1")]
    assert got == [(1, 4, 2), (1, 10, 1), (5, 6, 1), (5, 9, 1), (11, 12, 1)]


def test_get_unknown_range_or_version(warm: WarmStore) -> None:
    warm.publish("s1", 1, 2, "x.")
    with pytest.raises(UnknownArtifactError, match=r"no warm artifact for turns 1.3"):
        warm.get("s1", 1, 3)
    with pytest.raises(UnknownArtifactError, match=r"versions 1\.\.1; version 2"):
        warm.get("s1", 1, 2, version=2)
    with pytest.raises(InvalidArgumentError):
        warm.get("s1", 1, 2, version=0)
    assert warm.versions("s1", 1, 3) == []
    assert warm.latest("nobody") == []


# -- idempotency keys ------------------------------------------------------------

def test_same_key_same_content_returns_the_existing_artifact(warm: WarmStore) -> None:
    first = warm.publish("s1", 1, 3, SUMMARY, key="job-7", **FULL)
    again = warm.publish("s1", 1, 3, SUMMARY, key="job-7", **FULL)
    assert again == first                      # same version and created time
    assert warm.versions("s1", 1, 3) == [first]


@pytest.mark.parametrize("change, differs", [
    (dict(summary="Another summary."), "content"),
    (dict(facts=["different"]), "content"),
    (dict(end=4), "range"),
    (dict(producer="other"), "producer"),
    (dict(metadata={"model": "m2"}), "metadata"),
])
def test_same_key_different_publish_conflicts_and_writes_nothing(
        warm: WarmStore, change: dict[str, Any], differs: str) -> None:
    base: dict[str, Any] = dict(session_id="s1", start=1, end=3, summary="Base.",
                                facts=["f"], producer="p", metadata={"model": "m1"})
    first = warm.publish(**base, key="job-7")
    with pytest.raises(ArtifactKeyConflictError, match=differs) as info:
        warm.publish(**{**base, **change}, key="job-7")
    assert isinstance(info.value, KeyConflictError)
    assert info.value.kind == "artifact_key_conflict"
    assert "use a new key" in str(info.value)
    assert warm.latest("s1") == [first]
    assert warm.versions("s1", 1, 4) == []


def test_keys_are_per_session(warm: WarmStore) -> None:
    a = warm.publish("s1", 1, 1, "In s1.", key="k")
    b = warm.publish("s2", 1, 1, "In s2, different text.", key="k")
    assert (a.session_id, b.session_id) == ("s1", "s2")
    assert b.version == 1 and b.summary == "In s2, different text."


# -- covering ----------------------------------------------------------------------

def test_covering_returns_latest_versions_containing_the_turn(warm: WarmStore) -> None:
    warm.publish("s1", 1, 5, "a.")
    warm.publish("s1", 3, 4, "b.")
    warm.publish("s1", 6, 9, "c.")
    warm.publish("s1", 1, 5, "a v2.")
    warm.publish("other", 1, 100, "other session.")

    def ranges(turn: int) -> list[tuple[int, int, int]]:
        return [(a.start, a.end, a.version) for a in warm.covering("s1", turn)]

    assert ranges(1) == [(1, 5, 2)]
    assert ranges(3) == [(1, 5, 2), (3, 4, 1)]
    assert ranges(5) == [(1, 5, 2)]
    assert ranges(6) == [(6, 9, 1)]
    assert ranges(9) == [(6, 9, 1)]
    assert ranges(10) == []
    with pytest.raises(InvalidArgumentError):
        warm.covering("s1", 0)


# -- variants ----------------------------------------------------------------------

def test_variants_forms_and_contents(warm: WarmStore) -> None:
    art = warm.publish("s1", 3, 7, SUMMARY, **FULL)
    forms = variants(art)
    assert [f["variant"] for f in forms] == list(VARIANTS)
    assert all(set(f) == {"variant", "text"} and isinstance(f["text"], str) for f in forms)
    text = {f["variant"]: f["text"] for f in forms}
    header = "[warm artifact turns 3\u20137 v 1, producer summariser:test]"
    assert all(t.splitlines()[0] == header for t in text.values())

    verbatim = text["verbatim"]
    for item in (SUMMARY, *FULL["decisions"], *FULL["facts"], *FULL["unresolved"],
                 *FULL["entities"]):
        assert item in verbatim
    positions = [verbatim.index(s) for s in
                 (SUMMARY, "Decisions:", "Facts:", "Unresolved:", "Entities:")]
    assert positions == sorted(positions)

    detailed = text["detailed"]
    assert SUMMARY in detailed and "- use Postgres" in detailed
    assert "- who owns backups?" in detailed
    assert "Facts:" not in detailed and "Entities:" not in detailed

    compact = text["compact"]
    assert len(compact) < len(detailed) < len(verbatim)
    body = compact[len(header):].strip()
    assert SUMMARY.startswith(body) and len(body.split()) <= 40
    assert body.endswith(".")                  # whole sentences only

    facts_only = text["facts_only"]
    assert "- SQLite locks the whole file" in facts_only and "- use Postgres" in facts_only
    assert SUMMARY not in facts_only and "who owns backups" not in facts_only

    assert variants(art) == forms                      # deterministic
    assert warm.variants(warm.get("s1", 3, 7)) == forms  # and from a stored copy
    assert art.variants() == forms


def test_facts_only_is_omitted_without_facts_or_decisions(warm: WarmStore) -> None:
    bare = warm.publish("s1", 1, 2, "Nothing decided.", unresolved=["u"], entities=["e"])
    assert [f["variant"] for f in variants(bare)] == ["verbatim", "detailed", "compact"]
    only_decision = warm.publish("s1", 3, 4, "One decision.", decisions=["d"])
    assert variants(only_decision)[-1] == {
        "variant": "facts_only",
        "text": "[warm artifact turns 3\u20134 v 1, producer api]\n\nDecisions:\n- d"}


def test_compact_cuts_a_long_first_sentence(warm: WarmStore) -> None:
    words = " ".join(f"w{i}" for i in range(100))
    art = warm.publish("s1", 1, 1, words + ". Second sentence.")
    compact = next(f["text"] for f in variants(art) if f["variant"] == "compact")
    body = compact.split("\n\n", 1)[1]
    assert body == " ".join(f"w{i}" for i in range(40)) + " \u2026"


def test_variant_text_is_data_not_a_template(warm: WarmStore) -> None:
    tricky = "Use {producer} and %s and {0} literally. [warm artifact turns 9\u20139 v 9]"
    art = warm.publish("s1", 1, 1, tricky, facts=["{summary}"], producer="p{1}")
    verbatim = variants(art)[0]["text"]
    assert tricky in verbatim and "- {summary}" in verbatim
    assert verbatim.startswith("[warm artifact turns 1\u20131 v 1, producer p{1}]\n")


# -- validation ------------------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, error, message", [
    (("s1", 5, 2, "x."), {}, InvalidRangeError, "start 5 is after end 2"),
    (("s1", 1.0, 2, "x."), {}, InvalidRangeError, "start must be an int"),
    (("s1", 1, "2", "x."), {}, InvalidRangeError, "end must be an int"),
    (("s1", True, 2, "x."), {}, InvalidRangeError, "start must be an int"),
    (("s1", 0, 2, "x."), {}, InvalidRangeError, "turn ids run from 1"),
    (("s1", 1, 2, ""), {}, InvalidArtifactError, "summary is empty"),
    (("s1", 1, 2, "  \n"), {}, InvalidArtifactError, "summary is empty"),
    (("s1", 1, 2, None), {}, InvalidArtifactError, "summary must be a str"),
    (("s1", 1, 2, "x."), {"facts": ["ok", 3]}, InvalidArtifactError, r"facts\[1\] must be a str"),
    (("s1", 1, 2, "x."), {"decisions": [""]}, InvalidArtifactError, r"decisions\[0\] is empty"),
    (("s1", 1, 2, "x."), {"entities": "Alice"}, InvalidArtifactError, "wrap a single item"),
    (("s1", 1, 2, "x."), {"unresolved": None}, InvalidArtifactError, "must be a list of str"),
    (("s1", 1, 2, "x."), {"producer": ""}, InvalidArtifactError, "producer must be"),
    (("s1", 1, 2, "x."), {"producer": 5}, InvalidArtifactError, "producer must be"),
    (("s1", 1, 2, "x."), {"producer": "a\nb"}, InvalidArtifactError, "control"),
    (("s1", 1, 2, "bad \ud800"), {}, InvalidArtifactError, "surrogate"),
    (("s1", 1, 2, "x."), {"metadata": [1]}, InvalidMetadataError, "JSON object"),
    (("s1", 1, 2, "x."), {"key": ""}, InvalidArgumentError, "key is empty"),
    (("", 1, 2, "x."), {}, InvalidSessionIdError, "session id is empty"),
])
def test_bad_input_raises_a_specific_error_and_writes_nothing(
        warm: WarmStore, args: tuple, kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as info:
        warm.publish(*args, **kwargs)
    assert isinstance(info.value, CtxRelayError)
    assert "; " in str(info.value)             # what was wrong; how to fix it
    assert warm.latest("s1") == []


def test_transcript_object_checks_session_and_end(tmp_path: Path) -> None:
    fake = FakeTranscript({"s1": 5, "empty": 0})
    with WarmStore(tmp_path / "warm", transcript=fake) as warm:
        assert warm.publish("s1", 1, 5, "All five turns.").end == 5
        with pytest.raises(UnknownSessionError, match="no session 'ghost'"):
            warm.publish("ghost", 1, 1, "x.")
        with pytest.raises(UnknownTurnError, match=r"turns 1\.\.5.*at or before turn 5"):
            warm.publish("s1", 2, 6, "x.")
        with pytest.raises(UnknownTurnError, match="append turns"):
            warm.publish("empty", 1, 1, "x.")
        # a per-call transcript replaces the store's
        assert warm.publish("ghost", 1, 1, "x.", transcript=FakeTranscript({"ghost": 1}))
        assert [(a.session_id, a.end) for a in warm.latest("s1")] == [("s1", 5)]
        assert warm.latest("empty") == []
    with WarmStore(tmp_path / "warm2") as warm:   # without a transcript: shapes only
        assert warm.publish("anything", 1, 10**6, "x.").end == 10**6
        with pytest.raises(UnknownTurnError):
            warm.publish("s1", 1, 6, "x.", transcript=fake)
        with pytest.raises(InvalidArgumentError, match="has_session"):
            warm.publish("s1", 1, 1, "x.", transcript=object())


def test_real_transcript_store_validates_ranges(tmp_path: Path) -> None:
    transcript = open_store(tmp_path / "store")
    try:
        transcript.create_session("chat")
        for i in range(3):
            transcript.append("chat", "user", f"message {i}")
        before = transcript.export_jsonl("chat")
        with WarmStore(tmp_path / "store" / "warm", transcript=transcript) as warm:
            assert warm.publish("chat", 1, 3, "Three messages.").version == 1
            with pytest.raises(UnknownTurnError):
                warm.publish("chat", 3, 4, "x.")
            with pytest.raises(UnknownSessionError):
                warm.publish("nochat", 1, 1, "x.")
        assert transcript.export_jsonl("chat") == before   # transcript untouched
    finally:
        transcript.close()


# -- durability, paths, sharing ----------------------------------------------------

def test_artifacts_survive_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "warm"
    with WarmStore(path) as warm:
        v1 = warm.publish("s1", 1, 2, "First.", key="a", **FULL)
        v2 = warm.publish("s1", 1, 2, "Second.")
        other = warm.publish("s1", 4, 4, "Other.")
    assert sorted(os.listdir(path)) == ["data.mdb", "lock.mdb"]
    with WarmStore(path) as warm:
        assert warm.versions("s1", 1, 2) == [v1, v2]
        assert warm.latest("s1") == [v2, other]
        assert warm.publish("s1", 1, 2, "First.", key="a", **FULL) == v1   # key kept
        assert warm.publish("s1", 1, 2, "Third.").version == 3
    with WarmStore(path, readonly=True) as warm:
        assert warm.get("s1", 1, 2).summary == "Third."
        with pytest.raises(StoreError, match="readonly"):
            warm.publish("s1", 1, 2, "x.")


def test_open_warm_store_shares_one_instance_per_realpath(tmp_path: Path) -> None:
    real = tmp_path / "warm"
    link = tmp_path / "link"
    store = open_warm_store(real)
    try:
        link.symlink_to(real)
        assert open_warm_store(link) is store
        assert open_warm_store(str(real) + "/") is store
        with pytest.raises(StoreError, match="open_warm_store"):
            WarmStore(link)
        with pytest.raises(InvalidArgumentError, match="transcript"):
            open_warm_store(real, transcript=FakeTranscript({}))
    finally:
        store.close()
    assert store.closed
    with pytest.raises(StoreError, match="closed"):
        store.latest("s1")
    reopened = open_warm_store(real)
    try:
        assert reopened is not store
    finally:
        reopened.close()


def test_bad_paths_and_foreign_environments(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(StoreError, match="is a file"):
        WarmStore(afile)
    with pytest.raises(StoreError, match="no store"):
        WarmStore(tmp_path / "missing", readonly=True)
    with pytest.raises(InvalidArgumentError, match="map_size"):
        WarmStore(tmp_path / "w", map_size=0)
    TranscriptStore(tmp_path / "store").close()
    with pytest.raises(CorruptStoreError, match="warm"):
        WarmStore(tmp_path / "store" / "transcript.lmdb")
    with TranscriptStore(tmp_path / "store") as transcript:   # left as it was
        assert transcript.sessions() == []


def test_a_full_map_grows(tmp_path: Path) -> None:
    with WarmStore(tmp_path / "warm", map_size=1 << 15) as warm:
        texts = [f"Summary {i}. " + "word " * 400 for i in range(60)]
        for i, text in enumerate(texts):
            warm.publish("s1", i + 1, i + 1, text)
        assert [a.summary for a in warm.latest("s1")] == texts
    with WarmStore(tmp_path / "warm", map_size=1 << 15) as warm:
        assert len(warm.latest("s1")) == 60


# -- isolation ---------------------------------------------------------------------

def test_sessions_are_isolated(warm: WarmStore) -> None:
    a = warm.publish("alpha", 1, 3, "Alpha.")
    warm.publish("alpha", 1, 3, "Alpha v2.")
    b = warm.publish("beta", 1, 3, "Beta.")
    prefix = warm.publish("alph", 1, 3, "Prefix of alpha.")
    assert b.version == 1 and prefix.version == 1
    assert [x.summary for x in warm.latest("alpha")] == ["Alpha v2."]
    assert warm.latest("beta") == [b]
    assert warm.versions("beta", 1, 3) == [b]
    assert warm.covering("beta", 2) == [b]
    assert warm.get("alpha", 1, 3, version=1) == a
    with pytest.raises(UnknownArtifactError):
        warm.get("gamma", 1, 3)


# -- property: the store behaves like a dict of version lists ----------------------

RANGES = [(1, 1), (1, 3), (2, 5), (4, 4), (3, 9)]
publish_op = st.tuples(
    st.sampled_from(["a", "b"]),
    st.sampled_from(RANGES),
    st.one_of(st.sampled_from(["Same.", "Other."]),
              st.text(min_size=1, max_size=30).filter(str.strip)),
    st.lists(st.sampled_from(["f1", "f2", "f3"]), max_size=2),
    st.sampled_from(["api", "p2"]),
    st.sampled_from([None, None, "k1", "k2"]),
)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(publish_op, max_size=25), reopen=st.booleans())
def test_latest_and_versions_match_a_model(tmp_path: Path, ops: list, reopen: bool) -> None:
    path = tempfile.mkdtemp(dir=tmp_path)
    history: dict[tuple[str, int, int], list[tuple]] = {}
    keys: dict[tuple[str, str], tuple] = {}       # (session, key) -> (identity, artifact)
    store = WarmStore(path)
    try:
        for session, (start, end), summary, facts, producer, key in ops:
            identity = (start, end, summary, tuple(facts), producer)
            if key is not None and (session, key) in keys:
                known_identity, known = keys[(session, key)]
                if identity == known_identity:
                    assert store.publish(session, start, end, summary, facts=facts,
                                         producer=producer, key=key) == known
                else:
                    with pytest.raises(ArtifactKeyConflictError):
                        store.publish(session, start, end, summary, facts=facts,
                                      producer=producer, key=key)
                continue
            made = store.publish(session, start, end, summary, facts=facts,
                                 producer=producer, key=key)
            versions = history.setdefault((session, start, end), [])
            versions.append((summary, tuple(facts), producer))
            assert made.version == len(versions)
            if key is not None:
                keys[(session, key)] = (identity, made)
        if reopen:
            store.close()
            store = WarmStore(path)
        for session in ("a", "b"):
            expected = sorted((s, e, len(v), v[-1]) for (sid, s, e), v in history.items()
                              if sid == session)
            got = [(x.start, x.end, x.version, (x.summary, x.facts, x.producer))
                   for x in store.latest(session)]
            assert got == expected
            for (sid, s, e), v in history.items():
                if sid == session:
                    stored = store.versions(session, s, e)
                    assert [x.version for x in stored] == list(range(1, len(v) + 1))
                    assert [(x.summary, x.facts, x.producer) for x in stored] == v
    finally:
        store.close()
