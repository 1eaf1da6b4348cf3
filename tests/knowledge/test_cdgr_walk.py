"""The CDGR walk's in-memory structures (issue #5: CDGR walk p50 <= 3 ms).

The walk keeps, per namespace, an int8 sketch of the stored vectors
(:class:`ctxrelay.knowledge.sketch.VectorSketch`) to bound connector relevance and
coverage without reading every candidate's vector, plus a name index for the
candidates' ids.  These tests check that the bounds hold, that a walk using
them returns exactly what a walk reading every vector returns, and that the
structures follow every kind of write made after they were built.
"""
from __future__ import annotations

import numpy as np
import pytest

from ctxrelay.knowledge import cdr as cdr_mod
from ctxrelay.knowledge.fabric import FactStore
from ctxrelay.knowledge.retrieval import bridged_candidates
from ctxrelay.knowledge.sketch import VectorSketch
from ctxrelay.storage.lmdb.factview import FactView
from ctxrelay.storage.lmdb.factwrite import FactWriter
from ctxrelay.text.embed import CallableEmbedder

TOPICS = {
    "kubernetes": "pod node cluster kubelet scheduler container deployment replica service ingress",
    "cooking": "recipe flour butter oven dough bake sugar whisk simmer garlic",
    "finance": "budget invoice revenue quarter forecast expense ledger audit payroll margin",
}


