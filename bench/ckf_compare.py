"""Two versions of the CKF side by side on the same stores: ANN, CDR, CDGR, key lookup
and ingestion, measured in alternating processes of one run.

    .venv/bin/python bench/ckf_compare.py --a /work/main/python --b python
    .venv/bin/python bench/ckf_compare.py --a OLD/python --b NEW/python --sizes 10000 --rounds 4

Each measurement runs in a fresh process whose ``PYTHONPATH`` is one version's
``python`` directory (the code under test; nothing else differs), the versions
alternating A, B, B, A, A, B, ... so that drift in the machine's load falls on
both.  Writes ``bench/results/<--out>.json``.

ingest   at the smallest size, each round builds a store with each version
         (``add_facts`` with given vectors, 5,000 a batch, then ``flush``): facts/s.
query    one store per size, built once by version A (the on-disk format is the
         same, so both open it and load the same hnswlib graph); each process
         opens it, warms up, times the first CDGR walk (in-memory structures
         built), then ``search_ann(k=10)``, ``cdr(k=10)``, ``cdgr(k=10, hops=2)``
         (wall and thread-CPU p50/p95) and ``lookup_key``, and hashes what the
         queries returned: the versions must return the same facts and scores.

Figures are p50/p95 per process; the summary gives, per metric, the median over
rounds of each version's p50 and of the per-round ratio B/A.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = Path(__file__).resolve().parent
SYLLABLES = "ka lo mi nu pe ra si tu vo ze ba de fi go hu ja ke li mo ny".split()
N_KEYS = 500


def corpus(n: int, seed: int = 7, n_queries: int = 300) -> tuple[list[str], list[str]]:
    """The facts and queries of bench/ckf_bench.py (n/40 topics with bridging words)."""
    import numpy as np
    rng = np.random.default_rng(seed)

    def word() -> str:
        return "".join(rng.choice(SYLLABLES, size=3))
    n_topics = max(4, n // 40)
    vocab = [[word() for _ in range(12)] for _ in range(n_topics)]
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


def keys(n: int) -> list[str]:
    return [f"budget_key_{n}_{i}" for i in range(N_KEYS)]


# -- worker: runs with one version's code on sys.path -----------------------------------------

def pct(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    at = lambda p: s[min(len(s) - 1, int(p * len(s)))]   # noqa: E731
    return {"p50_ms": round(at(0.5) * 1e3, 4), "p95_ms": round(at(0.95) * 1e3, 4)}


def timed(fn, args: list, *, cpu: bool = False) -> list[float]:
    clock = time.thread_time if cpu else time.perf_counter
    out = []
    for a in args:
        t0 = clock()
        fn(a)
        out.append(clock() - t0)
    return out


def work_build(path: str, n: int, threads: int) -> dict:
    import numpy as np
    from ctxrelay.knowledge.fabric import FactStore
    from ctxrelay.text.embed import get_embedder
    facts, _ = corpus(n)
    emb = get_embedder("hashing")
    vecs = np.vstack([emb.embed_batch(facts[i:i + 20000]) for i in range(0, n, 20000)])
    store = FactStore(path, embedder="hashing", recluster_every=None, threads=threads)
    t0 = time.perf_counter()
    store.add_facts(facts, vectors=vecs, batch_size=5000)
    store.flush()
    build_s = time.perf_counter() - t0
    store.add_facts([{"content": f"{k}: the approved figure is {i * 1000} dollars.", "key": k}
                     for i, k in enumerate(keys(n))])
    store.close()
    return {"facts_per_s": round(n / build_s, 1), "build_s": round(build_s, 2)}


def work_query(path: str, n: int, n_queries: int) -> dict:
    import numpy as np
    from ctxrelay.knowledge.fabric import FactStore
    from ctxrelay.text.embed import get_embedder
    _, queries = corpus(n, n_queries=n_queries)
    qvecs = list(get_embedder("hashing").embed_batch(queries))
    t0 = time.perf_counter()
    store = FactStore.open(path, embedder="hashing", recluster_every=None)
    out: dict = {}
    store.search_ann(qvecs[0], k=10)
    out["open_s"] = round(time.perf_counter() - t0, 3)
    for q in qvecs[:30]:
        store.search_ann(q, k=10)
        store.cdr(q, k=10)
    t0 = time.perf_counter()
    store.cdgr(qvecs[0], k=10, hops=2)
    out["cdgr_first_walk_s"] = round(time.perf_counter() - t0, 3)
    for q in qvecs[:30]:
        store.cdgr(q, k=10, hops=2)
    digest = hashlib.sha256()
    for q in qvecs[:60]:
        digest.update(json.dumps([[h.to_dict() for h in store.search_ann(q, k=10)],
                                  [r.to_dict() for r in store.cdr(q, k=10)],
                                  [r.to_dict() for r in store.cdgr(q, k=10, hops=2)]],
                                 sort_keys=True).encode())
    out["results_sha256"] = digest.hexdigest()
    ops = {"ann": lambda q: store.search_ann(q, k=10), "cdr": lambda q: store.cdr(q, k=10),
           "cdgr": lambda q: store.cdgr(q, k=10, hops=2)}
    for name, fn in ops.items():
        out[name] = {**pct(timed(fn, qvecs)),
                     "cpu_p50_ms": pct(timed(fn, qvecs, cpu=True))["p50_ms"]}
    rng = np.random.default_rng(3)
    order = [keys(n)[i] for i in rng.integers(0, N_KEYS, 3000)]
    for k in order[:100]:
        assert store.lookup_key(k) is not None
    out["key"] = pct(timed(store.lookup_key, order))
    store.close()
    return out


def worker(argv: list[str]) -> int:
    import ctxrelay
    mode, path, n = argv[0], argv[1], int(argv[2])
    result = work_build(path, n, int(argv[3])) if mode == "build" else \
        work_query(path, n, int(argv[3]))
    result["code"] = str(Path(ctxrelay.__file__).resolve().parent.parent)
    print(json.dumps(result), flush=True)
    return 0


# -- driver --------------------------------------------------------------------------------

def spawn(code: str, *args: object) -> dict:
    env = {**os.environ, "PYTHONPATH": code}
    done = subprocess.run([sys.executable, __file__, "--worker", *map(str, args)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"worker {args} with {code} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["code"] != str(Path(code).resolve()):
        raise SystemExit(f"worker imported ctxrelay from {result['code']}, not {code}")
    return result


def order(r: int) -> tuple[str, str]:
    """A B, B A, A B, ...: each version goes first as often as the other."""
    return ("a", "b") if r % 2 == 0 else ("b", "a")


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 4)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        return worker(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="python directory of version A (baseline)")
    ap.add_argument("--b", required=True, help="python directory of version B")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--rounds", type=int, default=6, help="query processes per version and size")
    ap.add_argument("--ingest-rounds", type=int, default=2)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--threads", type=int, default=2, help="threads for index builds")
    ap.add_argument("--out", default="ckf_compare")
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    code = {"a": str(Path(args.a).resolve()), "b": str(Path(args.b).resolve())}
    sizes = sorted(int(s) for s in args.sizes.split(","))
    root = Path(args.dir or tempfile.mkdtemp(prefix="ckf-compare-"))
    t_start = time.perf_counter()
    out: dict = {"a": code["a"], "b": code["b"], "sizes": {}, "ingest": {"a": [], "b": []}}
    try:
        small = sizes[0]
        for r in range(args.ingest_rounds):
            for v in order(r):
                path = root / f"ingest-{v}-{r}"
                got = spawn(code[v], "build", path, small, args.threads)
                out["ingest"][v].append(got)
                print(f"ingest {small} {v}: {got['facts_per_s']} facts/s", flush=True)
                if not (v == "a" and r == 0):
                    shutil.rmtree(path, ignore_errors=True)
        for size in sizes:
            path = root / f"ingest-a-0" if size == small else root / f"store-{size}"
            if size != small:
                got = spawn(code["a"], "build", path, size, args.threads)
                print(f"built {size} with A: {got['facts_per_s']} facts/s", flush=True)
            runs: dict[str, list[dict]] = {"a": [], "b": []}
            for r in range(args.rounds):
                for v in order(r):
                    got = spawn(code[v], "query", path, size, args.queries)
                    runs[v].append(got)
                    print(f"{size} {v}: ann {got['ann']['p50_ms']} cdr {got['cdr']['p50_ms']} "
                          f"cdgr {got['cdgr']['p50_ms']} ms, key {got['key']['p50_ms']} ms",
                          flush=True)
            summary = {}
            for metric in ("ann", "cdr", "cdgr", "key"):
                for stat in ("p50_ms", "p95_ms", "cpu_p50_ms"):
                    if stat not in runs["a"][0][metric]:
                        continue
                    a = [x[metric][stat] for x in runs["a"]]
                    b = [x[metric][stat] for x in runs["b"]]
                    summary[f"{metric}_{stat}"] = {
                        "a_median": med(a), "b_median": med(b),
                        "ratio_b_over_a_median": med([y / x for x, y in zip(a, b)])}
            summary["cdgr_first_walk_s"] = {
                "a_median": med([x["cdgr_first_walk_s"] for x in runs["a"]]),
                "b_median": med([x["cdgr_first_walk_s"] for x in runs["b"]])}
            summary["same_results"] = len({x["results_sha256"] for x in runs["a"] + runs["b"]}) == 1
            out["sizes"][str(size)] = {"summary": summary, "runs": runs}
            shutil.rmtree(path, ignore_errors=True)
        ia = [x["facts_per_s"] for x in out["ingest"]["a"]]
        ib = [x["facts_per_s"] for x in out["ingest"]["b"]]
        out["ingest"]["summary"] = {"size": small, "a_median": med(ia), "b_median": med(ib),
                                    "ratio_b_over_a_median": med([y / x for x, y in zip(ia, ib)])}
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    sys.path.insert(0, str(HERE))
    from _common import write
    out["command"] = "bench/ckf_compare.py " + " ".join(argv)
    out["load_avg_at_end"] = os.getloadavg()
    out["wall_s"] = round(time.perf_counter() - t_start, 1)
    path = write(args.out, out)
    print(f"wrote {path}")
    print(json.dumps({k: v["summary"] for k, v in out["sizes"].items()}, indent=1))
    print(json.dumps(out["ingest"]["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
