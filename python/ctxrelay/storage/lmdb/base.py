"""The one home of the LMDB plumbing: every embedded store builds on :class:`LmdbStore`.

What a subclass gets:

- **One environment per path per process** (LMDB's rule): the registry keyed
  by class and real path; :meth:`LmdbStore.open` returns the shared
  instance, a second direct construction raises :class:`StoreError`.
- **Checked opening**: a file where a directory belongs, an unwritable
  directory, a foreign or damaged environment, a data file shorter than its
  own pages (which would kill the process with SIGBUS when mapped) and a
  format other than ``FORMAT`` all raise a specific error saying what to do;
  nothing is written to a store that is not ours.
- **A checked catalogue** (:mod:`ctxrelay.storage.lmdb.catalogue`): LMDB's
  record of each named database (root page, flags, counts) is verified on open.
- **Named databases with a format record**: ``DB_NAMES`` (``meta`` first)
  are created with ``b"format"`` -> ``FORMAT`` in one transaction when the
  environment is new (:meth:`LmdbStore._initialise` adds a subclass's own
  first records); ``DUPSORT`` names the dupsort ones.
- **Transactions**: :meth:`LmdbStore.read` (a consistent snapshot) and
  :meth:`LmdbStore.write` (all or nothing) adopt a map grown by another
  process, double a full map (up to ``MAX_MAP_SIZE``, then
  :class:`StoreFullError`) and retry the transaction, and map a full disk to
  :class:`StoreFullError`; a read-only store refuses writes.
- **Bounded reads** (:mod:`ctxrelay.storage.lmdb.bounds`): transactions are
  opened with ``buffers=True`` and every value and cursor key is checked to
  lie inside the data file before it is copied, so a damaged record size is
  CorruptStoreError instead of SIGBUS; store code always gets bytes.
- **Record checksums** (:mod:`ctxrelay.storage.lmdb.framing`): in a store
  whose format ends with ``+xxh3`` (every new one) each transaction function
  gets a :class:`FramedTxn`, which seals values on put and verifies them on
  get; :meth:`LmdbStore.damaged_records` lists every record that fails,
  :meth:`LmdbStore.quarantine` copies them out (and drops the derived ones),
  :meth:`LmdbStore.add_checksums` seals an older store's records.
- **The resize gate** (:class:`Gate`): LMDB's ``set_mapsize`` needs no live
  transaction in the process, so transactions share the gate and a resize
  takes it alone.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

import lmdb

from ctxrelay.errors import CorruptStoreError, InvalidArgumentError, StoreError, StoreFullError
from ctxrelay.storage.lmdb.bounds import BoundedTxn, MapBounds
from ctxrelay.storage.lmdb.catalogue import check_catalogue
from ctxrelay.storage.lmdb.framing import FRAMED_SUFFIX, FramedTxn, Namer, intact, seal

__all__ = ["LmdbStore", "DamagedRecord", "Gate", "close_all", "disk_nearly_full", "prefixed",
           "MAX_READERS", "LOW_DISK_BYTES"]

S = TypeVar("S", bound="LmdbStore")

MAX_READERS = 256            # reader slots shared by all processes and threads
LOW_DISK_BYTES = 64 << 20    # below this, a failed commit is a full disk

#: what LMDB raises for a page that a damaged file holds (wrong type, bad pointer);
#: BadTxnError is the next call in a transaction such a page already broke, and
#: BadDbiError a damaged record of a named database (our stores never drop one)
DAMAGED_PAGES = (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.InvalidError,
                 lmdb.PanicError, lmdb.BadTxnError, lmdb.BadDbiError)

_registry: dict[tuple[str, str], "LmdbStore"] = {}
_registry_lock = threading.RLock()


class Gate:
    """Many transactions at once, or one map resize alone.

    LMDB's set_mapsize needs no live transaction in this process; threads hold
    the shared side around every transaction, a resize takes the exclusive
    side.  A waiting resize blocks new transactions so it cannot starve.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._waiting = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                if not self._active:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._active:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


