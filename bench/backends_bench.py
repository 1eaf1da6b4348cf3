"""LMDB vs PostgreSQL, side by side in one run: the transcript's hot paths.

One session of N turns (``--turns``, default 20,000; synthetic ops chatter
from a fixed seed) is written to an embedded store (a temporary directory)
and to a PostgreSQL store (a schema of its own on the server of
``make services``, dropped afterwards), then each access is timed, one call
per sample, the two back ends interleaved call by call so machine load hits
both alike:

``append``        one turn (the session lock, the turn, its postings, the
                  counters, commit; the server's ``synchronous_commit`` is
                  recorded: on = each append waits for its WAL flush)
``rank``          BM25 top 10 of a 2-4 word query (``Transcript.rank``)
``search``        the same with the turns loaded (``Transcript.search``)
``last_16``       the newest 16 turns
``turns_8``       8 turns by id
``commit_floor``  (PostgreSQL only) a one-row INSERT committed on its own: the
                  least a durable write costs on this server and disk

and, for the index choice of issue 17, PostgreSQL's own full-text search
over the same turns (a GIN index on ``to_tsvector('simple', content)``,
``ts_rank`` top 10) beside the postings table: its p50/p95 and how many of
its top 10 are BM25's top 10 (``overlap_at_10``).  ``round_trips`` counts each
call's network round trips on the wire (through a counting TCP proxy), and
``append_4_round_trips`` times the append as it was before it took two (the same
statements in psycopg's own transaction), interleaved with the others.

and, for the vector choice of issue 17, ``--facts N`` facts with structured
vectors: pgvector's HNSW index against the per-process hnswlib index the CKF
keeps, both against exact search (``bench/ann_backends.py`` says how).

and, for ``--only assemble``, ``Runtime.assemble`` p50/p95 over ``--turns`` turns
and ``--facts`` CKF facts on LMDB and on PostgreSQL+Redis, interleaved, with
the packs compared and the round trips per assembly counted
(``bench/backends_assemble.py`` says how; the stores are built once and cached,
``--cache-dir``, ``--rebuild``, ``--drop``).

Run: ``make services && .venv/bin/python bench/backends_bench.py [--turns N]
[--facts N] [--only transcript|ann|assemble]``; writes ``bench/results/backends.json``
(``--only ann``: ``backends_ann.json``; ``--only assemble``: ``backends_assemble.json``).
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import git_rev, percentiles, write  # noqa: E402
# the append before migration 7 (the 4-round-trip arm)
from pg_append_reference import four_trip_append  # noqa: E402

WORDS = ("etcd raft leader election timeout member defragment compaction snapshot latency "
         "disk wal fsync quorum learner lease revision watch grpc kubelet pod node drain "
         "cordon taint toleration ingress service endpoint dns coredns calico cilium mtu "
         "prometheus alert grafana loki retention shard replica backup restic restore "
         "postgres vacuum autovacuum index bloat replication slot lag archive wal-g").split()


def corpus(n: int, seed: int = 17) -> list[dict]:
    rng = random.Random(seed)
    roles = ["user", "assistant", "tool"]
    return [{"role": roles[i % 3],
             "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 60)))}
            for i in range(n)]


def queries(n: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(WORDS, rng.randint(2, 4))) for _ in range(n)]


def interleaved(calls: dict[str, callable], repeat: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in calls}
    for name, fn in calls.items():          # warm-up
        fn(0)
        fn(1)
    for i in range(repeat):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            fn(i)
            out[name].append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--facts", type=int, default=10_000,
                    help="facts for the ANN comparison (0: skip it)")
    ap.add_argument("--only", choices=("all", "transcript", "ann", "assemble"), default="all")
    ap.add_argument("--out", default=None)
    ap.add_argument("--warmup", type=int, default=5, help="assemble: unmeasured calls per side")
    ap.add_argument("--cache-dir", default=None,
                    help="assemble: where the embedded store is built and kept "
                         "(default /tmp/ctxrelay-bench-cache)")
    ap.add_argument("--rebuild", action="store_true", help="assemble: build the stores again")
    ap.add_argument("--drop", action="store_true",
                    help="assemble: remove the cached store and its schema at the end")
    args = ap.parse_args()
    if args.out is None:
        args.out = {"ann": "backends_ann", "assemble": "backends_assemble"}.get(
            args.only, "backends")
    result: dict = {"git": git_rev(), "command": " ".join(["bench/backends_bench.py"]
                                                            + sys.argv[1:])}
    if args.only == "assemble":
        import backends_assemble
        args.cache_dir = args.cache_dir or backends_assemble.DEFAULT_CACHE
        backends_assemble.run(args, result)
        print(f"wrote {write(args.out, result)}")
        backends_assemble.report(result["assemble"])
        return 0
    if args.only != "ann":
        transcript_part(args, result)
    if args.facts and args.only != "transcript":
        from ann_backends import run as ann_run
        from services import drop_schema, fresh_schema_url
        spec, schema = fresh_schema_url()
        try:
            result["ann"] = ann_run(args.facts, args.repeat, spec)
        finally:
            drop_schema(schema)
    path = write(args.out, result)
    print(f"wrote {path}")
    if "pg_over_lmdb_p50" in result:
        for op, ratio in result["pg_over_lmdb_p50"].items():
            print(f"{op:8s} lmdb p50 {result['timings'][f'lmdb.{op}']['p50_ms']:8.3f} ms   "
                  f"postgres p50 {result['timings'][f'postgres.{op}']['p50_ms']:8.3f} ms   "
                  f"x{ratio}")
        print("round trips:", result["round_trips"])
        print("append p50 ms, 2 vs 4 round trips:", result["append_p50_ms_2_vs_4_round_trips"],
              "commit floor p50", result["timings"]["postgres.commit_floor"]["p50_ms"])
        print("fts:", result["fts"])
    if "ann" in result:
        import json
        print("ann:", json.dumps(result["ann"], indent=1))
    return 0


def transcript_part(args: argparse.Namespace, result: dict) -> None:

    import psycopg

    from ctxrelay.storage import close_all, open_stores
    from services import drop_schema, fresh_schema_url, postgres_url

    turns = corpus(args.turns)
    qs = queries(64)
    spec, schema = fresh_schema_url()
    tmp = tempfile.TemporaryDirectory(prefix="backends-bench-")
    result.update(turns=args.turns, repeat=args.repeat)
    try:
        lmdb = open_stores(str(Path(tmp.name) / "store")).transcript
        pg = open_stores(spec).transcript
        build = {}
        for name, t in (("lmdb", lmdb), ("postgres", pg)):
            t0 = time.perf_counter()
            t.create_session("s")
            for at in range(0, len(turns), 1000):
                t.append_many("s", turns[at:at + 1000])
            build[name] = round(time.perf_counter() - t0, 2)
        result["build_s"] = build
        with psycopg.connect(postgres_url(), autocommit=True) as conn:
            result["postgres_settings"] = {
                name: conn.execute(f"SHOW {name}").fetchone()[0]
                for name in ("server_version", "synchronous_commit", "fsync", "shared_buffers")}

        def calls(name: str, t) -> dict[str, callable]:
            return {
                f"{name}.append": lambda i: t.append("s", "user",
                                                     f"bench append {i} " + qs[i % 64]),
                f"{name}.rank": lambda i: t.rank("s", qs[i % 64], k=10),
                f"{name}.search": lambda i: t.search("s", qs[i % 64], k=10),
                f"{name}.last_16": lambda i: t.last("s", 16),
                f"{name}.turns_8": lambda i: t.turns("s", [1 + (i * 97 + j * 13) % args.turns
                                                          for j in range(8)]),
            }
        # The floor of a durable write on this server: one one-row INSERT committed
        # (autocommit: one round trip and one WAL flush), timed beside the appends.
        floor = psycopg.connect(postgres_url(), autocommit=True)
        floor.execute(f"CREATE TABLE {schema}.commit_floor (i int)")
        floor_calls = {"postgres.commit_floor": lambda i: floor.execute(
            f"INSERT INTO {schema}.commit_floor VALUES (%s)", (i,)),
            # The same append through psycopg's own transaction (BEGIN and COMMIT
            # each synced on their own): the 4-round-trip protocol it replaced.
            "postgres.append_4_round_trips": lambda i: four_trip_append(
                pg, f"bench append {i} " + qs[i % 64])}
        every = {**calls("lmdb", lmdb), **calls("postgres", pg), **floor_calls}
        # The three durable writes of PostgreSQL side by side in each round, so the
        # disk's state (another job's flushes, LMDB's fsync) hits them alike.
        first = ["postgres.append", "postgres.append_4_round_trips", "postgres.commit_floor"]
        order = first + [name for name in every if name not in first]
        samples = interleaved({name: every[name] for name in order}, args.repeat)
        floor.close()
        timings = {name: percentiles(s) for name, s in samples.items()}
        result["timings"] = timings
        result["pg_over_lmdb_p50"] = {
            op: round(timings[f"postgres.{op}"]["p50_ms"] / timings[f"lmdb.{op}"]["p50_ms"], 2)
            for op in ("append", "rank", "search", "last_16", "turns_8")}

        # Round trips on the wire (a counting TCP proxy, tests/pg_proxy.py).
        from pg_proxy import TcpProxy
        proxy, proxied_url = TcpProxy.to_url(spec)
        via = open_stores(proxied_url).transcript
        trips = {}
        for op, fn in (("append", lambda: via.append("s", "user", "counting round trips")),
                       ("append_keyed",
                        lambda: via.append("s", "user", "keyed", key=uuid.uuid4().hex)),
                       ("append_4_round_trips", lambda: four_trip_append(via, "counting")),
                       ("rank", lambda: via.rank("s", qs[0])),
                       ("search", lambda: via.search("s", qs[0])),
                       ("last_16", lambda: via.last("s", 16))):
            before = proxy.round_trips
            fn()
            trips[op] = proxy.round_trips - before
        proxy.close()
        result["round_trips"] = trips
        result["append_p50_ms_2_vs_4_round_trips"] = [
            timings["postgres.append"]["p50_ms"],
            timings["postgres.append_4_round_trips"]["p50_ms"]]

        # PostgreSQL full-text search over the same turns, for the index choice.
        with psycopg.connect(postgres_url(), autocommit=True) as conn:
            conn.execute(f"SET search_path = {schema}")
            t0 = time.perf_counter()
            conn.execute("CREATE TABLE fts AS SELECT turn_id, "
                         "to_tsvector('simple', convert_from(content, 'UTF8')) AS tsv "
                         "FROM turns WHERE session_num = 1")
            conn.execute("CREATE INDEX fts_gin ON fts USING gin (tsv)")
            result["fts_build_s"] = round(time.perf_counter() - t0, 2)
            fts_samples, overlaps = [], []
            for i in range(args.repeat):
                q = qs[i % 64]
                t0 = time.perf_counter()
                rows = conn.execute(
                    "SELECT turn_id FROM fts, plainto_tsquery('simple', %s) q "
                    "WHERE tsv @@ q ORDER BY ts_rank(tsv, q) DESC, turn_id DESC LIMIT 10",
                    (q,)).fetchall()
                fts_samples.append(time.perf_counter() - t0)
                # plainto_tsquery ANDs the words; BM25 ranks any-word matches.
                bm25 = {t for t, _ in pg.rank("s", q, k=10)}
                overlaps.append(len(bm25 & {r[0] for r in rows}) / 10)
            result["fts"] = {"ts_rank_and_query": percentiles(fts_samples),
                             "overlap_at_10_with_bm25": round(sum(overlaps) / len(overlaps), 3)}
    finally:
        close_all()
        drop_schema(schema)
        tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
