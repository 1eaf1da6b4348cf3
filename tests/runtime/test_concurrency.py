"""Many processes and threads on one store at once, verified turn by turn.

Processes: 4 writers x 2,000 keyed turns (about 10 % retried with the same
key) and 4 readers that check every turn they read against the content its
writer derives from (writer, seq) -- a torn or mixed record cannot match.
The workers are tests/_transcript_worker.py's; this file runs them at full
size.  Threads: Python threads sharing one Runtime (janus gives each its own
Prolog engine and releases the GIL while Prolog runs), and Prolog threads
calling back into Python through one store (see docs/reliability.md).
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import janus_swi as janus
import pytest

from ctxrelay import Runtime
from ctxrelay.storage.lmdb.transcript import TranscriptStore, close_all, open_store

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _transcript_worker import writer_content  # noqa: E402
from support import spawn_transcript_worker as spawn, watchdog  # noqa: E402

POLICY = dict(embedder="hashing", max_context_tokens=3000, output_reserve=300)


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    close_all()


@pytest.fixture
def fast_dir(tmp_path):
    """A tmpfs under tmp_path: commits still fsync, but 8,000 of them take seconds,
    not a minute, on a shared disk.  Falls back to tmp_path where mounting fails."""
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "tmpfs",
                           str(mount_point)], capture_output=True)
    if done.returncode:
        yield tmp_path
        return
    try:
        yield mount_point
    finally:
        close_all()
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def test_four_writers_and_four_readers_lose_duplicate_and_tear_nothing(fast_dir):
    path = fast_dir / "store"
    writers, per_writer, readers, map_size = 4, 2000, 4, 1 << 20     # the map grows too
    with TranscriptStore(path, map_size=map_size) as store:
        store.create_session("c")
        store.create_session("quiet")
        store.append("quiet", "user", "untouched")
    go, stop = fast_dir / "go", fast_dir / "stop"
    procs = [spawn("writer", path, "c", w, per_writer, 300 + w, map_size, go)
             for w in range(writers)]
    reading = [spawn("reader", path, "c", 400 + r, map_size, go, stop) for r in range(readers)]
    timers = [watchdog(p, 170) for p in procs + reading]
    try:
        for proc in procs + reading:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        go.touch()
        written = [p.communicate() for p in procs]
        stop.touch()
        read = [p.communicate() for p in reading]
    finally:
        for timer in timers:
            timer.cancel()
    assert [p.returncode for p in procs] == [0] * writers, [err[-2000:] for _, err in written]
    assert [p.returncode for p in reading] == [0] * readers, [err[-2000:] for _, err in read]
    summaries = [json.loads(out) for out, _ in written]
    assert all(json.loads(out)["reads"] > 0 for out, _ in read)     # they read while writing
    assert sum(s["retries"] for s in summaries) > 0

    total = writers * per_writer
    with TranscriptStore(path) as store:
        turns = store.history("c")
        assert [t.turn_id for t in turns] == list(range(1, total + 1))   # no loss, no gap
        assert len({t.key for t in turns}) == total                      # no duplicate
        for summary in summaries:
            w = summary["writer"]
            mine = [t for t in turns if t.metadata["writer"] == w]
            assert [t.metadata["seq"] for t in mine] == list(range(per_writer))   # order
            assert [t.turn_id for t in mine] == summary["ids"]
            assert all(t.content == writer_content(w, t.metadata["seq"]) for t in mine)
        assert store.check_derived("c").ok          # every posting, total and key record
        assert [t.content for t in store.history("quiet")] == ["untouched"]
        assert [h.turn_id for h in store.search("c", "w3s1999tok")] == [summaries[3]["ids"][-1]]


def _run_threads(targets) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(fn):
        def run():
            try:
                fn()
            except BaseException as exc:          # reported by the test, not lost
                errors.append(exc)
        return run
    threads = [threading.Thread(target=wrap(fn)) for fn in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"
    return errors


def test_python_threads_share_one_runtime(tmp_path):
    with Runtime(tmp_path / "store") as rt:
        for name in ("shared", "a0", "a1", "a2"):
            rt.create_session(name)
        seen_counts: list[int] = []

        def own_session(n: int):
            def run():
                for i in range(8):
                    r = rt.managed_turn(f"a{n}", f"thread {n} question {i} about etcd",
                                        key=f"a{n}-{i}", **POLICY)
                    assert r.ledger.total <= r.ledger.input_budget
            return run

        def shared_writer(n: int):
            def run():
                for i in range(40):
                    rt.append("shared", "user", f"writer {n} item {i} tok{n}x{i}",
                              metadata={"w": n, "i": i}, key=f"s{n}-{i}")
            return run

        def reader():
            for _ in range(15):
                count = rt.turn_count("shared")
                seen_counts.append(count)
                for turn in rt.history("shared"):
                    w, i = turn.metadata["w"], turn.metadata["i"]
                    assert turn.content == f"writer {w} item {i} tok{w}x{i}"
                rt.search("shared", "item")
                rt.assemble("shared", "what did writer 1 say?", **POLICY)

        errors = _run_threads([own_session(n) for n in range(3)] +
                              [shared_writer(n) for n in range(2)] + [reader])
        assert errors == []
        assert seen_counts == sorted(seen_counts)          # never goes back
        for n in range(3):
            turns = rt.history(f"a{n}")
            assert [t.role for t in turns] == ["user", "assistant"] * 8
            assert [t.content for t in turns[::2]] == \
                [f"thread {n} question {i} about etcd" for i in range(8)]
        shared = rt.history("shared")
        assert len(shared) == 80 and len({t.key for t in shared}) == 80
        for n in range(2):
            assert [t.metadata["i"] for t in shared if t.metadata["w"] == n] == list(range(40))
        for session in ("shared", "a0", "a1", "a2"):
            assert open_store(rt.store_dir).check_derived(session).ok


def test_the_same_key_from_two_threads_appends_one_turn_pair(tmp_path):
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("k")
        rt.append("k", "user", "earlier context")
        results = []
        barrier = threading.Barrier(2)

        def retry():
            barrier.wait()
            results.append(rt.managed_turn("k", "the same question", key="dup", **POLICY))

        assert _run_threads([retry, retry]) == []
        assert rt.turn_count("k") == 3
        assert {(r.user_turn, r.assistant_turn) for r in results} == {(2, 3)}


def test_prolog_threads_call_python_through_one_store(tmp_path):
    with Runtime(tmp_path / "store") as rt:
        rt.create_session("p")
        # concurrent_forall runs the goal in 4 Prolog threads; each py_call
        # takes the GIL, which the calling Python thread released.
        janus.query_once(
            "concurrent_forall(between(1, 60, _I),"
            " ( format(string(_T), 'prolog thread item ~d', [_I]),"
            "   ctxrelay:turn_append(St, \"p\", message(user, _T), _, [key(_T)]) ),"
            " [threads(4)])", {"St": rt._store})
        turns = rt.history("p")
        assert sorted(t.content for t in turns) == \
            sorted(f"prolog thread item {i}" for i in range(1, 61))
        assert [t.turn_id for t in turns] == list(range(1, 61))
        assert open_store(rt.store_dir).check_derived("p").ok
