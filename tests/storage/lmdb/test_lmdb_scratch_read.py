"""The summary read path: ScratchStore.entry_dict and Runtime.scratch.

entry_dict keeps each entry's dict as marshal bytes and hands out copies;
these tests pin down that it returns exactly what ``get().to_dict()`` does,
that no caller can alter a later read through the returned value, and that
any change to the stored entry (in this process or another) is seen at once.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxrelay import Runtime
from ctxrelay.storage.lmdb.scratch import (
    InvalidScratchIdError,
    ScratchStore,
    UnknownScratchError,
    UnsafeScratchIdError,
)
from ctxrelay.storage.lmdb.transcript import InvalidSessionIdError

from support import ROOT

CSV = "id,value\n" + "\n".join(f"{i},{i * 3}" for i in range(40))
OUTPUTS = [
    ("sql", {"q": "select 1", "opts": {"limit": [1, 2]}}, CSV),
    ("api", {}, json.dumps({"user": {"name": "ada", "roles": ["a", "b"]}, "n": 3})),
    ("sh", {"cmd": "make"}, "Traceback (most recent call last):\n  File \"x\"\nValueError: bad"),
    ("fetch", {"url": "u"}, bytes(range(256)) * 4),
]


@pytest.fixture
def store(tmp_path: Path):
    with ScratchStore(tmp_path / "scratch", default_ttl=None) as sc:
        yield sc


def put_all(sc: ScratchStore, session: str = "s") -> list[str]:
    return [sc.put(session, tool, args, raw, now=1_800_000_000.0 + i).scratch_id
            for i, (tool, args, raw) in enumerate(OUTPUTS)]


def test_entry_dict_is_exactly_to_dict_in_the_same_key_order(store):
    for sid in put_all(store):
        want = store.get("s", sid, touch=False).to_dict()
        for _ in range(2):                                   # miss, then cached copy
            got = store.entry_dict("s", sid)
            assert got == want
            assert list(got) == list(want)
            assert json.dumps(got, sort_keys=False) == json.dumps(want, sort_keys=False)
    kinds = {store.entry_dict("t", sid)["kind"] for sid in put_all(store, "t")}
    assert {"table", "binary", "error"} <= kinds


def test_mutating_a_returned_dict_does_not_change_the_next_read(store):
    sid = put_all(store)[0]
    first = store.entry_dict("s", sid)
    pristine = json.loads(json.dumps(first))
    second = store.entry_dict("s", sid)                      # served from the cache
    for got in (first, second):
        got["args"]["q"] = "drop table"
        got["args"]["opts"]["limit"].append(99)
        got["structured"]["columns"].append("evil")
        got["structured"].clear()
        got["referenced_by"].append(7)
        got["summary"] = "forged"
        got["pinned"] = True
    assert store.entry_dict("s", sid) == pristine
    assert store.get("s", sid, touch=False).to_dict() == pristine


def test_to_dict_copies_what_the_frozen_entry_holds(store):
    entry = store.get("s", put_all(store)[0], touch=False)
    out = entry.to_dict()
    out["args"]["opts"]["limit"].append(99)
    out["structured"]["columns"].append("evil")
    assert entry.args == OUTPUTS[0][1]
    assert "evil" not in entry.structured["columns"]


def test_changes_to_the_entry_are_seen_by_the_next_read(store):
    sid = put_all(store)[0]
    before = store.entry_dict("s", sid)
    assert before["pinned"] is False and before["persistence"] == "EPHEMERAL"
    store.pin("s", sid)
    pinned = store.entry_dict("s", sid)
    assert (pinned["pinned"], pinned["pin_reason"], pinned["persistence"]) == \
        (True, "user", "PINNED")
    store.reference("s", sid, 5, now=1_900_000_000.0)
    touched = store.entry_dict("s", sid)
    assert touched["referenced_by"] == [5]
    assert touched["last_access"] == 1_900_000_000.0
    store.delete("s", sid)
    with pytest.raises(UnknownScratchError):
        store.entry_dict("s", sid)


def test_entry_dict_counts_no_use(store):
    sids = put_all(store)
    last_access = store.get("s", sids[0], touch=False).last_access
    for _ in range(3):
        store.entry_dict("s", sids[0])
    assert store.get("s", sids[0], touch=False).last_access == last_access


def test_a_cached_entry_is_still_bound_to_its_session(store):
    sid = put_all(store)[0]
    store.entry_dict("s", sid)
    with pytest.raises(UnknownScratchError):
        store.entry_dict("other", sid)


def test_bad_ids_raise_the_specific_errors(store):
    put_all(store)
    with pytest.raises(UnsafeScratchIdError):
        store.entry_dict("s", "../scr_" + "0" * 32)
    with pytest.raises(InvalidScratchIdError):
        store.entry_dict("s", "scr_" + "A" * 32)
    with pytest.raises(InvalidScratchIdError):
        store.entry_dict("s", 12)
    with pytest.raises(InvalidSessionIdError):
        store.entry_dict(["s"], "scr_" + "0" * 32)
    with pytest.raises(InvalidSessionIdError):
        store.entry_dict("bad\x00session", "scr_" + "0" * 32)
    with pytest.raises(UnknownScratchError):
        store.entry_dict("s", "scr_" + "0" * 32)


def test_a_write_from_another_process_is_seen(tmp_path):
    path = tmp_path / "scratch"
    with ScratchStore(path) as sc:
        sid = sc.put("s", "sql", {"q": 1}, CSV).scratch_id
        assert sc.entry_dict("s", sid)["pinned"] is False
        code = ("import sys; from ctxrelay.storage.lmdb.scratch import ScratchStore\n"
                "with ScratchStore(sys.argv[1]) as sc: sc.pin('s', sys.argv[2])\n")
        done = subprocess.run([sys.executable, "-c", code, str(path), sid],
                              capture_output=True, text=True, timeout=120,
                              env={"PYTHONPATH": str(ROOT / "python")})
        assert done.returncode == 0, done.stderr
        assert sc.entry_dict("s", sid)["pinned"] is True


def test_runtime_scratch_returns_copies(tmp_path):
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("s")
        sid = rt.record_tool_output("s", "sql", {"q": "select 1"}, CSV, freshness="STABLE")
        first = rt.scratch("s", sid)
        assert first["scratch_id"] == sid and first["kind"] == "table"
        pristine = json.loads(json.dumps(first))
        first["args"]["q"] = "changed"
        first["structured"]["columns"].append("evil")
        first["summary"] = "forged"
        again = rt.scratch("s", sid)
        assert again == pristine
        again["referenced_by"].append(3)
        assert rt.scratch("s", sid) == pristine
