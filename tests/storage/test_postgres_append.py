"""The PostgreSQL append as one server-side call (``transcript_append``, migration 7):
what it decides inside the server -- keys within a batch and across batches, the
archived check, the counters, a session created by two appenders at once -- and
that a refused call writes nothing.  The conformance suite covers the rest."""
from __future__ import annotations

import sys
import threading

import psycopg
import pytest

from ctxrelay.errors import ArchivedSessionError, KeyConflictError, SessionExistsError
from ctxrelay.storage import open_stores
from services import postgres_url
from support import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from pg_append_reference import four_trip_append, two_trip_append  # noqa: E402


@pytest.fixture
def pg(pg_schema):
    spec, schema = pg_schema
    return open_stores(spec).transcript, schema


def _generation(schema: str) -> int:
    with psycopg.connect(postgres_url()) as conn:
        return conn.execute(f"SELECT generation FROM {schema}.store_generation").fetchone()[0]


def test_a_key_repeated_in_one_batch_is_one_turn(pg):
    t, _ = pg
    t.create_session("s")
    t.append("s", "user", "before")
    ids = t.append_many("s", [{"role": "user", "content": "x", "key": "a"},
                              {"role": "tool", "content": "y"},
                              {"role": "user", "content": "x", "key": "a"},
                              {"role": "user", "content": "z", "key": "b"}])
    assert ids == [2, 3, 2, 4]
    assert [turn.content for turn in t.history("s")] == ["before", "x", "y", "z"]
    # and a later batch that repeats stored keys gets their ids, new rows the next ones
    assert t.append_many("s", [{"role": "user", "content": "w"},
                               {"role": "user", "content": "z", "key": "b"}]) == [5, 4]


@pytest.mark.parametrize("batch", [
    # the key's first row is in this batch
    [{"role": "user", "content": "x", "key": "a"}, {"role": "user", "content": "other",
                                                     "key": "a"}],
    # the key is stored already; a new row before the conflicting one
    [{"role": "user", "content": "new"}, {"role": "user", "content": "other", "key": "k"}],
])
def test_a_key_standing_for_other_content_refuses_the_whole_batch(pg, batch):
    t, schema = pg
    t.create_session("s")
    t.append("s", "user", "stored", key="k")
    generation = _generation(schema)
    with pytest.raises(KeyConflictError, match=r"key '(a|k)' was already used for turn"):
        t.append_many("s", batch)
    assert t.turn_count("s") == 1
    assert t.rank("s", "new other x") == []            # no posting of the refused rows
    assert _generation(schema) == generation
    assert t.check_derived("s").ok


def test_an_archived_session_returns_stored_keys_but_refuses_new_turns(pg):
    t, _ = pg
    t.create_session("s")
    t.append("s", "user", "stored", key="k")
    t.archive_session("s")
    assert t.append("s", "user", "stored", key="k") == 1
    with pytest.raises(ArchivedSessionError):
        t.append_many("s", [{"role": "user", "content": "stored", "key": "k"},
                            {"role": "user", "content": "new"}])
    # the first problem in row order is the one raised
    with pytest.raises(KeyConflictError):
        t.append_many("s", [{"role": "user", "content": "changed", "key": "k"},
                            {"role": "user", "content": "new"}])
    assert t.turn_count("s") == 1


def test_counters_are_the_embedded_back_ends(pg, tmp_path):
    """Counted by the server, the same totals, role order and tokenizers as the
    embedded back end's Python counters (and check_derived agrees)."""
    t, _ = pg
    embedded = open_stores(str(tmp_path / "store")).transcript
    batches = [[{"role": "tool", "content": "t\u00e9l\u00e9 \u2603 output", "name": "ls"}],
               [{"role": "user", "content": "a b c", "key": "k"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "a b c", "key": "k"}],
               [{"role": "system", "content": "nul \x00 inside"}]]
    for store in (t, embedded):
        # out of order on purpose: first is the first turn's, last the last turn's
        stamp = iter(f"2026-01-0{d}T00:00:00Z" for d in (3, 1, 2, 4, 5))
        store.create_session("s")
        for batch in batches:
            store.append_many("s", [{**turn, "timestamp": next(stamp)} for turn in batch])
    got, want = t.stats("s"), embedded.stats("s")
    assert got == want
    assert (got.first_timestamp, got.last_timestamp) == ("2026-01-03T00:00:00.000000Z",
                                                         "2026-01-05T00:00:00.000000Z")
    assert list(got.by_role) == list(want.by_role) == ["tool", "user", "assistant", "system"]
    assert t.check_derived("s").ok and not t.check_derived("s").problems


def test_import_creates_archives_and_refuses_an_existing_session(pg, tmp_path):
    t, schema = pg
    t.create_session("s")
    t.append_many("s", [{"role": "user", "content": f"turn {i}"} for i in range(3)])
    t.archive_session("s")
    dump = t.export_jsonl("s")
    assert t.import_jsonl(dump, session_id="copy") == "copy"
    assert t.session("copy").archived and t.turn_count("copy") == 3
    assert t.stats("copy").by_role == t.stats("s").by_role
    generation = _generation(schema)
    with pytest.raises(SessionExistsError):
        t.import_jsonl(dump, session_id="copy")
    assert _generation(schema) == generation


def test_two_appenders_creating_one_session_both_land(pg):
    t, _ = pg
    results: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def create_and_append(i: int) -> None:
        barrier.wait()
        try:
            results.append(t.append_many("new", [{"role": "user", "content": f"from {i}"}],
                                         create=True))
        except BaseException as exc:      # noqa: BLE001 -- reported below
            errors.append(exc)
    threads = [threading.Thread(target=create_and_append, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(ids[0] for ids in results) == [1, 2, 3, 4]
    assert t.check_derived("new").ok and not t.check_derived("new").problems


def test_the_benchmarks_former_protocols_write_what_append_writes(pg):
    """bench/pg_append_bench.py compares the server-side call with the statements the
    client used to send: both must store the same turn, postings and counters."""
    t, schema = pg
    for sid in ("a", "b", "c"):
        t.create_session(sid)
    t.append("a", "user", "etcd quota raft raft", key="k")
    two_trip_append(t, "b", "etcd quota raft raft", key="k")
    four_trip_append(t, "etcd quota raft raft", session_id="c")
    assert two_trip_append(t, "b", "etcd quota raft raft", key="k") == 1     # a retry
    with psycopg.connect(postgres_url()) as conn:
        def rows(sid: str, query: str) -> list:
            return conn.execute(query.format(s=schema), (sid,)).fetchall()
        turns = "SELECT role, content, key, key_digest, tokens, t.ix_length FROM {s}.turns t " \
                "JOIN {s}.sessions ON num = session_num WHERE session_id = %s"
        postings = "SELECT term, turn_id, tf, doclen FROM {s}.postings JOIN {s}.sessions " \
                   "ON num = session_num WHERE session_id = %s ORDER BY term"
        assert rows("a", turns) == rows("b", turns)
        assert rows("a", postings) == rows("b", postings) == rows("c", postings)
    assert t.stats("a").by_role == t.stats("b").by_role == t.stats("c").by_role
    for sid in "abc":
        assert not t.check_derived(sid).problems
