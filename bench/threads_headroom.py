"""How far the thread rules' numbers can go: separability and an upper bound.

The thread benchmark (``bench/threads_bench.py``) scores where the thread rules
put each user turn.  This asks a narrower question of the same conversations:
at each user turn after the first, do the numbers the rules can see (per
shipped embedder) tell "stays in the current thread" from "moves to another or
a new thread" (the gold decision)?

- **Signals.** For each user turn: the cosine of the message to the current
  thread's latest turns (``sim_cur``, what the rules call ``sim``), to its
  latest exchange (``bridge_cur``), to its last user turn alone, to the mean of
  its latest turns; the largest cosine to any other thread and the margin; the
  weighted share of the message's content words the current thread used
  (``overlap_cur``), the largest such share of another thread and the margin;
  how many of its words the latest exchange used; the share of its words the
  current thread never used; its number of content words; the bridge over the
  thread's own mean bridge (``bridge_rel``); how many user turns the current
  thread holds (``user_turns_cur``).  The last two carry how long the thread
  has gone on, a prior of how the conversations were written rather than
  evidence of a topic (:data:`LENGTH_SIGNALS`).  A decision is *cued* when the
  message holds a return cue, a clarify, follow-up or topic-shift marker or a
  topic opener (the phrases of ``ctxrelay_thread_rules``/``ctxrelay_intent``),
  or a phrase rule decided it (a follow-up by pronoun or reference); the other
  decisions, which rest on the numbers, are *uncued*.
- **Separability** (``gold_state``): the threads are the gold ones (each turn
  is put where the annotation says, teacher forcing), so a signal is read as
  it would be if every earlier decision had been right.  Per signal: ROC AUC
  for "moves" (oriented on dev: 0.5 is chance, 1.0 perfect) and the best F1 of
  the "moves" class a threshold chosen on dev gives; on all decisions and on
  the uncued ones.  Combinations: a logistic regression and a depth-2 decision
  tree (a rule of two thresholds), on all signals and on the topical ones
  (without :data:`LENGTH_SIGNALS`), their AUC and F1 cross-validated by
  conversation on dev (five folds).  The rules' own decision on the same state
  is given beside them (precision, recall, F1 of "moves").
- **Upper bound** (``bound``): the conversations are replayed as the benchmark
  does (the replay reproduces its pairwise F1), with the rules deciding every
  turn, except the uncued decisions, which one threshold on one signal (or a
  combination's score, fit on dev's gold state) decides: ``replace``: stay or
  move; ``add_moves``: where the rules stay, the signal may still move.  A move
  goes to the thread the gold turns of its target are in (``oracle`` target:
  an upper bound on where to go) or where the rules went if they moved, else a
  new thread (``rule`` target).  The threshold is the best of
  :data:`THRESHOLDS` quantiles for dev's pairwise F1 (the bench's own scoring,
  imported); held-out uses dev's threshold, and its own best threshold is shown
  as a ceiling.  ``perfect`` decides every uncued decision as the gold says:
  the ceiling of any stay/move signal.

Held-out is read for numbers only (nothing printed per turn or conversation).

    .venv/bin/python bench/threads_headroom.py --split dev --embedder hashing --no-write
    .venv/bin/python bench/threads_headroom.py              # dev and held-out, every shipped embedder
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))

import ctxrelay  # noqa: E402,F401  (embeds Prolog)
from ctxrelay.bridge import engine  # noqa: E402
from ctxrelay.text.bounds import embedding_texts  # noqa: E402
from ctxrelay.text.embed import get_embedder  # noqa: E402
from ctxrelay.text.threads import ThreadBook, ThreadEntry, content_stems  # noqa: E402
from ctxrelay.types import Turn  # noqa: E402
from _common import write  # noqa: E402
from threads_bench import SPLITS, Conversation, load, pair_counts, prf, shipped_embedders  # noqa: E402

#: Rules that decide on a phrase or the words of an earlier turn, not on the
#: numbers: the bound keeps their decisions.
PHRASE_RULES = frozenset({"first", "return_cue", "return_cue_similar", "return_cue_earlier",
                          "clarify", "follow_up"})
CUES = ("return", "clarify", "follow_up", "topic_shift", "opener")
#: Signals in the order reported; "higher means moves" is found on dev.
SIGNALS = ("sim_cur", "bridge_cur", "last_user_sim", "centroid_cur", "sim_other_max",
           "sim_margin", "overlap_cur", "overlap_other_max", "overlap_margin", "recent_cur",
           "new_word_share", "terms", "bridge_rel", "user_turns_cur")
#: Signals that carry how long the current thread has gone on (``bridge_rel`` is 1.0
#: until the thread has two follow-ups): a prior of how the conversations were
#: written (a sub-topic lasts a few questions), not evidence of a topic.  The
#: ``topical`` combinations leave them out.
LENGTH_SIGNALS = frozenset({"bridge_rel", "user_turns_cur"})
THRESHOLDS = 16          # candidate thresholds per signal in the bound's sweep (quantiles)


# -- cues (the rules' own phrase lists) -------------------------------------------------

_CUE_GOAL = (
    "ctxrelay_references:text_tokens(T, _Ts), "
    "( ctxrelay_thread_rules:return_target(_Ts, _) -> R = true ; R = false ), "
    "( ctxrelay_thread_rules:marker_match(clarify_marker, _Ts, _, _) -> C = true ; C = false ), "
    "( ctxrelay_thread_rules:marker_match(follow_up_marker, _Ts, _, _) -> F = true ; F = false ), "
    "( ctxrelay_thread_rules:marker_match(topic_shift_marker, _Ts, _, _) -> S = true ; S = false ), "
    "( ctxrelay_thread_rules:marker_match(topic_opener, _Ts, _, _) -> O = true ; O = false )")


def cues(text: str) -> dict[str, bool]:
    r = engine.once(_CUE_GOAL, {"T": text})
    return {name: r[k] in (True, "true") for name, k in zip(CUES, "RCFSO")}


# -- replaying a conversation into an in-memory thread book -----------------------------

@dataclass
class Step:
    """One user turn after the first: its signals, cues, gold and rules' decision."""

    conv: str
    index: int
    gold_move: bool
    cued: bool
    rule: str
    rules_move: bool
    signals: dict[str, float]


