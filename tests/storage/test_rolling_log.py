"""Rolling context log (ctxrelay.storage.rolling): ring semantics, file format, crashes, model test."""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import inspect
import json
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, rule,
                                 run_state_machine_as_test)

from ctxrelay.errors import (CorruptStoreError, CtxRelayError, InvalidArgumentError,
                             InvalidContentError, InvalidSessionIdError)
from ctxrelay.storage.rolling import (MAX_SESSION_ID_BYTES, CorruptRingError, EntryTooLargeError,
                              LogRecord, MemoryRollingLog, RingConfigMismatchError,
                              RollingLog, RollingLogBackend, RollingLogClosedError)

import ctxrelay.storage.rolling as rolling_module  # noqa: E402

PACKAGE_DIR = Path(rolling_module.__file__).resolve().parents[2]   # the ctxrelay package


def encoded_size(entry) -> int:
    """The payload size the module docstring specifies (independent of the code)."""
    if isinstance(entry, str):
        return len(entry.encode("utf-8"))
    return len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def ring_file(directory: Path, session_id: str) -> Path:
    name = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest() + ".ring"
    return directory / name


# -- child processes -------------------------------------------------------------

def make_entry(tag, i):
    """Entry i of writer ``tag``: 0..299 chars of padding, str or dict, self-checking.

    Cheap to make, so a writer spends its time appending, not building entries."""
    import hashlib
    x = int.from_bytes(hashlib.blake2b(f"{tag}:{i}".encode(), digest_size=8).digest(), "little")
    pad = ("abcdefghij\u00e9\u4e2d" * 26)[x % 12:x % 12 + (x >> 8) % 300]
    digest = hashlib.sha256(f"{tag}|{i}|{pad}".encode()).hexdigest()[:16]
    if (x >> 20) & 1:
        return f"{tag}|{i}|{pad}|{digest}"
    return {"tag": tag, "i": i, "pad": pad, "h": digest}


def check_entry(entry) -> tuple[str, int]:
    """(tag, i) of an entry made by ``make_entry``; fails the test if it is not intact."""
    if isinstance(entry, str):
        tag, i, pad, digest = entry.split("|")
        i = int(i)
    else:
        assert set(entry) == {"tag", "i", "pad", "h"}, entry
        tag, i, pad, digest = entry["tag"], entry["i"], entry["pad"], entry["h"]
    assert hashlib.sha256(f"{tag}|{i}|{pad}".encode()).hexdigest()[:16] == digest, entry
    assert make_entry(tag, i) == entry, entry
    return tag, i


WORKER_MAIN = '''
import dataclasses, json, os, sys, types

# Import ctxrelay.storage.rolling without running ctxrelay/__init__.py, which embeds
# SWI-Prolog: the worker then starts in tens of milliseconds, so the kill test
# can afford many kills.  rolling.py needs only ctxrelay.errors.
package = types.ModuleType("ctxrelay")
package.__path__ = [os.environ["CTXRELAY_PACKAGE_DIR"]]
sys.modules["ctxrelay"] = package
from ctxrelay.storage.rolling import RollingLog


def run_append(path, session, cap_n, cap_b, tag, limit, ack_every, go=""):
    log = RollingLog(path, capacity_entries=int(cap_n), capacity_bytes=int(cap_b))
    print("ready", flush=True)
    if go:
        sys.stdin.readline()
    every = int(ack_every)
    for i in range(int(limit)):
        seq = log.append(session, make_entry(tag, i))
        if i % every == 0 or i == int(limit) - 1:
            print(seq, i, flush=True)
    log.close()


def run_dump(path, cap_n, cap_b, *sessions):
    with RollingLog(path, capacity_entries=int(cap_n), capacity_bytes=int(cap_b)) as log:
        for session in sessions:
            records = log.read_recent_with_seq(session, int(cap_n))
            print(json.dumps({"records": [[r.seq, r.entry] for r in records],
                              "stats": dataclasses.asdict(log.stats(session))}))


command, *args = sys.argv[1:]
{"append": run_append, "dump": run_dump}[command](*args)
'''


