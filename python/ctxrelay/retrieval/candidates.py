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

import contextlib
import functools
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.retrieval.fact_units import (  # noqa: F401
    add_router_fact_units,
    fact_unit,
    has_knowledge,
    knowledge_text,
)
from ctxrelay.retrieval.pricing import (  # noqa: F401
    COST_CAP,
    EXCERPT,
    STORE_USED,
    STORED_COUNTS_MODEL,
    TOKENIZER_KEY,
    add_turn,
    add_unit,
    excerpt_text,
    index_terms,
    mark_used,
    message_cost,
    stored_counts_model_for,
    tokenizer_key_of,
)
from ctxrelay.retrieval.recalled import add_with_tool_family, retrieve
from ctxrelay.retrieval.render import host_only_tokens, render  # noqa: F401
from ctxrelay.retrieval.router import Router, route_plan
from ctxrelay.retrieval.thread_context import add_thread_context
from ctxrelay.retrieval.units import Candidates, Unit, tool_call_ids
from ctxrelay.retrieval.window import (
    boundary_text,
    kept_or_read,
    pending_groups,
    pending_unit,
    range_tokens,
    read_window,
    tool_groups,
)
from ctxrelay.storage.stores import Stores
from ctxrelay.text import tokens as tok


def _one_generation(fn: Any) -> Any:
    """Run ``fn(stores, ...)`` with the store's generation pinned where the back end
    offers that (PostgreSQL: the generation and the presence of the parts read once,
    not once per question; see ``storage.postgres.backend.PinnableDatabase``)."""
    @functools.wraps(fn)
    def run(stores: Stores, *args: Any) -> Any:
        pinned = getattr(stores.backend, "pinned", None)
        with pinned() if pinned is not None else contextlib.nullcontext():
            return fn(stores, *args)
    return run


