"""Conformance of a CKF fact store to :mod:`ctxrelay.storage.interfaces.facts`.

Every test goes through the Protocol only (``FactStorage`` and the ``FactReader``
of ``snapshot``), against each back end of ``BACKENDS``: the embedded one (LMDB)
and PostgreSQL + pgvector (a schema of its own per test on the test server,
``tests/services.py``; skipped, or failed under ``CTXRELAY_REQUIRE_SERVICES=1``,
without one).
"""
from __future__ import annotations

import math
import threading
import uuid

import numpy as np
import pytest

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.interfaces.facts import (RETRIEVABLE, STATUSES, TRANSITIONS, Change,
                                               Checkpoint, EmbeddingModelMismatchError,
                                               FactKeyExistsError, FactReader, FactStorage,
                                               StatusTransitionError, UnknownFactError,
                                               Written, epoch_of)
from ctxrelay.storage.lmdb.facts import LmdbFacts

DIM = 8
MODEL = "conformance-8"
T0 = 1_700_000_000.0

def _postgres(place: dict, **kw) -> FactStorage:
    """A PostgreSQL fact store in the test's schema (made on the first open)."""
    from ctxrelay.storage.postgres.connection import Database
    from ctxrelay.storage.postgres.facts import PgFacts
    from ctxrelay.storage.postgres.migrations import migrate
    from services import drop_schema, fresh_schema_url
    if "spec" not in place:
        place["spec"], schema = fresh_schema_url()
        place.setdefault("cleanup", []).append(lambda: drop_schema(schema))
    db = Database(place["spec"])
    try:
        migrate(db)
        return PgFacts(db, owns_db=True, **kw)
    except BaseException:
        db.close()
        raise


#: back end name -> opener(place, model_id, dim): ``model_id=None`` opens an existing store;
#: ``place`` holds ``root`` (the test's directory) and what the opener keeps between opens
BACKENDS = {
    "lmdb": lambda place, **kw: LmdbFacts(place["root"] / "facts", **kw),
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(BACKENDS))
def make(request, tmp_path):
    opened: list[FactStorage] = []
    place: dict = {"root": tmp_path}

    def make(**kw):
        kw.setdefault("model_id", MODEL)
        kw.setdefault("dim", DIM if kw["model_id"] is not None else None)
        storage = BACKENDS[request.param](place, **kw)
        opened.append(storage)
        return storage
    yield make
    for storage in opened:
        if not storage.closed:
            storage.close()
    for cleanup in place.get("cleanup", ()):
        cleanup()


@pytest.fixture
def backend(make) -> FactStorage:
    return make()


def unit(seed: int, n: int = 1) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def rec(content: str, **kw) -> dict:
    out = {"content": content, "content_hash": f"h:{content}", "key": None,
           "source_id": None, "source_location": None, "source_type": "user",
           "importance": 0.6, "ttl": None, "ttl_seconds": None, "metadata": {}}
    out.update(kw)
    return out


def add(backend, ns, *contents, now=T0, seed=0, **kw) -> list[str]:
    records = [rec(c) if isinstance(c, str) else c for c in contents]
    done = backend.add_facts(ns, records, unit(seed, len(records)), now=now, **kw)
    assert isinstance(done, Written)
    return done.value


def status_of(backend, ns, fid):
    return backend.get(ns, [fid])[0].status


def everything(backend, ns):
    """What a reader can see of a namespace (to show that nothing changed)."""
    def fn(view):
        state = view.namespace(ns)
        return (state, view.state_hash(ns), [f.to_dict() for f in view.scan(ns)],
                view.edges(ns)[0].tolist(), view.hidden(ns))
    return backend.snapshot(fn)


# -- identity, records, namespaces ----------------------------------------------------------

def test_a_back_end_is_a_fact_storage_with_its_config(backend):
    assert isinstance(backend, FactStorage)
    assert (backend.model_id, backend.dim) == (MODEL, DIM)
    assert {"model_id", "dim", "m", "ef_construction", "random_seed"} <= set(backend.config)
    assert backend.snapshot(lambda view: isinstance(view, FactReader))


