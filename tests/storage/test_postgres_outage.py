"""A PostgreSQL connection lost mid-use: a clear error, nothing half-written, and
the next call recovers by itself (the pool replaces the dead connection)."""
from __future__ import annotations

import psycopg
import pytest

from ctxrelay.storage import open_stores
from ctxrelay.storage.postgres import DatabaseUnavailableError
from services import postgres_url


def _kill_store_connections(schema: str) -> int:
    """Terminate the server side of every connection of the store's pool (what a
    server restart or a failover does to them)."""
    with psycopg.connect(postgres_url(), autocommit=True) as admin:
        return admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s", (f"ctxrelay:{schema}",)).fetchone()[0]


@pytest.fixture
def store(pg_schema):
    spec, schema = pg_schema
    return open_stores(spec), schema


def test_a_lost_connection_is_a_clear_error_then_the_store_recovers(store):
    stores, schema = store
    t = stores.transcript
    t.create_session("s")
    t.append("s", "user", "before the outage")
    assert _kill_store_connections(schema) >= 1
    with pytest.raises(DatabaseUnavailableError, match="retry"):
        t.append("s", "user", "during the outage")
    # Nothing half-written: the failed append left no turn, and the next calls work.
    assert [x.content for x in t.history("s")] == ["before the outage"]
    assert t.append("s", "user", "after the outage") == 2
    assert t.check_derived("s").ok


def test_a_server_lost_while_a_write_commits_says_the_outcome_is_unknown(store):
    """Lost before a write was sent (a read, a transaction that had not reached its
    COMMIT): DatabaseUnavailableError, nothing written.  Lost while a write commits
    (an autocommit write, COMMIT sent): CommitOutcomeUnknownError, since the server
    may have committed before it went away; the relay answers it 503
    store_outcome_unknown, and a retry with the same key finds the turn if it was
    stored."""
    from ctxrelay.storage.postgres.connection import CommitOutcomeUnknownError, Database
    stores, schema = store
    spec = f"{postgres_url()}?schema={schema}"
    db = Database(spec)
    suicide = "SELECT pg_terminate_backend(pg_backend_pid())"
    try:
        with pytest.raises(DatabaseUnavailableError) as read:
            db.read(lambda cur: cur.execute(suicide).fetchall())
        assert not isinstance(read.value, CommitOutcomeUnknownError)
        assert "wrote nothing" in str(read.value)
        with pytest.raises(DatabaseUnavailableError) as before_commit:
            db.run(lambda cur: cur.execute(suicide).fetchall())
        assert not isinstance(before_commit.value, CommitOutcomeUnknownError)
        with pytest.raises(CommitOutcomeUnknownError, match="may or may not be stored"):
            with db.connection(autocommit=True, writes=True) as conn:
                conn.execute(suicide).fetchall()
        with pytest.raises(CommitOutcomeUnknownError):
            db.pipelined(lambda cur: cur.execute(suicide))
        # The same kind through Prolog, so every entry point sees it alike.
        from ctxrelay.bridge.engine import _classes_by_kind
        assert _classes_by_kind()["store_outcome_unknown"] is CommitOutcomeUnknownError
        assert db.read(lambda cur: cur.execute("SELECT 1").fetchone()[0]) == 1  # recovers
    finally:
        db.close()
