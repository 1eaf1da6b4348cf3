"""Issue 15: a damaged record-size field is CorruptStoreError, never SIGBUS.

``bench/integrity_bench.py 500`` (seeds 15 and 16) found 3 child processes
killed by SIGBUS (``transcript.lmdb/data.mdb@43999+64``,
``ckf/db/data.mdb@148299+64``, ``ckf/db/data.mdb@257830+64``).  Replayed, two
of them (the third no longer lands on the same bytes) flip a leaf node's flags
to "overflow value" and its data size to 2.4 GB and 20 MB: py-lmdb then copied
that many bytes out of the memory map, past the end of the data file, before
any checksum could be verified.  (LMDB itself refuses an in-page value whose
size does not fit its page, MDB_CORRUPTED, but not an overflow value's size.)

These tests make that damage on purpose: the size field of a record held on
overflow pages (a long turn, a long warm summary, a long fact) is raised to
16 MiB (past the end of the file, inside the 256 MiB map), and the store is
read in a child process (a signal there fails the test instead of killing
pytest).  Before the bounds check (``storage/lmdb/bounds.py``) each case died
with -7 (SIGBUS).

The test finds the node on its own, not with the code under test: LMDB's leaf
node is ``u16 lo, u16 hi, u16 flags, u16 ksize`` then the key; an overflow
value's node has flag F_BIGDATA and the value's size in lo/hi.
"""
from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
from support import ROOT

HERE = Path(__file__).resolve().parent
NODE_HEADER = struct.Struct("<HHHH")         # lo, hi (the data size), flags, key size
F_BIGDATA = 0x01                             # the value is on overflow pages
DAMAGED_SIZE = 16 << 20                      # past the file's end, inside the map
LONG = 6000                                  # characters: held on overflow pages

#: store -> (its LMDB directory, the primary database whose long record is damaged, reads)
TARGETS = {"transcript": ("transcript.lmdb", b"turns", "transcript"),
           "warm": ("warm", b"artifacts", "warm"),
           "facts": ("ckf/db", b"facts", "facts")}

READ = """
import sys
sys.path.insert(0, {here!r})
from pathlib import Path
import corruption_worker as w
result = w.read_all(Path({store!r}), {part!r})
print(sorted({{kind for kind, _ in result.values()}}))
print([v for k, v in result.values() if k != "ok"][:2])
"""


def add_long_records(store: Path) -> None:
    """A long turn and warm summary in session ``ops`` and a long fact: each
    record is held on LMDB overflow pages."""
    import corruption_worker
    from ctxrelay.knowledge.fabric import FactStore
    from ctxrelay.storage.stores import open_stores
    text = " ".join(f"etcd defrag step {i} freed space" for i in range(LONG // 30))
    with open_stores(store) as stores:
        stores.transcript.append("ops", "user", text)
        stores.warm.publish("ops", 21, 21, text)
    with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
        facts.add_fact(text, key="long")
    corruption_worker.close_stores()


def overflow_nodes(env_dir: Path, db_name: bytes) -> list[int]:
    """The file offsets of the node headers of ``db_name``'s overflow values
    (LMDB's free pages may keep a stale copy of a node: each is returned)."""
    env = lmdb.open(str(env_dir), readonly=True, lock=False, max_dbs=32)
    try:
        db = env.open_db(db_name, create=False)
        with env.begin() as txn:
            long_records = [(k, len(v)) for k, v in txn.cursor(db=db) if len(v) > 4096]
    finally:
        env.close()
    raw = (env_dir / "data.mdb").read_bytes()
    found = []
    for key, size in long_records:
        at = raw.find(key)
        while at >= 0:
            lo, hi, flags, ksize = NODE_HEADER.unpack_from(raw, at - NODE_HEADER.size)
            if flags & F_BIGDATA and ksize == len(key) and lo | hi << 16 == size:
                found.append(at - NODE_HEADER.size)
            at = raw.find(key, at + 1)
    return found


def damage_sizes(env_dir: Path, db_name: bytes) -> int:
    """Raise the data size of ``db_name``'s overflow values to DAMAGED_SIZE (store
    closed); returns how many nodes were damaged."""
    offsets = overflow_nodes(env_dir, db_name)
    data_file = env_dir / "data.mdb"
    data = bytearray(data_file.read_bytes())
    assert len(data) + DAMAGED_SIZE < 1 << 28      # past the end, inside the map
    for header in offsets:
        NODE_HEADER.pack_into(data, header, DAMAGED_SIZE & 0xFFFF, DAMAGED_SIZE >> 16,
                              *NODE_HEADER.unpack_from(data, header)[2:])
    data_file.write_bytes(bytes(data))
    return len(offsets)


@pytest.fixture(scope="module")
def with_long(pristine, tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("long") / "store"
    shutil.copytree(pristine, store)
    add_long_records(store)
    return store


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "python"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("store_name", sorted(TARGETS))
def test_a_record_size_past_the_file_end_is_corrupt_store_error_not_sigbus(with_long, tmp_path,
                                                                           store_name):
    env_subdir, db_name, part = TARGETS[store_name]
    store = tmp_path / "store"
    shutil.copytree(with_long, store)
    assert damage_sizes(store / env_subdir, db_name) >= 1
    read = subprocess.run([sys.executable, "-c", READ.format(here=str(HERE), store=str(store),
                                                             part=part)],
                          capture_output=True, text=True, timeout=300, env=_env())
    assert read.returncode == 0, (read.returncode, read.stderr[-2000:])   # -7: SIGBUS
    kinds = read.stdout.splitlines()[0]
    assert "'corrupt'" in kinds and "'error'" not in kinds, read.stdout
    # The message names the database and says the record lies outside the file.
    assert db_name.decode() in read.stdout and "outside" in read.stdout, read.stdout


def test_check_reports_a_record_size_past_the_file_end(with_long, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(with_long, store)
    assert damage_sizes(store / "transcript.lmdb", b"turns") >= 1
    for args in (["check"], ["check", "--repair"], ["check"]):
        check = subprocess.run([str(ROOT / ".venv" / "bin" / "ctxrelay"), "--store", str(store),
                                *args], capture_output=True, text=True, timeout=300,
                               env=_env())
        assert check.returncode > 0, (args, check.returncode, check.stderr[-2000:])  # no signal
        out = check.stdout + check.stderr
        # The damaged turn is named, and repair rewrote nothing from it.
        assert "database turns is unreadable" in out and "lies outside the file" in out, out
        assert "0 repaired" in out, out
