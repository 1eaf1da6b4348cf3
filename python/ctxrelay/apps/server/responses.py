"""What the relay answers: CRP headers, chat.completion bodies, server-sent events."""
from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ctxrelay.types import TurnResult

from .request import ChatRequest

from .config import SESSION_HEADER
from .errors import ApiError

TURN_HEADERS = frozenset({SESSION_HEADER, "CRP-User-Turn", "CRP-Assistant-Turn"})


def _header_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(
        value, (dict, list)) else str(value)
    text = re.sub(r"[\r\n]+", " ", text)
    return text.encode("latin-1", "replace").decode("latin-1")


def crp_headers(result: TurnResult | None, chat: ChatRequest, user_turn: int | None,
                assistant_turn: int | None = None) -> dict[str, str]:
    """Every header of the pack, plus the session and the turn ids."""
    headers: dict[str, str] = {}
    if result is not None:
        headers = {str(k): _header_value(v) for k, v in result.headers.items()}
        headers.setdefault("CRP-Context-Tokens-Used",
                           f"{result.ledger.total}/{result.ledger.input_budget}")
    headers[SESSION_HEADER] = _header_value(chat.session_id)
    if user_turn is not None:
        headers["CRP-User-Turn"] = str(user_turn)
    if assistant_turn is not None:
        headers["CRP-Assistant-Turn"] = str(assistant_turn)
    return headers


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def openai_tool_calls(stored: Any) -> list[dict[str, Any]]:
    """A turn's stored tool calls (``{id, name, arguments}``, request.stored_tool_calls)
    in the form OpenAI answers them."""
    return [{"id": c.get("id", ""), "type": "function",
             "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "{}")}}
            for c in stored or [] if isinstance(c, dict)]


def completion_body(content: str, model: str, *, completion_id: str | None = None,
                created: int | None = None, finish_reason: str = "stop",
                usage: Mapping[str, Any] | None = None,
                tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        # OpenAI's form of a reply that calls tools: content null when it says nothing.
        message = {"role": "assistant", "content": content or None, "tool_calls": tool_calls}
        finish_reason = "tool_calls"
    body: dict[str, Any] = {
        "id": completion_id or new_completion_id(), "object": "chat.completion",
        "created": created or int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message,
                     "logprobs": None, "finish_reason": finish_reason}]}
    if usage:
        body["usage"] = dict(usage)
    return body


def sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def sse_error(error: ApiError) -> str:
    return sse(error.body())


def synthetic_stream(content: str, model: str, *, completion_id: str | None = None,
                      usage: Mapping[str, Any] | None = None,
                      tool_calls: list[dict[str, Any]] | None = None) -> list[str]:
    """A whole reply as OpenAI ``chat.completion.chunk`` events, word by word; its tool
    calls (OpenAI form) follow in one chunk."""
    cid, created = completion_id or new_completion_id(), int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None) -> str:
        return sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                     "model": model, "choices": [{"index": 0, "delta": delta,
                                                  "logprobs": None, "finish_reason": finish}]})
    events = [chunk({"role": "assistant", "content": ""}, None)]
    events += [chunk({"content": piece}, None) for piece in re.findall(r"\s*\S+\s*", content)
               or ([content] if content else [])]
    if tool_calls:
        events.append(chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(tool_calls)]},
                            None))
    events.append(chunk({}, "tool_calls" if tool_calls else "stop"))
    if usage is not None:
        events.append(sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                            "model": model, "choices": [], "usage": dict(usage)}))
    return events


class TurnGuard:
    """Holds a session until the turn is over; releases it exactly once.

    ``lock`` is anything with ``release()``: the relay's :class:`~.gate.Held`."""

    def __init__(self, lock: Any) -> None:
        self._lock: Any = lock
        self.handed_over = False        # a TurnStream releases it when the stream ends

    def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.release()


class TurnStream(StreamingResponse):
    """A streaming response that ends its turn however the stream ends.

    When the client goes away mid-stream Starlette stops iterating; closing the
    generator here runs its ``finally`` (which closes the upstream stream) and
    the session's lock is released in every case.
    """

    def __init__(self, content: AsyncIterator[str], *, guard: TurnGuard,
                 headers: Mapping[str, str]) -> None:
        super().__init__(content, headers={**headers, "Cache-Control": "no-cache"},
                         media_type="text/event-stream")
        self._guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            try:
                if aclose is not None:
                    await aclose()
            finally:
                self._guard.release()



def turn_ids_event(user_turn: int | None, assistant_turn: int | None) -> str:
    """An SSE comment with the stored turn ids, sent just before ``[DONE]``: a stream's
    headers go out before its turn is stored.  OpenAI clients skip comment lines."""
    return f": CRP-User-Turn: {user_turn}, CRP-Assistant-Turn: {assistant_turn}\n\n"
