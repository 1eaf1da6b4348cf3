"""Okapi BM25's tokenizer and formula: what every text index (the LMDB one, the
PostgreSQL one) and every reader of index terms (recall, pricing, document mode,
promotion, the CKF graph's labels) agrees on.

Tokenisation (:func:`tokenize`): NFKC-normalise, casefold, take ``\\w+`` runs
(Unicode-aware, so digits and ``_`` belong to words), drop a small English
stopword list (Lucene's).  No stemming: exact word forms keep identifiers and
code names precise, and query and document go through the same function.  A run
of CJK ideographs is one word (no segmentation).

Scoring is Okapi BM25 with k1 = 1.2, b = 0.75 and the non-negative idf
``ln(1 + (N - df + 0.5) / (df + 0.5))``; each distinct query term counts once.
"""
from __future__ import annotations

import math
import re
import unicodedata

__all__ = ["K1", "B", "STOPWORDS", "tokenize", "bm25_idf", "bm25_term"]

K1 = 1.2
B = 0.75

#: Lucene's English stopword set.
STOPWORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such "
    "that the their then there these they this to was will with".split()
)

_WORD = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Index terms of ``text`` in order, with repeats (see the module doc)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [w for w in _WORD.findall(folded) if w not in STOPWORDS]


def bm25_idf(doc_count: int, doc_freq: int) -> float:
    """The non-negative BM25 idf of a term in ``doc_freq`` of ``doc_count`` documents."""
    return math.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5))


def bm25_term(tf: int, doc_len: int, avgdl: float) -> float:
    """The tf part of one term's BM25 score in one document."""
    norm = 1.0 - B + B * (doc_len / avgdl if avgdl else 0.0)
    return tf * (K1 + 1.0) / (tf + K1 * norm)
