"""kill -9 at known and random places, repair of derived records, full disks and maps.

Each crash test runs tests/runtime/_crash_worker.py in a real process, reads its
acknowledgement lines (printed after a call returned) and kills it with
SIGKILL; the parent then reopens the store and checks that every acknowledged
write is there, that nothing half-written is visible and that the derived
records (search index, ANN index, warm ``latest``, scratch metadata) agree
with the data.  Appends killed mid-stream and imports are covered by
tests/storage/lmdb/test_lmdb_transcript_durability.py; this file covers the other writers.
"""
from __future__ import annotations

import hashlib
import os
import random
import signal
import struct
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from ctxrelay import Runtime
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.lmdb.framing import CHECKSUM_BYTES, seal
from ctxrelay.errors import StoreError, StoreFullError
from ctxrelay.storage.lmdb.transcript import TranscriptStore, close_all, open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _crash_worker import doc_text, managed_message, tool_raw  # noqa: E402
from support import watchdog  # noqa: E402
from conftest import mounted_tmpfs  # noqa: E402

WORKER = HERE / "_crash_worker.py"
POLICY = dict(embedder="hashing", max_context_tokens=4000, output_reserve=300)


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    close_all()
    from ctxrelay.knowledge import fabric as ckf
    from ctxrelay.storage.lmdb import scratch
    from ctxrelay.storage.lmdb import warm
    from ctxrelay.storage.lmdb.base import close_all as close_lmdb
    scratch.close_all()
    warm.close_all()
    close_lmdb()
    for store in list(ckf._stores.values()):
        store.close()


def spawn(*args, crash_at: str = "") -> subprocess.Popen:
    env = {**os.environ, "CRASH_AT": crash_at, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(HERE.parents[1] / "python"), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, str(WORKER), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_after(proc: subprocess.Popen, stop) -> list[list[str]]:
    """Read lines until ``stop(lines)`` holds, then SIGKILL; returns the lines read."""
    timer = watchdog(proc, 180)
    lines: list[list[str]] = []
    try:
        while not lines or not stop(lines):
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"worker ended early ({proc.wait()}): {proc.stderr.read()}")
            lines.append(line.split())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        timer.cancel()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return lines


def acks(lines: list[list[str]]) -> list[list[str]]:
    return [line[1:] for line in lines if line[0] == "ack"]


# -- managed turns ------------------------------------------------------------------------

def test_managed_turn_killed_before_the_reply_retries_without_duplicates(tmp_path):
    store = tmp_path / "store"
    lines = kill_after(spawn("managed", store, 3), lambda ls: ls[-1][0] == "in-provider")
    done = acks(lines)
    assert [a[0] for a in done] == ["k0", "k1", "k2"]
    with Runtime(store) as rt:
        turns = rt.history("m")
        # every acknowledged turn pair is there, and nothing of the killed turn
        # (a turn is stored whole, with its reply, after the provider answered)
        assert len(turns) == 6
        for i, (key, user, assistant) in enumerate(done):
            assert turns[int(user) - 1].content == managed_message(i)
            assert turns[int(user) - 1].key == f"{key}:user"
            assert turns[int(assistant) - 1].role == "assistant"
            assert turns[int(assistant) - 1].key == f"{key}:assistant"

        retried = rt.managed_turn("m", managed_message(3), key="k3", **POLICY)
        assert (retried.user_turn, retried.assistant_turn) == (7, 8)
        again = rt.managed_turn("m", managed_message(3), key="k3", **POLICY)
        assert (again.user_turn, again.assistant_turn, again.reply) == (7, 8, retried.reply)
        old = rt.managed_turn("m", managed_message(1), key="k1", **POLICY)
        assert (old.user_turn, old.assistant_turn) == (int(done[1][1]), int(done[1][2]))
        assert rt.turn_count("m") == 8
        assert [t.role for t in rt.history("m")] == ["user", "assistant"] * 4
        assert open_store(store).check_derived("m").ok


# -- warm artifacts -----------------------------------------------------------------------

