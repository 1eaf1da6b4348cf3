"""Calibrate the embedders' thresholds on real conversations, and time them.

    .venv/bin/python bench/calibrate_embedders.py              # every installed embedder
    .venv/bin/python bench/calibrate_embedders.py hashing      # just one
    .venv/bin/python bench/calibrate_embedders.py static       # a bench candidate (embedder_candidates.py)

Writes bench/results/embedder_calibration.json; docs/embedders.md quotes it.

Data:

* ``examples/conversations/etcd_ops.jsonl``: 75 turns with hand-labelled topic
  threads (turn numbers are 1-based lines; line 1 is the system prompt; the
  wrap-up turns 49-50 and 74-75 belong to no thread).
* the LoCoMo dev conversations (``$CTXRELAY_LOCOMO`` or
  ``/work/shared/data/locomo/locomo-dev.json``): long chit-chat between two
  people, no topic labels.  There the next turn of a session stands for "same
  topic" and a turn drawn from another conversation for "new topic".

Statistics (all cosine similarities; a turn-to-thread similarity is the largest
cosine between the turn and the thread's turns, SPEC-028's ``max_similarity``):

* ``topic_same``: continuation turns vs topic switches, each scored against the
  active thread: in etcd_ops the previous turn's thread (its earlier turns); in
  LoCoMo the previous 8 turns of the session, scored for the true next turn and
  for a turn of another conversation ("foreign").  A false "new topic" turns the
  assembler away from the conversation (EXPLORE), which costs more than a
  missed switch (CONTINUE still carries the recent turns), so the threshold is
  the highest one that keeps at least 80 % of the continuations in both data
  sets; the switches it catches are reported.
* ``thread_join``: a new turn is scored against every thread that exists
  before it (gold labels of the earlier turns); it joins the most similar one
  when the score is above the threshold, else starts a thread.  The threshold
  cannot repair a wrong argmax (reported as ``argmax_thread_accuracy``); it
  decides join vs new thread.  A turn about something unrelated must open a
  thread of its own, and LoCoMo's foreign turns are the large sample of those,
  so the threshold is the lowest one, not below ``topic_same``, at which at
  most 5 % of the foreign turns would join.  etcd_ops gives the share of turns
  that join their own thread (argmax right), of turns that would join a wrong
  thread, and of its three thread-opening turns that would join one.
* ``edge``: pairs of items.  Same-thread vs different-thread turn pairs of
  etcd_ops, and pairs of turns from two different LoCoMo conversations
  (unrelated).  Threshold: the lowest one at which at most 5 % of etcd_ops'
  different-thread pairs and at most 1 % of the unrelated LoCoMo pairs get an
  edge.

LoCoMo also gives a retrieval figure for comparing embedders: the mean
reciprocal rank of a question's first evidence turn among all turns of its
conversation (adversarial questions left out).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import percentiles, timed, write  # noqa: E402

from ctxrelay.text import embed  # noqa: E402
from embedder_candidates import CANDIDATES, register_all  # noqa: E402

ETCD = ROOT / "examples" / "conversations" / "etcd_ops.jsonl"
LOCOMO = Path(os.environ.get("CTXRELAY_LOCOMO", "/work/shared/data/locomo/locomo-dev.json"))
ETCD_THREADS = {"etcd-config": [(2, 11), (39, 48), (63, 73)], "backup": [(12, 25), (51, 56)],
                "prometheus-alert": [(26, 36), (57, 62)], "go-proxy": [(37, 38)]}
WINDOW = 8                 # LoCoMo: the active "thread" is the session's previous 8 turns
SEED = 20241112
GRID = np.round(np.arange(-0.20, 1.0001, 0.01), 2)
TOPIC_CONTINUE_KEPT = 0.80
JOIN_FALSE_RATE = 0.05
EDGE_FALSE_RATE_ETCD = 0.05
EDGE_FALSE_RATE_LOCOMO = 0.01


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- data ---------------------------------------------------------------------------

def load_etcd(roles: tuple[str, ...] = ("user", "assistant", "tool")
              ) -> tuple[list[int], list[str], list[str]]:
    label = {i: name for name, spans in ETCD_THREADS.items()
             for a, b in spans for i in range(a, b + 1)}
    nums, texts, labels = [], [], []
    with open(ETCD, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            turn = json.loads(line)
            if n in label and turn["role"] in roles:
                nums.append(n)
                texts.append(turn["content"])
                labels.append(label[n])
    return nums, texts, labels


def load_locomo() -> list[dict[str, Any]]:
    convs = []
    for rec in json.loads(LOCOMO.read_text(encoding="utf-8")):
        c = rec["conversation"]
        sessions, n = [], 1
        while f"session_{n}" in c:
            sessions.append([(t["dia_id"], t["text"]) for t in c[f"session_{n}"]])
            n += 1
        qa = [(q["question"], list(q.get("evidence") or []))
              for q in rec["qa"] if q.get("category") != 5]
        convs.append({"id": rec["sample_id"], "sessions": sessions, "qa": qa})
    return convs


# -- statistics ---------------------------------------------------------------------

def dist(values: list[float] | np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=np.float64)
    q = np.percentile(v, [5, 25, 50, 75, 95])
    return {"n": int(v.size), "mean": round(float(v.mean()), 3),
            **{f"p{p}": round(float(x), 3) for p, x in zip((5, 25, 50, 75, 95), q)}}


def auc(pos: list[float], neg: list[float]) -> float:
    """P(a random positive scores above a random negative), ties counted half."""
    p = np.asarray(pos, dtype=np.float64)
    n = np.sort(np.asarray(neg, dtype=np.float64))
    below = np.searchsorted(n, p, side="left")
    ties = np.searchsorted(n, p, side="right") - below
    return round(float((below + 0.5 * ties).sum() / (p.size * n.size)), 3)


def rate_above(values: list[float], t: float) -> float:
    return float(np.mean(np.asarray(values) > t)) if len(values) else 0.0


def rate_at_or_above(values: list[float], t: float) -> float:
    return float(np.mean(np.asarray(values) >= t)) if len(values) else 0.0


def thread_scores(S: np.ndarray, labels: list[str], i: int) -> dict[str, float]:
    """Turn i's similarity to each thread that has turns before it."""
    out: dict[str, float] = {}
    for j in range(i):
        out[labels[j]] = max(out.get(labels[j], -1.0), float(S[i, j]))
    return out


