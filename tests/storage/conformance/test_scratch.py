"""Conformance: the ScratchBuffer contract (ctxrelay.storage.interfaces.scratch)."""
from __future__ import annotations

import itertools
import re
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.errors import InvalidContentError, StoreError
from ctxrelay.storage.interfaces.scratch import ScratchBuffer
from ctxrelay.storage.lmdb.scratch import (InvalidScratchIdError, NotPromotableError,
                                           UnknownScratchError, UnsafeScratchIdError)
from protocol_view import through

STORE = "scratch"
_EXAMPLES = itertools.count()


@pytest.fixture
def scratch(backend):
    return through(ScratchBuffer, backend.open().scratch)


def test_an_output_round_trips_and_its_id_is_its_session_s(scratch):
    text = scratch.put("s", "sql_query", {"q": "select 1"}, "a,b\n1,2\n")
    blob = scratch.put("s", "fetch", {}, b"\x00\xffbinary")
    assert re.fullmatch(r"scr_[0-9a-f]{32}", text.scratch_id) and text.scratch_id != blob.scratch_id
    assert scratch.raw("s", text.scratch_id) == "a,b\n1,2\n"
    assert scratch.raw("s", blob.scratch_id) == b"\x00\xffbinary"
    got = scratch.get("s", text.scratch_id, touch=False)
    assert (got.tool_name, got.args, got.size, got.session_id) == \
        ("sql_query", {"q": "select 1"}, 8, "s")
    assert got.summary and got.summary_tokens > 0
    plain = scratch.entry_dict("s", text.scratch_id)
    plain["args"]["q"] = "changed by the caller"
    assert scratch.entry_dict("s", text.scratch_id)["args"] == {"q": "select 1"}
    with pytest.raises(UnknownScratchError):
        scratch.get("other", text.scratch_id)                   # another session's id
    with pytest.raises(InvalidScratchIdError):
        scratch.get("s", "scr_nothex")
    with pytest.raises(UnsafeScratchIdError):
        scratch.raw("s", "../../etc/passwd")
    with pytest.raises(InvalidContentError):
        scratch.put("s", "t", {}, 12)                            # type: ignore[arg-type]
    assert scratch.stats().entries == 2


def test_entries_are_listed_in_put_order(scratch):
    ids = [scratch.put("s", tool, {"i": i}, f"output {i}").scratch_id
           for i, tool in enumerate(["ls", "sql", "ls", "curl"])]
    scratch.put("t", "ls", {}, "another session")
    assert [e.scratch_id for e in scratch.list("s")] == ids
    assert [e.scratch_id for e in scratch.latest("s", 2)] == ids[2:]
    assert scratch.most_recent("s", "ls").scratch_id == ids[2]
    assert scratch.most_recent("s", "nothing") is None
    assert scratch.list("nobody") == [] and scratch.stats("s").entries == 4


def test_pins_references_and_deletion(scratch):
    entry = scratch.put("s", "ls", {}, "a\nb\n")
    assert not entry.pinned
    assert scratch.pin("s", entry.scratch_id).pinned
    assert not scratch.unpin("s", entry.scratch_id).pinned
    once = scratch.reference("s", entry.scratch_id, 3)
    assert once.referenced_by == (3,) and not once.pinned
    twice = scratch.reference("s", entry.scratch_id, 5)
    assert twice.referenced_by == (3, 5) and twice.pinned and twice.pin_reason == "auto"
    assert scratch.reference("s", entry.scratch_id, 5).referenced_by == (3, 5)
    scratch.delete("s", entry.scratch_id)
    with pytest.raises(UnknownScratchError):
        scratch.get("s", entry.scratch_id)
    assert scratch.stats().entries == 0


def test_retention_evicts_unpinned_expired_entries_only(scratch):
    now = time.time()
    kept = scratch.put("s", "ls", {}, "kept", ttl=10, pinned=True, now=now)
    gone = scratch.put("s", "ls", {}, "gone", ttl=10, now=now)
    young = scratch.put("s", "ls", {}, "young", ttl=1000, now=now)
    report = scratch.evict(now + 60)
    assert [(e.scratch_id, e.reason) for e in report.evicted] == [(gone.scratch_id, "ttl")]
    assert {e.scratch_id for e in scratch.list("s")} == {kept.scratch_id, young.scratch_id}
    with pytest.raises(UnknownScratchError):
        scratch.raw("s", gone.scratch_id)


def test_a_stale_reading_is_never_shown_as_current(scratch):
    now = time.time()
    entry = scratch.put("s", "metrics", {}, "cpu 93%", freshness="REALTIME", now=now)
    assert scratch.gate(entry, now + 1) == "fresh"
    assert scratch.render(entry, now + 1).text == entry.summary
    assert scratch.gate(entry, now + 120) == "reinvoke"
    assert scratch.render(entry, now + 120).text is None
    assert scratch.gate(entry, now + 120, can_reinvoke=False) == "warn"
    assert "may be outdated" in scratch.render(entry, now + 120, policy="warn").text
    with pytest.raises(NotPromotableError):
        scratch.promote("s", entry.scratch_id)                  # not pinned
    stable = scratch.put("s", "calc", {"x": 1}, "3600", freshness="STABLE", pinned=True)
    promotion = scratch.promote("s", stable.scratch_id)
    assert promotion.provenance_hash == stable.sha256 and promotion.tool_name == "calc"


def test_concurrent_puts_keep_every_entry(scratch):
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                scratch.put(f"s{n}", "t", {"i": i}, f"{n}:{i}")
        except BaseException as exc:     # reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for n in range(4):
        assert [scratch.raw(f"s{n}", e.scratch_id) for e in scratch.list(f"s{n}")] == \
            [f"{n}:{i}" for i in range(10)]
    assert scratch.stats().entries == 40 and scratch.verify() == ()


