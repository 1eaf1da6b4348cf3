"""The per-process ANN index of facts on PostgreSQL: a restarted process loads its
snapshot and replays the change feed (no rebuild from every vector), and the
processes of one host never share a snapshot."""
from __future__ import annotations

import pytest
from ctxrelay.storage import close_all, open_stores
from ctxrelay.storage.postgres.factview import PgFactView


@pytest.fixture
def spec(tmp_path, monkeypatch, pg_schema):
    monkeypatch.setenv("CTXRELAY_ANN_DIR", str(tmp_path / "ann"))
    return pg_schema[0]


@pytest.fixture
def full_reads(monkeypatch):
    """How many times an index was filled from every stored vector."""
    calls = []
    original = PgFactView.iter_vectors

    def counted(self, *a, **kw):
        calls.append(a[0])
        return original(self, *a, **kw)
    monkeypatch.setattr(PgFactView, "iter_vectors", counted)
    return calls


TEXTS = [f"runbook note {i}: {w} settings of the {w} service" for i, w in enumerate(
    "etcd restic kubelet postgres grafana loki calico coredns ingress vault".split() * 3)]


def test_a_restarted_process_loads_its_snapshot_and_replays_the_feed(spec, full_reads):
    with open_stores(spec) as stores:
        fs = stores.facts
        ids = fs.add_facts(TEXTS)
        assert fs.facts("restic settings", k=1)[0].fact.fact_id in ids
        slot = fs.storage.slot.dir
        assert full_reads == ["default"]            # the first build reads every vector
    close_all()
    # another process writes meanwhile, in a slot of its own (slot-0 is held, as a
    # live relay would hold it)
    from ctxrelay.storage.postgres.connection import Database
    from ctxrelay.storage.postgres.facts import PgFacts
    db = Database(spec)
    holder = PgFacts(db)
    assert holder.slot.dir == slot
    with open_stores(spec) as other:
        assert other.facts.storage.slot.dir != slot
        late = other.facts.add_fact("the vault unseal keys live in the HSM", key="vault")
        other.facts.delete(ids[3])
    close_all()
    holder.close()
    db.close()
    full_reads.clear()
    with open_stores(spec) as stores:             # "the restart"
        fs = stores.facts
        assert fs.storage.slot.dir == slot           # the slot its predecessor left
        found = [h.fact.fact_id for h in fs.facts("vault unseal keys HSM", k=3)]
        assert found[0] == late and ids[3] not in [
            h.fact.fact_id for h in fs.facts(TEXTS[3], k=5)]
        assert full_reads == []                      # loaded and replayed, not rebuilt


def test_two_processes_of_one_host_hold_different_slots(spec):
    with open_stores(spec) as stores:
        stores.facts.add_fact("a fact", key="a")
        first = stores.facts.storage.slot.dir
    from ctxrelay.storage.postgres.connection import Database
    from ctxrelay.storage.postgres.facts import PgFacts
    db = Database(spec)
    try:
        a, b = PgFacts(db), PgFacts(db)
        assert a.slot.dir != b.slot.dir and first in (a.slot.dir, b.slot.dir)
        a.close()
        c = PgFacts(db)
        assert c.slot.dir == a.slot.dir              # freed at close, taken again
        b.close()
        c.close()
    finally:
        db.close()
