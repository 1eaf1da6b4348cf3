"""The CKF fact store (SPEC-009): ANN recall, persistence, lifecycle, isolation, ETag,
edges, communities, keys, chunking and ingestion."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxrelay.knowledge import fabric as ckf_mod
from ctxrelay.knowledge import inputs as inputs_mod
from ctxrelay.knowledge import vectors as vectors_mod
from ctxrelay.knowledge.fabric import (FactKeyExistsError, FactStore, IngestSourceError,
                          InvalidFactError, StatusTransitionError, UnknownFactError, chunk_text)
from ctxrelay.knowledge.graph import VectorIndex
from ctxrelay.storage.interfaces.facts import FactStorage, epoch_of
from ctxrelay.storage.common import factstate
from ctxrelay.storage.lmdb import factcodec
from ctxrelay.storage.lmdb.facts import LmdbFacts
from ctxrelay.text.embed import CallableEmbedder, get_embedder
from ctxrelay.errors import InvalidArgumentError, InvalidMetadataError, StoreError
from ctxrelay.text.tokens import count

ROOT = Path(__file__).resolve().parents[2]

TOPICS = {
    "kubernetes": "pod node cluster kubelet scheduler container deployment replica service ingress",
    "cooking": "recipe flour butter oven dough bake sugar whisk simmer garlic",
    "finance": "budget invoice revenue quarter forecast expense ledger audit payroll margin",
}


def topic_facts(per_topic=30, seed=7):
    """Deterministic texts in three vocabularies (so the hashing embedder clusters them)."""
    rng = np.random.default_rng(seed)
    out = []
    for topic, words in TOPICS.items():
        vocab = words.split()
        for i in range(per_topic):
            picked = rng.choice(vocab, size=6, replace=False)
            out.append((topic, f"Note {i} on {topic}: " + " ".join(picked) + "."))
    return out


def random_unit(n, dim, seed):
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def brute_top(data, labels, queries, k):
    sims = queries @ data.T
    top = np.argsort(-sims, axis=1)[:, :k]
    return [set(np.asarray(labels)[row]) for row in top]


def recall(found, truth):
    return sum(len(set(f) & t) for f, t in zip(found, truth)) / sum(len(t) for t in truth)


@pytest.fixture
def store(tmp_path):
    s = FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None)
    yield s
    s.close()


# -- hnswlib against brute force -------------------------------------------------------

def test_vector_index_recall_random_unit_vectors():
    data = random_unit(4000, 64, seed=1)
    queries = random_unit(200, 64, seed=2)
    index = VectorIndex(64, random_seed=100)
    index.add(np.arange(4000), data)
    labels, _ = index.search(queries, 10)
    assert recall([set(r) for r in labels.tolist()], brute_top(data, np.arange(4000), queries, 10)) >= 0.95


def test_vector_index_recall_after_deletions():
    data = random_unit(3000, 64, seed=3)
    queries = random_unit(100, 64, seed=4)
    index = VectorIndex(64, random_seed=100)
    index.add(np.arange(3000), data)
    gone = np.arange(0, 3000, 3)
    for label in gone:
        assert index.hide(label)
    assert index.visible == 2000
    keep = np.setdiff1d(np.arange(3000), gone)
    labels, _ = index.search(queries, 10)
    assert not set(labels.ravel()) & set(gone.tolist())
    assert recall([set(r) for r in labels.tolist()], brute_top(data[keep], keep, queries, 10)) >= 0.95


def test_store_recall_with_given_vectors(tmp_path):
    """Through the whole store (LMDB ids, per-namespace index), 64-dim unit vectors.

    (Uniform random vectors of 1024 dimensions are HNSW's worst case: all
    distances concentrate near 1 and recall at ef=100 drops below 0.8; real
    embeddings have far fewer effective dimensions.)"""
    emb = CallableEmbedder(lambda texts: np.ones((len(texts), 64)), dim=64, model_id="rand-64")
    data = random_unit(3000, 64, seed=5)
    with FactStore(tmp_path / "ckf", embedder=emb, recluster_every=None) as s:
        ids = s.add_facts([f"random fact {i}" for i in range(3000)], vectors=data, batch_size=1000)
        queries = random_unit(100, 64, seed=6)
        found = [[h.fact_id for h in s.search_ann(q, k=10)] for q in queries]
        assert recall(found, brute_top(data, ids, queries, 10)) >= 0.95


def test_store_recall_with_hashed_facts(store):
    texts = [t for _, t in topic_facts(per_topic=400, seed=11)]
    ids = store.add_facts(texts)
    vecs = store.storage.vectors("default", ids)
    queries = get_embedder("hashing").embed_batch(
        [f"{a} {b} {c}" for a, b, c in zip(*(v.split()[:3] for v in TOPICS.values()))]
        + [t for _, t in topic_facts(per_topic=20, seed=99)])
    found = [[h.fact_id for h in store.search_ann(q, k=10)] for q in queries]
    assert recall(found, brute_top(vecs, ids, queries, 10)) >= 0.95
    hit = store.search_ann(texts[17], k=1)[0]
    assert hit.fact_id == ids[17] and hit.score == pytest.approx(1.0, abs=1e-5)


# -- persistence --------------------------------------------------------------------------

def test_persistence_across_reopen(tmp_path):
    path = tmp_path / "ckf"
    with FactStore(path, embedder="hashing", recluster_every=None) as s:
        ids = s.add_facts([t for _, t in topic_facts(per_topic=10)])
        key_id = s.add_fact("The Q3 budget is 1.2 million dollars.", key="budget_q3",
                            importance=0.9, ttl="P90D", metadata={"owner": "finance"})
        s.set_status(ids[3], "QUARANTINED")
        before = {"etag": s.etag(), "ann": s.search_ann("oven dough bake", k=5),
                  "terms": s.search_terms("budget", k=5), "fact": s.fact(key_id),
                  "stats": s.stats()}
    assert os.path.exists(path / "hnsw" / "ns-1.bin")
    with FactStore.open(path) as s:              # embedder taken from the store
        assert s.embedder.model_id == "hashing-v1-1024"
        assert s.etag() == before["etag"]
        assert s.search_ann("oven dough bake", k=5) == before["ann"]
        assert s.search_terms("budget", k=5) == before["terms"]
        assert s.fact("budget_q3") == before["fact"]
        assert s.stats() == before["stats"]
        assert ids[3] not in {h.fact_id for h in s.search_ann(topic_facts(10)[3][1], k=5)}


CRASHER = """
import os, sys
sys.path.insert(0, {python!r})
from ctxrelay.knowledge.fabric import FactStore
s = FactStore({path!r}, embedder="hashing", recluster_every=None)
ids = s.add_facts(["first fact about kubelet and pods", "second fact about ovens and dough"])
s.flush()
late = s.add_fact("third fact written after the last snapshot: ledger audit")
s.delete(ids[0])
print(late, ids[0], flush=True)
os._exit(0)          # no close(): the index file misses the last writes
"""


def test_a_crash_loses_nothing_the_log_replays(tmp_path):
    path = str(tmp_path / "ckf")
    out = subprocess.run([sys.executable, "-c", CRASHER.format(python=str(ROOT / "python"),
                                                               path=path)],
                         capture_output=True, text=True, timeout=120, check=True)
    late, deleted = out.stdout.split()
    with FactStore(path) as s:
        assert s.search_ann("ledger audit third fact", k=1)[0].fact_id == late
        assert deleted not in {h.fact_id for h in s.search_ann("kubelet pods", k=3)}
        assert s.fact(deleted).status == "DELETED"


def test_unreadable_index_file_is_rebuilt(tmp_path):
    path = tmp_path / "ckf"
    with FactStore(path, embedder="hashing") as s:
        fid = s.add_fact("a fact about sourdough starters and rye flour")
    (path / "hnsw" / "ns-1.bin").write_bytes(b"not an index")
    with pytest.warns(RuntimeWarning, match="rebuilding"):
        with FactStore(path) as s:
            assert s.search_ann("sourdough rye", k=1)[0].fact_id == fid


def test_version_moves_with_writes_only_and_fixed_ef_search(store):
    v0 = store.version()
    fid = store.add_fact("A fact that moves the version.")
    v1 = store.version()
    store.fact(fid), store.search_ann("fact", k=1), store.etag()
    assert v1 > v0 and store.version() == v1
    store.set_status(fid, "STALE")
    assert store.version() > v1
    store.set_ef_search(40)
    assert store.live.index("default").index.ef_search == 40 and not store.live.auto_ef
    with pytest.raises(InvalidArgumentError, match="ef_search"):
        store.set_ef_search(0)


def test_a_second_instance_on_the_same_path_is_refused(store):
    with pytest.raises(StoreError, match="FactStore.open"):
        FactStore(store.path, embedder="hashing")
    assert FactStore.open(store.path) is store


def test_embedder_change_is_refused(tmp_path):
    path = tmp_path / "ckf"
    FactStore(path, embedder="hashing").close()
    from ctxrelay.text.embed import HashingEmbedder
    with pytest.raises(ckf_mod.EmbeddingModelMismatchError, match="hashing-v1-1024"):
        FactStore(path, embedder=HashingEmbedder(dim=256))


# -- lifecycle: deletes, quarantine, rebuild ---------------------------------------------------

def every_retrieval(s, query, namespace=None):
    found = {h.fact_id for h in s.search_ann(query, k=50, namespace=namespace)}
    found |= {h.fact_id for h in s.search_terms(query, k=50, namespace=namespace)}
    found |= {r.fact_id for r in s.facts(query, k=50, namespace=namespace)}
    found |= {r.fact_id for r in s.cdr(query, k=50, min_relevance=-1.0, namespace=namespace)}
    found |= {r.fact_id for r in s.cdgr(query, k=50, min_relevance=-1.0, namespace=namespace)}
    return found


def test_deleted_facts_are_never_returned_and_are_erased(store):
    facts = topic_facts(per_topic=20)
    ids = store.add_facts([t for _, t in facts])
    kid = store.add_fact("Kubernetes pod budget note kept under a key.", key="k8s_note")
    gone = ids[::4] + [kid]
    assert store.delete(gone) == len(gone)
    assert store.delete(gone) == 0                       # idempotent
    for topic, words in TOPICS.items():
        assert not every_retrieval(store, words) & set(gone)
    assert store.lookup_key("k8s_note") is None
    tomb = store.fact(ids[0])
    assert (tomb.status, tomb.content, tomb.content_hash, tomb.key) == ("DELETED", "", "", None)
    with pytest.raises(StatusTransitionError, match="erased"):
        store.set_status(ids[0], "ACTIVE")
    assert store.add_fact("A new fact under the freed key.", key="k8s_note")


def test_quarantined_facts_are_excluded_until_lifted(store):
    ids = store.add_facts([t for _, t in topic_facts(per_topic=10)])
    store.add_fact("Quarantined finance fact about the ledger.", key="ledger_fact")
    q = [ids[12], store.fact("ledger_fact").fact_id]
    store.set_status(q, "QUARANTINED")
    assert not every_retrieval(store, TOPICS["cooking"] + " " + TOPICS["finance"]) & set(q)
    assert store.lookup_key("ledger_fact") is None
    assert store.fact("ledger_fact").status == "QUARANTINED"     # inspection still works
    store.set_status(q, "ACTIVE")
    assert store.search_ann(topic_facts(10)[12][1], k=1)[0].fact_id == ids[12]
    assert store.lookup_key("ledger_fact").fact_id == q[1]


def test_rebuild_after_twenty_percent_changed(store):
    ids = store.add_facts([f"fact number {i} about item {i * 7}" for i in range(100)])
    assert store.stats().index_elements == 100
    store.delete(ids[:20])
    assert store.stats().index_elements == 100            # 20 % is not over 20 %
    store.delete(ids[20:21])
    st = store.stats()
    assert (st.index_elements, st.index_hidden) == (79, 0)   # rebuilt without the dead
    assert {h.fact_id for h in store.search_ann("fact number item", k=100)} == set(ids[21:])


def test_status_transitions(store):
    fid = store.add_fact("A fact whose status moves around.")
    assert store.set_status(fid, "STALE") == 1
    assert store.set_status(fid, "STALE") == 0
    store.set_status(fid, "QUARANTINED")
    store.set_status(fid, "ACTIVE")
    with pytest.raises(InvalidFactError, match="status must be one of"):
        store.set_status(fid, "ARCHIVED")
    assert store.fact(fid).status == "ACTIVE"


def test_expire_marks_ttl_expired_facts_stale(tmp_path):
    now = [1_700_000_000.0]
    with FactStore(tmp_path / "ckf", embedder="hashing", clock=lambda: now[0]) as s:
        short = s.add_fact("A news item about a release that ages fast.", source_type="news")
        forever = s.add_fact("A user fact that never expires.")
        assert s.fact(short).ttl == "P30D" and s.fact(forever).ttl is None
        now[0] += 29 * 86400
        assert s.expire() == 0
        now[0] += 2 * 86400
        assert s.expire() == 1
        assert (s.fact(short).status, s.fact(forever).status) == ("STALE", "ACTIVE")


# -- namespaces ------------------------------------------------------------------------------

def test_namespace_isolation(store):
    texts = [t for _, t in topic_facts(per_topic=10)]
    a = store.add_facts(texts, namespace="tenant-a")
    b = store.add_facts(texts, namespace="tenant-b")
    store.add_fact("Tenant A's secret budget figure.", key="budget", namespace="tenant-a")
    for topic, words in TOPICS.items():
        assert every_retrieval(store, words, namespace="tenant-a") <= set(a) | {
            store.lookup_key("budget", namespace="tenant-a").fact_id}
        assert every_retrieval(store, words, namespace="tenant-b") <= set(b)
    assert store.lookup_key("budget", namespace="tenant-b") is None
    with pytest.raises(UnknownFactError):
        store.fact(a[0], namespace="tenant-b")
    with pytest.raises(UnknownFactError):
        store.set_status(a[0], "STALE", namespace="tenant-b")
    assert store.search_ann("pod node", namespace="tenant-c") == []
    etag_b = store.etag(namespace="tenant-b")
    store.delete(a[:3], namespace="tenant-a")
    assert store.etag(namespace="tenant-b") == etag_b
    assert store.namespaces() == ["tenant-a", "tenant-b"]
    with pytest.raises(InvalidArgumentError, match="namespace"):
        store.search_ann("x", namespace=" padded ")


# -- ETag (SPEC-009 §6) ------------------------------------------------------------------------

def test_etag_changes_on_every_mutation_and_not_on_reads(store):
    seen = [store.etag()]

    def changed():
        tag = store.etag()
        assert tag not in seen
        seen.append(tag)

    def unchanged():
        assert store.etag() == seen[-1]

    ids = store.add_facts([t for _, t in topic_facts(per_topic=5)])
    changed()
    fid = store.add_fact("Budget note kept under a key.", key="budget")
    changed()
    for read in (lambda: store.fact(fid), lambda: store.lookup_key("budget"),
                 lambda: store.search_ann("pod", k=3), lambda: store.search_terms("pod"),
                 lambda: store.facts("oven"), lambda: store.cdr("oven", coverage=["bake"]),
                 lambda: store.cdgr("budget"), lambda: store.stats(),
                 lambda: store.communities(), lambda: store.record_access([fid, ids[0]])):
        read()
        unchanged()
    assert store.fact(fid).access_count == 1
    store.update_fact(fid, content="Budget note kept under a key, revised.")
    changed()
    store.update_fact(fid, importance=0.95)
    changed()
    store.update_fact(fid, metadata={"v": 2})
    changed()
    store.set_status(fid, "STALE")
    changed()
    store.set_status(fid, "ACTIVE")      # back to the same status: still a new state
    changed()
    store.set_status(fid, "ACTIVE")      # no change, no new ETag
    unchanged()
    store.recluster()
    changed()
    store.recluster()                    # the same partition and labels again
    unchanged()
    store.delete(ids[0])
    changed()
    with pytest.raises(FactKeyExistsError):
        store.add_fact("Another fact under a taken key.", key="budget")
    unchanged()                          # a failed write changes nothing


def test_etag_is_a_function_of_the_state(tmp_path):
    """The incremental digest equals the one recomputed from every fact."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        ids = s.add_facts([t for _, t in topic_facts(per_topic=5)])
        s.set_status(ids[1], "QUARANTINED")
        s.delete(ids[2])
        s.update_fact(ids[3], content="Rewritten content for fact three.")
        total = 0
        storage = s.storage
        nid = storage.namespace("default").id
        for f in storage.scan("default"):
            (seq,) = storage.locate("default", [f.fact_id]).tolist()
            raw = storage.read(lambda txn: txn.get(factcodec.fact_key(nid, seq),
                                                   db=storage.dbs[b"facts"]))
            modified = factcodec.decode_record(raw)[2]["modified_at"]
            total += factstate.digest_component(f.fact_id, f.content_hash, f.status, modified)
            assert abs(modified - epoch_of(f.modified_at)) < 1e-5
        info = storage.snapshot(lambda view: view.info("default"))
        assert int(info["digest"], 16) == total % (1 << 256)


