"""The scratch buffer's records: an entry, the totals, what eviction and a check
report, a rendered entry and a promotion; and how a stored record becomes them."""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctxrelay.storage.common.scratch.checks import iso, seconds
from ctxrelay.storage.common.scratch.errors import UnknownScratchError
from ctxrelay.types import copy_plain

__all__ = ["ScratchEntry", "ScratchStats", "Evicted", "EvictionReport", "CheckReport",
           "Rendered", "Promotion", "entry_of", "plain_entry", "copied_record", "unknown"]


@dataclass(frozen=True)
class ScratchEntry:
    """One tool output in the scratch buffer (times are Unix seconds, UTC).

    ``sha256`` is the provenance hash of tool name, arguments and raw output
    (:func:`provenance_hash`); ``content_sha256`` is the raw output's own hash.
    ``ttl`` is retention (eviction); ``freshness_ttl`` is freshness (the gate);
    ``None`` means unlimited for either.
    """

    scratch_id: str
    session_id: str
    tool_name: str
    args: dict[str, Any] = field(hash=False)
    size: int
    sha256: str
    content_sha256: str
    raw_type: str                      # "str" or "bytes": what raw() returns
    created: float
    freshness: str
    freshness_ttl: float | None
    ttl: float | None
    pinned: bool
    pin_reason: str | None             # "user", "audit" or "auto" (referenced)
    summary: str
    summary_tokens: int
    summary_exact: bool
    kind: str
    structured: dict[str, Any] = field(hash=False)
    raw_tokens: int | None             # None for binary outputs
    raw_tokens_exact: bool
    last_access: float
    referenced_by: tuple[int, ...]
    seq: int

    @property
    def provenance_hash(self) -> str:
        return self.sha256

    @property
    def created_at(self) -> str:
        return iso(self.created)

    @property
    def expires(self) -> float | None:
        """When retention ends (None: never by TTL)."""
        return None if self.ttl is None else self.created + self.ttl

    @property
    def stale_after(self) -> float | None:
        """When the value stops being fresh (None: never)."""
        return None if self.freshness_ttl is None else self.created + self.freshness_ttl

    def age(self, now: float | datetime | None = None) -> float:
        return seconds(now) - self.created

    def to_dict(self) -> dict[str, Any]:
        """Plain types for the janus boundary (and the spec's field names too).

        ``args`` and ``structured`` are copies: the entry is frozen, and a
        caller's edit of the dict must not reach it.
        """
        return plain_entry(vars(self), copy_plain(self.args), copy_plain(self.structured))


@dataclass(frozen=True)
class ScratchStats:
    """Totals over the whole store (``stats()``) or one session."""

    entries: int
    pinned: int
    bytes: int
    pinned_bytes: int
    disk_budget_bytes: int
    over_budget: bool                  # only pinned bytes can cause this
    sessions: int
    by_kind: dict[str, int] = field(hash=False)
    raw_tokens: int
    summary_tokens: int

    @property
    def tokens_saved(self) -> int:
        """Raw tokens minus summary tokens over entries with a raw count."""
        return max(self.raw_tokens - self.summary_tokens, 0)

    @property
    def entries_header(self) -> str:
        """``CRP-Context-Scratch-Entries`` value: ``total/pinned``."""
        return f"{self.entries}/{self.pinned}"

    def to_dict(self) -> dict[str, Any]:
        return {"entries": self.entries, "pinned": self.pinned, "bytes": self.bytes,
                "pinned_bytes": self.pinned_bytes,
                "disk_budget_bytes": self.disk_budget_bytes,
                "over_budget": self.over_budget, "sessions": self.sessions,
                "by_kind": dict(self.by_kind), "raw_tokens": self.raw_tokens,
                "summary_tokens": self.summary_tokens, "tokens_saved": self.tokens_saved}


@dataclass(frozen=True)
class Evicted:
    session_id: str
    scratch_id: str
    reason: str                        # "ttl" or "lru"
    size: int


@dataclass(frozen=True)
class EvictionReport:
    evicted: tuple[Evicted, ...]
    freed_bytes: int
    bytes: int                         # blob bytes left
    pinned_bytes: int
    over_budget: bool


@dataclass(frozen=True)
class CheckReport:
    """What :meth:`ScratchStore.check` found and (except ``corrupt``) removed."""

    orphan_blobs: tuple[str, ...]      # blob files no entry names: deleted
    temp_files: tuple[str, ...]        # unfinished writes: deleted
    dangling: tuple[tuple[str, str], ...]   # (session, id) whose blob was gone: dropped
    corrupt: tuple[tuple[str, str], ...]    # blob hash mismatch (verify=True): kept
    unknown_files: tuple[str, ...]     # not ours: left alone

    @property
    def clean(self) -> bool:
        return not (self.orphan_blobs or self.temp_files or self.dangling or self.corrupt)


