"""CKF benchmark: how ANN, CDR, CDGR, key lookup, ingestion and memory grow with the
number of facts, each against its "everything through the vector index" or brute-force
baseline measured in the same run (CRP-SPEC-035 §1, §5; issue #5).

    .venv/bin/python bench/ckf_bench.py                   # 10k and 100k facts (~10-15 min, 2 cores)
    .venv/bin/python bench/ckf_bench.py --sizes 10000     # quick
    .venv/bin/python bench/ckf_bench.py --sizes 10000,100000,1000000   # 1M: hours on 2 cores

Writes bench/results/ckf.json.  One store (edges on: kNN 20, the hashing embedder's
threshold) grows through the sizes; at each size:

ingest     facts/s of ``add_facts`` with given vectors (hnswlib insert, kNN links,
           LMDB records, term index), the hashing embedding timed apart.
ann        ``search_ann(vector, k=10)`` p50/p95 at the store's ef_search and a sweep
           of ef, recall@10 against exact search, hnswlib's own share, and the
           brute-force baseline (numpy: all similarities, top 10) with its ratio.
cdr, cdgr  ``cdr(vector, k=10)`` and ``cdgr(vector, k=10, hops=2)`` p50/p95; the first
           walk after growth (the adjacency, vector sketch and id arrays catching up)
           timed apart, with the memory they hold; the walk's reads done naively
           through the vector index, for the ratio.
key        ``lookup_key`` p50 (µs) and the naive way (embed the key, ANN top 10, load
           the facts, keep the one with that key) with its hit rate.
memory     RSS of the process and bytes on disk (LMDB, hnswlib files).

Data: hashed embeddings (1024 dims) of synthetic facts on n/40 topics whose words
overlap with the neighbouring topic (so the similarity graph has clusters and
bridges); queries are 3 words of one topic.  Sizes whose build would not fit
(projected from the measured ingest rate) are reported as projections, not run.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Queries run on one thread (ANN included); so does the brute-force baseline, which
# multi-threaded BLAS on a shared 2-core machine makes slower, not faster.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import percentiles, timed, write  # noqa: E402

from ctxrelay.knowledge.fabric import FactStore  # noqa: E402
from ctxrelay.text.embed import get_embedder  # noqa: E402

EF_SWEEP = (32, 50, 64, 100)


# -- data ----------------------------------------------------------------------------

SYLLABLES = "ka lo mi nu pe ra si tu vo ze ba de fi go hu ja ke li mo ny".split()


def word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(SYLLABLES, size=3))


def corpus(n: int, seed: int = 7, n_queries: int = 300) -> tuple[list[str], list[str]]:
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
               for _ in range(n_queries)]
    return facts, queries


# -- measurements --------------------------------------------------------------------------

def rss_mb() -> dict[str, float]:
    with open("/proc/self/status") as fh:
        fields = dict(line.split(":", 1) for line in fh if ":" in line)
    kb = lambda name: int(fields[name].split()[0])        # noqa: E731
    # RssFile is mostly LMDB's memory map (page cache the kernel can drop), RssAnon
    # the process's own heap: hnswlib graph and vectors, the adjacency, caches.
    return {"rss_mb": round(kb("VmRSS") / 1024, 1), "rss_anon_mb": round(kb("RssAnon") / 1024, 1),
            "rss_file_mb": round(kb("RssFile") / 1024, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def disk_mb(path: Path) -> dict[str, float]:
    def used(p: Path) -> int:          # allocated blocks: the LMDB map file is sparse
        return sum(f.stat().st_blocks * 512 for f in p.rglob("*") if f.is_file())
    return {"lmdb_mb": round(used(path / "db") / 2**20, 1),
            "hnsw_mb": round(used(path / "hnsw") / 2**20, 1)}


def exact_top(data: np.ndarray, q: np.ndarray, k: int = 10) -> np.ndarray:
    sims = data @ q
    top = np.argpartition(-sims, k)[:k]
    return top[np.argsort(-sims[top])]


def recall_at(store: FactStore, data: np.ndarray, ids: list[str], queries: np.ndarray,
              k: int = 10) -> float:
    hit = 0
    for q in queries:
        found = {h.fact_id for h in store.search_ann(q, k=k)}
        hit += len(found & {ids[i] for i in exact_top(data, q, k)})
    return round(hit / (k * len(queries)), 4)


def cpu_p50(fn, qvecs: np.ndarray, n: int) -> float:
    """p50 of the calling thread's CPU time (ms): on a shared machine the wall-clock
    figures include waiting for a core, this does not."""
    samples = []
    for q in (list(qvecs) * (1 + n // len(qvecs)))[:n]:
        t0 = time.thread_time()
        fn(q)
        samples.append(time.thread_time() - t0)
    return round(sorted(samples)[len(samples) // 2] * 1e3, 3)


def p50_us(samples: list[float]) -> float:
    return round(sorted(samples)[len(samples) // 2] * 1e6, 2)


def cycle(fn, qvecs: np.ndarray, n: int, warmup: int = 20) -> dict:
    it = iter(np.vstack([qvecs] * (2 + (n + warmup) // len(qvecs))))
    return percentiles(timed(lambda: fn(next(it)), repeat=n, warmup=warmup))


def naive_neighbourhood(store: FactStore, anchor_ids: list[str], hops: int) -> dict:
    """The walk's reads done through the vector index: one ANN query per expanded fact."""
    adj: dict[str, dict[str, float]] = {}
    frontier = list(anchor_ids)
    for _ in range(hops):
        nxt = []
        vecs = store.storage.vectors("default", frontier) if frontier else []
        for fid, vec in zip(frontier, vecs):
            if fid in adj:
                continue
            row = {h.fact_id: h.score for h in store.search_ann(vec, k=store.knn + 1)
                   if h.fact_id != fid and h.score >= store.edge_threshold}
            adj[fid] = row
            nxt += [x for x in row if x not in adj]
        frontier = nxt
    return adj