# -- the similarity graph and communities ------------------------------------------------------------

def test_edges_respect_the_threshold_and_equal_the_cosine(store):
    ids = store.add_facts([t for _, t in topic_facts(per_topic=8)])
    vecs = dict(zip(ids, store.storage.vectors("default", ids)))
    adj = store.live.neighbourhood("default", ids, 1)
    threshold = get_embedder("hashing").thresholds["edge"]
    assert store.edge_threshold == threshold
    n_edges = 0
    for a, row in adj.items():
        for b, w in row.items():
            assert w >= threshold
            assert w == pytest.approx(float(vecs[a] @ vecs[b]), abs=1e-5)
            assert a in adj[b]                                  # undirected
            n_edges += 1
    sims = np.array([vecs[i] for i in ids]) @ np.array([vecs[i] for i in ids]).T
    expected = {(ids[i], ids[j]) for i in range(len(ids)) for j in range(len(ids))
                if i != j and sims[i, j] >= threshold}
    assert len(ids) <= store.knn + 4 and n_edges == len(expected)   # kNN covers every pair here
    assert {(a, b) for a, row in adj.items() for b in row} == expected
    assert store.stats().edges == n_edges // 2


def partition(s):
    return sorted(sorted(s.fact(f).content for f in c.fact_ids) for c in s.communities())


