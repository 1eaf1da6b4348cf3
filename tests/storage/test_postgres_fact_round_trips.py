"""The statement budget of the knowledge fabric's hot calls on PostgreSQL.

A read of the fabric is one or more read snapshots, each pipelined: its
``BEGIN`` travels with its first query and its ``COMMIT`` is one more round
trip, so a snapshot of n statements costs n round trips (``BEGIN`` + n - 1
queries + ``COMMIT`` = n + 1 statements).  Namespace ids and (seq, fact id)
pairs never change and are remembered, so an ANN search reads only the
namespace's generation (the freshness check: staleness bound zero).  A write
is one transaction: the namespace row locked, the rows written, the
namespace record and the store's fact version updated, the commit.
"""
from __future__ import annotations

import psycopg
import pytest
from test_postgres_round_trips import Counted

from ctxrelay.storage import open_stores


@pytest.fixture
def facts(pg_schema):
    spec, _ = pg_schema
    stores = open_stores(spec)
    fs = stores.facts
    fs.add_facts([{"content": f"etcd member {i} keeps a quota of {i} GiB", "key": f"k{i}"}
                  for i in range(40)])
    fs.facts("etcd quota", k=5)                       # the index is built and current
    return fs


@pytest.mark.parametrize("call, statements, pipelined", [
    # (statements outside a pipeline, pipelined ones: BEGIN + queries + COMMIT each)
    # the ANN search: one snapshot (the generation); then the facts: one snapshot
    (lambda fs: fs.facts("etcd member quota", k=5), 0, 6),
    (lambda fs: fs.search_ann("etcd member quota", k=5), 0, 3),
    (lambda fs: fs.lookup_key("k7"), 0, 6),
    # BM25: the namespace's totals, the postings, the statuses of the best
    (lambda fs: fs.search_terms("quota member", k=5), 0, 5),
    (lambda fs: fs.etag(), 0, 3),
    (lambda fs: fs.version(), 1, 0),
])
def test_each_read_stays_within_its_statement_budget(facts, call, statements, pipelined):
    with Counted() as counted:
        call(facts)
    assert (counted.statements, counted.pipelined) == (statements, pipelined)


@pytest.mark.parametrize("call", [
    lambda fs: fs.cdr("etcd member quota", k=4),
    lambda fs: fs.cdgr("etcd member quota", k=6),
])
def test_a_retrieval_reads_in_one_snapshot(facts, call, monkeypatch):
    # CDR and CDGR read the facts in several steps (the ANN search, the heads, the
    # facts, the walk): one transaction for all of them, one BEGIN and one COMMIT
    # (each step in a snapshot of its own took a BEGIN, a COMMIT and a namespace read).
    sent = []
    execute = psycopg.Cursor.execute

    def recorded(cur, query, *a, **kw):
        sent.append(str(query))
        return execute(cur, query, *a, **kw)
    monkeypatch.setattr(psycopg.Cursor, "execute", recorded)
    assert call(facts)
    verbs = [q.split()[0].upper() for q in sent]
    assert verbs.count("BEGIN") == 1 and verbs.count("COMMIT") == 1
    assert len(sent) >= 5          # the steps are there, in the one transaction
    # the namespace's record (read before by this process) travels with the first
    # query, not in a round trip of its own
    assert not [q for q in sent if q.startswith("SELECT id, info FROM ckf_namespaces")]
    assert [q for q in sent if q.startswith("SELECT name, id, info FROM ckf_namespaces")]


def test_snapshots_in_a_reading_block_see_one_state(facts):
    storage = facts.storage
    before = storage.namespace("default").gen
    with storage.reading():
        assert storage.namespace("default").gen == before
        # a write commits while the block is open (its own transaction) ...
        facts.add_facts([{"content": "a fact written meanwhile", "key": "late"}])
        # ... which the block does not see (one REPEATABLE READ transaction) ...
        assert storage.namespace("default").gen == before
        assert storage.lookup_key("default", "late") is None
    # ... and the next read does.
    assert storage.namespace("default").gen > before
    assert storage.lookup_key("default", "late") is not None


def test_an_error_in_a_reading_block_gives_the_connection_back(facts):
    storage = facts.storage
    with pytest.raises(ZeroDivisionError):
        with storage.reading():
            storage.namespace("default")
            1 / 0
    with pytest.raises(psycopg.errors.UndefinedColumn):
        with storage.reading():
            storage.snapshot(lambda v: v.cur.execute(
                "SELECT no_such_column FROM ckf_config").fetchone())
    # the pool's connections are usable: the reads after work, in and out of a block
    with storage.reading():
        assert storage.namespace("default") is not None
    assert facts.lookup_key("k3") is not None


def test_shared_reads_leave_half_the_pool_free(facts):
    # A shared read holds its connection between steps (and may wait for the index's
    # lock meanwhile); the thread holding that lock must always find a connection,
    # so at most half the pool is in shared reads: past that, a block reads step by step.
    import threading
    storage = facts.storage
    slots = storage.db.pool.max_size // 2
    entered, release, views = threading.Barrier(slots + 2), threading.Event(), []

    def hold():
        with storage.reading():
            storage.namespace("default")
            views.append(getattr(storage._shared, "scope", None))
            entered.wait(timeout=30)
            release.wait(timeout=30)
    threads = [threading.Thread(target=hold) for _ in range(slots + 1)]
    for t in threads:
        t.start()
    entered.wait(timeout=30)
    release.set()
    for t in threads:
        t.join()
    assert sum(v is not None for v in views) == slots
    assert views.count(None) == 1
