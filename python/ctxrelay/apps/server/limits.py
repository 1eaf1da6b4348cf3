"""Per-key limits shared by every worker of a relay (429 with ``Retry-After``).

``requests_per_minute`` and ``body_bytes_per_minute`` count in fixed one-minute
windows; ``stored_bytes`` is a quota on the UTF-8 bytes of the turns a tenant's
requests stored (messages and replies), all its keys together.  A failed turn
keeps its request counted (it used the relay) but adds no stored bytes.

Where the counters live:

:class:`Limits` (a store directory)
    one SQLite file beside the store (``relay-limits.sqlite``, WAL), so the
    workers of one relay -- separate processes -- see one count; SQLite's own
    locking makes each check-and-count one atomic step.
:class:`PgLimits` (a ``postgresql://`` store)
    two tables of the store's schema (migration 10), so every relay on the
    store, on any host, sees one count.  The check-and-count of a window is one
    conditional upsert (atomic in PostgreSQL, one round trip); the stored-bytes
    quota is read before it (one more, only for keys that have one).  The
    counters are durable there (a quota must survive a restart), and Redis is
    not needed for them.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ctxrelay.storage.postgres.connection import CONNECT_TIMEOUT, DatabaseUnavailableError, \
    parse_url

from .errors import ApiError
from .tenants import Tenant

WINDOW = 60.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS window (key_id TEXT, start INTEGER, requests INTEGER,
                                   body_bytes INTEGER, PRIMARY KEY (key_id, start));
CREATE TABLE IF NOT EXISTS stored (tenant TEXT PRIMARY KEY, bytes INTEGER);
"""


def _too_many(message: str, code: str, retry_after: int) -> ApiError:
    return ApiError(429, message, type="rate_limit_error", code=code,
                    headers={"Retry-After": str(max(1, retry_after))})