def test_leiden_is_seeded_and_labels_by_keywords(tmp_path):
    facts = topic_facts(per_topic=25)
    runs = []
    for name in ("one", "two"):
        with FactStore(tmp_path / name, embedder="hashing", recluster_every=None) as s:
            s.add_facts([t for _, t in facts])
            first = s.recluster()
            assert partition(s) == partition(s) and s.recluster() == first
            runs.append(partition(s))
            comms = s.communities()
            assert len(comms) >= 3 and all(c.size >= 3 for c in comms)
            for c in comms:
                topics = {next(tp for tp, t in facts if t == s.fact(f).content) for f in c.fact_ids}
                assert len(topics) == 1                       # a community is one topic
                (topic,) = topics
                assert set(c.keywords) & set(TOPICS[topic].split()), c
                assert c.label == " / ".join(c.keywords[:3])
                assert s.fact(c.fact_ids[0]).community_label == c.label
    assert runs[0] == runs[1]


def test_recluster_runs_after_every_n_adds(tmp_path):
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=30) as s:
        s.add_facts([t for _, t in topic_facts(per_topic=5)])       # 15: not yet
        assert s.communities() == [] and s.stats().pending_recluster == 15
        s.add_facts([t for _, t in topic_facts(per_topic=5, seed=8)])
        assert s.communities() and s.stats().pending_recluster == 0


