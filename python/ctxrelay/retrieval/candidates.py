"""Candidate context units and the rendering of a chosen pack.

Prolog decides (utilities, constraints, packing, order); this module does the
data work it asks for: read the bounded window of recent turns, run the
indexed cold-history search, load warm artifacts, count every unit's tokens
as the provider will see it, and finally render the chosen units to
provider messages and count them again.

Candidate generation is bounded by the token budget, not by the length of
the history: the window is read backwards only until it holds more tokens
than the budget, and cold turns come from the inverted index.
"""
from __future__ import annotations

import contextvars
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.text import tokens as tok
from ctxrelay.knowledge.scope import visible_to
from ctxrelay.memo import keep
from ctxrelay.storage.lmdb.textindex import tokenize
from ctxrelay.storage.lmdb.transcript import TranscriptStore
from ctxrelay.storage.stores import Stores
from ctxrelay.types import Turn
from ctxrelay.text.bounds import derived_text

_READ_CHUNK = 32
_TOOL_LOOKBACK = 8      # how far a tool result may sit from its call
_DORMANT_MAX = 12             # dormant turns of a resumed thread offered back


@dataclass
class Unit:
    """A candidate context unit; ``variants`` maps variant name to message."""

    id: str
    kind: str                     # system | message | turn | retrieved | warm | boundary
    turn_ids: list[int]
    variants: dict[str, dict[str, Any]]
    costs: dict[str, int] = field(default_factory=dict)
    exact: bool = True
    features: dict[str, Any] = field(default_factory=dict)
    inexact: set[str] = field(default_factory=set)     # variants charged a bound, not a count

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "turn_ids": list(self.turn_ids),
                "variants": [{"name": name, "cost": self.costs[name]} for name in self.variants],
                "exact": self.exact, **self.features}

    def variant_exact(self, name: str) -> bool:
        return self.exact and name not in self.inexact


@dataclass
class Candidates:
    """What one assembly may choose from; Prolog keeps a reference to it."""

    session_id: str
    model: str
    units: dict[str, Unit]
    priming: int
    groups: list[list[str]]
    excludes: list[list[str]]
    info: dict[str, Any]

    def unit(self, unit_id: str) -> Unit:
        return self.units[unit_id]


def _message_for_turn(turn: Turn) -> dict[str, Any]:
    """The provider message of a stored turn; content is passed as data."""
    msg: dict[str, Any] = {"role": turn.role, "content": turn.content}
    calls = turn.metadata.get("tool_calls") if isinstance(turn.metadata, dict) else None
    if turn.role == "assistant" and isinstance(calls, list) and calls:
        msg["tool_calls"] = [_openai_tool_call(c) for c in calls if isinstance(c, dict)]
    if turn.role == "tool":
        msg["tool_call_id"] = turn.tool_call_id or f"turn_{turn.turn_id}"
    elif turn.name:
        msg["name"] = _safe_name(turn.name)
    return msg


def _openai_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    args = call.get("arguments", {})
    return {"id": str(call.get("id", "")), "type": "function",
            "function": {"name": str(call.get("name", "")),
                         "arguments": args if isinstance(args, str) else json.dumps(args, sort_keys=True)}}


def _safe_name(name: str) -> str:
    # OpenAI accepts names matching ^[a-zA-Z0-9_-]{1,64}$; keep the rest as data elsewhere.
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]
    return cleaned or "speaker"


def _tool_call_ids(turn: Turn) -> list[str]:
    calls = turn.metadata.get("tool_calls") if isinstance(turn.metadata, dict) else None
    if turn.role != "assistant" or not isinstance(calls, list):
        return []
    return [str(c.get("id")) for c in calls if isinstance(c, dict) and c.get("id")]


# The input budget of the assembly in progress: a message whose text is so long
# that it cannot fit is not counted exactly (a 10 MB turn would take a minute).
_COST_CAP: contextvars.ContextVar[int | None] = contextvars.ContextVar("cost_cap", default=None)
# The primitives the assembly in progress read from (CRP-Context-Store-Used).
_STORE_USED: contextvars.ContextVar[set[str]] = contextvars.ContextVar("store_used")
# The model whose tokenizer the transcript's stored per-turn counts were made
# with, for the assembly in progress (None: recount every turn).
_STORED_COUNTS_MODEL: contextvars.ContextVar[str | None] = \
    contextvars.ContextVar("stored_counts_model", default=None)


