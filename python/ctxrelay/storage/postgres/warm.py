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

from ctxrelay.errors import SessionExistsError
from ctxrelay.storage.postgres.part import PgPart
from ctxrelay.storage.common.warm import (Pending, WarmArtifact, WarmBase, check_range,
                                          no_artifact, no_version, parse_artifact, pending_of)
from ctxrelay.storage.validation import check_int as _check_int
from ctxrelay.storage.validation import check_session_id as _check_session_id

__all__ = ["PgWarm"]


class PgWarm(WarmBase, PgPart):
    """A :class:`~ctxrelay.storage.interfaces.warm.WarmArtifacts` in PostgreSQL."""

    WHAT = "the warm store"

    def __init__(self, db: Any, transcript: Any = None) -> None:
        super().__init__(db)
        self._transcript = transcript

    # -- publishing ------------------------------------------------------------------

    def _publish(self, pending: Pending, created: str) -> WarmArtifact:
        return self._run(lambda cur: self._publish_cur(cur, pending, created))

    def _publish_cur(self, cur: Any, pending: Pending, created: str) -> WarmArtifact:
        # Publishes of one session take turns (versions and keys are per session).
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"ctxrelay-warm:{pending.session_id}",))
        key = None if pending.key is None else pending.key.encode("utf-8")
        if key is not None:
            row = cur.execute("SELECT record, key_digest FROM warm_artifacts "
                              "WHERE session_id = %s AND key = %s",
                              (pending.session_id, key)).fetchone()
            if row is not None:
                return self._check_replay(pending, parse_artifact(row[0]), bytes(row[1]))
        version = cur.execute(
            "SELECT coalesce(max(version), 0) + 1 FROM warm_artifacts "
            "WHERE session_id = %s AND start_turn = %s AND end_turn = %s",
            (pending.session_id, pending.start, pending.end)).fetchone()[0]
        record = pending.record(version, created).decode("utf-8")
        cur.execute("INSERT INTO warm_artifacts (session_id, start_turn, end_turn, version, "
                    "record, key, key_digest) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (pending.session_id, pending.start, pending.end, version, record, key,
                     None if key is None else pending.digest))
        return parse_artifact(record)

    # -- reading -----------------------------------------------------------------------

    def get(self, session_id: str, start: int, end: int,
            version: int | None = None) -> WarmArtifact:
        session_id = _check_session_id(session_id)
        start, end = check_range(start, end)
        if version is not None:
            version = _check_int(version, "version", minimum=1)

        def read(cur: Any) -> WarmArtifact:
            cur.execute("SELECT max(version) OVER (), version, record FROM warm_artifacts "
                        "WHERE session_id = %s AND start_turn = %s AND end_turn = %s "
                        "ORDER BY version DESC", (session_id, start, end))
            rows = cur.fetchall()
            if not rows:
                raise no_artifact(session_id, start, end)
            newest = rows[0][0]
            wanted = newest if version is None else version
            found = [record for _, v, record in rows if v == wanted]
            if not found:
                raise no_version(session_id, start, end, newest, wanted)
            return parse_artifact(found[0])
        return self._read(read)

    def versions(self, session_id: str, start: int, end: int) -> list[WarmArtifact]:
        session_id = _check_session_id(session_id)
        start, end = check_range(start, end)
        rows = self._read(lambda cur: cur.execute(
            "SELECT record FROM warm_artifacts WHERE session_id = %s AND start_turn = %s "
            "AND end_turn = %s ORDER BY version", (session_id, start, end)).fetchall())
        return [parse_artifact(r[0]) for r in rows]

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
        return [parse_artifact(r[0]) for r in rows]

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
