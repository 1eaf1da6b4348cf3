"""Tool outputs through the runtime: blob on disk, summary in context, freshness gate."""
from __future__ import annotations

import json

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import InvalidArgumentError, KeyConflictError, UnknownSessionError


@pytest.fixture
def rt(store_dir):
    with Runtime(store_dir) as runtime:
        runtime.create_session("s")
        runtime.append("s", "user", "how many orders failed yesterday?")
        yield runtime


def big_csv(rows: int = 5000) -> str:
    return "id,status,amount,day\n" + "\n".join(
        f"{i},{'failed' if i % 7 == 0 else 'ok'},{i * 3 % 1000},2026-11-{1 + i % 28:02d}"
        for i in range(1, rows + 1))


def test_record_tool_output_keeps_the_blob_and_packs_only_the_summary(rt):
    raw = big_csv()
    sid = rt.record_tool_output("s", "sql", {"query": "select * from orders"}, raw)
    turns = rt.history("s")
    call, result = turns[-2], turns[-1]
    assert call.role == "assistant" and call.metadata["tool_calls"][0]["name"] == "sql"
    assert result.role == "tool" and result.tool_call_id == call.metadata["tool_calls"][0]["id"]
    assert "5000 rows" in result.content and len(result.content) < len(raw) / 20
    assert rt.scratch("s", sid, raw=True) == raw                 # raw on demand
    entry = rt.scratch("s", sid)
    assert entry["scratch_id"] == sid and entry["tool_name"] == "sql"
    r = rt.assemble("s", "summarise the query result", max_context_tokens=2000,
                    output_reserve=200, safety_margin=20)
    visible = json.dumps(r.messages)
    assert "5000 rows" in visible
    assert "4999,ok" not in visible                              # the blob never enters context
    assert any(u.kind == "scratch" for u in r.pack)
    assert r.ledger.stage("tool_summaries")["charged"] > 0


def test_stale_volatile_output_is_not_presented_as_current(rt, monkeypatch):
    sid = rt.record_tool_output("s", "metrics", {"q": "cpu"}, '{"cpu": 0.93}', freshness="REALTIME")
    import ctxrelay.storage.common.scratch.checks as scratch_clock   # where "now" is read
    real_time = scratch_clock.time.time
    monkeypatch.setattr(scratch_clock.time, "time", lambda: real_time() + 3600)
    r = rt.assemble("s", "what was the cpu reading?", max_context_tokens=2000,
                    output_reserve=200, safety_margin=20)
    tool_msgs = [m for m in r.messages if m["role"] == "tool"]
    assert tool_msgs and all("0.93" not in m["content"] for m in tool_msgs)
    assert any("stale" in m["content"] for m in tool_msgs)
    assert rt.scratch("s", sid, raw=True) == '{"cpu": 0.93}'     # kept, just not shown as current


def test_pin_and_list(rt):
    sid = rt.record_tool_output("s", "ls", {}, "a\nb\nc\n")
    rt.pin("s", sid)
    [entry] = rt.scratch_entries("s")
    assert entry["scratch_id"] == sid and entry["pinned"] is True


def test_binary_output(rt):
    sid = rt.record_tool_output("s", "fetch", {"url": "x"}, b"\x89PNG\r\n\x1a\n\x00\x01")
    assert rt.scratch("s", sid, raw=True) == b"\x89PNG\r\n\x1a\n\x00\x01"
    assert rt.scratch("s", sid)["kind"] == "binary"


def test_unknown_session_writes_nothing(rt, store_dir):
    with pytest.raises(UnknownSessionError):
        rt.record_tool_output("nope", "sql", {}, "x")
    assert rt.scratch_entries("s") == []


