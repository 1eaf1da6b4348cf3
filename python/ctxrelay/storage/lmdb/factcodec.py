"""How :class:`ctxrelay.storage.lmdb.facts.LmdbFacts` lays facts out in LMDB, and the
caches that spare decoding them again.

Every byte layout of the fact store is here, so that a change of format (a
checksum per record, say) is a change of this module.  Named databases (keys
and values big-endian unless noted; ``ns`` is the namespace id, ``seq`` the
fact's seq, both u64)::

    meta      format, config (JSON: model id, dim, embedder, hnsw parameters),
              next_seq, next_ns (u64)
    ns        namespace name -> JSON: id, gen, saved_gen, changed, adds, digest,
              cdigest, labels, edges, last_mod, counts, expiry (1: index built), ef
    facts     ns seq -> fact id (36 ASCII) + status (1) + importance, modified_at,
              ttl seconds (f64 each; NaN = none) + JSON record
    ids       fact id -> ns seq
    vectors   ns seq -> float32 embedding (native byte order)
    keys      ns key (UTF-8) -> ns seq
    edges     ns a b -> float32 weight (little-endian) + fact id of b (both ways)
    hidden    ns seq -> status byte of a QUARANTINED / DELETED fact
    ixlog     ns gen -> op ('A' show, 'H' hide) + seq: the change feed
    access    ns seq -> access count (u64) + last access (f64)
    members   ns seq -> community id (u32)
    sources   ns source id -> JSON source record (SPEC-009 §4.5)
    expiry    ns due (8, order-preserving f64) seq -> fact id, for every ACTIVE
              fact with a TTL (due = ingested_at + ttl)
    terms.post / terms.docs / terms.ns   BM25 (ctxrelay.storage.lmdb.textindex)
"""
from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.common.factstate import namespace_state
from ctxrelay.storage.interfaces.facts import Fact, NamespaceState, community_label, iso_time

FORMAT = b"ctxrelay.knowledge.fabric/1"
DB_NAMES = (b"meta", b"ns", b"facts", b"ids", b"vectors", b"keys", b"edges", b"hidden",
            b"ixlog", b"access", b"members", b"sources", b"expiry")
TERMS_PREFIX = "terms"

U64 = struct.Struct(">Q")
U32 = struct.Struct(">I")
ACCESS = struct.Struct(">Qd")
HEAD = struct.Struct(">ddd")          # importance, modified_at, ttl seconds (NaN: none)
F32 = struct.Struct("<f")
STATUS_BYTE = {"ACTIVE": b"A", "STALE": b"S", "DELETED": b"D", "QUARANTINED": b"Q"}
BYTE_STATUS = {v: k for k, v in STATUS_BYTE.items()}
ID_LEN = 36
JSON_AT = ID_LEN + 1 + HEAD.size
SHOW, HIDE = b"A", b"H"
#: one ``facts`` value up to its JSON record, as numpy reads a scan of them
HEAD_ROW = np.dtype([("id", f"S{ID_LEN}"), ("status", "S1"), ("importance", ">f8"),
                     ("modified", ">f8"), ("ttl", ">f8")])

DECODED_FACTS = 4096          # decoded fact records kept (validated on each read)
ID_CACHE_ENTRIES = 1_000_000  # fact id <-> LMDB key pairs kept in memory (they never change)


# -- keys -------------------------------------------------------------------------

def fact_key(nid: int, seq: int) -> bytes:
    return U64.pack(nid) + U64.pack(seq)


def seq_of(fkey: bytes) -> int:
    return U64.unpack(fkey[8:16])[0]


def nid_of(fkey: bytes) -> int:
    return U64.unpack(fkey[:8])[0]


def prefix_items(txn: Any, db: Any, prefix: bytes) -> Iterable[tuple[bytes, bytes]]:
    """The items of ``db`` whose key starts with ``prefix``, in key order."""
    cursor = txn.cursor(db=db)
    if not cursor.set_range(prefix):
        return
    for key, value in cursor.iternext():
        if not key.startswith(prefix):
            return
        yield key, value