def measure(store: FactStore, data: np.ndarray, ids: list[str], qvecs: np.ndarray,
            n_queries: int, rng: np.random.Generator, emb) -> dict:
    """Everything measured at one size."""
    out: dict = {"ann": {"ef_sweep": {}}}
    ann = out["ann"]
    ann_indexes = store.live.ann
    ceiling = ann_indexes.ef_search
    for ef in EF_SWEEP:
        store.set_ef_search(ef)         # fixed ef (tuning off) for the sweep
        ann["ef_sweep"][ef] = {**cycle(lambda q: store.search_ann(q, k=10), qvecs, n_queries),
                               "recall10": recall_at(store, data, ids, qvecs[:200])}
    ann_indexes.ef_search, ann_indexes.auto_ef = ceiling, True     # the store's default again
    ann.update(cycle(lambda q: store.search_ann(q, k=10), qvecs, n_queries),
               recall10=recall_at(store, data, ids, qvecs[:200]))
    index = store.live.index("default").index
    ann.update(ef_search=index.ef_search, ef_search_ceiling=ceiling,
               cpu_p50_ms=cpu_p50(lambda q: store.search_ann(q, k=10), qvecs, n_queries),
               hnswlib_only=cycle(lambda q: index.search(q, 10), qvecs, n_queries))
    ann["brute_force"] = cycle(lambda q: exact_top(data, q), qvecs, min(n_queries, 100), 5)
    ann["speedup_vs_brute_p50"] = round(ann["brute_force"]["p50_ms"] / ann["p50_ms"], 1)

    out["cdr_k10"] = cycle(lambda q: store.cdr(q, k=10), qvecs, n_queries)
    t0 = time.perf_counter()
    store.cdgr(qvecs[0], k=10, hops=2)
    out["cdgr_first_walk_s"] = round(time.perf_counter() - t0, 3)
    out["cdgr_k10_hops2"] = cycle(lambda q: store.cdgr(q, k=10, hops=2), qvecs, n_queries)
    out["cdgr_k10_hops2"]["cpu_p50_ms"] = cpu_p50(lambda q: store.cdgr(q, k=10, hops=2),
                                                  qvecs, n_queries)
    out["cdr_k10"]["cpu_p50_ms"] = cpu_p50(lambda q: store.cdr(q, k=10), qvecs, n_queries)
    mem = store.live.walks.peek("default")
    graph = mem.graph
    out["cdgr_walk_memory_mb"] = {     # what the walk keeps in memory besides hnswlib's index
        "sketch": round((mem.sketch.nbytes if mem.sketch is not None else 0) / 2**20, 1),
        "adjacency": round(sum(a.nbytes for a in (graph._labels, graph._indptr, graph._nbrs,
                                                  graph._w)) / 2**20, 1) if graph else 0.0,
        "ids_and_heads": round((mem.id_seqs.nbytes + mem.id_names.nbytes
                                + 85 * len(mem.id_names)           # the id strings
                                + sys.getsizeof(mem.seq_of)        # id -> seq (ints cached)
                                + 28 * len(mem.seq_of)
                                + 33 * len(mem.id_names)) / 2**20, 1),
        "sketch_and_adjacency_tables": round(
            ((graph._pos.nbytes - graph._labels.nbytes) if graph else 0) / 2**20, 1)}
    results = [store.cdgr(q, k=10, hops=2) for q in qvecs[:100]]
    out["cdgr_connectors_per_query"] = round(float(np.mean(
        [sum(r.role == "connector" for r in res) for res in results])), 2)
    anchors = [a for a in ([r.fact_id for r in store.cdr(q, k=7)] for q in qvecs[:60]) if a]
    it = iter(anchors * 10)
    walk = percentiles(timed(lambda: store.live.neighbourhood("default", next(it), 2),
                             repeat=len(anchors), warmup=5))
    it = iter(anchors * 10)
    naive = percentiles(timed(lambda: naive_neighbourhood(store, next(it), 2),
                              repeat=min(len(anchors), 40), warmup=2))
    out["walk"] = {"stored_edges": walk, "through_ann": naive,
                   "speedup_p50": round(naive["p50_ms"] / max(walk["p50_ms"], 1e-6), 1)}

    keys = [f"budget_{word(rng)}_{len(ids)}_{i}" for i in range(500)]
    store.add_facts([{"content": f"{k}: the approved figure is {i * 1000} dollars.", "key": k}
                     for i, k in enumerate(keys)])
    order = [keys[i] for i in rng.integers(0, len(keys), 3000)]
    it = iter(order)
    ours = timed(lambda: store.lookup_key(next(it)), repeat=1500, warmup=100)
    hits = 0

    def naive_key(key: str):
        nonlocal hits
        match = next((r.fact for r in store.facts(key, k=10) if r.fact.key == key), None)
        hits += match is not None
        return match
    it = iter(order)
    naive_s = timed(lambda: naive_key(next(it)), repeat=300, warmup=20)
    out["key_lookup"] = {"p50_us": p50_us(ours), "naive_ann_filter_p50_us": p50_us(naive_s),
                         "naive_hit_rate": round(hits / 320, 3),
                         "speedup_p50": round(p50_us(naive_s) / p50_us(ours), 1)}
    return out


