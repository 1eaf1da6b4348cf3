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
