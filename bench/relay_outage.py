"""Two relays on a PostgreSQL + Redis of their own: recovery after a PostgreSQL
restart, and turn latency with Redis up, stopped, or hung (issue 17, point 3).

Servers: a private PostgreSQL cluster and a private redis-server on free
loopback ports (tests/private_services.py; the binaries of ``make services``),
removed at the end, so the shared test servers are never touched.

Arms:

- ``pg_restart``: 2 relays (echo upstream), ``--clients`` clients (a session
  each, alternating relays, retrying a 503 after at most 0.25 s with the same
  idempotency key); ``pg_ctl restart -m fast`` and ``-m immediate``, ``--rounds``
  times each, mid-load.  Per restart: how long ``pg_ctl`` took (down to accepting
  connections), the 503s, and for each relay the seconds from the server
  accepting connections to that relay's next 200 (0 when it never failed).
  Afterwards the store is checked (every acknowledged turn once, no half-written
  record, ``ctxrelay check``).
- ``redis``: the same 2 relays with a recording upstream, scripted
  conversations (facts named, the same question asked again: Tier P hot-cache
  lookups) in phases of fresh sessions, the conditions interleaved: Redis up,
  Redis stopped (connection refused), Redis hung (``SIGSTOP``: every call waits
  for the client's socket timeout).  Per condition: turn latency p50/p95, the
  hot-cache hits; the packs sent upstream must be the same in every condition.

    python bench/relay_outage.py                   # bench/results/relay_outage.json
    python bench/relay_outage.py --rounds 1 --phases 1 --out /tmp/o.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "apps" / "server"))
from _common import git_rev, percentiles, write

from outage_load import Load, Scripted, check_store, packs, recovery, reply_to
from private_services import PrivatePostgres, PrivateRedis
from relay_support import RecordingUpstream, Subprocess


def _load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _relays(spec: str, cache: str, tmp: Path, upstream: str, *more: str) -> list[Subprocess]:
    relays = [Subprocess.relay(spec, tmp, "--upstream", upstream, "--cache", cache,  # type: ignore[arg-type]
                               "--no-warmup", "--log-level", "warning", *more)
              for _ in range(2)]
    for r in relays:
        r.wait_ready()
    return relays


def _stop(relays: list[Subprocess]) -> None:
    for r in relays:
        r.stop(signal.SIGTERM)


def pg_restart_arm(pg: PrivatePostgres, redis_server: PrivateRedis, tmp: Path,
                   clients: int, rounds: int) -> dict[str, Any]:
    from ctxrelay.storage import close_all, open_stores
    schema = "bench_restart"
    spec = f"{pg.url}?schema={schema}"
    with open_stores(spec):
        pass
    close_all()
    relays = _relays(spec, redis_server.url, tmp, "echo")
    load = Load([r.url for r in relays], clients=clients)
    restarts: list[dict[str, Any]] = []
    try:
        load.start()
        load.wait_for(2 * clients)
        for _ in range(rounds):
            for mode in ("fast", "immediate"):
                before = _load_average()
                down_at = time.monotonic()
                pg.restart(mode)
                ready_at = time.monotonic()
                seen = recovery(load, down_at, ready_at, len(relays))
                restarts.append({"mode": mode, "restart_s": round(ready_at - down_at, 3),
                                 "recovered_s": {str(k): round(v, 3)
                                                 for k, v in seen["recovered_s"].items()},
                                 "not_recovered": seen["not_recovered"],
                                 "answers_503": seen["errors_503"],
                                 "answers_503_sent_after_ready": seen["errors_503_after_ready"],
                                 "load_before": before})
                load.wait_for(load.acknowledged() + 2 * clients)
        load.finish()
    finally:
        load.stop.set()
        _stop(relays)
    if load.failures:
        raise SystemExit(f"client failures: {load.failures[:3]}")
    other = [a for a in load.answers if a.status != 200
             and not (a.status == 503 and a.code in UNAVAILABLE_CODES)]
    figures = check_store(spec, pg.url, schema, load)
    summary = {}
    for mode in ("fast", "immediate"):
        rec = [v for r in restarts if r["mode"] == mode for v in r["recovered_s"].values()]
        summary[mode] = {"restart_s_median": round(statistics.median(
                             r["restart_s"] for r in restarts if r["mode"] == mode), 3),
                         "recovered_s_median": round(statistics.median(rec), 3),
                         "recovered_s_max": round(max(rec), 3),
                         "answers_503_sent_after_ready": sum(
                             r["answers_503_sent_after_ready"] for r in restarts
                             if r["mode"] == mode)}
    return {"clients": clients, "rounds": rounds, "restarts": restarts, "summary": summary,
            "answers": len(load.answers),
            "answers_503": sum(1 for a in load.answers if a.status == 503),
            "answers_503_outcome_unknown": sum(1 for a in load.answers
                                               if a.code == "store_outcome_unknown"),
            "answers_other_than_200_or_503_store_unavailable": len(other),
            "store_check": figures}


def redis_arm(pg: PrivatePostgres, redis_server: PrivateRedis, tmp: Path,
              phases: int, sessions: int) -> dict[str, Any]:
    from ctxrelay.storage import close_all, open_stores
    spec = f"{pg.url}?schema=bench_redis"
    with open_stores(spec):
        pass
    close_all()
    upstream = RecordingUpstream()
    upstream.reply = reply_to
    relays = _relays(spec, redis_server.url, tmp, upstream.base_url, "--model", "m")
    conditions = ("up", "stopped", "hung")
    seconds: dict[str, list[float]] = {c: [] for c in conditions}
    hits = {c: 0 for c in conditions}
    turns = {c: 0 for c in conditions}
    seen_packs: dict[str, dict[Any, str]] = {c: {} for c in conditions}
    load: dict[str, list[list[float]]] = {c: [] for c in conditions}
    try:
        # Not measured: the relays' first turns (the embedder loads, the caches fill).
        Scripted([r.url for r in relays], sessions=sessions, prefix="warm-").run()
        for phase in range(phases):
            for condition in conditions:
                if condition == "stopped":
                    redis_server.stop()
                elif condition == "hung":
                    redis_server.start()
                    assert redis_server.proc is not None
                    redis_server.proc.send_signal(signal.SIGSTOP)
                else:
                    if redis_server.proc is None:
                        redis_server.start()
                    redis_server.flushall()     # each phase starts with an empty hot tier
                before, first = _load_average(), len(upstream.requests)
                run = Scripted([r.url for r in relays], sessions=sessions,
                               prefix=f"{condition}{phase}-")
                run.run()
                if run.failures:
                    raise SystemExit(f"{condition}: {run.failures[:3]}")
                seconds[condition] += run.seconds
                hits[condition] += run.hits
                turns[condition] += run.acked
                load[condition].append([before, _load_average()])
                got = packs(upstream.requests[first:])
                seen_packs[condition].update(
                    {(k[0].replace(f"{condition}{phase}-", ""), phase, k[1]): v
                     for k, v in got.items()})
                if condition == "hung":
                    assert redis_server.proc is not None
                    redis_server.proc.send_signal(signal.SIGCONT)
    finally:
        if redis_server.proc is not None:
            redis_server.proc.send_signal(signal.SIGCONT)
        _stop(relays)
        upstream.close()
    same = all(seen_packs[c] == seen_packs["up"] for c in conditions)
    stats = {c: {**percentiles(seconds[c]), "turns": turns[c], "cache_hits": hits[c],
                 "load_average_before_after": load[c]} for c in conditions}
    up = stats["up"]
    return {"phases": phases, "sessions_per_phase": sessions, "conditions": stats,
            "ratios_to_up": {c: {"p50": round(stats[c]["p50_ms"] / up["p50_ms"], 3),
                                 "p95": round(stats[c]["p95_ms"] / up["p95_ms"], 3)}
                             for c in conditions},
            "packs_identical_in_every_condition": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="restarts of each mode")
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--phases", type=int, default=3, help="phases of each Redis condition")
    ap.add_argument("--sessions", type=int, default=4, help="sessions per Redis phase")
    ap.add_argument("--arms", default="pg_restart,redis")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="relay-outage-"))
    pg, redis_server = PrivatePostgres(tmp), PrivateRedis(tmp)
    out: dict[str, Any] = {"git": git_rev(), "args": vars(args) | {"out": str(args.out)}}
    try:
        arms = args.arms.split(",")
        if "pg_restart" in arms:
            out["pg_restart"] = pg_restart_arm(pg, redis_server, tmp, args.clients, args.rounds)
            print(json.dumps(out["pg_restart"]["summary"]), flush=True)
        if "redis" in arms:
            out["redis"] = redis_arm(pg, redis_server, tmp, args.phases, args.sessions)
            print(json.dumps(out["redis"]["ratios_to_up"]), flush=True)
    finally:
        redis_server.close()
        pg.close()
        shutil.rmtree(tmp, ignore_errors=True)      # the relays' logs, Redis's directory
    if args.out:
        args.out.write_text(json.dumps(out, indent=2, sort_keys=True))
        print(args.out)
    else:
        print(write("relay_outage", out))


if __name__ == "__main__":
    main()
