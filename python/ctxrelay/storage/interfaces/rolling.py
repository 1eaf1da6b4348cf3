"""The rolling log: each session's most recent entries, in a bounded ring.

Contract (every back end; ``tests/storage/conformance/test_rolling.py``)
-------------------------------------------------------------------------
Entries and sequence numbers
    An entry is a ``str`` or a JSON-able ``dict``; ``append`` returns its
    sequence number, 1, 2, ... per session, never reused or going back (not
    even after ``roll_off``; ``drop`` starts the session afresh).
Ordering and bounds
    ``read_recent(s, n)`` returns at most ``n`` entries, oldest first, newest
    last, equal to what was appended (a dict comes back as an equal dict, a
    copy).  A ring holds at most ``capacity_entries`` entries and
    ``capacity_bytes`` payload bytes: the oldest roll off to make room.  An
    entry larger than the whole ring raises
    :class:`~ctxrelay.storage.rolling.EntryTooLargeError` and changes nothing.
Atomicity
    An append is all or nothing: a reader (or the next process, after a
    crash) sees an entry whole or not at all, and sequence numbers stay
    contiguous.  ``exclusive()`` is a lock held across every thread (and, for
    a shared back end, every process) using the log: callers that bring a
    ring in line with its source take it.
Errors
    EntryTooLargeError, :class:`~ctxrelay.errors.InvalidSessionIdError`,
    InvalidArgumentError (bad counts), StoreFullError (no space for a new
    ring), StoreError (closed), CorruptRingError (a damaged ring).
Durable and rebuildable
    Nothing here is the truth: the router rebuilds a ring from the
    transcript whenever it lags, is damaged or is gone.  The ``memory``
    back end keeps nothing across processes; a file or server back end
    keeps its rings.

A shared back end (Redis) also implements :class:`TurnOrderedLog`: the
router's appends are then conditional on the tail's last turn id, in one
round trip and without :meth:`RollingLogBackend.exclusive`, and a back end
that cannot be reached raises
:class:`~ctxrelay.storage.rolling.RollingLogUnavailableError` (the router
reads the transcript instead).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Protocol, Union, runtime_checkable

if TYPE_CHECKING:
    from ctxrelay.storage.rolling import LogRecord, LogStats, RingStats

__all__ = ["RollingLogBackend", "TurnOrderedLog", "Entry"]

Entry = Union[str, dict]


@runtime_checkable
class RollingLogBackend(Protocol):
    """Per-session rings of recent entries (SPEC-038 §2.2; see the module doc)."""

    @property
    def capacity_entries(self) -> int: ...

    @property
    def capacity_bytes(self) -> int: ...

    def append(self, session_id: str, entry: Entry) -> int:
        """Append ``entry``; returns its sequence number."""

    def read_recent(self, session_id: str, n: int) -> list[Entry]:
        """The last ``min(n, entries)`` entries, oldest first."""

    def read_recent_with_seq(self, session_id: str, n: int) -> list["LogRecord"]:
        """Like :meth:`read_recent`, with each entry's sequence number."""

    def roll_off(self, session_id: str, n: int = 1) -> int:
        """Drop the oldest ``n`` entries; returns how many were dropped."""

    def drop(self, session_id: str) -> bool:
        """Forget the session's ring; False if it had none."""

    def sessions(self) -> list[str]:
        """The session ids that have a ring."""

    def stats(self, session_id: str | None = None) -> "RingStats | LogStats": ...

    def exclusive(self) -> ContextManager[Any]:
        """A lock every user of this log shares (see Atomicity)."""

    def close(self) -> None: ...


@runtime_checkable
class TurnOrderedLog(Protocol):
    """A rolling log whose entries carry the router's turn ids, for a log that many
    processes write (``ctxrelay.storage.redis.rolling``)."""

    def append_turns(self, session_id: str, turns: "list[tuple[int, Entry]]", *,
                     replace: bool = False) -> str:
        """Append ``(turn id, entry)`` pairs, ids consecutive, in one atomic step:
        only if the tail ends at the turn before the first (turns it holds already,
        byte for byte, are skipped); ``replace`` makes the tail exactly ``turns``.
        Returns ``"appended"``, ``"already"``, ``"gap"`` (the tail ends earlier or
        is empty) or ``"stale"`` (it holds other bytes under one of the ids);
        nothing is written on the last two."""