# -- keys, input checks, failed writes ------------------------------------------------------------

def test_key_lookup(store):
    fid = store.add_fact("The Q3 budget is 1.2 million dollars.", key="budget_q3")
    assert store.lookup_key("budget_q3").fact_id == fid
    assert store.fact("budget_q3").fact_id == fid
    assert store.lookup_key("budget_q4") is None
    assert store.lookup_key("Budget_Q3") is None                  # exact match
    store.update_fact("budget_q3", content="The Q3 budget is 1.4 million dollars (revised).")
    got = store.lookup_key("budget_q3")
    assert (got.fact_id, got.content) == (fid, "The Q3 budget is 1.4 million dollars (revised).")
    assert [h.fact_id for h in store.search_terms("revised")] == [fid]
    assert store.search_terms("2") == []                    # the old content's terms are gone
    store.update_fact(fid, key="budget_2025_q3")
    assert store.lookup_key("budget_q3") is None
    assert store.lookup_key("budget_2025_q3").fact_id == fid


def test_duplicate_keys_are_refused_and_nothing_is_written(store):
    store.add_fact("First fact under the key.", key="k")
    before = (store.etag(), store.stats())
    with pytest.raises(FactKeyExistsError, match="update_fact"):
        store.add_facts(["a fresh fact", {"content": "clash", "key": "k"}])
    with pytest.raises(FactKeyExistsError, match="two facts"):
        store.add_facts([{"content": "x one", "key": "j"}, {"content": "x two", "key": "j"}])
    assert (store.etag(), store.stats()) == before
    assert store.search_terms("fresh") == []


