"""The turn log's derivation, one home for every back end.

What a turn log derives from stored turns -- which topic thread each turn
joins, a new thread's label, the thread records, the per-turn records, the
candidate threads of the next turn -- is decided here, on plain records,
and each back end (``storage/lmdb/turnlog.py``, ``storage/postgres/turnlog.py``)
only reads and writes them.  So the same turns give the same thread ids and
labels whatever holds them.

A back end hands the derivation a :class:`RecordReader` over one
transaction (the one that will write the chunk, or a read-only one for
:func:`load_book`) and writes the :class:`ChunkWrites` it gets back in that
same transaction.  Records are JSON-shaped dicts:

- progress (per session): ``derived_upto``, ``model_id``, ``next_thread``,
  ``active_thread``, ``recent`` (the most recently active threads, newest first);
- thread (per ``T<n>``): ``thread_id``, ``label``, ``turn_ids`` (the latest
  :data:`KEPT_MEMBERS`), ``user_turns``, ``recent_turns``, ``terms``,
  ``exchange_terms``, ``user_terms``, ``bridges``, ``turn_count``, ``last_active_turn``, ``override``;
- turn: ``thread_id``, ``entities``, ``references``, ``tool_calls``, ``model_id``.
"""
from __future__ import annotations

import re
import sys
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from ctxrelay.errors import EmbedderMismatchError, UnknownSessionError
from ctxrelay.memo import keep
from ctxrelay.text import threads as thread_numbers
from ctxrelay.text.bounds import derived_text, embedding_texts
from ctxrelay.text.threads import (STATE_FIELDS, STATE_TURNS, ThreadBook, ThreadEntry,
                                   ThreadState, derive_state, make_label, with_override)
from ctxrelay.types import Turn

__all__ = ["SYNC_CHUNK", "KEPT_MEMBERS", "DENSE_WINDOW", "DENSE_SESSIONS", "ThreadInfo",
           "DerivedTurn", "RecordReader", "ChunkWrites", "fresh_progress", "derive_chunk",
           "load_book", "next_label", "thread_info", "with_state_fields", "thread_num",
           "extract_entities", "tool_call_ids", "progress_bar", "TurnLogBase",
           "appended_window"]

SYNC_CHUNK = 128            # turns derived (embedded and written) per transaction
KEPT_MEMBERS = 256          # member turn ids kept in a thread record (the latest)
DENSE_WINDOW = 2000         # turns a dense recall scans (the latest; older ones via BM25, context/3)
DENSE_SESSIONS = 8          # sessions whose dense window a process keeps in memory

_ENTITY = re.compile(r"`([^`]{2,60})`|\b([A-Za-z]+[-_.][A-Za-z0-9][\w.-]*|[A-Za-z]*\d[\w.-]*[A-Za-z][\w.-]*)\b"
                     r"|(?<![.!?]\s)(?<!^)\b([A-Z][a-zA-Z]{2,}(?:\s[A-Z][a-zA-Z]{2,})*)")


@dataclass(frozen=True)
class ThreadInfo:
    thread_id: str
    label: str
    turn_ids: list[int]            # the latest members (at most KEPT_MEMBERS)
    last_active_turn: int
    state: ThreadState
    user_turns: list[int] = field(default_factory=list)   # latest user turns
    turn_count: int = 0
    recent_turns: list[int] = field(default_factory=list)  # latest turns, any role

    def to_dict(self) -> dict[str, Any]:
        return {"thread_id": self.thread_id, "label": self.label, "turn_ids": list(self.turn_ids),
                "last_active_turn": self.last_active_turn, "state": self.state.to_dict(),
                "user_turns": list(self.user_turns), "turn_count": self.turn_count,
                "recent_turns": list(self.recent_turns)}


@dataclass(frozen=True)
class DerivedTurn:
    turn_id: int
    thread_id: str
    entities: list[str]
    references: list[int]
    tool_calls: list[str]
    model_id: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def extract_entities(text: str) -> list[str]:
    """Named things a later turn may point back to: code spans, ids, proper names."""
    found: list[str] = []
    for m in _ENTITY.finditer(text):
        ent = next(g for g in m.groups() if g)
        ent = ent.strip(".-_")
        if len(ent) >= 2 and ent not in found:
            found.append(ent)
    return found[:24]


def tool_call_ids(turn: Turn) -> list[str]:
    """The tool call ids a turn carries (and its scratch entry, if any)."""
    calls = turn.metadata.get("tool_calls") if isinstance(turn.metadata, dict) else None
    ids = [str(c.get("id")) for c in calls if isinstance(c, dict) and c.get("id")] \
        if isinstance(calls, list) else []
    scratch = turn.metadata.get("scratch_id") if isinstance(turn.metadata, dict) else None
    return ids + ([str(scratch)] if scratch else [])


