"""Storage engine through the public API: the router's primitives vs. one vector index.

For each scale (10k and 100k facts *and* turns) one store is built -- a CKF of
N facts, each with a key (hashing embedder, ``knn=0``: no similarity edges,
which none of the accesses here reads), and a session of N turns imported as
JSON Lines (one transaction; the import hook fills the rolling log) plus 20
tool outputs -- and then each access type is timed, one call per sample,
p50/p95 in microseconds (the four pointer primitives from Python are taken in
interleaved rounds, see :func:`sample_rounds`):

from Python (``ctxrelay.Runtime``, so Python -> Prolog -> Python)
    ``hot_cache_hit``     ``Runtime.retrieve(q)`` for a query retrieved before
    ``rolling_last_n``    ``Runtime.recent(session, 8)``
    ``exact_lookup``      ``Runtime.fact(key)``
    ``scratch_summary``   ``Runtime.scratch(session, scratch_id)``
    ``ckf_ann``           ``Runtime.facts(q, k=10)`` (embeds the query every call)
    ``blended``           ``Runtime.retrieve(q, access=["continue", "tool_reference",
                          "explore"], cache=False)``: log + pointer + CDR, concurrent
    ``search_miss``       ``Runtime.retrieve(q, cache=False)``: ANN + BM25, fused

from Prolog (a swipl process, ``bin/ctxrelay-swipl``; each call timed with
get_time/1 around it, so the janus crossing Prolog -> Python is included)
    ``retrieve/4`` hit, ``recent_turns/4`` (dicts) and ``recent_turns/5``
    (``as(python)``), ``fact_get/4``, ``scratch_get/4`` (dicts) and
    ``scratch_get/5`` (``as(python)``), ``facts_search/4``, ``retrieve/4`` blended.

where the time goes (Python, no Prolog)
    the same work called on the Python objects directly (``Router.recent``,
    ``FactStore.lookup_key``, ``ScratchStore.get``, ``ScratchStore.entry_dict``
    -- what ``Runtime.scratch`` reads -- and ``Router.execute`` of a cached
    plan), so the facade's overhead -- janus crossing and conversions -- is the
    difference; and ``embed_query``, the hashing embedder on one query.

the naive baseline: every access through a vector index (same run)
    one hnswlib index over the N turns (the tool outputs are turns too) beside
    the CKF's own index over the N facts; each access embeds its text and asks
    the index: "last 8 turns" = 8 nearest turns to the session's last message,
    key lookup = nearest fact to the key text, scratch summary = nearest turn to
    the scratch id, a repeat query = ANN again, blended = three ANN queries.
    ``speedup`` = naive p50 / router p50 per access type.

    .venv/bin/python bench/storage_bench.py              # 10k and 100k
    .venv/bin/python bench/storage_bench.py --quick --out storage_quick   # 10k, fewer samples
    nice -n 10 .venv/bin/python bench/storage_bench.py --sizes 10000,100000,1000000 \
        --primitives-only --out storage_1m

``--primitives-only`` times only the pointer primitives (hot cache hit,
rolling last-N, exact key lookup, scratch summary, and their direct Python
costs) and builds the CKF's HNSW graph with M=8, ef_construction=16: none of
those accesses reads the graph, and a full-quality graph over 1M 1024-d
vectors takes over an hour to build on 2 shared cores.  ANN, blended and
search figures and the naive baseline (an HNSW index over the turns) are
left out of such a run rather than measured on a weak graph.

Targets (issue #5): hot cache, rolling last-N, exact lookup and scratch summary
p50 <= 50 us from Python (<= 100 us from Prolog); blended p50 <= 5 ms.  The
machine is shared: ``load_avg`` is recorded with each scale.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import git_rev, write  # noqa: E402
from ckf_bench import corpus  # noqa: E402

from ctxrelay import Runtime  # noqa: E402
from ctxrelay.knowledge.fabric import FactStore  # noqa: E402
from ctxrelay.retrieval.router import Router  # noqa: E402

TARGET_FAST_US = 50.0
TARGET_FAST_PROLOG_US = 100.0
TARGET_BLEND_MS = 5.0
N_RECENT = 8
N_TOOLS = 20
SESSION = "bench"
BLEND = ["continue", "tool_reference", "explore"]
FULL_HNSW = {"m": 16, "ef_construction": 200}
CHEAP_HNSW = {"m": 8, "ef_construction": 16}      # --primitives-only: no access reads it


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sample_us(fn: Callable[[int], Any], repeat: int, warmup: int = 50) -> dict[str, float]:
    """``fn(i)`` per sample; p50/p95/mean in microseconds."""
    for i in range(warmup):
        fn(i)
    gc.collect()
    clock = time.perf_counter_ns
    out = []
    for i in range(repeat):
        t0 = clock()
        fn(i)
        out.append(clock() - t0)
    return summary([x / 1000 for x in out])


def sample_rounds(fns: dict[str, Callable[[int], Any]], repeat: int, rounds: int = 4
                  ) -> dict[str, dict[str, Any]]:
    """Like :func:`sample_us` for several accesses, taken in ``rounds`` turns
    (A B C D, A B C D, ...) so a burst of load from other work on this shared
    machine falls on every access alike instead of on whichever ran then.
    The summary pools all samples; ``round_p50_us`` shows the spread."""
    per = max(1, repeat // rounds)
    pooled: dict[str, list[float]] = {name: [] for name in fns}
    by_round: dict[str, list[float]] = {name: [] for name in fns}
    clock = time.perf_counter_ns
    for r in range(rounds):
        for name, fn in fns.items():
            for i in range(50 if r == 0 else 10):
                fn(i)
            gc.collect()
            got = []
            for i in range(r * per, (r + 1) * per):
                t0 = clock()
                fn(i)
                got.append((clock() - t0) / 1000)
            pooled[name].extend(got)
            by_round[name].append(summary(got)["p50_us"])
    return {name: {**summary(pooled[name]), "round_p50_us": by_round[name]} for name in fns}


def summary(us: Sequence[float]) -> dict[str, float]:
    us = sorted(us)

    def pct(p: float) -> float:
        return round(us[min(len(us) - 1, int(round(p / 100 * (len(us) - 1))))], 2)
    return {"n": len(us), "p50_us": pct(50), "p95_us": pct(95),
            "mean_us": round(statistics.fmean(us), 2)}


# -- building a store ----------------------------------------------------------------

def turn_texts(n: int, seed: int = 11) -> list[str]:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(2000)]
    return [f"turn {i}: " + " ".join(rng.choice(words, size=16)) for i in range(n)]


def write_session_jsonl(path: Path, texts: list[str]) -> Path:
    """The session as an export file (a file, not one big str through janus)."""
    with open(path, "w", encoding="utf-8") as out:
        for line in session_lines(texts):
            out.write(line + "\n")
    return path


def session_lines(texts: list[str]) -> Iterator[str]:
    yield json.dumps({"type": "session", "format": "ctxrelay.storage.lmdb.transcript/1",
                      "session_id": SESSION, "created": "2026-01-01T00:00:00.000000Z",
                      "metadata": {}, "archived": False, "turn_count": len(texts)})
    for i, text in enumerate(texts, start=1):
        yield json.dumps({
            "type": "turn", "session_id": SESSION, "turn_id": i,
            "role": "user" if i % 2 else "assistant", "content": text, "name": None,
            "tool_call_id": None, "metadata": {},
            "timestamp": f"2026-01-01T00:00:{i % 60:02d}.{i % 1000000:06d}Z", "key": None,
            "tokens": 0, "tokens_exact": True})


def build(root: Path, n: int, hnsw: dict[str, int]) -> dict[str, Any]:
    t0 = time.perf_counter()
    facts, queries = corpus(n)
    fs = FactStore(root / "ckf", embedder="hashing", recluster_every=None, knn=0, threads=2,
                   **hnsw)
    fs.add_facts([{"content": f, "key": f"k{i}"} for i, f in enumerate(facts)],
                 batch_size=5000, progress=False)
    fs.close()
    t_facts = time.perf_counter() - t0
    texts = turn_texts(n)
    export = write_session_jsonl(root / "session.jsonl", texts)
    rt = Runtime(root)
    t1 = time.perf_counter()
    rt.import_jsonl(export)
    t_turns = time.perf_counter() - t1
    export.unlink()
    scratch_ids = [rt.record_tool_output(SESSION, "sql", {"q": f"select {i}"},
                                         "id,value\n" + "\n".join(f"{j},{j * i}" for j in range(50)),
                                         freshness="STABLE")
                   for i in range(N_TOOLS)]
    return {"rt": rt, "queries": queries, "facts": facts, "texts": texts,
            "scratch_ids": scratch_ids,
            "build_s": {"facts": round(t_facts, 1), "turns_import": round(t_turns, 1)}}


def naive_turn_index(texts: list[str], emb: Any) -> Any:
    import hnswlib
    vecs = emb.embed_batch(texts)
    index = hnswlib.Index(space="cosine", dim=vecs.shape[1])
    index.init_index(max_elements=len(texts), ef_construction=200, M=16, random_seed=100)
    index.set_num_threads(2)
    index.add_items(vecs, np.arange(len(texts)))
    index.set_ef(100)
    return index


# -- one scale -------------------------------------------------------------------------

def bench_python(data: dict[str, Any], repeat: int, slow_repeat: int, *,
                 primitives_only: bool = False) -> dict[str, Any]:
    rt: Runtime = data["rt"]
    queries, sids = data["queries"], data["scratch_ids"]
    n = len(data["facts"])
    keys = [f"k{(i * 7919) % n}" for i in range(200)]
    hot = queries[:50]
    for q in hot:
        rt.retrieve(q)                                   # fill the cache
    assert rt.retrieve(hot[0]).cache_hit
    assert rt.recent(SESSION, N_RECENT) == rt.last(SESSION, N_RECENT)
    out = sample_rounds({
        "hot_cache_hit": lambda i: rt.retrieve(hot[i % 50]),
        "rolling_last_n": lambda i: rt.recent(SESSION, N_RECENT),
        "exact_lookup": lambda i: rt.fact(keys[i % 200]),
        "scratch_summary": lambda i: rt.scratch(SESSION, sids[i % N_TOOLS]),
    }, repeat)
    if primitives_only:
        return out
    out |= {
        "ckf_ann": sample_us(lambda i: rt.facts(queries[50 + i % 250], k=10), slow_repeat),
        "blended": sample_us(lambda i: rt.retrieve(queries[i % 300], access=BLEND,
                                                    session_id=SESSION, cache=False),
                             slow_repeat),
        "search_miss": sample_us(lambda i: rt.retrieve(queries[i % 300], cache=False),
                                 slow_repeat),
    }
    got = rt.retrieve(queries[0], access=BLEND, session_id=SESSION, cache=False)
    out["blended"]["store_used"] = got.store_used
    out["blended"]["timings_ms_one_call"] = {k: round(v, 3) for k, v in got.timings.items()}
    return out


def bench_direct(data: dict[str, Any], repeat: int) -> dict[str, Any]:
    """The same work on the Python objects: what the facade adds is the difference."""
    rt: Runtime = data["rt"]
    router = Router.of(rt._store)
    fs, scratch = router.facts(), router.scratch()
    n = len(data["facts"])
    keys = [f"k{(i * 7919) % n}" for i in range(200)]
    sids = data["scratch_ids"]
    q = data["queries"][0]
    plan = {"steps": [{"op": "graph.ann", "query": q, "k": 10},
                      {"op": "index.terms", "query": q, "k": 10}],
            "cache": q, "session": None, "namespace": None, "merge": "rrf", "limit": 10}
    router.execute(plan)
    emb = fs.embedder
    return {
        "router_execute_cache_hit": sample_us(lambda i: router.execute(plan), repeat),
        "router_recent": sample_us(lambda i: router.recent(SESSION, N_RECENT), repeat),
        "ckf_lookup_key": sample_us(lambda i: fs.lookup_key(keys[i % 200]), repeat),
        "ckf_fact_to_dict": sample_us(lambda i: fs.fact(keys[i % 200]).to_dict(), repeat),
        "scratch_get_untouched": sample_us(
            lambda i: scratch.get(SESSION, sids[i % N_TOOLS], touch=False), repeat),
        "scratch_entry_dict": sample_us(
            lambda i: scratch.entry_dict(SESSION, sids[i % N_TOOLS]), repeat),
        "ckf_etag": sample_us(lambda i: fs.etag(), repeat),
        "embed_query": sample_us(lambda i: emb.embed_batch([data["queries"][i % 300]]), 300),
    }


def bench_naive(data: dict[str, Any], repeat: int) -> dict[str, Any]:
    rt: Runtime = data["rt"]
    router = Router.of(rt._store)
    fs = router.facts()
    emb = fs.embedder
    t0 = time.perf_counter()
    index = naive_turn_index(data["texts"], emb)
    build_s = time.perf_counter() - t0
    queries, sids, texts = data["queries"], data["scratch_ids"], data["texts"]
    n = len(data["facts"])
    keys = [f"k{(i * 7919) % n}" for i in range(200)]
    last = texts[-1]

    def ann_turns(text: str, k: int) -> Any:
        return index.knn_query(emb.embed_batch([text]), k=k)

    def ann_facts(text: str, k: int) -> Any:
        return fs.search_ann(emb.embed_batch([text])[0], k=k)
    return {
        "index_build_s": round(build_s, 1),
        "hot_cache_hit": sample_us(lambda i: ann_facts(queries[i % 50], 10), repeat),
        "rolling_last_n": sample_us(lambda i: ann_turns(last, N_RECENT), repeat),
        "exact_lookup": sample_us(lambda i: ann_facts(keys[i % 200], 1), repeat),
        "scratch_summary": sample_us(lambda i: ann_turns(sids[i % N_TOOLS], 1), repeat),
        "ckf_ann": sample_us(lambda i: ann_facts(queries[50 + i % 250], 10), repeat),
        "blended": sample_us(lambda i: (ann_turns(queries[i % 300], N_RECENT),
                                        ann_turns(queries[i % 300], N_RECENT),
                                        ann_facts(queries[i % 300], 10)), repeat),
    }


PROLOG_BENCH = r"""
:- use_module(library(ctxrelay)).
:- use_module(library(http/json)).

