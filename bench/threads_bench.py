"""Topic-thread assignment and labels on scripted conversations (CRP-SPEC-028 §3.3).

Reads the annotated conversations in ``bench/data/threads/`` (``dev.txt``: the
thread rules were tuned on these; ``heldout.txt``: written at the same time,
only evaluated), replays each into a fresh store turn by turn, derives the turn
log after every turn (as a managed conversation does: the thread rules place
each stored turn) and reports, per split and embedder:

- pairwise thread-assignment precision, recall and F1 over all turns and over
  user turns (a pair of turns is positive when both are in one thread),
  micro-averaged over the conversations, and the mean per conversation;
- label quality: the share of predicted threads whose label uses a word the
  annotation accepts for the gold thread most of its turns belong to; labels
  unique per session; labels unchanged from the turn a thread starts to the end;
- the number of gold and predicted threads, and the time per derived turn;
- the intent classifier's accuracy on ``bench/data/intents.jsonl`` (as
  ``bench/intent_bench.py`` measures it), which reads the thread decision.

    .venv/bin/python bench/threads_bench.py                       # both splits, every embedder
    .venv/bin/python bench/threads_bench.py --split dev --embedder hashing   # tuning
    .venv/bin/python bench/threads_bench.py --split dev --show    # print the mistakes
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

import ctxrelay  # noqa: E402,F401  (embeds Prolog, puts library(ctxrelay) on the path)
from ctxrelay.text.threads import stem  # noqa: E402
from ctxrelay.storage.lmdb.transcript import TranscriptStore  # noqa: E402
from ctxrelay.storage.lmdb.turnlog import TurnLog  # noqa: E402
from ctxrelay.text.embed import get_embedder, registered  # noqa: E402
from _common import write  # noqa: E402

DATA = HERE / "data" / "threads"
SPLITS = ("dev", "heldout")


@dataclass
class Conversation:
    cid: str
    title: str
    accept: dict[str, list[str]] = field(default_factory=dict)
    turns: list[tuple[str, str, str]] = field(default_factory=list)   # gold thread, role, text


def load(split: str) -> list[Conversation]:
    convs: list[Conversation] = []
    for line in (DATA / f"{split}.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        if line.startswith("=== "):
            cid, _, title = line[4:].partition(" | ")
            convs.append(Conversation(cid.strip(), title.strip()))
        elif line.startswith("@ "):
            name, _, words = line[2:].partition(":")
            convs[-1].accept[name.strip()] = [w.strip().lower() for w in words.split(",")]
        else:
            m = re.match(r"(\S+) ([UA]): (.*)$", line)
            if not m:
                raise ValueError(f"{split}.txt: cannot read {line!r}")
            role = "user" if m.group(2) == "U" else "assistant"
            convs[-1].turns.append((m.group(1), role, m.group(3)))
    return convs


def pair_counts(gold: list[str], pred: list[str]) -> tuple[int, int, int]:
    tp = fp = fn = 0
    for i in range(len(gold)):
        for j in range(i + 1, len(gold)):
            g, p = gold[i] == gold[j], pred[i] == pred[j]
            tp += g and p
            fp += p and not g
            fn += g and not p
    return tp, fp, fn


def prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4)}


def label_ok(label: str, accepted: list[str]) -> bool:
    words = [w for w in label.split("-") if w and not w.isdigit()]
    keys = {stem(a) for a in accepted} | set(accepted)
    return any(w in keys or stem(w) in keys or any(a.startswith(w) or w.startswith(a)
                                                   for a in accepted if len(a) >= 4 and len(w) >= 4)
               for w in words)


def run_conversation(conv: Conversation, embedder: Any, root: Path) -> dict[str, Any]:
    st = TranscriptStore(root / conv.cid / "t")
    tl = TurnLog.open(root / conv.cid / "tl")
    try:
        st.create_session("s")
        first_label: dict[str, str] = {}
        seconds = 0.0
        for _gold, role, text in conv.turns:
            st.append("s", role, text)
            t0 = time.perf_counter()
            tl.sync(st, "s", embedder)
            seconds += time.perf_counter() - t0
            for info in tl.threads("s"):
                first_label.setdefault(info.thread_id, info.label)
        pred = [tl.derived("s", i + 1).thread_id for i in range(len(conv.turns))]
        threads = {t.thread_id: t.label for t in tl.threads("s")}
    finally:
        tl.close()
        st.close()
    gold = [g for g, _, _ in conv.turns]
    users = [i for i, (_, role, _) in enumerate(conv.turns) if role == "user"]
    labels = []
    for tid, label in threads.items():
        members = [gold[i] for i, p in enumerate(pred) if p == tid]
        majority = Counter(members).most_common(1)[0][0]
        labels.append({"thread": tid, "label": label, "gold": majority,
                       "ok": label_ok(label, conv.accept.get(majority, [])),
                       "stable": first_label.get(tid) == label})
    return {"id": conv.cid, "gold": gold, "pred": pred, "users": users, "labels": labels,
            "all": pair_counts(gold, pred),
            "user": pair_counts([gold[i] for i in users], [pred[i] for i in users]),
            "seconds": seconds, "turns": len(conv.turns),
            "unique_labels": len(set(threads.values())) == len(threads)}


def evaluate(split: str, embedder_name: str, show: bool) -> dict[str, Any]:
    embedder = get_embedder(embedder_name)
    convs = load(split)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for conv in convs:
            results.append(run_conversation(conv, embedder, Path(tmp)))
    tot_all = [sum(r["all"][k] for r in results) for k in range(3)]
    tot_user = [sum(r["user"][k] for r in results) for k in range(3)]
    per_conv = [prf(*r["all"])["f1"] for r in results]
    labels = [lab for r in results for lab in r["labels"]]
    if show:
        for r, conv in zip(results, convs):
            f1 = prf(*r["all"])["f1"]
            if f1 < 1.0:
                print(f"--- {conv.cid} F1 {f1:.3f} ({embedder_name})")
                for (g, role, text), p in zip(conv.turns, r["pred"]):
                    if role == "user":
                        print(f"  {g:>10} {p:>4}  {text[:90]}")
                print("  labels:", [(lab["label"], lab["gold"], lab["ok"]) for lab in r["labels"]])
    turns = sum(r["turns"] for r in results)
    return {
        "conversations": len(results), "turns": turns,
        "pairwise_all_turns": prf(*tot_all), "pairwise_user_turns": prf(*tot_user),
        "mean_f1_per_conversation": round(sum(per_conv) / len(per_conv), 4),
        "f1_per_conversation": {r["id"]: round(f, 4) for r, f in zip(results, per_conv)},
        "worst_conversations": sorted(((r["id"], round(f, 3)) for r, f in zip(results, per_conv)),
                                      key=lambda x: x[1])[:5],
        "labels": {"threads": len(labels),
                   "accepted_share": round(sum(lab["ok"] for lab in labels) / len(labels), 4),
                   "unique_per_session": all(r["unique_labels"] for r in results),
                   "stable_share": round(sum(lab["stable"] for lab in labels) / len(labels), 4),
                   "examples": [lab["label"] for lab in labels[:12]]},
        "gold_threads": sum(len(set(r["gold"])) for r in results),
        "predicted_threads": sum(len(set(r["pred"])) for r in results),
        "ms_per_turn_derived": round(sum(r["seconds"] for r in results) / turns * 1000, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=SPLITS, action="append")
    ap.add_argument("--embedder", action="append",
                    help="embedder name (default: every shipped one that is installed)")
    ap.add_argument("--show", action="store_true", help="print the conversations with mistakes")
    ap.add_argument("--trace", help="conversation id: print each user turn's numbers and decision")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", default="threads", help="results name under bench/results")
    ap.add_argument("--heldout-runs", type=int, default=None,
                    help="record how many times the held-out split has been evaluated "
                         "while the current rules were written (this run included)")
    args = ap.parse_args()
    names = args.embedder or shipped_embedders()
    if args.trace:
        trace(args.trace, names[0])
        return
    out: dict[str, Any] = {"benchmark": "threads", "data": "bench/data/threads",
                           "command": " ".join(["bench/threads_bench.py", *sys.argv[1:]]),
                           "embedders": {}}
    if args.heldout_runs is not None:
        out["heldout_runs"] = args.heldout_runs
    for name in names:
        emb = get_embedder(name)
        out["embedders"][name] = {"model_id": emb.model_id, "thresholds": dict(emb.thresholds),
                                  "splits": {}}
        for split in args.split or SPLITS:
            res = evaluate(split, name, args.show)
            out["embedders"][name]["splits"][split] = res
            print(f"{name:>8} {split:>8}: F1 all {res['pairwise_all_turns']['f1']:.3f} "
                  f"user {res['pairwise_user_turns']['f1']:.3f} "
                  f"(P {res['pairwise_all_turns']['precision']:.3f} "
                  f"R {res['pairwise_all_turns']['recall']:.3f}); labels accepted "
                  f"{res['labels']['accepted_share']:.3f}, unique "
                  f"{res['labels']['unique_per_session']}, stable {res['labels']['stable_share']:.3f}; "
                  f"threads {res['predicted_threads']}/{res['gold_threads']}; "
                  f"{res['ms_per_turn_derived']:.2f} ms/turn")
    if not args.split or args.split == list(SPLITS):
        out["intent_accuracy"] = intent_accuracy()
        print("intent accuracy (bench/data/intents.jsonl, as bench/intent_bench.py):",
              out["intent_accuracy"])
    if not args.no_write:
        print("wrote", write(args.out, out))


def intent_accuracy() -> dict[str, float]:
    """The intent classifier's accuracy on the existing labelled set, per split, so
    the thread rules' effect on it (they feed its last step) is read beside them."""
    import janus_swi as janus
    import intent_bench
    janus.consult("intent_bench", data=intent_bench._TIMING)
    embedder = get_embedder("hashing")
    threshold = float(embedder.thresholds["topic_same"])
    items = intent_bench.load(intent_bench.DATA)
    out = {}
    for split in ("dev", "heldout", "all"):
        chosen = [i for i in items if split == "all" or i["split"] == split]
        out[split] = intent_bench.evaluate(chosen, embedder, threshold, 1)["accuracy"]
    return out


