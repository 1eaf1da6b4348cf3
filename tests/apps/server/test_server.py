"""The OpenAI-compatible relay (ctxrelay.apps.server), driven by the official openai client.

The real server runs under uvicorn in a background thread on 127.0.0.1; its
upstream is a fake OpenAI API (http.server, also on 127.0.0.1) that records
every request, so the tests see exactly what the relay forwarded.  Transcripts
are read through the relay's own Prolog worker (Relay.call_sync).
"""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the server extra is needed: pip install -e '.[server]'")
pytest.importorskip("uvicorn", reason="the server extra is needed: pip install -e '.[server]'")
httpx = pytest.importorskip("httpx", reason="the server extra is needed: pip install -e '.[server]'")
openai = pytest.importorskip("openai", reason="the tests drive the relay with openai: pip install openai")
import uvicorn  # noqa: E402

from ctxrelay.apps.server import Relay, ServerConfig, _parser, config_from_args, create_app  # noqa: E402

from conftest import ROOT  # noqa: E402

POLICY = {"max_context_tokens": 4096, "output_reserve": 256, "safety_margin": 32,
          "min_recent_turns": 4}
UPSTREAM_TIMEOUT = 1.0


# ------------------------------------------------------------------------ fake upstream


class FakeUpstream:
    """An OpenAI-compatible API on 127.0.0.1 that records what it is sent.

    The reply to a request is ``upstream reply N`` (N counts the requests).  The
    last user message steers it: ``[slow]`` answers after 2.5 s (past the relay's
    timeout), ``[slow-stream]`` streams a chunk every 0.3 s, ``[stream-error]`` sends an
    error event after two chunks, ``[wait-b]`` waits (at most 3 s) until a message with ``[b]``
    arrives.  ``fail_next`` answers that many requests with HTTP 500.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_next = 0
        self.stream_parts = ["Hel", "lo ", "wor", "ld"]
        self.b_arrived = threading.Event()
        self.slow_stream = False
        self.stream_error = False
        self.aborted = 0
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._record(self, None)
                self._json(200, {"object": "list", "data": [
                    {"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                n = fake._record(self, body)
                last = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
                try:
                    if fake._take_failure():
                        self._json(500, {"error": {"message": "the model crashed",
                                                   "type": "server_error", "code": None}})
                        return
                    if "[slow]" in last:
                        time.sleep(2.5)
                    fake.slow_stream = "[slow-stream]" in last
                    fake.stream_error = "[stream-error]" in last
                    if "[b]" in last:
                        fake.b_arrived.set()
                    if "[wait-b]" in last:
                        saw_b = fake.b_arrived.wait(timeout=3)
                        self._reply(body, f"upstream reply {n}; saw b: {saw_b}")
                        return
                    if "[history]" in last:
                        self._history_turn(body, n)
                        return
                    self._reply(body, f"upstream reply {n}")
                except (BrokenPipeError, ConnectionResetError):
                    fake.aborted += 1          # the relay hung up on us

            def _history_turn(self, body: dict[str, Any], n: int) -> None:
                """``[history]``: search the relay's history tool while it is offered,
                then answer with what the tool returned."""
                names = {t["function"]["name"] for t in body.get("tools") or []}
                results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
                if "context_search" in names and not results:
                    call = {"id": f"call_{n}", "type": "function",
                            "function": {"name": "context_search",
                                         "arguments": json.dumps({"query": "zebra code"})}}
                    self._json(200, {"id": "chatcmpl-fake", "object": "chat.completion",
                                     "created": 1, "model": body["model"],
                                     "choices": [{"index": 0, "finish_reason": "tool_calls",
                                                  "message": {"role": "assistant",
                                                              "content": None,
                                                              "tool_calls": [call]}}]})
                    return
                self._reply(body, f"upstream reply {n}; found: {' | '.join(results)}")

            def _reply(self, body: dict[str, Any], text: str) -> None:
                if body.get("stream"):
                    self._stream()
                    return
                self._json(200, {"id": "chatcmpl-fake", "object": "chat.completion",
                                 "created": 1, "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                           "total_tokens": 2}})

            def _stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1,
                         "model": "fake-model"}
                deltas = [{"role": "assistant", "content": ""}] + \
                    [{"content": p} for p in fake.stream_parts]
                for i, delta in enumerate(deltas):
                    event = {**chunk, "choices": [{"index": 0, "delta": delta,
                                                   "finish_reason": None}]}
                    if fake.stream_error and i == 2:
                        event = {"error": {"message": "overloaded", "type": "server_error"}}
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()
                    if fake.stream_error and i == 2:
                        self.close_connection = True
                        return
                    time.sleep(0.3 if fake.slow_stream else 0.01)
                final = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def _json(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def _record(self, handler: BaseHTTPRequestHandler, body: Any) -> int:
        with self._lock:
            self.requests.append({"path": handler.path, "headers": dict(handler.headers),
                                  "body": body})
            return len(self.requests)

    def _take_failure(self) -> bool:
        with self._lock:
            if self.fail_next > 0:
                self.fail_next -= 1
                return True
            return False

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ------------------------------------------------------------------------ the relay


@dataclass
class RunningRelay:
    url: str
    relay: Relay

    def client(self, timeout: float = 30) -> Any:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="x", max_retries=0,
                             timeout=timeout)

    def transcript(self, session_id: str) -> list[tuple[str, str]]:
        """The session's turns; [] when the session was never stored."""
        return self.relay.call_sync(
            lambda rt: [(t.role, t.content) for t in rt.history(session_id)]
            if session_id in {s.session_id for s in rt.sessions()} else [])


@pytest.fixture(scope="module")
def run_relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(**config: Any) -> RunningRelay:
        store = tmp_path_factory.mktemp("relay") / "store"
        app = create_app(ServerConfig(store=store, **config))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        servers.append((server, thread))
        deadline = time.monotonic() + 120          # start-up loads the embedder
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the relay did not start"
            time.sleep(0.05)
        return RunningRelay(f"http://127.0.0.1:{sock.getsockname()[1]}", app.state.relay)

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=15)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def relayed(run_relay: Any, upstream: FakeUpstream) -> RunningRelay:
    return run_relay(upstream=upstream.base_url, model="fake-model", api_key="upstream-secret",
                     timeout=UPSTREAM_TIMEOUT, policy=POLICY)


