"""``scratch``: tool outputs kept whole (list, show, pin, record)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctxrelay.apps.cli.common import EXIT_OK, CLIError, json_object, open_runtime
from ctxrelay.apps.cli.output import emit_json, field_lines, out, table, yes
from ctxrelay.apps.cli.parser import Commands


def _read_file(name: str) -> bytes:
    """The tool output FILE's bytes; a missing or unreadable file is a usage error."""
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise CLIError(f"{name} is not a file it can read ({exc.strerror}); pass the file "
                       "holding the tool's output (or '-' for stdin)") from None


def cmd_scratch(args: argparse.Namespace) -> int:
    action = args.scratch_cmd
    with open_runtime(args) as rt:
        if action == "list":
            entries = rt.scratch_entries(args.session)
            if args.json:
                emit_json({"session_id": args.session, "entries": entries})
            elif not entries:
                out(f"no tool outputs in {args.session}")
            else:
                out(table(["scratch id", "tool", "kind", "bytes", "freshness", "pinned",
                           "created"],
                          [[e.get("scratch_id"), e.get("tool_name"), e.get("kind"),
                            e.get("size"), e.get("freshness"), yes(e.get("pinned")),
                            e.get("created_at")] for e in entries], indent="", right=(3,)))
            return EXIT_OK
        if action == "show" and args.raw:
            raw = rt.scratch(args.session, args.scratch_id, raw=True)
            if args.json:
                is_bytes = isinstance(raw, bytes)
                emit_json({"scratch_id": args.scratch_id, "raw_is_bytes": is_bytes,
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
                         else _read_file(args.file))
            try:
                raw_text: str | bytes = raw_bytes.decode("utf-8")
            except UnicodeDecodeError:
                raw_text = raw_bytes
            sid = rt.record_tool_output(args.session, args.tool, json_object("--args", args.args),
                                        raw_text, freshness=args.freshness, key=args.key)
            entry = rt.scratch(args.session, sid)
    if args.json:
        emit_json(entry)
    elif action == "show":
        for line in field_lines(entry, skip=("summary",)):
            out(line)
        out("summary:")
        for line in str(entry.get("summary", "")).splitlines():
            out(f"    {line}")
    elif action == "pin":
        out(f"pinned {entry['scratch_id']}")
    else:
        out(entry["scratch_id"])
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add("scratch", "tool outputs kept whole: list, show (--raw), pin, record",
                     ["ctxrelay scratch list ops", "ctxrelay scratch show ops scr_77285df7...",
                      "ctxrelay scratch show ops scr_77285df7... --raw > output.txt",
                      "ctxrelay scratch pin ops scr_77285df7...",
                      "kubectl get pods | ctxrelay scratch record ops kubectl "
                      "--args '{\"cmd\": \"get pods\"}'"],
                     func=cmd_scratch)
    actions = p.add_subparsers(dest="scratch_cmd", metavar="ACTION", required=True)
    q = commands.add("list", "a session's tool outputs", ["ctxrelay scratch list ops"],
                     within=actions)
    q.add_argument("session", metavar="SESSION")
    q = commands.add("show", "one entry (summary, provenance, freshness)",
                     ["ctxrelay scratch show ops scr_...",
                      "ctxrelay scratch show ops scr_... --raw"], within=actions)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("scratch_id", metavar="SCRATCH_ID")
    q.add_argument("--raw", action="store_true", help="print the whole stored output")
    q = commands.add("pin", "keep an output from eviction", ["ctxrelay scratch pin ops scr_..."],
                     within=actions)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("scratch_id", metavar="SCRATCH_ID")
    q = commands.add("record", "store a tool output; prints its scratch id",
                     ["kubectl get pods | ctxrelay scratch record ops kubectl",
                      "ctxrelay scratch record ops sql result.csv --args '{\"q\": \"select 1\"}'"],
                     within=actions)
    q.add_argument("session", metavar="SESSION")
    q.add_argument("tool", metavar="TOOL_NAME")
    q.add_argument("file", metavar="FILE", nargs="?", help="the output; '-' or nothing: stdin")
    q.add_argument("--args", metavar="JSON", help="the call's arguments, a JSON object")
    q.add_argument("--freshness", default="VOLATILE",
                   help="REALTIME, VOLATILE, STABLE ... (default VOLATILE)")
    q.add_argument("--key", help="idempotency key")