def growth(key_path: list[str], rows: dict) -> dict:
    """A metric at each size and its ratio from the smallest to the largest."""
    vals = {}
    for size, row in rows.items():
        v = row
        for k in key_path:
            v = v[k]
        vals[str(size)] = v
    sizes = list(vals)
    ratio = round(vals[sizes[-1]] / vals[sizes[0]], 2) if len(sizes) > 1 and vals[sizes[0]] else None
    return {"by_size": vals, "ratio_largest_to_smallest": ratio}


# Rows embedded or read back per call: the hashing embedder builds float64 rows, so
# embedding a million facts in one call needs 8 GB on top of the store (a 1M run
# was OOM-killed at 23.7 GB before this).
CHUNK = 50_000


def embed_chunked(emb: object, texts: list[str]) -> np.ndarray:
    out = np.empty((len(texts), emb.dim), dtype=np.float32)
    for i in range(0, len(texts), CHUNK):
        out[i:i + CHUNK] = emb.embed_batch(texts[i:i + CHUNK])
    return out


def stored_vectors(store: FactStore, ids: list[str], dim: int) -> np.ndarray:
    out = np.empty((len(ids), dim), dtype=np.float32)
    for i in range(0, len(ids), CHUNK):
        out[i:i + CHUNK] = store.storage.vectors("default", ids[i:i + CHUNK])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="store sizes (ascending)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1),
                    help="threads for bulk index builds (queries use one)")
    ap.add_argument("--max-build-s", type=float, default=900.0,
                    help="skip a size whose projected build time exceeds this")
    ap.add_argument("--project", default="1000000",
                    help="sizes not run to project from the largest one run (build time, memory)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    root = Path(args.dir or tempfile.mkdtemp(prefix="ckf-bench-"))
    t_start = time.perf_counter()
    emb = get_embedder("hashing")
    rng = np.random.default_rng(5)
    rows: dict = {}
    skipped: dict = {}
    try:
        facts, queries = corpus(sizes[-1], n_queries=args.queries)
        qvecs = emb.embed_batch(queries)
        store = FactStore(root / "ckf", embedder="hashing", recluster_every=None,
                          threads=args.threads)
        data = np.zeros((0, emb.dim), dtype=np.float32)
        ids: list[str] = []
        rate = None
        for size in sizes:
            lo = len(ids)
            if rate is not None and (size - lo) / rate > args.max_build_s:
                skipped[str(size)] = {
                    "projected_build_s": round((size - lo) / rate),
                    "projected_hnsw_mb": round(size * (emb.dim * 4 + 16 * 2 * 4 + 8 + 100) / 2**20),
                    "reason": f"over --max-build-s {args.max_build_s:g} at the ingest rate "
                              f"measured at {sizes[sizes.index(size) - 1]} facts"}
                print(f"skip {size}: {skipped[str(size)]}", flush=True)
                continue
            t0 = time.perf_counter()
            vecs = embed_chunked(emb, facts[lo:size])
            embed_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            ids += store.add_facts(facts[lo:size], vectors=vecs, batch_size=5000)
            store.flush()
            build_s = time.perf_counter() - t0
            rate = (size - lo) / build_s
            del vecs                               # the store holds them now
            new_rows = stored_vectors(store, ids[lo:], emb.dim)
            data = new_rows if not len(data) else np.vstack([data, new_rows])
            row = {"ingest": {"facts": size - lo, "build_s": round(build_s, 1),
                              "facts_per_s": round(rate), "embed_facts_per_s":
                              round((size - lo) / embed_s)}}
            st = store.stats()
            row["graph"] = {"edges": st.edges, "mean_degree": round(2 * st.edges / size, 2)}
            row.update(measure(store, data, ids, qvecs, args.queries, rng, emb))
            row["memory"] = {**rss_mb(), **disk_mb(root / "ckf"),
                             "bench_vectors_mb": round(data.nbytes / 2**20, 1),
                             "note": "rss includes the bench's own copy of the vectors "
                                     "(bench_vectors_mb) kept for the brute-force baseline"}
            rows[size] = row
            print(f"{size}: ingest {rate:.0f} facts/s; ann p50 {row['ann']['p50_ms']} ms "
                  f"(recall {row['ann']['recall10']}, brute {row['ann']['brute_force']['p50_ms']} "
                  f"ms); cdr {row['cdr_k10']['p50_ms']} ms; cdgr "
                  f"{row['cdgr_k10_hops2']['p50_ms']} ms; key {row['key_lookup']['p50_us']} µs; "
                  f"rss {row['memory']['rss_mb']} MB", flush=True)
        store.close()
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    largest = rows[max(rows)]
    for size in (int(x) for x in args.project.split(",") if x):
        if size in rows or str(size) in skipped:
            continue
        top = max(rows)
        skipped[str(size)] = {
            "projected_build_s": round((size - top) / largest["ingest"]["facts_per_s"]),
            "projected_rss_mb": round(largest["memory"]["rss_mb"] * size / top),
            "projected_hnsw_mb": round(largest["memory"]["hnsw_mb"] * size / top),
            "reason": f"not run: projected linearly from {top} facts (ingest rate, memory); "
                      "the build alone is far over the ~10 min budget on 2 shared cores"}
    summary = {
        "ann_p50_ms": growth(["ann", "p50_ms"], rows),
        "ann_recall10": growth(["ann", "recall10"], rows),
        "ann_brute_force_p50_ms": growth(["ann", "brute_force", "p50_ms"], rows),
        "ann_speedup_vs_brute": growth(["ann", "speedup_vs_brute_p50"], rows),
        "cdr_p50_ms": growth(["cdr_k10", "p50_ms"], rows),
        "cdgr_p50_ms": growth(["cdgr_k10_hops2", "p50_ms"], rows),
        "cdgr_cpu_p50_ms": growth(["cdgr_k10_hops2", "cpu_p50_ms"], rows),
        "ann_cpu_p50_ms": growth(["ann", "cpu_p50_ms"], rows),
        "ann_ef_search": growth(["ann", "ef_search"], rows),
        "key_lookup_p50_us": growth(["key_lookup", "p50_us"], rows),
        "ingest_facts_per_s": growth(["ingest", "facts_per_s"], rows),
        "rss_mb": growth(["memory", "rss_mb"], rows),
        "rss_anon_mb": growth(["memory", "rss_anon_mb"], rows),
        "largest_size": max(rows),
        "ann_target_met_at_largest": largest["ann"]["p50_ms"] <= 1.0,
        "cdgr_target_met_at_largest": largest["cdgr_k10_hops2"]["p50_ms"] <= 3.0,
        "ann_recall_ok": all(r["ann"]["recall10"] >= 0.95 for r in rows.values()),
    }
    path = write("ckf", {"command": "bench/ckf_bench.py " + " ".join(argv or sys.argv[1:]),
                         "threads": args.threads, "embedder": emb.model_id, "dim": emb.dim,
                         "data": "hashed synthetic facts (n/40 topics, bridging words)",
                         "summary": summary, "sizes": {str(k): v for k, v in rows.items()},
                         "skipped": skipped, "load_avg_at_end": os.getloadavg(),
                         "wall_s": round(time.perf_counter() - t_start, 1)})
    print(f"wrote {path}")
    for k, v in summary.items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main(argv=None))
