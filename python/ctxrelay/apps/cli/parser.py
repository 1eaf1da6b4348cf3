"""The argparse pieces every command group builds its parser from."""
from __future__ import annotations

import argparse
from typing import Any, Callable, NoReturn, Sequence

from ctxrelay.apps.cli.common import DEFAULT_STORE, STORE_ENV, nonnegative_float
from ctxrelay.apps.cli.progress import DEFAULT_INTERVAL

Handler = Callable[[argparse.Namespace], int]

STORE_HELP = f"the store directory (default: ${STORE_ENV}, else ./{DEFAULT_STORE})"
JSON_HELP = "print one JSON document on stdout"


class UsageError(Exception):
    """A usage error, raised (not printed) so main() can answer --json with JSON too."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


class Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34)


def examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)


def common_options() -> argparse.ArgumentParser:
    """--store and --json, accepted after the command too (SUPPRESS keeps the global value)."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=STORE_HELP)
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    return p


def progress_options() -> argparse.ArgumentParser:
    """--no-progress and --progress-interval, for the commands that can take long."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("progress (on stderr)")
    g.add_argument("--no-progress", action="store_true",
                   help="no progress bar on a terminal, no progress lines elsewhere")
    g.add_argument("--progress-interval", type=nonnegative_float, default=DEFAULT_INTERVAL,
                   metavar="S", help="when stderr is not a terminal, print a progress line "
                   f"every S seconds (default {DEFAULT_INTERVAL:g}; 0: at every step)")
    return p


class Commands:
    """Adds subcommands, each with a description, examples and the common options."""

    def __init__(self, subparsers: Any) -> None:
        self._subparsers = subparsers
        self._common = common_options()

    def add(self, name: str, help_: str, example_lines: Sequence[str], *,
            func: Handler | None = None, parents: Sequence[argparse.ArgumentParser] = (),
            within: Any = None, **kwargs: Any) -> argparse.ArgumentParser:
        """A (sub)command ``name``; ``within`` is the subparsers of a command group."""
        p = (within or self._subparsers).add_parser(
            name, help=help_, description=help_, epilog=examples(*example_lines),
            formatter_class=Formatter, parents=[self._common, *parents], **kwargs)
        if func is not None:
            p.set_defaults(func=func)
        return p
