"""The turn log: what ctxrelay derives from each turn, kept beside the transcript.

Contract (every back end; ``tests/storage/conformance/test_turnlog.py``)
-------------------------------------------------------------------------
Ids
    Records are keyed by (session id, turn id) of the transcript.  Topic
    threads are ``"T<n>"`` with n = 1, 2, ... per session in the order they
    start, each with a label unique in its session.
Same derivation
    Every back end derives through :mod:`ctxrelay.storage.turnlog_derivation`,
    so the same turns and embedder give the same thread ids, labels and
    records on every back end.
Incremental and idempotent
    ``sync(transcript, session, embedder)`` derives the turns appended since
    the last sync (returns how many; 0 when up to date), so calling it again
    changes nothing.  ``recompute`` drops the session's records and derives
    them all again (e.g. after changing the embedder).  A sync with an
    embedder other than the one the session was derived with raises
    :class:`~ctxrelay.errors.InvalidArgumentError` (recompute instead).
Ordering
    ``threads`` in thread number order; ``recent_threads(n)`` the n most
    recently started, newest first; a thread's ``turn_ids`` ascending;
    ``dense_window`` oldest first; ``nearest`` best first.
Atomicity
    Each chunk a sync derives (its turns' records, threads and progress)
    commits as one transaction: a crash leaves whole turns derived, and the
    next sync goes on from there.
Errors
    :class:`~ctxrelay.errors.UnknownSessionError` (sync of a session the
    transcript does not have), :class:`~ctxrelay.errors.UnknownThreadError`
    (``thread``/``set_thread_state`` of an id the session has not got),
    InvalidArgumentError (a turn not derived yet for ``set_references``),
    StoreFullError, StoreError
    (closed), CorruptStoreError.
Durable and rebuildable
    Everything here is derived from the transcript and the embedder, so all
    of it can be rebuilt with ``recompute``; only hand-set thread states
    (``set_thread_state``) and recorded references are inputs of their own,
    and they are kept until a recompute drops them.  ``inputs(session)``
    returns those inputs (a copy of the store derives the rest again at the
    target and re-applies them: ``ctxrelay migrate``).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from ctxrelay.storage.turnlog_derivation import DerivedTurn, ThreadInfo
    from ctxrelay.text.threads import ThreadBook

__all__ = ["TurnLogStore"]


@runtime_checkable
class TurnLogStore(Protocol):
    """Derived per-turn fields: vectors, topic threads, entities, references."""

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...

    def write_generation(self) -> int | None:
        """A number that moves with every committed write to the turn log (and may
        move with other writes to the store); equal numbers mean nothing was
        written in between, so a reader may keep what it derived.  None once closed."""

    # -- deriving ----------------------------------------------------------
    def sync(self, transcript: Any, session_id: str, embedder: Any, *,
             progress: bool = False) -> int:
        """Derive the turns added since the last sync; returns how many."""

    def recompute(self, transcript: Any, session_id: str, embedder: Any, *,
                  progress: bool = True) -> int:
        """Drop the session's derived records and derive them all again."""

    def coverage(self, session_id: str) -> tuple[int, int, int]:
        """(turns derived, per-turn records held, vectors held); consistent when
        all three are equal."""

    def model_id(self, session_id: str) -> str | None:
        """The embedder the session was derived with (None: not derived yet)."""

    # -- per turn ---------------------------------------------------------------
    def derived(self, session_id: str, turn_id: int) -> "DerivedTurn | None":
        """A turn's thread, entities, references and tool calls (None: not derived)."""

    def derived_many(self, session_id: str,
                     turn_ids: Iterable[int]) -> dict[int, "DerivedTurn"]:
        """The records of the derived turns among ``turn_ids`` (the others left out),
        in one read: what ``derived`` gives for each, for callers that would
        otherwise ask turn by turn (one round trip on a server back end)."""

    def vectors(self, session_id: str, turn_ids: Iterable[int]) -> dict[int, "np.ndarray"]:
        """The vectors of the derived turns among ``turn_ids``."""

    def nearest(self, session_id: str, vec: "np.ndarray", *, k: int,
                before: int) -> list[tuple[int, float]]:
        """The ``k`` turns before ``before`` most similar to ``vec``, best first."""

    def dense_window(self, session_id: str) -> tuple["np.ndarray", "np.ndarray"]:
        """(turn ids, vectors) of the latest derived turns (a bounded window)."""

    def set_references(self, session_id: str, turn_id: int, references: list[int]) -> None:
        """Record the turns a message resolved its references to."""

    # -- topic threads ------------------------------------------------------------
    def thread_book(self, session_id: str, thresholds: dict[str, float]) -> "ThreadBook":
        """The candidate threads of the session's next user turn, most recently
        active first (what the thread rules place a new message among)."""

    def next_label(self, session_id: str, text: str) -> tuple[str, str]:
        """The id and label a new thread started by ``text`` would get now."""

    def active_thread(self, session_id: str) -> str | None: ...

    def threads(self, session_id: str, transcript: Any = None) -> list["ThreadInfo"]: ...

    def recent_threads(self, session_id: str, n: int) -> list["ThreadInfo"]: ...

    def thread(self, session_id: str, thread_id: str, transcript: Any = None) -> "ThreadInfo":
        """One thread; with ``transcript`` its state is derived from its latest turns."""

    def set_thread_state(self, session_id: str, thread_id: str, *,
                         established: list[str] | None = None,
                         open_questions: list[str] | None = None,
                         user_constraints: list[str] | None = None) -> None:
        """Set fields of a thread's state by hand: a field given replaces the
        derived one from now on, a field not given stays as it was."""

    def inputs(self, session_id: str) -> dict[str, Any]:
        """What callers set rather than the derivation: ``{"thread_states": {thread
        id: the fields set by hand}, "references": {turn id: turn ids}}`` (threads
        and turns without any left out)."""
