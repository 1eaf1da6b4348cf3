"""Functions that Prolog calls through ``py_call``.

The Prolog side holds only references to store objects, ids, numbers and short
strings; everything here takes and returns plain ``dict``/``list``/``str``/
``int``/``float``/``None`` so janus converts it without surprises (see the
janus boundary rules in ARCHITECTURE.md).
"""
from __future__ import annotations

import json
import io
import os
from pathlib import Path
from typing import Any

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.retrieval.router import router_for, turn_record
from ctxrelay.storage.lmdb.transcript import TranscriptStore, open_store


def _none_if_unset(value: Any) -> Any:
    # Prolog passes @none for an absent optional; janus maps it to None,
    # but an unbound option default arrives as the atom 'none' in some paths.
    return None if value in (None, "none") else value


def store(path: str, map_size: int = 0, max_turn_bytes: int = 0) -> TranscriptStore:
    kwargs: dict[str, Any] = {"map_size": int(map_size)} if map_size else {}
    if max_turn_bytes:
        kwargs["max_turn_bytes"] = int(max_turn_bytes)
    return open_store(os.fspath(path), **kwargs)


def check_input(st: TranscriptStore, texts: list) -> int:
    """A turn's new texts before any work: each within the store's size limit
    (TurnTooLargeError), and their token lower bound (for Prolog's fail-closed rule)."""
    from ctxrelay.text.tokens import lower_bound_all
    for text in texts:
        st.check_size(text)
    return lower_bound_all(texts)


def store_path(st: TranscriptStore) -> str:
    return str(st.path)


def close(st: TranscriptStore) -> None:
    st.close()


def create_session(st: TranscriptStore, session_id: str, metadata: Any) -> dict:
    return st.create_session(session_id, metadata=_none_if_unset(metadata)).to_dict()


def session(st: TranscriptStore, session_id: str) -> dict:
    return st.session(session_id).to_dict()


def sessions(st: TranscriptStore) -> list[dict]:
    return [s.to_dict() for s in st.sessions()]


def archive_session(st: TranscriptStore, session_id: str) -> None:
    st.archive_session(session_id)
    # Appends now raise: the session's rolling ring is dead weight until it
    # is read again (which rebuilds it from the transcript).
    router_for(st).forget(session_id)


def append(st: TranscriptStore, session_id: str, role: str, content: str,
           options: dict) -> int:
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    turn_id = st.append(
        session_id, role, content,
        name=opts.get("name"),
        tool_call_id=opts.get("tool_call_id"),
        metadata=opts.get("metadata"),
        timestamp=opts.get("timestamp"),
        key=opts.get("key"),
    )
    router_for(st).log_turn(session_id, turn_id)     # the rolling log follows every append
    return turn_id


def has_session(st: TranscriptStore, session_id: str) -> bool:
    return st.has_session(session_id)


def commit_turns(st: TranscriptStore, session_id: str, turns: list, create: bool) -> list[int]:
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
    ids = st.append_many(session_id, items, create=bool(create),
                         session_metadata={"created_by": "managed_turn"} if create else None)
    router = router_for(st)
    for turn_id in ids:
        router.log_turn(session_id, turn_id)
    return ids


def turn(st: TranscriptStore, session_id: str, turn_id: int) -> dict:
    return st.turn(session_id, int(turn_id)).to_dict()


def history(st: TranscriptStore, session_id: str, start: int, end: Any) -> list[dict]:
    end = _none_if_unset(end)
    return [t.to_dict() for t in st.history(session_id, int(start),
                                            None if end is None else int(end))]


def last(st: TranscriptStore, session_id: str, n: int) -> list[dict]:
    return [t.to_dict() for t in st.last(session_id, int(n))]


def turn_for_key(st: TranscriptStore, session_id: str, key: str) -> Any:
    return st.turn_for_key(session_id, key)


def turn_count(st: TranscriptStore, session_id: str) -> int:
    return st.turn_count(session_id)


def search(st: TranscriptStore, session_id: str, query: str, k: int) -> list[dict]:
    return [h.to_dict() for h in st.search(session_id, query, k=int(k))]


def export_jsonl(st: TranscriptStore, session_id: str, dest: Any) -> Any:
    dest = _none_if_unset(dest)
    return st.export_jsonl(session_id, dest)


