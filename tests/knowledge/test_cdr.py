"""CDR (SPEC-024), the recency factor (SPEC-027 §3) and CDGR (SPEC-025).

The formulas are checked as pure functions first, then through a FactStore.
The store tests use a table embedder: every text maps to a hand-made vector,
so relevances, coverage similarities and the edge graph are known exactly.
"""
from __future__ import annotations

import math
from datetime import timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrelay.knowledge import cdr
from ctxrelay.knowledge.fabric import EmbeddingModelMismatchError, FactStore
from ctxrelay.text.embed import CallableEmbedder
from ctxrelay.errors import InvalidArgumentError

DAY = 86400.0


# -- TTL and the recency curve (SPEC-027 §3.2) ---------------------------------------

@pytest.mark.parametrize("age_days, expected", [
    (0, 1.0), (2.5, 1.0), (5, 1.0),            # first half of the TTL: fresh
    (6.25, 1.0 - 0.7 * 0.25), (7.5, 0.65), (8.75, 1.0 - 0.7 * 0.75),  # linear decay
    (10, 0.30), (30, 0.30),                    # at and past the TTL: the stale floor
])
def test_recency_curve_breakpoints(age_days, expected):
    assert cdr.recency_factor(age_days * DAY, 10 * DAY) == pytest.approx(expected)


def test_recency_is_continuous_and_monotone():
    ttl = 10 * DAY
    ages = np.linspace(0, 2 * ttl, 2001)
    values = [cdr.recency_factor(a, ttl) for a in ages]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert max(abs(a - b) for a, b in zip(values, values[1:])) < 0.002
    assert cdr.recency_factor(ttl / 2 + 1e-9, ttl) == pytest.approx(1.0)
    assert cdr.recency_factor(ttl - 1e-9, ttl) == pytest.approx(0.30)


def test_recency_without_ttl_and_negative_age():
    assert cdr.recency_factor(1e12, None) == 1.0
    assert cdr.recency_factor(-5 * DAY, 10 * DAY) == 1.0      # clock skew: treated as fresh


@pytest.mark.parametrize("value, text, seconds", [
    ("P90D", "P90D", 90 * DAY), ("p1y", "P1Y", 365 * DAY), ("P1Y6M", "P1Y6M", 545 * DAY),
    ("PT12H", "PT12H", 43200.0), ("P1DT30M", "P1DT30M", DAY + 1800), (3600, "PT3600S", 3600.0),
    (timedelta(days=2), "PT172800S", 2 * DAY), (None, None, None), ("none", None, None),
])
def test_parse_ttl(value, text, seconds):
    assert cdr.parse_ttl(value) == (text, seconds)


@pytest.mark.parametrize("bad", ["90 days", "P", "PT", "P1DT", "P0D", 0, -5, float("nan"), True, [1]])
def test_parse_ttl_rejects(bad):
    with pytest.raises(InvalidArgumentError, match="ttl"):
        cdr.parse_ttl(bad)


# -- coverage, novelty, the score (SPEC-024 §2) ------------------------------------------

def unit(*xs):
    v = np.array(xs, dtype=np.float64)
    return v / np.linalg.norm(v)


def test_coverage_is_the_weighted_mean_not_the_max():
    fact = unit(1, 1, 0)
    covered, uncovered = unit(1, 0, 0), unit(0, 0, 1)
    sims = [float(fact @ covered), float(fact @ uncovered)]
    got = cdr.coverage_scores(fact[None], np.array([covered, uncovered]), np.array([0.9, 0.3]))
    assert got[0] == pytest.approx((0.9 * sims[0] + 0.3 * sims[1]) / 1.2)
    assert got[0] < max(sims)
    assert cdr.coverage_scores(fact[None], np.zeros((0, 3)), np.zeros(0))[0] == 0.0


def test_novelty_modes_floor_and_cap():
    scores = np.array([0.0, 0.3, 0.8, 0.95, 1.0])
    assert cdr.novelty(scores, "on") == pytest.approx([1.0, 0.7, 0.2, 0.2, 0.2])
    assert cdr.novelty(scores, "off") == pytest.approx([1, 1, 1, 1, 1])
    assert cdr.novelty(scores, "partial") == pytest.approx([1.0, 0.85, 0.6, 0.6, 0.6])
    assert cdr.novelty(np.array([-0.5]), "on")[0] == 1.0     # anti-correlated: still at most 1
    with pytest.raises(InvalidArgumentError, match="novelty must be one of"):
        cdr.novelty(scores, "sometimes")


