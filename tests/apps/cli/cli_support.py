"""Helpers and fixtures shared by the CLI tests (imported by each test module)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from ctxrelay.apps import cli

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / ".venv" / "bin" / "ctxrelay"


def script_env(**extra: str) -> dict[str, str]:
    """The environment for a console-script subprocess: this checkout's code, no store set."""
    env = {k: v for k, v in os.environ.items() if k != cli.STORE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python"), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.update(extra)
    return env


def run_script(store: Path | None, *args: str, input: str | None = None,
               cwd: Path | None = None, timeout: float = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed console script, in a subprocess, with --store (unless None)."""
    argv = [str(SCRIPT), *(["--store", str(store)] if store is not None else []), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=env or script_env(), input=input if input is not None else "",
                          cwd=cwd or (store.parent if store is not None else ROOT))


def as_json(out: str) -> dict:
    return json.loads(out)


@pytest.fixture
def run(store_dir, capsys, monkeypatch):
    """main(["--store", store, *argv]) in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.delenv(cli.STORE_ENV, raising=False)

    def call(*argv: str, store: Path | None = store_dir) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = cli.main([*(["--store", str(store)] if store is not None else []), *argv])
        out, err = capsys.readouterr()
        return rc, out, err
    return call


@pytest.fixture
def ops(run):
    """A store with session 'ops' and three turns."""
    assert run("init")[0] == 0
    assert run("sessions", "create", "ops")[0] == 0
    for role, text in (("user", "our etcd quota is 8 GiB"),
                       ("assistant", "Noted: --quota-backend-bytes=8589934592."),
                       ("user", "the defrag window is Sunday 02:00 UTC")):
        assert run("append", "ops", role, text)[0] == 0
    return run


# -- a relay started by `ctxrelay serve` ------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_relay(argv: list[str], cwd, env=None) -> tuple[subprocess.Popen, int]:
    """``argv`` (a serve command with PORT in it) run on a free port; waits for /health."""
    port = _free_port()
    argv = [str(port) if a == "PORT" else a for a in argv]
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(argv, cwd=cwd, env=env or script_env(), stdout=log,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"{argv} exited {proc.returncode}: {log.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.3)
    stop_relay(proc)
    raise AssertionError("the relay did not answer /health within 240 s")


def stop_relay(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)          # our own process group only
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def chat(port: int, session: str, text: str) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", method="POST",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode(),
        headers={"Content-Type": "application/json", "CRP-Session-Id": session})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())
