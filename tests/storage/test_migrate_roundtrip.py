"""``migrate`` loses nothing: LMDB -> PostgreSQL -> LMDB, every part compared.

A store with every part filled (sessions with idempotency keys, an archived
and an empty one; facts of three namespaces with vectors; warm artifacts in
several versions with keys; scratch entries with text and binary blobs,
pinned, referenced, with and without retention; a derived turn log with a
hand-set thread state and references) goes to PostgreSQL and back to a
directory; every turn, key, fact, vector, artifact, scratch entry and blob,
and the turn log, read through the Protocols, is the same in all three
stores, the reports' per-part counts and checksums agree, and the copies
behave the same (keyed retries, eviction)."""
from __future__ import annotations

import hashlib

import pytest
from ctxrelay.errors import SessionExistsError
from ctxrelay.knowledge.fabric import FactStore
from ctxrelay.storage import close_all, open_stores
from ctxrelay.storage.factcopy import fingerprint, open_raw_facts
from ctxrelay.storage.migrate import migrate, session_checksum
from ctxrelay.storage.partcopy import scratch_rows, warm_rows
from ctxrelay.text.embed import get_embedder

T0 = 1_700_000_000.0


@pytest.fixture
def pg(pg_schema):
    return pg_schema[0]


def _fill(directory) -> dict:
    """Every part of a store; returns the ids the checks below need."""
    clock = iter(T0 + 0.37 * i for i in range(10_000))
    with FactStore(directory / "ckf", embedder="hashing", clock=lambda: next(clock),
                   recluster_every=None) as fs:
        for i in range(12):
            fs.add_fact(f"etcd quota note {i} about compaction and defrag {i % 3}",
                        key=f"f{i}" if i % 2 else None, metadata={"n": i})
        fs.add_fact("a fact of another tenant", namespace="tenant-b", key="b1")
        fs.recluster()
    with open_stores(str(directory)) as stores:
        t = stores.transcript
        t.create_session("ops", metadata={"team": "sre"})
        chat = [("user", "How do I rotate the etcd client certificates?"),
                ("assistant", "Rotate the etcd certificates one member at a time."),
                ("user", "What is the restic retention for the backups?"),
                ("assistant", "Restic keeps 48 hourly and 30 daily snapshots."),
                ("user", "Back to the etcd certificates: which CA signs them?"),
                ("assistant", "The etcd certificates are signed by the internal CA.")]
        for i, (role, text) in enumerate(chat):
            t.append("ops", role, text, key=f"m{i}" if role == "user" else None)
        t.append("ops", "tool", "pod-1 Running\x00", name="kubectl", tool_call_id="c1",
                 key="k-tool", metadata={"source": "cli"})
        t.create_session("archived")
        t.append_many("archived", [{"role": "user", "content": f"turn {i}", "key": f"a{i}"}
                                   for i in range(40)])
        t.archive_session("archived")
        t.create_session("empty")

        warm = stores.warm
        warm.publish("ops", 1, 4, "Certificates, then backups.", decisions=["rotate one member at a time"], facts=["48 hourly"], metadata={"by": "test"},
                     key="w1", transcript=t)
        warm.publish("ops", 1, 4, "Certificates and backups, revised.", producer="summariser")
        warm.publish("ops", 5, 7, "The CA question.", entities=["internal CA"], key="w2")
        warm.publish("archived", 1, 40, "Forty numbered turns.")
        warm.publish("not in the transcript", 1, 2, "Artifacts need no session here.")

        scratch = stores.scratch
        kept = scratch.put("ops", "sql", {"q": "select 1"}, "a,b\n1,2\n" * 40, now=T0,
                           ttl=600.0)
        binary = scratch.put("ops", "fetch", {"url": "x"}, bytes(range(256)) * 3, now=T0 + 1,
                             pinned=True)
        used = scratch.put("ops", "kubectl", {"args": ["get", "pods"]}, "pod-1 Running",
                           now=T0 + 2, ttl=None, freshness="STABLE")
        gone = scratch.put("ops", "ls", {}, "deleted before the copy", now=T0 + 3)
        scratch.delete("ops", gone.scratch_id)
        scratch.put("other", "ls", {"d": "/"}, "another session", now=T0 + 4, ttl=30.0)
        scratch.reference("ops", used.scratch_id, 3, now=T0 + 5)
        scratch.reference("ops", used.scratch_id, 5, now=T0 + 6)    # auto-pinned
        scratch.get("ops", kept.scratch_id, now=T0 + 7)             # a later use (LRU)

        log = stores.turnlog
        log.sync(t, "ops", get_embedder("hashing"))
        log.set_thread_state("ops", "T1", user_constraints=["never expose 2379"],
                             open_questions=[])
        log.set_references("ops", 5, [1, 2])
        return {"kept": kept.scratch_id, "binary": binary.scratch_id,
                "used": used.scratch_id}


