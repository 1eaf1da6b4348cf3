"""The turn log in PostgreSQL (tables of migrations 2 and 5).

The derivation is the one every back end shares
(:mod:`ctxrelay.storage.turnlog_derivation`: thread placement by the thread
rules, labels, entity extraction, thread states and bounds), so the same
turns give the same thread ids and labels as the embedded turn log.  This
module only keeps its records, in four tables: ``turnlog_progress`` (per
session: how far it is derived, with which embedder, the active and recent
threads), ``turnlog_turns`` (per turn: its derived record and vector),
``turnlog_threads`` (per thread: its record and centroid) and
``turnlog_labels`` (per thread label, unique in a session).

A sync derives a chunk of turns in one transaction that first locks the
session's progress row, so two processes syncing one session take turns and
the second finds the chunk done (it skips turns already derived): the result
is the same as one process deriving alone.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np

from ctxrelay.errors import InvalidArgumentError, UnknownThreadError
from ctxrelay.storage import turnlog_derivation as derivation
from ctxrelay.storage.postgres.part import PgPart
from ctxrelay.storage.postgres.connection import bump_generation, read_generation
from ctxrelay.storage.turnlog_derivation import (DerivedTurn, ThreadInfo, TurnLogBase,
                                                 thread_info, thread_num)
from ctxrelay.text.threads import ThreadBook
from ctxrelay.types import Turn

__all__ = ["PgTurnLog"]


def _vec(raw: bytes) -> np.ndarray:
    return np.frombuffer(bytes(raw), dtype=np.float32)


class _Records:
    """One session's records in one transaction, as the derivation reads them
    (:class:`ctxrelay.storage.turnlog_derivation.RecordReader`); each read is one
    statement, whatever the number of records."""

    def __init__(self, cur: Any, session_id: str) -> None:
        self.cur, self.session_id = cur, session_id

    def threads(self, nums: list[int]) -> dict[int, dict[str, Any]]:
        if not nums:
            return {}
        rows = self.cur.execute("SELECT num, info FROM turnlog_threads WHERE session_id = %s "
                                "AND num = ANY(%s)", (self.session_id, nums)).fetchall()
        return {n: json.loads(info) for n, info in rows}

    def latest_threads(self, limit: int) -> list[dict[str, Any]]:
        rows = self.cur.execute("SELECT info FROM turnlog_threads WHERE session_id = %s "
                                "ORDER BY num DESC LIMIT %s", (self.session_id, limit)).fetchall()
        return [json.loads(r[0]) for r in rows]

    def vectors(self, turn_ids: list[int]) -> dict[int, np.ndarray]:
        if not turn_ids:
            return {}
        rows = self.cur.execute("SELECT turn_id, vector FROM turnlog_turns WHERE session_id = %s "
                                "AND turn_id = ANY(%s)", (self.session_id, turn_ids)).fetchall()
        return {t: _vec(v) for t, v in rows}

    def turn(self, turn_id: int) -> dict[str, Any] | None:
        row = self.cur.execute("SELECT record FROM turnlog_turns WHERE session_id = %s "
                               "AND turn_id = %s", (self.session_id, turn_id)).fetchone()
        return None if row is None else json.loads(row[0])

    def centroids(self, nums: list[int]) -> dict[int, np.ndarray]:
        if not nums:
            return {}
        rows = self.cur.execute("SELECT num, centroid FROM turnlog_threads WHERE session_id = %s "
                                "AND num = ANY(%s)", (self.session_id, nums)).fetchall()
        return {n: _vec(c) for n, c in rows}

    def label_taken(self, label: str) -> bool:
        return self.cur.execute("SELECT 1 FROM turnlog_labels WHERE session_id = %s "
                                "AND label = %s", (self.session_id, label)).fetchone() is not None


class PgTurnLog(TurnLogBase, PgPart):
    """A :class:`~ctxrelay.storage.interfaces.turnlog.TurnLogStore` in PostgreSQL."""

    WHAT = "the turn log"

    def __init__(self, db: Any) -> None:
        super().__init__(db)

    def _run(self, fn: Any) -> Any:
        self._live()

        def write(cur: Any) -> Any:
            result = fn(cur)
            # Readers keep what they derived from the turn log while the store's
            # generation stands still (retrieval.prepared): every write moves it.
            bump_generation(cur)
            return result
        return self._db.run(write)

    def _pipelined(self, fn: Any) -> Any:
        """``fn(cursor)`` in one transaction that moves the generation, pipelined
        (:meth:`Database.pipelined`): BEGIN with the first reads, the writes with
        the generation and COMMIT."""
        self._live()

        def write(cur: Any) -> Any:
            result = fn(cur)
            bump_generation(cur)
            return result
        return self._db.pipelined(write)

    def write_generation(self) -> int | None:
        """The store's generation (one counter for every part of a PostgreSQL
        store, moved by each write); None once closed."""
        if self.closed:
            return None
        return self._read(read_generation)

    # -- sync ------------------------------------------------------------------------

    def _derive(self, session_id: str, turns: list[Turn], vectors: np.ndarray,
                embedder: Any) -> int:
        return self._pipelined(lambda cur: self._derive_chunk(cur, session_id, turns,
                                                              vectors, embedder))

    def _sync_start(self, transcript: Any, session_id: str
                    ) -> tuple[bool, dict[str, Any] | None, int]:
        """Whether the transcript has the session, the session's progress, and its
        turn count: one statement when the transcript is this store's own (the
        usual case: a sync that finds nothing new costs one round trip, not three)."""
        if getattr(transcript, "_db", None) is not self._db:
            return super()._sync_start(transcript, session_id)
        row = self._read(lambda cur: cur.execute(
            "SELECT s.counters, p.state FROM (SELECT %s::text AS id) q "
            "LEFT JOIN sessions s ON s.session_id = q.id "
            "LEFT JOIN turnlog_progress p ON p.session_id = q.id", (session_id,)).fetchone())
        counters, state = row
        if counters is None:
            return False, None, 0
        return True, None if state is None else json.loads(state), \
            int(json.loads(counters)["turns"])

    def _drop(self, session_id: str) -> None:
        def drop(cur: Any) -> None:
            for table in ("turnlog_turns", "turnlog_threads", "turnlog_labels",
                          "turnlog_progress"):
                cur.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))
        self._run(drop)

    def _progress(self, session_id: str) -> dict[str, Any] | None:
        row = self._read(lambda cur: cur.execute(
            "SELECT state FROM turnlog_progress WHERE session_id = %s", (session_id,)).fetchone())
        return None if row is None else json.loads(row[0])

    def _derive_chunk(self, cur: Any, session_id: str, turns: list[Turn],
                      vectors: np.ndarray, embedder: Any) -> int:
        fresh = derivation.fresh_progress(embedder.model_id)
        cur.execute("INSERT INTO turnlog_progress (session_id, state) VALUES (%s, %s) "
                    "ON CONFLICT (session_id) DO NOTHING", (session_id, json.dumps(fresh)))
        # The lock that makes concurrent syncs of one session take turns.
        prog = json.loads(cur.execute("SELECT state FROM turnlog_progress WHERE session_id = %s "
                                      "FOR UPDATE", (session_id,)).fetchone()[0])
        out = derivation.derive_chunk(_Records(cur, session_id), prog, turns, vectors, embedder)
        if not out.turns:
            return 0                           # another process derived them meanwhile
        # In the caller's pipeline: sent with its COMMIT, one round trip.
        cur.executemany("INSERT INTO turnlog_turns (session_id, turn_id, record, vector) "
                        "VALUES (%s, %s, %s, %s)",
                        [(session_id, t, json.dumps(rec), vec.astype(np.float32).tobytes())
                         for t, rec, vec in out.turns])
        if out.threads:
            cur.executemany(
                "INSERT INTO turnlog_threads (session_id, num, info, centroid) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (session_id, num) DO UPDATE "
                "SET info = EXCLUDED.info, centroid = EXCLUDED.centroid",
                [(session_id, num, json.dumps(info), centroid.tobytes())
                 for num, info, centroid in sorted(out.threads, key=lambda t: t[0])])
        if out.labels:
            cur.executemany("INSERT INTO turnlog_labels (session_id, label, num) "
                            "VALUES (%s, %s, %s)",
                            [(session_id, label, thread_num(tid))
                             for label, tid in out.labels])
        cur.execute("UPDATE turnlog_progress SET state = %s WHERE session_id = %s",
                    (json.dumps(out.progress), session_id))
        return len(out.turns)

    def thread_book(self, session_id: str, thresholds: dict[str, float]) -> ThreadBook:
        """The candidate threads for the session's next turn (read only)."""
        def read(cur: Any) -> ThreadBook:
            row = cur.execute("SELECT state FROM turnlog_progress WHERE session_id = %s",
                              (session_id,)).fetchone()
            return derivation.load_book(_Records(cur, session_id),
                                        {} if row is None else json.loads(row[0]), thresholds)
        return self._read(read)

    def next_label(self, session_id: str, text: str) -> tuple[str, str]:
        """The id and label a new thread started by ``text`` would get now."""
        def read(cur: Any) -> tuple[str, str]:
            row = cur.execute("SELECT state FROM turnlog_progress WHERE session_id = %s",
                              (session_id,)).fetchone()
            return derivation.next_label(_Records(cur, session_id),
                                         {} if row is None else json.loads(row[0]), text)
        return self._read(read)

    # -- per turn ----------------------------------------------------------------------

    def derived(self, session_id: str, turn_id: int) -> DerivedTurn | None:
        row = self._read(lambda cur: cur.execute(
            "SELECT record FROM turnlog_turns WHERE session_id = %s AND turn_id = %s",
            (session_id, int(turn_id))).fetchone())
        return None if row is None else DerivedTurn(turn_id=int(turn_id), **json.loads(row[0]))

    def derived_many(self, session_id: str, turn_ids: Iterable[int]) -> dict[int, DerivedTurn]:
        ids = sorted({int(t) for t in turn_ids})
        if not ids:
            return {}
        rows = self._read(lambda cur: cur.execute(
            "SELECT turn_id, record FROM turnlog_turns WHERE session_id = %s "
            "AND turn_id = ANY(%s)", (session_id, ids)).fetchall())
        return {t: DerivedTurn(turn_id=t, **json.loads(r)) for t, r in sorted(rows)}

    def vectors(self, session_id: str, turn_ids: Iterable[int]) -> dict[int, np.ndarray]:
        ids = sorted({int(t) for t in turn_ids})
        if not ids:
            return {}
        rows = self._read(lambda cur: cur.execute(
            "SELECT turn_id, vector FROM turnlog_turns WHERE session_id = %s "
            "AND turn_id = ANY(%s)", (session_id, ids)).fetchall())
        return {t: _vec(v) for t, v in rows}

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
        # two round trips: BEGIN with the row's lock, the update with COMMIT
        self._pipelined(write)

    # -- topic threads -------------------------------------------------------------------

    def threads(self, session_id: str, transcript: Any = None) -> list[ThreadInfo]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT info FROM turnlog_threads WHERE session_id = %s ORDER BY num",
            (session_id,)).fetchall())
        return [thread_info(session_id, json.loads(r[0]), transcript) for r in rows]

    def recent_threads(self, session_id: str, n: int) -> list[ThreadInfo]:
        rows = self._read(lambda cur: cur.execute(
            "SELECT info FROM turnlog_threads WHERE session_id = %s ORDER BY num DESC LIMIT %s",
            (session_id, max(0, int(n)))).fetchall())
        return [thread_info(session_id, json.loads(r[0]), None) for r in rows]

    def thread(self, session_id: str, thread_id: str, transcript: Any = None) -> ThreadInfo:
        num = thread_num(thread_id)
        row = None if num is None else self._read(lambda cur: cur.execute(
            "SELECT info FROM turnlog_threads WHERE session_id = %s AND num = %s",
            (session_id, num)).fetchone())
        if row is None:
            raise UnknownThreadError(
                f"no thread {thread_id!r} in session {session_id!r}; list them with threads()")
        return thread_info(session_id, json.loads(row[0]), transcript)

    def set_thread_state(self, session_id: str, thread_id: str, *,
                         established: list[str] | None = None,
                         open_questions: list[str] | None = None,
                         user_constraints: list[str] | None = None) -> None:
        """Set fields of a thread's state by hand: a field given replaces the
        derived one from now on, a field not given stays as it was."""
        num = thread_num(thread_id)
        fields = {"established": established, "open_questions": open_questions,
                  "user_constraints": user_constraints}

        def write(cur: Any) -> None:
            row = None if num is None else cur.execute(
                "SELECT info FROM turnlog_threads WHERE session_id = %s AND num = %s FOR UPDATE",
                (session_id, num)).fetchone()
            if row is None:
                raise UnknownThreadError(
                    f"no thread {thread_id!r} in session {session_id!r}; list them with threads()")
            info = derivation.with_state_fields(json.loads(row[0]), fields)
            cur.execute("UPDATE turnlog_threads SET info = %s WHERE session_id = %s AND num = %s",
                        (json.dumps(info), session_id, num))
        self._run(write)

    def inputs(self, session_id: str) -> dict[str, Any]:
        """The hand-set thread states and recorded references of the session."""
        def read(cur: Any) -> dict[str, Any]:
            threads = cur.execute(
                "SELECT info FROM turnlog_threads WHERE session_id = %s ORDER BY num",
                (session_id,)).fetchall()
            turns = cur.execute(
                "SELECT turn_id, record FROM turnlog_turns WHERE session_id = %s AND "
                "record::jsonb -> 'references' <> '[]'::jsonb ORDER BY turn_id",
                (session_id,)).fetchall()
            states = {}
            for (raw,) in threads:
                info = json.loads(raw)
                if info.get("override"):
                    states[info["thread_id"]] = info["override"]
            references = {int(t): list(json.loads(r)["references"]) for t, r in turns
                          if json.loads(r).get("references")}
            return {"thread_states": states, "references": references}
        return self._read(read)
