"""The LMDB plumbing every embedded store shares (ctxrelay.storage.lmdb.base).

Each test runs on every store built on LmdbStore -- transcript, turn log, warm
artifacts, scratch buffer -- through the store's own public writes, so a store
that bypassed the base would fail here: one environment per path, a grown
map, a map that cannot grow, a full disk, a truncated data file, a foreign
format, a closed store.
"""
from __future__ import annotations

import glob
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import lmdb
import pytest

from ctxrelay.errors import CorruptStoreError, StoreError, StoreFullError
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.lmdb.scratch import ScratchStore
from ctxrelay.storage.lmdb.transcript import TranscriptStore
from ctxrelay.storage.lmdb.turnlog import TurnLog
from ctxrelay.storage.lmdb.warm import WarmStore
from ctxrelay.text.embed import get_embedder

from support import mounted_tmpfs


def _text(i: int, words: int = 120) -> str:
    return f"{i} " + " ".join(f"w{i}_{j}" for j in range(words))


@dataclass
class Driver:
    """How to open one kind of store and write record ``i`` through its public API."""

    name: str
    open: Callable[..., Any]                # (path, map_size=None) -> store
    write: Callable[[Any, int], None]       # one record per call, ids from 1
    count: Callable[[Any], int]             # records stored


def _transcript_write(store: TranscriptStore, i: int) -> None:
    if i == 1:
        store.create_session("s")
    store.append("s", "user", _text(i))


def _warm_write(store: WarmStore, i: int) -> None:
    store.publish("s", 1, i, _text(i))


def _scratch_write(store: ScratchStore, i: int) -> None:
    store.put("s", "tool", {"i": i}, _text(i, 20))


class _Derived:
    """A turn log with the transcript it derives from (one more turn per write)."""

    def __init__(self, path: Path, map_size: int | None) -> None:
        self.source = TranscriptStore.open(path.parent / (path.name + "-source"))
        if not self.source.has_session("s"):
            self.source.create_session("s")
        kw = {} if map_size is None else {"map_size": map_size}
        self.log = TurnLog(path, **kw)
        self.embedder = get_embedder("hashing")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.log, name)


def _turnlog_write(derived: _Derived, i: int) -> None:
    if derived.source.turn_count("s") < i:      # a retried write derives the same turn
        derived.source.append("s", "user", _text(i))
    derived.log.sync(derived.source, "s", derived.embedder)


def _turnlog_count(derived: _Derived) -> int:
    return derived.log.coverage("s")[0]


def _kw(map_size: int | None) -> dict[str, int]:
    return {} if map_size is None else {"map_size": map_size}


DRIVERS = [
    Driver("transcript", lambda p, map_size=None: TranscriptStore(p, **_kw(map_size)),
           _transcript_write, lambda s: s.turn_count("s") if s.has_session("s") else 0),
    Driver("warm", lambda p, map_size=None: WarmStore(p, **_kw(map_size)),
           _warm_write, lambda s: len(s.latest("s"))),
    Driver("scratch", lambda p, map_size=None: ScratchStore(
        p, disk_budget_bytes=1 << 30, **_kw(map_size if map_size is None else max(map_size, 1 << 16))),
        _scratch_write, lambda s: s.stats().entries),
    Driver("turnlog", lambda p, map_size=None: _Derived(p, map_size),
           _turnlog_write, _turnlog_count),
]


@pytest.fixture(params=DRIVERS, ids=[d.name for d in DRIVERS])
def driver(request) -> Driver:
    return request.param


def _store_of(handle: Any) -> LmdbStore:
    return handle.log if isinstance(handle, _Derived) else handle


def _data_file(handle: Any) -> Path:
    return Path(_store_of(handle).env_path) / "data.mdb"


# -- opening ----------------------------------------------------------------------------

def test_every_store_is_an_lmdb_store(driver, tmp_path):
    handle = driver.open(tmp_path / "x")
    store = _store_of(handle)
    assert isinstance(store, LmdbStore)
    driver.write(handle, 1)
    assert driver.count(handle) == 1 and store.write_generation() > 0
    store.close()
    assert store.closed and store.write_generation() is None


def test_one_environment_per_path_per_process(driver, tmp_path):
    store = _store_of(driver.open(tmp_path / "x"))
    with pytest.raises(StoreError, match="already open in this process"):
        type(store)(tmp_path / "x")
    assert type(store).open(tmp_path / "x") is store
    store.close()
    again = type(store).open(tmp_path / "x")
    assert again is not store and not again.closed


def test_a_closed_store_raises_and_reopens(driver, tmp_path):
    handle = driver.open(tmp_path / "x")
    driver.write(handle, 1)
    _store_of(handle).close()
    _store_of(handle).close()                         # idempotent
    with pytest.raises(StoreError, match="closed"):
        driver.count(handle)
    handle = driver.open(tmp_path / "x")
    assert driver.count(handle) == 1


