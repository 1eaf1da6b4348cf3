"""The top-level parser, ``main()``, and how failures become exit codes and messages."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, NoReturn, Sequence

from ctxrelay.apps.cli import (check, derive, doctor, keys, knowledge, migrate, packs, scratch,
                               search,
                               serve, sessions, transfer, turns)
from ctxrelay.apps.cli.common import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CLIError
from ctxrelay.apps.cli.output import emit_error, emit_json
from ctxrelay.apps.cli.parser import (JSON_HELP, STORE_HELP, Commands, Formatter, Parser,
                                      UsageError, examples)

# The command groups, in the order ``ctxrelay --help`` lists their commands.
GROUPS = (sessions, turns, search, packs, knowledge, scratch, transfer, migrate, derive, check,
          serve, keys, doctor)

# Commands that take options the CLI does not know and pass them on.
PASS_THROUGH = frozenset({"serve"})


class _VersionRequested(Exception):
    pass


class _VersionAction(argparse.Action):
    """--version: main() prints it (to stdout, as JSON with --json)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> NoReturn:
        raise _VersionRequested()


def version() -> str:
    import importlib.metadata
    try:
        return importlib.metadata.version("ctxrelay")
    except importlib.metadata.PackageNotFoundError:
        import ctxrelay
        return str(getattr(ctxrelay, "__version__", "unknown"))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="ctxrelay", formatter_class=Formatter,
        description="ctxrelay: durable transcripts and bounded, accounted context packs "
                    "for LLM agents.",
        epilog=examples("ctxrelay init",
                        "ctxrelay sessions create ops",
                        "ctxrelay append ops user 'our etcd quota is 8 GiB'",
                        "ctxrelay turn ops 'what was the quota?' --explain",
                        "ctxrelay --json search ops quota")
        + "\n\nstore: --store DIR, else $CTXRELAY_STORE, else ./.ctxrelay"
        + "\nexit codes: 0 ok, 1 failure or problem found, 2 usage or bad input")
    parser.add_argument("--store", metavar="DIR", default=None, help=STORE_HELP)
    parser.add_argument("--json", action="store_true", default=False, help=JSON_HELP)
    parser.add_argument("--version", action=_VersionAction,
                        help="print the installed version and exit")
    commands = Commands(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    for group in GROUPS:
        group.register(commands)
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments; options a pass-through command does not know become its ``server_args``."""
    args, extras = parser.parse_known_args(argv)
    if extras and args.command not in PASS_THROUGH:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    args.server_args = extras
    return args


# -- failures ----------------------------------------------------------------------------

def _fail(args: argparse.Namespace | None, kind: str, message: str, code: int) -> int:
    if message.startswith("ctxrelay: "):
        message = message[len("ctxrelay: "):]
    print(f"ctxrelay: error: {message}", file=sys.stderr)
    if args is not None and getattr(args, "json", False):
        emit_error(kind, message, code)
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
    "turnlog_embedder_mismatch": "'ctxrelay derive SESSION --embedder NAME --recompute' "
                                 "re-derives the session with another embedder; or leave "
                                 "--embedder out",
}


def _wants_json(argv: Sequence[str]) -> bool:
    options = argv[:argv.index("--")] if "--" in argv else argv
    return "--json" in options


# -- entry point -------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse(parser, argv)
    except _VersionRequested:
        if _wants_json(argv):
            emit_json({"version": version()})
        else:
            print(f"ctxrelay {version()}")
        return EXIT_OK
    except SystemExit as exc:                       # --help
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
    except UsageError as exc:
        exc.parser.print_usage(sys.stderr)
        print(f"{exc.parser.prog}: error: {exc}", file=sys.stderr)
        if _wants_json(argv):
            emit_error("usage", str(exc), EXIT_USAGE)
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
        kind = str(getattr(exc, "kind", "ctxrelay_error"))
        rc = _fail(args, kind, str(exc), _exit_code(exc))
        if kind in _HINTS:
            print(f"ctxrelay: hint: {_HINTS[kind]}", file=sys.stderr)
        return rc
