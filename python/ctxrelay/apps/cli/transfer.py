"""``export`` and ``import``: a session as JSON Lines (a header line, then one line per turn)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ctxrelay.apps.cli.common import EXIT_OK, CLIError, open_runtime
from ctxrelay.apps.cli.output import emit_json, out
from ctxrelay.apps.cli.parser import Commands


def cmd_export(args: argparse.Namespace) -> int:
    with open_runtime(args) as rt:
        count = rt.turn_count(args.session)
        if args.output and args.output != "-":
            rt.export(args.session, args.output)
            text = None
        else:
            text = rt.export(args.session)
    if args.json:
        emit_json({"session_id": args.session, "turns": count,
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
    with open_runtime(args) as rt:
        session_id = rt.import_jsonl(source, session_id=args.session)
        count = rt.turn_count(session_id)
    if args.json:
        emit_json({"session_id": session_id, "turns": count})
    else:
        out(f"imported {session_id} ({count} turns)")
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add("export", "write a session as JSON Lines (header line, then one line per "
                     "turn)", ["ctxrelay export ops > ops.jsonl", "ctxrelay export ops -o ops.jsonl"],
                     func=cmd_export)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (atomically) not stdout")

    p = commands.add("import", "create a session from an exported JSONL file",
                     ["ctxrelay import ops.jsonl", "ctxrelay import ops.jsonl --session ops-copy",
                      "ctxrelay --store a export ops | ctxrelay --store b import -"],
                     func=cmd_import)
    p.add_argument("file", metavar="FILE", help="'-' reads stdin")
    p.add_argument("--session", metavar="ID", help="import under this id instead of the file's")
