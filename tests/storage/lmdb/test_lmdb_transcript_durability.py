"""Kill -9, several processes at once, and a full disk, with real processes."""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys

import pytest

from ctxrelay.errors import StoreFullError
from ctxrelay.storage.lmdb.transcript import TranscriptStore, close_all

from support import ROOT, mounted_tmpfs, spawn_transcript_worker, watchdog  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))       # where the worker script lives
from _transcript_worker import append_content, writer_content  # noqa: E402


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    close_all()


spawn = spawn_transcript_worker


def read_lines_then_kill(proc: subprocess.Popen, wanted: int) -> list[str]:
    timer = watchdog(proc, 120)
    lines = []
    try:
        while len(lines) < wanted:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"worker ended early: {proc.wait()} {proc.stderr.read()}")
            lines.append(line.split())
        os.kill(proc.pid, signal.SIGKILL)      # mid-stream: it is still appending
        proc.wait()
    finally:
        timer.cancel()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return lines


def test_acknowledged_turns_survive_kill_9(tmp_path):
    path = tmp_path / "store"
    with TranscriptStore(path) as store:
        store.create_session("d")
    acks = read_lines_then_kill(spawn("append", path, "d", 1_000_000), 200)
    with TranscriptStore(path) as store:
        turns = store.history("d")
        count = store.turn_count("d")
        assert [t.turn_id for t in turns] == list(range(1, count + 1))      # no gaps
        assert count >= len(acks)
        for turn_id, i, digest in acks:
            turn = turns[int(turn_id) - 1]
            assert hashlib.sha256(turn.content.encode("utf-8")).hexdigest() == digest
            assert turn.key == f"a{i}"
        # turns committed after the last acknowledgement are whole too
        for turn in turns:
            assert turn.content == append_content(int(turn.key[1:]))
        last_id, last_i, _ = acks[-1]
        hits = store.search("d", f"token{last_i}x", k=3)
        assert [h.turn_id for h in hits] == [int(last_id)]
        stats = store.stats("d")
        assert stats.turn_count == count
        assert stats.bytes == sum(len(t.content.encode("utf-8")) for t in turns)
        assert store.append("d", "user", "after the crash") == count + 1


def test_an_import_killed_midway_is_all_or_nothing(tmp_path):
    turns = 1500
    source = tmp_path / "source.jsonl"
    header = {"type": "session", "session_id": "src", "created": "2024-01-01T00:00:00Z",
              "metadata": {}, "archived": False, "turn_count": turns}
    lines = [json.dumps(header)] + [json.dumps({
        "type": "turn", "turn_id": i, "role": "user", "content": f"imported {i} word{i}",
        "timestamp": "2024-01-01T00:00:00Z", "key": f"k{i}"}) for i in range(1, turns + 1)]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = tmp_path / "store"
    TranscriptStore(path).close()
    acks = read_lines_then_kill(spawn("import", path, source, 1000), 3)
    with TranscriptStore(path) as store:
        sessions = {info.session_id: info.turn_count for info in store.sessions()}
        assert {f"imp{n}" for n in (1, 2, 3)} <= set(sessions)
        assert [a[1] for a in acks] == ["imp1", "imp2", "imp3"]
        for sid, count in sessions.items():
            assert count == turns, f"{sid} holds {count} of {turns} turns"
            assert store.stats(sid).turn_count == turns
            assert [h.turn_id for h in store.search(sid, f"word{turns}")] == [turns]
        assert set(sessions) <= {f"imp{n}" for n in range(1, 5)}


def test_concurrent_writers_and_readers(tmp_path):
    path = tmp_path / "store"
    writers, per_writer, map_size = 4, 300, 256 * 1024      # small map: grows while shared
    with TranscriptStore(path, map_size=map_size) as store:
        store.create_session("c")
    go, stop = tmp_path / "go", tmp_path / "stop"
    procs = [spawn("writer", path, "c", w, per_writer, 100 + w, map_size, go)
             for w in range(writers)]
    readers = [spawn("reader", path, "c", 200 + r, map_size, go, stop) for r in range(2)]
    timers = [watchdog(p, 120) for p in procs + readers]
    try:
        for proc in procs + readers:
            assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        go.touch()
        written = [p.communicate() for p in procs]
        stop.touch()
        outputs = [p.communicate() for p in readers]
    finally:
        for timer in timers:
            timer.cancel()
    assert [p.returncode for p in procs] == [0] * writers, [err for _, err in written]
    assert [p.returncode for p in readers] == [0, 0], [err for _, err in outputs]
    summaries = [json.loads(out) for out, _ in written]
    assert all(json.loads(out)["reads"] > 0 for out, _ in outputs)
    assert sum(s["retries"] for s in summaries) > 0

    with TranscriptStore(path) as store:
        turns = store.history("c")
        assert len(turns) == store.turn_count("c") == writers * per_writer
        assert [t.turn_id for t in turns] == list(range(1, writers * per_writer + 1))
        keys = [t.key for t in turns]
        assert len(set(keys)) == len(keys)                      # no duplicates
        for summary in summaries:
            w = summary["writer"]
            mine = [t for t in turns if t.metadata["writer"] == w]
            assert [t.metadata["seq"] for t in mine] == list(range(per_writer))  # own order
            assert [t.turn_id for t in mine] == summary["ids"]
            assert all(t.content == writer_content(w, t.metadata["seq"]) for t in mine)
        assert store.stats("c").turn_count == writers * per_writer
        assert [h.turn_id for h in store.search("c", "w2s150tok")] == [summaries[2]["ids"][150]]


@pytest.fixture
def small_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "small", "1m") as mount_point:
        yield mount_point


def test_a_full_disk_raises_store_full_and_the_store_still_opens(small_disk):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (256 * 1024))
    path = small_disk / "store"
    rng = random.Random(5)
    texts = [" ".join(f"w{rng.randrange(10**6)}" for _ in range(300)) for _ in range(2000)]
    with TranscriptStore(path) as store:
        store.create_session("f")
        with pytest.raises(StoreFullError, match="free disk space"):
            for text in texts:
                store.append("f", "user", text)
        count = store.turn_count("f")
        assert 0 < count < len(texts)
        assert [t.content for t in store.history("f")] == texts[:count]
    with TranscriptStore(path) as store:                 # still opens
        assert [t.content for t in store.history("f")] == texts[:count]
        filler.unlink()                                   # free space, then retry
        assert store.append("f", "user", texts[count]) == count + 1
        assert store.search("f", texts[count].split()[0])[0].turn_id == count + 1
