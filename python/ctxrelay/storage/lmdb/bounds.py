"""Every record read from an LMDB map is checked to lie inside the data file before it is touched.

A flipped byte in a leaf node can give a record a size of gigabytes (LMDB
refuses an in-page value that does not fit its page, but not the size of a
value held on overflow pages).  py-lmdb touches one byte of every page of a
value it returns -- even with ``buffers=True``, where the value is a
memoryview into the map -- so such a size made it read past the end of the
data file and the process died of SIGBUS before any checksum was verified
(``bench/integrity_bench.py`` found 3 such deaths in 8,000 trials).

So :class:`LmdbStore <ctxrelay.storage.lmdb.base.LmdbStore>` opens every
transaction with ``buffers=True`` and hands store code a :class:`BoundedTxn`.
A value is fetched only from a positioned cursor (moving a cursor, and its
key as a memoryview, touch no value byte): the record's 8-byte node header,
just before the key (which LMDB itself read to find the key), gives the
value's size and place (in the page, or on overflow pages by page number),
and a record whose key or value reaches outside the data file raises
:class:`CorruptStoreError` naming the database and key.  Only then is the
value fetched and copied; its checksum (:mod:`ctxrelay.storage.lmdb.framing`)
is verified on the copy.

Where the map is: ``env.info()['map_addr']`` is LMDB's fixed-map address (0
unless MDB_FIXEDMAP), not the mapping, so :class:`MapBounds` reads it from
``/proc/self/maps`` (by the data file's inode), once per open and again after
the map is resized (LMDB remaps only in ``set_mapsize``).  A record found
outside the known range re-reads the mapping and the file size before it is
called damaged: another process may have grown the file since.  Where
``/proc/self/maps`` does not exist the check is skipped (as before).

Not covered: a write transaction's own dirty pages live in heap memory, not
in the map (a record there was written or touched in this transaction and is
read unchecked); duplicates of a dupsort key are checked as the one node that
holds them (their own, at most 511-byte, sizes are LMDB's to check), once for
all of them when they are read as one block (:meth:`BoundedCursor.dup_block`, a
term's postings); damage
that LMDB itself reads before returning (a node offset pointing past the file)
is not reachable from Python.  Little-endian hosts only (the node header is
read as one u64), as LMDB's own files are not portable across byte orders.
"""
from __future__ import annotations

import ctypes
import itertools
import os
from collections.abc import Iterator
from typing import Any

from ctxrelay.errors import CorruptStoreError

__all__ = ["address_of", "MapBounds", "BoundedTxn", "BoundedCursor", "dup_block"]


# -- the address of a memoryview's bytes ---------------------------------------------------

class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]


def _address_by_api(view: memoryview) -> int:
    """The public C API's answer (PyObject_GetBuffer): ~2 us a call."""
    buf = _PyBuffer()
    _get_buffer(view, ctypes.byref(buf), 0)
    try:
        return buf.buf or 0
    finally:
        _release_buffer(ctypes.byref(buf))


def _calibrate() -> int | None:
    """Where CPython keeps a memoryview's buffer pointer inside the object (its
    ``view.buf``), found and confirmed on views of known buffers; None if not
    found (then every address goes through the C API)."""
    probes = [bytearray(b"\0" * n) for n in (16, 48, 4096)]
    found = None
    for offset in range(16, 160, ctypes.sizeof(ctypes.c_void_p)):
        ok = True
        for probe in probes:
            view = memoryview(probe)[1:]
            if ctypes.c_void_p.from_address(id(view) + offset).value != _address_by_api(view):
                ok = False
                break
        if ok:
            found = offset
            break
    return found


_BUF_OFFSET = _calibrate()
_from_address = ctypes.c_void_p.from_address


def address_of(view: memoryview) -> int:
    """The address of ``view``'s first byte (reading no byte of it): ~0.3 us."""
    if _BUF_OFFSET is None:
        return _address_by_api(view)
    return _from_address(id(view) + _BUF_OFFSET).value or 0


# -- where the data file is mapped -------------------------------------------------------------

#: LMDB's leaf node header, read as one little-endian u64 just before the key:
#: u16 lo, u16 hi (the data size), u16 flags, u16 key size
_NODE_HEADER = 8
_BIGDATA_BIT = 0x01 << 32   # F_BIGDATA in the flags: the data is on overflow pages (an
                             # 8-byte page number where in-page data would start)