@pytest.fixture
def worker(tmp_path):
    """A function starting the worker script (written under tmp_path) with args."""
    script = tmp_path / "rolling_worker.py"
    script.write_text(inspect.getsource(make_entry) + WORKER_MAIN)
    env = {**os.environ, "CTXRELAY_PACKAGE_DIR": str(PACKAGE_DIR)}

    def spawn(*args, stdin=None) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env,
                                stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return spawn


def communicate(proc: subprocess.Popen, timeout: float = 120) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return out


# -- basic semantics ----------------------------------------------------------------

def test_append_returns_contiguous_seqs_and_read_recent_is_newest_last(tmp_path):
    with RollingLog(tmp_path / "log", capacity_entries=16, capacity_bytes=4096) as log:
        entries = ["first", {"role": "user", "content": "second", "n": [1, 2.5, None]},
                   "thïrd \U0001F600", {}, ""]
        assert [log.append("s", e) for e in entries] == [1, 2, 3, 4, 5]
        assert log.read_recent("s", 3) == entries[2:]
        assert log.read_recent("s", 5) == entries
        assert log.read_recent("s", 100) == entries
        assert log.read_recent("s", 0) == []
        assert log.read_recent("s", 1) == [""]
        assert log.read_recent_with_seq("s", 2) == [LogRecord(4, {}), LogRecord(5, "")]
        assert log.read_recent("never-written", 5) == []
        stats = log.stats("s")
        assert (stats.entries, stats.first_seq, stats.last_seq, stats.next_seq) == (5, 1, 5, 6)
        assert stats.bytes_used == sum(encoded_size(e) for e in entries)


def test_read_recent_returns_copies(tmp_path):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=256) as log:
        entry = {"a": [1]}
        log.append("s", entry)
        entry["a"].append(2)
        got = log.read_recent("s", 1)[0]
        got["a"].append(3)
        assert log.read_recent("s", 1) == [{"a": [1]}]


def test_roll_off_by_entry_count(tmp_path):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=10_000) as log:
        for i in range(1, 11):
            log.append("s", f"e{i}")
        assert log.read_recent("s", 10) == ["e7", "e8", "e9", "e10"]
        stats = log.stats("s")
        assert (stats.entries, stats.first_seq, stats.last_seq) == (4, 7, 10)
        assert log.append("s", "e11") == 11          # seqs keep counting after roll-off


def test_roll_off_by_bytes_including_wraparound(tmp_path):
    with RollingLog(tmp_path, capacity_entries=100, capacity_bytes=30) as log:
        for i in range(3):
            log.append("s", f"{i}" * 10)                          # 3 x 10 bytes: full
        assert log.stats("s").bytes_used == 30
        log.append("s", "a" * 7)                                  # evicts exactly one
        assert log.read_recent("s", 10) == ["1" * 10, "2" * 10, "a" * 7]
        log.append("s", "b" * 25)                                 # wraps the data area
        assert log.read_recent("s", 10) == ["b" * 25]
        log.append("s", "c" * 5)
        assert log.read_recent("s", 10) == ["b" * 25, "c" * 5]
        assert log.stats("s").bytes_used == 30
        rng = random.Random(7)                                    # many wraps, odd sizes
        model: collections.deque[str] = collections.deque(["b" * 25, "c" * 5])
        for i in range(500):
            entry = "".join(rng.choice("xyz\u00e9") for _ in range(rng.randrange(0, 20)))
            log.append("s", entry)
            model.append(entry)
            while sum(encoded_size(e) for e in model) > 30:
                model.popleft()
            assert log.read_recent("s", 100) == list(model)


