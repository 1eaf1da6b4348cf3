"""Warm artifacts: versioned summaries of a session's turn ranges.

A warm artifact summarises turns ``start..end`` (inclusive, 1-based) of one
session: a summary plus optional decisions, facts, unresolved questions and
entities.  Artifacts are made only by an explicit :meth:`WarmStore.publish`
(never automatically), are stored durably and versioned, and are offered to
the context packer in several representations (:func:`variants`).  The
transcript is never touched; it is only read, to validate a range, when a
transcript object is given.

On-disk layout
--------------
``WarmStore(path)`` keeps one LMDB environment directly in the directory
``path`` (``path/data.mdb`` and ``path/lock.mdb``; the runtime uses
``<store_dir>/warm``).  ``S`` is sha256(session id, UTF-8): 32 bytes, so one
session's keys are never a prefix of another's and ids of any length fit.
Integers are u64 big-endian, so cursor order is numeric order.  Named
sub-databases:

``meta``       ``b"format"`` -> :data:`FORMAT`.
``artifacts``  S + start + end + version -> JSON {session_id, start, end,
               version, summary, decisions, facts, unresolved, entities,
               producer, created, content_hash, metadata, key}.  Written once,
               never overwritten: every version stays readable.
``latest``     S + start + end -> version (u64) of the range's newest artifact;
               cursor order is start then end.
``keys``       S + sha256(idempotency key) -> start + end + version (u64 each)
               + sha256 of the publish's identity (range, content hash,
               producer, metadata).

Durability
----------
A publish is one LMDB write transaction committed with sync on; its version is
allocated inside that transaction, so concurrent publishers (threads or
processes) never share a version.  A full map is doubled and the transaction
retried, as in :mod:`ctxrelay.storage.lmdb.transcript`.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import Any

from ctxrelay.errors import CorruptStoreError, InvalidArgumentError, SessionExistsError
from ctxrelay.storage.common.warm import (COMPACT_WORDS, LIST_FIELDS,  # noqa: F401 (re-exported)
                                          MAX_PRODUCER_CHARS, VARIANTS, Pending, WarmArtifact,
                                          WarmBase, artifact_id, check_range, content_hash,
                                          no_artifact, no_version, parse_artifact, pending_of,
                                          require_transcript_like, variants)
from ctxrelay.storage.interfaces.warm import TranscriptLike
from ctxrelay.storage.lmdb import base
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.validation import check_int as _check_int
from ctxrelay.storage.validation import check_session_id as _check_session_id
from ctxrelay.storage.validation import sha256 as _sha256

_U64 = struct.Struct(">Q")

__all__ = ["FORMAT", "WarmArtifact", "WarmStore", "TranscriptLike", "VARIANTS",
           "open_warm_store", "close_all", "variants", "content_hash"]

FORMAT = b"ctxrelay.storage.lmdb.warm/1"
_DB_NAMES = (b"meta", b"artifacts", b"latest", b"keys")
# -- one shared store per path per process ---------------------------------------

def open_warm_store(path: str | os.PathLike[str], **kw: Any) -> "WarmStore":
    """The one shared :class:`WarmStore` of ``path`` in this process.

    Keyword arguments apply when the store is first opened; a later call with a
    different ``readonly`` or ``transcript`` raises InvalidArgumentError.
    """
    return WarmStore.open(path, **kw)


def close_all() -> None:
    """Close every warm store opened in this process."""
    base.close_all(WarmStore)


# -- the store -----------------------------------------------------------------

class WarmStore(WarmBase, LmdbStore):
    """Versioned warm artifacts of every session (see the module doc).

    Use :func:`open_warm_store` to share one instance per path in a process; a
    second direct construction on an open path raises StoreError.  With
    ``transcript`` (an object with ``has_session`` and ``turn_count``, such as
    a :class:`ctxrelay.storage.lmdb.transcript.TranscriptStore`), publish checks that the
    session exists and the range ends within it.
    """

    KIND = "warm store"
    FORMAT = FORMAT
    DB_NAMES = _DB_NAMES
    DERIVED_DBS = frozenset({b"latest", b"keys"})      # rebuilt by check(repair=True)
    OPEN_HINT = "ctxrelay.storage.lmdb.warm.open_warm_store(path)"
    FULL_HINT = "move old sessions' artifacts to a new warm store"
    FORMAT_HINT = ("point the warm store at its own directory (e.g. <store_dir>/warm), or "
                   "open it with the ctxrelay version that wrote it")

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = 1 << 28,
                 readonly: bool = False, transcript: TranscriptLike | None = None) -> None:
        _check_int(map_size, "map_size", minimum=1)
        if transcript is not None:
            require_transcript_like(transcript)
        self._transcript = transcript
        super().__init__(path, map_size=map_size, readonly=readonly)
        dbs = self.dbs
        self._meta, self._artifacts = dbs[b"meta"], dbs[b"artifacts"]
        self._latest, self._keys = dbs[b"latest"], dbs[b"keys"]

    def _reopen_conflict(self, kw: dict[str, Any]) -> str | None:
        if "transcript" in kw and kw["transcript"] is not self._transcript \
                and kw["transcript"] != self._transcript:
            return "transcript (or pass transcript= to publish())"
        return super()._reopen_conflict(kw)

    # The transactions of the base class, under the names this module uses
    # (aliases, not wrappers: a summary read is a few microseconds).
    _read = LmdbStore.read
    _write = LmdbStore.write

    # -- publishing ----------------------------------------------------

    def _publish(self, pending: Pending, created: str) -> WarmArtifact:
        return self._write(lambda txn: self._publish_txn(txn, pending, created))

    def _publish_txn(self, txn: Any, pending: Pending, created: str) -> WarmArtifact:
        prefix = _sha256(pending.session_id)
        range_key = prefix + _U64.pack(pending.start) + _U64.pack(pending.end)
        key_key = prefix + _sha256(pending.key) if pending.key is not None else None
        if key_key is not None:
            known = txn.get(key_key, db=self._keys)
            if known is not None:
                return self._replayed(txn, prefix, pending, known)
        raw_version = txn.get(range_key, db=self._latest)
        version = 1 if raw_version is None else _U64.unpack(raw_version)[0] + 1
        record = pending.record(version, created)
        if not txn.put(range_key + _U64.pack(version), record,
                       db=self._artifacts, overwrite=False):
            raise CorruptStoreError(
                f"version {version} of {artifact_id(pending.session_id, pending.start, pending.end)} "
                "exists beyond the latest-version record; the warm store is "
                "damaged, restore a backup")
        txn.put(range_key, _U64.pack(version), db=self._latest)
        if key_key is not None:
            txn.put(key_key, range_key[32:] + _U64.pack(version) + pending.digest,
                    db=self._keys)
        return parse_artifact(record)

    def _replayed(self, txn: Any, prefix: bytes, pending: Pending,
                  known: bytes) -> WarmArtifact:
        stored = self._load(txn, prefix + known[:24], pending.session_id)
        if stored is None:
            raise CorruptStoreError(
                f"key {pending.key!r} of session {pending.session_id!r} names an "
                "artifact that is not stored; the warm store is damaged, restore "
                "a backup")
        return self._check_replay(pending, stored, known[24:])

    # -- reading -------------------------------------------------------

    def get(self, session_id: str, start: int, end: int,
            version: int | None = None) -> WarmArtifact:
        """One version (default: the latest) of the artifact of ``start..end``."""
        session_id = _check_session_id(session_id)
        start, end = check_range(start, end)
        if version is not None:
            version = _check_int(version, "version", minimum=1)

        def read(txn: Any) -> WarmArtifact:
            range_key = _sha256(session_id) + _U64.pack(start) + _U64.pack(end)
            raw_latest = txn.get(range_key, db=self._latest)
            if raw_latest is None:
                raise no_artifact(session_id, start, end)
            newest = _U64.unpack(raw_latest)[0]
            wanted = newest if version is None else version
            artifact = self._load(txn, range_key + _U64.pack(wanted), session_id) \
                if wanted <= newest else None
            if artifact is None:
                raise no_version(session_id, start, end, newest, wanted)
            return artifact
        return self._read(read)

    def versions(self, session_id: str, start: int, end: int) -> list[WarmArtifact]:
        """Every version of the artifact of ``start..end``, oldest first."""
        session_id = _check_session_id(session_id)
        start, end = check_range(start, end)
        range_key = _sha256(session_id) + _U64.pack(start) + _U64.pack(end)
        return self._read(lambda txn: [
            self._checked(raw, session_id)
            for _, raw in base.prefixed(txn, self._artifacts, range_key)])

    def latest(self, session_id: str) -> list[WarmArtifact]:
        """The latest version of every range, ordered by start, then end."""
        session_id = _check_session_id(session_id)
        return self._read(lambda txn: self._latest_txn(txn, session_id, None))

    def covering(self, session_id: str, turn_id: int) -> list[WarmArtifact]:
        """Latest versions whose range contains ``turn_id`` (by start, then end)."""
        session_id = _check_session_id(session_id)
        turn_id = _check_int(turn_id, "turn_id", minimum=1)
        return self._read(lambda txn: self._latest_txn(txn, session_id, turn_id))

    def _latest_txn(self, txn: Any, session_id: str, turn_id: int | None) -> list[WarmArtifact]:
        prefix = _sha256(session_id)
        found = []
        for range_key, raw_version in base.prefixed(txn, self._latest, prefix):
            start, end = _U64.unpack(range_key[32:40])[0], _U64.unpack(range_key[40:48])[0]
            if turn_id is not None and start > turn_id:
                break                        # keys are in start order
            if turn_id is not None and end < turn_id:
                continue
            artifact = self._load(txn, range_key + raw_version, session_id)
            if artifact is None:
                raise CorruptStoreError(
                    f"the latest version of {artifact_id(session_id, start, end)} "
                    "is not stored; the warm store is damaged, restore a backup")
            found.append(artifact)
        return found

    # -- copying (ctxrelay migrate) --------------------------------------

    def sessions(self) -> list[str]:
        """The ids of the sessions holding artifacts, sorted."""
        def read(txn: Any) -> list[str]:
            found = []
            cursor = txn.cursor(db=self._artifacts)
            positioned = cursor.first()
            while positioned:
                found.append(parse_artifact(cursor.value()).session_id)
                # the next session's keys start past every key of this one
                positioned = cursor.set_range(cursor.key()[:32] + b"\xff" * 24)
            return sorted(found)
        return self._read(read)

    def restore(self, artifacts: Iterable[WarmArtifact]) -> int:
        """Write copies of ``artifacts`` as they are (versions, creation times, keys),
        with their latest-version and key records, in one transaction.

        @raises SessionExistsError if a version or key is held already (nothing
            is written).
        """
        copies = [(pending_of(a), a.version, a.created) for a in artifacts]

        def run(txn: Any) -> int:
            newest: dict[bytes, int] = {}
            for pending, version, created in copies:
                prefix = _sha256(pending.session_id)
                range_key = prefix + _U64.pack(pending.start) + _U64.pack(pending.end)
                name = artifact_id(pending.session_id, pending.start, pending.end)
                if not txn.put(range_key + _U64.pack(version), pending.record(version, created),
                               db=self._artifacts, overwrite=False):
                    raise SessionExistsError(
                        f"this warm store already holds version {version} of {name}; "
                        "copy into a store without the session's artifacts. Nothing was "
                        "written")
                held = txn.get(range_key, db=self._latest)
                newest[range_key] = max(version, newest.get(range_key, 0),
                                        0 if held is None else _U64.unpack(held)[0])
                if pending.key is not None:
                    if not txn.put(prefix + _sha256(pending.key),
                                   range_key[32:] + _U64.pack(version) + pending.digest,
                                   db=self._keys, overwrite=False):
                        raise SessionExistsError(
                            f"this warm store already holds key {pending.key!r} of session "
                            f"{pending.session_id!r}; nothing was written")
            for range_key, version in newest.items():
                txn.put(range_key, _U64.pack(version), db=self._latest)
            return len(copies)
        return self._write(run)

    # -- consistency ---------------------------------------------------

    def check(self, *, repair: bool = False) -> tuple[str, ...]:
        """Compare the derived ``latest`` and ``keys`` records with the artifacts.

        ``latest`` must name the newest stored version of every range and
        every key record an artifact that is stored.  With ``repair=True``
        the disagreeing records are rewritten from the artifacts in one
        write transaction (artifacts themselves are never changed).
        Returns the problems found.
        """
        def run(txn: Any) -> tuple[str, ...]:
            newest: dict[bytes, int] = {}
            for key in txn.cursor(db=self._artifacts).iternext(values=False):
                range_key, version = key[:48], _U64.unpack(key[48:56])[0]
                newest[range_key] = max(version, newest.get(range_key, 0))
            recorded = {k: _U64.unpack(v)[0]
                        for k, v in txn.cursor(db=self._latest).iternext()}
            problems: list[str] = []
            for range_key in sorted(set(newest) | set(recorded)):
                want, have = newest.get(range_key), recorded.get(range_key)
                if want == have:
                    continue
                start, end = _U64.unpack(range_key[32:40])[0], _U64.unpack(range_key[40:48])[0]
                problems.append(f"the latest version of turns {start}-{end} is recorded as "
                                f"{have} but the newest stored is {want}")
                if repair and want is None:
                    txn.delete(range_key, db=self._latest)
                elif repair:
                    txn.put(range_key, _U64.pack(want), db=self._latest)
            dangling = [k for k, v in txn.cursor(db=self._keys).iternext()
                        if txn.get(k[:32] + v[:24], db=self._artifacts) is None]
            if dangling:
                problems.append(f"{len(dangling)} idempotency key(s) name an artifact that "
                                "is not stored")
            if repair:
                for key in dangling:
                    txn.delete(key, db=self._keys)
            return tuple(problems)
        return self._write(run) if repair else self._read(run)

    def _load(self, txn: Any, full_key: bytes, session_id: str) -> WarmArtifact | None:
        raw = txn.get(full_key, db=self._artifacts)
        return None if raw is None else self._checked(raw, session_id)

    def _checked(self, raw: bytes, session_id: str) -> WarmArtifact:
        artifact = parse_artifact(raw)
        if artifact.session_id != session_id:
            raise CorruptStoreError(
                f"an artifact filed under session {session_id!r} belongs to "
                f"{artifact.session_id!r}; the warm store is damaged, restore a backup")
        return artifact
