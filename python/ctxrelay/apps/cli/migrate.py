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
        return EXIT_OK
    out(f"migrated {report.source} to {report.target} in {report.seconds:.1f} s, "
        "every part read back and compared:")
    for name, totals in report.part_totals().items():
        counts = ", ".join(f"{k} {v}" for k, v in totals.items()
                           if k != "checksum" and not isinstance(v, (bool, float)))
        out(f"  {name:<10} {counts}; checksum {totals['checksum'][:16]}")
    if report.rebuild:
        out(f"derived again at the target (hand-set inputs copied): {', '.join(report.rebuild)}")
    out(f"store checksum {report.checksum}")
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add(
        "migrate", "copy a whole store (sessions, turns, keys, facts, warm artifacts, scratch "
        "entries and blobs; the turn log derived again) to another store, another back end, "
        "verified part by part with counts and checksums",
        ["ctxrelay migrate --from .ctxrelay --to postgresql://ctxrelay@127.0.0.1:55432/ctxrelay",
         "ctxrelay migrate --from postgresql://host/db --to ./store-copy"],
        func=cmd_migrate)
    p.add_argument("--from", dest="source", required=True, metavar="SPEC",
                   help="the store to copy: a directory or a URL (postgresql://...)")
    p.add_argument("--to", dest="target", required=True, metavar="SPEC",
                   help="where to copy it: a new directory or a URL; must hold none of "
                   "the source's sessions, fact namespaces, artifacts or scratch entries")
