"""The turn log (Tier C): derived fields kept beside the transcript.

The transcript's content is never rewritten; what ctxrelay learns about each
turn lives here, keyed by (session, turn id), and can be recomputed for a
whole session (e.g. after changing the embedder):

- embedding (float32, the embedder's ``model_id`` recorded),
- topic thread: the thread rules (Prolog, ``ctxrelay_thread_rules``) place
  each user turn among the most recently active threads, through the same
  :class:`ctxrelay.text.threads.ThreadBook` an assembly uses for the
  new message; assistant and tool turns stay in the thread of the turn they
  answer; a new thread gets a readable label, unique in the session,
- references (turn ids; set by the Prolog resolver), entities, tool_calls,
- per-thread ThreadState derived by the state rules (``ctxrelay_thread_state``)
  from the thread's latest turns, each field overridable through
  :meth:`TurnLog.set_thread_state`.

Derivation is incremental (:meth:`TurnLog.sync` handles only turns added
since the last call), so its cost follows new turns, not history length.
"""
from __future__ import annotations

import hashlib
import json
import struct
from typing import Any, Iterable

import numpy as np

from ctxrelay.errors import CorruptStoreError, InvalidArgumentError, UnknownThreadError
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.lmdb.base import prefixed as base_prefixed
from ctxrelay.storage import turnlog_derivation as derivation
from ctxrelay.storage.turnlog_derivation import (
    DerivedTurn, ThreadInfo, TurnLogBase, thread_info, thread_num)
from ctxrelay.text.threads import ThreadBook
from ctxrelay.types import Turn

_U64 = struct.Struct(">Q")


def _session_key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8")).digest()


