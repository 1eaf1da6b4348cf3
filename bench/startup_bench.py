"""Cold start: CLI store commands, the embedders, and the first semantic turn of a process.

Issue #16 item 4: ``--help`` and the store commands ``sessions``, ``history``,
``search``, ``stats`` under 0.5 s wall; no command pays for an embedder it does
not use; the first semantic turn of a process must not cost tens of seconds.
Every figure is from a fresh interpreter (the OS file cache warm, Python,
Prolog and the store cold), median of ``--runs`` runs, cases interleaved round
after round so a busy spell of the shared machine falls on all alike:

commands        wall and CPU of each command (``cli_startup_bench.run_once``), and
                which heavy modules it imported (onnxruntime, tokenizers, torch,
                sentence_transformers, hnswlib): a store command must import none
embedders       a fresh process importing the embedder module, loading the model and
                embedding one text (the default ``minilm-onnx`` and ``hashing``;
                ``minilm`` (torch) with ``--torch``)
first turn      a fresh process opening a store of a 200-turn session (turn log
                derived) and running one managed turn with the default embedder:
                the whole process, and the turn alone
relay           seconds from spawning the relay (``python -m ctxrelay.apps.server``,
                echo upstream, one worker, that store) to ``/readyz`` answering 200
                (target: 2 s) and to its body saying ``"embedder": "ready"``.  The
                poller is http.client on one socket per try every 10 ms: a poller that
                builds an httpx client (and its TLS context) per try takes a good share
                of a 2-core machine away from the relay it waits for

    .venv/bin/python bench/startup_bench.py [--runs 7] [--relay-runs 5] [--torch] [--baseline DIR]

With ``--baseline DIR`` (a checkout, e.g. ``git archive main | tar -x -C DIR``) the
commands and the relay start of that checkout are timed too, interleaved with this one's.

Writes ``bench/results/startup.json``.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_rev, machine, write
from cli_startup_bench import PYTHON, ROOT, SCRIPT, make_store, run_once, summary

TARGET_MS = 500
READY_TARGET_S = 2.0
HEAVY = ("onnxruntime", "tokenizers", "torch", "sentence_transformers", "hnswlib")
#: Not an embedder, but tens of milliseconds each: shown, not a failure (search needs numpy).
ALSO = ("numpy", "tiktoken", "httpx", "uvicorn")

PROBE = """
import json, sys
sys.argv = ["ctxrelay", *json.loads(sys.argv[1])]
from ctxrelay.apps.cli import main
try:
    main()
except SystemExit:
    pass
with open(%r, "w") as f:
    json.dump([sorted(m for m in %r if m in sys.modules),
               sorted(m for m in %r if m in sys.modules)], f)
"""

EMBED = """
import time
t0, c0 = time.perf_counter(), time.process_time()
from ctxrelay.text.embed import get_embedder
e = get_embedder(%r)
t1 = time.perf_counter()
e.embed_batch(["what did we decide about the parser?"])
t2, c2 = time.perf_counter(), time.process_time()
e.embed_batch(["and the cache, what was open?"])
t3 = time.perf_counter()
print(json.dumps({"import_and_get_ms": (t1 - t0) * 1000, "first_embed_ms": (t2 - t1) * 1000,
                  "cold_start_cpu_ms": (c2 - c0) * 1000, "second_embed_ms": (t3 - t2) * 1000}))
"""

TURN = """
import json, time
t0 = time.perf_counter()
from ctxrelay import Runtime
rt = Runtime(%r)
t1, c1 = time.perf_counter(), time.process_time()
r = rt.managed_turn("ops", "what was the etcd quota we settled on?")
t2, c2 = time.perf_counter(), time.process_time()
rt.managed_turn("ops", "and the one before that?")
t3, c3 = time.perf_counter(), time.process_time()
print(json.dumps({"open_ms": (t1 - t0) * 1000, "first_turn_ms": (t2 - t1) * 1000,
                  "first_turn_cpu_ms": (c2 - c1) * 1000, "second_turn_ms": (t3 - t2) * 1000,
                  "second_turn_cpu_ms": (c3 - c2) * 1000}))
"""


def child_json(code: str, env: dict[str, str]) -> dict[str, float]:
    t0 = time.perf_counter()
    r = subprocess.run([str(PYTHON), "-c", "import json\n" + code], capture_output=True,
                       text=True, env=env, check=False)
    wall = (time.perf_counter() - t0) * 1000
    if r.returncode != 0:
        raise SystemExit(f"child failed: {r.stderr[-800:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["process_ms"] = wall
    return out


def medians(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def relay_start(store: str, env: dict[str, str]) -> dict[str, float]:
    """Seconds from spawning the relay to /readyz 200, and to its embedder being loaded."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(PYTHON), "-m", "ctxrelay.apps.server", "--store", store,
                             "--port", str(port), "--upstream", "echo", "--log-level", "warning"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = None
    try:
        while time.perf_counter() - t0 < 300:
            if proc.poll() is not None:
                raise SystemExit(f"the relay exited with {proc.returncode}")
            try:
                status, body = _get(port, "/readyz")
            except OSError:
                status, body = 0, b""
            now = time.perf_counter() - t0
            if status == 200:
                ready = now if ready is None else ready
                if json.loads(body).get("embedder") == "ready":
                    return {"readyz_s": round(ready, 3), "embedder_ready_s": round(now, 3)}
            time.sleep(0.01)
        raise SystemExit("the relay did not become ready in 300 s")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def timed_commands(commands: dict[str, list[str]], envs: dict[str, dict[str, str]],
                   runs: int) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """Every command under every checkout's env, interleaved round after round."""
    for env in envs.values():
        for argv in commands.values():                   # warm-up: bytecode, .qlf files
            run_once([str(SCRIPT), *argv], env)
    samples = {side: {k: [] for k in commands} for side in envs}
    for _ in range(runs):
        for name, argv in commands.items():
            for side, env in envs.items():
                samples[side][name].append(run_once([str(SCRIPT), *argv], env))
    return samples


