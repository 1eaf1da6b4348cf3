"""How long the ``ctxrelay`` command takes to answer, from a fresh process each time.

Wall time (and the CPU time, user + system, which load from other jobs on the
machine disturbs less) of subprocess runs of this checkout's console script
(.venv/bin/ctxrelay with PYTHONPATH=python/), median of N runs after one
warm-up run: the OS file cache is warm, but every run is a new interpreter,
cold for Python, Prolog and the store.  The cases run interleaved, round after
round, so that a busy spell of the machine falls on all of them alike.

Targets (issue 16): ``--help`` and the store commands ``sessions``, ``history``,
``search``, ``stats`` under 0.5 s wall.  Side by side in the same run:

- baselines: a bare interpreter, ``import janus_swi`` (embedding SWI-Prolog),
  ``import ctxrelay`` (which also loads library(ctxrelay));
- ``CTXRELAY_QLF=off``: library(ctxrelay) compiled from its sources, as before
  the .qlf files (python/ctxrelay/bridge/qlf.py);
- ``setup's .qlf libraries``: the same commands with SWI_HOME_DIR pointing at a
  copy of this SWI-Prolog's home in which the libraries ``import ctxrelay`` loads
  from source (library(clpfd) above all) were qcompiled, which is what
  scripts/setup.sh now does to the SWI-Prolog it builds (skipped when this one
  has them already, or with --no-setup-copy).

A managed turn is timed too, for information (it loads the embedder; no target).

    .venv/bin/python bench/cli_startup_bench.py [--runs 15] [--turn-runs 3]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
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
TARGET_MS = 500
STORE_COMMANDS = ("sessions", "history", "search", "stats")


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system of the child) milliseconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(argv, capture_output=True, env=env, check=False)
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {r.returncode}: {r.stderr.decode()[-500:]}")
    cpu = ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000
    return wall, cpu


def summary(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls, cpus = [w for w, _ in samples], [c for _, c in samples]
    return {"runs": len(samples), "median_ms": round(statistics.median(walls), 1),
            "min_ms": round(min(walls), 1), "max_ms": round(max(walls), 1),
            "cpu_median_ms": round(statistics.median(cpus), 1)}


def swi_home() -> Path:
    out = subprocess.run([str(PYTHON), "-c", "import janus_swi as j; "
                          "print(j.query_once('current_prolog_flag(home, H)')['H'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def home_with_setup_qlf(home: Path, tmp: Path, env: dict[str, str]) -> Path | None:
    """A copy of ``home`` where setup's step ran: the libraries import ctxrelay loads, qcompiled."""
    def from_source(swi_home: Path) -> list[str]:
        out = subprocess.run([str(PYTHON), "-c", "import ctxrelay; from ctxrelay.bridge import "
                              "qlf; print('\\n'.join(qlf.system_libraries_from_source()))"],
                             capture_output=True, text=True, check=True,
                             env={**env, "SWI_HOME_DIR": str(swi_home)})
        return [ln for ln in out.stdout.splitlines() if ln]
    if not from_source(home):
        return None                          # this SWI-Prolog has them already
    copy = tmp / "swipl-home"
    shutil.copytree(home, copy, symlinks=True)
    swipl = copy / "bin" / next((home / "bin").iterdir()).name / "swipl"
    for lib in from_source(copy):
        subprocess.run([str(swipl), f"--home={copy}", "-q", "-g", f"qcompile('{lib}')",
                        "-t", "halt"], check=True, capture_output=True)
    return copy if not from_source(copy) else None


