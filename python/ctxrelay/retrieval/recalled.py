"""Recalled turns as candidates: older turns ranked by :mod:`ctxrelay.retrieval.recall`
(lexical, dense and the conversation's structure), each with its tool call and
results, and a recalled question with its answer.
"""
from __future__ import annotations

import itertools
from typing import Any

from ctxrelay.retrieval.pricing import (
    TOKENIZER_KEY,
    add_turn,
    mark_used,
    priced_memo,
    priced_unit,
)
from ctxrelay.retrieval.units import Unit, tool_call_ids
from ctxrelay.storage.interfaces.transcript import Transcript
from ctxrelay.storage.stores import Stores
from ctxrelay.text import tokens as tok
from ctxrelay.types import Turn

_RANKING_READ = 16      # turns per read along a ranking (about what one assembly offers)
_TOOL_LOOKBACK = 8      # how far a tool result may sit from its call

def retrieve(stores: Stores, session_id: str, query: str, window_start: int,
             history_end: int, retrieve_tokens: int, max_retrieved: int,
             units: dict[str, Unit], groups: list[list[str]], model: str | tok.Tokenizer,
             scratch: Any = None, dense: Any = None, embedder: Any = None,
             pair: bool = False, dense_generation: Any = None,
             ranking: Any = None) -> dict[str, Any]:
    """Earlier turns for the query, ranked by :mod:`ctxrelay.retrieval.recall` (lexical,
    dense and the conversation's structure).  Turns already in the window
    get their relevance as a feature; older ones become ``retrieved``
    candidates until they hold ``_RETRIEVE_OVERSUPPLY`` times the budget
    (the packer chooses among them) or ``max_retrieved`` turns.

    ``ranking``: a future of that ranking (``recall``'s answer) started earlier
    with the same arguments (:func:`ctxrelay.retrieval.candidates.window_candidates`),
    or None to rank here."""
    from ctxrelay.retrieval.recall import recall
    if max_retrieved <= 0 or history_end < 1:
        return {}
    import time
    t0 = time.perf_counter()
    store = stores.transcript
    if ranking is not None:
        ranked, info = ranking.result()
    else:
        ranked, info = recall(stores, session_id, query, upto=history_end, dense=dense,
                              embedder=embedder, dense_generation=dense_generation)
    info["ms"] = round((time.perf_counter() - t0) * 1000, 3)
    mark_used("index")
    offered, count = 0, 0
    loaded: dict[int, Turn] = {}
    direct: set[str] = set()        # candidates this ranking scores (not marked below)
    ids, scores = ranked.ids, ranked.scores
    budget = retrieve_tokens
    for at, turn_id in enumerate(ids):
        if count >= max_retrieved or offered >= budget:
            break
        uid = f"t{turn_id}"
        if turn_id >= window_start or uid in units:
            continue
        score = scores[at]
        direct.add(uid)
        unit = priced_unit(stores, session_id, turn_id, "retrieved", score=score)
        if unit is not None:                        # a plain turn offered before: no read
            if unit.features["role"] != "system":
                units[uid] = unit
                offered += unit.costs["verbatim"]
                count += 1
            continue
        if turn_id not in loaded:
            # One read for the next stretch of the ranking (its next turns older than
            # the window), not one per turn.  Turns the memo of plain turns already
            # holds need no read (it answers them when their turn comes), so the read
            # holds only what will be used.
            priced = priced_memo(stores)
            tkey = TOKENIZER_KEY.get()
            ahead = itertools.islice((t for t in itertools.islice(ids, at + 1, None)
                                      if t < window_start), _RANKING_READ - 1)
            batch = [turn_id] + [t for t in ahead
                                 if t not in loaded and (session_id, t, tkey) not in priced]
            loaded.update((t.turn_id, t) for t in store.turns(session_id, batch))
        turn = loaded[turn_id]
        if turn.role == "system":
            continue
        added = add_with_tool_family(stores, session_id, turn, "retrieved", units, groups, model,
                                     scratch, score=score)
        offered += sum(min(u.costs.values()) for u in added)
        count += 1
    if pair:
        _pair_questions_and_answers(stores, session_id, direct, window_start, history_end,
                                    units, groups, model, scratch)
    # Turns offered for another reason (the window, a resumed thread, the tool
    # pair of a candidate) carry their place in the ranking as relevance.
    score_of = dict(zip(ids, scores))
    for uid, unit in units.items():
        if uid in direct or len(unit.turn_ids) != 1 or uid != f"t{unit.turn_ids[0]}":
            continue
        score = score_of.get(unit.turn_ids[0])
        if score is not None:
            unit.features.setdefault("relevance", score)
    info["retrieved"] = count
    return info


