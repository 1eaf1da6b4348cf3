"""Candidate context units and the rendering of a chosen pack.

Prolog decides (utilities, constraints, packing, order); this module does the
data work it asks for: read the bounded window of recent turns, run the
indexed cold-history search, load warm artifacts, count every unit's tokens
as the provider will see it, and finally render the chosen units to
provider messages and count them again.

Candidate generation is bounded by the token budget, not by the length of
the history: the window is read backwards only until it holds more tokens
than the budget, and cold turns come from the inverted index.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.retrieval.fact_units import (  # noqa: F401
    add_router_fact_units,
    fact_unit,
    has_knowledge,
    knowledge_text,
)
from ctxrelay.retrieval.pricing import (  # noqa: F401
    _COST_CAP,
    _EXCERPT,
    _STORE_USED,
    _STORED_COUNTS_MODEL,
    _TOKENIZER_KEY,
    _add,
    _add_turn,
    _priced_memo,
    _stored_counts_model,
    _terms,
    _tokenizer_key,
    _used,
    excerpt_text,
    message_cost,
)
from ctxrelay.retrieval.recalled import _add_with_tool_family, _retrieve
from ctxrelay.retrieval.render import host_only_tokens, render  # noqa: F401
from ctxrelay.retrieval.thread_context import _thread_context
from ctxrelay.retrieval.units import Candidates, Unit, _tool_call_ids
from ctxrelay.retrieval.window import (
    _kept,
    _pending_groups,
    _pending_unit,
    _range_tokens,
    _read_window,
    _tool_groups,
    boundary_text,
)
from ctxrelay.storage.stores import Stores
from ctxrelay.text import tokens as tok


def candidates(stores: Stores, warm_store: Any, session_id: str,
               message: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Gather the candidate units for one assembly from the store's parts, within
    the limits Prolog set.

    ``message`` is the new user message text, or None when it is already the
    last stored turn (``history_end`` then excludes it).  Options: model,
    history_end (0 for a session not stored yet), window_tokens,
    min_recent_turns, tail_first (the first turn of the guaranteed tail),
    boundary (offer the cold-history boundary for turns before it),
    max_retrieved and retrieve_tokens (recalled turns are offered until
    either is reached), reference_turns (the latest turns and scratch
    entries handed to the reference resolver), instruction_turns (system
    turns among the session's first this many are offered as standing
    instructions), retrieval, warm, system, threads, embedder, pending
    (the new messages before ``message``, not stored yet: offered as
    mandatory units in their order).
    """
    store = stores.transcript
    model = str(options.get("model") or "cl100k_base")
    history_end = int(options["history_end"])
    window_tokens = int(options["window_tokens"])
    _COST_CAP.set(window_tokens)
    above, size = options.get("excerpt_above"), options.get("excerpt_tokens")
    _EXCERPT.set((int(above), int(size)) if above and size else None)
    _STORE_USED.set(set())
    counter = tok.resolve(model)      # resolved once: every unit below is counted with it
    _STORED_COUNTS_MODEL.set(_stored_counts_model(store, counter))
    _TOKENIZER_KEY.set(_tokenizer_key(counter))
    min_recent = int(options.get("min_recent_turns", 0))
    units: dict[str, Unit] = {}
    groups: list[list[str]] = []
    excludes: list[list[str]] = []
    info: dict[str, Any] = {"history_end": history_end}

    system_text = str(options.get("system") or "")
    if system_text:
        system_message = {"role": "system", "content": system_text}
        _add(units, Unit(id="system", kind="system", turn_ids=[],
                         variants={"verbatim": system_message}), counter)
    query_text = ""
    if message is not None:
        query_text = str(message)
        _add(units, Unit(id="message", kind="message", turn_ids=[],
                         variants={"verbatim": {"role": "user", "content": query_text}}), counter)
    pending = [_pending_unit(i, p) for i, p in enumerate(options.get("pending") or [])]
    for unit in pending:
        _add(units, unit, counter)

    reference_turns = int(options["reference_turns"])
    instruction_turns = int(options["instruction_turns"])
    window, window_start = _kept(
        stores, ("window", session_id, history_end, window_tokens, min_recent, instruction_turns),
        store.write_generation(),
        lambda: _read_window(stores, session_id, history_end, window_tokens, min_recent,
                             instruction_turns))
    window = list(window)
    if message is None and window:
        query_text = window[-1].content
    call_owner: dict[str, int] = {}
    for turn in window:
        for cid in _tool_call_ids(turn):
            call_owner[cid] = turn.turn_id
    scratch = stores.scratch_if_present()
    for turn in window:
        kind = "instructions" if turn.role == "system" else "turn"
        _add_turn(units, stores, turn, kind, scratch, counter)
    _tool_groups(window, call_owner, groups)
    _pending_groups(pending, call_owner, groups)

    thread_info: dict[str, Any] = {}
    dense: Any = None
    if options.get("threads", True) and (history_end > 0 or message is not None):
        thread_info, dense = _thread_context(stores, session_id, message, query_text, window,
                                             history_end, units, counter, options, scratch)
    if options.get("retrieval", True) and query_text:
        from ctxrelay.text.embed import get_embedder
        embedder = get_embedder(options.get("embedder") or None) if dense is not None else None
        info["recall"] = _retrieve(stores, session_id, query_text, window_start, history_end,
                                   int(options.get("retrieve_tokens", window_tokens)),
                                   int(options.get("max_retrieved", 200)),
                                   units, groups, counter, scratch, dense, embedder,
                                   pair=bool(options.get("pair_turns", False)))

    if options.get("warm", True) and warm_store is not None:
        _warm_units(warm_store, session_id, query_text, history_end, units, excludes, counter)

    tail_first = int(options.get("tail_first", max(1, history_end - min_recent + 1)))
    if options.get("boundary", True) and tail_first > 1:
        first, last = 1, tail_first - 1
        count = last - first + 1
        prefix_tokens = _kept(stores, ("range", session_id, first, last, history_end),
                              store.write_generation(),
                              lambda: _range_tokens(store, session_id, first, last, history_end))
        text = boundary_text(first, last, count, prefix_tokens,
                             str(options.get("history_access") or "context"))
        _add(units, Unit(id="boundary", kind="boundary", turn_ids=[],
                         variants={"verbatim": {"role": "system", "content": text}},
                         features={"omitted_first": first, "omitted_last": last,
                                   "omitted_count": count, "omitted_tokens": prefix_tokens}),
             counter)
    info.update(window_start=window_start, tail_first=tail_first,
                total_turns=history_end)
    info.update(thread_info)
    # What Prolog reads of the recent turns (references, mentions, novelty, seeds):
    # a bounded preview, so a huge turn costs the same as a short one there.
    preview = int(options.get("preview_chars", 2000))
    info["recent_turns"] = [{"turn_id": t.turn_id, "role": t.role,
                             "content": t.content[:preview]}
                            for t in window[-reference_turns:]] if reference_turns > 0 else []
    info["scratch_recent"] = [] if scratch is None or reference_turns <= 0 else [
        {"scratch_id": e.scratch_id, "tool_name": e.tool_name, "created": e.created}
        for e in scratch.latest(session_id, reference_turns)]
    if any(u.kind == "scratch" for u in units.values()):
        _used("pointer")
    info["store_used"] = sorted(_STORE_USED.get())
    priming = tok.count_messages([], counter).n
    cands = Candidates(session_id, model, units, priming, groups, excludes, info)
    return {"handle": cands, "units": [u.summary() for u in units.values()],
            "groups": groups, "excludes": excludes, "priming": priming, "info": info}


