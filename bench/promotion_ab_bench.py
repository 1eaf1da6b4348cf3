"""A managed turn, side by side: two checkouts of ctxrelay on the same workload.

Each round starts one worker process per checkout (``--a`` and ``--b``, each a
``python/`` directory put first on PYTHONPATH), alternating which goes first.
A worker builds the same 200-turn session (user and assistant turns with
numbers, tool outputs of stable and volatile classes, warm artifacts, the
hashing embedder) and then times ``Runtime.managed_turn`` over a fixed script of
messages that exercise every promotion rule (namings of earlier values and of
tool outputs, "let's call V the N", references to scratch ids, plain questions)
with warm artifacts and promotion on.  The first turns of each worker are a
warm-up.  Then the same script again through ``prepare_turn`` and a timed
``commit_turn`` (store, references, promotion: where the promotion rules run),
with a reply that restates the message.  Reported: p50/p95 per checkout and
their ratio (b / a), for the whole managed turn and for the commit, in wall time
and in the process's CPU time (steadier on a shared machine), and whether
both produced the same replies, packs and promotion counts turn for turn, and the
same promoted facts (keys, contents, rules) at the end.

    .venv/bin/python bench/promotion_ab_bench.py --a /work/main/python --b python
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

ETCD_FACT = "Our etcd cluster runs on three nodes in eu-west-1 with 8 GiB of RAM each."
TOPICS = ["etcd quorum", "postgres backups", "TLS rotation", "ingress latency", "Q3 budget"]
POLICY = dict(embedder="hashing", max_context_tokens=3000, output_reserve=300,
              safety_margin=30, min_recent_turns=4)


def build(rt, rng: random.Random, turns: int) -> list[str]:
    """The session: returns the scratch ids of its tool outputs."""
    rt.create_session("s")
    rt.append("s", "user", "Let me describe the etcd cluster setup for the control plane.")
    rt.append("s", "user", ETCD_FACT)
    rt.append("s", "assistant", "Understood: three etcd members in eu-west-1.")
    rt.append("s", "user", "Which restic retention policy fits nightly Postgres database "
                           "backups to the S3 bucket?")
    rt.append("s", "assistant", "Keep 7 daily, 4 weekly and 12 monthly restic snapshots of "
                                "the Postgres dumps in the S3 bucket.")
    rt.append("s", "user", "Good, that is settled.")
    sids = []
    n = 6
    while n < turns:
        topic = rng.choice(TOPICS)
        value = rng.randrange(10, 5000)
        rt.append("s", "user", f"What is the current figure for the {topic}? "
                               f"Last time it was {value}.")
        rt.append("s", "assistant", f"The {topic} figure is {value + 7} as of today. "
                                    f"Our {topic.split()[0]} setup runs on {value % 9 + 2} nodes.")
        n += 2
        if n % 10 == 0:
            fresh = "STABLE" if n % 20 == 0 else "VOLATILE"
            sid = rt.record_tool_output("s", "calc", {"expr": f"{value}*3"},
                                        json.dumps({"total": value * 3, "topic": topic}),
                                        freshness=fresh)
            sids.append(sid)
            n += 2
        if n % 40 == 0:
            rt.publish_artifact("s", max(1, n - 39), n - 20,
                                f"Discussion of the {topic} and its figures.",
                                facts=[f"{topic} figure {value}"], entities=[topic])
    return sids


def script(rng: random.Random, sids: list[str], count: int) -> list[str]:
    out = []
    for i in range(count):
        topic = rng.choice(TOPICS)
        kind = i % 6
        if kind == 0:
            out.append(f"Call that the {topic} figure {i}.")
        elif kind == 1:
            out.append(f"Let's call {rng.randrange(100, 999)}k the {topic} target {i}.")
        elif kind == 2:
            out.append(f"Use {rng.choice(sids)} for the forecast of the {topic}.")
        elif kind == 3:
            out.append(f"What did we say about the {topic} earlier?")
        elif kind == 4:
            out.append("Which region should the restic S3 bucket for the Postgres dumps live "
                       "in? Put it beside the cluster: our etcd cluster runs on three nodes "
                       f"in eu-west-1 with 8 GiB of RAM each ({topic}).")
        else:
            out.append("Thanks, go on.")
    return out


def stable_ids(text: str, seen: dict[str, str]) -> str:
    """Scratch ids are random: number them by first appearance to compare runs."""
    return re.sub(r"scr_[0-9a-f]{32}",
                  lambda m: seen.setdefault(m.group(0), f"scr#{len(seen)}"), text)


def worker(turns: int, timed: int, warmup: int, seed: int) -> dict:
    import time

    import secrets
    import uuid

    from ctxrelay import Runtime
    from ctxrelay.knowledge.fabric import FactStore

    rng = random.Random(seed)
    # Scratch ids (secrets.token_hex) and fact ids (uuid4) are random; packs
    # show them, so their token counts move the packs: seeded here, so that both
    # checkouts see the same ids.
    ids = random.Random(seed + 1)
    secrets.token_hex = lambda n=32: "".join(f"{ids.randrange(256):02x}" for _ in range(n))
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        FactStore(store / "ckf", embedder="hashing").close()
        with Runtime(store) as rt:
            sids = build(rt, rng, turns)
            times, digests, seen = [], [], {}
            cpu: dict[str, list[float]] = {"turn": [], "commit": []}
            for i, message in enumerate(script(rng, sids, warmup + timed)):
                t0, c0 = time.perf_counter(), time.process_time()
                r = rt.managed_turn("s", message, **POLICY)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                if i >= warmup:
                    times.append(dt)
                    cpu["turn"].append(dc)
                blob = json.dumps([r.reply, r.messages, r.headers.get("CRP-Context-Promotions")],
                                  sort_keys=True, default=str)
                blob = stable_ids(blob, seen)
                digests.append(hashlib.sha256(blob.encode()).hexdigest()[:16])
            # The commit alone (store, references, promotion): the part the
            # promotion rules run in, with a reply that restates the message.
            commits = []
            for i, message in enumerate(script(rng, sids, warmup + timed)):
                prepared = rt.prepare_turn("s", message, **POLICY)
                t0, c0 = time.perf_counter(), time.process_time()
                r = rt.commit_turn(prepared, f"Noted. {message}")
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                if i >= warmup:
                    commits.append(dt)
                    cpu["commit"].append(dc)
                blob = stable_ids(json.dumps([prepared.result.messages,
                                              r.headers.get("CRP-Context-Promotions")],
                                             sort_keys=True, default=str), seen)
                digests.append(hashlib.sha256(blob.encode()).hexdigest()[:16])
        facts = FactStore.open(store / "ckf", embedder="hashing")
        try:
            promoted = sorted((f.key or "", f.content, f.metadata.get("promoted_by", ""))
                              for f in facts.backend.scan("default"))
        finally:
            facts.close()
        blob = stable_ids(json.dumps(promoted), seen)
        digests.append(hashlib.sha256(blob.encode()).hexdigest()[:16])
    rules: dict[str, int] = {}
    for _, _, rule in promoted:
        rules[rule] = rules.get(rule, 0) + 1
    return {"times": times, "commits": commits, "cpu": cpu, "digests": digests,
            "promoted": rules}


def run_worker(pythonpath: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(pythonpath).resolve()))
    proc = subprocess.run([sys.executable, __file__, "--worker", "--turns", str(args.turns),
                           "--timed", str(args.timed), "--warmup", str(args.warmup),
                           "--seed", str(args.seed)],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="/work/main/python", help="python/ dir of checkout a")
    ap.add_argument("--b", default=str(HERE.parent / "python"), help="python/ dir of checkout b")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--timed", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", default="promotion_ab")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.turns, args.timed, args.warmup, args.seed)))
        return
    from _common import git_rev, percentiles, write
    samples: dict[str, list[float]] = {"a": [], "b": []}
    commits: dict[str, list[float]] = {"a": [], "b": []}
    cpu = {side: {"turn": [], "commit": []} for side in "ab"}
    digests: dict[str, list[str]] = {}
    promoted: dict[str, dict[str, int]] = {}
    for rnd in range(args.rounds):
        order = ["a", "b"] if rnd % 2 == 0 else ["b", "a"]
        for side in order:
            got = run_worker(getattr(args, side), args)
            samples[side].extend(got["times"])
            commits[side].extend(got["commits"])
            for stage in ("turn", "commit"):
                cpu[side][stage].extend(got["cpu"][stage])
            digests.setdefault(side, got["digests"])
            promoted.setdefault(side, got["promoted"])
            print(f"round {rnd + 1} {side}: managed turn p50 "
                  f"{percentiles(got['times'])['p50_ms']} ms, commit p50 "
                  f"{percentiles(got['commits'])['p50_ms']} ms", flush=True)
    a, b = percentiles(samples["a"]), percentiles(samples["b"])
    ca, cb = percentiles(commits["a"]), percentiles(commits["b"])
    result = {"a": args.a, "b": args.b, "rev": git_rev(), "rounds": args.rounds,
              "turns": args.turns, "timed_per_round": args.timed, "policy": POLICY,
              "managed_turn_a": a, "managed_turn_b": b,
              "ratio_p50": round(b["p50_ms"] / a["p50_ms"], 3),
              "ratio_p95": round(b["p95_ms"] / a["p95_ms"], 3),
              "commit_turn_a": ca, "commit_turn_b": cb,
              "commit_ratio_p50": round(cb["p50_ms"] / ca["p50_ms"], 3),
              "commit_ratio_p95": round(cb["p95_ms"] / ca["p95_ms"], 3),
              # CPU time of the process (Python and the embedded Prolog): on a
              # shared, loaded machine the steadier figure.
              "cpu": {stage: {"a": percentiles(cpu["a"][stage]),
                              "b": percentiles(cpu["b"][stage]),
                              "ratio_p50": round(percentiles(cpu["b"][stage])["p50_ms"]
                                                 / percentiles(cpu["a"][stage])["p50_ms"], 3),
                              "ratio_mean": round(percentiles(cpu["b"][stage])["mean_ms"]
                                                  / percentiles(cpu["a"][stage])["mean_ms"], 3)}
                      for stage in ("turn", "commit")},
              "promoted_facts": promoted,
              "same_outputs": digests["a"] == digests["b"],
              "differing_turns": [i for i, (x, y) in enumerate(zip(digests["a"], digests["b"]))
                                  if x != y]}
    write(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
