"""How much of a stored turn its vector reads: Prolog's embedded_words/2 (policy).

Invariants under test: a reply's turn-log vector is the embedding of its leading
words under the rule in force, on every derivation path (a managed turn's commit,
an import derived later, a recompute); the whole reply stays stored and searchable;
a user changes the rule as a Prolog fact, and a recompute derives the session again
under the new rule; embedders the rule exempts (hashing, by embeds_whole/1) embed
replies whole; a malformed bound is refused.

The derivations here run the hashing embedder (no model files), so the tests first
lift its exemption: what is checked is the rule's path, which is the same for every
embedder.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ctxrelay import Runtime
from ctxrelay.bridge import engine
from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage import open_stores
from ctxrelay.text.bounds import (DERIVED_TEXT_CHARS, embedding_bounds, embedding_texts,
                                  leading_words)
from ctxrelay.text.embed import get_embedder

LONG_REPLY = ("Rotate the etcd peer certificates one member at a time. " * 8
              + "Keep quorum throughout; the clients never notice.")


HASHING = get_embedder("hashing").model_id
MINILM = "all-MiniLM-L6-v2-onnx-int8"


@pytest.fixture
def rule():
    """Set embedded_words(assistant, N) for one test (None: no bound) and bound the
    hashing embedder too; restore both rules afterwards."""
    engine.once("copy_predicate_clauses(ctxrelay_policy:embedded_words/2, "
                "ctxrelay_policy:saved_embedded_words/2), "
                "copy_predicate_clauses(ctxrelay_policy:embeds_whole/1, "
                "ctxrelay_policy:saved_embeds_whole/1)")

    def set_bound(words: int | None, *, hashing_whole: bool = False) -> None:
        engine.once("retractall(ctxrelay_policy:embedded_words(assistant, _))")
        if words is not None:
            engine.once("assertz(ctxrelay_policy:embedded_words(assistant, W))", {"W": words})
        engine.once("retractall(ctxrelay_policy:embeds_whole(_))")
        if hashing_whole:
            engine.once("assertz((ctxrelay_policy:embeds_whole(_M) :- "
                        "string_concat(\"hashing-\", _, _M)))")
    set_bound(24)
    yield set_bound
    engine.once("retractall(ctxrelay_policy:embedded_words(_, _)), "
                "retractall(ctxrelay_policy:embeds_whole(_)), "
                "copy_predicate_clauses(ctxrelay_policy:saved_embedded_words/2, "
                "ctxrelay_policy:embedded_words/2), "
                "copy_predicate_clauses(ctxrelay_policy:saved_embeds_whole/1, "
                "ctxrelay_policy:embeds_whole/1), "
                "abolish(ctxrelay_policy:saved_embedded_words/2), "
                "abolish(ctxrelay_policy:saved_embeds_whole/1)")


def test_leading_words_cuts_after_the_nth_word():
    text = "echo: 43 messages, roles=system,user,assistant; last"
    assert leading_words(text, 1) == "echo"
    assert leading_words(text, 5) == "echo: 43 messages, roles=system"
    assert leading_words(text, 9) == "echo: 43 messages, roles=system,user,assistant; last"
    assert leading_words(text, 50) == text
    assert leading_words("", 3) == "" and leading_words("...!", 2) == "...!"


def test_embedding_texts_bound_only_the_roles_named():
    turns = [SimpleNamespace(role="user", content="one two three four"),
             SimpleNamespace(role="assistant", content="five six seven eight"),
             SimpleNamespace(role="tool", content="x" * (DERIVED_TEXT_CHARS + 10))]
    out = embedding_texts(turns, MINILM, {"assistant": 2})
    assert out == ["one two three four", "five six", "x" * DERIVED_TEXT_CHARS]
    assert embedding_texts([], MINILM, {"assistant": 2}) == []


def test_the_default_rule_bounds_model_embedders_replies():
    """As shipped: a model embedder's replies are bounded, hashing's are not."""
    assert embedding_bounds(MINILM) == {"assistant": 24}
    assert embedding_bounds("all-MiniLM-L6-v2") == {"assistant": 24}
    assert embedding_bounds(HASHING) == {}
    turns = [SimpleNamespace(role="assistant", content=LONG_REPLY)]
    assert embedding_texts(turns, HASHING) == [LONG_REPLY]
    assert embedding_texts(turns, MINILM) == [leading_words(LONG_REPLY, 24)]


def test_users_change_the_rule(rule):
    rule(40)
    assert embedding_bounds(MINILM) == {"assistant": 40} == embedding_bounds(HASHING)
    rule(40, hashing_whole=True)
    assert embedding_bounds(MINILM) == {"assistant": 40} and embedding_bounds(HASHING) == {}
    rule(None)
    assert embedding_bounds(MINILM) == {}
    engine.once("assertz(ctxrelay_policy:embedded_words(tool, 0))")
    with pytest.raises(InvalidArgumentError, match="0"):
        embedding_bounds(MINILM)


def _reply_vector(store_dir, turn_id: int) -> np.ndarray:
    with open_stores(store_dir) as stores:            # the Runtime's store
        return stores.turnlog.vectors("s", [turn_id])[turn_id]


def test_a_committed_reply_is_embedded_from_its_leading_words(store_dir, rule):
    emb = get_embedder("hashing")
    with Runtime(store_dir) as rt:
        rt.create_session("s")
        prepared = rt.prepare_turn("s", "how do we rotate the etcd certificates?",
                                   embedder="hashing")
        out = rt.commit_turn(prepared, LONG_REPLY, provider="test")
        reply_id = out.assistant_turn
        assert rt.turn("s", reply_id).content == LONG_REPLY          # stored whole
        assert any(h.turn_id == reply_id for h in rt.search("s", "clients notice"))
        vec = _reply_vector(store_dir, reply_id)
        bounded = emb.embed_batch([leading_words(LONG_REPLY, 24)])[0]
        whole = emb.embed_batch([LONG_REPLY])[0]
        np.testing.assert_allclose(vec, bounded, atol=1e-6)
        assert float(vec @ whole) < 0.999                              # it is not the whole

        # A user lifts the bound: the turns derived from then on read the whole reply,
        # and a recompute derives the session again under the rule in force.
        rule(None)
        rt.derive("s", embedder="hashing", recompute=True)
        np.testing.assert_allclose(_reply_vector(store_dir, reply_id), whole, atol=1e-6)


def test_an_imported_session_derives_under_the_same_rule(store_dir, rule):
    """The commit path and a later derivation of the same turns give the same vector."""
    rule(10)
    emb = get_embedder("hashing")
    with Runtime(store_dir) as rt:
        rt.create_session("s")
        rt.append("s", "user", "how do we rotate the etcd certificates?")
        rid = rt.append("s", "assistant", LONG_REPLY)
        rt.derive("s", embedder="hashing")
        np.testing.assert_allclose(_reply_vector(store_dir, rid),
                                   emb.embed_batch([leading_words(LONG_REPLY, 10)])[0],
                                   atol=1e-6)
        user = _reply_vector(store_dir, rid - 1)     # a user turn is not bounded
        np.testing.assert_allclose(
            user, emb.embed_batch(["how do we rotate the etcd certificates?"])[0], atol=1e-6)
