"""Deterministic, structure-aware summaries of tool output (CRP-SPEC-029 §3).

``summarize(raw, tool_name=..., scratch_id=...)`` turns one tool output (``str``
or ``bytes``) into a short text for the context window and a small dict of the
facts it states.  No model is called: the summary is schema extraction,
counting and sampling, so the same input always gives the same summary.

Kinds (``Summary.kind``), tried in this order:

``binary``  bytes that are not UTF-8, or any text holding a NUL: size, sha256
            and a file type from magic bytes; never any content.
``json``    a JSON object, or an array mixing types: type, key count, keys with
            their types, array lengths at any depth, a few scalar values, and
            the nested shape.  An object with a truthy ``error``/``errors`` key
            is an ``error``; an array of objects is a ``table``; an array of
            scalars is a ``list``; a lone JSON scalar is a ``scalar``.  Text that
            starts like JSON but does not parse is ``text`` with the note
            ``invalid JSON at line:col (reason)``.
``error``   a Python traceback, ``error:``/``fatal:``/``panic:`` lines, compiler
            ``file:line: error`` lines, exception lines, or a non-zero exit
            marker, in the first 5 or the last :data:`ERROR_TAIL_LINES`
            non-blank lines: the first error line (for a traceback, its
            exception line), the exit code, the frames, then the output's tail.
``table``   CSV, TSV, ``;``- or ``|``-separated rows, markdown/psql pipe tables,
            JSON arrays of objects and JSON lines: row and column counts, the
            header, numeric min/max and ISO-date ranges per column, first and
            last rows.
``list``    a JSON array of scalars or bulleted/numbered lines: item count,
            item type, numeric range, first and last items.
``scalar``  one line of at most :data:`SCALAR_MAX_CHARS` characters: the value.
``text``    everything else: line/word/char counts, log-level counts and the
            first error-level line, head and tail lines.

Every summary has at most ``max_tokens`` tokens (default 256) for ``model``.
It is rendered at the most detailed of five levels that fits; if even the
tersest does not, lines are kept greedily and the last one is cut.

The summary is data and is marked as such: its first line is
``[tool output <scratch_id> from <tool>: <headline>]`` and its last line
``[end tool output]``.  Every other line starts with a fixed
label or indent written here, and text taken from the output has its line
breaks and other control, format and separator characters escaped
(``\\n``, ``\\x1b``, ``\\u202e``), so tool output can never start a line of
its own, forge the header or footer, or smuggle in anything that looks like
runtime text at the start of a line.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from ctxrelay.errors import InvalidArgumentError, InvalidContentError
from ctxrelay.text.tokens import TokenCount, count

__all__ = ["KINDS", "DEFAULT_MAX_TOKENS", "MIN_MAX_TOKENS", "FOOTER", "Summary",
           "summarize", "header_line", "footer_line"]

KINDS: tuple[str, ...] = ("table", "json", "list", "scalar", "text", "error", "binary")
DEFAULT_MAX_TOKENS = 256
MIN_MAX_TOKENS = 64           # the header and footer alone need about 35 tokens
SCALAR_MAX_CHARS = 200
ERROR_HEAD_LINES = 5
ERROR_TAIL_LINES = 40
MAX_STRUCTURED_CHARS = 16 << 20   # larger outputs are summarised as text
MAX_STAT_COLUMNS = 64         # columns that get numeric/date statistics
MAX_TOOL_CHARS = 48           # of the tool name shown in the header
_MAX_WALK = 2000              # JSON nodes visited for lengths and values


# -- the result ----------------------------------------------------------------

@dataclass(frozen=True)
class Summary:
    """A summary: its text, kind, token count and the facts it states.

    ``structured`` holds plain JSON types only (counts, column names, ranges,
    the error line, ...) with every string capped, so it stays small.
    """

    text: str
    kind: str
    tokens: int
    exact: bool
    structured: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "kind": self.kind, "tokens": self.tokens,
                "exact": self.exact, "structured": json.loads(json.dumps(self.structured))}


@dataclass(frozen=True)
class _Detail:
    """How much a rendering shows; :data:`_LEVELS` goes from most to least."""

    rows: int      # sample rows / first items
    last: int      # last rows / last items
    head: int      # text head lines; error tail lines = head + tail
    tail: int      # text tail lines
    width: int     # characters per line, after escaping
    keys: int      # keys / columns listed
    depth: int     # JSON shape depth
    values: int    # scalar values shown


_LEVELS = (
    _Detail(rows=5, last=2, head=8, tail=5, width=160, keys=24, depth=3, values=8),
    _Detail(rows=3, last=1, head=5, tail=3, width=120, keys=16, depth=2, values=5),
    _Detail(rows=2, last=1, head=3, tail=2, width=90, keys=10, depth=1, values=3),
    _Detail(rows=1, last=0, head=2, tail=1, width=64, keys=6, depth=1, values=2),
    _Detail(rows=0, last=0, head=1, tail=0, width=48, keys=4, depth=0, values=1),
)


# -- escaping --------------------------------------------------------------------

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def _escape_char(char: str) -> str:
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _clean(value: str, width: int) -> str:
    """``value`` on one line: unsafe characters escaped, cut to ``width`` chars."""
    out: list[str] = []
    size = 0
    for char in value[: width * 2]:
        piece = _escape_char(char) if (
            char in _ESCAPES or unicodedata.category(char) in _UNSAFE_CATEGORIES) else char
        out.append(piece)
        size += len(piece)
        if size > width:
            break
    text = "".join(out)
    if len(text) > width or len(value) > width * 2:
        return text[: max(width - 1, 0)] + "\u2026"
    return text


def _cap(value: str, limit: int = 200) -> str:
    """A string for ``structured``: cut to ``limit`` chars, lone surrogates replaced."""
    value = value if len(value) <= limit else value[: limit - 1] + "\u2026"
    return value.encode("utf-8", "replace").decode("utf-8")


# -- header and footer -----------------------------------------------------------

def header_line(scratch_id: str | None, tool_name: str, headline: str, *,
                tool_chars: int = MAX_TOOL_CHARS) -> str:
    """``[tool output <id> from <tool>: <headline>]`` (the id part left out if None)."""
    ident = f" {_clean(scratch_id, 64)}" if scratch_id else ""
    tool = _clean(tool_name, tool_chars) if tool_chars > 0 else "\u2026"
    return f"[tool output{ident} from {tool}: {headline}]"


FOOTER = "[end tool output]"


def footer_line() -> str:
    """The last line of every summary (blocks cannot nest, so it needs no id)."""
    return FOOTER


# -- the entry point -----------------------------------------------------------

def summarize(raw: str | bytes, *, tool_name: str, scratch_id: str | None = None,
              max_tokens: int = DEFAULT_MAX_TOKENS,
              model: str = "cl100k_base") -> Summary:
    """The deterministic summary of one tool output (see the module doc).

    ``raw`` is ``str`` or bytes-like.  The text has at most ``max_tokens``
    tokens as counted by :func:`ctxrelay.text.tokens.count` for ``model``
    (``exact`` says whether that count is exact).
    @raises InvalidContentError if ``raw`` is neither str nor bytes-like.
    @raises InvalidArgumentError for a bad ``max_tokens``, ``tool_name`` or ``scratch_id``.
    """
    if not isinstance(tool_name, str):
        raise InvalidArgumentError(
            f"tool_name must be a str, not {type(tool_name).__name__}; pass the tool's name")
    if scratch_id is not None and not isinstance(scratch_id, str):
        raise InvalidArgumentError(
            f"scratch_id must be a str or None, not {type(scratch_id).__name__}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) \
            or max_tokens < MIN_MAX_TOKENS:
        raise InvalidArgumentError(
            f"max_tokens must be an int >= {MIN_MAX_TOKENS} (room for the header and "
            f"footer), not {max_tokens!r}; the spec's default is {DEFAULT_MAX_TOKENS}")
    shape = _analyze(raw)
    text, tokens = _fit(shape, tool_name, scratch_id, max_tokens, model)
    return Summary(text=text, kind=shape.kind, tokens=tokens.n, exact=tokens.exact,
                   structured=shape.structured())


def _fit(shape: "_Shape", tool_name: str, scratch_id: str | None, cap: int,
         model: str) -> tuple[str, TokenCount]:
    """The most detailed rendering within ``cap`` tokens."""
    footer = FOOTER

    def measure(header: str, lines: list[str]) -> tuple[str, TokenCount]:
        text = "\n".join([header, *lines, footer])
        return text, count(text, model)

    for detail in _LEVELS:
        header = header_line(scratch_id, tool_name, shape.headline(detail))
        text, tokens = measure(header, shape.lines(detail))
        if tokens.n <= cap:
            return text, tokens
    # Even the tersest rendering is too long: keep lines while they fit.
    detail = _LEVELS[-1]
    tool_chars = MAX_TOOL_CHARS
    header = header_line(scratch_id, tool_name, shape.headline(detail))
    while measure(header, [])[1].n > cap:
        if tool_chars <= 0:    # cannot happen with MIN_MAX_TOKENS; a last resort
            header = header_line(scratch_id, "", "", tool_chars=0)
            return measure(header, [])
        tool_chars = tool_chars // 2 if tool_chars > 4 else 0
        header = header_line(scratch_id, tool_name, shape.headline(detail),
                             tool_chars=tool_chars)
    kept: list[str] = []
    for line in shape.lines(detail):
        if measure(header, [*kept, line])[1].n <= cap:
            kept.append(line)
            continue
        cut = _longest_prefix(line, lambda s: measure(header, [*kept, s])[1].n <= cap)
        if cut is not None:
            kept.append(cut)
        break
    return measure(header, kept)


def _longest_prefix(line: str, fits: Callable[[str], bool]) -> str | None:
    """The longest ``line[:n] + '…'`` (n >= 8, found by bisection) that fits."""
    low, high, best = 8, len(line) - 1, None
    while low <= high:
        mid = (low + high) // 2
        candidate = line[:mid] + "\u2026"
        if fits(candidate):
            best, low = candidate, mid + 1
        else:
            high = mid - 1
    return best


# -- analysis --------------------------------------------------------------------

def _analyze(raw: Any) -> "_Shape":
    if isinstance(raw, (bytes, bytearray, memoryview)):
        data = bytes(raw)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _Binary(data, "not UTF-8 text")
        size = len(data)
    elif isinstance(raw, str):
        text = raw
        size = len(raw.encode("utf-8", "surrogatepass"))
    else:
        raise InvalidContentError(
            f"tool output must be str or bytes, not {type(raw).__name__}; serialise "
            "it first (e.g. json.dumps for structured results)")
    if "\x00" in text:
        return _Binary(text.encode("utf-8", "surrogatepass"), "text holding NUL bytes")
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        return _Text(text, size, note="empty output" if not text else "only whitespace")
    if len(text) > MAX_STRUCTURED_CHARS:
        error = _detect_error(_lines(text))
        return error or _Text(text, size, note=(
            f"{len(text)} characters, too large for structure detection"))
    stripped = text.strip()
    if stripped[0] == "{" or _JSON_ARRAY_START.match(stripped):
        return _from_json_text(text, stripped, size)
    lines = _lines(text)
    return (_detect_error(lines) or _detect_table(text, lines, size)
            or _detect_bullets(lines, size) or _detect_scalar(stripped, size)
            or _Text(text, size))


def _lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# -- JSON --------------------------------------------------------------------------

_JSON_ARRAY_START = re.compile(
    r"\[\s*(?:$|[\[{\"\]]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\s*[,\]]|true\b|false\b|null\b)")


def _from_json_text(text: str, stripped: str, size: int) -> "_Shape":
    try:
        value = json.loads(text)
    except RecursionError:
        return _Text(text, size, note="JSON nested too deeply to parse")
    except json.JSONDecodeError as exc:
        if stripped[0] == "{" and exc.msg == "Extra data":
            records = _json_lines(text, size)
            if isinstance(records, _Shape):
                return records
            exc = records
        return _Text(text, size, note=f"invalid JSON at {exc.lineno}:{exc.colno} ({exc.msg})",
                     invalid_json=(exc.lineno, exc.colno, exc.msg))
    return _from_json(value, size, source="JSON")


def _json_lines(text: str, size: int) -> "_Shape | json.JSONDecodeError":
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
    return _Table.from_records(records, size, fmt="JSON lines")


def _offset(text: str, line_number: int, column: int) -> int:
    """Character offset of ``column`` in line ``line_number`` (1-based) of ``text``."""
    start = 0
    for _ in range(line_number - 1):
        start = text.index("\n", start) + 1
    return start + column


def _from_json(value: Any, size: int, *, source: str) -> "_Shape":
    if isinstance(value, dict):
        error = _json_error(value)
        return error or _JsonShape(value, size)
    if isinstance(value, list):
        if value and all(isinstance(item, dict) for item in value):
            return _Table.from_records(value, size, fmt=f"{source} array of objects")
        if all(_is_scalar(item) for item in value):
            return _List([_json_scalar_text(item) for item in value], size,
                         source=f"{source} array", values=value)
        return _JsonShape(value, size)
    if isinstance(value, str) and (len(value) > SCALAR_MAX_CHARS or "\n" in value):
        return _Text(value, size, note="a JSON string")
    return _Scalar(_json_scalar_text(value), size, type_name=_type_name(value))


def _json_error(value: dict[str, Any]) -> "_Error | None":
    for key in ("error", "errors"):
        found = value.get(key)
        if not found:
            continue
        if isinstance(found, list):
            found = found[0]
        if isinstance(found, dict):
            message = found.get("message") or found.get("msg") or found.get("detail")
            line = message if isinstance(message, str) else _compact(found, 400)
        else:
            line = found if isinstance(found, str) else _compact(found, 400)
        extra = [f"{k}: {_compact(value[k], 200)}" for k in value if k != key][:6]
        if isinstance(found, dict):
            extra += [f"{key}.{k}: {_compact(v, 200)}" for k, v in found.items()
                      if v is not message][:6]
        return _Error(line, origin=f"JSON object with key {key!r}", context=extra)
    return None


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dict):
        return "object"
    return "array"


def _json_scalar_text(value: Any) -> str:
    return value if isinstance(value, str) else _compact(value, 400)


def _compact(value: Any, limit: int) -> str:
    """Compact JSON of ``value``, cut to about ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _key_text(key: str, width: int = 32) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", key):
        return key if len(key) <= width else key[: width - 1] + "\u2026"
    return _clean(json.dumps(key, ensure_ascii=False), width)


