"""Issue 15: a damaged LMDB *key* is detected by a point lookup, not read as "not found".

The record checksum covers key and value (``framing.seal``), so a scan fails a
record whose key bytes changed; but a point lookup by the old key finds
nothing at all.  Before, ``turn_for_key`` then answered None for an
idempotency key the store holds (a retried request would store its turn a
second time), and a fact key read as unknown.  Each test here damages the key
bytes of one index record in the data file itself and asserts the lookup
raises CorruptStoreError, ``check`` names the damaged record and ``check
--repair`` rebuilds the index from the intact primaries.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import corruption_worker
import pytest
from corruption_worker import close_stores as _close
from corruption_worker import run_cli as _ctxrelay
from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.stores import open_stores


def _damage_key_bytes(data_file: Path, key_bytes: bytes, at: int) -> None:
    """Flip byte ``at`` of every copy of ``key_bytes`` in the file (the live record
    and stale copies in free pages alike)."""
    data = data_file.read_bytes()
    assert data.count(key_bytes) >= 1, f"{key_bytes.hex()} is not in {data_file}"
    damaged = bytearray(key_bytes)
    damaged[at] ^= 0x5A
    data_file.write_bytes(data.replace(key_bytes, bytes(damaged)))


# first byte: the record sorts far from where it was; last byte: right beside it
@pytest.mark.parametrize("at", [0, 17, 31], ids=["first", "middle", "last"])
def test_a_damaged_idempotency_key_is_corrupt_not_new(pristine, tmp_path, at):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    with open_stores(store) as stores:
        want = stores.transcript.turn_for_key("ops", "k3")
        assert want is not None
    _close()
    _damage_key_bytes(store / "transcript.lmdb" / "data.mdb",
                      hashlib.sha256(b"k3").digest(), at)
    with open_stores(store) as stores:
        with pytest.raises(CorruptStoreError, match="keys/"):
            stores.transcript.turn_for_key("ops", "k3")
        # a retried keyed append must not store the turn a second time
        with pytest.raises(CorruptStoreError):
            stores.transcript.append("ops", "user", "retry of k3", key="k3")
        assert stores.transcript.turn_count("ops") == 20
    _close()
    check = _ctxrelay(store, "check")
    assert check.returncode == 1 and "keys/" in check.stdout
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0, repair.stdout
    with open_stores(store) as stores:
        assert stores.transcript.turn_for_key("ops", "k3") == want
        assert stores.transcript.turn_for_key("ops", "never-used") is None
    _close()
    assert _ctxrelay(store, "check").returncode == 0


def test_a_key_that_was_never_stored_still_reads_as_absent(pristine, tmp_path):
    """The neighbour check costs nothing in correctness on an intact store."""
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    with open_stores(store) as stores:
        t = stores.transcript
        assert [t.turn_for_key(s, f"new-{i}") for s in ("ops", "notes") for i in range(50)] \
            == [None] * 100
    _close()


@pytest.mark.parametrize("at", [8, 13], ids=["first", "last"])
def test_a_damaged_fact_key_is_corrupt_not_unknown(pristine, tmp_path, at):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    from ctxrelay.knowledge.fabric import FactStore
    with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
        want = facts.lookup_key("fact-7")
        assert want is not None
    _close()
    # the keys index: namespace id (8 bytes, the first namespace) + the key; the
    # fact record itself (which holds "fact-7" too) stays intact
    _damage_key_bytes(store / "ckf" / "db" / "data.mdb", (1).to_bytes(8, "big") + b"fact-7",
                      at)
    with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
        with pytest.raises(CorruptStoreError):
            facts.lookup_key("fact-7")
    _close()
    check = _ctxrelay(store, "check")
    assert check.returncode == 1 and "keys/" in check.stdout, check.stdout
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0, repair.stdout
    with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
        assert facts.lookup_key("fact-7") == want
    _close()
    report = json.loads(_ctxrelay(store, "check").stdout)
    assert report["ok"], report


def _damage_first_value(env_dir: Path, db_name: bytes) -> bytes:
    """Flip one byte of the first record's value of ``db_name``; returns its key."""
    import lmdb
    env = lmdb.open(str(env_dir), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(db_name, txn=txn, create=False)
            key, value = next(iter(txn.cursor(db=db)))
            txn.delete(key, value, db=db)
            txn.put(key, bytes([value[0] ^ 0x01]) + value[1:], db=db)
            return bytes(key)
    finally:
        env.close()


@pytest.mark.parametrize("db_name", [b"ids", b"hidden", b"members", b"terms.post",
                                     b"terms.docs"])
def test_damaged_fact_indexes_are_rebuilt_from_the_fact_records(pristine, tmp_path, db_name):
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    from ctxrelay.knowledge.fabric import FactStore

    def reads() -> tuple:
        with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
            found = [facts.lookup_key(k) for k in corruption_worker.FACT_KEYS]
            ids = [f.fact_id for f in found if f is not None]
            got = (ids, [facts.fact(i).content for i in ids],
                   [h.fact_id for h in facts.search_terms("etcd defrag", k=5)],
                   [h.fact_id for h in facts.search_ann("etcd defrag", k=5)],
                   [(c.size, tuple(c.fact_ids)) for c in facts.communities()])
        _close()
        return got
    if db_name == b"hidden":     # no fact is hidden in the pristine store: hide one
        with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
            facts.set_status("fact-2", "QUARANTINED")
        _close()
    if db_name == b"members":
        with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
            facts.recluster()
        _close()
    want = reads()
    _damage_first_value(store / "ckf" / "db", db_name)
    check = _ctxrelay(store, "check")
    assert check.returncode == 1 and f"{db_name.decode()}/" in check.stdout
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0, repair.stdout
    assert json.loads(repair.stdout)["repaired"] >= 1
    assert reads() == want
    assert _ctxrelay(store, "check").returncode == 0


def test_a_missing_fact_index_record_is_found_and_rebuilt(pristine, tmp_path):
    """Not damage but loss: an ids record gone (no checksum to fail) is found by
    comparing the indexes with the fact records."""
    import lmdb
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    env = lmdb.open(str(store / "ckf" / "db"), max_dbs=32, subdir=True)
    with env.begin(write=True) as txn:
        db = env.open_db(b"keys", txn=txn, create=False)
        key, _ = next(iter(txn.cursor(db=db)))
        txn.delete(key, db=db)
    env.close()
    check = _ctxrelay(store, "check")
    assert check.returncode == 1 and "index keys: 1 record(s) missing" in check.stdout
    assert _ctxrelay(store, "check", "--repair").returncode == 0
    assert _ctxrelay(store, "check").returncode == 0


def test_a_damaged_graph_edge_is_rebuilt_from_the_vectors(pristine, tmp_path):
    import numpy as np
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    from ctxrelay.knowledge.fabric import FactStore
    key = _damage_first_value(store / "ckf" / "db", b"edges")
    with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
        with pytest.raises(CorruptStoreError):       # a walk reads every edge
            facts.backend.edges("default")
    _close()
    check = _ctxrelay(store, "check")
    assert check.returncode == 1 and f"edges/{key.hex()}" in check.stdout
    repair = _ctxrelay(store, "check", "--repair")
    assert repair.returncode == 0, repair.stdout
    assert "edge(s) rebuilt from the vectors" in repair.stdout
    with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
        src, dst, weight = facts.backend.edges("default")
        ids = facts.backend.ids_at("default", list(range(1, 13)))
        vecs = facts.backend.vectors("default", ids)
        assert len(src) > 0
        assert set(zip(src.tolist(), dst.tolist())) == set(zip(dst.tolist(), src.tolist()))
        unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        cos = (unit[src - 1] * unit[dst - 1]).sum(axis=1)
        assert np.allclose(cos, weight, atol=1e-5)
        assert (weight >= facts.edge_threshold - 1e-6).all()
        assert facts.cdgr("etcd defrag", k=3)                  # a walk over the new graph
    _close()
    assert _ctxrelay(store, "check").returncode == 0


def _move_first_record(env_dir: Path, db_name: bytes) -> bytes:
    """Re-file the first record of ``db_name`` under its key with the byte before the
    last 8 lowered by one, its stored bytes (and checksum) unchanged: what a damaged
    key byte does to a record, placed where LMDB sorts the damaged key."""
    import lmdb
    env = lmdb.open(str(env_dir), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(db_name, txn=txn, create=False)
            key, value = (bytes(x) for x in next(iter(txn.cursor(db=db))))
            damaged = bytearray(key)
            damaged[-9] = (damaged[-9] - 1) % 256
            txn.delete(key, db=db)
            txn.put(bytes(damaged), value, db=db)
            return key
    finally:
        env.close()


def test_a_range_scan_whose_first_record_key_was_damaged_is_corrupt_not_shorter(pristine,
                                                                                tmp_path):
    """The bench's last wrong read (turnlog/data.mdb@405233+1 ops/threads): a threads
    record's session prefix damaged so the record sorts before the session's range;
    the scan read one thread fewer, without an error."""
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    with open_stores(store) as stores:
        want = {s: stores.turnlog.threads(s) for s in corruption_worker.SESSIONS}
    _close()
    key = _move_first_record(store / "turnlog", b"threads")
    hit = next(s for s in corruption_worker.SESSIONS
               if hashlib.sha256(s.encode()).digest() == key[:32])
    with open_stores(store) as stores:
        with pytest.raises(CorruptStoreError, match="threads/"):
            stores.turnlog.threads(hit)
    _close()


def _damage_catalogue_root(data_file: Path) -> None:
    """Make the main database's root page (which names the store's databases) a page
    of no type, in the current meta page (LMDB's layout: meta after a 16-byte page
    header; the main database's root at +128, the meta's txnid at +144)."""
    data = bytearray(data_file.read_bytes())
    page = 4096
    txnids = [int.from_bytes(data[p * page + 144:p * page + 152], "little") for p in (0, 1)]
    meta = txnids.index(max(txnids)) * page
    root = int.from_bytes(data[meta + 128:meta + 136], "little")
    data[root * page + 10:root * page + 12] = b"\xff\x7f"       # mp_flags: no such type
    data_file.write_bytes(bytes(data))


@pytest.mark.parametrize("part, env_dir", [("scratch", "scratch/scratch.lmdb"),
                                           ("warm", "warm"), ("turnlog", "turnlog")])
def test_a_damaged_catalogue_page_is_corrupt_store_error_at_open(pristine, tmp_path, part,
                                                                 env_dir):
    """From the bench: LMDB's CorruptedError from mdb_dbi_open escaped as a raw lmdb
    error when a store's database catalogue was damaged."""
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    _damage_catalogue_root(store / env_dir / "data.mdb")
    with open_stores(store) as stores, pytest.raises(CorruptStoreError, match="damaged page"):
        getattr(stores, part)
    _close()


def test_an_io_error_at_commit_with_room_on_the_disk_is_corrupt_store_error(tmp_path,
                                                                            monkeypatch):
    """From bench/integrity_bench.py --seed 16: a scratch read (which moves its LRU,
    a write) on a damaged data file failed its commit with a bare lmdb.Error (EIO),
    which escaped as it was.  With room on the disk it is CorruptStoreError; a full
    disk stays StoreFullError."""
    import lmdb
    from ctxrelay.errors import StoreFullError
    from ctxrelay.storage.lmdb import base
    from ctxrelay.storage.lmdb.transcript import TranscriptStore
    store = TranscriptStore.open(tmp_path / "t")
    try:
        def fail(txn):
            raise lmdb.Error("mdb_txn_commit: Input/output error")
        monkeypatch.setattr(base, "disk_nearly_full", lambda path: False)
        with pytest.raises(CorruptStoreError, match="could not commit.*ctxrelay check"):
            store.write(fail)
        monkeypatch.setattr(base, "disk_nearly_full", lambda path: True)
        with pytest.raises(StoreFullError):
            store.write(fail)
        store.create_session("still")                        # the store still works
    finally:
        store.close()


def test_a_search_index_that_reads_as_empty_is_corrupt_not_no_hits(pristine, tmp_path):
    """From bench/integrity_bench.py --seed 16 (transcript.lmdb/data.mdb@11674+64):
    64 damaged bytes in LMDB's catalogue made the index databases read as empty, and
    every search answered [] without an error.  Here the index of one session is
    dropped behind the store's back (its turns, counters and keys intact)."""
    import lmdb
    store = tmp_path / "store"
    shutil.copytree(pristine, store)
    env = lmdb.open(str(store / "transcript.lmdb"), max_dbs=32, subdir=True)
    with env.begin(write=True) as txn:
        for name in (b"ix.ns", b"ix.post", b"ix.docs"):
            db = env.open_db(name, txn=txn, create=False, dupsort=name == b"ix.post")
            txn.drop(db, delete=False)
    env.close()
    with open_stores(store) as stores:
        with pytest.raises(CorruptStoreError, match="search index of session 'ops'"):
            stores.transcript.search("ops", "etcd defrag")
        with pytest.raises(CorruptStoreError):
            stores.transcript.rank("ops", "etcd defrag")
        stores.transcript.create_session("new")
        assert stores.transcript.search("new", "etcd") == []          # empty agrees
    _close()
    assert _ctxrelay(store, "check", "--repair").returncode == 0
    with open_stores(store) as stores:
        assert [h.turn_id for h in stores.transcript.search("ops", "etcd defrag", k=3)]
    _close()
