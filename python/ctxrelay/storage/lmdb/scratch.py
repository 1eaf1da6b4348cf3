"""The scratch buffer (Tier E): tool outputs as blobs, summaries in context.

This is CRP-SPEC-029's Scratch Buffer on SPEC-035 §2.5's pointer-based
ephemeral store, with the ``local-disk`` backend of SPEC-038 §2.5.  Each tool
output is written once to a blob file named by an unguessable scratch id; the
metadata, including a deterministic summary of at most 256 tokens
(:mod:`ctxrelay.text.summarize`), is kept in LMDB.  Only the summary goes into
context; :meth:`ScratchStore.raw` reads the blob when the full output is
really needed.

Public API
----------
``ScratchStore(path, *, disk_budget_bytes, default_ttl, ...)`` (or
``open_scratch_store(path, **kw)`` to share one per path per process) with
``put``, ``get``, ``entry_dict``, ``raw``, ``most_recent``, ``list``, ``pin``, ``unpin``,
``reference``, ``delete``, ``evict``, ``stats``, ``check``, ``gate``,
``render``, ``promote``, ``location`` and ``close``.  Module functions:
``gate``, ``render``, ``freshness_header``, ``provenance_hash``,
``check_scratch_id``, ``new_scratch_id``, ``close_all``.

Two clocks per entry
--------------------
*Freshness* (SPEC-029 §4) says whether the value may be shown as current:
the entry's class (``REALTIME`` 30 s, ``VOLATILE`` 5 min, ``STABLE`` 1 h,
``STATIC`` the whole session, i.e. never stale here) gives ``freshness_ttl``,
and :func:`gate` turns age into ``fresh``/``reinvoke``/``warn``/``exclude``.
*Retention* (``ttl``, default ``default_ttl``) says how long the blob is kept:
a stale entry is still useful for "now filter those results" with a staleness
warning, so it is not dropped the moment it goes stale.  Eviction
(:meth:`ScratchStore.evict`, also run by every ``put``) first drops unpinned
entries whose retention has expired (``now > created + ttl``), then the least
recently used unpinned entries until the blob bytes fit ``disk_budget_bytes``.
Pinned entries are never evicted, so pinned bytes may exceed the budget; an
unpinned put that cannot fit even after evicting every other unpinned entry
raises :class:`ScratchFullError` (SPEC-029 §11's ``CRP-Context-Scratch-Full``)
and writes nothing.

On-disk layout
--------------
``path/scratch.lmdb/`` is the LMDB environment, ``path/blobs/<D>/<id>.blob``
the blobs, where ``D`` is the 64 hex digits of sha256(session id) and
``id`` is ``scr_`` + 32 random hex digits (128 bits from :mod:`secrets`).
Both path parts are made here and the id is checked strictly on every call,
so no argument can name a file outside ``path/blobs``.  ``S`` below is the
32-byte sha256 of the session id and every key starts with it (or a time), so
a scratch id only resolves within its own session.  Named sub-databases:

``meta``     ``format`` -> :data:`FORMAT`; ``next_seq`` -> u64; ``usage`` ->
             four u64: entries, blob bytes, pinned entries, pinned bytes.
``entries``  S + id -> JSON record of the entry.
``order``    S + seq (u64) -> id: a session's entries in insertion order.
``lru``      access time (u64 µs) + S + id, unpinned entries only.
``expiry``   retention end (u64 µs) + S + id, unpinned entries with a ttl.

Durability
----------
``put`` writes the blob to a temporary file in its directory, fsyncs it,
``os.replace``-s it to its name and fsyncs the directory, and only then
commits the metadata (LMDB, sync on).  A crash in between leaves an orphan
blob that no call can see; :meth:`ScratchStore.check` deletes it.  Deletion
goes the other way (metadata first, then the file).  The disk budget counts
blob bytes (the raw output sizes), not the LMDB metadata.
"""
from __future__ import annotations

import errno
import functools
import hashlib
import json
import marshal
import math
import os
import re
import secrets
import struct
import tempfile
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any


from ctxrelay.errors import (
    CorruptStoreError,
    CtxRelayError,
    InvalidArgumentError,
    InvalidContentError,
    StoreError,
    StoreFullError,
)
from ctxrelay.text.summarize import DEFAULT_MAX_TOKENS, MIN_MAX_TOKENS, summarize
from ctxrelay.text.tokens import count
from ctxrelay.storage.lmdb import base
from ctxrelay.storage.lmdb.base import LmdbStore, disk_nearly_full as _disk_nearly_full
from ctxrelay.storage.validation import check_session_id as _check_session_id
from ctxrelay.types import copy_plain

__all__ = [
    "FORMAT", "FRESHNESS_CLASSES", "FRESHNESS_TTL", "GATE_ACTIONS", "STALE_POLICIES",
    "RETAIN_POLICIES", "DEFAULT_DISK_BUDGET", "DEFAULT_TTL",
    "ScratchEntry", "ScratchStats", "Evicted", "EvictionReport", "CheckReport",
    "Rendered", "Promotion", "ScratchStore", "open_scratch_store", "close_all",
    "gate", "render", "freshness_header", "provenance_hash", "check_scratch_id",
    "new_scratch_id",
    "InvalidScratchIdError", "UnsafeScratchIdError", "UnknownScratchError",
    "ScratchFullError", "ScratchBlobError", "UnknownFreshnessError", "NotPromotableError",
]

FORMAT = b"ctxrelay.storage.lmdb.scratch/1"
ENV_DIRNAME = "scratch.lmdb"
BLOB_DIRNAME = "blobs"
FRESHNESS_CLASSES: tuple[str, ...] = ("REALTIME", "VOLATILE", "STABLE", "STATIC")
FRESHNESS_TTL: dict[str, float | None] = {
    "REALTIME": 30.0, "VOLATILE": 300.0, "STABLE": 3600.0, "STATIC": None}
GATE_ACTIONS: tuple[str, ...] = ("fresh", "reinvoke", "warn", "exclude")
STALE_POLICIES: tuple[str, ...] = ("reinvoke", "warn", "exclude")
RETAIN_POLICIES: tuple[str, ...] = ("evaporate", "audit", "all")
NEVER_PROMOTED: tuple[str, ...] = ("REALTIME", "VOLATILE")
DEFAULT_DISK_BUDGET = 256 << 20
DEFAULT_TTL = 3600.0
DEFAULT_FRESHNESS = "VOLATILE"
AUTO_PIN_REFERENCES = 2
MAX_TOOL_NAME_CHARS = 128
RAW_TOKEN_LIMIT = 4 << 20        # larger text outputs get an estimated raw_tokens
_ID_PREFIX = "scr_"
_ID_RE = re.compile(r"scr_[0-9a-f]{32}")
_DIR_RE = re.compile(r"[0-9a-f]{64}")
_TMP_PREFIX = ".tmp-"
_BLOB_SUFFIX = ".blob"
_DB_NAMES = (b"meta", b"entries", b"order", b"lru", b"expiry")
_U64 = struct.Struct(">Q")
_USAGE = struct.Struct(">QQQQ")
_MAX_SECONDS = 2**63 // 1_000_000 - 1
_UNSET: Any = object()
_DICT_CACHE_ENTRIES = 512          # entries whose read dict is kept (a few kB each)


# -- errors (subclasses of ctxrelay.errors; see docs/scratch.md) ---------------

