"""The relay under load on 127.0.0.1: workers, a long turn, a slow upstream, start-up.

Every figure is a ratio of two arms measured side by side in one run (machines
of this kind differ ~3x in speed, and this one is shared with other jobs: the
load average is recorded before and after each arm).

Arms (each on a fresh copy of one seeded store, the relay a subprocess):

- ``scale``: echo upstream, ``--sessions`` sessions of ``--prior`` (1,000) prior
  turns, each client sending ``--turns`` turns one after another, all clients
  at once.  1 worker pinned to 1 core (``taskset -c 0``) against 2 workers on
  2 cores.  Target: throughput ratio >= 1.8.
- ``long_turn``: 2 workers; the same load, first alone (baseline p95), then
  while one more session runs a request that takes ~10 s of work (its first
  turn derives a freshly imported history of ``--heavy-turns`` unique turns).
  Target: p95 of the other sessions during it <= 2x the baseline p95.
- ``slow_upstream``: 2 workers, an upstream that answers after 1 s, 64 fresh
  sessions at once; the CPU bound is the same load against the echo upstream.
  Target: throughput >= 0.8 x min(64/s, CPU bound).
- ``startup``: seconds from spawning the relay to ``/healthz`` and ``/readyz``
  answering 200 (the store is open, turns are accepted; target: within 2 s), and to
  ``/readyz`` saying ``"embedder": "ready"`` (a turn before that waits for it).

After every arm the relay is stopped (SIGTERM) and each session's transcript is
read back: it must hold its prior turns, then exactly the turns its client
sent, in order, each followed by its reply -- none lost, duplicated or crossed.

    python bench/relay_load.py                      # full run, bench/results/relay_load.json
    python bench/relay_load.py --sessions 4 --turns 3 --prior 200 --heavy-turns 200 --quick
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
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
sys.path.insert(0, str(ROOT / "python"))
from _common import git_rev, percentiles, write  # noqa: E402

import httpx  # noqa: E402

PYTHON = sys.executable
WORDS = ("deploy budget cache river stone cloud metric vector engine harbor lantern "
         "quartz meadow signal pepper copper").split()


# ------------------------------------------------------------------------ the store


def _jsonl(session: str, texts: list[str]) -> str:
    head = {"type": "session", "format": "ctxrelay.storage.lmdb.transcript/1",
            "session_id": session, "created": "2026-01-01T00:00:00Z", "metadata": {},
            "archived": False, "turn_count": len(texts)}
    lines = [json.dumps(head)]
    for i, text in enumerate(texts):
        lines.append(json.dumps({"type": "turn", "session_id": session, "turn_id": i + 1,
                                 "role": "user" if i % 2 == 0 else "assistant",
                                 "content": text, "name": None, "tool_call_id": None,
                                 "metadata": {}, "timestamp": "2026-01-01T00:00:00Z",
                                 "key": None}))
    return "\n".join(lines) + "\n"


def prior_texts(n: int, salt: str = "") -> list[str]:
    return [f"{salt}turn {i}: the {WORDS[i % 16]} and the {WORDS[(i * 7) % 16]} of topic "
            f"{i % 23}, figure {(i * 37) % 1009}" for i in range(n)]


def seed(store: Path, sessions: list[str], prior: int, heavy: list[str], heavy_turns: int) -> float:
    """Sessions of ``prior`` turns (derived: the relay pays no first-time derivation) and
    heavy sessions of unique, underived turns."""
    from ctxrelay import Runtime
    t0 = time.perf_counter()
    with Runtime(store) as rt:
        texts = prior_texts(prior)
        for s in sessions:
            rt.import_jsonl(_jsonl(s, texts), session_id=s)
            rt.derive(s)
        for h in heavy:
            rt.import_jsonl(_jsonl(h, prior_texts(heavy_turns, salt=f"{h} ")), session_id=h)
    return time.perf_counter() - t0


def verify(store: Path, expected: dict[str, list[str]], prior: int,
           unanswered: set[str] | None = None) -> dict[str, Any]:
    """Each session: its prior turns, then its client's messages in the order sent, each
    followed by one assistant reply; none lost, duplicated or crossed.  A message whose
    request got no answer (the connection broke) may be stored or not -- the client
    cannot know -- but nothing else may differ."""
    from ctxrelay import Runtime
    unanswered = unanswered or set()
    problems: list[str] = []
    stored_unanswered = 0
    with Runtime(store) as rt:
        for session, sent in expected.items():
            turns = rt.history(session)
            new = turns[prior:]
            users = [t.content for t in new if t.role == "user"]
            answered = [m for m in sent if m not in unanswered and m not in REFUSED]
            if any(u in REFUSED for u in users):
                problems.append(f"{session}: a refused turn was stored")
            it = iter(sent)
            in_order = all(any(u == m for m in it) for u in users)   # a subsequence of sent
            if not in_order or len(set(users)) != len(users):
                problems.append(f"{session}: stored user turns are out of order, duplicated "
                                "or not this session's")
            missing = [m for m in answered if m not in users]
            if missing:
                problems.append(f"{session}: {len(missing)} answered turns are not stored")
            stored_unanswered += sum(1 for u in users if u in unanswered)
            if [t.role for t in new] != ["user", "assistant"] * len(users):
                problems.append(f"{session}: roles are not user/assistant pairs")
            if len(turns) != prior + 2 * len(users) or \
                    [t.turn_id for t in turns] != list(range(1, len(turns) + 1)):
                problems.append(f"{session}: {len(turns)} turns with gaps or extras")
    return {"sessions": len(expected), "turns_checked": sum(len(v) for v in expected.values()),
            "unanswered": len(unanswered), "unanswered_stored": stored_unanswered,
            "ok": not problems, "problems": problems[:20]}


# ------------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """A relay subprocess (optionally pinned with taskset)."""

    def __init__(self, store: Path, *, workers: int, cores: str | None, upstream: str,
                 extra: list[str] | None = None, log: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [PYTHON, "-m", "ctxrelay.apps.server", "--store", str(store), "--port",
               str(self.port), "--upstream", upstream, "--workers", str(workers),
               "--log-level", "warning", "--model", "gpt-4o",
               "--max-context-tokens", "8192", *(extra or [])]
        if cores is not None:
            cmd = ["taskset", "-c", cores, *cmd]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        if log is None and os.environ.get("RELAY_LOAD_LOGS"):
            log = Path(os.environ["RELAY_LOAD_LOGS"]) / f"relay-{self.port}.log"
            cmd[cmd.index("--log-level") + 1] = "info"
        self.spawned = time.perf_counter()
        self._log = open(log or os.devnull, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 600) -> dict[str, float]:
        deadline = time.perf_counter() + timeout
        healthy = ready = None
        # One client for every poll: httpx.get() builds a client and its TLS context per
        # call, which took a good share of a 2-core machine from the relay it waited for.
        with httpx.Client(timeout=1) as http:
            while time.perf_counter() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the relay exited with {self.proc.returncode}")
                try:
                    if healthy is None and http.get(f"{self.url}/healthz").status_code == 200:
                        healthy = time.perf_counter() - self.spawned
                    r = http.get(f"{self.url}/readyz")
                    if r.status_code == 200 and ready is None:
                        ready = time.perf_counter() - self.spawned
                    if r.status_code == 200 and r.json().get("embedder") == "ready":
                        return {"healthz_s": round(healthy or 0, 3), "readyz_s": round(ready, 3),
                                "embedder_ready_s": round(time.perf_counter() - self.spawned, 3)}
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
        raise RuntimeError("the relay did not become ready")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        return code


class SlowUpstream:
    """An OpenAI-compatible upstream (a subprocess) that answers after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen([PYTHON, __file__, "--serve-upstream", str(self.port),
                                      "--upstream-delay", str(delay)],
                                     env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
        for _ in range(1000):
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/v1/models", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.02)
        raise RuntimeError("the slow upstream did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def serve_upstream(port: int, delay: float) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        await asyncio.sleep(delay)
        last = body["messages"][-1]["content"]
        return JSONResponse({"id": "chatcmpl-slow", "object": "chat.completion", "created": 0,
                             "model": body.get("model"), "choices": [{
                                 "index": 0, "finish_reason": "stop", "message": {
                                     "role": "assistant", "content": f"slow reply to {last[-40:]}"}}]})

    async def models(_request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": []})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                            Route("/v1/models", models)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", backlog=1024)


# ------------------------------------------------------------------------ load


UNANSWERED: set[str] = set()      # no answer (connection broke): stored or not
REFUSED: set[str] = set()         # an error answer: must not be stored


async def _client(http: httpx.AsyncClient, url: str | list[str], session: str,
                  messages: list[str], lat: list[float], errors: list[str],
                  stop: asyncio.Event | None = None, spread: int = 0,
                  sticky: bool = False) -> None:
    """One session's messages in order; with several relays (``url`` a list), turn i
    goes to relay ``(spread + i) % n``, so every session is served by every relay
    (``sticky``: always to relay ``spread % n``, as a load balancer with session
    affinity would send it)."""
    for i, text in enumerate(messages):
        if stop is not None and stop.is_set():
            break
        target = (url[spread % len(url)] if sticky else url[(spread + i) % len(url)]) \
            if isinstance(url, list) else url
        t0 = time.perf_counter()
        try:
            r = await http.post(f"{target}/v1/chat/completions", headers={"CRP-Session-Id": session},
                                json={"model": "gpt-4o",
                                      "messages": [{"role": "user", "content": text}]})
            if r.status_code != 200:
                errors.append(f"{session}: HTTP {r.status_code} {r.text[:200]}")
                REFUSED.add(text)
                continue
        except httpx.HTTPError as e:
            errors.append(f"{session}: {type(e).__name__}: {e}")
            UNANSWERED.add(text)
            continue
        lat.append(time.perf_counter() - t0)


def message(session: str, i: int) -> str:
    return f"{session} message {i}: what did we say about the {WORDS[i % 16]} budget?"


async def load(url: str | list[str], sessions: list[str], turns: int,
               sent: dict[str, list[str]], *, timeout: float = 600,
               sticky: bool = False) -> dict[str, Any]:
    """Every session sends ``turns`` messages one after another, all sessions at once."""
    lat: list[float] = []
    errors: list[str] = []
    plan = {s: [message(s, len(sent.setdefault(s, [])) + i) for i in range(turns)]
            for s in sessions}
    limits = httpx.Limits(max_connections=len(sessions) + 4, max_keepalive_connections=len(sessions) + 4)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(_client(http, url, s, plan[s], lat, errors, spread=n,
                                       sticky=sticky)
                               for n, s in enumerate(sessions)))
        wall = time.perf_counter() - t0
    for s in sessions:
        sent[s].extend(plan[s])        # the server stored the ones that answered 200
    done = len(lat)
    return {"turns": done, "wall_s": round(wall, 3), "throughput_per_s": round(done / wall, 3),
            "errors": len(errors), "error_samples": errors[:5],
            **({"latency": percentiles(lat)} if lat else {})}


def _children_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every core since boot, from /proc/stat."""
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = fields[3] + fields[4]                       # idle + iowait
    return sum(fields) - idle, sum(fields)


def _proc_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) of live processes, 0 for any that exited."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            parts = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(parts[11]) + int(parts[12])
    return total / tick


def _postgres_pids() -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if open(f"/proc/{d}/comm").read().strip() == "postgres":
                    pids.append(int(d))
            except OSError:
                pass
    return pids


class CpuSplit:
    """Where the machine's CPU went during one measured load: the relays, PostgreSQL's
    processes, this driver (the clients), and the rest (Redis, the upstream, other jobs),
    in cores busy on average -- to tell a relay-bound run from a saturated machine."""

    def __init__(self, relay_pids: list[int]) -> None:
        self.relays = relay_pids

    def __enter__(self) -> "CpuSplit":
        import resource
        self.t0 = time.perf_counter()
        self.machine0 = _machine_ticks()
        self.relay0 = _proc_cpu(self.relays)
        self.pg_pids = _postgres_pids()
        self.pg0 = _proc_cpu(self.pg_pids)
        r = resource.getrusage(resource.RUSAGE_SELF)
        self.self0 = r.ru_utime + r.ru_stime
        return self

    def __exit__(self, *exc: object) -> None:
        import resource
        wall = time.perf_counter() - self.t0
        busy1, total1 = _machine_ticks()
        busy = (busy1 - self.machine0[0]) / max(1, total1 - self.machine0[1]) * (os.cpu_count() or 1)
        relays = (_proc_cpu(self.relays) - self.relay0) / wall
        pg = (_proc_cpu(self.pg_pids) - self.pg0) / wall   # backends of this arm's pools
        r = resource.getrusage(resource.RUSAGE_SELF)
        driver = (r.ru_utime + r.ru_stime - self.self0) / wall
        self.result = {"machine_busy_cores": round(busy, 2), "relays_cores": round(relays, 2),
                       "postgres_cores": round(pg, 2), "driver_cores": round(driver, 2),
                       "other_cores": round(max(0.0, busy - relays - pg - driver), 2),
                       "cores": os.cpu_count()}


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------------ arms


def arm_scale(template: Path, work: Path, sessions: list[str], turns: int, prior: int,
              workers: int, cores: str) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    store = work / f"scale-{workers}w-{cores.replace(',', '')}"
    shutil.copytree(template, store)
    before = loadavg()
    cpu0 = _children_cpu()
    relay = Relay(store, workers=workers, cores=cores, upstream="echo")
    startup = relay.wait_ready()
    sent: dict[str, list[str]] = {}
    warm = asyncio.run(load(relay.url, sessions, 2, sent))   # every worker's caches warm
    result = asyncio.run(load(relay.url, sessions, turns, sent))
    code = relay.stop()
    # CPU seconds of the relay's processes (reaped: start-up and warm-up included): what
    # the turns cost whatever the other jobs on the machine took.
    cpu = _children_cpu() - cpu0
    return {"workers": workers, "cores": cores, "loadavg_before": before,
            "loadavg_after": loadavg(), "startup": startup, "warmup": warm, **result,
            "relay_cpu_s": round(cpu, 2),
            "relay_cpu_s_per_turn": round(cpu / max(1, result["turns"] + warm["turns"]), 3),
            "exit_code": code, "check": verify(store, sent, prior, UNANSWERED)}


def arm_long_turn(template: Path, work: Path, sessions: list[str], turns: int, prior: int,
                  heavy: list[str]) -> dict[str, Any]:
    store = work / "long-turn"
    shutil.copytree(template, store)
    relay = Relay(store, workers=2, cores="0,1", upstream="echo")
    relay.wait_ready()
    sent: dict[str, list[str]] = {}
    before = loadavg()
    asyncio.run(load(relay.url, sessions, 2, sent))
    baseline = asyncio.run(load(relay.url, sessions, turns, sent))

    async def with_heavy() -> dict[str, Any]:
        lat: list[float] = []
        errors: list[str] = []
        heavy_lat: list[float] = []
        stop = asyncio.Event()
        limits = httpx.Limits(max_connections=len(sessions) + 4)
        async with httpx.AsyncClient(timeout=600, limits=limits) as http:
            async def heavy_turn() -> None:
                text = message(heavy[0], 0)
                await _client(http, relay.url, heavy[0], [text], heavy_lat, errors)
                sent.setdefault(heavy[0], []).append(text)
                stop.set()

            plan = {s: [message(s, len(sent[s]) + i) for i in range(10_000)] for s in sessions}
            counts: dict[str, int] = {}

            async def steady(s: str) -> None:
                mine: list[float] = []
                await _client(http, relay.url, s, plan[s], mine, errors, stop)
                counts[s] = len(mine)
                lat.extend(mine)

            t0 = time.perf_counter()
            await asyncio.gather(heavy_turn(), *(steady(s) for s in sessions))
            wall = time.perf_counter() - t0
        for s in sessions:
            sent[s].extend(plan[s][:counts[s]])
        return {"heavy_request_s": round(heavy_lat[0], 3) if heavy_lat else None,
                "turns": len(lat), "wall_s": round(wall, 3), "errors": len(errors),
                "error_samples": errors[:5], **({"latency": percentiles(lat)} if lat else {})}

    during = asyncio.run(with_heavy())
    code = relay.stop()
    ratio = (during["latency"]["p95_ms"] / baseline["latency"]["p95_ms"]
             if "latency" in during and "latency" in baseline else None)
    return {"loadavg_before": before, "loadavg_after": loadavg(), "baseline": baseline,
            "during_long_turn": during, "p95_ratio": round(ratio, 3) if ratio else None,
            "target": "<= 2.0", "exit_code": code,
            "check": verify(store, {s: v for s, v in sent.items() if s not in heavy}, prior,
                            UNANSWERED)}


def arm_slow_upstream(work: Path, n_sessions: int, turns: int, delay: float) -> dict[str, Any]:
    sessions = [f"fan-{i:03d}" for i in range(n_sessions)]
    out: dict[str, Any] = {"sessions": n_sessions, "upstream_delay_s": delay,
                           "loadavg_before": loadavg()}
    for name, upstream in (("echo_cpu_bound", None), ("slow", SlowUpstream(delay))):
        store = work / f"fan-{name}"
        relay = Relay(store, workers=2, cores="0,1",
                      upstream="echo" if upstream is None else upstream.url,
                      extra=["--timeout", "120"])
        relay.wait_ready()
        sent: dict[str, list[str]] = {}
        asyncio.run(load(relay.url, sessions, 1, sent))      # sessions exist, caches warm
        out[name] = asyncio.run(load(relay.url, sessions, turns, sent))
        out[name]["exit_code"] = relay.stop()
        out[name]["check"] = verify(store, sent, 0, UNANSWERED)
        if upstream is not None:
            upstream.stop()
    cpu = out["echo_cpu_bound"]["throughput_per_s"]
    bound = min(n_sessions / delay, cpu)
    out["bound_per_s"] = round(bound, 3)
    out["throughput_ratio_to_bound"] = round(out["slow"]["throughput_per_s"] / bound, 3)
    out["target"] = ">= 0.8"
    out["loadavg_after"] = loadavg()
    return out


def arm_startup(template: Path, work: Path, runs: int) -> dict[str, Any]:
    samples = []
    for i in range(runs):
        store = work / f"startup-{i}"
        shutil.copytree(template, store)
        relay = Relay(store, workers=1, cores=None, upstream="echo")
        samples.append(relay.wait_ready())
        relay.stop()
    return {"runs": samples, "readyz_s_median": statistics.median(s["readyz_s"] for s in samples),
            "healthz_s_median": statistics.median(s["healthz_s"] for s in samples),
            "embedder_ready_s_median": statistics.median(s["embedder_ready_s"]
                                                         for s in samples),
            "target": "readyz <= 2.0 s", "loadavg": loadavg()}


def arm_pg_relays(sessions: list[str], turns: int, prior: int, relays: int,
                  round_no: int, sticky: bool = False) -> dict[str, Any]:
    """``relays`` relay processes (1 worker each) on one PostgreSQL + Redis store (a
    fresh schema of the ``make services`` server, seeded like the other arms); each
    session's turns go round-robin over the relays (``sticky``: each session to one
    relay)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from services import drop_schema, fresh_schema_url, redis_url
    spec, schema = fresh_schema_url()
    cache = f"{redis_url()}?prefix=load{schema}"
    try:
        seed_s = seed(spec, sessions, prior, [], 0)        # type: ignore[arg-type]
        before = loadavg()
        cpu0 = _children_cpu()
        procs = [Relay(spec, workers=1, cores=None, upstream="echo",  # type: ignore[arg-type]
                       extra=["--cache", cache]) for _ in range(relays)]
        startup = [p.wait_ready() for p in procs]
        urls = [p.url for p in procs]
        sent: dict[str, list[str]] = {}
        warm = asyncio.run(load(urls, sessions, max(2, relays), sent,
                                sticky=sticky))                      # every relay warm
        with CpuSplit([p.proc.pid for p in procs]) as split:
            result = asyncio.run(load(urls, sessions, turns, sent, sticky=sticky))
        codes = [p.stop() for p in procs]
        cpu = _children_cpu() - cpu0
        check = verify(spec, sent, prior, UNANSWERED)      # type: ignore[arg-type]
    finally:
        from ctxrelay.storage import close_all
        close_all()
        drop_schema(schema)
    return {"relays": relays, "sticky": sticky, "round": round_no, "seed_s": round(seed_s, 2),
            "loadavg_before": before, "loadavg_after": loadavg(), "startup": startup,
            "warmup": warm, **result, "cpu_split": split.result, "relay_cpu_s": round(cpu, 2),
            "relay_cpu_s_per_turn": round(cpu / max(1, result["turns"] + warm["turns"]), 3),
            "exit_codes": codes, "check": check}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--prior", type=int, default=1000)
    p.add_argument("--heavy-turns", type=int, default=600)
    p.add_argument("--fan-sessions", type=int, default=64)
    p.add_argument("--fan-turns", type=int, default=3)
    p.add_argument("--upstream-delay", type=float, default=1.0)
    p.add_argument("--startup-runs", type=int, default=3)
    p.add_argument("--rounds", type=int, default=2, help="rounds of the scale arms")
    p.add_argument("--arms", default="startup,scale,long_turn,slow_upstream",
                   help="comma-separated; also pg_relays: 3 relays vs 1 on one PostgreSQL "
                        "+ Redis store (make services)")
    p.add_argument("--out", default="relay_load")
    p.add_argument("--quick", action="store_true", help="a smoke run: results not written")
    p.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream, args.upstream_delay)
        return 0
    arms = args.arms.split(",")
    sessions = [f"load-{i}" for i in range(args.sessions)]
    heavy = ["heavy-0"]
    results: dict[str, Any] = {"git": git_rev(), "config": vars(args),
                               "loadavg_start": loadavg(), "nproc": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="relay-load-") as tmp:
        work = Path(tmp)
        template = work / "template"
        if {"startup", "scale", "long_turn"} & set(arms):
            results["seed_s"] = round(seed(template, sessions, args.prior, heavy,
                                           args.heavy_turns), 2)
            print(f"seeded in {results['seed_s']} s", flush=True)
        if "startup" in arms:
            results["startup"] = arm_startup(template, work, args.startup_runs)
            print("startup", json.dumps(results["startup"]), flush=True)
        if "scale" in arms:
            # The three configurations alternate, round after round, so a change in the
            # machine's other load hits them alike; the ratios use the rounds' sums.
            configs = {"one_worker_one_core": (1, "0"), "two_workers_two_cores": (2, "0,1"),
                       "one_worker_two_threads_two_cores": (1, "0,1")}
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
            for r in range(args.rounds):
                for name, (workers, cores) in configs.items():
                    one = arm_scale(template, work / f"r{r}", sessions, args.turns,
                                    args.prior, workers, cores)
                    runs[name].append(one)
                    print(f"round {r} {name}", one["throughput_per_s"], one["check"]["ok"],
                          one["loadavg_before"], flush=True)

            def rate(name: str) -> float:
                return sum(x["turns"] for x in runs[name]) / sum(x["wall_s"] for x in runs[name])

            results["scale"] = {
                **{name: {"rounds": runs[name], "throughput_per_s": round(rate(name), 3),
                          "relay_cpu_s_per_turn": round(
                              sum(x["relay_cpu_s"] for x in runs[name])
                              / sum(x["turns"] + x["warmup"]["turns"] for x in runs[name]), 3),
                          "checks_ok": all(x["check"]["ok"] for x in runs[name]),
                          "errors": sum(x["errors"] for x in runs[name])}
                   for name in configs},
                "throughput_ratio": round(rate("two_workers_two_cores")
                                          / rate("one_worker_one_core"), 3),
                "threads_ratio": round(rate("one_worker_two_threads_two_cores")
                                       / rate("one_worker_one_core"), 3),
                "target": ">= 1.8"}
        if "long_turn" in arms:
            results["long_turn"] = arm_long_turn(template, work, sessions, args.turns,
                                                 args.prior, heavy)
            print("long turn p95 ratio", results["long_turn"]["p95_ratio"], flush=True)
        if "slow_upstream" in arms:
            results["slow_upstream"] = arm_slow_upstream(work, args.fan_sessions,
                                                         args.fan_turns, args.upstream_delay)
            print("slow upstream ratio", results["slow_upstream"]["throughput_ratio_to_bound"],
                  flush=True)
        if "pg_relays" in arms:
            # 1 relay, 3 relays (every session through every relay) and 3 relays with
            # session affinity, on one PostgreSQL store, alternated round by round.
            pg_configs = {"1_relay": (1, False), "3_relays_spread": (3, False),
                          "3_relays_sticky": (3, True)}
            pg_runs: dict[str, list[dict[str, Any]]] = {name: [] for name in pg_configs}
            for r in range(args.rounds):
                for name, (n, sticky) in pg_configs.items():
                    one = arm_pg_relays(sessions, args.turns, args.prior, n, r, sticky)
                    pg_runs[name].append(one)
                    print(f"round {r} pg {name}", one["throughput_per_s"],
                          one["check"]["ok"], one["loadavg_before"], one["cpu_split"], flush=True)

            def pg_rate(name: str) -> float:
                return sum(x["turns"] for x in pg_runs[name]) / \
                    sum(x["wall_s"] for x in pg_runs[name])

            results["pg_relays"] = {
                **{name: {"rounds": pg_runs[name], "throughput_per_s": round(pg_rate(name), 3),
                          "relay_cpu_s_per_turn": round(
                              sum(x["relay_cpu_s"] for x in pg_runs[name])
                              / sum(x["turns"] + x["warmup"]["turns"] for x in pg_runs[name]), 3),
                          "checks_ok": all(x["check"]["ok"] for x in pg_runs[name]),
                          "errors": sum(x["errors"] for x in pg_runs[name])}
                   for name in pg_configs},
                "throughput_ratio_3_over_1": round(pg_rate("3_relays_spread")
                                                   / pg_rate("1_relay"), 3),
                "throughput_ratio_3_sticky_over_1": round(pg_rate("3_relays_sticky")
                                                          / pg_rate("1_relay"), 3),
                "cpu_split_mean": {name: {k: round(statistics.fmean(
                    x["cpu_split"][k] for x in pg_runs[name]), 2)
                    for k in pg_runs[name][0]["cpu_split"]} for name in pg_configs},
                "note": f"{os.cpu_count()} cores: 3 relays can use at most that many"}
    results["loadavg_end"] = loadavg()
    summary = {k: results[a][k] for a, k in (("scale", "throughput_ratio"),
                                             ("long_turn", "p95_ratio"),
                                             ("slow_upstream", "throughput_ratio_to_bound"),
                                             ("startup", "readyz_s_median")) if a in results}
    if "pg_relays" in results:
        summary["pg_3_over_1_relays"] = results["pg_relays"]["throughput_ratio_3_over_1"]
        summary["pg_3_sticky_over_1_relays"] = \
            results["pg_relays"]["throughput_ratio_3_sticky_over_1"]
    if "scale" in results:
        summary["threads_ratio"] = results["scale"]["threads_ratio"]
    results["summary"] = summary
    print(json.dumps(summary, indent=1))
    if not args.quick:
        print("wrote", write(args.out, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
