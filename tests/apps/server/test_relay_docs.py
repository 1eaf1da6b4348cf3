"""Every command of docs/deploy.md runs as written (tests/docs/test_doc_examples.py
runs those of docs/server.md).

The ``sh`` blocks of docs/deploy.md run in order in one bash script, in a fresh
directory, with this checkout's ``ctxrelay`` first on PATH: a ``serve`` line
starts in the background and the script waits for its ``/readyz`` before going
on, and the relay is stopped with SIGTERM at the end.  Port 8000 becomes a free
port.  The systemd unit's ``ExecStart`` runs the same way, with its paths moved
into the test's directory, and must stop cleanly on ``KillSignal`` within
``TimeoutStopSec``.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from relay_support import CLEAN_EXIT, ROOT, free_port
from support import fenced_blocks

SCRIPT = ROOT / ".venv" / "bin" / "ctxrelay"


PG_SECTION = "## On PostgreSQL and Redis"


def blocks(doc: Path, language: str, section: str | None = None) -> list[list[str]]:
    """The ``language`` blocks of ``doc``: all, or (``section``: ``"before"`` or
    ``"after"``) those before or after the PostgreSQL section's heading."""
    text = doc.read_text(encoding="utf-8")
    cut = text.index(PG_SECTION)
    wanted = {"before": text[:cut], "after": text[cut:]}.get(section or "", text)
    out = []
    for lang, lines in fenced_blocks(doc):
        if section is not None and "\n".join(lines) not in wanted:
            continue
        if lang != language:
            continue
        joined: list[str] = []
        for line in lines:                      # continuation lines join their command
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1].rstrip() + " " + line.strip()
            else:
                joined.append(line)
        out.append(joined)
    return out


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items()
         if k not in ("CTXRELAY_STORE", "CTXRELAY_RELAY_KEYS", "CTXRELAY_KEYS_FILE",
                      "PROMETHEUS_MULTIPROC_DIR")}
    e["PYTHONPATH"] = str(ROOT / "python")
    e["PATH"] = f"{SCRIPT.parent}{os.pathsep}{e.get('PATH', '')}"
    return e


def is_serve(line: str) -> bool:
    return " serve " in f" {line} " or "-m ctxrelay.apps.server" in line


def script_of(lines: list[str], port: int, port2: int | None = None) -> str:
    """The lines as one bash script; ports 8000 (and 8001) become ``port`` (``port2``)."""
    body = ["set -euo pipefail", "PIDS=()",
            "cleanup() { for p in \"${PIDS[@]}\"; do kill -TERM \"$p\" 2>/dev/null || true; "
            "done; for p in \"${PIDS[@]}\"; do wait \"$p\" || true; done; }",
            "trap cleanup EXIT"]
    for line in lines:
        serving = port2 if port2 is not None and "8001" in line and is_serve(line) else port
        line = line.replace("8000", str(port))
        if port2 is not None:
            line = line.replace("8001", str(port2))
        if is_serve(line):
            body += [f"{line} > serve-{len(body)}.log 2>&1 &", "PIDS+=($!)",
                     f"for i in $(seq 1 3000); do curl -fsS http://127.0.0.1:{serving}/readyz "
                     ">/dev/null 2>&1 && break; kill -0 ${PIDS[-1]} || { cat serve-*.log; "
                     "exit 1; }; sleep 0.1; done"]
        else:
            body.append(line)
    return "\n".join(body) + "\n"


def run(script: str, cwd: Path, extra_env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["bash", "-c", script], cwd=cwd, env={**env(), **(extra_env or {})},
                       capture_output=True, text=True, timeout=900)
    logs = "".join(p.read_text()[-3000:] for p in cwd.glob("serve-*.log"))
    assert r.returncode == 0, f"{script}\nexit {r.returncode}\n{r.stdout}\n{r.stderr}\n{logs}"
    return r


@pytest.mark.slow
def test_every_command_of_docs_deploy_md_runs(tmp_path):
    lines = [ln for b in blocks(ROOT / "docs" / "deploy.md", "sh", "before") for ln in b]
    assert any(is_serve(ln) for ln in lines) and any("keys create" in ln for ln in lines)
    r = run(script_of(lines, free_port()), tmp_path)
    assert "ctxrelay_turns_total" in r.stdout               # the metrics grep found the turn
    assert '"object":"chat.completion"' in r.stdout.replace(" ", "")
    assert "acme" in r.stdout and "globex" in r.stdout      # keys list


@pytest.mark.slow
def test_the_postgres_commands_of_docs_deploy_md_run(tmp_path, pg_schema):
    """The PostgreSQL section: two relays on one store (a schema of its own on the
    server of `make services`), one session served through both."""
    from services import redis_url
    lines = [ln for b in blocks(ROOT / "docs" / "deploy.md", "sh", "after") for ln in b]
    assert sum(1 for ln in lines if is_serve(ln)) == 2
    spec, schema = pg_schema
    r = run(script_of(lines, free_port(), free_port()), tmp_path,
            {"CTXRELAY_STORE_URL": spec,
             "CTXRELAY_CACHE_URL": f"{redis_url()}?prefix=doc{schema}"})
    listed = json.loads(r.stdout[r.stdout.rindex('{"object":"list"'):])   # the last curl
    assert [t["turn"] for t in listed["data"]] == [1, 2, 3, 4]
    assert listed["data"][0]["content"] == "our etcd quota is 8 GiB"     # via the other relay
    assert listed["data"][2]["content"] == "what is the etcd quota?"


@pytest.mark.slow
def test_the_systemd_unit_of_docs_deploy_md_serves_and_stops_cleanly(tmp_path):
    unit = {}
    for line in blocks(ROOT / "docs" / "deploy.md", "ini")[0]:
        if "=" in line and not line.startswith("["):
            name, _, value = line.partition("=")
            unit.setdefault(name, value)
    assert unit["KillSignal"] == "SIGTERM" and unit["KillMode"] == "mixed"
    stop_within = float(unit["TimeoutStopSec"])
    port = free_port()
    home = tmp_path / "srv"
    home.mkdir()
    argv = shlex.split(unit["ExecStart"].replace("/srv/ctxrelay", str(home))
                       .replace("8000", str(port)))
    assert argv[0] == "/opt/ctxrelay/.venv/bin/ctxrelay"
    argv[0] = str(SCRIPT)
    graceful = float(argv[argv.index("--graceful-timeout") + 1]) \
        if "--graceful-timeout" in argv else 30.0
    assert stop_within > graceful                   # systemd must not kill a drain
    keys = subprocess.run([str(SCRIPT), "keys", "create", "acme", "--keys",
                           str(home / "relay-keys.json")], env=env(), capture_output=True,
                          text=True, timeout=120, check=True).stdout.splitlines()[0]
    log = (tmp_path / "unit.log").open("w")
    proc = subprocess.Popen(argv, cwd=home, env=env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, (tmp_path / "unit.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                       headers={"Authorization": f"Bearer {keys}", "CRP-Session-Id": "unit"},
                       json={"messages": [{"role": "user", "content": "hello"}]}, timeout=300)
        assert r.status_code == 200, r.text
        assert httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                          json={"messages": [{"role": "user", "content": "x"}]},
                          headers={"CRP-Session-Id": "unit"}, timeout=60).status_code == 401
        started = time.monotonic()
        proc.send_signal(getattr(signal, unit["KillSignal"]))
        assert proc.wait(timeout=stop_within) in CLEAN_EXIT
        assert time.monotonic() - started < stop_within
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
