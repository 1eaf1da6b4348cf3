"""Users' pack constraints through the Python facade (the ``constraints`` keyword).

``Runtime.assemble``, ``Runtime.packs`` and ``Runtime.managed_turn`` take
``constraints=[...]`` as Prolog text or as tuples; every pack satisfies them,
the first is the optimum of the model that includes them, and bad or
unsatisfiable constraints raise specific errors that name them, storing
nothing.  The session replayed is examples/conversations/etcd_ops.jsonl (six
tool results among 75 turns).
"""
from __future__ import annotations

import json

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import InconsistentConstraintsError, InvalidConstraintError

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "conversations" / "etcd_ops.jsonl"
POLICY = dict(max_context_tokens=6000, output_reserve=500, safety_margin=64, embedder="hashing")
QUESTION = ("what did the histogram_quantile wal fsync duration query return for"
            " nvme1n1 on etcd-2.prod.internal?")


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    """One replayed session for the module: the tests only assemble, but for
    the managed turn, which runs last."""
    with Runtime(tmp_path_factory.mktemp("constraints") / "store") as runtime:
        runtime.create_session("ops")
        for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
            t = json.loads(line)
            runtime.append("ops", t["role"], t["content"], name=t.get("name"),
                           tool_call_id=t.get("tool_call_id"), metadata=t.get("metadata"))
        yield runtime


def tool_tokens(rt: Runtime, result) -> int:
    """Tokens of the packed units that show a stored tool turn."""
    roles = {t.turn_id: t.role for t in rt.history("ops")}
    return sum(u.tokens for u in result.pack
               if u.turn_ids and any(roles.get(i) == "tool" for i in u.turn_ids))


def test_a_token_cap_on_tool_output_shapes_the_pack(rt: Runtime) -> None:
    free = rt.assemble("ops", QUESTION, **POLICY)
    assert tool_tokens(rt, free) > 200          # without the rule, tool output is packed
    capped = rt.assemble("ops", QUESTION, **POLICY,
                         constraints=["tokens(role(tool)) #=< 200"])
    assert tool_tokens(rt, capped) <= 200
    assert capped.utility <= free.utility       # a constraint never buys utility
    assert capped.ledger.total <= capped.ledger.input_budget


def test_text_and_tuples_are_the_same_constraint(rt: Runtime) -> None:
    a = rt.assemble("ops", QUESTION, **POLICY, constraints=["count(role(assistant)) #=< 3"])
    b = rt.assemble("ops", QUESTION, **POLICY,
                    constraints=[("#=<", ("count", ("role", "assistant")), 3)])
    assert [u.id for u in a.pack] == [u.id for u in b.pack]
    assert a.utility == b.utility


def test_every_alternative_satisfies_them_best_first(rt: Runtime) -> None:
    packs = list(rt.packs("ops", QUESTION, limit=4, **POLICY,
                          constraints=["tokens(role(tool)) #=< 150", "count(kind(fact)) #= 0"]))
    assert len(packs) == 4
    utilities = [p.utility for p in packs]
    assert utilities == sorted(utilities, reverse=True)
    assert len({tuple((u.id, u.variant) for u in p.pack) for p in packs}) == 4
    for p in packs:
        assert tool_tokens(rt, p) <= 150


def test_a_condition_on_the_turn_intent(rt: Runtime) -> None:
    intent = rt.assemble("ops", QUESTION, **POLICY).status["intent"]
    other = "explore" if intent != "explore" else "continue"
    rule = "if(intent({}), count(role(assistant)) #=< 2)"   # the hot tail holds two
    on = rt.assemble("ops", QUESTION, **POLICY, constraints=[rule.format(intent)])
    off = rt.assemble("ops", QUESTION, **POLICY, constraints=[rule.format(other)])
    roles = {t.turn_id: t.role for t in rt.history("ops")}
    def assistants(r) -> int:
        return sum(1 for u in r.pack if u.turn_ids and roles.get(u.turn_ids[0]) == "assistant")
    assert assistants(on) <= 2 < assistants(off)


