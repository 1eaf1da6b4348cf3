"""Issue 15, point 4: the upgrade path of a store written before record checksums.

An older ctxrelay wrote no checksums (format without ``+xxh3``, HNSW files without
an ``.xxh3`` beside them).  Such a store opens and reads as before, but its reads
are not verified: ``ctxrelay check`` labels every such part UNVERIFIED (exit 0:
nothing is known to be wrong), ``ctxrelay check --repair`` seals every record of
every LMDB store and rebuilds the ANN index files with their checksum, and from
then on damage is detected like in a new store.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import corruption_worker
import pytest
from corruption_worker import close_stores as _close
from corruption_worker import run_cli as _ctxrelay
from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.stores import open_stores
from support import ROOT

LMDB_DIRS = {"transcript": "transcript.lmdb", "warm": "warm", "turnlog": "turnlog",
             "scratch": "scratch/scratch.lmdb", "facts": "ckf/db"}


@pytest.fixture(scope="module")
def old_store(tmp_path_factory) -> tuple[Path, dict]:
    store = tmp_path_factory.mktemp("upgrade") / "store"
    corruption_worker.populate(store)
    _close()
    expected = {part: corruption_worker.read_all(store, part)
                for part in ("transcript", "warm", "turnlog", "scratch", "facts")}
    _close()
    for env_dir in LMDB_DIRS.values():
        corruption_worker.as_written_before_checksums(store / env_dir)
    for digest in (store / "ckf" / "hnsw").glob("*.xxh3"):
        digest.unlink()
    return store, expected


def test_an_older_store_reads_as_before_and_check_labels_it_unverified(old_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(old_store[0], store)
    for part, want in old_store[1].items():
        assert corruption_worker.read_all(store, part) == want, part
        _close()
    check = _ctxrelay(store, "check")
    assert check.returncode == 0, check.stdout              # nothing known to be wrong
    notices = [n for s in json.loads(check.stdout)["stores"] for n in s.get("notices", ())]
    for name in LMDB_DIRS:
        assert any(n.startswith(f"UNVERIFIED: the {name} store") for n in notices), name
    assert any("ANN index file(s) written before checksums" in n for n in notices)
    text = subprocess.run([str(ROOT / ".venv" / "bin" / "ctxrelay"), "--store", str(store),
                           "check"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    assert text.returncode == 0 and text.stdout.count("UNVERIFIED") == len(LMDB_DIRS) + 1


def test_check_repair_seals_every_part_and_damage_is_then_detected(old_store, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(old_store[0], store)
    # before sealing, damage reads as data: this is what "unverified" means
    data = store / "transcript.lmdb" / "data.mdb"
    pristine = data.read_bytes()
    data.write_bytes(pristine.replace(b"freed 8 GiB", b"freed 9 GiB"))
    with open_stores(store) as stores:
        assert "9 GiB" in stores.transcript.turn("ops", 9).content
    _close()
    data.write_bytes(pristine)
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0, repair.stdout
    sealed = [r for s in json.loads(repair.stdout)["stores"] for r in s["repaired"]]
    assert sum("added checksums" in r for r in sealed) == len(LMDB_DIRS), sealed
    assert list((store / "ckf" / "hnsw").glob("*.xxh3"))
    check = _ctxrelay(store, "check")
    assert check.returncode == 0 and "UNVERIFIED" not in check.stdout
    for part, want in old_store[1].items():
        assert corruption_worker.read_all(store, part) == want, part
        _close()
    data.write_bytes(data.read_bytes().replace(b"freed 8 GiB", b"freed 9 GiB"))
    with open_stores(store) as stores, pytest.raises(CorruptStoreError):
        stores.transcript.turn("ops", 9)
    _close()
    assert _ctxrelay(store, "check").returncode == 1