def _warm_units(warm_store: Any, session_id: str, query: str, history_end: int,
                units: dict[str, Unit], excludes: list[list[str]],
                model: str | tok.Tokenizer) -> None:
    """The session's latest warm artifacts as candidates, with the counts their
    relevance is made of: the query's index terms, and how many of them the
    artifact holds.  Which are offered and what they are worth is Prolog's
    (ctxrelay_utility: offered/2, warm_relevance/2)."""
    from ctxrelay.storage.lmdb.warm import variants as warm_variants
    q = _terms(query)
    for art in warm_store.latest(session_id):
        # An artifact summarises user, assistant and tool text: it is rendered
        # as reference material (a named user message), never with system authority.
        forms = {v["variant"]: {"role": "user", "name": "artifact", "content": v["text"]}
                 for v in warm_variants(art)}
        text = " ".join([art.summary, *art.facts, *art.decisions, *art.entities])
        terms = _terms(text)
        unit = _add(units, Unit(id=f"w{art.start}_{art.end}", kind="warm",
                                turn_ids=list(range(art.start, art.end + 1)), variants=forms,
                                features={"query_terms": len(q), "shared_terms": len(q & terms),
                                          "version": art.version,
                                          "start": art.start, "end": art.end}), model)
        for tid in range(art.start, min(art.end, history_end) + 1):
            if f"t{tid}" in units:
                excludes.append([unit.id, f"t{tid}"])


def add_turn_units(cands: Candidates, stores: Stores, turn_ids: list[int],
                   kind: str = "referenced") -> list[dict[str, Any]]:
    """Offer the turns a reference resolved to (and their tool pairs) as candidates."""
    store, scratch = stores.transcript, stores.scratch_if_present()
    added: list[dict[str, Any]] = []
    for tid in sorted({int(t) for t in turn_ids}):
        if f"t{tid}" in cands.units or not 1 <= tid <= cands.info["history_end"]:
            continue
        turn = store.turn(cands.session_id, tid)
        added.extend(u.summary() for u in _add_with_tool_family(
            stores, cands.session_id, turn, kind, cands.units, cands.groups, cands.model, scratch))
    return added
