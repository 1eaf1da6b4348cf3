"""Ingestion (SPEC-009 §4): documents to chunks to facts.

:func:`chunk_text` splits a document into fact-sized chunks; :func:`documents`
reads what :meth:`ctxrelay.knowledge.fabric.FactStore.ingest` is given (texts,
files, directories); :func:`ingest` registers each document as a source and
stores its chunks, marking the facts of an earlier version STALE in the same
write.
"""
from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxrelay.errors import CtxRelayError, InvalidArgumentError
from ctxrelay.knowledge.inputs import Encoder, fact_record, progress_bar, sha256
from ctxrelay.knowledge.records import IngestReport
from ctxrelay.storage.interfaces.facts import FactReader

__all__ = ["Chunk", "chunk_text", "documents", "ingest", "IngestSourceError",
           "CHUNK_MAX_TOKENS", "FACT_MIN_TOKENS", "FACT_MAX_TOKENS", "CHUNK_OVERLAP",
           "INGEST_SUFFIXES"]

CHUNK_MAX_TOKENS = 512        # SPEC-009 §4.2
FACT_MIN_TOKENS = 10          # SPEC-009 §2.1
FACT_MAX_TOKENS = 2048        # SPEC-009 §2.1
CHUNK_OVERLAP = 0.10          # SPEC-009 §4.2
INGEST_SUFFIXES = (".md", ".markdown", ".txt")


class IngestSourceError(CtxRelayError):
    """A file or directory given to ingest cannot be read."""

    kind = "ingest_source"


# -- chunking (SPEC-009 §4.2) ------------------------------------------------------

@dataclass(frozen=True)
class Chunk:
    """One chunk of a document: its text and where it came from."""

    text: str
    paragraph: int
    page: int
    section: str | None
    part: int = 0

    @property
    def location(self) -> str:
        where = f"paragraph {self.paragraph}" + (f" part {self.part + 1}" if self.part else "")
        return (f"page {self.page}, " if self.page > 1 else "") + where

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "paragraph": self.paragraph, "page": self.page,
                "section": self.section, "part": self.part, "location": self.location}


_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BLANK_LINES = re.compile(r"\n[ \t]*\n+")
_SENTENCE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z0-9\"'(\[*`-])")


def _count_tokens(text: str) -> int:
    from ctxrelay.text.tokens import count
    return count(text, "cl100k_base").n


