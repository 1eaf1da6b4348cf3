"""The fact store's derived indexes, checked and rebuilt from the intact fact records.

The fact records (``facts``: ns seq -> id, status, head, JSON) are the primary
data; the ``ids``, ``keys``, ``hidden`` and ``expiry`` indexes and the BM25
term index are what :class:`~ctxrelay.storage.lmdb.factwrite.FactWriter`
writes beside them, and are derived from them here record by record (issue
15).  A damaged fact record is never read as data: the index records naming
it are left as they are (so a lookup still finds it and fails its checksum,
instead of reading "not found"), and its namespace's term index is not
rewritten.  The ANN index and the communities are rebuilt by the fabric
(:meth:`FactStore.rebuild_index`, :meth:`FactStore.recluster`), which need
the embedder and the graph.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.storage.interfaces.facts import RETRIEVABLE
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
        due = codec.due_time(status, rec)
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
