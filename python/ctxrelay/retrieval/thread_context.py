"""The topic thread of a new message: which recent thread it joins, and a resumed
thread's dormant turns and summary as candidates.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.retrieval.pricing import _add, _add_turn, _tool_call_ids
from ctxrelay.retrieval.units import Unit
from ctxrelay.retrieval.window import _kept
from ctxrelay.storage.stores import Stores
from ctxrelay.text import tokens as tok
from ctxrelay.text.bounds import derived_text
from ctxrelay.types import Turn

_DORMANT_MAX = 12             # dormant turns of a resumed thread offered back
_THREADS_CONSIDERED = 32      # recent threads a new message may rejoin
_NEIGHBOURS = 12              # a thread is compared through its latest user turns

def _thread_context(stores: Stores, session_id: str, message: Any, query_text: str,
                    window: list[Turn], history_end: int, units: dict[str, Unit],
                    model: str | tok.Tokenizer, options: dict[str, Any],
                    scratch: Any) -> tuple[dict[str, Any], Any]:
    """Topic thread of the new message, its similarity, and a resumed thread's turns.

    The turn log is brought up to date first (only turns added since the last
    call are embedded).  The new message joins the thread whose latest user
    turns are most similar above the embedder's ``thread_join`` threshold; if
    that thread is not the one in the window, its dormant turns come back as
    candidates (kind ``thread``) and its Active Thread Summary is offered.
    """
    import time

    from ctxrelay.text.embed import get_embedder
    embedder = get_embedder(options.get("embedder") or None)
    store, log = stores.transcript, stores.turnlog
    t0 = time.perf_counter()
    # Nothing written to either store since the last sync with this embedder:
    # nothing to derive (the sync would only read its progress to learn that).
    _kept(stores, ("sync", session_id, embedder.model_id),
          (store.write_generation(), log.write_generation()),
          lambda: log.sync(store, session_id, embedder))
    sync_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    vec = embedder.embed_batch([derived_text(query_text or "")])[0]
    embed_ms = (time.perf_counter() - t0) * 1000
    # Bounded: the most recent threads only, so the cost follows the window,
    # not the number of topics a very long session has had.
    threads, previous = _kept(stores, ("threads", session_id), log.write_generation(),
                              lambda: _recent_threads(log, session_id))
    best, best_sim = None, 0.0
    for info, vecs in threads:
        sim = max(float(v @ vec) for v in vecs)
        if sim > best_sim:
            best, best_sim = info, sim
    join = float(embedder.thresholds["thread_join"])
    out: dict[str, Any] = {"embedder": embedder.model_id, "embed_ms": round(embed_ms, 3),
                           "turnlog_sync_ms": round(sync_ms, 3),
                           "topic_similarity": round(best_sim, 4),
                           "topic_threshold": float(embedder.thresholds["topic_same"]),
                           "active_thread": "", "thread_label": "", "thread_resumed": False}
    if best is None or best_sim < join:
        return out, (log, vec)
    out.update(active_thread=best.thread_id, thread_label=best.label)
    in_window = {t.turn_id for t in window}
    dormant = [t for t in best.turn_ids if t not in in_window and t <= history_end]
    resumed = best.thread_id != previous and bool(dormant)
    out["thread_resumed"] = resumed
    if resumed:
        wanted = [tid for tid in dormant[-_DORMANT_MAX:] if f"t{tid}" not in units]
        for turn in store.turns(session_id, wanted):
            if turn.role == "tool" or _tool_call_ids(turn):
                continue                      # pairs come back through retrieval, whole
            _add_turn(units, stores, turn, "thread", scratch, model)
        full = log.thread(session_id, best.thread_id, store)
        text = full.state.summary(full.label)
        _add(units, Unit(id="thread_summary", kind="thread_summary", turn_ids=[],
                         variants={"verbatim": {"role": "user", "name": "thread_state",
                                                "content": text}},
                         features={"thread_id": best.thread_id}), model)
    return out, (log, vec)


def _recent_threads(log: Any, session_id: str) -> tuple[list[tuple[Any, list[Any]]], Any]:
    """The recent threads a message may join, each with the vectors of its latest
    user turns (threads without any left out), and the active thread."""
    out = []
    for info in log.recent_threads(session_id, _THREADS_CONSIDERED):
        vecs = log.vectors(session_id, info.user_turns or info.turn_ids[-_NEIGHBOURS:])
        if vecs:
            out.append((info, list(vecs.values())))
    return out, log.active_thread(session_id)
