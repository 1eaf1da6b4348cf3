"""The entries of a scratch store in LMDB and the records derived from them.

``entries`` (S + id -> the entry's JSON record), ``order`` (S + seq -> id),
``lru`` (access time + S + id, unpinned entries), ``expiry`` (retention end +
S + id, unpinned entries with a ttl) and ``meta``'s ``usage`` (entries, blob
bytes, pinned entries, pinned bytes) and ``next_seq``.  Every method works in
the caller's transaction, so an entry and everything derived from it change
together.  Eviction (TTL, then LRU down to a budget) lives here because it is
a walk over these indexes.
"""
from __future__ import annotations

import json
import struct
from typing import Any

from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.common.scratch.checks import micros
from ctxrelay.storage.common.scratch.records import Evicted

__all__ = ["EntryTable"]

_U64 = struct.Struct(">Q")
#: A session's key is the sha256 of its id; every entry key and order key starts with it.
SESSION_KEY_BYTES = 32
_USAGE = struct.Struct(">QQQQ")


class EntryTable:
    """The five databases of a scratch store (``dbs``); ``where`` names it in errors."""

    def __init__(self, dbs: dict[bytes, Any], where: str) -> None:
        self.meta, self.entries = dbs[b"meta"], dbs[b"entries"]
        self.order, self.lru, self.expiry = dbs[b"order"], dbs[b"lru"], dbs[b"expiry"]
        self.where = where

    def initialise(self, txn: Any) -> None:
        """The first records of a new store."""
        txn.put(b"next_seq", _U64.pack(1), db=self.meta)
        txn.put(b"usage", _USAGE.pack(0, 0, 0, 0), db=self.meta)

    def next_seq(self, txn: Any) -> int:
        """Allocate the next insertion number."""
        raw = txn.get(b"next_seq", db=self.meta)
        seq = _U64.unpack(raw)[0] if raw is not None else 1
        txn.put(b"next_seq", _U64.pack(seq + 1), db=self.meta)
        return seq

    def insert(self, txn: Any, session_key: bytes, record: dict[str, Any],
               usage: list[int]) -> tuple[bytes, dict[str, Any]]:
        """Store a new entry (its insertion number allocated here) with its order,
        index and usage records; ``usage`` is the total read in this txn."""
        seq = self.next_seq(txn)
        record = {**record, "seq": seq}
        key = session_key + record["scratch_id"].encode("ascii")
        if txn.get(key, db=self.entries) is not None:
            raise CorruptStoreError(
                f"scratch id {record['scratch_id']} is already taken; the random id "
                "generator repeated itself, which should not happen: retry the put")
        self.place(txn, key, record, usage)
        self.set_usage(txn, usage)
        return key, record

    def place(self, txn: Any, key: bytes, record: dict[str, Any], usage: list[int]) -> None:
        """Write an entry whose insertion number is already set, with its order and
        index records; ``usage`` (the total read in this txn) is counted up here and
        written by the caller."""
        self.save(txn, key, record)
        txn.put(key[:SESSION_KEY_BYTES] + _U64.pack(record["seq"]),
                record["scratch_id"].encode("ascii"), db=self.order)
        usage[0] += 1
        usage[1] += record["size"]
        if record["pinned"]:
            usage[2] += 1
            usage[3] += record["size"]
        else:
            self.index(txn, key, record, add=True)

    def usage(self, txn: Any) -> list[int]:
        raw = txn.get(b"usage", db=self.meta)
        if raw is None or len(raw) != _USAGE.size:
            raise CorruptStoreError(
                f"scratch store {self.where} has no usage record; move it away and "
                "open a new store")
        return list(_USAGE.unpack(raw))

    def set_usage(self, txn: Any, usage: list[int]) -> None:
        txn.put(b"usage", _USAGE.pack(*(max(v, 0) for v in usage)), db=self.meta)

    def load(self, txn: Any, key: bytes) -> dict[str, Any] | None:
        raw = txn.get(key, db=self.entries)
        return None if raw is None else json.loads(raw)

    def save(self, txn: Any, key: bytes, record: dict[str, Any]) -> None:
        txn.put(key, json.dumps(record, ensure_ascii=False, separators=(",", ":"))
                .encode("utf-8"), db=self.entries)

    @staticmethod
    def lru_key(key: bytes, record: dict[str, Any]) -> bytes:
        return _U64.pack(record["access_us"]) + key

    @staticmethod
    def expiry_key(key: bytes, record: dict[str, Any]) -> bytes | None:
        if record["ttl"] is None:
            return None
        return _U64.pack(micros(record["created"] + record["ttl"])) + key

    def index(self, txn: Any, key: bytes, record: dict[str, Any], *, add: bool) -> None:
        """Put (or take) an unpinned entry in (out of) the lru and expiry indexes."""
        for db, index_key in ((self.lru, self.lru_key(key, record)),
                              (self.expiry, self.expiry_key(key, record))):
            if index_key is None:
                continue
            if add:
                txn.put(index_key, b"", db=db)
            else:
                txn.delete(index_key, db=db)

    def evict(self, txn: Any, now: float, budget: int, *, protect: bytes | None = None
              ) -> list[Evicted]:
        """Drop expired unpinned entries, then the least recently used unpinned ones
        until the blob bytes fit ``budget`` (``protect``: a key never dropped)."""
        victims: list[Evicted] = []
        limit = micros(now)
        expired = []
        for index_key in txn.cursor(db=self.expiry).iternext(values=False):
            if _U64.unpack(index_key[:8])[0] >= limit:
                break
            if index_key[8:] != protect:
                expired.append(index_key[8:])
        for key in expired:
            victims.append(self.delete(txn, key, "ttl"))
        usage = self.usage(txn)
        excess = usage[1] - budget
        chosen = []
        if excess > 0:
            for index_key in txn.cursor(db=self.lru).iternext(values=False):
                if excess <= 0:
                    break
                key = index_key[8:]
                if key == protect:
                    continue
                record = self.load(txn, key)
                if record is None:
                    raise CorruptStoreError(
                        f"the LRU index of {self.where} names an entry that is not "
                        "stored; move the store away and open a new one")
                chosen.append(key)
                excess -= record["size"]
        for key in chosen:
            victims.append(self.delete(txn, key, "lru"))
        return victims

    def delete(self, txn: Any, key: bytes, reason: str) -> Evicted:
        record = self.load(txn, key)
        if record is None:
            raise CorruptStoreError(
                f"an index of {self.where} names an entry that is not stored; move "
                "the store away and open a new one")
        txn.delete(key, db=self.entries)
        txn.delete(key[:32] + _U64.pack(record["seq"]), db=self.order)
        usage = self.usage(txn)
        usage[0] -= 1
        usage[1] -= record["size"]
        if record["pinned"]:
            usage[2] -= 1
            usage[3] -= record["size"]
        else:
            self.index(txn, key, record, add=False)
        self.set_usage(txn, usage)
        return Evicted(session_id=record["session_id"], scratch_id=record["scratch_id"],
                       reason=reason, size=record["size"])

    def touch(self, txn: Any, key: bytes, record: dict[str, Any],
                   moment: float) -> dict[str, Any]:
        access = micros(moment)
        if access <= record["access_us"]:
            return record
        if not record["pinned"]:
            txn.delete(self.lru_key(key, record), db=self.lru)
        record = {**record, "access_us": access, "last_access": moment}
        if not record["pinned"]:
            txn.put(self.lru_key(key, record), b"", db=self.lru)
        self.save(txn, key, record)
        return record

    def pin(self, txn: Any, key: bytes, record: dict[str, Any],
                 reason: str | None) -> dict[str, Any]:
        pinned = reason is not None
        if record["pinned"] == pinned:
            return record
        usage = self.usage(txn)
        if pinned:
            self.index(txn, key, record, add=False)
            usage[2] += 1
            usage[3] += record["size"]
        else:
            self.index(txn, key, record, add=True)
            usage[2] -= 1
            usage[3] -= record["size"]
        self.set_usage(txn, usage)
        record = {**record, "pinned": pinned, "pin_reason": reason}
        self.save(txn, key, record)
        return record

    def verify(self, txn: Any, *, repair: bool) -> tuple[str, ...]:
        """The derived records' disagreements with the entries (rewritten with ``repair``)."""
        usage = [0, 0, 0, 0]
        order: dict[bytes, bytes] = {}
        lru: set[bytes] = set()
        expiry: set[bytes] = set()
        for key, value in txn.cursor(db=self.entries):
            record = json.loads(value)
            usage[0] += 1
            usage[1] += record["size"]
            if record["pinned"]:
                usage[2] += 1
                usage[3] += record["size"]
            else:
                lru.add(self.lru_key(key, record))
                end = self.expiry_key(key, record)
                if end is not None:
                    expiry.add(end)
            order[key[:32] + _U64.pack(record["seq"])] = record["scratch_id"].encode("ascii")
        raw_usage = txn.get(b"usage", db=self.meta)
        have_usage = (list(_USAGE.unpack(raw_usage))
                      if raw_usage is not None and len(raw_usage) == _USAGE.size else None)
        have_order = dict(txn.cursor(db=self.order).iternext())
        have_lru = set(txn.cursor(db=self.lru).iternext(values=False))
        have_expiry = set(txn.cursor(db=self.expiry).iternext(values=False))
        problems = []
        if have_usage != usage:
            problems.append(f"usage record is {have_usage} (entries, bytes, pinned "
                            f"entries, pinned bytes) but the entries give {usage}")
        for name, want, have in (("order", order, have_order), ("lru", lru, have_lru),
                                 ("expiry", expiry, have_expiry)):
            if want != have:
                wrong = len(set(want) ^ set(have)) if isinstance(want, set) else \
                    len({k for k in set(want) | set(have) if want.get(k) != have.get(k)})
                problems.append(f"the {name} index has {wrong} record(s) that disagree "
                                "with the entries")
        if repair and problems:
            self.set_usage(txn, usage)
            for db, want, have in ((self.order, order, have_order),
                                   (self.lru, dict.fromkeys(lru, b""), have_lru),
                                   (self.expiry, dict.fromkeys(expiry, b""), have_expiry)):
                for key in have:
                    txn.delete(key, db=db)
                for key, value in want.items():
                    txn.put(key, value, db=db)
        return tuple(problems)
