"""Rolling context log: a fixed-size ring of recent entries per session (SPEC-035 §2.2).

``RollingLog(path)`` keeps, for every session, the most recent entries (turns,
operations, ...) in a memory-mapped ring.  Appending is a copy into the ring
plus a head-pointer update; ``read_recent(session, n)`` is pointer arithmetic
from the head back ``n`` index slots and ``n`` slices of the mapped file: no
search, no embedding, and no entry older than the ``n`` asked for is touched.
When the ring is full (by entry count or by payload bytes) the oldest entries
roll off.  A session's file never grows: its size is fixed when it is created.

On-disk layout
--------------
``path`` is a directory with one file per session, named
``sha256(session id as UTF-8, surrogatepass).hexdigest() + ".ring"``, so an id
of any characters or length maps to a safe name (no ``/``, ``..`` or NUL can
reach the file system).  All integers are little-endian.  A file is::

    header        72 bytes + session id, padded to a multiple of 64 (H bytes)
      0   8  magic b"CTXRRING"
      8   4  format version (1)
      12  4  H, the header length
      16  8  capacity_entries N
      24  8  capacity_bytes B
      32 32  sha256 of the session id (must match the file name)
      64  4  length of the session id in bytes
      68  4  CRC-32 of bytes 0..67 and the session id
      72  .  the session id (UTF-8, surrogatepass), then zero padding
    head slots    2 x 64 bytes at H: generation u64, next_seq u64, count u64,
                  write_pos u64, CRC-32 of those 32 bytes; the valid slot with
                  the larger generation is the head
    index         N x 32 bytes: seq u64, offset u64, length u32, kind u8,
                  3 pad, CRC-32 (of seq, offset, length, kind and the payload),
                  4 pad; the entry with sequence number s lives in slot s mod N
    data          B bytes, used as a circular byte buffer

Sequence numbers start at 1 and never repeat or go back within a file.  The
live entries are ``next_seq - count .. next_seq - 1``; ``write_pos`` and the
index offsets are logical byte positions that only grow (the physical position
is ``offset mod B``), so entries are contiguous in logical space, an entry may
wrap around the end of the data area, and the bytes in use are
``write_pos - offset(oldest)``.  A payload is the entry's UTF-8 text (kind 0)
or, for a dict, compact JSON ``json.dumps(entry, ensure_ascii=False,
separators=(",", ":"))`` in UTF-8 (kind 1); ``capacity_bytes`` counts payload
bytes only.

Crash safety
------------
An append writes the payload and its index slot first and publishes the new head
last, into the head slot not holding the current head.  If the new entry needs
room (the ring is full by count or bytes), a head that drops the oldest entries
is published *before* their slots and bytes are overwritten.  So the head read
after a crash (process killed at any instruction) only names entries whose bytes
were complete before it was published, and a torn head write fails its CRC and
the previous head is used: a torn entry never shows up and sequence numbers stay
contiguous.  Every read checks the slot's sequence number and CRC.  Without
``sync=True`` this holds for process crashes (the page cache survives them); with
``sync=True`` the entry is msync'ed before the head is published and the head
after, which extends it to power loss at the cost of two msyncs per append.

Concurrency
-----------
Threads of one process share a ``RollingLog`` behind its lock.  Across processes
(and across ``RollingLog`` objects on the same directory) each ring file is locked
with ``fcntl.flock``: shared for reads, exclusive for appends and roll-offs.
``flock`` rather than POSIX ``lockf`` because POSIX record locks belong to the
process and are dropped when *any* descriptor of the file is closed, while a
``flock`` lock belongs to the open file description.  A killed process's lock is
released by the kernel.  ``flock`` is advisory and unreliable on some network
file systems (older NFS); keep the directory on a local disk.

Footprint
---------
A session's file is exactly ``H + 128 + 32 N + B`` bytes, reserved with
``posix_fallocate`` when the session is first appended to (so a full disk fails
the first append with :class:`~ctxrelay.errors.StoreFullError` instead of killing
the process with SIGBUS later), and at most ``max_open`` rings are mapped at once.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import itertools
import json
import mmap
import os
import secrets
import struct
import threading
import zlib
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxrelay.errors import (
    CorruptStoreError,
    InvalidArgumentError,
    InvalidContentError,
    InvalidSessionIdError,
    StoreError,
    StoreFullError,
)

__all__ = [
    "RollingLog", "MemoryRollingLog", "RollingLogBackend", "LogRecord", "RingStats",
    "LogStats", "EntryTooLargeError", "CorruptRingError", "RingConfigMismatchError",
    "RollingLogClosedError", "DEFAULT_CAPACITY_ENTRIES", "DEFAULT_CAPACITY_BYTES",
    "MAX_SESSION_ID_BYTES", "FORMAT_VERSION",
]

from ctxrelay.storage.interfaces.rolling import Entry, RollingLogBackend  # noqa: E402,F401

DEFAULT_CAPACITY_ENTRIES = 256
DEFAULT_CAPACITY_BYTES = 1 << 20
DEFAULT_MAX_OPEN = 128
MAX_SESSION_ID_BYTES = 4096
MAX_CAPACITY_BYTES = (1 << 32) - 1      # an index slot's length is a u32
FORMAT_VERSION = 1

_MAGIC = b"CTXRRING"
_SUFFIX = ".ring"
_FIXED = struct.Struct("<8sIIQQ32sI")    # 68 bytes, then the header CRC at 68
_ID_AT = 72
_SLOT_SIZE = 64                          # one head slot
_HEAD_BODY = struct.Struct("<QQQQ")      # generation, next_seq, count, write_pos
_HEAD = struct.Struct("<QQQQI")
_INDEX = struct.Struct("<QQIB3xI4x")     # seq, offset, length, kind, crc
_INDEX_META = struct.Struct("<QQIB")
_INDEX_SIZE = _INDEX.size                # 32
_KIND_STR = 0
_KIND_JSON = 1
_PAGE = mmap.PAGESIZE


# -- errors ------------------------------------------------------------------

class EntryTooLargeError(InvalidContentError):
    """An entry's payload is larger than the whole ring (``capacity_bytes``)."""

    kind = "entry_too_large"


