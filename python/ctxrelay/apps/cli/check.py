"""``check [--repair]``: verify a store's turns and everything derived from them.

For each session: contiguous turn ids, readable turns, the search index
answering for the newest turn's own words, the counters, every derived record
(the transcript store's ``check_derived``), the turn log; then the warm and
scratch stores; first of all, every record's checksum in every store, and
every scratch blob's sha256.  ``--repair`` copies each damaged record to
``<store>/quarantine/<time>/`` (JSON: store, database, key, bytes), drops the
damaged derived ones and rebuilds derived records from intact primaries (a
damaged primary -- a turn, a session, an artifact, a scratch entry, a fact --
is never rewritten: it stays reported until restored from a backup).  A store
written before record checksums is reported as such, and ``--repair`` on a
store that checks clean seals its records.  What it prints is bounded: a 50 MB turn
does not make a 50 MB line (the JSON report holds each problem whole).
"""
from __future__ import annotations

import argparse
from typing import Any

from ctxrelay.apps.cli.check_records import add_checksums, check_records
from ctxrelay.apps.cli.common import (EXIT_OK, EXIT_PROBLEM, ROLES, CLIError, open_runtime,
                                      require_store)
from ctxrelay.apps.cli.output import clip, emit_json, out, turn_ranges
from ctxrelay.apps.cli.parser import Commands, progress_options
from ctxrelay.apps.cli.progress import Progress

CHUNK = 1000            # turns read per history call
QUERY_SHOWN = 80        # characters of a search query shown in the report
PROBLEM_SHOWN = 500     # characters of one problem printed as text
WHOLE_IN_JSON = "'ctxrelay --json check' prints it whole"


def _scan_turns(store: Any, session_id: str, count: int, problems: list[str]) -> list[Any]:
    """Every stored turn in id order; unreadable ones become problems."""
    from ctxrelay.errors import CorruptStoreError, UnknownTurnError
    unreadable = (ValueError, TypeError, KeyError, CorruptStoreError)
    turns: list[Any] = []
    start = 1
    while start <= count:
        stop = min(start + CHUNK - 1, count)
        try:
            turns.extend(store.history(session_id, start, stop))
        except unreadable:                       # a damaged record: find it
            for turn_id in range(start, stop + 1):
                try:
                    turns.append(store.turn(session_id, turn_id))
                except UnknownTurnError:             # a gap, reported by the caller
                    pass
                except unreadable as exc:
                    what = "is damaged" if isinstance(exc, CorruptStoreError) \
                        else "does not parse"
                    problems.append(f"turn {turn_id} {what} ({type(exc).__name__}: {exc})")
        start = stop + 1
    try:
        extra = store.history(session_id, count + 1, None)
    except unreadable as exc:
        problems.append(f"turns after {count} exist but are unreadable ({exc})")
        extra = []
    if extra:
        problems.append(f"{len(extra)} turn(s) stored after turn {count}, the count in the "
                        f"session's counters (ids {turn_ranges([t.turn_id for t in extra])})")
    return turns + extra


def _shown_query(query: str) -> str:
    """A search query as the report shows it: cut, with its length, if it is long."""
    if len(query) <= QUERY_SHOWN:
        return repr(query)
    return f"{query[:QUERY_SHOWN]!r}… ({len(query):,} characters)"


def _check_search(rt: Any, session_id: str, turns: list[Any], derived_problems: list[str],
                  problems: list[str]) -> str:
    """The newest indexable turn must come back for its own longest words."""
    from ctxrelay.errors import CtxRelayError
    from ctxrelay.text.bm25 import tokenize
    for t in reversed(turns[-50:]):
        terms = sorted(set(tokenize(t.content)), key=lambda w: (-len(w), w))[:8]
        if not terms:
            continue
        query = " ".join(terms)
        shown = _shown_query(query)
        k = min(len(turns), 50)
        try:
            hits = rt.search(session_id, query, k=k)
        except CtxRelayError as exc:          # e.g. the index names a turn not stored
            problems.append(f"the search index fails for {shown}: {exc}")
            return f"search for {shown} fails"
        if t.turn_id in {h.turn_id for h in hits}:
            return f"turn {t.turn_id} found for {shown}"
        if not derived_problems:   # BM25 ties can hide a turn the index does hold
            problems.append(f"the search index does not return turn {t.turn_id} for its own "
                            f"words {shown} (top {k}: {[h.turn_id for h in hits]})")
        return f"turn {t.turn_id} NOT found for {shown}"
    return "no turn with indexable words"