def topic_texts(per_topic: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for topic, words in TOPICS.items():
        vocab = words.split()
        others = [w for t, ws in TOPICS.items() if t != topic for w in ws.split()]
        for i in range(per_topic):
            picked = list(rng.choice(vocab, size=5, replace=False)) + [rng.choice(others)]
            out.append(f"Note {i} on {topic}: " + " ".join(picked) + ".")
    return out


# -- the sketch on its own ---------------------------------------------------------------

def test_sketch_bounds_hold_the_exact_dot_products():
    rng = np.random.default_rng(0)
    for trial in range(12):
        dim = (8, 64, 1024)[trial % 3]
        vecs = rng.standard_normal((150, dim)) * rng.choice([1e-3, 1.0, 50.0])
        vecs[0] = 0.0                                   # a zero vector
        vecs[1] = 0.0
        vecs[1, 3] = 7.0                                # one component
        vecs[2] = np.abs(vecs[2]) ** 3                  # one large component, many small
        vecs = vecs.astype(np.float32)
        queries = rng.standard_normal((3, dim)).astype(np.float32)
        queries[1] *= rng.random(dim) < 0.05            # sparse, like a hashed query
        labels = np.arange(150) * 3 + 5
        sketch = VectorSketch.build(dim, [(labels[:70], vecs[:70]), (labels[70:], vecs[70:])])
        approx, err = sketch.dots(labels[::-1], queries)
        exact = vecs[::-1].astype(np.float64) @ queries.astype(np.float64).T
        assert (np.abs(exact - approx) <= err).all()
        assert err[-1].max() == 0.0 and err[:-3].max() < np.inf
    _, err = sketch.dots([4, 6, labels[0]], queries)
    assert np.isinf(err[:2]).all() and np.isfinite(err[2]).all()    # unknown labels


def test_sketch_overlay_sets_and_drops_rows_and_compacts_to_the_same():
    rng = np.random.default_rng(1)
    dim = 32
    vecs = {label: rng.standard_normal(dim).astype(np.float32) for label in range(0, 400, 2)}
    sketch = VectorSketch.build(dim, [(list(vecs), np.array(list(vecs.values())))])
    new = {label: rng.standard_normal(dim).astype(np.float32) for label in (4, 8, 401, 403)}
    sketch.update(list(new), np.array(list(new.values())), drop=[10, 12, 999])
    vecs.update(new)
    del vecs[10], vecs[12]
    q = rng.standard_normal((2, dim)).astype(np.float32)
    labels = np.array(sorted(vecs) + [10, 12])

    def check() -> None:
        approx, err = sketch.dots(labels, q)
        exact = np.array([vecs[x] for x in labels[:-2]], dtype=np.float64) @ q.T.astype(np.float64)
        assert (np.abs(exact - approx[:-2]) <= err[:-2]).all()
        assert np.isinf(err[-2:]).all()                 # dropped rows are unknown
        assert len(sketch) == len(vecs)

    check()
    sketch.compact()
    check()


# -- bounded walks against walks that read every vector ------------------------------------

def walk_both(s: FactStore, queries: list[str], **kw) -> tuple[list, list, list[tuple[int, int]]]:
    """cdgr with the sketch, then with similarity_bounds switched off (every
    candidate's vector read); and (scored, candidates) per bounded connector step."""
    sizes: list[tuple[int, int]] = []
    live = s.live
    heads, vectors = live.heads, live.vectors
    last: dict[str, int] = {}

    def spy_heads(ns, ids):
        last["n"] = len(ids)
        return heads(ns, ids)

    def spy_vectors(ns, ids):
        if "n" in last:
            sizes.append((len(ids), last.pop("n")))
        return vectors(ns, ids)

    live.heads, live.vectors = spy_heads, spy_vectors
    try:
        bounded = [s.cdgr(q, **kw) for q in queries]
    finally:
        del live.heads, live.vectors
    live.similarity_bounds = lambda *a: None
    try:
        exact = [s.cdgr(q, **kw) for q in queries]
    finally:
        del live.similarity_bounds
    return bounded, exact, sizes


def dicts(results: list) -> list:
    return [[r.to_dict() for r in res] for res in results]


QUERIES = ["pod kubelet budget", "oven dough ledger", "service ingress recipe",
           "invoice audit flour", "replica scheduler margin", "garlic simmer payroll"]


def test_bounded_walk_equals_the_walk_reading_every_vector_through_writes(tmp_path):
    """After each kind of write (add, delete, quarantine and lift, re-embedding,
    a snapshot that prunes the log, a rebuild), with and without a coverage set,
    the walk that reads only the vectors its bounds leave open returns the same
    facts, order and scores as the one that reads them all."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        ids = s.add_facts(topic_texts(40, seed=11))
        pruned = 0

        def same(**extra) -> list:
            nonlocal pruned
            for kw in ({}, {"coverage": ["pod node cluster", ("budget ledger", 0.9)]}):
                bounded, exact, sizes = walk_both(s, QUERIES, **{
                    "k": 10, "hops": 2, "min_relevance": 0.0, **kw, **extra})
                assert dicts(bounded) == dicts(exact)
                pruned += sum(read < scored for read, scored in sizes)
            return bounded

        first = same()
        assert s.live.walks.peek("default").sketch is not None        # built by the first walk
        connectors = {r.fact_id for res in first for r in res if r.role == "connector"}
        assert len(connectors) >= 3
        gone = sorted(connectors)[:2]
        s.delete(gone)
        after = same()
        assert not {r.fact_id for res in after for r in res} & set(gone)
        ids += s.add_facts(topic_texts(10, seed=12))
        same()
        s.set_status(ids[3:6], "QUARANTINED")
        same()
        s.set_status(ids[3:5], "ACTIVE")
        s.update_fact(ids[7], content="Note 7 on finance: ledger audit payroll margin budget.")
        s.update_fact(ids[50], content="Note 50 moved: recipe flour butter oven pod node.")
        same(hops=3)
        s.flush()                                                   # prunes the log
        s.add_facts([t.replace("Note", "Memo") for t in topic_texts(3, seed=13)])
        same()
        s.delete(ids[20:60])                                        # > 20 %: index rebuilt
        same()
        assert pruned > 0                                           # the bounds did prune


# -- the structures follow writes made after they were built ---------------------------------

TABLE = {
    "q": [1, 0, 0, 0, 0, 0, 0, 0],
    "A1": [0.6, 0.8, 0, 0, 0, 0, 0, 0],       # a chain A1 - C1 - C2 - A2
    "C1": [0.1, 0.7, 0.7, 0, 0, 0, 0, 0],
    "C2": [0.1, 0, 0.7, 0.7, 0, 0, 0, 0],
    "A2": [0.6, 0, 0, 0.8, 0, 0, 0, 0],
    "X": [0.5, 0, 0, 0, 0, 0, 0.2, 0.84],
}


@pytest.fixture
def chain(tmp_path):
    emb = CallableEmbedder(lambda texts: [TABLE[t.split(":")[0]] for t in texts], dim=8,
                           model_id="table-v1",
                           thresholds={"thread_join": 0.7, "topic_same": 0.5, "edge": 0.45})
    with FactStore(tmp_path / "ckf", embedder=emb, min_relevance=0.5,
                   recluster_every=None) as s:
        yield s


def bounds_hold(s: FactStore, fact_ids: list[str], query: list[float]) -> np.ndarray:
    """err per fact, after checking each bound holds the exact dot product."""
    q = np.asarray(query, dtype=np.float32)
    approx, err = s.live.similarity_bounds("default", fact_ids, q[None, :])
    exact = s.storage.vectors("default", fact_ids).astype(np.float64) @ q.astype(np.float64)
    known = np.isfinite(err[:, 0])
    assert (np.abs(exact - approx[:, 0])[known] <= err[known, 0]).all()
    return err[:, 0]


def test_a_fact_deleted_or_added_after_the_walk_structures_were_built_shows_in_the_next_walk(
        chain):
    ids = {n: chain.add_fact(f"{n}: fact text") for n in ("A1", "C1", "C2", "A2")}
    got = chain.cdgr("q", k=3, hops=2)            # 2 anchors + 1 connector: bounds are used
    assert {r.fact_id for r in got if r.role == "connector"} <= {ids["C1"], ids["C2"]}
    assert sum(r.role == "connector" for r in got) == 1
    assert chain.live.walks.peek("default").sketch is not None
    chain.delete(ids["C2"])                       # the chain is cut: nothing bridges A1, A2
    got = chain.cdgr("q", k=3, hops=2)
    assert [r.role for r in got] == ["anchor", "anchor"]
    assert np.isinf(bounds_hold(chain, [ids["C2"]], TABLE["q"])).all()   # its row went
    c2 = chain.add_fact("C2: fact text")          # a new fact mends it
    got = chain.cdgr("q", k=4, hops=2)
    assert {r.fact_id for r in got} == {ids["A1"], ids["C1"], c2, ids["A2"]}
    assert np.isfinite(bounds_hold(chain, [c2, ids["C1"]], TABLE["q"])).all()


def test_the_sketch_follows_a_re_embedding_and_a_quarantine(chain):
    ids = {n: chain.add_fact(f"{n}: fact text") for n in ("A1", "C1", "C2", "A2")}
    chain.cdgr("q", k=3, hops=2)
    before = chain.live.walks.peek("default").sketch
    chain.update_fact(ids["C1"], content="X: moved elsewhere")     # a new vector, same id
    bounds_hold(chain, list(ids.values()), TABLE["q"])            # checks the new vector
    approx, _ = chain.live.similarity_bounds("default", [ids["C1"]],
                                                np.array([TABLE["X"]], dtype=np.float32))
    assert approx[0, 0] == pytest.approx(np.dot(TABLE["X"], TABLE["X"]), abs=0.02)
    assert chain.live.walks.peek("default").sketch is before         # caught up, not rebuilt
    chain.set_status(ids["C2"], "QUARANTINED")
    assert np.isinf(bounds_hold(chain, [ids["C2"]], TABLE["q"])).all()
    chain.set_status(ids["C2"], "ACTIVE")
    assert np.isfinite(bounds_hold(chain, [ids["C2"]], TABLE["q"])).all()


def test_scores_do_not_depend_on_which_facts_are_scored_together():
    """Coverage and residual terms are computed row by row, so a fact scored in a
    batch of 1 or of 200 gets the same floats (the bounded walk relies on it)."""
    rng = np.random.default_rng(3)
    facts = rng.standard_normal((200, 384)).astype(np.float32)
    cov = rng.standard_normal((4, 384)).astype(np.float32)
    w = np.array([0.5, 0.9, 0.1, 1.0])
    full = cdr_mod.coverage_scores(facts, cov, w)
    pulls = cdr_mod.residual_pulls(facts, cov)
    for rows in ([5], [0, 7, 199], list(range(3, 150, 7))):
        assert cdr_mod.coverage_scores(facts[rows], cov, w).tolist() == full[rows].tolist()
        assert cdr_mod.residual_pulls(facts[rows], cov).tolist() == pulls[rows].tolist()


# -- scoring heads held in memory -------------------------------------------------------------

def test_scoring_heads_follow_every_write_including_ones_this_process_did_not_make(tmp_path):
    """The walk scores candidates from in-memory heads (status, importance,
    modified_at, ttl).  Writes that change no vector (importance, TTL, status) and
    a write made behind the store's back (as another process's would be) show
    in the next scoring, equal to the records read from LMDB."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        ids = s.add_facts(topic_texts(10, seed=21))
        live, storage = s.live, s.storage
        s.cdgr("pod kubelet budget", k=10, min_relevance=0.0)          # builds the heads
        walk = live.walks.peek("default")
        assert walk.heads is not None
        reads: list[int] = []
        by_id = FactView.heads

        def spy(self, ns, fact_ids):
            reads.append(len(fact_ids))
            return by_id(self, ns, fact_ids)

        def truth() -> list:          # read from the records, by seq (not spied)
            return storage.heads_at("default", storage.locate("default", ids)).rows()

        FactView.heads = spy
        try:
            assert live.scoring("default", ids) == truth() and reads == []   # all in memory
            s.update_fact(ids[3], importance=0.2, ttl="P1D")                   # no new vector
            s.set_status(ids[4], "STALE")
            s.delete(ids[5])
            got = live.scoring("default", ids)
            assert got == truth() and reads == [3]          # only the three changed re-read
            assert (got[3][1], got[3][3], got[4][0], got[5][0]) == (0.2, 86400.0, "STALE",
                                                                    "DELETED")

            def behind_its_back(txn):
                w = FactWriter(storage.context, txn, "default")
                fkey = w.require(w.ns_info, ids[6])
                fact_id, _, rec = w.record(fkey)
                rec["importance"], rec["modified_at"] = 0.123, w.tick(2e9)
                w.put_record(fkey, fact_id, rec)
                w.save_info()
            storage.write(behind_its_back)
            got = live.scoring("default", ids)
            assert got == truth() and got[6][1] == 0.123
            s.cdgr("pod kubelet budget", k=10, min_relevance=0.0)      # the walk reads them again
            assert walk.heads.stamp == storage.namespace("default").last_mod
            reads.clear()
            assert live.scoring("default", ids) == truth() and reads == []
        finally:
            FactView.heads = by_id