def _everything(spec: str) -> dict:
    """Every part of a store, read through the Protocols, as plain values."""
    with open_stores(spec) as stores:
        t = stores.transcript
        sessions = {}
        for info in t.sessions():
            sid = info.session_id
            turns = t.history(sid)
            sessions[sid] = {"info": info, "turns": turns,
                             "keys": {turn.key: t.turn_for_key(sid, turn.key)
                                      for turn in turns if turn.key},
                             "checksum": session_checksum(t, sid)}
        storage = open_raw_facts(stores)
        try:
            facts = {ns: fingerprint(storage, ns) for ns in storage.namespaces()}
        finally:
            storage.close()
        warm = {sid: [a.to_dict() for a in warm_rows(stores.warm, sid)]
                for sid in stores.warm.sessions()}
        scratch = {sid: [(e.to_dict(), data) for e, data in scratch_rows(stores.scratch, sid)]
                   for sid in stores.scratch.sessions()}
        log = stores.turnlog
        turnlog = {}
        for sid in sessions:
            if log.model_id(sid) is None:
                continue
            count = t.turn_count(sid)
            vectors = log.vectors(sid, range(1, count + 1))
            turnlog[sid] = {
                "model": log.model_id(sid), "coverage": log.coverage(sid),
                "threads": [th.to_dict() for th in log.threads(sid, t)],
                "derived": [log.derived(sid, i).to_dict() for i in range(1, count + 1)],
                "vectors": {i: v.tolist() for i, v in vectors.items()},
                "inputs": log.inputs(sid), "active": log.active_thread(sid)}
        return {"sessions": sessions, "facts": facts, "warm": warm, "scratch": scratch,
                "scratch_stats": stores.scratch.stats().to_dict(), "turnlog": turnlog}


def test_every_part_goes_to_postgres_and_back_unchanged(tmp_path, pg):
    source, back = tmp_path / "source", tmp_path / "back"
    ids = _fill(source)
    close_all()
    want = _everything(str(source))
    there = migrate(str(source), pg)
    close_all()
    again = migrate(pg, str(back))
    close_all()
    assert _everything(pg) == want
    assert _everything(str(back)) == want
    # the reports: the same counts and checksums per part, both ways
    assert there.part_totals() == again.part_totals() and there.checksum == again.checksum
    totals = there.part_totals()
    assert totals["transcript"]["turns"] == 47 and totals["transcript"]["keys"] == 44
    assert (totals["warm"]["sessions"], totals["warm"]["items"]) == (3, 5)
    assert (totals["scratch"]["sessions"], totals["scratch"]["items"]) == (2, 4)
    assert totals["scratch"]["bytes"] == 320 + 768 + 13 + 15
    assert totals["turnlog"]["items"] == 7 and totals["facts"]["facts"] == 13
    assert there.rebuild == ["turnlog"]
    # what was compared is not empty
    assert want["turnlog"]["ops"]["inputs"]["references"] == {5: [1, 2]}
    assert want["turnlog"]["ops"]["threads"][0]["state"]["user_constraints"] == \
        ["never expose 2379"]
    assert want["scratch"]["ops"][1][1] == bytes(range(256)) * 3
    assert [e["pin_reason"] for e, _ in want["scratch"]["ops"]] == [None, "user", "auto"]
    assert len(want["warm"]["ops"]) == 3 and want["warm"]["ops"][0]["key"] == "w1"

    for spec in (pg, str(back)):        # the derived records of the copies are consistent
        with open_stores(spec) as stores:
            assert stores.warm.check() == () and stores.scratch.verify() == ()
            assert stores.scratch.check(verify=True).clean
            assert stores.scratch.stats().to_dict() == want["scratch_stats"]
    with open_stores(str(source)) as a, open_stores(str(back)) as c:
        for stores in (a, c):
            # a keyed retry finds its copy; a new publish is the next version
            first = stores.warm.publish("ops", 1, 4, "Certificates, then backups.",
                                        decisions=["rotate one member at a time"],
                                        facts=["48 hourly"], metadata={"by": "test"}, key="w1")
            assert first.version == 1
            assert stores.transcript.append(
                "ops", "user", "How do I rotate the etcd client certificates?", key="m0") == 1
            assert stores.scratch.raw("ops", ids["binary"], now=T0 + 8) == \
                bytes(range(256)) * 3
        # retention and LRU order carried over: the same eviction on both
        evicted = [[(v.session_id, v.scratch_id, v.reason) for v in
                    s.scratch.evict(now=T0 + 700).evicted] for s in (a, c)]
        assert evicted[0] == evicted[1] == [("other", evicted[0][0][1], "ttl"),
                                             ("ops", ids["kept"], "ttl")]


