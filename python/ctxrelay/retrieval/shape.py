"""Applying a request shape that Prolog chose (``ctxrelay_shape``).

Strict chat templates (Llama, Mistral and others served by vLLM, TGI or
llama.cpp) accept one leading system message, then user and assistant
messages strictly alternating, starting and ending with the user.  Prolog
decides how a rendered pack is brought into that shape (which messages merge,
which are framed as text); this module joins the texts and counts the result
exactly, so the ledger reports what the provider will see.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.text import tokens as tok

_SEPARATOR = "\n\n"


def _as_text(message: dict[str, Any]) -> str:
    """A message's content as plain text; tool calls and results framed in words."""
    role, content = message.get("role"), message.get("content") or ""
    calls = message.get("tool_calls") or []
    if role == "assistant" and calls:
        said = [f"[called tool {c['function']['name']} with {c['function']['arguments']}]"
                for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]
        return _SEPARATOR.join([content, *said]) if content else _SEPARATOR.join(said)
    if role == "tool":
        return f"[tool result {message.get('tool_call_id', '')}]\n{content}"
    return content


def apply_shape(messages: list[dict[str, Any]], plan: list[dict[str, Any]],
                model: "str | tok.Tokenizer") -> dict[str, Any]:
    """The messages after ``plan`` and their exact count.

    ``plan`` is a list of output messages, each ``{"role", "from": [indexes],
    "framed": [indexes], "frame": prefix, "text": bool}``: the contents of
    ``from`` (as text, tool calls and results written out) joined by blank
    lines, the ``framed`` ones first after ``frame``.  A single unframed
    message of the same role with no tool parts is kept as it is.
    """
    out: list[dict[str, Any]] = []
    for step in plan:
        members = [messages[int(i)] for i in step["from"]]
        role, frame = str(step["role"]), str(step.get("frame") or "")
        as_text = step.get("text") in (True, "true")
        if len(members) == 1 and not frame and not as_text and members[0].get("role") == role:
            out.append(dict(members[0]))
            continue
        framed = {int(i) for i in step.get("framed") or []}
        intro = _SEPARATOR.join(_as_text(messages[int(i)]) for i in step["from"]
                                if int(i) in framed)
        rest = _SEPARATOR.join(_as_text(messages[int(i)]) for i in step["from"]
                               if int(i) not in framed)
        text = _SEPARATOR.join(p for p in (f"{frame}{intro}" if intro else "", rest) if p)
        out.append({"role": role, "content": text})
    counted = tok.count_messages(out, model) if out else None
    return {"messages": out, "observed_total": counted.n if counted else 0,
            "observed_exact": counted.exact if counted else True}


def shape_rendered(cands: Any, rendered_messages: list[dict[str, Any]],
                   plan: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`apply_shape` for an assembly (the candidates' tokenizer)."""
    return apply_shape([dict(m) for m in rendered_messages], [dict(s) for s in plan], cands.model)


def roles(messages: list[dict[str, Any]]) -> list[str]:
    """What the shape rule reads of each message: its role, ``assistant_call`` for
    an assistant message with tool calls."""
    return ["assistant_call" if m.get("role") == "assistant" and m.get("tool_calls") else
            str(m.get("role")) for m in messages]


__all__ = ["apply_shape", "shape_rendered", "roles"]
