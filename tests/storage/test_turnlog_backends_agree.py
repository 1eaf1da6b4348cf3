"""The embedded and the PostgreSQL turn log derive the same threads (issue 18).

Both call one derivation (``storage/turnlog_derivation.py``); this replays
the thread benchmark's dev conversations (bench/data/threads/dev.txt: 24
conversations; the rules compare a turn with fewer threads than they hold) as one long
session into each back end, the embedded one derived in one sync and the
PostgreSQL one in uneven chunks, and compares every record: per-turn thread
ids, thread labels, members, word profiles and states, the candidate book.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ctxrelay.storage import open_stores
from ctxrelay.text.embed import get_embedder

DEV = Path(__file__).resolve().parents[2] / "bench" / "data" / "threads" / "dev.txt"


def dev_turns() -> list[tuple[str, str]]:
    turns = []
    for line in DEV.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\S+ ([UA]): (.*)$", line)
        if m and not line.startswith(("=== ", "@ ")):
            turns.append(("user" if m.group(1) == "U" else "assistant", m.group(2)))
    return turns


def derive(spec: str, turns: list[tuple[str, str]], chunks: list[int]) -> dict:
    embedder = get_embedder("hashing")
    stores = open_stores(spec)
    try:
        stores.transcript.create_session("s")
        log, done = stores.turnlog, 0
        for size in chunks:
            for role, text in turns[done:done + size]:
                stores.transcript.append("s", role, text)
            done += size
            log.sync(stores.transcript, "s", embedder)
        book = log.thread_book("s", embedder.thresholds)
        probe = "Back to the sourdough: how long should the bulk ferment take?"
        return {
            "turns": [log.derived("s", t).to_dict() for t in range(1, done + 1)],
            "threads": [t.to_dict() for t in log.threads("s", stores.transcript)],
            "records": {tid: e.record for tid, e in book.entries.items()},
            "order": list(book.order), "previous": book.previous,
            "features": book.features(probe, embedder.embed_batch([probe])[0]),
            "next": log.next_label("s", "How do I configure etcd?"),
            "active": log.active_thread("s"), "coverage": log.coverage("s"),
        }
    finally:
        while not stores.close():
            pass


def test_lmdb_and_postgres_derive_the_same_threads(tmp_path: Path, monkeypatch, pg_schema):
    from ctxrelay.text import threads
    monkeypatch.setattr(threads, "RECENT_THREADS", 8)    # so the bound is reached often
    turns = dev_turns()
    assert len(turns) > 300
    embedded = derive(str(tmp_path / "store"), turns, [len(turns)])
    spec, _ = pg_schema
    sizes, left = [], len(turns)
    for size in (1, 7, 130, 3, 64):                 # uneven, one over a sync chunk
        sizes.append(min(size, left))
        left -= sizes[-1]
    pg = derive(spec, turns, sizes + ([left] if left else []))
    assert len({t["label"] for t in embedded["threads"]}) == len(embedded["threads"]) > 8
    for key in embedded:
        assert pg[key] == embedded[key], key