@pytest.fixture(scope="module")
def echoed(run_relay: Any) -> RunningRelay:
    return run_relay(upstream="echo", policy=POLICY)


def say(client: Any, session: str, text: str, **kw: Any) -> Any:
    return client.chat.completions.create(
        model="client-model", messages=[{"role": "user", "content": text}],
        extra_headers={"CRP-Session-Id": session}, **kw)


def error_of(excinfo: pytest.ExceptionInfo[Any]) -> dict[str, Any]:
    body = excinfo.value.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


# ------------------------------------------------------------------------ tests


def test_the_server_sends_the_history_when_the_client_sends_only_the_new_message(relayed, upstream):
    client = relayed.client()
    first = say(client, "conv", "our etcd quota is 8 GiB", temperature=0.3)
    n_before = len(upstream.requests)
    second = say(client, "conv", "what was the quota again?")

    sent = upstream.requests[n_before]
    assert len(upstream.requests) == n_before + 1
    assert [(m["role"], m["content"]) for m in sent["body"]["messages"]] == [
        ("user", "our etcd quota is 8 GiB"),
        ("assistant", first.choices[0].message.content),
        ("user", "what was the quota again?")]
    assert second.choices[0].message.content == f"upstream reply {n_before + 1}"
    assert relayed.transcript("conv") == [
        ("user", "our etcd quota is 8 GiB"), ("assistant", first.choices[0].message.content),
        ("user", "what was the quota again?"), ("assistant", second.choices[0].message.content)]
    # --model pins the upstream model; the relay's own key goes upstream, not the client's.
    assert sent["body"]["model"] == "fake-model"
    assert sent["headers"]["Authorization"] == "Bearer upstream-secret"
    assert sent["path"] == "/v1/chat/completions"
    assert upstream.requests[n_before - 1]["body"]["temperature"] == 0.3


def test_responses_carry_every_crp_header_of_the_pack(relayed):
    client = relayed.client()
    say(client, "headers", "first message about etcd")
    expected = relayed.relay.call_sync(
        lambda rt: rt.assemble("headers", "second message", **POLICY, model="fake-model").headers)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "second message"}],
        extra_headers={"CRP-Session-Id": "headers"})
    completion = raw.parse()

    names = {k.lower() for k in raw.headers.keys()}
    assert {k.lower() for k in expected} <= names
    issue7 = {"Tier-Blend", "Turn-Intent", "References-Resolved", "Active-Thread", "Mode",
              "Store-Used", "Cache-Hit", "Retrieval-Ms", "Promotions", "Tokens-Used"}
    assert {f"crp-context-{h.lower()}" for h in issue7} <= names
    assert raw.headers["CRP-Context-Cache-Hit"] in ("true", "false")
    assert set(raw.headers["CRP-Context-Store-Used"].split(",")) <= \
        {"cache", "log", "index", "pointer", "graph"}
    used, budget = map(int, re.fullmatch(r"(\d+)/(\d+)",
                                         raw.headers["CRP-Context-Tokens-Used"]).groups())
    assert 0 < used <= budget == POLICY["max_context_tokens"] - POLICY["output_reserve"] \
        - POLICY["safety_margin"]
    assert raw.headers["CRP-Context-Mode"] == expected["CRP-Context-Mode"]
    assert raw.headers["CRP-Session-Id"] == "headers"
    assert (int(raw.headers["CRP-User-Turn"]), int(raw.headers["CRP-Assistant-Turn"])) == (3, 4)
    assert relayed.transcript("headers")[3] == ("assistant", completion.choices[0].message.content)


def test_sessions_are_isolated_and_the_header_wins_over_the_body(relayed, upstream):
    client = relayed.client()
    say(client, "iso-a", "alpha secret is 1234")
    say(client, "iso-b", "beta note")
    n_before = len(upstream.requests)
    say(client, "iso-b", "what did I say?")
    seen = json.dumps(upstream.requests[n_before]["body"]["messages"])
    assert "beta note" in seen and "alpha secret" not in seen

    # Header CRP-Session-Id > body session_id > body user.
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "h"}],
                                   extra_headers={"CRP-Session-Id": "iso-header"},
                                   extra_body={"session_id": "iso-body"}, user="iso-user")
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}],
                                   extra_body={"session_id": "iso-body"}, user="iso-user")
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "u"}],
                                   user="iso-user")
    assert [t[1] for t in relayed.transcript("iso-header")][::2] == ["h"]
    assert [t[1] for t in relayed.transcript("iso-body")][::2] == ["b"]
    assert [t[1] for t in relayed.transcript("iso-user")][::2] == ["u"]
    assert "session_id" not in upstream.requests[-2]["body"]     # relay-only field
    assert upstream.requests[-1]["body"]["user"] == "iso-user"   # an OpenAI field: forwarded


def test_sessions_wait_for_their_own_upstream_call_only(relayed, upstream):
    """A slow upstream call holds its session, not the relay: b is answered meanwhile."""
    upstream.b_arrived.clear()
    client = relayed.client()
    replies: dict[str, str] = {}
    slow = threading.Thread(target=lambda: replies.__setitem__(
        "a", say(client, "conc-a", "[wait-b] long question").choices[0].message.content))
    slow.start()
    deadline = time.monotonic() + 5
    while not any("[wait-b]" in json.dumps(r["body"]) for r in upstream.requests[-3:]):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    replies["b"] = say(client, "conc-b", "[b] quick question").choices[0].message.content
    slow.join(timeout=10)
    assert replies["a"].endswith("saw b: True")


