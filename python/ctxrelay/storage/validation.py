"""Argument checks and normal forms every store shares.

Each check returns the value it accepts (so calls chain) or raises the
specific :mod:`ctxrelay.errors` class whose message says how to fix it.
Nothing here touches storage: a store runs these before it writes anything.
"""
from __future__ import annotations

import hashlib
import json
import unicodedata
from datetime import datetime, timezone
from typing import Any

from ctxrelay.errors import (
    InvalidArgumentError,
    InvalidContentError,
    InvalidMetadataError,
    InvalidRoleError,
    InvalidSessionIdError,
)
from ctxrelay.types import ROLES

__all__ = ["MAX_SESSION_ID_CHARS", "check_session_id", "check_utf8", "check_role",
           "check_content", "check_optional_str", "check_int", "normalise_metadata",
           "check_json", "MAX_JSON_DEPTH", "MAX_METADATA_BYTES", "MAX_ARGS_BYTES",
           "normalise_timestamp", "dumps", "sha256"]

MAX_SESSION_ID_CHARS = 256


def check_session_id(session_id: Any) -> str:
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


def check_utf8(value: str, what: str, error: type[Exception]) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{what} contains a lone surrogate U+{ord(value[exc.start]):04X} at "
            f"index {exc.start}, which UTF-8 (and so the store) cannot hold; "
            "decode the source with errors='replace' or remove it") from None


def check_role(role: Any) -> str:
    if role not in ROLES or not isinstance(role, str):
        raise InvalidRoleError(
            f"role {role!r} is not one of {', '.join(ROLES)}; pass one of those")
    return role


def check_content(content: Any) -> str:
    if not isinstance(content, str):
        raise InvalidContentError(
            f"content must be a str, not {type(content).__name__}; "
            "serialise structured content (e.g. json.dumps) before appending")
    check_utf8(content, "content", InvalidContentError)
    return content


def check_optional_str(value: Any, what: str, *, empty_ok: bool = True) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"{what} must be a str or None, not {type(value).__name__}; pass a string")
    if not value and not empty_ok:
        raise InvalidArgumentError(f"{what} is empty; pass a non-empty string or None")
    check_utf8(value, what, InvalidArgumentError)
    return value


def check_int(value: Any, what: str, *, minimum: int, maximum: int = 2**63 - 1) -> int:
    if (isinstance(value, bool) or not isinstance(value, int)
            or not minimum <= value <= maximum):
        raise InvalidArgumentError(
            f"{what} must be an int in {minimum}..{maximum}, not {value!r}; "
            "pass such an int")
    return value


MAX_JSON_DEPTH = 64              # nesting levels of a metadata / args value
MAX_METADATA_BYTES = 1 << 20     # UTF-8 JSON bytes of one metadata object
MAX_ARGS_BYTES = 16 << 20        # UTF-8 JSON bytes of one tool call's arguments

_SCALARS = (str, int, float, bool, type(None))


def check_json(value: Any, what: str, error: type[Exception], *,
               max_bytes: int = MAX_METADATA_BYTES) -> tuple[Any, str]:
    """The one check of a JSON value a caller gives us to store (metadata, tool args).

    Returns ``(plain copy, compact JSON text)`` or raises ``error`` naming the
    place and the fix.  The walk is iterative and bounded by
    :data:`MAX_JSON_DEPTH`, so a 100,000-deep value costs a few steps and no
    ``RecursionError``; a value that passes can be encoded, decoded and carried
    to Prolog and back (janus converts recursively) by every later read, which
    is why a deep value is refused before anything is written.
    """
    stack: list[tuple[Any, str, int]] = [(value, what, 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                raise error(
                    f"{what} is nested more than {MAX_JSON_DEPTH} levels deep (at "
                    f"{where if len(where) <= 80 else where[:80] + '...'}); "
                    "flatten it, e.g. store the deep part as a JSON string")
            if isinstance(item, dict):
                for k, v in item.items():
                    if not isinstance(k, str):
                        raise error(
                            f"{where} has a non-string key {k!r}; JSON object keys must "
                            "be strings, convert it with str()")
                    check_utf8(k, f"the key {k!r} of {where}", error)
                    stack.append((v, f"{where}[{k!r}]", depth + 1))
            else:
                stack.extend((v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item))
        elif isinstance(item, str):
            check_utf8(item, where, error)
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                raise error(f"{where} is {item!r}, which JSON cannot hold; use only finite "
                            "numbers or None")
        elif not isinstance(item, _SCALARS):
            raise error(
                f"{where} is a {type(item).__name__}, which is not JSON; use only dicts, "
                "lists, str, int, finite float, bool and None")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError as exc:    # e.g. an int over Python's 4,300-digit str limit
        raise error(f"{what} cannot be written as JSON ({exc}); pass smaller numbers "
                    "or strings") from None
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise error(f"{what} is {size:,} bytes of JSON, more than {max_bytes:,}; keep "
                    "large data in a turn or a tool output and refer to it")
    return json.loads(text), text


def normalise_metadata(metadata: Any, what: str = "metadata") -> dict[str, Any]:
    """A JSON object as a plain dict (a str holding a JSON object is parsed)."""
    if metadata is None:
        return {}
    if isinstance(metadata, str):
        if len(metadata) > MAX_METADATA_BYTES:
            raise InvalidMetadataError(
                f"{what} text has {len(metadata):,} characters, more than "
                f"{MAX_METADATA_BYTES:,}; keep large data in a turn")
        try:
            metadata = json.loads(metadata)
        except RecursionError:
            raise InvalidMetadataError(
                f"{what} is nested more than {MAX_JSON_DEPTH} levels deep; flatten it") from None
        except ValueError as exc:
            raise InvalidMetadataError(
                f"{what} string is not valid JSON ({exc}); pass a dict or a "
                "JSON object text") from None
    if not isinstance(metadata, dict):
        raise InvalidMetadataError(
            f"{what} must be a JSON object (dict), not {type(metadata).__name__}; "
            "wrap the value, e.g. {'value': ...}")
    return check_json(metadata, what, InvalidMetadataError)[0]


def normalise_timestamp(value: Any) -> str:
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


def dumps(value: Any) -> bytes:
    """Compact JSON in UTF-8: the form every stored record takes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def sha256(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()
