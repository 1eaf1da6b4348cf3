"""TTL sweep: the expiry index against the full scan it replaced, and what a sweep
costs a request running beside it (issue #5, SPEC-009 §8.1).

    .venv/bin/python bench/expiry_bench.py                 # 100,000 facts (~2-3 min)
    .venv/bin/python bench/expiry_bench.py --facts 20000   # quick

Writes bench/results/expiry.json.  One store of n facts (hashing embedder, no
similarity edges and a small HNSW graph: the sweep does not touch them) where
1 % of the facts have a one-hour TTL, 49 % thirty days and 50 % none; a copy of
it is swept the old way.  With a fake clock:

sweep      wall and CPU time of ``FactStore.expire`` with nothing due (now = the
           last add) and with 1 % due (two hours later), against the old sweep
           (a scan of every fact, then one ``set_status``)
           on the copy in the same state.
beside     while each sweep runs, one thread sleeps 0.5 ms at a time and records
           how late it wakes (to run again it needs the GIL, so this bounds how
           long the sweep kept it), and one makes a ``cdr(vector, k=10)`` request
           every 2 ms; their figures during the sweep against the same with no sweep.
backfill   the one-time build of the index for a store made before it existed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import git_rev, percentiles, write  # noqa: E402

from ctxrelay.knowledge import lifecycle  # noqa: E402
from ctxrelay.knowledge.fabric import FactStore  # noqa: E402
from ctxrelay.storage.interfaces.facts import epoch_of  # noqa: E402
from ctxrelay.storage.lmdb.factcodec import prefix_items  # noqa: E402
from ctxrelay.text.embed import get_embedder  # noqa: E402

T0 = 1_800_000_000.0
HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def open_store(path: Path, clock: Clock) -> FactStore:
    return FactStore(path, embedder="hashing", recluster_every=None, knn=0, m=8,
                     ef_construction=40, clock=clock)


def build(path: Path, n: int, clock: Clock, seed: int = 11) -> None:
    rng = np.random.default_rng(seed)
    emb = get_embedder("hashing")
    ttl = rng.choice(["PT1H", "P30D", "none"], size=n, p=[0.01, 0.49, 0.50])
    words = [f"w{i}" for i in range(2000)]
    with open_store(path, clock) as s:
        for lo in range(0, n, 5000):
            texts = [f"Fact {i}: " + " ".join(rng.choice(words, 6))
                     for i in range(lo, min(n, lo + 5000))]
            s.add_facts([{"content": t, "ttl": str(x)} for t, x in zip(texts, ttl[lo:lo + 5000])],
                        vectors=emb.embed_batch(texts), batch_size=5000)


def old_sweep(s: FactStore, now: float) -> int:
    """FactStore.expire as it was: scan every fact, mark the due ones in one call."""
    due = [f.fact_id for f in s.storage.scan("default") if f.status == "ACTIVE"
           and f.ttl_seconds is not None and now > epoch_of(f.ingested_at) + f.ttl_seconds]
    return s.live.set_status("default", due, "STALE", now=now) if due else 0


def beside(s: FactStore, sweep, qvecs: np.ndarray) -> dict:
    """Run ``sweep(s)`` (None: sleep a while) while two other threads run: one
    sleeps 0.5 ms at a time and records how late it wakes (it needs the GIL to
    run again, so its lateness bounds how long another thread kept it), one
    makes a ``cdr`` request every 2 ms and records its latency."""
    stop = threading.Event()
    late: list[tuple[float, float]] = []
    lat: list[tuple[float, float]] = []

    def sleeper() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            time.sleep(0.0005)
            late.append((t0, time.perf_counter() - t0 - 0.0005))

    def requests() -> None:
        i = 0
        while not stop.is_set():
            time.sleep(0.002)
            t0 = time.perf_counter()
            s.cdr(qvecs[i % len(qvecs)], k=10)
            lat.append((t0, time.perf_counter() - t0))
            i += 1

    threads = [threading.Thread(target=sleeper), threading.Thread(target=requests)]
    for t in threads:
        t.start()
    time.sleep(0.2)                     # both running before the sweep starts
    t0, c0 = time.perf_counter(), time.thread_time()
    changed = sweep(s) if sweep is not None else time.sleep(0.5)
    t1, cpu = time.perf_counter(), time.thread_time() - c0
    time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    # what started while the sweep ran (a request that began just before counts too)
    during_late = [x for t, x in late if t0 <= t <= t1] or [0.0]
    during = [x for t, x in lat if t0 - x <= t <= t1] or [0.0]
    return {"changed": changed, "sweep_wall_ms": round((t1 - t0) * 1e3, 2),
            "sweep_cpu_ms": round(cpu * 1e3, 2),
            "wake_late_max_ms": round(max(during_late) * 1e3, 2),
            "wake_late_p99_ms": round(float(np.percentile(during_late, 99)) * 1e3, 2),
            "requests": percentiles(during)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--facts", type=int, default=100_000)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args(argv)
    root = Path(args.dir or tempfile.mkdtemp(prefix="expiry-bench-"))
    t_start = time.perf_counter()
    emb = get_embedder("hashing")
    qvecs = emb.embed_batch([f"w{i} w{i + 7} w{i + 13}" for i in range(50)])
    out: dict = {"facts": args.facts, "batch": lifecycle.EXPIRE_BATCH}
    try:
        clock = Clock()
        t0 = time.perf_counter()
        build(root / "new", args.facts, clock)
        out["build_s"] = round(time.perf_counter() - t0, 1)
        shutil.copytree(root / "new", root / "old")
        built_at = clock.now
        runs = {}
        for name, sweep in (("new", lambda s: s.expire()),
                            ("old", lambda s: old_sweep(s, clock.now))):
            clock.now = built_at
            with open_store(root / name, clock) as s:
                s.cdr(qvecs[0], k=10)                       # index loaded
                idle = beside(s, None, qvecs)
                none_due = beside(s, sweep, qvecs)
                clock.now = built_at + 2 * HOUR
                some_due = beside(s, sweep, qvecs)
                runs[name] = {"idle": idle, "none_due": none_due, "one_percent_due": some_due,
                              "etag": s.etag()}
            print(f"{name}: 0 due {none_due['sweep_wall_ms']} ms, 1% due "
                  f"{some_due['sweep_wall_ms']} ms ({some_due['changed']} facts); woke late "
                  f"by {some_due['wake_late_max_ms']} / {none_due['wake_late_max_ms']} ms; "
                  f"request max {some_due['requests']['max_ms']} ms (idle p50 "
                  f"{idle['requests']['p50_ms']} ms)", flush=True)
        out.update(runs)
        # the same facts marked at the same times: the same CKF state hash
        out["same_result"] = runs["new"]["one_percent_due"]["changed"] == \
            runs["old"]["one_percent_due"]["changed"] and runs["new"]["etag"] == runs["old"]["etag"]
        # the one-time build of the index for a namespace written before it existed
        with open_store(root / "old", clock) as s:
            s.cdr(qvecs[0], k=10)                           # index loaded
            storage = s.storage

            def forget(txn):            # as a store written before the index existed
                info = json.loads(txn.get(b"default", db=storage.dbs[b"ns"]))
                prefix = info["id"].to_bytes(8, "big")
                db = storage.dbs[b"expiry"]
                for key in [k for k, _ in prefix_items(txn, db, prefix)]:
                    txn.delete(key, db=db)
                del info["expiry"]
                txn.put(b"default", json.dumps(info).encode(), db=storage.dbs[b"ns"])
            storage.write(forget)
            clock.now = built_at + 2 * HOUR
            out["backfill"] = beside(
                s, lambda s: len(s.storage.due("default", now=clock.now)), qvecs)
        new, old = runs["new"], runs["old"]
        out["summary"] = {
            "sweep_ms_none_due": {"index": new["none_due"]["sweep_wall_ms"],
                                  "scan": old["none_due"]["sweep_wall_ms"]},
            "sweep_ms_one_percent_due": {"index": new["one_percent_due"]["sweep_wall_ms"],
                                         "scan": old["one_percent_due"]["sweep_wall_ms"]},
            "wake_late_max_ms_one_percent_due": {
                "index": new["one_percent_due"]["wake_late_max_ms"],
                "scan": old["one_percent_due"]["wake_late_max_ms"]},
            "request_max_ms_one_percent_due": {
                "index": new["one_percent_due"]["requests"]["max_ms"],
                "scan": old["one_percent_due"]["requests"]["max_ms"],
                "idle_p50": new["idle"]["requests"]["p50_ms"]},
            "backfill_ms": out["backfill"]["sweep_wall_ms"],
        }
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    path = write("expiry", {"command": "bench/expiry_bench.py " + " ".join(argv or sys.argv[1:]),
                            "git": git_rev(), "load_avg_at_end": os.getloadavg(),
                            "wall_s": round(time.perf_counter() - t_start, 1), **out})
    print(f"wrote {path}")
    for k, v in out["summary"].items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main(argv=None))
