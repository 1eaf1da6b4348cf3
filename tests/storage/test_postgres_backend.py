"""The PostgreSQL back end beyond the conformance suite: migrations at open, the
same search results as the embedded back end, a server that is not there."""
from __future__ import annotations

import random
from dataclasses import replace

import psycopg
import pytest

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage import open_stores
from ctxrelay.storage.postgres import DatabaseUnavailableError
from ctxrelay.storage.postgres.migrations import MIGRATIONS
from services import postgres_url


@pytest.fixture
def pg_spec(pg_schema):
    return pg_schema


def test_migrations_are_applied_once_and_recorded(pg_spec):
    spec, schema = pg_spec
    with open_stores(spec) as stores:
        stores.transcript.create_session("a")
    with open_stores(spec):
        pass                                       # a second open applies nothing
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        rows = conn.execute(f"SELECT version, name FROM {schema}.schema_migrations "
                            "ORDER BY version").fetchall()
    assert rows == [(v, n) for v, n, _ in MIGRATIONS]


def test_a_store_written_by_a_newer_version_is_refused(pg_spec):
    spec, schema = pg_spec
    open_stores(spec).close()
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f"INSERT INTO {schema}.schema_migrations (version, name) "
                     "VALUES (9999, 'from the future')")
    with pytest.raises(Exception, match=r"migrations \[9999\].*upgrade ctxrelay"):
        open_stores(spec)


def _corpus(seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = ("etcd raft leader election timeout member defragment compaction snapshot "
             "latency disk wal fsync quorum learner lease revision watch grpc").split()
    return [(rng.choice(["user", "assistant", "tool"]),
             " ".join(rng.choice(words) for _ in range(rng.randint(3, 25))))
            for _ in range(300)]


def test_search_gives_the_same_turns_and_scores_as_the_embedded_back_end(pg_spec, tmp_path):
    spec, _ = pg_spec
    corpus = _corpus(7)
    queries = ["raft leader", "defragment member disk", "fsync latency wal", "lease",
               "quorum learner snapshot compaction", "nothing matches this"]
    with open_stores(str(tmp_path / "lmdb")) as lmdb, open_stores(spec) as pg:
        for stores in (lmdb, pg):
            stores.transcript.append_many("s", [{"role": r, "content": c} for r, c in corpus],
                                          create=True)
        for query in queries:
            for max_postings in (None, 40):
                want = lmdb.transcript.rank("s", query, k=20, max_postings=max_postings)
                have = pg.transcript.rank("s", query, k=20, max_postings=max_postings)
                assert have == want, (query, max_postings)
            want_hits = lmdb.transcript.search("s", query, k=5, roles=["assistant"])
            assert pg.transcript.search("s", query, k=5, roles=["assistant"]) == want_hits
        untimed = lambda stats: replace(stats, first_timestamp=None, last_timestamp=None)
        assert untimed(pg.transcript.stats("s")) == untimed(lmdb.transcript.stats("s"))


def test_the_knowledge_fabric_is_kept_in_postgres_and_created_on_first_use(pg_spec):
    spec, _ = pg_spec
    with open_stores(spec) as stores:
        assert not stores.has("facts") and stores.facts_if_present() is None
        fid = stores.facts.add_fact("the etcd quota is 8 GiB", key="etcd-quota")
        assert stores.has("facts")
        assert stores.facts.storage.name == "postgresql"
    with open_stores(spec) as again:              # the next process sees it
        assert again.facts.lookup_key("etcd-quota").fact_id == fid
        assert again.facts.facts("etcd quota", k=1)[0].fact.fact_id == fid


def test_a_server_that_is_not_there_is_a_clear_error():
    with pytest.raises(DatabaseUnavailableError, match="cannot connect to PostgreSQL"):
        # a loopback port nothing listens on: refused at once
        open_stores("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1")


def test_a_schema_name_that_needs_quoting_is_refused():
    with pytest.raises(InvalidArgumentError, match="plain lowercase identifier"):
        open_stores("postgresql://u@127.0.0.1:1/db?schema=Robert'); DROP")
