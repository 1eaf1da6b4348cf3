"""Copy warm artifacts, the scratch buffer and the turn log between stores
(``ctxrelay migrate``), through their Protocols only.

Each part has a ``prepare`` (read what the target holds and refuse a clash:
run for every part before anything is written), a ``copy`` (one session per
transaction of the target) and a verification that reads the session back
from the target and compares it with the source; each returns a
:class:`PartCopy` with its counts and a checksum.

- **Warm artifacts**: every version of every range, as stored (version,
  creation time, content, producer, metadata, idempotency key:
  ``WarmArtifacts.restore``), compared field by field.
- **Scratch entries**: every entry with its blob, as stored (id, times, last
  use, insertion number, pins, references, so retention, LRU order and
  expiry carry over: ``ScratchBuffer.restore``); blobs read with ``blob``, so
  the copy is not a use at the source; compared field by field and blob by
  blob hash.
- **Turn log**: derived data, so it is *derived again* at the target with the
  session's embedder (the Protocol's "same derivation" contract), and what
  callers set by hand (thread states, references: ``TurnLogStore.inputs``) is
  copied onto it.  Verified against the source: model, coverage, every
  thread (label, members, state), every derived turn record and the inputs
  exactly; the turn vectors within :data:`VECTOR_TOLERANCE` (an embedder may
  round differently when it batches turns differently), the largest
  difference reported.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctxrelay.errors import InvalidArgumentError, SessionExistsError, StoreError

__all__ = ["VECTOR_TOLERANCE", "PartCopy", "ScratchCopy", "TurnLogCopy", "WarmCopy",
           "scratch_rows", "turnlog_print", "warm_rows"]

#: The largest absolute difference allowed between a turn vector at the source and
#: the one derived again at the target.
VECTOR_TOLERANCE = 1e-5


@dataclass
class PartCopy:
    """What one part's copy carried: its items, bytes and a checksum over them."""

    part: str
    sessions: int = 0
    items: int = 0          # artifacts (every version) / entries / derived turns
    bytes: int = 0          # blob bytes (scratch)
    checksum: str = ""
    notes: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "items": self.items, "bytes": self.bytes,
                "checksum": self.checksum, **self.notes}