def test_added_facts_read_back_with_their_fields(backend):
    meta = {"tags": ["a", "b"], "n": 1}
    ids = add(backend, "ns", rec("first fact", key="k1", importance=0.9, metadata=meta,
                                 source_id="src", source_location="p. 1", ttl="P1D",
                                 ttl_seconds=86400.0, source_type="official"),
              "second fact")
    assert len(set(ids)) == 2 and all(str(uuid.UUID(i)) == i for i in ids)
    first, second = backend.get("ns", ids)
    assert (first.content, first.content_hash, first.key, first.importance) == \
        ("first fact", "h:first fact", "k1", 0.9)
    assert (first.source_id, first.source_location, first.source_type) == \
        ("src", "p. 1", "official")
    assert (first.ttl, first.ttl_seconds, first.metadata) == ("P1D", 86400.0, meta)
    assert (first.status, first.namespace, first.model_id) == ("ACTIVE", "ns", MODEL)
    assert first.ingested_at == first.modified_at and first.ingested_at.endswith("Z")
    assert abs(epoch_of(first.ingested_at) - T0) < 1e-3
    assert (first.access_count, first.last_accessed_at, first.community) == (0, None, None)
    assert second.key is None and second.ttl is None
    assert [f.fact_id for f in backend.scan("ns")] == ids
    first.metadata["tags"].append("changed")            # the caller's own copy
    assert backend.get("ns", ids[:1])[0].metadata == meta


def test_seqs_increase_and_map_both_ways(backend):
    ids = add(backend, "ns", "a", "b", "c")
    more = add(backend, "other", "d")
    seqs = backend.locate("ns", ids).tolist()
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert backend.locate("other", more)[0] > seqs[-1]        # unique in the whole store
    assert backend.ids_at("ns", seqs) == ids
    assert backend.locate("ns", more + ["nope"]).tolist() == [-1, -1]
    assert backend.ids_at("ns", backend.locate("other", more).tolist()) == [None]
    table = backend.fact_table("ns")
    assert table.seqs.tolist() == seqs and table.ids == ids
    assert table.stamp == backend.namespace("ns").last_mod
    assert table.heads.status.tolist() == [b"A"] * 3


def test_namespaces_are_isolated(backend):
    assert backend.namespaces() == [] and backend.namespace("a") is None
    before_b = backend.state_hash("b")
    a = add(backend, "a", rec("same text", key="k"))
    b = add(backend, "b", rec("same text", key="k"))
    assert backend.namespaces() == ["a", "b"]
    assert backend.get("b", a) == [None] and backend.lookup_key("b", "k") == b[0]
    assert backend.heads("b", a).status.tolist() == [b""]
    with pytest.raises(UnknownFactError):
        backend.set_status("b", a, "STALE", now=T0)
    with pytest.raises(UnknownFactError):
        backend.vectors("b", a)
    hash_b = backend.state_hash("b")
    assert hash_b != before_b
    backend.set_status("a", a, "DELETED", now=T0)
    assert backend.state_hash("b") == hash_b and backend.get("b", b)[0].status == "ACTIVE"
    a_state, b_state = backend.namespace("a"), backend.namespace("b")
    assert a_state.id != b_state.id and a_state.name == "a"


# -- keys ---------------------------------------------------------------------------------

