"""``migrate`` carries the knowledge fabric: LMDB -> PostgreSQL -> LMDB loses nothing.

Every fact (any status, tombstones too) with its id, fields, stored times,
access counts, community, key and vector; every edge, community keyword and
source; the namespace's state hash (so ETags and cache keys stay valid)."""
from __future__ import annotations

import numpy as np
import pytest
from ctxrelay.knowledge.fabric import FactStore
from ctxrelay.storage import close_all, open_stores
from ctxrelay.storage.factcopy import fingerprint, open_raw_facts
from ctxrelay.storage.migrate import migrate

TOPICS = ["etcd quota member defragment compaction", "restic backup retention snapshot",
          "kubelet pod eviction node pressure", "postgres vacuum bloat replication lag"]


@pytest.fixture
def pg(pg_schema):
    return pg_schema[0]


def _fill(directory) -> dict[str, str]:
    clock = iter(1_700_000_000.0 + 0.37 * i for i in range(10_000))
    with FactStore(directory / "ckf", embedder="hashing", clock=lambda: next(clock),
                   recluster_every=None) as fs:
        ids = {}
        for t, topic in enumerate(TOPICS):
            for i in range(6):
                ids[f"{t}.{i}"] = fs.add_fact(f"{topic} note {i} about {topic.split()[i % 4]}",
                                              key=f"k{t}.{i}" if i % 2 else None,
                                              metadata={"n": i, "tags": [topic[:4]]},
                                              ttl="P30D" if i == 5 else None)
        fs.ingest({"text": "# Runbook\n\nDrain the node first.\n\nThen cordon it and wait.",
                   "title": "runbook", "uri": "file:///runbook.md"}, namespace="ops")
        fs.add_fact("a fact of another tenant", namespace="tenant-b", key="b1")
        fs.recluster()
        fs.set_status(ids["0.1"], "STALE")
        fs.set_status(ids["1.2"], "QUARANTINED")
        fs.delete(ids["2.3"])
        fs.update_fact(ids["3.0"], content="postgres vacuum runs nightly now")
        fs.record_access([ids["0.0"], ids["0.0"], ids["3.4"]])
        assert fs.storage.namespace("default").edges > 0
        return ids


def _prints(spec) -> dict:
    with open_stores(spec) as stores:
        storage = open_raw_facts(stores)
        try:
            return {ns: fingerprint(storage, ns) for ns in storage.namespaces()}
        finally:
            storage.close()


def test_facts_go_to_postgres_and_back_unchanged(tmp_path, pg):
    source, back = tmp_path / "source", tmp_path / "back"
    ids = _fill(source)
    want = _prints(str(source))
    assert set(want) == {"default", "ops", "tenant-b"}
    there = migrate(str(source), pg)
    assert there.facts == sum(len(p["facts"]) for p in want.values())
    close_all()
    assert _prints(pg) == want
    again = migrate(pg, str(back))
    assert again.checksum == there.checksum and _prints(str(back)) == want
    facts = want["default"]["facts"]
    by_id = {f["fact_id"]: f for f in facts}
    assert by_id[ids["2.3"]]["status"] == "DELETED" and by_id[ids["2.3"]]["content"] == ""
    assert by_id[ids["0.0"]]["access_count"] == 2 and by_id[ids["1.2"]]["status"] == "QUARANTINED"
    assert any(f["community"] is not None for f in facts) and want["default"]["edges"]
    assert want["ops"]["sources"] and want["tenant-b"]["facts"][0]["key_lookup"]
    # the fabric above works on the copies: same nearest facts, same ETag
    close_all()
    query = "restic backup retention"
    with open_stores(str(source)) as a, open_stores(pg) as b, open_stores(str(back)) as c:
        hits = [[h.fact.fact_id for h in s.facts.facts(query, k=5)] for s in (a, b, c)]
        assert hits[0] == hits[1] == hits[2] and len(hits[0]) == 5
        assert len({s.facts.etag() for s in (a, b, c)}) == 1
        np.testing.assert_array_equal(a.facts.storage.vectors("default", hits[0]),
                                      b.facts.storage.vectors("default", hits[0]))


def test_a_target_with_facts_in_a_source_namespace_is_refused_before_any_copy(tmp_path, pg):
    source = tmp_path / "source"
    _fill(source)
    with FactStore(tmp_path / "other" / "ckf", embedder="hashing") as fs:
        fs.add_fact("already here", namespace="ops")
    with pytest.raises(Exception, match="already holds facts in namespace"):
        migrate(str(source), str(tmp_path / "other"))
    with open_stores(str(tmp_path / "other")) as stores:
        assert stores.transcript.sessions() == []
