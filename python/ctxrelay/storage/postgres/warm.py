"""Warm artifacts in PostgreSQL (table ``warm_artifacts``, migration 3).

Every version of every range is one row, written once.  The latest version
of a range is its largest ``version`` (no separate record, so nothing to go
stale: :meth:`PgWarm.check` has nothing to repair), and an idempotency key
is a unique index on (session, key).  Publishes of one session take turns on
a transaction-scoped advisory lock, so two processes never allocate one
version twice.  Validation, the artifact's JSON record and its variants are
the embedded store's (:mod:`ctxrelay.storage.lmdb.warm`).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ctxrelay.errors import (ArtifactKeyConflictError, SessionExistsError, StoreError,
                             UnknownArtifactError)
from ctxrelay.storage.lmdb.warm import (WarmArtifact, _check_int, _check_items,
                                        _check_optional_str, _check_producer, _check_range,
                                        _check_session_id, _check_text, _check_transcript,
                                        _normalise_metadata, _normalise_timestamp, _Pending,
                                        _parse_artifact, _require_transcript_like,
                                        pending_of, variants)

__all__ = ["PgWarm"]


class PgWarm:
    """A :class:`~ctxrelay.storage.interfaces.warm.WarmArtifacts` in PostgreSQL."""

    def __init__(self, db: Any, transcript: Any = None) -> None:
        self._db = db
        self._transcript = transcript
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or self._db.closed

    def close(self) -> None:
        self._closed = True

    @property
    def path(self) -> str:
        return self._db.url

    @property
    def transcript(self) -> Any:
        return self._transcript

    def _live(self) -> None:
        if self.closed:
            raise StoreError(f"the warm store of {self._db.url} is closed; open the store again")

    def _run(self, fn: Any) -> Any:
        self._live()
        return self._db.run(fn)

    def _read(self, fn: Any) -> Any:
        self._live()
        return self._db.read(fn)

    # -- publishing ------------------------------------------------------------------

    def publish(self, session_id: str, start: int, end: int, summary: str, *,
                decisions: Iterable[str] = (), facts: Iterable[str] = (),
                unresolved: Iterable[str] = (), entities: Iterable[str] = (),
                producer: str = "api", metadata: dict[str, Any] | str | None = None,
                key: str | None = None, transcript: Any = None) -> WarmArtifact:
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
        pending = _Pending(
            session_id=session_id, start=start, end=end,
            summary=_check_text(summary, "summary"),
            lists={"decisions": _check_items(decisions, "decisions"),
                   "facts": _check_items(facts, "facts"),
                   "unresolved": _check_items(unresolved, "unresolved"),
                   "entities": _check_items(entities, "entities")},
            producer=_check_producer(producer),
            metadata=_normalise_metadata(metadata),
            key=_check_optional_str(key, "key", empty_ok=False))
        source = transcript if transcript is not None else self._transcript
        if source is not None:
            _require_transcript_like(source)
            _check_transcript(source, session_id, end)
        created = _normalise_timestamp(None)
        return self._run(lambda cur: self._publish(cur, pending, created))

    def _publish(self, cur: Any, pending: _Pending, created: str) -> WarmArtifact:
        # Publishes of one session take turns (versions and keys are per session).
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"ctxrelay-warm:{pending.session_id}",))
        key = None if pending.key is None else pending.key.encode("utf-8")
        if key is not None:
            row = cur.execute("SELECT record, key_digest FROM warm_artifacts "
                              "WHERE session_id = %s AND key = %s",
                              (pending.session_id, key)).fetchone()
            if row is not None:
                return self._replayed(pending, _parse_artifact(row[0]), bytes(row[1]))
        version = cur.execute(
            "SELECT coalesce(max(version), 0) + 1 FROM warm_artifacts "
            "WHERE session_id = %s AND start_turn = %s AND end_turn = %s",
            (pending.session_id, pending.start, pending.end)).fetchone()[0]
        record = pending.record(version, created).decode("utf-8")
        cur.execute("INSERT INTO warm_artifacts (session_id, start_turn, end_turn, version, "
                    "record, key, key_digest) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (pending.session_id, pending.start, pending.end, version, record, key,
                     None if key is None else pending.digest))
        return _parse_artifact(record)

    @staticmethod
    def _replayed(pending: _Pending, stored: WarmArtifact, digest: bytes) -> WarmArtifact:
        if digest != pending.digest:
            differs = [name for name, ours, theirs in (
                ("range", (pending.start, pending.end), (stored.start, stored.end)),
                ("content", pending.content_hash, stored.content_hash),
                ("producer", pending.producer, stored.producer),
                ("metadata", pending.metadata, stored.metadata)) if ours != theirs]
            raise ArtifactKeyConflictError(
                f"key {pending.key!r} was already used in session "
                f"{pending.session_id!r} for turns {stored.start}\u2013{stored.end} "
                f"v {stored.version} with a different {', '.join(differs) or 'identity'}; "
                "use a new key for a new artifact (or no key to add a version)")
        return stored

    # -- reading -----------------------------------------------------------------------

    def get(self, session_id: str, start: int, end: int,
            version: int | None = None) -> WarmArtifact:
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
        if version is not None:
            version = _check_int(version, "version", minimum=1)

        def read(cur: Any) -> WarmArtifact:
            cur.execute("SELECT max(version) OVER (), version, record FROM warm_artifacts "
                        "WHERE session_id = %s AND start_turn = %s AND end_turn = %s "
                        "ORDER BY version DESC", (session_id, start, end))
            rows = cur.fetchall()
            if not rows:
                raise UnknownArtifactError(
                    f"session {session_id!r} has no warm artifact for turns "
                    f"{start}\u2013{end}; publish one first, or pick a range from "
                    "latest(session_id)")
            newest = rows[0][0]
            wanted = newest if version is None else version
            found = [record for _, v, record in rows if v == wanted]
            if not found:
                raise UnknownArtifactError(
                    f"the warm artifact of turns {start}\u2013{end} of session "
                    f"{session_id!r} has versions 1..{newest}; version {wanted} does "
                    "not exist, ask for one in that range (or version=None for the latest)")
            return _parse_artifact(found[0])
        return self._read(read)

    def versions(self, session_id: str, start: int, end: int) -> list[WarmArtifact]:
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
        rows = self._read(lambda cur: cur.execute(
            "SELECT record FROM warm_artifacts WHERE session_id = %s AND start_turn = %s "
            "AND end_turn = %s ORDER BY version", (session_id, start, end)).fetchall())
        return [_parse_artifact(r[0]) for r in rows]

    def latest(self, session_id: str) -> list[WarmArtifact]:
        session_id = _check_session_id(session_id)
        return self._latest(session_id, None)

    def covering(self, session_id: str, turn_id: int) -> list[WarmArtifact]:
        session_id = _check_session_id(session_id)
        turn_id = _check_int(turn_id, "turn_id", minimum=1)
        return self._latest(session_id, turn_id)

    def _latest(self, session_id: str, turn_id: int | None) -> list[WarmArtifact]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT DISTINCT ON (start_turn, end_turn) record FROM warm_artifacts "
            "WHERE session_id = %s AND (%s::bigint IS NULL OR "
            "(start_turn <= %s AND end_turn >= %s)) "
            "ORDER BY start_turn, end_turn, version DESC",
            (session_id, turn_id, turn_id, turn_id)).fetchall())
        return [_parse_artifact(r[0]) for r in rows]

    def variants(self, artifact: WarmArtifact) -> list[dict[str, str]]:
        return variants(artifact)

    # -- copying (ctxrelay migrate) ------------------------------------------------------

    def sessions(self) -> list[str]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT DISTINCT session_id FROM warm_artifacts ORDER BY session_id").fetchall())
        return sorted(r[0] for r in rows)

    def restore(self, artifacts: Iterable[WarmArtifact]) -> int:
        """Write copies of ``artifacts`` as they are (versions, creation times, keys) in
        one transaction; SessionExistsError (nothing written) if a version or key is
        held already."""
        rows = []
        for artifact in artifacts:
            pending = pending_of(artifact)
            key = None if pending.key is None else pending.key.encode("utf-8")
            rows.append((pending.session_id, pending.start, pending.end, artifact.version,
                         pending.record(artifact.version, artifact.created).decode("utf-8"),
                         key, None if key is None else pending.digest))

        def run(cur: Any) -> int:
            for sid in sorted({r[0] for r in rows}):
                cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                            (f"ctxrelay-warm:{sid}",))
            cur.execute("CREATE TEMP TABLE warm_copy (LIKE warm_artifacts) ON COMMIT DROP")
            with cur.copy("COPY warm_copy (session_id, start_turn, end_turn, version, "
                          "record, key, key_digest) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            held = cur.execute(
                "SELECT c.session_id, c.start_turn, c.end_turn, c.version, c.key "
                "FROM warm_copy c JOIN warm_artifacts w ON w.session_id = c.session_id AND "
                "((w.start_turn, w.end_turn, w.version) = (c.start_turn, c.end_turn, c.version)"
                " OR w.key = c.key) LIMIT 1").fetchone()
            if held is not None:
                raise SessionExistsError(
                    f"this warm store already holds version {held[3]} of "
                    f"{held[0]}:{held[1]}-{held[2]} or its key; copy into a store without "
                    "the session's artifacts. Nothing was written")
            cur.execute("INSERT INTO warm_artifacts SELECT * FROM warm_copy")
            return len(rows)
        return self._run(run)

    def check(self, *, repair: bool = False) -> tuple[str, ...]:
        """Nothing here is derived (the latest version is computed, keys live on the
        artifact's row), so there is never anything to repair."""
        self._live()
        return ()