def thread_num(thread_id: Any) -> int | None:
    """n of a thread id ``"T<n>"`` (None for anything else)."""
    if isinstance(thread_id, str) and thread_id[:1] == "T" and thread_id[1:].isdigit():
        return int(thread_id[1:])
    return None


def progress_bar(total: int, wanted: bool, desc: str) -> Any:
    if not wanted or not sys.stderr.isatty():
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="turn")


# -- what a back end provides ----------------------------------------------------------

class RecordReader(Protocol):
    """Reads of one session's records inside one transaction of a back end."""

    def threads(self, nums: list[int]) -> dict[int, dict[str, Any]]:
        """The thread records numbered ``nums`` that exist."""

    def latest_threads(self, limit: int) -> list[dict[str, Any]]:
        """The ``limit`` latest-started thread records, newest first."""

    def vectors(self, turn_ids: list[int]) -> dict[int, np.ndarray]:
        """The stored vectors of ``turn_ids`` (float32) that exist."""

    def turn(self, turn_id: int) -> dict[str, Any] | None:
        """A turn's derived record."""

    def centroids(self, nums: list[int]) -> dict[int, np.ndarray]:
        """The stored centroids (sums of member vectors) of threads ``nums``."""

    def label_taken(self, label: str) -> bool:
        """Whether a thread of the session has ``label``."""


@dataclass
class ChunkWrites:
    """What deriving a chunk writes, in the same transaction as its reads."""

    progress: dict[str, Any]
    turns: list[tuple[int, dict[str, Any], np.ndarray]] = field(default_factory=list)
    threads: list[tuple[int, dict[str, Any], np.ndarray]] = field(default_factory=list)
    labels: list[tuple[str, str]] = field(default_factory=list)      # (label, thread id)


def fresh_progress(model_id: str) -> dict[str, Any]:
    return {"derived_upto": 0, "model_id": model_id, "next_thread": 1, "active_thread": None}


# -- deriving -------------------------------------------------------------------------

def load_book(reader: RecordReader, prog: dict[str, Any],
              thresholds: dict[str, float]) -> ThreadBook:
    """The session's candidate threads for its next user turn: the most recently
    active first, with the vectors of their latest turns."""
    limit = thread_numbers.RECENT_THREADS
    order = list(prog.get("recent") or [])[:limit]
    if order:
        nums = [n for n in (thread_num(t) for t in order) if n is not None]
        found = reader.threads(nums)
        records = [found[n] for n in nums if n in found]
    else:                              # a turn log derived before recency was kept
        records = reader.latest_threads(limit)
    previous = prog.get("active_thread")
    last = prog.get("derived_upto", 0)
    if last:
        rec = reader.turn(last)
        if rec is not None and rec.get("thread_id"):
            previous = rec["thread_id"]
    # The thread of the last turn is the most recently active one; a turn log
    # derived before recency was kept may not have it among the latest started.
    if thread_num(previous) is not None and all(r["thread_id"] != previous for r in records):
        records = [*reader.threads([thread_num(previous)]).values(), *records]
    wanted = {t: None for info in records
              for t in (info.get("recent_turns") or info.get("user_turns", []))}
    stored = reader.vectors(list(wanted))
    entries = [ThreadEntry(info, [stored[t] for t in
                                  (info.get("recent_turns") or info.get("user_turns", []))
                                  if t in stored])
               for info in records]
    return ThreadBook(entries, previous, dict(thresholds))


