"""Vectors at scale (issue 17 item 4): pgvector's HNSW vs a per-process hnswlib index.

Part of ``bench/backends_bench.py`` (``--facts N``; ``--only ann`` runs this part
alone).  N facts with structured 384-d vectors (a mixture of Gaussian clusters in
a 64-d subspace plus isotropic noise, unit length: text embeddings are clustered,
and recall on uniform random vectors means nothing) are written to a PostgreSQL
store through :class:`~ctxrelay.storage.postgres.facts.PgFacts`; 200 held-out
queries from the same mixture are searched k=10:

``exact``          numpy brute force over every vector (the truth recall is
                   measured against), and PostgreSQL's exact scan (``ORDER BY
                   vector <=> q`` with index scans off, ``prepare=False``: a
                   prepared plan would ignore the ``SET LOCAL``)
``pgvector_hnsw``  an HNSW index on the vector column (same m and
                   ef_construction as the store's hnswlib config,
                   ``hnsw.ef_search`` 100), one statement per query
``hnswlib``        the per-process index the CKF keeps (``LiveIndex``): its cold
                   build reads every vector from PostgreSQL; a query is the
                   real read path (one snapshot: the namespace's generation,
                   the feed replay if it moved, the ids of the hits); ``raw``
                   is the hnswlib search alone

Figures: p50/p95 per query (pgvector, the hnswlib read path, hnswlib alone and
numpy's exact search timed query by query in one loop, so load hits all alike),
recall@10 against the exact top 10, build time, memory (index relation size;
hnswlib's snapshot size) and round trips.
"""
from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import numpy as np
from _common import percentiles

DIM = 384
NS = "bench"


