"""How long the ``ctxrelay`` command takes to answer, from a fresh process each time.

Wall time of subprocess runs of the installed console script (.venv/bin/ctxrelay),
median of N runs after one warm-up run (so the OS file cache is warm but every
run is a new interpreter: "cold" for Python, Prolog and the store).  Targets:
``--help`` and ``COMMAND --help`` under 1 s; a command that opens a store under
2 s.  Baselines show where the time goes: a bare interpreter, ``import ctxrelay``
(which embeds SWI-Prolog and loads library(ctxrelay)), and cli.py loaded on its
own without the package (what --help would cost if the console script did not
import the ``ctxrelay`` package first).  A managed turn is timed too, for
information (it loads the embedder; no target here).

    .venv/bin/python bench/cli_startup_bench.py [--runs 15] [--turn-runs 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".venv" / "bin" / "ctxrelay"
PYTHON = ROOT / ".venv" / "bin" / "python"
CLI_FILE = ROOT / "python" / "ctxrelay" / "cli.py"
HELP_TARGET_MS = 1000
STORE_TARGET_MS = 2000


def wall(argv: list[str], runs: int, env: dict[str, str]) -> dict[str, float]:
    subprocess.run(argv, capture_output=True, env=env, check=False)          # warm-up
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, env=env, check=False)
        samples.append((time.perf_counter() - t0) * 1000)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-500:]}")
    return {"runs": runs, "median_ms": round(statistics.median(samples), 1),
            "min_ms": round(min(samples), 1), "max_ms": round(max(samples), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--turn-runs", type=int, default=3)
    args = ap.parse_args()
    if not SCRIPT.exists():
        raise SystemExit(f"{SCRIPT} is missing: run .venv/bin/pip install -e . --no-deps")
    env = {k: v for k, v in os.environ.items() if k != "CTXRELAY_STORE"}
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        subprocess.run([str(SCRIPT), "--store", store, "init"], check=True, capture_output=True)
        jsonl = [json.dumps({"type": "session", "session_id": "ops", "created":
                             "2026-01-01T00:00:00Z", "metadata": {}, "archived": False})]
        jsonl += [json.dumps({"type": "turn", "turn_id": i, "role": "user" if i % 2 else
                              "assistant", "content": f"turn {i}: the etcd quota is {i} GiB",
                              "timestamp": "2026-01-01T00:00:00Z"}) for i in range(1, 201)]
        subprocess.run([str(SCRIPT), "--store", store, "import", "-"], check=True,
                       input="\n".join(jsonl) + "\n", text=True, capture_output=True)
        loader = ("import importlib.util as u; s = u.spec_from_file_location('c', "
                  f"{str(CLI_FILE)!r}); m = u.module_from_spec(s); s.loader.exec_module(m); "
                  "m.main(['--help'])")
        cases = {
            "baseline: python -c pass": [str(PYTHON), "-c", "pass"],
            "baseline: python -c 'import ctxrelay'": [str(PYTHON), "-c", "import ctxrelay"],
            "baseline: cli.py alone, --help (no package import)": [str(PYTHON), "-c", loader],
            "ctxrelay --help": [str(SCRIPT), "--help"],
            "ctxrelay turn --help": [str(SCRIPT), "turn", "--help"],
            "ctxrelay sessions (opens the store)": [str(SCRIPT), "--store", store, "sessions"],
            "ctxrelay history ops --last 5": [str(SCRIPT), "--store", store, "history", "ops",
                                              "--last", "5"],
            "ctxrelay search ops quota": [str(SCRIPT), "--store", store, "search", "ops", "quota"],
            "ctxrelay stats": [str(SCRIPT), "--store", store, "stats"],
        }
        results = {}
        for name, argv in cases.items():
            results[name] = wall(argv, args.runs, env)
            print(f"{name:55s} median {results[name]['median_ms']:8.1f} ms", flush=True)
        name = "ctxrelay turn ops ... (echo provider; information only)"
        results[name] = wall([str(SCRIPT), "--store", store, "turn", "ops", "quota?",
                              "--provider", "echo"], args.turn_runs, env)
        print(f"{name:55s} median {results[name]['median_ms']:8.1f} ms", flush=True)
    help_ms = max(results[k]["median_ms"] for k in ("ctxrelay --help", "ctxrelay turn --help"))
    store_ms = max(results[k]["median_ms"] for k in results
                   if k.startswith("ctxrelay ") and "--help" not in k and "turn ops" not in k)
    verdict = {"help_median_ms": help_ms, "help_target_ms": HELP_TARGET_MS,
               "help_ok": help_ms < HELP_TARGET_MS, "store_command_median_ms": store_ms,
               "store_target_ms": STORE_TARGET_MS, "store_ok": store_ms < STORE_TARGET_MS}
    path = write("cli_startup", {"command": "bench/cli_startup_bench.py", "runs": args.runs,
                                 "results": results, "verdict": verdict})
    print(json.dumps(verdict), f"-> {path}")
    return 0 if verdict["help_ok"] and verdict["store_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