def _check_session(rt: Any, stores: Any, session_id: str) -> dict[str, Any]:
    from ctxrelay.errors import CtxRelayError
    try:
        return _check_session_records(rt, stores, session_id)
    except CtxRelayError as exc:   # e.g. a damaged session record or counters
        return {"session_id": session_id, "turns": 0, "search": "not checked",
                "problems": [f"cannot be read: {exc}"], "ok": False, "repairable": False,
                "derived_problems": [], "turnlog_problems": []}


def _check_session_records(rt: Any, stores: Any, session_id: str) -> dict[str, Any]:
    from ctxrelay.errors import CtxRelayError
    problems: list[str] = []
    stats = rt.stats(session_id)
    turns = _scan_turns(stores.transcript, session_id, stats.turn_count, problems)
    ids = [t.turn_id for t in turns]
    if ids != list(range(1, len(ids) + 1)):
        missing = sorted(set(range(1, max(ids, default=0) + 1)) - set(ids))
        problems.append("turn ids are not contiguous 1..n"
                        + (f": missing {turn_ranges(missing)}" if missing else ""))
    for t in turns:
        if t.role not in ROLES or not isinstance(t.content, str):
            problems.append(f"turn {t.turn_id} has role {t.role!r} / content of type "
                            f"{type(t.content).__name__}")
    by_role: dict[str, int] = {}
    for t in turns:
        by_role[t.role] = by_role.get(t.role, 0) + 1
    measured = {"turn_count": len(turns),
                "bytes": sum(len(t.content.encode("utf-8")) for t in turns
                             if isinstance(t.content, str)),
                "tokens": sum(t.tokens for t in turns),
                "tokens_exact": all(t.tokens_exact for t in turns),
                "by_role": by_role,
                "first_timestamp": turns[0].timestamp if turns else None,
                "last_timestamp": turns[-1].timestamp if turns else None}
    for name, value in measured.items():
        if getattr(stats, name) != value:
            problems.append(f"counter {name} is {getattr(stats, name)!r} but the stored "
                            f"turns give {value!r}")
    info_count = rt.session(session_id).turn_count
    if info_count != stats.turn_count:
        problems.append(f"session info says {info_count} turns, stats say {stats.turn_count}")
    # Exact comparison of every derived record (postings, totals, key records);
    # the counters were compared above in the words the stats use.
    try:
        derived = stores.transcript.check_derived(session_id)
    except CtxRelayError:      # a damaged turn: reported above, the derived check needs it
        derived = None
    if derived is None:
        derived_problems, repairable = [], False
    else:
        problems.extend(p for p in derived.problems
                        if derived.repairable and not p.startswith("counter "))
        derived_problems = list(derived.problems) if derived.repairable else []
        repairable = derived.repairable
    search = _check_search(rt, session_id, turns, derived_problems, problems)
    turnlog = _check_turnlog(stores, session_id, len(turns))
    problems.extend(turnlog)
    return {"session_id": session_id, "turns": len(turns), "search": search,
            "problems": problems, "ok": not problems,
            "repairable": repairable, "derived_problems": derived_problems,
            "turnlog_problems": turnlog}


# -- the turn log --------------------------------------------------------------------------

