"""The ``postgresql://`` store back end (registered in :mod:`ctxrelay.storage.spec`)."""
from __future__ import annotations

from typing import Any

from ctxrelay.storage.postgres.connection import Database
from ctxrelay.storage.postgres.migrations import migrate
from ctxrelay.storage.spec import StoreSpec

__all__ = ["PostgresBackend", "open_fact_store"]


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


def open_fact_store(db: Any, embedder: Any = None) -> Any:
    """The :class:`~ctxrelay.knowledge.fabric.FactStore` of a PostgreSQL store: its
    facts in ``db``, the ANN index in this process.  The embedder is the one the
    store was built with (a new store takes ``embedder`` or the default)."""
    # (lazily: storage does not load knowledge until facts are asked for)
    from ctxrelay.knowledge.fabric import FactStore
    from ctxrelay.storage.interfaces.facts import EmbeddingModelMismatchError
    from ctxrelay.storage.postgres.facts import PgFacts
    from ctxrelay.text.embed import default_name, get_embedder

    if embedder is None and PgFacts.exists(db):
        storage = PgFacts(db)
        try:
            name = storage.config.get("embedder")
            if not name:
                raise EmbeddingModelMismatchError(
                    f"the CKF in {db.url} was built with a custom embedder "
                    f"({storage.model_id!r}); open it with FactStore(..., embedder=...)")
            emb = get_embedder(name)
        except BaseException:
            storage.close()
            raise
    else:
        name = default_name() if embedder is None else \
            embedder if isinstance(embedder, str) else None       # None: an embedder object
        emb = embedder if name is None else get_embedder(name)
        storage = PgFacts(db, model_id=emb.model_id, dim=int(emb.dim), embedder_name=name)
    try:
        return FactStore(storage.ann_dir, storage=storage, embedder=emb)
    except BaseException:
        storage.close()
        raise