def trace(cid: str, name: str) -> None:
    """Replay one conversation and print, for each user turn, what the rules saw."""
    emb = get_embedder(name)
    conv = next(c for split in SPLITS for c in load(split) if c.cid == cid)
    with tempfile.TemporaryDirectory() as tmp:
        st = TranscriptStore(Path(tmp) / "t")
        tl = TurnLog.open(Path(tmp) / "tl")
        st.create_session("s")
        for gold, role, text in conv.turns:
            if role == "user":
                book = tl.thread_book("s", emb.thresholds)
                placed = book.place(text, emb.embed_batch([text])[0])
                feats = book.features(text, emb.embed_batch([text])[0])
                print(f"{gold:>10} -> {placed.action} {placed.thread_id} ({placed.rule}) | {text[:70]}")
                for f in feats:
                    print(f"{'':>14}{f['thread']} sim {f['sim']:.2f} overlap {f['overlap']:.2f} "
                          f"shared {f['shared']}")
            st.append("s", role, text)
            tl.sync(st, "s", emb)
        tl.close()
        st.close()


def shipped_embedders() -> list[str]:
    """The embedders ctxrelay ships (registered at import) that can run here."""
    from ctxrelay.text.embed import EmbedderUnavailableError
    names = []
    for name in registered():
        try:
            get_embedder(name).embed_batch(["probe"])
        except EmbedderUnavailableError:
            continue
        names.append(name)
    return names


if __name__ == "__main__":
    main()