class _Budget:
    """Pieces of text up to a character limit (then ``…``)."""

    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.left = limit
        self.full = False

    def add(self, piece: str) -> bool:
        if self.full:
            return False
        if len(piece) > self.left:
            self.parts.append("\u2026")
            self.full = True
            return False
        self.parts.append(piece)
        self.left -= len(piece)
        return True

    def text(self) -> str:
        return "".join(self.parts)


def _shape(value: Any, depth: int, keys: int, out: _Budget) -> None:
    """The nested shape of ``value`` written into ``out``."""
    if isinstance(value, dict):
        if not value:
            out.add("{}")
        elif depth <= 0:
            out.add(f"{{\u2026{len(value)} keys}}")
        else:
            out.add("{")
            for index, (key, item) in enumerate(value.items()):
                if index == keys:
                    out.add(f", \u2026+{len(value) - keys}")
                    break
                if not out.add((", " if index else "") + _key_text(key) + ": "):
                    return
                _shape(item, depth - 1, keys, out)
                if out.full:
                    return
            out.add("}")
    elif isinstance(value, list):
        if not value:
            out.add("[]")
        elif depth <= 0:
            out.add(f"[\u2026\u00d7{len(value)}]")
        else:
            first = _type_name(value[0])
            uniform = all(_type_name(item) == first for item in value[:200])
            if not uniform:
                out.add(f"[mixed \u00d7{len(value)}]")
                return
            out.add("[")
            _shape(value[0], depth - 1, keys, out)
            out.add(f" \u00d7{len(value)}]")
    else:
        out.add(_type_name(value))


