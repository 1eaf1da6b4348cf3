"""Conformance: the WarmArtifacts contract (ctxrelay.storage.interfaces.warm)."""
from __future__ import annotations

import itertools
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.errors import (ArtifactKeyConflictError, InvalidArtifactError, InvalidRangeError,
                             StoreError, UnknownArtifactError, UnknownSessionError,
                             UnknownTurnError)
from ctxrelay.storage.interfaces.transcript import Transcript
from ctxrelay.storage.interfaces.warm import WarmArtifacts
from protocol_view import through

STORE = "warm"
_EXAMPLES = itertools.count()


@pytest.fixture
def parts(backend):
    stores = backend.open()
    transcript = through(Transcript, stores.transcript)
    transcript.create_session("s")
    for i in range(1, 21):
        transcript.append("s", "user", f"turn {i}")
    return transcript, through(WarmArtifacts, stores.warm)


@pytest.fixture
def warm(parts):
    return parts[1]


def test_each_publish_of_a_range_is_the_next_version(warm):
    v1 = warm.publish("s", 1, 4, "First summary.", decisions=["use the internal CA"],
                      facts=["etcd has 3 members"], producer="test", metadata={"n": 1})
    v2 = warm.publish("s", 1, 4, "Second summary.")
    assert (v1.version, v2.version) == (1, 2)
    assert (v1.artifact_id, v1.start, v1.end) == ("s:1-4", 1, 4)
    assert v1.decisions == ("use the internal CA",) and v1.metadata == {"n": 1}
    assert warm.get("s", 1, 4) == v2 and warm.get("s", 1, 4, version=1) == v1
    assert warm.versions("s", 1, 4) == [v1, v2]
    assert warm.versions("s", 5, 6) == []
    with pytest.raises(UnknownArtifactError):
        warm.get("s", 1, 4, version=3)
    with pytest.raises(UnknownArtifactError):
        warm.get("s", 2, 4)


def test_latest_and_covering_are_ordered_by_start_then_end(warm):
    for start, end in [(5, 8), (1, 10), (1, 4), (9, 12)]:
        warm.publish("s", start, end, f"turns {start}-{end}.")
    warm.publish("s", 1, 4, "turns 1-4 again.")
    assert [(a.start, a.end, a.version) for a in warm.latest("s")] == \
        [(1, 4, 2), (1, 10, 1), (5, 8, 1), (9, 12, 1)]
    assert [(a.start, a.end) for a in warm.covering("s", 9)] == [(1, 10), (9, 12)]
    assert warm.latest("other") == [] and warm.covering("s", 13) == []


def test_a_keyed_publish_is_made_once(warm):
    first = warm.publish("s", 1, 2, "Summary.", key="k")
    assert warm.publish("s", 1, 2, "Summary.", key="k") == first      # a retry
    assert warm.versions("s", 1, 2) == [first]
    with pytest.raises(ArtifactKeyConflictError):
        warm.publish("s", 1, 2, "Another summary.", key="k")
    with pytest.raises(ArtifactKeyConflictError):
        warm.publish("s", 1, 3, "Summary.", key="k")
    assert warm.publish("s", 1, 2, "Another summary.").version == 2     # no key: a version


def test_bad_publishes_write_nothing(parts):
    transcript, warm = parts
    for call, error in [(lambda: warm.publish("s", 3, 2, "x."), InvalidRangeError),
                        (lambda: warm.publish("s", 0, 2, "x."), InvalidRangeError),
                        (lambda: warm.publish("s", 1, 2, "  "), InvalidArtifactError),
                        (lambda: warm.publish("s", 1, 2, "x.", facts="one"), InvalidArtifactError),
                        (lambda: warm.publish("s", 1, 2, "x.", producer=""), InvalidArtifactError),
                        (lambda: warm.publish("nobody", 1, 2, "x.", transcript=transcript),
                         UnknownSessionError),
                        (lambda: warm.publish("s", 1, 21, "x.", transcript=transcript),
                         UnknownTurnError)]:
        with pytest.raises(error):
            call()
    assert warm.latest("s") == [] and warm.latest("nobody") == []
    assert warm.publish("s", 1, 20, "x.", transcript=transcript).version == 1


