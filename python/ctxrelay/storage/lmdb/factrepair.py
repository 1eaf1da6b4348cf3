"""The fact store's derived indexes, checked and rebuilt from the intact fact records.

The fact records (``facts``: ns seq -> id, status, head, JSON) are the primary
data; the ``ids``, ``keys``, ``hidden`` and ``expiry`` indexes and the BM25
term index are what :class:`~ctxrelay.storage.lmdb.factwrite.FactWriter`
writes beside them, and are derived from them here record by record (issue
15).  A damaged fact record is never read as data: the index records naming
it are left as they are (so a lookup still finds it and fails its checksum,
instead of reading "not found"), and its namespace's term index is not
rewritten.  The similarity graph (``edges``) is rebuilt from the stored
vectors by :func:`relink` (each fact's ``knn`` nearest with cosine >= the edge
threshold, exactly; an incrementally built graph can differ where a fact
added early was not among a later one's nearest); the ANN index and the
communities by the fabric (:meth:`FactStore.rebuild_index`,
:meth:`FactStore.recluster`).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.storage.interfaces.facts import RETRIEVABLE
from ctxrelay.storage.common import factstate
from ctxrelay.storage.lmdb import factcodec as codec
from ctxrelay.storage.lmdb.factcodec import U64
from ctxrelay.storage.lmdb.framing import intact

__all__ = ["INDEX_DBS", "IndexReport", "index_problems"]

#: the fact store's databases derived record by record from ``facts``
INDEX_DBS = (b"ids", b"keys", b"hidden", b"expiry")


@dataclass
class IndexReport:
    """What disagrees between the derived indexes and the fact records."""

    problems: list[str] = field(default_factory=list)
    #: db name -> (missing records to put, extra records to delete)
    changes: dict[bytes, tuple[set[tuple[bytes, bytes]], set[tuple[bytes, bytes]]]] = \
        field(default_factory=dict)
    #: namespace id -> (records stored, records wanted) of its term index
    terms: dict[int, tuple[Any, Any]] = field(default_factory=dict)


def _facts(raw_txn: Any, db: Any, framed: bool) -> Iterator[tuple[bytes, bytes | None]]:
    """Every fact record as (fkey, body); body None for a damaged one."""
    for key, stored in raw_txn.cursor(db=db).iternext():
        key = bytes(key)
        if not framed:
            yield key, bytes(stored)
        elif intact(key, stored):
            yield key, bytes(stored[:-8])
        else:
            yield key, None


def _stored(raw_txn: Any, db: Any, framed: bool) -> set[tuple[bytes, bytes]]:
    """The intact records of an index (damaged ones are the quarantine's)."""
    out = set()
    for key, stored in raw_txn.cursor(db=db).iternext():
        if not framed:
            out.add((bytes(key), bytes(stored)))
        elif intact(key, stored):
            out.add((bytes(key), bytes(stored[:-8])))
    return out


def _names_fact(db: bytes, record: tuple[bytes, bytes], fkeys: set[bytes]) -> bool:
    key, value = record
    if db in (b"ids", b"keys"):
        return value in fkeys
    if db == b"hidden":
        return key in fkeys
    return key[:8] + key[-8:] in fkeys          # expiry: ns due seq


def index_problems(txn: Any, dbs: dict[bytes, Any], terms: Any, framed: bool
                   ) -> IndexReport:
    """Compare every derived index with what the intact fact records give
    (``txn``: the store's transaction, framed or not)."""
    from ctxrelay.errors import CorruptStoreError
    raw_txn = getattr(txn, "raw", txn)
    report = IndexReport()
    want: dict[bytes, set[tuple[bytes, bytes]]] = {db: set() for db in INDEX_DBS}
    damaged: set[bytes] = set()
    docs: dict[int, list[tuple[int, str]]] = {}
    for fkey, body in _facts(raw_txn, dbs[b"facts"], framed):
        if body is None:
            damaged.add(fkey)
            continue
        fact_id, status, rec = codec.decode_record(body)
        nsb, seq = fkey[:8], codec.seq_of(fkey)
        want[b"ids"].add((fact_id.encode(), fkey))
        if rec.get("key") is not None:
            want[b"keys"].add((nsb + rec["key"].encode(), fkey))
        if status not in RETRIEVABLE:
            want[b"hidden"].add((fkey, codec.STATUS_BYTE[status]))
        due = factstate.due_time(status, rec)
        if due is not None:
            want[b"expiry"].add((nsb + codec.due_bytes(due) + fkey[8:], fact_id.encode()))
        if rec.get("content"):
            docs.setdefault(U64.unpack(nsb)[0], []).append((seq, rec["content"]))
    # A namespace whose expiry index was never built (an older store) has none yet.
    unbuilt = set()
    for _name, raw in raw_txn.cursor(db=dbs[b"ns"]).iternext():
        body = bytes(raw[:-8]) if framed else bytes(raw)
        try:
            info = json.loads(body)
        except ValueError:                  # a damaged ns record: check_records names it
            continue
        if not info.get("expiry"):
            unbuilt.add(U64.pack(info["id"]))
    want[b"expiry"] = {r for r in want[b"expiry"] if r[0][:8] not in unbuilt}
    for db in INDEX_DBS:
        have = _stored(raw_txn, dbs[db], framed)
        if db == b"expiry":
            have = {r for r in have if r[0][:8] not in unbuilt}
        missing = want[db] - have
        extra = {r for r in have - want[db] if not _names_fact(db, r, damaged)}
        if missing or extra:
            report.changes[db] = (missing, extra)
            report.problems.append(
                f"fact store index {db.decode()}: {len(missing)} record(s) missing, "
                f"{len(extra)} naming no intact fact record")
    damaged_ns = {U64.unpack(k[:8])[0] for k in damaged}
    for nid, pairs in docs.items():
        if nid in damaged_ns:
            continue
        expected = terms.expected(nid, pairs)
        try:
            stored = terms.records(txn, nid)
        except CorruptStoreError as exc:    # dropped by --repair's quarantine first
            report.problems.append(f"fact term index (namespace {nid}) is damaged: {exc}")
            continue
        found = terms.differences(expected, stored, doc="fact")
        if found:
            report.terms[nid] = (stored, expected)
            report.problems += [f"fact term index (namespace {nid}): {p}" for p in found]
    return report


def apply(txn: Any, dbs: dict[bytes, Any], terms: Any, report: IndexReport) -> None:
    """Rewrite what :func:`index_problems` found (``txn`` seals what it puts)."""
    for db, (missing, extra) in report.changes.items():
        for key, value in extra:
            txn.delete(key, db=dbs[db])
        for key, value in sorted(missing):
            txn.put(key, value, db=dbs[db])
    for nid, (stored, expected) in report.terms.items():
        terms.replace_records(txn, nid, stored, expected)


# -- the similarity graph ----------------------------------------------------------------

RELINK_CHUNK = 1024          # rows of the similarity matrix computed at once


def similarity_edges(seqs: list[int], vectors: Any, knn: int, threshold: float
                     ) -> Iterator[tuple[int, int, float]]:
    """Each fact's ``knn`` nearest others with cosine >= ``threshold`` (exact, by
    rows of the cosine matrix): the edges SPEC-009 §5.2 gives the facts added in
    one batch."""
    import numpy as np
    if knn <= 0 or len(seqs) < 2:
        return
    unit = np.asarray(vectors, dtype=np.float32)
    unit = unit / np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
    take = min(knn, len(seqs) - 1)
    for start in range(0, len(seqs), RELINK_CHUNK):
        sims = unit[start:start + RELINK_CHUNK] @ unit.T
        rows = np.arange(sims.shape[0])
        sims[rows, rows + start] = -np.inf                  # not to itself
        best = np.argpartition(-sims, take - 1, axis=1)[:, :take]
        for row, cols in enumerate(best):
            for col in cols:
                sim = float(sims[row, col])
                if sim >= threshold:
                    yield seqs[start + row], seqs[int(col)], sim


def relink(w: Any, knn: int, threshold: float) -> int:
    """Rebuild the namespace's similarity edges from its stored vectors (``w``: a
    FactWriter); every fact's change-feed entry is logged again so readers' walk
    caches reload its edges.  Returns the edges stored."""
    import numpy as np
    txn, dbs, info = w.txn, w.ctx.dbs, w.ns_info
    nsb = U64.pack(info["id"])
    raw = getattr(txn, "raw", txn)
    cursor = raw.cursor(db=dbs[b"edges"])
    # By position: a damaged edge key would be out of key order (see quarantine).
    found = cursor.first()
    while found:
        found = cursor.delete() if bytes(cursor.key())[:8] == nsb else cursor.next()
    info["edges"] = 0
    rows = list(codec.prefix_items(txn, dbs[b"vectors"], nsb))
    seqs = [codec.seq_of(k) for k, _ in rows]
    ids = [codec.record_id(txn.get(k, db=dbs[b"facts"])) for k, _ in rows]
    if rows:
        matrix = np.stack([np.frombuffer(v, dtype=np.float32) for _, v in rows])
        w.store_edges(seqs, ids, similarity_edges(seqs, matrix, knn, threshold))
    hidden = dbs[b"hidden"]
    for seq, (fkey, _) in zip(seqs, rows):
        w.log(codec.HIDE if txn.get(fkey, db=hidden) is not None else codec.SHOW, seq)
    return int(info["edges"])
