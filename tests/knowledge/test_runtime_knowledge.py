"""Knowledge (Tier P) through the facade: Python -> Prolog -> the CKF."""
from __future__ import annotations

import pytest

from ctxrelay import Runtime


@pytest.fixture
def rt(store_dir):
    with Runtime(store_dir) as runtime:
        yield runtime


def test_add_fact_lookup_by_key_and_search(rt):
    fid = rt.add_fact("The Q3 budget figure is $1,200 per month for etcd hosting.",
                      key="budget_q3", source="chat", importance=0.8)
    rt.add_fact("Restic keeps 48 hourly, 30 daily and 12 weekly snapshots.")
    rt.add_fact("The Prometheus alert etcdHighFsyncDurations fired on etcd-2.")
    assert rt.fact("budget_q3")["fact_id"] == fid
    assert rt.fact(fid)["content"].startswith("The Q3 budget")
    hits = rt.facts("how many daily restic snapshots do we keep?", k=2)
    assert hits and "Restic" in hits[0]["content"]


def test_a_ttl_is_a_duration_or_seconds_as_the_ckf_takes_it(rt):
    # The facade refused seconds ("expected a str") though FactStore.add_fact and its
    # own error message take them.
    from ctxrelay.errors import InvalidArgumentError
    by_seconds = rt.add_fact("The staging certificate is renewed by hand.", ttl=3600)
    by_duration = rt.add_fact("The on-call rota changes every Monday.", ttl="PT1H")
    assert rt.fact(by_seconds)["ttl_seconds"] == rt.fact(by_duration)["ttl_seconds"] == 3600
    with pytest.raises(InvalidArgumentError, match="ttl"):
        rt.add_fact("A fact with a bad ttl.", ttl=-5)
    with pytest.raises(InvalidArgumentError, match="ttl"):
        rt.add_fact("A fact with a bool ttl.", ttl=True)


def test_namespaces_are_isolated(rt):
    rt.add_fact("tenant A secret: the launch code is 1234", namespace="a")
    assert all("1234" not in h["content"] for h in rt.facts("launch code", namespace="b"))


def test_ingest_texts_and_files(rt, tmp_path):
    doc = tmp_path / "runbook.md"
    doc.write_text("# Defrag\n\nDefragment one member at a time.\n\n"
                   "Move leadership off a member before defragmenting it.\n", encoding="utf-8")
    report = rt.ingest([doc, "Compaction runs every hour in the apiserver."])
    assert report["facts_added"] >= 2          # the file's paragraphs + the text
    top = rt.facts("leadership before defrag", k=1)[0]
    assert "leadership" in top["content"]


def test_unknown_fact_is_a_clear_error(rt):
    with pytest.raises(Exception) as info:
        rt.fact("nope")
    assert "nope" in str(info.value)


def test_ingest_refuses_a_missing_path_and_bad_input(tmp_path):
    from ctxrelay import Runtime
    from ctxrelay.errors import InvalidArgumentError
    with Runtime(tmp_path / "s") as rt:
        for bad in (["/no/such.txt"], "/no/such/dir/", None, 42, [b"bytes"]):
            with pytest.raises(InvalidArgumentError):
                rt.ingest(bad)
        doc = tmp_path / "notes.md"
        doc.write_text("The etcd quota is 8 GiB.\n\nDefrag runs weekly.\n")
        report = rt.ingest([str(doc), "a fact given as text"], namespace="ing")
        assert report
        found = " ".join(f["content"] for f in rt.facts("etcd quota", namespace="ing", k=5))
        assert "8 GiB" in found and "/no/such" not in found


def test_a_packs_utility_is_the_sum_of_its_units(tmp_path):
    from ctxrelay import Runtime
    with Runtime(tmp_path / "s") as rt:
        rt.create_session("u")
        for i in range(12):
            rt.append("u", "user" if i % 2 == 0 else "assistant", f"turn {i} about topic {i % 3}")
        r = rt.assemble("u", "topic 2?", embedder="hashing")
        assert isinstance(r.utility, float)
        assert r.utility == pytest.approx(sum(u.utility for u in r.pack), abs=1e-6)
        assert r.status["optimality"] == "optimal" and r.status["gap"] == 0
