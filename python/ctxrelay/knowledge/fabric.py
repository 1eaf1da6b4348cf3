"""The Contextual Knowledge Fabric (CKF): Tier P, persistent knowledge (CRP-SPEC-009).

A :class:`FactStore` keeps facts (SPEC-009 §2) with their embeddings, a
similarity-edge graph, Leiden communities and a term index, and retrieves them
five ways (SPEC-035 §2.1, §2.4):

- :meth:`FactStore.lookup_key` / :meth:`FactStore.fact` -- exact key → fact;
- :meth:`FactStore.search_terms` -- BM25 over the term → fact index;
- :meth:`FactStore.search_ann` / :meth:`FactStore.facts` -- hnswlib ANN;
- :meth:`FactStore.cdr` -- Coverage-Differential Retrieval (SPEC-024, with
  SPEC-027 §3's recency factor), formulas in :mod:`ctxrelay.knowledge.cdr`;
- :meth:`FactStore.cdgr` -- the graph walk for connector facts (SPEC-025).

CRP owns the logic, the operator owns the data (SPEC-038 §1).  :class:`FactStore`
is a facade over parts with one concern each:

- the durable facts: a :class:`ctxrelay.storage.interfaces.facts.FactStorage`
  (default: :class:`ctxrelay.storage.lmdb.facts.LmdbFacts` in ``<path>/db``);
- the in-memory side kept current with it (:mod:`.live`): hnswlib indexes
  (:mod:`.vectors`, snapshots in ``<path>/hnsw``) and walk structures (:mod:`.walk`);
- CDR/CDGR scoring (:mod:`.retrieval`), communities (:mod:`.communities`),
  ingestion and chunking (:mod:`.ingest`), the TTL sweep (:mod:`.lifecycle`),
  input checks and defaults (:mod:`.inputs`), result records (:mod:`.records`).
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ctxrelay.errors import InvalidArgumentError, StoreError
from ctxrelay.knowledge import cdr as _cdr
from ctxrelay.knowledge import communities as _communities
from ctxrelay.knowledge import lifecycle
from ctxrelay.knowledge.ingest import Chunk, IngestSourceError, chunk_text, documents, ingest
from ctxrelay.knowledge.inputs import (DEFAULT_NAMESPACE, SOURCE_TYPES, Encoder, check_content,
                                       check_count, check_fraction, check_importance, check_key,
                                       check_metadata, check_namespace, check_source_type,
                                       check_status, fact_records, is_uuid, progress_bar,
                                       sha256, unit_rows)
from ctxrelay.knowledge.live import LiveIndex
from ctxrelay.knowledge.records import (CKFStats, Community, CoverageEntry, FactIds, HeadArrays,
                                        Hit, IngestReport, ScoredFact)
from ctxrelay.knowledge.retrieval import Retriever
from ctxrelay.storage.interfaces.facts import (RETRIEVABLE, STATUSES, TRANSITIONS,
                                               EmbeddingModelMismatchError, Fact,
                                               FactKeyExistsError, FactStorage, InvalidFactError,
                                               SourceRecord, StatusTransitionError,
                                               UnknownFactError)
from ctxrelay.storage.lmdb.facts import LmdbFacts
from ctxrelay.text.embed import default_name, get_embedder

__all__ = [
    "FactStore", "FactIds", "HeadArrays",
    "Fact", "ScoredFact", "Hit", "Community", "CoverageEntry", "IngestReport",
    "SourceRecord", "CKFStats", "Chunk", "chunk_text",
    "UnknownFactError", "FactKeyExistsError", "InvalidFactError", "StatusTransitionError",
    "EmbeddingModelMismatchError", "IngestSourceError",
    "STATUSES", "RETRIEVABLE", "TRANSITIONS", "SOURCE_TYPES", "DEFAULT_NAMESPACE",
]

KNN = 20                      # SPEC-009 §5.2: neighbours looked at per fact
MIN_COMMUNITY_SIZE = 3        # SPEC-009 §5.3
RECLUSTER_EVERY = 50          # SPEC-009 §5.5: new facts between automatic reclusterings

_stores: dict[str, "FactStore"] = {}
_stores_lock = threading.RLock()


def open_lmdb_storage(path: str, embedder: Any, **kw: Any) -> tuple[LmdbFacts, Any]:
    """Open (or create) the LMDB storage of the CKF at ``path`` and the embedder that
    goes with it: the one named in the storage's config when ``embedder`` is None."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise StoreError(f"CKF path {path} is a file; pass a directory (created "
                         "if missing), e.g. <store>/ckf")
    db = os.path.join(path, "db")
    if embedder is None and LmdbFacts.exists(db):
        storage = LmdbFacts(db, **kw)
        try:
            name = storage.config.get("embedder")
            if not name:
                raise EmbeddingModelMismatchError(
                    f"the CKF at {path} was built with a custom embedder "
                    f"({storage.model_id!r}); pass it: FactStore(path, embedder=...)")
            emb = get_embedder(name)
            if emb.model_id != storage.model_id:
                raise EmbeddingModelMismatchError(
                    f"the CKF at {path} holds vectors of {storage.model_id!r} but "
                    f"the embedder {name!r} now is {emb.model_id!r}; pass an embedder "
                    f"with model id {storage.model_id!r}, or re-ingest into a new store")
        except BaseException:
            storage.close()
            raise
        return storage, emb
    if embedder is None or isinstance(embedder, str):
        name = embedder or default_name()
        emb = get_embedder(name)
    else:
        name, emb = None, embedder
    return LmdbFacts(db, model_id=emb.model_id, dim=int(emb.dim), embedder_name=name,
                     **kw), emb



