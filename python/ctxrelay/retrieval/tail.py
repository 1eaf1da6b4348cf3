"""Ring entries, and the router's side of a rolling log shared by processes (Redis).

A ring entry is one turn as a JSON array in ``TURN_FIELDS`` order (a str
entry of the ring): decoding an array is about 2.5x faster than an object with
the field names, and a last-8 read decodes 8 of them.  A turn too large for
the ring is the one-element array ``[turn_id]``, a pointer into the transcript.

:class:`SharedTail` writes a shared tail (``storage/redis/rolling.py``) after
each transcript commit and keeps this process's *mirror* of it: the entries it
last read or wrote, per session.  The router checks every read against the
transcript (:mod:`ctxrelay.retrieval.router`); a mirror that ends at the turn
count it checks against answers with no round trip.  Turns never change, so a
mirror whose ids end at the count and run without a gap holds the transcript's
turns, as the tail does.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ctxrelay.storage.rolling import (CorruptRingError, RingConfigMismatchError,
                                      RollingLogUnavailableError)
from ctxrelay.types import Turn

if TYPE_CHECKING:
    from ctxrelay.storage.interfaces.transcript import Transcript

__all__ = ["SharedTail", "entry_values", "MIRROR_SESSIONS", "RING_DAMAGE"]

MIRROR_SESSIONS = 256            # sessions whose shared-tail entries a process keeps

# Turn's fields in a ring entry's order (see ring_entry_text).
TURN_FIELDS = ("turn_id", "role", "content", "name", "tool_call_id", "metadata",
               "timestamp", "key", "tokens", "tokens_exact")

# The first JSON value of a ring entry (and where it ends).
decode_json = json.JSONDecoder().raw_decode

# What a ring that is not (or no longer) ours raises when read: rebuilt, not reported.
RING_DAMAGE = (CorruptRingError, RingConfigMismatchError, ValueError, TypeError,
               IndexError, KeyError)


def ring_entry_text(turn: Turn) -> str:
    """A turn as a ring entry: a JSON array in :data:`TURN_FIELDS` order."""
    return json.dumps([turn.turn_id, turn.role, turn.content, turn.name, turn.tool_call_id,
                       turn.metadata, turn.timestamp, turn.key, turn.tokens,
                       turn.tokens_exact], ensure_ascii=False, separators=(",", ":"))


def entry_values(entry: str) -> list[Any]:
    """A ring entry's values: ``[turn_id, role, content, ...]``, or ``[turn_id]``."""
    return decode_json(entry)[0]