def etcd_stats(X: np.ndarray, nums: list[int], labels: list[str]) -> dict[str, Any]:
    S = X @ X.T
    n = len(labels)
    same, diff = [], []
    for i in range(n):
        for j in range(i + 1, n):
            (same if labels[i] == labels[j] else diff).append(float(S[i, j]))
    cont, switch, switch_turns = [], [], []
    join_right, join_wrong, opens = [], [], []
    argmax_ok = argmax_n = 0
    per_turn = []
    for i in range(1, n):
        scores = thread_scores(S, labels, i)
        active = labels[i - 1]
        s_active = scores[active]
        if labels[i] == active:
            cont.append(s_active)
        else:
            switch.append(s_active)
            switch_turns.append(nums[i])
        best = max(scores, key=scores.get)
        if labels[i] not in scores:
            opens.append(scores[best])
        else:
            argmax_n += 1
            argmax_ok += best == labels[i]
            (join_right if best == labels[i] else join_wrong).append(scores[best])
        per_turn.append({"turn": nums[i], "thread": labels[i],
                         "scores": {k: round(v, 3) for k, v in sorted(scores.items())}})
    return {"pairs": {"same_thread": same, "different_thread": diff},
            "topic": {"continue": cont, "switch": switch, "switch_turns": switch_turns},
            "join": {"argmax_right": join_right, "argmax_wrong": join_wrong,
                     "opens_new_thread": opens},
            "argmax_thread_accuracy": round(argmax_ok / argmax_n, 3),
            "argmax_n": argmax_n, "per_turn": per_turn}


