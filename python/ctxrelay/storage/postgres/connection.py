"""Connections of the PostgreSQL back end: the spec, the pool, errors.

A spec is a libpq URL with one addition, ``schema`` (a query parameter that
libpq does not know, so it is taken out before connecting): the store's
tables live in that schema, ``ctxrelay`` by default.

One :class:`Database` per store per process holds a ``psycopg_pool``
pool; every operation takes a connection for one transaction and gives it
back.  A server that cannot be reached, or goes away mid-transaction,
raises :class:`DatabaseUnavailableError` (a :class:`StoreError`), and the
transaction is rolled back by the server: nothing half-written.  Only when it
goes away while a write commits can the client not know whether the commit
happened (the server may have committed and died before it answered): that is
:class:`CommitOutcomeUnknownError`, and a retry with the same idempotency key
finds the write if it was stored.
"""
from __future__ import annotations

import contextlib
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ctxrelay.errors import InvalidArgumentError, StoreError

__all__ = ["Database", "DatabaseUnavailableError", "CommitOutcomeUnknownError", "parse_url",
           "DEFAULT_SCHEMA"]

T = TypeVar("T")

DEFAULT_SCHEMA = "ctxrelay"
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
POOL_MAX = 8             # connections per store per process (a relay's worker threads)
CONNECT_TIMEOUT = 10     # seconds to wait for a pooled connection
SWEEP_PROBE_S = 0.2      # after a failure: how often to ask whether the server is back
SWEEP_FOR_S = 300.0      # ... and for how long (psycopg_pool's own reconnect_timeout)


class DatabaseUnavailableError(StoreError):
    """The PostgreSQL server cannot be reached (or went away); nothing was written
    by the failed call.  Retry later: the pool reconnects by itself."""

    # Its own kind, so it keeps its class through Prolog (the relay answers it 503).
    kind = "store_unavailable"


class CommitOutcomeUnknownError(DatabaseUnavailableError):
    """The server went away while a write was committing: it may have been stored
    or not, and nothing is half-written either way.  Retry with the same
    idempotency key (a turn's key finds it if it was stored; without a key a retry
    may store it twice)."""

    kind = "store_outcome_unknown"


def parse_url(text: str) -> tuple[str, str]:
    """``(conninfo, schema)`` of a ``postgresql://`` spec (``schema`` taken out).

    @raises InvalidArgumentError for a schema name PostgreSQL would need quoted.
    """
    parts = urlsplit(text)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in query if k == "schema"]
    schema = schemas[-1] if schemas else DEFAULT_SCHEMA
    if not _SCHEMA.fullmatch(schema):
        raise InvalidArgumentError(
            f"schema {schema!r} in {text!r} is not a plain lowercase identifier; use "
            "letters, digits and '_' (at most 63, not starting with a digit)")
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, rest, parts.fragment)), schema


def _driver() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(
            f"the postgresql:// back end needs psycopg 3 and psycopg_pool ({exc}); "
            "install them with: pip install 'ctxrelay[postgres]'") from None
    return psycopg, psycopg_pool