def test_concurrent_publishers_never_share_a_version(warm):
    errors: list[BaseException] = []

    def publish(n: int) -> None:
        try:
            for i in range(10):
                warm.publish("s", 1, 5, f"summary {n}-{i}.")
        except BaseException as exc:     # reported below
            errors.append(exc)
    threads = [threading.Thread(target=publish, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [a.version for a in warm.versions("s", 1, 5)] == list(range(1, 41))
    assert warm.get("s", 1, 5).version == 40


def test_derived_records_agree_and_reopen_keeps_every_version(backend, warm):
    a = warm.publish("s", 1, 2, "One.")
    b = warm.publish("s", 1, 2, "Two.", key="k")
    assert warm.check() == () and warm.check(repair=True) == ()
    again = through(WarmArtifacts, backend.reopen().warm)
    assert again.versions("s", 1, 2) == [a, b]
    assert again.publish("s", 1, 2, "Two.", key="k") == b
    again.close()
    assert again.closed
    with pytest.raises(StoreError):
        again.latest("s")


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranges=st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), min_size=1, max_size=12))
def test_versions_count_the_publishes_of_each_range(warm, ranges):
    session = f"h{next(_EXAMPLES)}"                     # a fresh session per example
    counts: dict[tuple[int, int], int] = {}
    for start, length in ranges:
        end = start + length
        art = warm.publish(session, start, end, f"summary of {start}-{end}.")
        counts[(start, end)] = counts.get((start, end), 0) + 1
        assert art.version == counts[(start, end)]
    assert [(a.start, a.end, a.version) for a in warm.latest(session)] == \
        [(s, e, n) for (s, e), n in sorted(counts.items())]


def test_copies_restore_as_they_were_and_keys_keep_working(warm):
    """What ``ctxrelay migrate`` relies on: ``sessions`` finds every session with
    artifacts and ``restore`` writes copies whole (versions, times, keys)."""
    import dataclasses

    from ctxrelay.errors import SessionExistsError
    made = [warm.publish("s", 1, 4, "First.", facts=["f"], metadata={"n": 1}, key="k1"),
            warm.publish("s", 1, 4, "Second.", producer="summariser"),
            warm.publish("s", 5, 9, "Later turns.", entities=["etcd"], key="k2")]
    assert warm.sessions() == ["s"]
    copies = [dataclasses.replace(a, session_id="copy", artifact_id=f"copy:{a.start}-{a.end}")
              for a in warm.versions("s", 1, 4) + warm.versions("s", 5, 9)]
    assert warm.restore(copies) == 3
    assert warm.sessions() == ["copy", "s"]
    assert warm.versions("copy", 1, 4) + warm.versions("copy", 5, 9) == copies
    assert [a.created for a in copies] == [a.created for a in made]   # times kept
    assert warm.latest("copy") == [copies[1], copies[2]]
    # a retry of a keyed publish finds the copied artifact instead of adding one
    assert warm.publish("copy", 1, 4, "First.", facts=["f"], metadata={"n": 1},
                        key="k1") == copies[0]
    with pytest.raises(ArtifactKeyConflictError):
        warm.publish("copy", 5, 9, "Other.", key="k2")
    assert warm.publish("copy", 1, 4, "Third.").version == 3
    # a clash refuses the whole batch before writing
    fresh = dataclasses.replace(copies[2], session_id="other", artifact_id="other:5-9")
    with pytest.raises(SessionExistsError):
        warm.restore([fresh, copies[0]])
    assert warm.sessions() == ["copy", "s"]
    bad = dataclasses.replace(fresh, summary="not what was hashed")
    with pytest.raises(InvalidArtifactError):
        warm.restore([bad])
    assert warm.versions("other", 5, 9) == []
