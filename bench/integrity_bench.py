"""Corruption trials: flip bytes at random offsets of every store file (issue 15, point 1).

The same harness as ``tests/integrity/test_corruption.py`` (which runs fewer
trials on every test run), at a larger count.  Each trial copies a populated
store, flips 1, 8 or 64 bytes in a row at a random offset of one file (every
LMDB data file, the scratch blobs, the ANN index), then reads every record of
the damaged part in a child process: each read must return the pristine data
or raise CorruptStoreError; a wrong value, another exception or a dead child
is a failure.

    .venv/bin/python bench/integrity_bench.py [TRIALS_PER_FILE] [NAME] [--seed N]
    # writes bench/results/NAME.json

NAME defaults to ``integrity``, the seed to 15 (another seed draws other damage).  The "before" figure in docs/reliability.md ran the
same harness on the code before checksums: ``PYTHONPATH=<old checkout>/python
.venv/bin/python bench/integrity_bench.py 100 integrity_before``.
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "integrity"))
from _common import write  # noqa: E402

SEED = 15


def main(trials_per_file: int, name: str = "integrity", seed: int = SEED) -> dict:
    import corruption_worker as worker
    from ctxrelay.storage.lmdb.base import close_all as close_lmdb
    from ctxrelay.storage.stores import close_all
    # On a tmpfs: each trial copies the store and its reads commit (the scratch
    # LRU), and an fsync per trial on a shared disk would dominate the run.
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="ctxrelay-integrity-", dir=shm) as tmp:
        pristine, work = Path(tmp) / "store", Path(tmp) / "trials"
        work.mkdir()
        worker.populate(pristine)
        close_all()
        close_lmdb()
        t0 = time.perf_counter()
        summary = worker.run_trials(pristine, work, trials_per_file=trials_per_file, seed=seed)
        seconds = time.perf_counter() - t0
    command = f".venv/bin/python bench/integrity_bench.py {trials_per_file}" + (
        f" {name}" if name != "integrity" or seed != SEED else "") + (
        f" --seed {seed}" if seed != SEED else "")
    payload = {"seed": seed, "trials_per_file": trials_per_file, "seconds": round(seconds, 1),
               "command": command,
               **{k: (len(v) if isinstance(v, list) else v) for k, v in summary.items()},
               "failures": {k: v[:20] for k, v in summary.items()
                            if isinstance(v, list) and v}}
    import ctxrelay
    payload["code"] = str(Path(ctxrelay.__file__).resolve().parent)
    path = write(name, payload)
    print(f"{summary['trials']} trials, {summary['reads']} reads: {summary['same']} same, "
          f"{summary['corrupt_store_error']} CorruptStoreError, {len(summary['wrong'])} wrong, "
          f"{len(summary['other_error'])} other errors, {len(summary['crash'])} crashes "
          f"({seconds:.0f} s); wrote {path}")
    for kind in ("wrong", "other_error", "crash"):
        for line in summary[kind][:15]:
            print(f"  {kind}: {line}")
    return payload


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trials_per_file", nargs="?", type=int, default=100,
                        help="trials per store file (default 100)")
    parser.add_argument("name", nargs="?", default="integrity",
                        help="results file bench/results/NAME.json (default integrity)")
    parser.add_argument("--seed", type=int, default=SEED,
                        help=f"the damage's random seed (default {SEED})")
    args = parser.parse_args()
    main(args.trials_per_file, args.name, args.seed)
