"""What each kind of tool output states, and how it is rendered (a part of :mod:`ctxrelay.text.summarize`).

One class per kind (binary, text, error, scalar, list, JSON, table): each
takes the facts of an output once, then renders them at any detail level.
"""
from __future__ import annotations

import hashlib
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from ctxrelay.text.summary_format import (
    LEVELS, SCALAR_MAX_CHARS, Detail, Shape, cap_text, cell_text, clean_line, compact_json,
    is_scalar, json_type_name, key_text, label_list, numbered, split_lines)

MAX_STAT_COLUMNS = 64         # columns that get numeric/date statistics
_MAX_WALK = 2000              # JSON nodes visited for lengths and values


# -- numbers and dates -------------------------------------------------------------

# A decimal number as a table cell or scalar holds it.
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                   r"(?:Z|[+-]\d{2}:?\d{2})?)?")


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
            number = as_number(cell)
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


def as_number(cell: Any) -> tuple[Decimal, str] | None:
    """A cell as (exact value, its text) when it is a finite number, else None."""
    if isinstance(cell, bool):
        return None
    if isinstance(cell, int):
        return Decimal(cell), str(cell)
    if isinstance(cell, float):
        return (Decimal(repr(cell)), repr(cell)) if math.isfinite(cell) else None
    if isinstance(cell, str) and len(cell) <= 64 and NUMBER.fullmatch(cell):
        try:
            return Decimal(cell), cell
        except (InvalidOperation, ValueError):
            return None
    return None


# -- JSON shape --------------------------------------------------------------------

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
                if not out.add((", " if index else "") + key_text(key) + ": "):
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
            first = json_type_name(value[0])
            uniform = all(json_type_name(item) == first for item in value[:200])
            if not uniform:
                out.add(f"[mixed \u00d7{len(value)}]")
                return
            out.add("[")
            _shape(value[0], depth - 1, keys, out)
            out.add(f" \u00d7{len(value)}]")
    else:
        out.add(json_type_name(value))


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
                    child = f"{path}.{key_text(key)}" if path else key_text(key)
                    if is_scalar(item):
                        scalars.append((child, item))
                    else:
                        next_queue.append((child, item))
            elif isinstance(node, list):
                lengths.append((path or "(top)", len(node)))
                if node and not is_scalar(node[0]):
                    next_queue.append((f"{path}[0]", node[0]))
        queue = next_queue
    return lengths, scalars


# -- the kinds ---------------------------------------------------------------------

class BinaryShape(Shape):
    """Bytes that are not text: their size and the format their magic number names."""

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

    def headline(self, detail: Detail) -> str:
        return f"binary, {self.size} bytes"

    def lines(self, detail: Detail) -> list[str]:
        out = [f"binary: {self.size} bytes, {self.why}; content not shown",
               f"sha256: {self.sha256}"]
        if self.format:
            out.append(f"format: {self.format} (from magic bytes)")
        return out

    def structured(self) -> dict[str, Any]:
        return {"size": self.size, "sha256": self.sha256, "format": self.format,
                "reason": self.why}


