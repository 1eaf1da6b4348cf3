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


def normalise_metadata(metadata: Any) -> dict[str, Any]:
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