def derive_chunk(reader: RecordReader, prog: dict[str, Any], turns: list[Turn],
                 vectors: np.ndarray, embedder: Any) -> ChunkWrites:
    """Derive ``turns`` (with their ``vectors``) after the session's progress
    ``prog``: each user turn is placed by the thread rules among the most
    recently active threads, as an assembly places a new message
    (``ThreadBook.place``: the same rule on the same numbers); assistant and
    tool turns stay in the thread of the turn they answer; instructions
    belong to no thread.  Turns at or before ``derived_upto`` are skipped
    (another process derived them)."""
    prog = dict(prog)
    out = ChunkWrites(prog)
    pairs = [(t, np.asarray(v, dtype=np.float32)) for t, v in zip(turns, vectors)
             if t.turn_id > prog.get("derived_upto", 0)]
    if not pairs:
        return out
    book = load_book(reader, prog, embedder.thresholds)
    new_labels: dict[str, str] = {}
    touched: dict[str, None] = {}
    sums: dict[str, np.ndarray] = {}
    for turn, vec in pairs:
        if turn.role == "system":
            out.turns.append((turn.turn_id, {"thread_id": "", "entities": [], "references": [],
                                             "tool_calls": [], "model_id": embedder.model_id},
                              vec))
            prog["derived_upto"] = turn.turn_id
            continue
        if turn.role != "user" and book.previous:
            thread_id = book.previous              # replies stay with what they answer
        else:
            placed = book.place(turn.content, vec)
            thread_id = placed.thread_id if placed.action != "new" else \
                _new_thread(reader, book, prog, turn, new_labels)
        touched[thread_id] = None
        info = book.record_turn(thread_id, turn, vec)
        # Bounded records: a thread keeps its latest members here (the
        # per-turn thread id stays complete).
        del info["turn_ids"][:-KEPT_MEMBERS]
        sums[thread_id] = sums.get(thread_id, np.zeros_like(vec)) + vec
        if turn.role == "user":
            prog["active_thread"] = thread_id
        book.previous = thread_id
        out.turns.append((turn.turn_id, {"thread_id": thread_id,
                                         "entities": extract_entities(derived_text(turn.content)),
                                         "references": [], "tool_calls": tool_call_ids(turn),
                                         "model_id": embedder.model_id}, vec))
        prog["derived_upto"] = turn.turn_id
    nums = {tid: thread_num(tid) for tid in touched}
    stored = reader.centroids([n for n in nums.values() if n is not None])
    for tid, num in nums.items():
        base = stored.get(num)
        centroid = sums[tid] if base is None else base.astype(np.float32) + sums[tid]
        out.threads.append((num, book.entries[tid].record, centroid.astype(np.float32)))
    out.labels = [(label, tid) for label, tid in new_labels.items()]
    prog["recent"] = list(book.order)
    return out


def _new_thread(reader: RecordReader, book: ThreadBook, prog: dict[str, Any], turn: Turn,
                new_labels: dict[str, str]) -> str:
    """Number and label a thread started by ``turn``; the label is unique in the session."""
    tid = f"T{prog['next_thread']}"
    prog["next_thread"] += 1
    label = make_label(turn.content, lambda l: l in new_labels or reader.label_taken(l))
    new_labels[label] = tid
    book.add(ThreadEntry({"thread_id": tid, "label": label, "turn_ids": [], "user_turns": [],
                          "recent_turns": [], "terms": {}, "turn_count": 0,
                          "last_active_turn": turn.turn_id, "override": None}))
    return tid


def next_label(reader: RecordReader, prog: dict[str, Any], text: str) -> tuple[str, str]:
    """The id and label a new thread started by ``text`` would get now."""
    return f"T{prog.get('next_thread', 1)}", make_label(text, reader.label_taken)


# -- reading threads ------------------------------------------------------------------

# Derived thread states by (store path, session, thread, member turn ids); a
# turn log serves the same few threads turn after turn.
_STATE_MEMO: dict[tuple[Any, ...], ThreadState] = {}
_STATE_MEMO_MAX = 512


def thread_info(session_id: str, info: dict[str, Any], transcript: Any) -> ThreadInfo:
    """A thread record as a :class:`ThreadInfo`; with ``transcript``, its state is
    derived from its latest turns by the state rules (hand-set fields win)."""
    override = info.get("override")
    if transcript is not None:
        ids = info["turn_ids"][-STATE_TURNS:]   # the state of a topic lives in its recent turns
        # Turns never change: the same members always derive the same state.
        memo_key = (getattr(transcript, "path", id(transcript)), session_id, info["thread_id"],
                    tuple(ids))
        derived = _STATE_MEMO.get(memo_key)
        if derived is None:
            derived = derive_state(info["thread_id"], transcript.turns(session_id, ids))
            keep(_STATE_MEMO, memo_key, derived, _STATE_MEMO_MAX)
        state = with_override(derived, override)
    else:
        state = with_override(ThreadState(info["thread_id"],
                                          last_active_turn=info["last_active_turn"]), override)
    return ThreadInfo(info["thread_id"], info["label"], list(info["turn_ids"]),
                      info["last_active_turn"], state, list(info.get("user_turns", [])),
                      info.get("turn_count", len(info["turn_ids"])),
                      list(info.get("recent_turns", [])))


