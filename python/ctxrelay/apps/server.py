"""An OpenAI-compatible relay that manages the context of each session.

Clients speak the OpenAI chat API and send only the new message(s) with a
session id; the relay keeps the transcript, assembles a bounded pack under the
configured policy, forwards that provider-visible request to an upstream
(any OpenAI-compatible base URL, or ``echo``), stores the reply and returns the
upstream's answer with the ``CRP-*`` headers of the pack::

    python -m ctxrelay.apps.server --store store --port 8000 --upstream echo
    python -m ctxrelay.apps.server --store store --port 8000 \\
        --upstream http://127.0.0.1:8080/v1 --model qwen2.5 --max-context-tokens 8192

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``.
See docs/server.md for the request rules, the headers and the errors.

Threading: the Runtime embeds SWI-Prolog, whose engines are per thread, so
every Runtime call runs on one dedicated worker thread (:meth:`Relay.call`).
Upstream requests run on the event loop, outside that thread, so a slow model
holds up only its own session: turns of one session are serialised by a
per-session lock, turns of different sessions overlap.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import sys
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ctxrelay import providers
from ctxrelay.errors import (
    ArchivedSessionError,
    ContextOverflowError,
    CtxRelayError,
    InvalidArgumentError,
    InvalidContentError,
    InvalidMetadataError,
    InvalidRoleError,
    InvalidSessionIdError,
    KeyConflictError,
    ProviderError,
    ProviderTimeoutError,
    UnknownSessionError,
)
from ctxrelay.runtime import Runtime
from ctxrelay.types import TurnResult

__all__ = ["ServerConfig", "Relay", "ApiError", "create_app", "main", "SESSION_HEADER",
           "IDEMPOTENCY_HEADER", "POLICY_FLAGS"]

log = logging.getLogger("ctxrelay.apps.server")

SESSION_HEADER = "CRP-Session-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
POLICY_FLAGS = ("max_context_tokens", "output_reserve", "safety_margin", "min_recent_turns")
DEFAULT_TIMEOUT = 60.0
#: Body fields the relay consumes; every other field is forwarded to the upstream untouched.
RELAY_FIELDS = frozenset({"messages", "stream", "model", "session_id"})
_SYSTEM_ROLES = ("system", "developer")
_TURN_ROLES = ("user", "assistant", "tool")
_TURN_HEADERS = frozenset({SESSION_HEADER, "CRP-User-Turn", "CRP-Assistant-Turn"})
_MAX_KEY_CHARS = 200
_SNIPPET = 300

T = TypeVar("T")


# ------------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class ServerConfig:
    """What one relay serves: its store, its upstream and its context policy.

    ``upstream`` is ``"echo"`` (the built-in deterministic provider, no network) or
    the base URL of an OpenAI-compatible API, ``/v1`` included.  ``model``, when set,
    pins the upstream model (and the tokenizer) whatever the client asks for.
    ``policy`` holds the policy options given on the command line (see
    :data:`POLICY_FLAGS`); absent ones take the Runtime's defaults.
    """

    store: Path
    upstream: str
    model: str | None = None
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    policy: Mapping[str, int] = field(default_factory=dict)
    warmup: bool = True

    def __post_init__(self) -> None:
        if self.upstream != "echo":
            parts = urlsplit(self.upstream)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise InvalidArgumentError(
                    f"upstream must be 'echo' or an http(s) base URL such as "
                    f"'http://127.0.0.1:8080/v1', got {self.upstream!r}")
            object.__setattr__(self, "upstream", self.upstream.rstrip("/"))
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise InvalidArgumentError(
                f"timeout must be a positive number of seconds, got {self.timeout!r}")
        unknown = sorted(set(self.policy) - set(POLICY_FLAGS))
        if unknown:
            raise InvalidArgumentError(
                f"unknown policy option(s) {', '.join(unknown)}; the server takes "
                + ", ".join(POLICY_FLAGS))

    @property
    def is_echo(self) -> bool:
        return self.upstream == "echo"

    @property
    def upstream_label(self) -> str:
        """The upstream without credentials or query, safe to show."""
        if self.is_echo:
            return "echo"
        parts = urlsplit(self.upstream)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"


# ------------------------------------------------------------------------ errors


class ApiError(Exception):
    """An error answered with an OpenAI-style body ``{"error": {...}}``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def _bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _from_ctxrelay(exc: CtxRelayError) -> ApiError:
    """The HTTP answer for an error raised by the Runtime."""
    if isinstance(exc, ContextOverflowError):
        return ApiError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, InvalidSessionIdError):
        return ApiError(400, str(exc), param="session_id", code="invalid_session_id")
    if isinstance(exc, KeyConflictError):
        return ApiError(409, f"{exc} (header {IDEMPOTENCY_HEADER})", param=IDEMPOTENCY_HEADER,
                        code="idempotency_key_conflict", headers={"x-should-retry": "false"})
    if isinstance(exc, ArchivedSessionError):
        return ApiError(400, str(exc), param="session_id", code="session_archived")
    if isinstance(exc, (InvalidArgumentError, InvalidContentError, InvalidRoleError,
                        InvalidMetadataError)):
        return ApiError(400, str(exc), code=exc.kind)
    log.error("ctxrelay error: %s", exc)
    return ApiError(500, f"ctxrelay failed: {exc}", type="server_error", code=exc.kind)