# -- fact records --------------------------------------------------------------------

def encode_record(fact_id: str, rec: Mapping[str, Any]) -> bytes:
    ttl = rec.get("ttl_seconds")
    head = HEAD.pack(rec["importance"], rec["modified_at"], math.nan if ttl is None else ttl)
    return fact_id.encode() + STATUS_BYTE[rec["status"]] + head + json.dumps(rec).encode()


def _missing() -> CorruptStoreError:
    # An index (ids, keys) names a fact record that a lookup cannot find: the
    # record's key was damaged on disk (a key's checksum is checked when read).
    return CorruptStoreError(
        "a fact record named by the CKF's indexes is missing (a damaged record key); "
        "run 'ctxrelay check', then re-ingest the facts or restore a backup")


def decode_record(raw: bytes) -> tuple[str, str, dict[str, Any]]:
    """``(fact id, status, record)``."""
    if raw is None:
        raise _missing()
    return raw[:ID_LEN].decode(), BYTE_STATUS[raw[ID_LEN:ID_LEN + 1]], json.loads(raw[JSON_AT:])


def record_id(raw: bytes) -> str:
    if raw is None:
        raise _missing()
    return raw[:ID_LEN].decode()


def record_status(raw: bytes) -> str:
    if raw is None:
        raise _missing()
    return BYTE_STATUS[raw[ID_LEN:ID_LEN + 1]]


def record_head(raw: bytes) -> tuple[str, float, float, float | None]:
    """``(status, importance, modified_at, ttl seconds or None)`` without the JSON."""
    if raw is None:
        raise _missing()
    imp, mod, ttl = HEAD.unpack_from(raw, ID_LEN + 1)
    return BYTE_STATUS[raw[ID_LEN:ID_LEN + 1]], imp, mod, None if ttl != ttl else ttl


def decode_fact(record: bytes, access: bytes | None, community: int | None, kws: Any,
                namespace: str, model_id: str) -> Fact:
    if record is None:
        raise _missing()
    fact_id, status = record[:ID_LEN].decode(), BYTE_STATUS[record[ID_LEN:ID_LEN + 1]]
    rec = json.loads(record[JSON_AT:])
    count, last = ACCESS.unpack(access) if access else (0, None)
    label = community_label(kws) if kws is not None else None
    # Built through __dict__ (fields in their order), as fresh_copy: the frozen
    # dataclass's __init__ sets each of its twenty fields by object.__setattr__,
    # which costs a fifth of a decode, and most facts a retrieval returns are new.
    fact = object.__new__(Fact)
    fact.__dict__.update(
        fact_id=fact_id, namespace=namespace, content=rec["content"],
        content_hash=rec["content_hash"], key=rec.get("key"),
        source_id=rec.get("source_id"), source_location=rec.get("source_location"),
        source_type=rec["source_type"], importance=rec["importance"], status=status,
        ttl=rec.get("ttl"), ttl_seconds=rec.get("ttl_seconds"), community=community,
        community_label=label, ingested_at=iso_time(rec["ingested_at"]),
        modified_at=iso_time(rec["modified_at"]), access_count=int(count),
        last_accessed_at=iso_time(last), metadata=rec.get("metadata") or {},
        model_id=model_id)
    return fact


# -- the expiry index ----------------------------------------------------------------

def due_bytes(due: float) -> bytes:
    """An f64 as 8 bytes that sort like the numbers (sign bit flipped, negatives
    inverted), so the expiry index is read in order of due time."""
    bits = U64.unpack(struct.pack(">d", due))[0]
    return U64.pack(bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63)


def due_of_bytes(raw: bytes) -> float:
    bits = U64.unpack(raw)[0]
    bits = bits ^ (1 << 63) if bits >> 63 else bits ^ 0xFFFFFFFFFFFFFFFF
    return struct.unpack(">d", U64.pack(bits))[0]


