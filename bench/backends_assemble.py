"""``Runtime.assemble`` on LMDB vs PostgreSQL+Redis, side by side in one run (issue 17, 5).

Called by ``backends_bench.py --only assemble`` (see there for the command line).

The store: ``--turns`` turns in one session (the synthetic technical chat of
``assembly_bench.py``) and ``--facts`` CKF facts (``e2e_worker.facts``, the
hashing embedder), the store ``e2e_bench`` and ``profile_assembly`` measure.
It is built once as an embedded store under ``--cache-dir`` (default
``/tmp/ctxrelay-bench-cache``), copied into its own PostgreSQL schema
``bench_asm_<turns>_<facts>`` by the steps of ``ctxrelay migrate``
(:func:`copy_store`: each session in one transaction, the facts with their
vectors), and both turn logs are derived by a first assembly.  A later
run finds both (the embedded one marked by a file, the schema by a marker
table) and reuses them; ``--rebuild`` builds both again and ``--drop``
removes both at the end.

Then each message of a fixed mix (``e2e_bench.QUESTIONS`` over the topics,
every one new, so no memo serves it) is assembled on both back ends with the
same policy (``e2e_worker.POLICY``: 4,096 tokens, knowledge on, 12 facts),
the two interleaved call by call so machine load hits both alike.  The packs
must be the same on both (the unit ids, in order): the count of equal packs is
recorded.  Round trips per assembly are counted on the wire (a counting TCP
proxy in front of PostgreSQL and one in front of Redis).
"""
from __future__ import annotations

import io
import json
import random
import sys
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from _common import percentiles

DEFAULT_CACHE = "/tmp/ctxrelay-bench-cache"


def _messages(n: int, seed: int = 7) -> list[str]:
    from assembly_bench import TOPICS
    from e2e_bench import QUESTIONS
    rng = random.Random(seed)
    return [QUESTIONS[i % len(QUESTIONS)].format(t=rng.choice(TOPICS), i=rng.randrange(5000))
            + f" ({i})" for i in range(n)]


def _say(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


def _du(path: Path) -> int:
    """Bytes allocated on disk (LMDB files are sparse up to their map size)."""
    out = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True).stdout
    return int(out.split()[0]) if out else 0


def _schema_state(url: str, schema: str) -> tuple[bool, int]:
    """(built, bytes on disk) of the bench schema."""
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        built = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.bench_built",)).fetchone()[0]
        size = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')", (schema,)).fetchone()[0]
    return bool(built), int(size)


def _drop_schema(url: str, schema: str) -> None:
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def copy_store(source: str, target: str) -> tuple[int, int]:
    """Copy the sessions and facts of ``source`` into the (new) store ``target``:
    the steps of :func:`ctxrelay.storage.migrate.migrate` (each session's JSON Lines
    in one transaction, each fact namespace's dump in one), without its read-back
    check of every fact (100k key lookups, one round trip each: ~20 minutes of a
    100k copy on this machine).  The bench checks the copy end to end instead: the
    packs of both back ends must be equal.  Returns (turns, facts) copied."""
    from ctxrelay.storage import open_stores
    from ctxrelay.storage.factcopy import dump, open_raw_facts, restore
    turns = facts = 0
    with open_stores(source) as src, open_stores(target) as dst:
        for info in src.transcript.sessions():
            dst.transcript.import_jsonl(src.transcript.export_jsonl(info.session_id))
            turns += dst.transcript.turn_count(info.session_id)
        if src.has("facts"):
            raw = open_raw_facts(src)
            into = open_raw_facts(dst, dict(raw.config))
            try:
                for ns in raw.namespaces():
                    data = dump(raw, ns)
                    restore(into, data)
                    facts += len(data.facts)
            finally:
                into.close()
                raw.close()
    return turns, facts


def _has_table(url: str, schema: str, table: str) -> bool:
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                 (f"{schema}.{table}",)).fetchone()[0])


def _mark(url: str, schema: str, table: str) -> None:
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {schema}.{table} (at timestamptz DEFAULT now())")