def test_warm_publication_killed_keeps_every_acknowledged_version(tmp_path):
    from ctxrelay.storage.lmdb.warm import WarmStore
    store = tmp_path / "store"
    with TranscriptStore(store) as ts:
        ts.create_session("w")
        for i in range(5):
            ts.append("w", "user", f"turn {i}")
    wanted = random.Random(6).randint(40, 80)
    done = acks(kill_after(spawn("warm", store, "w", 100_000),
                           lambda ls: len(acks(ls)) >= wanted))
    with WarmStore(store / "warm") as warm:
        assert warm.check() == ()                       # latest and keys agree
        newest: dict[tuple[int, int], int] = {}
        for i, start, end, version, digest in done:
            art = warm.get("w", int(start), int(end), int(version))
            assert art.content_hash == digest and f"wordw{i}x" in art.summary
            newest[(int(start), int(end))] = int(version)
        for (start, end), version in newest.items():
            versions = [a.version for a in warm.versions("w", start, end)]
            assert versions == list(range(1, len(versions) + 1))      # no holes
            assert warm.get("w", start, end).version >= version
        i, start, end, version, _ = done[-1]
        again = warm.publish("w", int(start), int(end),
                             f"summary {i} of turns 1..{end} wordw{i}x",
                             decisions=[f"decision {i}"], key=f"p{i}")
        assert again.version == int(version)            # a retry adds no version


def test_warm_check_repairs_a_stale_latest_record(tmp_path):
    from ctxrelay.storage.lmdb.warm import WarmStore
    with WarmStore(tmp_path / "warm") as warm:
        for n in range(3):
            warm.publish("s", 1, 4, f"summary {n}")
        range_key = hashlib.sha256(b"s").digest() + struct.pack(">QQ", 1, 4)
        warm._write(lambda txn: txn.put(range_key, struct.pack(">Q", 1), db=warm._latest))
        assert warm.get("s", 1, 4).version == 1                     # the damage shows
        [problem] = warm.check()
        assert "recorded as 1 but the newest stored is 3" in problem
        assert warm.check(repair=True) == (problem,)
        assert warm.check() == () and warm.get("s", 1, 4).version == 3


# -- the knowledge fabric -----------------------------------------------------------------

def _assert_ckf_consistent(path: Path, acked: list[list[str]]) -> None:
    from ctxrelay.knowledge.fabric import FactStore
    with FactStore(path, embedder="hashing", recluster_every=None) as facts:
        for i, *fact_ids in acked:
            assert fact_ids, f"document {i} made no fact"
            for fid in fact_ids:
                assert f"uniqword{i}x" in facts.fact(fid).content
            [hit] = facts.search_terms(f"uniqword{i}x", k=1)
            assert hit.fact_id in fact_ids
        stored = list(facts.backend.scan("default"))
        assert len(stored) >= sum(len(ids) for _, *ids in acked)
        # the ANN index holds exactly the stored facts: each finds itself first
        for fact in stored:
            [hit] = facts.search_ann(fact.content, k=1)
            assert hit.fact_id == fact.fact_id
        facts.rebuild_index()
        assert [facts.search_ann(f.content, k=1)[0].fact_id for f in stored] == \
            [f.fact_id for f in stored]
    leftovers = [p.name for p in (path / "hnsw").iterdir() if ".tmp" in p.name]
    assert leftovers == []


def test_ckf_ingestion_and_rebuild_killed_at_random(tmp_path):
    store = tmp_path / "store"
    wanted = random.Random(7).randint(8, 14)
    done = acks(kill_after(spawn("ckf", store, 10_000), lambda ls: len(acks(ls)) >= wanted))
    _assert_ckf_consistent(store / "ckf", done)


def test_ckf_killed_after_the_index_file_is_replaced(tmp_path):
    store = tmp_path / "store"
    lines = kill_after(spawn("ckf", store, 10, crash_at="hnsw-saved"),
                       lambda ls: ls[-1][0] == "at")
    done = acks(lines)
    assert len(done) == 2                 # document 2 is stored, its rebuild was killed
    _assert_ckf_consistent(store / "ckf", done)
    from ctxrelay.knowledge.fabric import FactStore
    with FactStore(store / "ckf", embedder="hashing", recluster_every=None) as facts:
        [hit] = facts.search_terms("uniqword2x", k=1)     # committed before the rebuild
        assert facts.search_ann(doc_text(2), k=1)[0].fact_id == hit.fact_id