@pytest.mark.parametrize("call, error, match", [
    (lambda s: s.add_fact(""), InvalidFactError, "empty"),
    (lambda s: s.add_fact(42), InvalidFactError, "must be a str"),
    (lambda s: s.add_fact("x", importance=1.5), InvalidFactError, r"\[0, 1\]"),
    (lambda s: s.add_fact("x", ttl="ninety days"), InvalidArgumentError, "ISO 8601"),
    (lambda s: s.add_fact("x", key=" padded"), InvalidFactError, "budget_q3"),
    (lambda s: s.add_fact("x", key="123e4567-e89b-12d3-a456-426614174000"), InvalidFactError, "UUID"),
    (lambda s: s.add_fact("x", source_type="blog"), InvalidFactError, "source_type"),
    (lambda s: s.add_fact("x", metadata={"f": object()}), InvalidMetadataError, "JSON"),
    (lambda s: s.add_fact("x", namespace=""), InvalidArgumentError, "namespace"),
    (lambda s: s.add_facts([{"text": "x"}]), InvalidFactError, "content"),
    (lambda s: s.add_facts(["x"], vectors=np.zeros((2, 3))), InvalidArgumentError, "vectors"),
    (lambda s: s.search_ann("x", k=-1), InvalidArgumentError, "k must be"),
    (lambda s: s.search_ann(np.zeros(3)), InvalidArgumentError, "dimension 1024"),
    (lambda s: s.fact("no_such_key"), UnknownFactError, "no fact with key"),
    (lambda s: s.fact("123e4567-e89b-12d3-a456-426614174000"), UnknownFactError, "no fact"),
    (lambda s: s.cdgr("x", connector_budget=0.9), InvalidArgumentError, "connector_budget"),
    (lambda s: s.ingest(Path("/nonexistent/dir")), IngestSourceError, "does not exist"),
    (lambda s: s.ingest([3]), InvalidArgumentError, "ingest takes"),
])
def test_bad_input_raises_a_specific_error_and_writes_nothing(store, call, error, match):
    before = (store.etag(), store.stats())
    with pytest.raises(error, match=match):
        call(store)
    assert (store.etag(), store.stats()) == before


def test_a_failed_transaction_leaves_index_and_store_unchanged(store, monkeypatch):
    keep = store.add_fact("A fact that was there before the failure.")

    def durable():      # the in-memory graph keeps rolled-back labels, hidden
        d = store.stats().to_dict()
        del d["index_elements"], d["index_hidden"]
        return store.etag(), d
    before = durable()

    def boom(*a, **kw):
        raise OSError("disk on fire")
    monkeypatch.setattr(store.storage.terms, "add", boom)
    with pytest.raises(OSError, match="disk on fire"):
        store.add_facts(["doomed fact about ovens", "another doomed fact about dough"])
    assert durable() == before
    assert store.stats().index_hidden == 2
    assert {h.fact_id for h in store.search_ann("doomed ovens dough", k=10)} == {keep}
    monkeypatch.undo()
    new = store.add_fact("doomed fact about ovens, written for real this time")
    assert store.search_ann("doomed fact about ovens, written for real this time",
                            k=1)[0].fact_id == new
    assert len(store.search_ann("anything", k=10)) == 2


def test_results_convert_to_plain_types(store):
    fid = store.add_fact("A fact with metadata for janus.", key="plain",
                         metadata={"tags": ["a", "b"], "n": 1})
    store.add_facts([t for _, t in topic_facts(per_topic=5)])
    store.recluster()
    payload = {"fact": store.fact(fid).to_dict(),
               "scored": [r.to_dict() for r in store.cdgr("oven dough bake", k=5)],
               "hits": [h.to_dict() for h in store.search_terms("janus")],
               "communities": [c.to_dict() for c in store.communities()],
               "stats": store.stats().to_dict(),
               "ingest": store.ingest("Some text document with enough words in it to be a fact.").to_dict()}
    assert json.loads(json.dumps(payload)) == payload


# -- chunking and ingestion (SPEC-009 §4) -------------------------------------------------------

def test_chunking_paragraphs_headings_pages_and_short_merges():
    doc = ("# Networking\n\nKubernetes gives every pod its own IP address in a flat network.\n\n"
           "Short line.\n\nServices use label selectors to find the pods behind them today.\n\n"
           "## Storage\n\nTiny.\n\fThe second page talks about persistent volumes and claims.")
    chunks = chunk_text(doc)
    assert [c.text for c in chunks] == [
        "Kubernetes gives every pod its own IP address in a flat network.",
        "Short line.\n\nServices use label selectors to find the pods behind them today.",
        "Tiny.",
        "The second page talks about persistent volumes and claims."]
    assert [(c.section, c.page, c.paragraph) for c in chunks] == [
        ("Networking", 1, 1), ("Networking", 1, 2), ("Storage", 1, 4), ("Storage", 2, 5)]
    assert chunks[3].location == "page 2, paragraph 5"