def _walk(value: Any) -> tuple[list[tuple[str, int]], list[tuple[str, Any]]]:
    """Breadth first: (path, length) of arrays and (path, value) of scalars."""
    lengths: list[tuple[str, int]] = []
    scalars: list[tuple[str, Any]] = []
    queue: list[tuple[str, Any]] = [("", value)]
    visited = 0
    while queue and visited < _MAX_WALK:
        next_queue: list[tuple[str, Any]] = []
        for path, node in queue:
            visited += 1
            if visited > _MAX_WALK:
                break
            if isinstance(node, dict):
                for index, (key, item) in enumerate(node.items()):
                    if index == _MAX_WALK:
                        break
                    child = f"{path}.{_key_text(key)}" if path else _key_text(key)
                    if _is_scalar(item):
                        scalars.append((child, item))
                    else:
                        next_queue.append((child, item))
            elif isinstance(node, list):
                lengths.append((path or "(top)", len(node)))
                if node and not _is_scalar(node[0]):
                    next_queue.append((f"{path}[0]", node[0]))
        queue = next_queue
    return lengths, scalars


# -- error outputs ---------------------------------------------------------------

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


def _detect_error(lines: list[str]) -> "_Error | None":
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
    return _Error(line, origin="output", exit_code=exit_code,
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

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                   r"(?:Z|[+-]\d{2}:?\d{2})?)?")
_PIPE_RULE = re.compile(r"[ \t]*+\|?+[ \t]*+:?-{3,}+:?+[ \t]*+"
                        r"(?:[|+][ \t]*+:?+-{3,}+:?+[ \t]*+)*+\|?+[ \t]*+")