def test_keys_are_unique_per_namespace_and_a_clash_writes_nothing(backend):
    fid = add(backend, "ns", rec("budget", key="budget"))[0]
    before = everything(backend, "ns")
    with pytest.raises(FactKeyExistsError):
        add(backend, "ns", "fresh fact", rec("clash", key="budget"))
    with pytest.raises(FactKeyExistsError):
        add(backend, "ns", rec("x", key="twice"), rec("y", key="twice"))
    assert everything(backend, "ns") == before
    assert backend.lookup_key("ns", "budget") == fid and backend.lookup_key("ns", "Budget") is None
    backend.update_fact("ns", fid, {"key": "budget_2025"}, now=T0)
    assert backend.lookup_key("ns", "budget") is None
    assert backend.lookup_key("ns", "budget_2025") == fid
    other = add(backend, "ns", rec("other", key="budget"))[0]      # the old key is free
    with pytest.raises(FactKeyExistsError):
        backend.update_fact("ns", other, {"key": "budget_2025"}, now=T0)


# -- statuses --------------------------------------------------------------------------------

@pytest.mark.parametrize("old", STATUSES)
@pytest.mark.parametrize("new", STATUSES)
def test_status_changes_follow_the_transition_table(backend, old, new):
    fid = add(backend, "ns", rec("a fact", key="k"))[0]
    if old != "ACTIVE":
        backend.set_status("ns", [fid], old, now=T0)
    before = everything(backend, "ns")
    if new == old:
        assert backend.set_status("ns", [fid], new, now=T0).value == 0
        assert everything(backend, "ns") == before
    elif new in TRANSITIONS[old]:
        assert backend.set_status("ns", [fid], new, now=T0).value == 1
        assert status_of(backend, "ns", fid) == new
        assert (backend.lookup_key("ns", "k") == fid) == (new in RETRIEVABLE)
        assert (backend.locate("ns", [fid])[0] in backend.hidden("ns")) == \
            (new not in RETRIEVABLE)
        assert backend.namespace("ns").counts[new] == 1
    else:
        with pytest.raises(StatusTransitionError):
            backend.set_status("ns", [fid], new, now=T0)
        assert everything(backend, "ns") == before


def test_re_embedding_a_stale_fact_makes_it_active_again(backend):
    ids = add(backend, "ns", "old news", "other")
    backend.set_status("ns", ids, "STALE", now=T0)
    backend.update_fact("ns", ids[0], {"importance": 0.9}, now=T0)      # no new vector
    assert status_of(backend, "ns", ids[0]) == "STALE"
    backend.update_fact("ns", ids[0], {"content": "fresh news", "content_hash": "h:fresh"},
                        unit(3), now=T0)
    assert status_of(backend, "ns", ids[0]) == "ACTIVE"
    assert dict(backend.namespace("ns").counts) == {"ACTIVE": 1, "STALE": 1, "DELETED": 0,
                                                   "QUARANTINED": 0}
    assert backend.search_terms("ns", "fresh", 5)[0][0] == ids[0]
    assert backend.search_terms("ns", "old", 5) == []


def test_lookup_and_terms_return_retrievable_facts_only(backend):
    ids = add(backend, "ns", rec("alpha quarantined", key="q"), rec("alpha stale", key="s"),
              rec("alpha active", key="a"))
    backend.set_status("ns", ids[:1], "QUARANTINED", now=T0)
    backend.set_status("ns", ids[1:2], "STALE", now=T0)
    assert backend.lookup_key("ns", "q") is None
    assert backend.lookup_key("ns", "q", any_status=True) == ids[0]
    assert backend.lookup_key("ns", "s") == ids[1]
    assert {f for f, _ in backend.search_terms("ns", "alpha", 10)} == set(ids[1:])
    assert backend.search_terms("ns", "active", 10)[0][0] == ids[2]