def test_streaming_passes_the_chunks_through_and_stores_the_whole_reply(relayed, upstream):
    client = relayed.client()
    say(client, "stream", "hello")
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "stream it"}],
        extra_headers={"CRP-Session-Id": "stream"}, stream=True)
    deltas = [c.choices[0].delta.content for c in raw.parse() if c.choices]

    assert [d for d in deltas if d] == upstream.stream_parts
    assert upstream.requests[-1]["body"]["stream"] is True
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert re.fullmatch(r"\d+/\d+", raw.headers["CRP-Context-Tokens-Used"])
    assert relayed.transcript("stream")[-2:] == [("user", "stream it"),
                                                ("assistant", "".join(upstream.stream_parts))]


def test_an_error_event_in_the_stream_reaches_the_client_and_stores_no_reply(relayed):
    with pytest.raises(openai.APIError, match="overloaded"):
        for _ in say(relayed.client(), "stream-err", "[stream-error] go", stream=True):
            pass
    assert relayed.transcript("stream-err") == []          # nothing of the turn, not even the session


def test_a_client_leaving_mid_stream_frees_the_session_and_stores_no_reply(relayed, upstream):
    aborted = upstream.aborted
    with httpx.stream("POST", f"{relayed.url}/v1/chat/completions",
                      headers={"CRP-Session-Id": "gone"},
                      json={"model": "m", "stream": True,
                            "messages": [{"role": "user", "content": "[slow-stream] go"}]}) as r:
        assert next(r.iter_lines()).startswith("data: ")
    # The session's lock is free again at once (not after the upstream's 1.5 s stream).
    say(relayed.client(timeout=1.0), "gone", "next")
    assert relayed.transcript("gone") == [("user", "next"), ("assistant", relayed.transcript("gone")[1][1])]
    deadline = time.monotonic() + 3          # and the upstream stream was closed, not drained
    while upstream.aborted == aborted:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_upstream_500_is_502_and_stores_nothing_of_the_turn(relayed, upstream):
    client = relayed.client()
    say(client, "fail", "before")
    upstream.fail_next = 1
    with pytest.raises(openai.APIStatusError) as excinfo:
        say(client, "fail", "this one fails")
    assert excinfo.value.status_code == 502
    error = error_of(excinfo)
    assert error["type"] == "upstream_error" and "HTTP 500" in error["message"]
    assert "the model crashed" in error["message"]
    # Nothing of the failed turn is stored, so a plain retry is safe (no retry veto).
    assert "x-should-retry" not in excinfo.value.response.headers
    assert relayed.transcript("fail") == [("user", "before"), ("assistant", "upstream reply %d" % (
        len(upstream.requests) - 1))]
    say(client, "fail", "after")
    roles = [t[0] for t in relayed.transcript("fail")]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_upstream_timeout_is_504(relayed):
    client = relayed.client()
    with pytest.raises(openai.APIStatusError) as excinfo:
        say(client, "slow", "[slow] take your time")
    assert excinfo.value.status_code == 504
    assert error_of(excinfo)["code"] == "upstream_timeout"
    assert relayed.transcript("slow") == []


def test_an_idempotent_retry_finishes_the_turn_exactly_once(relayed, upstream):
    client = relayed.client()
    key = {"CRP-Session-Id": "idem", "Idempotency-Key": "req-1"}
    msg = [{"role": "user", "content": "remember 42"}]
    say(client, "idem", "hi")
    upstream.fail_next = 2
    for _ in range(2):        # the relay's own call, then the resume through managed_turn
        with pytest.raises(openai.APIStatusError) as excinfo:
            client.chat.completions.create(model="m", messages=msg, extra_headers=key)
        assert excinfo.value.status_code == 502
    first_attempt = upstream.requests[-2]["body"]["messages"]
    done = client.chat.completions.create(model="m", messages=msg, extra_headers=key)
    # The resumed turn is assembled as the first attempt was: the stored user turn is
    # the new message, not history (it is sent once).
    assert upstream.requests[-1]["body"]["messages"] == first_attempt
    assert [m["content"] for m in first_attempt].count("remember 42") == 1
    calls = len(upstream.requests)
    raw = client.chat.completions.with_raw_response.create(model="m", messages=msg,
                                                           extra_headers=key)
    assert len(upstream.requests) == calls                  # replayed from the transcript
    assert raw.headers["CRP-Idempotent-Replay"] == "true"
    assert raw.parse().choices[0].message.content == done.choices[0].message.content
    assert relayed.transcript("idem")[2:] == [("user", "remember 42"),
                                              ("assistant", done.choices[0].message.content)]

    # A key that succeeded at once replays the id and the pack headers of its answer.
    key2 = {"CRP-Session-Id": "idem", "Idempotency-Key": "req-2"}
    msg2 = [{"role": "user", "content": "and 43"}]
    first = client.chat.completions.with_raw_response.create(model="m", messages=msg2,
                                                             extra_headers=key2)
    again = client.chat.completions.with_raw_response.create(model="m", messages=msg2,
                                                             extra_headers=key2)
    assert again.parse().id == first.parse().id == "chatcmpl-fake"
    # and its usage (a replay's body had none: the same request, a different answer)
    assert first.parse().usage is not None and again.parse().usage == first.parse().usage
    for name in ("CRP-Context-Tokens-Used", "CRP-Context-Mode", "CRP-User-Turn",
                 "CRP-Assistant-Turn"):
        assert again.headers[name] == first.headers[name]
    assert len(relayed.transcript("idem")) == 6

    with pytest.raises(openai.APIStatusError) as excinfo:      # same key, other message
        client.chat.completions.create(model="m", extra_headers=key,
                                       messages=[{"role": "user", "content": "other"}])
    assert excinfo.value.status_code == 409
    assert error_of(excinfo)["code"] == "idempotency_key_conflict"


