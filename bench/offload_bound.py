"""How much faster an assembly could get if recall and Tier P cost nothing (#13 item 6).

    .venv/bin/python bench/offload_bound.py --dir /tmp/s100k [--size 100000] [--repeat 80]

The question behind it: would moving recall's ranking and Tier P's retrieval out
of the assembly's process (a worker process, or compiled code that leaves the
GIL) bring ``bench/e2e_bench.py`` to its target?  No offload can do better than
those two costing nothing, so this bench measures that bound:

1. a *fill* process assembles every message once on the store and keeps what
   ``recall`` and ``Router.execute`` answered (pickled to a temporary file);
2. two side processes on the same code and store then assemble the same
   messages alternately, as ``e2e_bench.py`` does: *control* runs the code as
   it is; *free* answers recall and Tier P's plan from the fill's answers at no
   cost, and skips the ANN search run ahead.  Neither side has seen the
   messages before (the fill ran in its own process), so no other cache is warm.

The ratio free / control, multiplied by ``e2e_bench.py``'s ratio of this code
over e858172, bounds what any offload of those two stages can reach.  The store
is built by ``profile_assembly.build`` (n turns and n CKF facts, as
``e2e_bench.py`` measures) under ``--dir`` unless it is already there; a copy
of an ``e2e_bench.py --store-cache`` store (``DIR/new/store-100000``) is taken as
it is.  Use a copy: the runs write to the store's turn log and caches.
"""
from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from _common import git_rev, machine, percentiles, write  # noqa: E402
from e2e_bench import messages  # noqa: E402


def _memo_patches(memo: dict, free: set[str]) -> dict[str, int]:
    """Answer recall and Tier P's plans (those named in ``free``) from ``memo``;
    returns the miss counters."""
    import ctxrelay.retrieval.recall as recall_mod
    from ctxrelay.retrieval.router import Router
    misses = {"recall": 0, "tier_p": 0}
    compute_recall, compute_plan = recall_mod.recall, Router.execute

    def recall(stores, session_id, query, **options):
        key = ("recall", query, options.get("upto"))
        if key not in memo:
            misses["recall"] += 1
            return compute_recall(stores, session_id, query, **options)
        return memo[key]

    def execute(self, plan):
        key = ("tier_p", json.dumps(plan, sort_keys=True, default=str))
        if key not in memo:
            misses["tier_p"] += 1
            return compute_plan(self, plan)
        return memo[key]

    if "recall" in free:
        recall_mod.recall = recall
    if "tier_p" in free:
        Router.execute = execute
        Router.search_ahead = lambda self, text: None
    return misses


def _recording(memo: dict) -> None:
    """Keep what recall and Tier P's plans answer, under the keys the free side reads."""
    import ctxrelay.retrieval.recall as recall_mod
    from ctxrelay.retrieval.router import Router
    compute_recall, compute_plan = recall_mod.recall, Router.execute

    def recall(stores, session_id, query, **options):
        out = compute_recall(stores, session_id, query, **options)
        memo[("recall", query, options.get("upto"))] = out
        return out

    def execute(self, plan):
        out = compute_plan(self, plan)
        memo[("tier_p", json.dumps(plan, sort_keys=True, default=str))] = out
        return out

    recall_mod.recall = recall
    Router.execute = execute


def side(role: str, store: str, memo_path: str, texts: list[str], free: set[str]) -> int:
    from e2e_worker import POLICY
    from ctxrelay import Runtime
    memo: dict = {}
    misses: dict[str, int] = {}
    if role == "fill":
        _recording(memo)
    elif role == "free":
        misses = _memo_patches(pickle.loads(Path(memo_path).read_bytes()), free)
    rt = Runtime(store)
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        if role == "fill":
            for text in texts:
                rt.assemble("s", text, **POLICY)
            Path(memo_path).write_bytes(pickle.dumps(memo))
            return 0
        for line in sys.stdin:
            req = json.loads(line)
            if req["op"] == "quit":
                break
            t0 = time.perf_counter()
            rt.assemble("s", req["text"], **POLICY)
            out.write(json.dumps({"dt": time.perf_counter() - t0, "misses": misses}) + "\n")
            out.flush()
    finally:
        rt.close()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="store directory to build or reuse")
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--out", default="offload_bound")
    ap.add_argument("--free", default="recall,tier_p",
                    help="what the free side answers from the record: recall, tier_p or both")
    ap.add_argument("--role", choices=("fill", "free", "control"), help=argparse.SUPPRESS)
    ap.add_argument("--memo", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from assembly_bench import TOPICS
    texts = messages(args.warmup + args.repeat, TOPICS)
    free = {part.strip() for part in args.free.split(",") if part.strip()}
    if not free or free - {"recall", "tier_p"}:
        ap.error(f"--free takes recall, tier_p or both (comma-separated), not {args.free!r}")
    if args.role:
        return side(args.role, args.dir, args.memo, texts, free)
    from profile_assembly import build
    build(Path(args.dir), args.size)
    with tempfile.TemporaryDirectory() as tmp:
        memo = str(Path(tmp) / "memo.pickle")
        def start(role: str, **kw) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, __file__, "--dir", args.dir, "--role", role,
                                     "--memo", memo, "--free", args.free, "--repeat", str(args.repeat),
                                     "--warmup", str(args.warmup)], text=True, bufsize=1, **kw)
        if start("fill").wait() != 0:
            raise RuntimeError("the fill process failed (see its stderr above)")
        recorded = pickle.loads(Path(memo).read_bytes())
        answers = {kind: sum(1 for key in recorded if key[0] == kind)
                   for kind in ("recall", "tier_p")}
        sides = {role: start(role, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                 for role in ("control", "free")}
        samples: dict[str, list[float]] = {role: [] for role in sides}
        misses: dict = {}
        try:
            for i, text in enumerate(texts):
                order = list(sides.items()) if i % 2 == 0 else list(reversed(sides.items()))
                for role, proc in order:
                    proc.stdin.write(json.dumps({"op": "assemble", "text": text}) + "\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        raise RuntimeError(f"the {role} side stopped (see its stderr above)")
                    answer = json.loads(line)
                    if i >= args.warmup:
                        samples[role].append(answer["dt"])
                    if role == "free":
                        misses = answer["misses"]
        finally:
            for proc in sides.values():
                try:
                    proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    proc.stdin.flush()
                    proc.wait(timeout=60)
                except Exception:
                    proc.kill()
    rows = {role: percentiles(s) for role, s in samples.items()}
    payload = {
        "benchmark": "offload_bound", "commit": git_rev(), "machine": machine(),
        "command": " ".join([".venv/bin/python", "bench/offload_bound.py", *sys.argv[1:]]),
        "method": "fill process records recall and Tier P answers; control and free sides "
                  "(same code, same store) assemble the same messages alternately",
        "turns": args.size, "facts": args.size, "free": sorted(free), "repeat": args.repeat, "warmup": args.warmup,
        "results": rows, "recorded_answers": answers, "free_misses": misses,
        "ratio_free_over_control": {k: round(rows["free"][k] / rows["control"][k], 3)
                                    for k in ("p50_ms", "p95_ms", "mean_ms")},
    }
    print(json.dumps(payload["results"]), payload["ratio_free_over_control"], misses)
    print(f"-> {write(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