def _stored_counts_model(store: TranscriptStore, model: "str | tok.Tokenizer") -> Any:
    """``model`` when the store counted turns with its exact vocabulary, else None."""
    from ctxrelay.storage.lmdb.transcript import DEFAULT_TOKENIZER
    tokenizer = tok.resolve(model)
    if store.tokenizer_name == DEFAULT_TOKENIZER and tokenizer.exact \
            and tokenizer.name == "cl100k_base":
        return model
    return None


def message_cost(message: dict[str, Any], model: "str | tok.Tokenizer") -> tuple[int, bool]:
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
    cap = _COST_CAP.get()
    content = message.get("content")
    return cap is not None and isinstance(content, str) \
        and tok.lower_bound(content) > cap


def _terms(text: str) -> set[str]:
    # The index's own terms (stopwords out), so relevance agrees with search.
    return set(tokenize(text))


def _add(units: dict[str, Unit], unit: Unit, model: "str | tok.Tokenizer") -> Unit:
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
_EXCERPT: contextvars.ContextVar[tuple[int, int] | None] = \
    contextvars.ContextVar("excerpt", default=None)
_EXCERPT_KINDS = frozenset({"turn", "retrieved", "referenced", "thread", "instructions"})


def _offer_excerpt(unit: Unit, model: "str | tok.Tokenizer") -> None:
    """Give an oversized stored turn an ``excerpt`` variant: its head and tail with its
    size and how to read the rest, so one huge turn never makes the mandatory part
    impossible.  Only the excerpt is counted (bounded work whatever the turn's size)."""
    limits = _EXCERPT.get()
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
_TOKENIZER_KEY: contextvars.ContextVar[tuple[Any, ...] | None] = \
    contextvars.ContextVar("tokenizer_key", default=None)


@dataclass(frozen=True, slots=True)
class _Priced:
    role: str
    message: dict[str, Any]
    cost: int
    exact: bool


def _tokenizer_key(model: "str | tok.Tokenizer") -> tuple[Any, ...]:
    t = tok.resolve(model)
    return (t, id(t.counter))


def _priced_memo(stores: Stores) -> dict[tuple[Any, ...], _Priced]:
    return stores.state("priced_turns", _new_memo)


def _new_memo(_: Stores) -> dict[tuple[Any, ...], _Priced]:
    return {}


def _priced_unit(stores: Stores, session_id: str, turn_id: int, kind: str,
                 **features: Any) -> Unit | None:
    """The unit of a stored plain turn from the memo, or None (read the turn)."""
    tkey = _TOKENIZER_KEY.get()
    priced = None if tkey is None else _priced_memo(stores).get((session_id, turn_id, tkey))
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


def _add_turn(units: dict[str, Unit], stores: Stores, turn: Turn, kind: str,
              scratch: Any, model: "str | tok.Tokenizer", **features: Any) -> Unit:
    """``_add`` of a stored turn's unit, through the memo of plain turns."""
    plain = turn.role != "tool" and not _tool_call_ids(turn)
    if plain:
        unit = _priced_unit(stores, turn.session_id, turn.turn_id, kind, **features)
        if unit is not None:
            units[unit.id] = unit
            return unit
    unit = _add(units, _turn_unit(turn, kind, scratch, **features), model)
    tkey = _TOKENIZER_KEY.get()
    message = unit.variants["verbatim"]
    if plain and tkey is not None and not _past_cap(message):     # a count, not the bound
        keep(_priced_memo(stores), (turn.session_id, turn.turn_id, tkey),
             _Priced(turn.role, dict(message), unit.costs["verbatim"],
                     unit.variant_exact("verbatim")),
             _PRICED_MAX)
    return unit


def _turn_unit(turn: Turn, kind: str, scratch: Any = None, **features: Any) -> Unit:
    message = _message_for_turn(turn)
    seed_model = _STORED_COUNTS_MODEL.get()
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
    from ctxrelay.storage.lmdb.scratch import UnknownScratchError
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


#: How the boundary note tells the model to read cold history: through
#: context/3 (a Prolog agent), through the relay's tools (an OpenAI client), or not
#: at all (``none``: the caller offers no way to read it).
_HISTORY_ACCESS = {
    "context": ("with bounded operations (turn ids are 1-based):\n"
                'context(input(context), search("query"), Result).\n'
                "context(input(context), slice(Start, Length), Result).\n"
                "context(input(context), peek(item(Index)), Result)."),
    "tools": ("with the tools context_search (BM25 search of the whole transcript), "
              "context_slice (turns Start.. in order) and context_peek (one turn, or a "
              "part of a long one); turn ids are 1-based."),
    "none": "",
}