class InvalidScratchIdError(InvalidArgumentError):
    """A scratch id is not ``scr_`` followed by 32 lowercase hex digits."""

    kind = "invalid_scratch_id"


class UnsafeScratchIdError(InvalidScratchIdError):
    """A scratch id looks like a path: separators, ``..``, absolute, or NUL."""

    kind = "unsafe_scratch_id"


class UnknownScratchError(CtxRelayError, KeyError):
    """No such entry in this session (never stored, evicted, or another session's)."""

    kind = "unknown_scratch"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ScratchFullError(StoreFullError):
    """An unpinned output does not fit the disk budget even after evicting."""

    kind = "scratch_full"


class ScratchBlobError(CorruptStoreError):
    """An entry's blob file is missing or no longer matches its sha256."""

    kind = "scratch_blob"


class UnknownFreshnessError(InvalidArgumentError):
    """A freshness class other than REALTIME, VOLATILE, STABLE or STATIC."""

    kind = "unknown_freshness"


class NotPromotableError(CtxRelayError):
    """Promotion to the CKF asked for an unpinned entry or a volatile reading."""

    kind = "not_promotable"


# -- records ---------------------------------------------------------------------

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
        return _iso(self.created)

    @property
    def expires(self) -> float | None:
        """When retention ends (None: never by TTL)."""
        return None if self.ttl is None else self.created + self.ttl

    @property
    def stale_after(self) -> float | None:
        """When the value stops being fresh (None: never)."""
        return None if self.freshness_ttl is None else self.created + self.freshness_ttl

    def age(self, now: float | datetime | None = None) -> float:
        return _seconds(now) - self.created

    def to_dict(self) -> dict[str, Any]:
        """Plain types for the janus boundary (and the spec's field names too).

        ``args`` and ``structured`` are copies: the entry is frozen, and a
        caller's edit of the dict must not reach it.
        """
        return _entry_dict(vars(self), copy_plain(self.args), copy_plain(self.structured))


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


# -- validation ---------------------------------------------------------------

def new_scratch_id() -> str:
    """``scr_`` + 32 hex digits from :func:`secrets.token_hex` (128 bits)."""
    return _ID_PREFIX + secrets.token_hex(16)


def check_scratch_id(value: Any) -> str:
    """``value`` if it is a well-formed scratch id.

    @raises UnsafeScratchIdError if it contains NUL, a path separator or ``..``,
        or is absolute or ``.``.
    @raises InvalidScratchIdError for any other malformed id.
    """
    if type(value) is str and _ID_RE.fullmatch(value):
        return value                # the id's form leaves no room for a path
    if not isinstance(value, str):
        raise InvalidScratchIdError(
            f"scratch id must be a str, not {type(value).__name__}; pass the "
            "scratch_id of an entry returned by put(), list() or most_recent()")
    shown = repr(value[:80]) + ("\u2026" if len(value) > 80 else "")
    if "\x00" in value:
        raise UnsafeScratchIdError(
            f"scratch id {shown} contains a NUL character; scratch ids are 'scr_' "
            "and 32 hex digits, pass one returned by put()")
    separators = {"/", "\\", os.sep, os.altsep or "/"}
    if (any(sep in value for sep in separators) or ".." in value or value == "."
            or os.path.isabs(value) or value.startswith("~")):
        raise UnsafeScratchIdError(
            f"scratch id {shown} looks like a file path (separators, '..' or an "
            "absolute path are never part of an id), so it was refused; pass the "
            "scratch_id returned by put()")
    if not _ID_RE.fullmatch(value):
        raise InvalidScratchIdError(
            f"scratch id {shown} is not 'scr_' followed by 32 lowercase hex digits; "
            "pass the scratch_id returned by put()")
    return value


def _check_tool_name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(
            f"tool_name must be a non-empty str, not {value!r}; pass the tool's "
            "registered name, e.g. 'sql_query'")
    if len(value) > MAX_TOOL_NAME_CHARS:
        raise InvalidArgumentError(
            f"tool_name has {len(value)} characters, more than {MAX_TOOL_NAME_CHARS}; "
            "use the tool's short registered name")
    for index, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            raise InvalidArgumentError(
                f"tool_name {value[:40]!r} has a control, format or unassigned "
                f"character U+{ord(char):04X} at index {index} (it is shown on the "
                "summary's header line); remove it")
    return value


def _canonical_args(args: Any) -> tuple[dict[str, Any], bytes]:
    """A plain copy of ``args`` and its canonical JSON (sorted keys, no spaces)."""
    if not isinstance(args, Mapping):
        raise InvalidArgumentError(
            f"args must be a dict of the tool call's arguments, not "
            f"{type(args).__name__}; pass {{}} for a call without arguments")
    try:
        text = json.dumps(dict(args), ensure_ascii=False, sort_keys=True,
                          separators=(",", ":"), allow_nan=False)
        data = text.encode("utf-8")
    except RecursionError:
        raise InvalidArgumentError("args are nested too deeply; flatten them") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"args are not JSON-serialisable ({exc}); use str keys and only dicts, "
            "lists, str, int, finite float, bool and None") from None
    return json.loads(text), data


def _raw_bytes(raw: Any) -> tuple[bytes, str]:
    if isinstance(raw, str):
        try:
            return raw.encode("utf-8"), "str"
        except UnicodeEncodeError as exc:
            raise InvalidContentError(
                f"tool output holds a lone surrogate U+{ord(raw[exc.start]):04X} at "
                f"index {exc.start}, which UTF-8 cannot store; pass the output's raw "
                "bytes instead of a str") from None
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return bytes(raw), "bytes"
    raise InvalidContentError(
        f"tool output must be str or bytes, not {type(raw).__name__}; serialise it "
        "first (e.g. json.dumps for a structured result)")


def _check_freshness(value: Any) -> str:
    if not isinstance(value, str) or value.strip().upper() not in FRESHNESS_CLASSES:
        raise UnknownFreshnessError(
            f"freshness {value!r} is not a volatility class; pass one of "
            f"{', '.join(FRESHNESS_CLASSES)} (CRP-SPEC-029 §4.1)")
    return value.strip().upper()


