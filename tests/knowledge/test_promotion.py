"""Promotion into the CKF: tool results, named values, facts reused across threads."""
from __future__ import annotations

import json

import pytest

from ctxrelay.bridge import stores as bridge
from ctxrelay.knowledge.fabric import FactStore
from ctxrelay.text.embed import get_embedder
from ctxrelay.errors import InvalidArgumentError
from ctxrelay.knowledge.promotion import (name_key, parse_namings, promote_after_turn,
                                promote_scratch_entry, scratch_mentions, specifics,
                                statements)
from ctxrelay.storage import open_stores
from ctxrelay.storage.lmdb.scratch import open_scratch_store


@pytest.fixture
def env(tmp_path):
    """A store with the CKF, scratch buffer and turn log (hashing embedder)."""
    facts = FactStore(tmp_path / "store" / "ckf", embedder="hashing", recluster_every=None)
    # References are counted here, not by the scratch store's auto-pin.
    scratch = open_scratch_store(tmp_path / "store" / "scratch", auto_pin_after=None)
    st = open_stores(tmp_path / "store")           # its parts: the ones opened above
    st.transcript.create_session("s")
    yield st, facts, scratch
    st.close()


def promote(st, facts, scratch, turn_id, **kw):
    return promote_after_turn(st, "s", turn_id, facts=facts, scratch=scratch,
                              embedder="hashing", **kw)


def tool(st, raw, *, freshness="STABLE", session="s", name="calc", args=None):
    return bridge.record_tool_output(st, session, name, args or {"expr": "1200*3"}, raw,
                                     {"freshness": freshness})


def turnlog(st):
    return st.turnlog


def fact_count(facts):
    return sum(1 for _ in facts.backend.scan("default"))


# -- rule (a): tool results ------------------------------------------------------

def test_pinned_stable_result_is_promoted_with_its_provenance(env):
    st, facts, scratch = env
    st.transcript.append("s", "user", "What did etcd hosting cost in Q3?")
    rec = tool(st, json.dumps({"total": 3600, "currency": "USD"}))
    entry = scratch.pin("s", rec["scratch_id"])
    out = promote(st, facts, scratch, rec["tool_turn"])
    assert [p["rule"] for p in out] == ["tool_result"]
    assert out[0]["source"] == out[0]["scratch_id"] == rec["scratch_id"]
    fact = facts.fact(f"scratch:{rec['scratch_id']}")
    assert fact.fact_id == out[0]["fact_id"]
    assert "total=3600" in fact.content and fact.source_id == rec["scratch_id"]
    assert fact.metadata["provenance_hash"] == entry.provenance_hash
    assert fact.metadata["promoted_by"] == "tool_result"


def test_unpinned_result_needs_two_referencing_turns(env):
    st, facts, scratch = env
    rec = tool(st, "3600")
    sid = rec["scratch_id"]
    first = st.transcript.append("s", "user", f"Use {sid} for the forecast.")
    assert promote(st, facts, scratch, first) == []          # one reference is not enough
    assert scratch.get("s", sid).referenced_by == (first,)
    again = st.transcript.append("s", "user", f"And {sid} again for the report.")
    out = promote(st, facts, scratch, again)
    assert [(p["rule"], p["scratch_id"]) for p in out] == [("tool_result", sid)]
    assert scratch.get("s", sid).referenced_by == (first, again)


def test_turn_log_references_and_resolved_turns_count_as_references(env):
    st, facts, scratch = env
    rec = tool(st, "3600")
    a = st.transcript.append("s", "user", "Filter those results to last month.")
    assert promote(st, facts, scratch, a, references=[rec["tool_turn"]]) == []
    b = st.transcript.append("s", "user", "Now chart those results.")
    log = turnlog(st)
    log.sync(st.transcript, "s", get_embedder("hashing"))
    log.set_references("s", b, [rec["call_turn"]])
    out = promote(st, facts, scratch, b)
    assert [p["scratch_id"] for p in out] == [rec["scratch_id"]]


def test_the_tool_turns_own_text_is_not_a_reference(env):
    st, facts, scratch = env
    rec = tool(st, "3600")                    # the summary names its own scratch id
    assert promote(st, facts, scratch, rec["call_turn"], since=1) == []
    assert promote(st, facts, scratch, rec["tool_turn"], since=rec["call_turn"]) == []
    assert scratch.get("s", rec["scratch_id"]).referenced_by == ()


