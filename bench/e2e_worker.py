"""One side of ``e2e_bench.py``: builds a store and times ``Runtime.assemble`` on request.

Runs on whichever ``ctxrelay`` PYTHONPATH points at (this checkout or the
baseline's), so it only uses what both layouts have: ``Runtime``, the CKF's
``FactStore`` and the embedder registry, under their module names of today or
of e858172.  Requests and answers are JSON lines on stdin/stdout.
"""
from __future__ import annotations

import functools
import importlib
import io
import json
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from assembly_bench import TOPICS, VERBS, synthetic_jsonl
from ctxrelay import Runtime


def first_module(*names: str):
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(f"none of {names}")


FactStore = first_module("ctxrelay.knowledge.fabric", "ctxrelay.ckf").FactStore
embed = first_module("ctxrelay.text.embed", "ctxrelay.embed")
STAGE_MODULES = ("ctxrelay.retrieval.candidates", "ctxrelay.retrieval.window",
                 "ctxrelay.retrieval.units", "ctxrelay.assembly", "ctxrelay.retrieval.recall",
                 "ctxrelay.recall")
STAGES = ("candidates", "window_candidates", "gather", "read_window", "add_thread_context",
          "retrieve", "_read_window", "_thread_context", "_retrieve", "recall",
          "add_router_fact_units", "render", "host_only_tokens")
# Stages reported under the name they had before they became public (their underscore
# names: older layouts, and the results in bench/results/ compared against them).
STAGE_KEYS = {"read_window": "_read_window", "add_thread_context": "_thread_context",
              "retrieve": "_retrieve"}
POLICY = dict(max_context_tokens=4096, output_reserve=512, safety_margin=64, min_recent_turns=4,
              embedder="hashing", knowledge=True, max_facts=12)


def facts(n: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = rng.choice(TOPICS)
        words = " ".join(f"{rng.choice(VERBS)} {topic.split()[0]} item{rng.randrange(5000)}"
                         for _ in range(rng.randrange(3, 9)))
        out.append({"content": f"{topic}: {words}.", "key": f"fact-{i}"})
    return out


_ACC: dict[str, float] = defaultdict(float)


def stage_timers() -> dict[str, float]:
    """Wall-clock totals of the main Python stages, wherever this layout defines them
    (one set of totals: the functions are wrapped once, at the first build)."""
    acc = _ACC
    for mod_name in STAGE_MODULES:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            continue
        for name in STAGES:
            fn = mod.__dict__.get(name)
            if fn is None or not callable(fn) or hasattr(fn, "__timed__"):
                continue

            @functools.wraps(fn)
            def timed(*a, __fn=fn, __name=STAGE_KEYS.get(name, name), **k):
                t0 = time.perf_counter()
                try:
                    return __fn(*a, **k)
                finally:
                    acc[__name] += time.perf_counter() - t0
            timed.__timed__ = True
            setattr(mod, name, timed)
    return acc


def embedding_spy() -> dict[str, float]:
    """Time spent in the hashing embedder (the message's embeddings)."""
    box = {"s": 0.0}
    cls = type(embed.get_embedder("hashing"))
    orig = cls.embed_batch

    def spy(self, texts, *a, **k):
        t0 = time.perf_counter()
        try:
            return orig(self, texts, *a, **k)
        finally:
            box["s"] += time.perf_counter() - t0
    cls.embed_batch = spy
    return box


def main() -> int:
    tmp = tempfile.TemporaryDirectory()
    rt = None
    stages: dict[str, float] = {}
    counted = 0
    box = {"s": 0.0}
    out = sys.stdout
    sys.stdout = sys.stderr                     # nothing else may write on the answer channel
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "quit":
            break
        if op == "build":
            if rt is not None:
                rt.close()
            n = int(req["n"])
            # --store-cache: a store built once (marked by .built) is reopened by later runs
            # (a 100k build takes ~25 minutes here); its contents are the same either way.
            cache = req.get("cache")
            root = Path(cache) / f"store-{n}" if cache else Path(tmp.name) / f"store-{n}"
            reused = (root / ".built").exists()
            t_facts = 0.0
            if not reused:
                if root.exists():
                    shutil.rmtree(root)
                root.mkdir(parents=True)
                t0 = time.perf_counter()
                fs = FactStore(root / "ckf", embedder="hashing", recluster_every=None, threads=2)
                fs.add_facts(facts(n, seed=n), batch_size=5000, progress=False)
                fs.close()
                t_facts = time.perf_counter() - t0
            rt = Runtime(root)
            t0 = time.perf_counter()
            if not reused:
                rt.import_jsonl(io.StringIO(synthetic_jsonl("s", n, seed=n)).getvalue(),
                                session_id="s")
            r = rt.assemble("s", "warm up the turn log", **POLICY)
            (root / ".built").touch()
            answer = {"build_s": {"facts": round(t_facts, 1),
                                  "turns": round(time.perf_counter() - t0, 1),
                                  "reused": reused},
                      "pack_units": len(r.pack)}
            box = embedding_spy()
            stages = stage_timers()
        elif op == "assemble":
            if req.get("stages"):
                stages.clear()
                counted = 0
            box["s"] = 0.0
            t0 = time.perf_counter()
            rt.assemble("s", req["text"], **POLICY)
            dt = time.perf_counter() - t0
            counted += 1
            answer = {"dt": dt, "embed": box["s"]}
        elif op == "stages":
            answer = {"stages": {k: round(v / max(counted, 1) * 1000, 3)
                                 for k, v in sorted(stages.items())}}
        else:
            answer = {"error": f"unknown op {op}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    if rt is not None:
        rt.close()
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