def build(args: Any, pg_url: str) -> dict[str, Any]:
    """Build (or find) the embedded store and its PostgreSQL copy; returns what it did.

    In stages, each marked when done, so an interrupted build resumes where it
    stopped: the embedded store (facts, turns: ``.copied`` in its directory once
    the copy is made too, with the stage times), the copy (table ``bench_copied``
    in the schema), then each back end's first assembly, which derives its turn
    log (``.built`` / table ``bench_built``; a sync resumes from its progress)."""
    from assembly_bench import synthetic_jsonl
    from e2e_worker import POLICY, facts

    from ctxrelay import Runtime
    from ctxrelay.knowledge.fabric import FactStore
    from ctxrelay.storage import close_all

    n_turns, n_facts = args.turns, args.facts
    root = Path(args.cache_dir) / f"asm-{n_turns}-{n_facts}" / "lmdb"
    times_file = root.parent / "build.json"
    schema = f"bench_asm_{n_turns}_{n_facts}"
    spec = f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}"
    out: dict[str, Any] = {"lmdb_dir": str(root), "pg_schema": schema}
    copied = (root / ".copied").exists() and _has_table(pg_url, schema, "bench_copied")
    built = {"lmdb": (root / ".built").exists(),
             "postgres": _has_table(pg_url, schema, "bench_built")}
    out["reused"] = copied and all(built.values()) and not args.rebuild
    times: dict[str, Any] = json.loads(times_file.read_text()) if times_file.exists() else {}
    if args.rebuild or not copied:
        # The copy is made from the embedded store as it was before its first
        # assembly, so a missing copy rebuilds both.
        if root.exists():
            shutil.rmtree(root)
        _drop_schema(pg_url, schema)
        root.mkdir(parents=True)
        built = {"lmdb": False, "postgres": False}
        t0 = time.perf_counter()
        fs = FactStore(root / "ckf", embedder="hashing", recluster_every=None, threads=2)
        fs.add_facts(facts(n_facts, seed=n_facts), batch_size=5000, progress=False)
        fs.close()
        times = {"lmdb": {"facts": round(time.perf_counter() - t0, 1)}, "postgres": {}}
        _say(f"{n_facts} facts in {times['lmdb']['facts']} s")
        t0 = time.perf_counter()
        with Runtime(root) as rt:
            rt.import_jsonl(io.StringIO(synthetic_jsonl("s", n_turns, seed=n_turns)).getvalue(),
                            session_id="s")
        times["lmdb"]["turns"] = round(time.perf_counter() - t0, 1)
        _say(f"{n_turns} turns in {times['lmdb']['turns']} s")
        close_all()
        t0 = time.perf_counter()
        done = copy_store(str(root), spec)
        times["postgres"]["copy_from_lmdb"] = round(time.perf_counter() - t0, 1)
        _say(f"copied to PostgreSQL in {times['postgres']['copy_from_lmdb']} s")
        close_all()
        assert done == (n_turns, n_facts), done
        _mark(pg_url, schema, "bench_copied")
        times_file.write_text(json.dumps(times))
        (root / ".copied").touch()
    for name, where in (("lmdb", str(root)), ("postgres", spec)):
        if built[name]:
            continue
        t0 = time.perf_counter()
        with Runtime(where) as rt:
            rt.assemble("s", "warm up the turn log", **POLICY)
        # (a resumed derivation times its rest only)
        times[name]["first_assembly_turnlog"] = round(time.perf_counter() - t0, 1)
        _say(f"{name}: first assembly (turn log) in {times[name]['first_assembly_turnlog']} s")
        close_all()
        if name == "lmdb":
            (root / ".built").touch()
        else:
            import psycopg
            with psycopg.connect(pg_url, autocommit=True) as conn:
                for (table,) in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)):
                    conn.execute(f"ANALYZE {schema}.{table}")   # the planner's statistics
            _mark(pg_url, schema, "bench_built")
        times_file.write_text(json.dumps(times))
    out["build_s"] = times
    out["spec"] = spec
    return out


