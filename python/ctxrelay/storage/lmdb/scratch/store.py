"""The scratch store itself (see the package doc for the two clocks, the layout and
durability)."""
from __future__ import annotations

import hashlib
import json
import marshal
import os
import struct
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from ctxrelay.errors import CorruptStoreError, CtxRelayError, InvalidArgumentError
from ctxrelay.storage.lmdb import base
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.lmdb.scratch.blobs import BlobDir
from ctxrelay.storage.common.scratch.checks import (check_duration, check_scratch_id, seconds,
                                                  session_digest)
from ctxrelay.storage.common.scratch.errors import ScratchBlobError
from ctxrelay.storage.common.scratch.base import (AUTO_PIN_REFERENCES, DEFAULT_DISK_BUDGET,
                                                  DEFAULT_FRESHNESS, DEFAULT_TTL,
                                                  RAW_TOKEN_LIMIT, ScratchBase, tally)
from ctxrelay.storage.lmdb.scratch.table import EntryTable
from ctxrelay.storage.common.scratch.records import (CheckReport, Evicted, EvictionReport,
                                                   ScratchEntry, ScratchStats, entry_of,
                                                   plain_entry, unknown)
from ctxrelay.storage.validation import check_session_id
from ctxrelay.text.summarize import DEFAULT_MAX_TOKENS

__all__ = ["ScratchStore", "open_scratch_store", "close_all", "FORMAT", "ENV_DIRNAME",
           "BLOB_DIRNAME", "DEFAULT_DISK_BUDGET", "DEFAULT_TTL", "DEFAULT_FRESHNESS",
           "AUTO_PIN_REFERENCES", "RAW_TOKEN_LIMIT"]

FORMAT = b"ctxrelay.storage.lmdb.scratch/1"
ENV_DIRNAME = "scratch.lmdb"
BLOB_DIRNAME = "blobs"
_DB_NAMES = (b"meta", b"entries", b"order", b"lru", b"expiry")
_DICT_CACHE_ENTRIES = 512          # entries whose read dict is kept (a few kB each)


# -- one shared store per path per process -----------------------------------------

def open_scratch_store(path: str | os.PathLike[str], **kw: Any) -> "ScratchStore":
    """The one shared :class:`ScratchStore` of ``path`` in this process.

    Keyword arguments apply when the store is first opened and are ignored
    afterwards (the open store keeps its settings).
    """
    return ScratchStore.open(path, **kw)


def close_all() -> None:
    """Close every scratch store opened in this process."""
    base.close_all(ScratchStore)


# -- the store -----------------------------------------------------------------

