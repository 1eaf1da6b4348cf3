"""The Python facade: Python -> Prolog (library(ctxrelay)) -> Python stores.

Each Runtime call runs the Prolog predicate a Prolog agent would call; these
tests check that values and errors survive both crossings.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import janus_swi as janus
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxrelay
from ctxrelay import Runtime
from ctxrelay.errors import (ArchivedSessionError, InvalidArgumentError, InvalidContentError,
                             InvalidMetadataError, InvalidPathError, InvalidRoleError,
                             KeyConflictError, SessionExistsError, UnknownSessionError,
                             UnknownTurnError)

from conftest import run_swipl

TRICKY = [
    "plain",
    "quotes ' \" and backslash \\ and `ticks`",
    "line one\nline two\r\nline three\n",
    "RTL \u200f\u05e9\u05dc\u05d5\u05dd and \u202e override",
    "emoji \U0001F680\U0001F9EA and CJK \u4e2d\u6587 and combining e\u0301",
    "NUL \x00 inside",
    "prolog-looking: foo(X) :- bar(X), !. 'atom' \"str\" 0'c",
    "",
]


@pytest.fixture
def rt(store_dir):
    with Runtime(store_dir) as runtime:
        yield runtime


def test_import_loads_the_prolog_library_into_user():
    # Public predicates answer janus.query_once in module user after import.
    assert janus.query_once("current_predicate(user:turn_append/5)")["truth"]
    assert janus.query_once("current_predicate(user:transcript_history/4)")["truth"]
    # ... and library(ctxrelay) exports no plumbing and no generic names.
    exports = janus.query_once("findall(_S, ( module_property(ctxrelay, exports(_Es)), "
                               "member(_P, _Es), term_string(_P, _S) ), L)")["L"]
    for name in ("py_api/1", "py_plain/2", "py_bool/2", "pack/4", "history/4", "intent/1",
                 "route/2", "policy/2", "classify_intent/4", "py_options/2"):
        assert name not in exports, name
    assert {"managed_turn/4", "turn_prepare/4", "turn_commit/4", "assemble/4", "context/3",
            "transcript_history/4", "store_open/2"} <= set(exports)


def test_a_user_program_with_generic_names_of_its_own_loads_cleanly(tmp_path):
    program = tmp_path / "mine.pl"
    program.write_text(
        ":- use_module(library(ctxrelay)).\n"
        "history(a, b, c, d).\nintent(mine).\nroute(x, y).\npack(a, b, c, d).\n"
        "policy(p, q).\npy_plain(x, y).\n")
    proc = run_swipl(["-g", f"consult('{program}')", "-g",
                      "intent(I), history(a, _, _, D), format('~w ~w~n', [I, D])", "-t", "halt"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("mine d")
    assert "Warning" not in proc.stderr and "override" not in proc.stderr, proc.stderr


def test_embedded_python_is_the_venv_interpreter():
    # janus inside swipl must embed this very interpreter (same version and ABI).
    got = janus.query_once("py_call(sys:version, V), py_call(sys:base_prefix, P)")
    assert got["V"] == sys.version
    assert got["P"] == sys.base_prefix
    proc = run_swipl(["-g", "py_call(sys:version, V), py_call(sys:prefix, P), "
                      "py_call(sysconfig:get_config_var('LDLIBRARY'), L), "
                      "format('~w~n~w~n~w~n', [V, P, L])", "-t", "halt"])
    assert proc.returncode == 0, proc.stderr
    version, prefix, ldlibrary = proc.stdout.strip().split("\n")[-3:]
    assert version == sys.version.replace("\n", " ") or version == sys.version.split("\n")[0]
    assert os.path.realpath(prefix) == os.path.realpath(sys.prefix)
    assert ldlibrary == sysconfig.get_config_var("LDLIBRARY")


@pytest.mark.parametrize("text", TRICKY)
def test_text_survives_both_crossings(rt, text):
    rt.create_session("s")
    tid = rt.append("s", "user", text, name="n\u00e9", metadata={"k": text, "list": [1, None, True]})
    turn = rt.turn("s", tid)
    assert turn.content == text
    assert turn.name == "n\u00e9"
    assert turn.metadata == {"k": text, "list": [1, None, True]}
    assert rt.history("s")[-1].content == text


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
                      min_size=1, max_size=6))
def test_random_unicode_round_trips(tmp_path_factory, texts):
    with Runtime(tmp_path_factory.mktemp("store")) as rt:
        rt.create_session("s")
        ids = [rt.append("s", "user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
        assert ids == list(range(1, len(texts) + 1))
        assert [t.content for t in rt.history("s")] == texts


def test_turn_fields_and_types(rt):
    rt.create_session("s", metadata={"project": "etcd"})
    tid = rt.append("s", "tool", "3 rows", name="sql", tool_call_id="call_7",
                    timestamp="2026-01-02T03:04:05+00:00", key="k-1")
    turn = rt.turn("s", tid)
    assert isinstance(turn, ctxrelay.Turn)
    assert (turn.turn_id, turn.role, turn.name, turn.tool_call_id, turn.key) == \
        (1, "tool", "sql", "call_7", "k-1")
    assert turn.timestamp.startswith("2026-01-02T03:04:05")
    assert turn.tokens > 0 and turn.tokens_exact is True
    assert rt.session("s").metadata == {"project": "etcd"}
    assert [s.session_id for s in rt.sessions()] == ["s"]


def test_history_ranges_and_last(rt):
    rt.create_session("s")
    for i in range(1, 8):
        rt.append("s", "user", f"turn {i}")
    assert [t.turn_id for t in rt.history("s", 3, 5)] == [3, 4, 5]
    assert [t.turn_id for t in rt.history("s", 6)] == [6, 7]
    assert [t.turn_id for t in rt.last("s", 2)] == [6, 7]
    assert rt.turn_count("s") == 7


def test_idempotent_append_and_conflict(rt):
    rt.create_session("s")
    assert rt.append("s", "user", "hello", key="req-1") == 1
    assert rt.append("s", "user", "hello", key="req-1") == 1
    assert rt.turn_count("s") == 1
    with pytest.raises(KeyConflictError, match="key"):
        rt.append("s", "user", "something else", key="req-1")


def test_search_ranks_through_the_index(rt):
    rt.create_session("s")
    rt.append("s", "user", "How do I configure etcd?")
    rt.append("s", "assistant", "Use --cert-file and --key-file to enable TLS for etcd peers.")
    rt.append("s", "user", "Which backup tool would you pick?")
    hits = rt.search("s", "etcd TLS", k=2)
    assert [h.turn_id for h in hits] == [2, 1]
    assert hits[0].score > hits[1].score > 0
    assert isinstance(hits[0], ctxrelay.Hit)


def test_export_import_round_trip(rt, tmp_path):
    rt.create_session("s", metadata={"a": 1})
    for i, text in enumerate(TRICKY):
        rt.append("s", "user" if i % 2 == 0 else "assistant", text, key=f"k{i}")
    path = tmp_path / "s.jsonl"
    rt.export("s", path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["type"] == "session" and len(lines) == 1 + len(TRICKY)
    new = rt.import_jsonl(path, session_id="copy")
    assert new == "copy"
    strip = lambda ts: [(t.turn_id, t.role, t.content, t.timestamp, t.key) for t in ts]
    assert strip(rt.history("copy")) == strip(rt.history("s"))
    assert rt.import_jsonl(rt.export("s"), session_id="copy2") == "copy2"


def test_import_takes_a_str_path_and_lines_as_the_store_does(rt, tmp_path):
    # The docstring says "a path or JSONL text" and TranscriptStore.import_jsonl reads a
    # str that is not JSON text as a path; Runtime passed it on as text ("line 1: not
    # JSON").  Lines without their newline (text.splitlines()) were joined into one.
    rt.create_session("s", metadata={"a": 1})
    for i, text in enumerate(TRICKY):
        rt.append("s", "user" if i % 2 == 0 else "assistant", text)
    path = tmp_path / "s.jsonl"
    rt.export("s", path)
    strip = lambda ts: [(t.turn_id, t.role, t.content, t.timestamp) for t in ts]
    assert rt.import_jsonl(str(path), session_id="from_str") == "from_str"
    text = rt.export("s")
    assert rt.import_jsonl(text.splitlines(), session_id="from_lines") == "from_lines"
    assert rt.import_jsonl(text.splitlines(True), session_id="from_lines_nl") == "from_lines_nl"
    for copy in ("from_str", "from_lines", "from_lines_nl"):
        assert strip(rt.history(copy)) == strip(rt.history("s"))
    for bad in (str(tmp_path / "missing.jsonl"), "nul\x00in a path", tmp_path / "nul\x00"):
        with pytest.raises(ctxrelay.errors.ImportFormatError, match="cannot read"):
            rt.import_jsonl(bad, session_id="nope")
    # Text with a line break stays text: a BOM before the header is a format error.
    with pytest.raises(ctxrelay.errors.ImportFormatError, match="line 1"):
        rt.import_jsonl("\ufeff" + text, session_id="bom")


def test_stats(rt):
    rt.create_session("s")
    rt.append("s", "user", "h\u00e9llo")
    rt.append("s", "assistant", "world")
    stats = rt.stats("s")
    assert stats.turn_count == 2
    assert stats.bytes == len("h\u00e9llo".encode()) + len(b"world")
    assert stats.tokens == sum(t.tokens for t in rt.history("s"))
    assert stats.by_role == {"user": 1, "assistant": 1}


@pytest.mark.parametrize("call, exc, fix", [
    (lambda rt: rt.turn("nope", 1), UnknownSessionError, "create"),
    (lambda rt: rt.append("nope", "user", "x"), UnknownSessionError, "create"),
    (lambda rt: rt.append("s", "robot", "x"), InvalidRoleError, "user"),
    (lambda rt: rt.append("s", "user", b"bytes"), InvalidContentError, "str"),
    (lambda rt: rt.append("s", "user", "x", metadata="[1, 2]"), InvalidMetadataError, "object"),
    (lambda rt: rt.append("s", "user", "x", metadata={"f": object()}), InvalidMetadataError, "JSON"),
    (lambda rt: rt.turn("s", 5), UnknownTurnError, "1"),
    (lambda rt: rt.create_session("s"), SessionExistsError, "s"),
    (lambda rt: rt.history("s", 0), InvalidArgumentError, ""),
    (lambda rt: rt.export("s", 5), InvalidPathError, "file path"),
    (lambda rt: rt.export("s", ["out.jsonl"]), InvalidPathError, "file path"),
])
def test_bad_input_raises_specific_errors(rt, call, exc, fix):
    rt.create_session("s")
    rt.append("s", "user", "first")
    with pytest.raises(exc) as info:
        call(rt)
    assert fix in str(info.value)
    # Nothing stored was lost or changed by the failed call.
    assert [t.content for t in rt.history("s")] == ["first"]


def test_archived_session_refuses_appends_but_reads(rt):
    rt.create_session("s")
    rt.append("s", "user", "kept")
    rt.archive_session("s")
    with pytest.raises(ArchivedSessionError):
        rt.append("s", "user", "more")
    assert rt.history("s")[0].content == "kept"
    assert rt.session("s").archived is True


def test_closed_runtime_says_so(store_dir):
    rt = Runtime(store_dir)
    rt.close()
    with pytest.raises(InvalidArgumentError, match="closed"):
        rt.sessions()


def test_an_option_too_big_for_64_bits_is_named(rt):
    """An int option that cannot cross janus is refused by its own name (the options
    cross in one binding, OptPairs, which the caller never wrote)."""
    rt.create_session("s")
    with pytest.raises(InvalidArgumentError, match=r"^output_reserve is an int of 133 bits"):
        rt.prepare_turn("s", "hi", output_reserve=10 ** 40)
    assert rt.turn_count("s") == 0


def test_an_empty_turn_key_is_refused_as_an_append_key_is(rt):
    rt.create_session("s")
    with pytest.raises(InvalidArgumentError, match="key is empty"):
        rt.append("s", "user", "x", key="")
    with pytest.raises(InvalidArgumentError, match="key is empty"):
        rt.managed_turn("s", "hello", key="")
    assert rt.turn_count("s") == 0


SID = "scr_" + "0" * 32


@pytest.mark.parametrize("call", [
    lambda rt: rt.scratch("s", SID, raw=True),
    lambda rt: rt.scratch("s", SID),
    lambda rt: rt.record_tool_output("s", "fetch", {}, b"\x89PNG"),
    lambda rt: rt.record_tool_output("s", "ls", {}, "a\nb\n"),
    lambda rt: rt.ingest("a text to ingest\nover two lines"),
    lambda rt: rt.recent("s", 2),
    lambda rt: rt.derived("s", 1),
    lambda rt: rt.retrieve("quota"),
    lambda rt: list(rt.packs("s", "x")),
    lambda rt: rt.publish_artifact("s", 1, 1, "a summary"),
    lambda rt: rt.artifacts("s"),
], ids=["scratch_raw", "scratch", "record_bytes", "record_text", "ingest", "recent",
        "derived", "retrieve", "packs", "publish_artifact", "artifacts"])
def test_every_method_of_a_closed_runtime_says_so(store_dir, call):
    # Not an AttributeError on None or "expected a store, got None": the same
    # message as every other method, which says what to do.
    with Runtime(store_dir) as rt:
        rt.create_session("s")
        rt.append("s", "user", "first")
    with pytest.raises(InvalidArgumentError, match="this Runtime is closed"):
        call(rt)


@pytest.mark.parametrize("call", [
    lambda rt: list(rt.packs("s", "a\ud800b", embedder="hashing")),
    lambda rt: list(rt.packs("s", "ab", system="\ud800", embedder="hashing")),
    lambda rt: rt.retrieve("a\ud800"),
    lambda rt: rt.retrieve("a", namespace="\ud800"),
    lambda rt: rt.retrieve("a", session_id="s\ud800", access="recent"),
    lambda rt: rt.recent("s\ud800", 1),
    lambda rt: rt.derived("s\ud800", 1),
    lambda rt: rt.ingest("a\ud800\nb"),
    lambda rt: rt.ingest("a\nb", namespace="\ud800"),
], ids=["packs", "packs_option", "retrieve", "retrieve_namespace", "retrieve_session",
        "recent", "derived", "ingest", "ingest_namespace"])
def test_a_lone_surrogate_is_refused_before_janus_by_every_method(rt, call):
    # These methods called janus without the check _call makes: janus failed with
    # SystemError or a PrologError whose str() raised again, and left a pending
    # UnicodeEncodeError that made the next, healthy call fail too.
    rt.create_session("s")
    rt.append("s", "user", "first")
    with pytest.raises(ctxrelay.CtxRelayError, match="surrogate"):
        call(rt)
    assert rt.turn_count("s") == 1 and rt.history("s")[0].content == "first"


@pytest.mark.parametrize("call, named", [
    (lambda rt: rt.append("s", "user", "a\ud800"), "content"),
    (lambda rt: rt.search("s", "a\ud800"), "query"),
    (lambda rt: rt.assemble("s", "a\ud800", embedder="hashing"), "message"),
    (lambda rt: rt.assemble("s", "a", system="\ud800", embedder="hashing"), "system"),
    (lambda rt: rt.assemble("s", "a", max_context_tokens=2 ** 64), "max_context_tokens"),
    (lambda rt: rt.retrieve("a", namespace="\ud800"), "namespace"),
], ids=["content", "query", "message", "option", "option_int", "namespace"])
def test_the_encoding_check_names_the_callers_argument(rt, call, named):
    # It named the goal's variables: "argument 'C' contains a lone surrogate",
    # "argument 'OptPairs' is an int of 65 bits".
    rt.create_session("s")
    with pytest.raises(ctxrelay.CtxRelayError) as info:
        call(rt)
    assert str(info.value).startswith(named + " ")
    assert "OptPairs" not in str(info.value) and "argument '" not in str(info.value)


@pytest.mark.parametrize("call, named", [
    (lambda rt: rt.search("s", "first", k=0), "k"),
    (lambda rt: rt.turn_for_key("s", 5), "key"),
    (lambda rt: rt.recent("s", -1), "n"),
    (lambda rt: rt.derived("s", 0), "turn_id"),
    (lambda rt: rt.derived("s", "1"), "turn_id"),
    (lambda rt: rt.fact(5), "key_or_id"),
])
def test_a_bad_count_or_id_is_named_in_the_error(rt, call, named):
    # These said "expected an int > 0, got 0" without naming the argument.
    rt.create_session("s")
    rt.append("s", "user", "first")
    with pytest.raises(InvalidArgumentError) as info:
        call(rt)
    assert str(info.value).startswith(f"{named}: ")


@pytest.mark.parametrize("call, named", [
    (lambda rt: rt.prepare_turn("new", "hi", create_session="no", embedder="hashing"),
     "create_session"),
    (lambda rt: rt.derive("s", embedder="hashing", recompute="no"), "recompute"),
    (lambda rt: rt.derive("s", embedder="hashing", progress="no"), "progress"),
    (lambda rt: rt.retrieve("first", cache="no"), "cache"),
    (lambda rt: rt.ingest("a text\nto ingest", progress="no"), "progress"),
])
def test_a_flag_must_be_a_bool_as_every_policy_flag_is(rt, call, named):
    # bool("no") is True: create_session="no" created the session, recompute="no"
    # re-derived every turn, while retrieval="no" (a policy flag) is refused.
    rt.create_session("s")
    rt.append("s", "user", "first")
    with pytest.raises(InvalidArgumentError, match=named):
        call(rt)


def test_store_path_under_a_file_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ctxrelay.errors.StoreError):
        Runtime(blocker / "store")


def test_prolog_host_sees_what_python_wrote(store_dir):
    with Runtime(store_dir) as rt:
        rt.create_session("s")
        rt.append("s", "user", "from python \u00e9\n\"quoted\"")
    # A separate swipl process (Prolog is host, Python embedded) reads it back.
    proc = run_swipl(["-g", "use_module(library(ctxrelay)), getenv('STORE', D), "
                      "store_open(D, St), turn_get(St, s, 1, T), get_dict(content, T, C), "
                      "string_length(C, L), format('~w~n', [L]), "
                      "turn_append(St, s, message(assistant, \"from prolog \\u00E9\"), Id), "
                      "format('~w~n', [Id])", "-t", "halt"],
                     env={"STORE": str(store_dir)})
    assert proc.returncode == 0, proc.stderr
    length, new_id = proc.stdout.split()
    assert int(length) == len("from python \u00e9\n\"quoted\"")
    assert new_id == "2"
    with Runtime(store_dir) as rt:
        assert rt.turn("s", 2).content == "from prolog \u00e9"


def test_plain_python_process_can_import(tmp_path):
    # `import ctxrelay` in a fresh interpreter embeds Prolog and loads the library.
    code = ("import ctxrelay, janus_swi as j; "
            "print(j.query_once('current_predicate(user:session_create/3)')['truth'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_turn_for_key(rt):
    rt.create_session("s")
    rt.append("s", "user", "a")
    tid = rt.append("s", "user", "b", key="k-b")
    assert rt.turn_for_key("s", "k-b") == tid == 2
    assert rt.turn_for_key("s", "missing") is None