def test_window_one_score_is_importance_times_relevance():
    imp, rel = np.array([0.9, 0.5]), np.array([0.7, 0.8])
    zeros = np.zeros(2)
    got = cdr.cdr_scores(imp, rel, zeros, cdr.novelty(zeros), np.ones(2), zeros)
    assert got == pytest.approx(imp * rel)


def test_residual_pull_raises_effective_relevance():
    got = cdr.cdr_scores(np.ones(1), np.array([0.4]), np.array([0.9]), np.ones(1),
                         np.ones(1), np.zeros(1))
    assert got[0] == pytest.approx(0.9)


def test_ngram_guard():
    out = "the pods receive new addresses when they are rescheduled after a node restart"
    blacklist = cdr.ngram_blacklist([out])
    fact = "Pods receive new addresses when they are rescheduled, says the manual."
    overlap = cdr.ngram_overlap(fact, blacklist)
    assert overlap == 3          # 8 shared words "pods ... rescheduled": three 6-grams
    assert cdr.ngram_penalty(overlap) == pytest.approx(0.45)
    assert cdr.ngram_penalty(100) == 0.80
    assert cdr.ngram_overlap("nothing in common here at all today", blacklist) == 0


# -- CDGR building blocks (SPEC-025 §2) ---------------------------------------------------

GRAPH = {"a": {"x": 0.9, "b": 0.5}, "x": {"a": 0.9, "y": 0.8}, "y": {"x": 0.8, "c": 0.6},
         "b": {"a": 0.5}, "c": {"y": 0.6}}


def test_reach_respects_the_hop_limit_and_takes_the_strongest_shortest_path():
    one = cdr.reach_from("a", lambda n: GRAPH.get(n, {}), 1)
    assert set(one) == {"x", "b"}
    two = cdr.reach_from("a", lambda n: GRAPH.get(n, {}), 2)
    assert set(two) == {"x", "b", "y"}
    assert two["y"] == cdr.Reach(2, pytest.approx(math.sqrt(0.9 * 0.8)))
    three = cdr.reach_from("a", lambda n: GRAPH.get(n, {}), 3)
    assert three["c"].hops == 3


def test_bridge_value_counts_only_pairs_without_a_direct_edge():
    touched = {"a1": cdr.Reach(1, 0.8), "a2": cdr.Reach(1, 0.6), "a3": cdr.Reach(2, 0.7)}
    direct = {frozenset({"a1", "a2"})}
    value, pairs = cdr.bridge_value(touched, lambda x, y: frozenset({x, y}) in direct)
    assert pairs == [("a1", "a3"), ("a2", "a3")]
    assert value == pytest.approx(2 * (0.8 + 0.6 + 0.7) / 3)
    assert cdr.bridge_value({"a1": cdr.Reach(1, 0.9)}, lambda x, y: False) == (0.0, [])
    assert cdr.bridge_value(touched, lambda x, y: True) == (0.0, [])


@pytest.mark.parametrize("k, budget, expected", [
    (10, 0.30, (7, 3)), (1, 0.30, (1, 0)), (4, 0.30, (2, 2)), (10, 0.0, (10, 0)), (3, 0.5, (1, 2)),
])
def test_split_budget(k, budget, expected):
    assert cdr.split_budget(k, budget) == expected


def nearest_anchors(order, anchors, i):
    found = []
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(order) and order[j] not in anchors:
            j += step
        if 0 <= j < len(order):
            found.append(order[j])
    return found


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 7).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                         .filter(lambda p: p[0] != p[1]), max_size=12))))
def test_assemble_order_puts_each_connector_next_to_an_anchor_it_bridges(case):
    n, pairs = case
    anchors = [f"a{i}" for i in range(n)]
    connectors = [(f"c{j}", (anchors[x], anchors[y])) for j, (x, y) in enumerate(pairs)]
    order = cdr.assemble_order(anchors, connectors)
    assert sorted(order) == sorted(anchors + [c for c, _ in connectors])
    assert order[0] == anchors[0]                      # the best anchor opens
    bridged = dict(connectors)
    for i, node in enumerate(order):
        if node in bridged:
            assert set(nearest_anchors(order, set(anchors), i)) & set(bridged[node]), order


