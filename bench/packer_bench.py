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

Users' constraints (``--user-constraints``): the same instances with three
linear user constraints (a cap on tool-result tokens at 10% of the budget, at
most four retrieved snippets, at least a quarter of the budget in turns),
against today's packer (``--compare-with`` a checkout, e.g. /work/main) on the
same instances without them, and the two packers without user constraints side
by side.  Each packer runs in its own worker process (the baseline one with
PYTHONPATH set to the other checkout); instances alternate between them in one
run, and each call is timed inside Prolog (CPU and wall).

    .venv/bin/python bench/packer_bench.py --user-constraints --compare-with /work/main
        # writes bench/results/packer_user_constraints.json

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
USER_RESULTS = ROOT / "bench" / "results" / "packer_user_constraints.json"


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


# --------------------------------------------------------------------------
# Users' constraints, side by side with another checkout's packer


def user_constraints(inst: dict[str, Any]) -> list[str]:
    """Three linear rules an agent might set: a token cap on tool output, a cap
    on retrieved snippets, a floor on the conversation's share."""
    b = inst["budget"]
    return [f"tokens(kind(tool_result)) #=< {b // 10}",
            "count(kind(retrieved)) #=< 4",
            f"tokens(kind(turn)) #>= {b // 4}"]


WORKER_PACK = """
    garbage_collect,
    statistics(cputime, C0),
    get_time(T0),
    pack_best(Us, Cs, B, pack(Sel, _, Util, _S), Opts),
    get_time(T1),
    statistics(cputime, C1),
    Ms is (T1-T0)*1000,
    CpuMs is (C1-C0)*1000,
    ( _S == optimal -> Optimal = 1 ; Optimal = 0 ),
    length(Sel, Packed)
"""


def worker(packer: Path) -> int:
    """Serve pack requests on stdin, one JSON object a line: {"n", "seed",
    "user": bool, "time_limit"}; answer with the timings."""
    janus.consult(str(packer))
    for line in sys.stdin:
        req = json.loads(line)
        inst = generate(req["n"], req["seed"])
        cs = inst["constraints"] + (user_constraints(inst) if req["user"] else [])
        r = janus.query_once(WORKER_PACK, {"Us": inst["units"], "Cs": cs, "B": inst["budget"],
                                           "Opts": [("time_limit", req["time_limit"])]})
        print(json.dumps({k: r[k] for k in ("Ms", "CpuMs", "Util", "Optimal", "Packed")}),
              flush=True)
    return 0


class Worker:
    def __init__(self, packer: Path, pythonpath: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(packer)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def pack(self, n: int, seed: int, user: bool, time_limit: float) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"n": n, "seed": seed, "user": user,
                                          "time_limit": time_limit}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def binding_rules(inst: dict[str, Any]) -> list[str]:
    """The user constraints that today's optimum breaks (they bind)."""
    first = janus.query_once("pack_best(Us, Cs, B, pack(Sel, _, _, _))",
                             {"Us": inst["units"], "Cs": inst["constraints"], "B": inst["budget"]})
    chosen = {uid: name for uid, name in first["Sel"]}
    units = {u[1]: u for u in inst["units"]}
    def kind(uid: str) -> str:
        return next(v for (tag, v) in units[uid][3] if tag == "kind")
    def tokens(uid: str) -> int:
        return next(c for (_, name, c, _) in units[uid][2] if name == chosen[uid])
    b = inst["budget"]
    out = []
    if sum(tokens(u) for u in chosen if kind(u) == "tool_result") > b // 10:
        out.append("tool_result tokens")
    if sum(1 for u in chosen if kind(u) == "retrieved") > 4:
        out.append("retrieved count")
    if sum(tokens(u) for u in chosen if kind(u) == "turn") < b // 4:
        out.append("turn tokens")
    return out


