"""Tier P (CKF facts) in the pack and the blend's shares of the budget."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime

POLICY = dict(max_context_tokens=900, output_reserve=0, safety_margin=0, min_recent_turns=2,
              embedder="hashing")
FACTS = [f"Deployment note {i}: the etcd cluster {i} keeps its quota at {i + 2} GiB "
         f"and backs up to bucket ops-{i}." for i in range(30)]


@pytest.fixture
def rt(tmp_path: Path):
    with Runtime(tmp_path / "store") as runtime:
        runtime.create_session("s")
        for i in range(40):
            role = "user" if i % 2 == 0 else "assistant"
            runtime.append("s", role, f"turn {i}: we compared sourdough recipes and oven "
                                      f"temperatures, batch {i}")
        yield runtime


def _hashing_ckf(tmp_path: Path) -> None:
    """Build the store's CKF with the hashing embedder (no model load in tests)."""
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(tmp_path / "store" / "ckf", embedder="hashing").close()


@pytest.fixture
def kn(rt, tmp_path: Path):
    _hashing_ckf(tmp_path)
    return rt


def _fact_units(result):
    return [u for u in result.pack if u.kind == "fact"]


def test_facts_are_packed_as_labelled_knowledge(kn):
    rt = kn
    rt.add_fact("The etcd quota on production is 8 GiB.", key="etcd-quota", source="ops-notes")
    r = rt.assemble("s", "what is the etcd quota on production?", **POLICY)
    facts = _fact_units(r)
    assert facts, r.pack
    knowledge = [m for m in r.messages if m.get("name") == "knowledge"]
    assert knowledge and all(m["role"] == "user" for m in knowledge)
    assert "8 GiB" in knowledge[0]["content"] and "ops-notes" in knowledge[0]["content"]
    assert r.ledger.stage("knowledge")["units"] == len(facts)
    assert r.status["knowledge"]["facts"] >= 1


def test_each_tier_stays_within_its_share(kn):
    rt = kn
    for text in FACTS:
        rt.add_fact(text, source="notes")
    r = rt.assemble("s", "which etcd quota and backup bucket does cluster 7 use?", **POLICY)
    tiers = r.ledger.tiers
    assert set(tiers) == {"p", "c", "e"}
    assert sum(t["share"] for t in tiers.values()) <= r.ledger.input_budget
    used_p = sum(u.tokens for u in _fact_units(r))
    assert 0 < used_p <= tiers["p"]["share"]
    assert tiers["p"]["demand"] > tiers["p"]["share"]       # more facts than the share holds


def test_intent_blend_moves_the_budget_between_tiers(kn):
    rt = kn
    for text in FACTS:
        rt.add_fact(text, source="notes")
    explore = rt.assemble("s", "which etcd quota and backup bucket does cluster 7 use?", **POLICY)
    assert explore.headers["CRP-Context-Turn-Intent"] == "EXPLORE"
    clarify = rt.assemble("s", "what do you mean by that?", **POLICY)
    assert clarify.headers["CRP-Context-Turn-Intent"] == "CLARIFY"
    assert clarify.ledger.tiers["p"]["share"] < explore.ledger.tiers["p"]["share"]
    assert sum(u.tokens for u in _fact_units(clarify)) <= clarify.ledger.tiers["p"]["share"]


def test_without_knowledge_the_share_flows_to_the_conversation(rt, tmp_path):
    r = rt.assemble("s", "which etcd quota and backup bucket does cluster 7 use?", **POLICY)
    assert not (tmp_path / "store" / "ckf").exists()     # nothing opened or created
    tiers = r.ledger.tiers
    assert tiers["p"]["share"] == 0 and tiers["e"]["share"] == 0
    # the only tier with candidates: all of them are offered, the packer decides
    assert tiers["c"]["offered"] == tiers["c"]["demand"]
    conversation = [u for u in r.pack if u.kind in ("turn", "retrieved", "thread", "referenced")]
    tail = {39, 40}                                  # min_recent_turns=2: mandatory
    optional = sum(u.tokens for u in conversation if not set(u.turn_ids) & tail)
    assert optional <= tiers["c"]["share"]
    # the conversation may use (nearly) all the budget the blend gave P
    assert sum(u.tokens for u in conversation) > 0.6 * r.ledger.input_budget


def test_shares_off_offers_every_candidate(kn):
    rt = kn
    for text in FACTS:
        rt.add_fact(text, source="notes")
    gated = rt.assemble("s", "what do you mean by that?", **POLICY)
    free = rt.assemble("s", "what do you mean by that?", tier_shares=False, **POLICY)
    assert len(_fact_units(free)) >= len(_fact_units(gated))
    assert free.ledger.total <= free.ledger.input_budget


def test_knowledge_off_and_namespace(kn):
    rt = kn
    rt.add_fact("The etcd quota on production is 8 GiB.", namespace="ops")
    assert not _fact_units(rt.assemble("s", "what is the etcd quota?", knowledge=False, **POLICY))
    assert not _fact_units(rt.assemble("s", "what is the etcd quota?", namespace="other", **POLICY))
    assert _fact_units(rt.assemble("s", "what is the etcd quota?", namespace="ops", **POLICY))


def test_novelty_follows_the_intent_and_references(kn):
    rt = kn
    rt.add_fact("The etcd quota on production is 8 GiB.")
    explore = rt.assemble("s", "tell me about the etcd quota on production", **POLICY)
    assert explore.status["knowledge"]["novelty"] == "on"
    drill = rt.assemble("s", "go deeper into what you said earlier about the quota", **POLICY)
    assert drill.status["references"] >= 1
    assert drill.status["knowledge"]["novelty"] == "off"


def test_bad_knowledge_options_are_refused(rt):
    from ctxrelay.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="max_facts: expected an int >= 0"):
        rt.assemble("s", "x", max_facts=-1, **POLICY)
    with pytest.raises(InvalidArgumentError, match="tier_shares: expected a bool"):
        rt.assemble("s", "x", tier_shares="sometimes", **POLICY)


def test_a_message_too_long_for_any_tokenizer_fails_closed_with_a_lower_bound(rt):
    from ctxrelay.errors import ContextOverflowError, TurnTooLargeError
    with pytest.raises(TurnTooLargeError):                # over the store's turn size limit
        rt.assemble("s", "x" * 3_000_000, **POLICY)
    with pytest.raises(ContextOverflowError) as info:    # within it, but no budget holds it
        rt.assemble("s", "x" * 1_000_000, **POLICY)
    figures = info.value.figures
    assert figures["mandatory_tokens"] >= 1_000_000 // 1024 > figures["input_budget"]
    assert rt.turn_count("s") == 40                      # nothing appended by an assembly