def _check_duration(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 <= value <= _MAX_SECONDS:
        raise InvalidArgumentError(
            f"{what} must be None (unlimited) or a number of seconds >= 0, not "
            f"{value!r}")
    return float(value)


def _check_policy(value: Any, what: str = "policy") -> str | None:
    if value is not None and value not in STALE_POLICIES:
        raise InvalidArgumentError(
            f"{what} {value!r} is not one of {', '.join(STALE_POLICIES)} "
            "(CRP-Safety-Policy tool-output-stale) or None for the class default")
    return value


def _seconds(now: Any) -> float:
    """Unix seconds of ``now`` (None: the clock; naive datetimes are UTC)."""
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        moment = now if now.tzinfo is not None else now.replace(tzinfo=timezone.utc)
        value = moment.timestamp()
    elif isinstance(now, (int, float)) and not isinstance(now, bool):
        value = float(now)
    else:
        raise InvalidArgumentError(
            f"now must be None, Unix seconds or a datetime, not {type(now).__name__}")
    if not math.isfinite(value) or not 0 <= value <= _MAX_SECONDS:
        raise InvalidArgumentError(
            f"now {now!r} is out of range; pass Unix seconds >= 0 (e.g. time.time())")
    return value


def _us(seconds: float) -> int:
    return min(max(int(round(seconds * 1_000_000)), 0), 2**64 - 1)


@functools.lru_cache(maxsize=1024)
def _iso(seconds: float) -> str:
    # Cached: an entry's creation time is formatted on every read of it.
    moment = datetime.fromtimestamp(seconds, timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def provenance_hash(tool_name: str, args: Mapping[str, Any], raw: str | bytes) -> str:
    """sha256 hex of ``ctxrelay.storage.lmdb.scratch.provenance/1``, tool, args and raw output.

    The hashed bytes are ``b"ctxrelay.storage.lmdb.scratch.provenance/1\\n" + tool name
    (UTF-8) + b"\\n" + canonical JSON of args (sorted keys, no spaces, UTF-8)
    + b"\\n" + raw output (a str as UTF-8)``; neither the tool name nor the
    canonical JSON can hold a raw newline, so the framing is unambiguous.
    """
    tool_name = _check_tool_name(tool_name)
    _, args_bytes = _canonical_args(args)
    data, _ = _raw_bytes(raw)
    return _provenance(tool_name, args_bytes, data)


def _provenance(tool_name: str, args_bytes: bytes, data: bytes) -> str:
    digest = hashlib.sha256(b"ctxrelay.storage.lmdb.scratch.provenance/1\n")
    digest.update(tool_name.encode("utf-8") + b"\n" + args_bytes + b"\n")
    digest.update(data)
    return digest.hexdigest()


# -- the freshness gate (SPEC-029 §4, §8) ----------------------------------------

def gate(entry: ScratchEntry, now: float | datetime | None = None, *,
         policy: str | None = None, can_reinvoke: bool = True) -> str:
    """``fresh``, or what to do with a stale entry: never inject it as current.

    Fresh while ``age <= freshness_ttl`` (STATIC never goes stale).  A stale
    entry gets ``policy`` (the Safety Policy's ``tool-output-stale``) if given,
    else the class default: ``reinvoke`` for REALTIME, ``warn`` otherwise.
    ``reinvoke`` becomes ``warn`` when the dispatch strategy cannot repeat the
    call (``can_reinvoke=False``).  A pinned entry is gated like any other.
    """
    if not isinstance(entry, ScratchEntry):
        raise InvalidArgumentError(
            f"gate() takes a ScratchEntry, not {type(entry).__name__}")
    policy = _check_policy(policy)
    age = _seconds(now) - entry.created
    if entry.freshness_ttl is None or age <= entry.freshness_ttl:
        return "fresh"
    action = policy or ("reinvoke" if entry.freshness == "REALTIME" else "warn")
    if action == "reinvoke" and not can_reinvoke:
        action = "warn"
    return action


def freshness_header(entry: ScratchEntry, now: float | datetime | None = None) -> str:
    """The ``CRP-Context-Scratch-Freshness`` value: ``fresh`` or
    ``stale; age=240s; class=VOLATILE``."""
    age = _seconds(now) - entry.created
    if entry.freshness_ttl is None or age <= entry.freshness_ttl:
        return "fresh"
    return f"stale; age={int(age)}s; class={entry.freshness}"


def render(entry: ScratchEntry, now: float | datetime | None = None, *,
           policy: str | None = None, can_reinvoke: bool = True) -> Rendered:
    """The gate's action plus the text to inject: the summary when fresh, the
    summary under a ``NOTE: This result is from … ago and may be outdated:``
    line on ``warn``, nothing on ``reinvoke``/``exclude``."""
    moment = _seconds(now)
    action = gate(entry, moment, policy=policy, can_reinvoke=can_reinvoke)
    age = moment - entry.created
    if action == "fresh":
        text: str | None = entry.summary
    elif action == "warn":
        text = (f"NOTE: This result is from {_age_words(age)} ago and may be outdated "
                f"(class {entry.freshness}, fresh for {_age_words(entry.freshness_ttl or 0)}):"
                f"\n{entry.summary}")
    else:
        text = None
    return Rendered(action=action, text=text, header=freshness_header(entry, moment), age=age)


def _age_words(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        value, unit = round(seconds), "second"
    elif seconds < 90 * 60:
        value, unit = round(seconds / 60), "minute"
    elif seconds < 36 * 3600:
        value, unit = round(seconds / 3600), "hour"
    else:
        value, unit = round(seconds / 86400), "day"
    return f"{value} {unit}{'' if value == 1 else 's'}"


# -- one shared store per path per process -----------------------------------------

def open_scratch_store(path: str | os.PathLike[str], **kw: Any) -> "ScratchStore":
    """The one shared :class:`ScratchStore` of ``path`` in this process.

    Keyword arguments apply when the store is first opened and are ignored
    afterwards (the open store keeps its settings).
    """
    return ScratchStore.open(path, **kw)


def close_all() -> None:
    """Close every scratch store opened in this process."""
    base.close_all(ScratchStore)


# -- the store -----------------------------------------------------------------

class ScratchStore(LmdbStore):
    """The scratch buffer of every session, in one directory (see the module doc).

    Options: ``disk_budget_bytes`` (blob bytes kept, default 256 MiB),
    ``default_ttl`` (retention seconds, default 3600, None: no TTL eviction),
    ``summary_max_tokens`` (default 256) and ``model`` (tokenizer for it,
    default cl100k_base), ``tool_freshness`` (tool name -> class, the tool
    registry; unlisted tools are VOLATILE), ``stale_policy`` (default
    ``tool-output-stale`` for :meth:`gate`/:meth:`render`), ``retain``
    (``evaporate``; ``audit`` pins every output; ``all`` never evicts),
    ``auto_pin_after`` (distinct referencing turns that pin an entry, default
    2, None: never) and ``map_size`` (initial LMDB map; it grows by itself).
    """

    KIND = "scratch store"
    FORMAT = FORMAT
    DB_NAMES = _DB_NAMES
    ENV_DIRNAME = ENV_DIRNAME
    OPEN_HINT = "ctxrelay.storage.lmdb.scratch.open_scratch_store(path)"
    FULL_HINT = "evict or delete entries"
    FORMAT_HINT = "point the scratch store at its own directory, or move this one away"

    def __init__(self, path: str | os.PathLike[str], *,
                 disk_budget_bytes: int = DEFAULT_DISK_BUDGET,
                 default_ttl: float | None = DEFAULT_TTL,
                 summary_max_tokens: int = DEFAULT_MAX_TOKENS,
                 model: str = "cl100k_base",
                 tool_freshness: Mapping[str, str] | None = None,
                 stale_policy: str | None = None,
                 retain: str = "evaporate",
                 auto_pin_after: int | None = AUTO_PIN_REFERENCES,
                 map_size: int = 1 << 28) -> None:
        if isinstance(disk_budget_bytes, bool) or not isinstance(disk_budget_bytes, int) \
                or disk_budget_bytes < 1:
            raise InvalidArgumentError(
                f"disk_budget_bytes must be an int >= 1, not {disk_budget_bytes!r}; "
                "pass the number of blob bytes the store may keep")
        if isinstance(summary_max_tokens, bool) or not isinstance(summary_max_tokens, int) \
                or summary_max_tokens < MIN_MAX_TOKENS:
            raise InvalidArgumentError(
                f"summary_max_tokens must be an int >= {MIN_MAX_TOKENS}, not "
                f"{summary_max_tokens!r}")
        if not isinstance(model, str) or not model.strip():
            raise InvalidArgumentError(f"model must be a tokenizer name, not {model!r}")
        if retain not in RETAIN_POLICIES:
            raise InvalidArgumentError(
                f"retain {retain!r} is not one of {', '.join(RETAIN_POLICIES)} "
                "(CRP-Safety-Policy tool-output-retain)")
        if auto_pin_after is not None and (isinstance(auto_pin_after, bool) or not
                                           isinstance(auto_pin_after, int)
                                           or auto_pin_after < 1):
            raise InvalidArgumentError(
                f"auto_pin_after must be None or an int >= 1, not {auto_pin_after!r}")
        if isinstance(map_size, bool) or not isinstance(map_size, int) or map_size < 1 << 16:
            raise InvalidArgumentError(f"map_size must be an int >= 65536, not {map_size!r}")
        self._budget = disk_budget_bytes
        self._default_ttl = _check_duration(default_ttl, "default_ttl")
        self._summary_max_tokens = summary_max_tokens
        self._model = model
        self._tool_freshness = {
            _check_tool_name(name): _check_freshness(klass)
            for name, klass in (tool_freshness or {}).items()}
        self._stale_policy = _check_policy(stale_policy, "stale_policy")
        self._retain = retain
        self._auto_pin_after = auto_pin_after
        self._blobs = os.path.join(os.fspath(path), BLOB_DIRNAME)
        # LMDB key -> (stored record bytes, marshal bytes of its entry_dict()).
        self._dicts: dict[bytes, tuple[bytes, bytes]] = {}
        self._dicts_lock = threading.Lock()
        super().__init__(path, map_size=map_size)
        try:
            os.makedirs(self._blobs, exist_ok=True)
        except OSError as exc:
            self.close()
            raise StoreError(
                f"cannot create the blob directory {self._blobs} ({exc.strerror}); "
                "check the store directory's permissions") from None
        dbs = self.dbs
        self._meta, self._entries = dbs[b"meta"], dbs[b"entries"]
        self._order, self._lru, self._expiry = dbs[b"order"], dbs[b"lru"], dbs[b"expiry"]

    # -- opening and closing -------------------------------------------

    def _initialise(self, txn: Any, dbs: dict[bytes, Any]) -> None:
        txn.put(b"next_seq", _U64.pack(1), db=dbs[b"meta"])
        txn.put(b"usage", _USAGE.pack(0, 0, 0, 0), db=dbs[b"meta"])

    def _on_close(self) -> None:
        self._dicts.clear()

    @property
    def disk_budget_bytes(self) -> int:
        return self._budget

    def location(self) -> str:
        """Where the blobs live (SPEC-038 §4 ``scratch.location()``)."""
        return os.path.abspath(self._blobs)

    # The transactions of the base class, under the names this module uses.
    def _read(self, fn: Callable[[Any], Any]) -> Any:
        return self.read(fn)

    def _write(self, fn: Callable[[Any], Any]) -> Any:
        return self.write(fn)

    # -- keys, records, usage ---------------------------------------------

    @staticmethod
    def _session_key(session_id: str) -> bytes:
        return _session_digest(session_id)

    @staticmethod
    def _entry_key(session_id: str, scratch_id: str) -> bytes:
        """The entries key of a checked session id and scratch id."""
        if not isinstance(session_id, str):
            _check_session_id(session_id)              # raises, saying what to pass
        return _session_digest(session_id) + check_scratch_id(scratch_id).encode("ascii")

    def _blob_path(self, session_key: bytes, scratch_id: str) -> str:
        # Both parts are made here (hex of a hash, a checked id); check again
        # anyway, so no later change can turn an argument into a path.
        directory = session_key.hex()
        if not (_DIR_RE.fullmatch(directory) and _ID_RE.fullmatch(scratch_id)):
            raise UnsafeScratchIdError(
                f"refusing to build a blob path from {directory!r} and {scratch_id!r}")
        return os.path.join(self._blobs, directory, scratch_id + _BLOB_SUFFIX)

    def _usage(self, txn: Any) -> list[int]:
        raw = txn.get(b"usage", db=self._meta)
        if raw is None or len(raw) != _USAGE.size:
            raise CorruptStoreError(
                f"scratch store {self._path} has no usage record; move it away and "
                "open a new store")
        return list(_USAGE.unpack(raw))

    def _set_usage(self, txn: Any, usage: list[int]) -> None:
        txn.put(b"usage", _USAGE.pack(*(max(v, 0) for v in usage)), db=self._meta)

    def _load(self, txn: Any, key: bytes) -> dict[str, Any] | None:
        raw = txn.get(key, db=self._entries)
        return None if raw is None else json.loads(raw)

    def _require(self, txn: Any, session_id: str, scratch_id: str
                 ) -> tuple[bytes, dict[str, Any]]:
        key = self._session_key(session_id) + scratch_id.encode("ascii")
        record = self._load(txn, key)
        if record is None:
            raise _unknown(session_id, scratch_id)
        return key, record

    def _store(self, txn: Any, key: bytes, record: dict[str, Any]) -> None:
        txn.put(key, json.dumps(record, ensure_ascii=False, separators=(",", ":"))
                .encode("utf-8"), db=self._entries)

    @staticmethod
    def _lru_key(key: bytes, record: dict[str, Any]) -> bytes:
        return _U64.pack(record["access_us"]) + key

    @staticmethod
    def _expiry_key(key: bytes, record: dict[str, Any]) -> bytes | None:
        if record["ttl"] is None:
            return None
        return _U64.pack(_us(record["created"] + record["ttl"])) + key

    def _index(self, txn: Any, key: bytes, record: dict[str, Any], *, add: bool) -> None:
        """Put (or take) an unpinned entry in (out of) the lru and expiry indexes."""
        for db, index_key in ((self._lru, self._lru_key(key, record)),
                              (self._expiry, self._expiry_key(key, record))):
            if index_key is None:
                continue
            if add:
                txn.put(index_key, b"", db=db)
            else:
                txn.delete(index_key, db=db)

    # -- put ------------------------------------------------------------------

    def put(self, session_id: str, tool_name: str, args: Mapping[str, Any],
            raw: str | bytes, *, freshness: str | None = None,
            freshness_ttl: float | None = _UNSET, ttl: float | None = _UNSET,
            pinned: bool = False, now: float | datetime | None = None) -> ScratchEntry:
        """Store one tool output; return its entry (summary included).

        ``freshness`` is the volatility class (default: the store's
        ``tool_freshness`` for the tool, else VOLATILE); ``freshness_ttl`` and
        ``ttl`` override the class's freshness and the store's retention.  The
        blob is durable before the entry becomes visible.  Eviction runs in
        the same transaction, so when ``put`` returns the blob bytes are
        within the budget (or only pinned bytes exceed it).
        @raises ScratchFullError if an unpinned output cannot fit the budget.
        """
        session_id = _check_session_id(session_id)
        tool_name = _check_tool_name(tool_name)
        plain_args, args_bytes = _canonical_args(args)
        data, raw_type = _raw_bytes(raw)
        klass = (_check_freshness(freshness) if freshness is not None
                 else self._tool_freshness.get(tool_name, DEFAULT_FRESHNESS))
        fresh_for = (FRESHNESS_TTL[klass] if freshness_ttl is _UNSET
                     else _check_duration(freshness_ttl, "freshness_ttl"))
        keep_for = self._default_ttl if ttl is _UNSET else _check_duration(ttl, "ttl")
        if not isinstance(pinned, bool):
            raise InvalidArgumentError(f"pinned must be True or False, not {pinned!r}")
        pin_reason = "user" if pinned else ("audit" if self._retain == "audit" else None)
        moment = _seconds(now)
        if pin_reason is None and self._retain != "all":
            self._read(lambda txn: self._check_room(self._usage(txn), len(data)))

        scratch_id = new_scratch_id()
        summary = summarize(raw, tool_name=tool_name, scratch_id=scratch_id,
                            max_tokens=self._summary_max_tokens, model=self._model)
        raw_tokens, raw_exact = self._raw_tokens(raw, data, summary.kind)
        session_key = self._session_key(session_id)
        record = {
            "scratch_id": scratch_id, "session_id": session_id, "tool_name": tool_name,
            "args": plain_args, "size": len(data),
            "sha256": _provenance(tool_name, args_bytes, data),
            "content_sha256": hashlib.sha256(data).hexdigest(), "raw_type": raw_type,
            "created": moment, "freshness": klass, "freshness_ttl": fresh_for,
            "ttl": keep_for, "pinned": pin_reason is not None, "pin_reason": pin_reason,
            "summary": summary.text, "summary_tokens": summary.tokens,
            "summary_exact": summary.exact, "kind": summary.kind,
            "structured": summary.structured, "raw_tokens": raw_tokens,
            "raw_tokens_exact": raw_exact, "last_access": moment,
            "access_us": _us(moment), "referenced_by": [], "seq": 0}
        path = self._write_blob(session_key, scratch_id, data)
        try:
            record, victims = self._write(
                lambda txn: self._insert_txn(txn, session_key, record))
        except BaseException:
            _unlink(path)
            raise
        self._remove_blobs(victims)
        return _entry(record)

    def _check_room(self, usage: list[int], size: int) -> None:
        pinned_bytes = usage[3]
        if size + pinned_bytes <= self._budget:
            return
        if size > self._budget:
            raise ScratchFullError(
                f"the tool output has {size} bytes, more than the whole scratch disk "
                f"budget of {self._budget} bytes; nothing was stored; raise "
                "disk_budget_bytes, pin it (pinned=True) to keep it over budget, or "
                "have the tool return less")
        raise ScratchFullError(
            f"the tool output has {size} bytes but only {self._budget - pinned_bytes} "
            f"of the {self._budget}-byte scratch budget are not pinned "
            "(CRP-Context-Scratch-Full); nothing was stored; unpin entries or raise "
            "disk_budget_bytes")

    def _raw_tokens(self, raw: str | bytes, data: bytes, kind: str) -> tuple[int | None, bool]:
        if kind == "binary":
            return None, False
        if len(data) > RAW_TOKEN_LIMIT:
            return -(-len(data) // 4), False
        text = raw if isinstance(raw, str) else data.decode("utf-8")
        counted = count(text, self._model)
        return counted.n, counted.exact

    def _insert_txn(self, txn: Any, session_key: bytes, record: dict[str, Any]
                    ) -> tuple[dict[str, Any], list[Evicted]]:
        usage = self._usage(txn)
        if not record["pinned"] and self._retain != "all":
            self._check_room(usage, record["size"])
        raw_seq = txn.get(b"next_seq", db=self._meta)
        seq = _U64.unpack(raw_seq)[0] if raw_seq is not None else 1
        txn.put(b"next_seq", _U64.pack(seq + 1), db=self._meta)
        record = {**record, "seq": seq}
        key = session_key + record["scratch_id"].encode("ascii")
        if txn.get(key, db=self._entries) is not None:
            raise CorruptStoreError(
                f"scratch id {record['scratch_id']} is already taken; the random id "
                "generator repeated itself, which should not happen: retry the put")
        self._store(txn, key, record)
        txn.put(session_key + _U64.pack(seq), record["scratch_id"].encode("ascii"),
                db=self._order)
        usage[0] += 1
        usage[1] += record["size"]
        if record["pinned"]:
            usage[2] += 1
            usage[3] += record["size"]
        else:
            self._index(txn, key, record, add=True)
        self._set_usage(txn, usage)
        victims = ([] if self._retain == "all"
                   else self._evict_txn(txn, record["created"], protect=key))
        return record, victims

    def _write_blob(self, session_key: bytes, scratch_id: str, data: bytes) -> str:
        final = self._blob_path(session_key, scratch_id)
        directory = os.path.dirname(final)
        try:
            for attempt in range(3):
                created = not os.path.isdir(directory)
                os.makedirs(directory, exist_ok=True)
                if created:
                    _fsync_dir(self._blobs)
                try:
                    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX + scratch_id + "-",
                                               dir=directory)
                    break
                except FileNotFoundError:   # check() removed the empty directory
                    if attempt == 2:
                        raise
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, final)
            except BaseException:
                _unlink(tmp)
                raise
            _fsync_dir(directory)
        except OSError as exc:
            if exc.errno == errno.ENOSPC or _disk_nearly_full(self._blobs):
                raise StoreFullError(
                    f"the disk holding {self._blobs} is full ({exc.strerror}); nothing "
                    "was stored; free disk space or lower disk_budget_bytes") from None
            raise StoreError(
                f"cannot write a blob in {directory} ({exc.strerror}); check the "
                "store directory's permissions") from None
        return final

    def _remove_blobs(self, victims: list[Evicted]) -> None:
        for victim in victims:
            # A failure leaves an orphan blob, which check() removes.
            _unlink(self._blob_path(self._session_key(victim.session_id),
                                    victim.scratch_id))

    # -- eviction ----------------------------------------------------------

    def evict(self, now: float | datetime | None = None) -> EvictionReport:
        """Drop expired unpinned entries, then the least recently used unpinned
        ones until the blob bytes fit the budget.  Never touches pinned
        entries; with ``retain='all'`` nothing is evicted."""
        moment = _seconds(now)

        def run(txn: Any) -> tuple[list[Evicted], list[int]]:
            victims = [] if self._retain == "all" else self._evict_txn(txn, moment)
            return victims, self._usage(txn)
        victims, usage = self._write(run)
        self._remove_blobs(victims)
        return EvictionReport(evicted=tuple(victims),
                              freed_bytes=sum(v.size for v in victims),
                              bytes=usage[1], pinned_bytes=usage[3],
                              over_budget=usage[1] > self._budget)

    def _evict_txn(self, txn: Any, now: float, *, protect: bytes | None = None
                   ) -> list[Evicted]:
        victims: list[Evicted] = []
        limit = _us(now)
        expired = []
        for index_key in txn.cursor(db=self._expiry).iternext(values=False):
            if _U64.unpack(index_key[:8])[0] >= limit:
                break
            if index_key[8:] != protect:
                expired.append(index_key[8:])
        for key in expired:
            victims.append(self._delete_txn(txn, key, "ttl"))
        usage = self._usage(txn)
        excess = usage[1] - self._budget
        chosen = []
        if excess > 0:
            for index_key in txn.cursor(db=self._lru).iternext(values=False):
                if excess <= 0:
                    break
                key = index_key[8:]
                if key == protect:
                    continue
                record = self._load(txn, key)
                if record is None:
                    raise CorruptStoreError(
                        f"the LRU index of {self._path} names an entry that is not "
                        "stored; move the store away and open a new one")
                chosen.append(key)
                excess -= record["size"]
        for key in chosen:
            victims.append(self._delete_txn(txn, key, "lru"))
        return victims

    def _delete_txn(self, txn: Any, key: bytes, reason: str) -> Evicted:
        record = self._load(txn, key)
        if record is None:
            raise CorruptStoreError(
                f"an index of {self._path} names an entry that is not stored; move "
                "the store away and open a new one")
        txn.delete(key, db=self._entries)
        txn.delete(key[:32] + _U64.pack(record["seq"]), db=self._order)
        usage = self._usage(txn)
        usage[0] -= 1
        usage[1] -= record["size"]
        if record["pinned"]:
            usage[2] -= 1
            usage[3] -= record["size"]
        else:
            self._index(txn, key, record, add=False)
        self._set_usage(txn, usage)
        return Evicted(session_id=record["session_id"], scratch_id=record["scratch_id"],
                       reason=reason, size=record["size"])

    # -- reading ------------------------------------------------------------

    def get(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None, touch: bool = True) -> ScratchEntry:
        """The entry ``scratch_id`` of ``session_id``; counts as a use for LRU
        unless ``touch=False``.
        @raises UnknownScratchError if the session holds no such entry.
        """
        session_id = _check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        if not touch:
            return self._read(lambda txn: _entry(self._require(txn, session_id,
                                                               scratch_id)[1]))
        moment = _seconds(now)

        def run(txn: Any) -> ScratchEntry:
            key, record = self._require(txn, session_id, scratch_id)
            return _entry(self._touch_txn(txn, key, record, moment))
        return self._write(run)

    def entry_dict(self, session_id: str, scratch_id: str) -> dict[str, Any]:
        """``get(session_id, scratch_id, touch=False).to_dict()``, made for the
        hot read path (a summary read through janus); no use is counted.

        Each stored version of an entry is turned into its dict once and kept
        as marshal bytes; every call returns a new deep copy of it
        (``marshal.loads``, a few times cheaper than decoding the JSON
        record), so no caller can change what the next call reads.  The copy
        is used only while the stored record is byte for byte the one it was
        made from, so a pin, touch, reference or another process's write is
        seen by the very next read.
        @raises UnknownScratchError if the session holds no such entry.
        """
        key = self._entry_key(session_id, scratch_id)
        stored = self._read(lambda txn: txn.get(key, db=self._entries))
        if stored is None:
            raise _unknown(session_id, scratch_id)
        cached = self._dicts.get(key)
        if cached is not None and cached[0] == stored:
            return marshal.loads(cached[1])
        record = json.loads(stored)
        # Just decoded, so every object in it is new: the caller may own them.
        out = _entry_dict(record, record["args"], record["structured"])
        frozen = marshal.dumps(out)
        with self._dicts_lock:
            if len(self._dicts) >= _DICT_CACHE_ENTRIES and key not in self._dicts:
                del self._dicts[next(iter(self._dicts))]
            self._dicts[key] = (stored, frozen)
        return out

    def _touch_txn(self, txn: Any, key: bytes, record: dict[str, Any],
                   moment: float) -> dict[str, Any]:
        access = _us(moment)
        if access <= record["access_us"]:
            return record
        if not record["pinned"]:
            txn.delete(self._lru_key(key, record), db=self._lru)
        record = {**record, "access_us": access, "last_access": moment}
        if not record["pinned"]:
            txn.put(self._lru_key(key, record), b"", db=self._lru)
        self._store(txn, key, record)
        return record

    def raw(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None) -> str | bytes:
        """The full tool output, read from its blob (``str`` if it was put as str).
        @raises ScratchBlobError if the blob is missing or altered.
        """
        entry = self.get(session_id, scratch_id, now=now)
        path = self._blob_path(self._session_key(entry.session_id), entry.scratch_id)
        try:
            with open(path, "rb") as blob:
                data = blob.read()
        except FileNotFoundError:
            self.get(session_id, scratch_id, touch=False)   # evicted meanwhile?
            raise ScratchBlobError(
                f"the blob of scratch entry {scratch_id} ({path}) is missing; run "
                "check() to drop the entry, and re-run the tool for its output") from None
        except OSError as exc:
            raise ScratchBlobError(
                f"cannot read the blob of scratch entry {scratch_id} ({exc.strerror}); "
                "check the store directory's permissions") from None
        if hashlib.sha256(data).hexdigest() != entry.content_sha256:
            raise ScratchBlobError(
                f"the blob of scratch entry {scratch_id} ({path}) does not match its "
                "sha256: it was changed on disk; delete the entry and re-run the tool")
        return data.decode("utf-8") if entry.raw_type == "str" else data

    def list(self, session_id: str) -> list[ScratchEntry]:
        """The session's entries in the order they were put (empty if none)."""
        session_id = _check_session_id(session_id)
        session_key = self._session_key(session_id)

        def read(txn: Any) -> list[ScratchEntry]:
            out = []
            cursor = txn.cursor(db=self._order)
            if not cursor.set_range(session_key):
                return out
            for order_key, scratch_id in cursor:
                if not order_key.startswith(session_key):
                    break
                record = self._load(txn, session_key + scratch_id)
                if record is None:
                    raise CorruptStoreError(
                        f"the order index of {self._path} names an entry that is not "
                        "stored; move the store away and open a new one")
                out.append(_entry(record))
            return out
        return self._read(read)

    def latest(self, session_id: str, n: int) -> list[ScratchEntry]:
        """The session's ``n`` newest entries, oldest first: a backwards read of
        the order index (bounded work, whatever the number of entries)."""
        session_id = _check_session_id(session_id)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgumentError(f"n must be an int >= 0, not {n!r}")
        session_key = self._session_key(session_id)

        def read(txn: Any) -> list[ScratchEntry]:
            out: list[ScratchEntry] = []
            cursor = txn.cursor(db=self._order)
            if cursor.set_range(session_key + b"\xff" * 8):
                positioned = cursor.prev()
            else:
                positioned = cursor.last()
            while positioned and len(out) < n and cursor.key().startswith(session_key):
                record = self._load(txn, session_key + cursor.value())
                if record is not None:
                    out.append(_entry(record))
                positioned = cursor.prev()
            out.reverse()
            return out
        return self._read(read)

    def most_recent(self, session_id: str, tool_type: str | None = None, *,
                    kind: str | None = None) -> ScratchEntry | None:
        """The newest entry of the session whose ``tool_name`` is ``tool_type``
        and whose summary ``kind`` is ``kind`` (either filter optional), or None.

        Reference resolution (SPEC-029 §7): "the query result" is
        ``most_recent(s, kind="table")``, "the error" ``kind="error"``.
        """
        session_id = _check_session_id(session_id)
        if tool_type is not None and not isinstance(tool_type, str):
            raise InvalidArgumentError(
                f"tool_type must be a tool name (str) or None, not {tool_type!r}")
        if kind is not None and not isinstance(kind, str):
            raise InvalidArgumentError(f"kind must be a summary kind (str) or None, "
                                       f"not {kind!r}")
        session_key = self._session_key(session_id)

        def read(txn: Any) -> ScratchEntry | None:
            cursor = txn.cursor(db=self._order)
            if cursor.set_range(session_key + b"\xff" * 8):
                positioned = cursor.prev()
            else:
                positioned = cursor.last()
            while positioned and cursor.key().startswith(session_key):
                record = self._load(txn, session_key + cursor.value())
                if record is not None and (tool_type is None or
                                           record["tool_name"] == tool_type) \
                        and (kind is None or record["kind"] == kind):
                    return _entry(record)
                positioned = cursor.prev()
            return None
        return self._read(read)

    # -- pinning, references, deletion -----------------------------------------

    def pin(self, session_id: str, scratch_id: str) -> ScratchEntry:
        """Keep the entry regardless of TTL and budget (SPEC-029 §5.2)."""
        return self._set_pin(session_id, scratch_id, "user")

    def unpin(self, session_id: str, scratch_id: str) -> ScratchEntry:
        """Make the entry evictable again (by the next put or evict())."""
        return self._set_pin(session_id, scratch_id, None)

    def _set_pin(self, session_id: str, scratch_id: str, reason: str | None) -> ScratchEntry:
        session_id = _check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)

        def run(txn: Any) -> ScratchEntry:
            key, record = self._require(txn, session_id, scratch_id)
            return _entry(self._pin_txn(txn, key, record, reason))
        return self._write(run)

    def _pin_txn(self, txn: Any, key: bytes, record: dict[str, Any],
                 reason: str | None) -> dict[str, Any]:
        pinned = reason is not None
        if record["pinned"] == pinned:
            return record
        usage = self._usage(txn)
        if pinned:
            self._index(txn, key, record, add=False)
            usage[2] += 1
            usage[3] += record["size"]
        else:
            self._index(txn, key, record, add=True)
            usage[2] -= 1
            usage[3] -= record["size"]
        self._set_usage(txn, usage)
        record = {**record, "pinned": pinned, "pin_reason": reason}
        self._store(txn, key, record)
        return record

    def reference(self, session_id: str, scratch_id: str, turn_id: int, *,
                  now: float | datetime | None = None) -> ScratchEntry:
        """Record that turn ``turn_id`` used the entry (a use for LRU too); the
        entry is pinned (reason ``auto``) once ``auto_pin_after`` distinct
        turns referenced it (SPEC-029 §5.3)."""
        session_id = _check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        if isinstance(turn_id, bool) or not isinstance(turn_id, int) or turn_id < 1:
            raise InvalidArgumentError(
                f"turn_id must be an int >= 1 (a transcript turn id), not {turn_id!r}")
        moment = _seconds(now)

        def run(txn: Any) -> ScratchEntry:
            key, record = self._require(txn, session_id, scratch_id)
            record = self._touch_txn(txn, key, record, moment)
            if turn_id not in record["referenced_by"]:
                record = {**record,
                          "referenced_by": sorted([*record["referenced_by"], turn_id])}
                self._store(txn, key, record)
            if (not record["pinned"] and self._auto_pin_after is not None
                    and len(record["referenced_by"]) >= self._auto_pin_after):
                record = self._pin_txn(txn, key, record, "auto")
            return _entry(record)
        return self._write(run)

    def delete(self, session_id: str, scratch_id: str) -> None:
        """Remove the entry and its blob, pinned or not."""
        session_id = _check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)

        def run(txn: Any) -> Evicted:
            key, _ = self._require(txn, session_id, scratch_id)
            return self._delete_txn(txn, key, "deleted")
        self._remove_blobs([self._write(run)])

    # -- freshness and promotion -------------------------------------------------

    def gate(self, entry: ScratchEntry, now: float | datetime | None = None, *,
             policy: str | None = None, can_reinvoke: bool = True) -> str:
        """:func:`gate` with the store's ``stale_policy`` as the default policy."""
        return gate(entry, now, policy=policy or self._stale_policy,
                    can_reinvoke=can_reinvoke)

    def render(self, entry: ScratchEntry, now: float | datetime | None = None, *,
               policy: str | None = None, can_reinvoke: bool = True) -> Rendered:
        """:func:`render` with the store's ``stale_policy`` as the default policy."""
        return render(entry, now, policy=policy or self._stale_policy,
                      can_reinvoke=can_reinvoke)

    def promote(self, session_id: str, scratch_id: str) -> Promotion:
        """The entry as a tool-derived fact for the CKF (SPEC-029 §5.4).

        Only pinned entries of class STABLE or STATIC qualify: volatile
        readings have no durable truth value.  Nothing is written here; the
        caller hands the result to the CKF with its provenance hash.
        @raises NotPromotableError otherwise.
        """
        entry = self.get(session_id, scratch_id, touch=False)
        if not entry.pinned:
            raise NotPromotableError(
                f"scratch entry {scratch_id} is not pinned; only results the user "
                "chose to keep are promoted: pin() it first")
        if entry.freshness in NEVER_PROMOTED:
            raise NotPromotableError(
                f"scratch entry {scratch_id} is a {entry.freshness} reading; volatile "
                "readings are never promoted to the CKF (CRP-SPEC-029 §5.4); store a "
                "durable result with freshness='STABLE' or 'STATIC'")
        return Promotion(scratch_id=entry.scratch_id, session_id=entry.session_id,
                         tool_name=entry.tool_name, args=entry.args,
                         provenance_hash=entry.sha256, created=entry.created,
                         kind=entry.kind, summary=entry.summary,
                         structured=entry.structured, referenced_by=entry.referenced_by)

    # -- stats and check ---------------------------------------------------------

    def stats(self, session_id: str | None = None) -> ScratchStats:
        """Totals over the store, or over one session."""
        prefix = None if session_id is None else self._session_key(
            _check_session_id(session_id))

        def read(txn: Any) -> ScratchStats:
            entries = pinned = size = pinned_size = raw_tokens = summary_tokens = 0
            sessions: set[bytes] = set()
            by_kind: dict[str, int] = {}
            cursor = txn.cursor(db=self._entries)
            found = cursor.set_range(prefix) if prefix is not None else cursor.first()
            while found:
                key = cursor.key()
                if prefix is not None and not key.startswith(prefix):
                    break
                record = json.loads(cursor.value())
                entries += 1
                size += record["size"]
                sessions.add(key[:32])
                by_kind[record["kind"]] = by_kind.get(record["kind"], 0) + 1
                if record["pinned"]:
                    pinned += 1
                    pinned_size += record["size"]
                if record["raw_tokens"] is not None:
                    raw_tokens += record["raw_tokens"]
                    summary_tokens += record["summary_tokens"]
                found = cursor.next()
            return ScratchStats(entries=entries, pinned=pinned, bytes=size,
                                pinned_bytes=pinned_size, disk_budget_bytes=self._budget,
                                over_budget=size > self._budget, sessions=len(sessions),
                                by_kind=dict(sorted(by_kind.items())),
                                raw_tokens=raw_tokens, summary_tokens=summary_tokens)
        return self._read(read)

    def check(self, *, grace_seconds: float = 60.0, verify: bool = False) -> CheckReport:
        """Reconcile blobs and metadata after a crash.

        Deletes temporary files and blobs that no entry names (a crash between
        blob and metadata) once their mtime is ``grace_seconds`` old, so a put
        in flight in another thread or process keeps its blob; drops entries
        whose blob is gone; with ``verify=True`` also re-hashes every blob and
        reports (keeps) the ones that changed.  Files that are not ours are
        listed, never deleted.
        """
        grace = _check_duration(grace_seconds, "grace_seconds") or 0.0
        known: set[tuple[str, str]] = set()

        def scan(txn: Any) -> list[tuple[bytes, dict[str, Any]]]:
            out = []
            for key, value in txn.cursor(db=self._entries):
                record = json.loads(value)
                known.add((key[:32].hex(), record["scratch_id"]))
                out.append((key, record))
            return out
        records = self._read(scan)
        orphans, temps, unknown = [], [], []
        wall = time.time()
        for directory in sorted(_listdir(self._blobs)):
            full_dir = os.path.join(self._blobs, directory)
            if not _DIR_RE.fullmatch(directory) or not os.path.isdir(full_dir):
                unknown.append(full_dir)
                continue
            for name in sorted(_listdir(full_dir)):
                full = os.path.join(full_dir, name)
                try:
                    old = wall - os.lstat(full).st_mtime >= grace
                except FileNotFoundError:
                    continue
                scratch_id = name[: -len(_BLOB_SUFFIX)]
                if name.startswith(_TMP_PREFIX):
                    if old and _unlink(full):
                        temps.append(full)
                elif name.endswith(_BLOB_SUFFIX) and _ID_RE.fullmatch(scratch_id):
                    if (directory, scratch_id) not in known and old \
                            and not self._named(bytes.fromhex(directory) + name[:-5]
                                                .encode("ascii")) \
                            and _unlink(full):
                        orphans.append(full)
                else:
                    unknown.append(full)
            try:
                if not os.listdir(full_dir) and wall - os.stat(full_dir).st_mtime >= grace:
                    os.rmdir(full_dir)
            except OSError:
                pass
        dangling, corrupt = [], []
        for key, record in records:
            path = self._blob_path(key[:32], record["scratch_id"])
            if not os.path.exists(path):
                if self._write(lambda txn, key=key, path=path: self._drop_dangling(
                        txn, key, path)):
                    dangling.append((record["session_id"], record["scratch_id"]))
            elif verify and _file_sha256(path) != record["content_sha256"]:
                corrupt.append((record["session_id"], record["scratch_id"]))
        return CheckReport(orphan_blobs=tuple(orphans), temp_files=tuple(temps),
                           dangling=tuple(dangling), corrupt=tuple(corrupt),
                           unknown_files=tuple(unknown))

    def verify(self, *, repair: bool = False) -> tuple[str, ...]:
        """Compare the derived records (usage totals, the order, lru and expiry
        indexes) with the entries; with ``repair=True`` rewrite the ones that
        disagree from the entries, in one write transaction.

        Complements :meth:`check`, which reconciles blobs with entries: this
        one never touches a file.  Returns the problems found.
        """
        def run(txn: Any) -> tuple[str, ...]:
            usage = [0, 0, 0, 0]
            order: dict[bytes, bytes] = {}
            lru: set[bytes] = set()
            expiry: set[bytes] = set()
            for key, value in txn.cursor(db=self._entries):
                record = json.loads(value)
                usage[0] += 1
                usage[1] += record["size"]
                if record["pinned"]:
                    usage[2] += 1
                    usage[3] += record["size"]
                else:
                    lru.add(self._lru_key(key, record))
                    end = self._expiry_key(key, record)
                    if end is not None:
                        expiry.add(end)
                order[key[:32] + _U64.pack(record["seq"])] = record["scratch_id"].encode("ascii")
            raw_usage = txn.get(b"usage", db=self._meta)
            have_usage = (list(_USAGE.unpack(raw_usage))
                          if raw_usage is not None and len(raw_usage) == _USAGE.size else None)
            have_order = dict(txn.cursor(db=self._order).iternext())
            have_lru = set(txn.cursor(db=self._lru).iternext(values=False))
            have_expiry = set(txn.cursor(db=self._expiry).iternext(values=False))
            problems = []
            if have_usage != usage:
                problems.append(f"usage record is {have_usage} (entries, bytes, pinned "
                                f"entries, pinned bytes) but the entries give {usage}")
            for name, want, have in (("order", order, have_order), ("lru", lru, have_lru),
                                     ("expiry", expiry, have_expiry)):
                if want != have:
                    wrong = len(set(want) ^ set(have)) if isinstance(want, set) else \
                        len({k for k in set(want) | set(have) if want.get(k) != have.get(k)})
                    problems.append(f"the {name} index has {wrong} record(s) that disagree "
                                    "with the entries")
            if repair and problems:
                self._set_usage(txn, usage)
                for db, want, have in ((self._order, order, have_order),
                                       (self._lru, dict.fromkeys(lru, b""), have_lru),
                                       (self._expiry, dict.fromkeys(expiry, b""), have_expiry)):
                    for key in have:
                        txn.delete(key, db=db)
                    for key, value in want.items():
                        txn.put(key, value, db=db)
            return tuple(problems)
        return self._write(run) if repair else self._read(run)

    def _named(self, key: bytes) -> bool:
        """Whether an entry names this blob now (a put may have committed)."""
        return self._read(lambda txn: txn.get(key, db=self._entries) is not None)

    def _drop_dangling(self, txn: Any, key: bytes, path: str) -> bool:
        if self._load(txn, key) is None or os.path.exists(path):
            return False
        self._delete_txn(txn, key, "dangling")
        return True