def test_delete_erases_and_leaves_a_tombstone(backend):
    ids = add(backend, "ns", rec("secret words here", key="secret", metadata={"x": 1},
                                 source_id="src", source_location="p. 2"), "neighbour one")
    backend.save_communities("ns", {ids[0]: 0, ids[1]: 0}, {0: ("secret",)}, now=T0)
    backend.record_access("ns", ids[:1], now=T0)
    seq = backend.locate("ns", ids[:1])[0]
    edges = backend.add_facts("ns", [rec("linked")], unit(5), now=T0,
                              link=lambda *a: [(a[2][0], int(seq), 0.5)])
    assert backend.edge_rows("ns", [seq])[seq][0]
    assert backend.set_status("ns", ids[:1], "DELETED", now=T0 + 1).value == 1
    tomb = backend.get("ns", ids[:1])[0]
    assert (tomb.status, tomb.content, tomb.content_hash, tomb.key) == ("DELETED", "", "", None)
    assert (tomb.metadata, tomb.source_location, tomb.access_count) == ({}, None, 0)
    assert (tomb.fact_id, tomb.source_id, tomb.community) == (ids[0], "src", None)
    assert backend.search_terms("ns", "secret", 10) == []
    assert backend.lookup_key("ns", "secret", any_status=True) is None
    assert not backend.vectors("ns", ids[:1]).any()
    assert backend.vectors_at("ns", [seq])[1].tolist() == [False]
    assert backend.edge_rows("ns", [seq])[seq] == ([], [])
    assert int(seq) not in backend.edges("ns")[0].tolist() + backend.edges("ns")[1].tolist()
    assert ids[0] not in backend.communities("ns")[0]
    for status in STATUSES:
        if status != "DELETED":
            with pytest.raises(StatusTransitionError):
                backend.set_status("ns", ids[:1], status, now=T0)
    with pytest.raises(StatusTransitionError):
        backend.update_fact("ns", ids[0], {"importance": 0.1}, now=T0)
    assert add(backend, "ns", rec("new holder", key="secret"))      # the key is free
    assert edges.value


# -- time, receipts, the state hash -------------------------------------------------------------

def test_modified_at_strictly_increases_and_access_is_not_a_change(backend):
    ids = add(backend, "ns", "a", "b")
    first = backend.get("ns", ids)
    assert epoch_of(first[1].modified_at) > epoch_of(first[0].modified_at)
    stamp, digest = backend.namespace("ns").last_mod, backend.state_hash("ns")
    backend.record_access("ns", ids[:1], now=T0 + 5)
    backend.record_access("ns", ids[:1], now=T0 + 6)
    got = backend.get("ns", ids[:1])[0]
    assert (got.access_count, abs(epoch_of(got.last_accessed_at) - (T0 + 6)) < 1e-3) == (2, True)
    assert got.modified_at == first[0].modified_at
    assert (backend.namespace("ns").last_mod, backend.state_hash("ns")) == (stamp, digest)
    done = backend.update_fact("ns", ids[0], {"importance": 0.2}, now=T0)   # same now
    assert epoch_of(backend.get("ns", ids[:1])[0].modified_at) > epoch_of(first[1].modified_at)
    assert done.stamp_after > done.stamp_before == stamp
    with pytest.raises(UnknownFactError):
        backend.record_access("ns", ["not-an-id"], now=T0)


def test_receipts_name_what_a_write_changed(backend):
    ids = add(backend, "ns", "a", "b", "c")
    seqs = backend.locate("ns", ids).tolist()
    state = backend.namespace("ns")
    done = backend.set_status("ns", ids[:2], "QUARANTINED", now=T0)
    assert (done.value, done.namespace, sorted(done.seqs)) == (2, "ns", seqs[:2])
    assert (done.gen_before, done.gen_after) == (state.gen, state.gen + 2)
    assert (done.stamp_before, done.stamp_after) == (state.last_mod,
                                                    backend.namespace("ns").last_mod)
    new = backend.add_facts("ns", [rec("d")], unit(3), now=T0)
    assert list(new.seqs) == backend.locate("ns", new.value).tolist()
    same = backend.save_communities("ns", {}, {}, now=T0)
    assert same.seqs == () and same.gen_before == same.gen_after


