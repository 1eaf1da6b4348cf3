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

import hashlib
import json
import os
import re
import struct
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.errors import (
    ArtifactKeyConflictError,
    CorruptStoreError,
    InvalidArgumentError,
    InvalidArtifactError,
    InvalidRangeError,
    SessionExistsError,
    UnknownArtifactError,
    UnknownSessionError,
    UnknownTurnError,
)
from ctxrelay.storage.lmdb import base
from ctxrelay.storage.interfaces.warm import TranscriptLike
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.validation import check_int as _check_int
from ctxrelay.storage.validation import check_optional_str as _check_optional_str
from ctxrelay.storage.validation import check_session_id as _check_session_id
from ctxrelay.storage.validation import check_utf8 as _check_utf8
from ctxrelay.storage.validation import dumps as _dumps
from ctxrelay.storage.validation import normalise_metadata as _normalise_metadata
from ctxrelay.storage.validation import normalise_timestamp as _normalise_timestamp
from ctxrelay.storage.validation import sha256 as _sha256

_U64 = struct.Struct(">Q")

__all__ = ["FORMAT", "WarmArtifact", "WarmStore", "TranscriptLike", "VARIANTS",
           "open_warm_store", "close_all", "variants", "content_hash"]

FORMAT = b"ctxrelay.storage.lmdb.warm/1"
VARIANTS: tuple[str, ...] = ("verbatim", "detailed", "compact", "facts_only")
LIST_FIELDS: tuple[str, ...] = ("decisions", "facts", "unresolved", "entities")
COMPACT_WORDS = 40           # the compact variant keeps about this many words
MAX_PRODUCER_CHARS = 200
_MAX_TURN = 2**63 - 1
_DB_NAMES = (b"meta", b"artifacts", b"latest", b"keys")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")


# -- the artifact ------------------------------------------------------------