# -- helpers ---------------------------------------------------------------------

def _entry(record: dict[str, Any]) -> ScratchEntry:
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


def _unknown(session_id: str, scratch_id: str) -> UnknownScratchError:
    return UnknownScratchError(
        f"session {session_id[:80]!r} has no scratch entry {scratch_id}: it was never "
        "stored in this session, or it was evicted or deleted; re-run the tool, or "
        "list(session_id) to see what is held")


def _entry_dict(record: Mapping[str, Any], args: dict[str, Any],
                structured: dict[str, Any]) -> dict[str, Any]:
    """What :meth:`ScratchEntry.to_dict` and :meth:`ScratchStore.entry_dict`
    return, from a stored record or an entry's fields (the same names)."""
    return {
        "scratch_id": record["scratch_id"], "session_id": record["session_id"],
        "tool_name": record["tool_name"], "args": args, "size": record["size"],
        "sha256": record["sha256"], "provenance_hash": record["sha256"],
        "content_sha256": record["content_sha256"], "raw_type": record["raw_type"],
        "created": record["created"], "created_at": _iso(record["created"]),
        "freshness": record["freshness"], "freshness_ttl": record["freshness_ttl"],
        "ttl": record["ttl"], "pinned": record["pinned"], "pin_reason": record["pin_reason"],
        "persistence": "PINNED" if record["pinned"] else "EPHEMERAL",
        "summary": record["summary"], "summary_tokens": record["summary_tokens"],
        "summary_exact": record["summary_exact"], "kind": record["kind"],
        "structured": structured, "raw_tokens": record["raw_tokens"],
        "raw_tokens_exact": record["raw_tokens_exact"], "last_access": record["last_access"],
        "referenced_by": list(record["referenced_by"]), "seq": record["seq"]}


@functools.lru_cache(maxsize=1024)
def _session_digest(session_id: str) -> bytes:
    # Cached: checking a session id looks at every character, and a session's
    # entries are read again and again.  Exceptions are not cached.
    return hashlib.sha256(_check_session_id(session_id).encode("utf-8")).digest()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as blob:
        for chunk in iter(lambda: blob.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
