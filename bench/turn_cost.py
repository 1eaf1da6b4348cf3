"""CPU time of a managed turn against ``Runtime.assemble`` on the same session (issue #16.2).

Target: a managed turn (echo provider, a 1,000-turn session) costs at most 1.3x
the CPU time (``time.process_time``: every thread of the process) of
``Runtime.assemble`` for the same message on the same session, measured in one
run.  Each round assembles a new message, then runs it as a managed turn, in
that order, so both see the same session (the turn then adds two turns);
alternately, the turn runs as ``prepare_turn`` + the echo reply +
``commit_turn`` (what the relay does), so the stages are timed on their own:

prepare     assembling the pack (the assembly of the turn)
commit      storing the message and the reply, deriving their turn-log entries,
            recording references, promoting durable values

    .venv/bin/python bench/turn_cost.py [--turns 1000] [--rounds 40] [--embedder NAME]

Writes ``bench/results/turn_cost.json``.
"""
from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_rev, machine, write  # noqa: E402
from assembly_bench import TOPICS, synthetic_jsonl  # noqa: E402

from ctxrelay import Runtime  # noqa: E402

QUESTIONS = ["what did we decide about the {t}?", "remind me of the {t} item {i}",
             "go deeper on the {t} and how it relates to item {i}", "and the {t}, what was open?"]
TARGET = 1.3


def cpu_ms(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 3),
            "mean_ms": round(statistics.fmean(ms), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--embedder", default=None, help="default: the default embedder")
    ap.add_argument("--out", default="turn_cost")
    args = ap.parse_args()
    policy = {"embedder": args.embedder} if args.embedder else {}
    rng = random.Random(11)
    cost: dict[str, list[float]] = {k: [] for k in (
        "assemble", "managed_turn", "assemble_before_split", "prepare", "commit")}
    with tempfile.TemporaryDirectory() as tmp, Runtime(Path(tmp) / "store") as rt:
        rt.import_jsonl(io.StringIO(synthetic_jsonl("s", args.turns, seed=3)).getvalue(),
                        session_id="s")
        t0 = time.perf_counter()
        rt.assemble("s", "warm up: derive the turn log", **policy)
        derive_s = time.perf_counter() - t0
        for i in range(-4, args.rounds):
            text = QUESTIONS[i % 4].format(t=rng.choice(TOPICS), i=rng.randrange(5000)) + f" ({i})"
            c0 = time.process_time()
            rt.assemble("s", text, **policy)
            c1 = time.process_time()
            if i % 2 == 0:
                rt.managed_turn("s", text, **policy)
                c2 = time.process_time()
                if i >= 0:
                    cost["assemble"].append(c1 - c0)
                    cost["managed_turn"].append(c2 - c1)
            else:
                prepared = rt.prepare_turn("s", text, **policy)
                c2 = time.process_time()
                reply = prepared.result.messages[-1]["content"]   # what the echo provider returns
                rt.commit_turn(prepared, f"echo: {reply}", provider="echo")
                c3 = time.process_time()
                if i >= 0:
                    cost["assemble_before_split"].append(c1 - c0)
                    cost["prepare"].append(c2 - c1)
                    cost["commit"].append(c3 - c2)
        turns_after = rt.turn_count("s")
    stats = {k: cpu_ms(v) for k, v in cost.items()}
    ratio = round(stats["managed_turn"]["median_ms"] / stats["assemble"]["median_ms"], 3)
    split = {k: round(stats[k]["median_ms"] / stats["assemble_before_split"]["median_ms"], 3)
             for k in ("prepare", "commit")}
    payload = {
        "benchmark": "turn_cost", "commit": git_rev(), "machine": machine(),
        "session_turns": args.turns, "turns_after": turns_after, "rounds": args.rounds,
        "embedder": args.embedder or "default", "derive_session_s": round(derive_s, 1),
        "cpu": stats,
        "ratio_managed_turn_over_assemble": ratio,
        "stages_over_assemble": split,
        "target": f"managed turn CPU <= {TARGET}x assemble CPU",
        "target_met": ratio <= TARGET,
    }
    print(f"managed turn / assemble CPU: {ratio} (stages over assemble: {split})")
    print(f"-> {write(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
