"""Promotion wired into the managed turn: CRP-Context-Promotions and the CKF."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import CtxRelayError

POLICY = dict(embedder="hashing", max_context_tokens=2000)


@pytest.fixture
def rt(tmp_path: Path):
    from ctxrelay.knowledge.fabric import FactStore
    FactStore(tmp_path / "store" / "ckf", embedder="hashing").close()
    with Runtime(tmp_path / "store") as runtime:
        runtime.create_session("s")
        runtime.append("s", "user", "Our Q3 infrastructure budget is 42,000 EUR.")
        runtime.append("s", "assistant", "Noted: 42,000 EUR for Q3 infrastructure.")
        yield runtime


def test_a_named_value_is_promoted_and_reported(rt):
    r = rt.managed_turn("s", "call that the budget figure", key="k1", **POLICY)
    assert r.headers["CRP-Context-Promotions"] == 1
    fact = rt.fact("budget_figure")
    assert "42,000 EUR" in fact["content"]
    again = rt.managed_turn("s", "call that the budget figure", key="k1", **POLICY)
    assert again.headers["CRP-Context-Promotions"] == 0          # retried: stored reply, nothing new
    assert len(rt.facts("budget figure 42,000 EUR", k=10)) == 1


def test_promotion_off_and_plain_turns(rt):
    r = rt.managed_turn("s", "call that the budget figure", promotion=False, **POLICY)
    assert r.headers["CRP-Context-Promotions"] == 0
    with pytest.raises(CtxRelayError):
        rt.fact("budget_figure")
    plain = rt.managed_turn("s", "thanks, what else is open?", **POLICY)
    assert plain.headers["CRP-Context-Promotions"] == 0
    assert rt.assemble("s", "anything", **POLICY).headers["CRP-Context-Promotions"] == 0


def test_a_promoted_value_stays_in_its_session(rt):
    rt.managed_turn("s", "call that the budget figure", **POLICY)
    rt.create_session("other")
    rt.append("other", "user", "hello")
    mine = rt.assemble("s", "what is the budget figure for Q3 infrastructure?", **POLICY)
    theirs = rt.assemble("other", "what is the budget figure for Q3 infrastructure?", **POLICY)
    assert any("42,000" in m["content"] for m in mine.messages if m.get("name") == "knowledge")
    assert not any("42,000" in m["content"] for m in theirs.messages)
