"""``ctxrelay migrate`` on a large store: the count/checksum report and its time.

Builds an embedded store of N turns (``--turns``, default 100,000; the
synthetic chatter of ``backends_bench.py``, in 10 sessions), then copies it
to PostgreSQL (a schema of its own on the server of ``make services``, dropped
afterwards) and back to a new directory with the ``migrate`` command, and
records each direction's wall time, turns per second, and the store checksum
of the report, which must be equal both ways.

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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=10)
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
        with open_stores(source) as stores:
            for n in range(args.sessions):
                chunk = turns[n * per:(n + 1) * per]
                for at in range(0, len(chunk), 1000):
                    stores.transcript.append_many(f"s{n}", chunk[at:at + 1000], create=True)
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
                             "sessions": report["sessions"], "turns": report["turns"],
                             "checksum": report["checksum"]}
            close_all()
        result["migrate"] = reports
        result["checksums_equal"] = len({r["checksum"] for r in reports.values()}) == 1
    finally:
        close_all()
        drop_schema(schema)
        tmp.cleanup()
    path = write("migrate", result)
    print(f"wrote {path}")
    print(json.dumps(result, indent=2))
    return 0 if result["checksums_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
