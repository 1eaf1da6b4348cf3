"""After a PostgreSQL restart the pool's idle connections are all broken; the first
request to meet one fails (503 at the relay), and the pool then replaces the others
as soon as the server answers, so none of them fails a request of its own.

On a PostgreSQL of the test's own (tests/private_services.py), which it restarts."""
from __future__ import annotations

import threading
import time

import pytest

from ctxrelay.storage.postgres.connection import Database, DatabaseUnavailableError


def _grow(db: Database, n: int) -> None:
    """n connections in use at once, then idle in the pool."""
    barrier = threading.Barrier(n)

    def hold() -> None:
        with db.connection(autocommit=True) as conn:
            barrier.wait(timeout=30)
            conn.execute("SELECT 1")

    threads = [threading.Thread(target=hold) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)


def test_after_a_restart_one_request_fails_and_the_broken_idle_connections_do_not(
        private_postgres):
    db = Database(private_postgres.url)
    try:
        _grow(db, 4)
        assert db.pool.get_stats()["pool_available"] == 4
        private_postgres.restart("fast")            # every pooled connection is now broken
        with pytest.raises(DatabaseUnavailableError):
            db.read(lambda cur: cur.execute("SELECT 1").fetchone())
        deadline = time.monotonic() + 60
        while getattr(db, "_sweeping", False):       # the sweep replaces the others
            assert time.monotonic() < deadline, "the sweep did not end"
            time.sleep(0.05)
        # The pool hands out its idle connections in turn: each is asked once.
        for _ in range(6):
            assert db.read(lambda cur: cur.execute("SELECT 1").fetchone()) == (1,)
    finally:
        db.close()
