"""Benchmark of the CLP(FD) packer (prolog/ctxrelay/packer.pl).

Random candidate sets shaped like a context runtime's (turns, tool call/result
pairs packed together, warm artifacts with verbatim/detailed/compact/facts
variants that exclude the turns they cover, retrieved snippets that require
their source turn, a few mandatory units) are packed to proven optimality;
p50/p95 of the packer's wall time (measured inside Prolog, janus conversion
excluded) are reported per size, with the plain ``labeling([max(U)])``
baseline over the same model at small sizes.

    .venv/bin/python bench/packer_bench.py            # writes bench/results/packer.json
    .venv/bin/python bench/packer_bench.py --quick    # fewer instances

Instances are generated from fixed seeds (``seed = base_seed * 100_000 + n * 100 + k``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import janus_swi as janus

ROOT = Path(__file__).resolve().parents[1]
PACKER = ROOT / "prolog" / "ctxrelay" / "packer.pl"
RESULTS = ROOT / "bench" / "results" / "packer.json"


def progress(iterable, **kw):
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
            return tqdm(iterable, **kw)
        except ImportError:
            pass
    return iterable


# --------------------------------------------------------------------------
# Instances


def generate(n: int, seed: int, *, budget_share: float = 0.35) -> dict[str, Any]:
    """A random candidate set of n units (Python tuples read by janus as terms).

    The history is a sequence of turns and tool call/result pairs (packed
    together). Warm artifacts summarise a contiguous run of the oldest history
    items not yet summarised, in four variants, and exclude each item of the
    run. Retrieved snippets (one or two variants) sometimes require the turn
    they came from. The system prompt and about 3% of the turns (pinned) are mandatory.
    The budget is ``budget_share`` of the sum of the units' largest variants.
    """
    rng = random.Random(seed)
    units: list[Any] = []
    cons: list[Any] = []
    turns: list[str] = []
    uncovered: list[list[str]] = []   # history items (a turn, or a call/result pair)
    max_costs: list[int] = []

    def tokens(mu: float, sigma: float, lo: int, hi: int) -> int:
        return max(lo, min(hi, int(rng.lognormvariate(mu, sigma))))

    def score() -> float:
        return rng.betavariate(1.2, 3.0)

    def add(uid: str, variants: list[tuple[str, int, int]], props: list[Any]) -> None:
        if props == [("kind", "turn")] and rng.random() < 0.03:
            props = props + [("mandatory", True)]      # a pinned turn
        units.append(("unit", uid, [("variant", v, c, u) for v, c, u in variants], props))
        max_costs.append(max(c for _, c, _ in variants))

    units.append(("unit", "system", [("variant", "full", tokens(6.5, 0.4, 200, 2000), 5000)],
                  [("mandatory", True), ("kind", "system")]))
    max_costs.append(units[0][2][0][2])
    i = 0
    while len(units) < n:
        i += 1
        recency = 0.3 + 0.7 * (i / max(1, n))
        r = rng.random()
        left = n - len(units)
        if r < 0.5 or left == 1:
            uid = f"t{i}"
            add(uid, [("full", tokens(5.0, 0.9, 8, 4000), int(1000 * score() * recency))],
                [("kind", "turn")])
            turns.append(uid)
            uncovered.append([uid])
        elif r < 0.65:
            call, res = f"call{i}", f"result{i}"
            add(call, [("full", tokens(3.8, 0.5, 10, 400), int(300 * score() * recency))],
                [("kind", "tool_call")])
            c = tokens(6.0, 1.0, 20, 8000)
            u = int(1000 * score() * recency)
            add(res, [("full", c, u), ("head", max(1, c // 5), int(u * rng.uniform(0.4, 0.7)))],
                [("kind", "tool_result")])
            cons.append(("together", [call, res]))
            uncovered.append([call, res])
        elif r < 0.8 and len(uncovered) >= 2:
            uid = f"artifact{i}"
            c = tokens(6.5, 0.8, 100, 12000)
            u = int(1400 * score())
            add(uid, [("verbatim", c, u),
                      ("detailed", int(c * 0.45), int(u * rng.uniform(0.78, 0.9))),
                      ("compact", int(c * 0.18), int(u * rng.uniform(0.5, 0.7))),
                      ("facts", max(5, int(c * 0.05)), int(u * rng.uniform(0.22, 0.4)))],
                [("kind", "artifact")])
            run = rng.randint(2, min(6, len(uncovered)))
            for item in uncovered[:run]:
                for covered in item:
                    cons.append(("excludes", uid, covered))
            del uncovered[:run]
        else:
            uid = f"snippet{i}"
            c = tokens(4.8, 0.7, 10, 1500)
            u = int(900 * score())
            variants = [("full", c, u)]
            if rng.random() < 0.5:
                variants.append(("summary", max(3, c // 4), int(u * rng.uniform(0.4, 0.6))))
            add(uid, variants, [("kind", "retrieved")])
            if turns and rng.random() < 0.3:
                cons.append(("requires", uid, rng.choice(turns)))
    units = units[:n]
    ids = {u[1] for u in units}
    cons = [c for c in cons if all(x in ids for x in (c[1] if c[0] == "together" else c[1:]))]
    budget = int(budget_share * sum(max_costs[:n]))
    return {"units": units, "constraints": cons, "budget": budget}


# --------------------------------------------------------------------------
# Runs

PACK = """
    garbage_collect,
    statistics(cputime, C0),
    get_time(T0),
    pack_best(Us, Cs, B, pack(_, _, Util, _S), Opts),
    get_time(T1),
    statistics(cputime, C1),
    Ms is (T1-T0)*1000,
    CpuMs is (C1-C0)*1000,
    ( _S == optimal -> Optimal = 1 ; Optimal = 0 )
