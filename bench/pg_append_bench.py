"""The PostgreSQL append alone: 2 round trips against the former 4, and the floor.

One session of ``--turns`` turns on the ``make services`` server (a schema of its
own, dropped afterwards); then, ``--repeat`` times, one call of each arm in turn,
so machine load hits them alike (nothing else runs between them, unlike
``backends_bench.py``, where LMDB's own fsyncs and the reads are interleaved too):

``append``                 ``Transcript.append`` (2 round trips: BEGIN with the
                           session lock; the writes with COMMIT)
``append_4_round_trips``   the same statements in psycopg's own transaction
                           (BEGIN and COMMIT each synced on their own)
``commit_floor``           a one-row INSERT committed (1 round trip, 1 WAL flush)

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
from backends_bench import four_trip_append  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--out", default="pg_append")
    args = ap.parse_args()

    import psycopg

    from ctxrelay.storage import close_all, open_stores
    from services import drop_schema, fresh_schema_url, postgres_url

    spec, schema = fresh_schema_url()
    result: dict = {"turns": args.turns, "repeat": args.repeat, "git": git_rev(),
                    "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    try:
        t = open_stores(spec).transcript
        t.create_session("s")
        t.append_many("s", [{"role": "user", "content": f"etcd raft {i} quorum lease"}
                            for i in range(args.turns)])
        floor = psycopg.connect(postgres_url(), autocommit=True)
        floor.execute(f"CREATE TABLE {schema}.commit_floor (i int)")
        result["synchronous_commit"] = floor.execute("SHOW synchronous_commit").fetchone()[0]
        arms = {
            "append": lambda i: t.append("s", "user", f"bench append {i} etcd quota"),
            "append_4_round_trips": lambda i: four_trip_append(t, f"bench append {i} etcd"),
            "commit_floor": lambda i: floor.execute(
                f"INSERT INTO {schema}.commit_floor VALUES (%s)", (i,)),
        }
        samples: dict[str, list[float]] = {name: [] for name in arms}
        for name, fn in arms.items():
            fn(0)
        for i in range(args.repeat):
            for name, fn in arms.items():
                t0 = time.perf_counter()
                fn(i)
                samples[name].append(time.perf_counter() - t0)
        floor.close()
        timings = {name: percentiles(s) for name, s in samples.items()}
        result["timings"] = timings
        p50 = {name: timings[name]["p50_ms"] for name in arms}
        result["append_over_4_round_trips_p50"] = round(
            p50["append"] / p50["append_4_round_trips"], 3)
        result["append_over_floor_p50"] = round(p50["append"] / p50["commit_floor"], 3)
        result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        close_all()
        drop_schema(schema)
    print("wrote", write(args.out, result))
    print({k: v["p50_ms"] for k, v in result["timings"].items()},
          "2/4 round trips", result["append_over_4_round_trips_p50"],
          "append/floor", result["append_over_floor_p50"], "load", result["loadavg_end"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