def run(args: Any, result: dict[str, Any]) -> None:
    from e2e_worker import POLICY
    from pg_proxy import TcpProxy
    from services import postgres_url, redis_url

    from ctxrelay import Runtime
    from ctxrelay.storage import close_all

    pg_url, cache_url = postgres_url(), redis_url()
    built = build(args, pg_url)
    spec = built.pop("spec")
    prefix = f"benchasm{args.turns}x{args.facts}"
    redis_spec = f"{cache_url}{'&' if '?' in cache_url else '?'}prefix={prefix}"
    result["assemble"] = section = {"turns": args.turns, "facts": args.facts,
                                    "repeat": args.repeat, "policy": POLICY,
                                    "cache": "redis" + redis_spec.split(":", 1)[1].split("@")[-1],
                                    **built}
    root = Path(built["lmdb_dir"])
    section["disk_bytes"] = {"lmdb": _du(root),
                             "postgres": _schema_state(pg_url, built["pg_schema"])[1]}
    msgs = _messages(args.repeat + 2 * args.warmup + 40)
    try:
        import redis as redis_py
        redis_py.Redis.from_url(cache_url).delete(
            *redis_py.Redis.from_url(cache_url).keys(f"{prefix}:*") or ["-"])
        t0 = time.perf_counter()
        lmdb = Runtime(root)
        t_lmdb_open = time.perf_counter() - t0
        t0 = time.perf_counter()
        pg = Runtime(spec, cache=redis_spec)
        t_pg_open = time.perf_counter() - t0
        section["open_s"] = {"lmdb": round(t_lmdb_open, 2), "postgres": round(t_pg_open, 2)}
        sides = (("lmdb", lmdb), ("postgres", pg))
        # Warm-up: the first assemblies load the ANN index and the caches on both.
        first = {}
        for name, rt in sides:
            t0 = time.perf_counter()
            rt.assemble("s", msgs[0], **POLICY)
            first[name] = round(time.perf_counter() - t0, 2)
            for m in msgs[1:args.warmup]:
                rt.assemble("s", m, **POLICY)
        section["first_assembly_s"] = first
        samples: dict[str, list[float]] = {"lmdb": [], "postgres": []}
        same = 0
        measured = msgs[args.warmup:args.warmup + args.repeat]
        for i, m in enumerate(measured):
            packs = {}
            # Alternate which side goes first, so neither always runs after the other.
            for name, rt in (sides if i % 2 == 0 else sides[::-1]):
                t0 = time.perf_counter()
                r = rt.assemble("s", m, **POLICY)
                samples[name].append(time.perf_counter() - t0)
                packs[name] = [u.id for u in r.pack]
            same += packs["lmdb"] == packs["postgres"]
        timings = {name: percentiles(s) for name, s in samples.items()}
        section["timings"] = timings
        section["same_packs"] = f"{same}/{len(measured)}"
        section["pg_over_lmdb"] = {
            k: round(timings["postgres"][k] / timings["lmdb"][k], 2) for k in ("p50_ms", "p95_ms")}
        lmdb.close()
        pg.close()
        close_all()

        # Round trips per assembly, on the wire (PostgreSQL and Redis each behind a proxy).
        pg_proxy, pg_via = TcpProxy.to_url(spec)
        redis_proxy, redis_via = TcpProxy.to_url(redis_spec)
        via = Runtime(pg_via, cache=redis_via)
        for m in msgs[-40:-30]:
            via.assemble("s", m, **POLICY)
        trips_pg, trips_redis = [], []
        for m in msgs[-30:]:
            b_pg, b_redis = pg_proxy.round_trips, redis_proxy.round_trips
            via.assemble("s", m, **POLICY)
            trips_pg.append(pg_proxy.round_trips - b_pg)
            trips_redis.append(redis_proxy.round_trips - b_redis)
        via.close()
        close_all()
        pg_proxy.close()
        redis_proxy.close()
        section["round_trips_per_assembly"] = {
            "postgres": {"min": min(trips_pg), "median": sorted(trips_pg)[len(trips_pg) // 2],
                         "max": max(trips_pg)},
            "redis": {"min": min(trips_redis),
                      "median": sorted(trips_redis)[len(trips_redis) // 2],
                      "max": max(trips_redis)}}
    finally:
        close_all()
        if args.drop:
            shutil.rmtree(root.parent, ignore_errors=True)
            _drop_schema(pg_url, built["pg_schema"])


def report(section: dict[str, Any]) -> None:
    t = section["timings"]
    for name in ("lmdb", "postgres"):
        print(f"assemble {name:9s} p50 {t[name]['p50_ms']:8.2f} ms  p95 {t[name]['p95_ms']:8.2f} ms")
    print("postgres / lmdb:", section["pg_over_lmdb"], "same packs:", section["same_packs"])
    print("round trips per assembly:", section["round_trips_per_assembly"])
    print("disk bytes:", section["disk_bytes"], "build:", section.get("build_s", "reused"))
