"""Child process for tests/storage/lmdb/test_lmdb_transcript_durability.py.

    python _transcript_worker.py append STORE SESSION LIMIT
        append turns forever (up to LIMIT), printing "TURN_ID I SHA256" for each
        acknowledged turn; the parent kills it with SIGKILL mid-stream.
    python _transcript_worker.py import STORE JSONL LIMIT
        import the file again and again as imp1, imp2, ...; prints "imported ID".
    python _transcript_worker.py writer STORE SESSION WRITER N SEED MAP_SIZE GO
        N keyed appends, ~10% retried with the same key; prints a JSON summary.
    python _transcript_worker.py reader STORE SESSION SEED MAP_SIZE GO STOP
        reads random ranges until STOP exists, checking every record.

Writers and readers print "ready" and wait for the file GO, so they all start
together.  Failures exit non-zero with the reason on stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time

from ctxrelay.storage.lmdb.transcript import TranscriptStore


def append_content(i: int) -> str:
    """Turn i of the kill test; the parent recomputes it to check intactness."""
    return f"turn {i} token{i}x " + " ".join(f"filler{(i * 7 + j) % 97}" for j in range(30))


def writer_content(writer: int, seq: int) -> str:
    return f"writer {writer} seq {seq} w{writer}s{seq}tok"


def wait_for(path: str) -> None:
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit("gave up waiting for the start signal")
        time.sleep(0.005)


def run_append(store_path: str, session: str, limit: str) -> None:
    store = TranscriptStore(store_path)
    for i in range(1, int(limit) + 1):
        content = append_content(i)
        turn_id = store.append(session, ("user", "assistant")[i % 2], content, key=f"a{i}")
        digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
        print(turn_id, i, digest, flush=True)


def run_import(store_path: str, source: str, limit: str) -> None:
    store = TranscriptStore(store_path)
    with open(source, encoding="utf-8") as handle:
        text = handle.read()
    for n in range(1, int(limit) + 1):
        print("imported", store.import_jsonl(text, session_id=f"imp{n}"), flush=True)


def run_writer(store_path: str, session: str, writer: str, count: str, seed: str,
               map_size: str, go: str) -> None:
    wid, rng = int(writer), random.Random(int(seed))
    store = TranscriptStore(store_path, map_size=int(map_size))
    wait_for(go)
    ids: list[int] = []
    retries = 0
    for seq in range(int(count)):
        ids.append(store.append(session, "user", writer_content(wid, seq),
                                metadata={"writer": wid, "seq": seq}, key=f"w{wid}-{seq}"))
        if rng.random() < 0.1:           # a retry of this or an earlier append
            again = rng.choice([seq, rng.randrange(seq + 1)])
            got = store.append(session, "user", writer_content(wid, again),
                               metadata={"writer": wid, "seq": again}, key=f"w{wid}-{again}")
            if got != ids[again]:
                sys.exit(f"retry of seq {again} returned turn {got}, not {ids[again]}")
            retries += 1
    print(json.dumps({"writer": wid, "ids": ids, "retries": retries}), flush=True)


def check_turn(turn) -> None:
    writer, seq = turn.metadata["writer"], turn.metadata["seq"]
    if (turn.content, turn.key) != (writer_content(writer, seq), f"w{writer}-{seq}"):
        sys.exit(f"turn {turn.turn_id} is damaged: {turn!r}")


def run_reader(store_path: str, session: str, seed: str, map_size: str, go: str,
               stop: str) -> None:
    rng = random.Random(int(seed))
    store = TranscriptStore(store_path, map_size=int(map_size))
    wait_for(go)
    reads = seen = 0
    while not os.path.exists(stop):
        count = store.turn_count(session)
        if count < seen:
            sys.exit(f"turn count went back from {seen} to {count}")
        seen = count
        if count:
            start = rng.randint(1, count)
            end = min(count, start + rng.randint(0, 60))
            turns = store.history(session, start, end)
            if [t.turn_id for t in turns] != list(range(start, end + 1)):
                sys.exit(f"history({start}, {end}) returned ids {[t.turn_id for t in turns]}")
            tail = store.last(session, 5)
            tail_ids = [t.turn_id for t in tail]
            contiguous = tail_ids == list(range(tail_ids[0], tail_ids[0] + len(tail)))
            if not contiguous or tail_ids[-1] < count:
                sys.exit(f"last(5) returned ids {tail_ids} after count {count}")
            for turn in turns + tail:
                check_turn(turn)
            reads += 1
        time.sleep(0.001)
    print(json.dumps({"reads": reads, "seen": seen}), flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"append": run_append, "import": run_import, "writer": run_writer,
     "reader": run_reader}[mode](*args)