def _check_turnlog(stores: Any, session_id: str, turn_count: int) -> list[str]:
    """The turn log's derived fields must cover turns 1..derived_upto exactly."""
    from ctxrelay.errors import CorruptStoreError
    log = stores.turnlog_if_present()
    if log is None:
        return []
    try:
        upto, n_derived, n_vectors = log.coverage(session_id)
    except CorruptStoreError as exc:
        return [f"the turn log is unreadable ({exc}); 'ctxrelay check --repair' "
                "quarantines the damaged records and derives them again"]
    problems = []
    if upto > turn_count:
        problems.append(f"turn log derived fields up to turn {upto} but the session has "
                        f"{turn_count} turns")
    if (n_derived, n_vectors) != (upto, upto):
        problems.append(f"turn log holds {n_derived} derived record(s) and {n_vectors} "
                        f"vector(s) but says turns 1..{upto} are derived")
    return [f"{p}; 'ctxrelay check --repair' derives it again" for p in problems]


def _turnlog_embedder(model_id: str) -> Any:
    """The registered embedder whose vectors the turn log holds (models load only on a match)."""
    from ctxrelay.text import embed
    if model_id == embed.MiniLMEmbedder.model_id:
        return embed.get_embedder("minilm")
    for name in embed.registered():
        if name == "minilm":
            continue
        candidate = embed.get_embedder(name)
        if candidate.model_id == model_id:
            return candidate
    raise CLIError(f"the turn log was derived with {model_id!r}, which no registered embedder "
                   "produces; register it (ctxrelay.text.embed.register) and repair again",
                   EXIT_PROBLEM)


# -- repair ----------------------------------------------------------------------------------

def _repair_session(stores: Any, report: dict[str, Any], progress: Progress) -> list[str]:
    """Rewrite what is derived from an intact transcript; returns what was repaired."""
    session_id = report["session_id"]
    repaired: list[str] = []
    if not report["repairable"]:
        return repaired
    if report["derived_problems"]:
        repaired += list(stores.transcript.repair_derived(session_id).problems)
    if report["turnlog_problems"]:
        log = stores.turnlog
        model_id = log.model_id(session_id)
        if model_id is not None:
            progress.status(f"re-deriving the turn log of {session_id} "
                            f"({report['turns']} turns)")
            log.recompute(stores.transcript, session_id, _turnlog_embedder(model_id),
                          progress=progress.bar)
        repaired += report["turnlog_problems"]
    return repaired


def _check_side_stores(stores: Any, repair: bool) -> list[dict[str, Any]]:
    """The warm store's and the scratch buffer's derived records (if they exist);
    a store too damaged to check is one problem (its records are listed above)."""
    from ctxrelay.errors import CtxRelayError
    try:
        return _check_side_records(stores, repair)
    except CtxRelayError as exc:
        return [{"store": "warm/scratch", "repaired": [],
                 "problems": [f"cannot be checked: {exc}"]}]


def _check_side_records(stores: Any, repair: bool) -> list[dict[str, Any]]:
    reports = []
    warm = stores.warm_if_present()
    if warm is not None:
        problems = list(warm.check())
        repaired = list(warm.check(repair=True)) if repair and problems else []
        reports.append({"store": "warm", "repaired": repaired,
                        "problems": problems if not repaired else list(warm.check())})
    scratch = stores.scratch_if_present()
    if scratch is not None:
        problems = list(scratch.verify()) + list(getattr(scratch, "blob_problems", list)())
        repaired = list(scratch.verify(repair=True)) if repair and problems else []
        if repair:   # blobs no entry names, entries whose blob is gone (60 s grace)
            found = scratch.check()
            repaired += [f"removed orphan blob {p}" for p in found.orphan_blobs]
            repaired += [f"dropped entry {sid} of {sess!r}: its blob is gone"
                         for sess, sid in found.dangling]
        reports.append({"store": "scratch", "repaired": repaired,
                        "problems": problems if not repair else
                        list(scratch.verify()) + list(getattr(scratch, "blob_problems",
                                                              list)())})
    return reports


