"""A chat completion request, checked whole before anything is stored."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request

from .config import IDEMPOTENCY_HEADER, SESSION_HEADER, ServerConfig
from .errors import ApiError, bad_request
from .tenants import MAX_CLIENT_SESSION_CHARS, RESERVED_PREFIX, Tenant

#: Body fields the relay consumes; every other field is forwarded to the upstream untouched.
RELAY_FIELDS = frozenset({"messages", "stream", "model", "session_id"})
_SYSTEM_ROLES = ("system", "developer")
_TURN_ROLES = ("user", "assistant", "tool")
_MAX_KEY_CHARS = 200
#: JSON nested deeper than this is refused (400) before it is parsed further.
MAX_JSON_DEPTH = 64


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
    key: str | None                  # Idempotency-Key: the turn's key (ctxrelay_runtime derives
                                     # the keys of its parts, the same for every entry point)
    # Where the turn is stored: the client's session id under its tenant's prefix, and the
    # tenant's CKF namespace (see tenants.py).  Never sent back to the client.
    store_session: str = ""
    namespace: str | None = None


def _text_content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text"
                    and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad_request(
                    f"{where}[{j}] is a {kind!r} part; the relay stores text only, so send "
                    "content as a string or as parts of type 'text'", param=f"{where}[{j}]")
            texts.append(part["text"])
        return "\n".join(texts)
    raise bad_request(f"{where} must be a string or a list of text parts, got "
                       f"{type(content).__name__}", param=where)


def stored_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    """OpenAI tool calls in the form the transcript keeps in turn metadata."""
    if not isinstance(calls, list):
        raise bad_request(f"{where} must be a list", param=where)
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request(f"{where}[{j}] must be {{'id', 'type': 'function', 'function': "
                               "{'name', 'arguments'}}", param=f"{where}[{j}]")
        # Kept as OpenAI sends them back (strings), since packs render them to the
        # upstream again: str(None) stored an id "None", and an arguments object went
        # back as an object, which OpenAI-compatible servers refuse.
        call_id = call.get("id")
        if call_id is not None and not isinstance(call_id, str):
            raise bad_request(f"{where}[{j}].id must be a string", param=f"{where}[{j}].id")
        arguments = fn.get("arguments")
        if isinstance(arguments, (dict, list)):
            arguments = json.dumps(arguments, ensure_ascii=False)
        elif arguments is not None and not isinstance(arguments, str):
            raise bad_request(f"{where}[{j}].function.arguments must be a JSON string",
                              param=f"{where}[{j}].function.arguments")
        out.append({"id": call_id or "", "name": fn["name"], "arguments": arguments or "{}"})
    return out


def _optional_str(value: Any, param: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise bad_request(f"{param} must be a string, got {type(value).__name__}", param=param)


def _session_id(body: Mapping[str, Any], headers: Mapping[str, str]) -> str:
    """Header ``CRP-Session-Id``, else body ``session_id``, else body ``user``."""
    for source, value, param in ((f"header {SESSION_HEADER}", headers.get(SESSION_HEADER),
                                  SESSION_HEADER),
                                 ("field session_id", body.get("session_id"), "session_id"),
                                 ("field user", body.get("user"), "user")):
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise bad_request(f"the session id in {source} must be a non-empty string",
                               param=param, code="invalid_session_id")
        if value.strip().startswith(RESERVED_PREFIX):
            raise bad_request(f"the session id in {source} starts with {RESERVED_PREFIX!r}, "
                              "which the relay reserves; choose another id", param=param,
                              code="invalid_session_id")
        return value.strip()
    raise bad_request(
        f"no session id: send the header {SESSION_HEADER}, or the field session_id (or user) "
        "in the body; the relay keeps one transcript per session", param="session_id",
        code="missing_session_id")


def parse_chat(body: Any, headers: Mapping[str, str], config: ServerConfig) -> ChatRequest:
    """Check a chat completion request and split it into what the relay does with it."""
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got "
                           f"{type(body).__name__}")
    messages = body.get("messages")
    if messages is None:
        raise bad_request("you must provide a messages parameter: the new message(s) of this "
                           "turn, e.g. [{'role': 'user', 'content': 'hi'}]", param="messages",
                           code="missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages must be a non-empty list of message objects",
                           param="messages")
    system: list[str] = []
    turns: list[NewTurn] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad_request(f"{where} must be an object with role and content", param=where)
        role = m.get("role")
        if role in _SYSTEM_ROLES:
            text = _text_content(m.get("content"), f"{where}.content")
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > config.max_turn_bytes:
                # Not stored as a turn, so the store never sizes it: refused here as a
                # stored message over the limit is (it could never fit a window anyway).
                raise ApiError(413, f"{where}.content is {size:,} bytes, over the relay's "
                               f"--max-turn-bytes ({config.max_turn_bytes:,}); shorten it",
                               param=f"{where}.content", code="turn_too_large")
            system.append(text)
            continue
        if role not in _TURN_ROLES:
            raise bad_request(f"{where}.role is {role!r}; use one of system, developer, "
                               "user, assistant, tool", param=f"{where}.role")
        tool_calls = m.get("tool_calls") if role == "assistant" else None
        if m.get("content") is None and tool_calls:
            content = ""
        else:
            content = _text_content(m.get("content"), f"{where}.content")
        metadata = ({"tool_calls": stored_tool_calls(tool_calls, f"{where}.tool_calls")}
                    if tool_calls else None)
        turns.append(NewTurn(role=role, content=content,
                             name=_optional_str(m.get("name"), f"{where}.name"),
                             tool_call_id=_optional_str(m.get("tool_call_id"),
                                                        f"{where}.tool_call_id"),
                             metadata=metadata))
    if not turns or turns[-1].role != "user":
        raise bad_request(
            "the last non-system message must have role user: it becomes the managed turn "
            "(earlier assistant and tool messages are stored as turns before it)",
            param=f"messages[{len(messages) - 1}].role")

    session_id = _session_id(body, headers)
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad_request("stream must be true or false", param="stream")
    stream_options = body.get("stream_options")
    include_usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True

    model = config.model
    if model is None:
        model = _optional_str(body.get("model"), "model")
        if model is not None and not model.strip():
            model = None
    if model is None and not config.is_echo:
        raise bad_request("you must provide a model parameter (or start the server with "
                           "--model)", param="model", code="missing_required_parameter")

    reserve, reserve_param = config.policy.get("output_reserve"), None
    for name in ("max_completion_tokens", "max_tokens"):
        asked = body.get(name)
        if asked is None:
            continue
        if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
            raise bad_request(f"{name} must be a positive integer", param=name)
        if reserve is None or asked > reserve:
            reserve, reserve_param = asked, name

    key = headers.get(IDEMPOTENCY_HEADER)
    if key is not None:
        key = key.strip()
        if not key or len(key) > _MAX_KEY_CHARS:
            raise bad_request(f"header {IDEMPOTENCY_HEADER} must be 1..{_MAX_KEY_CHARS} "
                               "characters", param=IDEMPOTENCY_HEADER)

    forward = {k: v for k, v in body.items() if k not in RELAY_FIELDS}
    return ChatRequest(session_id=session_id, store_session=session_id,
                       message=turns[-1].content,
                       earlier=tuple(turns[:-1]), system="\n\n".join(system) or None,
                       model=model, stream=stream, include_usage=include_usage,
                       output_reserve=reserve, reserve_param=reserve_param, forward=forward,
                       key=key)


def policy_for(config: ServerConfig, chat: ChatRequest) -> dict[str, Any]:
    policy: dict[str, Any] = dict(config.policy)
    policy["alternation"] = config.alternation
    # The boundary note names what the model can call: the history tools, when offered.
    policy["history_access"] = "tools" if config.history_rounds > 0 and not config.is_echo \
        else "none"
    if chat.output_reserve is not None:
        policy["output_reserve"] = chat.output_reserve
    if chat.model is not None:
        policy["model"] = chat.model          # tokenizer and framing follow the upstream model
    if chat.system is not None:
        policy["system"] = chat.system
    if chat.namespace is not None:
        policy["namespace"] = chat.namespace  # the tenant's facts, and promotion into them
    return policy


def scoped(chat: ChatRequest, tenant: Tenant | None) -> ChatRequest:
    """The request with its storage session and namespace: the tenant's own."""
    if tenant is None:
        return chat
    if len(chat.session_id) > MAX_CLIENT_SESSION_CHARS:
        raise bad_request(f"the session id has {len(chat.session_id)} characters, more than "
                          f"{MAX_CLIENT_SESSION_CHARS}; use a shorter id (e.g. a UUID)",
                          param="session_id", code="invalid_session_id")
    return replace(chat, store_session=tenant.storage_session(chat.session_id),
                   namespace=tenant.namespace)



