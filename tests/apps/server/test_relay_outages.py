"""Outages of the servers under two relays (issue 17, point 3): restarting PostgreSQL
under load gives clear 503s with ``Retry-After``, nothing half-written, and the
relays recover by themselves; flushing, restarting or stopping Redis changes
latency only.

Unlike test_relay_postgres.py (a TCP proxy that cuts the shared server off), these
restart real servers: a PostgreSQL and a Redis of the test's own
(tests/private_services.py), so no other test sees the outage.
"""
from __future__ import annotations

import signal
import sys
import time

import pytest

from ctxrelay.storage import close_all, open_stores

from outage_load import UNAVAILABLE_CODES, Load, check_store, recovery
from relay_support import Subprocess, free_port

SCHEMA = "outage"
#: Each relay serves again by itself within this many seconds of PostgreSQL
#: accepting connections (measured: docs/deploy.md, "Outages").
RECOVERY_BOUND_S = 15.0


def _relays(spec: str, cache: str, tmp_path, n: int = 2) -> list[Subprocess]:
    """``ctxrelay serve --store postgresql://... --cache redis://...`` (the first, as an
    operator starts it) and ``python -m ctxrelay.apps.server`` (the others)."""
    options = ["--upstream", "echo", "--cache", cache, "--no-warmup", "--log-level", "warning"]
    port = free_port()
    relays = [Subprocess([sys.executable, "-m", "ctxrelay.apps.cli", "serve", "--store", spec,
                          "--port", str(port), *options], port, tmp_path / "serve.log")]
    relays += [Subprocess.relay(spec, tmp_path, *options) for _ in range(n - 1)]  # type: ignore[arg-type]
    for r in relays:
        r.wait_ready()
    return relays


def _stop(relays: list[Subprocess]) -> None:
    for r in relays:
        r.stop(signal.SIGTERM)


@pytest.mark.slow
def test_restarting_postgres_under_load_is_503_then_recovery_and_nothing_half_written(
        private_postgres, private_redis, tmp_path):
    """Two relays, six clients (a session each, every session served through both
    relays); PostgreSQL restarted mid-load with ``pg_ctl restart -m fast``, then with
    ``-m immediate`` (a crash: no shutdown checkpoint, the server recovers from its
    WAL).  Every answer is 200 or 503 ``store_unavailable`` with ``Retry-After``; every
    acknowledged turn is stored exactly once under the id it was announced with; no
    half-written record (direct SQL and ``ctxrelay check``); each relay answers 200
    again within RECOVERY_BOUND_S of the server's return, without being restarted."""
    pg, spec = private_postgres, f"{private_postgres.url}?schema={SCHEMA}"
    with open_stores(spec):                 # the schema and its tables (migrations)
        pass
    close_all()
    relays = _relays(spec, private_redis.url, tmp_path)
    load = Load([r.url for r in relays], clients=6)
    outcomes = {}
    try:
        load.start()
        load.wait_for(12)
        for mode in ("fast", "immediate"):
            down_at = time.monotonic()
            pg.restart(mode)                # returns once the server accepts connections
            ready_at = time.monotonic()
            outcomes[mode] = recovery(load, down_at, ready_at, len(relays))
            outcomes[mode]["restart_s"] = ready_at - down_at
            load.wait_for(load.acknowledged() + 12)      # the load goes on after it
        load.finish()
        assert not load.failures, load.failures[:5]
    finally:
        load.stop.set()
        _stop(relays)
    for mode, seen in outcomes.items():
        assert not seen["not_recovered"], (mode, seen)
        assert all(s <= RECOVERY_BOUND_S for s in seen["recovered_s"].values()), (mode, seen)
    # The outage was seen, and only as 503 store_unavailable with Retry-After.
    bad = [a for a in load.answers if a.status != 200 and
           not (a.status == 503 and a.code in UNAVAILABLE_CODES)]
    assert not bad, bad[:5]
    unavailable = [a for a in load.answers if a.status == 503]
    assert unavailable, outcomes
    # A 503 store_unavailable means nothing was stored: the retry with the same key
    # stores the turn, it does not find it stored already (a failure just after the
    # commit, while the turn's references and promotions were written, used to answer
    # 503 for a stored turn: a client without a key would then have stored it twice).
    # Only a server lost while the turn committed may have stored it, and says so.
    in_doubt = {a.key for a in unavailable if a.code == "store_outcome_unknown"}
    assert not [a for a in load.answers if a.replay and a.key not in in_doubt], outcomes
    assert all(a.retry_after is not None and int(a.retry_after) >= 1 for a in unavailable)
    figures = check_store(spec, pg.url, SCHEMA, load)
    assert figures["acknowledged"] >= 36
    print("\npostgres restarts:", outcomes, figures)


