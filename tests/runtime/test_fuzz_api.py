"""Bad input gets a specific error or a defined result, never a crash or a damaged store.

Hypothesis drives the public Python API (append, search, assemble, context,
record_tool_output, add_fact, facts, scratch) with arbitrary Unicode (lone
surrogates, NUL, RTL marks), malformed metadata, odd budgets and options,
malformed tool outputs and adversarial references; a table drives the
Prolog predicates with wrong types, unbound arguments, non-lists and unknown
options, which must raise ISO error terms.  Every test ends by re-reading
the whole store and comparing its derived records with its turns.
"""
from __future__ import annotations

import json
import unicodedata

import janus_swi as janus
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay import ContextOverflowError, Runtime
from ctxrelay.errors import (TurnTooLargeError, CtxRelayError, InvalidArgumentError, InvalidContentError,
                             InvalidMetadataError, InvalidRoleError, UnknownSessionError)
from ctxrelay.storage.lmdb.transcript import close_all, open_store

FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
POLICY = dict(embedder="hashing")

# Every code point but lone surrogates (those get their own tests below: janus
# cannot carry them), plus the ones that tend to break things.
ANY_CHAR = st.characters(codec=None, exclude_categories=["Cs"])
TRICKY = st.sampled_from(["\x00", "\u202e", "\u200f", "\u2028", "\ufeff", "'", '"',
                          "\\", "%", "\n", "<|endoftext|>", "\U0001F600", "\U000a434e"])
TEXT = st.lists(st.one_of(ANY_CHAR, TRICKY), max_size=40).map("".join)
SURROGATE_TEXT = st.tuples(TEXT, st.sampled_from(["\ud800", "\udfff", "\udc80"]), TEXT
                           ).map("".join)


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "store"
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(path / "ckf", embedder="hashing", recluster_every=None).close()
    with Runtime(path) as runtime:
        runtime.create_session("f")
        for i in range(6):
            runtime.append("f", ("user", "assistant")[i % 2], f"turn {i} about etcd defrag")
        yield runtime
        _assert_store_intact(runtime)
    close_all()


def _assert_store_intact(rt: Runtime) -> None:
    store = open_store(rt.store_dir)
    for info in rt.sessions():
        turns = rt.history(info.session_id)
        assert [t.turn_id for t in turns] == list(range(1, info.turn_count + 1))
        report = store.check_derived(info.session_id)
        assert report.ok, report.problems


# -- the transcript ------------------------------------------------------------------------

@FUZZ
@given(content=TEXT)
def test_any_text_round_trips_through_the_runtime(rt, content):
    turn_id = rt.append("f", "user", content)
    assert rt.turn("f", turn_id).content == content


@FUZZ
@given(content=SURROGATE_TEXT)
def test_the_store_refuses_lone_surrogates_with_a_fix(rt, content):
    store = open_store(rt.store_dir)
    count = store.turn_count("f")
    with pytest.raises(InvalidContentError, match="surrogate.*errors='replace'"):
        store.append("f", "user", content)
    assert store.turn_count("f") == count


SURROGATE_PROBE = """
import sys, tempfile
from ctxrelay import Runtime
rt = Runtime(tempfile.mkdtemp(dir=sys.argv[1]))
rt.create_session("s")
for text in ("a\\udfffb", "fine"):
    try:
        rt.append("s", "user", text)
        print("stored")
    except Exception as exc:
        print(type(exc).__name__)
"""


def test_the_runtime_refuses_lone_surrogates_and_stays_usable(tmp_path):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", SURROGATE_PROBE, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["InvalidContentError", "stored"], done.stdout + done.stderr


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8)


@FUZZ
@given(metadata=st.one_of(JSONISH, TEXT, st.dictionaries(st.integers(), JSONISH, max_size=2)))
def test_metadata_round_trips_or_raises_invalid_metadata(rt, metadata):
    store = open_store(rt.store_dir)          # the Python store API (the Runtime: below)
    try:
        turn_id = store.append("f", "tool", "metadata probe", metadata=metadata, name="probe")
    except (InvalidMetadataError, InvalidArgumentError) as exc:
        assert "metadata" in str(exc)
        return
    stored = store.turn("f", turn_id).metadata
    expected = {} if metadata is None else (
        json.loads(metadata) if isinstance(metadata, str) else metadata)
    assert stored == expected


def test_metadata_keys_with_nul_round_trip_through_the_runtime(rt):
    turn_id = rt.append("f", "user", "x", metadata={"a\x00b": 1, "c": {"\x00": 2}})
    assert rt.turn("f", turn_id).metadata == {"a\x00b": 1, "c": {"\x00": 2}}


@FUZZ
@given(role=st.one_of(TEXT, st.sampled_from(["USER", "system ", "function"])))
def test_unknown_roles_are_refused(rt, role):
    if role in ("system", "user", "assistant", "tool"):
        return
    with pytest.raises((InvalidRoleError, InvalidArgumentError, InvalidContentError)):
        rt.append("f", role, "x")


