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

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.text.summary_detect import (  # noqa: F401  (limits, importable from here)
    ERROR_HEAD_LINES, ERROR_TAIL_LINES, MAX_STRUCTURED_CHARS, analyze)
from ctxrelay.text.summary_format import (  # noqa: F401
    FOOTER, LEVELS, MAX_TOOL_CHARS, SCALAR_MAX_CHARS, Shape, footer_line, header_line)
from ctxrelay.text.summary_shapes import MAX_STAT_COLUMNS  # noqa: F401
from ctxrelay.text.tokens import TokenCount, count

__all__ = ["KINDS", "DEFAULT_MAX_TOKENS", "MIN_MAX_TOKENS", "FOOTER", "Summary",
           "summarize", "header_line", "footer_line"]
KINDS: tuple[str, ...] = ("table", "json", "list", "scalar", "text", "error", "binary")
DEFAULT_MAX_TOKENS = 256
MIN_MAX_TOKENS = 64           # the header and footer alone need about 35 tokens


# -- the result --------------------------------------------------------------------

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


# -- the entry point ---------------------------------------------------------------

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
    shape = analyze(raw)
    text, tokens = _fit(shape, tool_name, scratch_id, max_tokens, model)
    return Summary(text=text, kind=shape.kind, tokens=tokens.n, exact=tokens.exact,
                   structured=shape.structured())


def _fit(shape: "Shape", tool_name: str, scratch_id: str | None, cap: int,
         model: str) -> tuple[str, TokenCount]:
    """The most detailed rendering within ``cap`` tokens."""
    footer = FOOTER

    def measure(header: str, lines: list[str]) -> tuple[str, TokenCount]:
        text = "\n".join([header, *lines, footer])
        return text, count(text, model)

    for detail in LEVELS:
        header = header_line(scratch_id, tool_name, shape.headline(detail))
        text, tokens = measure(header, shape.lines(detail))
        if tokens.n <= cap:
            return text, tokens
    # Even the tersest rendering is too long: keep lines while they fit.
    detail = LEVELS[-1]
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
