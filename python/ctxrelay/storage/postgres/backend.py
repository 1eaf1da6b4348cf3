"""The ``postgresql://`` store back end (registered in :mod:`ctxrelay.storage.spec`)."""
from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ctxrelay.storage.postgres.connection import Database, read_generation
from ctxrelay.storage.postgres.migrations import migrate
from ctxrelay.storage.spec import StoreSpec

__all__ = ["PostgresBackend", "PinnableDatabase", "open_fact_store"]

T = TypeVar("T")

#: The parts :meth:`PinnableDatabase.pinned` reads with the generation (the parts
#: an assembly asks about every time and that are usually absent).
_PINNED_PARTS = {"warm": "warm_artifacts", "scratch": "scratch_entries"}


class PinnableDatabase(Database):
    """A :class:`Database` whose generation a thread can pin for a short read.

    Inside :meth:`pinned`, this thread's reads of the store's generation (the
    transcript's and the turn log's ``write_generation``: one counter) and the
    presence checks of the parts in :data:`_PINNED_PARTS` answer from one
    statement made when the block opened, instead of one round trip each: an
    assembly asks for them five to seven times, which on a loaded machine cost
    more than the rest of its reads.  They are what the store was when the block
    opened -- as if those reads had all been made then; every other read stays
    live.  A write by this thread (any use of a connection other than a read)
    ends the pin, so what this thread writes it reads back at once.
    """

    def __init__(self, url: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        self._pins = threading.local()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        if getattr(self._pins, "depth", 0):
            self._pins.depth += 1
            try:
                yield
            finally:
                self._pins.depth -= 1
            return
        parts = ", ".join(f"EXISTS (SELECT 1 FROM {t})" for t in _PINNED_PARTS.values())
        row = self.read(lambda cur: cur.execute(
            f"SELECT generation, {parts} FROM store_generation").fetchone())
        self._pins.state = (row[0], dict(zip(_PINNED_PARTS, row[1:])))
        self._pins.depth = 1
        try:
            yield
        finally:
            self._pins.depth = 0
            self._pins.state = None

    def _pin(self) -> tuple[int, dict[str, bool]] | None:
        return getattr(self._pins, "state", None)

    def has_pinned(self, part: str) -> bool | None:
        """Whether ``part`` was present when this thread's pin was made (None: no pin)."""
        state = self._pin()
        return None if state is None else state[1].get(part)

    def read(self, fn: Callable[[Any], T]) -> T:
        state = self._pin()
        if state is not None and fn is read_generation:
            return state[0]             # type: ignore[return-value]
        self._pins.reading = True
        try:
            return super().read(fn)
        finally:
            self._pins.reading = False

    @contextmanager
    def connection(self, *, autocommit: bool = False, writes: bool = False) -> Iterator[Any]:
        if not getattr(self._pins, "reading", False):
            self._pins.state = None     # a write (or a transaction) ends this thread's pin
        with super().connection(autocommit=autocommit, writes=writes) as conn:
            yield conn


class PostgresBackend:
    """Opens the parts of a store kept in one PostgreSQL schema.

    The schema is migrated at open.  ``map_size`` means nothing here and is
    ignored; ``max_turn_bytes`` is the transcript's limit, as for LMDB.
    """

    def __init__(self, spec: StoreSpec, *, map_size: int | None = None,
                 max_turn_bytes: int | None = None) -> None:
        self.spec = spec
        self.db = PinnableDatabase(spec.text)
        try:
            migrate(self.db)
        except BaseException:
            self.db.close()
            raise
        self._max_turn_bytes = max_turn_bytes
        try:
            # Read at open, with the migrations' connection warm: a part opened
            # later (the Redis tail, mid-request) then needs no round trip for it.
            self._identity = self._read_identity()
        except BaseException:
            self.db.close()
            raise

    def identity(self) -> str:
        """The store's id, the same for every spelling of its URL (see
        :meth:`ctxrelay.storage.interfaces.backend.Backend.identity`): a digest of the
        random id made with the schema (migration 8), the database's name and the
        schema's.  The names are in it so that a copy of the schema restored into
        another database or schema (``pg_dump``) is another store: two stores
        that shared an id and a Redis prefix would read each other's tails, and a
        tail that ends at the reader's turn count is served.  Read once, at open."""
        return self._identity

    def _read_identity(self) -> str:
        uid, database = self.db.read(lambda cur: cur.execute(
            "SELECT id, current_database() FROM store_id").fetchone())
        ident = f"postgresql:{uid}:{database}:{self.db.schema}"
        return hashlib.sha256(ident.encode("utf-8")).hexdigest()[:16]

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

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """See :class:`PinnableDatabase` (an assembly's first stage runs inside)."""
        with self.db.pinned():
            yield

    def has(self, part: str) -> bool:
        pinned = self.db.has_pinned(part)
        if pinned is not None:
            return pinned
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