# -- scratch writes -----------------------------------------------------------------------

def _scratch_session(store: Path) -> None:
    with TranscriptStore(store) as ts:
        ts.create_session("t")
        ts.append("t", "user", "run the query")


def test_scratch_killed_between_blob_and_metadata_leaves_an_invisible_orphan(tmp_path):
    from ctxrelay.storage.lmdb.scratch import ScratchStore
    store = tmp_path / "store"
    _scratch_session(store)
    kill_after(spawn("scratch", store, "t", 5, crash_at="blob-written"),
               lambda ls: ls[-1][0] == "at")
    with TranscriptStore(store) as ts:
        assert ts.turn_count("t") == 1                   # no call or result turn
    with ScratchStore(store / "scratch") as scratch:
        assert scratch.list("t") == []
        blobs = list((store / "scratch" / "blobs").rglob("*.blob"))
        assert len(blobs) == 1                           # durable, but named by nothing
        report = scratch.check(grace_seconds=0)
        assert [Path(p) for p in report.orphan_blobs] == blobs and report.dangling == ()
        assert not blobs[0].exists()
    with Runtime(store) as rt:
        sid = rt.record_tool_output("t", "sql", {"q": 0}, tool_raw(0), key="t0")
        assert rt.scratch("t", sid, raw=True) == tool_raw(0)
        assert [t.role for t in rt.history("t")] == ["user", "assistant", "tool"]


def test_scratch_killed_between_call_and_result_stores_neither(tmp_path):
    # The call and its result turn are one transaction: a kill after the call turn
    # was written leaves no torn pair (it used to leave the call without its result).
    store = tmp_path / "store"
    _scratch_session(store)
    kill_after(spawn("scratch", store, "t", 5, crash_at="call-in-transaction"),
               lambda ls: ls[-1][0] == "at")
    with Runtime(store) as rt:
        assert [t.role for t in rt.history("t")] == ["user"]
        sid = rt.record_tool_output("t", "sql", {"q": 0}, tool_raw(0), key="t0")
        turns = rt.history("t")
        assert [t.role for t in turns] == ["user", "assistant", "tool"]
        assert turns[1].metadata["scratch_id"] == sid == turns[2].metadata["scratch_id"]
        assert rt.scratch("t", sid, raw=True) == tool_raw(0)


def test_a_torn_pair_from_an_earlier_version_is_completed_by_a_keyed_retry(tmp_path):
    # Stores written before the pair was one transaction can hold a call turn
    # without its result; the retry with the same key completes it.
    from ctxrelay.storage.lmdb.scratch import ScratchStore
    store = tmp_path / "store"
    _scratch_session(store)
    with ScratchStore(store / "scratch") as scratch:
        entry = scratch.put("t", "sql", {"q": 0}, tool_raw(0))
    with TranscriptStore(store) as ts:
        call = {"id": f"call_{entry.scratch_id}", "name": "sql", "arguments": {"q": 0}}
        ts.append("t", "assistant", "", metadata={"tool_calls": [call],
                                                  "scratch_id": entry.scratch_id}, key="t0:call")
    with Runtime(store) as rt:
        sid = rt.record_tool_output("t", "sql", {"q": 0}, tool_raw(0), key="t0")
        turns = rt.history("t")
        assert sid == entry.scratch_id and [t.role for t in turns] == ["user", "assistant", "tool"]
        assert turns[2].metadata["scratch_id"] == sid and len(rt.scratch_entries("t")) == 1


def test_a_retried_tool_output_with_the_same_key_returns_the_first_entry(tmp_path):
    store = tmp_path / "store"
    _scratch_session(store)
    with Runtime(store) as rt:
        first = rt.record_tool_output("t", "sql", {"q": 1}, tool_raw(1), key="same")
        assert rt.record_tool_output("t", "sql", {"q": 1}, tool_raw(1), key="same") == first
        assert rt.turn_count("t") == 3 and len(rt.scratch_entries("t")) == 1


