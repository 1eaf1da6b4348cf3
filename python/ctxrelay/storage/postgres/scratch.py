"""The scratch buffer in PostgreSQL (table ``scratch_entries``, migration 4).

One row per tool output holds its entry (the embedded store's JSON record)
and its blob (``bytea``), so a put is one transaction: the output is durable
exactly when its entry is visible, and there are no orphan files for
:meth:`PgScratch.check` to sweep (it re-hashes blobs with ``verify=True``).
Usage totals are sums over the rows and the order, LRU and expiry indexes are
PostgreSQL indexes, so nothing derived can drift (:meth:`PgScratch.verify`
has nothing to repair).  Puts and evictions take one transaction-scoped
advisory lock, so the byte budget holds across processes.  Validation,
summaries, ids, freshness and promotion are the embedded store's
(:mod:`ctxrelay.storage.lmdb.scratch`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ctxrelay.storage.common.scratch.checks import check_duration, check_scratch_id, micros, seconds
from ctxrelay.storage.common.scratch.errors import ScratchBlobError
from ctxrelay.storage.common.scratch.base import (AUTO_PIN_REFERENCES, DEFAULT_DISK_BUDGET,
                                                  DEFAULT_TTL, ScratchBase, tally)
from ctxrelay.storage.common.scratch.records import (CheckReport, Evicted, EvictionReport,
                                                   ScratchEntry, ScratchStats, copied_record,
                                                   entry_of, plain_entry, unknown)
from ctxrelay.storage.postgres.part import PgPart
from ctxrelay.storage.validation import check_session_id
from ctxrelay.text.summarize import DEFAULT_MAX_TOKENS

__all__ = ["PgScratch"]

_LOCK = "ctxrelay-scratch-budget"


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _expires(record: dict[str, Any]) -> int | None:
    return None if record["ttl"] is None else micros(record["created"] + record["ttl"])


class PgScratch(ScratchBase, PgPart):
    """A :class:`~ctxrelay.storage.interfaces.scratch.ScratchBuffer` in PostgreSQL
    (the options of :class:`ctxrelay.storage.lmdb.scratch.ScratchStore`)."""

    WHAT = "the scratch buffer"

    def __init__(self, db: Any, *, disk_budget_bytes: int = DEFAULT_DISK_BUDGET,
                 default_ttl: float | None = DEFAULT_TTL,
                 summary_max_tokens: int = DEFAULT_MAX_TOKENS, model: str = "cl100k_base",
                 tool_freshness: Mapping[str, str] | None = None,
                 stale_policy: str | None = None, retain: str = "evaporate",
                 auto_pin_after: int | None = AUTO_PIN_REFERENCES) -> None:
        self._configure(disk_budget_bytes=disk_budget_bytes, default_ttl=default_ttl,
                        summary_max_tokens=summary_max_tokens, model=model,
                        tool_freshness=tool_freshness, stale_policy=stale_policy,
                        retain=retain, auto_pin_after=auto_pin_after)
        PgPart.__init__(self, db)

    # -- identity -----------------------------------------------------------------------

    def location(self) -> str:
        """Where the blobs live: the store's PostgreSQL schema."""
        return f"{self._db.url} (table scratch_entries)"

    # -- rows ----------------------------------------------------------------------------

    @staticmethod
    def _load(cur: Any, session_id: str, scratch_id: str, *, lock: bool = False
              ) -> dict[str, Any] | None:
        row = cur.execute("SELECT record FROM scratch_entries WHERE session_id = %s "
                          "AND scratch_id = %s" + (" FOR UPDATE" if lock else ""),
                          (session_id, scratch_id)).fetchone()
        return None if row is None else json.loads(row[0])

    def _require(self, cur: Any, session_id: str, scratch_id: str, *, lock: bool = False
                 ) -> dict[str, Any]:
        record = self._load(cur, session_id, scratch_id, lock=lock)
        if record is None:
            raise unknown(session_id, scratch_id)
        return record

    @staticmethod
    def _save(cur: Any, record: dict[str, Any]) -> None:
        cur.execute("UPDATE scratch_entries SET record = %s, pinned = %s, access_us = %s "
                    "WHERE session_id = %s AND scratch_id = %s",
                    (_dumps(record), record["pinned"], record["access_us"],
                     record["session_id"], record["scratch_id"]))

    @staticmethod
    def _usage(cur: Any) -> tuple[int, int]:
        """(blob bytes, pinned blob bytes) of the whole store."""
        row = cur.execute("SELECT coalesce(sum(size), 0), "
                          "coalesce(sum(size) FILTER (WHERE pinned), 0) "
                          "FROM scratch_entries").fetchone()
        return int(row[0]), int(row[1])

    # -- put -------------------------------------------------------------------------------

    def _pinned_bytes(self) -> int:
        return self._read(self._usage)[1]

    def _store_new(self, record: dict[str, Any], data: bytes) -> dict[str, Any]:
        return self._run(lambda cur: self._insert(cur, record, data))

    def _insert(self, cur: Any, record: dict[str, Any], data: bytes) -> dict[str, Any]:
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"{_LOCK}:{self._db.schema}",))
        if not record["pinned"] and self._retain != "all":
            self._check_room(self._usage(cur)[1], record["size"])
        seq = cur.execute("INSERT INTO scratch_entries (session_id, scratch_id, record, blob, "
                          "size, pinned, access_us, expires_us) "
                          "VALUES (%s, %s, '{}', %s, %s, %s, %s, %s) RETURNING seq",
                          (record["session_id"], record["scratch_id"], data, record["size"],
                           record["pinned"], record["access_us"], _expires(record))
                          ).fetchone()[0]
        record = {**record, "seq": seq}
        self._save(cur, record)
        if self._retain != "all":
            self._evict(cur, record["created"], protect=(record["session_id"],
                                                          record["scratch_id"]))
        return record

    # -- eviction ------------------------------------------------------------------------

    def evict(self, now: float | datetime | None = None) -> EvictionReport:
        moment = seconds(now)

        def run(cur: Any) -> tuple[list[Evicted], tuple[int, int]]:
            cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"{_LOCK}:{self._db.schema}",))
            victims = [] if self._retain == "all" else self._evict(cur, moment)
            return victims, self._usage(cur)
        victims, (size, pinned_size) = self._run(run)
        return EvictionReport(evicted=tuple(victims),
                              freed_bytes=sum(v.size for v in victims), bytes=size,
                              pinned_bytes=pinned_size, over_budget=size > self._budget)

    def _evict(self, cur: Any, now: float, *, protect: tuple[str, str] | None = None
               ) -> list[Evicted]:
        """Expired unpinned entries, then the least recently used unpinned ones until
        the blob bytes fit the budget (``protect``: an entry never dropped)."""
        keep = protect or ("", "")
        cur.execute("DELETE FROM scratch_entries WHERE NOT pinned AND expires_us < %s "
                    "AND (session_id, scratch_id) <> (%s, %s) "
                    "RETURNING session_id, scratch_id, size", (micros(now), *keep))
        victims = [Evicted(session_id=s, scratch_id=i, reason="ttl", size=n)
                   for s, i, n in cur.fetchall()]
        excess = self._usage(cur)[0] - self._budget
        if excess <= 0:
            return victims
        # The least recently used first, as many as it takes to free ``excess``.
        cur.execute("DELETE FROM scratch_entries WHERE (session_id, scratch_id) IN ("
                    "  SELECT session_id, scratch_id FROM ("
                    "    SELECT session_id, scratch_id, sum(size) OVER (ORDER BY access_us, "
                    "      session_id, scratch_id) - size AS before FROM scratch_entries "
                    "    WHERE NOT pinned AND (session_id, scratch_id) <> (%s, %s)) c "
                    "  WHERE before < %s) RETURNING session_id, scratch_id, size, access_us",
                    (*keep, excess))
        lru = sorted(cur.fetchall(), key=lambda r: (r[3], r[0], r[1]))
        return victims + [Evicted(session_id=s, scratch_id=i, reason="lru", size=n)
                          for s, i, n, _ in lru]

    # -- reading ---------------------------------------------------------------------------

    def get(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None, touch: bool = True) -> ScratchEntry:
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        if not touch:
            return entry_of(self._read(lambda cur: self._require(cur, session_id, scratch_id)))
        moment = seconds(now)

        def run(cur: Any) -> ScratchEntry:
            record = self._require(cur, session_id, scratch_id, lock=True)
            return entry_of(self._touch(cur, record, moment))
        return self._run(run)

    def _touch(self, cur: Any, record: dict[str, Any], moment: float) -> dict[str, Any]:
        access = micros(moment)
        if access <= record["access_us"]:
            return record
        record = {**record, "access_us": access, "last_access": moment}
        self._save(cur, record)
        return record

    def entry_dict(self, session_id: str, scratch_id: str) -> dict[str, Any]:
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        record = self._read(lambda cur: self._require(cur, session_id, scratch_id))
        return plain_entry(record, record["args"], record["structured"])

    def raw(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None) -> str | bytes:
        entry = self.get(session_id, scratch_id, now=now)
        row = self._read(lambda cur: cur.execute(
            "SELECT blob FROM scratch_entries WHERE session_id = %s AND scratch_id = %s",
            (entry.session_id, entry.scratch_id)).fetchone())
        if row is None:
            raise unknown(session_id, scratch_id)          # deleted meanwhile
        data = bytes(row[0])
        if hashlib.sha256(data).hexdigest() != entry.content_sha256:
            raise ScratchBlobError(
                f"the blob of scratch entry {scratch_id} does not match its sha256: it "
                "was changed in the database; delete the entry and re-run the tool")
        return data.decode("utf-8") if entry.raw_type == "str" else data

    def _ordered(self, session_id: str, *, newest: int | None = None,
                 where: str = "", params: tuple = ()) -> list[dict[str, Any]]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT record FROM scratch_entries WHERE session_id = %s" + where
            + " ORDER BY seq DESC LIMIT %s", (session_id, *params, newest)).fetchall())
        return [json.loads(r[0]) for r in reversed(rows)]

    def list(self, session_id: str) -> list[ScratchEntry]:
        session_id = check_session_id(session_id)
        return [entry_of(r) for r in self._ordered(session_id)]

    def _latest(self, session_id: str, n: int) -> list[ScratchEntry]:
        return [entry_of(r) for r in self._ordered(session_id, newest=n)] if n else []

    def _most_recent(self, session_id: str, tool_type: str | None,
                     kind: str | None) -> ScratchEntry | None:
        found = self._ordered(
            session_id, newest=1,
            where=" AND (%s::text IS NULL OR record::json->>'tool_name' = %s)"
                  " AND (%s::text IS NULL OR record::json->>'kind' = %s)",
            params=(tool_type, tool_type, kind, kind))
        return entry_of(found[0]) if found else None

    # -- pinning, references, deletion ------------------------------------------------------

    def _set_pin(self, session_id: str, scratch_id: str, reason: str | None) -> ScratchEntry:
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        return entry_of(self._run(lambda cur: self._pin(
            cur, self._require(cur, session_id, scratch_id, lock=True), reason)))

    def _pin(self, cur: Any, record: dict[str, Any], reason: str | None) -> dict[str, Any]:
        if record["pinned"] == (reason is not None):
            return record
        record = {**record, "pinned": reason is not None, "pin_reason": reason}
        self._save(cur, record)
        return record

    def _add_reference(self, session_id: str, scratch_id: str, turn_id: int,
                       moment: float) -> ScratchEntry:
        def run(cur: Any) -> dict[str, Any]:
            record = self._touch(cur, self._require(cur, session_id, scratch_id, lock=True),
                                 moment)
            referenced = self._referenced(record, turn_id)
            if referenced is not None:
                record = referenced
                self._save(cur, record)
            if self._auto_pins(record):
                record = self._pin(cur, record, "auto")
            return record
        return entry_of(self._run(run))

    def delete(self, session_id: str, scratch_id: str) -> None:
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)

        def run(cur: Any) -> None:
            cur.execute("DELETE FROM scratch_entries WHERE session_id = %s AND scratch_id = %s",
                        (session_id, scratch_id))
            if cur.rowcount == 0:
                raise unknown(session_id, scratch_id)
        self._run(run)

    # -- stats and consistency -------------------------------------------------------------------

    def stats(self, session_id: str | None = None) -> ScratchStats:
        if session_id is not None:
            session_id = check_session_id(session_id)
        rows = self._read(lambda cur: cur.execute(
            "SELECT session_id, record FROM scratch_entries "
            "WHERE %s::text IS NULL OR session_id = %s", (session_id, session_id)).fetchall())
        return tally(((sid, json.loads(raw_record)) for sid, raw_record in rows), self._budget)

    def check(self, *, grace_seconds: float = 60.0, verify: bool = False) -> CheckReport:
        """Blobs live in their entries' rows: no orphans, no unfinished writes, no
        lost blobs.  With ``verify`` every blob is re-hashed; changed ones are
        reported (kept)."""
        check_duration(grace_seconds, "grace_seconds")
        corrupt: list[tuple[str, str]] = []
        if verify:
            rows = self._read(lambda cur: cur.execute(
                "SELECT session_id, scratch_id, record::json->>'content_sha256', "
                "encode(sha256(blob), 'hex') FROM scratch_entries").fetchall())
            corrupt = [(s, i) for s, i, want, have in rows if want != have]
        return CheckReport(orphan_blobs=(), temp_files=(), dangling=(),
                           corrupt=tuple(corrupt), unknown_files=())

    # -- copying (ctxrelay migrate) --------------------------------------------------------

    def sessions(self) -> list[str]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT DISTINCT session_id FROM scratch_entries").fetchall())
        return sorted(r[0] for r in rows)

    def blob(self, session_id: str, scratch_id: str) -> bytes:
        """The output's bytes, checked against its hash, without counting a use."""
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        row = self._read(lambda cur: cur.execute(
            "SELECT record, blob FROM scratch_entries WHERE session_id = %s AND scratch_id = %s",
            (session_id, scratch_id)).fetchone())
        if row is None:
            raise unknown(session_id, scratch_id)
        data = bytes(row[1])
        if hashlib.sha256(data).hexdigest() != json.loads(row[0])["content_sha256"]:
            raise ScratchBlobError(
                f"the blob of scratch entry {scratch_id} does not match its sha256: it "
                "was changed in the database; delete the entry and re-run the tool")
        return data

    def restore(self, entries: Any) -> int:
        """Write copies of ``(entry, blob)`` pairs as they are (ids, times, last use,
        insertion numbers, pins, references) in one transaction; the sequence of
        insertion numbers is moved past the copies.  No eviction runs.
        SessionExistsError (nothing written) if an id is held already."""
        from ctxrelay.errors import SessionExistsError
        copies = [(copied_record(entry, data), data) for entry, data in entries]

        def run(cur: Any) -> int:
            cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                        (f"{_LOCK}:{self._db.schema}",))
            cur.execute("CREATE TEMP TABLE scratch_copy (LIKE scratch_entries) "
                        "ON COMMIT DROP")
            with cur.copy("COPY scratch_copy (session_id, scratch_id, seq, record, blob, "
                          "size, pinned, access_us, expires_us) FROM STDIN") as copy:
                for record, data in copies:
                    copy.write_row((record["session_id"], record["scratch_id"], record["seq"],
                                    _dumps(record), data, record["size"], record["pinned"],
                                    record["access_us"], _expires(record)))
            held = cur.execute("SELECT c.session_id, c.scratch_id FROM scratch_copy c "
                               "JOIN scratch_entries USING (session_id, scratch_id) "
                               "LIMIT 1").fetchone()
            if held is not None:
                raise SessionExistsError(
                    f"this scratch store already holds entry {held[1]} of session "
                    f"{held[0]!r}; copy into a store without the session's entries. "
                    "Nothing was written")
            cur.execute("INSERT INTO scratch_entries SELECT * FROM scratch_copy")
            cur.execute("SELECT setval(s::regclass, greatest(nextval(s::regclass), "
                        "(SELECT coalesce(max(seq), 0) + 1 FROM scratch_entries)), false) "
                        "FROM pg_get_serial_sequence('scratch_entries', 'seq') s")
            return len(copies)
        return self._run(run)

    def verify(self, *, repair: bool = False) -> tuple[str, ...]:
        """The columns the indexes use (pinned, last use, size) against the records."""
        def run(cur: Any) -> tuple[str, ...]:
            rows = cur.execute("SELECT session_id, scratch_id, record, pinned, access_us, "
                               "size, expires_us FROM scratch_entries").fetchall()
            wrong = [(s, i, json.loads(r)) for s, i, r, p, a, n, e in rows
                     if (p, a, n, e) != (json.loads(r)["pinned"], json.loads(r)["access_us"],
                                         json.loads(r)["size"], _expires(json.loads(r)))]
            if repair:
                for s, i, record in wrong:
                    cur.execute("UPDATE scratch_entries SET pinned = %s, access_us = %s, "
                                "size = %s, expires_us = %s WHERE session_id = %s "
                                "AND scratch_id = %s",
                                (record["pinned"], record["access_us"], record["size"],
                                 _expires(record), s, i))
            return tuple(f"the index columns of scratch entry {i} disagree with its record"
                         for _, i, _ in wrong)
        return self._run(run)