def test_explicit_roll_off(tmp_path):
    with RollingLog(tmp_path, capacity_entries=8, capacity_bytes=100) as log:
        for i in range(5):
            log.append("s", str(i))
        assert log.roll_off("s", 2) == 2
        assert log.read_recent_with_seq("s", 8)[0] == LogRecord(3, "2")
        assert log.roll_off("s", 10) == 3
        assert log.read_recent("s", 8) == []
        assert log.roll_off("nobody") == 0
        assert log.append("s", "5") == 6


def test_entry_larger_than_the_ring_is_a_clear_error(tmp_path):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        log.append("s", "keep")
        with pytest.raises(EntryTooLargeError, match=r"65 bytes.*capacity_bytes=64") as info:
            log.append("s", "x" * 65)
        assert isinstance(info.value, InvalidContentError)
        assert isinstance(info.value, CtxRelayError)
        with pytest.raises(EntryTooLargeError):
            log.append("s", {"k": "x" * 60})                    # 68 bytes as JSON
        with pytest.raises(EntryTooLargeError):
            log.append("s", "\u00e9" * 33)                       # 66 bytes in UTF-8
        assert log.read_recent("s", 4) == ["keep"]               # nothing changed
        assert log.append("s", "y" * 64) == 2                    # exactly the ring: fits
        assert log.read_recent("s", 4) == ["y" * 64]


def test_sessions_are_isolated(tmp_path):
    with RollingLog(tmp_path, capacity_entries=3, capacity_bytes=1000) as log:
        for i in range(10):
            log.append("a", f"a{i}")
            if i % 2:
                log.append("b", f"b{i}")
        assert log.read_recent("a", 5) == ["a7", "a8", "a9"]
        assert log.read_recent("b", 5) == ["b5", "b7", "b9"]
        assert log.read_recent_with_seq("b", 1) == [LogRecord(5, "b9")]
        assert log.sessions() == ["a", "b"]
        assert log.drop("a") is True
        assert log.drop("a") is False
        assert log.read_recent("a", 5) == []
        assert log.read_recent("b", 5) == ["b5", "b7", "b9"]
        assert log.append("a", "new") == 1