class CorruptRingError(CorruptStoreError):
    """A ring file is not a valid rolling log (bad magic, version, CRC or size)."""

    kind = "corrupt_ring"


class RingConfigMismatchError(InvalidArgumentError):
    """A session's ring exists with other capacities than the RollingLog's."""

    kind = "ring_config_mismatch"


class RollingLogClosedError(StoreError):
    """The RollingLog was used after :meth:`RollingLog.close`."""

    kind = "rolling_log_closed"


# -- results -----------------------------------------------------------------

@dataclass(frozen=True)
class LogRecord:
    """One entry with the sequence number its append returned."""

    seq: int
    entry: Entry


@dataclass(frozen=True)
class RingStats:
    """One session's ring.  ``first_seq``/``last_seq`` are None when it is empty."""

    session_id: str
    entries: int
    bytes_used: int
    capacity_entries: int
    capacity_bytes: int
    first_seq: int | None
    last_seq: int | None
    next_seq: int
    file_bytes: int


@dataclass(frozen=True)
class LogStats:
    """Every session of a rolling log; ``file_bytes`` is the footprint on disk."""

    location: str
    sessions: int
    entries: int
    bytes_used: int
    file_bytes: int


# -- argument checks and encoding ---------------------------------------------

def _session_bytes(session_id: Any) -> bytes:
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"session id must be a str, not {type(session_id).__name__}; pass a string")
    if not session_id:
        raise InvalidSessionIdError("session id is empty; pass a non-empty string")
    raw = session_id.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_SESSION_ID_BYTES:
        raise InvalidSessionIdError(
            f"session id is {len(raw)} bytes in UTF-8, more than {MAX_SESSION_ID_BYTES}; "
            "use a shorter id (e.g. a UUID or a hash of the long one)")
    return raw


