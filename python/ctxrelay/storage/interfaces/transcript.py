"""The transcript: every turn of every session, kept whole, with its text index.

Contract (every back end; ``tests/storage/conformance/test_transcript.py``)
---------------------------------------------------------------------------
Ids
    A session id is a ``str`` of 1..256 characters without control or
    surrogate characters (else :class:`~ctxrelay.errors.InvalidSessionIdError`,
    also for a non-``str``).  Turn ids are 1-based and contiguous per session:
    the n-th turn appended to a session has id n, allocated when its write
    commits, so concurrent appenders (threads or processes) never share or
    skip an id.
Ordering
    ``history``/``iter_turns``/``turns`` return turns in id order (``turns``:
    in the order asked); ``last(n)`` the newest ``n`` in chronological order;
    ``sessions()`` sorted by session id; ``search``/``rank`` best score
    first, ties to the newer turn (the larger id).
Idempotency by key
    ``append(..., key=k)`` stores at most one turn per (session, k): a retry
    with the same role, content, name, tool_call_id and metadata returns the
    first turn's id and writes nothing (even once the session is archived);
    the same key with anything else raises
    :class:`~ctxrelay.errors.KeyConflictError`.  ``turn_for_key`` finds it.
Atomicity
    An append (the turn, its index postings, counters and key record), an
    ``append_many`` (its turns, and the session with ``create``), an
    ``import_jsonl`` (the session and all its turns) and ``repair_derived``
    each commit as one transaction: all or nothing.  A write that fails
    (validation, a full disk, a full store) leaves nothing behind.  Readers
    see committed writes only.
Never rewritten
    No method deletes a session or rewrites or deletes a turn; ``archive_session``
    only stops appends (:class:`~ctxrelay.errors.ArchivedSessionError`).
Errors
    :class:`~ctxrelay.errors.UnknownSessionError` (no such session),
    :class:`~ctxrelay.errors.UnknownTurnError` (no such turn),
    :class:`~ctxrelay.errors.SessionExistsError`, ``InvalidRoleError``,
    ``InvalidContentError``, ``InvalidMetadataError``,
    ``InvalidArgumentError`` (other bad arguments), ``TurnTooLargeError``
    (content over ``max_turn_bytes``, refused before anything is written),
    ``ImportFormatError``
    (naming the bad line), :class:`~ctxrelay.errors.StoreFullError` (nothing
    was written), :class:`~ctxrelay.errors.StoreError` (closed or read-only
    store), :class:`~ctxrelay.errors.CorruptStoreError` (damaged data).
Durable and rebuildable
    Sessions and turns are the durable truth (committed = survives a crash).
    The text index, the per-session counters (``stats``) and the key records
    are derived: ``check_derived`` compares them with the turns and
    ``repair_derived`` rebuilds them from intact turns, never the reverse.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

if TYPE_CHECKING:
    from ctxrelay.storage.lmdb.transcript import DerivedReport
    from ctxrelay.types import Hit, SessionInfo, SessionStats, Turn

__all__ = ["Transcript"]


@runtime_checkable
class Transcript(Protocol):
    """Sessions and their turns, append-only (see the module doc for the contract)."""

    @property
    def path(self) -> str:
        """Where the store lives (a directory for embedded stores)."""

    @property
    def closed(self) -> bool: ...

    @property
    def tokenizer_name(self) -> str:
        """The tokenizer that counts ``Turn.tokens`` of new turns."""

    @property
    def max_turn_bytes(self) -> int:
        """The largest turn content this store takes, in UTF-8 bytes."""

    def check_size(self, content: str) -> None:
        """Raise TurnTooLargeError for content over :attr:`max_turn_bytes`."""

    def write_generation(self) -> int | None:
        """A number that moves with every committed write by any process (None:
        closed).  Equal numbers mean nothing was written in between."""

    def close(self) -> None:
        """Release the store (idempotent); later calls raise StoreError."""

    # -- sessions ----------------------------------------------------------
    def create_session(self, session_id: str, *,
                       metadata: dict[str, Any] | str | None = None) -> "SessionInfo":
        """Create an empty session; SessionExistsError if the id is taken."""

    def session(self, session_id: str) -> "SessionInfo": ...

    def has_session(self, session_id: str) -> bool: ...

    def sessions(self) -> list["SessionInfo"]:
        """Every session, sorted by id."""

    def archive_session(self, session_id: str) -> "SessionInfo":
        """Stop appends to the session (reads go on); idempotent."""

    # -- turns ---------------------------------------------------------------
    def append(self, session_id: str, role: str, content: str, *,
               name: str | None = None, tool_call_id: str | None = None,
               metadata: dict[str, Any] | str | None = None,
               timestamp: str | datetime | None = None,
               key: str | None = None) -> int:
        """Append one turn, return its id (see Idempotency by key)."""

    def append_many(self, session_id: str, turns: Iterable[dict[str, Any]], *,
                    create: bool = False,
                    session_metadata: dict[str, Any] | str | None = None) -> list[int]:
        """Append several turns (dicts of :meth:`append`'s arguments) in one
        transaction, all or none, creating the session in it with ``create``;
        keyed retries are not stored again.  Returns the ids in order."""

    def turn(self, session_id: str, turn_id: int) -> "Turn": ...

    def turns(self, session_id: str, turn_ids: Iterable[int]) -> list["Turn"]:
        """The turns with these ids, in the order given (UnknownTurnError names
        the first missing one)."""

    def turn_for_key(self, session_id: str, key: str) -> int | None: ...

    def turn_count(self, session_id: str) -> int: ...

    def history(self, session_id: str, start: int = 1,
                end: int | None = None) -> list["Turn"]:
        """Turns ``start..end`` inclusive (``end`` None: to the last), in order."""

    def iter_turns(self, session_id: str, start: int = 1,
                   end: int | None = None) -> Iterator["Turn"]:
        """Like :meth:`history`, lazily; turns appended after the call are not
        included."""

    def last(self, session_id: str, n: int) -> list["Turn"]:
        """The newest ``n`` turns, oldest first."""

    # -- the text index ---------------------------------------------------------
    def search(self, session_id: str, query: str, *, k: int = 10,
               roles: Iterable[str] | None = None,
               max_postings: int | None = ...) -> list["Hit"]:
        """The ``k`` best turns for ``query`` (BM25), best first, ties newest."""

    def rank(self, session_id: str, query: str, *, k: int = 10,
             max_postings: int | None = ...) -> list[tuple[int, float]]:
        """Like :meth:`search` without loading the turns: (turn id, score) pairs."""

    def stats(self, session_id: str) -> "SessionStats":
        """Totals of the session's turns (turns, bytes, tokens, by role, times)."""

    # -- moving sessions -----------------------------------------------------------
    def export_jsonl(self, session_id: str,
                     dest: str | os.PathLike[str] | TextIO | None = None) -> str | None:
        """The session as JSON Lines (header, then every turn); returned when
        ``dest`` is None, else written (a path atomically)."""

    def import_jsonl(self, source: str | os.PathLike[str] | TextIO, *,
                     session_id: str | None = None) -> str:
        """Create a session from :meth:`export_jsonl` output; all or nothing."""

    # -- derived data ----------------------------------------------------------------
    def check_derived(self, session_id: str) -> "DerivedReport":
        """Compare the derived records (index, counters, key records) with the
        turns; writes nothing."""

    def repair_derived(self, session_id: str) -> "DerivedReport":
        """Rebuild the derived records from the turns if they disagree (one
        transaction); damaged turns are reported, never rewritten."""
