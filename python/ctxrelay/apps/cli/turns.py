"""``append`` and ``history``: writing and reading a session's turns."""
from __future__ import annotations

import argparse
from typing import Any, Sequence

from ctxrelay.apps.cli.common import (EXIT_OK, ROLES, CLIError, count, ensure_session,
                                      json_object, open_runtime, text_arg)
from ctxrelay.apps.cli.output import emit_json, out
from ctxrelay.apps.cli.parser import Commands


def cmd_append(args: argparse.Namespace) -> int:
    content = text_arg(args.content, "content")
    metadata = json_object("--metadata", args.metadata)
    with open_runtime(args) as rt:
        created = args.create and ensure_session(rt, args.session)
        turn_id = rt.append(args.session, args.role, content, name=args.name,
                            tool_call_id=args.tool_call_id, metadata=metadata,
                            timestamp=args.timestamp, key=args.key)
    if args.json:
        emit_json({"session_id": args.session, "turn_id": turn_id, "created_session": created})
    else:
        out(f"{args.session} #{turn_id}")
    return EXIT_OK


def print_turns(turns: Sequence[Any]) -> None:
    for t in turns:
        extra = "".join(f"  {k}={v}" for k, v in (("name", t.name),
                                                   ("tool_call_id", t.tool_call_id),
                                                   ("key", t.key)) if v)
        out(f"#{t.turn_id} {t.role}  {t.timestamp}{extra}")
        for line in (t.content.splitlines() or [""]):
            out(f"    {line}")


def cmd_history(args: argparse.Namespace) -> int:
    if args.last is not None and (args.start is not None or args.end is not None):
        raise CLIError("--last cannot be combined with --start/--end; use one or the other")
    if args.start is not None and args.end is not None and args.end < args.start:
        raise CLIError(f"--end {args.end} is before --start {args.start}; "
                       "give a range with start <= end")
    with open_runtime(args) as rt:
        if args.last is not None:
            turns = rt.last(args.session, args.last)
        else:
            turns = rt.history(args.session, args.start or 1, args.end)
    if args.json:
        emit_json({"session_id": args.session, "turns": turns})
    elif not turns:
        out(f"no turns in {args.session} for that range")
    else:
        print_turns(turns)
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add("append", "append one turn to a session",
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

    p = commands.add("history", "print a session's turns (1-based ids, inclusive ranges)",
                     ["ctxrelay history ops", "ctxrelay history ops --last 5",
                      "ctxrelay history ops --start 10 --end 12",
                      "ctxrelay --json history ops --start 100"], func=cmd_history)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--start", type=count(1), metavar="N", help="first turn (default 1)")
    p.add_argument("--end", type=count(1), metavar="N", help="last turn (default: the last)")
    p.add_argument("--last", type=count(0), metavar="N", help="the last N turns")
