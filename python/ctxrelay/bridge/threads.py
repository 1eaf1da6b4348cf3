"""The turn log and topic threads as Prolog calls them (library(ctxrelay)'s
``threads.pl``, and the managed turn's reference recording).

Each function takes the store's :class:`~ctxrelay.storage.stores.Stores` first,
reaches the turn log as ``stores.turnlog`` and the transcript as
``stores.transcript`` (whatever back end holds them), and takes and returns plain
values.
"""
from __future__ import annotations

import sys
from typing import Any

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.turnlog_derivation import session_embedder
from ctxrelay.text.threads import STATE_FIELDS


def _embedder(name: Any) -> Any:
    from ctxrelay.text.embed import get_embedder
    return get_embedder(name or None)


def api_derive(stores: Any, session_id: str, embedder: str = "", recompute: bool = False,
               progress: Any = None) -> dict[str, Any]:
    """Bring the session's derived fields up to date (or drop and re-derive them all)."""
    emb = _embedder(embedder)
    show = sys.stderr.isatty() if progress is None else bool(progress)
    log, store = stores.turnlog, stores.transcript
    n = log.recompute(store, session_id, emb, progress=show) if recompute else \
        log.sync(store, session_id, emb, progress=show)
    return {"derived": n, "embedder": emb.model_id}


def api_derived(stores: Any, session_id: str, turn_id: int) -> Any:
    d = stores.turnlog.derived(session_id, int(turn_id))
    if d is None:
        stores.transcript.session(session_id)     # an unknown session is an error, not None
        return None
    return {"turn_id": d.turn_id, "thread_id": d.thread_id, "entities": list(d.entities),
            "references": list(d.references), "tool_calls": list(d.tool_calls),
            "model_id": d.model_id}


def api_threads(stores: Any, session_id: str) -> list[dict[str, Any]]:
    stores.transcript.session(session_id)     # an unknown session is an error, not []
    return [t.to_dict() for t in stores.turnlog.threads(session_id, stores.transcript)]


def api_thread(stores: Any, session_id: str, thread_id: str) -> dict[str, Any]:
    stores.transcript.session(session_id)
    return stores.turnlog.thread(session_id, thread_id, stores.transcript).to_dict()


def api_set_thread_state(stores: Any, session_id: str, thread_id: str,
                         state: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(state) - set(STATE_FIELDS))
    if unknown:
        raise InvalidArgumentError(
            f"unknown thread state field(s) {', '.join(unknown)}; use established, "
            "open_questions and user_constraints (lists of strings)")
    for name, value in state.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InvalidArgumentError(f"{name} must be a list of strings, not {value!r}")
    stores.transcript.session(session_id)
    log = stores.turnlog
    log.set_thread_state(session_id, thread_id, **state)
    return log.thread(session_id, thread_id, stores.transcript).to_dict()


def api_session_embedder(stores: Any, session_id: str) -> str:
    """The registered name of the embedder the session's turn log was derived with,
    or "" (:func:`ctxrelay.storage.turnlog_derivation.session_embedder`)."""
    return session_embedder(stores.turnlog, session_id)


def api_set_references(stores: Any, session_id: str, turn_id: int, references: list,
                       embedder: str = "") -> bool:
    """Record the turns a message resolved its references to, deriving the turn log
    up to it first (a managed turn stores its message at commit, after assembly)."""
    log = stores.turnlog
    if log.derived(session_id, int(turn_id)) is None:
        log.sync(stores.transcript, session_id, _embedder(embedder))
    try:
        log.set_references(session_id, int(turn_id), [int(r) for r in references])
    except InvalidArgumentError:          # still not derived (e.g. a turn of another log)
        return False
    return True
