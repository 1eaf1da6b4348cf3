"""The network round-trip budget of the PostgreSQL back end (issue 17, point 5).

Counted on the wire: the store is opened through a TCP proxy (tests/pg_proxy.py)
that counts each request burst a client sends after it last received, so
statements sent together in a pipeline are one round trip, and BEGIN and COMMIT
are counted where they cost one.

The budget, per call:

- ``append`` (with or without an idempotency key, one turn or a batch): **1** --
  one call of the server-side ``transcript_append`` (migration 7): the session
  row's lock, the turns stored under the keys, the turn, its postings, document
  frequencies, the counters and the store's write generation, committed as the
  statement's own transaction.  (It was 4, then 2: BEGIN with the lock in one
  pipeline, the writes with COMMIT in another.)
- a read: **1** (``search``: 2, the ranking then the turns).
- a managed turn (``Runtime.managed_turn`` on a 30-turn session, echo provider):
  **48** (45 measured); the relay's turn, ``prepare_turn`` + ``commit_turn``:
  **52** (27 + 22 measured).  The count moves a little with what the message
  resolves and promotes.  Before the batch reads it was 75 / 70 (63 and 28 + 39
  measured): promotion read the turn log one row at a time (the derived record
  of each neighbour it looked at, each turn on its own); now it reads each kind
  in one call (``TurnLogStore.derived_many``, ``Transcript.turns``), a turn-log
  sync that finds nothing new is one round trip, and a sync's chunk is one
  pipelined transaction.  What is left is mostly the assembly's reads (the
  write generation, the session row, the thread book), one statement each.
"""
from __future__ import annotations

import psycopg
import pytest

from ctxrelay import Runtime
from ctxrelay.storage import close_all, open_stores
from pg_proxy import TcpProxy
from services import redis_url

class Counted:
    """The statements psycopg sends, as (``statements`` sent on their own,
    ``pipelined`` ones); the wire's round trips are the proxy's to count.  Kept for
    the budgets stated in statements (tests/storage/test_postgres_fact_round_trips.py)."""

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


MANAGED_TURN_BUDGET = 48
RELAY_TURN_BUDGET = 52


@pytest.fixture
def proxied(pg_schema):
    spec, schema = pg_schema
    proxy, url = TcpProxy.to_url(spec)
    yield proxy, url, schema
    close_all()                      # before the proxy goes (pg_schema drops the schema)
    proxy.close()


@pytest.fixture
def transcript(proxied):
    proxy, url, _ = proxied
    stores = open_stores(url)
    t = stores.transcript
    t.create_session("s")
    t.append_many("s", [{"role": "user", "content": f"etcd raft turn {i} about quorum"}
                        for i in range(200)])
    return proxy, t


def _round_trips(proxy: TcpProxy, call) -> int:
    before = proxy.round_trips
    call()
    return proxy.round_trips - before


@pytest.mark.parametrize("call, budget", [
    (lambda t: t.append("s", "user", "one more etcd turn"), 1),
    (lambda t: t.append("s", "user", "a keyed turn", key="k-1"), 1),
    (lambda t: t.append_many("s", [{"role": "user", "content": f"batch {i}", "key": f"b{i}"}
                                   for i in range(50)]), 1),
    (lambda t: t.rank("s", "etcd quorum", k=10), 1),
    (lambda t: t.search("s", "etcd quorum", k=10), 2),
    (lambda t: t.last("s", 16), 1),
    (lambda t: t.turns("s", [3, 5, 8]), 1),
    (lambda t: t.turn_count("s"), 1),
])
def test_each_call_stays_within_its_round_trip_budget(transcript, call, budget):
    proxy, t = transcript
    assert _round_trips(proxy, lambda: call(t)) == budget


def test_a_keyed_retry_writes_nothing_in_one_round_trip(transcript):
    proxy, t = transcript
    t.append("s", "user", "keyed", key="k")
    assert _round_trips(proxy, lambda: t.append("s", "user", "keyed", key="k")) == 1
    assert t.turn_count("s") == 201


def test_a_failed_append_leaves_the_connection_usable(transcript):
    """A refused append (here: an unknown session, raised inside the server-side
    call) rolls back, and the pooled connection serves the next call."""
    proxy, t = transcript
    from ctxrelay.errors import UnknownSessionError
    with pytest.raises(UnknownSessionError):
        t.append("nope", "user", "lost")
    assert t.append("s", "user", "next") == 201


def test_a_managed_turn_stays_within_its_round_trip_budget(proxied):
    proxy, url, schema = proxied
    with Runtime(url, cache=f"{redis_url()}?prefix=rt{schema}") as rt:
        rt.create_session("s")
        for i in range(30):
            rt.managed_turn("s", f"message {i} about the etcd quota and raft {i}",
                            provider="echo")
        managed = _round_trips(proxy, lambda: rt.managed_turn(
            "s", "one more question about the etcd quota", provider="echo"))
        prepared = []
        prepare = _round_trips(proxy, lambda: prepared.append(rt.prepare_turn(
            "s", [{"role": "user", "content": "and the raft election timeout?"}])))
        commit = _round_trips(proxy, lambda: rt.commit_turn(prepared[0], "1000 ms"))
    assert 0 < managed <= MANAGED_TURN_BUDGET
    assert 0 < prepare and 0 < commit and prepare + commit <= RELAY_TURN_BUDGET
