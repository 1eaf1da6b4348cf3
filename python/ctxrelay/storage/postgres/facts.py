"""The knowledge fabric's facts in PostgreSQL + pgvector (a :class:`FactStorage`).

Tables (migration 6): ``ckf_facts`` (one row per fact: its record as JSON, the
columns a query filters on, the vector in a pgvector ``vector`` column, access
counts and community), ``ckf_namespaces`` (the embedded store's namespace
record, and the row writers lock), ``ckf_edges``, ``ckf_changes`` (the change
feed), ``ckf_sources``, ``ckf_postings`` (BM25) and ``ckf_config``.  Keys are a
unique index on (namespace, key); seqs come from the sequence ``ckf_fact_seq``.

Reads of one call run in one ``REPEATABLE READ`` read-only transaction (a
consistent state); a write locks its namespace's row, so writers of a
namespace take turns across processes, and commits everything or nothing.

The ANN index stays in each process (hnswlib, :mod:`ctxrelay.knowledge.vectors`),
kept current from the change feed: what a checkpoint records (``saved_gen``,
the tuned ``ef``, the churn since a rebuild) describes *this process's* index,
so it is kept with the process's snapshot files in its slot
(:mod:`ctxrelay.storage.postgres.annslot`), not in the database, and the feed
is pruned only past :data:`FEED_KEEP` entries behind a checkpoint (a process
further behind rebuilds its index from the stored vectors, as the contract
allows).  Why not pgvector's HNSW index for the searches: docs/storage.md
has the measurement.
"""
from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ctxrelay.errors import StoreError
from ctxrelay.storage.common.facts import FactWrites, SnapshotReads, configured
from ctxrelay.storage.interfaces.facts import (
    Checkpoint,
    FactReader,
    NamespaceState,
    Saver,
    UnknownFactError,
    Written,
)
from ctxrelay.storage.postgres.annslot import AnnSlot
from ctxrelay.storage.postgres.factview import PgFactView
from ctxrelay.storage.postgres.factwrite import PgFactWriter

__all__ = ["PgFacts", "FEED_KEEP"]

T = TypeVar("T")

#: change-feed entries kept behind a checkpoint, for the other processes' indexes
FEED_KEEP = 100_000
#: (seq, fact id) pairs remembered per store per process
ID_CACHE_ENTRIES = 1_000_000


@dataclass
class _Local:
    """What this process's checkpoints recorded for one namespace."""

    saved_gen: int = 0
    ef: int | None = None
    churn_base: int = 0          # the namespace's ``changed`` at this process's last rebuild


def _vector_setup() -> Callable[[Any], None]:
    try:
        from pgvector.psycopg import register_vector
    except ImportError as exc:
        raise StoreError(f"facts on PostgreSQL need the pgvector package ({exc}); install "
                         "it with: pip install 'ctxrelay[postgres]'") from None
    return register_vector


