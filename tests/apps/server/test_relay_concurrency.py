"""Per-session ordering: in one worker, across worker processes, and bounded waiting."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import httpx
import pytest

from ctxrelay.apps.server.errors import ApiError
from ctxrelay.apps.server.gate import SessionGate, slot_of

from relay_support import CLEAN_EXIT, POLICY, RecordingUpstream, Subprocess, start_in_thread


def test_concurrent_turns_of_one_session_queue_and_keep_their_order(tmp_path):
    upstream = RecordingUpstream()
    upstream.delay = 4.0             # turn 0 holds the session while 1, 2, 3 line up
    relay = start_in_thread(tmp_path / "store", upstream=upstream.base_url, model="m",
                            policy=POLICY)
    try:
        results: dict[int, httpx.Response] = {}

        def send(i: int) -> None:
            results[i] = relay.post("q", f"message {i}")

        def queued() -> float:
            line = next(ln for ln in relay.get("/metrics").text.splitlines()
                        if ln.startswith("ctxrelay_session_queue_depth"))
            return float(line.split()[-1])

        threads = []
        for i in range(4):
            t = threading.Thread(target=send, args=(i,))
            t.start()
            threads.append(t)
            # Arrival order 0, 1, 2, 3: the next request is sent once this one holds the
            # session (0: at its upstream call) or waits in the session's queue.
            deadline = time.monotonic() + 60
            while not (len(upstream.requests) == 1 if i == 0 else queued() == i):
                assert time.monotonic() < deadline
                time.sleep(0.01)
        upstream.delay = 0.1
        for t in threads:
            t.join()
        assert all(r.status_code == 200 for r in results.values())
        turns = relay.relay.call_sync(lambda rt: [(t.role, t.content) for t in rt.history("q")])
        assert [c for role, c in turns if role == "user"] == [f"message {i}" for i in range(4)]
        assert [role for role, _ in turns] == ["user", "assistant"] * 4
        # Each turn's pack held the previous turns: they ran one after another.
        assert "message 2" in upstream.sent_text(3)
    finally:
        relay.stop()
        upstream.close()


def test_a_full_session_queue_answers_409_with_retry_after(tmp_path):
    upstream = RecordingUpstream()
    upstream.delay = 4.0
    relay = start_in_thread(tmp_path / "store", upstream=upstream.base_url, model="m",
                            policy=POLICY, session_queue=1, session_wait=30)
    try:
        results: list[httpx.Response] = []
        threads = [threading.Thread(target=lambda i=i: results.append(
            relay.post("busy", f"m{i}"))) for i in range(3)]
        threads[0].start()                   # holds the session at its upstream call
        deadline = time.monotonic() + 60
        while not upstream.requests:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        threads[1].start()                   # waits: the queue (1) is full
        while "ctxrelay_session_queue_depth 1.0" not in relay.get("/metrics").text:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        threads[2].start()                   # finds it full: 409
        threads[2].join()
        upstream.delay = 0.1
        for t in threads:
            t.join()
        codes = sorted(r.status_code for r in results)
        assert codes == [200, 200, 409], [r.text for r in results]
        refused = next(r for r in results if r.status_code == 409)
        assert refused.json()["error"]["code"] == "session_busy"
        assert int(refused.headers["Retry-After"]) >= 1
        users = relay.relay.call_sync(
            lambda rt: [t.content for t in rt.history("busy") if t.role == "user"])
        assert len(users) == 2                     # the refused request stored nothing
        # Another session is not held up by the busy one.
        assert relay.post("free", "hello").status_code == 200
    finally:
        relay.stop()
        upstream.close()


HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, int(sys.argv[2]))
print("held", flush=True)
time.sleep(float(sys.argv[3]))
"""


def test_the_gate_waits_for_a_session_held_by_another_process(tmp_path):
    lock_file = tmp_path / "relay.locks"
    slot = slot_of("s1")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_file), str(slot), "1.0"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"

    async def scenario() -> tuple[float, str]:
        gate = SessionGate(lock_file, max_waiting=4, max_wait=0.3)
        try:
            with pytest.raises(ApiError) as busy:       # held elsewhere past max_wait: 409
                await gate.hold("s1", "s1")
            other = await gate.hold("s2", "s2")          # another session is free
            other.release()
            gate.max_wait = 10
            t0 = time.monotonic()
            held = await gate.hold("s1", "s1")           # waits for the other process
            waited = time.monotonic() - t0
            held.release()
            return waited, busy.value.code
        finally:
            gate.close()

    waited, code = asyncio.run(scenario())
    holder.wait(timeout=10)
    assert code == "session_busy"
    assert 0.2 < waited < 5


@pytest.mark.slow
def test_two_worker_processes_keep_every_sessions_turns_in_order(tmp_path):
    """The relay with --workers 2 under concurrent load: each session holds exactly its
    turns, in order, whichever worker served each request, and each pack sent upstream
    holds the session's previous turn even when the other worker stored it (no worker
    packs from a stale view of the store)."""
    upstream = RecordingUpstream()
    relay = Subprocess.relay(tmp_path / "store", tmp_path, "--upstream", upstream.base_url,
                             "--model", "m", "--workers", "2", "--no-warmup",
                             "--log-level", "warning")
    try:
        relay.wait_ready()
        sessions = [f"w{i}" for i in range(4)]
        errors: list[str] = []

        def client(session: str) -> None:
            with httpx.Client(timeout=120) as http:     # a new connection per request:
                for i in range(6):                      # the kernel spreads them over workers
                    r = http.post(f"{relay.url}/v1/chat/completions",
                                  headers={"CRP-Session-Id": session, "Connection": "close"},
                                  json={"messages": [{"role": "user",
                                                      "content": f"{session} turn {i}"}]})
                    if r.status_code != 200:
                        errors.append(r.text)

        def racer(session: str) -> None:                # two requests on one session at once
            with httpx.Client(timeout=120) as http:
                for i in range(3):
                    r = http.post(f"{relay.url}/v1/chat/completions",
                                  headers={"CRP-Session-Id": session, "Connection": "close"},
                                  json={"messages": [{"role": "user",
                                                      "content": f"race {i}"}]})
                    if r.status_code != 200:
                        errors.append(r.text)

        threads = [threading.Thread(target=client, args=(s,)) for s in sessions]
        threads += [threading.Thread(target=racer, args=("raced",)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[:3]
        metrics = httpx.get(f"{relay.url}/metrics").text
    finally:
        assert relay.stop() in CLEAN_EXIT
        upstream.close()
    for body in upstream.requests:
        last = body["messages"][-1]["content"]
        for s in sessions:
            for i in range(1, 6):
                if f"{s} turn {i}" in last:
                    assert f"{s} turn {i - 1}" in json.dumps(body), (s, i)
    from ctxrelay import Runtime
    with Runtime(tmp_path / "store") as rt:
        for s in sessions:
            turns = rt.history(s)
            assert [t.content for t in turns if t.role == "user"] == \
                [f"{s} turn {i}" for i in range(6)]
            assert [t.role for t in turns] == ["user", "assistant"] * 6
        raced = rt.history("raced")
        assert [t.role for t in raced] == ["user", "assistant"] * 6
        assert sorted(t.content for t in raced if t.role == "user") == \
            sorted([f"race {i}" for i in range(3)] * 2)
    # The metrics of both workers are summed: 30 turns answered in all.
    line = next(ln for ln in metrics.splitlines()
                if ln.startswith('ctxrelay_turns_total{outcome="ok"}'))
    assert float(line.split()[-1]) == 30.0
