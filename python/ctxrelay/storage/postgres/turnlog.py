"""The turn log in PostgreSQL (tables of migration 2).

The same derivation as the embedded turn log (:mod:`ctxrelay.storage.lmdb.turnlog`:
its thread assignment, entity extraction, thread states and bounds are
reused, not re-implemented), kept in three tables: ``turnlog_progress`` (per
session: how far it is derived, with which embedder, the active thread),
``turnlog_turns`` (per turn: its derived record and vector) and
``turnlog_threads`` (per thread: its record and centroid).

A sync derives a chunk of turns in one transaction that first locks the
session's progress row, so two processes syncing one session take turns and
the second finds the chunk done (it skips turns already derived): the result
is the same as one process deriving alone.
"""
from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import numpy as np

from ctxrelay.errors import InvalidArgumentError, StoreError, UnknownSessionError
from ctxrelay.memo import keep
from ctxrelay.storage.postgres.connection import bump_generation, read_generation
from ctxrelay.storage.lmdb.turnlog import (_DENSE_SESSIONS, _DENSE_WINDOW, _KEPT_MEMBERS,
                                           _NEIGHBOURS, _STATE_MEMO, _STATE_MEMO_MAX,
                                           _SYNC_CHUNK, _THREADS_ASSIGNABLE, DerivedTurn,
                                           ThreadInfo, ThreadState, TurnLog, _progress_bar,
                                           _tool_call_ids, derive_state, extract_entities)
from ctxrelay.text.bounds import derived_text
from ctxrelay.types import Turn

__all__ = ["PgTurnLog"]


def _vec(raw: bytes) -> np.ndarray:
    return np.frombuffer(bytes(raw), dtype=np.float32)


def _thread_num(thread_id: Any) -> int | None:
    if isinstance(thread_id, str) and thread_id[:1] == "T" and thread_id[1:].isdigit():
        return int(thread_id[1:])
    return None


