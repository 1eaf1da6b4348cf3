"""The statement budget of the PostgreSQL transcript's hot calls (issue 17, point 5).

Each call is counted in statements sent (execute/executemany), plus one for
its commit where it runs in a transaction.  The budget: an append is one
locking read of the session row (with idempotency keys, then one read of the
turns stored under them) and one pipeline of writes, whatever the turn holds;
a read is one statement (search: two, the ranking then the turns).  The write
pipeline's statements are sent together (one network round trip), so they are
counted apart from the others.
"""
from __future__ import annotations

import psycopg
import pytest

from ctxrelay.storage import close_all, open_stores
from services import drop_schema, fresh_schema_url


class Counted:
    def __init__(self) -> None:
        self.statements = 0
        self.pipelined = 0
        self._orig = (psycopg.Cursor.execute, psycopg.Cursor.executemany)

    def __enter__(self) -> "Counted":
        execute, executemany = self._orig
        counter = self

        def count(cur):
            if cur.connection._pipeline is not None:
                counter.pipelined += 1
            else:
                counter.statements += 1

        def counted_execute(cur, *a, **kw):
            count(cur)
            return execute(cur, *a, **kw)

        def counted_executemany(cur, *a, **kw):
            count(cur)
            return executemany(cur, *a, **kw)
        psycopg.Cursor.execute, psycopg.Cursor.executemany = counted_execute, counted_executemany
        return self

    def __exit__(self, *exc: object) -> None:
        psycopg.Cursor.execute, psycopg.Cursor.executemany = self._orig


@pytest.fixture
def transcript():
    spec, schema = fresh_schema_url()
    stores = open_stores(spec)
    t = stores.transcript
    t.create_session("s")
    t.append_many("s", [{"role": "user", "content": f"etcd raft turn {i} about quorum"}
                        for i in range(200)])
    yield t
    close_all()
    drop_schema(schema)


@pytest.mark.parametrize("call, statements, pipelined", [
    (lambda t: t.append("s", "user", "one more etcd turn"), 1, 5),
    (lambda t: t.append("s", "user", "a keyed turn", key="k-1"), 2, 5),
    (lambda t: t.append_many("s", [{"role": "user", "content": f"batch {i}"}
                                   for i in range(50)]), 1, 5),
    (lambda t: t.rank("s", "etcd quorum", k=10), 1, 0),
    (lambda t: t.search("s", "etcd quorum", k=10), 2, 0),
    (lambda t: t.last("s", 16), 1, 0),
    (lambda t: t.turns("s", [3, 5, 8]), 1, 0),
    (lambda t: t.turn_count("s"), 1, 0),
])
def test_each_call_stays_within_its_statement_budget(transcript, call, statements, pipelined):
    with Counted() as counted:
        call(transcript)
    assert (counted.statements, counted.pipelined) == (statements, pipelined)


def test_a_keyed_retry_writes_nothing_and_reads_once(transcript):
    transcript.append("s", "user", "keyed", key="k")
    with Counted() as counted:
        assert transcript.append("s", "user", "keyed", key="k") == 201
    assert (counted.statements, counted.pipelined) == (2, 0)