def test_scratch_writes_killed_at_random_keep_every_acknowledged_output(tmp_path):
    from ctxrelay.storage.lmdb.scratch import open_scratch_store
    store = tmp_path / "store"
    _scratch_session(store)
    wanted = random.Random(8).randint(10, 25)
    done = acks(kill_after(spawn("scratch", store, "t", 10_000),
                           lambda ls: len(acks(ls)) >= wanted))
    with Runtime(store) as rt:
        turns = rt.history("t")
        for i, sid, call_turn, tool_turn, digest in done:
            raw = rt.scratch("t", sid, raw=True)
            assert hashlib.sha256(raw.encode()).hexdigest() == digest == \
                hashlib.sha256(tool_raw(int(i)).encode()).hexdigest()
            call, result = turns[int(call_turn) - 1], turns[int(tool_turn) - 1]
            assert call.metadata["scratch_id"] == sid == result.metadata["scratch_id"]
            assert result.tool_call_id == call.metadata["tool_calls"][0]["id"]
        # wherever the kill fell, every stored call has its result right after it
        for n, turn in enumerate(turns):
            if turn.role == "assistant" and (turn.metadata or {}).get("tool_calls"):
                assert turns[n + 1].role == "tool" and \
                    turns[n + 1].metadata["scratch_id"] == turn.metadata["scratch_id"]
        entries = {e["scratch_id"] for e in rt.scratch_entries("t")}
        assert {sid for _, sid, *_ in done} <= entries
    scratch = open_scratch_store(store / "scratch")       # the Runtime's instance
    report = scratch.check(grace_seconds=0)
    assert report.dangling == () and report.corrupt == ()       # no entry lost its blob
    assert len(report.orphan_blobs) <= 1                        # at most the killed put
    assert {e.scratch_id for e in scratch.list("t")} == entries


# -- ctxrelay check --repair --------------------------------------------------------------

def _check(store: Path, capsys, *args: str) -> tuple[int, dict]:
    import json

    from ctxrelay.apps import cli
    close_all()                   # the CLI opens the store as a fresh program would
    capsys.readouterr()
    code = cli.main(["--store", str(store), "--json", "check", *args])
    return code, json.loads(capsys.readouterr().out)


def _damage_derived(store: Path) -> None:
    """Below the API: drop one posting, one document length, bump a counter, drop a key."""
    env = lmdb.open(str(store / "transcript.lmdb"), max_dbs=64, subdir=True)
    try:
        with env.begin(write=True) as txn:
            post = env.open_db(b"ix.post", txn=txn, create=False, dupsort=True)
            docs = env.open_db(b"ix.docs", txn=txn, create=False)
            counters = env.open_db(b"counters", txn=txn, create=False)
            keys = env.open_db(b"keys", txn=txn, create=False)
            session = struct.pack(">Q", 1)
            cursor = txn.cursor(db=post)
            assert cursor.set_key(session + b"needle7")
            assert cursor.delete()
            assert txn.delete(session + struct.pack(">Q", 3), db=docs)
            # Well-formed but wrong: the record carries a valid checksum of its new value.
            raw = txn.get(session, db=counters)[:-CHECKSUM_BYTES]
            txn.put(session, seal(session, raw.replace(b'"turns":12', b'"turns":11')),
                    db=counters)
            cursor = txn.cursor(db=keys)
            assert cursor.set_range(session) and cursor.delete()
    finally:
        env.close()


def test_check_finds_damaged_derived_records_and_repair_rebuilds_them(tmp_path, capsys):
    store = tmp_path / "store"
    with Runtime(store) as rt:
        rt.create_session("ops")
        rt.create_session("other")
        for i in range(12):
            rt.append("ops", ("user", "assistant")[i % 2], f"line {i} needle{i} common words",
                      key=f"o{i}")
            rt.append("other", "user", f"other {i} needle{i}")
        rt.assemble("ops", "what about needle7?", **POLICY)       # derives the turn log
        before = rt.export("ops"), rt.export("other")
    assert _check(store, capsys)[0] == 0

    _damage_derived(store)
    code, report = _check(store, capsys)
    assert code == 1
    ops = {s["session_id"]: s for s in report["sessions"]}["ops"]
    problems = "\n".join(ops["problems"])
    assert "search index lacks 1 posting(s) of turn(s) [8]" in problems
    assert "document lengths disagree for turn(s) 3" in problems
    assert "counter turn_count is 11 but the stored turns give 12" in problems
    assert "idempotency-key record(s) disagree" in problems
    assert ops["repairable"] is True
    assert {s["session_id"]: s["ok"] for s in report["sessions"]}["other"] is True

    code, report = _check(store, capsys, "--repair")
    assert code == 0, report
    assert report["repaired"] >= 4 and report["problems"] == 0
    assert _check(store, capsys)[0] == 0
    with Runtime(store) as rt:
        assert (rt.export("ops"), rt.export("other")) == before          # turns untouched
        assert [h.turn_id for h in rt.search("ops", "needle7")] == [8]
        assert rt.append("ops", "user", "after the repair") == 13        # ids continue
        assert rt.append("ops", "user", "line 0 needle0 common words", key="o0") == 1


