"""Stateless chat completion: messages in, reply out, provider chosen by option.

Called from Prolog through janus, so the public functions take and return plain
types only (lists, dicts, str, int, float, bool, None)::

    py_call('ctxrelay.providers':complete(Messages, Options), Reply)

Built-in providers:

``echo``
    Deterministic and offline.  The reply is a digest of the messages (count, roles,
    sha256 of their canonical JSON, the start of the last user message).
``openai``
    Any OpenAI-compatible ``POST {base_url}/chat/completions`` server, spoken with the
    standard library only (``urllib``).  No request is ever retried.

More providers are added with :func:`register_provider`.  The registry is the only
mutable state in this module.
"""
from __future__ import annotations

import hashlib
import http.client
import importlib
import json
import math
import os
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxrelay.errors import (
    InvalidArgumentError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    UnknownProviderError,
)

__all__ = [
    "complete",
    "stream_complete",
    "register_provider",
    "unregister_provider",
    "providers",
    "ROLES",
    "OPTION_KEYS",
    "DEFAULT_TIMEOUT",
    "DEFAULT_OPENAI_BASE_URL",
    "MAX_RETRIES",
]

CompleteFn = Callable[[list[dict[str, Any]], dict[str, Any]], Mapping[str, Any]]
StreamFn = Callable[[list[dict[str, Any]], dict[str, Any]], Iterator[str]]

ROLES = ("system", "user", "assistant", "tool")
MESSAGE_KEYS = frozenset(("role", "content", "name", "tool_call_id", "tool_calls"))
OPTION_KEYS = frozenset(("provider", "model", "base_url", "api_key", "timeout",
                         "max_tokens", "temperature", "extra"))
DEFAULT_PROVIDER = "echo"
DEFAULT_TIMEOUT = 60.0
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
MAX_RETRIES = 0            # documented: a failed request is reported, never retried
_RESERVED_BODY_KEYS = ("model", "messages", "stream")
_SNIPPET = 300             # characters of a bad body quoted in error messages


# ------------------------------------------------------------------------ validation


def _check_messages(messages: object) -> list[dict[str, Any]]:
    """Check the chat messages and return them as a list of fresh plain dicts."""
    example = "[{'role': 'user', 'content': 'hi'}]"
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            f"messages must be a list of dicts like {example}, got {type(messages).__name__}")
    if not messages:
        raise InvalidArgumentError(
            f"messages is empty; pass at least one message, e.g. {example}")
    checked: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidArgumentError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        unknown = set(m) - MESSAGE_KEYS
        if unknown:
            raise InvalidArgumentError(
                f"messages[{i}] has unsupported keys {sorted(map(str, unknown))}; allowed keys: "
                f"{sorted(MESSAGE_KEYS)} (drop host-only metadata before sending)")
        role = m.get("role")
        if role not in ROLES:
            raise InvalidArgumentError(
                f"messages[{i}]['role'] is {role!r}; it must be one of {', '.join(ROLES)}")
        content = m.get("content")
        tool_calls = m.get("tool_calls")
        if tool_calls is not None:
            if role != "assistant":
                raise InvalidArgumentError(
                    f"messages[{i}] has tool_calls but role {role!r}; only assistant messages "
                    "carry tool_calls")
            if not isinstance(tool_calls, list) or not all(isinstance(t, Mapping) for t in tool_calls):
                raise InvalidArgumentError(
                    f"messages[{i}]['tool_calls'] must be a list of dicts, got "
                    f"{type(tool_calls).__name__}")
        if content is None:
            if not (role == "assistant" and tool_calls):
                raise InvalidArgumentError(
                    f"messages[{i}]['content'] is missing or None; give a str (use '' for empty "
                    "text); only an assistant message with tool_calls may have content None")
        elif not isinstance(content, str):
            hint = ("; join the text parts into one string first"
                    if isinstance(content, list) else "")
            raise InvalidArgumentError(
                f"messages[{i}]['content'] must be a str, got {type(content).__name__}{hint}")
        for key in ("name", "tool_call_id"):
            value = m.get(key)
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentError(
                    f"messages[{i}][{key!r}] must be a str, got {type(value).__name__}")
        out = {"role": role, "content": content}
        for key in ("name", "tool_call_id", "tool_calls"):
            if m.get(key) is not None:
                out[key] = m[key]
        checked.append(out)
    try:
        _canonical_json(checked)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(
            f"messages must be JSON-serialisable (plain dicts, lists, str, numbers): {e}") from None
    return checked