class _Records:
    """One session's records in one LMDB transaction, as the derivation reads them
    (:class:`ctxrelay.storage.turnlog_derivation.RecordReader`)."""

    def __init__(self, log: "TurnLog", txn: Any, skey: bytes) -> None:
        self.txn, self.dbs, self.skey = txn, log.dbs, skey

    def _get(self, db: bytes, suffix: bytes) -> bytes | None:
        return self.txn.get(self.skey + suffix, db=self.dbs[db])

    def threads(self, nums: list[int]) -> dict[int, dict[str, Any]]:
        out = {}
        for n in nums:
            raw = self._get(b"threads", _U64.pack(n))
            if raw is not None:
                out[n] = json.loads(raw)
        return out

    def latest_threads(self, limit: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = self.txn.cursor(db=self.dbs[b"threads"])
        positioned = cursor.prev() if cursor.set_range(self.skey + b"\xff" * 8) else cursor.last()
        while positioned and len(out) < limit and cursor.key().startswith(self.skey):
            out.append(json.loads(cursor.value()))
            positioned = cursor.prev()
        return out

    def vectors(self, turn_ids: list[int]) -> dict[int, np.ndarray]:
        out = {}
        for t in turn_ids:
            raw = self._get(b"vectors", _U64.pack(t))
            if raw is not None:
                out[t] = np.frombuffer(raw, dtype=np.float32)
        return out

    def turn(self, turn_id: int) -> dict[str, Any] | None:
        raw = self._get(b"derived", _U64.pack(turn_id))
        return None if raw is None else json.loads(raw)

    def centroids(self, nums: list[int]) -> dict[int, np.ndarray]:
        out = {}
        for n in nums:
            raw = self._get(b"centroids", _U64.pack(n))
            if raw is not None:
                out[n] = np.frombuffer(raw, dtype=np.float32)
        return out

    def label_taken(self, label: str) -> bool:
        return self._get(b"labels", label.encode("utf-8")) is not None


class TurnLog(TurnLogBase, LmdbStore):
    """Derived fields of every stored turn (see the module doc)."""

    KIND = "turn log"
    FORMAT = b"ctxrelay.storage.lmdb.turnlog/1"
    DB_NAMES = (b"meta", b"progress", b"derived", b"vectors", b"threads", b"centroids",
                b"labels")
    # all of it is derived from the transcript (recompute); progress names the embedder
    DERIVED_DBS = frozenset({b"derived", b"vectors", b"threads", b"centroids", b"labels"})

    # -- sync ------------------------------------------------------------
    def _drop(self, session_id: str) -> None:
        skey = _session_key(session_id)

        def drop(txn: Any) -> None:
            for name in (b"derived", b"vectors", b"threads", b"centroids", b"labels"):
                cursor = txn.cursor(db=self.dbs[name])
                if cursor.set_range(skey):
                    while cursor.key().startswith(skey):
                        if not cursor.delete():
                            break
            txn.delete(skey, db=self.dbs[b"progress"])
        self.write(drop)

    def _derive(self, session_id: str, turns: list[Turn], vectors: np.ndarray,
                embedder: Any) -> int:
        return self.write(lambda txn: self._derive_chunk(txn, session_id, turns, vectors,
                                                         embedder))

    def _progress(self, session_id: str) -> dict[str, Any] | None:
        raw = self.read(lambda txn: txn.get(_session_key(session_id), db=self.dbs[b"progress"]))
        return None if raw is None else json.loads(raw)

    def _derive_chunk(self, txn: Any, session_id: str, turns: list[Turn],
                      vectors: np.ndarray, embedder: Any) -> int:
        skey = _session_key(session_id)
        raw = txn.get(skey, db=self.dbs[b"progress"])
        prog = json.loads(raw) if raw else derivation.fresh_progress(embedder.model_id)
        out = derivation.derive_chunk(_Records(self, txn, skey), prog, turns, vectors, embedder)
        for turn_id, record, vec in out.turns:
            key = skey + _U64.pack(turn_id)
            txn.put(key, vec.astype(np.float32).tobytes(), db=self.dbs[b"vectors"])
            txn.put(key, json.dumps(record).encode(), db=self.dbs[b"derived"])
        for num, info, centroid in out.threads:
            txn.put(skey + _U64.pack(num), json.dumps(info).encode(), db=self.dbs[b"threads"])
            txn.put(skey + _U64.pack(num), centroid.tobytes(), db=self.dbs[b"centroids"])
        for label, thread_id in out.labels:
            txn.put(skey + label.encode("utf-8"), thread_id.encode(), db=self.dbs[b"labels"])
        txn.put(skey, json.dumps(out.progress).encode(), db=self.dbs[b"progress"])
        return len(out.turns)               # none when another sync derived them first

    def thread_book(self, session_id: str, thresholds: dict[str, float]) -> ThreadBook:
        """The candidate threads for the session's next turn (read only)."""
        skey = _session_key(session_id)

        def read(txn: Any) -> ThreadBook:
            raw = txn.get(skey, db=self.dbs[b"progress"])
            return derivation.load_book(_Records(self, txn, skey),
                                        json.loads(raw) if raw else {}, thresholds)
        return self.read(read)

    def next_label(self, session_id: str, text: str) -> tuple[str, str]:
        """The id and label a new thread started by ``text`` would get now."""
        skey = _session_key(session_id)

        def read(txn: Any) -> tuple[str, str]:
            raw = txn.get(skey, db=self.dbs[b"progress"])
            return derivation.next_label(_Records(self, txn, skey),
                                         json.loads(raw) if raw else {}, text)
        return self.read(read)

    def _load_threads(self, txn: Any, skey: bytes) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = txn.cursor(db=self.dbs[b"threads"])
        if cursor.set_range(skey):
            for key, value in cursor:
                if not key.startswith(skey):
                    break
                out.append(json.loads(value))
        return out

    # -- reading -----------------------------------------------------------
    def derived(self, session_id: str, turn_id: int) -> DerivedTurn | None:
        skey = _session_key(session_id)

        def read(txn: Any) -> Any:
            raw = txn.get(skey + _U64.pack(int(turn_id)), db=self.dbs[b"derived"])
            if raw is None:
                self._require_absent(txn, skey, session_id, int(turn_id), "derived record")
            return raw
        raw = self.read(read)
        return None if raw is None else DerivedTurn(turn_id=int(turn_id), **json.loads(raw))

    def derived_many(self, session_id: str, turn_ids: Iterable[int]) -> dict[int, DerivedTurn]:
        skey = _session_key(session_id)
        ids = sorted({int(t) for t in turn_ids})

        def read(txn: Any) -> dict[int, bytes]:
            out = {}
            for tid in ids:
                raw = txn.get(skey + _U64.pack(tid), db=self.dbs[b"derived"])
                if raw is None:
                    self._require_absent(txn, skey, session_id, tid, "derived record")
                else:
                    out[tid] = raw
            return out
        return {tid: DerivedTurn(turn_id=tid, **json.loads(raw))
                for tid, raw in self.read(read).items()}

    def _require_absent(self, txn: Any, skey: bytes, session_id: str, turn_id: int,
                        what: str) -> None:
        """A record the progress says exists but a lookup cannot find: its key was
        damaged on disk (the checksum of a key is checked only when it is read)."""
        raw = txn.get(skey, db=self.dbs[b"progress"])
        if raw is not None and 1 <= turn_id <= int(json.loads(raw).get("derived_upto", 0)):
            raise CorruptStoreError(
                f"the {what} of turn {turn_id} of {session_id!r} is missing from the turn "
                f"log at {self.env_path} although turns 1..{json.loads(raw)['derived_upto']} "
                "are derived (a damaged key); 'ctxrelay check --repair' derives them again")

    def vectors(self, session_id: str, turn_ids: Iterable[int]) -> dict[int, np.ndarray]:
        skey = _session_key(session_id)

        def read(txn: Any) -> dict[int, np.ndarray]:
            out = {}
            for tid in turn_ids:
                raw = txn.get(skey + _U64.pack(int(tid)), db=self.dbs[b"vectors"])
                if raw is not None:
                    out[int(tid)] = np.frombuffer(raw, dtype=np.float32)
                else:
                    self._require_absent(txn, skey, session_id, int(tid), "vector")
            return out
        return self.read(read)

    def coverage(self, session_id: str) -> tuple[int, int, int]:
        """``(derived_upto, derived records, vectors)`` of the session: the turns
        its progress record says are derived, and how many records of each kind it
        holds (a consistent log has ``derived_upto`` of both)."""
        skey = _session_key(session_id)

        def read(txn: Any) -> tuple[int, int, int]:
            raw = txn.get(skey, db=self.dbs[b"progress"])
            counts = []
            for name in (b"derived", b"vectors"):
                cursor = txn.cursor(db=self.dbs[name])
                n, found = 0, cursor.set_range(skey)
                while found and cursor.key().startswith(skey):
                    n, found = n + 1, cursor.next()
                counts.append(n)
            upto = 0 if raw is None else int(json.loads(raw).get("derived_upto", 0))
            return upto, counts[0], counts[1]
        return self.read(read)

    def threads(self, session_id: str, transcript: Any = None) -> list[ThreadInfo]:
        raw = self.read(lambda txn: self._load_threads(txn, _session_key(session_id)))
        return [thread_info(session_id, info, transcript) for info in
                sorted(raw, key=lambda i: int(i["thread_id"][1:]))]

    def recent_threads(self, session_id: str, n: int) -> list[ThreadInfo]:
        """The ``n`` most recently started threads, read backwards (bounded work)."""
        skey = _session_key(session_id)
        raw = self.read(lambda txn: _Records(self, txn, skey).latest_threads(max(0, int(n))))
        return [thread_info(session_id, info, None) for info in raw]

    def thread(self, session_id: str, thread_id: str, transcript: Any = None) -> ThreadInfo:
        """One thread, its state derived from its own latest turns only (one record read)."""
        return thread_info(session_id, self._thread_record(session_id, thread_id), transcript)

    def _thread_record(self, session_id: str, thread_id: str, txn: Any = None) -> dict[str, Any]:
        num = thread_num(thread_id)
        key = _session_key(session_id) + _U64.pack(num or 0)
        raw = None if num is None else (
            txn.get(key, db=self.dbs[b"threads"]) if txn is not None else
            self.read(lambda t: t.get(key, db=self.dbs[b"threads"])))
        if raw is None:
            raise UnknownThreadError(
                f"no thread {thread_id!r} in session {session_id!r}; list them with threads()")
        return json.loads(raw)

    def set_thread_state(self, session_id: str, thread_id: str, *, established: list[str] | None = None,
                         open_questions: list[str] | None = None,
                         user_constraints: list[str] | None = None) -> None:
        """Set fields of a thread's state by hand: a field given replaces the
        derived one from now on, a field not given stays as it was."""
        fields = {"established": established, "open_questions": open_questions,
                  "user_constraints": user_constraints}

        def write(txn: Any) -> None:
            info = derivation.with_state_fields(self._thread_record(session_id, thread_id, txn),
                                                fields)
            txn.put(_session_key(session_id) + _U64.pack(thread_num(thread_id)),
                    json.dumps(info).encode(), db=self.dbs[b"threads"])
        self.write(write)

    def set_references(self, session_id: str, turn_id: int, references: list[int]) -> None:
        key = _session_key(session_id) + _U64.pack(int(turn_id))

        def write(txn: Any) -> None:
            raw = txn.get(key, db=self.dbs[b"derived"])
            if raw is None:
                raise InvalidArgumentError(
                    f"turn {turn_id} of {session_id!r} has no derived fields yet; derive the session first")
            rec = json.loads(raw)
            rec["references"] = sorted({int(r) for r in references})
            txn.put(key, json.dumps(rec).encode(), db=self.dbs[b"derived"])
        self.write(write)

    def inputs(self, session_id: str) -> dict[str, Any]:
        """The hand-set thread states and recorded references of the session."""
        skey = _session_key(session_id)

        def read(txn: Any) -> dict[str, Any]:
            states = {}
            for _, raw in base_prefixed(txn, self.dbs[b"threads"], skey):
                info = json.loads(raw)
                if info.get("override"):
                    states[info["thread_id"]] = info["override"]
            references = {}
            for key, raw in base_prefixed(txn, self.dbs[b"derived"], skey):
                rec = json.loads(raw)
                if rec.get("references"):
                    references[_U64.unpack(key[32:])[0]] = list(rec["references"])
            return {"thread_states": states, "references": references}
        return self.read(read)