def _cos_rows(entry: ThreadEntry, vec: np.ndarray) -> np.ndarray:
    return np.stack(entry.vectors) @ vec if entry.vectors else np.zeros(0, dtype=np.float32)


def signals(book: ThreadBook, feats: list[dict[str, Any]], text: str,
            vec: np.ndarray) -> dict[str, float]:
    """The numbers a rule could read about staying in ``book.previous``."""
    cur = next((f for f in feats if f["thread"] == book.previous), None)
    others = [f for f in feats if f["thread"] != book.previous]
    entry = book.entries[book.previous]
    rec = entry.record
    recent = rec.get("recent_turns") or []
    users = rec.get("user_turns") or []
    sims = _cos_rows(entry, vec)
    last_user = 0.0
    if users and users[-1] in recent[-len(entry.vectors):]:
        k = recent[-len(entry.vectors):].index(users[-1])
        last_user = float(sims[k])
    centroid = np.mean(np.stack(entry.vectors), axis=0) if entry.vectors else None
    cen = float(centroid @ vec / (np.linalg.norm(centroid) or 1.0)) if centroid is not None else 0.0
    stems = content_stems(text)
    profile = rec.get("terms") or {}
    sim_other = max((f["sim"] for f in others), default=0.0)
    ov_other = max((f["overlap"] for f in others), default=0.0)
    mean = cur["bridge_mean"]
    return {
        "sim_cur": cur["sim"], "bridge_cur": cur["bridge"], "last_user_sim": last_user,
        "centroid_cur": cen, "sim_other_max": sim_other, "sim_margin": cur["sim"] - sim_other,
        "overlap_cur": cur["overlap"], "overlap_other_max": ov_other,
        "overlap_margin": cur["overlap"] - ov_other, "recent_cur": float(cur["recent"]),
        "new_word_share": (sum(1 for s in stems if s not in profile) / len(stems)) if stems else 0.0,
        "terms": float(len(stems)),
        "bridge_rel": cur["bridge"] / mean if mean else 1.0,
        "user_turns_cur": float(cur["user_turns"]),
    }


#: A policy decides a user turn: (step info, book, placement) -> thread id or "" (new).
Policy = Callable[[dict[str, Any], ThreadBook, Any], str]


