"""Warm artifacts: versioned summaries of a session's turn ranges.

Contract (every back end; ``tests/storage/conformance/test_warm.py``)
----------------------------------------------------------------------
Ids
    An artifact is identified by (session id, start, end), turns
    ``start..end`` inclusive, 1-based, ``start <= end``
    (:class:`~ctxrelay.errors.InvalidRangeError` otherwise); its
    ``artifact_id`` is ``f"{session}:{start}-{end}"``.  Each publish of a
    range adds the next version (1, 2, ...), allocated when it commits, so
    concurrent publishers never share a version.
Ordering
    ``latest`` and ``covering`` by start, then end; ``versions`` oldest first.
Idempotency by key
    ``publish(..., key=k)`` makes at most one artifact per (session, k): a
    retry with the same range, content, producer and metadata returns the
    artifact it made and writes nothing; anything else raises
    :class:`~ctxrelay.errors.ArtifactKeyConflictError`.
Atomicity
    A publish (the artifact, the latest-version record, the key record) is
    one transaction; every argument is checked before it (a failed publish
    writes nothing).  With a ``transcript`` the session must exist and have
    turn ``end`` (:class:`~ctxrelay.errors.UnknownSessionError`,
    :class:`~ctxrelay.errors.UnknownTurnError`).
Never rewritten
    Artifacts are written once; every version stays readable.
Errors
    InvalidRangeError, :class:`~ctxrelay.errors.InvalidArtifactError` (bad
    summary, lists or producer), :class:`~ctxrelay.errors.UnknownArtifactError`
    (no such range or version), ArtifactKeyConflictError, StoreFullError,
    StoreError (closed or read-only), CorruptStoreError.
Copying (``ctxrelay migrate``)
    ``sessions()`` lists the sessions holding artifacts; ``restore`` writes
    artifacts read from another store as they are (range, version, creation
    time, content, producer, metadata, key) in one transaction, so their
    idempotency keys keep working; it refuses
    (:class:`~ctxrelay.errors.SessionExistsError`) a version or key the
    store already holds, before writing anything.
Durable and rebuildable
    The artifacts are durable; the latest-version and key records are
    derived from them: ``check()`` compares, ``check(repair=True)`` rewrites
    the derived records from the artifacts.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ctxrelay.storage.lmdb.warm import WarmArtifact

__all__ = ["WarmArtifacts", "TranscriptLike"]


@runtime_checkable
class TranscriptLike(Protocol):
    """What publish needs of a transcript to validate a range."""

    def has_session(self, session_id: str) -> bool: ...
    def turn_count(self, session_id: str) -> int: ...


@runtime_checkable
class WarmArtifacts(Protocol):
    """Versioned warm artifacts of every session (see the module doc)."""

    @property
    def closed(self) -> bool: ...

    def close(self) -> None: ...

    def publish(self, session_id: str, start: int, end: int, summary: str, *,
                decisions: Iterable[str] = (), facts: Iterable[str] = (),
                unresolved: Iterable[str] = (), entities: Iterable[str] = (),
                producer: str = "api", metadata: dict[str, Any] | str | None = None,
                key: str | None = None,
                transcript: TranscriptLike | None = None) -> "WarmArtifact":
        """Store the next version of the artifact of turns ``start..end``."""

    def get(self, session_id: str, start: int, end: int,
            version: int | None = None) -> "WarmArtifact":
        """One version (default: the latest) of the artifact of ``start..end``."""

    def versions(self, session_id: str, start: int, end: int) -> list["WarmArtifact"]:
        """Every version of the range, oldest first ([] if none)."""

    def latest(self, session_id: str) -> list["WarmArtifact"]:
        """The latest version of every range of the session, by start then end."""

    def covering(self, session_id: str, turn_id: int) -> list["WarmArtifact"]:
        """Latest versions whose range contains ``turn_id``, by start then end."""

    def sessions(self) -> list[str]:
        """The ids of the sessions holding artifacts, sorted."""

    def restore(self, artifacts: Iterable["WarmArtifact"]) -> int:
        """Write copies of ``artifacts`` (read from another store) as they are, in one
        transaction; returns how many (see Copying)."""

    def check(self, *, repair: bool = False) -> tuple[str, ...]:
        """The derived records' disagreements with the artifacts (rewritten
        from the artifacts with ``repair``)."""