class SharedTail:
    """Writes, rebuilds and mirrors one store's shared tail (see the module doc).

    ``log`` is the rolling log (a ``TurnOrderedLog``), ``unverify(session)`` tells
    the router its last check of the session no longer holds.  Calls raise what
    the log raises (``RollingLogUnavailableError`` when Redis cannot be reached);
    the router decides what a failure means.
    """

    def __init__(self, log: Any, transcript: "Transcript",
                 ring_entry: Callable[[Turn], str],
                 unverify: Callable[[str], None]) -> None:
        self.log_ = log
        self._st = transcript
        self._ring_entry = ring_entry
        self._unverify = unverify
        self._capacity = log.capacity_entries
        self._max_bytes = log.capacity_bytes
        self._mirror: OrderedDict[str, list[tuple[int, str]]] = OrderedDict()
        self._lock = threading.Lock()
        self.mirror_hits = 0

    # -- reads ----------------------------------------------------------------------------

    def read(self, session_id: str, n: int, count: int | None) -> list[list[Any]]:
        """The last ``n`` entries (decoded): from the mirror when it ends at ``count``
        and holds ``n`` entries (or the session's first), else from the log."""
        mirror = self._mirror.get(session_id)
        if count is not None and mirror and mirror[-1][0] == count \
                and (len(mirror) >= n or mirror[0][0] == 1):
            self.mirror_hits += 1
            return [decode_json(raw)[0] for _, raw in mirror[-n:]]
        raws = self.log_.read_recent(session_id, n)
        entries = [decode_json(e)[0] for e in raws]
        self._remember(session_id, [(e[0], raw) for e, raw in zip(entries, raws)])
        return entries

    # -- writes ---------------------------------------------------------------------------

    def log(self, session_id: str, turn_ids: list[int]) -> None:
        """Append the turns ``turn_ids`` (consecutive, just committed): one transcript
        read and one conditional append; a tail that does not end just before them
        is rebuilt."""
        if not turn_ids:
            return
        turns = [self._st.turn(session_id, turn_ids[0])] if len(turn_ids) == 1 \
            else self._st.turns(session_id, turn_ids)
        entries = [self._entry(t) for t in turns]
        status = self.log_.append_turns(session_id, entries)
        if status == "appended":
            self._remember(session_id, entries, extend=True)
        elif status != "already":
            self.rebuild(session_id)

    def rebuild(self, session_id: str) -> None:
        """Make the tail the transcript's last ``capacity_entries`` turns, in one atomic
        replace (a reader sees the old tail or the new one)."""
        count = self._st.turn_count(session_id)
        if count == 0:
            self._remember(session_id, None)
            self.log_.drop(session_id)
        else:
            turns = list(self._st.iter_turns(
                session_id, max(1, count - self._capacity + 1), count))
            self._append(session_id, turns, replace=True)
        self._unverify(session_id)

    def sync(self, session_id: str, rebuild: bool) -> None:
        """Bring the tail in line with the transcript: the missing turns appended
        when it is only a little behind, else rebuilt."""
        if not rebuild:
            try:
                tail = self.read(session_id, 1, None)
            except RING_DAMAGE:
                tail = []
            count = self._st.turn_count(session_id)
            last = tail[0][0] if tail else 0
            if tail and last < count and count - last < self._capacity:
                missing = self._st.history(session_id, last + 1, count)
                if self._append(session_id, missing) in ("appended", "already"):
                    self._unverify(session_id)
                    return
        self.rebuild(session_id)

    def forget(self, session_id: str) -> bool:
        """Drop the session's tail; False if it had none or Redis cannot be reached
        (the keys expire, and a later read checks the tail anyway)."""
        self._remember(session_id, None)
        try:
            return self.log_.drop(session_id)
        except RollingLogUnavailableError:
            return False

    # -- helpers --------------------------------------------------------------------------

    def _entry(self, turn: Turn) -> tuple[int, str]:
        entry = self._ring_entry(turn)
        try:
            if len(entry.encode("utf-8")) <= self._max_bytes:
                return turn.turn_id, entry
        except UnicodeEncodeError:
            pass
        return turn.turn_id, f"[{turn.turn_id}]"     # a pointer into the transcript

    def _append(self, session_id: str, turns: list[Turn], *, replace: bool = False) -> str:
        entries = [self._entry(t) for t in turns]
        self._remember(session_id, None)       # whatever happens, the mirror is re-read
        status = self.log_.append_turns(session_id, entries, replace=replace)
        if replace:
            self._remember(session_id, entries)
        return status

    def _remember(self, session_id: str, entries: list[tuple[int, str]] | None, *,
                  extend: bool = False) -> None:
        """Set (or with ``extend``, continue) the session's mirror; None forgets it."""
        with self._lock:
            if entries is None:
                self._mirror.pop(session_id, None)
                return
            if extend:
                held = self._mirror.get(session_id)
                if not held or not entries or held[-1][0] != entries[0][0] - 1:
                    self._mirror.pop(session_id, None)
                    return
                entries = (held + entries)[-self._capacity:]
            self._mirror[session_id] = entries
            self._mirror.move_to_end(session_id)
            while len(self._mirror) > MIRROR_SESSIONS:
                self._mirror.popitem(last=False)

    def forget_mirror(self, session_id: str) -> None:
        """Drop this process's mirror of the session (the next read goes to the log)."""
        self._remember(session_id, None)