def test_check_repairs_a_damaged_turn_log(tmp_path, capsys):
    store = tmp_path / "store"
    with Runtime(store) as rt:
        rt.create_session("s")
        for i in range(6):
            rt.append("s", "user", f"etcd compaction question {i}")
        rt.assemble("s", "and the defrag?", **POLICY)
    from ctxrelay.storage.lmdb.base import close_all as close_lmdb
    close_lmdb()                                  # the turn log the assembly opened
    env = lmdb.open(str(store / "turnlog"), max_dbs=16, subdir=True)
    try:
        with env.begin(write=True) as txn:
            derived = env.open_db(b"derived", txn=txn, create=False)
            key = hashlib.sha256(b"s").digest() + struct.pack(">Q", 4)
            assert txn.delete(key, db=derived)
    finally:
        env.close()
    code, report = _check(store, capsys)
    assert code == 1
    assert "turn log holds 5 derived record(s) and 6 vector(s)" in report["sessions"][0]["problems"][0]
    code, report = _check(store, capsys, "--repair")
    assert code == 0 and report["repaired"] == 1
    assert _check(store, capsys)[0] == 0


def test_check_repairs_warm_and_scratch_records(tmp_path, capsys):
    store = tmp_path / "store"
    with Runtime(store) as rt:
        rt.create_session("s")
        rt.append("s", "user", "hello")
        for n in range(2):
            rt.publish_artifact("s", 1, 1, f"summary {n}")
            rt.record_tool_output("s", "ls", {"n": n}, f"file{n}\n")
    close_all()
    from ctxrelay.storage.lmdb import scratch
    from ctxrelay.storage.lmdb import warm
    scratch.close_all()
    warm.close_all()
    env = lmdb.open(str(store / "warm"), max_dbs=16, subdir=True)
    with env.begin(write=True) as txn:
        latest = env.open_db(b"latest", txn=txn, create=False)
        key, _ = next(iter(txn.cursor(db=latest)))
        txn.put(key, seal(key, struct.pack(">Q", 1)), db=latest)   # v2 exists
    env.close()
    env = lmdb.open(str(store / "scratch" / "scratch.lmdb"), max_dbs=16, subdir=True)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn, create=False)
        lru = env.open_db(b"lru", txn=txn, create=False)
        txn.put(b"usage", seal(b"usage", struct.pack(">QQQQ", 7, 1, 0, 0)), db=meta)
        cursor = txn.cursor(db=lru)
        assert cursor.first() and cursor.delete()
    env.close()
    code, report = _check(store, capsys)
    assert code == 1
    problems = {r["store"]: "\n".join(r["problems"]) for r in report["stores"]}
    assert "recorded as 1 but the newest stored is 2" in problems["warm"]
    assert "usage record is [7, 1, 0, 0]" in problems["scratch"]
    assert "the lru index has 1 record(s)" in problems["scratch"]
    code, report = _check(store, capsys, "--repair")
    assert code == 0 and report["repaired"] >= 3, report
    assert _check(store, capsys)[0] == 0
    with Runtime(store) as rt:
        assert rt.artifacts("s")[0]["version"] == 2
        assert len(rt.scratch_entries("s")) == 2


def test_repair_leaves_a_damaged_transcript_alone(tmp_path, capsys):
    store = tmp_path / "store"
    with TranscriptStore(store) as ts:
        ts.create_session("d")
        for i in range(4):
            ts.append("d", "user", f"note {i}")
        ts._write(lambda txn: txn.delete(struct.pack(">QQ", 1, 2), db=ts._turns))
        assert ts.check_derived("d").repairable is False
    code, report = _check(store, capsys, "--repair")
    assert code == 1 and report["repaired"] == 0
    assert "missing 2" in "\n".join(report["sessions"][0]["problems"])