# ------------------------------------------------------------------------ the request


@dataclass(frozen=True)
class NewTurn:
    """A message from the request stored as a turn before the managed one."""

    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class ChatRequest:
    """A parsed ``POST /v1/chat/completions``."""

    session_id: str
    message: str                     # the last user message: the managed turn
    earlier: tuple[NewTurn, ...]     # the other new messages, stored first
    system: str | None               # system/developer messages: instructions for this turn
    model: str | None
    stream: bool
    include_usage: bool
    output_reserve: int | None       # raised to the client's max_tokens
    reserve_param: str | None        # the body field that raised it, if any
    forward: dict[str, Any]          # the body fields passed on to the upstream
    key: str | None                  # Idempotency-Key

    @property
    def user_key(self) -> str | None:
        # Same derivation as managed_turn/4, so a retry can resume through it.
        return None if self.key is None else f"{self.key}:user"

    @property
    def assistant_key(self) -> str | None:
        return None if self.key is None else f"{self.key}:assistant"

    def earlier_key(self, i: int) -> str | None:
        return None if self.key is None else f"{self.key}:m{i}"


def _text_content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _bad_request(
                    f"{where}[{j}] is a {kind!r} part; the relay stores text only, so send "
                    "content as a string or as parts of type 'text'", param=f"{where}[{j}]")
            texts.append(part["text"])
        return "\n".join(texts)
    raise _bad_request(f"{where} must be a string or a list of text parts, got "
                       f"{type(content).__name__}", param=where)


def _stored_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """OpenAI tool calls in the form the transcript keeps in turn metadata."""
    if not isinstance(calls, list):
        raise _bad_request(f"{where} must be a list", param=where)
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise _bad_request(f"{where}[{j}] must be {{'id', 'type': 'function', 'function': "
                               "{'name', 'arguments'}}", param=f"{where}[{j}]")
        out.append({"id": str(call.get("id", "")), "name": fn["name"],
                    "arguments": fn.get("arguments", "{}")})
    return out


