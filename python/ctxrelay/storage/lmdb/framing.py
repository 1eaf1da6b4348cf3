"""Record checksums: the one place every LMDB store seals and verifies its records.

Each value a store puts is stored as ``value + xxh3_64(key + value)`` (8 bytes,
big-endian).  The checksum covers the key too, so a flipped key byte (a turn
that would show up under another id) fails like a flipped value byte.  It is a
suffix, so dupsort databases keep their order and dupfixed ones a fixed size.
xxh3-64 was measured against zlib.crc32 and CRC32C on our record sizes
(``bench/checksum_bench.py``, ``bench/results/checksum.json``).

:class:`LmdbStore <ctxrelay.storage.lmdb.base.LmdbStore>` hands every
transaction function a :class:`FramedTxn` (when the store's format says its
records are framed), so store code reads and writes plain values and never
sees a checksum; a mismatch raises :class:`CorruptStoreError` naming the
database and key.  The ``format`` record of ``meta`` stays unframed: it says
whether the rest is.

Versioning: a store created by this version has the format ``FORMAT +
FRAMED_SUFFIX``; a store written before has ``FORMAT`` and opens as before,
unframed (its reads are not verified) until :meth:`LmdbStore.add_checksums`
(``ctxrelay check --repair`` on a store that checks clean) seals every record.
An older ctxrelay refuses a framed store by its format instead of misreading it.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import xxhash

from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.lmdb import checkblock
from ctxrelay.storage.lmdb.bounds import dup_block as _dup_block

__all__ = ["file_digest", "CHECKSUM_BYTES", "FRAMED_SUFFIX", "seal", "intact", "FramedTxn",
           "FramedCursor", "Namer"]

CHECKSUM_BYTES = 8
FRAMED_SUFFIX = b"+xxh3"
FORMAT_KEY = b"format"

_digest = xxhash.xxh3_64_digest


def seal(key: bytes, value: bytes) -> bytes:
    """``value`` with its checksum appended (what is stored)."""
    return bytes(value) + _digest(bytes(key) + bytes(value))


def intact(key: bytes, stored: bytes) -> bool:
    return len(stored) >= CHECKSUM_BYTES and \
        _digest(key + stored[:-CHECKSUM_BYTES]) == stored[-CHECKSUM_BYTES:]


def file_digest(path: str) -> bytes:
    """The xxh3-64 of a whole file (the checksum a sidecar ``.xxh3`` file holds)."""
    digest = xxhash.xxh3_64()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


class Namer:
    """Names a database handle for messages (``turns``, ``ix.post``...)."""

    def __init__(self, where: str, names: dict[int, bytes]) -> None:
        self.where = where
        self.names = names

    def name(self, db: Any) -> str:
        return self.names.get(id(db), b"?").decode("utf-8", "replace")

    def corrupt(self, db: Any, key: bytes) -> CorruptStoreError:
        name = self.name(db)
        return CorruptStoreError(
            f"record {name}/{bytes(key).hex()} of {self.where} fails its checksum (damaged "
            "on disk); run 'ctxrelay check' to list every damaged record and 'ctxrelay "
            "check --repair' to quarantine them and rebuild what is derived")


class FramedTxn:
    """An LMDB transaction whose values are sealed on put and verified on get."""

    __slots__ = ("raw", "_namer", "_meta")

    def __init__(self, txn: Any, namer: Namer, meta: Any) -> None:
        self.raw = txn
        self._namer = namer
        self._meta = meta

    def _open(self, key: bytes, stored: bytes, db: Any) -> bytes:
        body = stored[:-CHECKSUM_BYTES]
        if _digest(key + body) == stored[-CHECKSUM_BYTES:] and len(stored) >= CHECKSUM_BYTES:
            return body
        if db is self._meta and key == FORMAT_KEY:
            return stored
        raise self._namer.corrupt(db, key)

    def get(self, key: bytes, default: Any = None, db: Any = None) -> Any:
        # The hot path, inlined: one slice, one digest, one compare.
        stored = self.raw.get(key, db=db)
        if stored is None:
            self.check_miss(key, db)
            return default
        body = stored[:-CHECKSUM_BYTES]
        if _digest(key + body) == stored[-CHECKSUM_BYTES:] and len(stored) >= CHECKSUM_BYTES:
            return body
        return self._open(key, stored, db)

    def check_miss(self, key: bytes, db: Any) -> None:
        """A point read found nothing: make sure no damaged key hides the record.

        LMDB finds a key by binary search in key order, so a record whose key
        bytes were damaged sits where the search for its old key ends (at the
        cursor ``set_range`` leaves or just before it).  Both neighbours are
        verified; a damaged one raises CorruptStoreError, since it may be the
        record asked for (an idempotency key that would otherwise read as new).
        """
        cursor = self.raw.cursor(db=db)
        try:
            if cursor.set_range(key):
                self._neighbour(cursor, key, db, after=True)
                found = cursor.prev()
            else:
                found = cursor.last()
            if found:
                self._neighbour(cursor, key, db, after=False)
        finally:
            cursor.close()

    def _neighbour(self, cursor: Any, key: bytes, db: Any, *, after: bool) -> None:
        near = cursor.key()
        # The search must end between a smaller key and one at least as large; a
        # damaged branch page (whose keys route the search) sends it elsewhere,
        # where every record is intact but the answer would be "not found".
        if (near < key) != (not after):
            raise CorruptStoreError(
                f"{self._namer.where}: database {self._namer.name(db)} is out of key order "
                f"around {bytes(key).hex()} (a damaged page); run 'ctxrelay check' and "
                "'ctxrelay check --repair', or restore the store from a backup")
        if intact(near, cursor.value()) or (db is self._meta and near == FORMAT_KEY):
            return
        raise CorruptStoreError(
            f"{self._namer.corrupt(db, near)}; a lookup of {bytes(key).hex()} landed "
            "beside it, and the damaged record may be one looked for (its key bytes may be "
            "what was damaged)")

    def put(self, key: bytes, value: bytes, dupdata: bool = True, overwrite: bool = True,
            append: bool = False, db: Any = None) -> bool:
        return self.raw.put(key, seal(key, value), dupdata=dupdata, overwrite=overwrite,
                            append=append, db=db)

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool:
        # An empty value deletes the key (every duplicate); a value names one duplicate.
        return self.raw.delete(key, seal(key, value) if value else b"", db=db)

    def replace(self, key: bytes, value: bytes, db: Any = None) -> Any:
        old = self.raw.replace(key, seal(key, value), db=db)
        return None if old is None else self._open(key, old, db)

    def pop(self, key: bytes, db: Any = None) -> Any:
        old = self.raw.pop(key, db=db)
        return None if old is None else self._open(key, old, db)

    def cursor(self, db: Any = None) -> "FramedCursor":
        return FramedCursor(self.raw.cursor(db=db), self, db)

    def __getattr__(self, name: str) -> Any:      # stat, id, drop, ...: unchanged
        return getattr(self.raw, name)


class FramedCursor:
    """A cursor over a framed database: keys are checked with their values."""

    __slots__ = ("raw", "_txn", "_db", "_seen")

    def __init__(self, cursor: Any, txn: FramedTxn, db: Any) -> None:
        self.raw = cursor
        self._txn = txn
        self._db = db
        self._seen: tuple[bytes, bytes] | None = None

    def _checked(self) -> tuple[bytes, bytes]:
        key, stored = self.raw.key(), self.raw.value()
        if self._seen is not None and self._seen[0] == key and self._seen[1] == stored:
            return key, stored[:-CHECKSUM_BYTES]
        value = self._txn._open(key, stored, self._db)
        self._seen = (key, stored)
        return key, value

    def key(self) -> bytes:
        # A key alone is checked too: a flipped key byte would name another record.
        if not self.raw.key():
            return self.raw.key()
        return self._checked()[0]

    def value(self) -> bytes:
        if not self.raw.key():
            return self.raw.value()
        return self._checked()[1]

    def item(self) -> tuple[bytes, bytes]:
        if not self.raw.key():
            return self.raw.item()
        return self._checked()

    def get(self, key: bytes, default: Any = None) -> Any:
        return self.value() if self.set_key(key) else default

    def set_key(self, key: bytes) -> bool:
        if self.raw.set_key(key):
            return True
        self._txn.check_miss(key, self._db)
        return False

    def set_range(self, key: bytes) -> bool:
        # A range scan starts here; a record whose key bytes were damaged may now
        # sort just before (or at) this spot, outside the range: check both.
        found = self.raw.set_range(key)
        self._txn.check_miss(key, self._db)
        return found

    def set_key_dup(self, key: bytes, value: bytes) -> bool:
        return self.raw.set_key_dup(key, seal(key, value))

    def set_range_dup(self, key: bytes, value: bytes) -> bool:
        return self.raw.set_range_dup(key, seal(key, value))

    def put(self, key: bytes, value: bytes, dupdata: bool = True, overwrite: bool = True,
            append: bool = False) -> bool:
        return self.raw.put(key, seal(key, value), dupdata=dupdata, overwrite=overwrite,
                            append=append)

    def dup_block(self, size: int, *, newest: int | None = None) -> bytes:
        """The values (``size`` bytes each, a dupfixed database) of the key the cursor
        is on, each verified against its checksum, joined in their order; with
        ``newest`` only the last ``newest``.  One read and one vectorised check for a
        whole list (a term's postings) instead of a generator step, a bounds check
        and a checksum call per duplicate through two wrappers; a record that fails
        raises the error :meth:`FramedTxn.get` would."""
        key = self.raw.key()
        if not key:
            return b""
        key = bytes(key)
        stored_size = size + CHECKSUM_BYTES
        block = _dup_block(self.raw, stored_size, newest=newest)
        count = len(block) // stored_size
        if not count:
            return b""
        import numpy as np
        rows = np.frombuffer(block, dtype=np.uint8).reshape(count, stored_size)
        if checkblock.MIN_INPUT <= len(key) + size <= checkblock.MAX_INPUT \
                and checkblock.available():
            suspect = np.flatnonzero(~checkblock.intact_rows(key, block, stored_size)).tolist()
        else:
            suspect = range(count)          # each verified by _open below
        for at in suspect:                  # a mismatch raises the usual error
            self._txn._open(key, block[at * stored_size:(at + 1) * stored_size], self._db)
        return rows[:, :size].tobytes()

    def _each(self, iterator: Iterator[tuple[bytes, bytes]], keys: bool,
              values: bool) -> Iterator[Any]:
        for key, stored in iterator:
            value = self._txn._open(key, stored, self._db)
            yield (key, value) if keys and values else key if keys else value

    def iternext(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iternext(keys=True, values=True), keys, values)

    def iternext_dup(self, keys: bool = False, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iternext_dup(keys=True, values=True), keys, values)

    def iternext_nodup(self, keys: bool = True, values: bool = False) -> Iterator[Any]:
        return self._each(self.raw.iternext_nodup(keys=True, values=True), keys, values)

    def iterprev(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iterprev(keys=True, values=True), keys, values)

    def iterprev_dup(self, keys: bool = False, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iterprev_dup(keys=True, values=True), keys, values)

    def iterprev_nodup(self, keys: bool = True, values: bool = False) -> Iterator[Any]:
        return self._each(self.raw.iterprev_nodup(keys=True, values=True), keys, values)

    __iter__ = iternext

    def __enter__(self) -> "FramedCursor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.raw.close()

    def __getattr__(self, name: str) -> Any:   # set_range, next, prev, first, last, count...
        return getattr(self.raw, name)