class PgFacts(SnapshotReads, FactWrites):
    """The facts of one store's schema (``db``: its :class:`Database`, migrated).

    A new store needs ``model_id`` and ``dim``; an existing one is opened with
    ``model_id=None`` or the same model and dimension
    (:class:`EmbeddingModelMismatchError` otherwise).  ``owns_db`` closes the
    database with the facts.
    """

    name: ClassVar[str] = "postgresql"

    def __init__(self, db: Any, *, model_id: str | None = None, dim: int | None = None,
                 embedder_name: str | None = None, m: int = 16, ef_construction: int = 200,
                 random_seed: int = 100, owns_db: bool = False) -> None:
        self.db = db
        self._owns_db = owns_db
        self._closed = False
        self._lock = threading.RLock()
        self._local: dict[int, _Local] = {}
        #: this thread's shared read transaction (:meth:`reading`), if one is open
        self._shared = threading.local()
        #: shared reads open at once in this process: at most half the pool, so a
        #: thread that holds the index's lock always finds a connection for its
        #: snapshot (a shared read holds its connection between steps, while it
        #: may wait for that lock); past it a retrieval reads step by step
        self._share_slots = threading.BoundedSemaphore(
            max(1, int(getattr(getattr(db, "pool", None), "max_size", 2)) // 2))
        #: namespace name -> id (fixed when the namespace is made): reads skip a lookup
        self.nids: dict[str, int] = {}
        #: (namespace id, seq) <-> (namespace id, fact id), fixed when a fact is added
        self.id_at: dict[tuple[int, int], str] = {}
        self.seq_of: dict[tuple[int, str], int] = {}
        db.on_connection(_vector_setup())
        wanted = {"model_id": model_id, "dim": None if dim is None else int(dim),
                  "embedder": embedder_name, "m": int(m),
                  "ef_construction": int(ef_construction), "random_seed": int(random_seed)}
        self.config: Mapping[str, Any] = db.run(lambda cur: self._init_config(cur, wanted))
        self.model_id: str = self.config["model_id"]
        self.dim: int = int(self.config["dim"])
        #: this process's ANN snapshot directory (storage/postgres/annslot.py)
        self.slot = AnnSlot(self.config.get("store_id"))
        self.ann_dir = self.slot.dir
        for nid, st in self.slot.read().items():
            self._local[nid] = _Local(int(st["gen"]), st.get("ef"), int(st.get("churn_base", 0)))

    def _init_config(self, cur: Any, config: dict[str, Any]) -> dict[str, Any]:
        row = cur.execute("SELECT config FROM ckf_config").fetchone()
        if row is None and config["model_id"] is None:
            raise StoreError(f"no CKF in {self.db.url} yet; create it with an embedder "
                             "(add a fact, or FactStore(..., embedder='hashing'))")
        if row is None:
            config = dict(config, store_id=uuid.uuid4().hex)      # names the ANN slots
            cur.execute("INSERT INTO ckf_config (config) VALUES (%s) ON CONFLICT DO NOTHING",
                        (json.dumps(config),))
            row = cur.execute("SELECT config FROM ckf_config").fetchone()
        return configured(f"in {self.db.url}", json.loads(row[0]), config)

    @staticmethod
    def exists(db: Any) -> bool:
        """Whether ``db``'s schema holds a CKF already."""
        return db.read(lambda cur: cur.execute(
            "SELECT EXISTS (SELECT 1 FROM ckf_config)").fetchone()[0])

    @property
    def location(self) -> str:
        return self.db.url

    @property
    def closed(self) -> bool:
        return self._closed or self.db.closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.slot.close()
        if self._owns_db:
            self.db.close()

    def _live(self) -> None:
        if self.closed:
            raise StoreError(f"the CKF of {self.db.url} is closed; open the store again")

    def remember(self, nid: int, seq: int, fact_id: str) -> None:
        """Keep a fact's (seq, id) pair (both fixed for good; bounded memory)."""
        if len(self.id_at) >= ID_CACHE_ENTRIES:
            self.id_at.clear()
            self.seq_of.clear()
        self.id_at[(nid, seq)] = fact_id
        self.seq_of[(nid, fact_id)] = seq

    def state_of(self, ns: str, nid: int, info: Mapping[str, Any]) -> NamespaceState:
        """The namespace's state: the stored record with this process's checkpoint."""
        local = self._local.get(nid) or _Local()
        return NamespaceState(
            name=ns, id=nid, gen=info["gen"], saved_gen=local.saved_gen,
            churn=info["changed"] - local.churn_base, pending=info["adds"],
            edges=info["edges"], last_mod=info["last_mod"], counts=dict(info["counts"]),
            communities=len(info["labels"]), ef=local.ef)

    def version(self) -> int:
        self._live()
        return self.db.read(lambda cur: cur.execute(
            "SELECT version FROM ckf_config").fetchone()[0])

    # -- reads ---------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[None]:
        """The snapshots this thread takes inside the block share one ``REPEATABLE
        READ`` read-only transaction (opened by the first of them, committed when
        the block ends), so a retrieval that reads the facts in several steps costs
        one ``BEGIN``/``COMMIT`` and one namespace lookup, not one per step -- and
        sees one state throughout, where separate snapshots could each see another.
        Nested blocks join the outer one; past half the pool's connections in
        shared reads, a block reads step by step as without it."""
        if getattr(self._shared, "scope", None) is not None \
                or not self._share_slots.acquire(blocking=False):
            yield
            return
        try:
            scope = self._shared.scope = _SharedRead()
            try:
                yield
            except BaseException:
                self._shared.scope = None
                scope.end(ok=False)
                raise
            self._shared.scope = None
            scope.end(ok=True)
        finally:
            self._share_slots.release()

    def snapshot(self, fn: Callable[[FactReader], T]) -> T:
        """``fn(view)`` in one ``REPEATABLE READ`` read-only transaction (this thread's
        shared one inside :meth:`reading`).  Pipelined: the ``BEGIN`` travels with the
        first query, so a read of one statement costs two round trips (its query, the
        ``COMMIT``), not four."""
        self._live()
        scope = getattr(self._shared, "scope", None)
        if scope is not None:
            return fn(scope.view_of(self))
        with self.db.connection(autocommit=True) as conn, conn.cursor(binary=True) as cur:
            done = False
            try:
                with conn.pipeline():
                    cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    value = fn(PgFactView(self, cur))
                    cur.execute("COMMIT")
                done = True
                return value
            finally:
                if not done:
                    _rollback(conn)

    # the reads of the contract: SnapshotReads, one snapshot() each

    # -- writes --------------------------------------------------------------------------

    def _transaction(self, ns: str, body: Callable[[PgFactWriter], T], *,
                     create: bool = True) -> T:
        """``body(writer)`` in one transaction holding the namespace's row; the store's
        fact version moves with it."""
        self._live()

        def run(cur: Any) -> T:
            w = PgFactWriter(self, cur, ns, create=create)
            value = body(w)
            cur.execute("UPDATE ckf_config SET version = version + 1")
            return value
        with self.db.connection() as conn, conn.cursor(binary=True) as cur:
            return run(cur)

    def _write(self, ns: str, body: Callable[[PgFactWriter], Any], *,
               create: bool = True) -> Written[Any]:
        def run(w: PgFactWriter) -> tuple[Written[Any], PgFactWriter]:
            if w.ns_info is None:
                return Written(body(w), ns), w
            value = body(w)
            w.save_info()
            info = w.ns_info
            return Written(value, ns, w.gen_before, info["gen"], w.stamp_before,
                           info["last_mod"], tuple(w.touched)), w
        done, w = self._transaction(ns, run, create=create)
        for seq, fact_id in w.added:              # committed: ids of these seqs for good
            self.remember(w.ns_id, seq, fact_id)
        return done

    def set_status(self, ns: str, ids: Sequence[str], status: str, *,
                   now: float) -> Written[int]:
        def body(w: PgFactWriter) -> int:
            if w.ns_info is None:
                if ids:
                    raise UnknownFactError(f"no fact {ids[0]!r} in namespace {ns!r}")
                return 0
            return w.set_status(ids, status, now=now)
        return self._write(ns, body, create=False)

    def expire(self, ns: str, ids: Sequence[str], *, now: float) -> Written[int]:
        return self._write(ns, lambda w: 0 if w.ns_info is None else w.expire(ids, now=now),
                           create=False)

    def record_access(self, ns: str, ids: Sequence[str], *, now: float) -> None:
        def body(w: PgFactWriter) -> None:
            if w.ns_info is None:
                raise UnknownFactError(f"namespace {ns!r} has no facts")
            w.record_access(ids, now=now)
        # (the namespace row is not locked for a count: no FOR UPDATE needed, but
        # taking it keeps one code path; accesses are not on the hot path of a read)
        self._transaction(ns, body, create=False)

    def save_communities(self, ns: str, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], *,
                         now: float) -> Written[bool]:
        payload = json.dumps([sorted(membership.items()),
                              sorted((int(c), list(k)) for c, k in keywords.items())])
        digest = hashlib.sha256(payload.encode()).hexdigest()
        return self._write(ns, lambda w: w.save_communities(membership, keywords, digest,
                                                            now=now))

    def restore_namespace(self, data: Any, record: Callable[[Any, float], dict[str, Any]]
                          ) -> None:
        """Write a copied namespace (:mod:`ctxrelay.storage.factcopy`) in one transaction."""
        self._write(data.name, lambda w: w.restore(data, record))

    def checkpoint(self, ns: str, save: Saver) -> Checkpoint | None:
        """``save`` runs in a read snapshot, not under the namespace's lock: what it
        records describes this process's index only (see the module doc), and a
        rebuild takes minutes at 100k facts, which no writer of the namespace, in any
        process, should wait for.  The feed is pruned afterwards, in its own
        transaction, up to :data:`FEED_KEEP` entries behind the checkpoint."""
        def body(view: PgFactView) -> tuple[Checkpoint, int, int] | None:
            state = view.namespace(ns)
            if state is None:
                return None
            return save(view, state), state.id, view.info(ns)["changed"]

        with self._lock:
            found = self.snapshot(body)
            if found is None:
                return None
            done, nid, changed = found
            if done.gen > FEED_KEEP:
                self.db.run(lambda cur: cur.execute(
                    "DELETE FROM ckf_changes WHERE ns_id = %s AND gen <= %s",
                    (nid, done.gen - FEED_KEEP)))
            local = self._local.setdefault(nid, _Local())
            local.saved_gen = done.gen
            local.ef = None if done.ef is None else int(done.ef)
            if done.rebuilt:
                local.churn_base = changed
            self.slot.write({n: {"gen": v.saved_gen, "ef": v.ef, "churn_base": v.churn_base}
                             for n, v in self._local.items()})
            return done


class _SharedRead:
    """The open transaction of a :meth:`PgFacts.reading` block (opened on first use)."""

    def __init__(self) -> None:
        self.view: PgFactView | None = None
        self._held = ExitStack()           # the pooled connection and its cursor
        self._pipeline = ExitStack()
        self._conn: Any = None

    def view_of(self, store: PgFacts) -> PgFactView:
        if self.view is None:
            try:
                conn = self._conn = self._held.enter_context(
                    store.db.connection(autocommit=True))
                cur = self._held.enter_context(conn.cursor(binary=True))
                self._pipeline.enter_context(conn.pipeline())
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                # The records of the namespaces this process has read before travel
                # with the first query (the view takes them from this cursor when it
                # first needs one): one round trip fewer per retrieval.
                names = sorted(store.nids)
                early = None
                if names:
                    early = self._held.enter_context(conn.cursor(binary=True))
                    early.execute("SELECT name, id, info FROM ckf_namespaces "
                                  "WHERE name = ANY(%s)", (names,))
            except BaseException:
                self.end(ok=False)
                raise
            self.view = PgFactView(store, cur, early=(early, names) if names else None)
        return self.view

    def end(self, *, ok: bool) -> None:
        """Commit (``ok``) or roll back, and give the connection back."""
        if self._conn is None:
            return
        try:
            if ok and self.view is not None:
                self.view.cur.execute("COMMIT")
                self._pipeline.close()          # the pipeline's sync: COMMIT's answer
                return
            try:
                self._pipeline.close()
            except Exception:                   # the caller's error is the one to see
                pass
            _rollback(self._conn)
        except BaseException:
            _rollback(self._conn)
            raise
        finally:
            self._conn = None
            self._held.close()


def _rollback(conn: Any) -> None:
    """End a failed snapshot's transaction (the caller's error is the one to see)."""
    try:
        if conn.info.transaction_status != 0:          # not IDLE
            conn.execute("ROLLBACK")
    except Exception:           # a broken connection: the pool discards it
        pass