def with_state_fields(info: dict[str, Any], fields: dict[str, list[str] | None]) -> dict[str, Any]:
    """``info`` with the state fields given in ``fields`` set by hand (a field
    given replaces the derived one from now on; None leaves it as it was)."""
    override = dict(info.get("override") or {})
    for name in STATE_FIELDS:
        value = fields.get(name)
        if value is not None:
            override[name] = [str(v) for v in value]
    return {**info, "override": override}


class TurnLogBase:
    """What every turn log back end inherits: :meth:`sync` and :meth:`recompute` in
    chunks of :data:`SYNC_CHUNK` turns on top of the back end's ``_progress``
    (a session's progress record), ``_derive`` (one chunk in one write; how many
    turns it derived) and ``_drop`` (a session's derived fields, gone)."""

    def _progress(self, session_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def _derive(self, session_id: str, turns: list[Turn], vectors: np.ndarray,
                embedder: Any) -> int:
        raise NotImplementedError

    def _drop(self, session_id: str) -> None:
        raise NotImplementedError

    def vectors(self, session_id: str, turn_ids: Iterable[int]) -> dict[int, np.ndarray]:
        raise NotImplementedError

    def _sync_start(self, transcript: Any, session_id: str
                    ) -> tuple[bool, dict[str, Any] | None, int]:
        """Whether the transcript has the session, the session's progress, and its
        turn count."""
        if not transcript.has_session(session_id):
            return False, None, 0
        return True, self._progress(session_id), transcript.turn_count(session_id)

    def sync(self, transcript: Any, session_id: str, embedder: Any, *,
             progress: bool = False) -> int:
        """Derive fields for the turns added since the last sync; returns how many."""
        known, state, end = self._sync_start(transcript, session_id)
        if not known:
            raise UnknownSessionError(
                f"no session {session_id!r}; create the session before deriving its turn log")
        if state and state.get("model_id") != embedder.model_id:
            raise EmbedderMismatchError(
                f"the turn log of {session_id!r} was derived with {state['model_id']!r}, not "
                f"{embedder.model_id!r}; leave the embedder unset to use the session's own, or "
                "re-derive the session with the new one (Runtime.derive(session, embedder=..., "
                "recompute=True); Prolog: turnlog_derive/3 with recompute(true))")
        start = (state or {}).get("derived_upto", 0) + 1
        if start > end:
            return 0
        bar = progress_bar(end - start + 1, progress, f"deriving {session_id}")
        done = 0
        for lo in range(start, end + 1, SYNC_CHUNK):
            turns = transcript.history(session_id, lo, min(end, lo + SYNC_CHUNK - 1))
            vectors = embedder.embed_batch(embedding_texts(turns, embedder.model_id))
            done += self._derive(session_id, turns, vectors, embedder)
            if bar is not None:
                bar.update(len(turns))
        if bar is not None:
            bar.close()
        return done

    def recompute(self, transcript: Any, session_id: str, embedder: Any, *,
                  progress: bool = True) -> int:
        """Drop the session's derived fields and derive them again (e.g. a new embedder)."""
        self._drop(session_id)
        return self.sync(transcript, session_id, embedder, progress=progress)

    def model_id(self, session_id: str) -> str | None:
        """The model id of the embedder the session was derived with, or None."""
        state = self._progress(session_id)
        return None if state is None else state.get("model_id")

    def active_thread(self, session_id: str) -> str | None:
        prog = self._progress(session_id)
        return None if prog is None else prog.get("active_thread")

    def nearest(self, session_id: str, vec: np.ndarray, *, k: int,
                before: int) -> list[tuple[int, float]]:
        """The ``k`` turns before ``before`` most similar to ``vec`` (dot product).

        Scans the latest ``DENSE_WINDOW`` turns' vectors, kept in a per-process
        matrix that grows with new turns (bounded work per call).
        """
        ids, matrix = self._matrix(session_id)
        if not len(ids):
            return []
        mask = ids < before
        if not mask.any():
            return []
        # Score the whole window and mask the scores: indexing the matrix by
        # the mask would copy it (8 MB at 2,000 x 1,024) on every call.
        sims = matrix @ vec.astype(np.float32)
        if not mask.all():
            sims, cand = sims[mask], ids[mask]
        else:
            cand = ids
        k = min(k, len(cand))
        top = np.argpartition(-sims, k - 1)[:k]
        order = top[np.argsort(-sims[top], kind="stable")]
        return [(int(cand[i]), float(sims[i])) for i in order]

    def dense_window(self, session_id: str) -> tuple[np.ndarray, np.ndarray]:
        """``(turn ids, vectors)`` of the session's latest ``DENSE_WINDOW`` derived
        turns, one row per id, oldest first (kept in memory between calls and
        grown with new turns).  The arrays are shared: do not modify them."""
        return self._matrix(session_id)

    def _matrix(self, session_id: str) -> tuple[np.ndarray, np.ndarray]:
        """``(turn ids, vectors)`` of the session's latest :data:`DENSE_WINDOW` derived
        turns, kept per process and topped up with the turns derived since."""
        prog = self._progress(session_id) or {}
        upto = int(prog.get("derived_upto", 0))
        cache = self.__dict__.setdefault("_dense_cache", OrderedDict())
        # Keyed by the vector space too: a session re-derived with another embedder
        # (here or by another process) must never be scored with the old vectors.
        space = (session_id, prog.get("model_id"))
        ids, rows, have, room = cache.get(space, (np.zeros(0, dtype=np.int64), None, 0, None))
        # A process serving many sessions keeps the windows of the latest few
        # only: each holds up to DENSE_WINDOW vectors (8 MB at 1,024 dims).
        for key in [k for k in cache if k[0] == session_id]:
            del cache[key]
        cache[space] = (ids, rows, have, room)
        while len(cache) > DENSE_SESSIONS:
            cache.popitem(last=False)
        if have < upto:
            lo = max(have + 1, upto - DENSE_WINDOW + 1)
            new = self.vectors(session_id, range(lo, upto + 1))
            if new:
                order = sorted(new)          # already in turn order from LMDB: linear
                new_ids = np.fromiter(order, dtype=np.int64, count=len(order))
                new_rows = np.stack([new[t] for t in order])
                ids, rows, room = appended_window(room, new_ids, new_rows)
            cache[space] = (ids, rows, upto, room)
        if rows is None:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.float32)
        return ids, rows