def test_chunking_splits_long_paragraphs_at_sentences_with_overlap():
    sentences = [f"Sentence {i} explains detail {i} of the design." for i in range(300)]
    chunks = chunk_text(" ".join(sentences) + "\n\nA closing paragraph with enough words here.")
    parts = [c for c in chunks if c.paragraph == 1]
    assert len(parts) >= 3 and [c.part for c in parts] == list(range(len(parts)))
    for c in parts:
        assert count(c.text).n <= 512
    for prev, nxt in zip(parts, parts[1:]):
        shared = [s for s in sentences if s in prev.text and s in nxt.text]
        assert shared and nxt.text.startswith(shared[0])            # whole sentences
        ratio = count(" ".join(shared)).n / count(prev.text).n
        assert 0.05 <= ratio <= 0.10
    assert chunks[-1].text == "A closing paragraph with enough words here."
    joined = " ".join(c.text for c in parts)
    assert all(s in joined for s in sentences)                        # nothing lost


def test_chunking_a_giant_sentence_splits_at_words():
    chunks = chunk_text("word " * 3000)
    assert len(chunks) >= 6 and all(count(c.text).n <= 512 for c in chunks)


def test_ingest_directory_idempotent_and_source_updates(tmp_path, store, capsys):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / ".hidden").mkdir()
    (docs / "a.md").write_text("# A\n\nThe kubelet runs on every node and starts the pods.\n\n"
                               "The scheduler assigns pods to nodes with free resources.\n")
    (docs / "sub" / "b.txt").write_text("Ovens should be preheated before the dough goes in.\n")
    (docs / "c.pdf").write_text("not ingested")
    (docs / ".hidden" / "d.md").write_text("not ingested either, it is hidden")
    report = store.ingest(docs, source_type="internal")
    assert (report.documents, report.facts_added, report.unchanged) == (2, 3, 0)
    assert capsys.readouterr().err == ""                       # no progress bar off a TTY
    fact = store.fact(report.fact_ids[0])
    assert (fact.importance, fact.source_type, fact.metadata["section"]) == (0.70, "internal", "A")
    assert fact.source_location == "paragraph 1"
    src = store.source(fact.source_id)
    assert src.uri == (docs / "a.md").resolve().as_uri() and src.fact_count == 2
    again = store.ingest(docs)
    assert (again.facts_added, again.unchanged) == (0, 2)
    (docs / "a.md").write_text("# A\n\nThe kubelet runs on every node; it now also reports "
                               "node pressure to the control plane.\n")
    third = store.ingest({"path": docs})
    assert (third.facts_added, third.updated, third.stale_marked) == (1, 1, 2)
    assert {store.fact(f).status for f in report.fact_ids[:2]} == {"STALE"}
    assert store.source(fact.source_id).status == "UPDATED"
    assert store.search_ann("kubelet node pressure control plane", k=1)[0].fact_id == \
        third.fact_ids[0]


def test_ingest_texts(store):
    report = store.ingest(["First document text, long enough to make one fact of it.",
                           {"text": "Second document, with a title, also long enough here.",
                            "title": "second"}])
    assert report.facts_added == 2 and len(set(report.sources)) == 2
    assert store.ingest("First document text, long enough to make one fact of it.").unchanged == 1


def test_progress_bar_only_on_a_tty(store, monkeypatch, capsys):
    monkeypatch.setattr(inputs_mod, "is_tty", lambda: True)
    store.add_facts([f"fact {i}" for i in range(5)])
    assert "adding facts" in capsys.readouterr().err
    store.add_facts([f"fact {i}" for i in range(5)], progress=False)
    assert capsys.readouterr().err == ""


def test_the_lmdb_storage_implements_the_protocol_and_can_be_injected(tmp_path):
    storage = LmdbFacts(tmp_path / "ckf" / "db", model_id="hashing-v1-1024", dim=1024)
    assert isinstance(storage, FactStorage) and storage.name == "crp-native"
    with pytest.raises(ckf_mod.EmbeddingModelMismatchError, match="storage holds"):
        FactStore(tmp_path / "other", embedder=CallableEmbedder(
            lambda t: np.ones((len(t), 8)), dim=8, model_id="x"), storage=storage)
    with FactStore(tmp_path / "ckf", embedder="hashing", storage=storage) as s:
        fid = s.add_fact("Stored through an injected storage object.", key="injected")
        assert s.lookup_key("injected").fact_id == fid
        assert s.stats().backend == "crp-native"
    assert storage.closed                       # the store closes what it was given


# -- graph walks: the in-memory adjacency against the stored edges ----------------------------

from collections import Counter  # noqa: E402

from ctxrelay.knowledge import cdr as cdr_mod  # noqa: E402
from ctxrelay.knowledge.communities import similarity_graph  # noqa: E402
from ctxrelay.knowledge.graph import Adjacency, anchor_reach  # noqa: E402


def stored_adjacency(s, ns="default"):
    """Adjacency of the retrievable facts read straight from the storage."""
    ids, edges, weights = s.storage.snapshot(lambda view: similarity_graph(view, ns))
    adj = {i: {} for i in ids}
    for (a, b), w in zip(edges, weights):
        adj[ids[a]][ids[b]] = w
        adj[ids[b]][ids[a]] = w
    return adj


def oracle_reach(adj, anchors, hops):
    """anchor_reach computed per edge in Python with cdr.reach_layers."""
    layers = [cdr_mod.reach_layers(a, lambda n: adj.get(n, {}), hops) for a in anchors]
    out = {}
    for j, (h, p) in enumerate(layers):
        for node in h:
            if node not in anchors:
                out.setdefault(node, {})[j] = (h[node], p[node])
    return {n: r for n, r in out.items() if len(r) >= 2}