_PAGE_HEADER = 16            # an overflow page's header before the value
_u64_at = ctypes.c_uint64.from_address


class MapBounds:
    """Where this process mapped one environment's data file, and how long it is."""

    __slots__ = ("data_path", "psize", "mapping", "inside")

    def __init__(self, data_path: str, psize: int) -> None:
        self.data_path = data_path
        self.psize = psize
        self.mapping: tuple[int, int] = (0, 0)     # the whole map: [start, end)
        self.inside: tuple[int, int] = (0, 0)      # the part the file backs
        self.refresh()

    def refresh(self) -> None:
        """Read the mapping and the file size again (after a resize, or before
        calling a value outside them damaged)."""
        try:
            stat = os.stat(self.data_path)
        except OSError:
            self.mapping = self.inside = (0, 0)
            return
        start = end = 0
        real = os.path.realpath(self.data_path)
        try:
            with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and int(fields[4]) == stat.st_ino and \
                            fields[5].rstrip("\n") == real:
                        lo, hi = (int(x, 16) for x in fields[0].split("-"))
                        if start and lo != end:       # a second, separate mapping
                            break
                        start, end = start or lo, hi
        except OSError:
            start = end = 0
        self.mapping = (start, end)
        self.inside = (start, min(end, start + stat.st_size)) if start else (0, 0)

    def _outside(self, address: int, size: int) -> bool:
        lo, hi = self.inside
        if lo <= address and address + size <= hi:
            return False
        self.refresh()                   # another process may have grown the file
        lo, hi = self.inside
        return not (lo <= address and address + size <= hi)

    def check_node(self, key_view: memoryview, namer: Any, db: Any, *, write: bool) -> None:
        """Raise CorruptStoreError unless the record whose key is ``key_view`` (a
        positioned cursor's) has its key and its value inside the data file.

        Reads only the node's 8-byte header, which LMDB itself just read to find
        the key: the value's size and place come from there, before py-lmdb
        touches the value (it reads one byte of every page of a value it returns,
        so a damaged size kills the process even with buffers=True).
        """
        lo, hi = self.inside
        if not lo:
            return                       # no mapping known (not Linux): unchecked
        address = _from_address(id(key_view) + _BUF_OFFSET).value if _BUF_OFFSET \
            else _address_by_api(key_view)
        if not lo <= address < hi:
            start, end = self.mapping
            if write and not start <= address < end:
                return                   # this write transaction's own dirty page
            if self._outside(address, 1):
                self._raise(namer, db, key_view, "its key lies outside the file")
            lo, hi = self.inside
        header = _u64_at(address - _NODE_HEADER).value
        data_at = address + (header >> 48)          # the key's end: in-page data
        size = header & 0xFFFFFFFF
        if header & _BIGDATA_BIT:
            if data_at + 8 > hi and self._outside(address, data_at + 8 - address):
                self._raise(namer, db, key_view, "its key runs past the file")
            data_at = lo + _u64_at(data_at).value * self.psize + _PAGE_HEADER
        if data_at + size > hi and self._outside(data_at, size):
            lo, hi = self.inside
            self._raise(namer, db, key_view,
                        f"its value ({size} bytes at file offset {data_at - lo}) lies "
                        f"outside the file ({hi - lo} bytes)")

    def check_view(self, view: memoryview, namer: Any, db: Any, *, write: bool) -> None:
        """Raise CorruptStoreError unless ``view`` (a key) lies inside the data file."""
        size = len(view)
        lo, hi = self.inside
        if not size or not lo:
            return
        address = address_of(view)
        if lo <= address and address + size <= hi:
            return
        start, end = self.mapping
        if write and not start <= address < end:
            return
        if self._outside(address, size):
            self._raise(namer, db, b"", f"its key ({size} bytes) lies outside the file")

    def _raise(self, namer: Any, db: Any, key: Any, problem: str) -> None:
        try:
            shown = bytes(key[:64]).hex() if self._key_readable(key) else "?"
        except (TypeError, ValueError):
            shown = "?"
        raise CorruptStoreError(
            f"record {namer.name(db)}/{shown or '?'} of {namer.where} is damaged on disk: "
            f"{problem} (a damaged record header); run 'ctxrelay check' to list every "
            "damaged record and 'ctxrelay check --repair' to quarantine them")

    def _key_readable(self, key: Any) -> bool:
        if isinstance(key, bytes) or not len(key):
            return True
        address = address_of(key)
        lo, hi = self.inside
        return lo <= address and address + min(len(key), 64) <= hi