# -- connector candidates --------------------------------------------------------------------

def bridged_by_sorting_every_row(nodes, hop, product, link):
    """The candidate selection as first written: exact strengths of every row, one sort."""
    reached = hop > 0
    n_reached = reached.sum(axis=1)
    linked_pairs = ((reached.astype(np.int64) @ link.astype(np.int64)) * reached).sum(1) // 2
    n_pairs = (n_reached * (n_reached - 1) // 2 - linked_pairs).tolist()
    strength = [[p ** (1.0 / h) for h, p in zip(hs, ps) if h]
                for hs, ps in zip(hop.tolist(), product.tolist())]
    multi = sorted(zip((-n for n in n_reached.tolist()), (-max(x) for x in strength),
                       nodes, range(len(nodes))))
    out = {}
    for *_, r in multi[:cdr_mod.MAX_CONNECTOR_CANDIDATES]:
        value = n_pairs[r] * (sum(strength[r]) / len(strength[r]))
        if value > 0:
            out[nodes[r]] = (value, r, strength[r])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_connector_candidates_equal_sorting_every_row_with_exact_strengths(seed):
    """Candidates are chosen on numpy strengths and re-ranked exactly near the cut;
    with many rows, ties in anchor count and in strength (weights from a small
    set), the result equals ranking every row by exact strength."""
    rng = np.random.default_rng(seed)
    n_a = int(rng.integers(3, 9))
    n = int(rng.choice([150, 260, 700]))
    hop = rng.integers(0, 4, size=(n, n_a)) * (rng.random((n, n_a)) < 0.5)
    hop[:, :2] = np.maximum(hop[:, :2], 1)                      # every row reaches >= 2
    weights = np.array([0.6, 0.7, 0.75, 0.8, 0.9])
    product = np.where(hop > 0, weights[rng.integers(0, 5, (n, n_a))] ** np.maximum(hop, 1), 0.0)
    link = rng.random((n_a, n_a)) < 0.3
    link = (link | link.T) & ~np.eye(n_a, dtype=bool)
    nodes = [f"{rng.integers(1 << 62):016x}-{i}" for i in range(n)]
    got = bridged_candidates(nodes, hop, product, link)
    want = bridged_by_sorting_every_row(nodes, hop, product, link)
    assert {n: r for n, (_, r) in got.items()} == {n: r for n, (_, r, _) in want.items()}
    for node, (value, _) in got.items():            # numpy's value, within 1e-12
        assert value == pytest.approx(want[node][0], rel=1e-12, abs=0)