def generic_anchor_reach(live, ns, anchor_ids, hops):
    """The walk done the plain way: the neighbourhood map, then cdr.reach_layers per
    anchor in Python (what a back end without the numpy walk would compute)."""
    adj = live.neighbourhood(ns, anchor_ids, hops)
    empty = {}
    layers = [cdr_mod.reach_layers(a, lambda n: adj.get(n, empty), hops) for a in anchor_ids]
    anchors = set(anchor_ids)
    count = Counter()
    for hops_of, _ in layers:
        count.update(n for n in hops_of if n not in anchors)
    nodes = [n for n, c in count.items() if c >= 2]
    hop = np.zeros((len(nodes), len(anchor_ids)), dtype=np.int64)
    product = np.zeros((len(nodes), len(anchor_ids)))
    for j, (hops_of, prod) in enumerate(layers):
        for i, n in enumerate(nodes):
            if n in hops_of:
                hop[i, j], product[i, j] = hops_of[n], prod[n]
    linked = np.array([[b in adj.get(a, empty) for b in anchor_ids] for a in anchor_ids],
                      dtype=bool).reshape(len(anchor_ids), len(anchor_ids))
    return nodes, hop, product, linked


def native_reach(s, anchors, hops, generic=False):
    fn = (lambda *a: generic_anchor_reach(s.live, *a)) if generic else s.live.anchor_reach
    nodes, hop, prod, linked = fn("default", anchors, hops)
    got = {n: {j: (int(hop[i, j]), float(prod[i, j])) for j in range(len(anchors)) if hop[i, j]}
           for i, n in enumerate(nodes)}
    return got, linked


def check_walks(s, anchors_list):
    adj = stored_adjacency(s)
    for anchors in anchors_list:
        anchors = [a for a in anchors if a in adj]
        for hops in (1, 2, 3):
            got, linked = native_reach(s, anchors, hops)
            assert got == oracle_reach(adj, anchors, hops)         # exact floats
            assert linked.tolist() == [[b in adj[a] for b in anchors] for a in anchors]
        nb = s.live.neighbourhood("default", anchors, 2)
        for a in anchors:
            assert nb[a] == adj[a]


def test_walk_adjacency_follows_every_kind_of_write(tmp_path):
    """Adds, quarantine, lift, delete, re-embedding, a snapshot (log pruned) and a
    rebuild (20 % rule): after each, walks equal the stored edges walked in Python."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        texts = [t for _, t in topic_facts(per_topic=40, seed=3)]
        ids = s.add_facts(texts[:80])
        anchors = [ids[0:6], ids[40:44] + ids[70:72]]
        check_walks(s, anchors)                                   # first walk builds
        ids += s.add_facts(texts[80:])
        check_walks(s, anchors + [ids[90:96]])
        s.set_status(ids[1:4] + ids[95:97], "QUARANTINED")
        check_walks(s, anchors + [ids[90:96]])
        s.set_status(ids[2:4], "ACTIVE")
        s.delete(ids[41:43])
        s.update_fact(ids[5], content="Note 5 on finance: ledger audit payroll margin budget.")
        check_walks(s, anchors + [ids[90:96]])
        s.flush()                                                 # prunes the log
        s.add_facts([t.replace("Note", "Memo") for t in texts[:5]])
        check_walks(s, anchors)
        s.delete(ids[20:50])                                      # > 20 %: index rebuilt
        assert s.stats().index_hidden == 0
        check_walks(s, [ids[0:6], ids[60:66]])


def test_walks_equal_the_generic_walk_and_cdgr_is_unchanged(tmp_path):
    """The numpy walk and the plain one (neighbourhood + Python reach_layers) give
    the same reach, so CDGR returns the same facts and scores."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        s.add_facts([t for _, t in topic_facts(per_topic=40, seed=5)])
        queries = [" ".join(v.split()[i:i + 3]) for v in TOPICS.values() for i in (0, 4)]
        native = [s.cdgr(q, k=12, hops=h, min_relevance=0.0) for q in queries for h in (2, 3)]
        for r in native[0][:3]:
            nodes_n = native_reach(s, [x.fact_id for x in native[0] if x.role == "anchor"], 2)
            nodes_g = native_reach(s, [x.fact_id for x in native[0] if x.role == "anchor"], 2,
                                   generic=True)
            assert nodes_n[0] == nodes_g[0] and (nodes_n[1] == nodes_g[1]).all()
        s.live.anchor_reach = lambda *a: generic_anchor_reach(s.live, *a)
        generic = [s.cdgr(q, k=12, hops=h, min_relevance=0.0) for q in queries for h in (2, 3)]
    assert sum(r.role == "connector" for res in native for r in res) >= 6
    assert [[r.to_dict() for r in res] for res in native] == \
        [[r.to_dict() for r in res] for res in generic]