@pytest.mark.parametrize("freshness", ["VOLATILE", "REALTIME"])
def test_volatile_readings_are_never_promoted(env, freshness):
    st, facts, scratch = env
    rec = tool(st, "cpu load 93%", freshness=freshness, name="metrics")
    scratch.pin("s", rec["scratch_id"])
    a = st.transcript.append("s", "user", f"Keep {rec['scratch_id']} in mind.")
    b = st.transcript.append("s", "user", f"Compare with {rec['scratch_id']}. Call that the load figure.")
    assert promote(st, facts, scratch, b, since=rec["tool_turn"]) == []
    assert a < b and fact_count(facts) == 0
    assert promote_scratch_entry(st, "s", rec["scratch_id"], facts=facts, scratch=scratch) == []


def test_promoting_twice_adds_no_fact(env):
    st, facts, scratch = env
    rec = tool(st, "3600")
    scratch.pin("s", rec["scratch_id"])
    st.transcript.append("s", "assistant", "The Q3 total is $3,600.")
    last = st.transcript.append("s", "user", "Call that the budget figure.")
    first = promote(st, facts, scratch, last, since=1)
    assert sorted(p["rule"] for p in first) == ["named", "tool_result"]
    n = fact_count(facts)
    assert promote(st, facts, scratch, last, since=1) == []
    assert promote_scratch_entry(st, "s", rec["scratch_id"], facts=facts, scratch=scratch) == []
    assert fact_count(facts) == n == 2


def test_another_sessions_scratch_id_is_not_a_reference(env):
    st, facts, scratch = env
    rec = tool(st, "3600")
    st.transcript.create_session("other")
    sid = rec["scratch_id"]
    t1 = st.transcript.append("other", "user", f"Show me {sid}.")
    t2 = st.transcript.append("other", "user", f"And {sid} once more.")
    out = promote_after_turn(st, "other", t2, since=t1, facts=facts, scratch=scratch,
                             embedder="hashing")
    assert out == [] and scratch.get("s", sid).referenced_by == ()


# -- rule (b): named values ----------------------------------------------------------

def test_a_named_value_becomes_a_fact_found_by_its_key(env):
    st, facts, scratch = env
    st.transcript.append("s", "user", "What did etcd hosting cost in Q3?")
    answer = st.transcript.append("s", "assistant", "We checked the invoices. The Q3 total for etcd "
                                         "hosting is $3,600.")
    naming = st.transcript.append("s", "user", "Call that the budget figure.")
    out = promote(st, facts, scratch, naming)
    assert [(p["rule"], p["key"], p["turn_id"]) for p in out] == \
        [("named", "budget_figure", answer)]
    fact = facts.lookup_key(name_key("the budget figure"))
    assert fact is not None and fact.content == "budget figure: The Q3 total for etcd hosting " \
                                                "is $3,600."
    assert fact.source_id == f"turn:{answer}"


def test_naming_a_tool_result_keeps_its_scratch_provenance(env):
    st, facts, scratch = env
    rec = tool(st, json.dumps({"total": 3600}))
    naming = st.transcript.append("s", "user", "name that budget_q3")
    out = promote(st, facts, scratch, naming)
    assert [(p["rule"], p["source"]) for p in out] == [("named", rec["scratch_id"])]
    fact = facts.fact("budget_q3")
    assert "total=3600" in fact.content and "[tool output" not in fact.content
    assert fact.metadata["provenance_hash"] == scratch.get("s", rec["scratch_id"]).sha256
    assert scratch.get("s", rec["scratch_id"]).referenced_by == (naming,)


def test_renaming_a_key_with_a_new_value_updates_the_same_fact(env):
    st, facts, scratch = env
    one = st.transcript.append("s", "user", "Let's call 4.2M the Q3 revenue.")
    first = promote(st, facts, scratch, one)
    assert [(p["key"], p["content"]) for p in first] == [("q3_revenue", "Q3 revenue: 4.2M")]
    two = st.transcript.append("s", "user", "Correction: let's call 4.5M the Q3 revenue.")
    second = promote(st, facts, scratch, two)
    assert second[0]["updated"] and second[0]["fact_id"] == first[0]["fact_id"]
    assert facts.fact("q3_revenue").content == "Q3 revenue: 4.5M"
    assert fact_count(facts) == 1


def test_a_relayed_volatile_reading_is_not_named(env):
    st, facts, scratch = env
    tool(st, "load average 7.9", freshness="VOLATILE", name="uptime")
    st.transcript.append("s", "assistant", "The load average is 7.9 right now.")
    naming = st.transcript.append("s", "user", "Call that the load figure.")
    assert promote(st, facts, scratch, naming) == []
    assert facts.lookup_key("load_figure") is None