WEIRD_IDS = ["../../etc/passwd", "/abs/path", "a/b\\c", "..", ".", "", "\x00nul\x00",
             "line\nbreak", "CON", "ünïcødé 🎉", "\ud800lone", " ", "*?<>|:",
             "x" * MAX_SESSION_ID_BYTES, "\u4e2d" * (MAX_SESSION_ID_BYTES // 3)]


def test_weird_session_ids_map_to_hashed_files_only(tmp_path):
    base = tmp_path / "log"
    ids = [s for s in WEIRD_IDS if s]
    with RollingLog(base, capacity_entries=4, capacity_bytes=512) as log:
        for i, session in enumerate(ids):
            log.append(session, f"entry for {i}")
        for i, session in enumerate(ids):
            assert log.read_recent(session, 4) == [f"entry for {i}"]
        assert sorted(log.sessions()) == sorted(ids)
        names = sorted(p.name for p in base.iterdir())
        assert names == sorted(ring_file(base, s).name for s in ids)
        assert all(len(n) == 64 + 5 and n.endswith(".ring") for n in names)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["log"]   # nothing escaped
        with pytest.raises(InvalidSessionIdError, match="empty"):
            log.append("", "x")
        with pytest.raises(InvalidSessionIdError, match="shorter id"):
            log.append("x" * (MAX_SESSION_ID_BYTES + 1), "x")
        with pytest.raises(InvalidSessionIdError, match="must be a str"):
            log.read_recent(b"bytes", 1)


def test_invalid_arguments(tmp_path):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        for bad in (-1, 1.5, True, "3"):
            with pytest.raises(InvalidArgumentError):
                log.read_recent("s", bad)
        for bad in (3, b"bytes", ["list"], None):
            with pytest.raises(InvalidContentError, match="str or a dict"):
                log.append("s", bad)
        with pytest.raises(InvalidContentError, match="JSON"):
            log.append("s", {"x": object()})
        with pytest.raises(InvalidContentError, match="JSON"):
            log.append("s", {"x": float("nan")})
        with pytest.raises(InvalidContentError, match="surrogate"):
            log.append("s", "a\udc00")
        assert log.read_recent("s", 4) == []
    with pytest.raises(RollingLogClosedError, match="closed"):
        log.append("s", "x")
    for kwargs in ({"capacity_entries": 0}, {"capacity_bytes": 0},
                   {"capacity_bytes": 1 << 32}, {"max_open": 0}):
        with pytest.raises(InvalidArgumentError):
            RollingLog(tmp_path / "other", **kwargs)


def test_capacity_mismatch_on_an_existing_ring(tmp_path):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        log.append("s", "x")
    with RollingLog(tmp_path, capacity_entries=8, capacity_bytes=64) as log:
        with pytest.raises(RingConfigMismatchError, match="capacity_entries=4"):
            log.read_recent("s", 1)
        log.append("t", "other sessions are fine")


def test_footprint_is_fixed_at_creation(tmp_path):
    with RollingLog(tmp_path, capacity_entries=32, capacity_bytes=2048) as log:
        log.append("s", "first")
        path = ring_file(tmp_path, "s")
        size = path.stat().st_size
        assert size == 128 + 2 * 64 + 32 * 32 + 2048           # header(1-char id) + slots
        assert os.stat(path).st_blocks * 512 >= size            # reserved, not sparse
        rng = random.Random(3)
        for _ in range(5000):
            log.append("s", "z" * rng.randrange(0, 200))
        assert path.stat().st_size == size
        assert log.stats("s").file_bytes == size
        assert log.stats().file_bytes == size
        assert log.stats("s").bytes_used <= 2048


def test_sync_mode_appends_and_reads_back(tmp_path):
    with RollingLog(tmp_path, capacity_entries=8, capacity_bytes=5000, sync=True) as log:
        for i in range(40):                    # wraps the data area: split flushes
            log.append("s", make_entry("sync", i))
        log.roll_off("s", 1)
    with RollingLog(tmp_path, capacity_entries=8, capacity_bytes=5000) as log:
        records = log.read_recent_with_seq("s", 8)
    assert [r.seq for r in records] == list(range(41 - len(records), 41))
    assert [check_entry(r.entry) for r in records] == [("sync", r.seq - 1) for r in records]


def test_many_sessions_beyond_max_open(tmp_path):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64, max_open=2) as log:
        for round_ in range(3):
            for s in range(6):
                log.append(f"s{s}", f"{s}.{round_}")
        for s in range(6):
            assert log.read_recent(f"s{s}", 4) == [f"{s}.{r}" for r in range(3)]
        stats = log.stats()
        assert (stats.sessions, stats.entries) == (6, 18)


def test_read_recent_reads_only_the_last_n_entries(tmp_path):
    """A damaged older entry does not affect reading newer ones: no scan behind n."""
    with RollingLog(tmp_path, capacity_entries=8, capacity_bytes=1024) as log:
        for i in range(6):
            log.append("s", f"entry-{i}")
    path = ring_file(tmp_path, "s")
    raw = bytearray(path.read_bytes())
    first = raw.index(b"entry-0")
    raw[first + 6] ^= 0xFF
    path.write_bytes(bytes(raw))
    with RollingLog(tmp_path, capacity_entries=8, capacity_bytes=1024) as log:
        assert log.read_recent("s", 5) == [f"entry-{i}" for i in range(1, 6)]
        with pytest.raises(CorruptRingError, match="entry 1 fails its checksum"):
            log.read_recent("s", 6)


# -- corruption ---------------------------------------------------------------------

def _flip(offset: int):
    def damage(raw: bytearray) -> bytearray:
        raw[offset] ^= 0xFF
        return raw
    return damage


CORRUPTIONS = {
    "magic": (_flip(0), "bad magic"),
    "version": (lambda raw: raw[:8] + struct.pack("<I", 99) + raw[12:], "format version 99"),
    "capacity": (_flip(16), "header checksum"),
    "session id": (_flip(72), "header checksum"),
    "truncated": (lambda raw: raw[:-1], "truncated or extended"),
    "extended": (lambda raw: raw + b"\0", "truncated or extended"),
    "tiny": (lambda raw: raw[:10], "shorter than"),
    "both heads": (lambda raw: _flip(128)(_flip(192)(raw)), "head slot 0 fails its checksum"),
    "newest head": (_flip(192 + 8), "head slot 1 fails its checksum.*rebuilds it from the "
                    "transcript"),
    "older head": (_flip(128 + 8), "head slot 0 fails its checksum"),
    "empty": (lambda raw: bytearray(), "shorter than"),
}


@pytest.mark.parametrize("damage", CORRUPTIONS, ids=list(CORRUPTIONS))
def test_corrupt_file_is_a_clear_error_and_left_untouched(tmp_path, damage):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        log.append("s", "one")
        log.append("s", "two")
    path = ring_file(tmp_path, "s")
    change, message = CORRUPTIONS[damage]
    damaged = bytes(change(bytearray(path.read_bytes())))
    path.write_bytes(damaged)
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        for operation in (lambda: log.append("s", "three"), lambda: log.read_recent("s", 2),
                          lambda: log.stats("s"), log.sessions, lambda: log.roll_off("s")):
            with pytest.raises(CorruptRingError, match=message) as info:
                operation()
            assert isinstance(info.value, CorruptStoreError)
            assert str(path) in str(info.value) and "left untouched" in str(info.value)
        log.append("other", "unaffected")
        assert log.read_recent("other", 1) == ["unaffected"]
    assert path.read_bytes() == damaged


def test_a_head_slot_cut_short_falls_back_to_the_other(tmp_path):
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        log.append("s", "one")                         # generation 2 -> slot 0 (at 128)
        log.append("s", "two")                         # generation 3 -> slot 1 (at 192)
    path = ring_file(tmp_path, "s")
    raw = bytearray(path.read_bytes())
    raw[192 + 32:192 + 36] = bytes(4)                  # its CRC zeroed: being published
    raw[192 + 8] ^= 0x01                               # and its body half written
    path.write_bytes(bytes(raw))
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        assert log.read_recent("s", 4) == ["one"]
        assert log.append("s", "again") == 2


def test_a_damaged_newest_head_is_refused_not_read_as_the_older_ring(tmp_path):
    """Issue 15: one flipped byte in the newest head slot made the ring fall back to
    the older slot, so read_recent silently returned the ring one append earlier."""
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        log.append("s", "one")
        log.append("s", "two")
    path = ring_file(tmp_path, "s")
    raw = bytearray(path.read_bytes())
    raw[192 + 8] ^= 0x01                               # bit rot in the newest head
    path.write_bytes(bytes(raw))
    with RollingLog(tmp_path, capacity_entries=4, capacity_bytes=64) as log:
        with pytest.raises(CorruptRingError, match="rebuilds it from the transcript"):
            log.read_recent("s", 4)


# -- processes ------------------------------------------------------------------------

def test_reopen_in_a_new_process_reads_the_same(tmp_path, worker):
    base = tmp_path / "log"
    rng = random.Random(11)
    with RollingLog(base, capacity_entries=16, capacity_bytes=2000) as log:
        for i in range(60):
            session = rng.choice(["alpha", "béta", "../gamma"])
            entry = make_entry("parent", i)
            log.append(session, entry)
        expected = {s: ([[r.seq, r.entry] for r in log.read_recent_with_seq(s, 16)],
                        dataclasses.asdict(log.stats(s)))
                    for s in ["alpha", "béta", "../gamma"]}
    out = communicate(worker("dump", base, 16, 2000, "alpha", "béta", "../gamma"))
    lines = [json.loads(line) for line in out.splitlines()]
    for line, session in zip(lines, ["alpha", "béta", "../gamma"], strict=True):
        assert (line["records"], line["stats"]) == expected[session]
        assert line["records"]
    # and the other way round: a child writes, this process reads
    proc = worker("append", base, "child", 16, 2000, "kid", 40, 1)
    communicate(proc)
    with RollingLog(base, capacity_entries=16, capacity_bytes=2000) as log:
        records = log.read_recent_with_seq("child", 16)
        assert [r.seq for r in records] == list(range(records[0].seq, 41))
        assert [check_entry(r.entry) for r in records] == [("kid", r.seq - 1) for r in records]


class _Crash(Exception):
    """Stands for the process dying at one store into the file."""


@pytest.mark.parametrize("torn", [False, True], ids=["before-store", "torn-store"])
def test_a_crash_at_any_store_of_an_append_leaves_a_valid_ring(tmp_path, monkeypatch, torn):
    """Every store of many appends (filling, evicting by count and bytes, wrapping) is
    made to fail in turn, whole or half-written; the ring read afterwards is always the
    state before the append, that state minus evicted entries, or the state after."""
    from ctxrelay.storage.rolling import ring as ring_module
    real_write = ring_module.Ring._write
    cap_n, cap_b = 4, 64
    crash_at = [-1]

    def write(ring, at, data):
        if crash_at[0] == 0:
            if torn and len(data) > 4:   # an aligned 4-byte store does not tear
                real_write(ring, at, data[:max(1, len(data) // 2)])
            raise _Crash
        crash_at[0] -= 1
        real_write(ring, at, data)
    monkeypatch.setattr(ring_module.Ring, "_write", write)

    def records() -> list[tuple[int, object]]:
        with RollingLog(tmp_path, capacity_entries=cap_n, capacity_bytes=cap_b) as log:
            return [(r.seq, r.entry) for r in log.read_recent_with_seq("s", cap_n)]

    with RollingLog(tmp_path, capacity_entries=cap_n, capacity_bytes=cap_b) as log:
        log.append("s", "seed")
    path = ring_file(tmp_path, "s")
    rng = random.Random(99)
    crashes = 0
    for step in range(40):
        entry = "".join(rng.choice("ab\u00e9") for _ in range(rng.randrange(0, 30)))
        if step % 3 == 0:
            entry = {"step": step, "text": entry}
        snapshot = path.read_bytes()
        before = records()
        crashed_states = []
        for k in range(10):
            path.write_bytes(snapshot)
            crash_at[0] = k
            log = RollingLog(tmp_path, capacity_entries=cap_n, capacity_bytes=cap_b)
            try:
                log.append("s", entry)
            except _Crash:
                crashed_states.append(records())
                continue
            finally:
                log.close()
            break
        else:
            pytest.fail("an append made more than 10 stores")
        crash_at[0] = -1
        after = records()                         # the last run completed
        assert after[-1] == (before[-1][0] + 1, entry)
        kept = after[:-1]
        assert kept == before[len(before) - len(kept):]
        for got in crashed_states:
            # the state before, or before minus the entries this append evicts
            assert got == before[len(before) - len(got):], (step, got, before)
            assert len(got) >= len(kept), (step, got, kept)
        crashes += len(crashed_states)
    assert crashes >= 40 * 3


def _kill_mid_stream(proc: subprocess.Popen, acks_wanted: int,
                     delay: float) -> list[tuple[int, int]]:
    timer = threading.Timer(120, proc.kill)
    timer.daemon = True
    timer.start()
    acks = []
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
        while len(acks) < acks_wanted:
            line = proc.stdout.readline()
            if not line:
                pytest.fail(f"worker ended early: {proc.wait()} {proc.stderr.read()}")
            seq, i = map(int, line.split())
            acks.append((seq, i))
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)          # it is appending in a tight loop
        proc.wait()
    finally:
        timer.cancel()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acks


KILLS = 150


@pytest.mark.slow
def test_sigkill_mid_append_never_exposes_a_torn_entry(tmp_path, worker):
    """Kill a writer many times; after each kill every entry is intact, seqs contiguous.

    A kill lands inside an append's stores about one time in twenty (most of a
    writer's time is Python overhead around them), so 150 kills hit that window
    several times; ``test_a_crash_at_any_store_of_an_append_leaves_a_valid_ring``
    covers every store deterministically."""
    base = tmp_path / "log"
    cap_n, cap_b = 64, 6000        # evictions by count and by bytes, frequent wraps
    rng = random.Random(20240601)
    last_seq = 0
    acked: dict[int, tuple[str, int]] = {}
    for run in range(KILLS):
        tag = f"r{run}"
        acks = _kill_mid_stream(worker("append", base, "s", cap_n, cap_b, tag, 10**9, 7),
                                acks_wanted=rng.randrange(1, 20),
                                delay=rng.uniform(0, 0.01))
        acked.update({seq: (tag, i) for seq, i in acks})
        with RollingLog(base, capacity_entries=cap_n, capacity_bytes=cap_b) as log:
            records = log.read_recent_with_seq("s", cap_n)
            stats = log.stats("s")
        seqs = [r.seq for r in records]
        assert seqs == list(range(stats.next_seq - len(records), stats.next_seq))
        assert stats.entries == len(records) and stats.bytes_used <= cap_b
        assert records[-1].seq >= max(acked) > last_seq        # acknowledged = durable
        assert stats.bytes_used == sum(encoded_size(r.entry) for r in records)
        for record in records:
            tag_i = check_entry(record.entry)                   # intact, not torn
            if record.seq in acked:
                assert acked[record.seq] == tag_i
        # within one run, entries are consecutive appends of that run's writer
        for before, after in zip(records, records[1:]):
            (t0, i0), (t1, i1) = check_entry(before.entry), check_entry(after.entry)
            assert (t1 == t0 and i1 == i0 + 1) or (t1 != t0 and i1 == 0)
        last_seq = records[-1].seq


@pytest.mark.slow
def test_concurrent_writer_processes_share_one_ring(tmp_path, worker):
    base = tmp_path / "log"
    per_writer, writers = 400, 3
    procs = [worker("append", base, "shared", 4096, 1 << 21, f"w{k}", per_writer, 50, "go",
                    stdin=subprocess.PIPE) for k in range(writers)]
    for proc in procs:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with RollingLog(base, capacity_entries=4096, capacity_bytes=1 << 21) as log:
        records = log.read_recent_with_seq("shared", 4096)
    assert [r.seq for r in records] == list(range(1, per_writer * writers + 1))
    by_writer = collections.defaultdict(list)
    for record in records:
        tag, i = check_entry(record.entry)
        by_writer[tag].append(i)
    assert {t: v for t, v in by_writer.items()} == {
        f"w{k}": list(range(per_writer)) for k in range(writers)}


def test_threads_share_one_log(tmp_path):
    with RollingLog(tmp_path, capacity_entries=2048, capacity_bytes=1 << 20) as log:
        seqs: list[int] = []
        errors: list[BaseException] = []

        def run(tag: str) -> None:
            try:
                for i in range(250):
                    seqs.append(log.append("s", make_entry(tag, i)))
                    if i % 10 == 0:
                        for record in log.read_recent_with_seq("s", 8):
                            check_entry(record.entry)
            except BaseException as exc:  # reported below, with the traceback
                errors.append(exc)
        threads = [threading.Thread(target=run, args=(f"t{k}",)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert sorted(seqs) == list(range(1, 1001))
        assert len(log.read_recent("s", 2048)) == 1000


# -- the model test -------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=24)
ENTRIES = TEXT | st.dictionaries(st.text(max_size=4),
                                 st.integers(-5, 5) | TEXT | st.booleans() | st.none(),
                                 max_size=3)
SESSIONS = st.sampled_from(["a", "b", "../c"])


def _machine(open_log, new_dir):
    """A state machine comparing ``open_log(dir, cap_n, cap_b)`` with a deque model;
    ``new_dir()`` gives each example its own directory (None: no reopen rule)."""

    class RingVersusDeque(RuleBasedStateMachine):
        @initialize(cap_n=st.integers(1, 6), cap_b=st.integers(1, 80))
        def start(self, cap_n, cap_b):
            self.cap_n, self.cap_b = cap_n, cap_b
            self.dir = new_dir() if new_dir else None
            self.log = open_log(self.dir, cap_n, cap_b)
            self.model = {s: collections.deque() for s in ["a", "b", "../c"]}
            self.next_seq = dict.fromkeys(self.model, 1)

        @rule(session=SESSIONS, entry=ENTRIES)
        def append(self, session, entry):
            size = encoded_size(entry)
            if size > self.cap_b:
                with pytest.raises(EntryTooLargeError):
                    self.log.append(session, entry)
                return
            ring = self.model[session]
            while ring and (len(ring) >= self.cap_n
                            or sum(s for _, _, s in ring) + size > self.cap_b):
                ring.popleft()
            ring.append((self.next_seq[session], entry, size))
            assert self.log.append(session, entry) == self.next_seq[session]
            self.next_seq[session] += 1

        @rule(session=SESSIONS, n=st.integers(0, 8))
        def read_recent(self, session, n):
            expected = list(self.model[session])[-n:] if n else []
            assert self.log.read_recent(session, n) == [e for _, e, _ in expected]
            assert self.log.read_recent_with_seq(session, n) == [
                LogRecord(seq, e) for seq, e, _ in expected]

        @rule(session=SESSIONS, n=st.integers(0, 3))
        def roll_off(self, session, n):
            ring = self.model[session]
            dropped = min(n, len(ring))
            for _ in range(dropped):
                ring.popleft()
            assert self.log.roll_off(session, n) == dropped

        @rule()
        def reopen(self):
            if self.dir is not None:           # a new object (and mapping) on the same files
                self.log.close()
                self.log = open_log(self.dir, self.cap_n, self.cap_b)

        @invariant()
        def stats_agree(self):
            if not hasattr(self, "log"):
                return
            for session, ring in self.model.items():
                stats = self.log.stats(session)
                assert stats.entries == len(ring)
                assert stats.bytes_used == sum(s for _, _, s in ring) <= self.cap_b
                assert stats.first_seq == (ring[0][0] if ring else None)
                assert stats.last_seq == (ring[-1][0] if ring else None)

        def teardown(self):
            if hasattr(self, "log") and hasattr(self.log, "close"):
                self.log.close()
    return RingVersusDeque


MODEL_SETTINGS = settings(max_examples=150, stateful_step_count=40, deadline=None,
                          derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def test_mmap_log_matches_a_deque_model(tmp_path):
    counter = iter(range(10**9))
    machine = _machine(
        lambda d, n, b: RollingLog(d, capacity_entries=n, capacity_bytes=b),
        lambda: tmp_path / f"example{next(counter)}")
    run_state_machine_as_test(machine, settings=MODEL_SETTINGS)


def test_memory_log_matches_a_deque_model():
    machine = _machine(
        lambda _d, n, b: MemoryRollingLog(capacity_entries=n, capacity_bytes=b), None)
    run_state_machine_as_test(machine, settings=MODEL_SETTINGS)


def test_both_back_ends_satisfy_the_interface(tmp_path):
    for log in (RollingLog(tmp_path, capacity_entries=2, capacity_bytes=10),
                MemoryRollingLog(capacity_entries=2, capacity_bytes=10)):
        assert isinstance(log, RollingLogBackend)
        assert [log.append("s", x) for x in ("a", "b", "c")] == [1, 2, 3]
        assert log.read_recent("s", 5) == ["b", "c"]
        with pytest.raises(EntryTooLargeError):
            log.append("s", "x" * 11)
        assert log.drop("s") is True and log.read_recent("s", 5) == []
        assert log.drop("s") is False
