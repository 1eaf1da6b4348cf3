"""No input can block a session for good (issue 14): the append size limit, and a
stored turn too large for the budget entering packs as a bounded excerpt."""
from __future__ import annotations

import json

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import ContextOverflowError, TurnTooLargeError

POLICY = dict(embedder="hashing", max_context_tokens=4096, output_reserve=512,
              safety_margin=64, min_recent_turns=4)
BIG = "".join(f"line {i}: the etcd member{i % 7} reported quota usage {i} MiB\n"
              for i in range(80_000))          # ~4.6 MB, ~1.4M tokens


def test_an_append_over_the_limit_is_refused_before_anything_is_stored(tmp_path):
    with Runtime(tmp_path / "s") as rt:
        rt.create_session("ops")
        with pytest.raises(TurnTooLargeError, match="max_turn_bytes"):
            rt.append("ops", "user", BIG)
        with pytest.raises(TurnTooLargeError):
            rt.managed_turn("ops", BIG, **POLICY)
        assert rt.turn_count("ops") == 0
        assert len(BIG.encode()) > rt._store.transcript.max_turn_bytes   # the default, 1 MiB


def test_a_huge_stored_turn_is_packed_as_an_excerpt_and_the_session_goes_on(tmp_path):
    with Runtime(tmp_path / "s", max_turn_bytes=8 << 20) as rt:
        rt.create_session("ops")
        rt.append("ops", "user", "please look at this dump")
        rt.append("ops", "assistant", BIG)                # one huge assistant turn
        for question in ("what was the quota usage of member3?", "and member5?"):
            r = rt.managed_turn("ops", question, **POLICY)
            assert r.ledger.total <= r.ledger.input_budget
            assert r.ledger.excerpts == ["t2"]               # marked as such in the ledger
            [unit] = [u for u in r.pack if u.id == "t2"]
            assert unit.variant == "excerpt" and unit.tokens < 1100
            shown = json.dumps(r.messages)
            assert "excerpt of turn 2" in shown and "peek(text(2," in shown
            assert "line 0:" in shown and "line 79999:" in shown      # head and tail
        assert rt.turn_count("ops") == 6
        # The rest is readable page by page through context/3.
        page = rt.context("ops", "peek(text(2, 100000, 500))")
        assert page["text"] == BIG[100000:100500] and page["more"] is True
        last = rt.context("ops", f"peek(text(2, {len(BIG) - 10}, 500))")
        assert last["text"] == BIG[-10:] and last["more"] is False


def test_a_budget_too_small_even_for_the_excerpt_still_fails_closed(tmp_path):
    with Runtime(tmp_path / "s", max_turn_bytes=8 << 20) as rt:
        rt.create_session("ops")
        rt.append("ops", "assistant", BIG)
        with pytest.raises(ContextOverflowError):
            rt.managed_turn("ops", "hi", **{**POLICY, "max_context_tokens": 250,
                                            "output_reserve": 50, "safety_margin": 0})
        assert rt.turn_count("ops") == 1
