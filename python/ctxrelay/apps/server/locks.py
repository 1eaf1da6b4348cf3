"""The cross-process half of the session gate: who may run a session's turn now.

Two kinds, one interface (``slot_of``, ``try_lock``, ``unlock``, ``confirm``,
``close``, and ``blocking``: whether the calls wait on the network, so the gate
runs them off the event loop):

:class:`FileSlots` (a store directory)
    a POSIX byte-range lock (``fcntl.lockf``) on one byte of ``relay.locks``
    beside the store, the byte chosen by a hash of the session id: the workers
    of one relay, on one machine.
:class:`PgSlots` (a ``postgresql://`` store)
    a session-level advisory lock (``pg_try_advisory_lock``) of the store's
    database, keyed by a 64-bit hash of the schema and the session id, taken on
    one connection of its own per process: relays on any number of hosts.  The
    server drops a dead process's locks with its connection.

Both are per *process* (a POSIX lock belongs to the process, an advisory lock
to the connection), so the gate keeps an asyncio lock per slot in front of them.

When PostgreSQL restarts, the lock connection dies and its locks with it,
while the turns holding them may still be waiting for their upstream.  So each
lock remembers the connection it was taken on, and :meth:`PgSlots.confirm`
(called just before a turn is stored) answers False if that connection is gone:
the turn is refused with 503 rather than stored beside a turn that took the
session in the meantime.  Turn ids stay contiguous either way (the append
locks the session's row); the lock is what keeps whole turns from interleaving.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from pathlib import Path
from typing import Any

from ctxrelay.storage.postgres.connection import CONNECT_TIMEOUT, DatabaseUnavailableError, \
    parse_url

FILE_SLOTS = 1 << 20


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(),
                          "big", signed=True)


class FileSlots:
    """Byte-range locks on one file (see the module doc)."""

    blocking = False

    def __init__(self, lock_file: Path) -> None:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)

    @staticmethod
    def slot_of(session: str) -> int:
        return _hash64(session) % FILE_SLOTS

    def try_lock(self, slot: int) -> bool:
        assert self._fd is not None
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
            return True
        except OSError:
            return False

    def unlock(self, slot: int) -> None:
        if self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, slot)

    def confirm(self, slot: int) -> bool:
        return self._fd is not None        # the kernel keeps a live process's locks

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class PgSlots:
    """Advisory locks on one connection of this process (see the module doc)."""

    blocking = True

    def __init__(self, url: str) -> None:
        import psycopg
        self._psycopg = psycopg
        self._conninfo, self._schema = parse_url(url)
        self._mutex = threading.Lock()       # one statement at a time on the connection
        self._conn: Any = None
        self._epoch = 0                      # moves at every new connection
        self._held: dict[int, int] = {}      # slot -> the epoch it was locked in
        self._closed = False

    def slot_of(self, session: str) -> int:
        return _hash64(f"ctxrelay-relay-session\0{self._schema}\0{session}")

    def _connection(self) -> Any:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            self._held.clear()               # the server dropped them with the connection
            try:
                conn = self._psycopg.connect(
                    self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                    application_name=f"ctxrelay-relay-locks:{self._schema}")
            except self._psycopg.OperationalError as e:
                raise _unavailable(e) from None
            self._conn = conn
            self._epoch += 1
        return conn

    def _query(self, sql: str, params: tuple = ()) -> Any:
        """One statement; a connection found dead is replaced once (after a restart of
        the server its first use fails), a server that is down raises."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                return conn.execute(sql, params, prepare=False).fetchone()[0]
            except self._psycopg.OperationalError as e:
                self._held.clear()
                conn.close()
                if attempt == 2:
                    raise _unavailable(e) from None

    def try_lock(self, slot: int) -> bool:
        with self._mutex:
            if self._closed:
                raise DatabaseUnavailableError("the relay is stopping; retry on another relay")
            got = bool(self._query("SELECT pg_try_advisory_lock(%s)", (slot,)))
            if got:
                self._held[slot] = self._epoch
            return got

    def unlock(self, slot: int) -> None:
        with self._mutex:
            epoch = self._held.pop(slot, None)
            if epoch != self._epoch or self._conn is None or self._conn.closed:
                return                       # lost with its connection: nothing to free
            try:
                self._conn.execute("SELECT pg_advisory_unlock(%s)", (slot,), prepare=False)
            except self._psycopg.Error:
                pass                         # the connection died: so did the lock

    def confirm(self, slot: int) -> bool:
        """Whether this process still holds ``slot`` (one round trip on the lock
        connection: a dead connection is found here, not after the turn is stored)."""
        with self._mutex:
            if self._held.get(slot) != self._epoch or self._conn is None:
                return False
            try:
                self._conn.execute("SELECT 1", prepare=False)
            except self._psycopg.Error:
                self._held.clear()
                return False
            return not self._conn.broken

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            if self._conn is not None:
                self._conn.close()           # frees every lock it held
                self._conn = None
            self._held.clear()


def _unavailable(exc: BaseException) -> DatabaseUnavailableError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return DatabaseUnavailableError(
        f"PostgreSQL is unavailable for the session locks ({first}); nothing was stored, "
        "retry when the server is back")
