"""The embedded fact store of the CKF: LMDB (:class:`FactStorage`'s ``crp-native`` back end).

One LMDB environment (``<ckf>/db``) on the shared :class:`LmdbStore` base holds
facts, keys, vectors, edges, communities, sources, the term index, the expiry
index and the change feed; the byte layouts are in
:mod:`ctxrelay.storage.lmdb.factcodec`, reads in :mod:`.factview`, the steps
of a write in :mod:`.factwrite`.  Several processes may open one directory
(LMDB serialises their writes); each write is one transaction.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from ctxrelay.errors import StoreError
from ctxrelay.storage.common.facts import FactWrites, SnapshotReads, configured
from ctxrelay.storage.interfaces.facts import (Checkpoint, Fact, FactReader, Saver,
                                               UnknownFactError, Written)
from ctxrelay.storage.lmdb import factcodec as codec
from ctxrelay.storage.lmdb import factrepair
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.lmdb.factcodec import U64, RecordCache
from ctxrelay.storage.lmdb.factview import FactView, StoreContext
from ctxrelay.storage.lmdb.factwrite import FactWriter
from ctxrelay.storage.lmdb.textindex import TextIndex

__all__ = ["LmdbFacts", "BACKFILL_BATCH"]

T = TypeVar("T")

BACKFILL_BATCH = 512          # records read per transaction building an old store's expiry index


class LmdbFacts(SnapshotReads, FactWrites, LmdbStore):
    """Facts of a CKF in one LMDB directory (``path``, e.g. ``<store>/ckf/db``).

    A new store needs ``model_id`` and ``dim`` (and records ``embedder_name`` and
    the hnsw build parameters in its config); an existing one is opened with
    ``model_id=None`` or with the same model id and dimension
    (:class:`EmbeddingModelMismatchError` otherwise).
    """

    KIND = "fact store"
    FORMAT = codec.FORMAT
    DB_NAMES = codec.DB_NAMES
    #: rebuilt from the intact fact records by :meth:`repair_indexes` (edges: by
    #: :meth:`relink` from the vectors; members: by the fabric's recluster);
    #: ``ctxrelay check --repair`` drops damaged ones first
    DERIVED_DBS = frozenset({*factrepair.INDEX_DBS, b"members", b"edges",
                             *TextIndex.db_names(codec.TERMS_PREFIX)})
    name: ClassVar[str] = "crp-native"

    def __init__(self, path: str | os.PathLike[str], *, model_id: str | None = None,
                 dim: int | None = None, embedder_name: str | None = None, m: int = 16,
                 ef_construction: int = 200, random_seed: int = 100,
                 map_size: int = 1 << 30) -> None:
        super().__init__(path, map_size=map_size)
        self._lock = threading.RLock()
        try:
            # TextIndex opens its own three databases (dupsort + dupfixed postings),
            # which the base's DB_NAMES cannot declare: it needs the environment.
            terms = self.write(lambda txn: TextIndex(self._env, txn=txn,
                                                     prefix=codec.TERMS_PREFIX))
            self.name_handles(terms.handles())
            wanted = {"model_id": model_id, "dim": None if dim is None else int(dim),
                      "embedder": embedder_name, "m": int(m),
                      "ef_construction": int(ef_construction), "random_seed": int(random_seed)}
            self.config: Mapping[str, Any] = self.write(lambda txn: self._init_config(txn, wanted))
        except BaseException:
            self.close()
            raise
        self.model_id: str = self.config["model_id"]
        self.dim: int = int(self.config["dim"])
        self.terms = terms
        self.cache = RecordCache()
        #: what every reader and writer of this store shares (dbs, term index, caches)
        self.context = StoreContext(self.dbs, terms, self.cache, self.model_id, self.dim)

    def _init_config(self, txn: Any, config: dict[str, Any]) -> dict[str, Any]:
        meta = self.dbs[b"meta"]
        raw = txn.get(b"config", db=meta)
        if raw is None and config["model_id"] is None:
            raise StoreError(f"no CKF at {self.path} yet; create it with an embedder "
                             "(FactStore(path, embedder='hashing'))")
        if raw is None:
            txn.put(b"config", json.dumps(config).encode(), db=meta)
            txn.put(b"next_seq", U64.pack(1), db=meta)
            txn.put(b"next_ns", U64.pack(1), db=meta)
            return config
        return configured(f"at {self.path}", json.loads(raw), config)

    @staticmethod
    def exists(path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` already holds a fact store."""
        return os.path.exists(os.path.join(os.fspath(path), "data.mdb"))

    @property
    def location(self) -> str:
        return self.path

    def version(self) -> int:
        # a read transaction's id is the last committed write's
        return self.read(lambda txn: txn.id())

    # -- reads ---------------------------------------------------------------------------

    def snapshot(self, fn: Callable[[FactReader], T]) -> T:
        ctx = self.context
        # a read transaction's id names the committed state it sees (see RecordCache)
        return self.read(lambda txn: fn(FactView(ctx, txn, gen=txn.id())))

    def due(self, ns: str, *, now: float) -> list[str]:
        self._index_expiry(ns)      # an old store builds its expiry index on first use
        return self.snapshot(lambda v: v.due(ns, now))

    # -- derived indexes: check and repair (issue 15) ----------------------------------------

    def index_problems(self) -> list[str]:
        """Where the ids, keys, hidden, expiry and term indexes disagree with the
        intact fact records (see :mod:`.factrepair`)."""
        return self.read(lambda txn: factrepair.index_problems(
            txn, self.dbs, self.terms, self.framed).problems)

    def repair_indexes(self) -> list[str]:
        """Rewrite those indexes from the intact fact records, in one write
        transaction; returns what was repaired.  Fact records are never changed."""
        def run(txn: Any) -> list[str]:
            report = factrepair.index_problems(txn, self.dbs, self.terms, self.framed)
            factrepair.apply(txn, self.dbs, self.terms, report)
            return report.problems
        with self._lock:
            return self.write(run)

    def relink(self, ns: str, *, knn: int, threshold: float) -> int:
        """Rebuild the namespace's similarity graph from its stored vectors, in one
        write transaction (a repair of damaged edges); returns the edges stored."""
        return self._write(ns, lambda w: factrepair.relink(w, knn, threshold),
                           create=False).value

    def forget_communities(self, ns: str) -> None:
        """Make the next recluster of ``ns`` write every membership record again
        (it skips an unchanged partition; a repair needs the dropped records back)."""
        def body(w: FactWriter) -> None:
            w.ns_info["cdigest"] = ""
        self._write(ns, body, create=False)

    # -- writes --------------------------------------------------------------------------

    def _write(self, ns: str, body: Callable[[FactWriter], Any], *,
               create: bool = True) -> Written[Any]:
        """Run ``body(writer)`` in one write transaction and save the namespace record."""
        ctx = self.context

        def run(txn: Any) -> Written[Any]:
            w = FactWriter(ctx, txn, ns, create=create)
            value = body(w)
            w.save_info()
            info = w.ns_info
            return Written(value, ns, w.gen_before, info["gen"], w.stamp_before,
                           info["last_mod"], tuple(w.touched))

        with self._lock:
            return self.write(run)

    def _exists(self, ns: str) -> bool:
        return self.namespace(ns) is not None

    def set_status(self, ns: str, ids: Sequence[str], status: str, *,
                   now: float) -> Written[int]:
        with self._lock:
            if not self._exists(ns):
                if ids:
                    raise UnknownFactError(f"no fact {ids[0]!r} in namespace {ns!r}")
                return Written(0, ns)
            return self._write(ns, lambda w: w.set_status(ids, status, now=now))

    def expire(self, ns: str, ids: Sequence[str], *, now: float) -> Written[int]:
        with self._lock:
            if not self._exists(ns):
                return Written(0, ns)
            return self._write(ns, lambda w: w.expire(ids, now=now))

    def record_access(self, ns: str, ids: Sequence[str], *, now: float) -> None:
        ctx = self.context

        def run(txn: Any) -> None:
            w = FactWriter(ctx, txn, ns, create=False)
            if w.ns_info is None:
                raise UnknownFactError(f"namespace {ns!r} has no facts")
            w.record_access(ids, now=now)
        with self._lock:
            self.write(run)

    def save_communities(self, ns: str, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], *,
                         now: float) -> Written[bool]:
        payload = json.dumps([sorted(membership.items()),
                              sorted((int(c), list(k)) for c, k in keywords.items())])
        digest = hashlib.sha256(payload.encode()).hexdigest()
        return self._write(ns, lambda w: w.save_communities(membership, keywords, digest,
                                                            now=now))

    def checkpoint(self, ns: str, save: Saver) -> Checkpoint | None:
        def body(w: FactWriter) -> Checkpoint | None:
            if w.ns_info is None:
                return None
            done = save(w, w.state)
            info = w.ns_info
            if done.ef is None:
                info.pop("ef", None)
            else:
                info["ef"] = int(done.ef)
            w.prune(done.gen)
            info["saved_gen"] = done.gen
            if done.rebuilt:
                info["changed"] = 0
            return done

        ctx = self.context

        def run(txn: Any) -> Checkpoint | None:
            w = FactWriter(ctx, txn, ns, create=False)
            done = body(w)
            if done is not None:
                w.save_info()
            return done

        with self._lock:
            return self.write(run)

    def _index_expiry(self, ns: str) -> None:
        """Build the expiry index of a namespace made before there was one.

        In transactions of ``BACKFILL_BATCH`` records, so a request waits for one
        batch at most; writes made meanwhile keep the entries of the facts they
        touch, so the index is whole once the last batch sets ``expiry``.
        """
        ctx = self.context
        info = self.snapshot(lambda v: v.info(ns))
        start: int | None = None if info is None or info.get("expiry") else 0
        while start is not None:
            def run(txn: Any, start: int = start) -> int | None:
                return FactWriter(ctx, txn, ns, create=False).index_expiry(start, BACKFILL_BATCH)
            with self._lock:
                start = self.write(run)
            if start is not None:
                time.sleep(0)       # let waiting threads run between batches