@dataclass(frozen=True)
class WarmArtifact:
    """One version of the warm artifact of turns ``start..end`` of a session."""

    artifact_id: str             # f"{session_id}:{start}-{end}", same for every version
    session_id: str
    start: int
    end: int
    version: int                 # 1, 2, ... per range
    summary: str
    decisions: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    entities: tuple[str, ...] = ()
    producer: str = "api"
    created: str = ""            # ISO 8601, UTC
    content_hash: str = ""       # sha256 hex of the canonical JSON of the content
    metadata: dict[str, Any] = field(default_factory=dict)
    key: str | None = None       # idempotency key given at publish time

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (lists, not tuples; a copy of the metadata)."""
        return {
            "artifact_id": self.artifact_id, "session_id": self.session_id,
            "start": self.start, "end": self.end, "version": self.version,
            "summary": self.summary,
            **{name: list(getattr(self, name)) for name in LIST_FIELDS},
            "producer": self.producer, "created": self.created,
            "content_hash": self.content_hash,
            "metadata": json.loads(json.dumps(self.metadata)), "key": self.key}

    def variants(self) -> list[dict[str, str]]:
        return variants(self)


def artifact_id(session_id: str, start: int, end: int) -> str:
    return f"{session_id}:{start}-{end}"


def content_hash(summary: str, decisions: Iterable[str] = (), facts: Iterable[str] = (),
                 unresolved: Iterable[str] = (), entities: Iterable[str] = ()) -> str:
    """sha256 hex of the canonical JSON (sorted keys, no spaces) of the content."""
    content = {"summary": summary, "decisions": list(decisions), "facts": list(facts),
               "unresolved": list(unresolved), "entities": list(entities)}
    text = json.dumps(content, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- representations -----------------------------------------------------------

def variants(artifact: WarmArtifact) -> list[dict[str, str]]:
    """The representations a packer chooses from, largest first.

    Each is ``{"variant": name, "text": text}``: ``verbatim`` (everything),
    ``detailed`` (summary, decisions, unresolved), ``compact`` (the first
    sentences of the summary, about :data:`COMPACT_WORDS` words) and
    ``facts_only`` (facts and decisions; left out when both are empty).
    Every text starts with the same header line.  Deterministic; the
    artifact's text is copied, never interpreted.
    """
    if not isinstance(artifact, WarmArtifact):
        raise InvalidArgumentError(
            f"variants() takes a WarmArtifact, not {type(artifact).__name__}; "
            "pass one returned by WarmStore.get/latest/publish")
    header = (f"[warm artifact turns {artifact.start}\u2013{artifact.end} "
              f"v {artifact.version}, producer {artifact.producer}]")
    summary = artifact.summary.strip()
    sections = {name: _section(name.capitalize(), getattr(artifact, name))
                for name in LIST_FIELDS}
    out = [
        ("verbatim", [header, summary, *(sections[n] for n in LIST_FIELDS)]),
        ("detailed", [header, summary, sections["decisions"], sections["unresolved"]]),
        ("compact", [header, _first_sentences(summary, COMPACT_WORDS)]),
    ]
    if artifact.facts or artifact.decisions:
        out.append(("facts_only", [header, sections["facts"], sections["decisions"]]))
    return [{"variant": name, "text": "\n\n".join(part for part in parts if part)}
            for name, parts in out]


def _section(title: str, items: tuple[str, ...]) -> str:
    """``Title:`` and one bullet per item (continuation lines indented)."""
    if not items:
        return ""
    bullets = ["- " + item.strip().replace("\n", "\n  ") for item in items]
    return title + ":\n" + "\n".join(bullets)


def _first_sentences(summary: str, limit: int) -> str:
    """Whole sentences while they fit in ``limit`` words (at least one, cut)."""
    sentences = _SENTENCE_BREAK.split(" ".join(summary.split()))
    chosen: list[str] = []
    words = 0
    for sentence in sentences:
        count = len(sentence.split())
        if chosen and words + count > limit:
            break
        chosen.append(sentence)
        words += count
    kept = " ".join(chosen).split()
    return " ".join(kept) if len(kept) <= limit else " ".join(kept[:limit]) + " \u2026"


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


# -- validation ----------------------------------------------------------------

def _check_turn(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRangeError(
            f"{what} must be an int turn id, not {type(value).__name__} {value!r}; "
            "pass a 1-based turn id such as 1")
    if not 1 <= value <= _MAX_TURN:
        raise InvalidRangeError(
            f"{what} is {value}, but turn ids run from 1 (the first turn) to "
            f"{_MAX_TURN}; pass a 1-based turn id")
    return value


def _check_range(start: Any, end: Any) -> tuple[int, int]:
    start, end = _check_turn(start, "start"), _check_turn(end, "end")
    if start > end:
        raise InvalidRangeError(
            f"start {start} is after end {end}; a range is start..end with both "
            "turns included, so pass start <= end (e.g. start=1, end=1 for one turn)")
    return start, end


def _check_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArtifactError(
            f"{what} must be a str, not {type(value).__name__}; pass text "
            "(serialise structured values, e.g. with json.dumps)")
    if not value.strip():
        raise InvalidArtifactError(
            f"{what} is empty or only whitespace; pass some text, or leave the "
            "item out")
    _check_utf8(value, what, InvalidArtifactError)
    return value


def _check_items(value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidArtifactError(
            f"{what} must be a list of str, not {type(value).__name__}; wrap a "
            f"single item in a list, e.g. {what}=[text]")
    return tuple(_check_text(item, f"{what}[{i}]") for i, item in enumerate(value))


def _check_producer(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArtifactError(
            f"producer must be a non-empty str, not {value!r}; name what made the "
            "summary, e.g. 'api' or 'summariser:gpt-4o'")
    if len(value) > MAX_PRODUCER_CHARS:
        raise InvalidArtifactError(
            f"producer has {len(value)} characters, more than {MAX_PRODUCER_CHARS}; "
            "use a short name and put details in metadata")
    for index, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise InvalidArtifactError(
                f"producer {value!r} has a control or surrogate character "
                f"U+{ord(char):04X} at index {index} (it is shown on one header "
                "line); remove it")
    return value


def _check_transcript(transcript: Any, session_id: str, end: int) -> None:
    """UnknownSessionError / UnknownTurnError unless turns ..end exist."""
    if not transcript.has_session(session_id):
        raise UnknownSessionError(
            f"the transcript has no session {session_id!r}, so there is nothing to "
            "summarise; create the session and append its turns first, or fix the "
            "session id")
    count = transcript.turn_count(session_id)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise InvalidArgumentError(
            f"transcript.turn_count({session_id!r}) returned {count!r}; the "
            "transcript object must return an int >= 0")
    if end > count:
        fix = (f"publish a range that ends at or before turn {count}" if count
               else "append turns before summarising them")
        shown = f"turns 1..{count}" if count else "no turns yet"
        raise UnknownTurnError(
            f"range ends at turn {end} but session {session_id!r} has {shown}; {fix}")


@dataclass(frozen=True)
class _Pending:
    """A validated publish (everything but its version and timestamp)."""

    session_id: str
    start: int
    end: int
    summary: str
    lists: dict[str, tuple[str, ...]]
    producer: str
    metadata: dict[str, Any]
    key: str | None

    @property
    def content_hash(self) -> str:
        return content_hash(self.summary, **self.lists)

    @property
    def digest(self) -> bytes:
        """The identity an idempotency key stands for (timestamps excluded)."""
        identity = [self.start, self.end, self.content_hash, self.producer, self.metadata]
        return _sha256(json.dumps(identity, ensure_ascii=False, sort_keys=True))

    def record(self, version: int, created: str) -> bytes:
        return _dumps({
            "session_id": self.session_id, "start": self.start, "end": self.end,
            "version": version, "summary": self.summary,
            **{name: list(items) for name, items in self.lists.items()},
            "producer": self.producer, "created": created,
            "content_hash": self.content_hash, "metadata": self.metadata,
            "key": self.key})


def pending_of(artifact: Any) -> _Pending:
    """A copied artifact (``restore``) checked as a publish is, its content hash too."""
    if not isinstance(artifact, WarmArtifact):
        raise InvalidArgumentError(
            f"restore() takes WarmArtifacts, not {type(artifact).__name__}; pass the "
            "artifacts another store's versions() returned")
    start, end = _check_range(artifact.start, artifact.end)
    pending = _Pending(
        session_id=_check_session_id(artifact.session_id), start=start, end=end,
        summary=_check_text(artifact.summary, "summary"),
        lists={name: _check_items(list(getattr(artifact, name)), name) for name in LIST_FIELDS},
        producer=_check_producer(artifact.producer),
        metadata=_normalise_metadata(artifact.metadata),
        key=_check_optional_str(artifact.key, "key", empty_ok=False))
    _check_int(artifact.version, "version", minimum=1)
    if pending.content_hash != artifact.content_hash:
        raise InvalidArtifactError(
            f"artifact {artifact.artifact_id} v {artifact.version} has content hash "
            f"{artifact.content_hash[:12]} but its content hashes to "
            f"{pending.content_hash[:12]}; copy artifacts as a store returned them")
    return pending


def _parse_artifact(raw: bytes) -> WarmArtifact:
    try:
        data = json.loads(raw)
        for name in LIST_FIELDS:
            data[name] = tuple(data[name])
        return WarmArtifact(
            artifact_id=artifact_id(data["session_id"], data["start"], data["end"]), **data)
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise CorruptStoreError(
            f"a warm artifact record does not parse ({type(exc).__name__}: {str(exc)[:200]}); "
            "the store is damaged: run 'ctxrelay check --repair'") from None


# -- the store -----------------------------------------------------------------

class WarmStore(LmdbStore):
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
            _require_transcript_like(transcript)
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

    @property
    def transcript(self) -> TranscriptLike | None:
        return self._transcript

    # The transactions of the base class, under the names this module uses
    # (aliases, not wrappers: a summary read is a few microseconds).
    _read = LmdbStore.read
    _write = LmdbStore.write

    # -- publishing ----------------------------------------------------

    def publish(self, session_id: str, start: int, end: int, summary: str, *,
                decisions: Iterable[str] = (), facts: Iterable[str] = (),
                unresolved: Iterable[str] = (), entities: Iterable[str] = (),
                producer: str = "api", metadata: dict[str, Any] | str | None = None,
                key: str | None = None,
                transcript: TranscriptLike | None = None) -> WarmArtifact:
        """Store a new version of the artifact of turns ``start..end``.

        The first publish of a range is version 1, each later one the next
        version; older versions stay readable.  With ``key``, a retry with the
        same range, content, producer and metadata returns the artifact it
        made and writes nothing; anything different raises
        ArtifactKeyConflictError.  ``transcript`` (or the store's) is used to
        check that the session exists and has turn ``end``.  Every check runs
        before the write: a failed publish writes nothing.
        """
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
        pending = _Pending(
            session_id=session_id, start=start, end=end,
            summary=_check_text(summary, "summary"),
            lists={"decisions": _check_items(decisions, "decisions"),
                   "facts": _check_items(facts, "facts"),
                   "unresolved": _check_items(unresolved, "unresolved"),
                   "entities": _check_items(entities, "entities")},
            producer=_check_producer(producer),
            metadata=_normalise_metadata(metadata),
            key=_check_optional_str(key, "key", empty_ok=False))
        source = transcript if transcript is not None else self._transcript
        if source is not None:
            _require_transcript_like(source)
            _check_transcript(source, session_id, end)
        created = _normalise_timestamp(None)
        return self._write(lambda txn: self._publish_txn(txn, pending, created))

    def _publish_txn(self, txn: Any, pending: _Pending, created: str) -> WarmArtifact:
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
        return _parse_artifact(record)

    def _replayed(self, txn: Any, prefix: bytes, pending: _Pending,
                  known: bytes) -> WarmArtifact:
        stored = self._load(txn, prefix + known[:24], pending.session_id)
        if stored is None:
            raise CorruptStoreError(
                f"key {pending.key!r} of session {pending.session_id!r} names an "
                "artifact that is not stored; the warm store is damaged, restore "
                "a backup")
        if known[24:] != pending.digest:
            differs = [name for name, ours, theirs in (
                ("range", (pending.start, pending.end), (stored.start, stored.end)),
                ("content", pending.content_hash, stored.content_hash),
                ("producer", pending.producer, stored.producer),
                ("metadata", pending.metadata, stored.metadata)) if ours != theirs]
            raise ArtifactKeyConflictError(
                f"key {pending.key!r} was already used in session "
                f"{pending.session_id!r} for turns {stored.start}\u2013{stored.end} "
                f"v {stored.version} with a different {', '.join(differs) or 'identity'}; "
                "use a new key for a new artifact (or no key to add a version)")
        return stored

    # -- reading -------------------------------------------------------

    def get(self, session_id: str, start: int, end: int,
            version: int | None = None) -> WarmArtifact:
        """One version (default: the latest) of the artifact of ``start..end``."""
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
        if version is not None:
            version = _check_int(version, "version", minimum=1)

        def read(txn: Any) -> WarmArtifact:
            range_key = _sha256(session_id) + _U64.pack(start) + _U64.pack(end)
            raw_latest = txn.get(range_key, db=self._latest)
            if raw_latest is None:
                raise UnknownArtifactError(
                    f"session {session_id!r} has no warm artifact for turns "
                    f"{start}\u2013{end}; publish one first, or pick a range from "
                    "latest(session_id)")
            newest = _U64.unpack(raw_latest)[0]
            wanted = newest if version is None else version
            artifact = self._load(txn, range_key + _U64.pack(wanted), session_id) \
                if wanted <= newest else None
            if artifact is None:
                raise UnknownArtifactError(
                    f"the warm artifact of turns {start}\u2013{end} of session "
                    f"{session_id!r} has versions 1..{newest}; version {wanted} does "
                    "not exist, ask for one in that range (or version=None for the "
                    "latest)")
            return artifact
        return self._read(read)

    def versions(self, session_id: str, start: int, end: int) -> list[WarmArtifact]:
        """Every version of the artifact of ``start..end``, oldest first."""
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
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

    def variants(self, artifact: WarmArtifact) -> list[dict[str, str]]:
        """The same as the module-level :func:`variants`."""
        return variants(artifact)

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
                found.append(_parse_artifact(cursor.value()).session_id)
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
        artifact = _parse_artifact(raw)
        if artifact.session_id != session_id:
            raise CorruptStoreError(
                f"an artifact filed under session {session_id!r} belongs to "
                f"{artifact.session_id!r}; the warm store is damaged, restore a backup")
        return artifact


# -- helpers -------------------------------------------------------------------

def _require_transcript_like(transcript: Any) -> None:
    missing = [name for name in ("has_session", "turn_count")
               if not callable(getattr(transcript, name, None))]
    if missing:
        raise InvalidArgumentError(
            f"transcript {type(transcript).__name__} has no {' or '.join(missing)} "
            "method; pass a ctxrelay.storage.lmdb.transcript.TranscriptStore (or an object with "
            "has_session(session_id) and turn_count(session_id)), or None")
