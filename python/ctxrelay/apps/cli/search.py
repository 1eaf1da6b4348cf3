"""``search``: BM25 over one session's turns."""
from __future__ import annotations

import argparse

from ctxrelay.apps.cli.common import EXIT_OK, count, open_runtime
from ctxrelay.apps.cli.output import emit_json, one_line, out, table
from ctxrelay.apps.cli.parser import Commands


def cmd_search(args: argparse.Namespace) -> int:
    with open_runtime(args) as rt:
        hits = rt.search(args.session, args.query, k=args.k)
    if args.json:
        emit_json({"session_id": args.session, "query": args.query, "hits": hits})
    elif not hits:
        out(f"no turn of {args.session} matches {args.query!r}")
    else:
        out(table(["turn", "role", "score", "content"],
                  [[f"#{h.turn_id}", h.role, f"{h.score:.3f}", one_line(h.content)]
                   for h in hits], indent="", right=(0, 2)))
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add("search", "BM25 search over one session's turns",
                     ["ctxrelay search ops quota", "ctxrelay search ops 'defrag window' -k 3"],
                     func=cmd_search)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("query", metavar="QUERY")
    p.add_argument("-k", type=count(1), default=10, metavar="N", help="hits (default 10)")
