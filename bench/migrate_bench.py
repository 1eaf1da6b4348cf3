"""``ctxrelay migrate`` on a large store: the count/checksum report and its time.

Builds an embedded store with every part: N turns (``--turns``, default
100,000; the synthetic chatter of ``backends_bench.py``, in 10 sessions; one
turn in 10 with an idempotency key), facts (``--facts``, hashing embedder),
warm artifacts (a range per 200 turns, every third in two versions, keyed),
scratch entries with blobs (``--scratch`` per session, text and binary,
some pinned and referenced) and the turn log of the first ``--derive``
sessions (hashing embedder, a hand-set thread state and references).  Then
it copies the store to PostgreSQL (a schema of its own on the server of
``make services``, dropped afterwards) and back to a new directory with the
``migrate`` command, and records each direction's wall time (per part too)
and the report's per-part counts and checksums, which must be equal both
ways (each report is checked against its target by ``migrate`` itself).

Run: ``make services && .venv/bin/python bench/migrate_bench.py``; writes
``bench/results/migrate.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import git_rev, write  # noqa: E402
from backends_bench import corpus  # noqa: E402


def build(source: str, turns: list[dict], per: int, args: argparse.Namespace) -> None:
    """The store to copy: every part filled (see the module doc)."""
    import random

    from ctxrelay.knowledge.fabric import FactStore
    from ctxrelay.storage import open_stores
    from ctxrelay.text.embed import get_embedder
    rng = random.Random(7)
    with FactStore(Path(source) / "ckf", embedder="hashing", recluster_every=None) as fs:
        for at in range(0, args.facts, 500):
            fs.add_facts([{"content": f"fact {i}: " + turns[i]["content"],
                           "key": f"f{i}" if i % 4 == 0 else None}
                          for i in range(at, min(at + 500, args.facts))])
    with open_stores(source) as stores:
        t = stores.transcript
        for n in range(args.sessions):
            chunk = [dict(turn, key=f"k{n}.{i}") if i % 10 == 0 else turn
                     for i, turn in enumerate(turns[n * per:(n + 1) * per])]
            for at in range(0, len(chunk), 1000):
                t.append_many(f"s{n}", chunk[at:at + 1000], create=True)
            for r, start in enumerate(range(1, per, 200)):
                end = min(start + 199, per)
                stores.warm.publish(f"s{n}", start, end, f"Turns {start} to {end}.",
                                    facts=[chunk[start - 1]["content"][:80]],
                                    key=f"w{r}" if r % 2 == 0 else None)
                if r % 3 == 0:
                    stores.warm.publish(f"s{n}", start, end, f"Turns {start}-{end}, revised.")
            for i in range(args.scratch):
                raw = (bytes(rng.getrandbits(8) for _ in range(512)) if i % 5 == 0
                       else "\n".join(turns[(n * per + i + j) % len(turns)]["content"]
                                      for j in range(20)))
                entry = stores.scratch.put(f"s{n}", "tool", {"n": n, "i": i}, raw,
                                           pinned=i % 7 == 0, ttl=None if i % 2 else 86400.0)
                if i % 11 == 0:
                    stores.scratch.reference(f"s{n}", entry.scratch_id, 1 + i)
        embedder = get_embedder("hashing")
        for n in range(args.derive):
            stores.turnlog.sync(t, f"s{n}", embedder)
            stores.turnlog.set_thread_state(f"s{n}", "T1", user_constraints=["keep it short"])
            stores.turnlog.set_references(f"s{n}", 10, [1, 4])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--facts", type=int, default=2_000)
    ap.add_argument("--scratch", type=int, default=100, help="scratch entries per session")
    ap.add_argument("--derive", type=int, default=1, help="sessions whose turn log is derived")
    args = ap.parse_args()

    from ctxrelay.apps.cli import main as cli
    from ctxrelay.storage import close_all, open_stores
    from services import drop_schema, fresh_schema_url

    spec, schema = fresh_schema_url()
    tmp = tempfile.TemporaryDirectory(prefix="migrate-bench-")
    source, back = str(Path(tmp.name) / "source"), str(Path(tmp.name) / "back")
    result: dict = {"turns": args.turns, "sessions": args.sessions, "git": git_rev()}
    try:
        turns = corpus(args.turns)
        per = args.turns // args.sessions
        t0 = time.perf_counter()
        build(source, turns, per, args)
        result["build_s"] = round(time.perf_counter() - t0, 1)
        close_all()
        reports = {}
        for name, src, dst in (("lmdb_to_postgres", source, spec),
                               ("postgres_to_lmdb", spec, back)):
            out = Path(tmp.name) / f"{name}.json"
            t0 = time.perf_counter()
            with open(out, "w") as fh:
                stdout, sys.stdout = sys.stdout, fh
                try:
                    rc = cli(["--json", "migrate", "--from", src, "--to", dst])
                finally:
                    sys.stdout = stdout
            took = time.perf_counter() - t0
            report = json.loads(out.read_text())
            assert rc == 0, report
            reports[name] = {"seconds": round(took, 1),
                             "turns_per_s": round(report["turns"] / took),
                             "part_seconds": report["part_seconds"],
                             "sessions": report["sessions"], "turns": report["turns"],
                             "parts": report["parts"], "checksum": report["checksum"]}
            close_all()
        result["migrate"] = reports
        result["checksums_equal"] = len({r["checksum"] for r in reports.values()}) == 1
        result["parts_equal"] = len({json.dumps(r["parts"], sort_keys=True)
                                     for r in reports.values()}) == 1
    finally:
        close_all()
        drop_schema(schema)
        tmp.cleanup()
    path = write("migrate", result)
    print(f"wrote {path}")
    print(json.dumps(result, indent=2))
    return 0 if result["checksums_equal"] and result["parts_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