@_one_generation
def window_candidates(stores: Stores, session_id: str, message: Any,
                      options: dict[str, Any]) -> dict[str, Any]:
    """The first stage of an assembly's candidates: what the message's analysis needs.

    Reads the recent window (kept between turns, see :mod:`ctxrelay.retrieval.prepared`)
    and the message's thread, and keeps the units so far (system, message,
    pending, the window's turns, a resumed thread's) with the ``info`` Prolog
    reads to resolve references, classify the intent and plan Tier P.  While
    Prolog analyses the message, the side pool embeds Tier P's query, ranks the
    older turns (recall) and runs Tier P's ANN search ahead; the recalled units,
    warm artifacts, the boundary, referenced turns and Tier P's facts come in the
    second stage (:func:`gather`).

    ``message`` is the new user message text, or None when it is already the
    last stored turn (``history_end`` then excludes it).  Options: model,
    history_end (0 for a session not stored yet), window_tokens,
    min_recent_turns, tail_first (the first turn of the guaranteed tail),
    boundary (offer the cold-history boundary for turns before it),
    max_retrieved and retrieve_tokens (recalled turns are offered until
    either is reached), reference_turns (the latest turns and scratch
    entries handed to the reference resolver), instruction_turns (system
    turns among the session's first this many are offered as standing
    instructions), retrieval, warm, knowledge (Tier P may be asked for: its query
    is embedded ahead), system, threads, embedder, pending
    (the new messages before ``message``, not stored yet: offered as
    mandatory units in their order), known_recent (the ``recent_key`` of the
    recent turns Prolog holds for the session: ``info`` then leaves them out when
    they are unchanged).
    """
    store = stores.transcript
    model = str(options.get("model") or "cl100k_base")
    history_end = int(options["history_end"])
    window_tokens = int(options["window_tokens"])
    above, size = options.get("excerpt_above"), options.get("excerpt_tokens")
    counter = tok.resolve(model)      # resolved once: every unit below is counted with it
    limits = _Limits(window_tokens, (int(above), int(size)) if above and size else None,
                     stored_counts_model_for(store, counter), tokenizer_key_of(counter), set())
    limits.apply()
    min_recent = int(options.get("min_recent_turns", 0))
    units: dict[str, Unit] = {}
    groups: list[list[str]] = []
    info: dict[str, Any] = {"history_end": history_end}

    system_text = str(options.get("system") or "")
    if system_text:
        system_message = {"role": "system", "content": system_text}
        add_unit(units, Unit(id="system", kind="system", turn_ids=[],
                             variants={"verbatim": system_message}), counter)
    query_text = ""
    if message is not None:
        query_text = str(message)
        add_unit(units, Unit(id="message", kind="message", turn_ids=[],
                             variants={"verbatim": {"role": "user", "content": query_text}}),
                 counter)
    pending = [pending_unit(i, p) for i, p in enumerate(options.get("pending") or [])]
    for unit in pending:
        add_unit(units, unit, counter)

    reference_turns = int(options["reference_turns"])
    instruction_turns = int(options["instruction_turns"])
    generation = store.write_generation()
    window, window_start = kept_or_read(
        stores, ("window", session_id, history_end, window_tokens, min_recent, instruction_turns),
        generation,
        lambda: read_window(stores, session_id, history_end, window_tokens, min_recent,
                            instruction_turns))
    window = list(window)
    if message is None and window:
        query_text = window[-1].content
    call_owner: dict[str, int] = {}
    for turn in window:
        for cid in tool_call_ids(turn):
            call_owner[cid] = turn.turn_id
    scratch = stores.scratch_if_present()
    for turn in window:
        kind = "instructions" if turn.role == "system" else "turn"
        add_turn(units, stores, turn, kind, scratch, counter)
    tool_groups(window, call_owner, groups)
    pending_groups(pending, call_owner, groups)

    thread_info: dict[str, Any] = {}
    dense: Any = None
    if options.get("threads", True) and (history_end > 0 or message is not None):
        thread_info, dense = add_thread_context(stores, session_id, message, query_text, window,
                                                history_end, units, counter, options, scratch)
    tail_first = int(options.get("tail_first", max(1, history_end - min_recent + 1)))
    info.update(window_start=window_start, tail_first=tail_first, total_turns=history_end)
    info.update(thread_info)
    # What Prolog reads of the recent turns (references, mentions, novelty, seeds):
    # a bounded preview, so a huge turn costs the same as a short one there.
    preview = int(options.get("preview_chars", 2000))
    # They are the same until the window changes: Prolog keeps the last ones it was
    # given per session and names them (known_recent); when they are still these,
    # they do not cross again.
    recent_key = "" if generation is None else json.dumps(
        [stores.path, session_id, generation, history_end, window_tokens, min_recent,
         instruction_turns, reference_turns, preview])
    info["recent_key"] = recent_key
    if not recent_key or options.get("known_recent") != recent_key:
        info["recent_turns"] = [{"turn_id": t.turn_id, "role": t.role,
                                 "content": t.content[:preview]}
                                for t in window[-reference_turns:]] if reference_turns > 0 else []
    info["scratch_recent"] = [] if scratch is None or reference_turns <= 0 else [
        {"scratch_id": e.scratch_id, "tool_name": e.tool_name, "created": e.created}
        for e in scratch.latest(session_id, reference_turns)]
    priming = tok.count_messages([], counter).n
    cands = Candidates(session_id, model, units, priming, groups, [], info)
    # Read here, before Tier P's thread starts in gather(): there each LMDB call
    # lets that thread take the GIL, and the caller waits for it to come back.
    log_generation = stores.turnlog.write_generation() if dense is not None else None
    warm_store = stores.warm_if_present() if options.get("warm", True) else None
    # Recall's ranking needs nothing Prolog decides next: it runs while Prolog
    # analyses the message (janus releases the GIL while Prolog runs).
    ranking = recalled = None
    embedder = None
    if options.get("retrieval", True) and query_text and dense is not None:
        from ctxrelay.text.embed import get_embedder
        embedder = get_embedder(options.get("embedder") or None)
    # Tier P's query is the message: its embedding is ready when Prolog's plan comes.
    # Its ANN search nearly always asks what the last one asked (namespace, pool):
    # it runs ahead too, after recall's ranking, whose answer is handed over first.
    router = Router.of(stores) \
        if options.get("knowledge") and message is not None and has_knowledge(stores) else None
    # Each step on the side is a Future that gather() cancels when the side has not
    # started it yet (a busy machine gave the side thread no core): gather() then
    # does it in its own thread instead of waiting, or skips the search ahead.
    ahead = Future() if router is not None else None
    if RECALL_BESIDE_ANALYSIS and options.get("retrieval", True) and query_text \
            and history_end >= 1 and int(options.get("max_retrieved", 200)) > 0:
        # One task on the side pool, not two: on a busy machine each thread woken
        # waits for a core (and the GIL), and both finish long before gather() asks.
        ranking = Future()
        # The recalled turns' units need only the ranking and the units so far (Prolog
        # adds none before gather()): they may be built on the side too.
        recalled = Future() if RETRIEVE_BESIDE_ANALYSIS else None
        build = None if recalled is None else functools.partial(
            _recalled_units, units, groups, stores, session_id, query_text,
            window_start, history_end, options, counter, scratch, dense, embedder,
            log_generation, limits)
        _side_pool().submit(_prepare_then_recall, ranking, router, stores, session_id,
                            query_text, upto=history_end, dense=dense,
                            embedder=embedder, dense_generation=log_generation,
                            recalled=recalled, build=build, ahead=ahead)
    elif router is not None:
        _side_pool().submit(_prepare_then_recall, None, router, stores, session_id,
                            query_text, ahead=ahead)
    cands.stage = _Stage(options, limits, counter, scratch, dense, query_text, window_start,
                         generation, log_generation, warm_store, embedder, ranking,
                         recalled if ranking is not None else None, ahead)
    # No units yet: recall marks the window's turns with their relevance, so their
    # summaries go to Prolog with the rest, from gather().
    return {"handle": cands, "priming": priming, "info": info}


