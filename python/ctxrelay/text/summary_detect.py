"""Which kind a tool output is (a part of :mod:`ctxrelay.text.summarize`).

:func:`analyze` tries binary, JSON, error, table, bullets and scalar in that
order and returns the shape (from :mod:`ctxrelay.text.summary_shapes`) that
states it; plain text is the fallback.
"""
from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from ctxrelay.errors import InvalidContentError
from ctxrelay.text.summary_format import (
    SCALAR_MAX_CHARS, Shape, compact_json, is_scalar, json_scalar_text, json_type_name, split_lines)
from ctxrelay.text.summary_shapes import (
    NUMBER, BinaryShape, ErrorShape, JsonShape, ListShape, ScalarShape, TableShape, TextShape,
    as_number)

ERROR_HEAD_LINES = 5
ERROR_TAIL_LINES = 40
MAX_STRUCTURED_CHARS = 16 << 20   # larger outputs are summarised as text


# -- analysis ----------------------------------------------------------------------

def analyze(raw: Any) -> "Shape":
    """The :class:`Shape` of a tool output (str or bytes)."""
    if isinstance(raw, (bytes, bytearray, memoryview)):
        data = bytes(raw)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return BinaryShape(data, "not UTF-8 text")
        size = len(data)
    elif isinstance(raw, str):
        text = raw
        size = len(raw.encode("utf-8", "surrogatepass"))
    else:
        raise InvalidContentError(
            f"tool output must be str or bytes, not {type(raw).__name__}; serialise "
            "it first (e.g. json.dumps for structured results)")
    if "\x00" in text:
        return BinaryShape(text.encode("utf-8", "surrogatepass"), "text holding NUL bytes")
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        return TextShape(text, size, note="empty output" if not text else "only whitespace")
    if len(text) > MAX_STRUCTURED_CHARS:
        error = _detect_error(split_lines(text))
        return error or TextShape(text, size, note=(
            f"{len(text)} characters, too large for structure detection"))
    stripped = text.strip()
    if stripped[0] == "{" or _JSON_ARRAY_START.match(stripped):
        return _from_json_text(text, stripped, size)
    lines = split_lines(text)
    return (_detect_error(lines) or _detect_table(text, lines, size)
            or _detect_bullets(lines, size) or _detect_scalar(stripped, size)
            or TextShape(text, size))


# -- JSON --------------------------------------------------------------------------

_JSON_ARRAY_START = re.compile(
    r"\[\s*(?:$|[\[{\"\]]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\s*[,\]]|true\b|false\b|null\b)")


def _from_json_text(text: str, stripped: str, size: int) -> "Shape":
    try:
        value = json.loads(text)
    except RecursionError:
        return TextShape(text, size, note="JSON nested too deeply to parse")
    except json.JSONDecodeError as exc:
        if stripped[0] == "{" and exc.msg == "Extra data":
            records = _json_lines(text, size)
            if isinstance(records, Shape):
                return records
            exc = records
        return TextShape(text, size, note=f"invalid JSON at {exc.lineno}:{exc.colno} ({exc.msg})",
                         invalid_json=(exc.lineno, exc.colno, exc.msg))
    return _from_json(value, size, source="JSON")


def _json_lines(text: str, size: int) -> "Shape | json.JSONDecodeError":
    """A table of JSON lines, or the first line's decode error."""
    records: list[dict[str, Any]] = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except RecursionError:
            return json.JSONDecodeError("nested too deeply", text, _offset(text, number, 0))
        except json.JSONDecodeError as exc:
            return json.JSONDecodeError(exc.msg, text, _offset(text, number, exc.pos))
        if not isinstance(value, dict):
            return json.JSONDecodeError("JSON line is not an object", text,
                                        _offset(text, number, 0))
        records.append(value)
    return TableShape.from_records(records, size, fmt="JSON lines")


def _offset(text: str, line_number: int, column: int) -> int:
    """Character offset of ``column`` in line ``line_number`` (1-based) of ``text``."""
    start = 0
    for _ in range(line_number - 1):
        start = text.index("\n", start) + 1
    return start + column


def _from_json(value: Any, size: int, *, source: str) -> "Shape":
    if isinstance(value, dict):
        error = _json_error(value)
        return error or JsonShape(value, size)
    if isinstance(value, list):
        if value and all(isinstance(item, dict) for item in value):
            return TableShape.from_records(value, size, fmt=f"{source} array of objects")
        if all(is_scalar(item) for item in value):
            return ListShape([json_scalar_text(item) for item in value], size,
                             source=f"{source} array", values=value)
        return JsonShape(value, size)
    if isinstance(value, str) and (len(value) > SCALAR_MAX_CHARS or "\n" in value):
        return TextShape(value, size, note="a JSON string")
    return ScalarShape(json_scalar_text(value), size, type_name=json_type_name(value))