timed(Inputs, X^Goal, N, Stats) :-
    length(Inputs, L),
    findall(D, ( between(1, N, I), J is I mod L, nth0(J, Inputs, X0),
                 copy_term(X^Goal, X0^G),
                 get_time(T0), once(G), get_time(T1),
                 D is (T1 - T0) * 1.0e6 ), Ds0),
    length(Ds0, Len), W is min(50, Len // 5), length(Warm, W), append(Warm, Ds, Ds0),
    msort(Ds, S), length(S, M),
    P50 is max(0, round(0.50 * (M - 1))), P95 is max(0, round(0.95 * (M - 1))),
    nth0(P50, S, V50), nth0(P95, S, V95), sum_list(S, Sum), Mean is Sum / M,
    Stats = _{n:M, p50_us:V50, p95_us:V95, mean_us:Mean}.

main :-
    current_prolog_flag(argv, [Dir, Spec]),
    read_term_from_atom(Spec, spec(Queries, Keys, Sids, Repeat, Slow, Mode), []),
    store_open(Dir, St, []),
    Session = "bench",
    forall(member(Q, Queries), retrieve(St, search(Q), [], _)),
    timed(Queries, Q^retrieve(St, search(Q), [], _), Repeat, Hit),
    timed([x], _^recent_turns(St, Session, 8, _), Repeat, RecentDict),
    timed([x], _^recent_turns(St, Session, 8, _, [as(python)]), Repeat, RecentPy),
    timed(Keys, K^fact_get(St, K, _, []), Repeat, Fact),
    timed(Sids, I^scratch_get(St, Session, I, _), Repeat, Scratch),
    timed(Sids, I^scratch_get(St, Session, I, _, [as(python)]), Repeat, ScratchPy),
    Fast = _{hot_cache_hit:Hit, rolling_last_n_dicts:RecentDict,
             rolling_last_n_python_ref:RecentPy, exact_lookup:Fact,
             scratch_summary:Scratch, scratch_summary_python_ref:ScratchPy},
    (   Mode == primitives
    ->  Out = Fast
    ;   timed(Queries, Q^facts_search(St, Q, _, [k(10)]), Slow, Ann),
        timed(Queries, Q^retrieve(St, blend([intent(continue, Q), intent(tool_reference, Q),
                                              intent(explore, Q)]),
                                  [session(Session), cache(false)], _), Slow, Blend),
        Out = Fast.put(_{ckf_ann:Ann, blended:Blend})
    ),
    vm_hwm_mb(Peak),
    json_write_dict(current_output, Out.put(max_rss_mb, Peak), [width(0)]),
    nl.

%   This process's peak resident set (VmHWM, reset by exec, unlike the
%   parent's RUSAGE_CHILDREN, which also counts the forked parent image).
vm_hwm_mb(MB) :-
    setup_call_cleanup(open('/proc/self/status', read, In), read_string(In, _, Text), close(In)),
    split_string(Text, "\n", "", Lines),
    member(Line, Lines),
    string_concat("VmHWM:", Rest, Line),
    split_string(Rest, " \t", " \t", Parts),
    member(Part, Parts), number_string(KB, Part), !,
    MB is round(KB / 102.4) / 10.

:- initialization((main, halt)).
"""


def bench_prolog(root: Path, data: dict[str, Any], repeat: int, slow: int, *,
                 primitives_only: bool = False) -> dict[str, Any]:
    n = len(data["facts"])
    spec = "spec({}, {}, {}, {}, {}, {})".format(
        json.dumps(data["queries"][:50]), json.dumps([f"k{(i * 7919) % n}" for i in range(200)]),
        json.dumps(data["scratch_ids"]), repeat + 50, slow + 50,
        "primitives" if primitives_only else "all")
    with tempfile.NamedTemporaryFile("w", suffix=".pl", delete=False) as f:
        f.write(PROLOG_BENCH)
        script = f.name
    try:
        proc = subprocess.run([str(ROOT / "bin" / "ctxrelay-swipl"), script, str(root), spec],
                              capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(script)
    if proc.returncode != 0:
        raise RuntimeError(f"the Prolog bench failed:\n{proc.stderr[-3000:]}")
    raw = json.loads(proc.stdout.strip().splitlines()[-1])
    peak = raw.pop("max_rss_mb")
    return {**{k: {m: round(float(v), 2) if m != "n" else int(v) for m, v in s.items()}
               for k, s in raw.items()}, "max_rss_mb": peak}


def scale(n: int, repeat: int, slow: int, *, primitives_only: bool = False) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"ctxrelay-storage-{n}-"))
    hnsw = CHEAP_HNSW if primitives_only else FULL_HNSW
    try:
        say(f"== {n}: building (HNSW {hnsw})")
        load_before = os.getloadavg()
        data = build(root, n, hnsw)
        say(f"   built in {data['build_s']}; Python")
        load_bench = os.getloadavg()
        py = bench_python(data, repeat, slow, primitives_only=primitives_only)
        say("   direct")
        direct = bench_direct(data, repeat)
        naive = None
        if not primitives_only:
            say("   naive baseline")
            naive = bench_naive(data, repeat if n <= 10_000 else max(300, repeat // 4))
        data["rt"].close()
        say("   Prolog")
        pl = bench_prolog(root, data, repeat, slow, primitives_only=primitives_only)
        out = {"facts": n, "turns": n + 2 * N_TOOLS, "hnsw": hnsw,
               "load_avg": load_bench, "load_avg_before_build": load_before,
               "load_avg_after": os.getloadavg(), "build_s": data["build_s"],
               "max_rss_mb": {"python": rss_mb(), "prolog": pl.pop("max_rss_mb")},
               "python": py, "prolog": pl, "direct": direct}
        if naive is not None:
            out["naive"] = naive
            out["speedup_vs_naive"] = {
                k: round(naive[k]["p50_us"] / py[k]["p50_us"], 1)
                for k in ("hot_cache_hit", "rolling_last_n", "exact_lookup",
                          "scratch_summary", "ckf_ann", "blended")}
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def rss_mb() -> float:
    """This process's peak resident set so far (Linux reports kB): cumulative over
    the scales of one run, so the largest scale's figure is its own."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def verdict(results: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for n, r in results.items():
        py, pl = r["python"], r["prolog"]
        fast = {k: {"python_p50_us": py[k]["p50_us"],
                    "python_ok": py[k]["p50_us"] <= TARGET_FAST_US}
                for k in ("hot_cache_hit", "rolling_last_n", "exact_lookup", "scratch_summary")}
        for k, pk in (("hot_cache_hit", "hot_cache_hit"), ("rolling_last_n", "rolling_last_n_dicts"),
                      ("exact_lookup", "exact_lookup"), ("scratch_summary", "scratch_summary")):
            fast[k]["prolog_p50_us"] = pl[pk]["p50_us"]
            fast[k]["prolog_ok"] = pl[pk]["p50_us"] <= TARGET_FAST_PROLOG_US
        fast["rolling_last_n"]["prolog_python_ref_p50_us"] = pl["rolling_last_n_python_ref"]["p50_us"]
        fast["scratch_summary"]["prolog_python_ref_p50_us"] = \
            pl["scratch_summary_python_ref"]["p50_us"]
        fast["scratch_summary"]["prolog_python_ref_ok"] = \
            pl["scratch_summary_python_ref"]["p50_us"] <= TARGET_FAST_PROLOG_US
        if "blended" not in py:
            out[n] = fast
            continue
        fast["blended"] = {"python_p50_ms": round(py["blended"]["p50_us"] / 1000, 3),
                           "python_ok": py["blended"]["p50_us"] <= TARGET_BLEND_MS * 1000,
                           "prolog_p50_ms": round(pl["blended"]["p50_us"] / 1000, 3),
                           "prolog_ok": pl["blended"]["p50_us"] <= TARGET_BLEND_MS * 1000}
        out[n] = fast
    return out


def not_run(results: dict[str, Any], args: argparse.Namespace) -> list[str]:
    out = []
    if args.primitives_only:
        out.append("CKF ANN, CDR blended and search-miss retrieval and the naive vector-index "
                   "baseline: not timed in a --primitives-only run (its HNSW graph is built "
                   f"with {CHEAP_HNSW} so that 1M facts build in minutes; none of the "
                   "primitives timed reads it)")
    if not any(int(n) >= 1_000_000 for n in results):
        out.append("1,000,000 facts/turns: a full-quality HNSW graph over 1M 1024-d vectors "
                   "plus the naive turn index takes over an hour on 2 shared cores; run "
                   "--sizes 1000000 --primitives-only for the pointer primitives")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10k only, fewer samples")
    ap.add_argument("--sizes", default=None, help="comma-separated scales (default 10000,100000)")
    ap.add_argument("--out", default="storage", help="results name: bench/results/<out>.json")
    ap.add_argument("--primitives-only", action="store_true",
                    help="only the pointer primitives, on a cheaply built HNSW graph (1M)")
    args = ap.parse_args()
    sizes = [int(s) for s in (args.sizes or ("10000" if args.quick else "10000,100000")).split(",")]
    repeat, slow = (500, 100) if args.quick else (2000, 300)
    results = {}
    for n in sizes:
        results[str(n)] = scale(n, repeat, slow, primitives_only=args.primitives_only)
        say(json.dumps(verdict({str(n): results[str(n)]})))
    path = write(args.out, {
        "git": git_rev(), "embedder": "hashing (1024-d)", "n_recent": N_RECENT,
        "targets": {"fast_python_p50_us": TARGET_FAST_US,
                    "fast_prolog_p50_us": TARGET_FAST_PROLOG_US,
                    "blended_p50_ms": TARGET_BLEND_MS},
        "primitives_only": args.primitives_only,
        "scales": results, "verdict": verdict(results), "not_run": not_run(results, args)})
    say(f"results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
