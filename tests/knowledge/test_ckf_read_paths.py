"""The CKF's faster read paths give what the plain ones gave (issue #5: CDGR p50 <= 3 ms).

A CDGR walk at 100k facts is bound by memory latency, so the walk looks labels up
in tables instead of binary searches (``LabelPositions``), sorts its keys by
radix (``argsort_keys``), scores recency on arrays (``cdr.recency_factors``),
hands the walk's own seqs back with its ids (``FactIds``) and keeps decoded fact
records (validated by their bytes on every read).  Each is checked against the
plain computation, and the caches against every kind of write made after they
were filled.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrelay.knowledge import cdr
from ctxrelay.knowledge.fabric import FactIds, FactStore
from ctxrelay.storage.lmdb.factwrite import FactWriter
from ctxrelay.knowledge.graph import Adjacency, _reach_by_layers, anchor_reach, argsort_keys
from ctxrelay.knowledge.labels import LabelPositions

TOPICS = {
    "kubernetes": "pod node cluster kubelet scheduler container deployment replica service ingress",
    "cooking": "recipe flour butter oven dough bake sugar whisk simmer garlic",
    "finance": "budget invoice revenue quarter forecast expense ledger audit payroll margin",
}


def texts(per_topic: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for topic, words in TOPICS.items():
        vocab = words.split()
        for i in range(per_topic):
            out.append(f"Note {i} on {topic}: " + " ".join(rng.choice(vocab, 6, replace=False)))
    return out


# -- label positions and the radix sort ------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 10**7), unique=True, max_size=300),
       st.lists(st.integers(-5, 10**7 + 5), max_size=100), st.booleans())
def test_label_positions_equal_a_binary_search(labels, query, dense):
    if dense and labels:            # a namespace's seqs: nearly consecutive (a lookup table)
        labels = list(range(min(labels), min(labels) + len(labels)))
        query = query + labels[::7] + [labels[0] - 1, labels[-1] + 1]
    ordered = np.array(sorted(labels), dtype=np.int64)
    q = np.array(query, dtype=np.int64)
    found = LabelPositions(ordered).find(q)
    want = [ordered.tolist().index(x) if x in labels else -1 for x in query]
    assert found.tolist() == want


def test_label_positions_keep_a_table_only_for_dense_labels():
    assert LabelPositions(np.arange(100, 100_100))._table is not None
    sparse = LabelPositions(np.arange(0, 10**8, 10**4))         # a small namespace among big ones
    assert sparse._table is None
    assert sparse.find(np.array([0, 10**4, 5])).tolist() == [0, 1, -1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**40), max_size=2000), st.sampled_from([2**10, 2**20, 2**40]))
def test_argsort_keys_is_numpys_stable_argsort(keys, modulus):
    k = np.array(keys, dtype=np.int64) % modulus            # duplicates: stability matters
    assert argsort_keys(k).tolist() == np.argsort(k, kind="stable").tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 60), st.integers(1, 8), st.booleans(),
       st.sampled_from([0, 1, 2, 3]))
def test_anchor_reach_sorted_once_equals_the_walk_layer_by_layer(seed, n, n_a, overlay, hops):
    """Up to two hops anchor_reach sorts every path once; the layer-by-layer walk
    (any hops) gives the same rows, hops and products bit for bit, with repeated
    weights (ties between paths), rows replaced in the overlay and anchors
    without edges."""
    rng = np.random.default_rng(seed)
    weights = np.float32(rng.choice([0.3, 0.5, 0.7, 0.9], size=4 * n))   # ties
    src, dst, w = [], [], []
    for i, (a, b) in enumerate(rng.integers(0, n, size=(2 * n, 2)).tolist()):
        if a != b and (a, b) not in zip(src, dst):
            src += [a, b]
            dst += [b, a]
            w += [weights[i], weights[i]]
    adj = Adjacency.from_edges(src, dst, w) if src else Adjacency(
        np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
    if overlay:
        adj.set_rows({int(x): (rng.choice(n, size=min(3, n), replace=False).tolist(),
                               [0.5, 0.25, 0.5][:min(3, n)])
                      for x in rng.integers(0, n, size=3)})
    anchors = rng.choice(n + 5, size=min(n_a, n), replace=False).tolist()
    got, want = anchor_reach(adj, anchors, hops), _reach_by_layers(adj, anchors, hops)
    for g, x in zip(got, want):
        assert g.dtype == x.dtype and g.shape == x.shape and (g == x).all()


def test_a_row_that_lists_a_neighbour_twice_is_refused():
    """Both walks keep one product per pair because a row lists a neighbour once
    (seed 0, n 5 drew [3, 3, 1] and the walks disagreed); set_rows refuses such a row
    and one whose weights do not match its neighbours, and keeps the rows it had."""
    adj = Adjacency.from_edges([0, 1], [1, 0], [0.5, 0.5])
    for bad in ({2: ([3, 3, 1], [0.5, 0.25, 0.5])}, {2: ([3, 1], [0.5])}):
        with pytest.raises(ValueError, match="row 2"):
            adj.set_rows(bad)
        assert adj.row(2)[0].tolist() == [] and adj.row(0)[0].tolist() == [1]


# -- recency on arrays -----------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e6, 1e9, allow_nan=False),
                          st.one_of(st.none(), st.floats(1.0, 1e9, allow_nan=False))),
                min_size=1, max_size=40))
def test_recency_factors_are_the_scalar_curve_bit_for_bit(rows):
    ages = np.array([a for a, _ in rows])
    ttls = np.array([np.nan if t is None else t for _, t in rows])
    got = cdr.recency_factors(ages, ttls).tolist()
    assert got == [cdr.recency_factor(a, t) for a, t in rows]


# -- decoded facts: validated on each read -------------------------------------------------

def test_a_cached_fact_follows_every_kind_of_write(tmp_path):
    """A fact read once is kept decoded; the next read after an update, a status
    change, an access, a recluster (labels) or a delete returns the new state."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        ids = s.add_facts(texts(6, seed=1))
        fid = ids[2]
        first = s.fact(fid)
        assert s.fact(fid) == first                         # read again: from the cache
        assert len(s.storage.cache.decoded) >= 1
        s.update_fact(fid, importance=0.9, metadata={"team": "infra"})
        assert (s.fact(fid).importance, s.fact(fid).metadata) == (0.9, {"team": "infra"})
        s.set_status(fid, "STALE")
        assert s.fact(fid).status == "STALE"
        s.record_access([fid])
        assert s.fact(fid).access_count == 1
        s.update_fact(fid, content="Note moved on finance: budget ledger audit payroll margin.")
        assert s.fact(fid).content.startswith("Note moved") and s.fact(fid).status == "ACTIVE"
        s.recluster()
        assert s.fact(fid).community_label == s.storage.get("default", [fid])[0].community_label
        assert s.fact(fid).community is not None
        s.delete(fid)
        gone = s.fact(fid)
        assert (gone.status, gone.content, gone.metadata) == ("DELETED", "", {})