def boundary_text(first: int, last: int, count: int, tokens: int,
                  access: str = "context") -> str:
    how = _HISTORY_ACCESS[access]
    head = ("[managed_cold_history_boundary] This conversation is longer than what is shown. "
            f"Turns {first}-{last} ({count} turns, about {tokens} tokens) lie outside the "
            "guaranteed recent window; only some of them may appear below.")
    if not how:
        return head
    return (f"{head} The full original transcript is kept and is authoritative: retrieve it "
            f"before guessing about earlier content, {how}")


def candidates(stores: Stores, warm_store: Any, session_id: str,
               message: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Gather the candidate units for one assembly from the store's parts, within
    the limits Prolog set.

    ``message`` is the new user message text, or None when it is already the
    last stored turn (``history_end`` then excludes it).  Options: model,
    history_end (0 for a session not stored yet), window_tokens,
    min_recent_turns, tail_first (the first turn of the guaranteed tail),
    boundary (offer the cold-history boundary for turns before it),
    max_retrieved and retrieve_tokens (recalled turns are offered until
    either is reached), reference_turns (the latest turns and scratch
    entries handed to the reference resolver), instruction_turns (system
    turns among the session's first this many are offered as standing
    instructions), retrieval, warm, system, threads, embedder, pending
    (the new messages before ``message``, not stored yet: offered as
    mandatory units in their order).
    """
    store = stores.transcript
    model = str(options.get("model") or "cl100k_base")
    history_end = int(options["history_end"])
    window_tokens = int(options["window_tokens"])
    _COST_CAP.set(window_tokens)
    above, size = options.get("excerpt_above"), options.get("excerpt_tokens")
    _EXCERPT.set((int(above), int(size)) if above and size else None)
    _STORE_USED.set(set())
    counter = tok.resolve(model)      # resolved once: every unit below is counted with it
    _STORED_COUNTS_MODEL.set(_stored_counts_model(store, counter))
    _TOKENIZER_KEY.set(_tokenizer_key(counter))
    min_recent = int(options.get("min_recent_turns", 0))
    units: dict[str, Unit] = {}
    groups: list[list[str]] = []
    excludes: list[list[str]] = []
    info: dict[str, Any] = {"history_end": history_end}

    system_text = str(options.get("system") or "")
    if system_text:
        system_message = {"role": "system", "content": system_text}
        _add(units, Unit(id="system", kind="system", turn_ids=[],
                         variants={"verbatim": system_message}), counter)
    query_text = ""
    if message is not None:
        query_text = str(message)
        _add(units, Unit(id="message", kind="message", turn_ids=[],
                         variants={"verbatim": {"role": "user", "content": query_text}}), counter)
    pending = [_pending_unit(i, p) for i, p in enumerate(options.get("pending") or [])]
    for unit in pending:
        _add(units, unit, counter)

    reference_turns = int(options["reference_turns"])
    window, window_start = _read_window(stores, session_id, history_end, window_tokens,
                                        min_recent, int(options["instruction_turns"]))
    if message is None and window:
        query_text = window[-1].content
    call_owner: dict[str, int] = {}
    for turn in window:
        for cid in _tool_call_ids(turn):
            call_owner[cid] = turn.turn_id
    scratch = stores.scratch_if_present()
    for turn in window:
        kind = "instructions" if turn.role == "system" else "turn"
        _add_turn(units, stores, turn, kind, scratch, counter)
    _tool_groups(window, call_owner, groups)
    _pending_groups(pending, call_owner, groups)

    thread_info: dict[str, Any] = {}
    dense: Any = None
    if options.get("threads", True) and (history_end > 0 or message is not None):
        thread_info, dense = _thread_context(stores, session_id, message, query_text, window,
                                             history_end, units, counter, options, scratch)
    if options.get("retrieval", True) and query_text:
        from ctxrelay.text.embed import get_embedder
        embedder = get_embedder(options.get("embedder") or None) if dense is not None else None
        info["recall"] = _retrieve(stores, session_id, query_text, window_start, history_end,
                                   int(options.get("retrieve_tokens", window_tokens)),
                                   int(options.get("max_retrieved", 200)),
                                   units, groups, counter, scratch, dense, embedder,
                                   pair=bool(options.get("pair_turns", False)))

    if options.get("warm", True) and warm_store is not None:
        _warm_units(warm_store, session_id, query_text, history_end, units, excludes, counter)

    tail_first = int(options.get("tail_first", max(1, history_end - min_recent + 1)))
    if options.get("boundary", True) and tail_first > 1:
        first, last = 1, tail_first - 1
        count = last - first + 1
        prefix_tokens = _range_tokens(store, session_id, first, last, history_end)
        text = boundary_text(first, last, count, prefix_tokens,
                             str(options.get("history_access") or "context"))
        _add(units, Unit(id="boundary", kind="boundary", turn_ids=[],
                         variants={"verbatim": {"role": "system", "content": text}},
                         features={"omitted_first": first, "omitted_last": last,
                                   "omitted_count": count, "omitted_tokens": prefix_tokens}),
             counter)
    info.update(window_start=window_start, tail_first=tail_first,
                total_turns=history_end)
    info.update(thread_info)
    # What Prolog reads of the recent turns (references, mentions, novelty, seeds):
    # a bounded preview, so a huge turn costs the same as a short one there.
    preview = int(options.get("preview_chars", 2000))
    info["recent_turns"] = [{"turn_id": t.turn_id, "role": t.role,
                             "content": t.content[:preview]}
                            for t in window[-reference_turns:]] if reference_turns > 0 else []
    info["scratch_recent"] = [] if scratch is None or reference_turns <= 0 else [
        {"scratch_id": e.scratch_id, "tool_name": e.tool_name, "created": e.created}
        for e in scratch.latest(session_id, reference_turns)]
    if any(u.kind == "scratch" for u in units.values()):
        _used("pointer")
    info["store_used"] = sorted(_STORE_USED.get())
    priming = tok.count_messages([], counter).n
    cands = Candidates(session_id, model, units, priming, groups, excludes, info)
    return {"handle": cands, "units": [u.summary() for u in units.values()],
            "groups": groups, "excludes": excludes, "priming": priming, "info": info}


def _read_window(stores: Stores, session_id: str, end: int, window_tokens: int,
                 min_recent: int, instruction_turns: int) -> tuple[list[Turn], int]:
    """Recent turns, newest backwards, until they hold more than the budget.

    Stored per-turn token counts decide when to stop, so the read is bounded
    by the budget whatever the length of the history.  A tool result whose
    call lies just before the window pulls that call in, so a pair is never
    split by the window edge.
    """
    store = stores.transcript
    turns: list[Turn] = []
    used = 0
    hi = end
    while hi >= 1 and (used <= window_tokens or len(turns) < min_recent):
        lo = max(1, hi - _READ_CHUNK + 1)
        chunk = _ring_chunk(stores, session_id, lo, hi) if hi == end else None
        if chunk is None:
            chunk = store.history(session_id, lo, hi)
        for turn in reversed(chunk):
            turns.append(turn)
            used += turn.tokens + 4
            if used > window_tokens and len(turns) >= min_recent:
                break
        hi = lo - 1
    turns.reverse()
    while turns and turns[0].role == "tool" and turns[0].turn_id > 1:
        turns.insert(0, store.turn(session_id, turns[0].turn_id - 1))
    start = turns[0].turn_id if turns else end + 1
    # System turns among the first ``instruction_turns`` are standing instructions
    # (ctxrelay_assembly:instruction_turns/1): read them whatever the window.
    if turns and turns[0].turn_id > 1 and instruction_turns > 0:
        head = store.history(session_id, 1, min(instruction_turns, turns[0].turn_id - 1))
        turns[:0] = [t for t in head if t.role == "system"]
    return turns, start


def _used(primitive: str) -> None:
    try:
        _STORE_USED.get().add(primitive)
    except LookupError:                    # outside an assembly: nothing to report
        pass


def _ring_chunk(stores: Stores, session_id: str, lo: int, hi: int) -> list[Turn] | None:
    """The newest turns ``lo..hi`` from the rolling log (pointer reads, no search),
    when ``hi`` is at the session's end (a managed turn has just stored its
    message after it); None when the ring cannot serve the range."""
    from ctxrelay.retrieval.router import Router
    count = stores.transcript.turn_count(session_id)
    if hi < count - 1 or hi > count:
        return None
    turns = Router.of(stores).recent(session_id, count - lo + 1)
    chunk = [t for t in turns if lo <= t.turn_id <= hi]
    _used("log")
    return chunk


def _tool_groups(turns: list[Turn], call_owner: dict[str, int], groups: list[list[str]]) -> None:
    pairs: dict[int, list[str]] = {}
    for turn in turns:
        if turn.role == "tool" and turn.tool_call_id in call_owner:
            pairs.setdefault(call_owner[turn.tool_call_id], []).append(f"t{turn.turn_id}")
        elif turn.role == "tool" and turn.turn_id - 1 in {t.turn_id for t in turns}:
            # No id to match: a tool result belongs to the turn that precedes it.
            pairs.setdefault(turn.turn_id - 1, []).append(f"t{turn.turn_id}")
    for owner, members in sorted(pairs.items()):
        groups.append([f"t{owner}", *members])


def _pending_unit(index: int, message: dict[str, Any]) -> Unit:
    """A new message that comes before the user's in this turn (a tool call's
    result, an assistant message the client sent): not stored until the turn
    commits, packed as it will be stored."""
    turn = Turn(session_id="", turn_id=0, role=str(message["role"]),
                content=str(message["content"]), name=message.get("name"),
                tool_call_id=message.get("tool_call_id"),
                metadata=dict(message.get("metadata") or {}), timestamp="", key=None,
                tokens=0, tokens_exact=True)
    msg = _message_for_turn(turn)
    if turn.role == "tool" and not turn.tool_call_id:
        msg["tool_call_id"] = f"pending_{index}"
    return Unit(id=f"p{index}", kind="pending", turn_ids=[], variants={"verbatim": msg},
                features={"role": turn.role, "position": index})


def _pending_groups(pending: list[Unit], call_owner: dict[str, int],
                    groups: list[list[str]]) -> None:
    """A pending tool result goes with its stored call: providers reject a
    result whose call is not in the request."""
    for unit in pending:
        call_id = unit.variants["verbatim"].get("tool_call_id")
        if unit.features["role"] == "tool" and call_id in call_owner:
            groups.append([f"t{call_owner[call_id]}", unit.id])


def _retrieve(stores: Stores, session_id: str, query: str, window_start: int,
              history_end: int, retrieve_tokens: int, max_retrieved: int,
              units: dict[str, Unit], groups: list[list[str]], model: "str | tok.Tokenizer",
              scratch: Any = None, dense: Any = None, embedder: Any = None,
              pair: bool = False) -> dict[str, Any]:
    """Earlier turns for the query, ranked by :mod:`ctxrelay.retrieval.recall` (lexical,
    dense and the conversation's structure).  Turns already in the window
    get their relevance as a feature; older ones become ``retrieved``
    candidates until they hold ``_RETRIEVE_OVERSUPPLY`` times the budget
    (the packer chooses among them) or ``max_retrieved`` turns."""
    from ctxrelay.retrieval.recall import recall
    if max_retrieved <= 0 or history_end < 1:
        return {}
    import time
    t0 = time.perf_counter()
    store = stores.transcript
    ranked, info = recall(stores, session_id, query, upto=history_end, dense=dense,
                          embedder=embedder)
    info["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    _used("index")
    offered, count = 0, 0
    loaded: dict[int, Turn] = {}
    older: list[int] | None = None
    direct: set[str] = set()        # candidates this ranking scores (not marked below)
    ids, scores = ranked.ids, ranked.scores
    budget = retrieve_tokens
    for at, turn_id in enumerate(ids):
        if count >= max_retrieved or offered >= budget:
            break
        uid = f"t{turn_id}"
        if turn_id >= window_start or uid in units:
            continue
        score = scores[at]
        direct.add(uid)
        unit = _priced_unit(stores, session_id, turn_id, "retrieved", score=score)
        if unit is not None:                        # a plain turn offered before: no read
            if unit.features["role"] != "system":
                units[uid] = unit
                offered += unit.costs["verbatim"]
                count += 1
            continue
        if turn_id not in loaded:
            # One read for the next stretch of the ranking, not one per turn.
            if older is None:
                older = [t for t in ids if t < window_start]
            pos = older.index(turn_id)
            batch = [t for t in older[pos:pos + _READ_CHUNK] if t not in loaded]
            loaded.update((t.turn_id, t) for t in store.turns(session_id, batch))
        turn = loaded[turn_id]
        if turn.role == "system":
            continue
        added = _add_with_tool_family(stores, session_id, turn, "retrieved", units, groups, model,
                                      scratch, score=score)
        offered += sum(min(u.costs.values()) for u in added)
        count += 1
    if pair:
        _pair_questions_and_answers(stores, session_id, direct, window_start, history_end,
                                    units, groups, model, scratch)
    # Turns offered for another reason (the window, a resumed thread, the tool
    # pair of a candidate) carry their place in the ranking as relevance.
    score_of = dict(zip(ids, scores))
    for uid, unit in units.items():
        if uid in direct or len(unit.turn_ids) != 1 or uid != f"t{unit.turn_ids[0]}":
            continue
        score = score_of.get(unit.turn_ids[0])
        if score is not None:
            unit.features.setdefault("relevance", score)
    info["retrieved"] = count
    return info


def _pair_questions_and_answers(stores: Stores, session_id: str, recalled: set[str],
                                window_start: int, history_end: int, units: dict[str, Unit],
                                groups: list[list[str]], model: "str | tok.Tokenizer",
                                scratch: Any) -> None:
    """A recalled answer comes with its question and a recalled question with its
    answer (packed together or not at all), so no pack shows a reply without what
    it replies to."""
    wanted: dict[str, int] = {}
    for uid in recalled:
        unit = units.get(uid)
        if unit is None or unit.kind != "retrieved" or len(unit.turn_ids) != 1:
            continue
        tid, role = unit.turn_ids[0], unit.features.get("role")
        partner = tid - 1 if role == "assistant" else tid + 1 if role == "user" else None
        if partner is None or not 1 <= partner <= history_end:
            continue
        wanted[uid] = partner
    missing = sorted({p for p in wanted.values()
                      if f"t{p}" not in units and p < window_start})
    loaded = {t.turn_id: t for t in stores.transcript.turns(session_id, missing)} \
        if missing else {}
    for uid, partner in wanted.items():
        pid = f"t{partner}"
        role = units[uid].features.get("role")
        if pid not in units:
            turn = loaded.get(partner)
            want = "user" if role == "assistant" else "assistant"
            if turn is None or turn.role != want or _tool_call_ids(turn):
                continue
            _add_turn(units, stores, turn, "retrieved", scratch, model, score=0.0)
        elif units[pid].features.get("role") != ("user" if role == "assistant" else "assistant"):
            continue
        groups.append(sorted([uid, pid], key=lambda u: int(u[1:])))


def _add_with_tool_family(stores: Stores, session_id: str, turn: Turn, kind: str,
                          units: dict[str, Unit], groups: list[list[str]],
                          model: "str | tok.Tokenizer", scratch: Any,
                          **features: Any) -> list[Unit]:
    """Add ``turn`` with its tool call and results (packed together), return the new units.

    ``features`` go to ``turn`` itself; the family members it pulls in carry
    a score of 0 when ``turn`` is scored.
    """
    added: list[Unit] = []
    ids = []
    for member in _tool_family(stores.transcript, session_id, turn):
        uid = f"t{member.turn_id}"
        if uid not in units:
            extra = features if member.turn_id == turn.turn_id else \
                {k: 0.0 for k in features if k == "score"}
            added.append(_add_turn(units, stores, member, kind, scratch, model, **extra))
        ids.append(uid)
    if len(ids) > 1:
        groups.append(ids)
    return added


def _tool_family(store: TranscriptStore, session_id: str, turn: Turn) -> list[Turn]:
    """A tool call with all its results (providers reject a call without them), or the turn alone."""
    call = turn
    if turn.role == "tool":
        lo = max(1, turn.turn_id - _TOOL_LOOKBACK)
        before = store.history(session_id, lo, turn.turn_id - 1)
        owners = [t for t in before if turn.tool_call_id in _tool_call_ids(t)]
        if not owners:
            return [turn]
        call = owners[-1]
    ids = set(_tool_call_ids(call))
    if not ids:
        return [turn]
    after = store.history(session_id, call.turn_id + 1, call.turn_id + len(ids) + _TOOL_LOOKBACK)
    results = [t for t in after if t.role == "tool" and t.tool_call_id in ids]
    return [call, *results]


def _warm_units(warm_store: Any, session_id: str, query: str, history_end: int,
                units: dict[str, Unit], excludes: list[list[str]],
                model: "str | tok.Tokenizer") -> None:
    """The session's latest warm artifacts as candidates, with the counts their
    relevance is made of: the query's index terms, and how many of them the
    artifact holds.  Which are offered and what they are worth is Prolog's
    (ctxrelay_utility: offered/2, warm_relevance/2)."""
    from ctxrelay.storage.lmdb.warm import variants as warm_variants
    q = _terms(query)
    for art in warm_store.latest(session_id):
        # An artifact summarises user, assistant and tool text: it is rendered
        # as reference material (a named user message), never with system authority.
        forms = {v["variant"]: {"role": "user", "name": "artifact", "content": v["text"]}
                 for v in warm_variants(art)}
        text = " ".join([art.summary, *art.facts, *art.decisions, *art.entities])
        terms = _terms(text)
        unit = _add(units, Unit(id=f"w{art.start}_{art.end}", kind="warm",
                                turn_ids=list(range(art.start, art.end + 1)), variants=forms,
                                features={"query_terms": len(q), "shared_terms": len(q & terms),
                                          "version": art.version,
                                          "start": art.start, "end": art.end}), model)
        for tid in range(art.start, min(art.end, history_end) + 1):
            if f"t{tid}" in units:
                excludes.append([unit.id, f"t{tid}"])


def _range_tokens(store: TranscriptStore, session_id: str, first: int, last: int,
                  history_end: int) -> int:
    """Tokens of turns first..last from the stored counters (no scan of the prefix)."""
    total = store.stats(session_id).tokens
    after = store.history(session_id, last + 1, None)
    return max(0, total - sum(t.tokens for t in after))


def render(cands: Candidates, plan: list[list[str]]) -> dict[str, Any]:
    """Render ``plan`` ([unit id, variant] in order) and count it as the provider will.

    Returns the messages, the per-unit charged tokens, the per-stage ledger
    figures, the observed total (a fresh count of the whole request) and the
    host-only tokens (:func:`host_only_tokens`).
    """
    messages: list[dict[str, Any]] = []
    per_unit: list[dict[str, Any]] = []
    for unit_id, variant in plan:
        unit = cands.unit(unit_id)
        msg = dict(unit.variants[variant])
        messages.append(msg)
        whole = unit.costs[variant]
        framing = tok.framing_overhead([msg], cands.model, prime_reply=False)
        per_unit.append({"id": unit_id, "kind": unit.kind, "variant": variant,
                         "turn_ids": unit.turn_ids, "tokens": whole,
                         "content_tokens": whole - framing, "framing": framing,
                         "exact": unit.variant_exact(variant)})
    observed = tok.count_messages(messages, cands.model) if messages else None
    return {"messages": messages, "units": per_unit,
            "observed_total": observed.n if observed else cands.priming,
            "observed_exact": observed.exact if observed else True,
            "priming": cands.priming,
            "host_only": host_only_tokens(cands, plan, cands.model)}


# Scores that chose this pack: reported with the pack, not part of a unit's record.
_PER_QUERY = frozenset({"relevance", "score", "rank", "query_terms", "shared_terms"})


def host_only_tokens(cands: Candidates, plan: list[list[str]],
                     model: "str | tok.Tokenizer") -> int:
    """Tokens of what the host keeps beside the request: one metadata record per
    packed unit (its id, turn ids and own fields, as sorted-key JSON), never sent.

    Each record is counted on its own, so a unit packed again on the next turn
    costs a memo lookup rather than another BPE pass over the whole list.
    """
    counter = tok.resolve(model)
    total = 0
    for unit_id, _variant in plan:
        unit = cands.unit(unit_id)
        record = {k: v for k, v in unit.features.items() if k not in _PER_QUERY}
        record.update(id=unit.id, turn_ids=unit.turn_ids)
        total += counter.count(json.dumps(record, sort_keys=True, default=str)).n
    return total


def _thread_context(stores: Stores, session_id: str, message: Any, query_text: str,
                    window: list[Turn], history_end: int, units: dict[str, Unit],
                    model: "str | tok.Tokenizer", options: dict[str, Any],
                    scratch: Any) -> tuple[dict[str, Any], Any]:
    """Topic thread of the new message, its similarity, and a resumed thread's turns.

    The turn log is brought up to date first (only turns added since the last
    call are embedded).  The thread rules then place the new message exactly
    as the turn log will place it once stored (``ThreadBook.place``: continue,
    resume, join or new); when the rules say to restore an earlier thread it
    returns to, that thread's dormant turns come back as candidates (kind
    ``thread``) with its Active Thread Summary.
    """
    import time

    from ctxrelay.text.embed import get_embedder
    embedder = get_embedder(options.get("embedder") or None)
    store, log = stores.transcript, stores.turnlog
    t0 = time.perf_counter()
    if history_end > 0:                   # else the session is not stored yet
        log.sync(store, session_id, embedder)
    sync_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    vec = embedder.embed_batch([derived_text(query_text or "")])[0]
    embed_ms = (time.perf_counter() - t0) * 1000
    out: dict[str, Any] = {"embedder": embedder.model_id, "embed_ms": round(embed_ms, 3),
                           "turnlog_sync_ms": round(sync_ms, 3),
                           "topic_threshold": float(embedder.thresholds["topic_same"]),
                           "active_thread": "", "thread_label": "", "thread_resumed": False}
    if message is None:                   # the message is stored: the turn log placed it
        derived = log.derived(session_id, history_end)
        if derived is not None and derived.thread_id:
            out.update(active_thread=derived.thread_id,
                       thread_label=log.thread(session_id, derived.thread_id).label)
        return out, (log, vec)
    book = log.thread_book(session_id, embedder.thresholds)
    placed = book.place(query_text, vec)
    out.update(thread_action=placed.action, thread_rule=placed.rule,
               topic_similarity=placed.similarity)
    if placed.action == "new":
        tid, label = log.next_label(session_id, query_text)
        out.update(active_thread=tid, thread_label=label)
        return out, (log, vec)
    info = book.entries[placed.thread_id].record
    out.update(active_thread=placed.thread_id, thread_label=info["label"],
               thread_resumed=placed.resumed)
    if placed.restore:
        in_window = {t.turn_id for t in window}
        dormant = [t for t in info["turn_ids"] if t not in in_window and t <= history_end]
        wanted = [tid for tid in dormant[-_DORMANT_MAX:] if f"t{tid}" not in units]
        for turn in store.turns(session_id, wanted):
            if turn.role == "tool" or _tool_call_ids(turn):
                continue                      # pairs come back through retrieval, whole
            _add_turn(units, stores, turn, "thread", scratch, model)
        full = log.thread(session_id, placed.thread_id, store)
        text = full.state.summary(full.label)
        _add(units, Unit(id="thread_summary", kind="thread_summary", turn_ids=[],
                         variants={"verbatim": {"role": "user", "name": "thread_state",
                                                "content": text}},
                         features={"thread_id": placed.thread_id}), model)
    return out, (log, vec)


def add_turn_units(cands: Candidates, stores: Stores, turn_ids: list[int],
                   kind: str = "referenced") -> list[dict[str, Any]]:
    """Offer the turns a reference resolved to (and their tool pairs) as candidates."""
    store, scratch = stores.transcript, stores.scratch_if_present()
    added: list[dict[str, Any]] = []
    for tid in sorted({int(t) for t in turn_ids}):
        if f"t{tid}" in cands.units or not 1 <= tid <= cands.info["history_end"]:
            continue
        turn = store.turn(cands.session_id, tid)
        added.extend(u.summary() for u in _add_with_tool_family(
            stores, cands.session_id, turn, kind, cands.units, cands.groups, cands.model, scratch))
    return added


def knowledge_text(fact: dict[str, Any]) -> str:
    """A CKF fact as context: labelled as knowledge with its source, so the
    model can tell reference material from the conversation."""
    source = fact.get("source_location") or fact.get("source_id") or "knowledge store"
    return f"[knowledge {fact['fact_id']} from {source}]\n{fact['content']}"


def has_knowledge(stores: Stores) -> bool:
    """Whether the store has a knowledge base (Tier P) to retrieve from at all."""
    return stores.has("facts")


def add_router_fact_units(cands: Candidates, result: Any) -> dict[str, Any]:
    """Offer the facts of a router retrieval (``ctxrelay.retrieval.router``) as units."""
    # A fact another session owns never enters this session's pack.
    items = [i for i in result.items if i.get("kind") == "fact"
             and visible_to(i.get("record") or {}, cands.session_id)]
    out: dict[str, Any] = {"units": [], "facts": 0, "store_used": list(result.store_used),
                           "cache_hit": bool(result.cache_hit),
                           "retrieval_ms": round(float(result.retrieval_ms), 3)}
    if not items:
        return out
    top = max(max(float(i["score"]) for i in items), 1e-9)
    for item in items:
        if f"f{item['id']}" in cands.units:
            continue
        fact = item.get("record") or {"fact_id": item["id"], "content": item.get("text", "")}
        unit = fact_unit(cands, fact, max(0.0, float(item["score"]) / top),
                         role=item.get("role", "match"))
        out["units"].append(unit.summary())
    out["facts"] = len(out["units"])
    return out


def fact_unit(cands: Candidates, fact: dict[str, Any], score: float, **features: Any) -> Unit:
    """Add a CKF fact (Tier P) as a candidate: a user-role message named
    ``knowledge``, so reference material never gains system authority."""
    message = {"role": "user", "name": "knowledge", "content": knowledge_text(fact)}
    return _add(cands.units, Unit(id=f"f{fact['fact_id']}", kind="fact", turn_ids=[],
                                  variants={"verbatim": message},
                                  features={"fact_id": fact["fact_id"], "score": score,
                                            "source": fact.get("source_id") or "", **features}),
                cands.model)
