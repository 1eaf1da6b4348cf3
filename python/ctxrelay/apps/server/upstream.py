"""Calls to the upstream (any OpenAI-compatible API) and their errors.

Nothing of a turn is stored until its reply is complete (ctxrelay_runtime:
turn_commit/4), so an upstream failure leaves the transcript as it was and a
retry, keyed or not, is safe.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from .errors import ApiError
from .responses import TURN_HEADERS
from .request import ChatRequest, stored_tool_calls

if TYPE_CHECKING:
    from .app import Relay

_SNIPPET = 300
_NOTHING_STORED = "nothing of this turn was stored, so retrying is safe"


def upstream_said(response: httpx.Response) -> tuple[str, Any]:
    """(message, code) from an upstream error body, OpenAI-style or not."""
    text = response.text
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and err.get("message") is not None:
            return str(err["message"]), err.get("code")
        if isinstance(err, str):
            return err, None
        for key in ("message", "detail"):
            if data.get(key) is not None:
                return str(data[key]), None
    text = text.strip()
    return (text[:_SNIPPET] + "..." if len(text) > _SNIPPET else text) or "no body", None


class Upstream:
    """Error mapping for one upstream call; ``headers`` go on every error answer."""

    def __init__(self, relay: Relay, chat: ChatRequest, headers: dict[str, str]) -> None:
        self.relay = relay
        self.chat = chat
        self.url = f"{relay.config.upstream}/chat/completions"
        self.headers = dict(headers)

    def timeout(self, stage: str) -> ApiError:
        return ApiError(504, f"the upstream {self.relay.config.upstream_label} did not answer "
                        f"within {self.relay.config.timeout:g} s while {stage}; "
                        f"{_NOTHING_STORED}", type="upstream_error", code="upstream_timeout",
                        headers=self.headers)

    def unreachable(self, e: Exception) -> ApiError:
        return ApiError(502, f"cannot reach the upstream {self.relay.config.upstream_label}: "
                        f"{type(e).__name__}: {e}; {_NOTHING_STORED}",
                        type="upstream_error", code="upstream_unreachable", headers=self.headers)

    def status(self, response: httpx.Response) -> ApiError:
        said, code = upstream_said(response)
        return ApiError(502, f"the upstream {self.relay.config.upstream_label} answered HTTP "
                        f"{response.status_code}: {said}; {_NOTHING_STORED}", type="upstream_error",
                        code=str(code) if code is not None else f"upstream_http_{response.status_code}",
                        headers=self.headers)

    def bad(self, what: str) -> ApiError:
        return ApiError(502, f"the upstream {self.relay.config.upstream_label} sent {what}; is "
                        f"--upstream an OpenAI-compatible /v1 base URL? {_NOTHING_STORED}", type="upstream_error",
                        code="upstream_bad_response", headers=self.headers)

    def body(self, messages: list[dict[str, Any]], *, stream: bool,
             extra_tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        body = {**self.chat.forward, "model": self.chat.model, "messages": messages,
                "stream": stream}
        if extra_tools:
            body["tools"] = [*(body.get("tools") or []), *extra_tools]
        return body

    async def post(self, messages: list[dict[str, Any]], *,
                   extra_tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        http = self.relay.http
        assert http is not None
        try:
            response = await http.post(self.url, json=self.body(messages, stream=False,
                                                                 extra_tools=extra_tools),
                                       headers=self.relay.upstream_headers(stream=False))
        except httpx.TimeoutException:
            raise self.timeout("waiting for the reply") from None
        except httpx.HTTPError as e:
            raise self.unreachable(e) from None
        if not 200 <= response.status_code < 300:
            raise self.status(response)
        try:
            data = response.json()
        except ValueError:
            raise self.bad("a body that is not JSON") from None
        reply_of(data, self)
        return data

    async def open_stream(self, messages: list[dict[str, Any]]) -> httpx.Response:
        http = self.relay.http
        assert http is not None
        request = http.build_request("POST", self.url, json=self.body(messages, stream=True),
                                     headers=self.relay.upstream_headers(stream=True))
        try:
            response = await http.send(request, stream=True)
        except httpx.TimeoutException:
            raise self.timeout("connecting") from None
        except httpx.HTTPError as e:
            raise self.unreachable(e) from None
        if not 200 <= response.status_code < 300:
            try:
                await response.aread()
            except httpx.TimeoutException:
                raise self.timeout("reading an error reply") from None
            except httpx.HTTPError as e:
                raise self.unreachable(e) from None
            finally:
                await response.aclose()
            raise self.status(response)
        ctype = response.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            await response.aclose()
            raise self.bad(f"content-type {ctype or 'none'!r} to a stream request instead of "
                           "text/event-stream")
        return response


def reply_of(data: Any, upstream: Upstream) -> tuple[str, dict[str, Any] | None]:
    """The text and the turn metadata (tool calls) of an upstream chat.completion."""
    if not isinstance(data, dict):
        raise upstream.bad("JSON that is not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise upstream.bad("a reply without choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise upstream.bad("a reply whose choices[0] has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise upstream.bad("a reply whose message content is not a string")
    calls = message.get("tool_calls")
    metadata = None
    if calls:
        try:
            metadata = {"tool_calls": stored_tool_calls(calls, "tool_calls")}
        except ApiError:
            raise upstream.bad("tool_calls that are not OpenAI function calls") from None
    return content or "", metadata


def relay_metadata(tool_meta: dict[str, Any] | None, *, completion_id: Any, model: Any,
                   headers: Mapping[str, str], usage: Any = None) -> dict[str, Any]:
    """What the assistant turn keeps beside its text: tool calls, and the response it came
    from, so a retried Idempotency-Key replays the same id, headers and usage."""
    meta = dict(tool_meta or {})
    meta["relay"] = {"id": completion_id if isinstance(completion_id, str) else None,
                     "model": model if isinstance(model, str) else None,
                     "headers": {k: v for k, v in headers.items() if k not in TURN_HEADERS}}
    if isinstance(usage, Mapping):
        meta["relay"]["usage"] = dict(usage)
    return meta