# -- full disks, full maps, read-only stores ----------------------------------------------

def test_a_small_map_grows_under_the_runtime(tmp_path):
    store = tmp_path / "store"
    with Runtime(store, map_size=64 * 1024) as rt:
        rt.create_session("g")
        text = " ".join(f"w{i}" for i in range(400))
        for i in range(60):
            rt.append("g", "user", f"{i} {text}")
        r = rt.managed_turn("g", "and now?", **POLICY)
        assert r.assistant_turn == 62
    assert (store / "transcript.lmdb" / "data.mdb").stat().st_size > 64 * 1024
    with Runtime(store) as rt:
        assert rt.turn_count("g") == 62


def test_a_map_that_cannot_grow_raises_store_full_and_keeps_the_store(tmp_path, monkeypatch):
    store = tmp_path / "store"
    monkeypatch.setattr(LmdbStore, "MAX_MAP_SIZE", 256 * 1024)
    with Runtime(store, map_size=128 * 1024) as rt:
        rt.create_session("f")
        text = " ".join(f"x{i}" for i in range(300))
        written = 0
        with pytest.raises(StoreFullError, match="archive old sessions"):
            for i in range(500):
                rt.append("f", "user", f"{i} {text}")
                written += 1
        assert 0 < written < 500
        assert rt.turn_count("f") == written                 # the failed append wrote nothing
    monkeypatch.undo()
    with Runtime(store) as rt:                               # still opens, and grows again
        assert rt.append("f", "user", "after") == written + 1
        assert open_store(store).check_derived("f").ok


@pytest.fixture
def tmpfs(tmp_path):
    with mounted_tmpfs(tmp_path / "fs", "2m") as mount_point:
        yield mount_point


def test_scratch_and_managed_turns_on_a_full_disk(tmpfs):
    store = tmpfs / "store"
    with Runtime(store) as rt:
        rt.create_session("d")
        rt.append("d", "user", "hello")
        rt.record_tool_output("d", "ls", {}, "a\nb\n")
        filler = tmpfs / "filler"
        free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
        filler.write_bytes(b"\0" * max(0, free - 8 * 1024))
        big = "x" * (64 * 1024)
        with pytest.raises(StoreFullError, match="free disk space"):
            rt.record_tool_output("d", "cat", {}, big)
        with pytest.raises(StoreFullError, match="free disk space"):
            for i in range(200):
                rt.append("d", "user", f"{i} " + " ".join(f"w{i}_{j}" for j in range(300)))
        count = rt.turn_count("d")
        filler.unlink()
    with Runtime(store) as rt:                               # still opens; retry works
        assert rt.turn_count("d") == count
        sid = rt.record_tool_output("d", "cat", {}, big)
        assert rt.scratch("d", sid, raw=True) == big
        assert open_store(store).check_derived("d").ok


def test_a_store_on_a_read_only_filesystem(tmpfs):
    store = tmpfs / "store"
    with TranscriptStore(store) as ts:
        ts.create_session("r")
        ts.append("r", "user", "kept")
    done = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot remount read-only: {done.stderr.decode().strip()}")
    with pytest.raises(StoreError, match="not writable.*readonly=True"):
        Runtime(store)
    with TranscriptStore(store, readonly=True) as ts:
        assert [t.content for t in ts.history("r")] == ["kept"]
        with pytest.raises(StoreError, match="readonly=False"):
            ts.append("r", "user", "more")
    subprocess.run(["mount", "-o", "remount,rw", str(tmpfs)], check=True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions; see the "
                    "read-only filesystem test")
def test_a_store_directory_without_write_permission(tmp_path):
    store = tmp_path / "store"
    with TranscriptStore(store) as ts:
        ts.create_session("r")
    env_dir = store / "transcript.lmdb"
    env_dir.chmod(0o555)
    try:
        with pytest.raises(StoreError, match="not writable"):
            Runtime(store)
    finally:
        env_dir.chmod(0o755)