def _one_read(storage: Any) -> Any:
    """The steps of one retrieval in one read of the storage where it offers that
    (PostgreSQL: one transaction and its round trips instead of one per step)."""
    reading = getattr(storage, "reading", None)
    return reading() if reading is not None else contextlib.nullcontext()

class FactStore:
    """The CKF of one directory; see the module doc and docs/ckf.md.

    ``embedder`` is a name for :func:`ctxrelay.text.embed.get_embedder` or an
    embedder object; by default the one the store was built with (a new store
    takes :func:`ctxrelay.text.embed.default_name`).  ``storage`` is another
    :class:`FactStorage` to keep the facts in (default: LMDB under ``path``).
    ``edge_threshold`` defaults to the embedder's ``thresholds["edge"]``.
    SPEC-024's relevance gate (0.55) and SPEC-025's connector relevance floor
    (0.30) are written for sentence embeddings whose edge threshold is SPEC-009's
    0.60; by default both are scaled by ``edge_threshold / 0.60`` so they keep
    their meaning under the embedder's calibration (hashing: 0.275 and 0.15).
    ``clock`` returns the current time in epoch seconds (tests inject one).

    ``ef_search`` (SPEC-009 §3.2: 100) is the search-time ceiling.  With
    ``auto_ef`` a write links its facts (``knn`` nearest) in an index of 5,000
    facts or more with the smallest ef (32, 48, 64, 80 or the ceiling) whose
    top 10 agree with a far wider search on 98 % of the results, re-tuned at
    every index snapshot; for queries unlike anything stored pass
    ``auto_ef=False`` (see :meth:`ctxrelay.knowledge.graph.VectorIndex.tune_ef`).
    Reads (:meth:`search_ann` and the CDR/CDGR candidates) search with
    ``max(ef_search, 4·k)`` and order by similarity then fact id, whatever the
    tuning, so back ends and processes name the same facts
    (:mod:`ctxrelay.knowledge.vectors` says when that holds).
    """

    def __init__(self, path: str | os.PathLike[str], *, embedder: Any = None,
                 storage: FactStorage | None = None, knn: int = KNN,
                 edge_threshold: float | None = None, min_relevance: float | None = None,
                 min_connector_relevance: float | None = None,
                 recluster_every: int | None = RECLUSTER_EVERY, resolution: float = 1.0,
                 leiden_iterations: int = 10, seed: int = 42,
                 min_community_size: int = MIN_COMMUNITY_SIZE, m: int = 16,
                 ef_construction: int = 200, ef_search: int = 100, random_seed: int = 100,
                 threads: int = 1, clock: Callable[[], float] = time.time,
                 auto_ef: bool = True) -> None:
        self._path = os.path.abspath(os.fspath(path))
        self._key = os.path.realpath(self._path)
        self._clock = clock
        self._closed = False
        self.knn = check_count("knn", knn, 0, 1000)
        self.recluster_every = None if recluster_every is None else \
            check_count("recluster_every", recluster_every, 1)
        self.resolution = float(resolution)
        self.leiden_iterations = check_count("leiden_iterations", leiden_iterations, -1)
        self.seed = int(seed)
        self.min_community_size = check_count("min_community_size", min_community_size, 1)
        with _stores_lock:
            found = _stores.get(self._key)
            if found is not None and not found.closed:
                raise StoreError(f"the CKF at {self._path} is already open in this process; "
                                 "use FactStore.open(path) to share it")
            if storage is None:
                storage, self.embedder = open_lmdb_storage(
                    self._path, embedder, m=m, ef_construction=ef_construction, random_seed=random_seed)
            else:
                self.embedder = get_embedder(embedder) if embedder is None or \
                    isinstance(embedder, str) else embedder
                if storage.model_id != self.embedder.model_id:
                    raise EmbeddingModelMismatchError(
                        f"the storage holds vectors of {storage.model_id!r}, the embedder is "
                        f"{self.embedder.model_id!r}; pass the embedder the storage was "
                        "built with")
            try:
                self.live = LiveIndex(storage, os.path.join(self._path, "hnsw"),
                                      ef_search=ef_search, auto_ef=auto_ef, threads=threads)
            except BaseException:
                storage.close()
                raise
            self.storage = storage
            self._encoder = Encoder(self.embedder, storage.dim)
            self._retriever = Retriever(storage, self.live, self._encoder, clock)
            _stores[self._key] = self
        edge = self.embedder.thresholds["edge"] if edge_threshold is None else edge_threshold
        self.edge_threshold = check_fraction("edge_threshold", edge, -1.0, 1.0)
        scale = self.edge_threshold / _cdr.SPEC_EDGE_THRESHOLD
        self.min_relevance = check_fraction(
            "min_relevance", _cdr.CDR_MIN_RELEVANCE * scale if min_relevance is None
            else min_relevance, -1.0, 1.0)
        self.min_connector_relevance = check_fraction(
            "min_connector_relevance", _cdr.MIN_CONNECTOR_RELEVANCE * scale
            if min_connector_relevance is None else min_connector_relevance, 0.0, 1.0)

    @classmethod
    def open(cls, path: str | os.PathLike[str], **kw: Any) -> "FactStore":
        """The one shared store of ``path`` in this process (opened if needed)."""
        key = os.path.realpath(os.path.abspath(os.fspath(path)))
        with _stores_lock:
            found = _stores.get(key)
            if found is not None and not found.closed:
                return found
            return cls(path, **kw)

    @property
    def path(self) -> str:
        return self._path

    @property
    def backend(self) -> FactStorage:
        """The storage (the name it had when it held the ANN index too)."""
        return self.storage

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Save the index snapshots and close (idempotent)."""
        with _stores_lock:
            if self._closed:
                return
            try:
                self.live.close()
            finally:
                self.storage.close()
                self._closed = True
                if _stores.get(self._key) is self:
                    del _stores[self._key]

    def flush(self) -> None:
        """Save every changed index snapshot now."""
        self.live.flush()

    def version(self) -> int:
        """A number that grows with every committed write to the store (a cache of
        anything read from it is current while the number stays)."""
        self._check_open()
        return self.storage.version()

    def set_ef_search(self, ef_search: int) -> None:
        """Search every index with this ``ef_search`` from now on (tuning off)."""
        self.live.set_ef_search(check_count("ef_search", ef_search, 1))

    def __enter__(self) -> "FactStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FactStore({self._path!r}, model_id={self.embedder.model_id!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the CKF at {self._path} is closed; open it again")

    # -- writing ----------------------------------------------------------------------

    def add_fact(self, content: str, *, key: str | None = None, source: str | None = None,
                 importance: float | None = None, ttl: Any = None,
                 namespace: str | None = None, metadata: Mapping[str, Any] | None = None,
                 source_type: str | None = None) -> str:
        """Store one fact; returns its id (a UUID).

        ``key`` names it for :meth:`lookup_key` (unique per namespace).
        ``importance`` and ``ttl`` default by ``source_type`` (default
        ``"user"``: 0.60, never expires); ``ttl`` is an ISO 8601 duration
        (``"P90D"``), seconds, or ``"none"`` for timeless.
        @raise FactKeyExistsError if ``key`` is taken in the namespace.
        """
        return self.add_facts([{"content": content, "key": key, "source": source,
                                "importance": importance, "ttl": ttl, "metadata": metadata,
                                "source_type": source_type}], namespace=namespace)[0]

    def add_facts(self, items: Iterable[str | Mapping[str, Any]], *,
                  namespace: str | None = None, vectors: np.ndarray | None = None,
                  batch_size: int = 1024, progress: bool | None = None) -> list[str]:
        """Store many facts, ``batch_size`` per transaction; returns their ids.

        Each item is a str (the content) or a dict with the keyword arguments
        of :meth:`add_fact` (``content`` required).  ``vectors`` skips the
        embedder: one row per item, from this store's embedder (same model).
        Each batch is all or nothing; a bad item fails the call before any
        batch is written.
        """
        self._check_open()
        ns = check_namespace(namespace)
        records = fact_records(items)
        if vectors is not None:
            vectors = unit_rows(vectors, len(records), self.storage.dim)
        batch_size = check_count("batch_size", batch_size, 1)
        bar = progress_bar(len(records), progress, "adding facts", "fact")
        ids: list[str] = []
        try:
            for lo in range(0, len(records), batch_size):
                chunk = records[lo:lo + batch_size]
                vecs = vectors[lo:lo + batch_size] if vectors is not None else \
                    self._encoder.embed([r["content"] for r in chunk])
                ids += self.live.add_facts(ns, chunk, vecs, knn=self.knn,
                                           threshold=self.edge_threshold, now=self._clock())
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
        self._maybe_recluster(ns)
        return ids

    def update_fact(self, key_or_id: str, *, content: str | None = None,
                    importance: float | None = None, ttl: Any = None,
                    metadata: Mapping[str, Any] | None = None, key: Any = ...,
                    namespace: str | None = None) -> Fact:
        """Change a fact in place (same id).  New content is re-embedded and
        re-linked (SPEC-009 §3.3) and makes a STALE fact ACTIVE again."""
        self._check_open()
        ns = check_namespace(namespace)
        fact = self.fact(key_or_id, namespace=ns)
        changes: dict[str, Any] = {}
        vector = None
        if content is not None:
            text = check_content(content)
            if text != fact.content:
                changes.update(content=text, content_hash=sha256(text))
                vector = self._encoder.embed([text])[0]
        if importance is not None:
            changes["importance"] = check_importance(importance, fact.source_type)
        if ttl is not None:
            changes["ttl"], changes["ttl_seconds"] = _cdr.parse_ttl(ttl)
        if metadata is not None:
            changes["metadata"] = check_metadata(metadata)
        if key is not ...:
            changes["key"] = check_key(key)
        if not changes:
            return fact
        self.live.update_fact(ns, fact.fact_id, changes, vector, knn=self.knn,
                              threshold=self.edge_threshold, now=self._clock())
        return self.storage.get(ns, [fact.fact_id])[0]

    def set_status(self, key_or_id: str | Sequence[str], status: str, *,
                   namespace: str | None = None) -> int:
        """Change the status of one fact (id or key) or of a list of ids; returns how
        many changed.  DELETED erases the content (same as :meth:`delete`).
        @raise StatusTransitionError for a change SPEC-009 §2.2 forbids."""
        self._check_open()
        ns = check_namespace(namespace)
        status = check_status(status)
        ids = [self._resolve_id(x, ns) for x in
               ([key_or_id] if isinstance(key_or_id, str) else list(key_or_id))]
        return self.live.set_status(ns, ids, status, now=self._clock())

    def delete(self, key_or_id: str | Sequence[str], *, namespace: str | None = None) -> int:
        """Erase facts (GDPR, SPEC-009 §8.3): never retrieved again, content gone."""
        return self.set_status(key_or_id, "DELETED", namespace=namespace)

    def expire(self, *, namespace: str | None = None) -> int:
        """Mark ACTIVE facts whose ``ingested_at + ttl`` has passed STALE (SPEC-009 §8.1);
        returns how many (see :mod:`ctxrelay.knowledge.lifecycle`)."""
        self._check_open()
        return lifecycle.sweep(self.live, check_namespace(namespace), now=self._clock())

    def record_access(self, fact_ids: Sequence[str], *, namespace: str | None = None) -> None:
        """Count an envelope inclusion of each fact (does not change the ETag)."""
        self._check_open()
        ids = [fact_ids] if isinstance(fact_ids, str) else list(fact_ids)
        self.storage.record_access(check_namespace(namespace), ids, now=self._clock())

    # -- reading ----------------------------------------------------------------------

    def _resolve_id(self, key_or_id: Any, ns: str) -> str:
        if not isinstance(key_or_id, str) or not key_or_id:
            raise InvalidArgumentError(
                f"pass a fact id (UUID) or key (str), not {key_or_id!r}")
        if is_uuid(key_or_id):
            return key_or_id
        fid = self.storage.lookup_key(ns, key_or_id, any_status=True)
        if fid is None:
            raise UnknownFactError(f"no fact with key {key_or_id!r} in namespace {ns!r}; "
                                   "check the key and the namespace")
        return fid

    def fact(self, key_or_id: str, *, namespace: str | None = None) -> Fact:
        """The fact with this id or key, whatever its status (inspection; retrieval
        methods return ACTIVE and STALE facts only).
        @raise UnknownFactError if the namespace has none."""
        self._check_open()
        ns = check_namespace(namespace)
        found = self.storage.get(ns, [self._resolve_id(key_or_id, ns)])[0]
        if found is None:
            raise UnknownFactError(f"no fact {key_or_id!r} in namespace {ns!r}; check the id "
                                   "and the namespace")
        return found

    def lookup_key(self, key: str, *, namespace: str | None = None) -> Fact | None:
        """The retrievable fact named ``key`` (exact match), or None (SPEC-035 §2.4)."""
        self._check_open()
        ns = check_namespace(namespace)
        if not isinstance(key, str):
            raise InvalidArgumentError(f"key must be a str, not {type(key).__name__}")
        fid = self.storage.lookup_key(ns, key)
        return None if fid is None else self.storage.get(ns, [fid])[0]

    def search_ann(self, query: Any, *, k: int = 10, namespace: str | None = None) -> list[Hit]:
        """The ``k`` nearest retrievable facts by cosine similarity (hnswlib), most
        similar first, equal similarities by fact id: the same facts on every back
        end for the same stored facts (:mod:`ctxrelay.knowledge.vectors` says when
        that holds).  ``query`` is a text or a vector from the store's embedder."""
        self._check_open()
        k = check_count("k", k, 0)
        ns = check_namespace(namespace)
        vec = self._encoder.query(query)
        return [Hit(fid, sim) for fid, sim in self.live.search(ns, vec, k)]

    def search_ahead(self, query: Any) -> None:
        """Run the ANN search the next CDR/CDGR/ANN call with ``query`` will most
        likely ask for, so that it finds the answer ready (see
        :meth:`ctxrelay.knowledge.live.LiveIndex.search_ahead`); results are the
        same either way."""
        self._check_open()
        self.live.search_ahead(self._encoder.query(query))

    def search_terms(self, query: str, *, k: int = 10,
                     namespace: str | None = None) -> list[Hit]:
        """BM25 over the term index (exact word forms; see ctxrelay.storage.lmdb.textindex)."""
        self._check_open()
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, not {type(query).__name__}")
        k = check_count("k", k, 0)
        return [Hit(fid, s) for fid, s in
                self.storage.search_terms(check_namespace(namespace), query, k)]

    def facts(self, query: Any, *, k: int = 10,
              namespace: str | None = None) -> list[ScoredFact]:
        """Semantic search: the ``k`` most similar retrievable facts, score = cosine."""
        ns = check_namespace(namespace)
        hits = self.search_ann(query, k=k, namespace=ns)
        facts = self.storage.get(ns, [h.fact_id for h in hits])
        return [ScoredFact(f, h.score, h.score) for h, f in zip(hits, facts) if f is not None]

    def _gate(self, min_relevance: float | None) -> float:
        return self.min_relevance if min_relevance is None else \
            check_fraction("min_relevance", min_relevance, -1.0, 1.0)

    def cdr(self, query: Any, *, coverage: Any = (), residual: Any = (),
            recent_outputs: Any = (), k: int = 10, novelty: str = "on",
            namespace: str | None = None, min_relevance: float | None = None,
            candidates: int | None = None, now: float | None = None) -> list[ScoredFact]:
        """Coverage-Differential Retrieval (SPEC-024 §7.1 with SPEC-027 §3.3).

        ``coverage``: what prior windows addressed -- texts, ``(text,
        depth_weight)`` pairs or :class:`CoverageEntry`; ``residual``: what
        is still to be addressed; ``recent_outputs``: prior window outputs for
        the 6-gram guard (§5).  ``novelty``: ``"on"`` (SPEC-024), ``"off"``
        (relevance only) or ``"partial"`` (half the coverage penalty).
        Candidates are the ``candidates`` (default ``max(4k, 50)``) nearest
        facts; those below ``min_relevance`` are dropped before scoring (§2.6).
        """
        self._check_open()
        k = check_count("k", k, 0)
        ns = check_namespace(namespace)
        q = self._encoder.query(query)
        win = self._retriever.window(coverage, residual, recent_outputs, novelty, now)
        gate = self._gate(min_relevance)
        pool = max(4 * k, 50) if candidates is None else check_count("candidates", candidates, 1)
        with _one_read(self.storage):
            return self._retriever.rank(q, ns, win, k, gate=gate, pool=pool)

    def cdgr(self, query: Any, *, k: int = 10, hops: int = _cdr.DEFAULT_MAX_HOPS,
             connector_budget: float = _cdr.DEFAULT_CONNECTOR_BUDGET, coverage: Any = (),
             residual: Any = (), recent_outputs: Any = (), novelty: str = "on",
             namespace: str | None = None, min_relevance: float | None = None,
             now: float | None = None) -> list[ScoredFact]:
        """Coverage-Differential Graph Retrieval (SPEC-025), in reading order.

        Anchors: the top ``⌊(1 - connector_budget)·k⌋`` CDR facts.  Connectors:
        facts within ``hops`` edges of at least two anchors, scored
        ``bridge_value · novelty · recency · max(relevance,
        min_connector_relevance)`` (§2.5, SPEC-027 §3.3); the best
        ``k - anchors`` with a positive score are placed next to an anchor
        they bridge (§2.6, :func:`ctxrelay.knowledge.cdr.assemble_order`).  Without
        edges this is CDR (§6).
        """
        self._check_open()
        k = check_count("k", k, 0)
        hops = check_count("hops", hops, 0, 3)
        budget = check_fraction("connector_budget", connector_budget, 0.0, 0.5)
        ns = check_namespace(namespace)
        q = self._encoder.query(query)
        win = self._retriever.window(coverage, residual, recent_outputs, novelty, now)
        if k == 0:
            return []
        with _one_read(self.storage):
            return self._retriever.cdgr(q, ns, win, k, hops=hops, budget=budget,
                                        gate=self._gate(min_relevance),
                                        floor=self.min_connector_relevance)

    # -- communities (SPEC-009 §5) ----------------------------------------------------------

    def _maybe_recluster(self, ns: str) -> None:
        if self.recluster_every is None:
            return
        state = self.storage.namespace(ns)
        if state is not None and state.pending >= self.recluster_every:
            self.recluster(namespace=ns)

    def recluster(self, *, namespace: str | None = None) -> list[Community]:
        """Run Leiden (seeded) on the namespace's similarity graph and relabel.

        Communities smaller than ``min_community_size`` (3) are dissolved:
        their facts have no community.  Ids are 0, 1, ... by size (largest
        first), ties by the earliest fact.  Changes the ETag when the
        partition or the labels change (SPEC-009 §5.5).
        """
        self._check_open()
        ns = check_namespace(namespace)
        ids, edges, weights = self.storage.snapshot(
            lambda view: _communities.similarity_graph(view, ns))
        assign = _communities.partition(ids, edges, weights, resolution=self.resolution,
                                        iterations=self.leiden_iterations, seed=self.seed,
                                        min_size=self.min_community_size)
        keywords = self.storage.snapshot(lambda view: _communities.keywords(view, ns, assign))
        self.live.save_communities(ns, assign, keywords, now=self._clock())
        return self.communities(namespace=ns)

    def communities(self, *, namespace: str | None = None) -> list[Community]:
        """The namespace's communities as of the last :meth:`recluster`."""
        self._check_open()
        ns = check_namespace(namespace)
        return self.storage.snapshot(lambda view: _communities.communities(view, ns))

    # -- state, stats -------------------------------------------------------------------------

    def etag(self, *, namespace: str | None = None) -> str:
        """The namespace's CKF state hash (SPEC-009 §6), the source of the ETag.

        SHA-256 over the embedding model id, the namespace, a digest of every
        fact's ``fact_id:content_hash:status:modified_at`` (a sum of SHA-256s
        mod 2^256, kept up to date by each write) and a digest of the
        communities.  Every mutation changes it (each one advances the fact's
        ``modified_at``); reads and access counts do not.
        """
        self._check_open()
        return self.storage.state_hash(check_namespace(namespace))

    def namespaces(self) -> list[str]:
        self._check_open()
        return self.storage.namespaces()

    def stats(self) -> CKFStats:
        self._check_open()
        return self.live.stats(f"file://{self._path}")

    def source(self, source_id: str, *, namespace: str | None = None) -> SourceRecord | None:
        """The source registry record of an ingested document (SPEC-009 §4.5)."""
        self._check_open()
        return self.storage.source(check_namespace(namespace), source_id)

    def rebuild_index(self, *, namespace: str | None = None) -> int:
        """Rebuild the namespace's ANN index now (it also happens by the 20 % rule), one
        element at a time in seq order; returns how many vectors it holds."""
        self._check_open()
        ns = check_namespace(namespace)
        self.live.rebuild(ns)
        held, hidden = self.live.index_counts(ns)
        return held - hidden

    # -- ingestion (SPEC-009 §4) ----------------------------------------------------------------

    def ingest(self, items: Any, *, namespace: str | None = None,
               source_type: str | None = None, importance: float | None = None,
               ttl: Any = None, progress: bool | None = None) -> IngestReport:
        """Chunk documents into facts (:func:`chunk_text`) and store them.

        ``items``: one item or a list of them; a ``pathlib.Path`` (a file, or a
        directory searched recursively for .md/.markdown/.txt files, sorted)
        or ``{"path": ...}``; a str is a document's text, ``{"text": ...,
        "title": ..., "uri": ...}`` the same with a name.  Each document is a
        source (SPEC-009 §4.5) whose id derives from its URI (a file's path,
        or a text's SHA-256): ingesting an unchanged document again does
        nothing; a changed one adds the new facts and marks the old ones
        STALE in the same transaction.  A progress bar shows on a terminal.
        """
        self._check_open()
        ns = check_namespace(namespace)
        stype = check_source_type(source_type)
        check_importance(importance, stype)
        if ttl is not None:
            _cdr.parse_ttl(ttl)

        def add(records: Any, vecs: np.ndarray, source: Any, supersede: Any) -> list[str]:
            return self.live.add_facts(ns, records, vecs, knn=self.knn,
                                       threshold=self.edge_threshold, now=self._clock(),
                                       source=source, supersede=supersede)
        report = ingest(list(documents(items)), namespace=ns, source_type=stype,
                        importance=importance, ttl=ttl, progress=progress,
                        facts=self.storage, encoder=self._encoder, add=add)
        self._maybe_recluster(ns)
        return report