def _print_report(reports: list[dict[str, Any]], side: list[dict[str, Any]], repair: bool,
                  n_problems: int, n_repaired: int) -> None:
    def line(text: str) -> str:
        return clip(text, PROBLEM_SHOWN, WHOLE_IN_JSON)
    for r in reports:
        out(line(f"{'ok  ' if r['ok'] else 'FAIL'} {r['session_id']}: {r['turns']} turns; "
                 f"search: {r['search']}"))
        for p in r.get("repaired", ()):
            out(line(f"     repaired: {p}"))
        for p in r["problems"]:
            out(line(f"     - {p}"))
    for r in side:
        for p in r.get("notices", ()):
            out(line(f"note ({r['store']}): {p}"))
        for p in r["repaired"]:
            out(line(f"     repaired ({r['store']}): {p}"))
        for p in r["problems"]:
            out(line(f"FAIL {r['store']} store: {p}"))
    unrepairable = [r for r in reports if not r["ok"] and not r["repairable"]]
    if n_problems == 0:
        advice = ""
    elif not repair and not unrepairable:
        advice = "; run 'ctxrelay check --repair' to rebuild the derived records from the transcript"
    else:
        advice = "; export the good sessions ('ctxrelay export') and restore the rest from a backup"
    out(f"{len(reports)} session(s) checked, {n_repaired} repaired, "
        f"{n_problems} problem(s){advice}")


def cmd_check(args: argparse.Namespace) -> int:
    from ctxrelay.storage.stores import open_stores
    repair = bool(args.repair)
    with Progress("check", enabled=not args.no_progress,
                  interval=args.progress_interval) as progress, open_runtime(args) as rt, \
            open_stores(require_store(args)) as store:   # the Runtime's own (refcounted)
        from ctxrelay.errors import CtxRelayError
        try:
            known = [s.session_id for s in rt.sessions()]
            listing: list[dict[str, Any]] = []
        except CtxRelayError as exc:       # a damaged session record: check the rest
            known = []
            listing = [{"store": "sessions", "repaired": [],
                        "problems": [f"the session list is unreadable: {exc}"]}]
        wanted = args.sessions or known
        unknown = [s for s in wanted if s not in known]
        if unknown:
            raise CLIError(f"no session {', '.join(map(repr, unknown))} in {rt.store_dir}; "
                           "'ctxrelay sessions' lists them")
        progress.status("verifying every record's checksum")
        records = check_records(store, str(rt.store_dir), repair)
        reports = []
        for i, session_id in enumerate(wanted):
            progress.status(f"checking {session_id} ({i + 1} of {len(wanted)} sessions)")
            reports.append(_check_session(rt, store, session_id))
        if repair:
            for i, report in enumerate(reports):
                if report["ok"]:
                    continue
                progress.status(f"repairing {report['session_id']}")
                fixed = _repair_session(store, report, progress)
                if fixed:
                    reports[i] = {**_check_session(rt, store, report["session_id"]),
                                  "repaired": fixed}
        progress.status("checking the warm and scratch stores")
        side = listing + records + _check_side_stores(store, repair)
        if repair and not any(r["problems"] for r in reports + side):
            sealed = add_checksums(store)
            if sealed:
                side.append({"store": "format", "repaired": sealed, "problems": []})
        n_problems = sum(len(r["problems"]) for r in reports + side)
        n_repaired = sum(len(r.get("repaired", ())) for r in reports + side)
        progress.status(f"{len(reports)} session(s) checked, {n_problems} problem(s)")
    for r in reports:
        for name in ("derived_problems", "turnlog_problems"):
            r.pop(name, None)
    if args.json:
        emit_json({"ok": n_problems == 0, "problems": n_problems, "repaired": n_repaired,
                   "sessions": reports, "stores": side})
    else:
        _print_report(reports, side, repair, n_problems, n_repaired)
    return EXIT_OK if n_problems == 0 else EXIT_PROBLEM


def register(commands: Commands) -> None:
    p = commands.add("check", "verify the store: contiguous turn ids, readable turns, search "
                     "index, counters, key records, turn log (exit 1 on a problem); --repair "
                     "rebuilds the derived records from the transcript",
                     ["ctxrelay check", "ctxrelay check ops", "ctxrelay --json check",
                      "ctxrelay check --repair"], parents=[progress_options()], func=cmd_check)
    p.add_argument("sessions", metavar="SESSION", nargs="*", help="default: every session")
    p.add_argument("--repair", action="store_true",
                   help="rebuild the search index, counters, key records and turn log of "
                        "each damaged session from its turns (the turns are never changed)")
