"""Accuracy and latency of the per-turn intent classifier (CRP-SPEC-028 §5).

Reads the labelled turns in ``bench/data/intents.jsonl`` (each with its own
short preceding conversation, scratch entries, the gold intent and the gold
reference types), classifies every turn with ``classify_intent/4`` and
reports, per split (``dev``: the turns the marker lists were checked against;
``heldout``: turns written at the same time but evaluated only at the end):

- accuracy overall and per gold intent (= recall), precision per intent and
  the confusion matrix;
- reference detection against the gold reference types (per-type precision
  and recall, exact type-set match);
- classifier latency p50/p95 in microseconds, measured inside Prolog (a
  loop of ``classify_intent/4`` calls per turn, janus conversion excluded),
  and, separately, per call from Python through janus.

The caller's part is what a runtime would do: the topic similarity is the
maximum cosine (``ctxrelay.text.embed`` ``hashing`` embedder) between the turn and
the previous turns, the threshold is that embedder's ``topic_same``, and
``mentioned`` is ``mention_words/2`` of the previous turns.

    .venv/bin/python bench/intent_bench.py                 # both splits
    .venv/bin/python bench/intent_bench.py --split dev     # tuning: dev only
    .venv/bin/python bench/intent_bench.py --no-mentioned --no-write   # ablation
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

import janus_swi as janus  # noqa: E402

import ctxrelay  # noqa: E402,F401  (embeds Prolog, puts library(ctxrelay) on the path)
from ctxrelay.text.embed import get_embedder  # noqa: E402
from _common import write  # noqa: E402

DATA = HERE / "data" / "intents.jsonl"
INTENTS = ["explore", "drill_down", "clarify", "continue", "tool_reference"]
REF_TYPES = ["entity", "turn", "ordinal", "action", "tool"]

# Timing loop inside Prolog: N calls, wall time per call in microseconds.
_TIMING = """
:- use_module(library(ctxrelay/intent)).
:- use_module(library(ctxrelay/references)).

intent_bench_time(Text, Context, N, Micros) :-
    get_time(T0),
    forall(between(1, N, _), classify_intent(Text, Context, _, _)),
    get_time(T1),
    Micros is (T1 - T0) / N * 1.0e6.

intent_bench_one(Text, Context, Intent, Step, Types) :-
    classify_intent(Text, Context, Intent, E),
    get_dict(step, E, Step),
    get_dict(refs, E, Refs),
    findall(T, member(ref(T, _, _), Refs), Types0),
    sort(Types0, Types).
