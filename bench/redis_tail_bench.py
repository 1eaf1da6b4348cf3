"""The rolling hot tail: read from Redis (shared) against a per-process ring and a
rebuild from PostgreSQL, side by side in one run; and round trips per managed turn.

One PostgreSQL schema on the ``make services`` server holds a session of
``--turns`` turns.  Four ``Stores`` of it are open in this process, as four
relays would hold it: two with ``--cache redis://`` (their tails are one Redis
list) and two with ``memory://`` (each its own ring in memory).  Each arm is
``Router.recent(session, 8)`` -- the read of the hot tail an assembly makes --
and the arms run in turn ``--repeat`` times, so machine load hits them alike:

``redis_tail``             a relay reads the shared tail, its own check state
                           and its mirror of the tail cleared first (a relay that
                           has not read the session yet): the write generation
                           and turn count from PostgreSQL, 8 entries from Redis
``redis_tail_mirrored``    the same with the relay's mirror current (it read or
                           wrote the session's last turn): no Redis round trip
``per_process_ring``       the same on its own memory ring, which is current
                           (the best case of a per-process ring: this relay
                           wrote the session's last turn)
``redis_after_other_append``  another relay appends a turn (not timed); this
                           relay then reads: the tail already holds it
``per_process_after_other_append``  the same with memory rings: this relay's
                           ring is one turn behind and catches up from PostgreSQL
``rebuild_from_postgres``  the memory ring dropped first (a relay that has not
                           served the session, or has evicted it): the last
                           ``capacity`` turns read from PostgreSQL into the ring

Then each kind of store runs managed turns (echo provider) on a 30-turn session
through TCP proxies that count round trips to PostgreSQL and to Redis.

Run: ``.venv/bin/python bench/redis_tail_bench.py``; writes
``bench/results/redis_tail.json``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import git_rev, percentiles, write  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--n", type=int, default=8, help="turns per read")
    ap.add_argument("--out", default="redis_tail")
    args = ap.parse_args()

    import redis

    from ctxrelay import Runtime
    from ctxrelay.retrieval.router import Router
    from ctxrelay.storage import close_all, open_stores
    from pg_proxy import TcpProxy
    from services import drop_schema, fresh_schema_url, redis_url

    spec, schema = fresh_schema_url()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    cache = f"{redis_url()}?prefix={prefix}"
    result: dict = {"turns": args.turns, "repeat": args.repeat, "n": args.n,
                    "git": git_rev(), "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        # Four holders of one store: a spec's options other than ``schema`` make
        # another Stores in this process, and name the same store in Redis.
        def holder(name: str, cache_spec: str | None):
            return open_stores(f"{spec}&application_name={name}", cache=cache_spec)
        redis_a, redis_b = holder("ra", cache), holder("rb", cache)
        mem_a, mem_b = holder("ma", None), holder("mb", None)
        redis_a.transcript.create_session("s")
        redis_a.transcript.append_many(
            "s", [{"role": "user" if i % 2 == 0 else "assistant",
                   "content": f"turn {i}: the etcd member {i % 5} quota is {8 + i % 4} GiB "
                              f"and the raft election timeout {1000 + i} ms"}
                  for i in range(args.turns)])
        routers = {name: Router.of(s) for name, s in
                   (("ra", redis_a), ("rb", redis_b), ("ma", mem_a), ("mb", mem_b))}
        for r in routers.values():
            r.recent("s", args.n)                          # every ring filled once
        want = [t.turn_id for t in mem_a.transcript.last("s", args.n)]
        appended = [0]

        def fresh(router):
            router._verified.clear()                       # as after another relay's write
            return router.recent("s", args.n)

        def other_append() -> None:
            # Another relay's turn: the transcript, then that relay's tail (the Redis
            # one every redis:// holder shares; mem_a's own ring).
            appended[0] += 1
            tid = redis_a.transcript.append("s", "user", f"appended elsewhere {appended[0]}")
            routers["ra"].log_turn("s", tid)
            routers["ma"].log_turn("s", tid)

        def rebuild():
            routers["mb"].rolling.drop("s")
            return fresh(routers["mb"])

        def cold_mirror():
            routers["rb"]._tail.forget_mirror("s")
            return fresh(routers["rb"])

        arms = {
            "redis_tail": (None, cold_mirror),
            "redis_tail_mirrored": (lambda: routers["rb"].recent("s", args.n),
                                    lambda: fresh(routers["rb"])),
            # made current untimed first: the other arms' appends leave it behind
            "per_process_ring": (lambda: routers["mb"].recent("s", args.n),
                                 lambda: fresh(routers["mb"])),
            "redis_after_other_append": (other_append,
                                         lambda: routers["rb"].recent("s", args.n)),
            "per_process_after_other_append": (other_append,
                                               lambda: routers["mb"].recent("s", args.n)),
            "rebuild_from_postgres": (None, rebuild),
        }
        samples: dict[str, list[float]] = {name: [] for name in arms}
        misses_before = routers["rb"].tail_misses
        hits_before = routers["rb"].mirror_hits
        for _ in range(args.repeat):
            for name, (before, read) in arms.items():
                if before is not None:
                    before()
                t0 = time.perf_counter()
                turns = read()
                samples[name].append(time.perf_counter() - t0)
                last = mem_a.transcript.turn_count("s")
                assert [t.turn_id for t in turns] == list(range(last - args.n + 1, last + 1)), \
                    (name, [t.turn_id for t in turns], last)
        assert routers["rb"].tail_misses == misses_before      # every Redis read was served
        result["mirror_hits"] = routers["rb"].mirror_hits - hits_before
        result["arms"] = {name: percentiles(s) for name, s in samples.items()}
        base = result["arms"]["redis_tail"]["p50_ms"]
        result["p50_vs_redis_tail"] = {name: round(a["p50_ms"] / base, 2)
                                       for name, a in result["arms"].items()}
        del want
        close_all()

        # -- round trips per managed turn, counted on the wire ----------------------------
        pg_proxy, pg_url = TcpProxy.to_url(spec)
        target = urlsplit(redis_url())
        redis_proxy = TcpProxy((target.hostname, target.port))
        trips = {}
        try:
            for kind, cache_spec in (
                    ("redis", f"redis://127.0.0.1:{redis_proxy.port}{target.path or '/0'}"
                              f"?prefix={prefix}"),
                    ("memory", None)):
                with Runtime(pg_url, cache=cache_spec) as rt:
                    session = f"m-{kind}"
                    rt.create_session(session)
                    for i in range(30):
                        rt.managed_turn(session, f"message {i} about the etcd quota {i}",
                                        provider="echo")
                    counts = []
                    for i in range(5):
                        pg0, r0 = pg_proxy.round_trips, redis_proxy.round_trips
                        rt.managed_turn(session, f"one more question {i} about the quota",
                                        provider="echo")
                        counts.append((pg_proxy.round_trips - pg0,
                                       redis_proxy.round_trips - r0))
                trips[kind] = {"postgres": sorted(c[0] for c in counts)[2],
                               "redis": sorted(c[1] for c in counts)[2]}
                close_all()
        finally:
            pg_proxy.close()
            redis_proxy.close()
        result["managed_turn_round_trips_median"] = trips
    finally:
        close_all()
        drop_schema(schema)
        client = redis.Redis.from_url(redis_url())
        doomed = list(client.scan_iter(match=f"{prefix}:*"))
        if doomed:
            client.delete(*doomed)
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    path = write(args.out, result)
    print(path)
    for name, a in result["arms"].items():
        print(f"{name:34s} p50 {a['p50_ms']:8.3f} ms  p95 {a['p95_ms']:8.3f} ms")
    print("managed turn round trips (median of 5):", result["managed_turn_round_trips_median"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
