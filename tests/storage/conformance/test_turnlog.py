"""Conformance: the TurnLogStore contract (ctxrelay.storage.interfaces.turnlog)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.errors import InvalidArgumentError, StoreError, UnknownSessionError, UnknownThreadError
from ctxrelay.storage.interfaces.transcript import Transcript
from ctxrelay.storage.interfaces.turnlog import TurnLogStore
from ctxrelay.text.embed import get_embedder
from protocol_view import through

STORE = "turnlog"

CHAT = [("user", "How do I rotate the etcd client certificates?"),
        ("assistant", "Rotate the etcd certificates one member at a time."),
        ("user", "What is the restic retention for the backups?"),
        ("assistant", "Restic keeps 48 hourly and 30 daily snapshots."),
        ("user", "Back to the etcd certificates: which CA signs them?"),
        ("assistant", "The etcd certificates are signed by the internal CA.")]


@pytest.fixture
def parts(backend):
    stores = backend.open()
    transcript = through(Transcript, stores.transcript)
    transcript.create_session("s")
    for role, text in CHAT:
        transcript.append("s", role, text)
    return transcript, through(TurnLogStore, stores.turnlog)


@pytest.fixture
def embedder():
    return get_embedder("hashing")


def test_sync_derives_new_turns_once(parts, embedder):
    transcript, log = parts
    assert log.model_id("s") is None and log.coverage("s") == (0, 0, 0)
    assert log.sync(transcript, "s", embedder) == 6
    assert log.sync(transcript, "s", embedder) == 0                 # idempotent
    assert log.coverage("s") == (6, 6, 6) and log.model_id("s") == embedder.model_id
    transcript.append("s", "user", "And the restic snapshots, how many weekly?")
    assert log.sync(transcript, "s", embedder) == 1 and log.coverage("s") == (7, 7, 7)
    with pytest.raises(UnknownSessionError):
        log.sync(transcript, "nobody", embedder)


def test_per_turn_records(parts, embedder):
    transcript, log = parts
    log.sync(transcript, "s", embedder)
    first = log.derived("s", 1)
    assert first.turn_id == 1 and first.thread_id.startswith("T") and first.model_id == embedder.model_id
    assert log.derived("s", 99) is None
    vectors = log.vectors("s", [1, 2, 99])
    assert sorted(vectors) == [1, 2] and vectors[1].shape == (embedder.dim,)
    ids, matrix = log.dense_window("s")
    assert list(ids) == list(range(1, 7)) and matrix.shape == (6, embedder.dim)
    query = embedder.embed_batch(["etcd certificate authority"])[0]
    near = log.nearest("s", query, k=3, before=6)
    assert len(near) == 3 and all(t < 6 for t, _ in near)
    assert [s for _, s in near] == sorted((s for _, s in near), reverse=True)
    assert near[0][0] in (1, 2, 5)
    log.set_references("s", 5, [1, 2, 1])
    assert log.derived("s", 5).references == [1, 2]
    transcript.append("s", "user", "not derived yet")
    with pytest.raises(InvalidArgumentError):
        log.set_references("s", 7, [1])


def test_derived_many_reads_what_derived_reads_in_one_call(parts, embedder):
    transcript, log = parts
    assert log.derived_many("s", [1, 2]) == {}                       # not derived yet
    log.sync(transcript, "s", embedder)
    log.set_references("s", 4, [3])
    transcript.append("s", "user", "not derived yet")
    got = log.derived_many("s", [6, 4, 4, 1, 7, 99])
    assert list(got) == [1, 4, 6]                    # ascending, each once, only derived
    assert got == {t: log.derived("s", t) for t in (1, 4, 6)}
    assert got[4].references == [3]
    assert log.derived_many("s", []) == {} and log.derived_many("nobody", [1]) == {}
    assert log.derived_many("s", range(1, 7)) == {t: log.derived("s", t) for t in range(1, 7)}


def test_threads(parts, embedder):
    transcript, log = parts
    log.sync(transcript, "s", embedder)
    threads = log.threads("s")
    ids = [t.thread_id for t in threads]
    assert ids == [f"T{n}" for n in range(1, len(ids) + 1)]
    members = sorted(t for info in threads for t in info.turn_ids)
    assert members == list(range(1, 7))                           # every turn in one thread
    assert all(info.turn_ids == sorted(info.turn_ids) for info in threads)
    assert log.active_thread("s") == log.derived("s", 5).thread_id
    assert [t.thread_id for t in log.recent_threads("s", 2)] == ids[::-1][:2]
    tid = log.derived("s", 1).thread_id
    log.set_thread_state("s", tid, established=["internal CA"], open_questions=[])
    assert log.thread("s", tid, transcript).state.established == ["internal CA"]
    with pytest.raises(UnknownThreadError, match="no thread 'T999' in session 's'"):
        log.thread("s", "T999")
    with pytest.raises(UnknownThreadError):
        log.set_thread_state("s", "T999", established=[])
    with pytest.raises(UnknownThreadError):           # not a thread id at all
        log.thread("s", "zebra")


def test_another_embedder_needs_a_recompute(parts, embedder):
    transcript, log = parts
    log.sync(transcript, "s", embedder)

    class Other:
        model_id, dim = "other-embedder", embedder.dim
        thresholds = embedder.thresholds

        def embed_batch(self, texts):
            return np.ones((len(texts), embedder.dim), dtype=np.float32) / np.sqrt(embedder.dim)
    with pytest.raises(InvalidArgumentError, match="recompute"):
        log.sync(transcript, "s", Other())
    assert log.recompute(transcript, "s", Other(), progress=False) == 6
    assert log.model_id("s") == "other-embedder" and log.coverage("s") == (6, 6, 6)


def test_reopen_keeps_the_derived_records(backend, parts, embedder):
    transcript, log = parts
    log.sync(transcript, "s", embedder)
    threads = [t.thread_id for t in log.threads("s")]
    stores = backend.reopen()
    again = through(TurnLogStore, stores.turnlog)
    assert again.coverage("s") == (6, 6, 6)
    assert [t.thread_id for t in again.threads("s")] == threads
    assert again.sync(through(Transcript, stores.transcript), "s", embedder) == 0


def test_a_closed_turn_log_raises(parts, embedder):
    transcript, log = parts
    log.close()
    assert log.closed
    with pytest.raises(StoreError):
        log.sync(transcript, "s", embedder)


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(st.integers(0, 5), min_size=1, max_size=5))
def test_syncs_in_any_chunks_cover_every_turn_once(parts, embedder, chunks):
    transcript, log = parts
    log.sync(transcript, "s", embedder)
    for n in chunks:
        for i in range(n):
            transcript.append("s", "user" if i % 2 == 0 else "assistant",
                              f"etcd note {i} of {n} about member health")
        log.sync(transcript, "s", embedder)
        count = transcript.turn_count("s")
        assert log.coverage("s") == (count, count, count)
    members = sorted(t for info in log.threads("s") for t in info.turn_ids[-256:])
    assert set(members) <= set(range(1, transcript.turn_count("s") + 1))
    assert all(log.derived("s", t) is not None for t in range(1, transcript.turn_count("s") + 1))


def test_the_write_generation_moves_with_every_write(parts, embedder):
    transcript, log = parts
    before = log.write_generation()
    assert log.write_generation() == before                         # no write, no move
    log.sync(transcript, "s", embedder)
    synced = log.write_generation()
    assert synced != before
    thread_id = log.derived("s", 1).thread_id
    log.set_thread_state("s", thread_id, established=["etcd certificates rotate per member"])
    assert log.write_generation() not in (before, synced)


# The spec's example (CRP-SPEC-028 §3.3), with answers: the thread rules place each
# user turn, replies stay in their turn's thread, labels name the topic.
SPEC_CHAT = [
    ("user", "How do I configure etcd for a three node cluster?"),
    ("assistant", "Give each member a unique --name and list the three peer URLs."),
    ("user", "Actually, what's a good backup strategy for our Postgres database?"),
    ("assistant", "Nightly base backups with pg_basebackup and continuous WAL archiving."),
    ("user", "Back to etcd - what about TLS between the peers?"),
    ("assistant", "Issue a peer certificate per member and set --peer-cert-file."),
    ("user", "What do you mean by peer certificates? Explain again."),
    ("assistant", "Peer certificates authenticate etcd members to each other."),
]


@pytest.fixture
def spec_parts(backend):
    stores = backend.open()
    transcript = through(Transcript, stores.transcript)
    transcript.create_session("spec")
    for role, text in SPEC_CHAT:
        transcript.append("spec", role, text)
    return transcript, through(TurnLogStore, stores.turnlog)


def test_the_thread_rules_place_turns_and_labels_name_topics(spec_parts, embedder):
    transcript, log = spec_parts
    log.sync(transcript, "spec", embedder)
    placed = [log.derived("spec", t).thread_id for t in range(1, len(SPEC_CHAT) + 1)]
    assert placed == ["T1", "T1", "T2", "T2", "T1", "T1", "T1", "T1"]   # etcd resumed
    assert [(t.thread_id, t.label) for t in log.threads("spec")] == \
        [("T1", "etcd-config"), ("T2", "postgres-backup")]
    assert log.active_thread("spec") == "T1"
    state = log.thread("spec", "T1", transcript).state
    assert state.thread_id == "T1" and state.last_active_turn == 8


def test_thread_book_and_next_label(spec_parts, embedder):
    transcript, log = spec_parts
    log.sync(transcript, "spec", embedder)
    book = log.thread_book("spec", embedder.thresholds)
    assert book.order == ["T1", "T2"] and book.previous == "T1"     # most recently active first
    assert [t["thread"] for t in book.features("etcd peers", embedder.embed_batch(
        ["etcd peers"])[0])] == ["T1", "T2"]
    vec = embedder.embed_batch(["Returning to the Postgres backups: how long to keep WAL?"])[0]
    placed = book.place("Returning to the Postgres backups: how long to keep WAL?", vec)
    assert placed.thread_id == "T2" and placed.action == "resume"
    # A new thread's label is unique in the session; reading it writes nothing.
    generation = log.write_generation()
    assert log.next_label("spec", "How do I configure etcd on a laptop?") == \
        ("T3", "etcd-config-2")
    assert log.next_label("spec", "Any sourdough starter tips?") == ("T3", "sourdough-starter")
    assert log.write_generation() == generation
    assert log.next_label("nobody", "etcd config") == ("T1", "etcd-config")
    # Labels stay unique when a recompute derives the session again.
    log.recompute(transcript, "spec", embedder, progress=False)
    assert [t.label for t in log.threads("spec")] == ["etcd-config", "postgres-backup"]


def test_set_thread_state_replaces_only_the_fields_given(spec_parts, embedder):
    transcript, log = spec_parts
    log.sync(transcript, "spec", embedder)
    derived = log.thread("spec", "T1", transcript).state
    log.set_thread_state("spec", "T1", established=["three members"])
    log.set_thread_state("spec", "T1", user_constraints=["never expose 2379"])
    state = log.thread("spec", "T1", transcript).state
    assert state.established == ["three members"]
    assert state.user_constraints == ["never expose 2379"]
    assert state.open_questions == derived.open_questions              # not given: as derived


def test_inputs_are_the_hand_set_states_and_references(spec_parts, embedder):
    """What ``ctxrelay migrate`` copies of a turn log (the rest is derived again)."""
    transcript, log = spec_parts
    log.sync(transcript, "spec", embedder)
    assert log.inputs("spec") == {"thread_states": {}, "references": {}}
    log.set_thread_state("spec", "T2", open_questions=["how long to keep WAL?"],
                         established=[])
    log.set_references("spec", 5, [1, 2, 2])
    assert log.inputs("spec") == {
        "thread_states": {"T2": {"established": [], "open_questions": ["how long to keep WAL?"]}},
        "references": {5: [1, 2]}}
    assert log.inputs("nobody") == {"thread_states": {}, "references": {}}


def test_a_sync_counts_only_the_turns_it_derived(backend, embedder, monkeypatch):
    """A sync that read the progress before another sync derived the same turns
    (another thread or process) derives none of them again, and says so: it returns
    0, not the number of turns it read (the embedded store once returned 6 here)."""
    stores = backend.open()
    transcript = stores.transcript
    transcript.create_session("s")
    for role, text in CHAT:
        transcript.append("s", role, text)
    log = stores.turnlog
    stale = log._sync_start(transcript, "s")          # what the slower sync had read
    assert log.sync(transcript, "s", embedder) == len(CHAT)
    monkeypatch.setattr(log, "_sync_start", lambda *_: stale)
    assert log.sync(transcript, "s", embedder) == 0
    monkeypatch.undo()
    assert log.sync(transcript, "s", embedder) == 0
    assert log.model_id("s") == embedder.model_id
