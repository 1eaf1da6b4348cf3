"""The topic thread of a new message: where the thread rules place it, and a
resumed thread's dormant turns and summary as candidates.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.retrieval.pricing import add_turn, add_unit, priced_unit
from ctxrelay.retrieval.units import Unit, tool_call_ids
from ctxrelay.retrieval.window import kept_or_read
from ctxrelay.storage.stores import Stores
from ctxrelay.text import tokens as tok
from ctxrelay.text.bounds import derived_text
from ctxrelay.types import Turn

_DORMANT_MAX = 12             # dormant turns of a resumed thread offered back


def add_thread_context(stores: Stores, session_id: str, message: Any, query_text: str,
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
        kept_or_read(stores, ("sync", session_id, embedder.model_id),
                     (store.write_generation(), log.write_generation()),
                     lambda: log.sync(store, session_id, embedder))
    sync_ms = (time.perf_counter() - t0) * 1000
    out: dict[str, Any] = {"embedder": embedder.model_id, "embed_ms": 0.0,
                           "turnlog_sync_ms": round(sync_ms, 3),
                           "topic_threshold": float(embedder.thresholds["topic_same"]),
                           "active_thread": "", "thread_label": "", "thread_resumed": False}
    if history_end == 0:
        # Nothing stored yet: the message starts the session's first thread, and
        # there is nothing to compare it with or recall (so nothing to embed).
        tid, label = log.next_label(session_id, query_text)
        first = _first_placement(query_text, embedder.thresholds)
        out.update(thread_action=first["action"], thread_rule=first["rule"],
                   active_thread=tid, thread_label=label)
        return out, None
    t0 = time.perf_counter()
    vec = embedder.embed_batch([derived_text(query_text or "")])[0]
    out["embed_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    if message is None:                   # the message is stored: the turn log placed it
        derived = log.derived(session_id, history_end)
        if derived is not None and derived.thread_id:
            out.update(active_thread=derived.thread_id,
                       thread_label=log.thread(session_id, derived.thread_id).label)
        return out, (log, vec)
    # The candidate threads change only when the turn log is written.
    book = kept_or_read(stores, ("thread_book", session_id, embedder.model_id),
                        log.write_generation(),
                        lambda: log.thread_book(session_id, embedder.thresholds))
    placed = book.place(query_text, vec)
    out.update(thread_action=placed.action, thread_rule=placed.rule,
               thread_similarity=placed.similarity)
    if placed.action == "new":
        tid, label = log.next_label(session_id, query_text)
        out.update(active_thread=tid, thread_label=label)
        return out, (log, vec)
    info = book.entries[placed.thread_id].record
    out["topic_similarity"] = _topic_similarity(stores, log, session_id, book, vec)
    out.update(active_thread=placed.thread_id, thread_label=info["label"],
               thread_resumed=placed.resumed)
    if placed.restore:
        in_window = {t.turn_id for t in window}
        dormant = [t for t in info["turn_ids"] if t not in in_window and t <= history_end]
        wanted = [tid for tid in dormant[-_DORMANT_MAX:] if f"t{tid}" not in units]
        # A plain turn offered before is priced in the memo (it holds plain turns
        # only): those need no read, the others are read in one go.
        ready = {tid: unit for tid in wanted
                 if (unit := priced_unit(stores, session_id, tid, "thread")) is not None}
        rest = [tid for tid in wanted if tid not in ready]
        read = {t.turn_id: t for t in store.turns(session_id, rest)} if rest else {}
        for tid in wanted:
            unit = ready.get(tid)
            if unit is not None:
                units[unit.id] = unit
                continue
            turn = read[tid]
            if turn.role == "tool" or tool_call_ids(turn):
                continue                      # pairs come back through retrieval, whole
            add_turn(units, stores, turn, "thread", scratch, model)
        full = log.thread(session_id, placed.thread_id, store)
        text = full.state.summary(full.label)
        add_unit(units, Unit(id="thread_summary", kind="thread_summary", turn_ids=[],
                             variants={"verbatim": {"role": "user", "name": "thread_state",
                                                    "content": text}},
                         features={"thread_id": placed.thread_id}), model)
    return out, (log, vec)


def _topic_similarity(stores: Stores, log: Any, session_id: str, book: Any,
                      vec: Any) -> float | None:
    """The intent's topic similarity (SPEC-028 §5.2: the message against the active
    thread's turns): the thread the conversation is in when the message comes (a
    message the rules move to an earlier thread is a change of topic from it), read
    through what the user asked there, not the replies, whose details resemble many
    a question.  None without an active thread."""
    entry = book.entries.get(book.previous or "")
    if entry is None:
        return None
    user_turns = tuple(entry.record.get("user_turns") or ())
    # The thread's user-turn vectors change only with the turn log: kept under its
    # generation (the book above is), so a message reads none of them again.
    vecs = kept_or_read(stores, ("topic_vectors", session_id, book.previous, user_turns),
                        log.write_generation(),
                        lambda: list(log.vectors(session_id, list(user_turns)).values()))
    if not vecs:
        return None
    return round(max(float(v @ vec) for v in vecs), 4)


def _first_placement(text: str, thresholds: dict[str, float]) -> dict[str, Any]:
    """The thread rules' decision for the first message of a session (no candidate
    thread, so no similarity: the message's vector is not needed)."""
    from ctxrelay.text.threads import ThreadBook
    placed = ThreadBook([], None, dict(thresholds)).place(text, None)
    return {"action": placed.action, "rule": placed.rule}
