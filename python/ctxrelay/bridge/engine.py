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
from ctxrelay.bridge import messages

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
    "thread": errors.UnknownThreadError,
    "ctxrelay_store": errors.StoreClosedError,    # a store closed under a Prolog handle
    "option": errors.InvalidArgumentError,      # an option missing or unknown: the call's fault
}


def _classes_by_kind() -> dict[str, type[errors.CtxRelayError]]:
    found: dict[str, type[errors.CtxRelayError]] = {}
    pending = [errors.CtxRelayError]
    while pending:
        cls = pending.pop()
        found.setdefault(cls.kind, cls)
        pending.extend(cls.__subclasses__())
    return found


def translate(exc: janus.PrologError,
              arguments: dict[str, tuple[str, Any]] | None = None) -> errors.CtxRelayError:
    """The ctxrelay exception for a Prolog error raised through janus.

    ``arguments`` maps the goal's variables to the caller's (Python name, value),
    so a type or domain error names the argument the caller passed and picks the
    class that fits it (ctxrelay.bridge.messages)."""
    if exc.term is None:
        return errors.PrologError(str(exc))
    info = janus.query_once("ctxrelay_errors:error_info(E, I)", {"E": exc.term})["I"]
    kind, message = info["kind"], info["message"]
    if kind == "existence_error":
        cls = _EXISTENCE_CLASSES.get(info.get("what", ""), errors.CtxRelayError)
        said = info.get("said")
        if isinstance(said, str) and said:
            return cls(said)             # an error raised in Python keeps its own message
        if info.get("what") == "option":
            return errors.InvalidArgumentError(
                f"unknown option {info.get('culprit')}; see the predicate's documentation for "
                "the options it takes")
        if info.get("what") == "session":
            return cls(f"no session {info.get('culprit')!r}; create it first with "
                       "create_session() (or pass create_session=True to prepare_turn())")
        return cls(message)
    if info["formal"].startswith("domain_error(pack_constraint,"):
        culprit = info["formal"][len("domain_error(pack_constraint,"):-1]
        return errors.InvalidConstraintError(message, constraint=culprit)
    worded = messages.exception(info, arguments)
    if worded is not None:
        return worded
    cls = _classes_by_kind().get(kind) or _ISO_CLASSES.get(kind, errors.PrologError)
    details = {str(k): v for k, v in dict(info.get("details") or {}).items()}
    if cls is errors.ContextOverflowError:
        return cls(message, **details)
    if cls is errors.InconsistentConstraintsError:
        return cls(message, **{k: v for k, v in details.items()
                               if k in ("constraints", "mandatory", "budget", "unit")})
    return cls(message)


def once(goal: str, bindings: dict[str, Any] | None = None, *,
         names: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a deterministic goal; failure is a bug and raises PrologError.

    ``names`` gives the caller's name of a binding (``{"S": "session_id"}``) for
    error messages."""
    ensure_loaded()
    try:
        result = janus.query_once(goal, bindings or {})
    except janus.PrologError as exc:
        raise translate(exc, _arguments(bindings, names)) from None
    if not result["truth"]:
        raise errors.PrologError(f"goal failed unexpectedly: {goal}")
    return result


def _arguments(bindings: dict[str, Any] | None,
               names: dict[str, str] | None) -> dict[str, tuple[str, Any]]:
    found = {var: (names[var], value) for var, value in (bindings or {}).items()
             if names and var in names}
    for pair in (bindings or {}).get("OptPairs") or []:      # keyword options
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            found[f"option {pair[0]}"] = (str(pair[0]), pair[1])
    return found


def solutions(goal: str, bindings: dict[str, Any] | None = None, *,
              names: dict[str, str] | None = None):
    """Iterate over the solutions of a nondeterministic goal, closing the query.

    ``names`` names the bindings in error messages, as for :func:`once`."""
    ensure_loaded()
    q = janus.query(goal, bindings or {})
    try:
        while True:
            try:
                answer = q.next()
            except janus.PrologError as exc:
                raise translate(exc, _arguments(bindings, names)) from None
            if answer is None:
                return
            yield answer
    finally:
        q.close()


def _embedded_word_bounds(model_id: str) -> Any:
    return once("ctxrelay_policy:embedded_word_bounds(M, B)", {"M": model_id})["B"]


# How much of a turn the turn log embeds is Prolog's rule; the text layer asks through here.
from ctxrelay.text import bounds as _bounds  # noqa: E402
_bounds.use_rule_reader(_embedded_word_bounds)
