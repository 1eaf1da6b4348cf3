"""Functions that Prolog calls through ``py_call``.

The Prolog side holds a reference to the store's :class:`~ctxrelay.storage.stores.Stores`
(every function here takes it first and reaches the part it needs as an
attribute), ids, numbers and short strings; everything here takes and returns plain ``dict``/``list``/``str``/
``int``/``float``/``None`` so janus converts it without surprises (see the
janus boundary rules in ARCHITECTURE.md).
"""
from __future__ import annotations

import io
import json
import os
import time
from pathlib import Path
from typing import Any

from ctxrelay.errors import (ArchivedSessionError, InvalidArgumentError, KeyConflictError,
                             UnknownSessionError)
from ctxrelay.retrieval.router import Router, route_plan, turn_record
from ctxrelay.storage.common.scratch.checks import provenance_hash
from ctxrelay.storage.stores import Stores, find_stores, open_stores


def _none_if_unset(value: Any) -> Any:
    # Prolog passes @none for an absent optional; janus maps it to None,
    # but an unbound option default arrives as the atom 'none' in some paths.
    return None if value in (None, "none") else value


def store(spec: str, map_size: int = 0, max_turn_bytes: int = 0, cache: Any = None) -> Stores:
    """Open the store of ``spec`` (a directory or URL): one more reference to its
    one :class:`Stores` in this process (``close`` drops it)."""
    return open_stores(os.fspath(spec), cache=_none_if_unset(cache),
                       map_size=int(map_size) or None,
                       max_turn_bytes=int(max_turn_bytes) or None)


def store_for_dir(spec: str) -> Stores:
    """The open :class:`Stores` of ``spec`` without a new reference (Prolog's
    ``dir(Dir)`` alias); opened (and left open) if it is not open yet."""
    found = find_stores(os.fspath(spec))
    return found if found is not None else open_stores(os.fspath(spec))


def check_input(stores: Stores, texts: list) -> int:
    """A turn's new texts before any work: each within the store's size limit
    (TurnTooLargeError), and their token lower bound (for Prolog's fail-closed rule)."""
    from ctxrelay.text.tokens import lower_bound_all
    for text in texts:
        stores.transcript.check_size(text)
    return lower_bound_all(texts)


def store_path(stores: Stores) -> str:
    return stores.path


def close(stores: Stores) -> bool:
    """Drop one reference; True when that closed the store (no other holder left)."""
    return stores.close()


def create_session(stores: Stores, session_id: str, metadata: Any) -> dict:
    return stores.transcript.create_session(session_id,
                                            metadata=_none_if_unset(metadata)).to_dict()


def session(stores: Stores, session_id: str) -> dict:
    return stores.transcript.session(session_id).to_dict()


def sessions(stores: Stores) -> list[dict]:
    return [s.to_dict() for s in stores.transcript.sessions()]


def archive_session(stores: Stores, session_id: str) -> None:
    stores.transcript.archive_session(session_id)
    # Appends now raise: the session's rolling ring is dead weight until it
    # is read again (which rebuilds it from the transcript).
    Router.of(stores).forget(session_id)


def append(stores: Stores, session_id: str, role: str, content: str,
           options: dict) -> int:
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    turn_id = stores.transcript.append(
        session_id, role, content,
        name=opts.get("name"),
        tool_call_id=opts.get("tool_call_id"),
        metadata=opts.get("metadata"),
        timestamp=opts.get("timestamp"),
        key=opts.get("key"),
    )
    Router.of(stores).log_turn(session_id, turn_id)   # the rolling log follows every append
    return turn_id


def session_state(stores: Stores, session_id: str) -> str:
    """``none``, ``open`` or ``archived``: what turn_prepare/4 needs of a session, in
    one read (an archived session is refused before any model
    is called)."""
    try:
        info = stores.transcript.session(session_id)
    except UnknownSessionError:
        return "none"
    return "archived" if info.archived else "open"