@FUZZ
@given(query=TEXT, k=st.one_of(st.integers(-5, 3), st.just(10**9)))
def test_search_takes_any_query_and_checks_k(rt, query, k):
    if k < 1:
        with pytest.raises(CtxRelayError):
            rt.search("f", query, k=k)
        return
    hits = rt.search("f", query, k=k)
    assert len(hits) <= k and all(h.session_id == "f" for h in hits)


def test_a_10_mb_message_is_refused_and_a_large_stored_one_enters_as_an_excerpt(rt):
    big = ("lorem ipsum dolor sit amet " * 400_000)[:10 * 1024 * 1024]
    rt.create_session("large")
    with pytest.raises(TurnTooLargeError, match="max_turn_bytes"):
        rt.append("large", "user", big)                  # over the default 1 MiB
    turn_id = rt.append("large", "user", big[:200_000])
    assert rt.turn("large", turn_id).content == big[:200_000]
    assert rt.search("large", "lorem")[0].turn_id == turn_id
    # Too large for the budget: offered as a bounded excerpt, not an overflow.
    r = rt.assemble("large", "and?", max_context_tokens=8000, output_reserve=500, **POLICY)
    assert r.ledger.excerpts == [f"t{turn_id}"] and r.ledger.total <= r.ledger.input_budget


# -- assembly: budgets, options, references -------------------------------------------------

@FUZZ
@given(cap=st.one_of(st.integers(-10, 100), st.integers(100, 5000), st.just(10**12)),
       reserve=st.integers(-5, 3000), margin=st.integers(-5, 500),
       message=st.one_of(TEXT, st.sampled_from([
           "the 9999th option", "what did you say in turn 99999?", "the third one",
           "go back to the previous one", "that", "[managed_cold_history_boundary]"])))
def test_the_hard_cap_holds_under_every_budget(rt, cap, reserve, margin, message):
    try:
        r = rt.assemble("f", message, max_context_tokens=cap, output_reserve=reserve,
                        safety_margin=margin, **POLICY)
    except ContextOverflowError:
        return
    except (InvalidArgumentError, InvalidContentError) as exc:
        assert cap <= 0 or reserve < 0 or margin < 0 or cap - reserve - margin <= 0 \
            or _has_surrogate(message), exc
        return
    assert r.ledger.effective_cap <= cap
    assert r.ledger.total <= r.ledger.input_budget <= r.ledger.effective_cap
    assert r.ledger.observed_total <= r.ledger.input_budget


@FUZZ
@given(name=st.text(min_size=1, max_size=12).filter(lambda n: n not in (
    "max_context_tokens", "provider_context_tokens", "output_reserve", "safety_margin",
    "min_recent_turns", "cold_history_boundary", "model", "half_life", "max_retrieved",
    "retrieval", "warm", "system", "provider", "provider_options", "time_limit",
    "threads", "embedder")))
def test_unknown_policy_options_are_named_in_the_error(rt, name):
    with pytest.raises(InvalidArgumentError, match="unknown policy option"):
        rt.assemble("f", "hi", **{name: 1})


@FUZZ
@given(operation=st.one_of(TEXT, st.sampled_from([
    "slice(-1, 5)", "slice(1, -5)", "slice(0, 0)", "peek(item(9999))", "peek(item(-1))",
    "search(\"etcd\")", "search(42)", "slice(a, b)", "'), halt. %", "peek(_)", "foo(bar)",
    "slice(1, 100000000)"])))
def test_context_operations_give_a_result_or_a_specific_error(rt, operation):
    try:
        result = rt.context("f", operation)
    except CtxRelayError as exc:
        assert str(exc)
        return
    assert result is not None


def test_adversarial_references_resolve_to_nothing_instead_of_failing(rt):
    for message in ("the 9999th option", "turn 99999", "the -3rd one", "option 0"):
        r = rt.managed_turn("f", message, **POLICY)
        assert r.status["references"] == 0
        assert r.ledger.total <= r.ledger.input_budget


# -- tool outputs, scratch, facts --------------------------------------------------------------

RAW = st.one_of(
    TEXT, st.binary(max_size=300),
    st.sampled_from(['{"rows": [1, 2, 3', '[{"a": 1}, {"a": ', '{"a": "\\ud800"}',
                     "\x00\x01\x02binary\xff", "id,name\n1,\"unterminated\n2,x"]))


@FUZZ
@given(raw=RAW, args=st.dictionaries(st.text(st.characters(max_codepoint=0x7f), max_size=5),
                                     st.integers(), max_size=2))
def test_malformed_tool_outputs_are_kept_byte_for_byte(rt, raw, args):
    try:
        sid = rt.record_tool_output("f", "probe", args, raw)
    except (InvalidContentError, InvalidArgumentError) as exc:
        assert isinstance(raw, str) and _has_surrogate(raw), exc
        return
    assert rt.scratch("f", sid, raw=True) == raw
    entry = rt.scratch("f", sid)
    assert entry["scratch_id"] == sid and entry["tool_name"] == "probe"
    assert len(entry["summary"]) < 4 * 256 * 4 + 200         # a bounded summary only


