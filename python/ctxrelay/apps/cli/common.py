"""What every command shares: exit codes, the CLI's own error, the store, argument types.

Standard library only at module level: the parser (and so ``--help``) is built
from these, and must not load models or open stores.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE = 0, 1, 2
DEFAULT_STORE = ".ctxrelay"
STORE_ENV = "CTXRELAY_STORE"
# ctxrelay.types.ROLES, repeated so that building the parser needs no library
# module (tests/apps/cli/test_cli_commands.py checks the two agree).
ROLES = ("system", "user", "assistant", "tool")


class CLIError(Exception):
    """A failure the CLI itself detects; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


# -- the store ---------------------------------------------------------------------------

def store_path(args: argparse.Namespace) -> Path:
    """``--store``, else ``$CTXRELAY_STORE``, else ``./.ctxrelay`` (in that order).
    A server store's URL (``postgresql://...``) stays a string: a Path would fold
    its ``//``."""
    given = args.store or os.environ.get(STORE_ENV) or DEFAULT_STORE
    return given if "://" in given and not given.startswith("lmdb://") else Path(given)


def store_origin(args: argparse.Namespace) -> str:
    """Where :func:`store_path` took the path from, for error messages."""
    if args.store:
        return "--store"
    return STORE_ENV if os.environ.get(STORE_ENV) else f"the default ./{DEFAULT_STORE}"


def store_exists(path: Path) -> bool:
    if isinstance(path, str):        # a server store: opening it says whether it is there
        return True
    return (path / "transcript.lmdb").is_dir()


def require_store(args: argparse.Namespace) -> Path:
    """The store's path; a usage error naming the fix if no store is there."""
    path = store_path(args)
    if not store_exists(path):
        raise CLIError(f"no ctxrelay store at {path} (from {store_origin(args)}); create one "
                       f"with 'ctxrelay --store {path} init', or point --store or {STORE_ENV} "
                       "at an existing store")
    return path


@contextlib.contextmanager
def open_runtime(args: argparse.Namespace, *, create: bool = False) -> Iterator[Any]:
    """The :class:`ctxrelay.Runtime` of the store; only ``create=True`` makes one."""
    path = store_path(args) if create else require_store(args)
    from ctxrelay.runtime import Runtime
    rt = Runtime(path)
    try:
        yield rt
    finally:
        rt.close()


def runtime_method(name: str, what: str = "the knowledge store") -> Callable[..., Any]:
    """``Runtime.<name>``, or a clear error when this version has no such method."""
    from ctxrelay.runtime import Runtime
    fn = getattr(Runtime, name, None)
    if not callable(fn):
        raise CLIError(f"{what} is not available in this version of ctxrelay "
                       f"(Runtime.{name} is missing); update ctxrelay")
    return fn


def accepts(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name``."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def ensure_session(rt: Any, session_id: str) -> bool:
    """Create the session unless it exists; True if it was created."""
    from ctxrelay.errors import UnknownSessionError
    try:
        rt.session(session_id)
        return False
    except UnknownSessionError:
        rt.create_session(session_id)
        return True


# -- argument types ----------------------------------------------------------------------

def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value
    parse.__name__ = "integer"
    return parse


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
    return value


def nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def json_object(what: str, text: str | None) -> dict[str, Any] | None:
    """``text`` parsed as a JSON object (None stays None); a usage error otherwise."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CLIError(f"{what} is not valid JSON ({exc.msg} at column {exc.colno}); "
                       f"pass an object such as '{{\"team\": \"ops\"}}'") from None
    if not isinstance(value, dict):
        raise CLIError(f"{what} must be a JSON object such as '{{\"team\": \"ops\"}}', "
                       f"not {type(value).__name__}")
    return value


def text_arg(value: str | None, what: str) -> str:
    """The argument itself, or stdin for ``-`` / a missing argument with piped input."""
    if value is None or value == "-":
        if value is None and sys.stdin.isatty():
            raise CLIError(f"give the {what} as an argument, or pipe it on stdin (use '-')")
        return sys.stdin.read()
    return value
