"""What every rolling log shares: its errors, results, argument checks and the
encoding of an entry (a str, or a dict as compact JSON)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ctxrelay.errors import (
    CorruptStoreError,
    InvalidArgumentError,
    InvalidContentError,
    InvalidSessionIdError,
    StoreError,
)
from ctxrelay.storage.interfaces.rolling import Entry

__all__ = ["EntryTooLargeError", "CorruptRingError", "RingConfigMismatchError",
           "RollingLogClosedError", "RollingLogUnavailableError", "LogRecord", "RingStats", "LogStats", "session_bytes",
           "check_count", "encode", "decode", "too_large", "DEFAULT_CAPACITY_ENTRIES",
           "DEFAULT_CAPACITY_BYTES", "DEFAULT_MAX_OPEN", "MAX_SESSION_ID_BYTES",
           "MAX_CAPACITY_BYTES", "KIND_STR", "KIND_JSON"]

DEFAULT_CAPACITY_ENTRIES = 256
DEFAULT_CAPACITY_BYTES = 1 << 20
DEFAULT_MAX_OPEN = 128
MAX_SESSION_ID_BYTES = 4096
MAX_CAPACITY_BYTES = (1 << 32) - 1      # an index slot's length is a u32

KIND_STR = 0
KIND_JSON = 1


# -- errors ------------------------------------------------------------------

class EntryTooLargeError(InvalidContentError):
    """An entry's payload is larger than the whole ring (``capacity_bytes``)."""

    kind = "entry_too_large"


class CorruptRingError(CorruptStoreError):
    """A ring file is not a valid rolling log (bad magic, version, CRC or size)."""

    kind = "corrupt_ring"


class RingConfigMismatchError(InvalidArgumentError):
    """A session's ring exists with other capacities than the RollingLog's."""

    kind = "ring_config_mismatch"


class RollingLogClosedError(StoreError):
    """The RollingLog was used after :meth:`RollingLog.close`."""

    kind = "rolling_log_closed"


class RollingLogUnavailableError(StoreError):
    """A shared rolling log (Redis) cannot be reached, or is in its back-off window
    after a failure: the tail is a miss, read the transcript instead.  The failed
    call changed nothing."""

    kind = "rolling_log_unavailable"


# -- results -----------------------------------------------------------------

@dataclass(frozen=True)
class LogRecord:
    """One entry with the sequence number its append returned."""

    seq: int
    entry: Entry


@dataclass(frozen=True)
class RingStats:
    """One session's ring.  ``first_seq``/``last_seq`` are None when it is empty."""

    session_id: str
    entries: int
    bytes_used: int
    capacity_entries: int
    capacity_bytes: int
    first_seq: int | None
    last_seq: int | None
    next_seq: int
    file_bytes: int


@dataclass(frozen=True)
class LogStats:
    """Every session of a rolling log; ``file_bytes`` is the footprint on disk."""

    location: str
    sessions: int
    entries: int
    bytes_used: int
    file_bytes: int


# -- argument checks and encoding ---------------------------------------------

def session_bytes(session_id: Any) -> bytes:
    if not isinstance(session_id, str):
        raise InvalidSessionIdError(
            f"session id must be a str, not {type(session_id).__name__}; pass a string")
    if not session_id:
        raise InvalidSessionIdError("session id is empty; pass a non-empty string")
    raw = session_id.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_SESSION_ID_BYTES:
        raise InvalidSessionIdError(
            f"session id is {len(raw)} bytes in UTF-8, more than {MAX_SESSION_ID_BYTES}; "
            "use a shorter id (e.g. a UUID or a hash of the long one)")
    return raw


def check_count(n: Any, what: str, *, minimum: int = 0) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise InvalidArgumentError(f"{what} must be an int, not {type(n).__name__}")
    if n < minimum:
        raise InvalidArgumentError(f"{what} must be >= {minimum}, got {n}")
    return n


def encode(entry: Any) -> tuple[int, bytes]:
    if isinstance(entry, str):
        try:
            return KIND_STR, entry.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidContentError(
                f"entry contains a lone surrogate U+{ord(entry[exc.start]):04X} at index "
                f"{exc.start}, which UTF-8 cannot hold; remove it or pass valid text") from None
    if isinstance(entry, dict):
        try:
            text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"),
                              allow_nan=False)
            return KIND_JSON, text.encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InvalidContentError(
                f"dict entry is not JSON-serialisable ({exc}); use str keys and str, "
                "int, float (finite), bool, None, list and dict values") from None
        except UnicodeEncodeError as exc:
            raise InvalidContentError(
                f"dict entry contains a lone surrogate ({exc}); pass valid text") from None
    raise InvalidContentError(
        f"entry must be a str or a dict, not {type(entry).__name__}; "
        "serialise other values to a str or wrap them in a dict")


_JSON = json.JSONDecoder()


def decode(kind: int, payload: bytes) -> Entry:
    text = payload.decode("utf-8")
    if kind == KIND_STR:
        return text
    if kind != KIND_JSON:
        raise ValueError(f"unknown entry kind {kind}")
    value, end = _JSON.raw_decode(text)     # json.loads without its per-call overhead
    if end != len(text) or not isinstance(value, dict):
        raise ValueError("not one JSON object")
    return value


class RingBounds:
    """The ring bounds every rolling-log back end takes, checks and reports: a
    session's ring holds at most ``capacity_entries`` entries and
    ``capacity_bytes`` payload bytes."""

    def __init__(self, capacity_entries: Any, capacity_bytes: Any) -> None:
        self._cap_entries = check_count(capacity_entries, "capacity_entries", minimum=1)
        self._cap_bytes = check_count(capacity_bytes, "capacity_bytes", minimum=1)

    @property
    def capacity_entries(self) -> int:
        return self._cap_entries

    @property
    def capacity_bytes(self) -> int:
        return self._cap_bytes


def too_large(size: int, capacity: int) -> EntryTooLargeError:
    return EntryTooLargeError(
        f"entry is {size} bytes encoded, larger than the ring's capacity_bytes={capacity}; "
        "store large data in the pointer store and log a reference to it, or open the "
        "log with a larger capacity_bytes")
