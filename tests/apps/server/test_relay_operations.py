"""Operating the relay: /metrics, /healthz, /readyz, JSON logs with a request id, and a
SIGTERM mid-turn that loses no acknowledged write."""
from __future__ import annotations

import io
import json
import logging
import signal
import threading
import time

import httpx

from ctxrelay.apps.server.observe import JsonFormatter, request_id

from relay_support import CLEAN_EXIT, POLICY, RecordingUpstream, Subprocess, start_in_thread


def test_metrics_health_readiness_and_request_ids(tmp_path):
    upstream = RecordingUpstream()
    relay = start_in_thread(tmp_path / "store", upstream=upstream.base_url, model="m",
                            policy=POLICY)
    try:
        assert relay.get("/healthz").json() == {"status": "ok"}
        assert relay.get("/readyz").json() == {"status": "ready", "embedder": "ready"}
        r = relay.post("obs", "hello", headers={"X-Request-Id": "req-42"})
        assert r.status_code == 200 and r.headers["X-Request-Id"] == "req-42"
        fresh = relay.post("obs", "again", headers={"X-Request-Id": "bad id\twith tab"})
        assert len(fresh.headers["X-Request-Id"]) == 32         # replaced by a new one
        over = relay.post("obs", "word " * 5000)                  # does not fit the window
        assert over.status_code == 400
        text = relay.get("/metrics").text
        values = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
                  if ln and not ln.startswith("#")}
        assert values['ctxrelay_turns_total{outcome="ok"}'] >= 2
        assert values['ctxrelay_turns_total{outcome="400"}'] >= 1
        assert values["ctxrelay_overflow_refusals_total"] >= 1
        for stage in ("wait", "prepare", "upstream", "commit", "total"):
            assert values[f'ctxrelay_turn_stage_seconds_count{{stage="{stage}"}}'] >= 2
        assert 0 < values["ctxrelay_tokens_used_total"] <= values["ctxrelay_tokens_budget_total"]
        assert values["ctxrelay_session_queue_depth"] == 0
        upstream.close()                                          # the upstream goes away
        assert relay.post("obs", "anyone there?").status_code == 502
        text = relay.get("/metrics").text
        assert 'ctxrelay_upstream_errors_total{code="upstream_unreachable"} 1.0' in text
    finally:
        relay.stop()


def test_log_lines_are_json_with_the_request_id():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("ctxrelay.test.json")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    token = request_id.set("abc123")
    try:
        log.info("turn %s", "done", extra={"fields": {"status": 200}})
    finally:
        request_id.reset(token)
        log.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert line["msg"] == "turn done" and line["request_id"] == "abc123"
    assert line["status"] == 200 and line["level"] == "info"


def test_the_relay_logs_json_lines_carrying_the_request_id(tmp_path):
    relay = Subprocess.relay(tmp_path / "store", tmp_path, "--upstream", "echo",
                             "--no-warmup")
    try:
        relay.wait_ready()
        r = httpx.post(f"{relay.url}/v1/chat/completions", headers={
            "CRP-Session-Id": "logs", "X-Request-Id": "trace-7"},
            json={"messages": [{"role": "user", "content": "hi"}]}, timeout=120)
        assert r.status_code == 200
    finally:
        assert relay.stop() in CLEAN_EXIT
    lines = [json.loads(ln) for ln in relay.log.read_text().splitlines() if ln.startswith("{")]
    access = [ln for ln in lines if ln.get("request_id") == "trace-7"]
    assert access and access[-1]["path"] == "/v1/chat/completions" and access[-1]["status"] == 200
    assert any("no API keys configured" in ln["msg"] for ln in lines)


def test_sigterm_mid_turn_finishes_the_turn_and_loses_no_acknowledged_write(tmp_path):
    """SIGTERM while a turn waits for its upstream: the relay stops accepting, lets the
    turn finish (the client gets its 200), stores it, then exits 0.  A restarted relay
    finds every acknowledged turn."""
    upstream = RecordingUpstream()
    upstream.delay = 2.0
    store = tmp_path / "store"
    relay = Subprocess.relay(store, tmp_path, "--upstream", upstream.base_url, "--model", "m",
                             "--no-warmup", "--graceful-timeout", "30")
    try:
        relay.wait_ready()
        acknowledged: list[str] = []
        answers: list[int] = []

        def turn(text: str) -> None:
            try:
                r = httpx.post(f"{relay.url}/v1/chat/completions",
                               headers={"CRP-Session-Id": "drain"},
                               json={"messages": [{"role": "user", "content": text}]},
                               timeout=60)
                answers.append(r.status_code)
                if r.status_code == 200:
                    acknowledged.append(text)
            except httpx.HTTPError:
                answers.append(0)

        turn("first, before the signal")
        t = threading.Thread(target=turn, args=("in flight at SIGTERM",))
        t.start()
        deadline = time.monotonic() + 30
        while len(upstream.requests) < 2:          # the turn is at its upstream call
            assert time.monotonic() < deadline
            time.sleep(0.02)
        relay.proc.send_signal(signal.SIGTERM)
        t.join(timeout=60)
        assert relay.proc.wait(timeout=60) in CLEAN_EXIT
        assert answers == [200, 200], answers
        log = relay.log.read_text()
        # The in-flight turn was answered (its access line) before the store closed.
        assert log.rindex('"path": "/v1/chat/completions", "status": 200') < \
            log.index("stopped, store closed")
    finally:
        relay.stop()
        upstream.close()
    from ctxrelay import Runtime
    with Runtime(store) as rt:
        users = [t.content for t in rt.history("drain") if t.role == "user"]
        assert users == acknowledged == ["first, before the signal", "in flight at SIGTERM"]
        assert [t.role for t in rt.history("drain")] == ["user", "assistant"] * 2