"""

ALTERNATIVES = """
    garbage_collect,
    get_time(T0),
    findall(_U, pack(Us, Cs, B, pack(_, _, _U, _), [max_alternatives(K)]), Utils),
    get_time(T1),
    Ms is (T1-T0)*1000
"""

BASELINE = """
    garbage_collect,
    get_time(T0),
    catch(call_with_time_limit(Limit,
              ( pack_constraints(Us, Cs, B, _Vars, _, _U),
                term_variables(_Vars, _Vs),
                clpfd:labeling([max(_U)], _Vs), !,
                Util = _U )),
          time_limit_exceeded,
          Util = timeout),
    get_time(T1),
    Ms is (T1-T0)*1000
"""


def pack(inst: dict[str, Any], opts: list[Any] | None = None) -> dict[str, Any]:
    return janus.query_once(PACK, {"Us": inst["units"], "Cs": inst["constraints"],
                                   "B": inst["budget"], "Opts": opts or []})


def alternatives(inst: dict[str, Any], k: int) -> dict[str, Any]:
    return janus.query_once(ALTERNATIVES, {"Us": inst["units"], "Cs": inst["constraints"],
                                           "B": inst["budget"], "K": k})


def baseline(inst: dict[str, Any], limit: float) -> dict[str, Any]:
    return janus.query_once(BASELINE, {"Us": inst["units"], "Cs": inst["constraints"],
                                       "B": inst["budget"], "Limit": limit})


def correlated(inst: dict[str, Any], seed: int) -> dict[str, Any]:
    """The same instance with utility = 10 * cost + noise (strongly correlated, the
    classic hard knapsack family: every item has nearly the same density)."""
    rng = random.Random(seed)
    units = [("unit", uid,
              [("variant", v, c, u if uid == "system" else 10 * c + rng.randint(0, 100))
               for (_, v, c, u) in vs],
              props)
             for (_, uid, vs, props) in inst["units"]]
    return {**inst, "units": units}


def percentile(xs: list[float], p: float) -> float:
    ys = sorted(xs)
    k = (len(ys) - 1) * p
    lo, hi = math.floor(k), math.ceil(k)
    return ys[lo] + (ys[hi] - ys[lo]) * (k - lo)


def summary(times: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(times, 0.5), 3),
            "p95_ms": round(percentile(times, 0.95), 3),
            "max_ms": round(max(times), 3),
            "mean_ms": round(statistics.fmean(times), 3)}


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    swipl = janus.query_once("current_prolog_flag(version, V)")["V"]
    return {"platform": platform.platform(), "cpu": cpu, "cpus": os.cpu_count(),
            "load_average_at_start": list(os.getloadavg()),
            "python": platform.python_version(),
            "swipl": f"{swipl // 10000}.{swipl // 100 % 100}.{swipl % 100}"}


def git_rev() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def write_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 50, 100, 300, 1000])
    ap.add_argument("--instances", type=int, default=100, help="instances per size")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-sizes", type=int, nargs="+", default=[20, 25, 30])
    ap.add_argument("--baseline-instances", type=int, default=10)
    ap.add_argument("--baseline-limit", type=float, default=60.0, help="seconds per instance")
    ap.add_argument("--alternative-sizes", type=int, nargs="+", default=[100, 300])
    ap.add_argument("--alternative-instances", type=int, default=10)
    ap.add_argument("--alternatives", type=int, default=9, help="K in max_alternatives(K)")
    ap.add_argument("--no-families", dest="families", action="store_false",
                    help="skip the other instance families at n=300")
    ap.add_argument("--family-limit", type=float, default=5.0,
                    help="time_limit/1 (s) for the other families")
    ap.add_argument("--quick", action="store_true", help="10 instances per size, 3 baseline")
    ap.add_argument("--output", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if args.quick:
        args.instances, args.baseline_instances, args.alternative_instances = 10, 3, 3

    janus.consult(str(PACKER))
    result: dict[str, Any] = {
        "benchmark": "ctxrelay packer: pack_best/5 to proven optimality",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_rev(),
        "machine": machine(),
        "generator": "bench/packer_bench.py:generate (budget = 35% of the sum of max costs)",
        "seeds": f"seed = {args.seed} * 100000 + n * 100 + k, k < instances",
        "timing": "wall time (ms) of pack_best/5 inside Prolog (validation included, "
                  "janus conversion excluded), after garbage_collect/0; cpu_* is the "
                  "thread CPU time of the same call (less sensitive to other load on "
                  "the machine)",
        "packer": [],
        "baseline_plain_labeling": [],
    }

    def run(n: int, make, desc: str, opts=None) -> dict[str, Any]:
        times, cpu, optimal, seeds = [], [], 0, []
        for k in progress(range(args.instances), desc=desc):
            seed = args.seed * 100_000 + n * 100 + k
            r = pack(make(n, seed), opts)
            times.append(r["Ms"])
            cpu.append(r["CpuMs"])
            optimal += r["Optimal"]
            seeds.append(seed)
        return {"n": n, "instances": len(times), "proven_optimal": optimal,
                **summary(times),
                "cpu_p50_ms": round(percentile(cpu, 0.5), 3),
                "cpu_p95_ms": round(percentile(cpu, 0.95), 3),
                "seeds": [seeds[0], seeds[-1]]}

    for n in args.sizes:
        pack(generate(n, args.seed * 100_000 + n * 100 + 99))   # warm-up
        row = run(n, generate, f"pack n={n}")
        result["packer"].append(row)
        print(json.dumps(row), file=sys.stderr)

    families = {
        "budget_share_0.10": lambda n, s: generate(n, s, budget_share=0.10),
        "budget_share_0.70": lambda n, s: generate(n, s, budget_share=0.70),
        "correlated_utility": lambda n, s: correlated(generate(n, s), s),
    }
    result["families_n300"] = {}
    if args.families:
        for name, make in families.items():
            row = run(300, make, name, [("time_limit", args.family_limit)])
            row["time_limit_s"] = args.family_limit
            result["families_n300"][name] = row
            print(name, json.dumps(row), file=sys.stderr)

    result["alternatives"] = []
    for n in args.alternative_sizes:
        per_alt = []
        for k in progress(range(args.alternative_instances), desc=f"alternatives n={n}"):
            seed = args.seed * 100_000 + n * 100 + k
            inst = generate(n, seed)
            first = pack(inst)["Ms"]
            r = alternatives(inst, args.alternatives)
            utils = r["Utils"]
            assert utils == sorted(utils, reverse=True)
            per_alt.append((r["Ms"] - first) / max(1, len(utils) - 1))
        row = {"n": n, "instances": len(per_alt), "alternatives": args.alternatives,
               "ms_per_alternative_p50": round(percentile(per_alt, 0.5), 3),
               "ms_per_alternative_p95": round(percentile(per_alt, 0.95), 3),
               "note": "pack/5 with max_alternatives(K): (time for the best and K "
                       "alternatives - time for the best) / K"}
        result["alternatives"].append(row)
        print(json.dumps(row), file=sys.stderr)

    for n in args.baseline_sizes:
        times, timeouts, agree = [], 0, 0
        for k in progress(range(args.baseline_instances), desc=f"labeling n={n}"):
            seed = args.seed * 100_000 + n * 100 + k
            inst = generate(n, seed)
            r = baseline(inst, args.baseline_limit)
            times.append(r["Ms"])
            # clpfd's labeling([max(U)]) catches time_limit_exceeded itself and
            # returns its incumbent: a run that reached the limit is a timeout.
            if r["Util"] == "timeout" or r["Ms"] >= 1000 * args.baseline_limit:
                timeouts += 1
            elif r["Util"] == pack(inst)["Util"]:
                agree += 1
        row = {"n": n, "instances": len(times), "time_limit_s": args.baseline_limit,
               "timeouts": timeouts, "same_utility_as_packer": agree, **summary(times),
               "note": "pack_constraints/6 + labeling([max(U)]) on the same instances; "
                       "times of timed-out runs are the limit"}
        result["baseline_plain_labeling"].append(row)
        print(json.dumps(row), file=sys.stderr)

    result["load_average_at_end"] = list(os.getloadavg())
    write_atomic(args.output, result)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