def test_the_state_hash_moves_with_every_change_and_nothing_else(backend):
    seen = [backend.state_hash("ns")]

    def changed():
        assert backend.state_hash("ns") not in seen
        seen.append(backend.state_hash("ns"))

    def unchanged():
        assert backend.state_hash("ns") == seen[-1]

    ids = add(backend, "ns", "a", "b", "c")
    changed()
    for read in (lambda: backend.get("ns", ids), lambda: backend.scan("ns"),
                 lambda: backend.search_terms("ns", "a", 3), lambda: backend.vectors("ns", ids),
                 lambda: backend.record_access("ns", ids, now=T0)):
        read()
        unchanged()
    backend.update_fact("ns", ids[0], {"importance": 0.3}, now=T0)
    changed()
    backend.update_fact("ns", ids[0], {"content": "a2", "content_hash": "h:a2"}, unit(9),
                        now=T0)
    changed()
    backend.set_status("ns", ids[:1], "STALE", now=T0)
    changed()
    backend.set_status("ns", ids[:1], "ACTIVE", now=T0)        # an earlier status, a new state
    changed()
    backend.set_status("ns", ids[:1], "ACTIVE", now=T0)
    unchanged()
    assert backend.save_communities("ns", {ids[0]: 0, ids[1]: 0, ids[2]: 0}, {0: ("k",)},
                                    now=T0).value is True
    changed()
    assert backend.save_communities("ns", {ids[0]: 0, ids[1]: 0, ids[2]: 0}, {0: ("k",)},
                                    now=T0).value is False
    unchanged()
    backend.set_status("ns", ids[1:2], "DELETED", now=T0)
    changed()
    with pytest.raises(FactKeyExistsError):
        add(backend, "ns", rec("x", key="k1"), rec("y", key="k1"))
    unchanged()


def test_a_failed_write_changes_nothing(backend):
    add(backend, "ns", "kept")
    before = everything(backend, "ns")

    def boom(*a):
        raise RuntimeError("the link failed")
    with pytest.raises(RuntimeError, match="link failed"):
        backend.add_facts("ns", [rec("doomed")], unit(1), now=T0, link=boom)
    with pytest.raises(UnknownFactError):
        backend.set_status("ns", ["no-such-id"], "STALE", now=T0)
    assert everything(backend, "ns") == before
    with pytest.raises(InvalidArgumentError):
        backend.update_fact("ns", backend.scan("ns")[0].fact_id, {"importance": 0.1},
                            unit(2), now=T0)        # a vector without its content


# -- vectors, edges and the change feed -------------------------------------------------------

def test_vectors_and_heads_read_back(backend):
    vecs = unit(11, 3)
    ids = backend.add_facts("ns", [rec("a", importance=0.1, ttl="PT1H", ttl_seconds=3600.0),
                                   rec("b"), rec("c")], vecs, now=T0).value
    assert np.array_equal(backend.vectors("ns", ids), vecs)
    assert backend.vectors("ns", ids).dtype == np.float32
    seqs = backend.locate("ns", ids)
    rows, found = backend.vectors_at("ns", list(seqs) + [-1])
    assert found.tolist() == [True] * 3 + [False] and np.array_equal(rows[:3], vecs)
    assert not rows[3].any()
    backend.set_status("ns", ids[1:2], "STALE", now=T0)
    heads = backend.heads("ns", ids + ["unknown"])
    assert heads.status.tolist() == [b"A", b"S", b"A", b""]
    assert heads.importance[:3].tolist() == [0.1, 0.6, 0.6]
    assert heads.ttl[0] == 3600.0 and math.isnan(heads.ttl[1])
    assert heads.rows()[:3] == backend.heads_at("ns", seqs).rows()
    assert heads.rows()[1][2] == epoch_of(backend.get("ns", ids[1:2])[0].modified_at) or \
        abs(heads.rows()[1][2] - epoch_of(backend.get("ns", ids[1:2])[0].modified_at)) < 1e-5
    chunks = list(backend.iter_vectors("ns", 2, skip={int(seqs[1])}))
    assert [c[0].tolist() for c in chunks] == [[seqs[0], seqs[2]]]
    assert np.array_equal(chunks[0][1], vecs[[0, 2]])
    assert [c[0].tolist() for c in backend.iter_vectors("ns", 2)] == [seqs[:2].tolist(),
                                                                      seqs[2:].tolist()]