def _count(n: Any, what: str, *, minimum: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidArgumentError(f"{what} must be an int, not {type(n).__name__}")
    if n < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, got {n}")
    return n


def _encode(entry: Any) -> tuple[int, bytes]:
    if isinstance(entry, str):
        try:
            return _KIND_STR, entry.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidContentError(
                f"entry contains a lone surrogate U+{ord(entry[exc.start]):04X} at index "
                f"{exc.start}, which UTF-8 cannot hold; remove it or pass valid text") from None
    if isinstance(entry, dict):
        try:
            text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"),
                              allow_nan=False)
            return _KIND_JSON, text.encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InvalidContentError(
                f"dict entry is not JSON-serialisable ({exc}); use str keys and str, "
                "int, float (finite), bool, None, list and dict values") from None
        except UnicodeEncodeError as exc:
            raise InvalidContentError(
                f"dict entry contains a lone surrogate ({exc}); pass valid text") from None
    raise InvalidContentError(
        f"entry must be a str or a dict, not {type(entry).__name__}; "
        "serialise other values to a str or wrap them in a dict")


_JSON = json.JSONDecoder()


def _decode(kind: int, payload: bytes) -> Entry:
    text = payload.decode("utf-8")
    if kind == _KIND_STR:
        return text
    if kind != _KIND_JSON:
        raise ValueError(f"unknown entry kind {kind}")
    value, end = _JSON.raw_decode(text)     # json.loads without its per-call overhead
    if end != len(text) or not isinstance(value, dict):
        raise ValueError("not one JSON object")
    return value


def _too_large(size: int, capacity: int) -> EntryTooLargeError:
    return EntryTooLargeError(
        f"entry is {size} bytes encoded, larger than the ring's capacity_bytes={capacity}; "
        "store large data in the pointer store and log a reference to it, or open the "
        "log with a larger capacity_bytes")


def _file_name(raw_id: bytes) -> str:
    return hashlib.sha256(raw_id).hexdigest() + _SUFFIX


def _header_len(id_len: int) -> int:
    return (_ID_AT + id_len + 63) // 64 * 64


def _file_size(header_len: int, capacity_entries: int, capacity_bytes: int) -> int:
    return header_len + 2 * _SLOT_SIZE + capacity_entries * _INDEX_SIZE + capacity_bytes


def _build_header(raw_id: bytes, capacity_entries: int, capacity_bytes: int) -> bytes:
    hlen = _header_len(len(raw_id))
    fixed = _FIXED.pack(_MAGIC, FORMAT_VERSION, hlen, capacity_entries, capacity_bytes,
                        hashlib.sha256(raw_id).digest(), len(raw_id))
    crc = zlib.crc32(raw_id, zlib.crc32(fixed))
    header = fixed + crc.to_bytes(4, "little") + raw_id
    return header + bytes(hlen - len(header))


def _head_slot(gen: int, next_seq: int, count: int, write_pos: int) -> bytes:
    body = _HEAD_BODY.pack(gen, next_seq, count, write_pos)
    return body + zlib.crc32(body).to_bytes(4, "little")


# -- one session's ring ----------------------------------------------------------

