"""Issue 15, point 8: every failure a caller can cause is a specific CtxRelayError.

Hypothesis draws sequences of public Runtime calls whose arguments mix valid
values with hostile ones (wrong types, deep or huge JSON, NaN, huge ints,
surrogates, NUL, empty strings, directories as file paths, unknown ids).  Each
call must succeed or raise a *specific* subclass of CtxRelayError (not the
base class, not the catch-all PrologError); afterwards the store is closed,
opened again by a new Runtime, and every write that was acknowledged must
read back as written.  Bounded and derandomized: the same examples every run.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay import Runtime
from ctxrelay.errors import CtxRelayError, PrologError

FUZZ = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])


def _deep(n: int) -> Any:
    value: Any = "leaf"
    for _ in range(n):
        value = {"k": value}
    return value


TEXT = st.text(max_size=30)
HOSTILE_SCALAR = st.sampled_from([
    None, "", "\x00", "a\ud800b", "\u202e", 0, -1, 2**70, 10**5000, math.nan, math.inf,
    1.5, True, b"bytes", bytearray(b"x"), ["list"], ("t",), {"k": "v"}, object(), "x" * 300,
])
JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(TEXT, inner, max_size=3), max_leaves=6)
METADATA = st.one_of(st.none(), JSONISH, HOSTILE_SCALAR,
                     st.sampled_from([_deep(70), _deep(600), {"x": "y" * (1 << 20)}]))
SESSION = st.one_of(st.sampled_from(["s1", "s2", "missing"]), HOSTILE_SCALAR)
CONTENT = st.one_of(TEXT, HOSTILE_SCALAR)
ROLE = st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), HOSTILE_SCALAR)


def _call(name: str) -> Any:
    return st.tuples(st.just(name), *{
        "create_session": (SESSION, METADATA),
        "append": (SESSION, ROLE, CONTENT, METADATA),
        "add_fact": (CONTENT, METADATA),
        "record_tool_output": (SESSION, CONTENT, METADATA, st.one_of(TEXT, HOSTILE_SCALAR)),
        "publish_artifact": (SESSION, st.one_of(st.integers(-2, 30), HOSTILE_SCALAR),
                             st.one_of(st.integers(-2, 30), HOSTILE_SCALAR), CONTENT, METADATA),
        "history": (SESSION, st.one_of(st.integers(-2, 30), HOSTILE_SCALAR)),
        "turn": (SESSION, st.one_of(st.integers(-2, 30), HOSTILE_SCALAR)),
        "search": (SESSION, CONTENT, st.one_of(st.integers(-2, 30), HOSTILE_SCALAR)),
        "facts": (CONTENT, st.one_of(st.integers(-2, 30), HOSTILE_SCALAR)),
        "fact": (CONTENT,),
        "scratch": (SESSION, CONTENT),
        "export": (SESSION, st.sampled_from(["file", "dir", "missing-dir", "empty"])),
        "import_jsonl": (st.one_of(TEXT, st.sampled_from(['{"type": "session"}', "{", "[]"])),),
        "stats": (SESSION,),
        "context": (SESSION, st.one_of(st.sampled_from(["peek(head(3))", "slice(1, 2)",
                                                        "search(\"etcd\")", "nonsense(("]),
                                        HOSTILE_SCALAR)),
    }[name])


CALLS = st.lists(st.one_of(*[_call(n) for n in (
    "create_session", "append", "add_fact", "record_tool_output", "publish_artifact",
    "history", "turn", "search", "facts", "fact", "scratch", "export", "import_jsonl",
    "stats", "context")]), min_size=3, max_size=8)


class Ledger:
    """The writes the API acknowledged, to be read back after a reopen."""

    def __init__(self) -> None:
        self.turns: dict[tuple[str, int], str] = {}
        self.facts: dict[str, str] = {}
        self.outputs: dict[tuple[str, str], Any] = {}


def _run(rt: Runtime, tmp: Path, ledger: Ledger, call: tuple) -> None:
    name, *args = call
    if name == "create_session":
        rt.create_session(args[0], metadata=args[1])
    elif name == "append":
        turn_id = rt.append(args[0], args[1], args[2], metadata=args[3])
        ledger.turns[(args[0], turn_id)] = args[2]
    elif name == "add_fact":
        ledger.facts[rt.add_fact(args[0], metadata=args[1])] = args[0]
    elif name == "record_tool_output":
        scratch_id = rt.record_tool_output(args[0], "tool", args[2], args[1])
        ledger.outputs[(args[0], scratch_id)] = args[1]
    elif name == "publish_artifact":
        rt.publish_artifact(args[0], args[1], args[2], args[3], metadata=args[4])
    elif name == "history":
        rt.history(args[0], args[1])
    elif name == "turn":
        rt.turn(args[0], args[1])
    elif name == "search":
        rt.search(args[0], args[1], k=args[2])
    elif name == "facts":
        rt.facts(args[0], k=args[1])
    elif name == "fact":
        rt.fact(args[0])
    elif name == "scratch":
        rt.scratch(args[0], args[1])
    elif name == "export":
        dest = {"file": tmp / "out.jsonl", "dir": tmp, "missing-dir": tmp / "no" / "x.jsonl",
                "empty": ""}[args[1]]
        rt.export(args[0], dest)
    elif name == "import_jsonl":
        rt.import_jsonl(args[0])
    elif name == "stats":
        rt.stats(args[0])
    elif name == "context":
        rt.context(args[0], args[1])


def _check_reads_back(store: Path, ledger: Ledger) -> None:
    with Runtime(store) as rt:
        rt.sessions()
        for (session_id, turn_id), content in ledger.turns.items():
            assert rt.turn(session_id, turn_id).content == content
        for fact_id, content in ledger.facts.items():
            assert rt.fact(fact_id)["content"] == content
        for (session_id, scratch_id), raw in ledger.outputs.items():
            assert rt.scratch(session_id, scratch_id, raw=True) == raw


@FUZZ
@given(calls=CALLS)
def test_any_sequence_of_calls_succeeds_or_raises_a_specific_error(tmp_path_factory, calls):
    tmp = tmp_path_factory.mktemp("fuzz")
    store, ledger, outcomes = tmp / "store", Ledger(), []
    with Runtime(store) as rt:
        rt.create_session("s1")
        for call in calls:
            try:
                _run(rt, tmp, ledger, call)
                outcomes.append("ok")
            except CtxRelayError as exc:
                assert type(exc) not in (CtxRelayError, PrologError), (call, exc)
                outcomes.append(type(exc).__name__)
    assert not list(tmp.glob("*.tmp")) and not list(tmp.glob(".export-*"))
    _check_reads_back(store, ledger)