_ROW_COUNT_FOOTER = re.compile(r"\(\d+ rows?\)")
_DELIMITERS = ((",", "comma"), ("\t", "tab"), (";", "semicolon"), ("|", "pipe"))


class _Column:
    """Running statistics of one column: numeric and ISO-date ranges."""

    def __init__(self) -> None:
        self.numeric = True
        self.dates = True
        self.present = 0
        self.low: tuple[Decimal, str] | None = None
        self.high: tuple[Decimal, str] | None = None
        self.first_date: str | None = None
        self.last_date: str | None = None

    def add(self, cell: Any) -> None:
        if cell is None or cell == "":
            return
        self.present += 1
        if self.numeric:
            number = _as_number(cell)
            if number is None:
                self.numeric = False
            else:
                if self.low is None or number[0] < self.low[0]:
                    self.low = number
                if self.high is None or number[0] > self.high[0]:
                    self.high = number
        if self.dates:
            if isinstance(cell, str) and _DATE.fullmatch(cell):
                if self.first_date is None or cell < self.first_date:
                    self.first_date = cell
                if self.last_date is None or cell > self.last_date:
                    self.last_date = cell
            else:
                self.dates = False

    def numeric_range(self) -> tuple[str, str] | None:
        if self.numeric and self.low is not None and self.high is not None:
            return self.low[1], self.high[1]
        return None

    def date_range(self) -> tuple[str, str] | None:
        if self.dates and self.first_date is not None and self.last_date is not None:
            return self.first_date, self.last_date
        return None