def test_the_copy_is_not_a_use_at_the_source(tmp_path, pg):
    source = tmp_path / "source"
    _fill(source)
    close_all()
    before = _everything(str(source))
    migrate(str(source), pg)
    close_all()
    assert _everything(str(source)) == before


@pytest.mark.parametrize("part", ["warm", "scratch"])
def test_a_target_holding_a_sessions_part_is_refused_before_any_write(tmp_path, pg, part):
    source = tmp_path / "source"
    _fill(source)
    with open_stores(pg) as stores:
        if part == "warm":
            stores.warm.publish("not in the transcript", 9, 9, "Already here.")
        else:
            stores.scratch.put("other", "ls", {}, "already here", now=T0)
    close_all()
    with pytest.raises(SessionExistsError, match="already holds"):
        migrate(str(source), pg)
    close_all()
    with open_stores(pg) as stores:
        assert stores.transcript.sessions() == []
        assert not stores.has("facts") and not stores.has("turnlog")
        assert len(stores.warm.sessions()) + len(stores.scratch.sessions()) == 1
        digest = {sid: [hashlib.sha256(b).hexdigest() for _, b in
                        scratch_rows(stores.scratch, sid)] for sid in stores.scratch.sessions()}
        assert sum(map(len, digest.values())) == (part == "scratch")


def test_a_refusal_leaves_a_directory_target_without_new_parts(tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    _fill(source)
    with open_stores(str(target)) as stores:
        stores.transcript.create_session("ops")            # the clash
    close_all()
    with pytest.raises(SessionExistsError, match="already holds 1 of the source's sessions"):
        migrate(str(source), str(target))
    close_all()
    assert sorted(p.name for p in target.iterdir()) == ["transcript.lmdb"]


def _chat_store(directory, embedder) -> None:
    with open_stores(str(directory)) as stores:
        t = stores.transcript
        t.create_session("ops")
        for text in ["How do I rotate the etcd certificates?", "One member at a time.",
                     "What is the restic retention?", "48 hourly, 30 daily."]:
            t.append("ops", "user", text)
        stores.turnlog.sync(t, "ops", embedder)
        stores.turnlog.set_references("ops", 3, [1])
        t.append("ops", "user", "Back to etcd: which CA signs them?")    # not derived yet


def test_a_partly_derived_turn_log_keeps_its_derived_turns_and_inputs(tmp_path, pg):
    source = tmp_path / "source"
    _chat_store(source, get_embedder("hashing"))
    close_all()
    report = migrate(str(source), pg)
    assert report.parts["turnlog"].items == 4          # the turns the source had derived
    close_all()
    with open_stores(str(source)) as a, open_stores(pg) as b:
        assert [a.turnlog.derived("ops", i) for i in range(1, 5)] == \
            [b.turnlog.derived("ops", i) for i in range(1, 5)]
        assert b.turnlog.inputs("ops") == a.turnlog.inputs("ops") == \
            {"thread_states": {}, "references": {3: [1]}}
        assert b.turnlog.coverage("ops")[0] == 5        # the target derived the whole session


def test_a_turn_log_made_with_an_embedder_this_process_lacks_is_refused(tmp_path):
    import numpy as np
    from ctxrelay.errors import InvalidArgumentError
    from ctxrelay.text.embed import CallableEmbedder
    unknown = CallableEmbedder(lambda texts: np.ones((len(texts), 4)), dim=4,
                               model_id="not-registered-anywhere")
    source, target = tmp_path / "source", tmp_path / "target"
    _chat_store(source, unknown)
    close_all()
    with pytest.raises(InvalidArgumentError, match="not-registered-anywhere"):
        migrate(str(source), str(target))
    close_all()
    with open_stores(str(target)) as stores:
        assert stores.transcript.sessions() == [] and not stores.has("turnlog")