def test_a_cached_fact_is_the_callers_own_copy(tmp_path):
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        fid = s.add_fact("A fact with metadata worth protecting.", metadata={"tags": ["a"]})
        got = s.fact(fid)
        got.metadata["tags"].append("mutated")
        got.metadata["new"] = 1
        again = s.fact(fid)
        assert again.metadata == {"tags": ["a"]} and again is not got


def test_a_write_from_another_process_shows_in_the_next_read(tmp_path):
    """Writes this process did not make (as another process's would be) change the
    record bytes the cache is validated with."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        fid = s.add_fact("A fact another process will change behind our back.")
        assert s.fact(fid).importance == 0.6
        storage = s.storage

        def behind_its_back(txn):
            w = FactWriter(storage.context, txn, "default")
            fkey = w.require(w.ns_info, fid)
            fact_id, _, rec = w.record(fkey)
            rec["importance"] = 0.25
            w.put_record(fkey, fact_id, rec)
        storage.write(behind_its_back)
        assert s.fact(fid).importance == 0.25


def test_records_kept_under_a_write_generation_follow_the_next_write(tmp_path):
    """Reads of one write generation (LMDB's transaction id) take kept facts,
    namespace records and "this namespace has no access/member records" without
    reading; an access count or a community written behind the store's back (as
    another process would) moves the generation, and the next read shows it."""
    from ctxrelay.storage.lmdb.factcodec import ACCESS, U32
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        fid = s.add_fact("A fact nobody has counted or clustered yet.")
        storage = s.storage
        first = s.fact(fid)
        assert (first.access_count, first.community) == (0, None)
        gen = storage.version()
        nid = storage.snapshot(lambda v: v.info("default"))["id"]
        assert storage.cache.holds_at(b"access", nid, gen) is False
        assert storage.cache.fact_at(storage.context.cache.fkeys[fid], gen) is not None
        assert s.fact(fid) == first and storage.version() == gen

        def put(db, value):
            def run(txn):
                w = FactWriter(storage.context, txn, "default")
                txn.put(w.require(w.ns_info, fid), value, db=storage.dbs[db])
            storage.write(run)
        put(b"access", ACCESS.pack(3, 1.5e9))
        assert storage.version() != gen
        assert s.fact(fid).access_count == 3
        put(b"members", U32.pack(7))
        assert s.fact(fid).community == 7
        assert s.storage.get("default", [fid])[0].community == 7


def test_a_search_run_ahead_answers_the_plan_and_follows_every_write(tmp_path):
    """search_ahead() repeats the last search's namespace and k for a new query; the
    search that follows is answered from it (no second hnswlib search) with what a
    plain search gives, and a write in between (a new fact, a status change) is seen."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        ids = s.add_facts(texts(20, seed=3))
        query = s.embedder.embed_batch(["budget invoice ledger audit"])[0]
        s.cdr("recipe flour butter", k=5)               # the shape asked before: default, pool 50
        idx = s.live.ann.get("default").index
        searched = []
        plain_search = idx.search
        idx.search = lambda v, k, **kw: searched.append(k) or plain_search(v, k, **kw)
        s.search_ahead(query)
        assert len(searched) == 1                       # one hnswlib search (of the pool's
        got = s.cdr(query, k=5)                         # read width: VectorIndexes.nearest)
        assert len(searched) == 1                       # answered from the search ahead
        s.live._searched.clear()                        # the same call without the kept answer
        want = s.cdr(query, k=5)
        assert len(searched) == 2 and searched[0] == searched[1]
        assert [(f.fact_id, f.score) for f in got] == [(f.fact_id, f.score) for f in want]
        # a write after the search ahead: the plan's search sees it
        s.search_ahead(query)
        best = want[0].fact_id
        s.set_status(best, "QUARANTINED")
        after = s.cdr(query, k=5)
        assert best not in [f.fact_id for f in after]
        s.search_ahead(query)
        new_id = s.add_fact("budget invoice ledger audit payroll margin forecast")
        assert new_id in [f.fact_id for f in s.cdr(query, k=5)]
        assert len(ids) == 60