def _positive_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise InvalidArgumentError(
            f"option {name} must be a positive number of seconds, got {value!r}")
    return float(value)


def _check_options(options: object) -> dict[str, Any]:
    """Check the options dict and return a copy with defaults filled in."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise InvalidArgumentError(
            f"options must be a dict such as {{'provider': 'echo'}} or None, "
            f"got {type(options).__name__}")
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise InvalidArgumentError(
            f"unknown options {sorted(map(str, unknown))}; known options: {sorted(OPTION_KEYS)} "
            "(put provider-specific request fields in 'extra')")
    opts: dict[str, Any] = dict(options)
    provider = opts.get("provider", DEFAULT_PROVIDER)
    if provider is None:
        provider = DEFAULT_PROVIDER
    if not isinstance(provider, str) or not provider:
        raise InvalidArgumentError(
            f"option provider must be a provider name such as 'echo' or 'openai', got {provider!r}")
    opts["provider"] = provider
    for key in ("model", "base_url"):
        value = opts.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InvalidArgumentError(f"option {key} must be a non-empty str, got {value!r}")
    key = opts.get("api_key")
    if key is not None and not isinstance(key, str):
        raise InvalidArgumentError(
            f"option api_key must be a str or None, got {type(key).__name__}")
    opts["timeout"] = _positive_number("timeout", opts.get("timeout", DEFAULT_TIMEOUT))
    max_tokens = opts.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise InvalidArgumentError(
            f"option max_tokens must be a positive int, got {max_tokens!r}")
    temperature = opts.get("temperature")
    if temperature is not None and (isinstance(temperature, bool)
                                    or not isinstance(temperature, (int, float))
                                    or not math.isfinite(temperature) or temperature < 0):
        raise InvalidArgumentError(
            f"option temperature must be a number >= 0 (usually 0..2), got {temperature!r}")
    extra = opts.get("extra")
    if extra is None:
        extra = {}
    if not isinstance(extra, Mapping):
        raise InvalidArgumentError(
            f"option extra must be a dict of request-body fields, got {type(extra).__name__}")
    reserved = sorted(k for k in extra if k in _RESERVED_BODY_KEYS)
    if reserved:
        raise InvalidArgumentError(
            f"option extra may not set {reserved}; use the messages argument, the model "
            "option, or stream_complete() instead")
    clash = sorted(k for k in ("max_tokens", "temperature") if k in extra and opts.get(k) is not None)
    if clash:
        raise InvalidArgumentError(
            f"{clash} given both as options and in extra; give each only once")
    try:
        json.dumps(extra)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"option extra must be JSON-serialisable: {e}") from None
    opts["extra"] = dict(extra)
    return opts


# ------------------------------------------------------------------------ registry


@dataclass(frozen=True)
class _Provider:
    name: str
    complete: CompleteFn
    stream: StreamFn | None
    builtin: bool


_REGISTRY_LOCK = threading.Lock()
_registry: dict[str, _Provider] = {}


def register_provider(name: str, fn: CompleteFn, *, stream: StreamFn | None = None,
                      replace: bool = False) -> None:
    """Make ``fn(messages, options) -> reply dict`` available as ``options['provider'] = name``.

    ``fn`` gets validated messages (a list of dicts) and the options with defaults filled
    in; its reply is checked and completed by :func:`complete`.  ``stream``, if given, is
    ``stream(messages, options) -> iterator of str`` used by :func:`stream_complete`;
    without it streaming yields the whole reply as one chunk.  Registering a taken name
    raises unless ``replace=True``.
    """
    _register(name, fn, stream=stream, replace=replace, builtin=False)


def _register(name: str, fn: CompleteFn, *, stream: StreamFn | None, replace: bool,
              builtin: bool) -> None:
    if not isinstance(name, str) or not name or name != name.strip():
        raise InvalidArgumentError(
            f"provider name must be a non-empty str without surrounding spaces, got {name!r}")
    if not callable(fn):
        raise InvalidArgumentError(
            f"provider {name!r}: fn must be callable as fn(messages, options), "
            f"got {type(fn).__name__}")
    if stream is not None and not callable(stream):
        raise InvalidArgumentError(
            f"provider {name!r}: stream must be callable as stream(messages, options) or None")
    with _REGISTRY_LOCK:
        if name in _registry and not replace:
            raise InvalidArgumentError(
                f"provider {name!r} is already registered; pass replace=True to replace it")
        _registry[name] = _Provider(name, fn, stream, builtin)


def unregister_provider(name: str) -> None:
    """Remove a provider added with :func:`register_provider` (built-ins stay)."""
    with _REGISTRY_LOCK:
        entry = _registry.get(name)
        if entry is None:
            raise UnknownProviderError(_unknown_provider_message(name))
        if entry.builtin:
            raise InvalidArgumentError(
                f"provider {name!r} is built in and cannot be removed; register another "
                "provider under its name with replace=True to override it")
        del _registry[name]


def providers() -> list[str]:
    """The registered provider names, sorted."""
    with _REGISTRY_LOCK:
        return sorted(_registry)


def _unknown_provider_message(name: object) -> str:
    return (f"unknown provider {name!r}; registered providers: {', '.join(providers())} "
            "(add one with ctxrelay.providers.register_provider)")


def _lookup(name: str) -> _Provider:
    with _REGISTRY_LOCK:
        entry = _registry.get(name)
    if entry is None:
        raise UnknownProviderError(_unknown_provider_message(name))
    return entry


# ------------------------------------------------------------------------ public API


def complete(messages: list[dict[str, Any]], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Send ``messages`` to the provider named by ``options['provider']`` and return its reply.

    Options: ``provider`` ("echo" by default), ``model``, ``base_url``, ``api_key``
    (default: the OPENAI_API_KEY environment variable for ``openai``), ``timeout``
    (seconds, default 60), ``max_tokens``, ``temperature``, ``extra`` (merged into the
    request body).  The reply is a plain dict::

        {"content": str, "role": "assistant", "model": str, "provider": str,
         "finish_reason": str | None, "tool_calls": list | None,
         "usage": {"prompt_tokens": int | None, "completion_tokens": int | None,
                   "total_tokens": int | None},
         "raw": dict}
    """
    msgs = _check_messages(messages)
    opts = _check_options(options)
    entry = _lookup(opts["provider"])
    reply = entry.complete(msgs, dict(opts))
    return _normalise_reply(reply, entry.name, opts)