class _Ring:
    """One mapped ring file.  Callers hold the RollingLog lock; this takes the flock."""

    __slots__ = ("path", "session_id", "raw_id", "fd", "mm", "cap_entries", "cap_bytes",
                 "head_at", "index_at", "data_at", "size", "writable")

    def __init__(self, path: Path, *, raw_id: bytes | None, writable: bool) -> None:
        self.path = path
        self.writable = writable
        flags = os.O_RDWR if writable else os.O_RDONLY
        self.fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
        self.mm: mmap.mmap | None = None
        try:
            self._validate(raw_id)
        except BaseException:
            self.close()
            raise

    def _corrupt(self, what: str) -> CorruptRingError:
        return CorruptRingError(
            f"rolling log file {self.path} is corrupt: {what}. The file was left "
            "untouched; move it aside to keep it for inspection (a new ring is created "
            "on the next append) or delete it to discard the session's recent context")

    def _validate(self, raw_id: bytes | None) -> None:
        size = os.fstat(self.fd).st_size
        if size < _ID_AT:
            raise self._corrupt(f"{size} bytes, shorter than the {_ID_AT}-byte header")
        head = os.pread(self.fd, _ID_AT, 0)
        magic, version, hlen, cap_n, cap_b, id_hash, id_len = _FIXED.unpack_from(head)
        if magic != _MAGIC:
            raise self._corrupt(f"bad magic {magic!r} (expected {_MAGIC!r}); it is not "
                                "a ctxrelay rolling log")
        if version != FORMAT_VERSION:
            raise self._corrupt(f"format version {version}, this ctxrelay reads "
                                f"version {FORMAT_VERSION}")
        if id_len > MAX_SESSION_ID_BYTES or hlen != _header_len(id_len) or hlen > size:
            raise self._corrupt(f"inconsistent header (length {hlen}, id length {id_len})")
        stored_id = os.pread(self.fd, id_len, _ID_AT)
        crc = int.from_bytes(head[68:72], "little")
        if zlib.crc32(stored_id, zlib.crc32(head[:68])) != crc:
            raise self._corrupt("header checksum mismatch")
        if hashlib.sha256(stored_id).digest() != id_hash:
            raise self._corrupt("session id does not match its hash")
        if raw_id is not None and stored_id != raw_id:
            raise self._corrupt("it belongs to another session id")
        if self.path.name != _file_name(stored_id):
            raise self._corrupt("its name is not the hash of its session id (renamed?)")
        if not (1 <= cap_n and 1 <= cap_b <= MAX_CAPACITY_BYTES):
            raise self._corrupt(f"capacities out of range ({cap_n} entries, {cap_b} bytes)")
        expected = _file_size(hlen, cap_n, cap_b)
        if size != expected:
            raise self._corrupt(f"{size} bytes, expected {expected} for its capacities "
                                "(truncated or extended)")
        self.raw_id = stored_id
        self.session_id = stored_id.decode("utf-8", "surrogatepass")
        self.cap_entries = cap_n
        self.cap_bytes = cap_b
        self.head_at = hlen
        self.index_at = hlen + 2 * _SLOT_SIZE
        self.data_at = self.index_at + cap_n * _INDEX_SIZE
        self.size = size
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
        self.mm = mmap.mmap(self.fd, size, mmap.MAP_SHARED, prot)
        with self._locked(fcntl.LOCK_SH):
            gen, next_seq, count, write_pos = self.head()
            if count > cap_n or count >= next_seq:
                raise self._corrupt(f"head holds {count} entries (capacity {cap_n}, "
                                    f"next seq {next_seq})")
            if count and write_pos - self._slot(next_seq - count)[1] > cap_b:
                raise self._corrupt("head spans more bytes than the ring holds")

    # locking -----------------------------------------------------------------

    def _locked(self, op: int) -> "_Flock":
        return _Flock(self.fd, op)

    # head and index --------------------------------------------------------------

    def head(self) -> tuple[int, int, int, int]:
        mm = self.mm
        best = None
        for at in (self.head_at, self.head_at + _SLOT_SIZE):
            gen, next_seq, count, write_pos, crc = _HEAD.unpack_from(mm, at)
            if gen and zlib.crc32(mm[at:at + 32]) == crc and (best is None or gen > best[0]):
                best = (gen, next_seq, count, write_pos)
        if best is None:
            raise self._corrupt("neither head slot is valid")
        return best

    def _publish(self, gen: int, next_seq: int, count: int, write_pos: int) -> None:
        at = self.head_at + (gen & 1) * _SLOT_SIZE
        self._write(at, _head_slot(gen, next_seq, count, write_pos))

    def _write(self, at: int, data: bytes) -> None:
        """Every store into the file goes through here (the crash tests hook it)."""
        self.mm[at:at + len(data)] = data

    def _slot(self, seq: int) -> tuple[int, int, int, int, int]:
        return _INDEX.unpack_from(self.mm, self.index_at + (seq % self.cap_entries) * _INDEX_SIZE)

    def _flush(self, start: int, end: int) -> None:
        aligned = start - start % _PAGE
        self.mm.flush(aligned, end - aligned)

    # operations ---------------------------------------------------------------------

    def append(self, kind: int, payload: bytes, *, sync: bool) -> int:
        size = len(payload)
        cap_n, cap_b = self.cap_entries, self.cap_bytes
        if size > cap_b:
            raise _too_large(size, cap_b)
        with self._locked(fcntl.LOCK_EX):
            gen, next_seq, count, write_pos = self.head()
            first = next_seq - count
            start = self._slot(first)[1] if count else write_pos
            dropped = 0
            while count and (count >= cap_n or write_pos + size - start > cap_b):
                first += 1
                count -= 1
                dropped += 1
                start = self._slot(first)[1] if count else write_pos
            if dropped:                       # never overwrite what a published head names
                gen += 1
                self._publish(gen, next_seq, count, write_pos)
                if sync:
                    self._flush(self.head_at, self.head_at + 2 * _SLOT_SIZE)
            data_at = self.data_at
            phys = write_pos % cap_b
            end = phys + size
            if end <= cap_b:
                self._write(data_at + phys, payload)
            else:
                split = cap_b - phys
                self._write(data_at + phys, payload[:split])
                self._write(data_at, payload[split:])
            seq = next_seq
            meta = _INDEX_META.pack(seq, write_pos, size, kind)
            crc = zlib.crc32(payload, zlib.crc32(meta))
            slot_at = self.index_at + (seq % cap_n) * _INDEX_SIZE
            self._write(slot_at, _INDEX.pack(seq, write_pos, size, kind, crc))
            if sync:
                if end <= cap_b:
                    self._flush(data_at + phys, data_at + end)
                else:
                    self._flush(data_at + phys, data_at + cap_b)
                    self._flush(data_at, data_at + end - cap_b)
                self._flush(slot_at, slot_at + _INDEX_SIZE)
            self._publish(gen + 1, next_seq + 1, count + 1, write_pos + size)
            if sync:
                self._flush(self.head_at, self.head_at + 2 * _SLOT_SIZE)
            return seq

    def read(self, n: int, with_seq: bool) -> list:
        with self._locked(fcntl.LOCK_SH):
            _gen, next_seq, count, _write_pos = self.head()
            take = n if n < count else count
            mm, data_at, cap_n, cap_b = self.mm, self.data_at, self.cap_entries, self.cap_bytes
            index_at = self.index_at
            out = []
            for seq in range(next_seq - take, next_seq):
                slot_seq, offset, size, kind, crc = _INDEX.unpack_from(
                    mm, index_at + (seq % cap_n) * _INDEX_SIZE)
                phys = offset % cap_b
                end = phys + size
                if end <= cap_b:
                    payload = mm[data_at + phys:data_at + end]
                else:
                    payload = mm[data_at + phys:data_at + cap_b] + mm[data_at:data_at + end - cap_b]
                if slot_seq != seq or zlib.crc32(
                        payload, zlib.crc32(_INDEX_META.pack(slot_seq, offset, size, kind))) != crc:
                    raise self._corrupt(f"entry {seq} fails its checksum")
                try:
                    entry = _decode(kind, payload)
                except (UnicodeDecodeError, ValueError):
                    raise self._corrupt(f"entry {seq} cannot be decoded") from None
                out.append(LogRecord(seq, entry) if with_seq else entry)
            return out

    def roll_off(self, n: int, *, sync: bool) -> int:
        with self._locked(fcntl.LOCK_EX):
            gen, next_seq, count, write_pos = self.head()
            drop = n if n < count else count
            if drop:
                self._publish(gen + 1, next_seq, count - drop, write_pos)
                if sync:
                    self._flush(self.head_at, self.head_at + 2 * _SLOT_SIZE)
            return drop

    def stats(self) -> RingStats:
        with self._locked(fcntl.LOCK_SH):
            _gen, next_seq, count, write_pos = self.head()
            used = write_pos - self._slot(next_seq - count)[1] if count else 0
        return RingStats(
            session_id=self.session_id, entries=count, bytes_used=used,
            capacity_entries=self.cap_entries, capacity_bytes=self.cap_bytes,
            first_seq=next_seq - count if count else None,
            last_seq=next_seq - 1 if count else None, next_seq=next_seq,
            file_bytes=self.size)

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Flock:
    __slots__ = ("fd", "op")

    def __init__(self, fd: int, op: int) -> None:
        self.fd = fd
        self.op = op

    def __enter__(self) -> None:
        fcntl.flock(self.fd, self.op)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)


