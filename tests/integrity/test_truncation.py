"""Issue 15, point 2: a truncated data file is CorruptStoreError, never SIGBUS.

Each store's ``data.mdb`` is halved, then the store is opened and read, and
``ctxrelay check`` run, in a subprocess: a SIGBUS there fails the test
instead of killing pytest.  The size check itself lives in the LmdbStore base
(``_check_not_truncated``), so every store gets it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT

HERE = Path(__file__).resolve().parent
FILES = {"transcript": "transcript.lmdb/data.mdb", "warm": "warm/data.mdb",
         "turnlog": "turnlog/data.mdb", "facts": "ckf/db/data.mdb",
         "scratch": "scratch/scratch.lmdb/data.mdb"}

READ = """
import sys
sys.path.insert(0, {here!r})
from pathlib import Path
import corruption_worker as w
result = w.read_all(Path({store!r}), {part!r})
kinds = {{kind for kind, _ in result.values()}}
print(sorted(kinds), [v for k, v in result.values() if k != "ok"][:1])
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "python"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}




@pytest.mark.parametrize("part", sorted(FILES))
def test_a_halved_data_file_is_corrupt_store_error_in_reads_and_in_check(pristine, tmp_path,
                                                                        part):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    data = store / FILES[part]
    os.truncate(data, data.stat().st_size // 2)
    read = subprocess.run([sys.executable, "-c", READ.format(here=str(HERE), store=str(store),
                                                             part=part)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert read.returncode == 0, read.stderr[-2000:]          # not -7 (SIGBUS)
    assert "['corrupt']" in read.stdout and "truncated" in read.stdout, read.stdout
    check = subprocess.run([str(ROOT / ".venv" / "bin" / "ctxrelay"), "--store", str(store),
                            "check"],
                           capture_output=True, text=True, timeout=300, env=_env())
    assert check.returncode > 0, check               # an error exit, not a signal
    assert "truncated" in check.stdout + check.stderr, (check.stdout, check.stderr)
