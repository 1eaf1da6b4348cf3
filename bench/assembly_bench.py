"""Assembly cost must depend on the window, not on the history length.

Builds sessions of 1,000, 10,000 and 100,000 turns (synthetic technical chat
with recurring topics, bulk-imported in one transaction) and times
Runtime.assemble on each with the same policy.  Target: the 100k-turn session
assembles within 1.5x the time of the 1k-turn one (ratio measured in this run).

    .venv/bin/python bench/assembly_bench.py [--sizes 1000,10000,100000] [--repeat 40]
"""
from __future__ import annotations

import argparse
import io
import json
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import percentiles, timed, write  # noqa: E402

from ctxrelay import Runtime  # noqa: E402

TOPICS = ["etcd quota", "restic backup", "TLS certificates", "Prometheus alert", "defrag window",
          "kube-apiserver flags", "Grafana dashboard", "Go module proxy", "S3 lifecycle",
          "node pool upgrade", "ingress timeouts", "postgres replication", "DNS caching",
          "cost report", "on-call rota", "terraform state", "helm chart", "log retention"]
VERBS = ["check", "raise", "rotate", "compare", "drain", "inspect", "document", "schedule"]


def synthetic_jsonl(session: str, n: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = [json.dumps({"type": "session", "session_id": session, "created": "2026-01-01T00:00:00Z",
                         "metadata": {}, "archived": False, "turn_count": n})]
    for i in range(1, n + 1):
        topic = rng.choice(TOPICS)
        role = "user" if i % 2 else "assistant"
        words = " ".join(rng.choice(VERBS) + " " + topic.split()[0] + f" item{rng.randrange(5000)}"
                         for _ in range(rng.randrange(4, 30)))
        text = f"About the {topic}: {words}."
        lines.append(json.dumps({"type": "turn", "turn_id": i, "role": role, "content": text,
                                 "timestamp": f"2026-01-01T00:00:{i % 60:02d}Z", "metadata": {}}))
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=40)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # hashing: deriving the turn log of 100k turns with MiniLM would take the
    # bench an hour of set-up; the per-assembly work is the same either way.
    policy = dict(max_context_tokens=4096, output_reserve=512, safety_margin=64, min_recent_turns=4,
                  embedder="hashing")
    questions = ["what did we decide about the etcd quota?", "remind me of the restic backup item",
                 "go on", "and the TLS certificates?"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp, Runtime(Path(tmp) / "store") as rt:
        for n in sizes:
            session = f"s{n}"
            rt.import_jsonl(io.StringIO(synthetic_jsonl(session, n, seed=n)).getvalue(),
                            session_id=session)
            assert rt.turn_count(session) == n
            qi = iter(range(10**9))
            samples = timed(lambda: rt.assemble(session, questions[next(qi) % len(questions)], **policy),
                            repeat=args.repeat)
            r = rt.assemble(session, questions[0], **policy)
            results[str(n)] = {**percentiles(samples), "pack_units": len(r.pack),
                               "request_tokens": r.ledger.total}
            print(f"{n:>7} turns: {results[str(n)]}", flush=True)
    base = results[str(sizes[0])]["p50_ms"]
    ratios = {k: round(v["p50_ms"] / base, 3) for k, v in results.items()}
    largest = str(sizes[-1])
    payload = {"benchmark": "assembly_scaling", "policy": policy, "results": results,
               "p50_ratio_to_smallest": ratios,
               "target": "p50(100k) <= 1.5 x p50(1k)",
               "target_met": ratios[largest] <= 1.5}
    path = write("assembly_scaling", payload)
    print(f"ratios {ratios} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
