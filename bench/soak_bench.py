"""Soak: an endless session through the public Runtime API stays bounded.

One session takes ``--turns`` user/assistant turns; every ``--tool-every``
turns a tool output (CSV table, JSON, long text or scalar, of varied sizes
and freshness classes) goes through ``Runtime.record_tool_output``; every
``--ingest-every`` turns a small document goes through ``Runtime.ingest``;
every ``--assemble-every`` turns ``Runtime.assemble`` builds a pack (hashing
embedder).  After every user turn the promotion rules run
(``ctxrelay.knowledge.promotion.promote_after_turn``, as the runtime will call them),
so some user turns name values or point back at tool outputs.

At ``--checkpoints`` points it samples the process RSS, the disk used by
each sub-store (transcript, scratch metadata, scratch blobs, ckf, turn log,
rolling log and warm artifacts if present) and the assembly latency of the
segment.  The report says, per store, whether it levelled off (bounded
stores: growth over the second half of the run within ``--flat-tolerance``,
and scratch blob bytes within the configured budget at every checkpoint),
and the per-turn growth of the stores that grow by design (the transcript is
never rewritten; the turn log keeps one derived row per turn; the CKF keeps
what is ingested or promoted).  Latency is flat when the last segment's p50
is within ``--flat-latency`` times the first's.

    .venv/bin/python bench/soak_bench.py              # default: 20,000 turns
    .venv/bin/python bench/soak_bench.py --turns 2000 --checkpoints 5
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from _common import git_rev, percentiles, write  # noqa: E402

TOPICS = {
    "etcd": ["etcd member", "raft leader", "fsync latency", "defrag", "snapshot", "quorum",
             "compaction", "TLS peer certificate"],
    "backup": ["restic repository", "S3 bucket", "retention policy", "Postgres dump",
               "WAL archive", "restore drill", "snapshot prune"],
    "billing": ["Q3 invoice", "hosting cost", "reserved instances", "egress charges",
                "budget forecast", "cost allocation tag"],
    "ci": ["build matrix", "flaky test", "runner pool", "cache key", "artifact upload",
           "release branch"],
    "latency": ["p99 latency", "connection pool", "GC pause", "load balancer",
                "slow query", "read replica"],
}
QUESTIONS = ["How should we handle the {a} given the {b}?",
             "What changed in the {a} since we looked at the {b}?",
             "Can you compare the {a} with the {b} for next week?",
             "Why did the {a} regress after the {b} change?"]
STATEMENTS = ["Our {a} runs with {n} units and the {b} is set to {m}.",
              "We decided to keep the {a} at {n} and revisit the {b} in {m} days.",
              "The {a} was {n} percent over plan while the {b} stayed at {m}."]
ANSWERS = ["The {a} depends on the {b}: start by checking the last {n} runs, then adjust "
           "the {a} in steps of {m} and watch the {b} for regressions.",
           "Looking at the {a}, the {b} accounts for most of the change. I would pin the "
           "{a} to {n} and schedule a review of the {b} after {m} days.",
           "Decision: move the {a} behind the {b}, keep {n} spare units and alert when the "
           "{b} crosses {m}."]
DOC = ("# {topic} runbook {k}\n\nThe {a} is reviewed every {n} days by the platform team. "
       "Changes to the {b} need a ticket and a second reviewer.\n\n"
       "When the {a} alerts, check the {b} first, then the dashboards for the last {m} "
       "hours. Escalate after {n} minutes without progress.\n\n"
       "Known issue {k}: the {a} can lag behind the {b} during maintenance windows.\n")


def text(rng: random.Random, templates: list[str], topic: str) -> str:
    a, b = rng.sample(TOPICS[topic], 2)
    return rng.choice(templates).format(a=a, b=b, n=rng.randint(2, 900), m=rng.randint(2, 90))


def tool_output(rng: random.Random, k: int) -> tuple[str, dict[str, Any], str, str]:
    """(tool name, args, raw output, freshness) of varied shapes and sizes."""
    shape = k % 4
    freshness = rng.choices(["VOLATILE", "STABLE", "STATIC", "REALTIME"], [6, 2, 1, 1])[0]
    if shape == 0:
        rows = rng.choice([20, 200, 2000])
        lines = ["id,region,cost,latency_ms"] + [
            f"{i},{rng.choice(['eu-west-1', 'us-east-1', 'ap-south-1'])},"
            f"{rng.uniform(1, 900):.2f},{rng.randint(1, 400)}" for i in range(rows)]
        return "sql_query", {"q": f"select * from usage limit {rows}"}, "\n".join(lines), freshness
    if shape == 1:
        obj = {"status": rng.choice(["ok", "degraded"]), "members": [
            {"name": f"etcd-{i}", "leader": i == 0, "db_size_mb": rng.randint(50, 4000)}
            for i in range(rng.choice([3, 5, 50]))], "revision": rng.randint(1, 10**7)}
        return "http_get", {"url": "https://etcd.local/health"}, json.dumps(obj), freshness
    if shape == 2:
        words = [w for topic in TOPICS.values() for phrase in topic for w in phrase.split()]
        body = " ".join(rng.choice(words) for _ in range(rng.choice([300, 3000, 12000])))
        return "fetch_doc", {"path": f"docs/page-{k}.md"}, f"Runbook page {k}. {body}.", freshness
    return "calc", {"expr": f"{rng.randint(1, 999)}*{rng.randint(1, 99)}"}, \
        str(rng.randint(1, 10**6)), freshness


def disk_bytes(path: Path) -> int:
    """Bytes the files under ``path`` occupy on disk (allocated blocks)."""
    if not path.exists():
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def rss_bytes() -> dict[str, int]:
    """This process's memory from /proc/self/status: ``rss`` (VmRSS), its
    anonymous part (heap: what must level off) and its file-backed part
    (LMDB and ring pages mapped from the stores, which the kernel may drop),
    and the peak (VmHWM)."""
    fields = {"VmRSS": "rss", "RssAnon": "rss_anon", "RssFile": "rss_file", "VmHWM": "rss_peak"}
    out = {v: 0 for v in fields.values()}
    with open("/proc/self/status") as status:
        for line in status:
            name = line.split(":")[0]
            if name in fields:
                out[fields[name]] = int(line.split()[1]) * 1024
    if not out["rss_peak"]:
        out["rss_peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


SUBSTORES = {"transcript": "transcript.lmdb", "scratch_meta": "scratch/scratch.lmdb",
             "scratch_blobs": "scratch/blobs", "ckf": "ckf", "turnlog": "turnlog",
             "rolling": "rolling", "warm": "warm"}
BOUNDED = ("rss_anon", "scratch_meta", "scratch_blobs")
GROWING = ("transcript", "turnlog", "ckf")


def growth(series: list[int]) -> float:
    """Relative growth over the second half of the run: (last - mid) / last."""
    mid, last = series[len(series) // 2], series[-1]
    return 0.0 if last <= 0 else (last - mid) / last


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=20_000)
    ap.add_argument("--tool-every", type=int, default=3,
                    help="a tool output every N user/assistant exchanges")
    ap.add_argument("--ingest-every", type=int, default=1000)
    ap.add_argument("--assemble-every", type=int, default=250)
    ap.add_argument("--assemble-repeat", type=int, default=3)
    ap.add_argument("--checkpoints", type=int, default=10)
    ap.add_argument("--scratch-budget-mb", type=float, default=16.0)
    ap.add_argument("--max-context-tokens", type=int, default=8192)
    ap.add_argument("--no-promotion", action="store_true")
    ap.add_argument("--flat-tolerance", type=float, default=0.10)
    ap.add_argument("--flat-latency", type=float, default=1.5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="soak_bench")
    ap.add_argument("--keep", help="store directory to keep (default: a temp dir, removed)")
    args = ap.parse_args(argv)
    if args.turns < args.checkpoints * 2 or args.checkpoints < 2:
        ap.error("--turns must be at least twice --checkpoints, and --checkpoints >= 2")

    from ctxrelay import Runtime
    from ctxrelay.knowledge.fabric import FactStore
    from ctxrelay.knowledge.promotion import promote_after_turn
    from ctxrelay.storage import open_stores
    from ctxrelay.storage.lmdb.scratch import open_scratch_store

    rng = random.Random(args.seed)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ctxrelay-soak-"))
    store_dir = root / "store"
    budget = int(args.scratch_budget_mb * (1 << 20))
    # The scratch buffer's budget is set where it is first opened in the
    # process; the Runtime then shares this store (one environment per path).
    scratch = open_scratch_store(store_dir / "scratch", disk_budget_bytes=budget)
    # Likewise the CKF: the hashing embedder (no model download, no torch).
    facts = FactStore.open(store_dir / "ckf", embedder="hashing")
    policy = {"embedder": "hashing", "max_context_tokens": args.max_context_tokens}
    rt = Runtime(store_dir)
    rt.create_session("soak")
    stores = open_stores(store_dir)          # the Runtime's store: its parts, for promotion
    every = max(1, args.turns // args.checkpoints)
    checkpoints: list[dict[str, Any]] = []
    segment_assemble: list[float] = []
    segment_promote: list[float] = []
    all_assemble: list[float] = []
    all_promote: list[float] = []
    promoted: dict[str, int] = {}
    tools = ingests = 0
    next_ingest, next_assemble = args.ingest_every, args.assemble_every
    exchange = 0
    recent_scratch: list[str] = []
    topic = rng.choice(list(TOPICS))
    t_start = time.perf_counter()
    turn = 0
    while turn < args.turns:
        if rng.random() < 0.08:
            topic = rng.choice(list(TOPICS))
        # A user turn: questions and statements; some point back at a tool
        # output or name the previous value (promotion inputs).
        r = rng.random()
        if recent_scratch and r < 0.08:
            msg = f"Use {rng.choice(recent_scratch[-6:])} again for the {topic} review."
        elif r < 0.11:
            msg = f"Call that the {topic} figure {rng.randint(1, 20)}."
        elif r < 0.35:
            msg = text(rng, STATEMENTS, topic)
        else:
            msg = text(rng, QUESTIONS, topic)
        user_turn = rt.append("soak", "user", msg)
        turn += 1
        exchange += 1
        if exchange % args.tool_every == 0:
            name, targs, raw, fresh = tool_output(rng, tools)
            sid = rt.record_tool_output("soak", name, targs, raw, freshness=fresh)
            recent_scratch = (recent_scratch + [sid])[-32:]
            tools += 1
            turn += 2                         # the call and its result are turns too
        reply = rt.append("soak", "assistant", text(rng, ANSWERS, topic))
        turn += 1
        if not args.no_promotion:
            t0 = time.perf_counter()
            for p in promote_after_turn(stores, "soak", reply, since=user_turn,
                                        embedder="hashing"):
                promoted[p["rule"]] = promoted.get(p["rule"], 0) + 1
            segment_promote.append(time.perf_counter() - t0)
        if turn >= next_ingest:
            next_ingest += args.ingest_every
            k = turn // args.ingest_every
            a, b = rng.sample(TOPICS[topic], 2)
            rt.ingest([DOC.format(topic=topic, k=k, a=a, b=b, n=rng.randint(2, 60),
                                  m=rng.randint(2, 48))], progress=False)
            ingests += 1
        if turn >= next_assemble:
            next_assemble += args.assemble_every
            # A few in a row: the first also brings the turn log up to date.
            for _ in range(args.assemble_repeat):
                t0 = time.perf_counter()
                rt.assemble("soak", text(rng, QUESTIONS, topic), **policy)
                segment_assemble.append(time.perf_counter() - t0)
        if turn >= every * (len(checkpoints) + 1) or turn >= args.turns:
            mem = rss_bytes()
            cur = mem["rss"]
            stats = scratch.stats()
            point = {"turns": rt.turn_count("soak"), "facts": facts.stats().to_dict(), "elapsed_s": round(time.perf_counter()
                                                                         - t_start, 1),
                     **mem,
                     "scratch_entries": stats.entries, "scratch_blob_bytes": stats.bytes,
                     "scratch_pinned_bytes": stats.pinned_bytes,
                     "tool_outputs": tools, "ingests": ingests,
                     "promotions": dict(promoted),
                     "disk": {name: disk_bytes(store_dir / sub)
                              for name, sub in SUBSTORES.items()},
                     "assemble": percentiles(segment_assemble) if segment_assemble else None,
                     "promote": percentiles(segment_promote) if segment_promote else None}
            checkpoints.append(point)
            all_assemble += segment_assemble
            all_promote += segment_promote
            segment_assemble, segment_promote = [], []
            print(f"turns {point['turns']:>6}  rss {cur / 2**20:7.1f} MiB "
                  f"(anon {mem['rss_anon'] / 2**20:6.1f})  "
                  f"scratch {stats.bytes / 2**20:6.1f}/{budget / 2**20:.0f} MiB "
                  f"({stats.entries} entries)  transcript "
                  f"{point['disk']['transcript'] / 2**20:6.1f} MiB  turnlog "
                  f"{point['disk']['turnlog'] / 2**20:6.1f} MiB  ckf "
                  f"{point['disk']['ckf'] / 2**20:5.1f} MiB  assemble p50 "
                  f"{(point['assemble'] or {}).get('p50_ms', float('nan')):7.1f} ms  "
                  f"[{point['elapsed_s']} s]", flush=True)
    stores.close()
    rt.close()
    facts.close()

    series = {"rss": [c["rss"] for c in checkpoints],
              "rss_anon": [c["rss_anon"] for c in checkpoints],
              **{name: [c["disk"][name] for c in checkpoints] for name in SUBSTORES}}
    turns_series = [c["turns"] for c in checkpoints]
    bounded = {}
    for name in BOUNDED:
        g = growth(series[name])
        bounded[name] = {"first": series[name][0], "mid": series[name][len(checkpoints) // 2],
                         "last": series[name][-1], "second_half_growth": round(g, 4),
                         "levelled_off": g <= args.flat_tolerance}
    within_budget = all(c["scratch_blob_bytes"] - c["scratch_pinned_bytes"] <= budget
                        for c in checkpoints)
    grows = {}
    for name in GROWING:
        span = turns_series[-1] - turns_series[0]
        grows[name] = {"first": series[name][0], "last": series[name][-1],
                       "bytes_per_turn": round((series[name][-1] - series[name][0])
                                               / max(span, 1), 1)}
    lat = [c["assemble"]["p50_ms"] for c in checkpoints if c["assemble"]]
    ratio = round(lat[-1] / lat[0], 3) if len(lat) >= 2 and lat[0] else None
    verdict = {
        "memory_levelled_off": bounded["rss_anon"]["levelled_off"],
        "rss_second_half_growth": round(growth(series["rss"]), 4),
        "scratch_within_budget_every_checkpoint": within_budget,
        "bounded_stores_levelled_off": all(v["levelled_off"] for v in bounded.values()),
        "assemble_p50_last_over_first": ratio,
        "assemble_latency_flat": ratio is not None and ratio <= args.flat_latency,
    }
    payload = {"git": git_rev(), "args": vars(args), "scratch_budget_bytes": budget,
               "checkpoints": checkpoints, "bounded": bounded, "grows_by_design": grows,
               "assemble_overall": percentiles(all_assemble) if all_assemble else None,
               "promote_overall": percentiles(all_promote) if all_promote else None,
               "promotions": promoted, "verdict": verdict,
               "wall_s": round(time.perf_counter() - t_start, 1)}
    path = write(args.out, payload)
    print(json.dumps(verdict, indent=2))
    print(f"wrote {path}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
