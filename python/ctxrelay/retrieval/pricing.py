"""What each candidate unit costs, for the assembly in progress.

Every unit is counted as the provider will see it (framing included) with the
assembly's tokenizer, resolved once.  A message too long to fit the input
budget is charged a lower bound instead (never packed), an oversized stored
turn is also offered as a bounded excerpt, and a plain stored turn's unit is
remembered per store (a turn never changes once stored).  The assembly's
limits live in context variables that :func:`ctxrelay.retrieval.candidates.candidates`
sets, so the helpers here need no extra arguments.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from ctxrelay.memo import keep
from ctxrelay.retrieval.units import Unit, message_for_turn, tool_call_ids
from ctxrelay.text.bm25 import tokenize
from ctxrelay.storage.interfaces.transcript import Transcript
from ctxrelay.storage.stores import Stores
from ctxrelay.text import tokens as tok
from ctxrelay.types import Turn

# The input budget of the assembly in progress: a message whose text is so long
# that it cannot fit is not counted exactly (a 10 MB turn would take a minute).
COST_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("cost_cap", default=None)
# The primitives the assembly in progress read from (CRP-Context-Store-Used).
STORE_USED: contextvars.ContextVar[set[str]] = contextvars.ContextVar("store_used")
# The model whose tokenizer the transcript's stored per-turn counts were made
# with, for the assembly in progress (None: recount every turn).
STORED_COUNTS_MODEL: contextvars.ContextVar[str | None] = \
    contextvars.ContextVar("stored_counts_model", default=None)


def stored_counts_model_for(store: Transcript, model: str | tok.Tokenizer) -> Any:
    """``model`` when the store counted turns with its exact vocabulary, else None."""
    from ctxrelay.storage.common.transcript.records import DEFAULT_TOKENIZER
    tokenizer = tok.resolve(model)
    if store.tokenizer_name == DEFAULT_TOKENIZER and tokenizer.exact \
            and tokenizer.name == "cl100k_base":
        return model
    return None


def message_cost(message: dict[str, Any], model: str | tok.Tokenizer) -> tuple[int, bool]:
    """Tokens one message adds to a request, framing included, reply priming excluded.

    Past the assembly's cap a lower bound stands in for the count
    (:func:`ctxrelay.text.tokens.lower_bound`), which is already over the cap,
    so the unit is never packed (or, if mandatory, the turn fails closed).
    """
    if _past_cap(message):
        return tok.lower_bound(message["content"]), False
    counted = tok.count_messages([message], model, prime_reply=False)
    return counted.n, counted.exact


def _past_cap(message: dict[str, Any]) -> bool:
    """Whether the assembly in progress charges ``message`` its lower bound
    (content too long to fit its cap) instead of counting it."""
    cap = COST_CAP.get()
    content = message.get("content")
    return cap is not None and isinstance(content, str) \
        and tok.lower_bound(content) > cap


def index_terms(text: str) -> set[str]:
    """The search index's terms of ``text``."""
    # The index's own terms (stopwords out), so relevance agrees with search.
    return set(tokenize(text))


def add_unit(units: dict[str, Unit], unit: Unit, model: str | tok.Tokenizer) -> Unit:
    """Price ``unit``'s variants for ``model`` and add it to ``units``."""
    for name, msg in list(unit.variants.items()):
        n, exact = message_cost(msg, model)
        unit.costs[name] = n
        if not exact and _past_cap(msg):
            unit.inexact.add(name)            # the bound: never packed, so not in any count
        else:
            unit.exact = unit.exact and exact
    _offer_excerpt(unit, model)
    units[unit.id] = unit
    return unit


# Limits of the assembly in progress, decided in Prolog: a stored turn whose
# verbatim cost is over ``above`` tokens is also offered as a bounded excerpt
# of about ``size`` tokens (None: no excerpts).
EXCERPT: contextvars.ContextVar[tuple[int, int] | None] = \
    contextvars.ContextVar("excerpt", default=None)