def test_links_run_inside_the_write_and_edges_are_stored_both_ways(backend):
    first = add(backend, "ns", "a", "b")
    s_a, s_b = backend.locate("ns", first).tolist()
    calls = []

    def link(view, state, seqs, vectors, retrievable):
        calls.append((state.gen, list(seqs), vectors.shape, retrievable,
                      view.namespace("ns").gen, view.vectors_at("ns", seqs)[1].tolist()))
        return [(seqs[0], s_a, 0.75), (seqs[0], s_b, 0.5), (seqs[1], seqs[0], 0.25)]
    gen = backend.namespace("ns").gen
    done = backend.add_facts("ns", [rec("c"), rec("d")], unit(2, 2), now=T0, link=link)
    s_c, s_d = backend.locate("ns", done.value).tolist()
    assert calls == [(gen, [s_c, s_d], (2, DIM), True, gen, [False, False])]
    rows = backend.edge_rows("ns", [s_a, s_b, s_c, s_d])
    assert rows[s_c] == ([s_a, s_b, s_d], [0.75, 0.5, 0.25])
    assert rows[s_a] == ([s_c], [0.75]) and rows[s_d] == ([s_c], [0.25])
    assert backend.namespace("ns").edges == 3
    src, dst, w = backend.edges("ns")
    pairs = list(zip(src.tolist(), dst.tolist()))
    assert pairs == sorted(pairs) and len(pairs) == 6 and w.dtype == np.float32
    # re-embedding: the link sees the old vector; old edges go, the link's come
    old = backend.vectors("ns", done.value[:1])
    seen = []

    def relink(view, state, seqs, vectors, retrievable):
        seen.append((list(seqs), retrievable, view.vectors_at("ns", seqs)[0]))
        return [(seqs[0], s_b, 0.9)]
    backend.set_status("ns", done.value[:1], "QUARANTINED", now=T0)
    backend.update_fact("ns", done.value[0], {"content": "c2", "content_hash": "h:c2"},
                        unit(7), now=T0, link=relink)
    assert seen[0][0] == [s_c] and seen[0][1] is False and np.array_equal(seen[0][2], old)
    assert backend.edge_rows("ns", [s_c, s_a])[s_c] == ([s_b], [pytest.approx(0.9)])
    assert backend.edge_rows("ns", [s_a])[s_a] == ([], [])
    assert backend.namespace("ns").edges == 1
    assert status_of(backend, "ns", done.value[0]) == "QUARANTINED"


def test_the_change_feed_replays_to_what_is_stored(backend):
    """Applying the feed to a model of an index gives the visible stored vectors."""
    model: dict[int, np.ndarray] = {}
    applied = 0

    def catch_up():
        nonlocal applied
        state = backend.namespace("ns")
        changes = backend.changes("ns", applied, state.gen)
        assert [c.gen for c in changes] == list(range(applied + 1, state.gen + 1))
        for change in changes:
            assert isinstance(change, Change)
            if change.hide:
                model.pop(change.seq, None)
            else:
                rows, found = backend.vectors_at("ns", [change.seq])
                if found[0]:
                    model[change.seq] = rows[0]
        applied = state.gen
        hidden = backend.hidden("ns")
        stored = {s: v for seqs, rows in backend.iter_vectors("ns", 100, skip=hidden)
                  for s, v in zip(seqs.tolist(), rows)}
        assert model.keys() == stored.keys()
        assert all(np.array_equal(model[s], stored[s]) for s in stored)

    ids = add(backend, "ns", "a", "b", "c", "d")
    catch_up()
    backend.set_status("ns", ids[:2], "QUARANTINED", now=T0)
    catch_up()
    backend.set_status("ns", ids[:1], "ACTIVE", now=T0)
    backend.set_status("ns", ids[1:2], "DELETED", now=T0)
    backend.set_status("ns", ids[2:3], "STALE", now=T0)          # still retrievable: no entry
    catch_up()
    backend.update_fact("ns", ids[3], {"content": "d2", "content_hash": "h:d2"}, unit(8),
                        now=T0)
    catch_up()
    gen = backend.namespace("ns").gen
    assert backend.changes("ns", gen, gen) == []
    assert backend.changes("ns", 0, gen + 1) is None            # not written yet


