"""The ``postgresql://`` store back end (registered in :mod:`ctxrelay.storage.spec`)."""
from __future__ import annotations

from typing import Any

from ctxrelay.storage.postgres.connection import Database
from ctxrelay.storage.postgres.migrations import migrate
from ctxrelay.storage.spec import StoreSpec

__all__ = ["PostgresBackend"]


class PostgresBackend:
    """Opens the parts of a store kept in one PostgreSQL schema.

    The schema is migrated at open.  ``map_size`` means nothing here and is
    ignored; ``max_turn_bytes`` is the transcript's limit, as for LMDB.
    """

    def __init__(self, spec: StoreSpec, *, map_size: int | None = None,
                 max_turn_bytes: int | None = None) -> None:
        self.spec = spec
        self.db = Database(spec.text)
        try:
            migrate(self.db)
        except BaseException:
            self.db.close()
            raise
        self._max_turn_bytes = max_turn_bytes

    def open_transcript(self) -> Any:
        from ctxrelay.storage.postgres.transcript import PgTranscript
        return PgTranscript(self.db, max_turn_bytes=self._max_turn_bytes)

    def open_turnlog(self) -> Any:
        from ctxrelay.storage.postgres.turnlog import PgTurnLog
        return PgTurnLog(self.db)

    def open_warm(self) -> Any:
        from ctxrelay.storage.postgres.warm import PgWarm
        return PgWarm(self.db)

    def open_scratch(self) -> Any:
        from ctxrelay.storage.postgres.scratch import PgScratch
        return PgScratch(self.db)

    def open_facts(self) -> Any:
        from ctxrelay.storage.postgres.facts import open_fact_store
        return open_fact_store(self.db)

    def open_rolling(self, *, capacity_entries: int, capacity_bytes: int) -> Any:
        # The rolling log is rebuildable: a process-local one is correct (each
        # relay rebuilds its rings from the transcript when they lag).
        from ctxrelay.storage.rolling import MemoryRollingLog
        return MemoryRollingLog(capacity_entries=capacity_entries,
                                capacity_bytes=capacity_bytes)

    def has(self, part: str) -> bool:
        table = {"turnlog": "turnlog_progress", "warm": "warm_artifacts",
                 "scratch": "scratch_entries", "facts": "ckf_config"}.get(part)
        if table is None:
            return False
        return self.db.read(lambda cur: cur.execute(
            f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0])

    def close(self) -> None:
        self.db.close()
