"""Argument checks, ids, times and the provenance hash of the scratch buffer.

Back-end neutral: every scratch back end accepts and refuses the same inputs.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import secrets
import time
import unicodedata
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ctxrelay.errors import InvalidArgumentError, InvalidContentError
from ctxrelay.storage.common.scratch.errors import (InvalidScratchIdError, UnknownFreshnessError,
                                                  UnsafeScratchIdError)
from ctxrelay.storage.validation import MAX_ARGS_BYTES, check_json, check_session_id

FRESHNESS_CLASSES: tuple[str, ...] = ("REALTIME", "VOLATILE", "STABLE", "STATIC")
FRESHNESS_TTL: dict[str, float | None] = {
    "REALTIME": 30.0, "VOLATILE": 300.0, "STABLE": 3600.0, "STATIC": None}
GATE_ACTIONS: tuple[str, ...] = ("fresh", "reinvoke", "warn", "exclude")
STALE_POLICIES: tuple[str, ...] = ("reinvoke", "warn", "exclude")
RETAIN_POLICIES: tuple[str, ...] = ("evaporate", "audit", "all")
NEVER_PROMOTED: tuple[str, ...] = ("REALTIME", "VOLATILE")
MAX_TOOL_NAME_CHARS = 128
ID_PREFIX = "scr_"
ID_RE = re.compile(r"scr_[0-9a-f]{32}")
MAX_SECONDS = 2**63 // 1_000_000 - 1


def new_scratch_id() -> str:
    """``scr_`` + 32 hex digits from :func:`secrets.token_hex` (128 bits)."""
    return ID_PREFIX + secrets.token_hex(16)


def check_scratch_id(value: Any) -> str:
    """``value`` if it is a well-formed scratch id.

    @raises UnsafeScratchIdError if it contains NUL, a path separator or ``..``,
        or is absolute or ``.``.
    @raises InvalidScratchIdError for any other malformed id.
    """
    if type(value) is str and ID_RE.fullmatch(value):
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
    if not ID_RE.fullmatch(value):
        raise InvalidScratchIdError(
            f"scratch id {shown} is not 'scr_' followed by 32 lowercase hex digits; "
            "pass the scratch_id returned by put()")
    return value


def check_tool_name(value: Any) -> str:
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


def canonical_args(args: Any) -> tuple[dict[str, Any], bytes]:
    """A plain copy of ``args`` and its canonical JSON (sorted keys, no spaces)."""
    if not isinstance(args, Mapping):
        raise InvalidArgumentError(
            f"args must be a dict of the tool call's arguments, not "
            f"{type(args).__name__}; pass {{}} for a call without arguments")
    # The one JSON check every stored value passes (depth, size, types), then
    # the canonical form: sorted keys, so equal calls hash equal.
    plain, _ = check_json(dict(args), "args", InvalidArgumentError, max_bytes=MAX_ARGS_BYTES)
    text = json.dumps(plain, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return plain, text.encode("utf-8")


def raw_bytes(raw: Any) -> tuple[bytes, str]:
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


def check_freshness(value: Any) -> str:
    if not isinstance(value, str) or value.strip().upper() not in FRESHNESS_CLASSES:
        raise UnknownFreshnessError(
            f"freshness {value!r} is not a volatility class; pass one of "
            f"{', '.join(FRESHNESS_CLASSES)} (CRP-SPEC-029 §4.1)")
    return value.strip().upper()


def check_duration(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        raise InvalidArgumentError(
            f"{what} must be None (unlimited) or a number of seconds >= 0, not "
            f"{value!r}")
    return float(value)


def check_policy(value: Any, what: str = "policy") -> str | None:
    if value is not None and value not in STALE_POLICIES:
        raise InvalidArgumentError(
            f"{what} {value!r} is not one of {', '.join(STALE_POLICIES)} "
            "(CRP-Safety-Policy tool-output-stale) or None for the class default")
    return value


def seconds(now: Any) -> float:
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
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        raise InvalidArgumentError(
            f"now {now!r} is out of range; pass Unix seconds >= 0 (e.g. time.time())")
    return value


def micros(seconds: float) -> int:
    return min(max(int(round(seconds * 1_000_000)), 0), 2**64 - 1)


@functools.lru_cache(maxsize=1024)
def iso(seconds: float) -> str:
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
    tool_name = check_tool_name(tool_name)
    _, args_bytes = canonical_args(args)
    data, _ = raw_bytes(raw)
    return provenance(tool_name, args_bytes, data)


def provenance(tool_name: str, args_bytes: bytes, data: bytes) -> str:
    digest = hashlib.sha256(b"ctxrelay.storage.lmdb.scratch.provenance/1\n")
    digest.update(tool_name.encode("utf-8") + b"\n" + args_bytes + b"\n")
    digest.update(data)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1024)
def session_digest(session_id: str) -> bytes:
    # Cached: checking a session id looks at every character, and a session's
    # entries are read again and again.  Exceptions are not cached.
    return hashlib.sha256(check_session_id(session_id).encode("utf-8")).digest()