def replay(conv: Conversation, vecs: np.ndarray, thresholds: dict[str, float],
           policy: Policy, cue_of: dict[str, dict[str, bool]],
           steps: list[Step] | None = None) -> list[str]:
    """Replay ``conv`` turn by turn as the turn log derives it (replies stay with
    the turn they answer), the policy placing each user turn; returns each
    turn's thread.  With ``steps``, records each user turn's signals there."""
    book = ThreadBook([], None, dict(thresholds))
    pred: list[str] = []
    next_num = 1
    last_user: int | None = None
    for i, ((gold, role, text), vec) in enumerate(zip(conv.turns, vecs)):
        turn = Turn("s", i + 1, role, text)
        if role != "user" and book.previous:
            tid = book.previous
        else:
            placed = book.place(text, vec)
            info: dict[str, Any] = {"i": i, "gold": gold, "pred": pred, "conv": conv,
                                    "first": last_user is None}
            if last_user is not None:
                feats = book.features(text, vec)
                info["signals"] = signals(book, feats, text, vec)
                info["cued"] = any(cue_of[text].values())
                info["gold_move"] = gold != conv.turns[last_user][0]
            tid = policy(info, book, placed)
            if steps is not None and last_user is not None:
                steps.append(Step(conv.cid, i, info["gold_move"],
                                  info["cued"] or placed.rule in PHRASE_RULES, placed.rule,
                                  placed.thread_id != book.previous, info["signals"]))
            last_user = i
        if tid == "":
            tid = f"T{next_num}"
            next_num += 1
            book.add(ThreadEntry({"thread_id": tid, "label": "", "turn_ids": [],
                                  "user_turns": [], "recent_turns": [], "terms": {},
                                  "turn_count": 0, "last_active_turn": i + 1,
                                  "override": None}))
        book.record_turn(tid, turn, vec)
        book.previous = tid
        pred.append(tid)
    return pred


def rules_policy(info: dict[str, Any], book: ThreadBook, placed: Any) -> str:
    return placed.thread_id if placed.action != "new" else ""


def gold_policy(info: dict[str, Any], book: ThreadBook, placed: Any) -> str:
    """Teacher forcing: the turn goes where the annotation says (the thread its
    gold thread's earlier user turns are in, else a new one)."""
    conv, pred = info["conv"], info["pred"]
    found = [p for (g, role, _), p in zip(conv.turns, pred) if g == info["gold"] and role == "user"]
    return found[-1] if found else ""


def oracle_target(info: dict[str, Any], book: ThreadBook) -> str:
    """Where a move should go: the predicted thread most of the gold target's
    earlier turns are in, unless that is the current one; else a new thread."""
    conv, pred = info["conv"], info["pred"]
    found = Counter(p for (g, _, _), p in zip(conv.turns, pred) if g == info["gold"])
    best = found.most_common(1)[0][0] if found else ""
    return best if best and best != book.previous else ""


def override_policy(decide: Callable[[dict[str, Any]], bool], target: str,
                    mode: str = "replace") -> Policy:
    """The rules, except on numeric decisions (no cue phrase, no phrase rule):
    ``replace``: ``decide(info)`` says whether to move; ``add_moves``: where the
    rules stay, ``decide`` may move; ``add_stays``: where the rules move,
    ``decide`` must agree or the turn stays.  A move goes to the oracle target
    or to the rules' (a new thread where the rules stayed)."""
    def policy(info: dict[str, Any], book: ThreadBook, placed: Any) -> str:
        if info["first"] or info["cued"] or placed.rule in PHRASE_RULES:
            return rules_policy(info, book, placed)
        rules_move = placed.thread_id != book.previous
        if mode == "add_moves" and rules_move or mode == "add_stays" and not rules_move:
            return rules_policy(info, book, placed)
        if not decide(info):
            return book.previous
        if target == "oracle":
            return oracle_target(info, book)
        return rules_policy(info, book, placed) if rules_move else ""
    return policy


#: The bound's variants: (mode, target) of override_policy.
#: (``add_stays`` is left out: on dev no signal, at any threshold, improved on the
#: rules' own moves, which are precise: 0.93-0.97 on the gold state.)
VARIANTS = (("replace", "oracle"), ("replace", "rule"), ("add_moves", "rule"))


def score(convs: list[Conversation], preds: list[list[str]]) -> float:
    """Pairwise F1 over all turns, micro-averaged (as threads_bench.evaluate)."""
    tot = [0, 0, 0]
    for conv, pred in zip(convs, preds):
        for k, v in enumerate(pair_counts([g for g, _, _ in conv.turns], pred)):
            tot[k] += v
    return prf(*tot)["f1"]


# -- separability ------------------------------------------------------------------------

