"""How commands print: one JSON document with ``--json``, aligned text otherwise."""
from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence


def plain(value: Any) -> Any:
    """Make ``value`` JSON-serialisable: dataclasses, to_dict(), paths, bytes, tuples."""
    import dataclasses
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        value = to_dict() if callable(to_dict) else dataclasses.asdict(value)
    elif callable(getattr(value, "to_dict", None)):
        value = value.to_dict()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if hasattr(value, "tolist"):                        # numpy scalars and arrays
        return value.tolist()
    return str(value)


def emit_json(data: Any, *, ok: bool = True) -> None:
    """Print ``data`` as the command's one JSON document, with ``"ok"`` first.

    A mapping gets ``"ok": ok`` unless it says ``ok`` itself (``check`` and
    ``doctor`` do: their verdict); anything else is wrapped as ``{"ok", "result"}``.
    """
    doc = plain(data)
    if isinstance(doc, dict):
        doc = {"ok": doc.pop("ok", ok), **doc}
    else:
        doc = {"ok": ok, "result": doc}
    json.dump(doc, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def emit_error(kind: str, message: str, code: int) -> None:
    json.dump({"ok": False, "error": {"kind": kind, "message": message, "exit_code": code}},
              sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def out(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, indent: str = "  ",
          right: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell; column indexes in ``right`` are right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths))]
        lines.append((indent + "  ".join(parts)).rstrip())
    return "\n".join(lines)


def one_line(text: str, width: int = 100) -> str:
    """``text`` on one line, cut to ``width`` characters."""
    flat = " ".join(str(text)[:width * 4].split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def clip(text: str, limit: int, where: str) -> str:
    """``text`` cut to ``limit`` characters, saying how much is cut and ``where`` the rest is."""
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters; {where})"


def yes(flag: Any) -> str:
    return "yes" if flag else "no"


def turn_ranges(ids: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"``."""
    spans: list[str] = []
    start = prev = None
    for i in sorted(ids):
        if start is not None and i != prev + 1:
            spans.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if start is None:
            start = i
        prev = i
    if start is not None:
        spans.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(spans)


def field_lines(fields: Mapping[str, Any], *, skip: Sequence[str] = ()) -> list[str]:
    """``key: value`` lines; dicts and lists as JSON."""
    return [f"{k}: {json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v}"
            for k, v in fields.items() if k not in skip]
