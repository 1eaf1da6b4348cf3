"""The memo of stored turns' units (ctxrelay.retrieval.candidates._PRICED).

A plain stored turn is offered with the same message and cost on every
assembly; the memo must never change what an assembly produces: not after
it fills, not when the model's tokenizer is registered anew, not when a
smaller budget caps a long turn's count.
"""
from __future__ import annotations

import re

import pytest

from ctxrelay import ContextOverflowError, Runtime
from ctxrelay.retrieval import candidates as assembly
from ctxrelay.retrieval import pricing
from ctxrelay.text import tokens

POLICY = dict(max_context_tokens=900, output_reserve=100, safety_margin=20, min_recent_turns=2,
              embedder="hashing")


def chat(rt: Runtime, session: str, n: int) -> None:
    rt.create_session(session)
    topics = ["etcd quorum", "backup window", "budget figure", "latency target"]
    for i in range(n):
        topic = topics[i % len(topics)]
        rt.append(session, "user", f"what about the {topic} item {i}?")
        rt.append(session, "assistant", f"the {topic} item {i} is settled as plan {i * 7}")


def signature(r) -> tuple:
    return ([(u.id, u.kind, u.tokens) for u in r.pack], r.ledger.total, r.ledger.exact,
            r.messages)


@pytest.fixture
def rt(store_dir):
    with Runtime(store_dir) as runtime:
        yield runtime


def test_memo_serves_the_same_units_as_a_fresh_count(rt):
    chat(rt, "s", 60)
    memo = pricing.priced_memo(rt._store)            # the store's memo of priced turns
    memo.clear()
    cold = rt.assemble("s", "remind me of the budget figure item 10", **POLICY)
    assert memo, "the first assembly fills the memo"
    warm = rt.assemble("s", "remind me of the budget figure item 10", **POLICY)
    assert signature(warm) == signature(cold)
    # Every unit a memo entry produced costs what a fresh count says.
    for key, priced in list(memo.items()):
        fresh, exact = assembly.message_cost(priced.message, "cl100k_base")
        assert (fresh, exact) == (priced.cost, priced.exact), key


def test_a_tokenizer_registered_anew_is_counted_anew(rt):
    chat(rt, "s", 40)
    policy = {**POLICY, "model": "memo-test-model", "max_context_tokens": 4000}
    try:
        tokens.register("memo-test-model", lambda text: len(text.split()), exact=True,
                        framing="openai-chat")
        by_words = rt.assemble("s", "what about the backup window?", **policy)
        tokens.register("memo-test-model", lambda text: len(text), exact=True, framing="openai-chat")
        by_chars = rt.assemble("s", "what about the backup window?", **policy)
    finally:
        tokens.unregister("memo-test-model")
    words = {u.id: u.tokens for u in by_words.pack if u.kind == "turn"}
    chars = {u.id: u.tokens for u in by_chars.pack if u.kind == "turn"}
    shared = set(words) & set(chars)
    assert shared
    assert all(chars[i] > words[i] for i in shared), "costs must follow the new counter"


def test_a_capped_count_is_not_taken_from_an_uncapped_one(rt):
    rt.create_session("s")
    long_text = "alpha beta gamma delta " * 3000          # ~12k tokens, 69 KB
    rt.append("s", "user", long_text)
    for i in range(6):
        rt.append("s", "assistant" if i % 2 else "user", f"short turn {i}")
    roomy = dict(POLICY, max_context_tokens=40000, provider_context_tokens=64000,
                 min_recent_turns=8)
    big = rt.assemble("s", "and the alpha?", **roomy)
    exact_cost = next(u.tokens for u in big.pack if u.turn_ids == [1])
    assert exact_cost > 10000
    # A 50-token budget stops counting past ~52 KB: the long turn is charged
    # the cheap lower bound (one token per KB), not the memo's exact count,
    # and the mandatory tail fails closed with that figure.
    small = dict(POLICY, max_context_tokens=60, output_reserve=10, safety_margin=0,
                 min_recent_turns=8)
    with pytest.raises(ContextOverflowError) as err:
        rt.assemble("s", "and the alpha?", **small)
    mandatory = int(re.search(r"mandatory_tokens = (\d+)", str(err.value)).group(1))
    assert mandatory < 200 < exact_cost