def test_a_checkpoint_records_its_generation_and_may_drop_the_feed(backend):
    assert backend.checkpoint("never", lambda view, state: Checkpoint(0)) is None
    ids = add(backend, "ns", "a", "b", "c")
    backend.set_status("ns", ids[:1], "QUARANTINED", now=T0)
    backend.update_fact("ns", ids[1], {"content": "b2", "content_hash": "h:b2"}, unit(4),
                        now=T0)
    state = backend.namespace("ns")
    assert state.churn == 2 and state.saved_gen == 0 and state.ef is None
    held = backend.changes("ns", 0, state.gen)
    seen = []

    def save(view, st):
        seen.append((st.gen, view.namespace("ns").gen))
        return Checkpoint(st.gen - 1, ef=48)
    done = backend.checkpoint("ns", save)
    assert done == Checkpoint(state.gen - 1, 48) and seen == [(state.gen, state.gen)]
    after = backend.namespace("ns")
    assert (after.saved_gen, after.ef, after.churn, after.gen) == (state.gen - 1, 48, 2,
                                                                    state.gen)
    assert backend.changes("ns", state.gen - 1, state.gen) == held[-1:]
    assert backend.changes("ns", 0, state.gen) in (None, held)
    backend.checkpoint("ns", lambda view, st: Checkpoint(st.gen, None, rebuilt=True))
    after = backend.namespace("ns")
    assert (after.saved_gen, after.ef, after.churn) == (state.gen, None, 0)


# -- expiry ------------------------------------------------------------------------------

def test_due_facts_and_expiry(backend):
    ids = add(backend, "ns", rec("hour", ttl="PT1H", ttl_seconds=3600.0),
              rec("day", ttl="P1D", ttl_seconds=86400.0), rec("never"),
              rec("quarantined hour", ttl="PT1H", ttl_seconds=3600.0), now=T0)
    backend.set_status("ns", ids[3:], "QUARANTINED", now=T0)
    due_at = epoch_of(backend.get("ns", ids[:1])[0].ingested_at) + 3600.0
    assert backend.due("ns", now=due_at) == []                   # strictly after
    assert backend.due("ns", now=due_at + 1e-3) == ids[:1]
    assert backend.due("ns", now=T0 + 2 * 86400) == ids[:2]      # seq order
    assert backend.due("other", now=T0 + 1e9) == []
    backend.update_fact("ns", ids[1], {"ttl": "PT1S", "ttl_seconds": 1.0}, now=T0)
    assert backend.due("ns", now=T0 + 10) == ids[1:2]
    backend.update_fact("ns", ids[0], {"ttl": "P9D", "ttl_seconds": 9 * 86400.0}, now=T0)
    done = backend.expire("ns", ids, now=T0 + 2 * 3600)           # ids[0] renewed meanwhile
    assert done.value == 1 and [status_of(backend, "ns", f) for f in ids] == \
        ["ACTIVE", "STALE", "ACTIVE", "QUARANTINED"]
    assert backend.expire("ns", ids, now=T0 + 2 * 3600).value == 0
    assert backend.expire("unknown", ids, now=T0).value == 0
    assert backend.due("ns", now=T0 + 1e9) == ids[:1]


# -- sources, supersession, communities ------------------------------------------------------