def turn_messages(chat: ChatRequest) -> list[dict[str, Any]]:
    """The turn's new messages for ``Runtime.prepare_turn``: the earlier ones, then the user's."""
    out = [{k: v for k, v in (("role", t.role), ("content", t.content), ("name", t.name),
                              ("tool_call_id", t.tool_call_id), ("metadata", t.metadata))
            if v is not None} for t in chat.earlier]
    out.append({"role": "user", "content": chat.message})
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; send a finite number")


def _depth(value: Any) -> int:
    """The nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                return level
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _lone_surrogate(value: Any, where: str = "body") -> str | None:
    """The place of the first string that UTF-8 cannot hold (a lone surrogate escape)."""
    stack = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return at
        elif isinstance(item, dict):
            stack.extend((v, f"{at}.{k}") for k, v in item.items())
            stack.extend((k, f"{at} key") for k in item if isinstance(k, str))
        elif isinstance(item, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(item))
    return None


def parse_json(raw: bytes) -> Any:
    """The request body as JSON, or a 400 that names what is wrong (nothing is stored)."""
    if not raw.strip():
        raise bad_request("the request body is empty; send a JSON object with messages")
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise bad_request(f"the request body nests deeper than {MAX_JSON_DEPTH} levels; "
                          "send a flatter JSON object", code="invalid_json") from None
    except ValueError as e:
        raise bad_request(f"the request body is not valid JSON ({e}); send a JSON object "
                          "with messages", code="invalid_json") from None
    if _depth(body) > MAX_JSON_DEPTH:
        raise bad_request(f"the request body nests deeper than {MAX_JSON_DEPTH} levels; "
                          "send a flatter JSON object", code="invalid_json")
    where = _lone_surrogate(body)
    if where is not None:
        raise bad_request(f"{where} holds a lone surrogate (an unpaired \\ud800-\\udfff escape), "
                          "which UTF-8 cannot encode; send valid Unicode text", param=where,
                          code="invalid_content")
    return body


async def json_body(request: Request, limit: int) -> tuple[Any, int]:
    """The body parsed and its size in bytes (what body_bytes_per_minute counts), refused
    with 413 past ``limit`` bytes before it is read whole."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    return parse_json(b"".join(chunks)), size


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(413, f"the request body ({size:,} bytes or more) is over the relay's "
                    f"limit of {limit:,} bytes; send smaller messages (the relay stores turns "
                    "of at most --max-turn-bytes each)", param="messages",
                    code="request_too_large")