# -- transactions and cursors that copy only checked values -------------------------------------

class BoundedTxn:
    """A ``buffers=True`` LMDB transaction whose values come back as checked bytes.

    A point read goes through a cursor (one kept per database): the record's
    header is checked where the cursor found it, before its value is fetched.
    """

    __slots__ = ("raw", "_bounds", "_namer", "_write", "_cursors")

    def __init__(self, txn: Any, bounds: MapBounds, namer: Any, *, write: bool) -> None:
        self.raw = txn
        self._bounds = bounds
        self._namer = namer
        self._write = write
        self._cursors: dict[int, Any] = {}

    def get(self, key: bytes, default: Any = None, db: Any = None) -> Any:
        cursor = self._cursors.get(id(db))
        if cursor is None:
            cursor = self._cursors[id(db)] = self.raw.cursor(db=db)
        if not cursor.set_key(key):
            return default
        self._bounds.check_node(cursor.key(), self._namer, db, write=self._write)
        return bytes(cursor.value())

    def pop(self, key: bytes, db: Any = None) -> Any:
        old = self.get(key, db=db)
        if old is not None:
            self.raw.delete(key, db=db)
        return old

    def replace(self, key: bytes, value: bytes, db: Any = None) -> Any:
        old = self.get(key, db=db)
        self.raw.put(key, value, db=db)
        return old

    def cursor(self, db: Any = None) -> "BoundedCursor":
        return BoundedCursor(self.raw.cursor(db=db), self, db)

    # The hot writes, passed on directly (a __getattr__ fallback costs a failed
    # attribute lookup on every call).
    def put(self, key: bytes, value: bytes, dupdata: bool = True, overwrite: bool = True,
            append: bool = False, db: Any = None) -> bool:
        return self.raw.put(key, value, dupdata=dupdata, overwrite=overwrite, append=append,
                            db=db)

    def delete(self, key: bytes, value: bytes = b"", db: Any = None) -> bool:
        return self.raw.delete(key, value, db=db)

    def __getattr__(self, name: str) -> Any:       # stat, id, drop...
        return getattr(self.raw, name)