def appended_window(room: tuple[np.ndarray, np.ndarray, int, int] | None,
                    new_ids: np.ndarray, new_rows: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, int, int]]:
    """The dense window with ``new_ids``/``new_rows`` after it, the latest
    ``DENSE_WINDOW`` kept: ``(ids, rows, room)``, ids and rows views of room's buffers.

    A turn adds a row or two.  They go into the room kept after the window in a buffer
    twice its size, so a new turn does not copy the whole window (8 MB at 1,024 dims);
    the window is copied into a new buffer once per ``DENSE_WINDOW`` new rows.  Rows
    already handed out are never written: new rows only go past them.
    """
    k = len(new_ids)
    if room is not None and room[1].shape[1] == new_rows.shape[1] \
            and room[3] + k <= len(room[0]):
        ids_buf, rows_buf, start, end = room
    else:
        keep_ids = np.zeros(0, dtype=np.int64) if room is None else room[0][room[2]:room[3]]
        keep_rows = None if room is None else room[1][room[2]:room[3]]
        if keep_rows is not None and keep_rows.shape[1] != new_rows.shape[1]:
            keep_ids, keep_rows = keep_ids[:0], None
        kept = max(0, min(len(keep_ids), DENSE_WINDOW - k))
        capacity = max(2 * DENSE_WINDOW, kept + k)
        ids_buf = np.zeros(capacity, dtype=np.int64)
        rows_buf = np.zeros((capacity, new_rows.shape[1]), dtype=np.float32)
        if kept:
            ids_buf[:kept] = keep_ids[-kept:]
            rows_buf[:kept] = keep_rows[-kept:]
        start, end = 0, kept
    ids_buf[end:end + k] = new_ids
    rows_buf[end:end + k] = new_rows
    end += k
    start = max(start, end - DENSE_WINDOW)
    return ids_buf[start:end], rows_buf[start:end], (ids_buf, rows_buf, start, end)


def session_embedder(turnlog: Any, session_id: str) -> str:
    """The registered name of the embedder ``session_id``'s turn log was derived with,
    or "" (not derived yet, or derived with an embedder no longer registered).

    A session's embedder is its own: Prolog uses it whenever a policy names none
    (ctxrelay_assembly:request_policy/4), so a process whose default embedder
    differs never fails the session's turns; a store copy re-derives with it."""
    from ctxrelay.text import embed            # loads the embedder registry on first use
    model_id = turnlog.model_id(session_id)
    if model_id is None:
        return ""
    for name in embed.registered():
        if name == "minilm":                  # its id is known without loading torch
            if embed.MiniLMEmbedder.model_id == model_id and embed.minilm_available():
                return name
            continue
        try:
            if embed.get_embedder(name).model_id == model_id:
                return name
        except Exception:                     # a registered factory that cannot build here
            continue
    return ""