def locomo_stats(convs: list[dict[str, Any]], embedder: Any) -> dict[str, Any]:
    rng = random.Random(SEED)
    vecs, ids = [], []
    for c in convs:
        texts = [t for s in c["sessions"] for _, t in s]
        vecs.append(embedder.embed_batch(texts))
        ids.append({d: k for k, d in enumerate(d for s in c["sessions"] for d, _ in s)})
    cont, foreign, unrelated = [], [], []
    rr = []
    for ci, c in enumerate(convs):
        V = vecs[ci]
        base = 0
        for s in c["sessions"]:
            for a in range(1, len(s)):
                window = V[base + max(0, a - WINDOW): base + a]
                cont.append(float((window @ V[base + a]).max()))
                other = rng.choice([k for k in range(len(convs)) if k != ci])
                f = vecs[other][rng.randrange(len(vecs[other]))]
                foreign.append(float((window @ f).max()))
            base += len(s)
        Q = embedder.embed_batch([q for q, _ in c["qa"]])
        sims = Q @ V.T
        for qi, (_, evidence) in enumerate(c["qa"]):
            ev = [ids[ci][e] for e in evidence if e in ids[ci]]
            if ev:
                order = np.argsort(-sims[qi], kind="stable")
                rank = int(np.min(np.nonzero(np.isin(order, ev))[0]))
                rr.append(1.0 / (rank + 1))
    for _ in range(20000):
        a, b = rng.sample(range(len(convs)), 2)
        unrelated.append(float(vecs[a][rng.randrange(len(vecs[a]))] @
                               vecs[b][rng.randrange(len(vecs[b]))]))
    return {"topic": {"continue": cont, "foreign": foreign},
            "pairs": {"unrelated": unrelated},
            "question_evidence_mrr": round(float(np.mean(rr)), 3), "questions": len(rr),
            "turns": int(sum(len(v) for v in vecs))}


def rates(etcd: dict[str, Any], loco: dict[str, Any], th: dict[str, float]) -> dict[str, Any]:
    """What each threshold does on both data sets."""
    t, j, e = th["topic_same"], th["thread_join"], th["edge"]
    same, diff = etcd["pairs"]["same_thread"], etcd["pairs"]["different_thread"]
    edged = sum(v >= e for v in same) + sum(v >= e for v in diff)

    def r(x: float) -> float:
        return round(float(x), 3)

    return {
        "thresholds": {k: float(th[k]) for k in embed.THRESHOLD_KEYS},
        "topic_same": {
            "etcd_continue_kept": r(rate_at_or_above(etcd["topic"]["continue"], t)),
            "etcd_switch_detected": r(1 - rate_at_or_above(etcd["topic"]["switch"], t)),
            "locomo_continue_kept": r(rate_at_or_above(loco["topic"]["continue"], t)),
            "locomo_foreign_detected": r(1 - rate_at_or_above(loco["topic"]["foreign"], t))},
        "thread_join": {
            "etcd_joins_own_thread": r(rate_above(etcd["join"]["argmax_right"], j)),
            "etcd_joins_wrong_thread": r(rate_above(etcd["join"]["argmax_wrong"], j)),
            "etcd_opening_turns_joined": r(rate_above(etcd["join"]["opens_new_thread"], j)),
            "locomo_continue_joined": r(rate_above(loco["topic"]["continue"], j)),
            "locomo_foreign_joined": r(rate_above(loco["topic"]["foreign"], j))},
        "edge": {
            "etcd_same_thread_pairs_edged": r(rate_at_or_above(same, e)),
            "etcd_different_thread_pairs_edged": r(rate_at_or_above(diff, e)),
            "etcd_edge_precision": r(sum(v >= e for v in same) / max(1, edged)),
            "locomo_unrelated_pairs_edged": r(rate_at_or_above(loco["pairs"]["unrelated"], e))},
    }


