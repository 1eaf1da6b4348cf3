"""Where one assembly's time goes (docs/latency.md): SWI-Prolog's profiler over
``assemble/4`` on the store ``e2e_bench`` measures (n turns and n CKF facts).

    .venv/bin/python bench/profile_assembly.py [--size 100000] [--repeat 60] [--top 60]

Builds the store once under ``--dir`` (default: a temporary one; pass a
directory to reuse a build, which takes ~3 min at 100k), assembles a few
messages to warm up, then runs ``profile/2`` over ``--repeat`` new messages and
prints its table: cumulative by default (a predicate's share includes what it
calls, Python callbacks included), self time with ``--self``.  Nothing is
written to bench/results: the profiler changes the timings it reports.
"""
from __future__ import annotations

import argparse
import io
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from assembly_bench import TOPICS, synthetic_jsonl  # noqa: E402
from e2e_bench import QUESTIONS  # noqa: E402
from e2e_worker import POLICY, facts  # noqa: E402

import janus_swi as janus  # noqa: E402

from ctxrelay import Runtime  # noqa: E402
from ctxrelay.knowledge.fabric import FactStore  # noqa: E402


def build(root: Path, n: int) -> None:
    # e2e_worker.py builds the same store (same facts, turns and warm-up) and marks it
    # .built: a store from its --store-cache can be used here as it is.
    if (root / "READY").exists() or (root / ".built").exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    fs = FactStore(root / "ckf", embedder="hashing", recluster_every=None, threads=2)
    fs.add_facts(facts(n, seed=n), batch_size=5000, progress=False)
    fs.close()
    with Runtime(root) as rt:
        rt.import_jsonl(io.StringIO(synthetic_jsonl("s", n, seed=n)).getvalue(), session_id="s")
        rt.assemble("s", "warm up the turn log", **POLICY)
    (root / "READY").write_text("built by bench/profile_assembly.py\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--top", type=int, default=60)
    ap.add_argument("--self", dest="self_time", action="store_true",
                    help="self time instead of cumulative")
    ap.add_argument("--dir", default=None, help="store directory to build or reuse")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.dir) if args.dir else Path(tmp) / "store"
        build(root, args.size)
        with Runtime(root) as rt:
            rng = random.Random(7)
            msgs = [QUESTIONS[i % len(QUESTIONS)].format(t=rng.choice(TOPICS),
                                                          i=rng.randrange(5000)) + f" ({i})"
                    for i in range(args.repeat + 5)]
            for m in msgs[:5]:
                rt.assemble("s", m, **POLICY)
            options = ("[cumulative(false), top(T)]" if args.self_time
                       else "[cumulative(true), top(T)]")
            janus.query_once(
                "ctxrelay:py_options(P, _Opts), "
                "profile(forall(member(_M, Ms), once(ctxrelay:assemble(S, _M, _, [store(St)|_Opts]))),"
                f" {options})",
                {"P": [[k, v] for k, v in POLICY.items()], "Ms": msgs[5:], "S": "s",
                 "St": rt._store, "T": args.top})
    return 0


if __name__ == "__main__":
    sys.exit(main())
