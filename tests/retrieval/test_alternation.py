"""Requests strict providers accept (issue 14): recalled turns keep their
question/answer pairing, and alternation(strict) gives the strict template shape."""
from __future__ import annotations

import pytest

from ctxrelay import Runtime

POLICY = dict(embedder="hashing", max_context_tokens=900, output_reserve=100,
              safety_margin=20, min_recent_turns=2)
TOPICS = ["etcd quota", "postgres backups", "kafka retention", "redis eviction",
          "nginx timeouts", "dns caching", "tls rotation", "cron schedules"]


@pytest.fixture
def rt(tmp_path):
    with Runtime(tmp_path / "s") as runtime:
        runtime.create_session("s")
        for i in range(40):
            topic = TOPICS[i % len(TOPICS)]
            runtime.append("s", "user", f"question {i}: how should we tune {topic} (case {i})?")
            runtime.append("s", "assistant", f"answer {i}: for {topic} use setting {i * 7} "
                                             f"and check it weekly")
        yield runtime


def _turn_ids(result):
    return {t for u in result.pack for t in u.turn_ids if u.kind == "retrieved"}


@pytest.mark.parametrize("query", ["what did you say about kafka retention?",
                                   "which setting for dns caching?",
                                   "remind me of case 17"])
def test_a_recalled_turn_comes_with_its_question_or_answer(rt, query):
    r = rt.assemble("s", query, alternation="strict", **POLICY)
    recalled = _turn_ids(r)
    assert recalled, "recall offered nothing"
    for tid in recalled:
        role = rt.turn("s", tid).role
        partner = tid - 1 if role == "assistant" else tid + 1
        assert partner in recalled or any(partner in u.turn_ids for u in r.pack), (tid, role)


def test_strict_alternation_gives_the_template_shape_counted_exactly(rt):
    rt.append("s", "user", "one more question")          # user, user at the end of history
    for query in ("what did you say about kafka retention?", "and nginx?"):
        free = rt.assemble("s", query, **POLICY)
        strict = rt.assemble("s", query, alternation="strict", **POLICY)
        roles = [m["role"] for m in strict.messages]
        body = roles[1:] if roles[0] == "system" else roles
        assert "system" not in body and body[0] == "user" and body[-1] == "user"
        assert all(a != b for a, b in zip(body, body[1:]))
        free_roles = [m["role"] for m in free.messages]
        assert any(a == b for a, b in zip(free_roles, free_roles[1:]))   # the free pack had runs
        lg = strict.ledger
        assert lg.total == lg.observed_total <= lg.input_budget and lg.exact
        assert lg.shape["messages_after"] < lg.shape["messages_before"]
        assert lg.shape["tokens"] < 0              # merged messages share their framing


def test_alternation_is_checked(rt):
    from ctxrelay.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="alternation"):
        rt.assemble("s", "x", alternation="sometimes", **POLICY)