class PgTurnLog:
    """A :class:`~ctxrelay.storage.interfaces.turnlog.TurnLogStore` in PostgreSQL."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self._closed = False
        self._dense_cache: OrderedDict = OrderedDict()

    @property
    def closed(self) -> bool:
        return self._closed or self._db.closed

    def close(self) -> None:
        self._closed = True

    @property
    def path(self) -> str:
        return self._db.url

    def _live(self) -> None:
        if self.closed:
            raise StoreError(f"the turn log of {self._db.url} is closed; open the store again")

    def _run(self, fn: Any) -> Any:
        self._live()

        def write(cur: Any) -> Any:
            result = fn(cur)
            # Readers keep what they derived from the turn log while the store's
            # generation stands still (retrieval.prepared): every write moves it.
            bump_generation(cur)
            return result
        return self._db.run(write)

    def write_generation(self) -> int | None:
        """The store's generation (one counter for every part of a PostgreSQL
        store, moved by each write); None once closed."""
        if self.closed:
            return None
        return self._read(read_generation)

    def _read(self, fn: Any) -> Any:
        self._live()
        return self._db.read(fn)

    # -- sync ------------------------------------------------------------------------

    def sync(self, transcript: Any, session_id: str, embedder: Any, *,
             progress: bool = False) -> int:
        if not transcript.has_session(session_id):
            raise UnknownSessionError(
                f"no session {session_id!r}; create the session before deriving its turn log")
        state = self._progress(session_id)
        if state and state.get("model_id") != embedder.model_id:
            raise InvalidArgumentError(
                f"the turn log of {session_id!r} was derived with {state['model_id']!r}, not "
                f"{embedder.model_id!r}; leave the embedder unset to use the session's own, or "
                "re-derive the session with the new one (Runtime.derive(session, embedder=..., "
                "recompute=True); Prolog: turnlog_derive/3 with recompute(true))")
        start = (state or {}).get("derived_upto", 0) + 1
        end = transcript.turn_count(session_id)
        if start > end:
            return 0
        bar = _progress_bar(end - start + 1, progress, f"deriving {session_id}")
        done = 0
        for lo in range(start, end + 1, _SYNC_CHUNK):
            turns = transcript.history(session_id, lo, min(end, lo + _SYNC_CHUNK - 1))
            vectors = embedder.embed_batch([derived_text(t.content) for t in turns])
            done += self._run(lambda cur: self._derive_chunk(cur, session_id, turns, vectors,
                                                             embedder))
            if bar is not None:
                bar.update(len(turns))
        if bar is not None:
            bar.close()
        return done

    def recompute(self, transcript: Any, session_id: str, embedder: Any, *,
                  progress: bool = True) -> int:
        def drop(cur: Any) -> None:
            for table in ("turnlog_turns", "turnlog_threads", "turnlog_progress"):
                cur.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))
        self._run(drop)
        return self.sync(transcript, session_id, embedder, progress=progress)

    def model_id(self, session_id: str) -> str | None:
        state = self._progress(session_id)
        return None if state is None else state.get("model_id")

    def _progress(self, session_id: str) -> dict[str, Any] | None:
        row = self._read(lambda cur: cur.execute(
            "SELECT state FROM turnlog_progress WHERE session_id = %s", (session_id,)).fetchone())
        return None if row is None else json.loads(row[0])

    def _derive_chunk(self, cur: Any, session_id: str, turns: list[Turn],
                      vectors: np.ndarray, embedder: Any) -> int:
        fresh = {"derived_upto": 0, "model_id": embedder.model_id, "next_thread": 1,
                 "active_thread": None}
        cur.execute("INSERT INTO turnlog_progress (session_id, state) VALUES (%s, %s) "
                    "ON CONFLICT (session_id) DO NOTHING", (session_id, json.dumps(fresh)))
        # The lock that makes concurrent syncs of one session take turns.
        prog = json.loads(cur.execute("SELECT state FROM turnlog_progress WHERE session_id = %s "
                                      "FOR UPDATE", (session_id,)).fetchone()[0])
        pairs = [(t, v) for t, v in zip(turns, vectors) if t.turn_id > prog["derived_upto"]]
        if not pairs:
            return 0                           # another process derived them meanwhile
        threads, centroids = self._load_threads(cur, session_id, limit=_THREADS_ASSIGNABLE)
        active = prog.get("active_thread")
        if active and active not in threads and _thread_num(active) is not None:
            row = cur.execute("SELECT info, centroid FROM turnlog_threads "
                              "WHERE session_id = %s AND num = %s",
                              (session_id, _thread_num(active))).fetchone()
            if row is not None:
                threads[active], centroids[active] = json.loads(row[0]), _vec(row[1]).copy()
        wanted = sorted({t for info in threads.values()
                         for t in info.get("user_turns", [])[-_NEIGHBOURS:]})
        stored = {}
        if wanted:
            cur.execute("SELECT turn_id, vector FROM turnlog_turns WHERE session_id = %s "
                        "AND turn_id = ANY(%s)", (session_id, wanted))
            stored = {t: _vec(v) for t, v in cur.fetchall()}
        recent = {tid: [stored[t] for t in info.get("user_turns", [])[-_NEIGHBOURS:]
                        if t in stored]
                  for tid, info in threads.items()}
        join = float(embedder.thresholds["thread_join"])
        previous_thread = prog["active_thread"]
        touched: set[str] = set()
        rows: list[tuple] = []
        for turn, vec in pairs:
            vec = np.asarray(vec, dtype=np.float32)
            if turn.role == "system":               # instructions belong to no topic
                record = {"thread_id": "", "entities": [], "references": [],
                          "tool_calls": [], "model_id": embedder.model_id}
                rows.append((session_id, turn.turn_id, json.dumps(record), vec.tobytes()))
                prog["derived_upto"] = turn.turn_id
                continue
            thread_id = TurnLog._assign(turn, vec, threads, recent, join, previous_thread, prog)
            touched.add(thread_id)
            info = threads[thread_id]
            info["turn_ids"].append(turn.turn_id)
            info["turn_count"] = info.get("turn_count", 0) + 1
            del info["turn_ids"][:-_KEPT_MEMBERS]
            if turn.role == "user":
                info.setdefault("user_turns", []).append(turn.turn_id)
                del info["user_turns"][:-_NEIGHBOURS]
                recent.setdefault(thread_id, []).append(vec)
                recent[thread_id] = recent[thread_id][-_NEIGHBOURS:]
            info["last_active_turn"] = turn.turn_id
            centroids[thread_id] = centroids.get(thread_id, np.zeros_like(vec)) + vec
            if turn.role == "user":
                prog["active_thread"] = thread_id
            previous_thread = thread_id
            record = {"thread_id": thread_id,
                      "entities": extract_entities(derived_text(turn.content)),
                      "references": [], "tool_calls": _tool_call_ids(turn),
                      "model_id": embedder.model_id}
            rows.append((session_id, turn.turn_id, json.dumps(record), vec.tobytes()))
            prog["derived_upto"] = turn.turn_id
        with cur.connection.pipeline():
            cur.executemany("INSERT INTO turnlog_turns (session_id, turn_id, record, vector) "
                            "VALUES (%s, %s, %s, %s)", rows)
            if touched:
                cur.executemany(
                    "INSERT INTO turnlog_threads (session_id, num, info, centroid) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (session_id, num) DO UPDATE "
                    "SET info = EXCLUDED.info, centroid = EXCLUDED.centroid",
                    [(session_id, _thread_num(tid), json.dumps(threads[tid]),
                      centroids[tid].astype(np.float32).tobytes()) for tid in sorted(touched)])
            cur.execute("UPDATE turnlog_progress SET state = %s WHERE session_id = %s",
                        (json.dumps(prog), session_id))
        return len(pairs)

    def _load_threads(self, cur: Any, session_id: str, limit: int | None = None
                      ) -> tuple[dict[str, dict[str, Any]], dict[str, np.ndarray]]:
        cur.execute("SELECT info, centroid FROM turnlog_threads WHERE session_id = %s "
                    "ORDER BY num DESC LIMIT %s", (session_id, limit))
        threads: dict[str, dict[str, Any]] = {}
        centroids: dict[str, np.ndarray] = {}
        for info, centroid in cur.fetchall():
            info = json.loads(info)
            threads[info["thread_id"]] = info
            centroids[info["thread_id"]] = _vec(centroid).copy()
        return threads, centroids

    # -- per turn ----------------------------------------------------------------------

    def derived(self, session_id: str, turn_id: int) -> DerivedTurn | None:
        row = self._read(lambda cur: cur.execute(
            "SELECT record FROM turnlog_turns WHERE session_id = %s AND turn_id = %s",
            (session_id, int(turn_id))).fetchone())
        return None if row is None else DerivedTurn(turn_id=int(turn_id), **json.loads(row[0]))

    def vectors(self, session_id: str, turn_ids: Iterable[int]) -> dict[int, np.ndarray]:
        ids = sorted({int(t) for t in turn_ids})
        if not ids:
            return {}
        rows = self._read(lambda cur: cur.execute(
            "SELECT turn_id, vector FROM turnlog_turns WHERE session_id = %s "
            "AND turn_id = ANY(%s)", (session_id, ids)).fetchall())
        return {t: _vec(v) for t, v in rows}

    # nearest / dense_window: the embedded log's bounded in-memory window, filled
    # from these tables (the same arithmetic, so the same neighbours).
    nearest = TurnLog.nearest
    dense_window = TurnLog.dense_window

    def _matrix(self, session_id: str) -> tuple[np.ndarray, np.ndarray]:
        prog = self._progress(session_id) or {}
        upto = int(prog.get("derived_upto", 0))
        cache = self._dense_cache
        space = (session_id, prog.get("model_id"))
        ids, rows, have = cache.get(space, (np.zeros(0, dtype=np.int64), None, 0))
        for key in [k for k in cache if k[0] == session_id]:
            del cache[key]
        cache[space] = (ids, rows, have)
        while len(cache) > _DENSE_SESSIONS:
            cache.popitem(last=False)
        if have < upto:
            lo = max(have + 1, upto - _DENSE_WINDOW + 1)
            new = self.vectors(session_id, range(lo, upto + 1))
            if new:
                new_ids = np.fromiter(sorted(new), dtype=np.int64)
                new_rows = np.stack([new[t] for t in sorted(new)])
                ids = np.concatenate([ids, new_ids]) if rows is not None else new_ids
                rows = np.concatenate([rows, new_rows]) if rows is not None else new_rows
                ids, rows = ids[-_DENSE_WINDOW:], rows[-_DENSE_WINDOW:]
            cache[space] = (ids, rows, upto)
        if rows is None:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 1), dtype=np.float32)
        return ids, rows

    def coverage(self, session_id: str) -> tuple[int, int, int]:
        def read(cur: Any) -> tuple[int, int, int]:
            row = cur.execute(
                "SELECT (SELECT state FROM turnlog_progress WHERE session_id = %s), "
                "(SELECT count(*) FROM turnlog_turns WHERE session_id = %s)",
                (session_id, session_id)).fetchone()
            upto = 0 if row[0] is None else int(json.loads(row[0]).get("derived_upto", 0))
            return upto, row[1], row[1]         # one row holds a turn's record and vector
        return self._read(read)

    def set_references(self, session_id: str, turn_id: int, references: list[int]) -> None:
        def write(cur: Any) -> None:
            row = cur.execute("SELECT record FROM turnlog_turns WHERE session_id = %s "
                              "AND turn_id = %s FOR UPDATE", (session_id, int(turn_id))).fetchone()
            if row is None:
                raise InvalidArgumentError(
                    f"turn {turn_id} of {session_id!r} has no derived fields yet; derive the "
                    "session first")
            record = json.loads(row[0])
            record["references"] = sorted({int(r) for r in references})
            cur.execute("UPDATE turnlog_turns SET record = %s WHERE session_id = %s "
                        "AND turn_id = %s", (json.dumps(record), session_id, int(turn_id)))
        self._run(write)

    # -- topic threads -------------------------------------------------------------------

    def active_thread(self, session_id: str) -> str | None:
        prog = self._progress(session_id)
        return None if prog is None else prog.get("active_thread")

    def threads(self, session_id: str, transcript: Any = None) -> list[ThreadInfo]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT info FROM turnlog_threads WHERE session_id = %s ORDER BY num",
            (session_id,)).fetchall())
        return [self._info(session_id, json.loads(r[0]), transcript) for r in rows]

    def recent_threads(self, session_id: str, n: int) -> list[ThreadInfo]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT info FROM turnlog_threads WHERE session_id = %s ORDER BY num DESC LIMIT %s",
            (session_id, max(0, int(n)))).fetchall())
        return [self._info(session_id, json.loads(r[0]), None) for r in rows]

    def thread(self, session_id: str, thread_id: str, transcript: Any = None) -> ThreadInfo:
        num = _thread_num(thread_id)
        row = None if num is None else self._read(lambda cur: cur.execute(
            "SELECT info FROM turnlog_threads WHERE session_id = %s AND num = %s",
            (session_id, num)).fetchone())
        if row is None:
            raise InvalidArgumentError(
                f"no thread {thread_id!r} in session {session_id!r}; list them with threads()")
        return self._info(session_id, json.loads(row[0]), transcript)

    def _info(self, session_id: str, info: dict[str, Any], transcript: Any) -> ThreadInfo:
        override = info.get("override")
        if override:
            state = ThreadState(info["thread_id"], **override)
        elif transcript is not None:
            ids = info["turn_ids"][-40:]
            memo_key = (getattr(transcript, "path", id(transcript)), session_id,
                        info["thread_id"], tuple(ids))
            derived = _STATE_MEMO.get(memo_key)
            if derived is None:
                derived = derive_state(info["thread_id"], transcript.turns(session_id, ids))
                keep(_STATE_MEMO, memo_key, derived, _STATE_MEMO_MAX)
            state = dataclasses.replace(derived, established=list(derived.established),
                                        open_questions=list(derived.open_questions),
                                        user_constraints=list(derived.user_constraints))
        else:
            state = ThreadState(info["thread_id"], last_active_turn=info["last_active_turn"])
        return ThreadInfo(info["thread_id"], info["label"], list(info["turn_ids"]),
                          info["last_active_turn"], state, list(info.get("user_turns", [])),
                          info.get("turn_count", len(info["turn_ids"])))

    def set_thread_state(self, session_id: str, thread_id: str, *,
                         established: list[str] | None = None,
                         open_questions: list[str] | None = None,
                         user_constraints: list[str] | None = None) -> None:
        num = _thread_num(thread_id)

        def write(cur: Any) -> None:
            row = None if num is None else cur.execute(
                "SELECT info FROM turnlog_threads WHERE session_id = %s AND num = %s FOR UPDATE",
                (session_id, num)).fetchone()
            if row is None:
                raise InvalidArgumentError(
                    f"no thread {thread_id!r} in session {session_id!r}; list them with threads()")
            info = json.loads(row[0])
            info["override"] = {"established": list(established or []),
                                "open_questions": list(open_questions or []),
                                "user_constraints": list(user_constraints or []),
                                "last_active_turn": info["last_active_turn"]}
            cur.execute("UPDATE turnlog_threads SET info = %s WHERE session_id = %s AND num = %s",
                        (json.dumps(info), session_id, num))
        self._run(write)