def test_reopen_keeps_entries_and_blobs(backend, scratch):
    entry = scratch.put("s", "ls", {}, "persisted\n", pinned=True)
    assert scratch.check().clean and scratch.verify(repair=True) == ()
    again = through(ScratchBuffer, backend.reopen().scratch)
    assert again.raw("s", entry.scratch_id) == "persisted\n"
    assert again.get("s", entry.scratch_id, touch=False).pinned
    again.close()
    assert again.closed
    with pytest.raises(StoreError):
        again.list("s")


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outputs=st.lists(st.one_of(st.text(max_size=200), st.binary(max_size=200)),
                        min_size=1, max_size=8))
def test_every_output_reads_back_as_it_was_put(scratch, outputs):
    session = f"h{next(_EXAMPLES)}"
    ids = [scratch.put(session, "tool", {"n": n}, raw).scratch_id
           for n, raw in enumerate(outputs)]
    assert [scratch.raw(session, sid) for sid in ids] == outputs
    assert [e.scratch_id for e in scratch.list(session)] == ids
    assert scratch.stats(session).bytes == sum(
        len(r.encode("utf-8") if isinstance(r, str) else r) for r in outputs)


def test_copies_restore_as_they_were(scratch):
    """What ``ctxrelay migrate`` relies on: ``sessions`` finds every session with
    entries, ``blob`` reads without a use, ``restore`` writes entries whole (ids,
    times, last use, order, pins, references), so retention carries over."""
    from ctxrelay.errors import SessionExistsError
    from ctxrelay.storage.lmdb.scratch import ScratchBlobError
    t0 = 1_700_000_000.0
    kept = scratch.put("s", "sql", {"q": 1}, "rows\n" * 50, now=t0, ttl=60.0)
    pinned = scratch.put("s", "fetch", {}, b"\x00\xff" * 10, now=t0 + 1, pinned=True)
    used = scratch.put("s", "ls", {"d": "/"}, "a b c", now=t0 + 2, ttl=None)
    scratch.put("t", "ls", {}, "another session", now=t0 + 3)
    scratch.reference("s", used.scratch_id, 7, now=t0 + 5)
    assert scratch.sessions() == ["s", "t"]
    before = scratch.list("s")
    assert scratch.blob("s", pinned.scratch_id) == b"\x00\xff" * 10
    assert scratch.blob("s", kept.scratch_id) == b"rows\n" * 50
    assert scratch.list("s") == before                       # blob() is not a use
    blobs = {e.scratch_id: scratch.blob("s", e.scratch_id) for e in before}
    for entry in before:
        scratch.delete("s", entry.scratch_id)
    assert scratch.sessions() == ["t"]
    assert scratch.restore([(e, blobs[e.scratch_id]) for e in before]) == 3
    assert scratch.list("s") == before and scratch.sessions() == ["s", "t"]
    assert scratch.raw("s", kept.scratch_id, now=t0 + 6) == "rows\n" * 50
    assert scratch.stats("s").entries == 3 and scratch.stats("s").pinned == 1
    later = scratch.put("s", "ls", {}, "after the copy", now=t0 + 7, ttl=None)
    assert later.seq > max(e.seq for e in before)            # insertion order goes on
    assert [e.scratch_id for e in scratch.list("s")][-1] == later.scratch_id
    # retention carried over: the expired unpinned entry goes, the others stay
    report = scratch.evict(now=t0 + 100)
    assert [v.scratch_id for v in report.evicted if v.session_id == "s"] == [kept.scratch_id]
    # a clash or a wrong blob refuses the whole batch before writing
    with pytest.raises(SessionExistsError):
        scratch.restore([(kept, blobs[kept.scratch_id]), (pinned, blobs[pinned.scratch_id])])
    assert {e.scratch_id for e in scratch.list("s")} == \
        {pinned.scratch_id, used.scratch_id, later.scratch_id}
    with pytest.raises(ScratchBlobError):
        scratch.restore([(kept, b"other bytes")])
    with pytest.raises(UnknownScratchError):
        scratch.get("s", kept.scratch_id, touch=False)


def _lmdb_scratch(tmp_path, **options):
    from ctxrelay.storage.lmdb.scratch import ScratchStore
    return ScratchStore(tmp_path / "scratch", **options)


def _postgres_scratch(tmp_path, **options):
    from ctxrelay.storage.postgres.scratch import PgScratch
    return PgScratch(None, **options)         # the options are checked before the database


@pytest.mark.parametrize("make", [_lmdb_scratch, _postgres_scratch], ids=["lmdb", "postgres"])
@pytest.mark.parametrize("options, says", [
    ({"disk_budget_bytes": 0}, "disk_budget_bytes must be an int >= 1, not 0; pass the number"),
    ({"summary_max_tokens": 1}, "summary_max_tokens must be an int >="),
    ({"model": ""}, "model must be a tokenizer name, not ''"),
    ({"model": None}, "model must be a tokenizer name, not None"),
    ({"retain": "hoard"}, "(CRP-Safety-Policy tool-output-retain)"),
    ({"auto_pin_after": 0}, "auto_pin_after must be None or an int >= 1, not 0"),
    ({"auto_pin_after": True}, "auto_pin_after must be None or an int >= 1, not True"),
])
def test_every_back_end_refuses_the_same_options_the_same_way(tmp_path, make, options, says):
    """The store's options are checked alike on every back end (PostgreSQL once took
    ``model=''`` and ``auto_pin_after=0``, which the embedded store refuses)."""
    from ctxrelay.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError) as caught:
        make(tmp_path, **options)
    assert says in str(caught.value)
