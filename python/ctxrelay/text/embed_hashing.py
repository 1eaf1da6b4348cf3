"""The ``hashing`` embedder: signed feature hashing, numpy only (see :mod:`ctxrelay.text.embed`)."""
from __future__ import annotations

import functools
import math
import unicodedata
import zlib
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.text.embed_core import (VECTORS, WORD, check_texts, check_thresholds,
                                      normalise_rows)

# Calibrated by bench/calibrate_embedders.py on examples/conversations/etcd_ops.jsonl
# and the LoCoMo dev conversations; docs/embedders.md has the distributions.
_HASHING_THRESHOLDS: Mapping[str, float] = {"thread_join": 0.26, "topic_same": 0.14, "edge": 0.30}

# English function words and chat filler: they carry no topic, and with them
# every pair of chat turns looks alike ("that's", "so", "you", ...).
STOPWORDS = frozenset("""
a about above after again all also am an and any are aren as at be been before being
below between both but by can could couldn d did didn do does doesn doing don down
during each else few for from further get got had hadn has hasn have haven having he
her here hers him his how i if in into is isn it its itself just ll let lets m may me
might more most must my no nor not now of off oh ok okay on once only or other our ours
out over own re s same shall she should shouldn so some such t than that the their
theirs them then there these they this those through to too under until up very ve
was wasn we were weren what when where which while who whom whose why will with won
would wouldn yeah yes you your yours hey hi
""".split())


@functools.lru_cache(maxsize=1 << 16)
def _slot(token: str, dim: int) -> tuple[int, float]:
    h = zlib.crc32(token.encode("utf-8"))
    return h % dim, (1.0 if (h >> 31) & 1 else -1.0)


@dataclass(frozen=True)
class HashingEmbedder:
    """Signed feature hashing of content words, word bigrams and character n-grams.

    Deterministic across processes and machines (CRC32 of the UTF-8 feature,
    never Python's salted ``hash``), no model, no download.  Text is NFKC
    normalised and case-folded; ``\\w+`` words minus English stopwords are the
    content words.  Words and bigrams carry topic; character n-grams of each
    word make inflections and typos land near each other.  Each hashed count
    ``x`` is damped to ``sign(x) * log1p(|x|)`` (``sublinear``) so a long turn
    is not dominated by its most repeated word.

    ``thresholds`` are calibrated for the default parameters; pass your own
    after re-running ``bench/calibrate_embedders.py`` when you change them.
    """

    dim: int = 1024
    char_ngrams: tuple[int, ...] = (3, 4)
    word_weight: float = 1.0
    bigram_weight: float = 0.7
    char_weight: float = 0.35
    stopwords: bool = True
    sublinear: bool = True
    thresholds: dict[str, float] = field(default_factory=lambda: dict(_HASHING_THRESHOLDS),
                                         hash=False)
    model_id: str = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or not 16 <= self.dim <= 1 << 20:
            raise InvalidArgumentError(f"dim must be an int in [16, 1048576], not {self.dim!r}")
        ngrams = tuple(self.char_ngrams)
        if any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 8 for n in ngrams):
            raise InvalidArgumentError(
                f"char_ngrams must be ints in [1, 8] (e.g. (3, 4)), not {self.char_ngrams!r}")
        for name in ("word_weight", "bigram_weight", "char_weight"):
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
                raise InvalidArgumentError(f"{name} must be a finite number >= 0, not {w!r}")
        object.__setattr__(self, "char_ngrams", ngrams)
        object.__setattr__(self, "thresholds", check_thresholds(self.thresholds, "HashingEmbedder"))
        object.__setattr__(self, "model_id", self._model_id())

    def _model_id(self) -> str:
        # The id names the vector space: any parameter that changes a vector changes it.
        base = f"hashing-v1-{self.dim}"
        params = (self.char_ngrams, float(self.word_weight), float(self.bigram_weight),
                  float(self.char_weight), self.stopwords, self.sublinear)
        if params == ((3, 4), 1.0, 0.7, 0.35, True, True):
            return base
        return f"{base}-{zlib.crc32(repr(params).encode()):08x}"

    def _features(self, text: str) -> tuple[list[int], list[float]]:
        words = WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        if self.stopwords:
            words = [w for w in words if w not in STOPWORDS]
        idx: list[int] = []
        val: list[float] = []
        dim = self.dim

        def add(token: str, weight: float) -> None:
            i, sign = _slot(token, dim)
            idx.append(i)
            val.append(sign * weight)

        for w in words:
            add("w:" + w, self.word_weight)
            padded = f"<{w}>"
            for n in self.char_ngrams:
                for i in range(max(1, len(padded) - n + 1)):
                    add(f"c{n}:" + padded[i:i + n], self.char_weight)
        for a, b in zip(words, words[1:]):
            add(f"b:{a} {b}", self.bigram_weight)
        return idx, val

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return VECTORS.embed(self.model_id, check_texts(texts), self.dim, self._embed)

    def _embed(self, items: list[str]) -> np.ndarray:
        m = np.zeros((len(items), self.dim), dtype=np.float64)
        for row, text in enumerate(items):
            idx, val = self._features(text)
            if idx:
                m[row] = np.bincount(idx, weights=val, minlength=self.dim)
        if self.sublinear:
            m = np.sign(m) * np.log1p(np.abs(m))
        return normalise_rows(m)
