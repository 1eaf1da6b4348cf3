"""The ``ctxrelay`` command line.

``ctxrelay [--store DIR] [--json] COMMAND ...``; ``ctxrelay COMMAND --help``
shows each command's options and examples.  Exit codes: 0 ok, 1 a failure or
a problem found (``check``, ``doctor``, provider errors, context overflow), 2
usage or bad input (unknown session, bad role, missing store).  Error messages
go to stderr as ``ctxrelay: error: ...``; with ``--json`` every command prints
exactly one JSON document on stdout, ``{"ok": true, ...}`` or
``{"ok": false, "error": {...}}``.

One module per command group (``sessions``, ``turns``, ``search``, ``packs``,
``knowledge``, ``scratch``, ``transfer``, ``derive``, ``check``, ``serve``,
``doctor``), each with its own small parser builder (``register``); the shared
pieces are ``common`` (store, exit codes, argument types), ``output`` (JSON and
text), ``parser`` and ``progress``; ``app`` holds ``main``.  These modules
import only the standard library at module level: each command imports the
library (``ctxrelay.runtime`` and what else it needs) when it runs, through
the public :class:`ctxrelay.Runtime`.
"""
from __future__ import annotations

from ctxrelay.apps.cli.app import build_parser, main
from ctxrelay.apps.cli.common import (DEFAULT_STORE, EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, ROLES,
                                      STORE_ENV, CLIError)

__all__ = ["main", "build_parser", "CLIError", "DEFAULT_STORE", "STORE_ENV", "ROLES",
           "EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE"]
