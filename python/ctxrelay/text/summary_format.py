"""How the lines of a tool-output summary are written (a part of :mod:`ctxrelay.text.summarize`).

The detail levels, the escaping that keeps tool output on its own line, the
header and footer, the compact text of values, and :class:`Shape`, the base
of every kind's rendering.
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

SCALAR_MAX_CHARS = 200
MAX_TOOL_CHARS = 48           # of the tool name shown in the header


# -- detail levels -----------------------------------------------------------------

@dataclass(frozen=True)
class Detail:
    """How much a rendering shows; :data:`LEVELS` goes from most to least."""

    rows: int      # sample rows / first items
    last: int      # last rows / last items
    head: int      # text head lines; error tail lines = head + tail
    tail: int      # text tail lines
    width: int     # characters per line, after escaping
    keys: int      # keys / columns listed
    depth: int     # JSON shape depth
    values: int    # scalar values shown


# The detail levels a summary tries, from most to least, until it fits.
LEVELS = (
    Detail(rows=5, last=2, head=8, tail=5, width=160, keys=24, depth=3, values=8),
    Detail(rows=3, last=1, head=5, tail=3, width=120, keys=16, depth=2, values=5),
    Detail(rows=2, last=1, head=3, tail=2, width=90, keys=10, depth=1, values=3),
    Detail(rows=1, last=0, head=2, tail=1, width=64, keys=6, depth=1, values=2),
    Detail(rows=0, last=0, head=1, tail=0, width=48, keys=4, depth=0, values=1),
)


# -- escaping ----------------------------------------------------------------------

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


def clean_line(value: str, width: int) -> str:
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


def cap_text(value: str, limit: int = 200) -> str:
    """A string for ``structured``: cut to ``limit`` chars, lone surrogates replaced."""
    value = value if len(value) <= limit else value[: limit - 1] + "\u2026"
    return value.encode("utf-8", "replace").decode("utf-8")


# -- header and footer -------------------------------------------------------------

def header_line(scratch_id: str | None, tool_name: str, headline: str, *,
                tool_chars: int = MAX_TOOL_CHARS) -> str:
    """``[tool output <id> from <tool>: <headline>]`` (the id part left out if None)."""
    ident = f" {clean_line(scratch_id, 64)}" if scratch_id else ""
    tool = clean_line(tool_name, tool_chars) if tool_chars > 0 else "\u2026"
    return f"[tool output{ident} from {tool}: {headline}]"


FOOTER = "[end tool output]"


def footer_line() -> str:
    """The last line of every summary (blocks cannot nest, so it needs no id)."""
    return FOOTER


# -- lines and values --------------------------------------------------------------

def split_lines(text: str) -> list[str]:
    """``text``'s lines (``\r\n`` as ``\n``; no empty last line for a final newline)."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def is_scalar(value: Any) -> bool:
    """Whether a JSON value is a scalar (null, string, number or boolean)."""
    return value is None or isinstance(value, (str, int, float, bool))


def json_type_name(value: Any) -> str:
    """A JSON value's type name: null, bool, int, float, str, object or array."""
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


def json_scalar_text(value: Any) -> str:
    """A JSON scalar as text: a string as is, anything else as compact JSON."""
    return value if isinstance(value, str) else compact_json(value, 400)


def compact_json(value: Any, limit: int) -> str:
    """Compact JSON of ``value``, cut to about ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def key_text(key: str, width: int = 32) -> str:
    """A JSON key for display: bare when it is an identifier, else quoted and escaped."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", key):
        return key if len(key) <= width else key[: width - 1] + "\u2026"
    return clean_line(json.dumps(key, ensure_ascii=False), width)


def cell_text(value: Any) -> str:
    """A table cell as text: empty for null, a string as is, else compact JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else compact_json(value, 200)


# -- shapes ------------------------------------------------------------------------

class Shape:
    """What a tool output is: its headline, its lines at a :class:`Detail`, its structured form."""

    kind = "text"

    def headline(self, detail: Detail) -> str:
        raise NotImplementedError

    def lines(self, detail: Detail) -> list[str]:
        raise NotImplementedError

    def structured(self) -> dict[str, Any]:
        raise NotImplementedError


def label_list(label: str, items: list[str], total: int, detail: Detail) -> str:
    """``label: item, item, ...`` cut to the detail's count, with how many more."""
    shown = items[: detail.keys]
    more = f", \u2026 (+{total - len(shown)} more)" if total > len(shown) else ""
    return clean_line(f"{label}: " + ", ".join(shown), detail.width * 2) + more


def numbered(label: str, rows: list[tuple[int, str]], detail: Detail) -> list[str]:
    """``label:`` and the rows, each as ``  n| row`` on one line."""
    if not rows:
        return []
    return [f"{label}:"] + [f"  {n}| " + clean_line(row, detail.width) for n, row in rows]