def _json_error(value: dict[str, Any]) -> "ErrorShape | None":
    for key in ("error", "errors"):
        found = value.get(key)
        if not found:
            continue
        if isinstance(found, list):
            found = found[0]
        if isinstance(found, dict):
            message = found.get("message") or found.get("msg") or found.get("detail")
            line = message if isinstance(message, str) else compact_json(found, 400)
        else:
            line = found if isinstance(found, str) else compact_json(found, 400)
        extra = [f"{k}: {compact_json(value[k], 200)}" for k in value if k != key][:6]
        if isinstance(found, dict):
            extra += [f"{key}.{k}: {compact_json(v, 200)}" for k, v in found.items()
                      if v is not message][:6]
        return ErrorShape(line, origin=f"JSON object with key {key!r}", context=extra)
    return None


# -- error outputs -----------------------------------------------------------------

_TRACEBACK = "Traceback (most recent call last):"
_ERROR_LINE = re.compile(r"""\s*(?:
      (?:fatal\s+)?error\s*(?:\[[^\]]{0,40}\])?\s*[:!]
    | \[\s*error\s*\]
    | (?:fatal|panic)\s*:
    | npm\s+ERR!
    | E\s{2,}[\w.]*(?:Error|Exception)\b
    | Exception\s+in\s+thread\b
    | (?:[\w$]+\.)*[\w$]*(?:Error|Exception)(?::|\s*$)
    | \S{1,300}?:\d+(?::\d+)?:\s*(?:fatal\s+)?error\b
    | make(?:\[\d+\])?:\s+\*\*\*
    | \S.{0,200}:\s+command\s+not\s+found\s*$
    )""", re.IGNORECASE | re.VERBOSE)
_EXIT = re.compile(
    r"(?:exit(?:ed)?(?:\s+with)?\s+(?:code|status)|exit_?code|return_?code|returncode"
    r"|returned\s+non-zero\s+exit\s+status)\s*[:=]?\s*\(?(-?\d{1,6})\b", re.IGNORECASE)
_FRAME = re.compile(r"\s+File \"")


def _error_marker(line: str) -> bool:
    return bool(_ERROR_LINE.match(line[:400]))


def _exit_code(line: str) -> int | None:
    found = None
    for match in _EXIT.finditer(line[:400]):
        found = int(match.group(1))
    return found


def _detect_error(lines: list[str]) -> "ErrorShape | None":
    numbered = [(i, line) for i, line in enumerate(lines) if line.strip()]
    window = numbered[:ERROR_HEAD_LINES] + numbered[max(ERROR_HEAD_LINES,
                                                        len(numbered) - ERROR_TAIL_LINES):]
    exit_code = None
    first_marker: str | None = None
    traceback_seen = False
    for _, line in window:
        code = _exit_code(line)
        if code is not None:
            exit_code = code
        if line.startswith(_TRACEBACK):
            traceback_seen = True
        elif first_marker is None and _error_marker(line):
            first_marker = line.strip()
    failed_exit = exit_code not in (None, 0)
    if not (traceback_seen or first_marker or failed_exit):
        return None
    frames, innermost, exception = _traceback(lines)
    if exception is not None:
        line = exception
    elif first_marker is not None:
        line = first_marker
    else:
        line = next((l.strip() for _, l in reversed(numbered) if _exit_code(l) is not None),
                    numbered[-1][1].strip())
    return ErrorShape(line, origin="output", exit_code=exit_code,
                      frames=frames, innermost=innermost, lines=lines)


def _traceback(lines: list[str]) -> tuple[int, str | None, str | None]:
    """Frames, innermost frame and exception line of the last Python traceback."""
    start = None
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(_TRACEBACK):
            start = index
            break
    if start is None:
        return 0, None, None
    frames, innermost, exception = 0, None, None
    for line in lines[start + 1:]:
        if _FRAME.match(line):
            frames += 1
            innermost = line.strip()
        elif line.strip() and not line[:1].isspace():
            exception = line.strip()
            break
    return frames, innermost, exception


# -- tables ------------------------------------------------------------------------