def commit_turns(stores: Stores, session_id: str, turns: list, create: bool) -> list[int]:
    """Store a managed turn's new turns (earlier messages, the user's, the reply)
    in one transaction, creating the session in it when ``create``; the rolling
    log follows.  Returns their ids in order."""
    items = []
    for t in turns:
        item = {k: (v if k in ("role", "content") else _none_if_unset(v))
                for k, v in dict(t).items()}
        if isinstance(item.get("metadata"), dict):
            item["metadata"] = dict(item["metadata"])
        items.append(item)
    ids = stores.transcript.append_many(
        session_id, items, create=bool(create),
        session_metadata={"created_by": "managed_turn"} if create else None)
    Router.of(stores).log_turns(session_id, list(ids))
    return ids


def turn(stores: Stores, session_id: str, turn_id: int) -> dict:
    return stores.transcript.turn(session_id, int(turn_id)).to_dict()


def history(stores: Stores, session_id: str, start: int, end: Any) -> list[dict]:
    end = _none_if_unset(end)
    return [t.to_dict() for t in stores.transcript.history(
        session_id, int(start), None if end is None else int(end))]


def last(stores: Stores, session_id: str, n: int) -> list[dict]:
    return [t.to_dict() for t in stores.transcript.last(session_id, int(n))]


def turn_for_key(stores: Stores, session_id: str, key: str) -> Any:
    return stores.transcript.turn_for_key(session_id, key)


def turn_count(stores: Stores, session_id: str) -> int:
    return stores.transcript.turn_count(session_id)


def search(stores: Stores, session_id: str, query: str, k: int) -> list[dict]:
    return [h.to_dict() for h in stores.transcript.search(session_id, query, k=int(k))]


def export_jsonl(stores: Stores, session_id: str, dest: Any) -> Any:
    dest = _none_if_unset(dest)
    return stores.transcript.export_jsonl(session_id, dest)


def import_jsonl(stores: Stores, source: str, is_file: bool, session_id: Any) -> str:
    # Text and paths are both str: Prolog says which one it passes.
    src: Any = Path(source) if is_file else io.StringIO(source)
    new_id = stores.transcript.import_jsonl(src, session_id=_none_if_unset(session_id))
    Router.of(stores).sync(new_id)
    return new_id


def stats(stores: Stores, session_id: str) -> dict:
    return stores.transcript.stats(session_id).to_dict()


# -- warm artifacts ---------------------------------------------------------------

def warm_store_for(stores: Stores) -> Any:
    """The warm artifact store, or None when none was published.

    A store is "configured" once an artifact has been published; assembly
    then ranks and offers its artifacts.
    """
    return stores.warm_if_present()


def publish_artifact(stores: Stores, session_id: str, start: int, end: int,
                     summary: str, options: dict) -> dict:
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    lists = {k: list(opts.get(k) or []) for k in ("decisions", "facts", "unresolved", "entities")}
    art = stores.warm.publish(
        session_id, int(start), int(end), summary,
        producer=opts.get("producer") or "api", metadata=opts.get("metadata"),
        key=opts.get("key"), transcript=stores.transcript, **lists)
    return art.to_dict()


def artifacts(stores: Stores, session_id: str) -> list[dict]:
    stores.transcript.session(session_id)      # an unknown session is an error, not []
    warm = stores.warm_if_present()
    return [] if warm is None else [a.to_dict() for a in warm.latest(session_id)]


# -- scratch buffer (Tier E) --------------------------------------------------