def import_jsonl(st: TranscriptStore, source: str, is_file: bool, session_id: Any) -> str:
    # Text and paths are both str: Prolog says which one it passes.
    src: Any = Path(source) if is_file else io.StringIO(source)
    new_id = st.import_jsonl(src, session_id=_none_if_unset(session_id))
    router_for(st).sync(new_id)
    return new_id


def stats(st: TranscriptStore, session_id: str) -> dict:
    return st.stats(session_id).to_dict()




def warm_store_for(st: TranscriptStore) -> Any:
    """The warm artifact store beside the transcript, or None when none was published.

    A store is "configured" once an artifact has been published into
    ``<store>/warm``; assembly then ranks and offers its artifacts.
    """
    warm_dir = Path(st.path) / "warm"
    if not warm_dir.is_dir():
        return None
    from ctxrelay.storage.lmdb.warm import open_warm_store
    return open_warm_store(warm_dir)


def _warm_for_publish(st: TranscriptStore) -> Any:
    from ctxrelay.storage.lmdb.warm import open_warm_store
    return open_warm_store(Path(st.path) / "warm", transcript=st)


def publish_artifact(st: TranscriptStore, session_id: str, start: int, end: int,
                     summary: str, options: dict) -> dict:
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    lists = {k: list(opts.get(k) or []) for k in ("decisions", "facts", "unresolved", "entities")}
    art = _warm_for_publish(st).publish(
        session_id, int(start), int(end), summary,
        producer=opts.get("producer") or "api", metadata=opts.get("metadata"),
        key=opts.get("key"), **lists)
    return art.to_dict()


def artifacts(st: TranscriptStore, session_id: str) -> list[dict]:
    warm = warm_store_for(st)
    return [] if warm is None else [a.to_dict() for a in warm.latest(session_id)]


# -- scratch buffer (Tier E) --------------------------------------------------

def scratch_store_for(st: TranscriptStore, create: bool = False) -> Any:
    """The scratch buffer beside the transcript (``<store>/scratch``), or None."""
    return router_for(st).scratch(create=create)


def record_tool_output(st: TranscriptStore, session_id: str, tool_name: str, args: Any,
                       raw: Any, options: dict) -> dict:
    """Store a tool output as a blob and append the call and its summary as turns.

    The transcript gets an assistant turn carrying the tool call and a tool
    turn carrying only the structure-aware summary (the blob stays on disk),
    so a pack never holds a call without its result.
    """
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    st.session(session_id)                     # unknown session: fail before writing a blob
    scratch = scratch_store_for(st, create=True)
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
        retried = _retried_tool_output(st, scratch, session_id, tool_name, key)
        if retried is not None:
            return retried
    entry = scratch.put(session_id, tool_name, args, raw,
                        freshness=opts.get("freshness") or "VOLATILE")
    call_id = f"call_{entry.scratch_id}"
    call = {"id": call_id, "name": tool_name, "arguments": args}
    call_turn = st.append(session_id, "assistant", "", metadata={"tool_calls": [call],
                                                                 "scratch_id": entry.scratch_id},
                          key=None if key is None else f"{key}:call")
    tool_turn = st.append(session_id, "tool", entry.summary, name=tool_name, tool_call_id=call_id,
                          metadata={"scratch_id": entry.scratch_id, "freshness": entry.freshness},
                          key=None if key is None else f"{key}:result")
    router = router_for(st)
    router.log_turn(session_id, call_turn)
    router.log_turn(session_id, tool_turn)
    return {"scratch_id": entry.scratch_id, "call_turn": call_turn, "tool_turn": tool_turn,
            "summary": entry.summary}


def _retried_tool_output(st: TranscriptStore, scratch: Any, session_id: str, tool_name: str,
                         key: str) -> dict | None:
    """A keyed tool output whose call turn is already stored (a retry, possibly after a
    crash between the two turns): reuse its scratch entry and complete the pair."""
    call_turn = st.turn_for_key(session_id, f"{key}:call")
    if call_turn is None:
        return None
    call = st.turn(session_id, call_turn)
    scratch_id = (call.metadata or {}).get("scratch_id")
    if not scratch_id:
        return None
    entry = scratch.get(session_id, scratch_id, touch=False)
    tool_turn = st.append(session_id, "tool", entry.summary, name=tool_name,
                          tool_call_id=f"call_{scratch_id}",
                          metadata={"scratch_id": scratch_id, "freshness": entry.freshness},
                          key=f"{key}:result")
    router_for(st).log_turn(session_id, tool_turn)
    return {"scratch_id": scratch_id, "call_turn": call_turn, "tool_turn": tool_turn,
            "summary": entry.summary}