def test_a_source_is_recorded_with_its_facts_and_supersedes_the_old_ones(backend):
    src = {"source_id": "doc-1", "title": "Doc", "uri": "file:///doc", "document_hash": "h1",
           "status": "ACTIVE"}
    old = add(backend, "ns", "v1 part 1", "v1 part 2", source=src)
    record = backend.source("ns", "doc-1")
    assert (record.title, record.uri, record.document_hash, record.fact_ids) == \
        ("Doc", "file:///doc", "h1", tuple(old))
    assert record.fact_count == 2 and record.status == "ACTIVE"
    backend.set_status("ns", old[1:], "QUARANTINED", now=T0)
    new = add(backend, "ns", "v2", source={**src, "document_hash": "h2", "status": "UPDATED"},
              supersede=old)
    assert [status_of(backend, "ns", f) for f in old] == ["STALE", "QUARANTINED"]
    assert backend.source("ns", "doc-1").fact_ids == tuple(new)
    assert backend.source("ns", "nope") is None and backend.source("other", "doc-1") is None


def test_communities_are_saved_whole_and_read_back_retrievable(backend):
    ids = add(backend, "ns", "a", "b", "c", "d")
    assert backend.namespace("ns").pending == 4
    assert backend.save_communities("ns", {ids[0]: 0, ids[1]: 0, ids[2]: 1},
                                    {0: ("alpha", "beta", "gamma", "delta"), 1: ("one",)},
                                    now=T0).value
    assert (backend.namespace("ns").pending, backend.namespace("ns").communities) == (0, 2)
    membership, keywords = backend.communities("ns")
    assert membership == {ids[0]: 0, ids[1]: 0, ids[2]: 1}
    assert keywords == {0: ("alpha", "beta", "gamma", "delta"), 1: ("one",)}
    fact = backend.get("ns", ids[:1])[0]
    assert (fact.community, fact.community_label) == (0, "alpha / beta / gamma")
    backend.set_status("ns", ids[:1], "QUARANTINED", now=T0)
    assert ids[0] not in backend.communities("ns")[0]
    backend.save_communities("ns", {ids[3]: 0}, {0: ("solo",)}, now=T0)
    assert backend.communities("ns") == ({ids[3]: 0}, {0: ("solo",)})
    assert backend.get("ns", ids[1:2])[0].community is None


# -- snapshots, versions, reopening -----------------------------------------------------------

def test_a_snapshot_does_not_see_a_write_committed_while_it_reads(backend):
    add(backend, "ns", "a")
    seen = []

    def read(view):
        seen.append((view.namespace("ns").gen, len(view.scan("ns"))))
        writer = threading.Thread(target=lambda: add(backend, "ns", "b", seed=2))
        writer.start()
        writer.join()
        seen.append((view.namespace("ns").gen, len(view.scan("ns"))))
    backend.snapshot(read)
    assert seen[0] == seen[1] == (1, 1)
    assert len(backend.scan("ns")) == 2


def test_the_version_grows_with_every_write(backend):
    versions = [backend.version()]
    ids = add(backend, "ns", "a")
    versions.append(backend.version())
    backend.set_status("ns", ids, "STALE", now=T0)
    versions.append(backend.version())
    backend.record_access("ns", ids, now=T0)
    versions.append(backend.version())
    backend.get("ns", ids)
    assert versions == sorted(set(versions)) and backend.version() == versions[-1]


def test_a_store_reopens_with_everything_and_refuses_another_model(make):
    first = make()
    ids = add(first, "ns", rec("kept", key="k"), "other")
    first.set_status("ns", ids[1:], "QUARANTINED", now=T0)
    before = everything(first, "ns")
    first.close()
    again = make(model_id=None)
    assert (again.model_id, again.dim) == (MODEL, DIM)
    assert everything(again, "ns") == before and again.lookup_key("ns", "k") == ids[0]
    again.close()
    with pytest.raises(EmbeddingModelMismatchError):
        make(model_id="another-model", dim=DIM)
