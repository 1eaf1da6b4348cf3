"""The history stage (``recalled.retrieve``) alone, replayed, in thread CPU.

    .venv/bin/python bench/history_replay.py STORE_DIR [--reps 3]

STORE_DIR is a store ``e2e_bench.py`` built (``--store-cache DIR`` keeps them under
``DIR/new/store-N``; session ``s``).  Runs 60 assemblies (``e2e_bench``'s questions,
seed 7, side threads off, after 5 to warm up) and captures each call of the history stage with its inputs and state (the units and
groups so far, the memo of priced turns, the context variables); then replays each
call REPS times (default 3) from that state and sums the least thread CPU of each.
Thread CPU and the minimum keep a shared machine's load out of the figure better
than wall time does.

- ``warm``: the text index's kept postings as the capture left them (the same read
  snapshot: no write since);
- ``cold``: none kept (what every assembly meets after a write, since kept postings
  are per read snapshot).

``units digest`` hashes the unit ids every replay offered: two checkouts that give
the same digest on the same store offered the same candidates.
"""
from __future__ import annotations

import argparse
import contextvars
import copy
import hashlib
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from assembly_bench import TOPICS  # noqa: E402
from e2e_bench import QUESTIONS  # noqa: E402
from e2e_worker import POLICY  # noqa: E402

import ctxrelay.retrieval.candidates as candidates  # noqa: E402
from ctxrelay import Runtime  # noqa: E402
from ctxrelay.retrieval import pricing  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a store e2e_bench.py built (session 's')")
    ap.add_argument("--reps", type=int, default=3, help="replays of each call (least taken)")
    args = ap.parse_args()
    if not Path(args.store).is_dir():
        ap.error(f"{args.store} is not a store directory; build one with "
                 "bench/e2e_bench.py --sizes 100000 --store-cache DIR")
    store, reps = args.store, args.reps
    candidates.TIER_P_BESIDE_RECALL = False
    candidates.RECALL_BESIDE_ANALYSIS = False
    calls = []
    retrieve = candidates.retrieve

    def capture(stores, *args, **kw):
        units, groups = args[6], args[7]
        calls.append((stores, args[:6], copy.deepcopy((units, groups)), args[8:], kw,
                      dict(pricing.priced_memo(stores)), contextvars.copy_context()))
        return retrieve(stores, *args, **kw)

    candidates.retrieve = capture
    rt = Runtime(store)
    rng = random.Random(7)
    msgs = [QUESTIONS[i % len(QUESTIONS)].format(t=rng.choice(TOPICS), i=rng.randrange(5000))
            + f" ({i})" for i in range(65)]
    for m in msgs[:5]:
        rt.assemble("s", m, **POLICY)
    calls.clear()
    for m in msgs[5:]:
        rt.assemble("s", m, **POLICY)
    offered = []
    for mode in ("warm", "cold"):
        total = 0.0
        for stores, head, state, rest, kw, memo, ctx in calls:
            best = None
            for _ in range(reps):
                units, groups = copy.deepcopy(state)
                live = pricing.priced_memo(stores)
                live.clear()
                live.update(memo)
                if mode == "cold":
                    stores.transcript._index._kept.clear()
                t = time.thread_time()
                ctx.run(retrieve, stores, *head, units, groups, *rest, **kw)
                spent = time.thread_time() - t
                best = spent if best is None else min(best, spent)
            offered.append(sorted(units))
            total += best
        print(f"history stage, {mode}: {total / len(calls) * 1000:.3f} ms thread CPU per "
              f"assembly (least of {reps})")
    print("units digest", hashlib.sha256(json.dumps(offered).encode()).hexdigest()[:16])


if __name__ == "__main__":
    main()
