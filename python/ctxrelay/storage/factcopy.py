"""Copy the knowledge fabric between back ends, faithfully (``ctxrelay migrate``).

A namespace is read through the :class:`FactReader` Protocol (plus the
namespace record both back ends keep in the embedded format: its community
digest and counters) into a :class:`NamespaceDump`: every fact with its id,
status, timestamps (``modified_at`` as stored, so the state hash is kept),
access counts, community, key and vector, in seq order; the edges by fact
ids; the community keywords; the sources.  :func:`restore` writes it into an
empty namespace of the target in one transaction of the target's own layout
(fact ids kept, seqs drawn anew in the same order), and
:func:`fingerprint` is what :func:`ctxrelay.storage.migrate.migrate`
compares between source and target: every fact's fields, vector, key, edge,
community, source and the namespace's state hash.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxrelay.storage.interfaces.facts import RETRIEVABLE, Fact, epoch_of

__all__ = ["NamespaceDump", "dump", "restore", "fingerprint", "open_raw_facts"]


@dataclass
class NamespaceDump:
    name: str
    facts: list[Fact]
    modified: list[float]                # stored modified_at, in the order of ``facts``
    vectors: np.ndarray                  # float32 rows (zeros for an erased fact)
    edges: list[tuple[str, str, float]]  # (fact id, fact id, weight), one direction each
    keywords: dict[int, tuple[str, ...]]
    sources: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)   # adds, cdigest, last_mod


def open_raw_facts(stores: Any, config: dict[str, Any] | None = None) -> Any:
    """The :class:`FactStorage` of a store, without the fabric above it (no embedder
    needed); a new one with ``config`` (the source's model, dimension and index
    parameters)."""
    from ctxrelay.storage.lmdb.backend import LmdbBackend
    from ctxrelay.storage.lmdb.facts import LmdbFacts
    from ctxrelay.storage.postgres.backend import PostgresBackend
    from ctxrelay.storage.postgres.facts import PgFacts
    kw = {} if config is None else {
        "model_id": config["model_id"], "dim": config["dim"],
        "embedder_name": config.get("embedder"), "m": config["m"],
        "ef_construction": config["ef_construction"], "random_seed": config["random_seed"]}
    backend = stores.backend
    if isinstance(backend, LmdbBackend):
        return LmdbFacts(os.path.join(os.fspath(backend.dir), "ckf", "db"), **kw)
    if isinstance(backend, PostgresBackend):
        return PgFacts(backend.db, **kw)
    raise TypeError(f"no fact copy for the back end {type(backend).__name__}")


def dump(storage: Any, ns: str) -> NamespaceDump:
    def read(view: Any) -> NamespaceDump:
        facts = view.scan(ns)
        ids = [f.fact_id for f in facts]
        seqs = view.locate(ns, ids)
        heads = view.heads_at(ns, seqs)
        vectors, _ = view.vectors_at(ns, seqs)
        id_of = dict(zip(seqs.tolist(), ids))
        src, dst, weight = view.edges(ns)
        edges = [(id_of[a], id_of[b], float(w)) for a, b, w in
                 zip(src.tolist(), dst.tolist(), weight.tolist()) if a < b]
        _, keywords = view.communities(ns)
        sources = []
        for sid in sorted({f.source_id for f in facts if f.source_id}):
            record = view.source(ns, sid)
            if record is not None:
                sources.append(record.to_dict())
        info = view.info(ns)
        return NamespaceDump(ns, facts, heads.modified.tolist(), vectors, edges, keywords,
                             sources, {k: info[k] for k in ("adds", "cdigest", "last_mod")})
    return storage.snapshot(read)


def _record(fact: Fact, modified: float) -> dict[str, Any]:
    """The stored record of a fact (the embedded store's JSON fields)."""
    return {"content": fact.content, "content_hash": fact.content_hash, "key": fact.key,
            "source_id": fact.source_id, "source_location": fact.source_location,
            "source_type": fact.source_type, "importance": fact.importance, "ttl": fact.ttl,
            "ttl_seconds": fact.ttl_seconds, "metadata": dict(fact.metadata),
            "status": fact.status, "ingested_at": epoch_of(fact.ingested_at),
            "modified_at": modified}


def restore(storage: Any, data: NamespaceDump) -> None:
    """Write ``data`` into ``storage``, whose namespace must not exist yet."""
    from ctxrelay.storage.lmdb.facts import LmdbFacts
    if storage.namespace(data.name) is not None:
        from ctxrelay.errors import StoreError
        raise StoreError(f"the target already holds facts in namespace {data.name!r}; "
                         "migrate into an empty store")
    if isinstance(storage, LmdbFacts):
        _restore_lmdb(storage, data)
    else:
        storage.restore_namespace(data, _record)


def _restore_lmdb(storage: Any, data: NamespaceDump) -> None:
    from ctxrelay.storage.common import factstate
    from ctxrelay.storage.lmdb import factcodec as codec
    from ctxrelay.storage.lmdb.factcodec import ACCESS, U32, U64, fact_key
    from ctxrelay.storage.lmdb.factwrite import FactWriter

    def run(txn: Any) -> None:
        w = FactWriter(storage.context, txn, data.name, create=True)
        dbs, info = storage.context.dbs, w.ns_info
        nid, nsb = info["id"], U64.pack(info["id"])
        first = U64.unpack(txn.get(b"next_seq", db=dbs[b"meta"]))[0]
        txn.put(b"next_seq", U64.pack(first + len(data.facts)), db=dbs[b"meta"])
        seqs = list(range(first, first + len(data.facts)))
        for seq, fact, modified, vec in zip(seqs, data.facts, data.modified, data.vectors):
            fkey = fact_key(nid, seq)
            rec = _record(fact, modified)
            w.put_record(fkey, fact.fact_id, rec)
            txn.put(fact.fact_id.encode(), fkey, db=dbs[b"ids"])
            w.move_due(fkey, fact.fact_id, None, factstate.due_time(fact.status, rec))
            info["counts"][fact.status] += 1
            w.redigest(None, factstate.digest_component(fact.fact_id, fact.content_hash,
                                                    fact.status, modified))
            if fact.status != "DELETED":
                txn.put(fkey, np.ascontiguousarray(vec, np.float32).tobytes(),
                        db=dbs[b"vectors"])
                storage.context.terms.add(txn, nid, seq, fact.content)
                if fact.key is not None:
                    txn.put(nsb + fact.key.encode(), fkey, db=dbs[b"keys"])
            if fact.status not in RETRIEVABLE:
                txn.put(fkey, codec.STATUS_BYTE[fact.status], db=dbs[b"hidden"])
            if fact.community is not None:
                txn.put(fkey, U32.pack(int(fact.community)), db=dbs[b"members"])
            if fact.access_count or fact.last_accessed_at:
                last = epoch_of(fact.last_accessed_at) if fact.last_accessed_at else 0.0
                txn.put(fkey, ACCESS.pack(fact.access_count, last), db=dbs[b"access"])
        seq_of = {f.fact_id: s for f, s in zip(data.facts, seqs)}
        ids = [f.fact_id for f in data.facts]
        w.store_edges(seqs, ids, [(seq_of[a], seq_of[b], wt) for a, b, wt in data.edges])
        for src in data.sources:
            rec = dict(src, ingested_at=epoch_of(src["ingested_at"]))
            rec.pop("namespace", None)
            txn.put(nsb + src["source_id"].encode(), json.dumps(rec).encode(),
                    db=dbs[b"sources"])
        info["labels"] = {str(c): list(k) for c, k in data.keywords.items()}
        info.update(data.info)
        w.save_info()
    with storage._lock:
        storage.write(run)


def fingerprint(storage: Any, ns: str) -> dict[str, Any]:
    """What must read back the same after a copy: per fact its fields, a digest of
    its vector and its key lookup; the edges and communities by fact id; the
    sources; the state hash.  Seqs are not in it (each store draws its own)."""
    data = dump(storage, ns)
    facts = []
    for fact, vec in zip(data.facts, data.vectors):
        row = fact.to_dict()
        row["vector"] = hashlib.sha256(np.ascontiguousarray(vec, np.float32).tobytes()).hexdigest()
        row["key_lookup"] = None if fact.key is None else storage.lookup_key(
            ns, fact.key, any_status=True)
        facts.append(row)
    return {"facts": facts, "edges": sorted(data.edges), "keywords": data.keywords,
            "communities": storage.communities(ns)[0], "sources": data.sources,
            "state_hash": storage.state_hash(ns)}