def relay_summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": rows, **{f"{k}_median": round(statistics.median(r[k] for r in rows), 3)
                                            for k in rows[0]}}
    out["readyz_under_target"] = out["readyz_s_median"] <= READY_TARGET_S
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--turn-runs", type=int, default=3)
    ap.add_argument("--relay-runs", type=int, default=5)
    ap.add_argument("--torch", action="store_true", help="also time the torch MiniLM embedder")
    ap.add_argument("--baseline", type=Path,
                    help="a checkout (e.g. `git archive main | tar -x -C DIR`) whose commands "
                         "and relay start are timed beside this one's, interleaved")
    ap.add_argument("--out", default="startup")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items()
           if k not in ("CTXRELAY_STORE", "CTXRELAY_QLF", "PYTHONDONTWRITEBYTECODE")}
    env["PYTHONPATH"] = str(ROOT / "python")
    envs = {"this": env}
    if args.baseline is not None:
        envs["baseline"] = {**env, "PYTHONPATH": str(args.baseline.resolve() / "python")}
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        make_store(store, env)
        commands = {
            "ctxrelay --help": ["--help"],
            "ctxrelay sessions": ["--store", store, "sessions"],
            "ctxrelay history ops --last 5": ["--store", store, "history", "ops", "--last", "5"],
            "ctxrelay search ops quota": ["--store", store, "search", "ops", "quota"],
            "ctxrelay stats": ["--store", store, "stats"],
        }
        imported: dict[str, list[str]] = {}
        also: dict[str, list[str]] = {}
        probe_out = Path(tmp) / "probe.json"
        for name, argv in commands.items():
            subprocess.run([str(PYTHON), "-c", PROBE % (str(probe_out), HEAVY, ALSO),
                            json.dumps(argv)], env=env, capture_output=True, check=False)
            imported[name], also[name] = json.loads(probe_out.read_text())
        samples = timed_commands(commands, envs, args.runs)
        cmd = {name: {**summary(s), "heavy_modules_imported": imported[name],
                      "also_imported": also[name],
                      "under_target": statistics.median(w for w, _ in s) < TARGET_MS}
               for name, s in samples["this"].items()}
        baseline_cmd = {name: summary(s) for name, s in samples.get("baseline", {}).items()}
        print(json.dumps({"this": cmd, "baseline": baseline_cmd}, indent=1), flush=True)

        # The relay's start on the same store (before its turn log is derived: the
        # relay does not derive at start), the checkouts interleaved.
        relay_rows: dict[str, list[dict[str, float]]] = {side: [] for side in envs}
        for i in range(args.relay_runs):
            for side, side_env in envs.items():
                copy = Path(tmp) / f"relay-{side}-{i}"
                subprocess.run(["cp", "-r", store, str(copy)], check=True)
                relay_rows[side].append(relay_start(str(copy), side_env))
        relay = {side: relay_summary(rows) for side, rows in relay_rows.items()}
        print(json.dumps(relay, indent=1), flush=True)

        names = ["minilm-onnx", "hashing"] + (["minilm"] if args.torch else [])
        embed_rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
        for _ in range(args.turn_runs):
            for n in names:
                embed_rows[n].append(child_json(EMBED % n, env))
        embedders = {n: medians(rows) for n, rows in embed_rows.items()}
        print(json.dumps(embedders, indent=1), flush=True)

        # The first semantic turn: the store's turn log derived beforehand with the
        # default embedder, as a relay's store would be.
        child_json(f"from ctxrelay import Runtime\nrt = Runtime({store!r})\n"
                   "rt.derive('ops')\nprint(json.dumps({}))", env)
        turn_rows = []
        for i in range(args.turn_runs):
            copy = Path(tmp) / f"turn-{i}"
            subprocess.run(["cp", "-r", store, str(copy)], check=True)
            turn_rows.append(child_json(TURN % str(copy), env))
        first_turn = medians(turn_rows)
        print(json.dumps(first_turn, indent=1), flush=True)
    payload = {
        "benchmark": "startup", "commit": git_rev(), "machine": machine(),
        "loadavg_at_start": load_at_start, "loadavg_at_end": os.getloadavg(),
        "runs": args.runs, "turn_runs": args.turn_runs, "relay_runs": args.relay_runs,
        "baseline": None if args.baseline is None else str(args.baseline),
        "commands": cmd, "embedder_cold_start_ms": embedders,
        "first_semantic_turn_of_a_process_ms": first_turn,
        "relay_start_s": relay["this"],
        **({"baseline_commands": baseline_cmd, "baseline_relay_start_s": relay["baseline"]}
           if args.baseline is not None else {}),
        "target": f"--help and store commands under {TARGET_MS} ms wall (median); "
                  f"no store command imports an embedder; relay /readyz within "
                  f"{READY_TARGET_S:g} s (median)",
        "target_met": {"wall": all(c["under_target"] for c in cmd.values()),
                       "relay_readyz": relay["this"]["readyz_under_target"],
                       "no_embedder_imported": not any(c["heavy_modules_imported"]
                                                       for c in cmd.values())},
    }
    print(f"-> {write(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