@dataclass(frozen=True)
class DamagedRecord:
    """A record whose checksum fails: where it is and its bytes as stored."""

    store: str
    db: str
    key: bytes
    value: bytes

    def describe(self) -> str:
        if not self.key:
            return f"{self.store} database {self.db} is {self.value.decode(errors='replace')}"
        return f"{self.store} record {self.db}/{self.key.hex()} fails its checksum"


def zlib_crc(data: bytes) -> int:
    import zlib
    return zlib.crc32(data)


class LmdbStore:
    """Base of a store that keeps its named databases in one LMDB environment.

    Subclasses set ``KIND`` (a short name for messages), ``FORMAT`` (bytes
    written once into ``meta``), ``DB_NAMES`` (``meta`` first), ``DUPSORT``,
    ``ENV_DIRNAME`` (the environment's subdirectory of ``path``; None: ``path``
    itself), ``EXTRA_DBS`` (named databases opened by :meth:`_open_extra`, such
    as a text index), ``OPEN_HINT`` (how to share an instance) and ``FULL_HINT``
    (what to do when the map cannot grow).  The databases are ``self.dbs``.
    """

    KIND: ClassVar[str] = "store"
    FORMAT: ClassVar[bytes] = b""
    DB_NAMES: ClassVar[tuple[bytes, ...]] = (b"meta",)
    DUPSORT: ClassVar[frozenset[bytes]] = frozenset()
    DERIVED_DBS: ClassVar[frozenset[bytes]] = frozenset()   # rebuilt by the store's repair
    ENV_DIRNAME: ClassVar[str | None] = None
    EXTRA_DBS: ClassVar[int] = 0
    OPEN_HINT: ClassVar[str] = ""
    FULL_HINT: ClassVar[str] = "nothing was written"
    FORMAT_HINT: ClassVar[str] = ""
    DEFAULT_MAP_SIZE: ClassVar[int] = 1 << 28
    MAX_MAP_SIZE: ClassVar[int] = 1 << 40    # stop doubling the map here, report full

    def __init__(self, path: str | os.PathLike[str], *, map_size: int | None = None,
                 readonly: bool = False) -> None:
        map_size = self.DEFAULT_MAP_SIZE if map_size is None else map_size
        if isinstance(map_size, bool) or not isinstance(map_size, int) or map_size < 1:
            raise InvalidArgumentError(
                f"map_size must be an int >= 1, not {map_size!r}; pass the initial map "
                "size in bytes (it grows on demand)")
        self._path = os.fspath(path)
        self._readonly = bool(readonly)
        self._env_path = (self._path if self.ENV_DIRNAME is None
                          else os.path.join(self._path, self.ENV_DIRNAME))
        self._gate = Gate()
        self._key = (type(self).__qualname__, os.path.realpath(self._path))
        with _registry_lock:
            if self._key in _registry:
                raise StoreError(
                    f"{self.KIND} {self._key[1]} is already open in this process (LMDB "
                    f"allows one environment per path per process); use "
                    f"{self.OPEN_HINT or type(self).__name__ + '.open(path)'} to share it")
            self._env = self._open_env(map_size)
            self.framed = False
            try:
                self.dbs = self._open_dbs()
                check_catalogue(self._env, os.path.join(self._env_path, "data.mdb"),
                                {n: (0x04 if n in self.DUPSORT else 0) for n in self.DB_NAMES},
                                self._extra_db_names(), f"the {self.KIND} at {self._env_path}")
            except (*DAMAGED_PAGES, lmdb.IncompatibleError) as exc:  # a damaged catalogue
                self._env.close()
                raise self._damaged(exc) from None
            except BaseException:
                self._env.close()
                raise
            self._namer = Namer(f"the {self.KIND} at {self._env_path}",
                                {id(h): n for n, h in self.dbs.items()})
            self._extra_handles: dict[bytes, Any] = {}
            self._bounds = MapBounds(os.path.join(self._env_path, "data.mdb"),
                                     self._env.stat()["psize"])
            _registry[self._key] = self

    @classmethod
    def open(cls: type[S], path: str | os.PathLike[str], **kw: Any) -> S:
        """The one shared instance of ``path`` in this process (opened if needed).

        Keyword arguments apply when it is first opened; one that conflicts
        with the open instance's (see :meth:`_reopen_conflict`) raises
        InvalidArgumentError.
        """
        key = (cls.__qualname__, os.path.realpath(os.fspath(path)))
        with _registry_lock:
            found = _registry.get(key)
            if found is None or found.closed:
                return cls(path, **kw)
            conflict = found._reopen_conflict(kw)
            if conflict:
                raise InvalidArgumentError(
                    f"{cls.KIND} {key[1]} is already open in this process with a "
                    f"different {conflict}; close it first (store.close()) to reopen it")
            return found  # type: ignore[return-value]

    def _reopen_conflict(self, kw: dict[str, Any]) -> str | None:
        """The name of an option in ``kw`` the open instance was not opened with."""
        if "readonly" in kw and bool(kw["readonly"]) != self._readonly:
            return f"readonly (it is open with readonly={self._readonly})"
        return None

    # -- opening ----------------------------------------------------------------

    def _open_env(self, map_size: int) -> Any:
        """Open the environment, mapping every failure to a StoreError."""
        prepare_dirs(self._path, self._env_path, readonly=self._readonly, kind=self.KIND)
        try:
            env = lmdb.open(self._env_path, map_size=map_size, subdir=True,
                            readonly=self._readonly, create=not self._readonly, lock=True,
                            sync=True, metasync=True,
                            max_dbs=len(self.DB_NAMES) + self.EXTRA_DBS + 4,
                            max_readers=MAX_READERS)
        except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError,
                lmdb.PanicError) as exc:
            raise CorruptStoreError(
                f"{self._env_path} is not a readable LMDB environment ({exc}); restore it "
                f"from a backup or move it away and open a new {self.KIND}") from None
        except lmdb.Error as exc:
            raise StoreError(
                f"cannot open the {self.KIND} at {self._env_path} ({exc}); check that the "
                "directory is writable, not on a full or read-only disk, and not another "
                "store's LMDB directory") from None
        try:
            self._check_not_truncated(env)
            if not self._readonly:
                env.reader_check()   # free reader slots left by killed processes
        except BaseException:
            env.close()
            raise
        return env

    def _check_not_truncated(self, env: Any) -> None:
        """A data file shorter than its last page would crash us with SIGBUS."""
        needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        data = os.path.join(self._env_path, "data.mdb")
        actual = os.path.getsize(data)
        if actual < needed:
            raise CorruptStoreError(
                f"{data} is truncated ({actual} bytes, its pages need {needed}); "
                f"restore it from a backup or move it away and open a new {self.KIND}")

    def _open_dbs(self) -> dict[bytes, Any]:
        if self._readonly:
            # Not inside an explicit read transaction: py-lmdb resets (rather than
            # commits) a finished read transaction, which drops handles opened in it.
            dbs = self._named_dbs(txn=None, create=False)
            with self._env.begin() as txn:
                self._check_format(txn, dbs, create=False)
            return dbs
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    dbs = self._named_dbs(txn=txn, create=True)
                    self._check_format(txn, dbs, create=True)
                return dbs
            except lmdb.MapFullError:        # a tiny map_size: grow it and retry
                self._env.set_mapsize(self._env.info()["map_size"] * 2)

    def _named_dbs(self, *, txn: Any, create: bool) -> dict[bytes, Any]:
        try:
            dbs = {n: self._env.open_db(n, txn=txn, create=create, dupsort=n in self.DUPSORT)
                   for n in self.DB_NAMES}
            self._open_extra(txn, create)
        except lmdb.NotFoundError:
            raise CorruptStoreError(
                f"{self._env_path} is an LMDB environment without the ctxrelay {self.KIND} "
                "databases; open it writable once to create them, or point at the right "
                "directory") from None
        return dbs

    def _open_extra(self, txn: Any, create: bool) -> None:
        """Open a subclass's own handles (e.g. a text index) in the opening txn."""

    def _extra_db_names(self) -> tuple[bytes, ...]:
        """The names of the databases :meth:`_open_extra` opens."""
        return ()

    @property
    def framed_format(self) -> bytes:
        """The format of a store whose records carry checksums (every new one)."""
        return self.FORMAT + FRAMED_SUFFIX

    def _check_format(self, txn: Any, dbs: dict[bytes, Any], create: bool) -> None:
        found = txn.get(b"format", db=dbs[b"meta"])
        if found is None and create and self._is_new(txn):
            txn.put(b"format", self.framed_format, db=dbs[b"meta"])
            self.framed = True
            self._namer = Namer(f"the {self.KIND} at {self._env_path}",
                                {id(h): n for n, h in dbs.items()})
            self._initialise(FramedTxn(txn, self._namer, dbs[b"meta"]), dbs)
            return
        if found not in (self.FORMAT, self.framed_format):
            shown = "no format record" if found is None else f"format {found!r}"
            raise CorruptStoreError(
                f"{self._env_path} holds {shown}, but this ctxrelay reads "
                f"{self.FORMAT.decode()} ({self.KIND}); "
                + (self.FORMAT_HINT or f"point the {self.KIND} at its own directory, or "
                   "open it with the ctxrelay version that wrote it"))
        # A store written before checksums keeps working as it was (unverified).
        self.framed = found == self.framed_format

    def _is_new(self, txn: Any) -> bool:
        """True when nothing but our (just created, empty) databases exist."""
        ours = set(self.DB_NAMES) | set(self._extra_db_names())
        names = [key for key, _ in txn.cursor()]
        if any(name not in ours for name in names):
            return False
        return all(txn.stat(self._env.open_db(name, txn=txn, create=False))["entries"] == 0
                   for name in names)

    def _initialise(self, txn: Any, dbs: dict[bytes, Any]) -> None:
        """Write a new store's first records (beside the format record)."""

    # -- lifecycle ----------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def env_path(self) -> str:
        """The directory holding the environment's ``data.mdb`` and ``lock.mdb``."""
        return self._env_path

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def closed(self) -> bool:
        return self._env is None

    def write_generation(self) -> int | None:
        """A number that moves with every committed write, by any process (LMDB's
        last transaction id); None once closed.  Equal numbers mean nothing was
        written in between, so a reader may keep what it derived from the store."""
        env = self._env
        return None if env is None else int(env.info()["last_txnid"])

    def close(self) -> None:
        with _registry_lock:
            if self._env is None:
                return
            with self._gate.exclusive():
                self._env.close()
                self._env = None
                self._on_close()
            if _registry.get(self._key) is self:
                del _registry[self._key]

    def _on_close(self) -> None:
        """Drop what a subclass keeps in memory about the closed environment."""

    def __enter__(self: S) -> S:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("readonly" if self._readonly else "open")
        return f"{type(self).__name__}({self._path!r}, {state})"

    def _live_env(self) -> Any:
        env = self._env
        if env is None:
            raise StoreError(
                f"{self.KIND} {self._path} is closed; reopen it with "
                f"{self.OPEN_HINT or type(self).__name__ + '.open(path)'}")
        return env

    # -- transactions ---------------------------------------------------------------

    def read(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in a read transaction (a consistent snapshot)."""
        while True:
            env = self._live_env()
            try:
                with self._gate.shared(), env.begin(buffers=True) as txn:
                    return fn(self._framed_txn(txn, write=False))
            except lmdb.MapResizedError:
                self._resize(0)
            except DAMAGED_PAGES as exc:
                raise self._damaged(exc) from None

    def _damaged(self, exc: BaseException) -> CorruptStoreError:
        return CorruptStoreError(
            f"the {self.KIND} at {self._env_path} has a damaged page ({exc}); run 'ctxrelay "
            "check' to see what is readable, export the intact sessions or restore a backup")

    def _framed_txn(self, txn: Any, *, write: bool) -> Any:
        """What a transaction function gets: values checked against the data file's
        bounds, then (in a framed store) sealed on put and verified on get."""
        bounded = BoundedTxn(txn, self._bounds, self._namer, write=write)
        return FramedTxn(bounded, self._namer, self.dbs[b"meta"]) if self.framed else bounded

    def name_handles(self, handles: dict[bytes, Any]) -> None:
        """Name databases opened outside ``DB_NAMES`` (a text index): in messages,
        in :meth:`damaged_records` and :meth:`add_checksums`."""
        self._namer.names.update({id(h): n for n, h in handles.items()})
        self._extra_handles.update(handles)

    # -- record checksums: scan, quarantine, seal -------------------------------------

    def _handles(self) -> dict[bytes, Any]:
        return {**self.dbs, **self._extra_handles}

    def damaged_records(self) -> list[DamagedRecord]:
        """Every record whose checksum fails (none for an unframed, older store).

        A database LMDB itself cannot walk (a damaged page) is one entry with
        an empty key and the error as its value.
        """
        if not self.framed:
            return []
        meta = self.dbs[b"meta"]

        def scan(txn: Any) -> list[DamagedRecord]:
            raw = getattr(txn, "raw", txn)
            found = []
            for name, handle in self._handles().items():
                try:
                    for key, stored in raw.cursor(db=handle).iternext():
                        if handle is meta and key == b"format":
                            continue
                        if not intact(key, stored):
                            found.append(DamagedRecord(self.KIND, name.decode(), bytes(key),
                                                       bytes(stored)))
                except (lmdb.Error, CorruptStoreError) as exc:
                    # A damaged page, or a record reaching outside the file (bounds.py):
                    # the database is listed as unreadable from there on.
                    found.append(DamagedRecord(self.KIND, name.decode(), b"",
                                               f"unreadable: {exc}".encode()))
            return found
        return self.read(scan)

    def quarantine(self, records: list[DamagedRecord], directory: str | os.PathLike[str],
                   label: str | None = None) -> list[str]:
        """Copy each damaged record's bytes to a file in ``directory`` (JSON: store,
        database, key and value in hex) and drop the ones ``DERIVED_DBS`` holds,
        which the store's repair rebuilds from intact primaries.  A damaged
        primary stays where it is (its reads keep raising CorruptStoreError): it
        is never rewritten from damaged bytes.  Returns the files written."""
        os.makedirs(directory, exist_ok=True)
        written = []
        for rec in records:
            name = (f"{(label or self.KIND).replace(' ', '-')}-{rec.db}-"
                    f"{rec.key.hex()[:64] or 'db'}-"
                    f"{zlib_crc(rec.value):08x}.json")
            target = os.path.join(os.fspath(directory), name)
            with open(target, "w", encoding="utf-8") as out:
                json.dump({"store": self.KIND, "path": self._env_path, "db": rec.db,
                           "key_hex": rec.key.hex(), "value_hex": rec.value.hex(),
                           "dropped": rec.db.encode() in self.DERIVED_DBS and bool(rec.key)},
                          out)
            written.append(target)
        handles = self._handles()

        def drop(txn: Any) -> None:
            # By cursor position, not by key: a record whose key bytes were damaged
            # sits out of key order, where a search (delete by key) cannot find it.
            raw = getattr(txn, "raw", txn)
            doomed: dict[bytes, set[tuple[bytes, bytes]]] = {}
            for rec in records:
                if rec.key and rec.db.encode() in self.DERIVED_DBS:
                    doomed.setdefault(rec.db.encode(), set()).add((rec.key, rec.value))
            for name, pairs in doomed.items():
                cursor = raw.cursor(db=handles[name])
                found = cursor.first()
                while found:
                    if (bytes(cursor.key()), bytes(cursor.value())) in pairs:
                        found = cursor.delete()
                    else:
                        found = cursor.next()
        self.write(drop)
        return written

    def add_checksums(self) -> int:
        """Seal every record of a store written before checksums, in one transaction,
        and mark its format framed; returns the records sealed (0 if it was)."""
        if self.framed:
            return 0
        meta = self.dbs[b"meta"]

        def seal_all(txn: Any) -> int:
            count = 0
            for handle in self._handles().values():
                items = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=handle).iternext()
                         if not (handle is meta and k == b"format")]
                # All duplicates of a key go first: a dupfixed database must never
                # hold values of two sizes under one key.
                for key in dict.fromkeys(k for k, _ in items):
                    txn.delete(key, db=handle)
                for key, value in items:
                    txn.put(key, seal(key, value), db=handle)
                count += len(items)
            txn.put(b"format", self.framed_format, db=meta)
            return count
        count = self.write(seal_all)
        self.framed = True
        return count

    def write(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in one write transaction (all or nothing), growing a full map.

        ``fn`` must do all its work through ``txn``: on a full map the
        transaction is aborted, the map doubled and ``fn`` run again.
        """
        if self._readonly:
            raise StoreError(
                f"{self.KIND} {self._path} was opened with readonly=True; open it with "
                "readonly=False to write")
        while True:
            env = self._live_env()
            size = env.info()["map_size"]
            try:
                with self._gate.shared(), env.begin(write=True, buffers=True) as txn:
                    return fn(self._framed_txn(txn, write=True))
            except lmdb.MapFullError:
                self._grow(size)
            except lmdb.MapResizedError:
                self._resize(0)
            except DAMAGED_PAGES as exc:
                raise self._damaged(exc) from None
            except lmdb.Error as exc:
                # LMDB reports ENOSPC as DiskError but a short write as a bare
                # EIO (plain lmdb.Error); on a nearly full disk that is ENOSPC.
                if isinstance(exc, lmdb.DiskError) or (
                        type(exc) is lmdb.Error and disk_nearly_full(self._env_path)):
                    raise StoreFullError(
                        f"the disk holding {self._path} is full ({exc}); nothing was "
                        "written; free disk space and retry") from None
                if type(exc) is lmdb.Error:
                    # A bare EIO with room on the disk: LMDB met a page it cannot
                    # write back (seen with a damaged data file), or the disk failed.
                    raise CorruptStoreError(
                        f"the {self.KIND} at {self._env_path} could not commit ({exc}); "
                        "nothing was written; run 'ctxrelay check' (a damaged data file) "
                        "and check the disk") from None
                raise

    def _grow(self, seen: int) -> None:
        new_size = seen * 2
        if new_size > self.MAX_MAP_SIZE:
            raise StoreFullError(
                f"{self.KIND} {self._path} would need a map over {self.MAX_MAP_SIZE} "
                f"bytes; nothing was written; {self.FULL_HINT}")
        self._resize(new_size, only_if=seen)

    def _resize(self, new_size: int, *, only_if: int | None = None) -> None:
        with self._gate.exclusive():
            env = self._live_env()
            # Another thread may have grown the map while we waited.
            if only_if is None or env.info()["map_size"] == only_if:
                env.set_mapsize(new_size)
                self._bounds.refresh()       # LMDB remaps here (the map may move)