def stream_complete(messages: list[dict[str, Any]],
                    options: dict[str, Any] | None = None) -> Iterator[str]:
    """Like :func:`complete`, but yield the reply text as it arrives (non-empty str deltas).

    Arguments are checked at once; the request is sent when iteration starts.  Providers
    without a streaming function (``echo`` among them) yield their whole reply as one chunk.
    """
    msgs = _check_messages(messages)
    opts = _check_options(options)
    entry = _lookup(opts["provider"])
    return _stream(entry, msgs, opts)


def _stream(entry: _Provider, msgs: list[dict[str, Any]], opts: dict[str, Any]) -> Iterator[str]:
    if entry.stream is None:
        reply = _normalise_reply(entry.complete(msgs, dict(opts)), entry.name, opts)
        if reply["content"]:
            yield reply["content"]
        return
    for i, chunk in enumerate(entry.stream(msgs, dict(opts))):
        if not isinstance(chunk, str):
            raise ProviderResponseError(
                f"provider {entry.name!r} streamed chunk {i} as {type(chunk).__name__}, not str; "
                "fix the provider's stream function", provider=entry.name)
        if chunk:
            yield chunk


# ------------------------------------------------------------------------ replies


def _plain_problem(value: object, path: str) -> str | None:
    """Where ``value`` holds something janus would not hand to Prolog as plain data."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return f"{path} has a non-str key {k!r}"
            problem = _plain_problem(v, f"{path}[{k!r}]")
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for i, v in enumerate(value):
            problem = _plain_problem(v, f"{path}[{i}]")
            if problem:
                return problem
        return None
    return f"{path} is a {type(value).__name__}"


def _optional_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return int(value)


def _normalise_reply(reply: object, provider: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """Check a provider's reply and fill in the documented keys."""
    def bad(what: str) -> ProviderResponseError:
        return ProviderResponseError(
            f"provider {provider!r} returned an invalid reply: {what}; a provider must return "
            "a plain dict with at least 'content' (str)", provider=provider)

    if not isinstance(reply, Mapping):
        raise bad(f"{type(reply).__name__} instead of a dict")
    content = reply.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise bad(f"'content' is {type(content).__name__}")
    usage_in = reply.get("usage") or {}
    if not isinstance(usage_in, Mapping):
        raise bad(f"'usage' is {type(usage_in).__name__}")
    usage = {k: _optional_int(usage_in.get(k))
             for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    if usage["total_tokens"] is None and None not in (usage["prompt_tokens"],
                                                      usage["completion_tokens"]):
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    model = reply.get("model") or opts.get("model") or provider
    finish = reply.get("finish_reason")
    tool_calls = reply.get("tool_calls")
    raw = reply.get("raw")
    out = {
        "content": content,
        "role": "assistant",
        "model": model if isinstance(model, str) else str(model),
        "provider": provider,
        "finish_reason": finish if isinstance(finish, str) else None,
        "tool_calls": list(tool_calls) if isinstance(tool_calls, (list, tuple)) and tool_calls else None,
        "usage": usage,
        "raw": dict(raw) if isinstance(raw, Mapping) else {},
    }
    problem = _plain_problem(out, "reply")
    if problem:
        raise bad(f"{problem} (convert it with .tolist(), float(), dict() or str())")
    return out


# ------------------------------------------------------------------------ echo


def _canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def _tokens_module() -> Any:
    """``ctxrelay.text.tokens`` if it is installed, else None (it is optional here)."""
    try:
        return importlib.import_module("ctxrelay.text.tokens")
    except ModuleNotFoundError as e:
        if e.name in ("ctxrelay.text.tokens",):
            return None
        raise


def _echo_usage(messages: list[dict[str, Any]], content: str, model: str) -> dict[str, int | None]:
    tokens = _tokens_module()
    count_messages = getattr(tokens, "count_messages", None)
    count = getattr(tokens, "count", None)
    prompt = int(count_messages(messages, model).n) if callable(count_messages) else None
    completion = int(count(content, model).n) if callable(count) else None
    total = prompt + completion if prompt is not None and completion is not None else None
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def echo_text(messages: list[dict[str, Any]]) -> str:
    """The echo provider's reply for already validated ``messages``."""
    digest = hashlib.sha256(_canonical_json(messages).encode("utf-8")).hexdigest()[:12]
    roles = ",".join(m["role"] for m in messages)
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), None)
    tail = (last_user or "")[:80] if last_user is not None else "(none)"
    return (f"echo: {len(messages)} messages, roles={roles}, sha256={digest}; "
            f"last user: {tail}")