def record_tool_output(stores: Stores, session_id: str, tool_name: str, args: Any,
                       raw: Any, options: dict) -> dict:
    """Store a tool output as a blob and append the call and its summary as turns.

    The transcript gets an assistant turn carrying the tool call and a tool
    turn carrying only the structure-aware summary (the blob stays on disk),
    both in one transaction, so neither a pack nor the transcript ever holds
    a call without its result.  When the turns are refused (a summary over
    ``max_turn_bytes``, a full store) the blob is removed again.
    """
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    st = stores.transcript
    info = st.session(session_id)              # unknown session: fail before writing a blob
    scratch = stores.scratch
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as exc:
            raise InvalidArgumentError(f"tool arguments are not valid JSON ({exc}); pass a "
                                       "dict or a JSON object text") from None
        if not isinstance(args, dict):
            raise InvalidArgumentError("tool arguments must be a JSON object (a dict)")
    args = dict(args or {})
    key = opts.get("key")
    if key is not None:
        retried = _retried_tool_output(stores, session_id, tool_name, key, args, raw)
        if retried is not None:
            return retried
    if info.archived:                          # as append() would, but before the blob
        raise ArchivedSessionError(
            f"session {session_id!r} is archived and takes no new turns; record the "
            "output in a new session (it can be read as before)")
    entry = scratch.put(session_id, tool_name, args, raw,
                        freshness=opts.get("freshness") or "VOLATILE")
    call_id = f"call_{entry.scratch_id}"
    call = {"id": call_id, "name": tool_name, "arguments": args}
    pair = [{"role": "assistant", "content": "",
             "metadata": {"tool_calls": [call], "scratch_id": entry.scratch_id},
             "key": None if key is None else f"{key}:call"},
            {"role": "tool", "content": entry.summary, "name": tool_name,
             "tool_call_id": call_id,
             "metadata": {"scratch_id": entry.scratch_id, "freshness": entry.freshness},
             "key": None if key is None else f"{key}:result"}]
    try:
        call_turn, tool_turn = st.append_many(session_id, pair)
    except BaseException as exc:
        # No turn names the entry: remove it, unless the store cannot say whether
        # the turns were stored (then they may name it).
        if getattr(exc, "kind", None) != "store_outcome_unknown":
            try:
                scratch.delete(session_id, entry.scratch_id)
            except Exception:               # the refusal is what the caller must see
                pass
        raise
    Router.of(stores).log_turns(session_id, [call_turn, tool_turn])
    return {"scratch_id": entry.scratch_id, "call_turn": call_turn, "tool_turn": tool_turn,
            "summary": entry.summary}


def _retried_tool_output(stores: Stores, session_id: str, tool_name: str,
                         key: str, args: dict, raw: Any) -> dict | None:
    """A keyed tool output whose call turn is already stored: reuse its scratch entry and
    complete the pair if its result turn is missing (a store written by an earlier
    version, which stored the two turns in two transactions).  The
    key names one output: another tool, arguments or output under it is a
    KeyConflictError, as append() says of a turn (returning the stored id would drop
    the new output unseen)."""
    st = stores.transcript
    call_turn = st.turn_for_key(session_id, f"{key}:call")
    if call_turn is None:
        return None
    call = st.turn(session_id, call_turn)
    scratch_id = (call.metadata or {}).get("scratch_id")
    if not scratch_id:
        return None
    entry = stores.scratch.get(session_id, scratch_id, touch=False)
    if provenance_hash(tool_name, args, raw) != entry.sha256:
        raise KeyConflictError(
            f"key {key!r} was already used for tool output {scratch_id} of session "
            f"{session_id!r} with a different tool, arguments or output; use a new key for "
            "a new tool output")
    tool_turn = st.append(session_id, "tool", entry.summary, name=tool_name,
                          tool_call_id=f"call_{scratch_id}",
                          metadata={"scratch_id": scratch_id, "freshness": entry.freshness},
                          key=f"{key}:result")
    Router.of(stores).log_turn(session_id, tool_turn)
    return {"scratch_id": scratch_id, "call_turn": call_turn, "tool_turn": tool_turn,
            "summary": entry.summary}


def scratch_entry(stores: Stores, session_id: str, scratch_id: str, with_raw: bool) -> dict:
    scratch = stores.scratch
    if not with_raw:
        # A summary read is a pointer read; its LRU use is recorded off this path.
        found = scratch.entry_dict(session_id, scratch_id)
        Router.of(stores).touch_later(session_id, scratch_id, found["last_access"])
        return found
    entry = scratch.get(session_id, scratch_id).to_dict()
    raw = scratch.raw(session_id, scratch_id)
    entry["raw"] = raw if isinstance(raw, str) else raw.decode("latin-1")
    entry["raw_is_bytes"] = not isinstance(raw, str)
    return entry


