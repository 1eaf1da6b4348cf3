"""Functions that Prolog calls through ``py_call``.

The Prolog side holds only references to store objects, ids, numbers and short
strings; everything here takes and returns plain ``dict``/``list``/``str``/
``int``/``float``/``None`` so janus converts it without surprises (see the
janus boundary rules in ARCHITECTURE.md).
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from .transcript import TranscriptStore, open_store
from .types import Hit, SessionInfo, SessionStats, Turn


def _none_if_unset(value: Any) -> Any:
    # Prolog passes @none for an absent optional; janus maps it to None,
    # but an unbound option default arrives as the atom 'none' in some paths.
    return None if value in (None, "none") else value


def store(path: str, map_size: int = 0) -> TranscriptStore:
    kwargs = {"map_size": int(map_size)} if map_size else {}
    return open_store(os.fspath(path), **kwargs)


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


def append(st: TranscriptStore, session_id: str, role: str, content: str,
           options: dict) -> int:
    opts = {k: _none_if_unset(v) for k, v in dict(options).items()}
    return st.append(
        session_id, role, content,
        name=opts.get("name"),
        tool_call_id=opts.get("tool_call_id"),
        metadata=opts.get("metadata"),
        timestamp=opts.get("timestamp"),
        key=opts.get("key"),
    )


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
    return st.import_jsonl(src, session_id=_none_if_unset(session_id))


def stats(st: TranscriptStore, session_id: str) -> dict:
    return st.stats(session_id).to_dict()


def error_kind(exc: BaseException) -> str:
    """The ctxrelay kind of a Python exception (``python`` for foreign ones)."""
    return getattr(exc, "kind", "python")


# The records below are rebuilt by the facade from the dicts Prolog hands back.
RECORDS = {"turn": Turn, "hit": Hit, "session": SessionInfo, "stats": SessionStats}


def warm_store_for(st: TranscriptStore) -> Any:
    """The warm artifact store beside the transcript, or None when none was published.

    A store is "configured" once an artifact has been published into
    ``<store>/warm``; assembly then ranks and offers its artifacts.
    """
    warm_dir = Path(st.path) / "warm"
    if not warm_dir.is_dir():
        return None
    from .warm import open_warm_store
    return open_warm_store(warm_dir)


def _warm_for_publish(st: TranscriptStore) -> Any:
    from .warm import open_warm_store
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
