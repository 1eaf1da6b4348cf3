"""Reads of the LMDB fact store within one transaction (a :class:`FactReader`).

:class:`FactView` serves :meth:`LmdbFacts.snapshot` (a read transaction) and the
callbacks a write makes (its own write transaction, so they see the state the
write started from).  Layouts are :mod:`ctxrelay.storage.lmdb.factcodec`'s.
"""
from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxrelay.storage.common.facts import source_record
from ctxrelay.storage.interfaces.facts import (RETRIEVABLE, Change, Fact, FactTable, HeadArrays,
                                               NamespaceState, SourceRecord, UnknownFactError)
from ctxrelay.storage.common import factstate
from ctxrelay.storage.lmdb import factcodec as codec
from ctxrelay.storage.lmdb.factcodec import F32, U32, U64, RecordCache, prefix_items
from ctxrelay.storage.lmdb.textindex import TextIndex

__all__ = ["StoreContext", "FactView"]


@dataclass(frozen=True)
class StoreContext:
    """What every view of one store shares: database handles, the term index, the
    decode caches and the embedding model."""

    dbs: dict[bytes, Any]
    terms: TextIndex
    cache: RecordCache
    model_id: str
    dim: int


class FactView:
    """The fact store as one transaction sees it."""

    __slots__ = ("ctx", "txn", "model_id", "dim", "_seen", "gen")

    def __init__(self, ctx: StoreContext, txn: Any, *, gen: int | None = None) -> None:
        self.ctx = ctx
        self.txn = txn
        self.model_id = ctx.model_id
        self.dim = ctx.dim
        #: the write generation a read transaction sees (LMDB's transaction id; None in
        #: a write): what the store's cache holds under it is served without reading
        #: the bytes again (see RecordCache)
        self.gen = gen
        # the last namespace record read: a record is tens of kB at 100k facts (its
        # community labels), and one read asks for it several times
        self._seen: tuple[str, dict[str, Any], NamespaceState] | None = None

    # -- namespaces ----------------------------------------------------------------

    def _record(self, ns: str) -> tuple[str, dict[str, Any], NamespaceState] | None:
        seen = self._seen
        if seen is not None and seen[0] == ns:
            return seen
        kept = self.ctx.cache.info_at(ns, self.gen)
        if kept is not None:
            self._seen = (ns, *kept)
            return self._seen
        raw = self.txn.get(ns.encode(), db=self.ctx.dbs[b"ns"])
        if raw is None:
            return None
        info, state = self.ctx.cache.info(ns, raw, self.gen)
        if self.txn_is_read:
            self._seen = (ns, info, state)
        return ns, info, state

    @property
    def txn_is_read(self) -> bool:
        """Whether the namespace records cannot change while this view lives."""
        return True

    def info(self, ns: str) -> dict[str, Any] | None:
        """The namespace record, shared and parsed once per change: do not change it."""
        found = self._record(ns)
        return None if found is None else found[1]

    def namespace(self, ns: str) -> NamespaceState | None:
        found = self._record(ns)
        return None if found is None else found[2]

    def namespaces(self) -> list[str]:
        return sorted(k.decode() for k, _ in self.txn.cursor(db=self.ctx.dbs[b"ns"]))

    def state_hash(self, ns: str) -> str:
        return factstate.state_hash(self.model_id, ns, self.info(ns))

    # -- fact ids --------------------------------------------------------------------

    def fkey_of(self, info: dict[str, Any] | None, fact_id: Any) -> bytes | None:
        """The LMDB key of ``fact_id`` if it is a fact of the namespace of ``info``."""
        if info is None or not isinstance(fact_id, str):
            return None
        cache = self.ctx.cache
        fkey = cache.fkeys.get(fact_id)
        if fkey is None:
            fkey = self.txn.get(fact_id.encode(), db=self.ctx.dbs[b"ids"])
            if fkey is None:
                return None
            cache.remember(fact_id, fkey)
        return fkey if U64.unpack(fkey[:8])[0] == info["id"] else None

    def fkeys_of(self, info: dict[str, Any] | None, ids: Sequence[str]) -> list[bytes | None]:
        """:meth:`fkey_of` of many ids (the cache hits without a call each)."""
        if info is None:
            return [None] * len(ids)
        nsb = U64.pack(info["id"])
        cached = self.ctx.cache.fkeys.get
        out: list[bytes | None] = []
        for fid in ids:
            fkey = cached(fid) if isinstance(fid, str) else None
            if fkey is None:
                fkey = self.fkey_of(info, fid)
            out.append(fkey if fkey is not None and fkey[:8] == nsb else None)
        return out

    def require(self, info: dict[str, Any], fact_id: Any) -> bytes:
        """The LMDB key of ``fact_id``; UnknownFactError if it is not of the namespace."""
        raw = self.txn.get(fact_id.encode(), db=self.ctx.dbs[b"ids"]) \
            if isinstance(fact_id, str) else None
        if raw is None or U64.unpack(raw[:8])[0] != info["id"]:
            raise UnknownFactError(f"no fact {fact_id!r} in this namespace; check the id "
                                   "(fact ids are UUIDs) and the namespace")
        return raw

    def name_of(self, fkey: bytes) -> str:
        """The fact id stored under ``fkey`` (which must exist)."""
        cache = self.ctx.cache
        name = cache.names.get(fkey)
        if name is None:
            name = codec.record_id(self.txn.get(fkey, db=self.ctx.dbs[b"facts"]))
            cache.remember(name, fkey)
        return name

    def locate(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        return np.array([-1 if k is None else codec.seq_of(k)
                         for k in self.fkeys_of(self.info(ns), ids)], dtype=np.int64)

    # -- facts ------------------------------------------------------------------------

    def fact(self, info: dict[str, Any], fkey: bytes, namespace: str) -> Fact:
        """The fact under ``fkey``, decoded once and validated by its bytes on each read
        of a new write generation."""
        cache, gen = self.ctx.cache, self.gen
        fact = cache.fact_at(fkey, gen)
        if fact is not None:
            return factstate.fresh_copy(fact)
        dbs = self.ctx.dbs
        get = self.txn.get
        record = get(fkey, db=dbs[b"facts"])
        access = get(fkey, db=dbs[b"access"]) if self._holds(b"access", info) else None
        member = get(fkey, db=dbs[b"members"]) if self._holds(b"members", info) else None
        community = U32.unpack(member)[0] if member else None
        kws = None if community is None else info["labels"].get(str(community))
        fact = cache.fact(fkey, record, access, member, kws, gen)
        if fact is None:
            fact = codec.decode_fact(record, access, community, kws, namespace, self.model_id)
            cache.keep(fkey, record, access, member, kws, fact, gen)
        return factstate.fresh_copy(fact)

    def _holds(self, db: bytes, info: dict[str, Any]) -> bool:
        """Whether ``db`` (``access``, ``members``: keyed like the facts) may hold a
        record of the namespace of ``info``.  Most namespaces have none of one or both
        (no access counted, never reclustered), and a point read that finds nothing
        checks the records around the gap it lands in; when the namespace has no
        record at all, every such read lands in the same gap, which the one range
        read here checks.  Known per write generation; a write always reads."""
        gen = self.gen
        if gen is None:
            return True
        cache, nid = self.ctx.cache, info["id"]
        held = cache.holds_at(db, nid, gen)
        if held is None:
            nsb = U64.pack(nid)
            cursor = self.txn.cursor(db=self.ctx.dbs[db])
            held = bool(cursor.set_range(nsb)) and cursor.key()[:8] == nsb
            cache.note_holds(db, nid, gen, held)
        return held

    def get(self, ns: str, ids: Sequence[str]) -> list[Fact | None]:
        info = self.info(ns)
        return [None if fkey is None else self.fact(info, fkey, ns)
                for fkey in self.fkeys_of(info, ids)]

    def scan(self, ns: str) -> list[Fact]:
        info = self.info(ns)
        if info is None:
            return []
        return [self.fact(info, key, ns) for key, _ in
                prefix_items(self.txn, self.ctx.dbs[b"facts"], U64.pack(info["id"]))]

    def lookup_key(self, ns: str, key: str, *, any_status: bool = False) -> str | None:
        info = self.info(ns)
        if info is None:
            return None
        fkey = self.txn.get(U64.pack(info["id"]) + key.encode(), db=self.ctx.dbs[b"keys"])
        if fkey is None:
            return None
        raw = self.txn.get(fkey, db=self.ctx.dbs[b"facts"])
        if not any_status and codec.record_status(raw) not in RETRIEVABLE:
            return None
        return codec.record_id(raw)

    def _heads(self, fkeys: Iterable[bytes | None]) -> HeadArrays:
        facts, get, head = self.ctx.dbs[b"facts"], self.txn.get, codec.record_head
        rows: list[Any] = []
        for fkey in fkeys:
            raw = None if fkey is None else get(fkey, db=facts)
            rows.append(None if raw is None else head(raw))
        return HeadArrays.from_rows(rows)

    def heads(self, ns: str, ids: Sequence[str]) -> HeadArrays:
        return self._heads(self.fkeys_of(self.info(ns), ids))

    def heads_at(self, ns: str, seqs: Sequence[int]) -> HeadArrays:
        info = self.info(ns)
        if info is None:
            return HeadArrays.from_rows([None] * len(seqs))
        return self._heads(_fkeys_at(info["id"], seqs))

    def _vectors(self, fkeys: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
        vectors = self.ctx.dbs[b"vectors"]
        rows: list[bytes] = []
        found = np.zeros(len(fkeys), dtype=bool)
        for i, fkey in enumerate(fkeys):
            raw = self.txn.get(fkey, db=vectors) if fkey else None
            if raw is not None:
                rows.append(raw)
                found[i] = True
        got = np.frombuffer(b"".join(rows), dtype=np.float32).reshape(-1, self.dim)
        if len(rows) == len(fkeys):
            return got.copy(), found      # writable, one copy
        out = np.zeros((len(fkeys), self.dim), dtype=np.float32)
        out[found] = got
        return out, found

    def vectors(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        info = self.info(ns)
        fkeys = self.fkeys_of(info, ids)
        if info is not None:
            for fid, fkey in zip(ids, fkeys):
                if fkey is None:
                    self.require(info, fid)            # raises UnknownFactError
        return self._vectors(fkeys)[0]

    def vectors_at(self, ns: str, seqs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        info = self.info(ns)
        if info is None:
            return np.zeros((len(seqs), self.dim), dtype=np.float32), np.zeros(len(seqs), bool)
        return self._vectors(_fkeys_at(info["id"], seqs))

    def ids_at(self, ns: str, seqs: Sequence[int]) -> list[str | None]:
        info = self.info(ns)
        if info is None:
            return [None] * len(seqs)
        nsb, names, facts = U64.pack(info["id"]), self.ctx.cache.names, self.ctx.dbs[b"facts"]
        out: list[str | None] = []
        for seq in seqs:
            fkey = nsb + U64.pack(int(seq))
            name = names.get(fkey)
            if name is None and self.txn.get(fkey, db=facts) is not None:
                name = self.name_of(fkey)
            out.append(name)
        return out

    def fact_table(self, ns: str) -> FactTable:
        """Ids and heads of every fact in one pass (a walk's tables are built from it)."""
        info = self.info(ns)
        seqs: list[bytes] = []
        heads: list[bytes] = []
        if info is not None:
            for key, value in prefix_items(self.txn, self.ctx.dbs[b"facts"],
                                           U64.pack(info["id"])):
                seqs.append(key[8:])
                heads.append(value[:codec.JSON_AT])
        rows = np.frombuffer(b"".join(heads), dtype=codec.HEAD_ROW)
        labels = np.frombuffer(b"".join(seqs), dtype=">u8").astype(np.int64)
        return FactTable(labels, [n.decode() for n in rows["id"].tolist()],
                         HeadArrays(rows["status"].copy(), rows["importance"].astype(np.float64),
                                    rows["modified"].astype(np.float64),
                                    rows["ttl"].astype(np.float64)),
                         0.0 if info is None else info["last_mod"])

    # -- vectors and edges for in-memory structures --------------------------------------

    def iter_vectors(self, ns: str, chunk: int, *, skip: Container[int] = ()
                     ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The stored vectors in seq order (those of ``skip`` left out) as
        ``(seqs, rows)`` chunks of at most ``chunk``."""
        info = self.info(ns)
        if info is None:
            return
        labels: list[int] = []
        rows: list[bytes] = []
        for key, value in prefix_items(self.txn, self.ctx.dbs[b"vectors"], U64.pack(info["id"])):
            seq = U64.unpack(key[8:])[0]
            if seq in skip:
                continue
            labels.append(seq)
            rows.append(value)
            if len(labels) >= chunk:
                yield self._chunk(labels, rows)
                labels, rows = [], []
        if labels:
            yield self._chunk(labels, rows)

    def _chunk(self, labels: list[int], rows: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        return (np.asarray(labels, dtype=np.int64),
                np.frombuffer(b"".join(rows), dtype=np.float32).reshape(len(rows), self.dim))

    def hidden(self, ns: str) -> set[int]:
        info = self.info(ns)
        if info is None:
            return set()
        return {U64.unpack(k[8:])[0] for k, _ in
                prefix_items(self.txn, self.ctx.dbs[b"hidden"], U64.pack(info["id"]))}

    def edges(self, ns: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        info = self.info(ns)
        keys: list[bytes] = []
        weights: list[bytes] = []
        if info is not None:
            nsb = U64.pack(info["id"])
            cursor = self.txn.cursor(db=self.ctx.dbs[b"edges"])
            if cursor.set_range(nsb):
                for key, value in cursor.iternext():
                    if key[:8] != nsb:
                        break
                    keys.append(key)
                    weights.append(value[:4])
        triples = np.frombuffer(b"".join(keys), dtype=">u8").reshape(-1, 3)
        return (triples[:, 1].astype(np.int64), triples[:, 2].astype(np.int64),
                np.frombuffer(b"".join(weights), dtype="<f4"))

    def edge_rows(self, ns: str, seqs: Iterable[int]) -> dict[int, tuple[list[int], list[float]]]:
        info = self.info(ns)
        if info is None:
            return {int(s): ([], []) for s in seqs}
        nsb = U64.pack(info["id"])
        cursor = self.txn.cursor(db=self.ctx.dbs[b"edges"])
        out: dict[int, tuple[list[int], list[float]]] = {}
        for seq in seqs:
            prefix = nsb + U64.pack(int(seq))
            nbrs: list[int] = []
            weights: list[float] = []
            if cursor.set_range(prefix):
                for key, value in cursor.iternext():
                    if key[:16] != prefix:
                        break
                    nbrs.append(U64.unpack(key[16:])[0])
                    weights.append(F32.unpack(value[:4])[0])
            out[int(seq)] = (nbrs, weights)
        return out

    def changes(self, ns: str, since: int, upto: int) -> list[Change] | None:
        info = self.info(ns)
        if info is None:
            return [] if upto <= since else None
        nsb = U64.pack(info["id"])
        out: list[Change] = []
        expect = since + 1
        cursor = self.txn.cursor(db=self.ctx.dbs[b"ixlog"])
        if cursor.set_range(nsb + U64.pack(since + 1)):
            for key, value in cursor.iternext():
                if key[:8] != nsb:
                    break
                gen = U64.unpack(key[8:])[0]
                if gen > upto or gen != expect:
                    break
                out.append(Change(gen, value[:1] == codec.HIDE, U64.unpack(value[1:9])[0]))
                expect += 1
        return out if expect == max(upto, since) + 1 else None

    # -- terms, sources, communities, expiry ---------------------------------------------

    def search_terms(self, ns: str, query: str, k: int) -> list[tuple[str, float]]:
        info = self.info(ns)
        if info is None:
            return []
        facts, txn = self.ctx.dbs[b"facts"], self.txn
        nsb = U64.pack(info["id"])
        names: dict[int, str] = {}

        def accept(seq: int) -> bool:
            raw = txn.get(nsb + U64.pack(seq), db=facts)
            if raw is None or codec.record_status(raw) not in RETRIEVABLE:
                return False
            names[seq] = codec.record_id(raw)
            return True
        hits = self.ctx.terms.search(txn, info["id"], query, k=k, accept=accept)
        return [(names[seq], float(score)) for seq, score in hits]

    def source(self, ns: str, source_id: str) -> SourceRecord | None:
        info = self.info(ns)
        raw = self.txn.get(U64.pack(info["id"]) + source_id.encode(),
                           db=self.ctx.dbs[b"sources"]) if info else None
        if raw is None:
            return None
        return source_record(ns, raw)

    def communities(self, ns: str) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]:
        info = self.info(ns)
        if info is None:
            return {}, {}
        facts = self.ctx.dbs[b"facts"]
        membership = {}
        for key, value in prefix_items(self.txn, self.ctx.dbs[b"members"], U64.pack(info["id"])):
            raw = self.txn.get(key, db=facts)
            if codec.record_status(raw) in RETRIEVABLE:
                membership[codec.record_id(raw)] = U32.unpack(value)[0]
        return membership, {int(c): tuple(k) for c, k in info["labels"].items()}

    def due(self, ns: str, now: float) -> list[str]:
        """What the expiry index holds as due at ``now``, in seq order."""
        info = self.info(ns)
        if info is None:
            return []
        prefix = U64.pack(info["id"])
        found: list[tuple[bytes, str]] = []
        cursor = self.txn.cursor(db=self.ctx.dbs[b"expiry"])
        if cursor.set_range(prefix):
            for key, value in cursor.iternext():
                if key[:8] != prefix or not now > codec.due_of_bytes(key[8:16]):
                    break
                found.append((key[16:], value.decode()))
        found.sort()        # seq order, as a scan would give them
        return [fid for _, fid in found]


def _fkeys_at(nid: int, seqs: Sequence[int]) -> list[bytes | None]:
    """The LMDB keys of ``seqs`` in namespace ``nid`` (None for -1), built in one
    numpy pass: a walk asks for a few hundred at a time."""
    seqs = np.asarray(seqs, dtype=np.int64)
    keys = np.empty((len(seqs), 2), dtype=">u8")
    keys[:, 0], keys[:, 1] = nid, np.maximum(seqs, 0)
    buf = keys.tobytes()
    return [buf[16 * i:16 * i + 16] if s >= 0 else None for i, s in enumerate(seqs.tolist())]
