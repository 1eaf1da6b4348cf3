"""The ctxrelay server used with the official openai client.

    .venv/bin/python examples/relay_client.py

Starts ``python -m ctxrelay.apps.server --upstream echo`` on a free port of 127.0.0.1
with a throw-away store, then talks to it as to any OpenAI endpoint: each
request carries only the new message and the session id (header
``CRP-Session-Id``); the server keeps the conversation, packs the context,
and answers with the ``CRP-*`` headers of the pack.  The echo upstream replies
with a digest of what it was sent, so the second reply shows that the first
exchange went along with it ("3 messages, roles=user,assistant,user").
Needs ``pip install -e '.[server]' openai``.  Exits 0 on success.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from openai import OpenAI

SESSION = "relay-demo"
STARTUP_SECONDS = 120      # the first start loads the embedder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "ctxrelay.apps.server", "--store", str(store),
           "--host", "127.0.0.1", "--port", str(port), "--upstream", "echo",
           "--max-context-tokens", "4096", "--output-reserve", "512",
           "--log-level", "warning"]
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def wait_until_ready(base_url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"the server did not answer /health within {STARTUP_SECONDS} s:\n"
                     f"{log.read_text()}")


def converse(base_url: str) -> None:
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused-by-the-relay")
    session = {"CRP-Session-Id": SESSION}
    for text in ("our etcd quota is 8 GiB", "what was the quota again?"):
        raw = client.chat.completions.with_raw_response.create(
            model="echo", messages=[{"role": "user", "content": text}], extra_headers=session)
        completion = raw.parse()
        print(f"> {text}")
        print(f"< {completion.choices[0].message.content}")
        for name, value in raw.headers.items():
            if name.lower().startswith("crp-"):
                print(f"    {name}: {value}")

    print("> and streamed? (stream=True)")
    stream = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "and streamed?"}],
        extra_headers=session, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    print(f"< {text}")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="ctxrelay-relay-") as tmp:
        port, log = free_port(), Path(tmp) / "server.log"
        base_url = f"http://127.0.0.1:{port}"
        proc = start_server(Path(tmp) / "store", port, log)
        try:
            wait_until_ready(base_url, proc, log)
            converse(base_url)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    sys.exit(main())