"""


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def context_for(item: dict[str, Any], embedder: Any, threshold: float, *,
                mentioned: bool = True) -> dict[str, Any]:
    """What a runtime passes as Context: similarity, threshold, mentioned words."""
    prior = [t["content"] for t in item["context"]]
    ctx: dict[str, Any] = {"topic_threshold": threshold}
    if prior:
        vecs = embedder.embed_batch([item["text"], *prior])
        ctx["topic_similarity"] = float(np.max(vecs[1:] @ vecs[0]))
        if mentioned:
            words = janus.query_once("mention_words(T, W)", {"T": "\n".join(prior)})["W"]
            ctx["mentioned"] = list(words)
    return ctx


def percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def evaluate(items: list[dict[str, Any]], embedder: Any, threshold: float,
             repeat: int, *, mentioned: bool = True) -> dict[str, Any]:
    confusion: dict[str, Counter[str]] = {g: Counter() for g in INTENTS}
    ref_tp: Counter[str] = Counter()
    ref_fp: Counter[str] = Counter()
    ref_fn: Counter[str] = Counter()
    exact_refs = 0
    errors = []
    prolog_us: list[float] = []
    janus_us: list[float] = []
    steps: Counter[str] = Counter()
    for item in items:
        ctx = context_for(item, embedder, threshold, mentioned=mentioned)
        binds = {"T": item["text"], "C": ctx}
        t0 = time.perf_counter()
        r = janus.query_once("intent_bench_one(T, C, I, S, Ty)", binds)
        janus_us.append((time.perf_counter() - t0) * 1e6)
        pred, step, types = str(r["I"]), str(r["S"]), sorted(str(t) for t in r["Ty"])
        prolog_us.append(janus.query_once("intent_bench_time(T, C, N, M)",
                                          {**binds, "N": repeat})["M"])
        steps[step] += 1
        confusion[item["intent"]][pred] += 1
        gold_types = set(item["refs"])
        got = set(types)
        exact_refs += gold_types == got
        for t in REF_TYPES:
            ref_tp[t] += (t in gold_types) and (t in got)
            ref_fp[t] += (t not in gold_types) and (t in got)
            ref_fn[t] += (t in gold_types) and (t not in got)
        if pred != item["intent"]:
            errors.append({"id": item["id"], "text": item["text"], "gold": item["intent"],
                           "predicted": pred, "step": step, "refs": types,
                           "topic_similarity": round(ctx.get("topic_similarity", -1.0), 3)})
    n = len(items)
    correct = sum(confusion[g][g] for g in INTENTS)
    per_intent = {}
    for g in INTENTS:
        support = sum(confusion[g].values())
        predicted = sum(confusion[x][g] for x in INTENTS)
        per_intent[g] = {"support": support,
                         "accuracy": round(confusion[g][g] / support, 3) if support else None,
                         "precision": round(confusion[g][g] / predicted, 3) if predicted else None}
    refs = {}
    for t in REF_TYPES:
        tp, fp, fn = ref_tp[t], ref_fp[t], ref_fn[t]
        refs[t] = {"gold": tp + fn, "detected": tp + fp,
                   "precision": round(tp / (tp + fp), 3) if tp + fp else None,
                   "recall": round(tp / (tp + fn), 3) if tp + fn else None}
    return {
        "n": n,
        "accuracy": round(correct / n, 3),
        "per_intent": per_intent,
        "confusion": {g: {p: confusion[g][p] for p in INTENTS} for g in INTENTS},
        "decided_by_step": dict(steps),
        "references": {"per_type": refs, "exact_type_set": round(exact_refs / n, 3)},
        "latency_us": {
            "prolog_p50": round(percentile(prolog_us, 50), 1),
            "prolog_p95": round(percentile(prolog_us, 95), 1),
            "prolog_max": round(max(prolog_us), 1),
            "janus_call_p50": round(percentile(janus_us, 50), 1),
            "janus_call_p95": round(percentile(janus_us, 95), 1),
            "repeat_per_turn": repeat,
        },
        "errors": errors,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=["dev", "heldout", "all"], default="all")
    ap.add_argument("--repeat", type=int, default=200, help="classifier calls per turn when timing")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--no-write", action="store_true", help="print only, leave bench/results alone")
    ap.add_argument("--no-mentioned", action="store_true",
                    help="ablation: leave out the context key `mentioned` (spec-literal step 3)")
    args = ap.parse_args()

    janus.consult("intent_bench", data=_TIMING)
    embedder = get_embedder("hashing")
    threshold = float(embedder.thresholds["topic_same"])
    items = load(args.data)
    splits = ["dev", "heldout"] if args.split == "all" else [args.split]
    results = {}
    for split in splits:
        chosen = [i for i in items if i["split"] == split]
        results[split] = evaluate(chosen, embedder, threshold, args.repeat,
                                  mentioned=not args.no_mentioned)
        r = results[split]
        print(f"== {split}: n={r['n']} accuracy={r['accuracy']}")
        for g, v in r["per_intent"].items():
            print(f"   {g:<15} acc={v['accuracy']}  prec={v['precision']}  n={v['support']}")
        lat = r["latency_us"]
        print(f"   latency (us, in Prolog): p50={lat['prolog_p50']} p95={lat['prolog_p95']}"
              f"  via janus p50={lat['janus_call_p50']}")
        print(f"   references: exact type set {r['references']['exact_type_set']}; "
              + ", ".join(f"{t} P={v['precision']} R={v['recall']}"
                          for t, v in r["references"]["per_type"].items()))
    if args.split == "all":
        all_items = [i for i in items if i["split"] in ("dev", "heldout")]
        overall = evaluate(all_items, embedder, threshold, max(20, args.repeat // 10),
                           mentioned=not args.no_mentioned)
        results["all"] = {k: overall[k] for k in ("n", "accuracy", "per_intent")}
        print(f"== all: n={overall['n']} accuracy={overall['accuracy']}")
    payload = {"benchmark": "intent", "data": str(args.data.relative_to(HERE.parent))
               if args.data.is_relative_to(HERE.parent) else str(args.data),
               "embedder": embedder.model_id, "topic_threshold": threshold,
               "context_keys": ["topic_similarity", "topic_threshold"]
               + ([] if args.no_mentioned else ["mentioned"]),
               "splits": results}
    if not args.no_write:
        path = write("intent", payload)
        print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