@pytest.mark.parametrize("raw", ["some output\n", b"\x89PNG"], ids=["text", "bytes"])
def test_an_archived_session_takes_no_tool_output_and_keeps_no_blob(rt, raw):
    # The blob and its entry were written before the call turn was refused
    # (ArchivedSessionError): every refused call left an orphan entry behind.
    from ctxrelay.errors import ArchivedSessionError
    rt.archive_session("s")
    with pytest.raises(ArchivedSessionError, match="archived"):
        rt.record_tool_output("s", "sql", {}, raw)
    assert rt.scratch_entries("s") == [] and len(rt.history("s")) == 1


def test_a_summary_over_max_turn_bytes_stores_nothing(tmp_path):
    # The blob and the call turn were written before the summary turn was refused:
    # the transcript kept a tool call without its result, the disk an orphan blob.
    from ctxrelay.errors import TurnTooLargeError
    with Runtime(tmp_path / "store", max_turn_bytes=200) as rt:
        rt.create_session("s")
        rt.append("s", "user", "how many orders failed yesterday?")
        with pytest.raises(TurnTooLargeError, match="max_turn_bytes"):
            rt.record_tool_output("s", "sql", {"q": "failed"}, big_csv(), key="k1")
        assert [t.role for t in rt.history("s")] == ["user"]
        assert rt.scratch_entries("s") == []
        assert list((tmp_path / "store" / "scratch").rglob("*.blob")) == []
        # a small output still fits, and the refused key is free for it
        sid = rt.record_tool_output("s", "sql", {"q": "n"}, "n\n3\n", key="k1")
        assert [t.role for t in rt.history("s")] == ["user", "assistant", "tool"]
        assert [e["scratch_id"] for e in rt.scratch_entries("s")] == [sid]


def test_listing_an_unknown_session_is_an_error(rt):
    # It returned [], as for a session with no tool output: a misspelt id went unnoticed.
    with pytest.raises(UnknownSessionError, match="nope"):
        rt.scratch_entries("nope")
    rt.archive_session("s")
    assert rt.scratch_entries("s") == []        # an archived session is still listed


def test_other_sessions_cannot_read_a_scratch_id(rt):
    sid = rt.record_tool_output("s", "sql", {}, "secret,1\n")
    rt.create_session("other")
    with pytest.raises(Exception) as info:
        rt.scratch("other", sid, raw=True)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("raw", ["text output\n", b"\x89PNG\r\n\x1a\n"], ids=["text", "bytes"])
@pytest.mark.parametrize("args, fix", [([1, 2], "dict"), ({"f": object()}, "JSON"),
                                       ("not json", "dict")])
def test_bad_args_are_refused_the_same_way_for_text_and_binary_outputs(rt, raw, args, fix):
    # A binary output used to skip the argument checks: a list of args failed with
    # a raw TypeError from dict(), an object was passed on to the store.
    with pytest.raises(InvalidArgumentError, match=fix):
        rt.record_tool_output("s", "fetch", args, raw)
    assert rt.scratch_entries("s") == [] and len(rt.history("s")) == 1


@pytest.mark.parametrize("first, again", [
    (("sql", {"q": "a"}, "rows: 3\n"), ("sql", {"q": "a"}, "rows: 4\n")),
    (("sql", {"q": "a"}, "rows: 3\n"), ("sql", {"q": "b"}, "rows: 3\n")),
    (("fetch", {}, b"\x89PNG-1"), ("fetch", {}, b"\x89PNG-2")),
], ids=["other_output", "other_args", "other_bytes"])
def test_a_key_reused_for_another_tool_output_is_a_conflict(rt, first, again):
    # As for append(): the same key with the same output is a retry (same id, nothing
    # new); with another output it used to return the first entry's id and drop the
    # new output without a word.
    sid = rt.record_tool_output("s", *first, key="k1")
    assert rt.record_tool_output("s", *first, key="k1") == sid
    turns = len(rt.history("s"))
    with pytest.raises(KeyConflictError, match="new key"):
        rt.record_tool_output("s", *again, key="k1")
    assert len(rt.history("s")) == turns and len(rt.scratch_entries("s")) == 1
    assert rt.scratch("s", sid, raw=True) == first[2]
