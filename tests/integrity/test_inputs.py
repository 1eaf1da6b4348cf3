"""Issue 15, points 3, 4, 6: no input bricks the store or poisons the next call.

Point 3: one check (depth, size, JSON-ability; ``storage.validation.check_json``)
runs on every metadata and tool-argument value before anything is written, so
nothing stored can make a later read fail.  Point 4: a bad path is a clear
error and leaves the healthy Runtime working; an export to a directory leaves
no temporary file.  Point 6: a session id that is not a str is refused, naming
its type, before anything is written.
"""
from __future__ import annotations

import os

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import (CtxRelayError, InvalidArgumentError, InvalidMetadataError,
                             InvalidPathError, InvalidSessionIdError)
from ctxrelay.storage.validation import (MAX_JSON_DEPTH, MAX_METADATA_BYTES, check_json,
                                         normalise_metadata)

DEPTHS = [MAX_JSON_DEPTH + 1, 600, 100_000]   # just over, Prolog's old limit, the issue's


def _deep(depth: int, as_list: bool = False):
    value: object = {}
    for _ in range(depth):
        value = [value] if as_list else {"k": value}
    return value


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    with Runtime(tmp_path_factory.mktemp("inputs") / "store") as runtime:
        runtime.create_session("a")
        runtime.append("a", "user", "etcd defrag frees 8 GiB")
        yield runtime


def _reads_everything(rt: Runtime) -> None:
    """Every read path that once failed after a bad write still answers."""
    assert {s.session_id for s in rt.sessions()} >= {"a"}
    assert rt.history("a")[0].content == "etcd defrag frees 8 GiB"
    rt.artifacts("a")
    rt.scratch_entries("a")
    rt.facts("etcd")


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_metadata_and_args_are_refused_before_anything_is_written(rt, depth):
    sessions, turns = len(rt.sessions()), rt.turn_count("a")
    entries, facts = len(rt.scratch_entries("a")), len(rt.facts("x", k=1000))
    calls = {
        "create_session": lambda: rt.create_session(f"deep{depth}", metadata=_deep(depth)),
        "append": lambda: rt.append("a", "user", "x", metadata={"v": _deep(depth, True)}),
        "add_fact": lambda: rt.add_fact("x", metadata=_deep(depth)),
        "publish_artifact": lambda: rt.publish_artifact("a", 1, 1, "s", metadata=_deep(depth)),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidMetadataError, match=f"more than {MAX_JSON_DEPTH} levels"):
            call()
    for raw in ("text output", b"\x00binary output"):
        with pytest.raises(InvalidArgumentError, match=f"more than {MAX_JSON_DEPTH} levels"):
            rt.record_tool_output("a", "tool", _deep(depth), raw)
    assert (len(rt.sessions()), rt.turn_count("a")) == (sessions, turns)
    assert (len(rt.scratch_entries("a")), len(rt.facts("x", k=1000))) == (entries, facts)
    _reads_everything(rt)


def test_metadata_at_the_depth_limit_is_stored_and_read_back(rt):
    value = _deep(MAX_JSON_DEPTH - 1)
    info = rt.create_session("at-limit", metadata=value)
    assert info.metadata == value
    assert rt.session("at-limit").metadata == value
    _reads_everything(rt)


@pytest.mark.parametrize("bad, why", [
    ({"x": float("nan")}, "JSON cannot hold"),
    ({"x": object()}, "not JSON"),
    ({1: "x"}, "non-string key"),
    ({"x": "y" * (MAX_METADATA_BYTES + 1)}, "more than 1,048,576"),
    ({"x": "\ud800"}, "lone surrogate"),
    ({"x": 10 ** 5000}, "cannot be written as JSON"),
])
def test_the_one_check_names_the_fault(bad, why):
    with pytest.raises(InvalidMetadataError, match=why):
        normalise_metadata(bad)
    with pytest.raises(InvalidArgumentError, match=why):
        check_json(bad, "args", InvalidArgumentError)


def test_oversized_metadata_is_refused_on_every_entry_point(rt):
    big = {"x": "y" * (MAX_METADATA_BYTES + 1)}
    for call in (lambda: rt.create_session("big", metadata=big),
                 lambda: rt.add_fact("x", metadata=big),
                 lambda: rt.append("a", "user", "x", metadata=big)):
        with pytest.raises(InvalidMetadataError, match="bytes of JSON"):
            call()
    assert "big" not in {s.session_id for s in rt.sessions()}


# -- point 4: bad paths -------------------------------------------------------------------

@pytest.mark.parametrize("path", ["\ud800dir", ""])
def test_a_bad_store_path_is_a_clear_error_and_poisons_nothing(rt, path, tmp_path,
                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="pass"):
        Runtime(path)
    assert os.listdir(tmp_path) == []                 # no store made in the cwd
    assert rt.append("a", "user", "after a bad path") >= 2
    _reads_everything(rt)


def test_export_to_a_directory_is_a_clear_error_and_leaves_no_temporary_file(rt, tmp_path):
    target = tmp_path / "dir"
    target.mkdir()
    with pytest.raises(InvalidPathError, match="is a directory"):
        rt.export("a", target)
    with pytest.raises(InvalidPathError, match="cannot write"):
        rt.export("a", tmp_path / "missing" / "x.jsonl")
    assert sorted(os.listdir(tmp_path)) == ["dir"] and os.listdir(target) == []
    rt.export("a", tmp_path / "a.jsonl")
    assert sorted(os.listdir(tmp_path)) == ["a.jsonl", "dir"]


# -- point 6: session ids that are not str ------------------------------------------------

@pytest.mark.parametrize("bad", [list("alice"), b"alice", 1.5, ("alice",)],
                         ids=["list", "bytes", "float", "tuple"])
def test_a_non_str_session_id_is_refused_before_anything_is_written(tmp_path, bad):
    with Runtime(tmp_path / "s") as rt:
        rt.create_session("alice")
        with pytest.raises(InvalidSessionIdError, match=type(bad).__name__):
            rt.append(bad, "user", "x")
        with pytest.raises(InvalidSessionIdError, match=type(bad).__name__):
            rt.managed_turn(bad, "hi", provider="echo")
        assert rt.turn_count("alice") == 0
        assert [s.session_id for s in rt.sessions()] == ["alice"]


def test_every_refusal_here_is_a_ctxrelay_error():
    # The classes above are part of the one hierarchy callers catch.
    for cls in (InvalidMetadataError, InvalidPathError, InvalidSessionIdError):
        assert issubclass(cls, CtxRelayError)


def test_the_prolog_entry_point_reaches_the_same_check(rt):
    # ctxrelay:session_create/3 called from Prolog: the store's one check refuses it.
    from ctxrelay.bridge import engine
    with pytest.raises(InvalidMetadataError, match=f"more than {MAX_JSON_DEPTH} levels"):
        engine.once("ctxrelay:session_create(dir(D), deep_prolog, [metadata(M)])",
                    {"D": str(rt.store_dir), "M": _deep(MAX_JSON_DEPTH + 2)})
    assert "deep_prolog" not in {s.session_id for s in rt.sessions()}