def _as_number(cell: Any) -> tuple[Decimal, str] | None:
    if isinstance(cell, bool):
        return None
    if isinstance(cell, int):
        return Decimal(cell), str(cell)
    if isinstance(cell, float):
        return (Decimal(repr(cell)), repr(cell)) if math.isfinite(cell) else None
    if isinstance(cell, str) and len(cell) <= 64 and _NUMBER.fullmatch(cell):
        try:
            return Decimal(cell), cell
        except (InvalidOperation, ValueError):
            return None
    return None


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else _compact(value, 200)


def _detect_table(text: str, lines: list[str], size: int) -> "_Table | None":
    content = [line for line in lines if line.strip()]
    if len(content) < 2:
        return None
    return _pipe_table(content, size) or _delimited_table(text, size)


def _pipe_table(content: list[str], size: int) -> "_Table | None":
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
    table = _Table(size, fmt="pipe table (markdown/psql)", columns=header, header=True)
    for line in body:
        table.add_row(cells(line))
    return table


def _delimited_table(text: str, size: int) -> "_Table | None":
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
                 and _as_number(cell) is None for cell in first)
    if not header and not _has_numeric_column(records[:20], width):
        return None        # neither a header nor a number column: prose or a log
    columns = first if header else [f"col{i}" for i in range(1, width + 1)]
    fmt = {"comma": "csv", "tab": "tsv"}.get(name, f"{name}-separated") + (
        f" ({name}-delimited)" if name in ("comma", "tab") else "")
    table = _Table(size, fmt=fmt, columns=columns, header=header)
    for record in records[1:] if header else records:
        table.add_row([cell.strip() for cell in record])
    return table


def _has_numeric_column(records: list[list[str]], width: int) -> bool:
    return any(all(_as_number(record[i].strip()) is not None for record in records
                   if len(record) == width)
               for i in range(width))


# -- lists and scalars -------------------------------------------------------------

_BULLET = re.compile(r"\s*(?:[-*\u2022+]|\d{1,6}[.)])\s+(\S.*)")


def _detect_bullets(lines: list[str], size: int) -> "_List | None":
    content = [line for line in lines if line.strip()]
    if len(content) < 2:
        return None
    items = []
    for line in content:
        match = _BULLET.fullmatch(line)
        if match is None:
            return None
        items.append(match.group(1).strip())
    return _List(items, size, source="bulleted lines")


def _detect_scalar(stripped: str, size: int) -> "_Scalar | None":
    if "\n" in stripped or len(stripped) > SCALAR_MAX_CHARS:
        return None
    if _NUMBER.fullmatch(stripped):
        kind = "int" if re.fullmatch(r"[+-]?\d+", stripped) else "float"
    elif stripped in ("true", "false", "True", "False"):
        kind = "bool"
    else:
        kind = "str"
    return _Scalar(stripped, size, type_name=kind)


# -- shapes and their renderings -------------------------------------------------

class _Shape:
    kind = "text"

    def headline(self, detail: _Detail) -> str:
        raise NotImplementedError

    def lines(self, detail: _Detail) -> list[str]:
        raise NotImplementedError

    def structured(self) -> dict[str, Any]:
        raise NotImplementedError


def _label_list(label: str, items: list[str], total: int, detail: _Detail) -> str:
    shown = items[: detail.keys]
    more = f", \u2026 (+{total - len(shown)} more)" if total > len(shown) else ""
    return _clean(f"{label}: " + ", ".join(shown), detail.width * 2) + more


def _numbered(label: str, rows: list[tuple[int, str]], detail: _Detail) -> list[str]:
    if not rows:
        return []
    return [f"{label}:"] + [f"  {n}| " + _clean(row, detail.width) for n, row in rows]


