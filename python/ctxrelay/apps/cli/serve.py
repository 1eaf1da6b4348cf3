"""``serve``: run the relay (``ctxrelay.apps.server``) on this CLI's store.

``ctxrelay serve --store DIR --port 8000 --upstream echo`` takes the relay's own
options directly: every option ``serve`` does not know itself is passed on to
``ctxrelay.apps.server.main`` unchanged (so the relay's parser stays the one
authority on them), with ``--store`` set from the CLI's store (``--store``, else
``$CTXRELAY_STORE``, else ``./.ctxrelay``).  As the relay does, ``serve`` creates
the store if it is missing.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType
from typing import Any, NoReturn

from ctxrelay.apps.cli.common import EXIT_PROBLEM, STORE_ENV, CLIError, store_path
from ctxrelay.apps.cli.parser import Commands

SERVER = "ctxrelay.apps.server"


def server_module() -> ModuleType:
    """The relay's module, or an error saying what to install."""
    try:
        module = importlib.import_module(SERVER)
    except ModuleNotFoundError as exc:
        if exc.name == SERVER:
            raise CLIError("the HTTP server is not available in this version of ctxrelay "
                           f"(no {SERVER} module); update ctxrelay") from None
        raise CLIError(f"ctxrelay serve needs {exc.name}, which is not installed; "
                       "install the server extra: pip install -e '.[server]'",
                       EXIT_PROBLEM) from None
    if not callable(getattr(module, "main", None)):
        raise CLIError(f"{SERVER} has no main(); update ctxrelay", EXIT_PROBLEM)
    return module


def server_argv(args: argparse.Namespace) -> list[str]:
    """What ``serve`` passes to the relay: ``--store`` first, then the options given."""
    rest = list(getattr(args, "server_args", []))
    if "--" in rest:                       # the old spelling: ctxrelay serve -- --port 8080
        rest.remove("--")
    # A store URL (postgresql://...) goes as given: a Path would fold its '//'.
    given = args.store or os.environ.get(STORE_ENV) or ""
    return ["--store", given if "://" in given else str(store_path(args)), *rest]


def cmd_serve(args: argparse.Namespace) -> int:
    return int(server_module().main(server_argv(args)) or 0)


class _ServeHelp(argparse.Action):
    """``serve --help``: this command's help, then the relay's own options."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: Any = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> NoReturn:
        parser.print_help()
        sys.stdout.write(f"\nthe relay's options ({SERVER}; serve sets --store itself):\n")
        sys.stdout.flush()
        try:
            server_module().main(["--help"])
        except SystemExit:
            pass
        except CLIError as exc:
            sys.stdout.write(f"  not available: {exc}\n")
        parser.exit()


def register(commands: Commands) -> None:
    p = commands.add(
        "serve", "run the OpenAI-compatible relay on the store; the relay's options "
        "(--port, --upstream, --model, policy flags ...) pass through",
        ["ctxrelay serve --store store --port 8000 --upstream echo",
         "CTXRELAY_STORE=store ctxrelay serve --upstream http://127.0.0.1:8080/v1 "
         "--model qwen2.5 --max-context-tokens 8192",
         "ctxrelay serve --help   # the relay's options too"],
        func=cmd_serve, add_help=False)
    p.add_argument("-h", "--help", action=_ServeHelp,
                   help="show this help and the relay's options, then exit")
