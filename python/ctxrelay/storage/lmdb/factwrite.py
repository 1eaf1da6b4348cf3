"""The steps of one write transaction of the LMDB fact store.

A :class:`FactWriter` is a :class:`FactView` of a write transaction plus the
namespace record it changes; :class:`ctxrelay.storage.lmdb.facts.LmdbFacts`
runs one per write and saves the record at the end.  Every change to a fact
keeps, in the same transaction, what depends on it: the expiry index, the
state digest, the status counts, the hidden set and the change feed.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ctxrelay.storage.common.facts import NamespaceSteps, check_transition, still_due
from ctxrelay.storage.interfaces.facts import (RETRIEVABLE, FactKeyExistsError,
                                               Linker, NamespaceState, StatusTransitionError)
from ctxrelay.storage.common import factstate
from ctxrelay.storage.lmdb import factcodec as codec
from ctxrelay.storage.lmdb.factcodec import ACCESS, F32, ID_LEN, U32, U64, fact_key, prefix_items
from ctxrelay.storage.lmdb.factview import FactView, StoreContext

__all__ = ["FactWriter"]


class FactWriter(NamespaceSteps, FactView):
    """One write transaction of one namespace (created on the first write to it)."""

    __slots__ = ("ns", "ns_info", "touched", "gen_before", "stamp_before")

    def __init__(self, ctx: StoreContext, txn: Any, ns: str, *, create: bool = True) -> None:
        super().__init__(ctx, txn)
        self.ns = ns
        self.touched: list[int] = []          # seqs whose records this write put
        raw = txn.get(ns.encode(), db=ctx.dbs[b"ns"])
        info: dict[str, Any] | None = None if raw is None else json.loads(raw)
        if info is None and create:
            meta = ctx.dbs[b"meta"]
            nid = U64.unpack(txn.get(b"next_ns", db=meta))[0]
            txn.put(b"next_ns", U64.pack(nid + 1), db=meta)
            info = factstate.new_info(nid)
            self.save_info(info)
        self.ns_info = info
        self.gen_before = 0 if info is None else info["gen"]
        self.stamp_before = 0.0 if info is None else info["last_mod"]

    @property
    def txn_is_read(self) -> bool:
        return False            # this write changes the record: read it afresh each time

    @property
    def state(self) -> NamespaceState:
        return factstate.namespace_state(self.ns, self.ns_info)

    def save_info(self, info: dict[str, Any] | None = None) -> None:
        txn, info = self.txn, self.ns_info if info is None else info
        txn.put(self.ns.encode(), json.dumps(info).encode(), db=self.ctx.dbs[b"ns"])

    # -- shared steps ------------------------------------------------------------------

    def record(self, fkey: bytes) -> tuple[str, str, dict[str, Any]]:
        return codec.decode_record(self.txn.get(fkey, db=self.ctx.dbs[b"facts"]))

    def put_record(self, fkey: bytes, fact_id: str, rec: dict[str, Any]) -> None:
        self.touched.append(codec.seq_of(fkey))
        self.txn.put(fkey, codec.encode_record(fact_id, rec), db=self.ctx.dbs[b"facts"])

    def log(self, op: bytes, seq: int) -> None:
        info = self.ns_info
        info["gen"] += 1
        self.txn.put(U64.pack(info["id"]) + U64.pack(info["gen"]), op + U64.pack(seq),
                     db=self.ctx.dbs[b"ixlog"])

    def move_due(self, fkey: bytes, fact_id: str, old: float | None, new: float | None) -> None:
        """Keep the expiry index entry of one fact at its due time (or none)."""
        if old == new:
            return
        nsb, seq = fkey[:8], fkey[8:]
        expiry = self.ctx.dbs[b"expiry"]
        if old is not None:
            self.txn.delete(nsb + codec.due_bytes(old) + seq, db=expiry)
        if new is not None:
            self.txn.put(nsb + codec.due_bytes(new) + seq, fact_id.encode(), db=expiry)

    def store_edges(self, seqs: Sequence[int], ids: Sequence[str],
                    edges: Iterable[tuple[int, int, float]]) -> None:
        """Similarity edges (SPEC-009 §5.2) from the write's ``seqs``, both directions."""
        txn, info = self.txn, self.ns_info
        edges_db, facts = self.ctx.dbs[b"edges"], self.ctx.dbs[b"facts"]
        nsb = U64.pack(info["id"])
        id_of = dict(zip(seqs, ids))
        for seq, other, sim in edges:
            other_id = id_of.get(other)
            if other_id is None:
                other_id = txn.get(fact_key(info["id"], other), db=facts)[:ID_LEN].decode()
            w = F32.pack(float(sim))
            if txn.put(nsb + U64.pack(seq) + U64.pack(other), w + other_id.encode(),
                       db=edges_db, overwrite=False):
                info["edges"] += 1
            txn.put(nsb + U64.pack(other) + U64.pack(seq), w + id_of[seq].encode(),
                    db=edges_db, overwrite=False)

    def unlink(self, seq: int) -> None:
        edges_db = self.ctx.dbs[b"edges"]
        nsb = U64.pack(self.ns_info["id"])
        prefix = nsb + U64.pack(seq)
        others = [key[16:24] for key, _ in prefix_items(self.txn, edges_db, prefix)]
        for other in others:
            self.txn.delete(prefix + other, db=edges_db)
            self.txn.delete(nsb + other + U64.pack(seq), db=edges_db)
        self.ns_info["edges"] -= len(others)

    def status_change(self, fkey: bytes, status: str, now: float,
                      only_if: Callable[[str, dict[str, Any]], bool] | None = None) -> bool:
        info, txn, dbs = self.ns_info, self.txn, self.ctx.dbs
        fact_id, old, rec = self.record(fkey)
        if old == status or (only_if is not None and not only_if(old, rec)):
            return False
        check_transition(fact_id, old, status)
        seq = codec.seq_of(fkey)
        old_c = factstate.digest_component(fact_id, rec["content_hash"], old, rec["modified_at"])
        self.move_due(fkey, fact_id, factstate.due_time(old, rec), factstate.due_time(status, rec))
        rec["status"] = status
        rec["modified_at"] = self.tick(now)
        if status == "DELETED":
            self.erase(fkey, rec)
        self.put_record(fkey, fact_id, rec)
        self.redigest(old_c, factstate.digest_component(fact_id, rec["content_hash"], status,
                                                    rec["modified_at"]))
        info["counts"][old] -= 1
        info["counts"][status] += 1
        if old in RETRIEVABLE and status not in RETRIEVABLE:
            txn.put(fkey, codec.STATUS_BYTE[status], db=dbs[b"hidden"])
            self.log(codec.HIDE, seq)
            info["changed"] += 1
        elif old not in RETRIEVABLE and status in RETRIEVABLE:
            txn.delete(fkey, db=dbs[b"hidden"])
            self.log(codec.SHOW, seq)
        elif status not in RETRIEVABLE:
            txn.put(fkey, codec.STATUS_BYTE[status], db=dbs[b"hidden"])
            self.log(codec.HIDE, seq)      # idempotent; tells caches the edges went
        return True

    def erase(self, fkey: bytes, rec: dict[str, Any]) -> None:
        """Erasure (SPEC-009 §8.3): content, vector, key, terms, edges go; a tombstone stays."""
        txn, dbs, nid = self.txn, self.ctx.dbs, self.ns_info["id"]
        seq = codec.seq_of(fkey)
        self.ctx.terms.remove(txn, nid, seq, rec["content"])
        if rec.get("key"):
            txn.delete(U64.pack(nid) + rec["key"].encode(), db=dbs[b"keys"])
        txn.delete(fkey, db=dbs[b"vectors"])
        txn.delete(fkey, db=dbs[b"members"])
        txn.delete(fkey, db=dbs[b"access"])
        self.unlink(seq)
        rec.update(content="", content_hash="", key=None, metadata={}, source_location=None)

    # -- the writes -----------------------------------------------------------------------

    def add_facts(self, records: Sequence[Mapping[str, Any]], vectors: np.ndarray, *,
                  now: float, link: Linker | None, source: Mapping[str, Any] | None,
                  supersede: Sequence[str]) -> list[str]:
        txn, dbs, info = self.txn, self.ctx.dbs, self.ns_info
        nid = info["id"]
        nsb = U64.pack(nid)
        keys_db = dbs[b"keys"]
        taken: set[str] = set()
        for rec in records:
            key = rec.get("key")
            if key is None:
                continue
            if key in taken or txn.get(nsb + key.encode(), db=keys_db) is not None:
                raise FactKeyExistsError(
                    f"key {key!r} is already taken in namespace {self.ns!r}; change its "
                    "fact with update_fact(key, content=...), or delete it first")
            taken.add(key)
        supersede_keys = [self.require(info, fid) for fid in supersede]
        meta = dbs[b"meta"]
        first = U64.unpack(txn.get(b"next_seq", db=meta))[0]
        seqs = list(range(first, first + len(records)))
        txn.put(b"next_seq", U64.pack(first + len(records)), db=meta)
        ids = [str(uuid.uuid4()) for _ in records]
        if link is not None:
            self.store_edges(seqs, ids, list(link(self, self.state, seqs, vectors, True)))
        for seq, fact_id, rec0, vec in zip(seqs, ids, records, vectors):
            fkey = fact_key(nid, seq)
            t = self.tick(now)
            rec = dict(rec0, status="ACTIVE", ingested_at=t, modified_at=t)
            self.put_record(fkey, fact_id, rec)
            self.move_due(fkey, fact_id, None, factstate.due_time("ACTIVE", rec))
            txn.put(fact_id.encode(), fkey, db=dbs[b"ids"])
            txn.put(fkey, vec.tobytes(), db=dbs[b"vectors"])
            if rec.get("key") is not None:
                txn.put(nsb + rec["key"].encode(), fkey, db=keys_db)
            self.ctx.terms.add(txn, nid, seq, rec["content"])
            self.log(codec.SHOW, seq)
            self.redigest(None, factstate.digest_component(fact_id, rec["content_hash"], "ACTIVE", t))
        info["counts"]["ACTIVE"] += len(records)
        info["adds"] += len(records)
        for fkey in supersede_keys:
            if self.record(fkey)[1] == "ACTIVE":
                self.status_change(fkey, "STALE", now)
        if source is not None:
            src = dict(source, fact_ids=list(ids), fact_count=len(ids), ingested_at=now)
            txn.put(nsb + src["source_id"].encode(), json.dumps(src).encode(), db=dbs[b"sources"])
        return ids

    def update_fact(self, fact_id: str, changes: Mapping[str, Any], vector: np.ndarray | None,
                    *, now: float, link: Linker | None) -> None:
        txn, dbs, info = self.txn, self.ctx.dbs, self.ns_info
        fkey = self.require(info, fact_id)
        _, status, rec = self.record(fkey)
        if status == "DELETED":
            raise StatusTransitionError(
                f"fact {fact_id} is DELETED (erased); add its content again as a new fact")
        seq = codec.seq_of(fkey)
        nid = info["id"]
        nsb = U64.pack(nid)
        keys_db = dbs[b"keys"]
        new_key = changes.get("key")
        rekey = "key" in changes and new_key != rec.get("key")
        if rekey and new_key is not None \
                and txn.get(nsb + new_key.encode(), db=keys_db) is not None:
            raise FactKeyExistsError(
                f"key {new_key!r} is already taken in namespace {self.ns!r}; "
                "pick another or delete that fact first")
        edges: list[tuple[int, int, float]] = []
        if vector is not None:
            vector = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self.dim)
            if link is not None:        # before anything changes: it reads the state before
                edges = list(link(self, self.state, [seq], vector, status in RETRIEVABLE))
        if rekey:
            if rec.get("key") is not None:
                txn.delete(nsb + rec["key"].encode(), db=keys_db)
            if new_key is not None:
                txn.put(nsb + new_key.encode(), fkey, db=keys_db)
        old_c = factstate.digest_component(fact_id, rec["content_hash"], status, rec["modified_at"])
        due_before = factstate.due_time(status, rec)
        if vector is not None:
            self.ctx.terms.remove(txn, nid, seq, rec["content"])
            self.ctx.terms.add(txn, nid, seq, changes["content"])
            txn.put(fkey, vector.tobytes(), db=dbs[b"vectors"])
            self.unlink(seq)
            self.store_edges([seq], [fact_id], edges)
            self.log(codec.SHOW if status in RETRIEVABLE else codec.HIDE, seq)
            info["changed"] += 1
            if status == "STALE":   # re-ingested: current again (SPEC-009 §2.2)
                info["counts"]["STALE"] -= 1
                info["counts"]["ACTIVE"] += 1
                status = rec["status"] = "ACTIVE"
        rec.update(changes)
        rec["modified_at"] = self.tick(now)
        self.put_record(fkey, fact_id, rec)
        self.move_due(fkey, fact_id, due_before, factstate.due_time(status, rec))
        self.redigest(old_c, factstate.digest_component(fact_id, rec["content_hash"], status,
                                                    rec["modified_at"]))

    def set_status(self, ids: Sequence[str], status: str, *, now: float) -> int:
        fkeys = [self.require(self.ns_info, fid) for fid in ids]
        return sum(self.status_change(fkey, status, now) for fkey in fkeys)

    def expire(self, ids: Sequence[str], *, now: float) -> int:
        fkeys = [self.fkey_of(self.ns_info, fid) for fid in ids]
        return sum(self.status_change(fkey, "STALE", now, still_due(now))
                   for fkey in fkeys if fkey is not None)

    def record_access(self, ids: Sequence[str], *, now: float) -> None:
        access = self.ctx.dbs[b"access"]
        for fid in ids:
            fkey = self.require(self.ns_info, fid)
            raw = self.txn.get(fkey, db=access)
            count = ACCESS.unpack(raw)[0] if raw else 0
            self.txn.put(fkey, ACCESS.pack(count + 1, float(now)), db=access)

    def save_communities(self, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], digest: str, *,
                         now: float) -> bool:
        info = self.ns_info
        info["adds"] = 0
        if info["cdigest"] == digest:
            return False
        members = self.ctx.dbs[b"members"]
        nsb = U64.pack(info["id"])
        for key in [k for k, _ in prefix_items(self.txn, members, nsb)]:
            self.txn.delete(key, db=members)
        for fid, cid in membership.items():
            self.txn.put(self.require(info, fid), U32.pack(int(cid)), db=members)
        info["labels"] = {str(c): list(k) for c, k in keywords.items()}
        info["cdigest"] = digest
        self.tick(now)
        return True

    def prune(self, upto: int) -> None:
        """Drop the change-feed entries up to generation ``upto``."""
        prefix = U64.pack(self.ns_info["id"])
        cursor = self.txn.cursor(db=self.ctx.dbs[b"ixlog"])
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix) and U64.unpack(cursor.key()[8:])[0] <= upto:
                if not cursor.delete():
                    break

    def index_expiry(self, start: int, batch: int) -> int | None:
        """Add up to ``batch`` facts from seq ``start`` on to the expiry index of a
        namespace written before it existed; the seq to go on from, or None when done."""
        info = self.ns_info
        if info is None or info.get("expiry"):
            return None
        prefix = U64.pack(info["id"])
        done = 0
        cursor = self.txn.cursor(db=self.ctx.dbs[b"facts"])
        found = cursor.set_range(prefix + U64.pack(start))
        for key, value in (cursor.iternext() if found else ()):
            if key[:8] != prefix:
                break
            if done >= batch:
                return U64.unpack(key[8:])[0]
            done += 1
            ttl = codec.HEAD.unpack_from(value, ID_LEN + 1)[2]
            if value[ID_LEN:ID_LEN + 1] != b"A" or ttl != ttl:    # NaN: no TTL
                continue
            rec = json.loads(value[codec.JSON_AT:])
            self.move_due(key, value[:ID_LEN].decode(), None, factstate.due_time("ACTIVE", rec))
        info["expiry"] = 1
        self.save_info()
        return None