def test_the_candidates_are_released_when_no_alternative_can_need_them(rt, monkeypatch):
    # janus frees a Python object released inside Prolog at its next call into
    # Python (it holds no GIL there); rt.stats() makes one.
    import weakref
    chat(rt, "s", 30)
    refs = []
    original = assembly.window_candidates

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        refs.append(weakref.ref(out["handle"]))
        return out
    monkeypatch.setattr(assembly, "window_candidates", spy)
    rt.assemble("s", "what about the backup window?", **POLICY)
    rt.stats("s")
    assert refs and refs[-1]() is None, "the best pack is returned: nothing can use them"
    packs = rt.packs("s", "and the budget figure?", **POLICY)
    next(packs)
    rt.stats("s")
    assert refs[-1]() is not None, "an alternative pack may still be asked for"
    packs.close()
    rt.stats("s")
    assert refs[-1]() is None


def test_host_only_tokens_count_each_packed_units_record():
    import json as _json
    units = {
        "t7": assembly.Unit(id="t7", kind="turn", turn_ids=[7],
                            variants={"verbatim": {"role": "user", "content": "hi"}},
                            features={"role": "user", "relevance": 0.123456789}),
        "f3": assembly.Unit(id="f3", kind="fact", turn_ids=[],
                            variants={"verbatim": {"role": "user", "content": "k"}},
                            features={"fact_id": "abc", "score": 0.5, "source": "doc.md"}),
    }
    cands = assembly.Candidates("s", "gpt-4", units, 3, [], [], {})
    plan = [["t7", "verbatim"], ["f3", "verbatim"]]
    records = [{"id": "t7", "turn_ids": [7], "role": "user"},
               {"id": "f3", "turn_ids": [], "fact_id": "abc", "source": "doc.md"}]
    expected = sum(tokens.count(_json.dumps(r, sort_keys=True), "gpt-4").n for r in records)
    assert assembly.host_only_tokens(cands, plan, "gpt-4") == expected
    units["t7"].features["relevance"] = 0.9            # a per-query score: not in the record
    assert assembly.host_only_tokens(cands, plan, "gpt-4") == expected
    units["t7"].features["scratch_id"] = "sc-1"        # a field of the unit: counted
    assert assembly.host_only_tokens(cands, plan, "gpt-4") > expected


def test_host_only_record_counts_kept_between_assemblies_equal_a_fresh_count():
    """A record counted once is answered from the memo the next time; a record
    whose values differ only in type (True, 1, 1.0: equal as keys, different JSON)
    or holds a non-scalar field gets its own count."""
    import json as _json
    from ctxrelay.retrieval import render as render_module

    def unit(**features):
        return assembly.Unit(id="t9", kind="turn", turn_ids=[9],
                             variants={"verbatim": {"role": "user", "content": "x"}},
                             features=features)

    def fresh(u):
        record = {k: v for k, v in u.features.items() if k != "relevance"}
        record.update(id=u.id, turn_ids=u.turn_ids)
        return tokens.count(_json.dumps(record, sort_keys=True, default=str), "gpt-4").n

    render_module._RECORD_TOKENS.clear()
    for features in ({"role": "user", "flag": True}, {"role": "user", "flag": 1},
                     {"role": "user", "flag": 1.0}, {"role": "user", "flag": [1, 2, 3]},
                     {"role": "user", "flag": True, "relevance": 0.5}):
        u = unit(**features)
        cands = assembly.Candidates("s", "gpt-4", {"t9": u}, 3, [], [], {})
        for _ in range(2):                              # counted, then from the memo
            assert assembly.host_only_tokens(cands, [["t9", "verbatim"]], "gpt-4") == fresh(u)
    assert len(render_module._RECORD_TOKENS) == 3       # True, 1, 1.0; not the list
