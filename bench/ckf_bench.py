"""CKF benchmark: ANN, key lookup and CDGR latency against "everything through the
vector index" baselines (CRP-SPEC-035 §1, §5), all in one run so ratios compare.

    .venv/bin/python bench/ckf_bench.py                 # 10k and 100k facts (~5-8 min, 2 cores)
    .venv/bin/python bench/ckf_bench.py --sizes 10000   # quick

Writes bench/results/ckf.json.  What is measured:

ann        ``FactStore.search_ann(vector, k=10)`` p50/p95 at each size on the
           embedder's own output (hashed embeddings, 1024 dims, of synthetic
           facts; embedding timed apart), ef_search 100 (SPEC-009 §3.2) and a
           sweep, recall@10 against brute force; hnswlib's own share; and, at
           the smallest size, uniform random unit vectors (HNSW's worst case:
           in 1024 dimensions all distances concentrate).  Query embedding is
           timed separately (``embed_query``).
key        ``lookup_key`` p50 in µs, and the naive way: embed the key, ANN top
           10, load the facts, keep the one with that key (its hit rate too).
cdgr       ``cdgr(vector, k=10, hops=2)`` p50 on a text corpus whose hashed
           embeddings form a similarity graph, with ``cdr`` for reference, and
           the graph-walk step done naively through the vector index (each
           expanded fact's neighbours found by an ANN query instead of read
           from the stored edges).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import percentiles, timed, write  # noqa: E402

from ctxrelay.ckf import FactStore  # noqa: E402
from ctxrelay.embed import get_embedder  # noqa: E402


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def recall_at(store: FactStore, data: np.ndarray, ids: list[str], queries: np.ndarray,
              k: int = 10) -> float:
    truth = np.argsort(-(queries @ data.T), axis=1)[:, :k]
    hit = 0
    for q, row in zip(queries, truth):
        found = {h.fact_id for h in store.search_ann(q, k=k)}
        hit += len(found & {ids[i] for i in row})
    return round(hit / (k * len(queries)), 4)


def p50_us(samples: list[float]) -> float:
    return round(sorted(samples)[len(samples) // 2] * 1e6, 2)


def bench_ann(root: Path, sizes: list[int], n_queries: int, threads: int) -> dict:
    """ANN on the embedder's own output: hashed embeddings of a synthetic corpus
    (its embedding time is reported apart).  Edges are not built for this store
    (knn=0): bench_graph measures them."""
    emb = get_embedder("hashing")
    facts, queries = corpus(sizes[-1], seed=11)
    t0 = time.perf_counter()
    data = emb.embed_batch(facts)
    embed_s = time.perf_counter() - t0
    qvecs = emb.embed_batch(queries)[:n_queries]
    store = FactStore(root / "ann", embedder="hashing", recluster_every=None, threads=threads,
                      knn=0)
    ids: list[str] = []
    out: dict = {"dim": emb.dim, "model_id": emb.model_id, "data": "hashed synthetic facts",
                 "embed_facts_per_s": round(len(facts) / embed_s), "sizes": {}}
    for size in sizes:
        lo = len(ids)
        t0 = time.perf_counter()
        ids += store.add_facts(facts[lo:size], vectors=data[lo:size], batch_size=5000)
        store.flush()
        row: dict = {"build_s": round(time.perf_counter() - t0, 1), "added": size - lo,
                     "ef_sweep": {}}
        for ef in (50, 100, 200):
            store.backend.set_ef_search(ef)
            it = iter(np.vstack([qvecs, qvecs]))
            samples = timed(lambda: store.search_ann(next(it), k=10), repeat=len(qvecs),
                            warmup=min(50, len(qvecs)))
            row["ef_sweep"][ef] = {**percentiles(samples),
                                   "recall10": recall_at(store, data[:size], ids, qvecs[:200])}
        store.backend.set_ef_search(100)
        row.update(p50_ms=row["ef_sweep"][100]["p50_ms"], p95_ms=row["ef_sweep"][100]["p95_ms"],
                   recall10=row["ef_sweep"][100]["recall10"])
        it = iter(np.vstack([qvecs, qvecs]))
        row["hnswlib_only_p50_ms"] = percentiles(timed(
            lambda: store.backend._mems["default"].index.search(next(it), 10),
            repeat=len(qvecs), warmup=20))["p50_ms"]
        out["sizes"][size] = row
        print(f"ann {size}: p50 {row['p50_ms']} ms (hnswlib alone {row['hnswlib_only_p50_ms']}), "
              f"recall@10 {row['recall10']}, build {row['build_s']} s", flush=True)
    store.close()
    # the worst case: uniform random unit vectors (no low-dimensional structure)
    rng = np.random.default_rng(2024)
    n = sizes[0]
    rand = unit_rows(rng, n, emb.dim)
    rq = unit_rows(rng, n_queries, emb.dim)
    with FactStore(root / "ann-uniform", embedder="hashing", recluster_every=None,
                   threads=threads, knn=0) as rs:
        t0 = time.perf_counter()
        rids = rs.add_facts([f"random fact {i}" for i in range(n)], vectors=rand, batch_size=5000)
        build = time.perf_counter() - t0
        it = iter(np.vstack([rq, rq]))
        out["uniform_random"] = {"size": n, "build_s": round(build, 1),
                                 **percentiles(timed(lambda: rs.search_ann(next(it), k=10),
                                                     repeat=n_queries, warmup=20)),
                                 "recall10": recall_at(rs, rand, rids, rq[:200])}
    print(f"ann uniform {n}: p50 {out['uniform_random']['p50_ms']} ms, recall@10 "
          f"{out['uniform_random']['recall10']}", flush=True)
    texts = [f"what do we know about topic {i} and its budget" for i in range(200)]
    it = iter(texts * 2)
    out["embed_query"] = percentiles(timed(lambda: emb.embed_batch([next(it)]), repeat=200))
    return out


# -- a text corpus whose hashed embeddings form a graph --------------------------------

SYLLABLES = "ka lo mi nu pe ra si tu vo ze ba de fi go hu ja ke li mo ny".split()


def word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(SYLLABLES, size=3))


def corpus(n: int, seed: int = 7) -> tuple[list[str], list[str]]:
    """Facts on n/40 topics; each fact mixes its topic's words with a neighbouring
    topic's, so the similarity graph has clusters and bridges between them."""
    rng = np.random.default_rng(seed)
    n_topics = max(4, n // 40)
    vocab = [[word(rng) for _ in range(12)] for _ in range(n_topics)]
    facts = []
    for i in range(n):
        t = i % n_topics
        other = (t + 1) % n_topics
        words = list(rng.choice(vocab[t], size=4, replace=False)) + \
            list(rng.choice(vocab[other], size=2, replace=False))
        rng.shuffle(words)
        facts.append(f"Fact {i}: " + " ".join(words) + ".")
    queries = [" ".join(rng.choice(vocab[int(rng.integers(n_topics))], size=3, replace=False))
               for _ in range(300)]
    return facts, queries


def naive_neighbourhood(store: FactStore, anchor_ids: list[str], hops: int) -> dict:
    """The walk's reads done through the vector index: one ANN query per expanded fact."""
    adj: dict[str, dict[str, float]] = {}
    frontier = list(anchor_ids)
    for _ in range(hops):
        nxt = []
        vecs = store.backend.vectors("default", frontier) if frontier else []
        for fid, vec in zip(frontier, vecs):
            if fid in adj:
                continue
            row = {h.fact_id: h.score for h in store.search_ann(vec, k=store.knn + 1)
                   if h.fact_id != fid and h.score >= store.edge_threshold}
            adj[fid] = row
            nxt += [x for x in row if x not in adj]
        frontier = nxt
    return adj


def bench_graph(root: Path, n_facts: int, n_queries: int, threads: int) -> dict:
    emb = get_embedder("hashing")
    facts, queries = corpus(n_facts)
    store = FactStore(root / "graph", embedder="hashing", recluster_every=None, threads=threads)
    t0 = time.perf_counter()
    vecs = emb.embed_batch(facts)
    embed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = store.add_facts(facts, vectors=vecs, batch_size=2000)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    comms = store.recluster()
    leiden_s = time.perf_counter() - t0
    stats = store.stats()
    qvecs = emb.embed_batch(queries)
    out: dict = {"facts": n_facts, "edges": stats.edges,
                 "mean_degree": round(2 * stats.edges / n_facts, 2),
                 "communities": len(comms), "embed_facts_s": round(embed_s, 2),
                 "build_s": round(build_s, 1), "recluster_s": round(leiden_s, 2)}

    def cycle(fn):
        it = iter(np.vstack([qvecs, qvecs]))
        return percentiles(timed(lambda: fn(next(it)), repeat=n_queries,
                                 warmup=min(30, n_queries)))

    out["cdr_k10"] = cycle(lambda q: store.cdr(q, k=10))
    out["cdgr_k10_hops2"] = cycle(lambda q: store.cdgr(q, k=10, hops=2))
    results = [store.cdgr(q, k=10, hops=2) for q in qvecs[:100]]
    out["connectors_per_query"] = round(float(np.mean(
        [sum(r.role == "connector" for r in res) for res in results])), 2)
    out["results_per_query"] = round(float(np.mean([len(r) for r in results])), 2)
    anchors = [[r.fact_id for r in store.cdr(q, k=7)] for q in qvecs[:100]]
    anchors = [a for a in anchors if a]
    it = iter(anchors * 10)
    walk = percentiles(timed(lambda: store.backend.neighbourhood("default", next(it), 2),
                             repeat=len(anchors) * 2, warmup=5))
    it = iter(anchors * 10)
    naive = percentiles(timed(lambda: naive_neighbourhood(store, next(it), 2),
                              repeat=len(anchors) * 2, warmup=5))
    out["walk_stored_edges"] = walk
    out["walk_through_ann"] = naive
    out["walk_speedup_p50"] = round(naive["p50_ms"] / max(walk["p50_ms"], 1e-6), 1)
    print(f"graph {n_facts}: {stats.edges} edges, cdgr p50 {out['cdgr_k10_hops2']['p50_ms']} ms, "
          f"cdr p50 {out['cdr_k10']['p50_ms']} ms, walk {walk['p50_ms']} ms vs naive "
          f"{naive['p50_ms']} ms", flush=True)

    # keys: exact lookup vs embed + ANN + filter
    rng = np.random.default_rng(5)
    keys = [f"budget_{word(rng)}_{i}" for i in range(1000)]
    kids = store.add_facts([{"content": f"{k}: the approved figure is {i * 1000} dollars.",
                             "key": k} for i, k in enumerate(keys)])
    order = [keys[i] for i in rng.integers(0, len(keys), 2000)]
    it = iter(order)
    ours = timed(lambda: store.lookup_key(next(it)), repeat=1500, warmup=100)
    it = iter(order)
    raw = timed(lambda: store.backend.lookup_key("default", next(it)), repeat=1500, warmup=100)
    hits = 0

    def naive_key(key: str):
        nonlocal hits
        found = store.facts(key, k=10)
        match = next((r.fact for r in found if r.fact.key == key), None)
        hits += match is not None
        return match
    it = iter(order)
    naive_s = timed(lambda: naive_key(next(it)), repeat=500, warmup=20)
    hits_rate = hits / 520
    out["key_lookup"] = {"p50_us": p50_us(ours), "backend_p50_us": p50_us(raw),
                         "naive_ann_filter_p50_us": p50_us(naive_s),
                         "naive_hit_rate": round(hits_rate, 3),
                         "speedup_p50": round(p50_us(naive_s) / p50_us(ours), 1),
                         "keyed_facts": len(kids)}
    print(f"key lookup p50 {out['key_lookup']['p50_us']} µs vs naive "
          f"{out['key_lookup']['naive_ann_filter_p50_us']} µs "
          f"(hit rate {out['key_lookup']['naive_hit_rate']})", flush=True)
    store.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="ANN store sizes (ascending)")
    ap.add_argument("--graph-facts", type=int, default=10000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                    help="threads for bulk index builds (queries use one)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    root = Path(args.dir or tempfile.mkdtemp(prefix="ckf-bench-"))
    t0 = time.perf_counter()
    try:
        graph = bench_graph(root, args.graph_facts, args.queries, args.threads)
        ann = bench_ann(root, sizes, args.queries, args.threads)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    largest = ann["sizes"][sizes[-1]]
    summary = {
        "ann_p50_ms": {str(s): ann["sizes"][s]["p50_ms"] for s in sizes},
        "ann_target_met_at_largest": largest["p50_ms"] <= 1.0,
        "ann_recall10": {str(s): ann["sizes"][s]["recall10"] for s in sizes},
        "ann_uniform_random": {k: ann["uniform_random"][k] for k in ("size", "p50_ms", "recall10")},
        "embed_query_p50_ms": ann["embed_query"]["p50_ms"],
        "key_lookup_p50_us": graph["key_lookup"]["p50_us"],
        "key_lookup_speedup_vs_ann_filter": graph["key_lookup"]["speedup_p50"],
        "cdgr_p50_ms": graph["cdgr_k10_hops2"]["p50_ms"],
        "cdgr_target_met": graph["cdgr_k10_hops2"]["p50_ms"] <= 3.0,
        "walk_speedup_vs_ann": graph["walk_speedup_p50"],
    }
    path = write("ckf", {"command": "bench/ckf_bench.py " + " ".join(argv or sys.argv[1:]),
                         "threads": args.threads, "summary": summary, "ann": ann,
                         "graph": graph, "wall_s": round(time.perf_counter() - t0, 1)})
    print(f"wrote {path}")
    for k, v in summary.items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
