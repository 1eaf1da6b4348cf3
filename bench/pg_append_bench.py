"""The PostgreSQL append alone: 1 round trip against the former 2, and the floor.

One session of ``--turns`` turns on the ``make services`` server (a schema of its
own, dropped afterwards); then, ``--repeat`` times, one call of each arm in turn,
so machine load hits them alike (nothing else runs between them, unlike
``backends_bench.py``, where LMDB's own fsyncs and the reads are interleaved too):

``append_keyed``           ``Transcript.append`` with an idempotency key: one call of
                           the server-side ``transcript_append`` (1 round trip)
``append``                 the same without a key
``append_keyed_2_round_trips``  the same statements sent by the client, as before
                           migration 7 (bench/pg_append_reference.py): BEGIN with the
                           session lock and the key's turn; the writes with COMMIT
``append_keyed_async``     the same call (the same parameters, built by the
                           transcript) on a connection with ``synchronous_commit``
                           off: the append without waiting for its WAL flush
``select_1``               ``SELECT 1`` on an autocommit connection: the network and
                           scheduling floor of one round trip
``commit_floor``           a one-row INSERT committed (1 round trip, 1 WAL flush): the
                           floor of any durable write with ``synchronous_commit`` on

Each arm runs on its own pooled or held connection.  ``server_ms`` is the server's
own time inside ``transcript_append`` (``EXPLAIN ANALYZE`` of the call, rolled back).
Read together: ``select_1`` is the round trip, ``append_keyed_async`` minus it the
client and server work, ``commit_floor`` minus ``select_1`` the WAL flush.

Run: ``.venv/bin/python bench/pg_append_bench.py``; writes
``bench/results/pg_append.json``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import git_rev, percentiles, write  # noqa: E402
from pg_append_reference import two_trip_append  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--out", default="pg_append")
    args = ap.parse_args()

    import psycopg

    from ctxrelay.storage import close_all, open_stores
    from ctxrelay.storage.postgres.transcript import _APPEND_CALL
    from services import drop_schema, fresh_schema_url, postgres_url

    spec, schema = fresh_schema_url()
    result: dict = {"turns": args.turns, "repeat": args.repeat, "git": git_rev(),
                    "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        t = open_stores(spec).transcript
        for session in ("s", "r"):
            t.create_session(session)
            t.append_many(session, [{"role": "user", "content": f"etcd raft {i} quorum lease",
                                     "key": f"seed-{i}"} for i in range(args.turns)])
        floor = psycopg.connect(postgres_url(), autocommit=True)
        floor.execute(f"CREATE TABLE {schema}.commit_floor (i int)")
        result["synchronous_commit"] = floor.execute("SHOW synchronous_commit").fetchone()[0]
        result["wal_sync_method"] = floor.execute("SHOW wal_sync_method").fetchone()[0]
        ping = psycopg.connect(postgres_url(), autocommit=True)
        lazy = psycopg.connect(postgres_url(), autocommit=True)
        lazy.execute(f"SET search_path = {schema}, public")
        lazy.execute("SET synchronous_commit = off")

        def async_append(i: int) -> None:
            pending = t._prepare("user", f"bench append {i} etcd quota", key=f"a-{i}")
            lazy.execute(_APPEND_CALL, t._append_params("s", [pending], "existing", {},
                                                        pending.timestamp, False)).fetchone()
        arms = {
            "append_keyed": lambda i: t.append("s", "user", f"bench append {i} etcd quota",
                                               key=f"k-{i}"),
            "append": lambda i: t.append("s", "user", f"bench append {i} etcd raft"),
            "append_keyed_async": async_append,
            "append_keyed_2_round_trips": lambda i: two_trip_append(
                t, "r", f"bench append {i} etcd quota", key=f"k-{i}"),
            "select_1": lambda i: ping.execute("SELECT 1").fetchone(),
            "commit_floor": lambda i: floor.execute(
                f"INSERT INTO {schema}.commit_floor VALUES (%s)", (i,)),
        }
        samples: dict[str, list[float]] = {name: [] for name in arms}
        for warm in range(-6, 0):                # past psycopg's prepare threshold (5)
            for fn in arms.values():
                fn(warm)
        for i in range(args.repeat):
            for name, fn in arms.items():
                t0 = time.perf_counter()
                fn(i)
                samples[name].append(time.perf_counter() - t0)
        result["server_ms"] = server_time(t, floor, schema)
        for conn in (floor, ping, lazy):
            conn.close()
        timings = {name: percentiles(s) for name, s in samples.items()}
        result["timings"] = timings
        p50 = {name: timings[name]["p50_ms"] for name in arms}
        result["ratios_p50"] = {
            "append_keyed_over_2_round_trips": round(
                p50["append_keyed"] / p50["append_keyed_2_round_trips"], 3),
            "append_keyed_over_commit_floor": round(p50["append_keyed"] / p50["commit_floor"], 3),
            "commit_floor_over_select_1": round(p50["commit_floor"] / p50["select_1"], 3),
            "append_keyed_over_async": round(p50["append_keyed"] / p50["append_keyed_async"], 3),
        }
        result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        close_all()
        drop_schema(schema)
    print("wrote", write(args.out, result))
    print({k: (v["p50_ms"], v["p95_ms"]) for k, v in result["timings"].items()},
          result["ratios_p50"], "server", result["server_ms"], "load", result["loadavg_end"])
    return 0


def server_time(t, conn, schema: str) -> dict:
    """The server's own time for one keyed append (``EXPLAIN ANALYZE`` of the call, in
    a transaction rolled back, so nothing stays): what is left once the network and
    the client are taken away, before the commit's WAL flush."""
    from ctxrelay.storage.postgres.transcript import _APPEND_CALL
    times = []
    conn.execute(f"SET search_path = {schema}, public")
    for i in range(30):
        pending = t._prepare("user", f"server side {i} etcd quota", key=f"x-{i}")
        params = t._append_params("s", [pending], "existing", {}, pending.timestamp, False)
        with conn.transaction(force_rollback=True):
            plan = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + _APPEND_CALL,
                                params, prepare=False).fetchone()[0]
        times.append(plan[0]["Execution Time"] / 1000)
    return percentiles(times[5:])


if __name__ == "__main__":
    sys.exit(main())
