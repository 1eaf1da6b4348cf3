"""The ``memory`` back end of the rolling log (SPEC-038 §2.2): nothing on disk."""
from __future__ import annotations

import itertools
import threading
from collections import deque

from ctxrelay.storage.interfaces.rolling import Entry
from ctxrelay.storage.rolling.common import (RingBounds, DEFAULT_CAPACITY_BYTES, DEFAULT_CAPACITY_ENTRIES,
                                             LogRecord, LogStats, RingStats, check_count,
                                             decode, encode, session_bytes, too_large)

__all__ = ["MemoryRollingLog"]


class MemoryRollingLog(RingBounds):
    """The ``memory`` back end (SPEC-038 §2.2): same semantics, nothing on disk.

    Entries are kept encoded (as in :class:`RollingLog`), so a caller mutating a
    dict it appended or read cannot change the log.  Lost when the process ends.
    """

    def __init__(self, *, capacity_entries: int = DEFAULT_CAPACITY_ENTRIES,
                 capacity_bytes: int = DEFAULT_CAPACITY_BYTES) -> None:
        super().__init__(capacity_entries, capacity_bytes)
        self._lock = threading.Lock()
        self._rings: dict[str, tuple[deque, list[int]]] = {}   # entries, [next_seq, bytes]
        self._exclusive = threading.RLock()

    def exclusive(self) -> threading.RLock:
        """A lock for callers that bring rings in line with their source (only this
        process can see a memory log, so a thread lock is enough)."""
        return self._exclusive

    def append(self, session_id: str, entry: Entry) -> int:
        session_bytes(session_id)
        kind, payload = encode(entry)
        size = len(payload)
        if size > self._cap_bytes:
            raise too_large(size, self._cap_bytes)
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
        session_bytes(session_id)
        n = check_count(n, "n")
        with self._lock:
            ring, _ = self._rings.get(session_id, ((), None))
            newest_first = list(itertools.islice(reversed(ring), n))   # no scan behind n
            newest_first.reverse()
            return newest_first

    def read_recent(self, session_id: str, n: int) -> list[Entry]:
        return [decode(kind, payload) for _, kind, payload in self._records(session_id, n)]

    def read_recent_with_seq(self, session_id: str, n: int) -> list[LogRecord]:
        return [LogRecord(seq, decode(kind, payload))
                for seq, kind, payload in self._records(session_id, n)]

    def roll_off(self, session_id: str, n: int = 1) -> int:
        session_bytes(session_id)
        n = check_count(n, "n")
        with self._lock:
            ring, state = self._rings.get(session_id, (deque(), [1, 0]))
            dropped = 0
            while ring and dropped < n:
                state[1] -= len(ring.popleft()[2])
                dropped += 1
            return dropped

    def drop(self, session_id: str) -> bool:
        """Forget the session's ring; returns False if it had none."""
        session_bytes(session_id)
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
                session_bytes(session_id)
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
