"""JSON Lines export and import of one session: writing the text, reading a
source, and checking a whole file before anything is written (the errors name
the bad line)."""
from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from ctxrelay.errors import (ImportFormatError, InvalidArgumentError, InvalidPathError, InvalidContentError,
                             InvalidMetadataError, InvalidRoleError, InvalidSessionIdError)
from ctxrelay.storage.common.transcript.records import FORMAT
from ctxrelay.storage.validation import (check_int, check_session_id, normalise_metadata,
                                         normalise_timestamp)

def _export_target(dest: str | os.PathLike[str]) -> str:
    """``dest`` as a path we may replace with a file, or InvalidPathError."""
    try:
        target = os.fspath(dest)
        os.fsencode(target)
    except (TypeError, UnicodeError) as exc:
        raise InvalidPathError(f"export path {dest!r} is not a file system path ({exc}); "
                               "pass a str path") from None
    if not target:
        raise InvalidPathError("export path is empty; pass a file path such as 'session.jsonl'")
    if os.path.isdir(target):
        raise InvalidPathError(
            f"export path {target} is a directory; pass a file path inside it, e.g. "
            f"{os.path.join(target, 'session.jsonl')}")
    return target


__all__ = ["write_text", "is_jsonl_text", "read_source", "Header", "parse_jsonl", "guard"]


def write_text(dest: str | os.PathLike[str] | TextIO, text: str) -> None:
    if isinstance(dest, (str, os.PathLike)):
        target = _export_target(dest)
        try:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(target)),
                                       prefix=".export-", suffix=".tmp")
        except OSError as exc:
            raise InvalidPathError(
                f"cannot write the export next to {target} ({exc.strerror}); pass a file "
                "path in an existing directory you can write") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise InvalidPathError(
                    f"cannot write the export to {target} ({exc.strerror}); nothing was "
                    "left behind; pass a writable file path") from None
            raise
    elif isinstance(dest, io.TextIOBase):
        dest.write(text)
    elif callable(getattr(dest, "write", None)):
        dest.write(text.encode("utf-8"))   # a binary file object
    else:
        raise InvalidPathError(
            f"dest must be a file path or a file object, not {type(dest).__name__}; pass "
            "a file path such as 'session.jsonl' (or None for the text)")


def is_jsonl_text(source: str) -> bool:
    """Whether a str given as an import's source is the JSONL text, not a path: it is
    blank, starts with ``{`` (as every export does), or has a line break (so a damaged
    export, one with a BOM before its header say, is reported as JSONL, not as a file
    name that cannot be opened)."""
    return not source.strip() or "\n" in source or source.lstrip().startswith("{")


def read_source(source: Any) -> str:
    if isinstance(source, str) and is_jsonl_text(source):
        return source
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, encoding="utf-8", newline="") as handle:
                return handle.read()
        except (OSError, ValueError) as exc:      # ValueError: a NUL in the path, bad UTF-8
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
class Header:
    session_id: str | None
    created: str
    metadata: dict[str, Any]
    archived: bool
    turn_count: int | None


def parse_jsonl(text: str) -> tuple[Header, list[tuple[int, dict[str, Any]]]]:
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
    header = guard(first_number, lambda: _parse_header(record))
    turns: list[tuple[int, dict[str, Any]]] = []
    seen_keys: set[str] = set()
    for expected_id, (number, line) in enumerate(numbered[1:], 1):
        fields = guard(number, lambda r=_line_object(number, line, expected="turn"),
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


def guard(number: int, fn: Callable[[], Any]) -> Any:
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


def _parse_header(record: dict[str, Any]) -> Header:
    if record.get("format", FORMAT.decode()) != FORMAT.decode():
        raise ImportFormatError(
            f"format {record['format']!r} is not {FORMAT.decode()}; import it "
            "with the ctxrelay version that exported it")
    archived = record.get("archived", False)
    if not isinstance(archived, bool):
        raise ImportFormatError("\"archived\" must be true or false")
    turn_count = record.get("turn_count")
    if turn_count is not None:
        turn_count = check_int(turn_count, "\"turn_count\"", minimum=0)
    session_id = record.get("session_id")
    created = record.get("created")
    return Header(
        session_id=None if session_id is None else check_session_id(session_id),
        created=normalise_timestamp(created if created else None),
        metadata=normalise_metadata(record.get("metadata")),
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