class _Binary(_Shape):
    kind = "binary"
    _MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG image"), (b"\xff\xd8\xff", "JPEG image"),
              (b"GIF8", "GIF image"), (b"%PDF-", "PDF document"),
              (b"PK\x03\x04", "ZIP archive"), (b"\x1f\x8b", "gzip data"),
              (b"\x7fELF", "ELF executable"), (b"SQLite format 3\x00", "SQLite database"),
              (b"\x00asm", "WebAssembly module"), (b"BZh", "bzip2 data"),
              (b"\xfd7zXZ\x00", "xz data"), (b"7z\xbc\xaf\x27\x1c", "7-Zip archive"),
              (b"RIFF", "RIFF media"), (b"MZ", "Windows executable"),
              (b"\x28\xb5\x2f\xfd", "zstd data"), (b"OggS", "Ogg media"))

    def __init__(self, data: bytes, why: str) -> None:
        self.size = len(data)
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.why = why
        self.format = next((name for magic, name in self._MAGIC if data.startswith(magic)),
                           None)
        if self.format is None and len(data) > 262 and data[257:262] == b"ustar":
            self.format = "tar archive"

    def headline(self, detail: _Detail) -> str:
        return f"binary, {self.size} bytes"

    def lines(self, detail: _Detail) -> list[str]:
        out = [f"binary: {self.size} bytes, {self.why}; content not shown",
               f"sha256: {self.sha256}"]
        if self.format:
            out.append(f"format: {self.format} (from magic bytes)")
        return out

    def structured(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "format": self.format,
                "reason": self.why}