def compare_user(args: argparse.Namespace) -> int:
    other = args.compare_with.resolve()
    mine = Worker(PACKER, ROOT / "python")
    base = Worker(other / "prolog" / "ctxrelay" / "packer.pl", other / "python")
    janus.consult(str(PACKER))
    result: dict[str, Any] = {
        "benchmark": "ctxrelay packer: users' constraints, and this packer against "
                     f"{other} side by side",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": git_rev(),
        "baseline": {"checkout": str(other), "git": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=other, capture_output=True,
            text=True).stdout.strip()},
        "machine": machine(),
        "generator": "bench/packer_bench.py:generate (budget = 35% of the sum of max costs)",
        "user_constraints": ["tokens(kind(tool_result)) #=< budget // 10",
                             "count(kind(retrieved)) #=< 4",
                             "tokens(kind(turn)) #>= budget // 4"],
        "timing": "pack_best/5 timed inside Prolog in each worker process (wall and thread "
                  "CPU, after garbage_collect/0); instances alternate between the two "
                  "workers: this checkout's packer (ours) and the baseline checkout's "
                  "(today's), each with and without the user constraints; ratios are "
                  "ours / today's over the same instances",
        "rows": [],
    }
    try:
        for n in args.user_sizes:
            seeds = [args.seed * 100_000 + n * 100 + k for k in range(args.user_instances)]
            for m in (mine, base):
                m.pack(n, args.seed * 100_000 + n * 100 + 99, False, args.user_limit)
                m.pack(n, args.seed * 100_000 + n * 100 + 99, True, args.user_limit)
            rows: dict[str, list[dict[str, Any]]] = {"ours_plain": [], "today_plain": [],
                                                     "ours_user": [], "today_user": []}
            binding: dict[str, int] = {}
            for k, seed in enumerate(progress(seeds, desc=f"user constraints n={n}")):
                order = [("today_plain", base, False), ("ours_plain", mine, False),
                         ("ours_user", mine, True), ("today_user", base, True)]
                if k % 2:
                    order = order[1:] + order[:1]      # alternate who goes first
                for key, w, user in order:
                    rows[key].append(w.pack(n, seed, user, args.user_limit))
                for rule in binding_rules(generate(n, seed)):
                    binding[rule] = binding.get(rule, 0) + 1
            def stats(key: str, field: str) -> dict[str, float]:
                xs = [r[field] for r in rows[key]]
                return {"p50_ms": round(percentile(xs, 0.5), 3),
                        "p95_ms": round(percentile(xs, 0.95), 3),
                        "max_ms": round(max(xs), 3)}
            row = {
                "n": n, "instances": len(seeds), "seeds": [seeds[0], seeds[-1]],
                "time_limit_s": args.user_limit,
                "user_constraints_binding": binding,
                "ours_user": {**stats("ours_user", "Ms"),
                              "cpu": stats("ours_user", "CpuMs"),
                              "proven_optimal": sum(r["Optimal"] for r in rows["ours_user"])},
                "today_user": {**stats("today_user", "Ms"),
                               "cpu": stats("today_user", "CpuMs"),
                               "proven_optimal": sum(r["Optimal"] for r in rows["today_user"])},
                "same_optimum_user": sum(a["Util"] == b["Util"] for a, b in
                                         zip(rows["ours_user"], rows["today_user"])),
                "ours_plain": {**stats("ours_plain", "Ms"), "cpu": stats("ours_plain", "CpuMs")},
                "today_plain": {**stats("today_plain", "Ms"),
                                "cpu": stats("today_plain", "CpuMs")},
                "same_optimum_plain": sum(a["Util"] == b["Util"] for a, b in
                                          zip(rows["ours_plain"], rows["today_plain"])),
            }
            for what in ("p50_ms", "p95_ms"):
                row[f"ratio_plain_{what[:3]}"] = round(
                    row["ours_plain"][what] / row["today_plain"][what], 3)
                row[f"ratio_user_vs_today_plain_{what[:3]}"] = round(
                    row["ours_user"][what] / row["today_plain"][what], 3)
                row[f"cpu_ratio_user_{what[:3]}"] = round(
                    row["ours_user"]["cpu"][what] / row["today_user"]["cpu"][what], 3)
                row[f"cpu_ratio_plain_{what[:3]}"] = round(
                    row["ours_plain"]["cpu"][what] / row["today_plain"]["cpu"][what], 3)
            result["rows"].append(row)
            print(json.dumps(row), file=sys.stderr)
    finally:
        mine.close()
        base.close()
    result["load_average_at_end"] = list(os.getloadavg())
    write_atomic(args.user_output, result)
    print(f"wrote {args.user_output}", file=sys.stderr)
    return 0


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
    ap.add_argument("--user-constraints", action="store_true",
                    help="users' constraints against --compare-with's packer (see above)")
    ap.add_argument("--compare-with", type=Path, default=ROOT,
                    help="checkout whose packer is 'today's' (default: this one)")
    ap.add_argument("--user-sizes", type=int, nargs="+", default=[110, 300])
    ap.add_argument("--user-instances", type=int, default=100)
    ap.add_argument("--user-limit", type=float, default=10.0,
                    help="time_limit/1 (s) of each call")
    ap.add_argument("--user-output", type=Path, default=USER_RESULTS)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args.worker)
    if args.user_constraints:
        return compare_user(args)
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
