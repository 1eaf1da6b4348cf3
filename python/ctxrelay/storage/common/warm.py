"""Warm artifacts apart from where they are kept: the artifact, its variants, the
checks of a publish, the JSON record every back end stores, and
:class:`WarmBase`, what every :class:`~ctxrelay.storage.interfaces.warm.WarmArtifacts`
back end inherits (publish up to the write, the key-replay check, the
arguments of the reads).  The embedded store is :mod:`ctxrelay.storage.lmdb.warm`,
the PostgreSQL one :mod:`ctxrelay.storage.postgres.warm`.
"""
from __future__ import annotations

import hashlib
import json
import re
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
    UnknownArtifactError,
    UnknownSessionError,
    UnknownTurnError,
)
from ctxrelay.storage.interfaces.warm import TranscriptLike
from ctxrelay.storage.validation import check_int as _check_int
from ctxrelay.storage.validation import check_optional_str as _check_optional_str
from ctxrelay.storage.validation import check_session_id as _check_session_id
from ctxrelay.storage.validation import check_utf8 as _check_utf8
from ctxrelay.storage.validation import dumps as _dumps
from ctxrelay.storage.validation import normalise_metadata as _normalise_metadata
from ctxrelay.storage.validation import normalise_timestamp as _normalise_timestamp
from ctxrelay.storage.validation import sha256 as _sha256

__all__ = ["WarmArtifact", "WarmBase", "no_artifact", "no_version", "VARIANTS", "LIST_FIELDS", "COMPACT_WORDS",
           "MAX_PRODUCER_CHARS", "artifact_id", "content_hash", "variants", "pending_of",
           # for the back ends' warm stores (storage/lmdb, storage/postgres)
           "Pending", "check_range", "parse_artifact", "require_transcript_like"]

VARIANTS: tuple[str, ...] = ("verbatim", "detailed", "compact", "facts_only")
LIST_FIELDS: tuple[str, ...] = ("decisions", "facts", "unresolved", "entities")
COMPACT_WORDS = 40           # the compact variant keeps about this many words
MAX_PRODUCER_CHARS = 200
_MAX_TURN = 2**63 - 1
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


def check_range(start: Any, end: Any) -> tuple[int, int]:
    """A checked ``start..end`` turn range (1-based, both included, start <= end)."""
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
class Pending:
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


def pending_of(artifact: Any) -> Pending:
    """A copied artifact (``restore``) checked as a publish is, its content hash too."""
    if not isinstance(artifact, WarmArtifact):
        raise InvalidArgumentError(
            f"restore() takes WarmArtifacts, not {type(artifact).__name__}; pass the "
            "artifacts another store's versions() returned")
    start, end = check_range(artifact.start, artifact.end)
    pending = Pending(
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


def parse_artifact(raw: bytes) -> WarmArtifact:
    """A stored warm artifact record, read back (CorruptStoreError if it does not parse)."""
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


# -- helpers -------------------------------------------------------------------

def require_transcript_like(transcript: Any) -> None:
    """Refuse a ``transcript`` without ``has_session`` and ``turn_count``."""
    missing = [name for name in ("has_session", "turn_count")
               if not callable(getattr(transcript, name, None))]
    if missing:
        raise InvalidArgumentError(
            f"transcript {type(transcript).__name__} has no {' or '.join(missing)} "
            "method; pass a ctxrelay.storage.lmdb.transcript.TranscriptStore (or an object with "
            "has_session(session_id) and turn_count(session_id)), or None")


# -- what every back end inherits ---------------------------------------------------

class WarmBase:
    """Publish up to the write, the key-replay check and the variants, on top of a
    back end's ``_publish(pending, created)`` (one write: replay a key with
    :meth:`_check_replay`, or store the next version)."""

    _transcript: Any

    @property
    def transcript(self) -> TranscriptLike | None:
        return self._transcript

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
        start, end = check_range(start, end)
        pending = Pending(
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
            require_transcript_like(source)
            _check_transcript(source, session_id, end)
        created = _normalise_timestamp(None)
        return self._publish(pending, created)

    def _publish(self, pending: Pending, created: str) -> WarmArtifact:
        raise NotImplementedError

    @staticmethod
    def _check_replay(pending: Pending, stored: WarmArtifact, digest: bytes) -> WarmArtifact:
        """``stored``, the artifact ``pending``'s key made, if ``pending`` is the same
        publish (its ``digest``); ArtifactKeyConflictError naming what differs if not."""
        if digest != pending.digest:
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

    def variants(self, artifact: WarmArtifact) -> list[dict[str, str]]:
        """The same as the module-level :func:`variants`."""
        return variants(artifact)


def no_artifact(session_id: str, start: int, end: int) -> UnknownArtifactError:
    """The error of a read of a range that has no artifact."""
    return UnknownArtifactError(
        f"session {session_id!r} has no warm artifact for turns "
        f"{start}\u2013{end}; publish one first, or pick a range from "
        "latest(session_id)")


def no_version(session_id: str, start: int, end: int, newest: int,
               wanted: int) -> UnknownArtifactError:
    """The error of a read of a version a range does not have."""
    return UnknownArtifactError(
        f"the warm artifact of turns {start}\u2013{end} of session "
        f"{session_id!r} has versions 1..{newest}; version {wanted} does "
        "not exist, ask for one in that range (or version=None for the latest)")
