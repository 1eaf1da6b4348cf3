"""The embedded Prolog engine: loading library(ctxrelay) and calling it.

``import ctxrelay`` embeds SWI-Prolog through janus_swi (or joins the one that
is hosting Python when Prolog came first) and loads library(ctxrelay) into
module ``user``, so its public predicates answer ``janus.query_once(...)``.
Prolog error terms come back as the matching :mod:`ctxrelay.errors` class.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import janus_swi as janus

from ctxrelay import errors

_load_lock = threading.Lock()
_loaded = False


def prolog_dir() -> Path:
    """The directory holding ctxrelay.pl: inside the wheel or the checkout."""
    here = Path(__file__).resolve().parent.parent      # the ctxrelay package
    for candidate in (here / "prolog", here.parent.parent / "prolog"):
        if (candidate / "ctxrelay.pl").is_file():
            return candidate
    raise errors.CtxRelayError(
        f"cannot find ctxrelay.pl near {here}; reinstall the package "
        "(pip install -e . from the checkout) so the Prolog sources ship with it"
    )


def ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if _loaded:
            return
        directory = prolog_dir()
        janus.query_once(
            "( user:file_search_path(library, Dir) -> true"
            " ; asserta(user:file_search_path(library, Dir)) )",
            {"Dir": str(directory)},
        )
        # Through precompiled .qlf files, rebuilt whenever a source changes.
        from ctxrelay.bridge import qlf
        qlf.load(directory, "use_module(user:library(ctxrelay))")
        _loaded = True


# ISO formal names mapped to the Python class a caller would catch.
_ISO_CLASSES: dict[str, type[errors.CtxRelayError]] = {
    "type_error": errors.InvalidArgumentError,
    "domain_error": errors.InvalidArgumentError,
    "instantiation_error": errors.InvalidArgumentError,
    "representation_error": errors.InvalidArgumentError,
    "evaluation_error": errors.InvalidArgumentError,
}
_EXISTENCE_CLASSES: dict[str, type[errors.CtxRelayError]] = {
    "session": errors.UnknownSessionError,
    "turn": errors.UnknownTurnError,
}


def _classes_by_kind() -> dict[str, type[errors.CtxRelayError]]:
    found: dict[str, type[errors.CtxRelayError]] = {}
    pending = [errors.CtxRelayError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.kind, cls)
        pending.extend(cls.__subclasses__())
    return found


def _domain_class(formal: str) -> type[errors.CtxRelayError] | None:
    if formal.startswith("domain_error(role,"):
        return errors.InvalidRoleError
    if formal.startswith("type_error(text,"):
        return errors.InvalidContentError
    return None


def translate(exc: janus.PrologError) -> errors.CtxRelayError:
    """The ctxrelay exception for a Prolog error raised through janus."""
    if exc.term is None:
        return errors.PrologError(str(exc))
    info = janus.query_once("ctxrelay_errors:error_info(E, I)", {"E": exc.term})["I"]
    kind, message = info["kind"], info["message"]
    if kind == "existence_error":
        cls = _EXISTENCE_CLASSES.get(info.get("what", ""), errors.CtxRelayError)
        return cls(message)
    cls = _classes_by_kind().get(kind) or _domain_class(info["formal"]) \
        or _ISO_CLASSES.get(kind, errors.PrologError)
    if cls is errors.ContextOverflowError:
        return cls(message, **{str(k): v for k, v in dict(info.get("details") or {}).items()})
    return cls(message)


def once(goal: str, bindings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run a deterministic goal; failure is a bug and raises PrologError."""
    ensure_loaded()
    try:
        result = janus.query_once(goal, bindings or {})
    except janus.PrologError as exc:
        raise translate(exc) from None
    if not result["truth"]:
        raise errors.PrologError(f"goal failed unexpectedly: {goal}")
    return result


def solutions(goal: str, bindings: dict[str, Any] | None = None):
    """Iterate over the solutions of a nondeterministic goal, closing the query."""
    ensure_loaded()
    q = janus.query(goal, bindings or {})
    try:
        while True:
            try:
                answer = q.next()
            except janus.PrologError as exc:
                raise translate(exc) from None
            if answer is None:
                return
            yield answer
    finally:
        q.close()

