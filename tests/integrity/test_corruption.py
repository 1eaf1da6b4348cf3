"""Issue 15, point 1: every corruption is detected; none is read back as data.

``test_random_flips_*`` flips 1, 8 or 64 bytes at random offsets of every store
file (each LMDB data file, the scratch blobs, the ANN index), one damage per
trial, with a fixed seed, and reads every record of the damaged part in a child
process: each read returns the pristine data or raises CorruptStoreError --
never other data, another exception or a crash.  ``bench/integrity_bench.py``
runs the same harness with more trials (figures in docs/reliability.md).

The other tests replay the issue's cases: a one-byte change in a turn's text
("8 GiB" -> "9 GiB", "Defrag" -> "defrag"), a damaged key record, a damaged
scratch blob; ``ctxrelay check`` must find each, and ``check --repair`` must
never rewrite a primary record from damaged bytes.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import corruption_worker
import lmdb
import pytest
from corruption_worker import close_stores as _close
from corruption_worker import run_cli as _ctxrelay
from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.lmdb.framing import CHECKSUM_BYTES, intact
from ctxrelay.storage.stores import open_stores
from support import mounted_tmpfs

TRIALS_PER_FILE = 30            # x 8 files = 240 trials, ~30 s on the 2-core dev machine
SEED = 15





def _flip_in_file(path: Path, old: bytes, new: bytes) -> None:
    """Replace every copy (LMDB's free pages may hold stale copies of a record)."""
    data = path.read_bytes()
    assert data.count(old) >= 1, f"{old!r} is not in {path}"
    path.write_bytes(data.replace(old, new))


def test_random_flips_in_every_store_file_are_detected_or_harmless(pristine, tmp_path):
    with mounted_tmpfs(tmp_path / "shm", "512m") as work:
        summary = corruption_worker.run_trials(pristine, work,
                                               trials_per_file=TRIALS_PER_FILE, seed=SEED)
    assert summary["trials"] == TRIALS_PER_FILE * len(corruption_worker.FILES)
    assert summary["wrong"] == [], summary["wrong"]
    assert summary["other_error"] == [], summary["other_error"]
    assert summary["crash"] == [], summary["crash"]
    # The damage was real: many reads saw it, and every file's damage was seen.
    assert summary["corrupt_store_error"] >= summary["trials"] // 10
    assert summary["same"] + summary["corrupt_store_error"] == summary["reads"]


# -- the cases, through the CLI --------------------------------------------------

def test_a_changed_digit_in_a_turn_is_detected_and_never_repaired_into_data(pristine,
                                                                         tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    _flip_in_file(store / "transcript.lmdb" / "data.mdb", b"freed 8 GiB", b"freed 9 GiB")
    with open_stores(store) as stores:
        with pytest.raises(CorruptStoreError, match="turns/.*fails its checksum"):
            stores.transcript.turn("ops", 9)
        with pytest.raises(CorruptStoreError):
            stores.transcript.history("ops")
        assert stores.transcript.turn("ops", 8).content.startswith("ops turn 7")
    _close()
    check = _ctxrelay(store, "check")
    assert check.returncode == 1, check.stderr
    report = json.loads(check.stdout)
    found = json.dumps(report)
    assert "turns/" in found and "fails its checksum" in found
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 1, repair.stdout      # a damaged primary stays a problem
    assert "left in place" in repair.stdout
    quarantined = list((store / "quarantine").rglob("transcript-turns-*.json"))
    assert len(quarantined) == 2                                # turn 9 of both sessions
    held = json.loads(quarantined[0].read_text())
    assert b"freed 9 GiB" in bytes.fromhex(held["value_hex"])   # the damaged bytes, kept
    with open_stores(store) as stores:                          # still refused, not "9 GiB"
        with pytest.raises(CorruptStoreError):
            stores.transcript.turn("ops", 9)
    _close()


def test_a_case_change_in_a_turn_is_detected(pristine, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    _flip_in_file(store / "transcript.lmdb" / "data.mdb", b"etcd defrag freed 3",
                  b"etcd Defrag freed 3")
    with open_stores(store) as stores, pytest.raises(CorruptStoreError):
        stores.transcript.turn("ops", 4)
    _close()
    assert _ctxrelay(store, "check").returncode == 1


def _damage_one_record(env_dir: Path, db_name: bytes) -> bytes:
    """Flip one byte of the first record of ``db_name``; returns its key."""
    env = lmdb.open(str(env_dir), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(db_name, txn=txn, create=False)
            key, value = next(iter(txn.cursor(db=db)))
            damaged = bytes([value[0] ^ 0x01]) + value[1:]
            txn.put(key, damaged, db=db)
            assert not intact(key, damaged) and len(value) > CHECKSUM_BYTES
            return bytes(key)
    finally:
        env.close()


def test_a_damaged_key_record_is_rebuilt_from_the_intact_turns(pristine, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    with open_stores(store) as stores:
        want = {s: stores.transcript.turn_for_key(s, "k5") for s in ("ops", "notes")}
    _close()
    key = _damage_one_record(store / "transcript.lmdb", b"keys")
    check = _ctxrelay(store, "check")
    assert check.returncode == 1 and f"keys/{key.hex()}" in check.stdout
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0, repair.stdout
    assert json.loads(repair.stdout)["repaired"] >= 1
    assert list((store / "quarantine").rglob("transcript-keys-*.json"))
    with open_stores(store) as stores:
        assert {s: stores.transcript.turn_for_key(s, "k5") for s in want} == want
    _close()
    assert _ctxrelay(store, "check").returncode == 0


@pytest.mark.parametrize("env_dir, db_name", [
    ("warm", b"latest"), ("scratch/scratch.lmdb", b"order"), ("turnlog", b"vectors")])
def test_damaged_derived_records_of_the_side_stores_are_quarantined_and_rebuilt(
        pristine, tmp_path, env_dir, db_name):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    key = _damage_one_record(store / env_dir, db_name)
    check = _ctxrelay(store, "check")
    assert check.returncode == 1 and f"{db_name.decode()}/{key.hex()}" in check.stdout
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0, repair.stdout
    assert _ctxrelay(store, "check").returncode == 0


def test_a_damaged_scratch_blob_is_found_by_check(pristine, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    blob = sorted((store / "scratch" / "blobs").rglob("*.blob"))[0]
    data = bytearray(blob.read_bytes())
    for i in range(100, 108):                       # the 8 flipped bytes
        data[i] ^= 0xFF
    blob.write_bytes(bytes(data))
    check = _ctxrelay(store, "check")
    assert check.returncode == 1
    assert "does not match its sha256" in check.stdout


# -- stores written before checksums ------------------------------------------------------


def test_a_store_written_before_checksums_opens_reads_and_is_sealed_by_repair(pristine,
                                                                            tmp_path):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    expected = corruption_worker.read_all(store, "transcript")
    _close()
    corruption_worker.as_written_before_checksums(store / "transcript.lmdb")
    assert corruption_worker.read_all(store, "transcript") == expected
    with open_stores(store) as stores:
        assert not stores.transcript.framed
        stores.transcript.append("ops", "user", "written unframed")   # still writable
    _close()
    check = _ctxrelay(store, "check")
    assert check.returncode == 0 and "written before record checksums" in check.stdout
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0 and "added checksums" in repair.stdout
    with open_stores(store) as stores:
        assert stores.transcript.framed
        assert stores.transcript.history("ops")[-1].content == "written unframed"
    got = corruption_worker.read_all(store, "transcript")
    _close()
    assert got["notes/history"] == expected["notes/history"]