def make_store(store: str, env: dict[str, str]) -> None:
    subprocess.run([str(SCRIPT), "--store", store, "init"], check=True, capture_output=True,
                   env=env)
    jsonl = [json.dumps({"type": "session", "session_id": "ops", "created":
                         "2026-01-01T00:00:00Z", "metadata": {}, "archived": False})]
    jsonl += [json.dumps({"type": "turn", "turn_id": i, "role": "user" if i % 2 else
                          "assistant", "content": f"turn {i}: the etcd quota is {i} GiB",
                          "timestamp": "2026-01-01T00:00:00Z"}) for i in range(1, 201)]
    subprocess.run([str(SCRIPT), "--store", store, "import", "-"], check=True,
                   input="\n".join(jsonl) + "\n", text=True, capture_output=True, env=env)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--turn-runs", type=int, default=3)
    ap.add_argument("--no-setup-copy", action="store_true",
                    help="skip the variant with the libraries setup precompiles")
    args = ap.parse_args()
    if not SCRIPT.exists():
        raise SystemExit(f"{SCRIPT} is missing: run .venv/bin/pip install -e . --no-deps")
    # As Python runs by default: bytecode caches written on the warm-up run and used after.
    env = {k: v for k, v in os.environ.items()
           if k not in ("CTXRELAY_STORE", "CTXRELAY_QLF", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPATH"] = str(ROOT / "python")
    home = swi_home()
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        make_store(store, env)                 # this also builds the .qlf files if needed
        commands = {
            "ctxrelay --help": ["--help"],
            "ctxrelay turn --help": ["turn", "--help"],
            "ctxrelay sessions": ["--store", store, "sessions"],
            "ctxrelay history ops --last 5": ["--store", store, "history", "ops", "--last", "5"],
            "ctxrelay search ops quota": ["--store", store, "search", "ops", "quota"],
            "ctxrelay stats": ["--store", store, "stats"],
        }
        variants = {"": env, " [CTXRELAY_QLF=off]": {**env, "CTXRELAY_QLF": "off"}}
        setup_home = None if args.no_setup_copy else home_with_setup_qlf(home, Path(tmp), env)
        if setup_home is not None:
            variants[" [setup's .qlf libraries]"] = {**env, "SWI_HOME_DIR": str(setup_home)}
        cases: dict[str, tuple[list[str], dict[str, str]]] = {
            "baseline: python -c pass": ([str(PYTHON), "-c", "pass"], env),
            "baseline: import janus_swi": ([str(PYTHON), "-c", "import janus_swi"], env),
        }
        for suffix, venv in variants.items():
            cases[f"baseline: import ctxrelay{suffix}"] = (
                [str(PYTHON), "-c", "import ctxrelay"], venv)
            for name, argv in commands.items():
                cases[name + suffix] = ([str(SCRIPT), *argv], venv)
        for argv, venv in cases.values():
            run_once(argv, venv)                 # warm-up
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, (argv, venv) in cases.items():
                samples[name].append(run_once(argv, venv))
        results = {name: summary(s) for name, s in samples.items()}
        turn = "ctxrelay turn ops ... (echo provider; information only)"
        results[turn] = summary([run_once([str(SCRIPT), "--store", store, "turn", "ops",
                                           "quota?", "--provider", "echo"], env)
                                 for _ in range(args.turn_runs)])
    for name, r in results.items():
        print(f"{name:62s} median {r['median_ms']:7.1f} ms wall, {r['cpu_median_ms']:7.1f} ms cpu",
              flush=True)

    def worst(suffix: str, names: tuple[str, ...]) -> float:
        return max(results[n + suffix]["median_ms"] for n in names)
    help_names = ("ctxrelay --help", "ctxrelay turn --help")
    store_names = tuple(n for n in commands if n.split()[1] in STORE_COMMANDS)
    verdict = {"target_ms": TARGET_MS,
               "help_median_ms": worst("", help_names),
               "store_command_median_ms": worst("", store_names)}
    verdict["help_ok"] = verdict["help_median_ms"] < TARGET_MS
    verdict["store_ok"] = verdict["store_command_median_ms"] < TARGET_MS
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    for suffix in variants:
        if suffix:
            ratios[suffix.strip(" []")] = {
                n: {"wall": round(results[n]["median_ms"] / results[n + suffix]["median_ms"], 2),
                    "cpu": round(results[n]["cpu_median_ms"]
                                 / results[n + suffix]["cpu_median_ms"], 2)}
                for n in ("baseline: import ctxrelay", *commands)}
    machine = {"cpus": os.cpu_count(), "loadavg_at_start": load_at_start,
               "loadavg_at_end": os.getloadavg(), "swi_home": str(home),
               "setup_qlf_variant": setup_home is not None}
    path = write("cli_startup", {
        "command": "bench/cli_startup_bench.py", "runs": args.runs, "machine": machine,
        "results": results, "verdict": verdict,
        "ratio_default_to_variant (medians; < 1: the default is faster)": ratios})
    print(json.dumps(verdict), f"-> {path}")
    return 0 if verdict["help_ok"] and verdict["store_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