def _pair_questions_and_answers(stores: Stores, session_id: str, recalled: set[str],
                                window_start: int, history_end: int, units: dict[str, Unit],
                                groups: list[list[str]], model: str | tok.Tokenizer,
                                scratch: Any) -> None:
    """A recalled answer comes with its question and a recalled question with its
    answer (packed together or not at all), so no pack shows a reply without what
    it replies to."""
    wanted: dict[str, int] = {}
    for uid in recalled:
        unit = units.get(uid)
        if unit is None or unit.kind != "retrieved" or len(unit.turn_ids) != 1:
            continue
        tid, role = unit.turn_ids[0], unit.features.get("role")
        partner = tid - 1 if role == "assistant" else tid + 1 if role == "user" else None
        if partner is None or not 1 <= partner <= history_end:
            continue
        wanted[uid] = partner
    missing = sorted({p for p in wanted.values()
                      if f"t{p}" not in units and p < window_start})
    loaded = {t.turn_id: t for t in stores.transcript.turns(session_id, missing)} \
        if missing else {}
    for uid, partner in wanted.items():
        pid = f"t{partner}"
        role = units[uid].features.get("role")
        if pid not in units:
            turn = loaded.get(partner)
            want = "user" if role == "assistant" else "assistant"
            if turn is None or turn.role != want or tool_call_ids(turn):
                continue
            add_turn(units, stores, turn, "retrieved", scratch, model, score=0.0)
        elif units[pid].features.get("role") != ("user" if role == "assistant" else "assistant"):
            continue
        groups.append(sorted([uid, pid], key=lambda u: int(u[1:])))


def add_with_tool_family(stores: Stores, session_id: str, turn: Turn, kind: str,
                         units: dict[str, Unit], groups: list[list[str]],
                         model: str | tok.Tokenizer, scratch: Any,
                         **features: Any) -> list[Unit]:
    """Add ``turn`` with its tool call and results (packed together), return the new units.

    ``features`` go to ``turn`` itself; the family members it pulls in carry
    a score of 0 when ``turn`` is scored.
    """
    added: list[Unit] = []
    ids = []
    for member in _tool_family(stores.transcript, session_id, turn):
        uid = f"t{member.turn_id}"
        if uid not in units:
            extra = features if member.turn_id == turn.turn_id else \
                {k: 0.0 for k in features if k == "score"}
            added.append(add_turn(units, stores, member, kind, scratch, model, **extra))
        ids.append(uid)
    if len(ids) > 1:
        groups.append(ids)
    return added


def _tool_family(store: Transcript, session_id: str, turn: Turn) -> list[Turn]:
    """A tool call with all its results (providers reject a call without them), or the turn alone."""
    call = turn
    if turn.role == "tool":
        lo = max(1, turn.turn_id - _TOOL_LOOKBACK)
        before = store.history(session_id, lo, turn.turn_id - 1)
        owners = [t for t in before if turn.tool_call_id in tool_call_ids(t)]
        if not owners:
            return [turn]
        call = owners[-1]
    ids = set(tool_call_ids(call))
    if not ids:
        return [turn]
    after = store.history(session_id, call.turn_id + 1, call.turn_id + len(ids) + _TOOL_LOOKBACK)
    results = [t for t in after if t.role == "tool" and t.tool_call_id in ids]
    return [call, *results]