# -- FactIds: the walk's own handles -------------------------------------------------------

def test_fact_ids_handles_are_used_only_by_their_owner(tmp_path):
    """A walk's ids carry their seqs; the same ids as plain strs, in another
    namespace or from another store give the same answers by the plain lookups."""
    with FactStore(tmp_path / "a", embedder="hashing", recluster_every=None) as s, \
            FactStore(tmp_path / "b", embedder="hashing", recluster_every=None) as other:
        ids = s.add_facts(texts(10, seed=4))
        s.add_facts(texts(3, seed=5), namespace="side")
        res = s.cdgr("pod kubelet budget", k=10, min_relevance=0.0)
        anchors = [r.fact_id for r in res if r.role == "anchor"]
        nodes, *_ = s.live.anchor_reach("default", anchors, 2)
        assert isinstance(nodes, FactIds) and len(nodes) >= 2
        plain = list(nodes)
        heads = s.live.scoring("default", nodes)
        assert heads == s.live.scoring("default", plain)
        assert (s.live.vectors("default", nodes) == s.live.vectors("default", plain)).all()
        picked = nodes.pick([1, 0])
        assert list(picked) == [plain[1], plain[0]]
        assert s.live.scoring("default", picked) == [heads[1], heads[0]]
        # seqs of "default" mean nothing in "side" or in another store
        assert s.live.scoring("side", nodes) == [None] * len(nodes)
        other.add_facts(texts(10, seed=4))
        assert other.live.scoring("default", nodes) == [None] * len(nodes)
        assert set(plain) <= set(ids)


def test_walk_results_follow_writes_made_after_the_walk_structures_were_built(tmp_path):
    """The walk's id table and heads are built on the first walk; adds, deletes,
    status and TTL changes after that show in the next walk exactly as in a
    store opened afresh (which builds everything from LMDB)."""
    path = tmp_path / "ckf"
    queries = ["pod kubelet budget", "oven dough ledger", "invoice audit flour"]
    kw = dict(k=10, hops=2, min_relevance=0.0, now=2e9)
    with FactStore(path, embedder="hashing", recluster_every=None) as s:
        ids = s.add_facts(texts(30, seed=6))
        before = [[r.fact_id for r in s.cdgr(q, **kw)] for q in queries]
        touched = sorted({x for res in before for x in res})
        ids += s.add_facts(texts(8, seed=7))
        s.delete(touched[:2])
        s.set_status(touched[2:4], "STALE")
        s.update_fact(touched[4], ttl="PT1S", importance=0.95)
        s.update_fact(ids[-1], content="Note late on cooking: pod kubelet budget oven dough.")
        warm = [[r.to_dict() for r in s.cdgr(q, **kw)] for q in queries]
    with FactStore(path, embedder="hashing", recluster_every=None) as s:
        cold = [[r.to_dict() for r in s.cdgr(q, **kw)] for q in queries]
    assert warm == cold
    assert not {r["fact_id"] for res in warm for r in res} & set(touched[:2])