class RecordCache:
    """What the store's readers keep decoded between reads (shared by every reader;
    plain dict operations, safe under the GIL).

    - namespace records, parsed once per change (they hold the community labels:
      tens of kB at 100k facts);
    - fact id <-> LMDB key, fixed when a fact is added, so never stale;
    - decoded facts by key with the bytes they were decoded from: a retrieval
      reads the same few facts again and again, and decoding the JSON record
      costs more than reading the values that validate the entry;
    - whether a namespace has any ``access`` or ``members`` record.

    Each kept value also carries the write generation (LMDB's transaction id) of
    the last read transaction that read or validated it: a read of that same
    generation sees the same committed bytes, so it takes the value without
    reading them again.  Only read transactions stamp (a write transaction's id
    is the one it will commit under, or that a retry reuses after an abort).
    """

    def __init__(self) -> None:
        self.infos: dict[str, tuple[bytes, dict[str, Any], NamespaceState, int | None]] = {}
        self.fkeys: dict[str, bytes] = {}
        self.names: dict[bytes, str] = {}
        self.decoded: dict[bytes, tuple[bytes, bytes | None, bytes | None, Any, Fact,
                                        int | None]] = {}
        self.holds: dict[tuple[bytes, int], tuple[int, bool]] = {}

    def info_at(self, name: str, gen: int | None
                ) -> tuple[dict[str, Any], NamespaceState] | None:
        """The namespace record a read of generation ``gen`` saw, if one did."""
        found = self.infos.get(name)
        if gen is not None and found is not None and found[3] == gen:
            return found[1], found[2]
        return None

    def info(self, name: str, raw: bytes, gen: int | None = None
             ) -> tuple[dict[str, Any], NamespaceState]:
        """The parsed namespace record of ``raw`` (a shared dict: do not change it)."""
        found = self.infos.get(name)
        if found is not None and found[0] == raw:
            if gen is not None and found[3] != gen:
                self.infos[name] = (raw, found[1], found[2], gen)
            return found[1], found[2]
        info = json.loads(raw)
        state = namespace_state(name, info)
        self.infos[name] = (raw, info, state, gen)
        return info, state

    def remember(self, fact_id: str, fkey: bytes) -> None:
        if len(self.names) >= ID_CACHE_ENTRIES:
            self.fkeys.clear()
            self.names.clear()
        self.fkeys[fact_id] = fkey
        self.names[fkey] = fact_id

    def fact_at(self, fkey: bytes, gen: int | None) -> Fact | None:
        """The decoded fact a read of generation ``gen`` saw under ``fkey``, if one did."""
        known = self.decoded.get(fkey)
        if gen is not None and known is not None and known[5] == gen:
            return known[4]
        return None

    def fact(self, fkey: bytes, record: bytes, access: bytes | None, member: bytes | None,
             kws: Any, gen: int | None = None) -> Fact | None:
        """The decoded fact of these bytes, if it was decoded before."""
        known = self.decoded.get(fkey)
        if known is not None and known[0] == record and known[1] == access \
                and known[2] == member and known[3] == kws:
            if gen is not None and known[5] != gen:
                self.decoded[fkey] = (*known[:5], gen)
            return known[4]
        return None

    def keep(self, fkey: bytes, record: bytes, access: bytes | None, member: bytes | None,
             kws: Any, fact: Fact, gen: int | None = None) -> None:
        if len(self.decoded) >= DECODED_FACTS:
            self.decoded.clear()
        self.decoded[fkey] = (record, access, member, kws, fact, gen)

    def holds_at(self, db: bytes, nid: int, gen: int | None) -> bool | None:
        """Whether database ``db`` held a record of namespace ``nid`` as a read of
        generation ``gen`` found (None: not known)."""
        found = self.holds.get((db, nid))
        return found[1] if gen is not None and found is not None and found[0] == gen else None

    def note_holds(self, db: bytes, nid: int, gen: int, held: bool) -> None:
        if len(self.holds) >= 4096:
            self.holds.clear()
        self.holds[(db, nid)] = (gen, held)