class _Exclusive:
    """The thread lock, then an exclusive ``flock`` (released in reverse order)."""

    __slots__ = ("lock", "fd")

    def __init__(self, lock: threading.RLock, fd: int) -> None:
        self.lock = lock
        self.fd = fd

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            self.lock.release()


# -- the public log -------------------------------------------------------------

class RollingLog:
    """Per-session rings of recent entries in memory-mapped files under ``path``.

    ``capacity_entries`` and ``capacity_bytes`` (payload bytes) size the ring a
    session gets on its first append; an existing ring must have been created
    with the same values (else :class:`RingConfigMismatchError`).  At most
    ``max_open`` rings stay mapped (least recently used are unmapped).  ``sync``
    msyncs every append (see the module docstring).
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 capacity_entries: int = DEFAULT_CAPACITY_ENTRIES,
                 capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
                 max_open: int = DEFAULT_MAX_OPEN, sync: bool = False) -> None:
        self._cap_entries = _count(capacity_entries, "capacity_entries", minimum=1)
        self._cap_bytes = _count(capacity_bytes, "capacity_bytes", minimum=1)
        if self._cap_bytes > MAX_CAPACITY_BYTES:
            raise InvalidArgumentError(
                f"capacity_bytes must be at most {MAX_CAPACITY_BYTES} (4 GiB - 1), "
                f"got {capacity_bytes}")
        self._max_open = _count(max_open, "max_open", minimum=1)
        self._sync = bool(sync)
        self._dir = Path(path)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the rolling log directory {self._dir}: "
                             f"{exc.strerror}; pass a writable directory path") from None
        if not self._dir.is_dir():
            raise StoreError(f"rolling log path {self._dir} is not a directory; "
                             "pass a directory (one ring file per session is kept in it)")
        self._lock = threading.RLock()
        self._rings: OrderedDict[bytes, _Ring] = OrderedDict()
        self._closed = False
        self._sync_fd = -1
        self._sync_thread_lock = threading.RLock()

    @property
    def capacity_entries(self) -> int:
        return self._cap_entries

    @property
    def capacity_bytes(self) -> int:
        return self._cap_bytes

    # lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            for ring in self._rings.values():
                ring.close()
            self._rings.clear()
            self._closed = True
            if self._sync_fd >= 0:
                os.close(self._sync_fd)
                self._sync_fd = -1

    def exclusive(self) -> "_Exclusive":
        """A lock held across threads and processes (``flock`` on ``sync.lock`` in
        the directory) while a caller brings rings in line with their source."""
        with self._lock:
            self._check_open()
            if self._sync_fd < 0:
                self._sync_fd = os.open(self._dir / "sync.lock",
                                        os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                                        0o600)
            return _Exclusive(self._sync_thread_lock, self._sync_fd)

    def __enter__(self) -> RollingLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def location(self) -> str:
        """The directory holding the ring files (SPEC-038 §4 visibility)."""
        return str(self._dir)

    # rings -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RollingLogClosedError(
                f"the rolling log at {self._dir} is closed; open a new RollingLog")

    def _ring(self, raw_id: bytes, *, create: bool) -> _Ring | None:
        ring = self._rings.get(raw_id)
        if ring is not None:
            self._rings.move_to_end(raw_id)
            return ring
        path = self._dir / _file_name(raw_id)
        if not path.exists():
            if not create:
                return None
            self._create(path, raw_id)
        ring = _Ring(path, raw_id=raw_id, writable=True)
        if (ring.cap_entries, ring.cap_bytes) != (self._cap_entries, self._cap_bytes):
            ring.close()
            raise RingConfigMismatchError(
                f"session {raw_id.decode('utf-8', 'surrogatepass')!r} has a ring with "
                f"capacity_entries={ring.cap_entries}, capacity_bytes={ring.cap_bytes}, "
                f"but this RollingLog uses {self._cap_entries} and {self._cap_bytes}; "
                "open it with the ring's capacities, or drop() the session to recreate it")
        self._rings[raw_id] = ring
        while len(self._rings) > self._max_open:
            _, old = self._rings.popitem(last=False)
            old.close()
        return ring

    def _create(self, path: Path, raw_id: bytes) -> None:
        header = _build_header(raw_id, self._cap_entries, self._cap_bytes)
        size = _file_size(len(header), self._cap_entries, self._cap_bytes)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o600)
        try:
            try:
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, size)
                else:  # pragma: no cover - every Linux has it
                    os.ftruncate(fd, size)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise StoreFullError(
                        f"no space for a {size}-byte rolling log ring in {self._dir}; free "
                        "disk space or lower capacity_bytes / capacity_entries") from None
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, size)
            os.pwrite(fd, header, 0)
            os.pwrite(fd, _head_slot(1, 1, 0, 0), len(header) + (1 & 1) * _SLOT_SIZE)
            if self._sync:
                os.fsync(fd)
            try:
                os.link(tmp, path)        # never replaces a ring another process made
            except FileExistsError:
                pass
            if self._sync:
                dfd = os.open(self._dir, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        finally:
            os.close(fd)
            os.unlink(tmp)

    # the RollingLogBackend interface -----------------------------------------------

    def append(self, session_id: str, entry: Entry) -> int:
        """Append ``entry`` (a str, or a JSON-able dict) and return its sequence number.

        The oldest entries roll off to make room.  Raises :class:`EntryTooLargeError`
        if the encoded entry is larger than ``capacity_bytes``.
        """
        raw_id = _session_bytes(session_id)
        kind, payload = _encode(entry)
        if len(payload) > self._cap_bytes:
            raise _too_large(len(payload), self._cap_bytes)
        with self._lock:
            self._check_open()
            return self._ring(raw_id, create=True).append(kind, payload, sync=self._sync)

    def read_recent(self, session_id: str, n: int) -> list[Entry]:
        """The last ``min(n, entries)`` entries of the session, oldest first, newest last.

        A session never appended to has no entries.
        """
        raw_id = _session_bytes(session_id)
        n = _count(n, "n")
        with self._lock:
            self._check_open()
            ring = self._ring(raw_id, create=False)
            return [] if ring is None or n == 0 else ring.read(n, False)

    def read_recent_with_seq(self, session_id: str, n: int) -> list[LogRecord]:
        """Like :meth:`read_recent`, with each entry's sequence number."""
        raw_id = _session_bytes(session_id)
        n = _count(n, "n")
        with self._lock:
            self._check_open()
            ring = self._ring(raw_id, create=False)
            return [] if ring is None or n == 0 else ring.read(n, True)

    def roll_off(self, session_id: str, n: int = 1) -> int:
        """Drop the oldest ``n`` entries of the session; returns how many were dropped."""
        raw_id = _session_bytes(session_id)
        n = _count(n, "n")
        with self._lock:
            self._check_open()
            ring = self._ring(raw_id, create=False)
            return 0 if ring is None else ring.roll_off(n, sync=self._sync)

    def stats(self, session_id: str | None = None) -> RingStats | LogStats:
        """One session's :class:`RingStats`, or :class:`LogStats` over every session."""
        if session_id is not None:
            raw_id = _session_bytes(session_id)
            with self._lock:
                self._check_open()
                ring = self._ring(raw_id, create=False)
                if ring is not None:
                    return ring.stats()
            return RingStats(session_id=session_id, entries=0, bytes_used=0,
                             capacity_entries=self._cap_entries,
                             capacity_bytes=self._cap_bytes, first_seq=None,
                             last_seq=None, next_seq=1, file_bytes=0)
        sessions = entries = used = file_bytes = 0
        for ring_stats in self._each_stats():
            sessions += 1
            entries += ring_stats.entries
            used += ring_stats.bytes_used
            file_bytes += ring_stats.file_bytes
        return LogStats(location=str(self._dir), sessions=sessions, entries=entries,
                        bytes_used=used, file_bytes=file_bytes)

    # visibility and cleanup -----------------------------------------------------------

    def _each_stats(self) -> list[RingStats]:
        with self._lock:
            self._check_open()
            out = []
            for path in sorted(self._dir.glob("*" + _SUFFIX)):
                ring = _Ring(path, raw_id=None, writable=False)
                try:
                    out.append(ring.stats())
                finally:
                    ring.close()
            return out

    def sessions(self) -> list[str]:
        """The session ids that have a ring here (read from the files' headers)."""
        return sorted(s.session_id for s in self._each_stats())

    def drop(self, session_id: str) -> bool:
        """Delete the session's ring file; returns False if it had none.

        Only for sessions no other process is using: a process that has the ring
        mapped keeps writing to the deleted file until it closes its RollingLog.
        """
        raw_id = _session_bytes(session_id)
        with self._lock:
            self._check_open()
            ring = self._rings.pop(raw_id, None)
            if ring is not None:
                ring.close()
            try:
                os.unlink(self._dir / _file_name(raw_id))
                return True
            except FileNotFoundError:
                return False


