"""Shared helpers for the benchmarks: machine facts, percentiles, JSON results."""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    swipl = ""
    try:
        import janus_swi as janus
        swipl = str(janus.query_once("current_prolog_flag(version, V)")["V"])
    except Exception as exc:  # the benchmark still runs; say why the field is empty
        swipl = f"unavailable: {exc}"
    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count(), "swipl_version": swipl,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, int(round(p / 100 * (len(ms) - 1))))]
    return {"n": len(ms), "p50_ms": round(pct(50), 3), "p95_ms": round(pct(95), 3),
            "mean_ms": round(statistics.fmean(ms), 3), "max_ms": round(ms[-1], 3)}


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def write(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"machine": machine(), **payload}, indent=2, sort_keys=True))
    os.replace(tmp, path)
    return path


def git_rev() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        return ""
