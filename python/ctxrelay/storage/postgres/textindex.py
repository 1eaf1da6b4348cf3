"""The transcript's BM25 index in PostgreSQL tables (``postings``, ``term_df``).

The same tokenisation and scoring as the embedded index
(:mod:`ctxrelay.text.bm25`: ``tokenize``, k1, b and idf, which both use),
and the same arithmetic order, so a search returns the same turns with the
same scores on either back end.  Why a postings table rather than
PostgreSQL's full-text search: ``ts_rank`` is not BM25 (no idf, no length
normalisation of this kind), so packs would differ between back ends, and
its stemming and stop words differ from ours; ``bench/backends_bench.py``
has the side-by-side figures where measured.

Terms over 256 UTF-8 bytes are kept as ``"\\x01"`` + a BLAKE2b digest (hex),
as the embedded index does, so one pasted blob cannot make a huge key.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import numpy as np

from ctxrelay.text.bm25 import B, K1, bm25_idf, tokenize

__all__ = ["doc_terms", "term_key", "scores", "index_add", "query_terms", "collect",
           "POSTINGS_OF_TERMS", "ranked"]

_MAX_TERM_BYTES = 256
_U32_MAX = 2**32 - 1


def term_key(term: str) -> str:
    raw = term.encode("utf-8")
    if len(raw) <= _MAX_TERM_BYTES:
        return term
    # \x01 never starts an index term (tokenize keeps \w runs only).
    return "\x01" + hashlib.blake2b(raw, digest_size=16).hexdigest()


def doc_terms(text: str) -> tuple[int, dict[str, int]]:
    """A document's length (index terms) and its term frequencies by term key."""
    counts = Counter(tokenize(text))
    length = min(sum(counts.values()), _U32_MAX)
    return length, {term_key(t): min(tf, _U32_MAX) for t, tf in counts.items()}


def query_terms(query: str) -> list[str]:
    """The distinct term keys of a query, in query order."""
    return list(dict.fromkeys(term_key(t) for t in tokenize(query)))


def index_add(cur: Any, session_num: int, docs: list[tuple[int, int, dict[str, int]]]) -> None:
    """Write the postings and document frequencies of ``docs`` ((turn id, length,
    term frequencies)) in the caller's transaction; one statement each."""
    rows = [(session_num, term, turn_id, tf, length)
            for turn_id, length, terms in docs for term, tf in terms.items()]
    if not rows:
        return
    sess, terms, ids, tfs, lens = (list(col) for col in zip(*rows))
    cur.execute("INSERT INTO postings (session_num, term, turn_id, tf, doclen) "
                "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::int[], %s::int[])",
                (sess, terms, ids, tfs, lens))
    df = Counter(term for _, _, terms_ in docs for term in terms_)
    cur.execute("INSERT INTO term_df (session_num, term, df) "
                "SELECT %s, t, n FROM unnest(%s::text[], %s::int[]) AS u(t, n) "
                "ON CONFLICT (session_num, term) DO UPDATE SET df = term_df.df + EXCLUDED.df",
                (session_num, list(df), list(df.values())))


#: The postings of a query's terms in one session (``s.num``, as a LATERAL part of
#: the session's query): per term its df and its newest ``max_postings`` postings
#: (all with NULL) as three arrays, so a frequent term is one row, not thousands.
#: Parameters: max_postings, the term keys.
POSTINGS_OF_TERMS = (
    "SELECT d.term, d.df, p.ids, p.tfs, p.lens FROM term_df d "
    "CROSS JOIN LATERAL (SELECT array_agg(turn_id) AS ids, array_agg(tf) AS tfs, "
    "  array_agg(doclen) AS lens FROM (SELECT turn_id, tf, doclen FROM postings "
    "  WHERE session_num = d.session_num AND term = d.term "
    "  ORDER BY turn_id DESC LIMIT %s) newest) p "
    "WHERE d.session_num = s.num AND d.term = ANY(%s)")


def collect(rows: list[tuple]) -> dict[str, tuple[int, tuple[list[int], list[int], list[int]]]]:
    """``term -> (df, (turn ids, tfs, doc lengths))`` from rows of :data:`POSTINGS_OF_TERMS`."""
    return {term: (df, (ids, tfs, lens)) for term, df, ids, tfs, lens in rows}


def scores(terms: list[str], found: dict[str, tuple[int, list[tuple[int, int, int]]]],
           doc_count: int, total_length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(turn ids, BM25 scores)`` as the embedded index computes them: each
    document's terms summed in query order, numpy's arithmetic."""
    empty = np.zeros(0, dtype=np.int64), np.zeros(0)
    if not terms or not doc_count:
        return empty
    avgdl = total_length / doc_count
    ids: list[int] = []
    tfs: list[int] = []
    lens: list[int] = []
    idfs: list[np.ndarray] = []
    for term in terms:
        if term not in found:
            continue
        df, (term_ids, term_tfs, term_lens) = found[term]
        # Within a term each turn appears once, so the order of its postings does
        # not change any sum; across terms, query order (as the embedded index).
        ids += term_ids
        tfs += term_tfs
        lens += term_lens
        idfs.append(np.full(len(term_ids), bm25_idf(doc_count, df)))
    if not ids:
        return empty
    tf = np.asarray(tfs, dtype=np.float64)
    length = np.asarray(lens, dtype=np.uint32)
    norm = 1.0 - B + B * (length / avgdl if avgdl else 0.0)
    contrib = np.concatenate(idfs) * (tf * (K1 + 1.0) / (tf + K1 * norm))
    uniq, inverse = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    return uniq, np.bincount(inverse, weights=contrib, minlength=len(uniq))


def ranked(ids: np.ndarray, values: np.ndarray) -> list[tuple[int, float]]:
    """Best first, ties to the newer turn (the larger id)."""
    order = np.lexsort((-ids, -values))
    return list(zip(ids[order].tolist(), values[order].tolist()))
