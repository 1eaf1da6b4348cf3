"""One turn at a time per session, across every worker process of a relay.

A turn holds its session from before ``prepare_turn`` until the reply is
stored (or the turn fails): a second request on the session waits its turn, in
arrival order within a worker, so turns never interleave or reorder.  The
wait is bounded: at most ``max_waiting`` requests wait per session in one
worker and each waits at most ``max_wait`` seconds; past either bound the
request gets 409 ``session_busy`` with ``Retry-After`` and nothing is stored.

Across processes the lock is one of :mod:`.locks`: a byte-range lock beside a
store directory (the workers of one relay), or a PostgreSQL advisory lock on a
``postgresql://`` store (relays on several hosts).  Both belong to a process,
so inside a process the asyncio lock is per *slot* too: two sessions whose ids
hash to one slot share it (a rare, harmless wait), and a task never unlocks a
slot that another task of its process still holds.  A dead worker's locks go
with it (the kernel, or the database server with its connection).
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from ctxrelay.storage.postgres.connection import DatabaseUnavailableError

from .errors import ApiError, unavailable

log = logging.getLogger("ctxrelay.apps.server")
from .locks import FILE_SLOTS, FileSlots

SLOTS = FILE_SLOTS
_POLL_FIRST, _POLL_MAX = 0.002, 0.02


def slot_of(session: str) -> int:
    """The slot of ``session`` in the byte-range lock file."""
    return FileSlots.slot_of(session)


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
        slots = self._gate._slots
        if slots is not None and slots.blocking:
            # The database's unlock runs off the event loop; this process's next turn
            # on the slot starts once it is done (the lock is re-entrant per connection,
            # so an earlier start would be counted twice and freed once).
            done = asyncio.get_running_loop().run_in_executor(None, slots.unlock, self._slot)
            done.add_done_callback(lambda _: self._free())
            return
        if slots is not None:
            slots.unlock(self._slot)
        self._free()

    def _free(self) -> None:
        self._lock.release()
        self._gate._forget(self._slot, self._lock)


class SessionGate:
    """Per-session exclusion within a worker (asyncio) and across processes (``slots``:
    a :mod:`.locks` object, a lock file's path for :class:`~.locks.FileSlots`, or None
    for this process only)."""

    def __init__(self, slots: Any, *, max_waiting: int, max_wait: float) -> None:
        self.max_waiting = max_waiting
        self.max_wait = max_wait
        self._locks: dict[int, asyncio.Lock] = {}
        self._waiting: dict[int, int] = {}
        self._slots = FileSlots(slots) if isinstance(slots, Path) else slots

    def close(self) -> None:
        if self._slots is not None:
            self._slots.close()

    def _slot_of(self, session: str) -> int:
        return self._slots.slot_of(session) if self._slots is not None else slot_of(session)

    async def _across(self, method: str, slot: int) -> Any:
        """A call of the cross-process lock (off the event loop when it waits on the
        network); a database that is down is a 503 with ``Retry-After``."""
        assert self._slots is not None
        fn = getattr(self._slots, method)
        try:
            if self._slots.blocking:
                return await asyncio.get_running_loop().run_in_executor(None, fn, slot)
            return fn(slot)
        except DatabaseUnavailableError as e:
            log.warning("ctxrelay relay: session locks unavailable: %s", e)
            raise unavailable("the relay's store is unavailable right now; nothing of this "
                              "request was stored, retry shortly") from None

    async def confirm(self, session: str) -> None:
        """Just before a turn of ``session`` is stored: 503 (nothing stored) if this
        process no longer holds it across processes (its lock connection was lost)."""
        if self._slots is None:
            return
        if not await self._across("confirm", self._slot_of(session)):
            raise unavailable("the relay lost its hold on this session while the turn ran "
                              "(the database connection was reset); nothing was stored, "
                              "retry the request")

    @property
    def queued(self) -> int:
        """Requests waiting for a session in this worker (the queue depth)."""
        return sum(self._waiting.values())

    async def hold(self, display: str, session: str) -> Held:
        """Wait (bounded) until this worker holds ``session``; ``display`` names it to the client."""
        slot = self._slot_of(session)
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
            await self._lock_across(slot, display, deadline)
        except BaseException:
            held.released = True
            lock.release()
            self._forget(slot, lock)
            raise
        return held

    async def _lock_across(self, slot: int, display: str, deadline: float) -> None:
        if self._slots is None:
            return
        pause = _POLL_FIRST
        while not await self._across("try_lock", slot):
            if time.monotonic() >= deadline:
                raise busy(display, f"a turn in another worker or relay held it for over "
                           f"{self.max_wait:g} s")
            await asyncio.sleep(pause)      # another process holds it: poll, never block the loop
            pause = min(_POLL_MAX, pause * 2)

    def _forget(self, slot: int, lock: asyncio.Lock) -> None:
        if not lock.locked() and slot not in self._waiting and self._locks.get(slot) is lock:
            del self._locks[slot]