class Limits:
    """Check and count one request against its key's limits."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=10, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def admit(self, tenant: Tenant, body_bytes: int, now: float | None = None) -> None:
        """Count the request, or raise 429 when it would pass a limit (then not counted)."""
        limits = tenant.limits
        if not limits:
            return
        now = time.time() if now is None else now
        start = int(now // WINDOW * WINDOW)
        retry = int(start + WINDOW - now) + 1
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT requests, body_bytes FROM window WHERE key_id=? "
                                 "AND start=?", (tenant.key_id, start)).fetchone()
                requests, body = row if row else (0, 0)
                rpm = limits.get("requests_per_minute")
                if rpm is not None and requests + 1 > rpm:
                    raise _too_many(f"this key has made {requests} requests this minute, its "
                                    f"limit is {rpm}; retry after {retry} s",
                                    "requests_per_minute_exceeded", retry)
                bpm = limits.get("body_bytes_per_minute")
                if bpm is not None and body + body_bytes > bpm:
                    raise _too_many(f"this key has sent {body:,} body bytes this minute and "
                                    f"this request adds {body_bytes:,}; its limit is {bpm:,} "
                                    f"a minute; retry after {retry} s",
                                    "body_bytes_per_minute_exceeded", retry)
                quota = limits.get("stored_bytes")
                if quota is not None:
                    used = self._stored(tenant.name)
                    if used >= quota:
                        raise _too_many(f"tenant {tenant.name} has stored {used:,} bytes of "
                                        f"turns, its key allows {quota:,}; ask the operator to "
                                        "raise the key's stored_bytes limit",
                                        "stored_bytes_exceeded", 3600)
                db.execute("INSERT INTO window VALUES (?, ?, 1, ?) ON CONFLICT(key_id, start) "
                           "DO UPDATE SET requests=requests+1, body_bytes=body_bytes+?",
                           (tenant.key_id, start, body_bytes, body_bytes))
                db.execute("DELETE FROM window WHERE start < ?", (start - 3600,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _stored(self, tenant: str) -> int:
        row = self._db.execute("SELECT bytes FROM stored WHERE tenant=?", (tenant,)).fetchone()
        return int(row[0]) if row else 0

    def stored(self, tenant: str) -> int:
        with self._lock:
            return self._stored(tenant)

    def add_stored(self, tenant: str, nbytes: int) -> None:
        if nbytes <= 0:
            return
        with self._lock:
            self._db.execute("INSERT INTO stored VALUES (?, ?) ON CONFLICT(tenant) DO UPDATE "
                             "SET bytes=bytes+?", (tenant, nbytes, nbytes))


class PgLimits:
    """The per-key counters in the store's PostgreSQL schema (see the module doc);
    the same answers as :class:`Limits`."""

    PRUNE_EVERY = 300.0          # seconds between deletions of windows over an hour old

    def __init__(self, url: str) -> None:
        import psycopg
        self._psycopg = psycopg
        self._conninfo, self._schema = parse_url(url)
        self._lock = threading.Lock()
        self._conn: Any = None
        self._pruned = 0.0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _run(self, sql: str, params: tuple) -> Any:
        """One statement on this process's connection (autocommit; reconnects after a
        lost one); a server that is down is :class:`DatabaseUnavailableError`."""
        psycopg = self._psycopg
        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = psycopg.connect(
                    self._conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                    options=f"-c search_path={self._schema}",
                    application_name=f"ctxrelay-relay-limits:{self._schema}")
            return self._conn.execute(sql, params).fetchone()
        except psycopg.OperationalError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise DatabaseUnavailableError(
                f"PostgreSQL is unavailable for the relay's limits ({first}); nothing was "
                "counted, retry when the server is back") from None

    def admit(self, tenant: Tenant, body_bytes: int, now: float | None = None) -> None:
        """Count the request, or raise 429 when it would pass a limit (then not counted)."""
        limits = tenant.limits
        if not limits:
            return
        now = time.time() if now is None else now
        start = int(now // WINDOW * WINDOW)
        retry = int(start + WINDOW - now) + 1
        rpm = limits.get("requests_per_minute")
        bpm = limits.get("body_bytes_per_minute")
        big = 1 << 62
        with self._lock:
            quota = limits.get("stored_bytes")
            if quota is not None:
                row = self._run("SELECT bytes FROM relay_stored_bytes WHERE tenant = %s",
                                (tenant.name,))
                used = int(row[0]) if row else 0
                if used >= quota:
                    raise _too_many(f"tenant {tenant.name} has stored {used:,} bytes of "
                                    f"turns, its key allows {quota:,}; ask the operator to "
                                    "raise the key's stored_bytes limit",
                                    "stored_bytes_exceeded", 3600)
            # Counted only if within both limits, in one atomic statement: a row that
            # would pass a limit is left as it was and nothing is returned.
            row = self._run(
                "WITH counted AS ("
                " INSERT INTO relay_limit_windows AS w VALUES (%(k)s, %(s)s, 1, %(b)s)"
                " ON CONFLICT (key_id, start) DO UPDATE"
                " SET requests = w.requests + 1, body_bytes = w.body_bytes + %(b)s"
                " WHERE w.requests + 1 <= %(rpm)s AND w.body_bytes + %(b)s <= %(bpm)s"
                " RETURNING requests)"
                " SELECT (SELECT requests FROM counted),"
                " (SELECT requests FROM relay_limit_windows WHERE key_id = %(k)s AND start = %(s)s),"
                " (SELECT body_bytes FROM relay_limit_windows WHERE key_id = %(k)s AND start = %(s)s)",
                {"k": tenant.key_id, "s": start, "b": body_bytes,
                 "rpm": big if rpm is None else rpm, "bpm": big if bpm is None else bpm}) \
                if (rpm is None or rpm >= 1) and (bpm is None or body_bytes <= bpm) \
                else (None, 0, 0)
            counted, requests, body = row
            if counted is None:
                requests, body = requests or 0, body or 0
                if rpm is not None and requests + 1 > rpm:
                    raise _too_many(f"this key has made {requests} requests this minute, its "
                                    f"limit is {rpm}; retry after {retry} s",
                                    "requests_per_minute_exceeded", retry)
                raise _too_many(f"this key has sent {body:,} body bytes this minute and "
                                f"this request adds {body_bytes:,}; its limit is {bpm:,} "
                                f"a minute; retry after {retry} s",
                                "body_bytes_per_minute_exceeded", retry)
            if now - self._pruned > self.PRUNE_EVERY:
                self._pruned = now
                self._run("WITH gone AS (DELETE FROM relay_limit_windows WHERE start < %s "
                          "RETURNING 1) SELECT count(*) FROM gone", (start - 3600,))

    def stored(self, tenant: str) -> int:
        with self._lock:
            row = self._run("SELECT bytes FROM relay_stored_bytes WHERE tenant = %s",
                            (tenant,))
            return int(row[0]) if row else 0

    def add_stored(self, tenant: str, nbytes: int) -> None:
        if nbytes <= 0:
            return
        with self._lock:
            self._run("INSERT INTO relay_stored_bytes AS t VALUES (%s, %s) ON CONFLICT "
                      "(tenant) DO UPDATE SET bytes = t.bytes + EXCLUDED.bytes "
                      "RETURNING bytes", (tenant, nbytes))