def test_assemble_order_reads_a_chain_in_order():
    order = cdr.assemble_order(["A", "D"], [("C", ("A", "D")), ("B", ("A", "D"))],
                               distance=lambda c, a: {("B", "A"): 1, ("B", "D"): 2,
                                                      ("C", "A"): 2, ("C", "D"): 1}[c, a])
    assert order == ["A", "B", "C", "D"]


# -- through the store ----------------------------------------------------------------

# dims: 0 = the query's topic, 1..4 = sub-topics, 5 = covered material, 6.. = other.
TABLE = {
    "q": [1, 0, 0, 0, 0, 0, 0, 0],
    # a chain A1 - C1 - C2 - A2 (edge threshold 0.45; A1-A2 cosine 0.36, no edge)
    "A1": [0.6, 0.8, 0, 0, 0, 0, 0, 0],
    "C1": [0.1, 0.7, 0.7, 0, 0, 0, 0, 0],
    "C2": [0.1, 0, 0.7, 0.7, 0, 0, 0, 0],
    "A2": [0.6, 0, 0, 0.8, 0, 0, 0, 0],
    # for novelty: R1 is relevant and covered, R2 slightly less relevant and fresh
    "R1": [0.9, 0, 0, 0, 0, 0.436, 0, 0],
    "R2": [0.8, 0, 0, 0, 0, 0, 0.6, 0],
    "cov": [0, 0, 0, 0, 0, 1, 0, 0],
    "off": [0.2, 0, 0, 0, 0, 0, 0, 0.98],   # below the relevance gate
}


def table_embedder(model_id="table-v1"):
    def fn(texts):
        return [TABLE[t.split(":")[0]] for t in texts]
    return CallableEmbedder(fn, dim=8, model_id=model_id,
                            thresholds={"thread_join": 0.7, "topic_same": 0.5, "edge": 0.45})