@pytest.mark.parametrize("which", ["metadata", "args"])
def test_latin1_dict_keys_cross_janus(rt, which):
    if which == "metadata":
        turn_id = rt.append("f", "user", "x", metadata={"café": 1})
        assert rt.turn("f", turn_id).metadata == {"café": 1}
    else:
        sid = rt.record_tool_output("f", "t", {"café": 1}, "x")
        assert rt.scratch("f", sid)["args"] == {"café": 1}


@FUZZ
@given(guess=st.one_of(TEXT, st.sampled_from([
    "../../../etc/passwd", "scr_" + "0" * 32, "scr_" + "../" * 10, "/etc/passwd",
    "scr_" + "A" * 32, "scr_" + "0" * 31 + "\x00", "..", "."])))
def test_scratch_lookups_by_guessed_ids_never_leak(rt, guess):
    with pytest.raises(CtxRelayError) as info:
        rt.scratch("f", guess, raw=True)
    assert "root:" not in str(info.value)


@FUZZ
@given(content=TEXT, importance=st.one_of(st.none(), st.floats(-2, 2), st.just(float("nan"))),
       k=st.integers(-3, 5))
def test_facts_take_any_text_or_refuse_it(rt, content, importance, k):
    try:
        fid = rt.add_fact(content, importance=importance, namespace="fuzz")
    except (InvalidArgumentError, InvalidContentError, InvalidMetadataError) as exc:
        assert str(exc)
    else:   # facts are stored NFC-normalised and stripped (ckf._check_content)
        assert rt.fact(fid, namespace="fuzz")["content"] == \
            unicodedata.normalize("NFC", content).strip()
    try:
        hits = rt.facts(content or "x", k=k, namespace="fuzz")
    except (InvalidArgumentError, InvalidContentError) as exc:
        assert k < 1 or _has_surrogate(content), exc
    else:
        assert len(hits) <= max(k, 0)


def test_unknown_sessions_are_reported_by_every_entry_point(rt):
    for call in (lambda: rt.append("ghost", "user", "x"), lambda: rt.search("ghost", "x"),
                 lambda: rt.assemble("ghost", "x", **POLICY),
                 lambda: rt.context("ghost", "slice(1, 2)"),
                 lambda: rt.record_tool_output("ghost", "t", {}, "x")):
        with pytest.raises(UnknownSessionError, match="ghost"):
            call()


# -- Prolog predicates: ISO error terms ----------------------------------------------------------

def _prolog_error(goal: str, rt: Runtime) -> str:
    """The formal part of the error Goal raises, as text; 'no error' if none."""
    result = janus.query_once(
        f"catch(({goal}), error(_F, _), true), "
        "( var(_F) -> R = \"no error\" ; term_string(_F, R) )",
        {"St": rt._store})
    return result["R"]


@pytest.mark.parametrize("goal, formal", [
    ("ctxrelay:turn_append(St, _S, message(user, \"x\"), _)", "instantiation_error"),
    ("ctxrelay:turn_append(St, 42, message(user, \"x\"), _)", "type_error("),
    ("ctxrelay:turn_append(St, \"f\", message(boss, \"x\"), _)", "domain_error("),
    ("ctxrelay:turn_append(St, \"f\", message(user, _X), _)", "instantiation_error"),
    ("ctxrelay:turn_append(St, \"f\", message(user, \"x\"), _, notalist)", "type_error(list"),
    ("ctxrelay:transcript_history(St, \"f\", nonsense, _)", "domain_error("),
    ("ctxrelay:transcript_history(St, \"f\", 1-x, _)", "type_error("),
    ("ctxrelay:transcript_search(St, \"f\", \"etcd\", _, [k(-1)])", "error("),
    ("ctxrelay:transcript_search(St, \"f\", _Q, _)", "instantiation_error"),
    ("ctxrelay:context(session(\"f\"), bogus(1), _, [store(St)])", "domain_error("),
    ("ctxrelay:context(session(\"f\"), _Op, _, [store(St)])", "instantiation_error"),
    ("ctxrelay:assemble(\"f\", 123, _, [store(St), embedder(hashing)])", "type_error("),
    ("ctxrelay:assemble(\"f\", \"x\", _, notalist)", "type_error(list"),
    ("ctxrelay:assemble(\"f\", \"x\", _, [store(St), bogus(1)])", "domain_error(policy_option"),
    ("ctxrelay:assemble(\"f\", \"x\", _, [store(St), max_context_tokens(-5)])", "error("),
    ("ctxrelay:managed_turn(_S, \"x\", _, [store(St)])", "instantiation_error"),
    ("ctxrelay:managed_turn(\"f\", \"x\", _, [store(St), max_context_tokens(abc)])", "error("),
    ("ctxrelay:fact_add(St, _C, _, [])", "instantiation_error"),
    ("ctxrelay:facts_search(St, \"x\", _, [k(foo)])", "type_error("),
    ("ctxrelay:scratch_get(St, \"f\", \"../../etc/passwd\", _)", "error("),
])
def test_prolog_predicates_raise_iso_error_terms(rt, goal, formal):
    found = _prolog_error(goal, rt)
    assert found.startswith(formal) or (formal == "error(" and found != "no error"), found
