"""Issue 15: a damaged catalogue record (LMDB's per-database ``MDB_db``) is refused.

LMDB keeps each named database's flags, depth, page counts, entries and root
page in a record of its main database, which carries none of our checksums.
A flipped byte there can point ``turns`` at another database's pages, whose
records pass their checksums (wrong data), or change how keys compare.  The
store checks these records when it opens (``base.check_catalogue``); these
tests damage them in a closed store and read it in a child process: every
read returns the pristine data or raises CorruptStoreError.
"""
from __future__ import annotations

import multiprocessing
import shutil
import struct
from pathlib import Path

import corruption_worker
import lmdb
import pytest

CATALOGUE = struct.Struct("<IHHQQQQQ")  # pad, flags, depth, branch, leaf, overflow, entries, root
FIELDS = ("pad", "flags", "depth", "branch", "leaf", "overflow", "entries", "root")


def catalogue(env_dir: Path) -> dict[bytes, bytes]:
    env = lmdb.open(str(env_dir), readonly=True, lock=False, max_dbs=32)
    try:
        with env.begin() as txn:
            return {bytes(k): bytes(v) for k, v in txn.cursor() if len(v) == CATALOGUE.size}
    finally:
        env.close()


def rewrite(env_dir: Path, name: bytes, change) -> None:
    """Replace the catalogue record of ``name`` (every copy of it, next to its name:
    LMDB's free pages keep older copies) with ``change(fields) -> fields``."""
    old = catalogue(env_dir)[name]
    new = CATALOGUE.pack(*change(list(CATALOGUE.unpack(old))))
    data_file = env_dir / "data.mdb"
    data = data_file.read_bytes()
    assert data.count(name + old) >= 1
    data_file.write_bytes(data.replace(name + old, name + new))


def _read(stores: list[Path], part: str) -> list[tuple[str, dict | None]]:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["corruption_worker"])
    return corruption_worker._read_in_children(ctx, [(str(s), part) for s in stores])


def _field(fields: list[int], name: str, value: int) -> list[int]:
    fields[FIELDS.index(name)] = value
    return fields


def test_a_root_moved_to_another_databases_root_is_refused(pristine, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    env_dir = store / "transcript.lmdb"
    keys_root = CATALOGUE.unpack(catalogue(env_dir)[b"keys"])[7]
    rewrite(env_dir, b"turns", lambda f: _field(f, "root", keys_root))
    [(state, result)] = _read([store], "transcript")
    assert state == "done", state
    assert set(kind for kind, _ in result.values()) == {"corrupt"}, result
    message = next(iter(result.values()))[1]
    assert "catalogue record of database turns" in message, message


def test_changed_flags_are_refused(pristine, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    rewrite(store / "transcript.lmdb", b"turns", lambda f: _field(f, "flags", 0x08))  # INTEGERKEY
    [(state, result)] = _read([store], "transcript")
    assert state == "done", state
    assert set(kind for kind, _ in result.values()) == {"corrupt"}, result


@pytest.mark.parametrize("env_subdir,db_name,part", [
    ("transcript.lmdb", b"turns", "transcript"), ("ckf/db", b"facts", "facts")])
def test_every_bit_flip_of_a_catalogue_record_is_detected_or_harmless(
        pristine, tmp_path, env_subdir, db_name, part):
    [(state, expected)] = _read([pristine], part)
    assert state == "done" and all(kind == "ok" for kind, _ in expected.values())
    stores = []
    for byte in range(CATALOGUE.size):
        for bit in (0, 3, 7):
            store = tmp_path / f"s{byte}-{bit}"
            shutil.copytree(pristine, store)
            old = catalogue(store / env_subdir)[db_name]
            flipped = bytearray(old)
            flipped[byte] ^= 1 << bit
            rewrite(store / env_subdir, db_name,
                    lambda f, b=bytes(flipped): list(CATALOGUE.unpack(b)))
            stores.append(store)
    outcomes = _read(stores, part)
    wrong, crashes, detected = [], [], 0
    for store, (state, result) in zip(stores, outcomes):
        if state != "done":
            crashes.append(f"{store.name}: {state}")
            continue
        for read, (kind, value) in result.items():
            if kind == "corrupt":
                detected += 1
            elif kind != "ok" or value != expected[read][1]:
                wrong.append(f"{store.name} {read}: {kind} {str(value)[:120]}")
    assert crashes == [] and wrong == [], (crashes, wrong[:10])
    assert detected > 0
