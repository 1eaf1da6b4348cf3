"""Child process for tests/runtime/test_crash_safety.py: work until killed with SIGKILL.

    python _crash_worker.py managed STORE N
        N keyed managed turns (echo provider), each acknowledged as
        "ack KEY USER_TURN ASSISTANT_TURN"; then one more keyed turn whose
        provider prints "in-provider KEY" and blocks: the user turn is stored,
        the reply never comes.
    python _crash_worker.py warm STORE SESSION LIMIT
        publish artifacts for ranges 1..i of SESSION, printing
        "ack I START END VERSION CONTENT_HASH" after each returned publish.
    python _crash_worker.py ckf STORE LIMIT
        ingest documents one by one (rebuilding the ANN index after every
        third), printing "ack I FACT_ID..." after each returned ingest.
    python _crash_worker.py scratch STORE SESSION LIMIT
        record tool outputs with keys through the Runtime, printing
        "ack I SCRATCH_ID CALL_TURN TOOL_TURN SHA256".

With CRASH_AT=<point> in the environment the worker prints "at <point>" and
blocks when it reaches that point, so the parent kills it at a known place:
``hnsw-saved`` (the ANN file replaced, its LMDB transaction still open),
``blob-written`` (a scratch blob durable, its metadata not committed),
``call-in-transaction`` (a tool call turn written in the transaction that is to
store its result turn too, before that transaction commits).
"""
from __future__ import annotations

import hashlib
import os
import sys
import time

CRASH_AT = os.environ.get("CRASH_AT", "")


def block_at(point: str) -> None:
    if CRASH_AT == point:
        print("at", point, flush=True)
        time.sleep(600)
        sys.exit("the parent did not kill the worker")


def managed_message(i: int) -> str:
    return f"question {i} about etcd member{i} defrag"


def doc_text(i: int) -> str:
    """Document i of the CKF test: its own rare word, so a term search finds it."""
    return (f"Runbook {i}: the service uniqword{i}x restarts after maintenance. "
            f"Check the dashboard panel{i} and page the owner of shard {i}.")


def tool_raw(i: int) -> str:
    return "id,status\n" + "\n".join(f"{i * 100 + r},row{i}x{r}" for r in range(40))


def run_managed(store: str, count: str) -> None:
    from ctxrelay import Runtime, providers

    def stall(messages, options):
        print("in-provider", options.get("key", ""), flush=True)
        time.sleep(600)
        sys.exit("the parent did not kill the worker")

    providers.register_provider("stall", stall, replace=True)
    rt = Runtime(store)
    if not any(s.session_id == "m" for s in rt.sessions()):
        rt.create_session("m")
    policy = dict(embedder="hashing", max_context_tokens=4000, output_reserve=300)
    for i in range(int(count)):
        r = rt.managed_turn("m", managed_message(i), key=f"k{i}", **policy)
        print("ack", f"k{i}", r.user_turn, r.assistant_turn, flush=True)
    rt.managed_turn("m", managed_message(int(count)), key=f"k{count}", provider="stall",
                    **policy)


def run_warm(store: str, session: str, limit: str) -> None:
    from ctxrelay.storage.lmdb.transcript import TranscriptStore
    from ctxrelay.storage.lmdb.warm import WarmStore
    transcript = TranscriptStore(store)
    warm = WarmStore(os.path.join(store, "warm"), transcript=transcript)
    n = transcript.turn_count(session)
    for i in range(1, int(limit) + 1):
        end = 1 + i % n
        art = warm.publish(session, 1, end, f"summary {i} of turns 1..{end} wordw{i}x",
                           decisions=[f"decision {i}"], key=f"p{i}")
        print("ack", i, art.start, art.end, art.version, art.content_hash, flush=True)


def run_ckf(store: str, limit: str) -> None:
    from ctxrelay.knowledge import graph as ckf_graph
    from ctxrelay.knowledge.fabric import FactStore

    real_save = ckf_graph.VectorIndex.save

    def save(self, path):
        real_save(self, path)
        block_at("hnsw-saved")

    ckf_graph.VectorIndex.save = save
    facts = FactStore(os.path.join(store, "ckf"), embedder="hashing", recluster_every=None)
    for i in range(int(limit)):
        report = facts.ingest({"text": doc_text(i), "title": f"doc{i}", "uri": f"mem://doc{i}"},
                              progress=False)
        if i % 3 == 2:
            facts.rebuild_index()
        print("ack", i, *report.fact_ids, flush=True)


def run_scratch(store: str, session: str, limit: str) -> None:
    from ctxrelay import Runtime
    from ctxrelay.storage.lmdb import transcript
    from ctxrelay.storage.lmdb.scratch import blobs

    real_write_blob = blobs.BlobDir.write
    real_append_txn = transcript.TranscriptStore._append_txn

    def write_blob(self, session_key, scratch_id, data):
        path = real_write_blob(self, session_key, scratch_id, data)
        block_at("blob-written")
        return path

    def append_txn(self, txn, session, pending, tokenizer):
        turn_id = real_append_txn(self, txn, session, pending, tokenizer)
        if (pending.key or "").endswith(":call"):
            block_at("call-in-transaction")
        return turn_id

    blobs.BlobDir.write = write_blob
    transcript.TranscriptStore._append_txn = append_txn
    rt = Runtime(store)
    for i in range(int(limit)):
        raw = tool_raw(i)
        sid = rt.record_tool_output(session, "sql", {"q": i}, raw, key=f"t{i}")
        call_turn = rt.turn_for_key(session, f"t{i}:call")
        tool_turn = rt.turn_for_key(session, f"t{i}:result")
        print("ack", i, sid, call_turn, tool_turn,
              hashlib.sha256(raw.encode()).hexdigest(), flush=True)


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"managed": run_managed, "warm": run_warm, "ckf": run_ckf,
     "scratch": run_scratch}[mode](*args)