def test_assistant_turns_cannot_name_values(env):
    st, facts, scratch = env
    st.transcript.append("s", "user", "Our budget is $12,000 per quarter.")
    turn = st.transcript.append("s", "assistant", "Let's call that the budget figure.")
    assert promote(st, facts, scratch, turn) == []


@pytest.mark.parametrize("text, expected", [
    ("Call that the budget figure.", [("budget figure", "budget_figure", None)]),
    ("let's call 4.2M the Q3 revenue", [("Q3 revenue", "q3_revenue", "4.2M")]),
    ("name that budget_q3", [("budget_q3", "budget_q3", None)]),
    ("Save that as the build matrix, please.", [("build matrix", "build_matrix", None)]),
    ('call it "launch plan" from now on', [("launch plan", "launch_plan", None)]),
    ("Can you call that function again?", []),
    ("Let's call it a day.", []),
    ("Don't call that the budget figure.", []),
    ("We should call that out in the review.", []),
    ("Please name the files after the date.", []),
    ("let's call the API and the database", []),
])
def test_naming_phrases(text, expected):
    assert [(n.name, n.key, n.value) for n in parse_namings(text)] == expected


def test_name_key_rejects_a_name_without_words():
    assert name_key("The Budget Figure") == "budget_figure"
    with pytest.raises(InvalidArgumentError, match="no word"):
        name_key("  ...  ")


# -- rule (c): facts reused across threads -------------------------------------------

ETCD_FACT = "Our etcd cluster runs on three nodes in eu-west-1 with 8 GiB of RAM each."
BACKUP_TURNS = [
    ("user", "Which restic retention policy fits nightly Postgres database backups to the "
             "S3 bucket?"),
    ("assistant", "Keep 7 daily, 4 weekly and 12 monthly restic snapshots of the Postgres "
                  "dumps in the S3 bucket."),
]


def seed_two_threads(st):
    st.transcript.append("s", "user", "Let me describe the etcd cluster setup for the control plane.")
    st.transcript.append("s", "user", ETCD_FACT)
    st.transcript.append("s", "assistant", "Understood: three etcd members in eu-west-1.")
    for role, text in BACKUP_TURNS:
        st.transcript.append("s", role, text)


def thread_of(st, turn_id):
    return turnlog(st).derived("s", turn_id).thread_id


def test_a_statement_reused_in_another_thread_is_promoted(env):
    st, facts, scratch = env
    seed_two_threads(st)
    st.transcript.append("s", "user", "Which region should the restic S3 bucket for the Postgres dumps "
                           "live in?")
    # The answer stays in the backup thread, and restates the etcd fact there.
    reuse = st.transcript.append("s", "assistant", "Put it beside the cluster: our etcd cluster runs on "
                                        "three nodes in eu-west-1 with 8 GiB of RAM each, so an "
                                        "eu-west-1 bucket keeps restores fast.")
    out = promote(st, facts, scratch, reuse, since=reuse - 1)
    assert thread_of(st, reuse) != thread_of(st, 2)          # the premise: two threads
    assert [(p["rule"], p["turn_id"], p["content"]) for p in out] == \
        [("cross_thread", 2, ETCD_FACT)]
    assert promote(st, facts, scratch, reuse, since=reuse - 1) == []     # idempotent
    fact = facts.fact(out[0]["fact_id"])
    assert sorted(fact.metadata["threads"]) == sorted({thread_of(st, 2), thread_of(st, reuse)})


def test_a_restatement_that_joins_the_origin_thread_is_not_cross_thread(env):
    st, facts, scratch = env
    seed_two_threads(st)
    again = st.transcript.append("s", "user", "For the restic Postgres backups, remember our etcd cluster "
                                   "runs on three nodes in eu-west-1 with 8 GiB of RAM each.")
    assert promote(st, facts, scratch, again) == []
    assert thread_of(st, again) == thread_of(st, 2)


def test_a_statement_repeated_in_its_own_thread_is_not_promoted(env):
    st, facts, scratch = env
    st.transcript.append("s", "user", "Let me describe the etcd cluster setup for the control plane.")
    st.transcript.append("s", "user", ETCD_FACT)
    again = st.transcript.append("s", "user", "Again: our etcd cluster runs on three nodes in eu-west-1 "
                                   "with 8 GiB of RAM each, for the control plane.")
    assert promote(st, facts, scratch, again, since=1) == []
    assert thread_of(st, again) == thread_of(st, 2)