class _Text(_Shape):
    kind = "text"
    _LEVEL = re.compile(r"\b(FATAL|CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE)\b")

    def __init__(self, text: str, size: int, *, note: str | None = None,
                 invalid_json: tuple[int, int, str] | None = None) -> None:
        self.size = size
        self.note = note
        self.invalid_json = invalid_json
        self.all_lines = _lines(text)
        self.chars = len(text)
        self.words = len(text.split())
        self.levels: dict[str, int] = {}
        self.first_error: tuple[int, str] | None = None
        for number, line in enumerate(self.all_lines, 1):
            match = self._LEVEL.search(line[:200])
            if match is None:
                continue
            level = "WARN" if match.group(1) == "WARNING" else match.group(1)
            self.levels[level] = self.levels.get(level, 0) + 1
            if self.first_error is None and level in ("FATAL", "CRITICAL", "ERROR"):
                self.first_error = (number, line)

    def headline(self, detail: _Detail) -> str:
        return f"text, {len(self.all_lines)} lines, {self.size} bytes"

    def lines(self, detail: _Detail) -> list[str]:
        total = len(self.all_lines)
        out = [f"text: {total} lines, {self.words} words, {self.chars} chars"]
        if self.note:
            out.append("note: " + _clean(self.note, detail.width) +
                       ("; shown as text" if self.invalid_json else ""))
        if self.levels:
            order = ("FATAL", "CRITICAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
            out.append("log levels: " + ", ".join(
                f"{name} {self.levels[name]}" for name in order if name in self.levels))
        if self.first_error is not None:
            number, line = self.first_error
            out.append(f"first error-level line {number}: " + _clean(line, detail.width))
        head = min(detail.head, total)
        tail = min(detail.tail, total - head)
        out += _numbered("head" if tail else "lines",
                         [(n + 1, self.all_lines[n]) for n in range(head)], detail)
        if tail:
            omitted = total - head - tail
            if omitted:
                out.append(f"  \u2026 {omitted} lines omitted")
            out += _numbered("tail", [(n + 1, self.all_lines[n])
                                      for n in range(total - tail, total)], detail)
        elif total > head:
            out.append(f"  \u2026 {total - head} more lines")
        return out

    def structured(self) -> dict[str, Any]:
        data: dict[str, Any] = {"lines": len(self.all_lines), "words": self.words,
                                "chars": self.chars}
        if self.levels:
            data["levels"] = dict(sorted(self.levels.items()))
        if self.note:
            data["note"] = _cap(self.note)
        if self.invalid_json:
            line, col, msg = self.invalid_json
            data["invalid_json"] = {"line": line, "col": col, "msg": _cap(msg)}
        return data


class _Error(_Shape):
    kind = "error"

    def __init__(self, line: str, *, origin: str,
                 exit_code: int | None = None, frames: int = 0,
                 innermost: str | None = None, lines: list[str] | None = None,
                 context: list[str] | None = None) -> None:
        self.line = line
        self.origin = origin
        self.exit_code = exit_code
        self.frames = frames
        self.innermost = innermost
        self.output = lines or []
        self.context = context or []

    def headline(self, detail: _Detail) -> str:
        return "error" + (f", exit code {self.exit_code}" if self.exit_code is not None else "")

    def lines(self, detail: _Detail) -> list[str]:
        out = ["error: " + _clean(self.line, detail.width * 2)]
        if self.exit_code is not None:
            out.append(f"exit code: {self.exit_code}")
        if self.frames:
            out.append(f"traceback: {self.frames} frames; innermost: "
                       + _clean(self.innermost or "", detail.width))
        for item in self.context[: detail.values]:
            out.append("field " + _clean(item, detail.width))
        total = len(self.output)
        keep = min(total, detail.head + detail.tail)
        if total == 1 and self.output[0].strip() == self.line:
            keep = 0                      # the error line is the whole output
        if keep:
            label = (f"output ({total} lines)" if keep == total
                     else f"output tail (last {keep} of {total} lines)")
            out += _numbered(label, [(n + 1, self.output[n])
                                     for n in range(total - keep, total)], detail)
        return out

    def structured(self) -> dict[str, Any]:
        data: dict[str, Any] = {"error_line": _cap(self.line), "origin": self.origin}
        if self.exit_code is not None:
            data["exit_code"] = self.exit_code
        if self.frames:
            data["frames"] = self.frames
            data["innermost"] = _cap(self.innermost or "")
        if self.output:
            data["lines"] = len(self.output)
        return data


class _Scalar(_Shape):
    kind = "scalar"

    def __init__(self, value: str, size: int, *, type_name: str) -> None:
        self.value = value
        self.size = size
        self.type_name = type_name

    def headline(self, detail: _Detail) -> str:
        return f"scalar {self.type_name}"

    def lines(self, detail: _Detail) -> list[str]:
        return ["value: " + _clean(self.value, max(detail.width, SCALAR_MAX_CHARS))]

    def structured(self) -> dict[str, Any]:
        return {"value": _cap(self.value, SCALAR_MAX_CHARS + 1), "type": self.type_name}


class _List(_Shape):
    kind = "list"

    def __init__(self, items: list[str], size: int, *, source: str,
                 values: list[Any] | None = None) -> None:
        self.items = items
        self.size = size
        self.source = source
        types: dict[str, int] = {}
        column = _Column()
        for value in (values if values is not None else items):
            name = _type_name(value) if values is not None else "str"
            types[name] = types.get(name, 0) + 1
            column.add(value)
        self.types = types
        self.range = column.numeric_range() if values is not None else None

    def headline(self, detail: _Detail) -> str:
        return f"list, {len(self.items)} items"

    def lines(self, detail: _Detail) -> list[str]:
        total = len(self.items)
        if len(self.types) == 1:
            kinds = next(iter(self.types))
        else:
            kinds = "mixed: " + ", ".join(f"{k} {v}" for k, v in self.types.items())
        out = [f"list: {total} items from {self.source}" + (f"; item type {kinds}"
                                                          if total else "")]
        if self.range is not None:
            out.append(f"range: {_clean(self.range[0], 40)}..{_clean(self.range[1], 40)}")
        first = min(detail.rows + 2, total)
        out += _numbered("first items", [(n + 1, self.items[n]) for n in range(first)], detail)
        last = min(detail.last + 1 if detail.rows else 0, total - first)
        if last:
            out += _numbered("last items", [(n + 1, self.items[n])
                                            for n in range(total - last, total)], detail)
        return out

    def structured(self) -> dict[str, Any]:
        data: dict[str, Any] = {"items": len(self.items), "source": self.source,
                                "types": dict(self.types)}
        if self.range is not None:
            data["min"], data["max"] = _cap(self.range[0]), _cap(self.range[1])
        return data


class _JsonShape(_Shape):
    kind = "json"

    def __init__(self, value: dict[str, Any] | list[Any], size: int) -> None:
        self.value = value
        self.size = size
        self.lengths, self.scalars = _walk(value)

    def headline(self, detail: _Detail) -> str:
        if isinstance(self.value, dict):
            return f"JSON object, {len(self.value)} keys"
        return f"JSON array, {len(self.value)} items"

    def lines(self, detail: _Detail) -> list[str]:
        value = self.value
        out: list[str] = []
        if isinstance(value, dict):
            described = [f"{_key_text(k)} ({self._describe(v)})" for k, v in
                         list(value.items())[: detail.keys]]
            out.append(_label_list("keys", described, len(value), detail))
        else:
            types: dict[str, int] = {}
            for item in value:
                name = _type_name(item)
                types[name] = types.get(name, 0) + 1
            out.append("item types: " + ", ".join(f"{k} {v}" for k, v in types.items()))
        lengths = [f"{path}[{n}]" for path, n in self.lengths if path != "(top)"]
        if lengths:
            out.append(_label_list("array lengths", lengths, len(lengths), detail))
        if self.scalars and detail.values:
            shown = [f"{path}={_compact(v, 40)}" for path, v in self.scalars[: detail.values]]
            out.append(_label_list("values", shown, len(self.scalars), detail))
        if detail.depth:
            budget = _Budget(detail.width * 2)
            _shape(value, detail.depth, detail.keys, budget)
            out.append("shape: " + _clean(budget.text(), detail.width * 2 + 8))
        if isinstance(value, list):
            first = min(detail.rows, len(value))
            out += _numbered("first items", [(n + 1, _compact(value[n], detail.width))
                                             for n in range(first)], detail)
        return out

    @staticmethod
    def _describe(value: Any) -> str:
        if isinstance(value, dict):
            return f"object, {len(value)} keys"
        if isinstance(value, list):
            if value and all(isinstance(v, dict) for v in value[:200]):
                return f"array, {len(value)} objects"
            return f"array, {len(value)}"
        return _type_name(value)

    def structured(self) -> dict[str, Any]:
        if isinstance(self.value, dict):
            data: dict[str, Any] = {"type": "object", "key_count": len(self.value),
                                    "keys": [_cap(k, 80) for k in list(self.value)[:64]]}
        else:
            data = {"type": "array", "length": len(self.value)}
        data["array_lengths"] = {_cap(p, 120): n for p, n in self.lengths[:32]}
        return data


class _Table(_Shape):
    kind = "table"

    def __init__(self, size: int, *, fmt: str, columns: list[str], header: bool) -> None:
        self.size = size
        self.fmt = fmt
        self.columns = columns
        self.header = header
        self.rows = 0
        self.ragged = 0
        self.first: list[list[str]] = []
        self.last: list[list[str]] = []
        self.stats = [_Column() for _ in columns[:MAX_STAT_COLUMNS]]

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], size: int, *, fmt: str) -> "_Table":
        seen: dict[str, None] = {}
        for record in records:
            for key in record:
                if key not in seen and len(seen) < 4 * MAX_STAT_COLUMNS:
                    seen[key] = None
        columns = list(seen)
        table = cls(size, fmt=fmt, columns=columns, header=True)
        for record in records:
            table.add_row([record.get(name) for name in columns],
                          ragged=any(key not in seen for key in record))
        return table

    def add_row(self, cells: list[Any], *, ragged: bool | None = None) -> None:
        self.rows += 1
        if ragged if ragged is not None else len(cells) != len(self.columns):
            self.ragged += 1
        for column, cell in zip(self.stats, cells):
            column.add(cell)
        shown = [_cell_text(cell) for cell in cells[:32]]
        if len(self.first) < _LEVELS[0].rows:
            self.first.append(shown)
        else:
            self.last.append(shown)
            if len(self.last) > _LEVELS[0].last:
                self.last.pop(0)

    def headline(self, detail: _Detail) -> str:
        return f"table, {self.rows} rows x {len(self.columns)} columns"

    def lines(self, detail: _Detail) -> list[str]:
        header = "header row" if self.header else "no header row"
        out = [f"table: {self.rows} rows, {len(self.columns)} columns; {self.fmt}, {header}"]
        names = [_clean(name, 40) for name in self.columns]
        out.append(_label_list("columns", names, len(names), detail))
        numeric = [f"{names[i]} {_clean(r[0], 24)}..{_clean(r[1], 24)}"
                   for i, c in enumerate(self.stats) if (r := c.numeric_range())]
        if numeric:
            out.append(_label_list("numeric min..max", numeric, len(numeric), detail))
        dates = [f"{names[i]} {r[0]}..{r[1]}"
                 for i, c in enumerate(self.stats) if (r := c.date_range())]
        if dates:
            out.append(_label_list("date ranges", dates, len(dates), detail))
        if self.ragged:
            out.append(f"ragged rows: {self.ragged} (not {len(self.columns)} fields)")
        first = min(detail.rows, len(self.first))
        out += _numbered("first rows", [(n + 1, ", ".join(self.first[n]))
                                        for n in range(first)], detail)
        # The last rows we kept, without repeating one already shown.
        kept = len(self.last)
        last = [(self.rows - kept + n + 1, ", ".join(row)) for n, row in enumerate(self.last)]
        last = [item for item in last if item[0] > first][-detail.last:] if detail.last else []
        out += _numbered("last rows", last, detail)
        return out

    def structured(self) -> dict[str, Any]:
        numeric = {}
        dates = {}
        for name, column in zip(self.columns, self.stats):
            if (found := column.numeric_range()) is not None:
                numeric[_cap(name, 80)] = [_cap(found[0], 64), _cap(found[1], 64)]
            if (found := column.date_range()) is not None:
                dates[_cap(name, 80)] = [_cap(found[0], 64), _cap(found[1], 64)]
        return {"format": self.fmt, "rows": self.rows, "column_count": len(self.columns),
                "columns": [_cap(c, 80) for c in self.columns[:MAX_STAT_COLUMNS]],
                "header": self.header, "ragged_rows": self.ragged,
                "numeric": numeric, "dates": dates}