def _echo(messages: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    content = echo_text(messages)
    model = options.get("model") or "echo"
    count_with = options.get("model") or "cl100k_base"
    return {
        "content": content,
        "model": model,
        "finish_reason": "stop",
        "usage": _echo_usage(messages, content, count_with),
        "raw": {},
    }


# ------------------------------------------------------------------------ openai


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: a POST must not be replayed elsewhere with the API key."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


@dataclass(frozen=True)
class _Call:
    url: str
    base_url: str
    model: str
    timeout: float


def _openai_request(messages: list[dict[str, Any]], options: Mapping[str, Any],
                    *, stream: bool) -> tuple[_Call, urllib.request.Request]:
    base_url = (options.get("base_url") or os.environ.get("OPENAI_BASE_URL")
                or DEFAULT_OPENAI_BASE_URL).rstrip("/")
    parsed = urllib.parse.urlsplit(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidArgumentError(
            f"option base_url must be an http(s) URL such as 'http://127.0.0.1:8000/v1', "
            f"got {base_url!r}")
    model = options.get("model")
    if not model:
        raise InvalidArgumentError(
            "the openai provider needs option model, e.g. {'model': 'gpt-4o-mini'} "
            "(for a local server, the model name it serves)")
    body: dict[str, Any] = {"model": model, "messages": messages}
    if options.get("max_tokens") is not None:
        body["max_tokens"] = options["max_tokens"]
    if options.get("temperature") is not None:
        body["temperature"] = options["temperature"]
    body.update(options.get("extra") or {})
    if stream:
        body["stream"] = True
    api_key = options["api_key"] if "api_key" in options else os.environ.get("OPENAI_API_KEY")
    headers = {"Content-Type": "application/json",
               "Accept": "text/event-stream" if stream else "application/json",
               "User-Agent": "ctxrelay"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    url = f"{base_url}/chat/completions"
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    call = _Call(url=url, base_url=base_url, model=model, timeout=float(options["timeout"]))
    return call, urllib.request.Request(url, data=data, headers=headers, method="POST")


def _snippet(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."


def _error_fields(body: str) -> tuple[str | None, str | None, Any]:
    """(message, type, code) from an error body, OpenAI-style or the common variants."""
    try:
        data = json.loads(body)
    except ValueError:
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    err = data.get("error")
    if isinstance(err, dict):
        msg = err.get("message")
        return (str(msg) if msg is not None else None,
                str(err["type"]) if err.get("type") is not None else None,
                err.get("code"))
    if isinstance(err, str):
        return err, None, None
    for key in ("message", "detail"):
        if data.get(key) is not None:
            return str(data[key]), None, None
    return None, None, None


def _status_hint(status: int, call: _Call) -> str:
    if status in (401, 403):
        return "check the api_key option or the OPENAI_API_KEY environment variable"
    if status == 404:
        return (f"check base_url ({call.base_url!r}; OpenAI-compatible servers usually end in "
                f"/v1) and that the server serves model {call.model!r}")
    if status == 429:
        return "rate limit or quota exceeded; wait, lower the request rate, or check the plan"
    if 300 <= status < 400:
        return "base_url redirects; use the final URL as base_url (redirects are not followed)"
    if status >= 500:
        return "the server failed; check its logs and try again later (ctxrelay does not retry)"
    return (f"check model {call.model!r} and the request options (max_tokens, temperature, "
            "extra) against what the server accepts")


def _http_error(e: urllib.error.HTTPError, call: _Call) -> ProviderError:
    try:
        body = e.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        body = ""
    finally:
        e.close()
    message, etype, code = _error_fields(body)
    said = message if message is not None else (_snippet(body) or e.reason or "no body")
    return ProviderError(
        f"openai provider: HTTP {e.code} from {call.url}: {said}; fix: {_status_hint(e.code, call)}",
        provider="openai", status=e.code, provider_message=message, error_type=etype,
        error_code=code, url=call.url)


def _timeout_error(call: _Call, stage: str) -> ProviderTimeoutError:
    return ProviderTimeoutError(
        f"openai provider: no answer from {call.url} within {call.timeout:g} s while {stage}; "
        "fix: raise the timeout option, or check that the server is not overloaded",
        provider="openai", url=call.url)


def _transport_error(e: BaseException, call: _Call, stage: str) -> ProviderError:
    """Map a network failure (not an HTTP status) to the matching error class."""
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return _timeout_error(call, stage)
    if isinstance(reason, http.client.IncompleteRead):
        return ProviderResponseError(
            f"openai provider: the connection to {call.url} closed in the middle of the reply; "
            "fix: check the server's logs, then try again", provider="openai", url=call.url)
    if isinstance(reason, socket.gaierror):
        what = f"the host of base_url {call.base_url!r} cannot be resolved ({reason})"
    elif isinstance(reason, ConnectionRefusedError):
        what = f"connection refused by {call.base_url!r}"
    elif isinstance(reason, (http.client.RemoteDisconnected, ConnectionResetError)):
        what = f"{call.base_url!r} closed the connection without answering"
    else:
        what = f"cannot reach {call.base_url!r}: {reason}"
    return ProviderUnavailableError(
        f"openai provider: {what}; fix: is the server running at base_url, and is base_url "
        "right (scheme, host, port)?", provider="openai", url=call.url)


_NETWORK_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException)


def _open(call: _Call, request: urllib.request.Request) -> http.client.HTTPResponse:
    opener = urllib.request.build_opener(_NoRedirect())
    try:
        return opener.open(request, timeout=call.timeout)
    except urllib.error.HTTPError as e:
        raise _http_error(e, call) from None
    except _NETWORK_ERRORS as e:
        raise _transport_error(e, call, "connecting and waiting for the reply") from None


def _bad_response(call: _Call, what: str, body: str = "") -> ProviderResponseError:
    quoted = f": {_snippet(body)!r}" if body else ""
    return ProviderResponseError(
        f"openai provider: {call.url} sent {what}{quoted}; fix: check that base_url points at "
        "an OpenAI-compatible /v1 API", provider="openai", url=call.url)


def _openai(messages: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    call, request = _openai_request(messages, options, stream=False)
    with _open(call, request) as resp:
        try:
            body = resp.read().decode("utf-8", "replace")
        except _NETWORK_ERRORS as e:
            raise _transport_error(e, call, "reading the reply") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise _bad_response(call, "a body that is not JSON", body) from None
    if not isinstance(data, dict):
        raise _bad_response(call, "JSON that is not an object", body)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _bad_response(call, "a reply without choices", body)
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _bad_response(call, "a reply whose choices[0] has no message", body)
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _bad_response(call, "a reply whose message content is not a string", body)
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return {
        "content": content or "",
        "model": data.get("model") if isinstance(data.get("model"), str) else call.model,
        "finish_reason": choices[0].get("finish_reason"),
        "tool_calls": message.get("tool_calls"),
        "usage": usage,
        "raw": data,
    }


def _openai_stream(messages: list[dict[str, Any]], options: dict[str, Any]) -> Iterator[str]:
    """Content deltas of a ``stream: true`` request, read as server-sent events."""
    call, request = _openai_request(messages, options, stream=True)
    with _open(call, request) as resp:
        finished = False
        while True:
            try:
                raw_line = resp.readline()
            except _NETWORK_ERRORS as e:
                raise _transport_error(e, call, "reading the stream") from None
            if not raw_line:
                break
            line = raw_line.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue                     # blank separators, comments, event:/id: fields
            payload = line[len("data:"):].strip()
            if payload == "[DONE]":
                return
            try:
                event = json.loads(payload)
            except ValueError:
                raise _bad_response(call, "a stream event that is not JSON", payload) from None
            if not isinstance(event, dict):
                raise _bad_response(call, "a stream event that is not an object", payload)
            if isinstance(event.get("error"), (dict, str)):
                message, etype, code = _error_fields(payload)
                raise ProviderError(
                    f"openai provider: the stream from {call.url} reported an error: {message}; "
                    f"fix: {_status_hint(400, call)}", provider="openai",
                    provider_message=message, error_type=etype, error_code=code, url=call.url)
            choices = event.get("choices")
            if not isinstance(choices, list):
                raise _bad_response(call, "a stream event without choices", payload)
            if not choices:
                continue                     # e.g. a final usage-only event
            choice = choices[0] if isinstance(choices[0], dict) else {}
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            text = delta.get("content")
            if text is not None and not isinstance(text, str):
                raise _bad_response(call, "a stream delta whose content is not a string", payload)
            if choice.get("finish_reason"):
                finished = True
            if text:
                yield text
        if not finished:
            raise _bad_response(call, "a stream that ended before [DONE] or a finish_reason")


_register("echo", _echo, stream=None, replace=False, builtin=True)
_register("openai", _openai, stream=_openai_stream, replace=False, builtin=True)