def clustered(n: int, *, seed: int, clusters: int = 200, latent: int = 64) -> np.ndarray:
    """Unit vectors from a mixture of Gaussian clusters in a ``latent``-d subspace."""
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(1234).standard_normal((latent, DIM)).astype(np.float32)
    centres = np.random.default_rng(4321).standard_normal((clusters, latent)).astype(np.float32)
    spread = np.random.default_rng(99).uniform(0.3, 0.8, clusters).astype(np.float32)
    pick = rng.integers(0, clusters, n)
    z = centres[pick] + spread[pick, None] * rng.standard_normal((n, latent)).astype(np.float32)
    x = z @ basis + 0.5 * rng.standard_normal((n, DIM)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    return round(float(np.mean([len(set(f) & set(t.tolist())) / len(t)
                                for f, t in zip(found, truth)])), 4)


def run(n: int, repeat: int, spec: str, *, m: int = 16, ef_construction: int = 200,
        ef_search: int = 100, maintenance_mem: str = "1GB") -> dict[str, Any]:
    import psycopg
    from ctxrelay.knowledge.live import LiveIndex
    from ctxrelay.storage.postgres.connection import Database, parse_url
    from ctxrelay.storage.postgres.facts import PgFacts
    from ctxrelay.storage.postgres.migrations import migrate

    out: dict[str, Any] = {"facts": n, "dim": DIM, "queries": repeat, "k": 10,
                           "hnsw": {"m": m, "ef_construction": ef_construction,
                                    "ef_search": ef_search}}
    data = clustered(n, seed=7)
    queries = clustered(repeat, seed=8)
    db = Database(spec)
    migrate(db)
    storage = PgFacts(db, model_id="bench-384", dim=DIM, m=m, ef_construction=ef_construction,
                      owns_db=True)
    try:
        t0 = time.perf_counter()
        seqs: list[int] = []
        for lo in range(0, n, 1000):
            chunk = data[lo:lo + 1000]
            recs = [{"content": f"fact {lo + i}", "content_hash": f"h{lo + i}", "key": None,
                     "source_id": None, "source_location": None, "source_type": "user",
                     "importance": 0.6, "ttl": None, "ttl_seconds": None, "metadata": {}}
                    for i in range(len(chunk))]
            done = storage.add_facts(NS, recs, chunk, now=1.7e9)
            seqs += list(done.seqs)
        out["write_s"] = round(time.perf_counter() - t0, 2)
        label = np.asarray(seqs, dtype=np.int64)

        # the truth: exact cosine top 10
        sims = queries @ data.T
        truth = label[np.argsort(-sims, axis=1)[:, :10]]

        conninfo, schema = parse_url(spec)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            from pgvector.psycopg import register_vector
            conn.execute(f"SET search_path = {schema}, public")
            register_vector(conn)
            nid = conn.execute("SELECT id FROM ckf_namespaces WHERE name = %s",
                               (NS,)).fetchone()[0]
            cast = f"vector::vector({DIM})"
            query_sql = (f"SELECT seq FROM ckf_facts WHERE ns_id = %s "
                         f"ORDER BY {cast} <=> %s::vector({DIM}) LIMIT 10")
            # PostgreSQL's exact scan (no index yet; prepare=False all the same)
            t_pg_exact, found = [], []
            for q in queries[:min(repeat, 50)]:
                t1 = time.perf_counter()
                rows = conn.execute(query_sql, (nid, q), prepare=False).fetchall()
                t_pg_exact.append(time.perf_counter() - t1)
                found.append([r[0] for r in rows])
            out["exact_postgres"] = {**percentiles(t_pg_exact),
                                     "recall_at_10": recall(found, truth[:len(found)])}

            # pgvector HNSW
            conn.execute(f"SET maintenance_work_mem = '{maintenance_mem}'")
            t1 = time.perf_counter()
            conn.execute(f"CREATE INDEX ckf_facts_hnsw ON ckf_facts USING hnsw (({cast}) "
                         f"vector_cosine_ops) WITH (m = {m}, ef_construction = {ef_construction})")
            build = time.perf_counter() - t1
            size = conn.execute("SELECT pg_relation_size('ckf_facts_hnsw')").fetchone()[0]
            conn.execute(f"SET hnsw.ef_search = {ef_search}")
            plan = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN " + query_sql, (nid, queries[0]), prepare=False).fetchall())
            # the index itself is measured: where the planner would rather scan (a
            # small table), it is told not to (``planner_chose_index`` says which)
            conn.execute("SET enable_seqscan = off")
            out["pgvector_hnsw"] = {"build_s": round(build, 2), "index_bytes": int(size),
                                    "maintenance_work_mem": maintenance_mem,
                                    "planner_chose_index": "ckf_facts_hnsw" in plan,
                                    "round_trips_per_query": 1}

            # hnswlib, as the CKF keeps it per process
            with tempfile.TemporaryDirectory(prefix="ann-bench-") as tmp:
                live = LiveIndex(storage, tmp, ef_search=ef_search, auto_ef=True)
                t1 = time.perf_counter()
                idx = live.index(NS)
                build = time.perf_counter() - t1
                wide = [idx.index.search(q, 10)[0][0].tolist() for q in queries]   # ef 100
                t1 = time.perf_counter()
                live.save(NS)        # tunes ef as every snapshot does (auto_ef)
                tuned = time.perf_counter() - t1
                idx = live.ann.get(NS)
                # the three searches interleaved query by query: machine load hits all alike
                samples: dict[str, list[float]] = {"pg": [], "live": [], "raw": [], "np": []}
                found_pg, found_live = [], []
                for q in queries:
                    t1 = time.perf_counter()
                    rows = conn.execute(query_sql, (nid, q)).fetchall()
                    t2 = time.perf_counter()
                    hits = live.search(NS, q, 10)
                    t3 = time.perf_counter()
                    idx.index.search(q, 10)
                    t4 = time.perf_counter()
                    np.argpartition(-(data @ q), 10)[:10]
                    t5 = time.perf_counter()
                    for name, dt in zip(samples, (t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                        samples[name].append(dt)
                    found_pg.append([r[0] for r in rows])
                    found_live.append(hits)
                ids = storage.ids_at(NS, label.tolist())
                seq_of = dict(zip(ids, label.tolist()))
                found_seqs = [[seq_of[f] for f, _ in hits] for hits in found_live]
                path = os.path.join(tmp, "size.bin")
                idx.index.save(path)
                index_bytes = os.path.getsize(path)
                # a restart: a new index object on the same snapshot directory loads the
                # snapshot and replays the feed (storage/postgres/annslot.py)
                live.close()
                live = LiveIndex(storage, tmp, ef_search=ef_search, auto_ef=True)
                t1 = time.perf_counter()
                live.index(NS)
                restart = time.perf_counter() - t1
                live.close()
            conn.execute("DROP INDEX ckf_facts_hnsw")
        out["exact_numpy"] = percentiles(samples["np"])
        out["pgvector_hnsw"].update(percentiles(samples["pg"]),
                                    recall_at_10=recall(found_pg, truth))
        out["hnswlib"] = {**percentiles(samples["live"]), "recall_at_10": recall(found_seqs, truth),
                          "recall_at_10_ef_search_100": recall(wide, truth),
                          "raw_search": percentiles(samples["raw"]),
                          "cold_build_from_postgres_s": round(build, 2),
                          "snapshot_and_tune_s": round(tuned, 2),
                          "restart_from_snapshot_s": round(restart, 2),
                          "ef_tuned": storage.namespace(NS).ef,
                          "index_bytes": index_bytes}
    finally:
        storage.close()
    return out