def scratch_entry(st: TranscriptStore, session_id: str, scratch_id: str, with_raw: bool) -> dict:
    router = router_for(st)
    scratch = router.scratch(create=True)
    if not with_raw:
        # A summary read is a pointer read; its LRU use is recorded off this path.
        found = scratch.entry_dict(session_id, scratch_id)
        router.touch_later(session_id, scratch_id, found["last_access"])
        return found
    entry = scratch.get(session_id, scratch_id).to_dict()
    raw = scratch.raw(session_id, scratch_id)
    entry["raw"] = raw if isinstance(raw, str) else raw.decode("latin-1")
    entry["raw_is_bytes"] = not isinstance(raw, str)
    return entry


def scratch_pin(st: TranscriptStore, session_id: str, scratch_id: str) -> dict:
    entry = scratch_store_for(st, create=True).pin(session_id, scratch_id).to_dict()
    # A pinned tool result is durable: promote it now (volatile readings never are).
    from ctxrelay.knowledge.promotion import promote_scratch_entry
    promote_scratch_entry(st, session_id, scratch_id)
    return entry


def scratch_list(st: TranscriptStore, session_id: str) -> list[dict]:
    scratch = scratch_store_for(st)
    return [] if scratch is None else [e.to_dict() for e in scratch.list(session_id)]


# -- knowledge (Tier P, the CKF) --------------------------------------------------

def fact_store_for(st: TranscriptStore) -> Any:
    """The knowledge store beside the transcript (``<store>/ckf``), opened on demand."""
    return router_for(st).facts()


def add_fact(st: TranscriptStore, content: str, options: dict) -> str:
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    return fact_store_for(st).add_fact(
        content, key=opts.get("key"), source=opts.get("source"),
        importance=opts.get("importance"), ttl=opts.get("ttl"),
        namespace=opts.get("namespace"), metadata=opts.get("metadata"))


def facts(st: TranscriptStore, query: str, k: int, namespace: Any) -> list[dict]:
    return [f.to_dict() for f in fact_store_for(st).facts(query, k=int(k),
                                                          namespace=_none_if_unset(namespace))]


def fact(st: TranscriptStore, key_or_id: str, namespace: Any) -> dict:
    return fact_store_for(st).fact(key_or_id, namespace=_none_if_unset(namespace)).to_dict()


def ingest(st: TranscriptStore, items: list, options: dict) -> dict:
    """Ingest texts and files; ``items`` are dicts {"text": ...} or {"path": ...}."""
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    sources: list[Any] = [Path(i["path"]) if "path" in i else i["text"] for i in items]
    report = fact_store_for(st).ingest(sources, namespace=opts.get("namespace"),
                                       source_type=opts.get("source_type"),
                                       progress=opts.get("progress"))
    return report.to_dict()


# -- the storage router (SPEC-035 §3) ------------------------------------------------

def recent(st: TranscriptStore, session_id: str, n: int) -> list[dict]:
    """The session's last ``n`` turns from its rolling log, as plain dicts."""
    return [turn_record(t) for t in router_for(st).recent(session_id, int(n))]


def recent_turns(st: TranscriptStore, session_id: str, n: int) -> list:
    """The same as :class:`~ctxrelay.types.Turn` objects (Prolog passes them on as
    one Python reference, for the Python facade)."""
    return router_for(st).recent(session_id, int(n))


def route(st: TranscriptStore, plan: dict) -> Any:
    """Run a router plan; the :class:`~ctxrelay.types.RetrievalResult` itself."""
    return router_for(st).execute(_plan(plan))


def route_plain(st: TranscriptStore, plan: dict, records: bool = False) -> dict:
    """Run a router plan; the result as plain types for Prolog.

    Items carry kind, id, score, via and text; the whole fact, turn or scratch
    entry (``record``) only with ``records`` -- Prolog holds ids, scores and
    the text it may pack, not every field (ARCHITECTURE.md, the janus boundary).
    """
    out = router_for(st).execute(_plan(plan)).to_dict()
    if not records:
        out["items"] = [{k: v for k, v in item.items() if k != "record"}
                        for item in out["items"]]
    return out


def _plan(plan: Any) -> dict:
    # Prolog's @none arrives as None; a query "none" must stay text, so no
    # _none_if_unset here.
    plan = dict(plan)
    plan["steps"] = [dict(s) for s in plan.get("steps") or []]
    return plan