@dataclass(frozen=True)
class Rendered:
    """What to do with an entry this turn, and the text to inject if any."""

    action: str                        # one of GATE_ACTIONS
    text: str | None                   # None for "reinvoke" and "exclude"
    header: str                        # CRP-Context-Scratch-Freshness value
    age: float


@dataclass(frozen=True)
class Promotion:
    """A pinned, durable entry offered to the CKF as a tool-derived fact."""

    scratch_id: str
    session_id: str
    tool_name: str
    args: dict[str, Any] = field(hash=False)
    provenance_hash: str
    created: float
    kind: str
    summary: str
    structured: dict[str, Any] = field(hash=False)
    referenced_by: tuple[int, ...]
    provenance: str = "tool-derived"


def entry_of(record: dict[str, Any]) -> ScratchEntry:
    return ScratchEntry(
        scratch_id=record["scratch_id"], session_id=record["session_id"],
        tool_name=record["tool_name"], args=record["args"], size=record["size"],
        sha256=record["sha256"], content_sha256=record["content_sha256"],
        raw_type=record["raw_type"], created=record["created"],
        freshness=record["freshness"], freshness_ttl=record["freshness_ttl"],
        ttl=record["ttl"], pinned=record["pinned"], pin_reason=record["pin_reason"],
        summary=record["summary"], summary_tokens=record["summary_tokens"],
        summary_exact=record["summary_exact"], kind=record["kind"],
        structured=record["structured"], raw_tokens=record["raw_tokens"],
        raw_tokens_exact=record["raw_tokens_exact"], last_access=record["last_access"],
        referenced_by=tuple(record["referenced_by"]), seq=record["seq"])


def copied_record(entry: Any, data: Any) -> dict[str, Any]:
    """The stored record of an entry copied from another store (``restore``), its
    blob checked against it; the fields in the order ``put`` writes them."""
    from ctxrelay.errors import InvalidArgumentError
    from ctxrelay.storage.common.scratch.checks import check_scratch_id, micros
    from ctxrelay.storage.common.scratch.errors import ScratchBlobError
    from ctxrelay.storage.validation import check_session_id
    if not isinstance(entry, ScratchEntry) or not isinstance(data, bytes):
        raise InvalidArgumentError(
            "restore() takes (ScratchEntry, bytes) pairs: the entries another store's "
            "list() returned and the bytes its blob() returned")
    check_session_id(entry.session_id)
    check_scratch_id(entry.scratch_id)
    if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.content_sha256:
        raise ScratchBlobError(
            f"the blob given for scratch entry {entry.scratch_id} ({len(data)} bytes) does "
            f"not match the entry ({entry.size} bytes, its sha256); copy the bytes the "
            "source's blob() returned. Nothing was written")
    record = plain_entry(vars(entry), copy_plain(entry.args), copy_plain(entry.structured))
    for derived in ("provenance_hash", "created_at", "persistence"):
        del record[derived]
    record["access_us"] = micros(entry.last_access)
    record["referenced_by"] = record.pop("referenced_by")
    record["seq"] = record.pop("seq")
    return record


def unknown(session_id: str, scratch_id: str) -> UnknownScratchError:
    return UnknownScratchError(
        f"session {session_id[:80]!r} has no scratch entry {scratch_id}: it was never "
        "stored in this session, or it was evicted or deleted; re-run the tool, or "
        "list(session_id) to see what is held")


def plain_entry(record: Mapping[str, Any], args: dict[str, Any],
                structured: dict[str, Any]) -> dict[str, Any]:
    """What :meth:`ScratchEntry.to_dict` and :meth:`ScratchStore.entry_dict`
    return, from a stored record or an entry's fields (the same names)."""
    return {
        "scratch_id": record["scratch_id"], "session_id": record["session_id"],
        "tool_name": record["tool_name"], "args": args, "size": record["size"],
        "sha256": record["sha256"], "provenance_hash": record["sha256"],
        "content_sha256": record["content_sha256"], "raw_type": record["raw_type"],
        "created": record["created"], "created_at": iso(record["created"]),
        "freshness": record["freshness"], "freshness_ttl": record["freshness_ttl"],
        "ttl": record["ttl"], "pinned": record["pinned"], "pin_reason": record["pin_reason"],
        "persistence": "PINNED" if record["pinned"] else "EPHEMERAL",
        "summary": record["summary"], "summary_tokens": record["summary_tokens"],
        "summary_exact": record["summary_exact"], "kind": record["kind"],
        "structured": structured, "raw_tokens": record["raw_tokens"],
        "raw_tokens_exact": record["raw_tokens_exact"], "last_access": record["last_access"],
        "referenced_by": list(record["referenced_by"]), "seq": record["seq"]}