def test_system_messages_are_instructions_and_earlier_messages_are_stored(relayed, upstream):
    client = relayed.client()
    client.chat.completions.create(
        model="m", extra_headers={"CRP-Session-Id": "multi"},
        messages=[{"role": "system", "content": "answer in French"},
                  {"role": "user", "content": "first"},
                  {"role": "assistant", "content": "premier"},
                  {"role": "user", "content": [{"type": "text", "text": "second"}]}])
    sent = upstream.requests[-1]["body"]["messages"]
    assert sent[0] == {"role": "system", "content": "answer in French"}
    assert [m["content"] for m in sent[1:]] == ["first", "premier", "second"]
    assert relayed.transcript("multi") == [("user", "first"), ("assistant", "premier"),
                                           ("user", "second"),
                                           ("assistant", f"upstream reply {len(upstream.requests)}")]


def test_a_request_over_the_window_is_400_context_length_exceeded_and_not_stored(relayed, upstream):
    client = relayed.client()
    say(client, "big", "small talk")
    calls = len(upstream.requests)
    with pytest.raises(openai.BadRequestError) as excinfo:
        say(client, "big", "etcd " * 6000)
    error = error_of(excinfo)
    assert error["code"] == "context_length_exceeded"
    assert "input_budget" in error["message"] and "mandatory_tokens" in error["message"]
    # A max_tokens the window cannot reserve is the same error, naming the field.
    with pytest.raises(openai.BadRequestError) as excinfo:
        say(client, "big", "short", max_tokens=10 ** 6)
    assert (error_of(excinfo)["code"], error_of(excinfo)["param"]) == \
        ("context_length_exceeded", "max_tokens")
    assert len(upstream.requests) == calls
    assert [t[1] for t in relayed.transcript("big")] == ["small talk",
                                                         f"upstream reply {calls}"]