def _scripted_run(spec: str, cache: str, tmp_path, faults=None):
    from relay_support import RecordingUpstream

    from outage_load import Scripted
    with open_stores(spec):
        pass
    close_all()
    from outage_load import reply_to
    upstream = RecordingUpstream()
    upstream.reply = reply_to
    relays = [Subprocess.relay(spec, tmp_path, "--upstream", upstream.base_url, "--model", "m",  # type: ignore[arg-type]
                               "--cache", cache, "--no-warmup", "--log-level", "warning")
              for _ in range(2)]
    try:
        for r in relays:
            r.wait_ready()
        run = Scripted([r.url for r in relays])
        run.run(faults)
    finally:
        _stop(relays)
        upstream.close()
    return run, upstream.requests


@pytest.mark.slow
def test_flushing_restarting_or_stopping_redis_under_load_changes_latency_only(
        private_postgres, private_redis, tmp_path):
    """The same scripted conversations (4 sessions, each through both relays) twice on
    fresh stores: once with Redis up throughout, once with Redis flushed (FLUSHALL),
    restarted (empty) and stopped mid-load (for at least 3 s and 4 turns).  Both runs: every answer 200, the
    same turns stored, and every pack the upstream got is identical between them."""
    from outage_load import packs, script
    redis_server = private_redis
    base = private_postgres.url

    up, up_requests = _scripted_run(f"{base}?schema=redis_up", redis_server.url, tmp_path)
    assert not up.failures, up.failures[:3]
    assert up.hits >= 1          # the hot tier is read by assembly (Tier P lookups)
    redis_server.flushall()
    seen: dict[str, int] = {}

    def faults(run) -> None:
        total = run.sessions * len(script(0))
        run.wait_for(total // 5)
        redis_server.flushall()
        seen["flushed_at"] = run.acked
        run.wait_for(total * 2 // 5)
        redis_server.restart()
        seen["restarted_at"] = run.acked
        run.wait_for(total * 3 // 5)
        redis_server.stop()
        seen["stopped_at"] = run.acked
        # Stopped for a while: at least 3 s and 4 turns answered (a busy machine may
        # take longer than 3 s per turn), or until the load ends.
        t0 = time.monotonic()
        run.wait_for(min(total, seen["stopped_at"] + 4))
        time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
        seen["answered_while_stopped"] = run.acked - seen["stopped_at"]
        redis_server.start()

    down, down_requests = _scripted_run(f"{base}?schema=redis_faults", redis_server.url,
                                        tmp_path, faults)
    assert not down.failures, down.failures[:3]
    assert down.acked == up.acked == 4 * len(script(0))
    assert seen["answered_while_stopped"] >= 4, seen       # turns went on without Redis
    assert packs(down_requests) == packs(up_requests)
    with open_stores(f"{base}?schema=redis_up") as a, \
            open_stores(f"{base}?schema=redis_faults") as b:
        for session in (f"p{c}" for c in range(4)):
            assert [(t.role, t.content) for t in a.transcript.history(session)] == \
                   [(t.role, t.content) for t in b.transcript.history(session)]
    close_all()
    print("\nredis faults:", seen, "hits up/faults:", up.hits, down.hits)


@pytest.mark.parametrize("lost", ["DatabaseUnavailableError", "CommitOutcomeUnknownError"])
def test_a_store_that_fails_just_after_the_commit_leaves_the_turn_answered(
        tmp_path, monkeypatch, lost):
    """The turn is stored (one transaction); its promotions are written after.  A store
    that goes away in between must not turn the stored turn into store_unavailable
    (the relay's 503 says nothing was stored, and a retry without a key would store
    it twice): the turn is answered, its promotions skipped.  Any other error still
    fails the call."""
    import ctxrelay.knowledge.promotion as promotion
    from ctxrelay.runtime import Runtime
    from ctxrelay.storage.postgres import connection
    calls = []

    def gone(*args, **kwargs):
        calls.append(args)
        raise getattr(connection, lost)("PostgreSQL went away (test)")

    rt = Runtime(str(tmp_path / "store"))
    try:
        rt.create_session("s")
        monkeypatch.setattr(promotion, "evidence", gone)
        prepared = rt.prepare_turn("s", "Let's call 8 GiB the etcd quota.")
        result = rt.commit_turn(prepared, "Noted.")
        assert calls, "the promotion step was not reached"
        assert (result.user_turn, result.assistant_turn) == (1, 2)
        assert result.headers["CRP-Context-Promotions"] == 0
        assert [(t.role, t.content) for t in rt.history("s")] == [
            ("user", "Let's call 8 GiB the etcd quota."), ("assistant", "Noted.")]

        def broken(*args, **kwargs):
            raise ValueError("a bug, not an outage")

        monkeypatch.setattr(promotion, "evidence", broken)
        with pytest.raises(Exception, match="a bug, not an outage"):
            rt.commit_turn(rt.prepare_turn("s", "And the disk quota?"), "Noted too.")
    finally:
        rt.close()
