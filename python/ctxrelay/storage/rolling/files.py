"""The file back end of the rolling log: one memory-mapped ring per session."""
from __future__ import annotations

import errno
import fcntl
import os
import secrets
import threading
from collections import OrderedDict
from pathlib import Path

from ctxrelay.errors import InvalidArgumentError, StoreError, StoreFullError
from ctxrelay.storage.interfaces.rolling import Entry
from ctxrelay.storage.rolling.common import (RingBounds, DEFAULT_CAPACITY_BYTES, DEFAULT_CAPACITY_ENTRIES,
                                             DEFAULT_MAX_OPEN, MAX_CAPACITY_BYTES, LogRecord,
                                             LogStats, RingConfigMismatchError,
                                             RollingLogClosedError, RingStats, check_count,
                                             encode, session_bytes, too_large)
from ctxrelay.storage.rolling.ring import (SLOT_SIZE, SUFFIX, Ring, build_header, file_name,
                                           file_size, head_slot)

__all__ = ["RollingLog"]


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

class RollingLog(RingBounds):
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
        super().__init__(capacity_entries, capacity_bytes)
        if self._cap_bytes > MAX_CAPACITY_BYTES:
            raise InvalidArgumentError(
                f"capacity_bytes must be at most {MAX_CAPACITY_BYTES} (4 GiB - 1), "
                f"got {capacity_bytes}")
        self._max_open = check_count(max_open, "max_open", minimum=1)
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
        self._rings: OrderedDict[bytes, Ring] = OrderedDict()
        self._closed = False
        self._sync_thread_lock = threading.RLock()
        self._exclusive: _Exclusive | None = None    # made on first use, one per log

    # lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            for ring in self._rings.values():
                ring.close()
            self._rings.clear()
            self._closed = True
            if self._exclusive is not None:
                with self._sync_thread_lock:      # not while a caller holds it
                    os.close(self._exclusive.fd)
                    self._exclusive = None

    def exclusive(self) -> "_Exclusive":
        """A lock held across threads and processes (``flock`` on ``sync.lock`` in
        the directory) while a caller brings rings in line with their source."""
        found = self._exclusive
        if found is None:
            with self._lock:
                self._check_open()
                if self._exclusive is None:
                    fd = os.open(self._dir / "sync.lock",
                                 os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
                    self._exclusive = _Exclusive(self._sync_thread_lock, fd)
                found = self._exclusive
        return found

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

    def _ring(self, raw_id: bytes, *, create: bool) -> Ring | None:
        ring = self._rings.get(raw_id)
        if ring is not None:
            self._rings.move_to_end(raw_id)
            return ring
        path = self._dir / file_name(raw_id)
        if not path.exists():
            if not create:
                return None
            self._create(path, raw_id)
        ring = Ring(path, raw_id=raw_id, writable=True)
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
        header = build_header(raw_id, self._cap_entries, self._cap_bytes)
        size = file_size(len(header), self._cap_entries, self._cap_bytes)
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
            os.pwrite(fd, head_slot(1, 1, 0, 0), len(header) + (1 & 1) * SLOT_SIZE)
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
        raw_id = session_bytes(session_id)
        kind, payload = encode(entry)
        if len(payload) > self._cap_bytes:
            raise too_large(len(payload), self._cap_bytes)
        with self._lock:
            self._check_open()
            return self._ring(raw_id, create=True).append(kind, payload, sync=self._sync)

    def read_recent(self, session_id: str, n: int) -> list[Entry]:
        """The last ``min(n, entries)`` entries of the session, oldest first, newest last.

        A session never appended to has no entries.
        """
        raw_id = session_bytes(session_id)
        n = check_count(n, "n")
        with self._lock:
            self._check_open()
            ring = self._ring(raw_id, create=False)
            return [] if ring is None or n == 0 else ring.read(n, False)

    def read_recent_with_seq(self, session_id: str, n: int) -> list[LogRecord]:
        """Like :meth:`read_recent`, with each entry's sequence number."""
        raw_id = session_bytes(session_id)
        n = check_count(n, "n")
        with self._lock:
            self._check_open()
            ring = self._ring(raw_id, create=False)
            return [] if ring is None or n == 0 else ring.read(n, True)

    def roll_off(self, session_id: str, n: int = 1) -> int:
        """Drop the oldest ``n`` entries of the session; returns how many were dropped."""
        raw_id = session_bytes(session_id)
        n = check_count(n, "n")
        with self._lock:
            self._check_open()
            ring = self._ring(raw_id, create=False)
            return 0 if ring is None else ring.roll_off(n, sync=self._sync)

    def stats(self, session_id: str | None = None) -> RingStats | LogStats:
        """One session's :class:`RingStats`, or :class:`LogStats` over every session."""
        if session_id is not None:
            raw_id = session_bytes(session_id)
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
            for path in sorted(self._dir.glob("*" + SUFFIX)):
                ring = Ring(path, raw_id=None, writable=False)
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
        raw_id = session_bytes(session_id)
        with self._lock:
            self._check_open()
            ring = self._rings.pop(raw_id, None)
            if ring is not None:
                ring.close()
            try:
                os.unlink(self._dir / file_name(raw_id))
                return True
            except FileNotFoundError:
                return False