def auc(y: np.ndarray, s: np.ndarray) -> float:
    """ROC AUC of score ``s`` for the positives of ``y`` (ties count half)."""
    from scipy.stats import rankdata
    pos = int(y.sum())
    neg = len(y) - pos
    if not pos or not neg:
        return float("nan")
    r = rankdata(s)
    return float((r[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def best_threshold(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    """The threshold t (move when s >= t) with the best F1 of "moves", and that F1."""
    best = (float("inf"), 0.0)
    for t in np.unique(s):
        f = f1_at(y, s, t)
        if f > best[1]:
            best = (float(t), f)
    return best


def f1_at(y: np.ndarray, s: np.ndarray, t: float) -> float:
    p = s >= t
    tp = int((p & y).sum())
    fp = int((p & ~y).sum())
    fn = int((~p & y).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def decision_prf(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    tp = int((p & y).sum())
    fp = int((p & ~y).sum())
    fn = int((~p & y).sum())
    return prf(tp, fp, fn)


def matrix(steps: list[Step]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    X = np.array([[s.signals[k] for k in SIGNALS] for s in steps], dtype=float)
    y = np.array([s.gold_move for s in steps], dtype=bool)
    cued = np.array([s.cued for s in steps], dtype=bool)
    groups = np.array([s.conv for s in steps])
    return X, y, cued, groups


def combiners() -> dict[str, tuple[Callable[[], Any], list[int]]]:
    """name -> (model factory, the signal columns it reads)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier

    def logistic() -> Any:
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))

    def tree() -> Any:
        return DecisionTreeClassifier(max_depth=2, min_samples_leaf=5, random_state=0)

    every = list(range(len(SIGNALS)))
    topical = [j for j, n in enumerate(SIGNALS) if n not in LENGTH_SIGNALS]
    return {"logistic_all": (logistic, every), "tree_depth2_all": (tree, every),
            "logistic_topical": (logistic, topical), "tree_depth2_topical": (tree, topical)}


def cv_scores(make: Callable[[], Any], X: np.ndarray, y: np.ndarray,
              groups: np.ndarray) -> np.ndarray:
    """Out-of-fold P(move), five folds by conversation (no conversation in both)."""
    from sklearn.model_selection import GroupKFold
    out = np.zeros(len(y))
    for tr, te in GroupKFold(n_splits=5).split(X, y, groups):
        m = make().fit(X[tr], y[tr])
        out[te] = m.predict_proba(X[te])[:, 1]
    return out


def separability(dev: list[Step], held: list[Step] | None) -> dict[str, Any]:
    """Per signal and combination: AUC and threshold F1 on dev (all decisions and
    uncued ones), and held-out with dev's orientation, threshold and model."""
    Xd, yd, cd, gd = matrix(dev)
    Xh, yh, ch, _ = matrix(held) if held else (None, None, None, None)
    out: dict[str, Any] = {"decisions": {"dev": len(dev), "dev_moves": int(yd.sum()),
                                         "dev_uncued": int((~cd).sum()),
                                         "dev_uncued_moves": int(yd[~cd].sum())}}
    if held:
        out["decisions"].update({"heldout": len(held), "heldout_moves": int(yh.sum()),
                                 "heldout_uncued": int((~ch).sum()),
                                 "heldout_uncued_moves": int(yh[~ch].sum())})
    # The rules' own decision on the gold state, for comparison.
    out["rules_decision"] = {"dev_all": decision_prf(yd, np.array([s.rules_move for s in dev])),
                             "dev_uncued": decision_prf(yd[~cd], np.array(
                                 [s.rules_move for s in dev])[~cd])}
    if held:
        rh = np.array([s.rules_move for s in held])
        out["rules_decision"].update({"heldout_all": decision_prf(yh, rh),
                                      "heldout_uncued": decision_prf(yh[~ch], rh[~ch])})
    per: dict[str, Any] = {}
    for j, name in enumerate(SIGNALS):
        raw = auc(yd, Xd[:, j])
        sign = 1.0 if raw >= 0.5 else -1.0      # oriented on dev: higher means moves
        row: dict[str, Any] = {"moves_when": "higher" if sign > 0 else "lower"}
        for part, mask in (("all", np.ones_like(yd)), ("uncued", ~cd)):
            s = sign * Xd[mask, j]
            t, f = best_threshold(yd[mask], s)
            row[f"dev_{part}"] = {"auc": round(auc(yd[mask], s), 4), "best_f1": round(f, 4),
                                  "threshold": round(sign * t, 4)}
            if held:
                hm = np.ones_like(yh) if part == "all" else ~ch
                hs = sign * Xh[hm, j]
                row[f"heldout_{part}"] = {"auc": round(auc(yh[hm], hs), 4),
                                          "f1_at_dev_threshold": round(f1_at(yh[hm], hs, t), 4)}
        per[name] = row
    out["signals"] = per
    combos: dict[str, Any] = {}
    for name, (make, cols) in combiners().items():
        row = {}
        Xd_, Xh_ = Xd[:, cols], (Xh[:, cols] if held else None)
        for part, mask in (("all", np.ones_like(yd)), ("uncued", ~cd)):
            oof = cv_scores(make, Xd_[mask], yd[mask], gd[mask])
            t, f = best_threshold(yd[mask], oof)
            row[f"dev_{part}_cv"] = {"auc": round(auc(yd[mask], oof), 4), "best_f1": round(f, 4)}
            if held:
                model = make().fit(Xd_[mask], yd[mask])
                hm = np.ones_like(yh) if part == "all" else ~ch
                hs = model.predict_proba(Xh_[hm])[:, 1]
                row[f"heldout_{part}"] = {"auc": round(auc(yh[hm], hs), 4),
                                          "f1_at_dev_threshold": round(f1_at(yh[hm], hs, t), 4)}
        if name.startswith("tree"):
            from sklearn.tree import export_text
            model = make().fit(Xd_[~cd], yd[~cd])
            row["dev_uncued_tree"] = export_text(model, feature_names=[SIGNALS[j] for j in cols])
        combos[name] = row
    out["combinations"] = combos
    return out


# -- the bound ---------------------------------------------------------------------------

def bound(splits: dict[str, tuple[list[Conversation], list[np.ndarray]]],
          thresholds: dict[str, float], cue_of: dict[str, dict[str, bool]],
          dev_steps: list[Step], models: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """Pairwise F1 with the numeric decisions made by one threshold on a signal."""
    def run(split: str, policy: Policy) -> float:
        convs, vecs = splits[split]
        return score(convs, [replay(c, v, thresholds, policy, cue_of) for c, v in zip(convs, vecs)])

    out: dict[str, Any] = {}
    for split in splits:
        out.setdefault("rules", {})[split] = run(split, rules_policy)
        for target in ("oracle", "rule"):
            out.setdefault(f"perfect_{target}_target", {})[split] = run(
                split, override_policy(lambda info: info["gold_move"], target))
    Xd, yd, cd, _ = matrix(dev_steps)
    feats: dict[str, Callable[[dict[str, Any]], float]] = {
        n: (lambda info, j=j: info["signals"][SIGNALS[j]]) for j, n in enumerate(SIGNALS)
        if n in names}
    for cname, (model, cols) in models.items():   # fit on dev's uncued decisions (gold state)
        feats[cname] = lambda info, m=model, c=cols: float(m.predict_proba(
            np.array([[info["signals"][SIGNALS[j]] for j in c]]))[0, 1])
    for name, get in feats.items():
        if name in SIGNALS:
            j = SIGNALS.index(name)
            sign = 1.0 if auc(yd, Xd[:, j]) >= 0.5 else -1.0
            values = sign * Xd[~cd, j]
        else:
            sign = 1.0
            model, cols = models[name]
            values = model.predict_proba(Xd[~cd][:, cols])[:, 1]
        cands = np.unique(np.quantile(values, np.linspace(0.02, 0.98, THRESHOLDS)))
        for mode, target in VARIANTS:
            row: dict[str, Any] = {}
            sweep: dict[str, list[float]] = {split: [] for split in splits}
            for t in cands:
                policy = override_policy(lambda info, t=t: sign * get(info) >= t, target, mode)
                for split in splits:
                    sweep[split].append(run(split, policy))
            k = int(np.argmax(sweep["dev"]))
            row["threshold"] = round(float(sign * cands[k]), 4)
            row["moves_when"] = "higher" if sign > 0 else "lower"
            row["dev_best"] = sweep["dev"][k]
            if "heldout" in sweep:
                row["heldout_at_dev_threshold"] = sweep["heldout"][k]
                row["heldout_best_ceiling"] = max(sweep["heldout"])
            out.setdefault(f"{mode}_{target}_target", {})[name] = row
    return out


# -- main --------------------------------------------------------------------------------

def analyse(name: str, split_names: list[str], bound_signals: list[str]) -> dict[str, Any]:
    emb = get_embedder(name)
    thresholds = dict(emb.thresholds)
    splits: dict[str, tuple[list[Conversation], list[np.ndarray]]] = {}
    cue_of: dict[str, dict[str, bool]] = {}
    for split in split_names:
        convs = load(split)
        vecs = []
        for conv in convs:
            turns = [Turn("s", i + 1, role, text) for i, (_, role, text) in enumerate(conv.turns)]
            vecs.append(np.asarray(emb.embed_batch(embedding_texts(turns, emb.model_id)),
                                   dtype=np.float32))
            for _, role, text in conv.turns:
                if role == "user" and text not in cue_of:
                    cue_of[text] = cues(text)
        splits[split] = (convs, vecs)
    steps: dict[str, list[Step]] = {}
    for split, (convs, vecs) in splits.items():
        steps[split] = []
        for conv, v in zip(convs, vecs):
            replay(conv, v, thresholds, gold_policy, cue_of, steps[split])
    out = {"model_id": emb.model_id, "thresholds": thresholds,
           "gold_state": separability(steps["dev"], steps.get("heldout"))}
    Xd, yd, cd, _ = matrix(steps["dev"])
    models = {n: (make().fit(Xd[~cd][:, cols], yd[~cd]), cols)
              for n, (make, cols) in combiners().items()
              if n in bound_signals or "combinations" in bound_signals}
    t0 = time.perf_counter()
    out["bound"] = bound(splits, thresholds, cue_of, steps["dev"], models, bound_signals)
    out["bound"]["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", choices=SPLITS, action="append",
                    help="dev (default: dev and heldout; dev is always read, it sets thresholds)")
    ap.add_argument("--embedder", action="append",
                    help="embedder name (default: every shipped one that is installed)")
    ap.add_argument("--bound-signals", default=",".join((*SIGNALS, "combinations")),
                    help="comma-separated signals (and 'combinations', or some of logistic_all, "
                         "tree_depth2_all, logistic_topical, tree_depth2_topical) the bound "
                         "sweeps (default: all)")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--out", default="threads_headroom", help="results name under bench/results")
    args = ap.parse_args()
    split_names = sorted(set(args.split or SPLITS) | {"dev"}, key=SPLITS.index)
    names = args.embedder or shipped_embedders()
    out: dict[str, Any] = {"benchmark": "threads_headroom", "data": "bench/data/threads",
                           "command": " ".join(["bench/threads_headroom.py", *sys.argv[1:]]),
                           "signals": list(SIGNALS), "phrase_rules": sorted(PHRASE_RULES),
                           "embedders": {}}
    for name in names:
        res = analyse(name, split_names, args.bound_signals.split(","))
        out["embedders"][name] = res
        summary(name, res)
    if not args.no_write:
        print("wrote", write(args.out, out))


def summary(name: str, res: dict[str, Any]) -> None:
    g = res["gold_state"]
    print(f"== {name}: decisions {g['decisions']}")
    print(f"   rules' decision on the gold state: {g['rules_decision']}")
    for sig, row in sorted(g["signals"].items(), key=lambda kv: -kv[1]["dev_uncued"]["auc"]):
        held = row.get("heldout_uncued", {})
        print(f"   {sig:>18} ({row['moves_when']:>6}): dev AUC all {row['dev_all']['auc']:.3f} "
              f"uncued {row['dev_uncued']['auc']:.3f} best F1 {row['dev_uncued']['best_f1']:.3f}"
              + (f" | held-out uncued AUC {held['auc']:.3f} F1@dev {held['f1_at_dev_threshold']:.3f}"
                 if held else ""))
    for cname, row in g["combinations"].items():
        print(f"   {cname:>18}: " + "; ".join(f"{k} {v}" for k, v in row.items()
                                               if not k.endswith("tree")))
        if "dev_uncued_tree" in row:
            print("      " + row["dev_uncued_tree"].replace("\n", "\n      "))
    b = res["bound"]
    print(f"   pairwise F1, rules: {b['rules']}; perfect numeric decisions: "
          f"{b['perfect_oracle_target']} (oracle target), {b['perfect_rule_target']} (rules' target)")
    for mode, target in VARIANTS:
        for sig, row in sorted(b.get(f"{mode}_{target}_target", {}).items(),
                               key=lambda kv: -kv[1]["dev_best"]):
            print(f"   bound {mode:>9} {target:>6} target {sig:>18}: {row}")


if __name__ == "__main__":
    main()