_PIPE_RULE = re.compile(r"[ \t]*+\|?+[ \t]*+:?-{3,}+:?+[ \t]*+"
                        r"(?:[|+][ \t]*+:?+-{3,}+:?+[ \t]*+)*+\|?+[ \t]*+")
_ROW_COUNT_FOOTER = re.compile(r"\(\d+ rows?\)")
_DELIMITERS = ((",", "comma"), ("\t", "tab"), (";", "semicolon"), ("|", "pipe"))


def _detect_table(text: str, lines: list[str], size: int) -> "TableShape | None":
    content = [line for line in lines if line.strip()]
    if len(content) < 2:
        return None
    return _pipe_table(content, size) or _delimited_table(text, size)


def _pipe_table(content: list[str], size: int) -> "TableShape | None":
    """Markdown or psql tables: a header row, a rule of dashes, rows with ``|``."""
    if ("|" not in content[0] or len(content[1]) > 2000
            or not _PIPE_RULE.fullmatch(content[1])):
        return None
    body = content[2:]
    if body and _ROW_COUNT_FOOTER.fullmatch(body[-1].strip()):
        body = body[:-1]
    if any("|" not in line for line in body):
        return None

    def cells(line: str) -> list[str]:
        line = line.strip()
        if line.startswith("|"):
            line = line[1:]
        if line.endswith("|") and not line.endswith("\\|"):
            line = line[:-1]
        return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)]

    header = cells(content[0])
    if len(header) < 2:
        return None
    table = TableShape(size, fmt="pipe table (markdown/psql)", columns=header, header=True)
    for line in body:
        table.add_row(cells(line))
    return table


def _delimited_table(text: str, size: int) -> "TableShape | None":
    best: tuple[int, str, str] | None = None
    for delimiter, name in _DELIMITERS:
        try:
            sample = []
            for record in csv.reader(io.StringIO(text), delimiter=delimiter):
                if record:
                    sample.append(record)
                if len(sample) == 20:
                    break
        except csv.Error:
            continue
        if len(sample) < 2:
            continue
        width = len(sample[0])
        if width < 2 or any(len(record) != width for record in sample):
            continue
        words = sum(len(cell.split()) for record in sample for cell in record)
        if words > 6 * width * len(sample):     # prose that happens to hold commas
            continue
        if best is None or width > best[0]:
            best = (width, delimiter, name)
    if best is None:
        return None
    width, delimiter, name = best
    try:
        records = [r for r in csv.reader(io.StringIO(text), delimiter=delimiter) if r]
    except csv.Error:
        return None
    ragged = sum(1 for record in records if len(record) != width)
    if ragged * 10 > len(records):
        return None
    first = [cell.strip() for cell in records[0]]
    header = all(cell and len(cell) <= 64 and len(cell.split()) <= 4
                 and as_number(cell) is None for cell in first)
    if not header and not _has_numeric_column(records[:20], width):
        return None        # neither a header nor a number column: prose or a log
    columns = first if header else [f"col{i}" for i in range(1, width + 1)]
    fmt = {"comma": "csv", "tab": "tsv"}.get(name, f"{name}-separated") + (
        f" ({name}-delimited)" if name in ("comma", "tab") else "")
    table = TableShape(size, fmt=fmt, columns=columns, header=header)
    for record in records[1:] if header else records:
        table.add_row([cell.strip() for cell in record])
    return table


def _has_numeric_column(records: list[list[str]], width: int) -> bool:
    return any(all(as_number(record[i].strip()) is not None for record in records
                   if len(record) == width)
               for i in range(width))


# -- lists and scalars -------------------------------------------------------------

_BULLET = re.compile(r"\s*(?:[-*\u2022+]|\d{1,6}[.)])\s+(\S.*)")


def _detect_bullets(lines: list[str], size: int) -> "ListShape | None":
    content = [line for line in lines if line.strip()]
    if len(content) < 2:
        return None
    items = []
    for line in content:
        match = _BULLET.fullmatch(line)
        if match is None:
            return None
        items.append(match.group(1).strip())
    return ListShape(items, size, source="bulleted lines")


def _detect_scalar(stripped: str, size: int) -> "ScalarShape | None":
    if "\n" in stripped or len(stripped) > SCALAR_MAX_CHARS:
        return None
    if NUMBER.fullmatch(stripped):
        kind = "int" if re.fullmatch(r"[+-]?\d+", stripped) else "float"
    elif stripped in ("true", "false", "True", "False"):
        kind = "bool"
    else:
        kind = "str"
    return ScalarShape(stripped, size, type_name=kind)
