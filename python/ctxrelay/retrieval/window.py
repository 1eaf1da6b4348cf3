"""The recent window of a session and the boundary note for the turns before it.

The window is read backwards only until it holds more tokens than the budget
(stored per-turn counts decide), so its cost follows the budget, not the
length of the history; it and the boundary's token count are kept between
assemblies while the store is unchanged (:mod:`ctxrelay.retrieval.prepared`).
Also here: the tool call/result pairs of the window, and the turn's pending
messages (new tool results or assistant messages stored with the turn).
"""
from __future__ import annotations

from typing import Any

from ctxrelay.retrieval.prepared import prepared
from ctxrelay.retrieval.pricing import STORE_USED, mark_used
from ctxrelay.retrieval.units import Unit, message_for_turn
from ctxrelay.storage.interfaces.transcript import Transcript
from ctxrelay.storage.stores import Stores
from ctxrelay.types import Turn

READ_CHUNK = 32              # turns per read, backwards through the window or along a ranking
_READ_CHUNK = READ_CHUNK

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


def read_window(stores: Stores, session_id: str, end: int, window_tokens: int,
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


def kept_or_read(stores: Stores, key: tuple[Any, ...], generation: Any, read: Any) -> Any:
    """``read()``, or its value kept from an earlier assembly at the same store
    generation (:mod:`ctxrelay.retrieval.prepared`); the primitives it used are
    reported as used either way."""
    def run() -> tuple[Any, frozenset[str]]:
        token = STORE_USED.set(set())
        try:
            value = read()
            return value, frozenset(STORE_USED.get())
        finally:
            STORE_USED.reset(token)
    value, used = prepared(stores).get(key, generation, run)
    for primitive in used:
        mark_used(primitive)
    return value


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
    mark_used("log")
    return chunk


def tool_groups(turns: list[Turn], call_owner: dict[str, int], groups: list[list[str]]) -> None:
    """Group each stored tool result with the turn that called it (ids ``t<turn id>``)."""
    pairs: dict[int, list[str]] = {}
    for turn in turns:
        if turn.role == "tool" and turn.tool_call_id in call_owner:
            pairs.setdefault(call_owner[turn.tool_call_id], []).append(f"t{turn.turn_id}")
        elif turn.role == "tool" and turn.turn_id - 1 in {t.turn_id for t in turns}:
            # No id to match: a tool result belongs to the turn that precedes it.
            pairs.setdefault(turn.turn_id - 1, []).append(f"t{turn.turn_id}")
    for owner, members in sorted(pairs.items()):
        groups.append([f"t{owner}", *members])


def pending_unit(index: int, message: dict[str, Any]) -> Unit:
    """A new message that comes before the user's in this turn (a tool call's
    result, an assistant message the client sent): not stored until the turn
    commits, packed as it will be stored."""
    turn = Turn(session_id="", turn_id=0, role=str(message["role"]),
                content=str(message["content"]), name=message.get("name"),
                tool_call_id=message.get("tool_call_id"),
                metadata=dict(message.get("metadata") or {}), timestamp="", key=None,
                tokens=0, tokens_exact=True)
    msg = message_for_turn(turn)
    if turn.role == "tool" and not turn.tool_call_id:
        msg["tool_call_id"] = f"pending_{index}"
    return Unit(id=f"p{index}", kind="pending", turn_ids=[], variants={"verbatim": msg},
                features={"role": turn.role, "position": index})


def pending_groups(pending: list[Unit], call_owner: dict[str, int],
                   groups: list[list[str]]) -> None:
    """A pending tool result goes with its stored call: providers reject a
    result whose call is not in the request."""
    for unit in pending:
        call_id = unit.variants["verbatim"].get("tool_call_id")
        if unit.features["role"] == "tool" and call_id in call_owner:
            groups.append([f"t{call_owner[call_id]}", unit.id])


def range_tokens(store: Transcript, session_id: str, first: int, last: int,
                 history_end: int) -> int:
    """Tokens of turns first..last from the stored counters (no scan of the prefix)."""
    total = store.stats(session_id).tokens
    after = store.history(session_id, last + 1, None)
    return max(0, total - sum(t.tokens for t in after))
