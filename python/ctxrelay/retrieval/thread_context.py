"""The topic thread of a new message: where the thread rules place it, and a
resumed thread's dormant turns and summary as candidates.
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


def _thread_context(stores: Stores, session_id: str, message: Any, query_text: str,
                    window: list[Turn], history_end: int, units: dict[str, Unit],
                    model: str | tok.Tokenizer, options: dict[str, Any],
                    scratch: Any) -> tuple[dict[str, Any], Any]:
    """Topic thread of the new message, its similarity, and a resumed thread's turns.

    The turn log is brought up to date first (only turns added since the last
    call are embedded).  The thread rules then place the new message exactly
    as the turn log will place it once stored (``ThreadBook.place``: continue,
    resume, join or new); when the rules say to restore an earlier thread it
    returns to, that thread's dormant turns come back as candidates (kind
    ``thread``) with its Active Thread Summary.
    """
    import time

    from ctxrelay.text.embed import get_embedder
    embedder = get_embedder(options.get("embedder") or None)
    store, log = stores.transcript, stores.turnlog
    t0 = time.perf_counter()
    if history_end > 0:                   # else the session is not stored yet
        # Nothing written to either store since the last sync with this embedder:
        # nothing to derive (the sync would only read its progress to learn that).
        _kept(stores, ("sync", session_id, embedder.model_id),
              (store.write_generation(), log.write_generation()),
              lambda: log.sync(store, session_id, embedder))
    sync_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    vec = embedder.embed_batch([derived_text(query_text or "")])[0]
    embed_ms = (time.perf_counter() - t0) * 1000
    out: dict[str, Any] = {"embedder": embedder.model_id, "embed_ms": round(embed_ms, 3),
                           "turnlog_sync_ms": round(sync_ms, 3),
                           "topic_threshold": float(embedder.thresholds["topic_same"]),
                           "active_thread": "", "thread_label": "", "thread_resumed": False}
    if message is None:                   # the message is stored: the turn log placed it
        derived = log.derived(session_id, history_end)
        if derived is not None and derived.thread_id:
            out.update(active_thread=derived.thread_id,
                       thread_label=log.thread(session_id, derived.thread_id).label)
        return out, (log, vec)
    # The candidate threads change only when the turn log is written.
    book = _kept(stores, ("thread_book", session_id, embedder.model_id),
                 log.write_generation(),
                 lambda: log.thread_book(session_id, embedder.thresholds))
    placed = book.place(query_text, vec)
    out.update(thread_action=placed.action, thread_rule=placed.rule,
               topic_similarity=placed.similarity)
    if placed.action == "new":
        tid, label = log.next_label(session_id, query_text)
        out.update(active_thread=tid, thread_label=label)
        return out, (log, vec)
    info = book.entries[placed.thread_id].record
    out.update(active_thread=placed.thread_id, thread_label=info["label"],
               thread_resumed=placed.resumed)
    if placed.restore:
        in_window = {t.turn_id for t in window}
        dormant = [t for t in info["turn_ids"] if t not in in_window and t <= history_end]
        wanted = [tid for tid in dormant[-_DORMANT_MAX:] if f"t{tid}" not in units]
        for turn in store.turns(session_id, wanted):
            if turn.role == "tool" or _tool_call_ids(turn):
                continue                      # pairs come back through retrieval, whole
            _add_turn(units, stores, turn, "thread", scratch, model)
        full = log.thread(session_id, placed.thread_id, store)
        text = full.state.summary(full.label)
        _add(units, Unit(id="thread_summary", kind="thread_summary", turn_ids=[],
                         variants={"verbatim": {"role": "user", "name": "thread_state",
                                                "content": text}},
                         features={"thread_id": placed.thread_id}), model)
    return out, (log, vec)