def test_connector_bridge_values_follow_spec_025(tmp_path):
    """Each connector's bridge value and pairs equal cdr.bridge_value on the reach
    computed from the stored edges."""
    with FactStore(tmp_path / "ckf", embedder="hashing", recluster_every=None) as s:
        s.add_facts([t for _, t in topic_facts(per_topic=40, seed=9)])
        adj = stored_adjacency(s)
        found = 0
        for q in ("pod node cluster budget", "recipe flour ledger", "oven dough kubelet"):
            res = s.cdgr(q, k=10, hops=2, min_relevance=0.0)
            anchors = [r.fact_id for r in sorted(       # rank order, not reading order
                (r for r in res if r.role == "anchor"),
                key=lambda r: (-r.score, -r.relevance, r.fact_id))]
            layers = {a: cdr_mod.reach_from(a, lambda n: adj.get(n, {}), 2) for a in anchors}
            for r in res:
                if r.role != "connector":
                    continue
                found += 1
                touched = {a: layers[a][r.fact_id] for a in anchors if r.fact_id in layers[a]}
                value, pairs = cdr_mod.bridge_value(
                    touched, lambda x, y: y in adj[x], ordered=True)
                assert (r.bridge, list(r.bridges)) == (value, pairs)
                assert r.hops == min(t.hops for t in touched.values())
        assert found >= 3


def test_adjacency_overlay_and_compaction_match_a_dict_model():
    rng = np.random.default_rng(0)
    model = {}
    for a in range(300):
        for b in rng.choice(300, size=5, replace=False):
            if a != b:
                w = float(np.float32(rng.random()))
                model.setdefault(a, {})[int(b)] = w
                model.setdefault(int(b), {})[a] = w
    src = [a for a in model for _ in model[a]]
    dst = [b for a in model for b in model[a]]
    adj = Adjacency.from_edges(src, dst, [model[a][b] for a, b in zip(src, dst)])

    def same():
        for a in range(-1, 305):
            nbrs, w = adj.row(a)
            assert dict(zip(nbrs.tolist(), w.tolist())) == model.get(a, {})
        frontier = np.array([3, 3, 7, 299, 1000], dtype=np.int64)
        pos, nbrs, w = adj.gather(frontier)
        got = sorted(zip(pos.tolist(), nbrs.tolist(), w.tolist()))
        want = sorted((i, b, x) for i, a in enumerate(frontier.tolist())
                      for b, x in model.get(a, {}).items())
        assert got == want

    same()
    for label in (3, 7, 400):
        model[label] = {1: 0.5, 2: 0.25}
    model[299] = {}
    adj.set_rows({label: (list(model[label]), list(model[label].values()))
                  for label in (3, 7, 400, 299)})
    same()
    adj.compact()
    same()
    hop_m = anchor_reach(adj, [1, 2], 1)[1]
    assert hop_m.shape[1] == 2 and (hop_m == 1).all()             # 3, 7, 400 touch both


# -- ef_search tuned per index ------------------------------------------------------------------

def clustered_unit(n, dim, centres, seed, spread=0.25, centre_seed=0):
    """Unit vectors around ``centres`` fixed centres (the same for every ``seed``)."""
    rng = np.random.default_rng(seed)
    c = random_unit(centres, dim, centre_seed + 1)
    v = c[rng.integers(0, centres, n)] + spread * rng.standard_normal((n, dim)) / np.sqrt(dim)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def test_tuned_ef_keeps_recall_and_stays_at_the_ceiling_for_uniform_vectors():
    uniform = VectorIndex(64, random_seed=100)
    uniform.add(np.arange(4000), random_unit(4000, 64, seed=1))
    assert uniform.tune_ef(100) == 100          # at ef 64 its recall is ~0.94: no saving
    data = clustered_unit(4000, 64, centres=40, seed=3)
    index = VectorIndex(64, random_seed=100)
    index.add(np.arange(4000), data)
    ef = index.tune_ef(100)
    assert ef < 100 and index.ef_search == 100            # tuning leaves the index as it was
    index.set_ef(ef)
    queries = clustered_unit(200, 64, centres=40, seed=3 + 17)     # the data's distribution
    labels, _ = index.search(queries, 10)
    assert recall([set(r) for r in labels.tolist()],
                  brute_top(data, np.arange(4000), queries, 10)) >= 0.95


def test_store_tunes_ef_at_a_snapshot_and_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setattr(vectors_mod, "AUTO_EF_MIN", 1000)
    emb = CallableEmbedder(lambda texts: np.ones((len(texts), 64)), dim=64, model_id="rand-64")
    data = clustered_unit(3000, 64, centres=30, seed=8)
    path = tmp_path / "ckf"
    with FactStore(path, embedder=emb, recluster_every=None, knn=0) as s:
        ids = s.add_facts([f"fact {i}" for i in range(500)], vectors=data[:500])
        assert s.live.ann.get("default").index.ef_search == 100     # too small to tune
        ids += s.add_facts([f"fact {i}" for i in range(500, 3000)], vectors=data[500:],
                           batch_size=2500)     # 2,500 index operations: a snapshot
        tuned = s.live.ann.get("default").index.ef_search
        assert tuned < 100
        queries = clustered_unit(100, 64, centres=30, seed=8 + 17)
        found = [[h.fact_id for h in s.search_ann(q, k=10)] for q in queries]
        assert recall(found, brute_top(data, ids, queries, 10)) >= 0.95
    with FactStore(path, embedder=emb) as s:                        # persisted with the index
        s.search_ann(queries[0], k=1)
        assert s.live.ann.get("default").index.ef_search == tuned
    with FactStore(path, embedder=emb, auto_ef=False) as s:
        s.search_ann(queries[0], k=1)
        assert s.live.ann.get("default").index.ef_search == 100
