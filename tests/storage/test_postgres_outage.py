"""A PostgreSQL connection lost mid-use: a clear error, nothing half-written, and
the next call recovers by itself (the pool replaces the dead connection)."""
from __future__ import annotations

import psycopg
import pytest

from ctxrelay.storage import close_all, open_stores
from ctxrelay.storage.postgres import DatabaseUnavailableError
from services import drop_schema, fresh_schema_url, postgres_url


def _kill_store_connections(schema: str) -> int:
    """Terminate the server side of every connection of the store's pool (what a
    server restart or a failover does to them)."""
    with psycopg.connect(postgres_url(), autocommit=True) as admin:
        return admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s", (f"ctxrelay:{schema}",)).fetchone()[0]


@pytest.fixture
def store():
    spec, schema = fresh_schema_url()
    stores = open_stores(spec)
    yield stores, schema
    close_all()
    drop_schema(schema)


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