def _optional_str(value: Any, param: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _bad_request(f"{param} must be a string, got {type(value).__name__}", param=param)


def _session_id(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """Header ``CRP-Session-Id``, else body ``session_id``, else body ``user``."""
    for source, value, param in ((f"header {SESSION_HEADER}", headers.get(SESSION_HEADER),
                                  SESSION_HEADER),
                                 ("field session_id", body.get("session_id"), "session_id"),
                                 ("field user", body.get("user"), "user")):
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise _bad_request(f"the session id in {source} must be a non-empty string",
                               param=param, code="invalid_session_id")
        return value.strip()
    raise _bad_request(
        f"no session id: send the header {SESSION_HEADER}, or the field session_id (or user) "
        "in the body; the relay keeps one transcript per session", param="session_id",
        code="missing_session_id")


def parse_chat(body: Any, headers: Mapping[str, str], config: ServerConfig) -> ChatRequest:
    """Check a chat completion request and split it into what the relay does with it."""
    if not isinstance(body, dict):
        raise _bad_request(f"the request body must be a JSON object, got "
                           f"{type(body).__name__}")
    messages = body.get("messages")
    if messages is None:
        raise _bad_request("you must provide a messages parameter: the new message(s) of this "
                           "turn, e.g. [{'role': 'user', 'content': 'hi'}]", param="messages",
                           code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise _bad_request("messages must be a non-empty list of message objects",
                           param="messages")
    system: list[str] = []
    turns: list[NewTurn] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad_request(f"{where} must be an object with role and content", param=where)
        role = m.get("role")
        if role in _SYSTEM_ROLES:
            system.append(_text_content(m.get("content"), f"{where}.content"))
            continue
        if role not in _TURN_ROLES:
            raise _bad_request(f"{where}.role is {role!r}; use one of system, developer, "
                               "user, assistant, tool", param=f"{where}.role")
        tool_calls = m.get("tool_calls") if role == "assistant" else None
        if m.get("content") is None and tool_calls:
            content = ""
        else:
            content = _text_content(m.get("content"), f"{where}.content")
        metadata = ({"tool_calls": _stored_tool_calls(tool_calls, f"{where}.tool_calls")}
                    if tool_calls else None)
        turns.append(NewTurn(role=role, content=content,
                             name=_optional_str(m.get("name"), f"{where}.name"),
                             tool_call_id=_optional_str(m.get("tool_call_id"),
                                                        f"{where}.tool_call_id"),
                             metadata=metadata))
    if not turns or turns[-1].role != "user":
        raise _bad_request(
            "the last non-system message must have role user: it becomes the managed turn "
            "(earlier assistant and tool messages are stored as turns before it)",
            param=f"messages[{len(messages) - 1}].role")

    session_id = _session_id(body, headers)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad_request("stream must be true or false", param="stream")
    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True

    model = config.model
    if model is None:
        model = _optional_str(body.get("model"), "model")
        if model is not None and not model.strip():
            model = None
    if model is None and not config.is_echo:
        raise _bad_request("you must provide a model parameter (or start the server with "
                           "--model)", param="model", code="missing_required_parameter")

    reserve, reserve_param = config.policy.get("output_reserve"), None
    for name in ("max_completion_tokens", "max_tokens"):
        asked = body.get(name)
        if asked is None:
            continue
        if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
            raise _bad_request(f"{name} must be a positive integer", param=name)
        if reserve is None or asked > reserve:
            reserve, reserve_param = asked, name

    key = headers.get(IDEMPOTENCY_HEADER)
    if key is not None:
        key = key.strip()
        if not key or len(key) > _MAX_KEY_CHARS:
            raise _bad_request(f"header {IDEMPOTENCY_HEADER} must be 1..{_MAX_KEY_CHARS} "
                               "characters", param=IDEMPOTENCY_HEADER)

    forward = {k: v for k, v in body.items() if k not in RELAY_FIELDS}
    return ChatRequest(session_id=session_id, message=turns[-1].content,
                       earlier=tuple(turns[:-1]), system="\n\n".join(system) or None,
                       model=model, stream=stream, include_usage=include_usage,
                       output_reserve=reserve, reserve_param=reserve_param, forward=forward,
                       key=key)


def _policy(config: ServerConfig, chat: ChatRequest) -> dict[str, Any]:
    policy: dict[str, Any] = dict(config.policy)
    if chat.output_reserve is not None:
        policy["output_reserve"] = chat.output_reserve
    if chat.model is not None:
        policy["model"] = chat.model          # tokenizer and framing follow the upstream model
    if chat.system is not None:
        policy["system"] = chat.system
    return policy


# ------------------------------------------------------------------------ worker jobs
# Each runs on the Prolog worker thread with the Runtime as first argument.


@dataclass(frozen=True)
class Fresh:
    """The pack is assembled and the user turn stored: forward the pack."""

    result: TurnResult
    user_turn: int


@dataclass(frozen=True)
class Replay:
    """A retried Idempotency-Key whose reply is already stored."""

    user_turn: int
    assistant_turn: int
    reply: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class Resume:
    """A retried Idempotency-Key whose user turn is stored but whose reply is not."""

    user_turn: int


def _ensure_session(rt: Runtime, session_id: str) -> None:
    try:
        rt.session(session_id)
    except UnknownSessionError:
        rt.create_session(session_id, metadata={"created_by": "ctxrelay.apps.server"})


def _turn_for_key(rt: Runtime, session_id: str, key: str) -> int | None:
    # Runtime has no public lookup by key yet; the store it wraps has one point read.
    return rt.turn_for_key(session_id, key)


def prepare_turn(rt: Runtime, chat: ChatRequest, policy: dict[str, Any]) -> Fresh | Replay | Resume:
    """Create the session if missing, store the earlier messages, assemble, store the user turn.

    The pack is assembled before the user turn is appended, so a request that
    does not fit (ContextOverflowError) leaves the last message unstored.
    """
    _ensure_session(rt, chat.session_id)
    for i, t in enumerate(chat.earlier):
        rt.append(chat.session_id, t.role, t.content, name=t.name, tool_call_id=t.tool_call_id,
                  metadata=t.metadata, key=chat.earlier_key(i))
    if chat.key is not None:
        user_turn = _turn_for_key(rt, chat.session_id, chat.user_key)
        if user_turn is not None:
            stored = rt.turn(chat.session_id, user_turn)
            if stored.role != "user" or stored.content != chat.message:
                raise KeyConflictError(
                    f"key {chat.key!r} was already used for turn {user_turn} of session "
                    f"{chat.session_id!r} with a different message; use a new key for a new turn")
            assistant_turn = _turn_for_key(rt, chat.session_id, chat.assistant_key)
            if assistant_turn is None:
                return Resume(user_turn=user_turn)
            reply = rt.turn(chat.session_id, assistant_turn)
            return Replay(user_turn=user_turn, assistant_turn=assistant_turn,
                          reply=reply.content, metadata=dict(reply.metadata or {}))
    result = rt.assemble(chat.session_id, chat.message, **policy)
    user_turn = rt.append(chat.session_id, "user", chat.message, key=chat.user_key)
    return Fresh(result=result, user_turn=user_turn)


def store_reply(rt: Runtime, chat: ChatRequest, content: str,
                metadata: dict[str, Any] | None) -> int:
    return rt.append(chat.session_id, "assistant", content, metadata=metadata,
                     key=chat.assistant_key)


def resume_turn(rt: Runtime, chat: ChatRequest, policy: dict[str, Any],
                config: ServerConfig) -> TurnResult:
    """Finish a turn whose user message is stored: managed_turn with the same key.

    managed_turn finds the stored user turn by key, assembles the context it had
    (history up to that turn), calls the provider and appends the reply once.
    The provider call blocks the worker, which is acceptable on this rare path.
    """
    if config.is_echo:
        options: dict[str, Any] = {"model": chat.model} if chat.model else {}
        provider = "echo"
    else:
        extra = {k: v for k, v in chat.forward.items() if k != "stream_options"}
        options = {"base_url": config.upstream, "model": chat.model, "api_key": config.api_key,
                   "timeout": config.timeout, "extra": extra}
        provider = "openai"
    return rt.managed_turn(chat.session_id, chat.message, key=chat.key, provider=provider,
                           provider_options=options, **policy)


def echo_reply(_rt: Runtime, messages: list[dict[str, Any]], model: str | None) -> dict[str, Any]:
    return providers.complete(messages, {"provider": "echo", **({"model": model} if model else {})})


# ------------------------------------------------------------------------ the relay


class Relay:
    """The shared state of one server: config, Runtime, worker thread, HTTP client."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._executor: ThreadPoolExecutor | None = None
        self._runtime: Runtime | None = None
        self.http: httpx.AsyncClient | None = None
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    # -- lifecycle -------------------------------------------------------
    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxrelay-prolog")
        loop = asyncio.get_running_loop()
        self._runtime = await loop.run_in_executor(self._executor, Runtime, self.config.store)
        if self.config.warmup:
            await loop.run_in_executor(self._executor, _warm_up)
        if not self.config.is_echo:
            self.http = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout),
                                          follow_redirects=False)
        log.info("ctxrelay relay: store %s, upstream %s", self.config.store,
                 self.config.upstream_label)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.aclose()
            self.http = None
        if self._executor is not None:
            loop = asyncio.get_running_loop()
            if self._runtime is not None:
                await loop.run_in_executor(self._executor, self._runtime.close)
                self._runtime = None
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- the worker --------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(runtime, *args)`` on the Prolog worker thread and await it."""
        if self._executor is None or self._runtime is None:
            raise RuntimeError("the relay is not started; run the app under its lifespan")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor,
                                          functools.partial(fn, self._runtime, *args))

    def call_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(runtime, *args)`` on the worker from another thread (tests, tools)."""
        if self._executor is None or self._runtime is None:
            raise RuntimeError("the relay is not started")
        return self._executor.submit(fn, self._runtime, *args).result()

    def session_lock(self, session_id: str) -> asyncio.Lock:
        """One lock per session: its turns run one after another."""
        return self._locks.setdefault(session_id, asyncio.Lock())

    # -- the upstream --------------------------------------------------------
    def upstream_headers(self, *, stream: bool) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if stream else "application/json",
                   "User-Agent": "ctxrelay-server"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers


def _warm_up(_rt: Runtime | None = None) -> None:
    """Load the embedder now rather than on the first request (seconds for MiniLM)."""
    started = time.monotonic()
    try:
        from ctxrelay.text import embed
        embed.get_embedder().embed_batch(["warm up"])
    except Exception as e:  # noqa: BLE001 - a failed warm-up only moves the cost to turn one
        log.warning("ctxrelay relay: embedder warm-up failed (%s: %s); the first turn will "
                    "load it", type(e).__name__, e)
        return
    log.info("ctxrelay relay: embedder ready in %.1f s", time.monotonic() - started)


# ------------------------------------------------------------------------ responses


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


def _completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def _completion(content: str, model: str, *, completion_id: str | None = None,
                created: int | None = None, finish_reason: str = "stop",
                usage: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": completion_id or _completion_id(), "object": "chat.completion",
        "created": created or int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "logprobs": None, "finish_reason": finish_reason}]}
    if usage:
        body["usage"] = dict(usage)
    return body


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


def _sse_error(error: ApiError) -> str:
    return _sse(error.body())


def _synthetic_stream(content: str, model: str, *, completion_id: str | None = None,
                      usage: Mapping[str, Any] | None = None) -> list[str]:
    """A whole reply as OpenAI ``chat.completion.chunk`` events, word by word."""
    cid, created = completion_id or _completion_id(), int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None) -> str:
        return _sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                     "model": model, "choices": [{"index": 0, "delta": delta,
                                                  "logprobs": None, "finish_reason": finish}]})
    events = [chunk({"role": "assistant", "content": ""}, None)]
    events += [chunk({"content": piece}, None) for piece in re.findall(r"\s*\S+\s*", content)
               or ([content] if content else [])]
    events.append(chunk({}, "stop"))
    if usage is not None:
        events.append(_sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                            "model": model, "choices": [], "usage": dict(usage)}))
    return events


class _TurnGuard:
    """Holds a session's turn lock until the turn is over; releases it exactly once."""

    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock: asyncio.Lock | None = lock
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

    def __init__(self, content: AsyncIterator[str], *, guard: _TurnGuard,
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


# ------------------------------------------------------------------------ upstream calls


def _upstream_said(response: httpx.Response) -> tuple[str, Any]:
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


class _Upstream:
    """Error mapping for one upstream call; ``headers`` go on every error answer."""

    def __init__(self, relay: Relay, chat: ChatRequest, headers: dict[str, str]) -> None:
        self.relay = relay
        self.chat = chat
        self.url = f"{relay.config.upstream}/chat/completions"
        self.headers = dict(headers)
        if chat.key is None:
            # The user turn is stored: an automatic retry without a key would store it twice.
            self.headers["x-should-retry"] = "false"

    def timeout(self, stage: str) -> ApiError:
        return ApiError(504, f"the upstream {self.relay.config.upstream_label} did not answer "
                        f"within {self.relay.config.timeout:g} s while {stage}; the user turn "
                        "is stored, no reply was stored (retry with the same Idempotency-Key "
                        "to finish the turn)", type="upstream_error", code="upstream_timeout",
                        headers=self.headers)

    def unreachable(self, e: Exception) -> ApiError:
        return ApiError(502, f"cannot reach the upstream {self.relay.config.upstream_label}: "
                        f"{type(e).__name__}: {e}; the user turn is stored, no reply was stored",
                        type="upstream_error", code="upstream_unreachable", headers=self.headers)

    def status(self, response: httpx.Response) -> ApiError:
        said, code = _upstream_said(response)
        return ApiError(502, f"the upstream {self.relay.config.upstream_label} answered HTTP "
                        f"{response.status_code}: {said}; the user turn is stored, no reply "
                        "was stored", type="upstream_error",
                        code=str(code) if code is not None else f"upstream_http_{response.status_code}",
                        headers=self.headers)

    def bad(self, what: str) -> ApiError:
        return ApiError(502, f"the upstream {self.relay.config.upstream_label} sent {what}; is "
                        "--upstream an OpenAI-compatible /v1 base URL? The user turn is stored, "
                        "no reply was stored", type="upstream_error",
                        code="upstream_bad_response", headers=self.headers)

    def body(self, messages: list[dict[str, Any]], *, stream: bool) -> dict[str, Any]:
        return {**self.chat.forward, "model": self.chat.model, "messages": messages,
                "stream": stream}

    async def post(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        http = self.relay.http
        assert http is not None
        try:
            response = await http.post(self.url, json=self.body(messages, stream=False),
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
        _reply_of(data, self)
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


def _reply_of(data: Any, upstream: _Upstream) -> tuple[str, dict[str, Any] | None]:
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
            metadata = {"tool_calls": _stored_tool_calls(calls, "tool_calls")}
        except ApiError:
            raise upstream.bad("tool_calls that are not OpenAI function calls") from None
    return content or "", metadata


def _relay_metadata(tool_meta: dict[str, Any] | None, *, completion_id: Any, model: Any,
                    headers: Mapping[str, str]) -> dict[str, Any]:
    """What the assistant turn keeps beside its text: tool calls, and the response it came
    from, so a retried Idempotency-Key replays the same id and headers."""
    meta = dict(tool_meta or {})
    meta["relay"] = {"id": completion_id if isinstance(completion_id, str) else None,
                     "model": model if isinstance(model, str) else None,
                     "headers": {k: v for k, v in headers.items() if k not in _TURN_HEADERS}}
    return meta


async def _relay_stream(relay: Relay, chat: ChatRequest, upstream: _Upstream,
                        response: httpx.Response, headers: dict[str, str]) -> AsyncIterator[str]:
    """Pass the upstream's events through line by line; store the text when it is complete.

    The reply is stored when ``data: [DONE]`` arrives (before it is passed on, so
    a client that saw the end of the stream finds the turn stored) or when the
    stream ends after a finish_reason.  A stream cut short, an error event or a
    timeout stores nothing.
    """
    parts: list[str] = []
    finished = failed = stored = False
    completion_id = model = None

    async def store() -> None:
        nonlocal stored
        stored = True
        meta = _relay_metadata(None, completion_id=completion_id, model=model, headers=headers)
        await relay.call(store_reply, chat, "".join(parts), meta)

    try:
        try:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        if not failed and not stored:
                            await store()
                    else:
                        try:
                            event = json.loads(payload)
                        except ValueError:
                            event = None
                        if not isinstance(event, dict) or event.get("error") is not None:
                            failed = True
                        else:
                            completion_id = completion_id or event.get("id")
                            model = model or event.get("model")
                            for choice in event.get("choices") or []:
                                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                                    continue        # n > 1: the transcript keeps choice 0
                                delta = choice.get("delta")
                                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                                    parts.append(delta["content"])
                                if choice.get("finish_reason"):
                                    finished = True
                yield line + "\n"
        except httpx.TimeoutException:
            yield _sse_error(upstream.timeout("streaming the reply"))
            return
        except httpx.HTTPError as e:
            yield _sse_error(upstream.unreachable(e))
            return
        if not stored and not failed:
            if finished:
                await store()
            else:
                yield _sse_error(upstream.bad("a stream that ended before [DONE] or a "
                                              "finish_reason"))
    finally:
        await response.aclose()


async def _replayed_stream(relay: Relay, chat: ChatRequest, content: str, model: str, *,
                           store_it: bool, headers: dict[str, str],
                           usage: Mapping[str, Any] | None,
                           completion_id: str | None = None) -> AsyncIterator[str]:
    """A finished reply as SSE; with ``store_it`` it is stored before ``[DONE]``."""
    completion_id = completion_id or _completion_id()
    for event in _synthetic_stream(content, model, completion_id=completion_id,
                                   usage=usage if chat.include_usage else None):
        yield event
    if store_it:
        meta = _relay_metadata(None, completion_id=completion_id, model=model, headers=headers)
        await relay.call(store_reply, chat, content, meta)
    yield "data: [DONE]\n\n"


# ------------------------------------------------------------------------ routes


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw.strip():
        raise _bad_request("the request body is empty; send a JSON object with messages")
    try:
        return json.loads(raw)
    except ValueError as e:
        raise _bad_request(f"the request body is not valid JSON ({e}); send a JSON object "
                           "with messages") from None


async def chat_completions(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    chat = parse_chat(await _json_body(request), request.headers, relay.config)
    lock = relay.session_lock(chat.session_id)
    await lock.acquire()
    guard = _TurnGuard(lock)
    try:
        return await _chat_turn(relay, chat, guard)
    finally:
        if not guard.handed_over:
            guard.release()


async def _chat_turn(relay: Relay, chat: ChatRequest, guard: _TurnGuard) -> Response:
    policy = _policy(relay.config, chat)
    try:
        prepared = await relay.call(prepare_turn, chat, policy)
    except InvalidArgumentError as e:
        if chat.reserve_param is None:
            raise
        # The client's max_tokens became the output reserve and left no input budget.
        raise ApiError(400, f"{chat.reserve_param}={chat.output_reserve} does not fit the "
                       f"relay's context window: it is reserved for the reply, and no room is "
                       f"left for the input ({e}); lower {chat.reserve_param}",
                       param=chat.reserve_param, code="context_length_exceeded") from None
    model = chat.model or "echo"

    def streamed(body: AsyncIterator[str], headers: dict[str, str]) -> Response:
        guard.handed_over = True
        return TurnStream(body, guard=guard, headers=headers)

    if isinstance(prepared, Replay):
        relayed = prepared.metadata.get("relay") or {}
        headers = {**relayed.get("headers", {}),
                   **crp_headers(None, chat, prepared.user_turn, prepared.assistant_turn),
                   "CRP-Idempotent-Replay": "true"}
        model = relayed.get("model") or model
        if chat.stream:
            return streamed(_replayed_stream(relay, chat, prepared.reply, model, store_it=False,
                                             headers=headers, usage=None,
                                             completion_id=relayed.get("id")), headers)
        return JSONResponse(_completion(prepared.reply, model, completion_id=relayed.get("id")),
                            headers=headers)

    if isinstance(prepared, Resume):
        headers = crp_headers(None, chat, prepared.user_turn)
        try:
            result = await relay.call(resume_turn, chat, policy, relay.config)
        except ProviderTimeoutError:
            raise _Upstream(relay, chat, headers).timeout("waiting for the reply") from None
        except ProviderError as e:
            said = e.provider_message or str(e)
            raise ApiError(502, f"the upstream {relay.config.upstream_label} failed: {said}; "
                           "the user turn is stored, no reply was stored",
                           type="upstream_error",
                           code=f"upstream_http_{e.status}" if e.status else "upstream_error",
                           headers=headers) from None
        headers = crp_headers(result, chat, result.user_turn, result.assistant_turn)
        if chat.stream:
            return streamed(_replayed_stream(relay, chat, result.reply or "", model,
                                             store_it=False, headers=headers, usage=None),
                            headers)
        return JSONResponse(_completion(result.reply or "", model), headers=headers)

    result, user_turn = prepared.result, prepared.user_turn
    headers = crp_headers(result, chat, user_turn)
    if relay.config.is_echo:
        reply = await relay.call(echo_reply, result.messages, chat.model)
        usage = reply.get("usage")
        if chat.stream:
            return streamed(_replayed_stream(relay, chat, reply["content"], model,
                                             store_it=True, headers=headers, usage=usage),
                            headers)
        completion = _completion(reply["content"], model, usage=usage)
        meta = _relay_metadata(None, completion_id=completion["id"], model=model,
                               headers=headers)
        assistant_turn = await relay.call(store_reply, chat, reply["content"], meta)
        return JSONResponse(completion, headers={**headers,
                                                 "CRP-Assistant-Turn": str(assistant_turn)})

    upstream = _Upstream(relay, chat, headers)
    if chat.stream:
        response = await upstream.open_stream(result.messages)
        return streamed(_relay_stream(relay, chat, upstream, response, headers), headers)
    data = await upstream.post(result.messages)
    content, tool_meta = _reply_of(data, upstream)
    meta = _relay_metadata(tool_meta, completion_id=data.get("id"), model=data.get("model"),
                           headers=headers)
    assistant_turn = await relay.call(store_reply, chat, content, meta)
    return JSONResponse(data, headers={**headers, "CRP-Assistant-Turn": str(assistant_turn)})


async def list_models(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    config = relay.config
    if config.model is not None or config.is_echo:
        return JSONResponse({"object": "list", "data": [
            {"id": config.model or "echo", "object": "model", "created": 0,
             "owned_by": "ctxrelay"}]})
    assert relay.http is not None
    label = config.upstream_label
    try:
        response = await relay.http.get(f"{config.upstream}/models",
                                        headers=relay.upstream_headers(stream=False))
    except httpx.TimeoutException:
        raise ApiError(504, f"the upstream {label} did not list its models within "
                       f"{config.timeout:g} s", type="upstream_error",
                       code="upstream_timeout") from None
    except httpx.HTTPError as e:
        raise ApiError(502, f"cannot reach the upstream {label}: {e}", type="upstream_error",
                       code="upstream_unreachable") from None
    if not 200 <= response.status_code < 300:
        said, _ = _upstream_said(response)
        raise ApiError(502, f"the upstream {label} answered HTTP {response.status_code} to "
                       f"GET /models: {said}", type="upstream_error",
                       code=f"upstream_http_{response.status_code}")
    try:
        return JSONResponse(response.json())
    except ValueError:
        raise ApiError(502, f"the upstream {label} listed its models in a body that is not "
                       "JSON", type="upstream_error", code="upstream_bad_response") from None


async def health(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    return JSONResponse({"status": "ok", "upstream": relay.config.upstream_label,
                         "model": relay.config.model, "store": str(relay.config.store)})


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _ctxrelay_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, CtxRelayError)
    return _from_ctxrelay(exc).response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        error = ApiError(404, f"unknown route {request.method} {request.url.path}; the relay "
                         "serves POST /v1/chat/completions, GET /v1/models and GET /health",
                         code="unknown_url")
    elif exc.status_code == 405:
        error = ApiError(405, f"method {request.method} is not allowed on {request.url.path}",
                         code="method_not_allowed", headers=dict(exc.headers or {}))
    else:
        error = ApiError(exc.status_code, str(exc.detail), headers=dict(exc.headers or {}))
    return error.response()


async def _server_error(_request: Request, exc: Exception) -> Response:
    # Starlette re-raises after answering, so uvicorn logs the traceback.
    return ApiError(500, f"the relay failed: {type(exc).__name__}: {exc}", type="server_error",
                    code="internal_error").response()


def create_app(config: ServerConfig) -> Starlette:
    """The ASGI app; ``app.state.relay`` is its :class:`Relay`."""
    relay = Relay(config)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await relay.start()
        try:
            yield
        finally:
            await relay.stop()

    app = Starlette(
        routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                Route("/v1/models", list_models, methods=["GET"]),
                Route("/health", health, methods=["GET"])],
        exception_handlers={ApiError: _api_error, CtxRelayError: _ctxrelay_error,
                            HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan)
    app.state.relay = relay
    return app


# ------------------------------------------------------------------------ command line


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ctxrelay.apps.server",
        description="OpenAI-compatible relay with managed context per session "
                    "(POST /v1/chat/completions, GET /v1/models, GET /health).")
    p.add_argument("--store", required=True, type=Path, help="store directory (created if missing)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--upstream", required=True,
                   help="'echo' or an OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--model", help="pin the upstream model (default: the client's model)")
    p.add_argument("--api-key", default=os.environ.get("CTXRELAY_UPSTREAM_API_KEY"),
                   help="key sent to the upstream as Bearer (default: "
                        "$CTXRELAY_UPSTREAM_API_KEY; none if unset)")
    p.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT,
                   help=f"seconds to wait for the upstream (default {DEFAULT_TIMEOUT:g})")
    for name in POLICY_FLAGS:
        p.add_argument(f"--{name.replace('_', '-')}", type=_positive_int, dest=name,
                       help=f"policy option {name} (default: the Runtime's)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="do not load the embedder at start-up")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    return p


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    policy = {name: getattr(args, name) for name in POLICY_FLAGS
              if getattr(args, name) is not None}
    return ServerConfig(store=args.store, upstream=args.upstream, model=args.model,
                        api_key=args.api_key or None, timeout=args.timeout, policy=policy,
                        warmup=args.warmup)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve until interrupted."""
    import uvicorn

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except InvalidArgumentError as e:
        parser.error(str(e))
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(levelname)s:     %(name)s: %(message)s")
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level=args.log_level,
                lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