class Clock:
    def __init__(self, t=1_700_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(tmp_path, clock):
    s = FactStore(tmp_path / "ckf", embedder=table_embedder(), min_relevance=0.5,
                  recluster_every=None, clock=clock)
    yield s
    s.close()


def add(store, *names, **kw):
    return {n: store.add_fact(f"{n}: fact text", **kw) for n in names}


def test_edges_are_exactly_the_designed_chain(store):
    ids = add(store, "A1", "C1", "C2", "A2")
    adj = store.live.neighbourhood("default", list(ids.values()), 1)
    name = {v: k for k, v in ids.items()}
    edges = {frozenset((name[a], name[b])) for a, row in adj.items() for b in row}
    assert edges == {frozenset(p) for p in [("A1", "C1"), ("C1", "C2"), ("C2", "A2")]}


def test_cdr_window_one_equals_importance_times_relevance(store):
    ids = add(store, "A1", "R1", "R2", "off")
    got = store.cdr("q", k=10)
    assert [r.fact_id for r in got] == [ids["R1"], ids["R2"], ids["A1"]]   # "off" is gated
    for r in got:
        assert r.score == pytest.approx(r.fact.importance * r.relevance, rel=1e-5)
        assert (r.novelty, r.recency, r.coverage) == (1.0, 1.0, 0.0)


def test_cdr_novelty_on_off_partial(store):
    ids = add(store, "R1", "R2")
    cov = ["cov"]
    off = store.cdr("q", coverage=cov, novelty="off")
    on = store.cdr("q", coverage=cov, novelty="on")
    part = store.cdr("q", coverage=cov, novelty="partial")
    assert [r.fact_id for r in off] == [ids["R1"], ids["R2"]]   # relevance order
    assert [r.fact_id for r in on] == [ids["R2"], ids["R1"]]    # the covered one drops
    by = {r.fact_id: r for r in on}
    c = by[ids["R1"]].coverage
    assert c == pytest.approx(0.436 / np.linalg.norm(TABLE["R1"]), rel=1e-4)
    assert by[ids["R1"]].novelty == pytest.approx(1 - c)
    assert by[ids["R2"]].novelty == pytest.approx(1.0)
    p = {r.fact_id: r for r in part}[ids["R1"]]
    assert p.novelty == pytest.approx(1 - 0.5 * c)
    assert {r.fact_id: r.novelty for r in off} == {ids["R1"]: 1.0, ids["R2"]: 1.0}


def test_cdr_coverage_entries_must_share_the_model(store):
    add(store, "R1")
    good = {"embedding": TABLE["cov"], "model_id": "table-v1", "depth_weight": 0.9}
    assert store.cdr("q", coverage=[good])[0].coverage > 0.4
    with pytest.raises(EmbeddingModelMismatchError, match="SPEC-024"):
        store.cdr("q", coverage=[{"embedding": TABLE["cov"], "model_id": "other"}])
    with pytest.raises(InvalidArgumentError, match="depth_weight"):
        store.cdr("q", coverage=[("cov", 1.5)])
    with pytest.raises(InvalidArgumentError, match="novelty"):
        store.cdr("q", novelty="maybe")


def test_cdr_recency_through_the_store(store, clock):
    fid = store.add_fact("R1: fact text", ttl="P10D")
    timeless = store.add_fact("R2: fact text", ttl="none")
    t0 = clock.t
    for days, expected in [(0, 1.0), (5, 1.0), (7.5, 0.65), (10, 0.30), (40, 0.30)]:
        got = {r.fact_id: r for r in store.cdr("q", now=t0 + days * DAY)}
        assert got[fid].recency == pytest.approx(expected, abs=1e-6)
        assert got[fid].score == pytest.approx(got[fid].fact.importance * got[fid].relevance
                                               * expected, rel=1e-5)
        assert got[timeless].recency == 1.0


def test_stale_status_takes_the_stale_floor(store):
    ids = add(store, "R1", "R2")
    store.set_status(ids["R1"], "STALE")
    got = {r.fact_id: r for r in store.cdr("q")}
    assert got[ids["R1"]].recency == 0.30
    assert got[ids["R2"]].recency == 1.0


def test_relevance_gate(store):
    ids = add(store, "R1", "off")
    assert [r.fact_id for r in store.cdr("q")] == [ids["R1"]]
    assert {r.fact_id for r in store.cdr("q", min_relevance=0.1)} == set(ids.values())


def test_cdgr_places_connectors_between_the_anchors_they_bridge(store):
    ids = add(store, "A1", "C1", "C2", "A2")
    name = {v: k for k, v in ids.items()}
    got = store.cdgr("q", k=4, hops=2)
    assert [name[r.fact_id] for r in got] in (["A1", "C1", "C2", "A2"], ["A2", "C2", "C1", "A1"])
    roles = {name[r.fact_id]: r.role for r in got}
    assert roles == {"A1": "anchor", "A2": "anchor", "C1": "connector", "C2": "connector"}
    c1 = next(r for r in got if name[r.fact_id] == "C1")
    assert c1.bridges == ((ids["A1"], ids["A2"]),) or c1.bridges == ((ids["A2"], ids["A1"]),)
    assert c1.hops == 1 and c1.bridge > 0
    floor = store.min_connector_relevance
    assert c1.score == pytest.approx(c1.bridge * c1.novelty * c1.recency * max(c1.relevance, floor))


def test_cdgr_hop_limit(store):
    ids = add(store, "A1", "C1", "C2", "A2")
    one = store.cdgr("q", k=4, hops=1)
    assert {r.fact_id for r in one} == {ids["A1"], ids["A2"]}        # no anchor pair within 1 hop
    assert all(r.role == "anchor" for r in one)
    assert store.cdgr("q", k=4, hops=0) == one
    with pytest.raises(InvalidArgumentError, match="hops"):
        store.cdgr("q", hops=4)


def test_cdgr_connector_budget_and_quarantine(store):
    ids = add(store, "A1", "C1", "C2", "A2")
    three = store.cdgr("q", k=3, hops=2)              # 2 anchors + 1 connector
    assert sum(r.role == "connector" for r in three) == 1
    store.set_status(ids["C2"], "QUARANTINED")        # the only way from C1 to A2
    got = store.cdgr("q", k=4, hops=2)
    assert {r.fact_id for r in got} == {ids["A1"], ids["A2"]}


def test_cdgr_without_edges_is_cdr(store):
    add(store, "R1", "R2", "A1")
    assert [r.fact_id for r in store.cdgr("q", k=3)] == \
        [r.fact_id for r in store.cdr("q", k=2)]