def test_threads_are_selectable(rt: Runtime) -> None:
    def thread_of(turn: int) -> str:
        return (rt.derived("ops", turn) or {}).get("thread_id", "")
    r = rt.assemble("ops", QUESTION, **POLICY)
    n = rt.turn_count("ops")
    tail = {thread_of(t) for t in range(n - 5, n + 1)}      # the mandatory hot tail's
    shown: dict[str, int] = {}
    for u in r.pack:
        for t in u.turn_ids:
            if thread_of(t) and thread_of(t) not in tail:
                shown[thread_of(t)] = shown.get(thread_of(t), 0) + 1
    assert shown, "the pack shows no turn of an older thread"
    old = max(shown, key=shown.get)
    without = rt.assemble("ops", QUESTION, **POLICY,
                          constraints=[f"count(thread('{old}')) #= 0"])
    assert not [u.id for u in without.pack if any(thread_of(t) == old for t in u.turn_ids)]


@pytest.mark.parametrize("bad, culprit", [
    ("tokens(role(tool) #=< 100", "tokens(role(tool) #=< 100"),
    ("count(all) * tokens(all) #=< 5", "count(all)*tokens(all)"),
    ("size(all) #=< 5", "size(all)"),
    (("#=<", ("count", ("kind", "turn"))), "#=<"),
])
def test_a_malformed_constraint_is_named(rt: Runtime, bad, culprit) -> None:
    with pytest.raises(InvalidConstraintError) as e:
        rt.assemble("ops", QUESTION, **POLICY, constraints=[bad])
    assert culprit in str(e.value) and e.value.constraint


@pytest.mark.parametrize("goal", ["no_such_rule(1)", ("no_such_rule", 1), "no_such_rule"])
def test_a_goal_without_its_predicate_says_which_predicate_is_missing(rt: Runtime, goal) -> None:
    # As text with arguments, a goal passed the policy check and then failed in the
    # packer with "Domain error: `pack_constraint' expected, found `'no_such_rule(1)''",
    # where the tuple or a bare name says which predicate is missing.
    with pytest.raises(InvalidConstraintError, match="no predicate .*no_such_rule/"):
        rt.assemble("ops", QUESTION, **POLICY, constraints=[goal])


def test_a_goal_with_arguments_as_text_is_called_with_the_model(rt: Runtime) -> None:
    # Text such as "my_rule(300)" never reached the goal: pack/5 refused it (above).
    import janus_swi as janus
    janus.consult("text_goal_rule", "text_goal_cap(Cap, Model) :- "
                  "get_dict(budget, Model, B), nb_setval(text_goal_cap, Cap-B).")
    r = rt.assemble("ops", QUESTION, **POLICY, constraints=["text_goal_cap(300)"])
    got = janus.query_once("nb_getval(text_goal_cap, C-B)")
    assert got["C"] == 300 and 0 < got["B"] <= r.ledger.input_budget


@pytest.mark.parametrize("bad", ["count(all) #=< 1", 42, [42], [("",)], [()]])
def test_the_keyword_wants_a_list_of_text_or_tuples(rt: Runtime, bad) -> None:
    with pytest.raises(InvalidConstraintError):
        rt.assemble("ops", QUESTION, **POLICY, constraints=bad)


def test_unsatisfiable_constraints_name_themselves_and_store_nothing(rt: Runtime) -> None:
    before = rt.turn_count("ops")
    with pytest.raises(InconsistentConstraintsError) as e:
        rt.managed_turn("ops", QUESTION, **POLICY, key="k1",
                        constraints=["count(role(assistant)) #=< 40",
                                     "tokens(kind(message)) #=< 3"])
    assert e.value.constraints == ["tokens(kind(message)) #=< 3"]    # minimal, as written
    assert e.value.mandatory == ["message"]
    assert "tokens(kind(message)) #=< 3" in str(e.value)
    assert rt.turn_count("ops") == before


def test_a_managed_turn_keeps_to_them(rt: Runtime) -> None:
    r = rt.managed_turn("ops", QUESTION, **POLICY, constraints=["tokens(role(tool)) #=< 100"])
    assert r.reply
    assert tool_tokens(rt, r) <= 100