def scratch_pin(stores: Stores, session_id: str, scratch_id: str) -> dict:
    # ctxrelay_scratch:scratch_pin/3 then promotes it by the Prolog rule.
    return stores.scratch.pin(session_id, scratch_id).to_dict()


def scratch_list(stores: Stores, session_id: str) -> list[dict]:
    stores.transcript.session(session_id)      # an unknown session is an error, not []
    scratch = stores.scratch_if_present()
    return [] if scratch is None else [e.to_dict() for e in scratch.list(session_id)]


# -- knowledge (Tier P, the CKF) --------------------------------------------------

def add_fact(stores: Stores, content: str, options: dict) -> str:
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    return stores.facts.add_fact(
        content, key=opts.get("key"), source=opts.get("source"),
        importance=opts.get("importance"), ttl=opts.get("ttl"),
        namespace=opts.get("namespace"), metadata=opts.get("metadata"))


def facts(stores: Stores, query: str, k: int, namespace: Any) -> list[dict]:
    return [f.to_dict() for f in stores.facts.facts(query, k=int(k),
                                                     namespace=_none_if_unset(namespace))]


def fact(stores: Stores, key_or_id: str, namespace: Any) -> dict:
    return stores.facts.fact(key_or_id, namespace=_none_if_unset(namespace)).to_dict()


def ingest(stores: Stores, items: list, options: dict) -> dict:
    """Ingest texts and files; ``items`` are dicts {"text": ...} or {"path": ...}."""
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    sources: list[Any] = [Path(i["path"]) if "path" in i else i["text"] for i in items]
    report = stores.facts.ingest(sources, namespace=opts.get("namespace"),
                                 source_type=opts.get("source_type"),
                                 progress=opts.get("progress"))
    return report.to_dict()


def reindex_facts(stores: Stores, namespace: Any) -> dict:
    """Rebuild the ANN index of ``namespace`` (None: every namespace) on one thread;
    ``knowledge_reindex/3`` documents the report."""
    ns = _none_if_unset(namespace)
    facts = stores.facts_if_present()
    known = [] if facts is None else facts.namespaces()
    if ns is not None and ns not in known:
        raise InvalidArgumentError(
            f"the knowledge store has no namespace {ns!r}; its namespaces: "
            f"{', '.join(map(repr, known)) or 'none'} (omit the namespace to rebuild them all)")
    started = time.perf_counter()
    chosen = known if ns is None else [ns]
    vectors = sum(facts.rebuild_index(namespace=name) for name in chosen)
    return {"namespaces": chosen, "vectors": vectors,
            "seconds": round(time.perf_counter() - started, 3)}


# -- the storage router (SPEC-035 §3) ------------------------------------------------

def recent(stores: Stores, session_id: str, n: int) -> list[dict]:
    """The session's last ``n`` turns from its rolling log, as plain dicts."""
    return [turn_record(t) for t in Router.of(stores).recent(session_id, int(n))]


def recent_turns(stores: Stores, session_id: str, n: int) -> list:
    """The same as :class:`~ctxrelay.types.Turn` objects (Prolog passes them on as
    one Python reference, for the Python facade)."""
    return Router.of(stores).recent(session_id, int(n))


def route(stores: Stores, plan: dict) -> Any:
    """Run a router plan; the :class:`~ctxrelay.types.RetrievalResult` itself."""
    return Router.of(stores).execute(_plan(plan))


def route_plain(stores: Stores, plan: dict, records: bool = False) -> dict:
    """Run a router plan; the result as plain types for Prolog.

    Items carry kind, id, score, via and text; the whole fact, turn or scratch
    entry (``record``) only with ``records`` -- Prolog holds ids, scores and
    the text it may pack, not every field (ARCHITECTURE.md, the janus boundary).
    """
    out = Router.of(stores).execute(_plan(plan)).to_dict()
    if not records:
        out["items"] = [{k: v for k, v in item.items() if k != "record"}
                        for item in out["items"]]
    return out


def _plan(plan: Any) -> dict:
    # Prolog's @none arrives as None; a query "none" must stay text, so no
    # _none_if_unset here.
    return route_plan(plan)