def gather(cands: Candidates, stores: Stores, options: dict[str, Any]) -> dict[str, Any]:
    """The second stage: recalled turns, warm artifacts, the boundary, the turns a
    reference resolved to, and Tier P's facts, added to ``cands`` in that order.

    ``options``: referenced (turn ids, Prolog's resolution of the message's
    references) and knowledge (a router plan, ``ctxrelay_router:access_plan/3``,
    or None for no Tier P).  The ranking was made beside the analysis
    (:func:`window_candidates`); the plan runs on the side pool beside the history
    (see ``TIER_P_BESIDE_RECALL``), its ANN search answered from the one run ahead
    when that ran, and its facts are added last, as ever.  Returns every unit's summary, the groups and
    excludes, the whole info and ``knowledge`` (None: no knowledge base, else the
    facts' report as :func:`add_router_fact_units` gives it).
    """
    stage = cands.stage
    if stage is None:
        raise InvalidArgumentError("gather/3 takes the candidates of window_candidates/4, once")
    cands.stage = None
    stage.limits.apply()
    if stage.ahead is not None:
        stage.ahead.cancel()          # not started: the plan searches for itself
    plan = options.get("knowledge")
    fetch = None
    if plan is not None and has_knowledge(stores):
        if TIER_P_BESIDE_RECALL:
            fetch = _side_pool().submit(Router.of(stores).execute, route_plan(plan))
        else:
            fetch = _Done(Router.of(stores), route_plan(plan))
    try:
        _gather_history(cands, stores, stage)
        summaries = [u.summary() for u in cands.units.values()]
        store_used = sorted(stage.limits.used)
        groups = [list(g) for g in cands.groups]        # what Prolog packs with (see below)
        excludes = [list(e) for e in cands.excludes]
        referenced = [int(t) for t in options.get("referenced") or []]
        if referenced:
            summaries.extend(add_turn_units(cands, stores, referenced))
    except BaseException:
        if fetch is not None:                 # the first error is the one to report
            fetch.cancel() or _quietly(fetch.result)
        raise
    result = fetch.result() if fetch is not None else None
    knowledge = None if result is None else add_router_fact_units(cands, result)
    if knowledge is not None:
        summaries.extend(knowledge.pop("units"))
    cands.info["store_used"] = store_used
    # The groups and excludes as they stood before the referenced turns and the
    # facts, as Prolog has always been given them (a referenced turn's tool family
    # was grouped on the Python side only).
    return {"units": summaries, "groups": groups, "excludes": excludes, "info": cands.info,
            "knowledge": knowledge, "has_knowledge": fetch is not None}


