"""The one bound on per-turn text work.

Every derived view of a turn -- its embedding, its recall terms, its entities --
reads at most :data:`DERIVED_TEXT_CHARS` characters of it: a turn of megabytes then
costs what a long chat message costs, on every path and every assembly.  The whole
text stays stored, searchable through the transcript's inverted index and readable
through context/3 (``peek(text(Turn, Start, Length))``); only what is derived from
it is bounded.  32,000 characters is about 8,000 tokens, far beyond what an
embedding model reads (MiniLM truncates at 256 tokens).
"""
from __future__ import annotations

DERIVED_TEXT_CHARS = 32_000


def derived_text(text: str) -> str:
    """The part of ``text`` that derived views read."""
    return text if len(text) <= DERIVED_TEXT_CHARS else text[:DERIVED_TEXT_CHARS]