def test_bad_requests_get_openai_style_errors(relayed, upstream):
    url = f"{relayed.url}/v1/chat/completions"
    session = {"CRP-Session-Id": "bad"}
    cases = [
        (dict(content=b"{not json", headers=session), 400, None),
        (dict(json={"model": "m"}, headers=session), 400, "messages"),
        (dict(json={"model": "m", "messages": []}, headers=session), 400, "messages"),
        (dict(json={"model": "m", "messages": [{"role": "user", "content": "x"}]}), 400,
         "session_id"),
        (dict(json={"model": "m", "messages": [{"role": "assistant", "content": "x"}]},
              headers=session), 400, "messages[0].role"),
        (dict(json={"model": "m", "messages": [{"role": "user", "content": 3}]},
              headers=session), 400, "messages[0].content"),
    ]
    calls = len(upstream.requests)
    for kwargs, status, param in cases:
        r = httpx.post(url, **kwargs)
        assert r.status_code == status, r.text
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert r.json()["error"]["param"] == param
    assert len(upstream.requests) == calls
    r = httpx.get(f"{relayed.url}/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_url"
    # Fields the relay does not know are not an error; they go to the upstream.
    r = httpx.post(url, headers=session, json={"model": "m", "frobnicate": 1,
                                               "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200 and upstream.requests[-1]["body"]["frobnicate"] == 1


def test_models_and_health(relayed, echoed):
    assert [m.id for m in relayed.client().models.list()] == ["fake-model"]
    assert [m.id for m in echoed.client().models.list()] == ["echo"]
    r = httpx.get(f"{relayed.url}/health")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert r.json()["upstream"].startswith("http://127.0.0.1:")


def test_without_model_the_clients_model_goes_upstream_and_models_are_proxied(run_relay,
                                                                             upstream):
    relay = run_relay(upstream=upstream.base_url, timeout=UPSTREAM_TIMEOUT, warmup=False)
    client = relay.client()
    assert [m.id for m in client.models.list()] == ["fake-model"]
    assert upstream.requests[-1]["path"] == "/v1/models"
    client.chat.completions.create(model="client-model", extra_body={"session_id": "own"},
                                   messages=[{"role": "user", "content": "hi"}])
    assert upstream.requests[-1]["body"]["model"] == "client-model"
    assert "Authorization" not in upstream.requests[-1]["headers"]      # no --api-key


def test_the_echo_upstream_answers_and_streams_in_openai_format(echoed):
    client = echoed.client()
    first = say(client, "echo", "our etcd quota is 8 GiB")
    second = say(client, "echo", "what was the quota?")
    assert first.choices[0].message.content.startswith("echo: 1 messages, roles=user,")
    assert second.choices[0].message.content.startswith(
        "echo: 3 messages, roles=user,assistant,user,")

    chunks = list(say(client, "echo", "stream please", stream=True,
                      stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    assert text.startswith("echo: 5 messages,") and text.endswith("last user: stream please")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert echoed.transcript("echo")[-1] == ("assistant", text)
    # A keyed streamed turn replays its usage too, when the retry asks for it.
    keyed = {"CRP-Session-Id": "echo", "Idempotency-Key": "stream-1"}
    streams = [list(client.chat.completions.create(
        model="client-model", messages=[{"role": "user", "content": "keyed stream"}],
        stream=True, stream_options={"include_usage": True}, extra_headers=keyed))
        for _ in range(2)]
    usages = [s[-1].usage for s in streams]
    assert usages[0] is not None and usages[1] == usages[0]
    assert echoed.transcript("echo").count(("user", "keyed stream")) == 1   # stored once

    with httpx.stream("POST", f"{echoed.url}/v1/chat/completions",
                      headers={"CRP-Session-Id": "echo-raw"},
                      json={"model": "echo", "stream": True,
                            "messages": [{"role": "user", "content": "hi"}]}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    # Events, and one comment before [DONE] with the ids of the turn just stored
    # (a stream's headers go out before its turn exists).
    assert all(line.startswith("data: ") for line in lines[:-2])
    assert lines[-2] == ": CRP-User-Turn: 1, CRP-Assistant-Turn: 2"


def test_command_line_flags_become_the_config(tmp_path):
    args = _parser().parse_args(["--store", str(tmp_path), "--port", "9", "--upstream",
                                 "http://127.0.0.1:1/v1/", "--model", "m", "--api-key", "k",
                                 "--max-context-tokens", "2048", "--min-recent-turns", "2"])
    config = config_from_args(args)
    assert config.upstream == "http://127.0.0.1:1/v1"
    assert dict(config.policy) == {"max_context_tokens": 2048, "min_recent_turns": 2}
    assert (config.model, config.api_key) == ("m", "k")
    with pytest.raises(SystemExit):
        _parser().parse_args(["--store", str(tmp_path), "--upstream", "echo",
                              "--output-reserve", "-1"])
    with pytest.raises(ValueError, match="echo"):
        config_from_args(_parser().parse_args(["--store", str(tmp_path), "--upstream", "ftp://x"]))


def test_the_relay_client_example_runs_as_written():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "relay_client.py")],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "roles=user,assistant,user" in done.stdout
    assert re.search(r"(?i)crp-context-tokens-used: \d+/\d+", done.stdout)


# ------------------------------------------------------------------------ atomic turns


def _sessions(relay: RunningRelay) -> set[str]:
    return relay.relay.call_sync(lambda rt: {s.session_id for s in rt.sessions()})


def test_a_refused_request_stores_nothing_not_even_its_session(relayed, upstream):
    url = f"{relayed.url}/v1/chat/completions"
    calls = len(upstream.requests)
    earlier = [{"role": "user", "content": "stored first?"},
               {"role": "assistant", "content": "no"}]
    cases = {
        # a lone surrogate in the last message, after valid earlier messages
        "surrogate": b'{"model": "m", "messages": [{"role": "user", "content": "a"}, '
                     b'{"role": "assistant", "content": "b"}, '
                     b'{"role": "user", "content": "bad \\ud800 text"}]}',
        # NaN and Infinity are not JSON numbers
        "nan": b'{"model": "m", "temperature": NaN, '
               b'"messages": [{"role": "user", "content": "hi"}]}',
        "inf": b'{"model": "m", "temperature": Infinity, '
               b'"messages": [{"role": "user", "content": "hi"}]}',
        # JSON nested 5,000 deep (a RecursionError in the parser)
        "deep": b'{"model": "m", "extra": ' + b"[" * 5000 + b"]" * 5000 +
                b', "messages": [{"role": "user", "content": "hi"}]}',
    }
    for session, raw in cases.items():
        r = httpx.post(url, content=raw, headers={"CRP-Session-Id": f"refused-{session}",
                                                 "Content-Type": "application/json"})
        assert r.status_code == 400, (session, r.text)
        assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    # an oversized message (context_length_exceeded) with earlier messages
    r = httpx.post(url, headers={"CRP-Session-Id": "refused-big"},
                   json={"model": "m", "messages": [*earlier, {"role": "user",
                                                               "content": "etcd " * 6000}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert len(upstream.requests) == calls
    assert not {s for s in _sessions(relayed) if s.startswith("refused-")}


def test_earlier_messages_commit_with_the_turn_or_not_at_all(relayed, upstream):
    client = relayed.client()
    say(client, "atomic", "hello")
    before = relayed.transcript("atomic")
    msgs = [{"role": "assistant", "content": "an earlier answer"},
            {"role": "user", "content": "the question"}]
    upstream.fail_next = 1
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="m", messages=msgs,
                                       extra_headers={"CRP-Session-Id": "atomic"})
    assert relayed.transcript("atomic") == before            # the earlier message too
    done = client.chat.completions.create(model="m", messages=msgs,
                                          extra_headers={"CRP-Session-Id": "atomic"})
    sent = upstream.requests[-1]["body"]["messages"]
    assert sent[-1]["content"] == "the question"
    assert sent[-2]["role"] == "assistant" and sent[-2]["content"].endswith("an earlier answer")
    assert relayed.transcript("atomic") == before + [
        ("assistant", "an earlier answer"), ("user", "the question"),
        ("assistant", done.choices[0].message.content)]


def test_a_message_over_the_turn_size_limit_is_413_and_stores_nothing(run_relay):
    relay = run_relay(upstream="echo", policy=POLICY, warmup=False, max_turn_bytes=50_000)
    url = f"{relay.url}/v1/chat/completions"
    say(relay.client(), "limits", "hello")
    before = relay.transcript("limits")
    big = "x" * 60_000
    for messages in ([{"role": "user", "content": big}],
                     [{"role": "assistant", "content": big}, {"role": "user", "content": "hi"}],
                     [{"role": "system", "content": big}, {"role": "user", "content": "hi"}],
                     [{"role": "developer", "content": big}, {"role": "user", "content": "hi"}]):
        r = httpx.post(url, headers={"CRP-Session-Id": "limits"},
                       json={"model": "m", "messages": messages})
        assert r.status_code == 413 and r.json()["error"]["code"] == "turn_too_large", r.text
    r = httpx.post(url, headers={"CRP-Session-Id": "limits"},          # the body itself
                   json={"model": "m", "messages": [{"role": "user", "content": "y" * 500_000}]})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    assert relay.transcript("limits") == before
    say(relay.client(), "limits", "still fine")                         # the session goes on
    assert len(relay.transcript("limits")) == len(before) + 2


def test_re_deriving_a_session_with_another_embedder_never_blocks_its_relay_turns(echoed):
    client = echoed.client()
    say(client, "emb", "our etcd quota is 8 GiB")
    echoed.relay.call_sync(lambda rt: rt.derive("emb", embedder="hashing", recompute=True))
    for text in ("what was the quota?", "and the defrag plan?"):
        raw = client.chat.completions.with_raw_response.create(
            model="echo", messages=[{"role": "user", "content": text}],
            extra_headers={"CRP-Session-Id": "emb"})
        assert raw.http_response.status_code == 200
    assert len(echoed.transcript("emb")) == 6


def _strict_template_accepts(messages: list[dict[str, Any]]) -> bool:
    """What strict chat templates (Llama, Mistral) require: at most one system
    message, first; then user and assistant alternating, from user to user."""
    roles = [m["role"] for m in messages]
    if roles and roles[0] == "system":
        roles = roles[1:]
    return (bool(roles) and roles[0] == "user" and roles[-1] == "user"
            and all(r in ("user", "assistant") for r in roles)
            and all(a != b for a, b in zip(roles, roles[1:])))


def test_every_request_the_relay_sends_has_the_strict_template_shape(relayed, upstream):
    client = relayed.client()
    session = {"CRP-Session-Id": "strict"}
    call = {"id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "quota"}'}}
    shapes = [
        [{"role": "user", "content": "our etcd quota is 8 GiB"}],
        [{"role": "assistant", "content": "a note"}, {"role": "assistant", "content": "another"},
         {"role": "user", "content": "and the defrag plan?"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one"},
         {"role": "user", "content": "two"}],
        [{"role": "assistant", "content": None, "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "call_1", "content": "8 GiB"},
         {"role": "user", "content": "so what is it?"}],
    ]
    for messages in shapes:
        client.chat.completions.create(model="m", messages=messages, extra_headers=session)
        sent = upstream.requests[-1]["body"]["messages"]
        assert _strict_template_accepts(sent), [m["role"] for m in sent]
    # Recalled turns keep their pairing: the whole history is offered back.
    for i in range(12):
        say(client, "strict", f"question {i} about etcd member{i}")
    say(client, "strict", "what did we say about etcd member3?")
    sent = upstream.requests[-1]["body"]["messages"]
    assert _strict_template_accepts(sent)


def test_the_relay_runs_the_cold_history_tools_itself(run_relay, upstream):
    relay = run_relay(upstream=upstream.base_url, model="fake-model", warmup=False,
                      policy={"max_context_tokens": 1200, "output_reserve": 200,
                              "safety_margin": 20, "min_recent_turns": 2})
    client = relay.client()
    say(client, "cold", "remember: the zebra code is 7741-ALPHA")
    for i in range(40):                                   # push it out of the window
        say(client, "cold", f"filler {i}: " + "lorem ipsum dolor sit amet " * 8)
    calls = len(upstream.requests)
    raw = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "[history] what was the code?"}],
        extra_headers={"CRP-Session-Id": "cold"})
    answer = raw.parse().choices[0].message.content
    first, second = upstream.requests[calls]["body"], upstream.requests[calls + 1]["body"]
    assert {"context_search", "context_slice", "context_peek"} <= \
        {t["function"]["name"] for t in first["tools"]}
    boundary = [m["content"] for m in first["messages"] if "cold_history_boundary" in m["content"]]
    assert boundary and "context_search" in boundary[0] and "context(" not in boundary[0]
    assert second["messages"][-1]["role"] == "tool" and "7741-ALPHA" in answer
    assert raw.headers["CRP-Context-History-Tool-Rounds"] == "1"
    # every round within the cap, and only the reply is stored
    from ctxrelay.text.tokens import count_messages
    budget = int(raw.headers["CRP-Context-Tokens-Used"].split("/")[1])
    assert count_messages(second["messages"], "fake-model").n <= budget
    assert relay.transcript("cold")[-2:] == [("user", "[history] what was the code?"),
                                             ("assistant", answer)]


def test_a_closed_store_is_503_not_a_client_error_nor_a_missing_session(run_relay):
    """A Runtime closed under the relay (in-process use, a tool that closed it) is the
    server's state: 503 store_closed with Retry-After, never 400 (the request was fine)
    nor 404 session_not_found for a session that is stored."""
    relay = run_relay(upstream="echo", policy=POLICY, warmup=False)
    say(relay.client(), "kept", "hello")
    relay.relay.call_sync(lambda rt: rt.close())
    r = httpx.post(f"{relay.url}/v1/chat/completions", headers={"CRP-Session-Id": "kept"},
                   json={"model": "m", "messages": [{"role": "user", "content": "again"}]})
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "store_closed" and "Retry-After" in r.headers
    r = httpx.get(f"{relay.url}/v1/sessions/kept/turns")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "store_closed"


def test_tool_calls_are_stored_in_openai_form(relayed):
    """An assistant message's tool calls are kept as OpenAI sends them back: ``id`` and
    ``arguments`` strings (a missing or null id is "", an arguments object its JSON),
    so a pack that renders them again is a valid request; other types are a 400."""
    url = f"{relayed.url}/v1/chat/completions"
    calls = [{"id": None, "type": "function", "function": {"name": "f", "arguments": {"a": 1}}},
             {"type": "function", "function": {"name": "g"}}]
    r = httpx.post(url, headers={"CRP-Session-Id": "tool-form"}, json={"model": "m", "messages": [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "user", "content": "and?"}]})
    assert r.status_code == 200, r.text
    stored = relayed.relay.call_sync(lambda rt: rt.turn("tool-form", 1).metadata["tool_calls"])
    assert stored == [{"id": "", "name": "f", "arguments": '{"a": 1}'},
                      {"id": "", "name": "g", "arguments": "{}"}]
    for bad, param in (({"id": 7, "function": {"name": "f"}}, "messages[0].tool_calls[0].id"),
                       ({"id": "c", "function": {"name": "f", "arguments": 3}},
                        "messages[0].tool_calls[0].function.arguments")):
        r = httpx.post(url, headers={"CRP-Session-Id": "tool-form-bad"}, json={
            "model": "m", "messages": [{"role": "assistant", "content": None, "tool_calls": [bad]},
                                       {"role": "user", "content": "and?"}]})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_history_search_takes_any_text_the_model_asks_for(tmp_path):
    """context_search's query reaches context/3 as written: an emoji or another character
    outside the BMP (which json.dumps escaped as a surrogate pair Prolog cannot read),
    quotes, backslashes and control characters are searched, not an error."""
    from ctxrelay.apps.server import history_tools
    from ctxrelay.runtime import Runtime
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("h")
        rt.append("h", "user", 'the deploy 🚀 of 𝔘 went fine: a\\b "quoted"')
        for query in ("deploy 🚀", "𝔘", "a\\b", '"quoted"', "deploy\tfine\n"):
            calls = [{"id": "c", "function": {"name": "context_search",
                                              "arguments": json.dumps({"query": query})}}]
            result = json.loads(history_tools.run_calls(rt, "h", calls, 2000)[0]["content"])
            assert "error" not in result, (query, result)
            assert [t["turn"] for t in result["turns"]] == [1], (query, result)


def test_reading_turns_strips_the_session_id_as_a_chat_request_does(echoed):
    """A chat request's session id is stripped, so " spaced " is stored as "spaced":
    GET .../turns with the same spelling reads that session, not a 404."""
    r = httpx.post(f"{echoed.url}/v1/chat/completions",
                   json={"model": "m", "session_id": " spaced ",
                         "messages": [{"role": "user", "content": "hello there"}]})
    assert r.status_code == 200, r.text
    for spelled in ("spaced", "%20spaced%20"):
        r = httpx.get(f"{echoed.url}/v1/sessions/{spelled}/turns")
        assert r.status_code == 200, (spelled, r.text)
        assert r.json()["session_id"] == "spaced"
        assert r.json()["data"][0]["content"] == "hello there"
    blank = httpx.get(f"{echoed.url}/v1/sessions/%20/turns")
    assert blank.status_code == 404 and blank.json()["error"]["code"] == "session_not_found"


def test_a_history_call_with_a_null_id_is_answered_with_an_empty_id(tmp_path):
    """The tool message answers the call's id as stored tool calls keep it: a null id is
    "" (not the text "None", which no upstream call has)."""
    from ctxrelay.apps.server import history_tools
    from ctxrelay.runtime import Runtime
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("h")
        rt.append("h", "user", "the deploy went fine")
        calls = [{"id": None, "function": {"name": "context_search",
                                           "arguments": json.dumps({"query": "deploy"})}},
                 {"id": "c2", "function": {"name": "context_search",
                                           "arguments": json.dumps({"query": "fine"})}}]
        answers = history_tools.run_calls(rt, "h", calls, 2000)
        assert [a["tool_call_id"] for a in answers] == ["", "c2"]


def test_an_archived_session_is_refused_before_the_upstream_is_called(relayed, upstream):
    """turn_prepare/4 refuses an archived session, so the relay answers 400
    session_archived without a (billed) upstream call; streamed or not."""
    say(relayed.client(), "archived", "hello")
    relayed.relay.call_sync(lambda rt: rt.archive_session("archived"))
    calls = len(upstream.requests)
    for stream in (False, True):
        r = httpx.post(f"{relayed.url}/v1/chat/completions",
                       headers={"CRP-Session-Id": "archived"},
                       json={"model": "m", "stream": stream,
                             "messages": [{"role": "user", "content": "still there?"}]})
        assert r.status_code == 400 and r.json()["error"]["code"] == "session_archived", r.text
    assert len(upstream.requests) == calls
    assert len(relayed.transcript("archived")) == 2


def test_a_replayed_tool_call_reply_carries_its_tool_calls(run_relay):
    """The answer to a retried Idempotency-Key is the stored reply as it was answered:
    a reply that called tools comes back with its tool calls (and finish_reason
    tool_calls), streamed or not; without them an agent's retry would lose the calls."""
    from relay_support import RecordingUpstream
    fake = RecordingUpstream()
    call = {"id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "quota"}'}}
    fake.reply = lambda body: {"role": "assistant", "content": None, "tool_calls": [call]}
    try:
        relay = run_relay(upstream=fake.base_url, model="m", warmup=False, policy=POLICY)
        url = f"{relay.url}/v1/chat/completions"
        headers = {"CRP-Session-Id": "tool-replay", "Idempotency-Key": "tk-1"}
        body = {"model": "m", "messages": [{"role": "user", "content": "look it up"}],
                "tools": [{"type": "function", "function": {"name": "lookup",
                                                            "parameters": {"type": "object"}}}]}
        first = httpx.post(url, headers=headers, json=body)
        again = httpx.post(url, headers=headers, json=body)
        assert first.status_code == again.status_code == 200, again.text
        assert again.headers["CRP-Idempotent-Replay"] == "true" and len(fake.requests) == 1
        message = again.json()["choices"][0]["message"]
        assert message["tool_calls"] == [call] and not message["content"]
        assert again.json()["choices"][0]["finish_reason"] == "tool_calls"
        streamed = httpx.post(url, headers=headers, json={**body, "stream": True}).text
        deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in streamed.splitlines()
                  if line.startswith("data: {")]
        assert [c for d in deltas for c in d.get("tool_calls", [])] == [{**call, "index": 0}]
    finally:
        fake.close()


def _relay_past_its_window(run_relay: Any, fake: Any, session: str) -> tuple[Any, str, dict]:
    """A relay on ``fake`` with a session of 30 turns, more than its pack holds (so it
    offers the history tools); the relay, its chat URL and the session's headers."""
    relay = run_relay(upstream=fake.base_url, model="m", warmup=False,
                      policy={"max_context_tokens": 1200, "output_reserve": 200,
                              "safety_margin": 20, "min_recent_turns": 2})
    url = f"{relay.url}/v1/chat/completions"
    headers = {"CRP-Session-Id": session}
    for i in range(30):
        httpx.post(url, headers=headers, json={"model": "m", "messages": [
            {"role": "user", "content": f"filler {i}: " + "lorem ipsum dolor sit " * 8}]})
    return relay, url, headers


def test_a_streamed_answer_after_offered_history_tools_carries_the_clients_tool_calls(run_relay):
    """When the pack hides turns the relay offers its history tools and, with stream: true,
    sends the final answer as events it writes itself: a call of one of the client's own
    tools in that answer must reach the client (it was stored, but not streamed)."""
    from relay_support import RecordingUpstream
    fake = RecordingUpstream()
    call = {"id": "call_9", "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    fake.reply = lambda body: ({"role": "assistant", "content": None, "tool_calls": [call]}
                               if "[client-tool]" in json.dumps(body["messages"][-1]) else None)
    try:
        _, url, headers = _relay_past_its_window(run_relay, fake, "hidden")
        calls = len(fake.requests)
        text = httpx.post(url, headers=headers, json={
            "model": "m", "stream": True,
            "messages": [{"role": "user", "content": "[client-tool] look it up"}],
            "tools": [{"type": "function", "function": {"name": "lookup",
                                                        "parameters": {"type": "object"}}}]}).text
        offered = {t["function"]["name"] for t in fake.requests[calls].get("tools") or []}
        assert "context_search" in offered                 # the history tools were offered
        deltas = [json.loads(line[6:])["choices"][0] for line in text.splitlines()
                  if line.startswith("data: {") and json.loads(line[6:])["choices"]]
        assert [c for d in deltas for c in d["delta"].get("tool_calls", [])] == \
            [{**call, "index": 0}]
        assert deltas[-1]["finish_reason"] == "tool_calls"
    finally:
        fake.close()


def test_a_stream_whose_commit_fails_ends_with_an_error_event(run_relay, upstream):
    """The turn is stored just before [DONE]; when that fails (here: the store lost while
    committing) the stream ends with the error as an event, as upstream failures do, and
    no [DONE]: not with a connection cut mid-body that says nothing of the outcome."""
    from ctxrelay.storage.postgres.connection import CommitOutcomeUnknownError
    for config in (dict(upstream="echo"), dict(upstream=upstream.base_url, model="fake-model")):
        relay = run_relay(warmup=False, policy=POLICY, **config)

        async def lost(*_args: Any) -> Any:
            raise CommitOutcomeUnknownError("lost at 127.0.0.1 (test)")

        relay.relay.commit = lost
        with httpx.stream("POST", f"{relay.url}/v1/chat/completions",
                          headers={"CRP-Session-Id": "lost-commit"},
                          json={"model": "m", "stream": True,
                                "messages": [{"role": "user", "content": "hello"}]}) as r:
            assert r.status_code == 200
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert lines[-1] != "data: [DONE]", lines[-3:]
        error = json.loads(lines[-1][6:])["error"]
        assert error["code"] == "store_outcome_unknown" and "127.0.0.1" not in error["message"]
        assert relay.transcript("lost-commit") == []


def test_the_client_sees_only_its_own_tool_calls_when_history_tools_are_offered(run_relay):
    """The relay runs the calls of the history tools it offered and the client runs its own.
    A reply that calls both goes to the client without the relay's calls (the client has
    no such tool), and a tool of the client's that has a history tool's name is the
    client's: the relay neither offers its own nor runs the model's call of it."""
    from relay_support import RecordingUpstream
    fake = RecordingUpstream()
    search = {"id": "call_s", "type": "function",
              "function": {"name": "context_search", "arguments": '{"query": "filler"}'}}
    lookup = {"id": "call_l", "type": "function", "function": {"name": "lookup",
                                                               "arguments": "{}"}}

    def reply(body: dict[str, Any]) -> dict[str, Any] | None:
        last = json.dumps(body["messages"][-1])
        if "[mixed]" in last:
            return {"role": "assistant", "content": None, "tool_calls": [search, lookup]}
        if "[own-search]" in last:
            return {"role": "assistant", "content": None, "tool_calls": [search]}
        return None
    fake.reply = reply
    try:
        relay, url, headers = _relay_past_its_window(run_relay, fake, "mixed")

        def ask(text: str, tools: list[str]) -> tuple[dict[str, Any], list[str]]:
            calls = len(fake.requests)
            r = httpx.post(url, headers=headers, json={
                "model": "m", "messages": [{"role": "user", "content": text}],
                "tools": [{"type": "function", "function": {"name": n, "parameters": {}}}
                          for n in tools]})
            assert r.status_code == 200, r.text
            offered = [t["function"]["name"] for t in fake.requests[calls].get("tools") or []]
            return r.json()["choices"][0]["message"], offered

        message, offered = ask("[mixed] look it up", ["lookup"])
        assert "context_search" in offered
        assert message["tool_calls"] == [lookup]
        stored = relay.relay.call_sync(
            lambda rt: rt.history("mixed")[-1].metadata["tool_calls"])
        assert [c["name"] for c in stored] == ["lookup"]
        calls = len(fake.requests)
        message, offered = ask("[own-search] look it up", ["context_search"])
        assert offered.count("context_search") == 1          # the client's, not ours too
        assert len(fake.requests) == calls + 1                # the relay ran nothing
        assert message["tool_calls"] == [search]
    finally:
        fake.close()


def test_a_policy_that_leaves_no_input_budget_stops_the_relay_at_start(tmp_path):
    """--max-context-tokens 100 --output-reserve 200 can serve no turn: the relay refuses
    to start with policy/2's own error, instead of serving and answering every request
    400 invalid_request_error (as if the client had erred)."""
    import asyncio
    from ctxrelay.errors import InvalidArgumentError
    relay = Relay(ServerConfig(store=tmp_path / "store", upstream="echo", warmup=False,
                               policy={"max_context_tokens": 100, "output_reserve": 200}))
    with pytest.raises(InvalidArgumentError, match="no room for the input"):
        asyncio.run(relay.start())
    assert relay._runtime is None and relay._executor is None       # nothing left open
    ok = Relay(ServerConfig(store=tmp_path / "store", upstream="echo", warmup=False,
                            policy={"max_context_tokens": 1000, "output_reserve": 200}))

    async def start_stop() -> None:
        await ok.start()
        await ok.stop()
    asyncio.run(start_stop())


def test_max_turn_bytes_must_be_positive(tmp_path):
    """0 meant two limits at once: the store's default turn size (1 MiB, its 0) and a
    64 KiB body cap (8 x 0 + 64 KiB), so a 100 KB message was 413 request_too_large
    under a turn limit it did not pass.  It is refused, in the config and on the CLI."""
    from ctxrelay.errors import InvalidArgumentError
    with pytest.raises(InvalidArgumentError, match="max_turn_bytes"):
        ServerConfig(store=tmp_path / "s", upstream="echo", max_turn_bytes=0)
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["--store", str(tmp_path / "s"), "--upstream", "echo",
                              "--max-turn-bytes", "0"])
    assert exc.value.code == 2
