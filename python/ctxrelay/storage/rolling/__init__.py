"""Rolling context log: a fixed-size ring of recent entries per session (SPEC-035 §2.2).

Modules: ``files`` (:class:`RollingLog`, the mmap back end), ``ring`` (one
ring file: format, reads and crash-safe writes), ``memory``
(:class:`MemoryRollingLog`), ``common`` (errors, results, checks, encoding).

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
were complete before it was published.  A head is published in three stores: its
CRC field zeroed (an aligned 4-byte store, which does not tear), its body, its
CRC; a slot with a zero CRC is one being written, and the previous head is used: a
torn entry never shows up and sequence numbers stay contiguous.  A slot whose
nonzero CRC fails was damaged on disk: the previous head would miss the newest
entry, so the ring is refused (``CorruptRingError``, a ``CorruptStoreError``) and
the Runtime, which treats the ring as a cache of the transcript, rebuilds it.  Every read checks the slot's sequence number and CRC.  Without
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
"
"""
from __future__ import annotations

from ctxrelay.storage.interfaces.rolling import Entry, RollingLogBackend
from ctxrelay.storage.rolling.common import (DEFAULT_CAPACITY_BYTES, DEFAULT_CAPACITY_ENTRIES,
                                             MAX_SESSION_ID_BYTES, CorruptRingError,
                                             EntryTooLargeError, LogRecord, LogStats,
                                             RingConfigMismatchError, RingStats,
                                             RollingLogClosedError,
                                             RollingLogUnavailableError)
from ctxrelay.storage.rolling.files import RollingLog
from ctxrelay.storage.rolling.memory import MemoryRollingLog
from ctxrelay.storage.rolling.ring import FORMAT_VERSION

__all__ = [
    "RollingLog", "MemoryRollingLog", "RollingLogBackend", "Entry", "LogRecord", "RingStats",
    "LogStats", "EntryTooLargeError", "CorruptRingError", "RingConfigMismatchError",
    "RollingLogClosedError", "RollingLogUnavailableError", "DEFAULT_CAPACITY_ENTRIES", "DEFAULT_CAPACITY_BYTES",
    "MAX_SESSION_ID_BYTES", "FORMAT_VERSION",
]
