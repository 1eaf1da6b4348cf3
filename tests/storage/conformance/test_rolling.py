"""Conformance: the RollingLogBackend contract (ctxrelay.storage.interfaces.rolling)."""
from __future__ import annotations

import itertools
import threading
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.errors import InvalidSessionIdError
from ctxrelay.storage.interfaces.rolling import RollingLogBackend
from ctxrelay.storage.rolling import EntryTooLargeError
from protocol_view import through

STORE = "rolling"
RING_ENTRIES, RING_BYTES = 8, 600
_EXAMPLES = itertools.count()


@pytest.fixture
def rolling(backend):
    return through(RollingLogBackend,
                   backend.open(ring_entries=RING_ENTRIES, ring_bytes=RING_BYTES).rolling)


def test_entries_come_back_oldest_first_with_contiguous_sequence_numbers(rolling):
    assert (rolling.capacity_entries, rolling.capacity_bytes) == (RING_ENTRIES, RING_BYTES)
    assert [rolling.append("s", f"e{i}") for i in range(1, 6)] == [1, 2, 3, 4, 5]
    assert rolling.read_recent("s", 3) == ["e3", "e4", "e5"]
    assert rolling.read_recent("s", 100) == [f"e{i}" for i in range(1, 6)]
    assert rolling.read_recent("s", 0) == [] and rolling.read_recent("other", 5) == []
    assert [(r.seq, r.entry) for r in rolling.read_recent_with_seq("s", 2)] == \
        [(4, "e4"), (5, "e5")]


def test_a_dict_comes_back_equal_and_a_copy(rolling):
    entry = {"turn": 1, "text": "héllo", "tags": ["a"]}
    rolling.append("s", entry)
    [back] = rolling.read_recent("s", 1)
    assert back == entry
    back["tags"].append("changed")
    assert rolling.read_recent("s", 1) == [entry]


def test_the_oldest_entries_roll_off_by_count_and_by_bytes(rolling):
    for i in range(1, 13):
        rolling.append("s", f"e{i}")
    assert rolling.read_recent("s", 100) == [f"e{i}" for i in range(5, 13)]   # 8 kept
    rolling.append("b", "x" * 500)
    rolling.append("b", "y" * 200)                        # 700 bytes > 600: x rolls off
    assert rolling.read_recent("b", 10) == ["y" * 200]
    with pytest.raises(EntryTooLargeError):
        rolling.append("b", "z" * (RING_BYTES + 1))
    assert rolling.read_recent("b", 10) == ["y" * 200]    # nothing changed
    assert rolling.append("b", "next") == 3               # and no number was spent


def test_roll_off_and_drop(rolling):
    for i in range(1, 6):
        rolling.append("s", f"e{i}")
    assert rolling.roll_off("s", 2) == 2 and rolling.roll_off("nobody", 2) == 0
    assert rolling.read_recent("s", 10) == ["e3", "e4", "e5"]
    assert rolling.append("s", "e6") == 6                 # numbers never go back
    assert "s" in rolling.sessions()
    assert rolling.drop("s") is True and rolling.drop("s") is False
    assert "s" not in rolling.sessions() and rolling.read_recent("s", 5) == []
    with pytest.raises(InvalidSessionIdError):
        rolling.append(42, "x")                           # type: ignore[arg-type]


def test_concurrent_appends_get_distinct_numbers(rolling):
    seqs: list[int] = []
    lock = threading.Lock()

    def work(tag: str) -> None:
        for i in range(20):
            with rolling.exclusive():
                seq = rolling.append("s", f"{tag}{i}")
            with lock:
                seqs.append(seq)
    threads = [threading.Thread(target=work, args=(t,)) for t in "abc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 61))
    assert len(rolling.read_recent("s", 100)) == RING_ENTRIES


def test_reopen_keeps_the_rings_of_a_durable_back_end(backend, rolling):
    rolling.append("s", "kept")
    if not backend.durable:
        pytest.skip("the memory back end keeps nothing across opens, by contract")
    stores = backend.reopen()
    again = through(RollingLogBackend, stores.rolling)
    assert again.read_recent("s", 5) == ["kept"] and again.append("s", "more") == 2


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.one_of(st.tuples(st.just("append"), st.text(max_size=120)),
                              st.tuples(st.just("roll_off"), st.integers(0, 4)),
                              st.tuples(st.just("read"), st.integers(0, 12))),
                    max_size=30))
def test_the_ring_is_the_tail_of_what_was_appended(rolling, ops):
    session = f"h{next(_EXAMPLES)}"
    model: deque[tuple[int, str]] = deque()
    next_seq = 1
    for op, arg in ops:
        if op == "append":
            size = len(arg.encode("utf-8"))
            assert rolling.append(session, arg) == next_seq
            model.append((next_seq, arg))
            next_seq += 1
            while len(model) > RING_ENTRIES or \
                    sum(len(e.encode("utf-8")) for _, e in model) > RING_BYTES:
                model.popleft()
            assert size <= RING_BYTES
        elif op == "roll_off":
            dropped = min(arg, len(model))
            assert rolling.roll_off(session, arg) == dropped
            for _ in range(dropped):
                model.popleft()
        else:
            want = list(model)[-arg:] if arg else []
            assert [(r.seq, r.entry) for r in rolling.read_recent_with_seq(session, arg)] == want