class ScratchStore(ScratchBase, LmdbStore):
    """The scratch buffer of every session, in one directory (see the module doc).

    Options: ``disk_budget_bytes`` (blob bytes kept, default 256 MiB),
    ``default_ttl`` (retention seconds, default 3600, None: no TTL eviction),
    ``summary_max_tokens`` (default 256) and ``model`` (tokenizer for it,
    default cl100k_base), ``tool_freshness`` (tool name -> class, the tool
    registry; unlisted tools are VOLATILE), ``stale_policy`` (default
    ``tool-output-stale`` for :meth:`gate`/:meth:`render`), ``retain``
    (``evaporate``; ``audit`` pins every output; ``all`` never evicts),
    ``auto_pin_after`` (distinct referencing turns that pin an entry, default
    2, None: never) and ``map_size`` (initial LMDB map; it grows by itself).
    """

    KIND = "scratch store"
    FORMAT = FORMAT
    DB_NAMES = _DB_NAMES
    DERIVED_DBS = frozenset({b"order", b"lru", b"expiry"})   # rebuilt by verify(repair=True)
    ENV_DIRNAME = ENV_DIRNAME
    OPEN_HINT = "ctxrelay.storage.lmdb.scratch.open_scratch_store(path)"
    FULL_HINT = "evict or delete entries"
    FORMAT_HINT = "point the scratch store at its own directory, or move this one away"

    def __init__(self, path: str | os.PathLike[str], *,
                 disk_budget_bytes: int = DEFAULT_DISK_BUDGET,
                 default_ttl: float | None = DEFAULT_TTL,
                 summary_max_tokens: int = DEFAULT_MAX_TOKENS,
                 model: str = "cl100k_base",
                 tool_freshness: Mapping[str, str] | None = None,
                 stale_policy: str | None = None,
                 retain: str = "evaporate",
                 auto_pin_after: int | None = AUTO_PIN_REFERENCES,
                 map_size: int = 1 << 28) -> None:
        self._configure(disk_budget_bytes=disk_budget_bytes, default_ttl=default_ttl,
                        summary_max_tokens=summary_max_tokens, model=model,
                        tool_freshness=tool_freshness, stale_policy=stale_policy,
                        retain=retain, auto_pin_after=auto_pin_after)
        if isinstance(map_size, bool) or not isinstance(map_size, int) or map_size < 1 << 16:
            raise InvalidArgumentError(f"map_size must be an int >= 65536, not {map_size!r}")
        # LMDB key -> (stored record bytes, marshal bytes of its entry_dict()).
        self._dicts: dict[bytes, tuple[bytes, bytes]] = {}
        self._dicts_lock = threading.Lock()
        super().__init__(path, map_size=map_size)
        try:
            self._blobs = BlobDir(os.path.join(self._path, BLOB_DIRNAME))
        except BaseException:
            self.close()
            raise
        self._table = EntryTable(self.dbs, f"scratch store {self._path}")

    # -- opening and closing -------------------------------------------

    def _initialise(self, txn: Any, dbs: dict[bytes, Any]) -> None:
        EntryTable(dbs, self._path).initialise(txn)

    def _on_close(self) -> None:
        self._dicts.clear()

    def location(self) -> str:
        """Where the blobs live (SPEC-038 §4 ``scratch.location()``)."""
        return self._blobs.location()

    # The transactions of the base class, under the names this module uses
    # (aliases, not wrappers: a summary read is a few microseconds).
    _read = LmdbStore.read
    _write = LmdbStore.write

    # -- keys, records, usage ---------------------------------------------

    @staticmethod
    def _session_key(session_id: str) -> bytes:
        return session_digest(session_id)

    @staticmethod
    def _entry_key(session_id: str, scratch_id: str) -> bytes:
        """The entries key of a checked session id and scratch id."""
        if not isinstance(session_id, str):
            check_session_id(session_id)              # raises, saying what to pass
        return session_digest(session_id) + check_scratch_id(scratch_id).encode("ascii")

    def _require(self, txn: Any, session_id: str, scratch_id: str
                 ) -> tuple[bytes, dict[str, Any]]:
        key = self._session_key(session_id) + scratch_id.encode("ascii")
        record = self._table.load(txn, key)
        if record is None:
            raise unknown(session_id, scratch_id)
        return key, record

    # -- put ------------------------------------------------------------------

    def _pinned_bytes(self) -> int:
        return self._read(lambda txn: self._table.usage(txn)[3])

    def _store_new(self, record: dict[str, Any], data: bytes) -> dict[str, Any]:
        session_key = self._session_key(record["session_id"])
        self._blobs.write(session_key, record["scratch_id"], data)
        try:
            record, victims = self._write(
                lambda txn: self._insert_txn(txn, session_key, record))
        except BaseException:
            self._blobs.remove(session_key, record["scratch_id"])
            raise
        self._remove_blobs(victims)
        return record

    def _insert_txn(self, txn: Any, session_key: bytes, record: dict[str, Any]
                    ) -> tuple[dict[str, Any], list[Evicted]]:
        usage = self._table.usage(txn)
        if not record["pinned"] and self._retain != "all":
            self._check_room(usage[3], record["size"])
        key, record = self._table.insert(txn, session_key, record, usage)
        victims = ([] if self._retain == "all"
                   else self._table.evict(txn, record["created"], self._budget, protect=key))
        return record, victims

    def _remove_blobs(self, victims: list[Evicted]) -> None:
        for victim in victims:
            # A failure leaves an orphan blob, which check() removes.
            self._blobs.remove(self._session_key(victim.session_id), victim.scratch_id)

    # -- eviction ----------------------------------------------------------

    def evict(self, now: float | datetime | None = None) -> EvictionReport:
        """Drop expired unpinned entries, then the least recently used unpinned
        ones until the blob bytes fit the budget.  Never touches pinned
        entries; with ``retain='all'`` nothing is evicted."""
        moment = seconds(now)

        def run(txn: Any) -> tuple[list[Evicted], list[int]]:
            victims = [] if self._retain == "all" else self._table.evict(txn, moment, self._budget)
            return victims, self._table.usage(txn)
        victims, usage = self._write(run)
        self._remove_blobs(victims)
        return EvictionReport(evicted=tuple(victims),
                              freed_bytes=sum(v.size for v in victims),
                              bytes=usage[1], pinned_bytes=usage[3],
                              over_budget=usage[1] > self._budget)

    # -- reading ------------------------------------------------------------

    def get(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None, touch: bool = True) -> ScratchEntry:
        """The entry ``scratch_id`` of ``session_id``; counts as a use for LRU
        unless ``touch=False``.
        @raises UnknownScratchError if the session holds no such entry.
        """
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        if not touch:
            return self._read(lambda txn: entry_of(self._require(txn, session_id,
                                                               scratch_id)[1]))
        moment = seconds(now)

        def run(txn: Any) -> ScratchEntry:
            key, record = self._require(txn, session_id, scratch_id)
            return entry_of(self._table.touch(txn, key, record, moment))
        return self._write(run)

    def entry_dict(self, session_id: str, scratch_id: str) -> dict[str, Any]:
        """``get(session_id, scratch_id, touch=False).to_dict()``, made for the
        hot read path (a summary read through janus); no use is counted.

        Each stored version of an entry is turned into its dict once and kept
        as marshal bytes; every call returns a new deep copy of it
        (``marshal.loads``, a few times cheaper than decoding the JSON
        record), so no caller can change what the next call reads.  The copy
        is used only while the stored record is byte for byte the one it was
        made from, so a pin, touch, reference or another process's write is
        seen by the very next read.
        @raises UnknownScratchError if the session holds no such entry.
        """
        key = self._entry_key(session_id, scratch_id)
        stored = self._read(lambda txn: txn.get(key, db=self._table.entries))
        if stored is None:
            raise unknown(session_id, scratch_id)
        cached = self._dicts.get(key)
        if cached is not None and cached[0] == stored:
            return marshal.loads(cached[1])
        record = json.loads(stored)
        # Just decoded, so every object in it is new: the caller may own them.
        out = plain_entry(record, record["args"], record["structured"])
        frozen = marshal.dumps(out)
        with self._dicts_lock:
            if len(self._dicts) >= _DICT_CACHE_ENTRIES and key not in self._dicts:
                del self._dicts[next(iter(self._dicts))]
            self._dicts[key] = (stored, frozen)
        return out

    def raw(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None) -> str | bytes:
        """The full tool output, read from its blob (``str`` if it was put as str).
        @raises ScratchBlobError if the blob is missing or altered.
        """
        entry = self.get(session_id, scratch_id, now=now)
        session_key = self._session_key(entry.session_id)
        path = self._blobs.path_of(session_key, entry.scratch_id)
        try:
            data = self._blobs.read(session_key, entry.scratch_id)
        except FileNotFoundError:
            self.get(session_id, scratch_id, touch=False)   # evicted meanwhile?
            raise ScratchBlobError(
                f"the blob of scratch entry {scratch_id} ({path}) is missing; run "
                "check() to drop the entry, and re-run the tool for its output") from None
        except OSError as exc:
            raise ScratchBlobError(
                f"cannot read the blob of scratch entry {scratch_id} ({exc.strerror}); "
                "check the store directory's permissions") from None
        if hashlib.sha256(data).hexdigest() != entry.content_sha256:
            raise ScratchBlobError(
                f"the blob of scratch entry {scratch_id} ({path}) does not match its "
                "sha256: it was changed on disk; delete the entry and re-run the tool")
        return data.decode("utf-8") if entry.raw_type == "str" else data

    def list(self, session_id: str) -> list[ScratchEntry]:
        """The session's entries in the order they were put (empty if none)."""
        session_id = check_session_id(session_id)
        session_key = self._session_key(session_id)

        def read(txn: Any) -> list[ScratchEntry]:
            out = []
            cursor = txn.cursor(db=self._table.order)
            if not cursor.set_range(session_key):
                return out
            for order_key, scratch_id in cursor:
                if not order_key.startswith(session_key):
                    break
                record = self._table.load(txn, session_key + scratch_id)
                if record is None:
                    raise CorruptStoreError(
                        f"the order index of {self._path} names an entry that is not "
                        "stored; move the store away and open a new one")
                out.append(entry_of(record))
            return out
        return self._read(read)

    def _latest(self, session_id: str, n: int) -> list[ScratchEntry]:
        # a backwards read of the order index: bounded work, whatever the number of entries
        session_key = self._session_key(session_id)

        def read(txn: Any) -> list[ScratchEntry]:
            out: list[ScratchEntry] = []
            cursor = txn.cursor(db=self._table.order)
            if cursor.set_range(session_key + b"\xff" * 8):
                positioned = cursor.prev()
            else:
                positioned = cursor.last()
            while positioned and len(out) < n and cursor.key().startswith(session_key):
                record = self._table.load(txn, session_key + cursor.value())
                if record is not None:
                    out.append(entry_of(record))
                positioned = cursor.prev()
            out.reverse()
            return out
        return self._read(read)

    def _most_recent(self, session_id: str, tool_type: str | None,
                     kind: str | None) -> ScratchEntry | None:
        session_key = self._session_key(session_id)

        def read(txn: Any) -> ScratchEntry | None:
            cursor = txn.cursor(db=self._table.order)
            if cursor.set_range(session_key + b"\xff" * 8):
                positioned = cursor.prev()
            else:
                positioned = cursor.last()
            while positioned and cursor.key().startswith(session_key):
                record = self._table.load(txn, session_key + cursor.value())
                if record is not None and (tool_type is None or
                                           record["tool_name"] == tool_type) \
                        and (kind is None or record["kind"] == kind):
                    return entry_of(record)
                positioned = cursor.prev()
            return None
        return self._read(read)

    # -- pinning, references, deletion -----------------------------------------

    def _set_pin(self, session_id: str, scratch_id: str, reason: str | None) -> ScratchEntry:
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)

        def run(txn: Any) -> ScratchEntry:
            key, record = self._require(txn, session_id, scratch_id)
            return entry_of(self._table.pin(txn, key, record, reason))
        return self._write(run)

    def _add_reference(self, session_id: str, scratch_id: str, turn_id: int,
                       moment: float) -> ScratchEntry:
        def run(txn: Any) -> ScratchEntry:
            key, record = self._require(txn, session_id, scratch_id)
            record = self._table.touch(txn, key, record, moment)
            referenced = self._referenced(record, turn_id)
            if referenced is not None:
                record = referenced
                self._table.save(txn, key, record)
            if self._auto_pins(record):
                record = self._table.pin(txn, key, record, "auto")
            return entry_of(record)
        return self._write(run)

    def delete(self, session_id: str, scratch_id: str) -> None:
        """Remove the entry and its blob, pinned or not."""
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)

        def run(txn: Any) -> Evicted:
            key, _ = self._require(txn, session_id, scratch_id)
            return self._table.delete(txn, key, "deleted")
        self._remove_blobs([self._write(run)])

    # -- stats and check ---------------------------------------------------------

    def stats(self, session_id: str | None = None) -> ScratchStats:
        """Totals over the store, or over one session."""
        prefix = None if session_id is None else self._session_key(
            check_session_id(session_id))

        def records(txn: Any) -> Iterator[tuple[bytes, dict[str, Any]]]:
            cursor = txn.cursor(db=self._table.entries)
            found = cursor.set_range(prefix) if prefix is not None else cursor.first()
            while found:
                key = cursor.key()
                if prefix is not None and not key.startswith(prefix):
                    break
                yield key[:32], json.loads(cursor.value())
                found = cursor.next()
        return self._read(lambda txn: tally(records(txn), self._budget))

    def check(self, *, grace_seconds: float = 60.0, verify: bool = False) -> CheckReport:
        """Reconcile blobs and metadata after a crash.

        Deletes temporary files and blobs that no entry names (a crash between
        blob and metadata) once their mtime is ``grace_seconds`` old, so a put
        in flight in another thread or process keeps its blob; drops entries
        whose blob is gone; with ``verify=True`` also re-hashes every blob and
        reports (keeps) the ones that changed.  Files that are not ours are
        listed, never deleted.
        """
        grace = check_duration(grace_seconds, "grace_seconds") or 0.0
        known: set[tuple[str, str]] = set()

        def scan(txn: Any) -> list[tuple[bytes, dict[str, Any]]]:
            out = []
            for key, value in txn.cursor(db=self._table.entries):
                record = json.loads(value)
                known.add((key[:32].hex(), record["scratch_id"]))
                out.append((key, record))
            return out
        records = self._read(scan)
        swept = self._blobs.sweep(grace=grace, known=known, named=self._named)
        dangling, corrupt = [], []
        for key, record in records:
            session_key, scratch_id = key[:32], record["scratch_id"]
            if not self._blobs.exists(session_key, scratch_id):
                if self._write(lambda txn, key=key: self._drop_dangling(txn, key)):
                    dangling.append((record["session_id"], scratch_id))
            elif verify and self._blobs.sha256(session_key, scratch_id) \
                    != record["content_sha256"]:
                corrupt.append((record["session_id"], scratch_id))
        return CheckReport(orphan_blobs=tuple(swept.orphans), temp_files=tuple(swept.temps),
                           dangling=tuple(dangling), corrupt=tuple(corrupt),
                           unknown_files=tuple(swept.unknown))

    def blob_problems(self) -> list[str]:
        """Re-hash every entry's blob: the missing ones and the ones whose bytes no
        longer match the entry's sha256 (read only; entries that fail their own
        checksum are left to :meth:`damaged_records`)."""
        def scan(txn: Any) -> list[tuple[bytes, dict[str, Any]]]:
            raw = getattr(txn, "raw", txn)
            out = []
            for key in [bytes(k) for k in raw.cursor(db=self._table.entries).iternext(values=False)]:
                try:
                    out.append((key, json.loads(txn.get(key, db=self._table.entries))))
                except (CorruptStoreError, ValueError):
                    continue
            return out
        problems = []
        for key, record in self._read(scan):
            session_key, scratch_id = key[:32], record.get("scratch_id", "")
            try:
                if self._blobs.sha256(session_key, scratch_id) != record.get("content_sha256"):
                    problems.append(f"the blob of scratch entry {scratch_id} of "
                                    f"{record.get('session_id')!r} does not match its sha256")
            except OSError as exc:
                problems.append(f"the blob of scratch entry {scratch_id} of "
                                f"{record.get('session_id')!r} cannot be read ({exc.strerror})")
            except CtxRelayError as exc:
                problems.append(str(exc))
        return problems

    # -- copying (ctxrelay migrate) -----------------------------------------------

    def sessions(self) -> list[str]:
        """The ids of the sessions holding entries, sorted."""
        def read(txn: Any) -> list[str]:
            found = []
            cursor = txn.cursor(db=self._table.entries)
            positioned = cursor.first()
            while positioned:
                found.append(json.loads(cursor.value())["session_id"])
                # scratch ids are ASCII: every key of this session sorts before 0xff
                positioned = cursor.set_range(cursor.key()[:32] + b"\xff")
            return sorted(found)
        return self._read(read)

    def blob(self, session_id: str, scratch_id: str) -> bytes:
        """The output's bytes, checked against its hash, without counting a use."""
        entry = self.get(session_id, scratch_id, touch=False)
        session_key = self._session_key(entry.session_id)
        try:
            data = self._blobs.read(session_key, entry.scratch_id)
        except OSError as exc:
            raise ScratchBlobError(
                f"cannot read the blob of scratch entry {scratch_id} ({exc.strerror}); run "
                "check() to drop an entry whose blob is gone") from None
        if hashlib.sha256(data).hexdigest() != entry.content_sha256:
            raise ScratchBlobError(
                f"the blob of scratch entry {scratch_id} does not match its sha256: it was "
                "changed on disk; delete the entry and re-run the tool")
        return data

    def restore(self, entries: Any) -> int:
        """Write copies of ``(entry, blob)`` pairs as they are (ids, times, last use,
        insertion numbers, pins, references): the blobs first, durably, then every
        entry with its indexes and usage in one transaction.  No eviction runs.

        @raises SessionExistsError if an id is held already (nothing written).
        """
        from ctxrelay.errors import SessionExistsError
        from ctxrelay.storage.common.scratch.records import copied_record
        copies = [(copied_record(entry, data), data) for entry, data in entries]
        keys = [self._session_key(r["session_id"]) + r["scratch_id"].encode("ascii")
                for r, _ in copies]

        def clash(txn: Any) -> None:
            for key, (record, _) in zip(keys, copies):
                if txn.get(key, db=self._table.entries) is not None:
                    raise SessionExistsError(
                        f"this scratch store already holds entry {record['scratch_id']} of "
                        f"session {record['session_id']!r}; copy into a store without the "
                        "session's entries. Nothing was written")
        self._read(clash)
        written = []
        try:
            for key, (record, data) in zip(keys, copies):
                self._blobs.write(key[:32], record["scratch_id"], data)
                written.append(key)

            def run(txn: Any) -> int:
                clash(txn)
                usage = self._table.usage(txn)
                top = 0
                for key, (record, _) in zip(keys, copies):
                    self._table.place(txn, key, record, usage)
                    top = max(top, record["seq"])
                self._table.set_usage(txn, usage)
                raw = txn.get(b"next_seq", db=self._table.meta)
                if raw is None or struct.unpack(">Q", raw)[0] <= top:
                    txn.put(b"next_seq", struct.pack(">Q", top + 1), db=self._table.meta)
                return len(copies)
            return self._write(run)
        except BaseException:
            for key in written:
                if not self._named(key[:32], key[32:].decode("ascii")):
                    self._blobs.remove(key[:32], key[32:].decode("ascii"))
            raise

    def verify(self, *, repair: bool = False) -> tuple[str, ...]:
        """Compare the derived records (usage totals, the order, lru and expiry
        indexes) with the entries; with ``repair=True`` rewrite the ones that
        disagree from the entries, in one write transaction.

        Complements :meth:`check`, which reconciles blobs with entries: this
        one never touches a file.  Returns the problems found.
        """
        return self._write(lambda txn: self._table.verify(txn, repair=True)) if repair \
            else self._read(lambda txn: self._table.verify(txn, repair=False))
    def _named(self, session_key: bytes, scratch_id: str) -> bool:
        """Whether an entry names this blob now (a put may have committed)."""
        key = session_key + scratch_id.encode("ascii")
        return self._read(lambda txn: txn.get(key, db=self._table.entries) is not None)

    def _drop_dangling(self, txn: Any, key: bytes) -> bool:
        record = self._table.load(txn, key)
        if record is None or self._blobs.exists(key[:32], record["scratch_id"]):
            return False
        self._table.delete(txn, key, "dangling")
        return True
