"""Per-key limits shared by every worker of a relay (429 with ``Retry-After``).

``requests_per_minute`` and ``body_bytes_per_minute`` count in fixed one-minute
windows; ``stored_bytes`` is a quota on the UTF-8 bytes of the turns a tenant's
requests stored (messages and replies), all its keys together.  The counters
live in one SQLite file beside the store (``relay-limits.sqlite``, WAL), so the
workers of one relay -- separate processes -- see one count; SQLite's own locking
makes each check-and-count one atomic step.  A failed turn keeps its request
counted (it used the relay) but adds no stored bytes.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

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
