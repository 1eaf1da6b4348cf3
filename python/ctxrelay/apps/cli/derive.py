"""``derive``: bring a session's turn log (embeddings, threads, entities) up to date."""
from __future__ import annotations

import argparse

from ctxrelay.apps.cli.common import EXIT_OK, open_runtime, runtime_method
from ctxrelay.apps.cli.output import emit_json, out
from ctxrelay.apps.cli.parser import Commands, progress_options
from ctxrelay.apps.cli.progress import Progress


def cmd_derive(args: argparse.Namespace) -> int:
    runtime_method("derive", "the turn log")
    with Progress("derive", enabled=not args.no_progress,
                  interval=args.progress_interval) as progress, open_runtime(args) as rt:
        total = rt.turn_count(args.session)
        progress.status(f"{'re-deriving' if args.recompute else 'deriving'} {args.session} "
                        f"({total} turns"
                        + (f", embedder {args.embedder})" if args.embedder else ")"))
        result = rt.derive(args.session, embedder=args.embedder, recompute=args.recompute,
                           progress=progress.bar)
        progress.status(f"{result.get('derived', '?')} turn(s) derived")
    if args.json:
        emit_json({"session_id": args.session, **result})
    else:
        out(f"{args.session}: {result.get('derived', '?')} turn(s) derived with "
            f"{result.get('embedder', '?')}")
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add("derive", "bring a session's derived fields (embeddings, topic threads, "
                     "entities, references) up to date; --recompute re-derives them all",
                     ["ctxrelay derive ops", "ctxrelay derive ops --embedder hashing --recompute",
                      "ctxrelay --json derive ops"], parents=[progress_options()],
                     func=cmd_derive)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("--embedder", metavar="NAME",
                   help="embedder to derive with (default: the default embedder, which "
                        "'ctxrelay doctor' names)")
    p.add_argument("--recompute", action="store_true",
                   help="drop the derived fields and derive every turn again (after changing "
                        "the embedder)")
