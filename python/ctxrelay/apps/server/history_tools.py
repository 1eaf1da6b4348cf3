"""Cold history as OpenAI tools, run by the relay itself (a server-side tool loop).

A pack shows the recent turns and what recall found; the rest of the
transcript stays reachable.  A Prolog agent reads it with context/3; a model
behind the relay gets the same operations as three tools the relay offers
when the pack hides turns, and executes itself when the model calls them:

``context_search(query, k)``   BM25 search of the whole transcript
``context_slice(start, length)``  turns ``start..`` in order
``context_peek(turn, start, length)``  one turn, or a part of a long one

The loop is bounded in rounds (``max_rounds``) and in tokens: before each
round the request is counted, and a tool result may use only what the input
budget leaves (less a margin), so every round stays within the cap.  The
model's calls and their results are not stored: the reply is, as for any turn.
"""
from __future__ import annotations

import json
from typing import Any

from ctxrelay.errors import CtxRelayError
from ctxrelay.runtime import Runtime
from ctxrelay.text import tokens as tok

NAMES = ("context_search", "context_slice", "context_peek")
ROUND_MARGIN = 64           # tokens kept free in every round beside the results

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "context_search",
        "description": "Search the whole conversation transcript (BM25) for turns about a "
                       "query; returns the best turns with their ids.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "k": {"type": "integer", "description": "how many turns (default 5)"}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "context_slice",
        "description": "Read consecutive turns of the conversation, from turn id start "
                       "(1-based).",
        "parameters": {"type": "object", "properties": {
            "start": {"type": "integer"}, "length": {"type": "integer"}},
            "required": ["start", "length"]}}},
    {"type": "function", "function": {
        "name": "context_peek",
        "description": "Read one turn by id; for a long turn, characters start.. of its text.",
        "parameters": {"type": "object", "properties": {
            "turn": {"type": "integer"}, "start": {"type": "integer"},
            "length": {"type": "integer"}},
            "required": ["turn"]}}},
]


def offered(client_tools: Any) -> list[dict[str, Any]]:
    """The history tools to add beside the client's own (none whose name it uses)."""
    taken = {t.get("function", {}).get("name") for t in client_tools or []
             if isinstance(t, dict)}
    return [t for t in TOOLS if t["function"]["name"] not in taken]


def calls_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of an upstream chat.completion (choice 0)."""
    message = ((data.get("choices") or [{}])[0] or {}).get("message") or {}
    calls = message.get("tool_calls") or []
    return [c for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]


def without_calls(data: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """The completion without its calls of the tools ``names`` (the relay's, offered
    this turn): the answer the client gets, and the turn stores, calls only tools the
    client has.  A reply that called nothing else is left with no tool calls."""
    message = ((data.get("choices") or [{}])[0] or {}).get("message")
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    if not names or not isinstance(calls, list):
        return data
    kept = [c for c in calls if not (isinstance(c, dict) and isinstance(c.get("function"), dict)
                                     and c["function"].get("name") in names)]
    if len(kept) == len(calls):
        return data
    choice = dict(data["choices"][0])
    choice["message"] = {k: v for k, v in message.items() if k != "tool_calls"}
    if kept:
        choice["message"]["tool_calls"] = kept
    elif choice.get("finish_reason") == "tool_calls":
        choice["finish_reason"] = "stop"
    return {**data, "choices": [choice, *data["choices"][1:]]}


def request_tokens(rt: Runtime, messages: list[dict[str, Any]], model: str | None) -> int:
    """The exact size of a request, counted as the ledger counts it."""
    return tok.count_messages(messages, model or "gpt-4").n


def run_calls(rt: Runtime, session_id: str, calls: list[dict[str, Any]],
              max_tokens: int, shown_id: str | None = None) -> list[dict[str, Any]]:
    """Execute the model's history calls through context/3, their results within
    about ``max_tokens`` together (the turns' text gets 3/4 of each call's share,
    the JSON around it the rest); returns the tool messages.  ``session_id`` is
    the stored id; an error text names ``shown_id`` (the client's) instead, so a
    tenant's prefix never reaches the model or the client."""
    share = max(0, (max_tokens * 3 // 4) // max(1, len(calls)))
    out = []
    for call in calls:
        fn = call["function"]
        try:
            args = json.loads(fn.get("arguments") or "{}")
            if not isinstance(args, dict):
                raise ValueError("the arguments are not a JSON object")
            result = _run(rt, session_id, fn.get("name"), args, share) if share >= 32 else \
                {"error": "no room is left in the context window for more history; answer "
                          "with what you have"}
        except (ValueError, TypeError, CtxRelayError) as exc:
            text = f"{type(exc).__name__}: {exc}"
            if shown_id is not None and shown_id != session_id:
                text = text.replace(session_id, shown_id)
            result = {"error": text}
        # As request.stored_tool_calls keeps them: a null id is "", not the text "None".
        out.append({"role": "tool", "tool_call_id": str(call.get("id") or ""),
                    "content": json.dumps(_compact(result), ensure_ascii=False,
                                          separators=(",", ":"))})
    return out


def _compact(result: Any) -> Any:
    """What the model needs of a context/3 result: turn ids, roles, texts."""
    if isinstance(result, dict) and isinstance(result.get("items"), list):
        return {"turns": [{"turn": i.get("turn_id"), "role": i.get("role"),
                           "text": i.get("content")} for i in result["items"]],
                "truncated": result.get("truncated"), "total_turns": result.get("total_turns")}
    if isinstance(result, dict) and "turn_id" in result and "content" in result:
        return {"turn": result["turn_id"], "role": result.get("role"), "text": result["content"]}
    return result


def _int(args: dict[str, Any], name: str, default: int | None = None) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer")
    return value


def _run(rt: Runtime, session_id: str, name: Any, args: dict[str, Any],
         max_tokens: int) -> Any:
    bound = {"max_tokens": max_tokens, "max_items": 20}
    if name == "context_search":
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        k = max(1, min(20, _int(args, "k", 5)))
        # A Prolog string literal: JSON's escapes of quotes, backslashes and control
        # characters are Prolog's too; the rest stays literal (ensure_ascii would write an
        # emoji as a surrogate pair, which Prolog refuses: 'Illegal character code').
        return rt.context(session_id, f"search({json.dumps(query, ensure_ascii=False)})",
                          k=k, **bound)
    if name == "context_slice":
        start, length = _int(args, "start"), _int(args, "length")
        return rt.context(session_id, f"slice({max(1, start)}, {max(1, length)})", **bound)
    if name == "context_peek":
        turn = _int(args, "turn")
        start, length = _int(args, "start", 0), _int(args, "length", max_tokens * 4)
        return rt.context(session_id,
                          f"peek(text({max(1, turn)}, {max(0, start)}, {max(1, length)}))",
                          **bound)
    raise ValueError(f"unknown tool {name!r}; use one of {', '.join(NAMES)}")