def _gather_history(cands: Candidates, stores: Stores, stage: _Stage) -> None:
    """Recalled turns, the session's warm artifacts and the cold-history boundary."""
    options, units, info, counter = stage.options, cands.units, cands.info, stage.counter
    session_id, store = cands.session_id, stores.transcript
    history_end = int(info["history_end"])
    window_tokens = int(options["window_tokens"])
    recalled, ranking = stage.recalled, stage.ranking
    if recalled is not None and not recalled.cancel():
        info["recall"] = recalled.result()      # built beside the analysis
    elif options.get("retrieval", True) and stage.query_text:
        if ranking is not None and ranking.cancel():
            ranking = None                      # not started on the side: ranked here
        info["recall"] = retrieve(stores, session_id, stage.query_text, stage.window_start,
                                  history_end,
                                  int(options.get("retrieve_tokens", window_tokens)),
                                  int(options.get("max_retrieved", 200)),
                                  units, cands.groups, counter, stage.scratch, stage.dense,
                                  stage.embedder, pair=bool(options.get("pair_turns", False)),
                                  dense_generation=stage.log_generation,
                                  ranking=ranking)
    if stage.warm_store is not None:
        _warm_units(stage.warm_store, session_id, stage.query_text, history_end, units,
                    cands.excludes, counter)
    tail_first = int(info["tail_first"])
    if options.get("boundary", True) and tail_first > 1:
        first, last = 1, tail_first - 1
        count = last - first + 1
        prefix_tokens = kept_or_read(
            stores, ("range", session_id, first, last, history_end), stage.generation,
            lambda: range_tokens(store, session_id, first, last, history_end))
        text = boundary_text(first, last, count, prefix_tokens,
                             str(options.get("history_access") or "context"))
        add_unit(units, Unit(id="boundary", kind="boundary", turn_ids=[],
                             variants={"verbatim": {"role": "system", "content": text}},
                             features={"omitted_first": first, "omitted_last": last,
                                       "omitted_count": count, "omitted_tokens": prefix_tokens}),
             counter)
    if any(u.kind == "scratch" for u in units.values()):
        mark_used("pointer")


# The side pool: recall's ranking and Tier P's ANN search (and the recalled units, with
# RETRIEVE_BESIDE_ANALYSIS) while Prolog analyses the message.  Not the router's own pool: a blended plan fetches its
# steps there and waits for them, which from inside that pool could exhaust it.
_SIDE_WORKERS = 4
# Tier P's fetch in gather(): on the side pool, beside the recalled units (True), or
# in the caller's thread after them (False).  With the search ahead done, what is left
# holds the GIL either way; when it was not (the side thread got no core in time),
# hnswlib's search overlaps the units only from the side.  Measured: in one process,
# alternating, load 6-8, False gave p50 72.3 vs 78.7, 75.3 vs 74.8 and 33.1 vs 41.0 ms;
# side by side against 0a8ad08 at load ~2 (bench/e2e_bench.py), False 1.01x / 1.08x
# (p50 / p95) and True 0.99x / 1.04x.  Within noise: the tested default stays.
TIER_P_BESIDE_RECALL = True
RECALL_BESIDE_ANALYSIS = True   # False: recall ranks in gather(), in the caller's thread
# The recalled units built on the side too, after the ranking (True), or in gather()
# (False).  Recall, the units and the ANN search together outlast the analysis on a
# quiet machine, so gather() waited for the units and searched itself; under load
# (6-8) the side thread often had no core: in one process, alternating, p50 89.3 vs
# 84.0 ms, p95 133.6 vs 144.4, CPU 21.2 vs 19.9 ms per assembly.
RETRIEVE_BESIDE_ANALYSIS = False
_side: ThreadPoolExecutor | None = None
_side_lock = threading.Lock()


def _side_pool() -> ThreadPoolExecutor:
    global _side
    if _side is None:
        with _side_lock:
            if _side is None:
                _side = ThreadPoolExecutor(max_workers=_SIDE_WORKERS,
                                           thread_name_prefix="ctxrelay-tier-p")
    return _side


def _prepare_then_recall(ranking: Future | None, router: Router | None, stores: Stores,
                         session_id: str, query_text: str, *, recalled: Future | None = None,
                         build: Any = None, ahead: Future | None = None,
                         **recall_options: Any) -> None:
    """Tier P's query embedded ahead (with ``router``, or None for no Tier P), then
    recall's ranking into ``ranking`` (None: no recall) and the recalled units
    (``build(ranking)`` into ``recalled``, if given), then Tier P's ANN search ahead:
    gather() waits for the ranking and the units, not for the search."""
    if router is not None:
        _quietly(lambda: router.prepare_query(query_text))   # the plan meets an error again
    if ranking is not None:
        from ctxrelay.retrieval.recall import recall
        _settle(ranking, lambda: recall(stores, session_id, query_text, **recall_options))
    if recalled is not None:
        _settle(recalled, lambda: build(ranking))
    if ahead is not None:
        _settle(ahead, lambda: _quietly(lambda: router.search_ahead(query_text)))


