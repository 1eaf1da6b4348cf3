"""``init``, ``sessions`` and ``stats``: the store and its sessions."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ctxrelay.apps.cli.common import (EXIT_OK, CLIError, json_object, open_runtime,
                                      store_exists, store_path)
from ctxrelay.apps.cli.output import emit_json, field_lines, out, plain, table, yes
from ctxrelay.apps.cli.parser import Commands


def cmd_init(args: argparse.Namespace) -> int:
    path = store_path(args)
    if path.exists() and not path.is_dir():
        raise CLIError(f"{path} exists and is not a directory; pick another --store")
    existed = store_exists(path)
    with open_runtime(args, create=True) as rt:
        n = len(rt.sessions())
    if args.json:
        emit_json({"store": str(path.resolve()), "created": not existed, "sessions": n})
    elif existed:
        out(f"store {path} already exists ({n} session{'s' * (n != 1)}); nothing to do")
    else:
        out(f"initialised store {path}")
        out(f"next: ctxrelay --store {path} sessions create SESSION")
    return EXIT_OK


def cmd_sessions(args: argparse.Namespace) -> int:
    action = args.sessions_cmd or "list"
    with open_runtime(args) as rt:
        if action == "list":
            sessions = rt.sessions()
            if args.json:
                emit_json({"sessions": sessions})
            elif not sessions:
                out("no sessions; create one with 'ctxrelay sessions create SESSION'")
            else:
                out(table(["session", "turns", "created", "archived"],
                          [[s.session_id, s.turn_count, s.created, yes(s.archived)]
                           for s in sessions], indent="", right=(1,)))
            return EXIT_OK
        if action == "create":
            info = rt.create_session(args.session,
                                     metadata=json_object("--metadata", args.metadata))
        elif action == "archive":
            rt.archive_session(args.session)
            info = rt.session(args.session)
        else:
            info = rt.session(args.session)
    if args.json:
        emit_json(info)
        return EXIT_OK
    verb = {"create": "created", "archive": "archived"}.get(action)
    if verb:
        out(f"{verb} session {info.session_id}")
    else:
        for line in field_lines(plain(info)):
            out(line)
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    with open_runtime(args) as rt:
        if args.session:
            st = rt.stats(args.session)
            if args.json:
                emit_json(st)
            else:
                for k, v in plain(st).items():
                    out(f"{k}: {json.dumps(v) if isinstance(v, dict) else v}")
            return EXIT_OK
        all_stats = [rt.stats(s.session_id) for s in rt.sessions()]
    totals: dict[str, Any] = {
        "store": str(store_path(args)), "sessions": len(all_stats),
        "turns": sum(s.turn_count for s in all_stats), "bytes": sum(s.bytes for s in all_stats),
        "tokens": sum(s.tokens for s in all_stats),
        "tokens_exact": all(s.tokens_exact for s in all_stats)}
    if args.json:
        emit_json({**totals, "by_session": all_stats})
        return EXIT_OK
    out(f"store {totals['store']}: {totals['sessions']} sessions, {totals['turns']} turns, "
        f"{totals['bytes']} bytes, {totals['tokens']} tokens"
        + ("" if totals["tokens_exact"] else " (some estimated)"))
    if all_stats:
        out(table(["session", "turns", "bytes", "tokens", "last turn"],
                  [[s.session_id, s.turn_count, s.bytes, s.tokens, s.last_timestamp or ""]
                   for s in all_stats], right=(1, 2, 3)))
    return EXIT_OK


def register(commands: Commands) -> None:
    commands.add("init", "create a store (nothing happens if it exists)",
                 ["ctxrelay init", "ctxrelay --store /var/lib/agent/ctx init"], func=cmd_init)

    p = commands.add("sessions", "list, create, show or archive sessions",
                     ["ctxrelay sessions",
                      "ctxrelay sessions create ops --metadata '{\"team\": \"sre\"}'",
                      "ctxrelay sessions show ops", "ctxrelay sessions archive ops"],
                     func=cmd_sessions)
    actions = p.add_subparsers(dest="sessions_cmd", metavar="ACTION")
    commands.add("list", "list the sessions (the default)", ["ctxrelay sessions list"],
                 within=actions)
    q = commands.add("create", "create a session",
                     ["ctxrelay sessions create ops",
                      "ctxrelay sessions create ops --metadata '{\"a\": 1}'"], within=actions)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("--metadata", metavar="JSON", help="a JSON object kept with the session")
    for action, text in (("show", "show one session"),
                         ("archive", "archive a session (reads go on, appends stop)")):
        q = commands.add(action, text, [f"ctxrelay sessions {action} ops"], within=actions)
        q.add_argument("session", metavar="SESSION")

    p = commands.add("stats", "counts of one session, or of the whole store",
                     ["ctxrelay stats", "ctxrelay stats ops", "ctxrelay --json stats ops"],
                     func=cmd_stats)
    p.add_argument("session", metavar="SESSION", nargs="?")