_EXCERPT_KINDS = frozenset({"turn", "retrieved", "referenced", "thread", "instructions"})


def _offer_excerpt(unit: Unit, model: str | tok.Tokenizer) -> None:
    """Give an oversized stored turn an ``excerpt`` variant: its head and tail with its
    size and how to read the rest, so one huge turn never makes the mandatory part
    impossible.  Only the excerpt is counted (bounded work whatever the turn's size)."""
    limits = EXCERPT.get()
    verbatim = unit.variants.get("verbatim")
    if limits is None or verbatim is None or unit.kind not in _EXCERPT_KINDS \
            or len(unit.turn_ids) != 1 or "excerpt" in unit.variants:
        return
    above, size = limits
    content = verbatim.get("content")
    if unit.costs.get("verbatim", 0) <= above or not isinstance(content, str):
        return
    message = dict(verbatim)
    message["content"] = excerpt_text(unit.turn_ids[0], content, size)
    n, exact = message_cost(message, model)
    unit.variants["excerpt"] = message
    unit.costs["excerpt"] = n
    if not exact:
        unit.inexact.add("excerpt")


def excerpt_text(turn_id: int, content: str, size: int) -> str:
    """The head and the tail of ``content`` in about ``size`` tokens, framed by what was
    left out and the context/3 operation that reads it."""
    take = max(64, size * 2)              # characters per side: about size/2 tokens each
    head, tail = content[:take], content[-take:]
    left_out = len(content) - len(head) - len(tail)
    return (f"[excerpt of turn {turn_id}: {len(content.encode('utf-8', 'surrogatepass')):,} "
            f"bytes; its first and last {take:,} characters are shown and {left_out:,} "
            f"characters between them are left out. Read them with "
            f"context(input(context), peek(text({turn_id}, {len(head)}, 4000)), R), which "
            f"pages through the turn's text]\n{head}\n[... {left_out:,} characters left out "
            f"...]\n{tail}")


# A plain stored turn (no tool call, not a tool result) becomes the same
# verbatim message with the same cost every time it is offered, and a turn
# never changes once stored (the transcript is append-only).  Assembly offers
# the same recent and recalled turns turn after turn, so each store keeps them
# (in its Stores): (session, turn id, tokenizer) -> (role, message, cost, exact).
_PRICED_MAX = 16384
# The tokenizer of the assembly in progress, as part of the memo's key: the
# Tokenizer itself and its counter's id (a re-registered model counts anew).
TOKENIZER_KEY: contextvars.ContextVar[tuple[Any, ...] | None] = \
    contextvars.ContextVar("tokenizer_key", default=None)


@dataclass(frozen=True, slots=True)
class _Priced:
    role: str
    message: dict[str, Any]
    cost: int
    exact: bool


class _TokenizerKey(tuple):
    """``(Tokenizer, id of its counter)`` whose hash is computed once: every lookup in
    the memo of priced turns hashes it, and a Tokenizer's dataclass hash walks all
    its fields each time (about a hundred lookups per assembly)."""

    def __new__(cls, tokenizer: tok.Tokenizer) -> "_TokenizerKey":
        key = super().__new__(cls, (tokenizer, id(tokenizer.counter)))
        key._hash = tuple.__hash__(key)
        return key

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:        # as a tuple's (defined with __hash__)
        return tuple.__eq__(self, other)


def tokenizer_key_of(model: str | tok.Tokenizer) -> tuple[Any, ...]:
    """The memo-key form of ``model``'s tokenizer (see :data:`TOKENIZER_KEY`)."""
    return _TokenizerKey(tok.resolve(model))


def priced_memo(stores: Stores) -> dict[tuple[Any, ...], _Priced]:
    """The store's memo of priced plain turns, by (session, turn id, tokenizer key)."""
    return stores.state("priced_turns", _new_memo)