def test_another_thread_without_the_statement_promotes_nothing(env):
    st, facts, scratch = env
    seed_two_threads(st)
    other = st.transcript.append("s", "user", "Should restic also back up the Postgres WAL archive to "
                                   "the S3 bucket?")
    assert promote(st, facts, scratch, other) == []
    assert thread_of(st, other) != thread_of(st, 2)


def test_the_same_phrasing_with_other_values_is_not_a_reused_fact(env):
    st, facts, scratch = env
    seed_two_threads(st)
    st.transcript.append("s", "user", "Which region should the restic S3 bucket for the Postgres dumps "
                           "live in?")
    other = st.transcript.append("s", "assistant", "Our etcd cluster runs on five nodes in us-east-2 "
                                        "with 32 GiB of RAM each, so pick us-east-2.")
    assert promote(st, facts, scratch, other, since=other - 1) == []
    assert thread_of(st, other) != thread_of(st, 2)
    assert specifics(ETCD_FACT) >= {"8", "eu-west-1"}


def test_statements_and_mentions():
    assert statements("Is it up? Our etcd cluster runs three nodes. Ok.") == \
        ["Our etcd cluster runs three nodes."]
    sid = "scr_" + "ab" * 16
    assert scratch_mentions(f"see call_{sid} and {sid}; scr_12") == [sid]


# -- bad input ------------------------------------------------------------------------

def test_bad_arguments_say_how_to_fix_them(env):
    st, facts, scratch = env
    st.transcript.append("s", "user", "hello there")
    with pytest.raises(InvalidArgumentError, match=r"turn_id must be an int in 1\.\.1"):
        promote(st, facts, scratch, 5)
    with pytest.raises(InvalidArgumentError, match="since must be"):
        promote(st, facts, scratch, 1, since=2)
    with pytest.raises(InvalidArgumentError, match="unknown promotion rule"):
        promote(st, facts, scratch, 1, rules=["guess"])


def test_a_named_value_is_found_through_the_public_runtime(tmp_path):
    from ctxrelay import Runtime
    store_dir = tmp_path / "rt"
    facts = FactStore.open(store_dir / "ckf", embedder="hashing")
    try:
        with Runtime(store_dir) as rt:
            rt.create_session("s")
            rt.append("s", "assistant", "The p99 latency target we agreed on is 180 ms.")
            naming = rt.append("s", "user", "Call that the latency target.")
            with open_stores(store_dir) as stores:            # the Runtime's store
                out = promote_after_turn(stores, "s", naming, embedder="hashing")
            assert [p["key"] for p in out] == ["latency_target"]
            found = rt.fact("latency_target")
            assert found["fact_id"] == out[0]["fact_id"] and "180 ms" in found["content"]
    finally:
        facts.close()


# -- one rule for every entry point ----------------------------------------------------

def test_the_python_entry_obeys_the_prolog_rule(env):
    """promote_after_turn decides through ctxrelay_promotion: a class a user
    declares volatile there is not promoted from Python either."""
    from ctxrelay.bridge import engine
    st, facts, scratch = env
    rec = tool(st, "3600")
    scratch.pin("s", rec["scratch_id"])
    engine.once("assertz(ctxrelay_promotion:never_promoted('STABLE'))")
    try:
        assert promote(st, facts, scratch, rec["tool_turn"]) == []
    finally:
        engine.once("retract(ctxrelay_promotion:never_promoted('STABLE'))")
    assert [p["rule"] for p in promote(st, facts, scratch, rec["tool_turn"])] == ["tool_result"]


def test_pinning_through_the_runtime_promotes_a_durable_result(tmp_path):
    from ctxrelay import Runtime
    from ctxrelay.errors import CtxRelayError
    FactStore(tmp_path / "rt" / "ckf", embedder="hashing").close()
    with Runtime(tmp_path / "rt") as rt:
        rt.create_session("s")
        stable = rt.record_tool_output("s", "calc", {"expr": "1200*3"}, "3600",
                                       freshness="STABLE")
        reading = rt.record_tool_output("s", "metrics", {"q": "cpu"}, "93%")
        rt.pin("s", stable)
        rt.pin("s", reading)
        assert "3600" in rt.fact(f"scratch:{stable}")["content"]
        with pytest.raises(CtxRelayError):
            rt.fact(f"scratch:{reading}")        # a volatile reading, pinned or not
