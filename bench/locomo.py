"""Evidence recall on the LoCoMo development split (the issue's quality bar).

Each conversation is replayed into a session (speaker_a as user, speaker_b as
assistant, ``name`` = speaker, dia_id and session date in metadata).  For every
question of categories 1-4 the question is assembled as the next user turn
under an input budget (no output reserve, no margin, min_recent_turns 2), and
the evidence dia_ids whose turns reach the provider-visible request are
counted (corrected evidence where the audit fixed it).  Baselines use the same
budget and the same token accounting:

- recency: the last turns that fit;
- bm25: the best BM25 turns that fit (the store's inverted index);
- dense: the best turns by cosine with the question (same embedder) that fit;
- ctxrelay: Runtime.assemble.

    .venv/bin/python bench/locomo.py [--budgets 1024,2048,4096] [--limit N]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import percentiles, write  # noqa: E402

from ctxrelay import Runtime
from ctxrelay.text import tokens  # noqa: E402
from ctxrelay.text.embed import get_embedder  # noqa: E402

MODEL = "gpt-4"
EXTRA: dict = {}


def data_dir() -> Path:
    # $CTXRELAY_LOCOMO (the file, as in calibrate_embedders.py), else shared/data/locomo
    # beside any parent of the checkout (a worktree sits one level deeper than main).
    env = os.environ.get("CTXRELAY_LOCOMO")
    here = Path(__file__).resolve()
    for candidate in ([Path(env).parent] if env else []) + [p / "shared" / "data" / "locomo"
                                                             for p in here.parents]:
        if (candidate / "locomo-dev.json").exists():
            return candidate
    raise SystemExit("LoCoMo data not found: expected ../shared/data/locomo/locomo-dev.json "
                     "(or set CTXRELAY_LOCOMO to the file)")


def parse_date(text: str) -> dt.datetime:
    return dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=dt.timezone.utc)


def sessions_of(conv: dict[str, Any]) -> list[tuple[int, str, list[dict]]]:
    out = []
    for key, value in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(value, list):
            n = int(m.group(1))
            out.append((n, conv.get(f"session_{n}_date_time", ""), value))
    return sorted(out)


def turn_text(turn: dict[str, Any]) -> str:
    text = turn.get("text", "")
    caption = turn.get("blip_caption")
    return f"{text} [shares an image: {caption}]" if caption else text


def replay(rt: Runtime, sample: dict[str, Any]) -> dict[int, str]:
    """Append the conversation; return turn id -> dia_id."""
    conv = sample["conversation"]
    sid = sample["sample_id"]
    dia_of: dict[int, str] = {}
    lines = [json.dumps({"type": "session", "session_id": sid, "created": "2023-01-01T00:00:00Z",
                         "metadata": {"speaker_a": conv["speaker_a"], "speaker_b": conv["speaker_b"]},
                         "archived": False})]
    turn_id = 0
    for n, date_text, turns in sessions_of(conv):
        start = parse_date(date_text)
        for i, t in enumerate(turns):
            turn_id += 1
            role = "user" if t["speaker"] == conv["speaker_a"] else "assistant"
            ts = (start + dt.timedelta(seconds=30 * i)).isoformat()
            lines.append(json.dumps({
                "type": "turn", "turn_id": turn_id, "role": role, "content": turn_text(t),
                "name": t["speaker"], "timestamp": ts,
                "metadata": {"dia_id": t["dia_id"], "session": n, "session_date": date_text}}))
            dia_of[turn_id] = t["dia_id"]
    rt.import_jsonl("\n".join(lines) + "\n", session_id=f"{sid}")
    return dia_of


def corrected_evidence(base: Path) -> dict[tuple[str, int], list[str]]:
    fixes = json.loads((base / "evidence-corrections-dev.json").read_text())
    return {(f["sample_id"], f["qa_index"]): f["correct_evidence"] for f in fixes}


def split_ids(ids: list[str]) -> set[str]:
    out: set[str] = set()
    for item in ids:
        out.update(p for p in re.split(r"[;,\s]+", str(item)) if p)
    return out


class Baselines:
    """Turn selections under the same budget and accounting as ctxrelay."""

    def __init__(self, rt: Runtime, session: str, embedder: Any) -> None:
        self.rt, self.session = rt, session
        self.turns = rt.history(session)
        self.costs = [tokens.count_messages([self._msg(t)], MODEL, prime_reply=False).n
                      for t in self.turns]
        self.embedder = embedder
        self.matrix = embedder.embed_batch([t.content for t in self.turns])

    @staticmethod
    def _msg(t) -> dict[str, str]:
        return {"role": t.role, "content": t.content, "name": re.sub(r"[^A-Za-z0-9_-]", "_", t.name or "")[:64] or "x"}

    def _fill(self, order: list[int], budget: int, question: str) -> set[int]:
        q = tokens.count_messages([{"role": "user", "content": question}], MODEL).n  # + priming
        left = budget - q
        chosen: set[int] = set()
        for idx in order:
            if self.costs[idx] <= left:
                chosen.add(self.turns[idx].turn_id)
                left -= self.costs[idx]
        return chosen

    def recency(self, question: str, budget: int) -> set[int]:
        return self._fill(list(range(len(self.turns) - 1, -1, -1)), budget, question)

    def bm25(self, question: str, budget: int) -> set[int]:
        hits = self.rt.search(self.session, question, k=len(self.turns))
        return self._fill([h.turn_id - 1 for h in hits], budget, question)

    def dense(self, question: str, budget: int) -> set[int]:
        q = self.embedder.embed_batch([question])[0]
        order = list(np.argsort(-(self.matrix @ q), kind="stable"))
        return self._fill([int(i) for i in order], budget, question)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budgets", default="1024,2048,4096")
    ap.add_argument("--limit", type=int, default=None, help="questions per conversation (for a quick run)")
    ap.add_argument("--embedder", default=None, help="embedder name for ctxrelay and the dense baseline (default: the default embedder)")
    ap.add_argument("--policy", default="", help="extra policy options for ctxrelay, e.g. max_retrieved=80")
    ap.add_argument("--methods", default="recency,bm25,dense,ctxrelay")
    ap.add_argument("--out", default="locomo", help="results name under bench/results")
    ap.add_argument("--store", default=None,
                    help="store spec to replay into (default: a fresh temporary directory); "
                         "e.g. postgresql://...?schema=NEW to check the PostgreSQL back end "
                         "gives the same recall (the schema must not hold the conversations)")
    ap.add_argument("--cache", default=None, help="cache spec with --store, e.g. redis://...")
    args = ap.parse_args()
    for item in filter(None, args.policy.split(",")):
        name, _, value = item.partition("=")
        EXTRA[name] = int(value) if value.lstrip("-").isdigit() else \
            {"true": True, "false": False}.get(value, value)
    if args.embedder:   # the whole pipeline (turn log, recall, threads), not only the dense baseline
        EXTRA.setdefault("embedder", args.embedder)
    budgets = [int(b) for b in args.budgets.split(",")]
    base = data_dir()
    samples = json.loads((base / "locomo-dev.json").read_text())
    fixes = corrected_evidence(base)
    embedder = get_embedder(EXTRA.get("embedder") or None)
    load_start = os.getloadavg()   # a shared machine: latencies are read with the load
    methods = args.methods.split(",")
    found = {b: {m: defaultdict(int) for m in methods} for b in budgets}
    total = {b: defaultdict(int) for b in budgets}
    latencies: dict[int, list[float]] = {b: [] for b in budgets}
    n_questions = 0
    with tempfile.TemporaryDirectory() as tmp, \
            Runtime(args.store or Path(tmp) / "store", cache=args.cache) as rt:
        for sample in samples:
            sid = sample["sample_id"]
            dia_of = replay(rt, sample)
            baselines = Baselines(rt, sid, embedder)
            qas = [(i, q) for i, q in enumerate(sample["qa"]) if q.get("category") in (1, 2, 3, 4)]
            for qa_index, qa in qas[: args.limit]:
                evidence = split_ids(fixes.get((sid, qa_index), qa.get("evidence", [])))
                if not evidence:
                    continue
                n_questions += 1
                cat = qa["category"]
                for b in budgets:
                    total[b][cat] += len(evidence)
                    for m in [m for m in methods if m != "ctxrelay"]:
                        ids = getattr(baselines, m)(qa["question"], b)
                        found[b][m][cat] += len(evidence & {dia_of[i] for i in ids})
                    if "ctxrelay" not in methods:
                        continue
                    t0 = time.perf_counter()
                    r = rt.assemble(sid, qa["question"], max_context_tokens=b, output_reserve=0,
                                    safety_margin=0, min_recent_turns=2, **EXTRA)
                    latencies[b].append(time.perf_counter() - t0)
                    packed = {t for u in r.pack for t in u.turn_ids if t in dia_of}
                    found[b]["ctxrelay"][cat] += len(evidence & {dia_of[i] for i in packed})
            print(f"{sid}: {len(qas[: args.limit])} questions", flush=True)
    results: dict[str, Any] = {}
    for b in budgets:
        row: dict[str, Any] = {}
        for m in methods:
            per_cat = {str(c): round(found[b][m][c] / total[b][c], 4) for c in sorted(total[b])}
            overall = sum(found[b][m].values()) / sum(total[b].values())
            row[m] = {"recall": round(overall, 4), "per_category": per_cat}
        if "ctxrelay" in methods:
            row["ctxrelay_latency"] = percentiles(latencies[b])
            row["ctxrelay_beats_all"] = all(row["ctxrelay"]["recall"] > row[m]["recall"]
                                            for m in methods if m != "ctxrelay")
        results[str(b)] = row
        print(f"budget {b}: " + "  ".join(f"{m} {row[m]['recall']:.3f}" for m in methods)
              + (f"  (assemble p50 {row['ctxrelay_latency']['p50_ms']} ms)" if "ctxrelay" in methods else ""))
    payload = {"benchmark": "locomo_evidence_recall", "questions": n_questions,
               "embedder": getattr(embedder, "model_id", str(embedder)),
               "model_tokenizer": MODEL, "results": results, "policy": EXTRA,
               "store": "directory" if not args.store else args.store.split("://")[0],
               "loadavg_1m": {"start": round(load_start[0], 2), "end": round(os.getloadavg()[0], 2)},
               "target": "ctxrelay > all baselines at every budget; recall >= 0.85 at 2048"}
    print(f"-> {write(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