def choose(etcd: dict[str, Any], loco: dict[str, Any]) -> dict[str, float]:
    """Apply the rules in the module docstring over GRID."""
    topic_t = max(float(t) for t in GRID
                  if rate_at_or_above(etcd["topic"]["continue"], t) >= TOPIC_CONTINUE_KEPT
                  and rate_at_or_above(loco["topic"]["continue"], t) >= TOPIC_CONTINUE_KEPT)
    join_t = min(float(t) for t in GRID
                 if t >= topic_t and rate_above(loco["topic"]["foreign"], t) <= JOIN_FALSE_RATE)
    edge_t = min(float(t) for t in GRID
                 if rate_at_or_above(etcd["pairs"]["different_thread"], t) <= EDGE_FALSE_RATE_ETCD
                 and rate_at_or_above(loco["pairs"]["unrelated"], t) <= EDGE_FALSE_RATE_LOCOMO)
    return {"thread_join": join_t, "topic_same": topic_t, "edge": edge_t}


# -- speed --------------------------------------------------------------------------

def cold_start_s(name: str) -> float:
    """A fresh interpreter: import, build, first embedding (model load included)."""
    code = ("import time; t=time.perf_counter(); from ctxrelay.text import embed; "
            + ("import sys; sys.path.insert(0, 'bench'); import embedder_candidates; "
               "embedder_candidates.register_all(); " if name in CANDIDATES else "")
            + f"e=embed.get_embedder({name!r}); e.embed_batch(['warm up']); "
            "print(time.perf_counter()-t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    return round(float(out.stdout.strip().splitlines()[-1]), 2)


def speed(embedder: Any, name: str, etcd_texts: list[str], loco_texts: list[str]) -> dict[str, Any]:
    load = round(os.getloadavg()[0], 2)   # the machine may be shared: read timings with it
    embedder.embed_batch(["warm up"])
    # The model itself, not the memo of recent vectors: _embed where there is one.
    compute = getattr(embedder, "_embed", embedder.embed_batch)
    short = "how do we rotate the etcd peer certs before they expire?"
    single = percentiles(timed(lambda: compute([short]), repeat=50, warmup=5))
    out: dict[str, Any] = {"single_short_text": single, "cold_start_s": cold_start_s(name),
                           "loadavg_1m_at_start": load}
    for label, texts in (("locomo_turns", loco_texts), ("etcd_turns", etcd_texts)):
        runs = timed(lambda: compute(list(texts)), repeat=3, warmup=1)
        best = min(runs)
        out[label] = {"texts": len(texts),
                      "mean_chars": round(sum(map(len, texts)) / len(texts)),
                      "best_s": round(best, 3), "texts_per_s": round(len(texts) / best, 1)}
    return out


# -- main ---------------------------------------------------------------------------

def calibrate(name: str, nums: list[int], etcd_texts: list[str], labels: list[str],
              convs: list[dict[str, Any]]) -> dict[str, Any]:
    e = embed.get_embedder(name)
    progress(f"{name} ({e.model_id}): etcd_ops")
    etcd = etcd_stats(e.embed_batch(etcd_texts), nums, labels)
    # A threading that links user turns to the threads' earlier user turns only
    # sees shorter texts and lower similarities: reported, not calibrated on.
    unums, utexts, ulabels = load_etcd(("user",))
    user = etcd_stats(e.embed_batch(utexts), unums, ulabels)
    th = e.thresholds
    user_only = {
        "turns": len(unums),
        "argmax_thread_accuracy": user["argmax_thread_accuracy"],
        "join_argmax_right": dist(user["join"]["argmax_right"]),
        "joins_own_thread_at_shipped": round(rate_above(user["join"]["argmax_right"], th["thread_join"]), 3),
        "joins_wrong_thread_at_shipped": round(rate_above(user["join"]["argmax_wrong"], th["thread_join"]), 3),
        "opens_new_thread_values": [round(v, 3) for v in user["join"]["opens_new_thread"]],
        "topic_continue": dist(user["topic"]["continue"]),
        "topic_switch_values": [round(v, 3) for v in user["topic"]["switch"]],
        "continue_kept_at_shipped": round(rate_at_or_above(user["topic"]["continue"], th["topic_same"]), 3),
        "switch_detected_at_shipped": round(1 - rate_at_or_above(user["topic"]["switch"], th["topic_same"]), 3),
    }
    progress(f"{name}: LoCoMo")
    loco = locomo_stats(convs, e)
    chosen = choose(etcd, loco)
    progress(f"{name}: speed")
    loco_texts = [t for s in convs[0]["sessions"] for _, t in s][:256]
    return {
        "model_id": e.model_id, "dim": e.dim,
        "etcd_ops": {
            "pairs_same_thread": dist(etcd["pairs"]["same_thread"]),
            "pairs_different_thread": dist(etcd["pairs"]["different_thread"]),
            "pairs_auc": auc(etcd["pairs"]["same_thread"], etcd["pairs"]["different_thread"]),
            "topic_continue": dist(etcd["topic"]["continue"]),
            "topic_switch": dist(etcd["topic"]["switch"]),
            "topic_switch_values": [round(v, 3) for v in etcd["topic"]["switch"]],
            "topic_switch_turns": etcd["topic"]["switch_turns"],
            "topic_auc": auc(etcd["topic"]["continue"], etcd["topic"]["switch"]),
            "join_argmax_right": dist(etcd["join"]["argmax_right"]),
            "join_argmax_wrong": dist(etcd["join"]["argmax_wrong"]),
            "join_opens_new_thread_values": [round(v, 3) for v in etcd["join"]["opens_new_thread"]],
            "argmax_thread_accuracy": etcd["argmax_thread_accuracy"],
            "argmax_n": etcd["argmax_n"],
            "per_turn_thread_scores": etcd["per_turn"],
        },
        "etcd_ops_user_turns_only": user_only,
        "locomo": {
            "turns": loco["turns"],
            "topic_continue_window8": dist(loco["topic"]["continue"]),
            "topic_foreign_window8": dist(loco["topic"]["foreign"]),
            "topic_auc": auc(loco["topic"]["continue"], loco["topic"]["foreign"]),
            "pairs_unrelated": dist(loco["pairs"]["unrelated"]),
            "question_evidence_mrr": loco["question_evidence_mrr"],
            "questions": loco["questions"],
        },
        "chosen": rates(etcd, loco, chosen),
        "shipped": rates(etcd, loco, e.thresholds),
        "spec_thresholds": rates(etcd, loco, embed.SPEC_THRESHOLDS),
        "speed": speed(e, name, etcd_texts, loco_texts),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*",
                    help="embedders (default: the installed built-in ones: hashing, minilm-onnx, minilm)")
    args = ap.parse_args()
    register_all()
    names = args.names or (["hashing"] + (["minilm-onnx"] if embed.onnx_available() else [])
                           + (["minilm"] if embed.minilm_available() else []))
    nums, etcd_texts, labels = load_etcd()
    convs = load_locomo()
    results = {name: calibrate(name, nums, etcd_texts, labels, convs) for name in names}
    for name, r in results.items():
        print(f"{name:16s} {r['model_id']:26s} chosen "
              + ", ".join(f"{k}={v:.2f}" for k, v in r["chosen"]["thresholds"].items())
              + f"  shipped {r['shipped']['thresholds']}"
              + f"  etcd pair AUC {r['etcd_ops']['pairs_auc']}, argmax {r['etcd_ops']['argmax_thread_accuracy']},"
              + f" LoCoMo MRR {r['locomo']['question_evidence_mrr']}")
    path = write("embedder_calibration", {
        "default": embed.default_choice().__dict__,
        "method": __doc__.split("Statistics", 1)[1].strip(),
        "data": {"etcd_ops": str(ETCD.relative_to(ROOT)), "etcd_threads": ETCD_THREADS,
                 "locomo": str(LOCOMO), "locomo_window": WINDOW, "seed": SEED},
        "embedders": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
