"""One LMDB environment per directory, shared in a process, growing on demand.

New stores build on :class:`LmdbStore` instead of repeating the plumbing:
the per-path registry (LMDB allows one environment per path per process),
named databases with a format record, read/write transactions that grow a
full map and survive a resize by another process, clear errors for bad paths
and full disks.  (TranscriptStore and WarmStore predate it and carry their own
copy of the same rules.)
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, ClassVar, TypeVar

import lmdb

from ctxrelay.errors import CorruptStoreError, StoreError, StoreFullError
from ctxrelay.storage.lmdb.transcript import (_MAX_MAP_SIZE, _MAX_READERS, _Gate, _disk_nearly_full,
                         _prepare_dirs, _registry_key)

S = TypeVar("S", bound="LmdbStore")

_registry: dict[tuple[str, str], "LmdbStore"] = {}
_registry_lock = threading.RLock()


class LmdbStore:
    """Base of a store that keeps its named databases in one LMDB directory.

    Subclasses set ``KIND`` (a short name for messages), ``FORMAT`` (bytes
    written once into ``meta``) and ``DB_NAMES`` (``meta`` first); dupsort
    databases are listed in ``DUPSORT``.
    """

    KIND: ClassVar[str] = "store"
    FORMAT: ClassVar[bytes] = b""
    DB_NAMES: ClassVar[tuple[bytes, ...]] = (b"meta",)
    DUPSORT: ClassVar[frozenset[bytes]] = frozenset()

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = 1 << 28) -> None:
        self._path = os.fspath(path)
        self._gate = _Gate()
        self._key = (type(self).__name__, _registry_key(self._path))
        with _registry_lock:
            if self._key in _registry:
                raise StoreError(
                    f"{self.KIND} {self._path} is already open in this process; use "
                    f"{type(self).__name__}.open(path) to share it")
            self._env = self._open_env(map_size)
            try:
                self.dbs = self._open_dbs()
            except BaseException:
                self._env.close()
                raise
            _registry[self._key] = self

    @classmethod
    def open(cls: type[S], path: str | os.PathLike[str], **kw: Any) -> S:
        """The one shared instance of ``path`` in this process."""
        key = (cls.__name__, _registry_key(os.fspath(path)))
        with _registry_lock:
            found = _registry.get(key)
            if found is not None and not found.closed:
                return found  # type: ignore[return-value]
            return cls(path, **kw)

    def _open_env(self, map_size: int) -> Any:
        _prepare_dirs(self._path, self._path, readonly=False)
        try:
            env = lmdb.open(self._path, map_size=map_size, subdir=True, create=True,
                            lock=True, sync=True, metasync=True,
                            max_dbs=len(self.DB_NAMES) + 4, max_readers=_MAX_READERS)
        except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError,
                lmdb.PanicError) as exc:
            raise CorruptStoreError(
                f"{self._path} is not a readable LMDB environment ({exc}); restore it "
                f"from a backup or move it away and open a new {self.KIND}") from None
        except lmdb.Error as exc:
            raise StoreError(
                f"cannot open the {self.KIND} at {self._path} ({exc}); check that the "
                "directory is writable and not on a full or read-only disk") from None
        env.reader_check()
        return env

    def _open_dbs(self) -> dict[bytes, Any]:
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    dbs = {n: self._env.open_db(n, txn=txn, create=True,
                                                dupsort=n in self.DUPSORT)
                           for n in self.DB_NAMES}
                    found = txn.get(b"format", db=dbs[b"meta"])
                    if found is None:
                        txn.put(b"format", self.FORMAT, db=dbs[b"meta"])
                    elif found != self.FORMAT:
                        raise CorruptStoreError(
                            f"{self._path} holds format {found!r}, not {self.FORMAT!r}; "
                            f"point the {self.KIND} at its own directory, or open it "
                            "with the ctxrelay version that wrote it")
                return dbs
            except lmdb.MapFullError:
                self._env.set_mapsize(self._env.info()["map_size"] * 2)

    @property
    def path(self) -> str:
        return self._path

    @property
    def closed(self) -> bool:
        return self._env is None

    def write_generation(self) -> int | None:
        """A number that moves with every committed write, by any process (LMDB's
        last transaction id); None once closed."""
        env = self._env
        return None if env is None else int(env.info()["last_txnid"])

    def close(self) -> None:
        with _registry_lock:
            if self._env is None:
                return
            with self._gate.exclusive():
                self._env.close()
                self._env = None
            if _registry.get(self._key) is self:
                del _registry[self._key]

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _live_env(self) -> Any:
        if self._env is None:
            raise StoreError(f"{self.KIND} {self._path} is closed; open it again")
        return self._env

    def read(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in a read transaction (a consistent snapshot)."""
        while True:
            env = self._live_env()
            try:
                with self._gate.shared(), env.begin() as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._resize(0)

    def write(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in one write transaction (all or nothing), growing a full map."""
        while True:
            env = self._live_env()
            size = env.info()["map_size"]
            try:
                with self._gate.shared(), env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                if size * 2 > _MAX_MAP_SIZE:
                    raise StoreFullError(
                        f"{self.KIND} {self._path} would need a map over {_MAX_MAP_SIZE} "
                        "bytes; nothing was written") from None
                self._resize(size * 2, only_if=size)
            except lmdb.MapResizedError:
                self._resize(0)
            except lmdb.Error as exc:
                if isinstance(exc, lmdb.DiskError) or _disk_nearly_full(self._path):
                    raise StoreFullError(
                        f"the disk holding {self._path} is full ({exc}); nothing was "
                        "written; free disk space and retry") from None
                raise

    def _resize(self, new_size: int, *, only_if: int | None = None) -> None:
        with self._gate.exclusive():
            env = self._live_env()
            if only_if is None or env.info()["map_size"] == only_if:
                env.set_mapsize(new_size)


def close_all() -> None:
    with _registry_lock:
        stores = list(_registry.values())
    for store in stores:
        store.close()