def _settle(future: Future, fn: Any) -> None:
    """``future`` set to what ``fn()`` returns or raises (handed to gather())."""
    if future.set_running_or_notify_cancel():
        try:
            future.set_result(fn())
        except BaseException as exc:            # noqa: BLE001 - raised again in gather()
            future.set_exception(exc)


def _recalled_units(units: dict[str, Unit], groups: list[list[str]], stores: Stores,
                    session_id: str, query_text: str, window_start: int, history_end: int,
                    options: dict[str, Any], counter: Any, scratch: Any, dense: Any,
                    embedder: Any, log_generation: Any, limits: _Limits,
                    ranking: Future) -> dict[str, Any]:
    """:func:`retrieve` of the first stage's units, on the side pool (the pricing's
    context variables set for this thread first)."""
    limits.apply()
    return retrieve(stores, session_id, query_text, window_start, history_end,
                    int(options.get("retrieve_tokens", int(options["window_tokens"]))),
                    int(options.get("max_retrieved", 200)), units, groups, counter,
                    scratch, dense, embedder, pair=bool(options.get("pair_turns", False)),
                    dense_generation=log_generation, ranking=ranking)


class _Done:
    """Tier P fetched in the caller's thread when asked for (after recall)."""

    def __init__(self, router: Router, plan: dict[str, Any]) -> None:
        self._router, self._plan = router, plan

    def cancel(self) -> bool:
        return True

    def result(self) -> Any:
        return self._router.execute(self._plan)


def _quietly(fn: Any) -> None:
    try:
        fn()
    except BaseException:   # noqa: BLE001, S110 - only waited for; the caller's error is raised
        pass


@dataclass(frozen=True, slots=True)
class _Limits:
    """The assembly's limits that the pricing helpers read from context variables."""

    cost_cap: int
    excerpt: tuple[int, int] | None
    stored_counts_model: Any
    tokenizer_key: Any
    used: set[str]                # the primitives read (CRP-Context-Store-Used)

    def apply(self) -> None:
        # Each crossing from Prolog may run in another context: set them again.
        COST_CAP.set(self.cost_cap)
        EXCERPT.set(self.excerpt)
        STORED_COUNTS_MODEL.set(self.stored_counts_model)
        TOKENIZER_KEY.set(self.tokenizer_key)
        STORE_USED.set(self.used)


@dataclass(slots=True)
class _Stage:
    """What the first stage hands the second (kept on the candidates, used once)."""

    options: dict[str, Any]
    limits: _Limits
    counter: Any
    scratch: Any
    dense: Any
    query_text: str
    window_start: int
    generation: Any               # the transcript's, when the window was read
    log_generation: Any           # the turn log's, for the dense window
    warm_store: Any
    embedder: Any                 # recall's (None without the dense side)
    ranking: Any                  # recall's ranking, a future (None: no recall)
    recalled: Any = None          # retrieve's answer, a future (None: built in gather())
    ahead: Any = None             # Tier P's ANN search ahead, a future (None: none)


def _warm_units(warm_store: Any, session_id: str, query: str, history_end: int,
                units: dict[str, Unit], excludes: list[list[str]],
                model: str | tok.Tokenizer) -> None:
    """The session's latest warm artifacts as candidates, with the counts their
    relevance is made of: the query's index terms, and how many of them the
    artifact holds.  Which are offered and what they are worth is Prolog's
    (ctxrelay_utility: offered/2, warm_relevance/2)."""
    from ctxrelay.storage.lmdb.warm import variants as warm_variants
    q = index_terms(query)
    for art in warm_store.latest(session_id):
        # An artifact summarises user, assistant and tool text: it is rendered
        # as reference material (a named user message), never with system authority.
        forms = {v["variant"]: {"role": "user", "name": "artifact", "content": v["text"]}
                 for v in warm_variants(art)}
        text = " ".join([art.summary, *art.facts, *art.decisions, *art.entities])
        terms = index_terms(text)
        unit = add_unit(units, Unit(id=f"w{art.start}_{art.end}", kind="warm",
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
        added.extend(u.summary() for u in add_with_tool_family(
            stores, cands.session_id, turn, kind, cands.units, cands.groups, cands.model, scratch))
    return added