def _new_memo(_: Stores) -> dict[tuple[Any, ...], _Priced]:
    return {}


def priced_unit(stores: Stores, session_id: str, turn_id: int, kind: str,
                **features: Any) -> Unit | None:
    """The unit of a stored plain turn from the memo, or None (read the turn)."""
    tkey = TOKENIZER_KEY.get()
    priced = None if tkey is None else priced_memo(stores).get((session_id, turn_id, tkey))
    if priced is None:
        return None
    if _past_cap(priced.message):
        return None                       # over this assembly's cap: the bound applies
    unit = Unit(id=f"t{turn_id}", kind=kind, turn_ids=[turn_id],
                variants={"verbatim": dict(priced.message)},
                costs={"verbatim": priced.cost}, exact=priced.exact,
                features={"role": priced.role, **features})
    _offer_excerpt(unit, tkey[0])
    return unit


def add_turn(units: dict[str, Unit], stores: Stores, turn: Turn, kind: str,
             scratch: Any, model: str | tok.Tokenizer, **features: Any) -> Unit:
    """``add_unit`` of a stored turn's unit, through the memo of plain turns."""
    plain = turn.role != "tool" and not tool_call_ids(turn)
    if plain:
        unit = priced_unit(stores, turn.session_id, turn.turn_id, kind, **features)
        if unit is not None:
            units[unit.id] = unit
            return unit
    unit = add_unit(units, _turn_unit(turn, kind, scratch, **features), model)
    tkey = TOKENIZER_KEY.get()
    message = unit.variants["verbatim"]
    if plain and tkey is not None and not _past_cap(message):     # a count, not the bound
        keep(priced_memo(stores), (turn.session_id, turn.turn_id, tkey),
             _Priced(turn.role, dict(message), unit.costs["verbatim"],
                     unit.variant_exact("verbatim")),
             _PRICED_MAX)
    return unit


def _turn_unit(turn: Turn, kind: str, scratch: Any = None, **features: Any) -> Unit:
    message = message_for_turn(turn)
    seed_model = STORED_COUNTS_MODEL.get()
    if seed_model is not None and turn.tokens_exact:
        # The transcript counted this content on append: no second BPE pass.
        tok.remember_count(seed_model, turn.content, turn.tokens)
    scratch_id = turn.metadata.get("scratch_id") if isinstance(turn.metadata, dict) else None
    if scratch is not None and scratch_id and turn.role == "tool":
        message["content"], freshness = _gated_summary(scratch, turn, scratch_id)
        features = {**features, "scratch_id": scratch_id, "freshness": freshness}
        kind = "scratch" if kind == "turn" else kind
    return Unit(id=f"t{turn.turn_id}", kind=kind, turn_ids=[turn.turn_id],
                variants={"verbatim": message}, features={"role": turn.role, **features})


def _gated_summary(scratch: Any, turn: Turn, scratch_id: str) -> tuple[str, str]:
    """A tool output's summary through the freshness gate: a stale reading is
    never shown as current (warned, or replaced by a note to re-run the tool)."""
    from ctxrelay.storage.common.scratch.errors import UnknownScratchError
    try:
        entry = scratch.get(turn.session_id, scratch_id, touch=False)
    except UnknownScratchError:
        return (f"[tool output {scratch_id} was evicted from the scratch buffer; "
                f"re-run {turn.name or 'the tool'} if it is needed]"), "evicted"
    rendered = scratch.render(entry)
    if rendered.text is not None:
        return rendered.text, rendered.action
    return (f"[tool output {scratch_id} from {entry.tool_name} is stale "
            f"({entry.freshness}, {rendered.action}); re-run the tool for current data]"), rendered.action


def mark_used(primitive: str) -> None:
    """Report ``primitive`` as read by the assembly in progress (CRP-Context-Store-Used)."""
    try:
        STORE_USED.get().add(primitive)
    except LookupError:                    # outside an assembly: nothing to report
        pass