def close_all(kind: type[LmdbStore] | None = None) -> None:
    """Close every store opened in this process (of class ``kind``, if given)."""
    with _registry_lock:
        stores = [s for s in _registry.values() if kind is None or isinstance(s, kind)]
    for store in stores:
        store.close()


def prepare_dirs(path: str, env_path: str, *, readonly: bool, kind: str = "store") -> None:
    """Check (and unless ``readonly`` create) ``path`` and the environment directory."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise StoreError(
            f"{kind} path {path} is a file, not a directory; pass a directory "
            "path (it is created if missing)")
    if os.path.exists(env_path) and not os.path.isdir(env_path):
        raise CorruptStoreError(
            f"{env_path} should be the LMDB directory but is a file; move it "
            f"away and open the {kind} again")
    if readonly:
        if not os.path.exists(os.path.join(env_path, "data.mdb")):
            raise StoreError(
                f"no store at {path} to open read-only; create it first by "
                "opening it with readonly=False")
        return
    try:
        os.makedirs(env_path, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the {kind} directory {env_path} ({exc.strerror}); "
            "pass a path whose parents are directories you can write") from None
    if not os.access(env_path, os.W_OK | os.X_OK):
        raise StoreError(
            f"{kind} directory {env_path} is not writable; fix its permissions "
            "or open it with readonly=True")


def disk_nearly_full(path: str) -> bool:
    try:
        info = os.statvfs(path)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < LOW_DISK_BYTES


def prefixed(txn: Any, db: Any, prefix: bytes, *, dups: bool = False
             ) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of ``db`` whose key starts with ``prefix``, in key order
    (every duplicate of a dupsort key with ``dups``)."""
    cursor = txn.cursor(db=db)
    found = cursor.set_range(prefix)
    while found and cursor.key().startswith(prefix):
        key = cursor.key()
        if dups:
            for value in cursor.iternext_dup(keys=False):
                yield key, value
            found = cursor.next_nodup()
        else:
            yield key, cursor.value()
            found = cursor.next()