# -- the in-memory back end --------------------------------------------------------

class MemoryRollingLog:
    """The ``memory`` back end (SPEC-038 §2.2): same semantics, nothing on disk.

    Entries are kept encoded (as in :class:`RollingLog`), so a caller mutating a
    dict it appended or read cannot change the log.  Lost when the process ends.
    """

    def __init__(self, *, capacity_entries: int = DEFAULT_CAPACITY_ENTRIES,
                 capacity_bytes: int = DEFAULT_CAPACITY_BYTES) -> None:
        self._cap_entries = _count(capacity_entries, "capacity_entries", minimum=1)
        self._cap_bytes = _count(capacity_bytes, "capacity_bytes", minimum=1)
        self._lock = threading.Lock()
        self._rings: dict[str, tuple[deque, list[int]]] = {}   # entries, [next_seq, bytes]
        self._exclusive = threading.RLock()

    @property
    def capacity_entries(self) -> int:
        return self._cap_entries

    @property
    def capacity_bytes(self) -> int:
        return self._cap_bytes

    def exclusive(self) -> threading.RLock:
        """A lock for callers that bring rings in line with their source (only this
        process can see a memory log, so a thread lock is enough)."""
        return self._exclusive

    def append(self, session_id: str, entry: Entry) -> int:
        _session_bytes(session_id)
        kind, payload = _encode(entry)
        size = len(payload)
        if size > self._cap_bytes:
            raise _too_large(size, self._cap_bytes)
        with self._lock:
            ring, state = self._rings.setdefault(session_id, (deque(), [1, 0]))
            while ring and (len(ring) >= self._cap_entries
                            or state[1] + size > self._cap_bytes):
                state[1] -= len(ring.popleft()[2])
            seq = state[0]
            ring.append((seq, kind, payload))
            state[0] += 1
            state[1] += size
            return seq

    def _records(self, session_id: str, n: int) -> list[tuple[int, int, bytes]]:
        _session_bytes(session_id)
        n = _count(n, "n")
        with self._lock:
            ring, _ = self._rings.get(session_id, ((), None))
            newest_first = list(itertools.islice(reversed(ring), n))   # no scan behind n
            newest_first.reverse()
            return newest_first

    def read_recent(self, session_id: str, n: int) -> list[Entry]:
        return [_decode(kind, payload) for _, kind, payload in self._records(session_id, n)]

    def read_recent_with_seq(self, session_id: str, n: int) -> list[LogRecord]:
        return [LogRecord(seq, _decode(kind, payload))
                for seq, kind, payload in self._records(session_id, n)]

    def roll_off(self, session_id: str, n: int = 1) -> int:
        _session_bytes(session_id)
        n = _count(n, "n")
        with self._lock:
            ring, state = self._rings.get(session_id, (deque(), [1, 0]))
            dropped = 0
            while ring and dropped < n:
                state[1] -= len(ring.popleft()[2])
                dropped += 1
            return dropped

    def drop(self, session_id: str) -> bool:
        """Forget the session's ring; returns False if it had none."""
        _session_bytes(session_id)
        with self._lock:
            return self._rings.pop(session_id, None) is not None

    def sessions(self) -> list[str]:
        """The session ids that have a ring."""
        with self._lock:
            return sorted(self._rings)

    def close(self) -> None:
        """Nothing to release; present so both back ends can be closed alike."""

    def stats(self, session_id: str | None = None) -> RingStats | LogStats:
        with self._lock:
            if session_id is not None:
                _session_bytes(session_id)
                ring, state = self._rings.get(session_id, ((), [1, 0]))
                return RingStats(
                    session_id=session_id, entries=len(ring), bytes_used=state[1],
                    capacity_entries=self._cap_entries, capacity_bytes=self._cap_bytes,
                    first_seq=ring[0][0] if ring else None,
                    last_seq=ring[-1][0] if ring else None, next_seq=state[0], file_bytes=0)
            return LogStats(location="memory", sessions=len(self._rings),
                            entries=sum(len(r) for r, _ in self._rings.values()),
                            bytes_used=sum(s[1] for _, s in self._rings.values()),
                            file_bytes=0)