class BoundedCursor:
    """A cursor whose keys and values come back as checked bytes: a record's header
    is checked before its value is fetched."""

    __slots__ = ("raw", "_bounds", "_namer", "_write", "_db")

    def __init__(self, cursor: Any, txn: BoundedTxn, db: Any) -> None:
        self.raw = cursor
        self._bounds = txn._bounds
        self._namer = txn._namer
        self._write = txn._write
        self._db = db

    def key(self) -> bytes:
        view = self.raw.key()
        self._bounds.check_view(view, self._namer, self._db, write=self._write)
        return bytes(view)

    def _value(self, key_view: Any) -> bytes:
        if len(key_view):
            self._bounds.check_node(key_view, self._namer, self._db, write=self._write)
        return bytes(self.raw.value())

    def value(self) -> bytes:
        return self._value(self.raw.key())

    def item(self) -> tuple[bytes, bytes]:
        view = self.raw.key()
        value = self._value(view)
        return bytes(view), value

    def get(self, key: bytes, default: Any = None) -> Any:
        return self._value(self.raw.key()) if self.raw.set_key(key) else default

    def pop(self, key: bytes) -> Any:
        if not self.raw.set_key(key):
            return None
        old = self._value(self.raw.key())
        self.raw.delete()
        return old

    def replace(self, key: bytes, value: bytes) -> Any:
        old = self.get(key)
        self.raw.put(key, value)
        return old

    def _each(self, iterator: Iterator[Any], keys: bool, values: bool) -> Iterator[Any]:
        # The raw iterator runs keys-only (py-lmdb then touches no value); each
        # value is fetched after its record's header is checked.
        check, namer, db, write = self._bounds.check_node, self._namer, self._db, self._write
        raw = self.raw
        for key_view in iterator:
            if not values:
                self._bounds.check_view(key_view, namer, db, write=write)
                yield bytes(key_view)
                continue
            check(key_view, namer, db, write=write)
            value = bytes(raw.value())
            yield (bytes(key_view), value) if keys else value

    def dup_block(self, size: int, *, newest: int | None = None) -> bytes:
        """The duplicates (``size`` bytes each, a dupfixed database) of the key the
        cursor is on, joined in their order; with ``newest`` only the last ``newest``.

        Every duplicate is reached through the one node that holds them (its key is
        the key each step returns), so the node is checked once, not once per
        duplicate as :meth:`iternext_dup` would repeat the same check: a frequent
        term's postings are a thousand duplicates of one key.
        """
        view = self.raw.key()
        if not len(view):
            return b""
        self._bounds.check_node(view, self._namer, self._db, write=self._write)
        return _dup_block(self.raw, bytes(view), size, newest)

    def iternext(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iternext(keys=True, values=False), keys, values)

    def iternext_dup(self, keys: bool = False, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iternext_dup(keys=True, values=False), keys, values)

    def iternext_nodup(self, keys: bool = True, values: bool = False) -> Iterator[Any]:
        return self._each(self.raw.iternext_nodup(keys=True, values=False), keys, values)

    def iterprev(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iterprev(keys=True, values=False), keys, values)

    def iterprev_dup(self, keys: bool = False, values: bool = True) -> Iterator[Any]:
        return self._each(self.raw.iterprev_dup(keys=True, values=False), keys, values)

    def iterprev_nodup(self, keys: bool = True, values: bool = False) -> Iterator[Any]:
        return self._each(self.raw.iterprev_nodup(keys=True, values=False), keys, values)

    __iter__ = iternext

    def __enter__(self) -> "BoundedCursor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.raw.close()

    # The hot moves, passed on directly (see BoundedTxn.put).
    def first(self) -> bool:
        return self.raw.first()

    def last(self) -> bool:
        return self.raw.last()

    def next(self) -> bool:
        return self.raw.next()

    def prev(self) -> bool:
        return self.raw.prev()

    def next_nodup(self) -> bool:
        return self.raw.next_nodup()

    def set_key(self, key: bytes) -> bool:
        return self.raw.set_key(key)

    def set_range(self, key: bytes) -> bool:
        return self.raw.set_range(key)

    def close(self) -> None:
        self.raw.close()

    def __getattr__(self, name: str) -> Any:   # delete, put, count, set_key_dup...
        return getattr(self.raw, name)


def dup_block(cursor: Any, size: int, *, newest: int | None = None) -> bytes:
    """``cursor.dup_block(size, newest=)`` for a checked cursor (bounded or framed), or
    the same read step by step from a plain py-lmdb cursor (a caller's own transaction)."""
    checked = getattr(type(cursor), "dup_block", None)   # the class's: no __getattr__ relay
    if checked is not None:
        return checked(cursor, size, newest=newest)
    if newest is None:
        return b"".join([bytes(v) for v in cursor.iternext_dup(keys=False, values=True)])
    cursor.last_dup()
    return b"".join([bytes(v) for v in itertools.islice(
        cursor.iterprev_dup(keys=False, values=True), newest)][::-1])


#: A bounded read takes every duplicate in one call (LMDB's GET_MULTIPLE, in C) while
#: they are at most this many times the ``newest`` asked for; past that it steps back
#: through the newest only (a term in every turn of a long session).
_BULK_OVERREAD = 8


def _dup_block(raw: Any, key: bytes, size: int, newest: int | None) -> bytes:
    """The duplicates of ``key``, on which ``raw`` stands (see BoundedCursor.dup_block)."""
    count = raw.count()
    if newest is None or count <= newest * _BULK_OVERREAD:
        import numpy as np
        # keyfixed: one packed buffer of (key, value) rows, copied out of the map by LMDB
        packed = raw.getmulti([key], dupdata=True, dupfixed_bytes=size, keyfixed=True)
        stride = len(key) + size
        if len(packed) == count * stride:
            take = count if newest is None else min(newest, count)
            rows = np.frombuffer(packed, dtype=np.uint8).reshape(count, stride)
            return rows[count - take:, len(key):].tobytes()
        raw.set_key(key)          # not the rows counted: step through them as below
        if newest is None:
            return b"".join([bytes(v) for v in raw.iternext_dup(keys=False, values=True)])
    raw.last_dup()
    # A buffers=True view lives only as long as its step: each is copied as read.
    return b"".join([bytes(v) for v in itertools.islice(
        raw.iterprev_dup(keys=False, values=True), newest)][::-1])