class Database:
    """A pool of connections to one store's schema (see the module doc)."""

    def __init__(self, url: str, *, pool_max: int = POOL_MAX) -> None:
        psycopg, psycopg_pool = _driver()
        self._psycopg = psycopg
        self.url = url
        self.conninfo, self.schema = parse_url(url)
        self._closed = False
        self._sweeping = False
        self._lock = threading.Lock()
        # per thread: whether the current call's write is committing (see connection())
        self._committing = threading.local()
        # per-connection set-ups (type adapters) and the connections that had them
        self._setups: list[Callable[[Any], None]] = []
        self._ready: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self.pool = psycopg_pool.ConnectionPool(
            self.conninfo, min_size=1, max_size=pool_max, open=False,
            timeout=CONNECT_TIMEOUT, name=f"ctxrelay:{self.schema}",
            # search_path: the store's tables first, public (for extensions) after.
            # application_name: which store a server connection serves
            # (pg_stat_activity), for operators.
            kwargs={"options": f"-c search_path={self.schema},public",
                    "connect_timeout": CONNECT_TIMEOUT,
                    "application_name": f"ctxrelay:{self.schema}"})
        # No check on checkout (it would cost a round trip per call): a connection
        # the server dropped fails its call with DatabaseUnavailableError, and the
        # pool discards it when it comes back broken, so the next call reconnects.
        try:
            self.pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except psycopg_pool.PoolTimeout:
            self.pool.close()
            raise DatabaseUnavailableError(
                f"cannot connect to PostgreSQL at {_shown(self.conninfo)} within "
                f"{CONNECT_TIMEOUT} s; start the server (make services starts a local one) "
                "or fix the URL") from None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def driver(self) -> Any:
        """The ``psycopg`` module (for its error classes)."""
        return self._psycopg

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.pool.close()

    def on_connection(self, setup: Callable[[Any], None]) -> None:
        """Run ``setup(conn)`` once on every pooled connection before its next use
        (a part registers its type adapters: pgvector's ``vector``)."""
        with self._lock:
            self._setups.append(setup)
            self._ready = weakref.WeakSet()

    @contextmanager
    def connection(self, *, autocommit: bool = False, writes: bool = False) -> Iterator[Any]:
        """A pooled connection in a transaction that commits when the block ends
        (with ``autocommit``: each statement on its own, no BEGIN/COMMIT;
        ``writes``: the block's statements commit writes by themselves).

        A server lost while a write commits (the end of a transaction, an autocommit
        block that ``writes``, or after :meth:`committing`) is
        :class:`CommitOutcomeUnknownError`; lost before that, nothing was written."""
        if self._closed:
            raise StoreError(f"store {self.url} is closed; open it again (open_stores(spec))")
        psycopg = self._psycopg
        outer = getattr(self._committing, "now", False)
        self._committing.now = False
        try:
            with self.pool.connection() as conn:
                if conn.autocommit != autocommit:
                    conn.autocommit = autocommit
                if self._setups and conn not in self._ready:
                    for setup in list(self._setups):
                        setup(conn)
                    if not autocommit:
                        conn.commit()        # a set-up's query must not open the caller's
                    self._ready.add(conn)
                self._committing.now = writes and autocommit
                yield conn
                if not autocommit:           # the pool's context commits on the way out
                    self._committing.now = True
        except psycopg.OperationalError as exc:
            self._sweep_when_back()
            if self._committing.now:
                raise CommitOutcomeUnknownError(
                    f"PostgreSQL at {_shown(self.conninfo)} went away while the call was "
                    f"committing ({_first_line(exc)}); what it wrote may or may not be stored "
                    "(nothing half-written): retry with the same idempotency key when the server "
                    "is back") from None
            raise DatabaseUnavailableError(
                f"PostgreSQL at {_shown(self.conninfo)} is unavailable ({_first_line(exc)}); "
                "the call wrote nothing, retry when the server is back") from None
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg_pool"):
                self._sweep_when_back()
                raise DatabaseUnavailableError(
                    f"no connection to PostgreSQL at {_shown(self.conninfo)} "
                    f"({_first_line(exc)}); retry when the server is back") from None
            raise
        finally:
            self._committing.now = outer

    def committing(self) -> None:
        """Say that the current block's write is being committed now (see
        :meth:`connection`)."""
        self._committing.now = True

    def _sweep_when_back(self) -> None:
        """After a failure: once the server answers again, test the idle connections and
        replace the broken ones (``pool.check()``), so that a connection a restart broke
        fails no request.  Without it each idle connection failed one request after the
        server was back (up to ``pool_max`` 503s per relay; tests/apps/server/
        test_relay_outages.py).  One sweeper at a time, in the background: no request
        waits for it, and no request pays a check when nothing failed."""
        with self._lock:
            if self._sweeping or self._closed:
                return
            self._sweeping = True

        def sweep() -> None:
            try:
                deadline = time.monotonic() + SWEEP_FOR_S
                while not self._closed and time.monotonic() < deadline:
                    try:
                        self._psycopg.connect(self.conninfo, connect_timeout=2,
                                              application_name=f"ctxrelay:{self.schema}").close()
                    except Exception:          # still down: ask again shortly
                        time.sleep(SWEEP_PROBE_S)
                        continue
                    self.pool.check()
                    return
            except Exception:                  # the pool closed under us: nothing to sweep
                pass
            finally:
                self._sweeping = False

        threading.Thread(target=sweep, name=f"ctxrelay-pg-sweep:{self.schema}",
                         daemon=True).start()

    def run(self, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` in one transaction (committed when it returns)."""
        with self.connection() as conn, conn.cursor() as cur:
            return fn(cur)

    def pipelined(self, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` in one transaction, in as few round trips as its reads
        allow: BEGIN goes out with ``fn``'s first statements, and its last writes
        with COMMIT (each read whose result ``fn`` fetches ends a round trip).

        Spelled out on an autocommit connection in pipeline mode, because psycopg's
        own transaction handling waits after BEGIN and again after COMMIT (two
        round trips more).  An error anywhere rolls the transaction back."""
        with self.connection(autocommit=True) as conn, conn.cursor() as cur:
            try:
                with conn.pipeline():
                    cur.execute("BEGIN")
                    result = fn(cur)
                    self.committing()    # the server may run COMMIT with what went before
                    cur.execute("COMMIT")
            except BaseException:
                if not conn.closed and not conn.broken:
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")
                raise
            return result

    def read(self, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` without a transaction: for reads of one statement (or of
        rows that never change), two round trips fewer than :meth:`run`."""
        with self.connection(autocommit=True) as conn, conn.cursor() as cur:
            return fn(cur)


def bump_generation(cur: Any) -> None:
    """Move the store's write generation: the last statement of every write, so
    the row lock is held only until commit."""
    cur.execute("UPDATE store_generation SET generation = generation + 1")


def read_generation(cur: Any) -> int:
    """The store's write generation (moved by every write to any of its parts)."""
    return cur.execute("SELECT generation FROM store_generation").fetchone()[0]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _shown(conninfo: str) -> str:
    """The URL without a password, for messages."""
    parts = urlsplit(conninfo)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
