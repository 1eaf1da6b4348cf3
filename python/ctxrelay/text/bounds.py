"""The bounds on per-turn text work.

Every derived view of a turn -- its embedding, its recall terms, its entities --
reads at most :data:`DERIVED_TEXT_CHARS` characters of it: a turn of megabytes then
costs what a long chat message costs, on every path and every assembly.  The whole
text stays stored, searchable through the transcript's inverted index and readable
through context/3 (``peek(text(Turn, Start, Length))``); only what is derived from
it is bounded.  32,000 characters is about 8,000 tokens, far beyond what an
embedding model reads (MiniLM truncates at 256 tokens).

A turn's *vector* may read less, by its role: Prolog's
``ctxrelay_policy:embedded_words/2`` says how many leading words of a role's turns
are embedded (by default an assistant reply's first 24; ``embeds_whole/1`` names the
embedders it does not apply to: hashing, which costs nothing to run whole).  Embedding is the part of
a turn's CPU that grows with the text, and a reply is stored on every turn.
:func:`embedding_texts` applies that rule; the turn log's derivation (every back
end) embeds what it returns, so a session derived again gives the same vectors.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping

from ctxrelay.errors import CtxRelayError

DERIVED_TEXT_CHARS = 32_000

#: Reads embedded_words/2 for an embedder's model id as [[Role, Words], ...].  text sits below the bridge, so the
#: engine hands its reader down (ctxrelay.bridge.engine) instead of text importing it.
_rule_reader: Callable[[str], Any] | None = None

#: A word, as embedded_words/2 counts them (the embedders' own notion of a word).
_WORD = re.compile(r"\w+", re.UNICODE)


def derived_text(text: str) -> str:
    """The part of ``text`` that derived views read."""
    return text if len(text) <= DERIVED_TEXT_CHARS else text[:DERIVED_TEXT_CHARS]


def leading_words(text: str, words: int) -> str:
    """``text`` up to the end of its ``words``-th word (all of it when it has no more)."""
    end = None
    for i, match in enumerate(_WORD.finditer(text)):
        if i + 1 == words:
            end = match.end()
            break
    return text if end is None else text[:end]


def use_rule_reader(read: Callable[[str], Any]) -> None:
    """Set the function that reads embedded_words/2 (the engine does, when imported)."""
    global _rule_reader
    _rule_reader = read


def embedding_bounds(model_id: str) -> dict[str, int]:
    """Role -> words embedded by the embedder ``model_id``, as Prolog's
    embedded_words/2 and embeds_whole/1 say now (roles without a bound left out)."""
    if _rule_reader is None:
        raise CtxRelayError("the rule embedded_words/2 is Prolog's and the engine is not "
                            "loaded; import ctxrelay before deriving a turn log")
    return {str(role): int(words) for role, words in _rule_reader(model_id)}


def embedding_texts(turns: Iterable[Any], model_id: str,
                    bounds: Mapping[str, int] | None = None) -> list[str]:
    """What the turn log embeds with the embedder ``model_id`` for each of ``turns``
    (objects with ``role`` and ``content``): the derived text, cut after the role's
    bound of words.

    ``bounds`` defaults to :func:`embedding_bounds` (one query to Prolog)."""
    turns = list(turns)
    if not turns:
        return []
    if bounds is None:
        bounds = embedding_bounds(model_id)
    out = []
    for t in turns:
        text = derived_text(t.content)
        limit = bounds.get(t.role)
        out.append(text if limit is None else leading_words(text, limit))
    return out
