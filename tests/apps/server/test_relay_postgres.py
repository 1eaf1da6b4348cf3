"""The relay on a ``postgresql://`` store (issue 17): the session lock and the per-key
counters live in the database, so relays on several hosts can serve one store; a
database that goes away gives 503 with ``Retry-After``, nothing half-written, and
the relay recovers by itself."""
from __future__ import annotations

import asyncio
import threading
import time

import httpx
import psycopg
import pytest

from ctxrelay.apps.server.errors import ApiError
from ctxrelay.apps.server.gate import SessionGate
from ctxrelay.apps.server.limits import PgLimits
from ctxrelay.apps.server.locks import PgSlots
from ctxrelay.apps.server.tenants import Tenant
from ctxrelay.storage import close_all, open_stores

from pg_proxy import TcpProxy
from relay_support import POLICY, start_in_thread
from services import postgres_url, redis_url


@pytest.fixture
def pg_store(pg_schema):
    spec, _ = pg_schema
    with open_stores(spec):               # the schema and its tables (migrations)
        pass
    close_all()
    return pg_schema


def _terminate(application_name: str) -> int:
    with psycopg.connect(postgres_url(), autocommit=True) as admin:
        return admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s", (application_name,)).fetchone()[0]


# ---------------------------------------------------------------- the session lock


def test_the_session_lock_holds_across_relays_and_goes_with_a_dead_connection(pg_store):
    spec, schema = pg_store

    async def scenario() -> dict:
        a = SessionGate(PgSlots(spec), max_waiting=4, max_wait=0.3)   # two relays: two
        b = SessionGate(PgSlots(spec), max_waiting=4, max_wait=0.3)   # lock connections
        seen: dict = {}
        try:
            held = await a.hold("s1", "s1")
            with pytest.raises(ApiError) as busy:          # held by relay a: b waits, 409
                await b.hold("s1", "s1")
            seen["busy"] = (busy.value.status, busy.value.code)
            other = await b.hold("s2", "s2")               # another session is free
            other.release()
            b.max_wait = 10
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, held.release)
            t0 = time.monotonic()
            held_b = await b.hold("s1", "s1")              # waits for a's release
            seen["waited"] = time.monotonic() - t0
            await b.confirm("s1")                          # still b's: no error
            # PostgreSQL restarts (b's lock connection is cut): b's hold is gone, and
            # b finds out before it would store the turn.
            seen["terminated"] = await loop.run_in_executor(
                None, _terminate, f"ctxrelay-relay-locks:{schema}")
            with pytest.raises(ApiError) as lost:
                await b.confirm("s1")
            seen["lost"] = (lost.value.status, lost.value.headers.get("Retry-After"))
            held_b.release()
            again = await a.hold("s1", "s1")               # the session is free again
            await a.confirm("s1")
            again.release()
        finally:
            a.close()
            b.close()
        return seen

    seen = asyncio.run(scenario())
    assert seen["busy"] == (409, "session_busy")
    assert 0.3 < seen["waited"] < 5
    assert seen["terminated"] >= 1
    assert seen["lost"] == (503, "2")


def test_a_database_that_is_down_is_503_for_the_lock(pg_store):
    spec, _ = pg_store
    proxy, url = TcpProxy.to_url(spec)

    async def scenario() -> ApiError:
        gate = SessionGate(PgSlots(url), max_waiting=4, max_wait=5)
        try:
            (await gate.hold("s", "s")).release()
            await asyncio.sleep(0.1)
            proxy.cut()
            with pytest.raises(ApiError) as down:
                await gate.hold("s", "s")
            proxy.restore()
            (await gate.hold("s", "s")).release()          # back by itself
            return down.value
        finally:
            gate.close()

    try:
        error = asyncio.run(scenario())
    finally:
        proxy.close()
    assert (error.status, error.code) == (503, "store_unavailable")
    assert int(error.headers["Retry-After"]) >= 1
    assert "127.0.0.1" not in error.message           # where the store is: not the client's


# ---------------------------------------------------------------- the per-key limits


def test_per_key_limits_are_one_count_across_relays(pg_store):
    spec, _ = pg_store
    a, b = PgLimits(spec), PgLimits(spec)
    tenant = Tenant(name="acme", key_id="k1",
                    limits={"requests_per_minute": 3, "body_bytes_per_minute": 1000,
                            "stored_bytes": 100})
    now = 1_000_000.0
    try:
        a.admit(tenant, 10, now)
        b.admit(tenant, 10, now)
        a.admit(tenant, 10, now)
        with pytest.raises(ApiError) as rpm:
            b.admit(tenant, 10, now)
        assert rpm.value.code == "requests_per_minute_exceeded"
        assert 1 <= int(rpm.value.headers["Retry-After"]) <= 61
        b.admit(tenant, 10, now + 60)                   # the next window
        with pytest.raises(ApiError) as body:
            a.admit(tenant, 995, now + 60)
        assert body.value.code == "body_bytes_per_minute_exceeded"
        with pytest.raises(ApiError) as alone:           # over the limit by itself
            a.admit(tenant, 5000, now + 120)
        assert alone.value.code == "body_bytes_per_minute_exceeded"
        a.add_stored("acme", 60)
        b.add_stored("acme", 60)
        assert a.stored("acme") == b.stored("acme") == 120
        with pytest.raises(ApiError) as quota:
            b.admit(tenant, 10, now + 180)
        assert quota.value.code == "stored_bytes_exceeded"
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------- the relay itself