def _line(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"


def _clash(part: str, target: str, held: list[str]) -> SessionExistsError:
    return SessionExistsError(
        f"the target store {target} already holds {part} of {len(held)} of the source's "
        f"sessions ({', '.join(map(repr, held[:5]))}); migrate into an empty store, or "
        "remove them there first. Nothing was copied")


# -- warm artifacts -----------------------------------------------------------------------

def warm_rows(warm: Any, session_id: str) -> list[Any]:
    """Every version of every range of the session, by start, end, version."""
    return [version for latest in warm.latest(session_id)
            for version in warm.versions(session_id, latest.start, latest.end)]


class WarmCopy:
    def __init__(self, src: Any, dst: Any, target: str) -> None:
        self.src, self._dst = src.warm, dst
        self.ids = self.src.sessions()
        # a target without the part is not given one until the copy (a refusal writes nothing)
        held = sorted(set(self.ids) & set(dst.warm.sessions())) if dst.has("warm") else []
        if held:
            raise _clash("warm artifacts", target, held)

    def copy(self) -> PartCopy:
        out, h = PartCopy("warm", sessions=len(self.ids)), hashlib.sha256()
        self.dst = self._dst.warm
        for sid in self.ids:
            rows = warm_rows(self.src, sid)
            self.dst.restore(rows)
            if warm_rows(self.dst, sid) != rows:
                raise StoreError(
                    f"the warm artifacts of session {sid!r} do not read back from the "
                    "target as they are in the source; the copy is not faithful, do not "
                    "switch to it")
            for artifact in rows:
                h.update(_line(artifact.to_dict()))
            out.items += len(rows)
        out.checksum = h.hexdigest()
        return out


# -- scratch entries -------------------------------------------------------------------------

def scratch_rows(scratch: Any, session_id: str) -> list[tuple[Any, bytes]]:
    """Every entry of the session in put order, with its blob (read without a use)."""
    return [(entry, scratch.blob(session_id, entry.scratch_id))
            for entry in scratch.list(session_id)]


class ScratchCopy:
    def __init__(self, src: Any, dst: Any, target: str) -> None:
        self.src, self._dst = src.scratch, dst
        self.ids = self.src.sessions()
        held = (sorted(set(self.ids) & set(dst.scratch.sessions())) if dst.has("scratch")
                else [])
        if held:
            raise _clash("scratch entries", target, held)

    def copy(self) -> PartCopy:
        out, h = PartCopy("scratch", sessions=len(self.ids)), hashlib.sha256()
        self.dst = self._dst.scratch
        for sid in self.ids:
            rows = scratch_rows(self.src, sid)
            self.dst.restore(rows)
            back = [(entry, hashlib.sha256(self.dst.blob(sid, entry.scratch_id)).hexdigest())
                    for entry in self.dst.list(sid)]
            want = [(entry, hashlib.sha256(data).hexdigest()) for entry, data in rows]
            if back != want:
                raise StoreError(
                    f"the scratch entries of session {sid!r} do not read back from the "
                    "target as they are in the source (fields or blob bytes); the copy is "
                    "not faithful, do not switch to it")
            for entry, digest in want:
                h.update(_line([entry.to_dict(), digest]))
                out.bytes += entry.size
            out.items += len(rows)
        out.checksum = h.hexdigest()
        return out


# -- the turn log ---------------------------------------------------------------------------

def turnlog_print(stores: Any, session_id: str, upto: int
                  ) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """What must read back the same after a copy: the model, coverage, threads, the
    derived record of turns 1..upto and the inputs (exactly), and the turn vectors
    (ids, rows; compared within :data:`VECTOR_TOLERANCE`)."""
    log = stores.turnlog
    vectors = log.vectors(session_id, range(1, upto + 1))
    ids = np.array(sorted(vectors), dtype=np.int64)
    rows = (np.stack([vectors[int(t)] for t in ids]).astype(np.float32) if len(ids)
            else np.zeros((0, 0), np.float32))
    derived = [None if d is None else d.to_dict()
               for d in (log.derived(session_id, t) for t in range(1, upto + 1))]
    return ({"model_id": log.model_id(session_id),
             "threads": [t.to_dict() for t in log.threads(session_id)],
             "derived": derived, "inputs": log.inputs(session_id)}, ids, rows)


class TurnLogCopy:
    """Derive the turn log again at the target and copy the inputs onto it."""

    def __init__(self, src: Any, dst: Any, target: str, session_ids: list[str]) -> None:
        from ctxrelay.storage.turnlog_derivation import session_embedder
        from ctxrelay.text.embed import get_embedder
        self.src, self.dst = src, dst
        self.plan: list[tuple[str, Any, int]] = []
        for sid in session_ids:
            if src.turnlog.model_id(sid) is None:
                continue
            name = session_embedder(src.turnlog, sid)
            if not name:
                raise InvalidArgumentError(
                    f"session {sid!r} of the source's turn log was derived with the model "
                    f"{src.turnlog.model_id(sid)!r}, which no embedder registered in this "
                    "process has; register it (ctxrelay.text.embed.register) so the turn log "
                    "can be derived again at the target. Nothing was copied")
            derived, _, _ = src.turnlog.coverage(sid)
            self.plan.append((sid, get_embedder(name), derived))

    def copy(self, on_session: Callable[[str], None] | None = None) -> PartCopy:
        out, h = PartCopy("turnlog", sessions=len(self.plan)), hashlib.sha256()
        worst = 0.0
        for sid, embedder, upto in self.plan:
            log = self.dst.turnlog
            log.sync(self.dst.transcript, sid, embedder)
            inputs = self.src.turnlog.inputs(sid)
            for thread_id, fields in inputs["thread_states"].items():
                log.set_thread_state(sid, thread_id, **fields)
            for turn_id, references in inputs["references"].items():
                log.set_references(sid, int(turn_id), references)
            want, ids, rows = turnlog_print(self.src, sid, upto)
            have, ids_back, rows_back = turnlog_print(self.dst, sid, upto)
            total = self.src.transcript.turn_count(sid)
            if upto == total:                   # a partly derived source: turns 1..upto only
                same = have == want
            else:
                same = have["derived"] == want["derived"] and have["inputs"] == want["inputs"]
            gap = (float(np.max(np.abs(rows_back - rows))) if rows.size and
                   rows.shape == rows_back.shape else 0.0)
            if not same or not np.array_equal(ids, ids_back) or rows.shape != rows_back.shape \
                    or gap > VECTOR_TOLERANCE:
                raise StoreError(
                    f"the turn log of session {sid!r} derived again at the target differs "
                    f"from the source's (largest vector difference {gap:.2e}); the copy is "
                    "not faithful, do not switch to it (the transcript was copied: "
                    "'ctxrelay derive' rebuilds the turn log)")
            worst = max(worst, gap)
            # the vectors are compared within a tolerance, so only their ids are hashed
            h.update(_line([sid, want, ids.tolist()]))
            out.items += upto
            if on_session is not None:
                on_session(sid)
        out.checksum = h.hexdigest()
        out.notes = {"derived_again": True, "largest_vector_difference": worst}
        return out
