"""``migrate``: copy a store to another back end (a directory <-> postgresql://)."""
from __future__ import annotations

import argparse
import sys

from ctxrelay.apps.cli.common import EXIT_OK, CLIError
from ctxrelay.apps.cli.output import emit_json, out
from ctxrelay.apps.cli.parser import Commands


def cmd_migrate(args: argparse.Namespace) -> int:
    from ctxrelay.errors import CtxRelayError
    from ctxrelay.storage.migrate import migrate

    def progress(copy: object) -> None:
        if not args.json:
            print(f"copied {copy.session_id} ({copy.turns} turns)", file=sys.stderr)
    try:
        report = migrate(args.source, args.target, on_session=progress)
    except CtxRelayError as exc:
        raise CLIError(str(exc)) from None
    if args.json:
        emit_json(report.to_dict())
    else:
        out(f"migrated {len(report.sessions)} session(s), {report.turns} turn(s), "
            f"{report.facts} fact(s) in {len(report.namespaces)} namespace(s) from "
            f"{report.source} to {report.target}; checksum {report.checksum}")
        if report.rebuild:
            out(f"rebuild on the target: {', '.join(report.rebuild)} "
                "(ctxrelay --store TARGET derive SESSION)")
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add(
        "migrate", "copy every session, turn and fact of a store to another store (another "
        "back end), verified by checksums",
        ["ctxrelay migrate --from .ctxrelay --to postgresql://ctxrelay@127.0.0.1:55432/ctxrelay",
         "ctxrelay migrate --from postgresql://host/db --to ./store-copy"],
        func=cmd_migrate)
    p.add_argument("--from", dest="source", required=True, metavar="SPEC",
                   help="the store to copy: a directory or a URL (postgresql://...)")
    p.add_argument("--to", dest="target", required=True, metavar="SPEC",
                   help="where to copy it: a new directory or a URL; must hold none of "
                   "the source's sessions")
