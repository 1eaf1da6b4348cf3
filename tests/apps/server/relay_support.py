"""Helpers of the relay tests: a relay under uvicorn in a thread, a recording upstream,
a relay as a subprocess (for signals and several workers)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from ctxrelay.apps.server import Relay, ServerConfig, create_app

ROOT = Path(__file__).resolve().parents[3]
#: uvicorn re-raises SIGTERM after its graceful shutdown, so a drained relay ends by it
#: (systemd counts that as a clean stop); 0 when it stops on its own.
CLEAN_EXIT = (0, -15)
POLICY = {"max_context_tokens": 4096, "output_reserve": 256, "safety_margin": 32,
          "min_recent_turns": 4}


class RecordingUpstream:
    """An OpenAI-compatible API on 127.0.0.1 that records every request body.

    ``reply(body) -> dict`` may be set to answer with a chosen message (tool calls);
    by default the reply is ``upstream reply N``.  ``delay`` seconds are waited first.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        self.delay = 0.0
        self._lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._json({"object": "list", "data": [{"id": "m", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with upstream._lock:
                    upstream.requests.append(body)
                    n = len(upstream.requests)
                time.sleep(upstream.delay)
                message = (upstream.reply(body) if upstream.reply else None) or \
                    {"role": "assistant", "content": f"upstream reply {n}"}
                self._json({"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0,
                            "model": body.get("model"), "choices": [
                                {"index": 0, "message": message, "finish_reason": "stop"}]})

            def _json(self, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def sent_text(self, index: int = -1) -> str:
        """Everything one request carried upstream, as one string."""
        return json.dumps(self.requests[index])

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@dataclass
class InThread:
    url: str
    relay: Relay
    server: uvicorn.Server
    thread: threading.Thread

    def post(self, session: str | None, text: str, key: str | None = None,
             headers: dict[str, str] | None = None, **body: Any) -> httpx.Response:
        h = dict(headers or {})
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        if session is not None:
            h["CRP-Session-Id"] = session
        return httpx.post(f"{self.url}/v1/chat/completions", headers=h, timeout=60,
                          json={"model": "m", "messages": [{"role": "user", "content": text}],
                                **body})

    def get(self, path: str, key: str | None = None) -> httpx.Response:
        h = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.get(f"{self.url}{path}", headers=h, timeout=30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def start_in_thread(store: Path, **config: Any) -> InThread:
    app = create_app(ServerConfig(store=store, **config))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 180
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the relay did not start"
        time.sleep(0.05)
    running = InThread(f"http://127.0.0.1:{sock.getsockname()[1]}", app.state.relay, server,
                       thread)
    deadline = time.monotonic() + 180
    while running.get("/readyz").json().get("embedder") != "ready":
        assert time.monotonic() < deadline, "the relay did not become ready"
        time.sleep(0.05)
    return running


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Subprocess:
    """``python -m ctxrelay.apps.server ...`` (or any argv) as a child process."""

    def __init__(self, argv: list[str], port: int, log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self._out = open(log, "w")
        full_env = {**os.environ, "PYTHONPATH": str(ROOT / "python"), **(env or {})}
        full_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.proc = subprocess.Popen(argv, env=full_env, stdout=self._out,
                                     stderr=subprocess.STDOUT)

    @classmethod
    def relay(cls, store: Path, tmp: Path, *args: str, env: dict[str, str] | None = None
              ) -> "Subprocess":
        port = free_port()
        return cls([sys.executable, "-m", "ctxrelay.apps.server", "--store", str(store),
                    "--port", str(port), *args], port, tmp / f"relay-{port}.log", env)

    def wait_ready(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the relay exited:\n{self.log.read_text()}"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"the relay did not become ready:\n{self.log.read_text()}")

    def stop(self, sig: int = 15, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._out.close()
