"""Rebuilding a knowledge store's ANN index (``ctxrelay facts reindex``,
``Runtime.reindex_facts``, ``knowledge_reindex/3``).

An index's graph is a function of its history: one grown write by write, with
facts re-embedded in place, is not the graph a copy of the store fills from the
stored vectors, and the narrowest raw searches of the two name different
facts.  After a rebuild both are filled the same way and answer alike.
"""
from __future__ import annotations

import janus_swi as janus
import numpy as np
import pytest

from ctxrelay import Runtime
from ctxrelay.apps import cli
from ctxrelay.knowledge.fabric import FactStore
from ctxrelay.storage import close_all, open_stores
from ctxrelay.storage.migrate import migrate

SEED = 23
CLUSTERS, PER_CLUSTER, SUBSPACE = 20, 40, 10


def _grow(directory) -> np.ndarray:
    """Facts in tight clusters added in batches, one in six then re-embedded in place
    (fewer than the 20 % that would rebuild the index by itself); returns queries."""
    rng = np.random.default_rng(SEED)
    clock = iter(1_700_000_000.0 + 0.5 * i for i in range(100_000))
    with FactStore(directory / "ckf", embedder="hashing", clock=lambda: next(clock),
                   recluster_every=None) as fs:
        basis = rng.standard_normal((SUBSPACE, fs.storage.dim))
        centres = rng.standard_normal((CLUSTERS, SUBSPACE))
        vectors = np.vstack([c + 0.03 * rng.standard_normal((PER_CLUSTER, SUBSPACE))
                             for c in centres]) @ basis
        ids = fs.add_facts([f"fact {i} of cluster {i // PER_CLUSTER}"
                            for i in range(len(vectors))],
                           vectors=vectors.astype(np.float32), batch_size=200)
        for fid in ids[::6]:
            fs.update_fact(fid, content=f"reworded fact {fid[:8]} about the etcd quota")
        queries = np.vstack([centres[i % CLUSTERS] + 0.05 * rng.standard_normal(SUBSPACE)
                             for i in range(80)]) @ basis
    return queries.astype(np.float32)


def _raw(fs: FactStore, queries: np.ndarray) -> list[list[str]]:
    """The index's own answer at ef 10 (no widening, no reordering), as fact ids."""
    idx = fs.live.index("default").index
    labels, _ = idx.search(queries, 10, ef=10)
    return [fs.storage.snapshot(lambda v: v.ids_at("default", row.tolist()))
            for row in labels]


def test_reindex_makes_the_index_the_graph_a_copy_fills(tmp_path, capsys, monkeypatch):
    source, copy = tmp_path / "source", tmp_path / "copy"
    queries = _grow(source)
    migrate(str(source), str(copy))
    close_all()
    with open_stores(str(source)) as a, open_stores(str(copy)) as b:
        before = _raw(a.facts, queries), _raw(b.facts, queries)
    close_all()
    assert before[0] != before[1]        # two histories, two graphs

    monkeypatch.delenv(cli.STORE_ENV, raising=False)
    capsys.readouterr()
    assert cli.main(["--store", str(source), "facts", "reindex"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rebuilt the ANN index of default: ")
    close_all()
    with open_stores(str(source)) as a:   # the snapshot written by the rebuild, reopened
        after = _raw(a.facts, queries)
    assert after == before[1]


def test_reindex_from_python_and_prolog_report_the_same(tmp_path):
    store = tmp_path / "store"
    with Runtime(store) as rt:
        assert rt.reindex_facts() == {"namespaces": [], "vectors": 0,
                                      "seconds": pytest.approx(0, abs=1)}
        for i in range(30):
            rt.add_fact(f"fact {i}: the etcd quota is {i} GiB", namespace="ops")
        rt.add_fact("restic backups run nightly", namespace="backup")
        report = rt.reindex_facts(namespace="ops")
        assert report["namespaces"] == ["ops"] and report["vectors"] == 30
        every = rt.reindex_facts()
        assert sorted(every["namespaces"]) == ["backup", "ops"] and every["vectors"] == 31
        assert rt.facts("etcd quota 7 GiB", k=1, namespace="ops")[0]["content"] \
            == "fact 7: the etcd quota is 7 GiB"
        from ctxrelay.errors import InvalidArgumentError
        with pytest.raises(InvalidArgumentError, match="no namespace 'nope'.*'ops'"):
            rt.reindex_facts(namespace="nope")
        st = rt._store
        answer = janus.query_once("ctxrelay:knowledge_reindex(St, R, [namespace(backup)])",
                                  {"St": st})
        assert answer["R"]["namespaces"] == ["backup"]
        with pytest.raises(janus.PrologError, match="invalid_argument"):
            janus.query_once("ctxrelay:knowledge_reindex(St, _, [namespace(nope)])",
                             {"St": st})
        with pytest.raises(janus.PrologError, match="does not exist"):
            janus.query_once("ctxrelay:knowledge_reindex(St, _, [depth(2)])", {"St": st})