class TextShape(Shape):
    """Plain text (what no other shape claims): head and tail lines, log levels."""

    kind = "text"
    _LEVEL = re.compile(r"\b(FATAL|CRITICAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE)\b")

    def __init__(self, text: str, size: int, *, note: str | None = None,
                 invalid_json: tuple[int, int, str] | None = None) -> None:
        self.size = size
        self.note = note
        self.invalid_json = invalid_json
        self.all_lines = split_lines(text)
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

    def headline(self, detail: Detail) -> str:
        return f"text, {len(self.all_lines)} lines, {self.size} bytes"

    def lines(self, detail: Detail) -> list[str]:
        total = len(self.all_lines)
        out = [f"text: {total} lines, {self.words} words, {self.chars} chars"]
        if self.note:
            out.append("note: " + clean_line(self.note, detail.width) +
                       ("; shown as text" if self.invalid_json else ""))
        if self.levels:
            order = ("FATAL", "CRITICAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
            out.append("log levels: " + ", ".join(
                f"{name} {self.levels[name]}" for name in order if name in self.levels))
        if self.first_error is not None:
            number, line = self.first_error
            out.append(f"first error-level line {number}: " + clean_line(line, detail.width))
        head = min(detail.head, total)
        tail = min(detail.tail, total - head)
        out += numbered("head" if tail else "lines",
                        [(n + 1, self.all_lines[n]) for n in range(head)], detail)
        if tail:
            omitted = total - head - tail
            if omitted:
                out.append(f"  \u2026 {omitted} lines omitted")
            out += numbered("tail", [(n + 1, self.all_lines[n])
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
            data["note"] = cap_text(self.note)
        if self.invalid_json:
            line, col, msg = self.invalid_json
            data["invalid_json"] = {"line": line, "col": col, "msg": cap_text(msg)}
        return data


class ErrorShape(Shape):
    """An error: its line, where it was found, exit code and stack frames."""

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

    def headline(self, detail: Detail) -> str:
        return "error" + (f", exit code {self.exit_code}" if self.exit_code is not None else "")

    def lines(self, detail: Detail) -> list[str]:
        out = ["error: " + clean_line(self.line, detail.width * 2)]
        if self.exit_code is not None:
            out.append(f"exit code: {self.exit_code}")
        if self.frames:
            out.append(f"traceback: {self.frames} frames; innermost: "
                       + clean_line(self.innermost or "", detail.width))
        for item in self.context[: detail.values]:
            out.append("field " + clean_line(item, detail.width))
        total = len(self.output)
        keep = min(total, detail.head + detail.tail)
        if total == 1 and self.output[0].strip() == self.line:
            keep = 0                      # the error line is the whole output
        if keep:
            label = (f"output ({total} lines)" if keep == total
                     else f"output tail (last {keep} of {total} lines)")
            out += numbered(label, [(n + 1, self.output[n])
                                    for n in range(total - keep, total)], detail)
        return out

    def structured(self) -> dict[str, Any]:
        data: dict[str, Any] = {"error_line": cap_text(self.line), "origin": self.origin}
        if self.exit_code is not None:
            data["exit_code"] = self.exit_code
        if self.frames:
            data["frames"] = self.frames
            data["innermost"] = cap_text(self.innermost or "")
        if self.output:
            data["lines"] = len(self.output)
        return data


class ScalarShape(Shape):
    """One scalar value (a JSON scalar or a short one-line output), on one line."""

    kind = "scalar"

    def __init__(self, value: str, size: int, *, type_name: str) -> None:
        self.value = value
        self.size = size
        self.type_name = type_name

    def headline(self, detail: Detail) -> str:
        return f"scalar {self.type_name}"

    def lines(self, detail: Detail) -> list[str]:
        return ["value: " + clean_line(self.value, max(detail.width, SCALAR_MAX_CHARS))]

    def structured(self) -> dict[str, Any]:
        return {"value": cap_text(self.value, SCALAR_MAX_CHARS + 1), "type": self.type_name}


class ListShape(Shape):
    """A list of scalar items (a JSON array, bulleted lines): first and last items."""

    kind = "list"

    def __init__(self, items: list[str], size: int, *, source: str,
                 values: list[Any] | None = None) -> None:
        self.items = items
        self.size = size
        self.source = source
        types: dict[str, int] = {}
        column = _Column()
        for value in (values if values is not None else items):
            name = json_type_name(value) if values is not None else "str"
            types[name] = types.get(name, 0) + 1
            column.add(value)
        self.types = types
        self.range = column.numeric_range() if values is not None else None

    def headline(self, detail: Detail) -> str:
        return f"list, {len(self.items)} items"

    def lines(self, detail: Detail) -> list[str]:
        total = len(self.items)
        if len(self.types) == 1:
            kinds = next(iter(self.types))
        else:
            kinds = "mixed: " + ", ".join(f"{k} {v}" for k, v in self.types.items())
        out = [f"list: {total} items from {self.source}" + (f"; item type {kinds}"
                                                          if total else "")]
        if self.range is not None:
            out.append(f"range: {clean_line(self.range[0], 40)}..{clean_line(self.range[1], 40)}")
        first = min(detail.rows + 2, total)
        out += numbered("first items", [(n + 1, self.items[n]) for n in range(first)], detail)
        last = min(detail.last + 1 if detail.rows else 0, total - first)
        if last:
            out += numbered("last items", [(n + 1, self.items[n])
                                           for n in range(total - last, total)], detail)
        return out

    def structured(self) -> dict[str, Any]:
        data: dict[str, Any] = {"items": len(self.items), "source": self.source,
                                "types": dict(self.types)}
        if self.range is not None:
            data["min"], data["max"] = cap_text(self.range[0]), cap_text(self.range[1])
        return data


class JsonShape(Shape):
    """A JSON object or array: its keys, lengths and scalar values."""

    kind = "json"

    def __init__(self, value: dict[str, Any] | list[Any], size: int) -> None:
        self.value = value
        self.size = size
        self.lengths, self.scalars = _walk(value)

    def headline(self, detail: Detail) -> str:
        if isinstance(self.value, dict):
            return f"JSON object, {len(self.value)} keys"
        return f"JSON array, {len(self.value)} items"

    def lines(self, detail: Detail) -> list[str]:
        value = self.value
        out: list[str] = []
        if isinstance(value, dict):
            described = [f"{key_text(k)} ({self._describe(v)})" for k, v in
                         list(value.items())[: detail.keys]]
            out.append(label_list("keys", described, len(value), detail))
        else:
            types: dict[str, int] = {}
            for item in value:
                name = json_type_name(item)
                types[name] = types.get(name, 0) + 1
            out.append("item types: " + ", ".join(f"{k} {v}" for k, v in types.items()))
        lengths = [f"{path}[{n}]" for path, n in self.lengths if path != "(top)"]
        if lengths:
            out.append(label_list("array lengths", lengths, len(lengths), detail))
        if self.scalars and detail.values:
            shown = [f"{path}={compact_json(v, 40)}" for path, v in self.scalars[: detail.values]]
            out.append(label_list("values", shown, len(self.scalars), detail))
        if detail.depth:
            budget = _Budget(detail.width * 2)
            _shape(value, detail.depth, detail.keys, budget)
            out.append("shape: " + clean_line(budget.text(), detail.width * 2 + 8))
        if isinstance(value, list):
            first = min(detail.rows, len(value))
            out += numbered("first items", [(n + 1, compact_json(value[n], detail.width))
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
        return json_type_name(value)

    def structured(self) -> dict[str, Any]:
        if isinstance(self.value, dict):
            data: dict[str, Any] = {"type": "object", "key_count": len(self.value),
                                    "keys": [cap_text(k, 80) for k in list(self.value)[:64]]}
        else:
            data = {"type": "array", "length": len(self.value)}
        data["array_lengths"] = {cap_text(p, 120): n for p, n in self.lengths[:32]}
        return data


class TableShape(Shape):
    """Rows of columns (CSV, TSV, pipe table, JSON records): columns and sample rows."""

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
    def from_records(cls, records: list[dict[str, Any]], size: int, *, fmt: str) -> "TableShape":
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
        shown = [cell_text(cell) for cell in cells[:32]]
        if len(self.first) < LEVELS[0].rows:
            self.first.append(shown)
        else:
            self.last.append(shown)
            if len(self.last) > LEVELS[0].last:
                self.last.pop(0)

    def headline(self, detail: Detail) -> str:
        return f"table, {self.rows} rows x {len(self.columns)} columns"

    def lines(self, detail: Detail) -> list[str]:
        header = "header row" if self.header else "no header row"
        out = [f"table: {self.rows} rows, {len(self.columns)} columns; {self.fmt}, {header}"]
        names = [clean_line(name, 40) for name in self.columns]
        out.append(label_list("columns", names, len(names), detail))
        numeric = [f"{names[i]} {clean_line(r[0], 24)}..{clean_line(r[1], 24)}"
                   for i, c in enumerate(self.stats) if (r := c.numeric_range())]
        if numeric:
            out.append(label_list("numeric min..max", numeric, len(numeric), detail))
        dates = [f"{names[i]} {r[0]}..{r[1]}"
                 for i, c in enumerate(self.stats) if (r := c.date_range())]
        if dates:
            out.append(label_list("date ranges", dates, len(dates), detail))
        if self.ragged:
            out.append(f"ragged rows: {self.ragged} (not {len(self.columns)} fields)")
        first = min(detail.rows, len(self.first))
        out += numbered("first rows", [(n + 1, ", ".join(self.first[n]))
                                       for n in range(first)], detail)
        # The last rows we kept, without repeating one already shown.
        kept = len(self.last)
        last = [(self.rows - kept + n + 1, ", ".join(row)) for n, row in enumerate(self.last)]
        last = [item for item in last if item[0] > first][-detail.last:] if detail.last else []
        out += numbered("last rows", last, detail)
        return out

    def structured(self) -> dict[str, Any]:
        numeric = {}
        dates = {}
        for name, column in zip(self.columns, self.stats):
            if (found := column.numeric_range()) is not None:
                numeric[cap_text(name, 80)] = [cap_text(found[0], 64), cap_text(found[1], 64)]
            if (found := column.date_range()) is not None:
                dates[cap_text(name, 80)] = [cap_text(found[0], 64), cap_text(found[1], 64)]
        return {"format": self.fmt, "rows": self.rows, "column_count": len(self.columns),
                "columns": [cap_text(c, 80) for c in self.columns[:MAX_STAT_COLUMNS]],
                "header": self.header, "ragged_rows": self.ragged,
                "numeric": numeric, "dates": dates}