def chunk_text(text: str, *, max_tokens: int = CHUNK_MAX_TOKENS,
               min_tokens: int = FACT_MIN_TOKENS, overlap: float = CHUNK_OVERLAP,
               count_tokens: Callable[[str], int] | None = None) -> list[Chunk]:
    """Split a document into fact-sized chunks (SPEC-009 §4.2).

    1. Paragraphs are blocks separated by blank lines; form feeds start pages.
       A Markdown ATX heading (``# ...``) names the section of the paragraphs
       after it and is not a chunk itself.
    2. A paragraph over ``max_tokens`` is split at sentence ends (and a
       sentence over ``max_tokens`` at word boundaries) into parts of at most
       ``max_tokens``.
    3. Adjacent parts of one paragraph overlap: each part after the first
       starts with the last ``overlap`` (10 %) of the previous part's words.
       Paragraphs themselves are natural boundaries and do not overlap.
    4. A paragraph under ``min_tokens`` (SPEC-009 §2.1's minimum of 10) is
       joined to the next paragraph of its section, or to the previous one
       at the end of a section; a section with one short paragraph keeps it.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"chunk_text takes a str, not {type(text).__name__}")
    counter = count_tokens or _count_tokens
    pieces: list[tuple[str, int, int, str | None]] = []   # text, paragraph, page, section
    paragraph = 0
    section: str | None = None
    for page_no, page in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\f"), 1):
        for block in _BLANK_LINES.split(page):
            lines = [ln for ln in block.split("\n")]
            while lines and _HEADING.match(lines[0]):
                section = _HEADING.match(lines[0]).group(2) or section
                lines = lines[1:]
            body = "\n".join(lines).strip()
            if not body:
                continue
            paragraph += 1
            pieces.append((body, paragraph, page_no, section))
    merged: list[list[Any]] = []          # [text, paragraph, page, section, tokens]
    pending: list[Any] | None = None      # a short paragraph waiting for the next one

    def same_place(a: list[Any], b: list[Any]) -> bool:
        return a[2] == b[2] and a[3] == b[3]

    def settle(item: list[Any]) -> None:
        """A short paragraph with no follower in its section joins the previous one."""
        last = merged[-1] if merged else None
        if last is not None and same_place(last, item) and last[4] + item[4] <= max_tokens:
            last[0] += "\n\n" + item[0]
            last[4] += item[4]
        else:
            merged.append(item)

    for body, para, page_no, section in pieces:
        item = [body, para, page_no, section, 0]
        if pending is not None and same_place(pending, item):
            item[0], item[1] = pending[0] + "\n\n" + body, pending[1]
        elif pending is not None:
            settle(pending)
        pending = None
        item[4] = counter(item[0])
        if item[4] < min_tokens:
            pending = item
        else:
            merged.append(item)
    if pending is not None:
        settle(pending)
    out: list[Chunk] = []
    for body, para, page_no, section, n in merged:
        if n <= max_tokens:
            out.append(Chunk(body, para, page_no, section))
            continue
        for part, piece in enumerate(_split_long(body, n, max_tokens, overlap, counter)):
            out.append(Chunk(piece, para, page_no, section, part))
    return out


def _split_long(body: str, n_tokens: int, max_tokens: int, overlap: float,
                counter: Callable[[str], int]) -> list[str]:
    units: list[str] = []
    for sentence in _SENTENCE.split(body):
        sentence = sentence.strip()
        if not sentence:
            continue
        if counter(sentence) <= max_tokens:
            units.append(sentence)
            continue
        words = sentence.split()
        step = max(1, int(len(words) * max_tokens / max(1, counter(sentence)) * 0.9))
        units.extend(" ".join(words[i:i + step]) for i in range(0, len(words), step))
    parts: list[str] = []
    current: list[tuple[str, int]] = []
    size = 0
    for unit in units:
        n = counter(unit)
        if current and size + n > max_tokens:
            parts.append(" ".join(u for u, _ in current))
            current, size = _overlap(current, size, overlap, max_tokens - n, counter)
        current.append((unit, n))
        size += n
    if current:
        parts.append(" ".join(u for u, _ in current))
    return parts


def _overlap(units: list[tuple[str, int]], size: int, overlap: float, room: int,
             counter: Callable[[str], int]) -> tuple[list[tuple[str, int]], int]:
    """The tail of a finished part that starts the next one: whole trailing
    sentences worth at most ``overlap`` of its tokens, else its last words."""
    budget = min(int(overlap * size), room)
    if budget <= 0:
        return [], 0
    tail: list[tuple[str, int]] = []
    used = 0
    for unit, n in reversed(units):
        if used + n > budget:
            break
        tail.insert(0, (unit, n))
        used += n
    if tail:
        return tail, used
    words = units[-1][0].split()
    keep = max(1, int(len(words) * budget / max(1, units[-1][1])))
    text = " ".join(words[-keep:])
    n = counter(text)
    return ([(text, n)], n) if n <= budget else ([], 0)


def documents(items: Any) -> Iterable[dict[str, str]]:
    if isinstance(items, (str, os.PathLike, Mapping)):
        items = [items]
    for item in items:
        if isinstance(item, Mapping) and "path" in item:
            item = Path(item["path"])
        if isinstance(item, os.PathLike):
            yield from _path_documents(Path(item))
        elif isinstance(item, str):
            yield {"text": item, "title": item.strip().split("\n", 1)[0][:80],
                   "uri": f"text:sha256:{sha256(item)}"}
        elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
            text = item["text"]
            yield {"text": text, "title": str(item.get("title") or text.strip()[:80]),
                   "uri": str(item.get("uri") or f"text:sha256:{sha256(text)}")}
        else:
            raise InvalidArgumentError(
                f"ingest takes texts (str), paths (pathlib.Path or {{'path': p}}) or "
                f"{{'text': ..., 'title': ...}} dicts, not {type(item).__name__}")


def _path_documents(path: Path) -> Iterable[dict[str, str]]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file()
                       and p.suffix.lower() in INGEST_SUFFIXES
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
    elif path.is_file():
        files = [path]
    else:
        raise IngestSourceError(f"{path} does not exist; pass an existing file or directory "
                                "(for a text, pass the str itself)")
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise IngestSourceError(f"{f} is not UTF-8 text; convert it (iconv -t utf-8) or "
                                    "leave it out") from None
        except OSError as exc:
            raise IngestSourceError(f"cannot read {f} ({exc.strerror}); check its "
                                    "permissions") from None
        yield {"text": text, "title": f.name, "uri": f.resolve().as_uri()}


# -- ingestion ---------------------------------------------------------------------------

#: ``add(records, vectors, source, supersede) -> new fact ids``: one write
AddFacts = Callable[[Sequence[Mapping[str, Any]], np.ndarray, Mapping[str, Any],
                     Sequence[str]], list[str]]


def ingest(docs: Sequence[Mapping[str, str]], *, namespace: str, source_type: str,
           importance: float | None, ttl: Any, progress: bool | None, facts: FactReader,
           encoder: Encoder, add: AddFacts) -> IngestReport:
    """Store each document of ``docs`` (from :func:`documents`) as a source of facts.

    A document's source id derives from its URI: one whose hash is unchanged adds
    nothing; a changed one adds its chunks and marks the ACTIVE facts of the
    version before STALE in the same write (``add``).
    """
    bar = progress_bar(len(docs), progress, "ingesting", "doc")
    added: list[str] = []
    sources: list[str] = []
    unchanged = updated = stale = 0
    try:
        for doc in docs:
            doc_hash = sha256(doc["text"])
            sid = str(uuid.uuid5(uuid.NAMESPACE_URL, doc["uri"]))
            sources.append(sid)
            old = facts.source(namespace, sid)
            if old is not None and old.document_hash == doc_hash:
                unchanged += 1
            else:
                chunks = chunk_text(doc["text"])
                records = [fact_record(
                    c.text, source=sid, source_location=c.location, source_type=source_type,
                    importance=importance, ttl=ttl,
                    metadata={"section": c.section, "page": c.page,
                              "paragraph": c.paragraph, "part": c.part,
                              "title": doc["title"]}) for c in chunks]
                supersede = [] if old is None else [
                    f.fact_id for f in facts.get(namespace, list(old.fact_ids))
                    if f is not None and f.status == "ACTIVE"]
                src = {"source_id": sid, "title": doc["title"], "uri": doc["uri"],
                       "document_hash": doc_hash,
                       "status": "ACTIVE" if old is None else "UPDATED"}
                vecs = encoder.embed([r["content"] for r in records]) if records else \
                    np.zeros((0, encoder.dim), dtype=np.float32)
                added += add(records, vecs, src, supersede)
                updated += old is not None
                stale += len(supersede)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return IngestReport(namespace, len(docs), len(added), unchanged, updated, stale,
                        tuple(added), tuple(sources))
