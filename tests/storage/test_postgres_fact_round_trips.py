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

import pytest
from test_postgres_round_trips import Counted

from ctxrelay.storage import close_all, open_stores
from services import drop_schema, fresh_schema_url


@pytest.fixture
def facts():
    spec, schema = fresh_schema_url()
    stores = open_stores(spec)
    fs = stores.facts
    fs.add_facts([{"content": f"etcd member {i} keeps a quota of {i} GiB", "key": f"k{i}"}
                  for i in range(40)])
    fs.facts("etcd quota", k=5)                       # the index is built and current
    yield fs
    close_all()
    drop_schema(schema)


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
