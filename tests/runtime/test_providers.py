"""ctxrelay.providers: the echo provider, an OpenAI-compatible client against a fake
server on 127.0.0.1, streaming, the registry, and argument checking."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ctxrelay import providers as P
from ctxrelay.errors import (
    CtxRelayError,
    InvalidArgumentError,
    ProviderError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    UnknownProviderError,
)

try:
    from ctxrelay.text.tokens import count, count_messages
except ImportError:  # pragma: no cover - depends on another module being present
    count = count_messages = None  # type: ignore[assignment]

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is the capital of France?"},
]

# ------------------------------------------------------------------------ fake server


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeServer:
    """An OpenAI-compatible stand-in; ``reply(handler)`` writes each response."""

    base_url: str
    requests: list[Recorded] = field(default_factory=list)
    reply: Callable[[BaseHTTPRequestHandler], None] | None = None
    release: threading.Event = field(default_factory=threading.Event)


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    send_raw(handler, status, json.dumps(payload).encode(), "application/json")


def send_raw(handler: BaseHTTPRequestHandler, status: int, body: bytes,
             ctype: str = "text/plain") -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", ctype)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def completion(content: str = "Paris.", **over: Any) -> dict[str, Any]:
    body = {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "fake-model-0613",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 21, "completion_tokens": 3, "total_tokens": 24},
    }
    body.update(over)
    return body


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                "ALL_PROXY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    state: dict[str, FakeServer] = {}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            fake = state["fake"]
            fake.requests.append(Recorded("POST", self.path, dict(self.headers.items()), body))
            assert fake.reply is not None, "test did not set server.reply"
            fake.reply(self)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    host, port = httpd.server_address[:2]
    fake = FakeServer(base_url=f"http://{host}:{port}/v1")
    state["fake"] = fake
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()            # let a deliberately slow handler finish
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def openai_opts(fake: FakeServer, **over: Any) -> dict[str, Any]:
    return {"provider": "openai", "model": "fake-model", "base_url": fake.base_url,
            "api_key": "sk-test-123", "timeout": 5, **over}


# ------------------------------------------------------------------------ echo

ECHO_RE = re.compile(
    r"^echo: (\d+) messages, roles=([a-z,]+), sha256=([0-9a-f]{12}); last user: (.*)$", re.S)


def test_echo_is_deterministic_and_describes_its_input() -> None:
    a = P.complete(MESSAGES)
    b = P.complete([dict(m) for m in MESSAGES], {"provider": "echo"})
    assert a == b
    m = ECHO_RE.match(a["content"])
    assert m, a["content"]
    assert m.group(1) == "2"
    assert m.group(2) == "system,user"
    assert m.group(4) == "What is the capital of France?"
    assert a["role"] == "assistant" and a["provider"] == "echo" and a["model"] == "echo"
    assert a["finish_reason"] == "stop"


def test_echo_quotes_only_the_first_80_chars_of_the_last_user_message() -> None:
    long = "x" * 70 + "0123456789ABCDEF"
    msgs = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": long}]
    text = P.complete(msgs)["content"]
    assert text.endswith("last user: " + long[:80])
    assert "first" not in text.split("last user: ")[1]


def test_echo_without_user_message_says_none() -> None:
    assert P.complete([{"role": "system", "content": "s"}])["content"].endswith("last user: (none)")


def _digest(messages: list[dict[str, Any]]) -> str:
    m = ECHO_RE.match(P.complete(messages)["content"])
    assert m
    return m.group(3)


@pytest.mark.parametrize("change", [
    lambda ms: ms[0].update(content="You are verbose."),
    lambda ms: ms[1].update(content="What is the capital of Spain?"),
    lambda ms: ms[0].update(role="user"),
    lambda ms: ms[1].update(name="alice"),
    lambda ms: ms.append({"role": "assistant", "content": "Paris."}),
    lambda ms: ms.reverse(),
], ids=["system-content", "user-content", "role", "name", "appended", "order"])
def test_echo_digest_changes_when_any_message_changes(change: Callable[[list], None]) -> None:
    changed = [dict(m) for m in MESSAGES]
    change(changed)
    assert _digest(changed) != _digest(MESSAGES)


def test_echo_usage_counts_prompt_and_reply_tokens() -> None:
    if count_messages is None:
        pytest.skip("ctxrelay.text.tokens.count_messages is not importable; echo usage is None then")
    reply = P.complete(MESSAGES)
    usage = reply["usage"]
    assert usage["prompt_tokens"] == count_messages(MESSAGES, "cl100k_base").n > 0
    assert usage["completion_tokens"] == count(reply["content"], "cl100k_base").n > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_echo_counts_with_the_model_option_when_given() -> None:
    if count_messages is None:
        pytest.skip("ctxrelay.text.tokens.count_messages is not importable; echo usage is None then")
    reply = P.complete(MESSAGES, {"model": "gpt-4o"})
    assert reply["model"] == "gpt-4o"
    assert reply["usage"]["prompt_tokens"] == count_messages(MESSAGES, "gpt-4o").n


def _assert_plain(value: Any) -> None:
    if isinstance(value, dict):
        assert all(type(k) is str for k in value)
        for v in value.values():
            _assert_plain(v)
    elif isinstance(value, list):
        for v in value:
            _assert_plain(v)
    else:
        assert value is None or type(value) in (str, int, float, bool), type(value)


def test_reply_has_the_documented_keys_and_plain_types_only() -> None:
    reply = P.complete(MESSAGES)
    assert set(reply) == {"content", "role", "model", "provider", "finish_reason", "tool_calls",
                          "usage", "raw"}
    assert set(reply["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    _assert_plain(reply)


def test_echo_streams_its_reply_as_one_chunk() -> None:
    assert list(P.stream_complete(MESSAGES)) == [P.complete(MESSAGES)["content"]]


# ------------------------------------------------------------------------ openai


def test_openai_success_sends_the_request_and_parses_the_reply(server: FakeServer) -> None:
    server.reply = lambda h: send_json(h, 200, completion())
    reply = P.complete(MESSAGES, openai_opts(server, max_tokens=16, temperature=0.2,
                                              extra={"seed": 7}))
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.headers["Authorization"] == "Bearer sk-test-123"
    assert req.headers["Content-Type"] == "application/json"
    assert req.body == {"model": "fake-model", "messages": MESSAGES, "max_tokens": 16,
                        "temperature": 0.2, "seed": 7}
    assert reply["content"] == "Paris."
    assert reply["model"] == "fake-model-0613"
    assert reply["provider"] == "openai"
    assert reply["finish_reason"] == "stop"
    assert reply["usage"] == {"prompt_tokens": 21, "completion_tokens": 3, "total_tokens": 24}
    assert reply["raw"] == completion()
    _assert_plain(reply)


def test_openai_without_usage_reports_none(server: FakeServer) -> None:
    body = completion()
    del body["usage"]
    server.reply = lambda h: send_json(h, 200, body)
    usage = P.complete(MESSAGES, openai_opts(server))["usage"]
    assert usage == {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None}


def test_openai_tool_call_reply_has_empty_content_and_tool_calls(server: FakeServer) -> None:
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]
    body = completion()
    body["choices"][0].update(message={"role": "assistant", "content": None, "tool_calls": calls},
                              finish_reason="tool_calls")
    server.reply = lambda h: send_json(h, 200, body)
    reply = P.complete(MESSAGES, openai_opts(server))
    assert reply["content"] == "" and reply["tool_calls"] == calls
    assert reply["finish_reason"] == "tool_calls"


def test_openai_api_key_comes_from_env_unless_given(server: FakeServer,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    server.reply = lambda h: send_json(h, 200, completion())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    opts = openai_opts(server)
    del opts["api_key"]
    P.complete(MESSAGES, opts)
    P.complete(MESSAGES, openai_opts(server, api_key=None))     # explicit None: no key
    assert server.requests[0].headers.get("Authorization") == "Bearer sk-from-env"
    assert "Authorization" not in server.requests[1].headers


def test_openai_http_400_with_openai_error_body(server: FakeServer) -> None:
    err = {"error": {"message": "The model `nope` does not exist", "type": "invalid_request_error",
                     "code": "model_not_found"}}
    server.reply = lambda h: send_json(h, 400, err)
    with pytest.raises(ProviderError) as info:
        P.complete(MESSAGES, openai_opts(server, model="nope"))
    e = info.value
    assert type(e) is ProviderError
    assert e.status == 400
    assert e.provider_message == "The model `nope` does not exist"
    assert e.error_type == "invalid_request_error" and e.error_code == "model_not_found"
    assert "The model `nope` does not exist" in str(e) and "fix:" in str(e)
    assert e.kind == "provider_error"


def test_openai_http_500_with_plain_body(server: FakeServer) -> None:
    server.reply = lambda h: send_raw(h, 500, b"upstream exploded")
    with pytest.raises(ProviderError) as info:
        P.complete(MESSAGES, openai_opts(server))
    assert type(info.value) is ProviderError
    assert info.value.status == 500 and info.value.provider_message is None
    assert "upstream exploded" in str(info.value) and "logs" in str(info.value)


def test_openai_http_401_hint_names_the_api_key(server: FakeServer) -> None:
    server.reply = lambda h: send_json(h, 401, {"error": {"message": "Incorrect API key"}})
    with pytest.raises(ProviderError, match="OPENAI_API_KEY") as info:
        P.complete(MESSAGES, openai_opts(server))
    assert info.value.status == 401
    assert "sk-test-123" not in str(info.value)          # the key is never echoed


def test_openai_redirect_is_not_followed(server: FakeServer) -> None:
    def redirect(h: BaseHTTPRequestHandler) -> None:
        h.send_response(307)
        h.send_header("Location", "http://127.0.0.1:1/elsewhere")
        h.send_header("Content-Length", "0")
        h.end_headers()

    server.reply = redirect
    with pytest.raises(ProviderError, match="redirect") as info:
        P.complete(MESSAGES, openai_opts(server))
    assert info.value.status == 307 and len(server.requests) == 1


def test_openai_timeout(server: FakeServer) -> None:
    def slow(h: BaseHTTPRequestHandler) -> None:
        # Hold the request; released (without an answer) when the fixture tears down.
        # Were the timeout ignored, the client would see a disconnect, not a timeout.
        server.release.wait(10)

    server.reply = slow
    start = time.monotonic()
    with pytest.raises(ProviderTimeoutError, match="raise the timeout option") as info:
        P.complete(MESSAGES, openai_opts(server, timeout=0.5))
    assert time.monotonic() - start < 3          # not the server's 10 s
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, ProviderError)
    assert info.value.kind == "provider_timeout"


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_connection_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    base = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(ProviderUnavailableError, match="is the server running") as info:
        P.complete(MESSAGES, {"provider": "openai", "model": "m", "base_url": base, "timeout": 2})
    assert base in str(info.value) and "refused" in str(info.value)


@pytest.mark.parametrize("body, what", [
    (b"<html>not json</html>", "not JSON"),
    (b'{"id": "x", "object": "chat.completion"}', "without choices"),
    (b'{"choices": []}', "without choices"),
    (b'{"choices": [{"finish_reason": "stop"}]}', "no message"),
    (b"[1, 2]", "not an object"),
])
def test_openai_unusable_body(server: FakeServer, body: bytes, what: str) -> None:
    server.reply = lambda h: send_raw(h, 200, body, "application/json")
    with pytest.raises(ProviderResponseError, match=what):
        P.complete(MESSAGES, openai_opts(server))


# ------------------------------------------------------------------------ streaming


def sse(events: list[str], *, done: bool = True, after_done: list[str] = ()) -> Callable:
    def reply(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Connection", "close")
        h.end_headers()
        for e in events:
            raw = e if e.startswith((":", "event:")) else f"data: {e}"   # SSE comment / field
            h.wfile.write(f"{raw}\n\n".encode())
            h.wfile.flush()
        if done:
            h.wfile.write(b"data: [DONE]\n\n")
        for e in after_done:
            h.wfile.write(f"data: {e}\n\n".encode())
        h.wfile.flush()
        h.close_connection = True
    return reply


def chunk(content: str | None = None, finish: str | None = None, role: str | None = None) -> str:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return json.dumps({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def test_openai_stream_yields_the_deltas_until_done(server: FakeServer) -> None:
    server.reply = sse([chunk(role="assistant", content=""), ": keep-alive", chunk("Pa"),
                        "event: message", chunk("ris"), chunk("."), chunk(finish="stop")],
                       after_done=[chunk("IGNORED")])
    deltas = list(P.stream_complete(MESSAGES, openai_opts(server)))
    assert deltas == ["Pa", "ris", "."]
    [req] = server.requests
    assert req.path == "/v1/chat/completions"
    assert req.body["stream"] is True and req.body["messages"] == MESSAGES
    assert req.headers["Authorization"] == "Bearer sk-test-123"


def test_openai_stream_that_stops_early_is_an_error(server: FakeServer) -> None:
    server.reply = sse([chunk("Pa")], done=False)
    stream = P.stream_complete(MESSAGES, openai_opts(server))
    assert next(stream) == "Pa"
    with pytest.raises(ProviderResponseError, match="ended before"):
        next(stream)


def test_openai_stream_http_error(server: FakeServer) -> None:
    server.reply = lambda h: send_json(h, 429, {"error": {"message": "Rate limit reached"}})
    with pytest.raises(ProviderError, match="Rate limit reached") as info:
        list(P.stream_complete(MESSAGES, openai_opts(server)))
    assert info.value.status == 429


def test_openai_stream_bad_event(server: FakeServer) -> None:
    server.reply = sse([chunk("ok"), "{not json"])
    with pytest.raises(ProviderResponseError, match="not JSON"):
        list(P.stream_complete(MESSAGES, openai_opts(server)))


def test_stream_checks_arguments_before_iteration() -> None:
    with pytest.raises(InvalidArgumentError):
        P.stream_complete([], None)            # raises without next()


# ------------------------------------------------------------------------ validation


@pytest.mark.parametrize("messages, match", [
    ([], "messages is empty"),
    ("hello", "must be a list of dicts"),
    ({"role": "user", "content": "hi"}, "must be a list of dicts"),
    (["hi"], r"messages\[0\] must be a dict"),
    ([{"content": "hi"}], r"'role'\] is None; it must be one of system, user, assistant, tool"),
    ([{"role": "robot", "content": "hi"}], "must be one of"),
    ([{"role": "user"}], "missing or None"),
    ([{"role": "user", "content": None}], "only an assistant message with tool_calls"),
    ([{"role": "assistant", "content": None}], "only an assistant message with tool_calls"),
    ([{"role": "user", "content": 42}], "must be a str, got int"),
    ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "join the text parts"),
    ([{"role": "user", "content": "hi", "ts": 1}], r"unsupported keys \['ts'\]"),
    ([{"role": "user", "content": "hi", "name": 3}], r"\['name'\] must be a str"),
    ([{"role": "user", "content": "hi", "tool_calls": []}], "only assistant messages"),
])
def test_bad_messages_are_rejected_with_a_fix(messages: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as info:
        P.complete(messages)
    assert info.value.kind == "invalid_argument"


def test_assistant_tool_call_message_may_have_no_content() -> None:
    msgs = [{"role": "user", "content": "look it up"},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "content": "42", "tool_call_id": "c1"}]
    assert P.complete(msgs)["content"].startswith("echo: 3 messages, roles=user,assistant,tool,")


@pytest.mark.parametrize("options, match", [
    ("echo", "options must be a dict"),
    ({"providr": "echo"}, r"unknown options \['providr'\]"),
    ({"timeout": 0}, "timeout must be a positive number"),
    ({"timeout": True}, "timeout must be a positive number"),
    ({"max_tokens": 0}, "max_tokens must be a positive int"),
    ({"temperature": -1}, "temperature must be a number >= 0"),
    ({"extra": {"messages": []}}, r"extra may not set \['messages'\]"),
    ({"extra": {"max_tokens": 5}, "max_tokens": 5}, "both as options and in extra"),
    ({"extra": {"x": object()}}, "JSON-serialisable"),
    ({"provider": "openai", "base_url": "http://127.0.0.1:1/v1"}, "needs option model"),
    ({"provider": "openai", "model": "m", "base_url": "file:///etc/passwd"}, "http\\(s\\) URL"),
])
def test_bad_options_are_rejected_with_a_fix(options: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        P.complete(MESSAGES, options)


def test_unknown_provider_lists_the_registered_ones() -> None:
    with pytest.raises(UnknownProviderError) as info:
        P.complete(MESSAGES, {"provider": "anthropic"})
    text = str(info.value)
    assert "'anthropic'" in text and "echo" in text and "openai" in text
    assert "register_provider" in text
    assert isinstance(info.value, LookupError) and info.value.kind == "unknown_provider"


# ------------------------------------------------------------------------ registry


@pytest.fixture
def registered() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        if name in P.providers():
            P.unregister_provider(name)


def test_register_provider_is_used_and_its_reply_completed(registered: list[str]) -> None:
    seen: list[tuple[list, dict]] = []

    def shout(messages: list[dict], options: dict) -> dict:
        seen.append((messages, options))
        return {"content": messages[-1]["content"].upper(), "usage": {"prompt_tokens": 2,
                                                                      "completion_tokens": 3}}

    P.register_provider("test-shout", shout)
    registered.append("test-shout")
    assert "test-shout" in P.providers() and {"echo", "openai"} <= set(P.providers())
    reply = P.complete([{"role": "user", "content": "hi"}],
                       {"provider": "test-shout", "model": "loud-1", "extra": {"k": 1}})
    assert reply == {"content": "HI", "role": "assistant", "model": "loud-1",
                     "provider": "test-shout", "finish_reason": None, "tool_calls": None,
                     "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5},
                     "raw": {}}
    [(msgs, opts)] = seen
    assert msgs == [{"role": "user", "content": "hi"}]
    assert opts["timeout"] == 60.0 and opts["extra"] == {"k": 1}
    assert list(P.stream_complete([{"role": "user", "content": "yo"}],
                                  {"provider": "test-shout"})) == ["YO"]


def test_register_provider_twice_needs_replace(registered: list[str]) -> None:
    P.register_provider("test-dup", lambda m, o: {"content": "a"})
    registered.append("test-dup")
    with pytest.raises(InvalidArgumentError, match="replace=True"):
        P.register_provider("test-dup", lambda m, o: {"content": "b"})
    P.register_provider("test-dup", lambda m, o: {"content": "b"}, replace=True)
    assert P.complete(MESSAGES, {"provider": "test-dup"})["content"] == "b"
    P.unregister_provider("test-dup")
    assert "test-dup" not in P.providers()
    with pytest.raises(InvalidArgumentError, match="built in"):
        P.unregister_provider("echo")


@pytest.mark.parametrize("bad, match", [
    ("just text", "str instead of a dict"),
    ({"content": 5}, "'content' is int"),
    ({"content": "x", "raw": {"v": (1, 2)}}, r"reply\['raw'\]\['v'\] is a tuple"),
    ({"content": "x", "raw": {"v": {1, 2}}}, "is a set"),
])
def test_a_provider_returning_non_plain_data_is_reported(registered: list[str], bad: Any,
                                                          match: str) -> None:
    P.register_provider("test-bad", lambda m, o: bad, replace=True)
    registered.append("test-bad")
    with pytest.raises(ProviderResponseError, match=match):
        P.complete(MESSAGES, {"provider": "test-bad"})


def test_streaming_provider_chunks_must_be_str(registered: list[str]) -> None:
    P.register_provider("test-stream", lambda m, o: {"content": "ab"},
                        stream=lambda m, o: iter(["a", "", "b", 3]))
    registered.append("test-stream")
    out: list[str] = []
    with pytest.raises(ProviderResponseError, match="chunk 3 as int"):
        for piece in P.stream_complete(MESSAGES, {"provider": "test-stream"}):
            out.append(piece)
    assert out == ["a", "b"]


def test_every_new_error_is_a_ctxrelay_error() -> None:
    for cls in (ProviderError, ProviderUnavailableError, ProviderTimeoutError,
                ProviderResponseError, UnknownProviderError):
        assert issubclass(cls, CtxRelayError)
    kinds = {c.kind for c in (ProviderError, ProviderUnavailableError, ProviderTimeoutError,
                              ProviderResponseError, UnknownProviderError)}
    assert len(kinds) == 5