def _post(url: str, session: str, text: str, key: str | None = None,
          timeout: float = 120) -> httpx.Response:
    headers = {"CRP-Session-Id": session}
    if key is not None:
        headers["Idempotency-Key"] = key
    return httpx.post(f"{url}/v1/chat/completions", headers=headers, timeout=timeout,
                      json={"model": "m", "messages": [{"role": "user", "content": text}]})


def _check_sessions(spec: str, expected: dict[str, list[str]]) -> None:
    """Each session holds exactly ``expected`` user messages (in any order), each once and
    each followed by its reply; turn ids contiguous; the derived index consistent."""
    with open_stores(spec) as stores:
        t = stores.transcript
        for session, messages in expected.items():
            turns = t.history(session)
            assert [x.turn_id for x in turns] == list(range(1, len(turns) + 1)), session
            assert [x.role for x in turns] == ["user", "assistant"] * (len(turns) // 2), session
            users = [x.content for x in turns if x.role == "user"]
            assert sorted(users) == sorted(messages), (session, users, messages)
            assert t.check_derived(session).ok, session
    close_all()


def test_the_relay_on_postgres_answers_503_while_the_database_is_down_then_recovers(
        pg_store, tmp_path):
    """Clients under load while PostgreSQL goes away for ~2 s: the requests that reach
    the database then get 503 with Retry-After; each client retries the same request
    (the same Idempotency-Key) after Retry-After; afterwards every session holds each
    message exactly once with its reply, whether its first try was cut before, during
    or after its commit."""
    spec, _ = pg_store
    proxy, url = TcpProxy.to_url(spec)
    relay = start_in_thread(url, upstream="echo", policy=POLICY, cache=redis_url()
                            + f"?prefix=t{proxy.port}")
    sessions = [f"out{i}" for i in range(4)]
    sent: dict[str, list[str]] = {s: [] for s in sessions}
    statuses: list[int] = []
    retry_after: list[str | None] = []
    failures: list[str] = []
    lock = threading.Lock()

    def client(session: str) -> None:
        for i in range(8):
            text, key = f"{session} message {i}", f"{session}-k{i}"
            for _ in range(40):
                r = _post(relay.url, session, text, key)
                with lock:
                    statuses.append(r.status_code)
                    if r.status_code == 503:
                        retry_after.append(r.headers.get("Retry-After"))
                if r.status_code == 200:
                    sent[session].append(text)
                    break
                if r.status_code != 503:
                    failures.append(f"{r.status_code} {r.text[:300]}")
                    return
                time.sleep(min(float(r.headers.get("Retry-After", "1")), 0.5))
            else:
                failures.append(f"{session} message {i}: never stored")

    try:
        threads = [threading.Thread(target=client, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while sum(1 for s in statuses if s == 200) < 6:      # the load is under way
            assert time.monotonic() < deadline, failures
            time.sleep(0.02)
        proxy.cut()
        time.sleep(2.0)
        proxy.restore()
        for t in threads:
            t.join(timeout=300)
        assert not failures, failures[:3]
        assert 503 in statuses                                # the outage was seen...
        assert all(v is not None and int(v) >= 1 for v in retry_after)
        assert statuses.count(500) == 0                       # ...as 503, never as 500
        r = relay.get("/readyz")
        assert r.status_code == 200
    finally:
        relay.stop()
        proxy.close()
    _check_sessions(spec, sent)


# ---------------------------------------------------------------- the command line


def test_the_store_may_be_a_url_and_its_password_is_never_shown(tmp_path):
    from pathlib import Path

    from ctxrelay.apps.server.config import ServerConfig
    from ctxrelay.errors import InvalidArgumentError
    url = "postgresql://relay:s3cret@db.internal:5432/ctx?schema=prod"
    config = ServerConfig(store=url, upstream="echo", cache="redis://cache:6379/0?prefix=p")
    assert config.is_shared and config.store == url
    assert "s3cret" not in config.store_label and "db.internal:5432" in config.store_label
    local = ServerConfig(store=f"lmdb://{tmp_path}/s", upstream="echo")
    assert not local.is_shared and local.store == Path(f"{tmp_path}/s")
    assert local.lock_file == tmp_path / ".s.relay.locks"
    with pytest.raises(InvalidArgumentError, match="supported"):
        ServerConfig(store="mysql://x/y", upstream="echo")
    with pytest.raises(InvalidArgumentError):
        ServerConfig(store=tmp_path, upstream="echo", cache="memcached://x")


def test_ctxrelay_serve_passes_a_store_url_unchanged(monkeypatch):
    import argparse

    from ctxrelay.apps.cli.serve import server_argv
    url = "postgresql://ctxrelay@127.0.0.1:55432/ctxrelay?schema=s1"
    args = argparse.Namespace(store=url, server_args=["--cache", "redis://127.0.0.1:6379/0"])
    assert server_argv(args) == ["--store", url, "--cache", "redis://127.0.0.1:6379/0"]
    monkeypatch.setenv("CTXRELAY_STORE", url)
    assert server_argv(argparse.Namespace(store=None, server_args=[]))[:2] == ["--store", url]
    monkeypatch.delenv("CTXRELAY_STORE")
    assert server_argv(argparse.Namespace(store="dir//x", server_args=[]))[1] == "dir/x"