def test_a_truncated_data_file_is_refused_before_it_is_mapped(driver, tmp_path):
    # Issue 15 point 2: reading a missing page through the map kills the process
    # with SIGBUS; the size is checked against the file's own header first.
    handle = driver.open(tmp_path / "x")
    for i in range(1, 60):
        driver.write(handle, i)
    data = _data_file(handle)
    _store_of(handle).close()
    os.truncate(data, data.stat().st_size // 2)
    with pytest.raises(CorruptStoreError, match="truncated"):
        driver.open(tmp_path / "x")
    with pytest.raises(CorruptStoreError, match="truncated"):   # and the path stays free
        driver.open(tmp_path / "x")


def test_the_knowledge_store_refuses_a_truncated_data_file(tmp_path):
    from ctxrelay.knowledge.fabric import FactStore
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as facts:
        for i in range(200):
            facts.add_fact(_text(i, 40))
    [data] = glob.glob(str(tmp_path / "ckf" / "**" / "data.mdb"), recursive=True)
    os.truncate(data, os.path.getsize(data) // 2)
    with pytest.raises(CorruptStoreError, match="truncated"):
        FactStore(tmp_path / "ckf", embedder="hashing")


def test_another_format_is_refused_and_left_alone(driver, tmp_path):
    handle = driver.open(tmp_path / "x")
    driver.write(handle, 1)
    store = _store_of(handle)
    env_path, fmt = store.env_path, type(store).FORMAT
    store.close()
    env = lmdb.open(env_path, max_dbs=16)
    with env.begin(write=True) as txn:
        txn.put(b"format", fmt[:-1] + b"9", db=env.open_db(b"meta", txn=txn))
    env.close()
    with pytest.raises(CorruptStoreError, match="version that wrote it|own directory"):
        driver.open(tmp_path / "x")


def test_a_file_where_the_directory_belongs(driver, tmp_path):
    (tmp_path / "x").write_text("not a directory")
    with pytest.raises(StoreError, match="is a file"):
        driver.open(tmp_path / "x")


# -- the map --------------------------------------------------------------------------------

def test_a_full_map_grows_transparently(driver, tmp_path):
    handle = driver.open(tmp_path / "x", map_size=64 * 1024)
    for i in range(1, 120):
        driver.write(handle, i)
    store = _store_of(handle)
    assert os.path.getsize(_data_file(handle)) > 64 * 1024
    assert driver.count(handle) == 119
    store.close()
    assert driver.count(driver.open(tmp_path / "x", map_size=64 * 1024)) == 119


def test_a_map_that_cannot_grow_raises_store_full_and_writes_nothing(driver, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setattr(LmdbStore, "MAX_MAP_SIZE", 256 * 1024)
    handle = driver.open(tmp_path / "x", map_size=64 * 1024)
    written = 0
    with pytest.raises(StoreFullError, match="would need a map over 262144 bytes; nothing was"):
        for i in range(1, 10_000):
            before = driver.count(handle)
            driver.write(handle, i)
            written = i
    assert driver.count(handle) == before                # the failed write left nothing
    assert 0 < written < 10_000
    _store_of(handle).close()
    monkeypatch.undo()
    handle = driver.open(tmp_path / "x")                 # still opens, and grows again
    assert driver.count(handle) == before
    driver.write(handle, written + 1)


# -- full disks -----------------------------------------------------------------------------

class _FailingCommits:
    """An environment whose write transactions fail to commit as on a full disk."""

    def __init__(self, env: Any, error: BaseException) -> None:
        self.env, self.error = env, error

    def begin(self, write: bool = False, **kw: Any) -> Any:
        txn = self.env.begin(write=write, **kw)
        return _FailingTxn(txn, self.error) if write else txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


class _FailingTxn:
    def __init__(self, txn: Any, error: BaseException) -> None:
        self.txn, self.error = txn, error

    def __enter__(self) -> Any:
        return self.txn.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.txn.abort()
        raise self.error


@pytest.mark.parametrize("error", [lmdb.DiskError("mdb_txn_commit: No space left on device")],
                         ids=["enospc"])
def test_disk_errors_become_store_full_and_nothing_is_written(driver, tmp_path, monkeypatch,
                                                              error):
    handle = driver.open(tmp_path / "x")
    driver.write(handle, 1)
    store = _store_of(handle)
    monkeypatch.setattr(store, "_env", _FailingCommits(store._env, error))
    with pytest.raises(StoreFullError, match="free disk space"):
        driver.write(handle, 2)
    monkeypatch.undo()
    assert driver.count(handle) == 1
    driver.write(handle, 2)
    assert driver.count(handle) == 2


@pytest.fixture
def tmpfs(tmp_path):
    with mounted_tmpfs(tmp_path / "fs", "2m") as mount_point:
        yield mount_point


def test_a_really_full_disk(driver, tmpfs):
    handle = driver.open(tmpfs / "x")
    driver.write(handle, 1)
    filler = tmpfs / "filler"
    free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
    filler.write_bytes(b"\0" * max(0, free - 8 * 1024))
    stored = driver.count(handle)
    with pytest.raises(StoreFullError, match="free disk space"):
        for i in range(2, 400):
            driver.write(handle, i)
            stored = driver.count(handle)
    filler.unlink()
    assert driver.count(handle) == stored                # acknowledged writes stay
    driver.write(handle, 400)                            # and a retry works


def test_struct_layout_of_u64_keys_sorts_numerically():
    # Every store relies on big-endian u64 keys sorting as numbers in LMDB.
    keys = [struct.pack(">Q", n) for n in (1, 2, 255, 256, 1 << 40)]
    assert sorted(keys) == keys
