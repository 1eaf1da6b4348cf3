"""One turn at a time per session, across every worker process of a relay.

A turn holds its session from before ``prepare_turn`` until the reply is
stored (or the turn fails): a second request on the session waits its turn, in
arrival order within a worker, so turns never interleave or reorder.  The
wait is bounded: at most ``max_waiting`` requests wait per session in one
worker and each waits at most ``max_wait`` seconds; past either bound the
request gets 409 ``session_busy`` with ``Retry-After`` and nothing is stored.

Across processes the lock is a POSIX byte-range lock (``fcntl.lockf``) on one
byte of ``relay.locks`` beside the store, the byte chosen by a hash of the
session id.  POSIX locks belong to a process, not to a task, so inside a
process the asyncio lock is per *byte* too: two sessions whose ids hash to one
byte share it (a rare, harmless wait), and a task never unlocks a byte that
another task of its process still holds.  The kernel drops a dead worker's
locks with the process, so a crash never leaves a session locked.
"""
from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import time
from pathlib import Path

from .errors import ApiError

SLOTS = 1 << 20
_POLL_FIRST, _POLL_MAX = 0.002, 0.02


def slot_of(session: str) -> int:
    return int.from_bytes(hashlib.blake2b(session.encode("utf-8"), digest_size=8).digest(),
                          "big") % SLOTS


def busy(session: str, why: str, retry_after: int = 1) -> ApiError:
    return ApiError(409, f"session {session!r} is busy: {why}; turns of one session run one "
                    f"at a time, retry after {retry_after} s", code="session_busy",
                    param="session_id", headers={"Retry-After": str(retry_after)})


class Held:
    """A session held by one turn; :meth:`release` frees it (idempotent)."""

    def __init__(self, gate: "SessionGate", slot: int, lock: asyncio.Lock) -> None:
        self._gate, self._slot, self._lock = gate, slot, lock
        self.released = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        self._gate._unlock_file(self._slot)
        self._lock.release()
        self._gate._forget(self._slot, self._lock)


class SessionGate:
    """Per-session exclusion within a worker (asyncio) and across workers (lockf)."""

    def __init__(self, lock_file: Path | None, *, max_waiting: int, max_wait: float) -> None:
        self.max_waiting = max_waiting
        self.max_wait = max_wait
        self._locks: dict[int, asyncio.Lock] = {}
        self._waiting: dict[int, int] = {}
        self._fd: int | None = None
        if lock_file is not None:
            lock_file.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def queued(self) -> int:
        """Requests waiting for a session in this worker (the queue depth)."""
        return sum(self._waiting.values())

    async def hold(self, display: str, session: str) -> Held:
        """Wait (bounded) until this worker holds ``session``; ``display`` names it to the client."""
        slot = slot_of(session)
        lock = self._locks.setdefault(slot, asyncio.Lock())
        if lock.locked() and self._waiting.get(slot, 0) >= self.max_waiting:
            raise busy(display, f"{self.max_waiting} requests already wait for it")
        deadline = time.monotonic() + self.max_wait
        self._waiting[slot] = self._waiting.get(slot, 0) + 1
        try:
            try:
                await asyncio.wait_for(lock.acquire(), timeout=self.max_wait)
            except asyncio.TimeoutError:
                raise busy(display, f"another turn held it for over {self.max_wait:g} s") \
                    from None
        finally:
            self._waiting[slot] -= 1
            if not self._waiting[slot]:
                del self._waiting[slot]
        held = Held(self, slot, lock)
        try:
            await self._lock_file(slot, display, deadline)
        except BaseException:
            held.released = True
            lock.release()
            self._forget(slot, lock)
            raise
        return held

    async def _lock_file(self, slot: int, display: str, deadline: float) -> None:
        if self._fd is None:
            return
        pause = _POLL_FIRST
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
                return
            except OSError:
                pass
            if time.monotonic() >= deadline:
                raise busy(display, f"a turn in another worker held it for over "
                           f"{self.max_wait:g} s")
            await asyncio.sleep(pause)      # another worker holds it: poll, never block the loop
            pause = min(_POLL_MAX, pause * 2)

    def _unlock_file(self, slot: int) -> None:
        if self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, slot)

    def _forget(self, slot: int, lock: asyncio.Lock) -> None:
        if not lock.locked() and slot not in self._waiting and self._locks.get(slot) is lock:
            del self._locks[slot]
