"""A BM25 inverted index kept inside an LMDB environment.

The index is generic: it maps ``(namespace, doc_id, text)`` to postings so any
store can use it (the transcript store uses the session number as namespace and
the turn id as doc id; a fact store can use its own namespaces).  It never opens
transactions itself: every call takes the caller's ``lmdb.Transaction``, so a
document and its postings are written in the caller's one write transaction,
all or nothing.

Sub-databases (their names start with ``prefix``, default ``"ix"``):

``<prefix>.post``  dupsort + dupfixed.  Key: namespace (u64 big-endian) + term
                   (UTF-8; terms over 256 bytes are replaced by a 0xFF byte and
                   a 16-byte BLAKE2b digest, as LMDB keys are limited to 511
                   bytes).  Values: 16 bytes, doc_id (u64) + term frequency
                   (u32) + document length (u32), all big-endian, so the
                   duplicates of one term sort by doc_id.  Keeping the document
                   length in the posting lets a query read only the postings of
                   its own terms.
``<prefix>.docs``  Key: namespace + doc_id.  Value: document length (u32).
                   Guards against indexing a doc twice and makes removal exact.
``<prefix>.ns``    Key: namespace.  Value: document count (u64) + total length
                   (u64), from which the average document length comes.

Tokenisation and scoring are :mod:`ctxrelay.text.bm25`'s:
Okapi BM25 with k1 = 1.2, b = 0.75, each distinct query term counted once.
A document with no index terms still counts in N and in the average length.
Ties are broken by the higher doc_id (for transcripts: the more recent turn).
"""
from __future__ import annotations

import hashlib
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # numpy loads on the first ranked query: listing or reading turns never needs it
    import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.memo import keep
from ctxrelay.storage.lmdb.base import prefixed
from ctxrelay.storage.lmdb.bounds import dup_block
from ctxrelay.text.bm25 import B, K1, bm25_idf, bm25_term, tokenize

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_POSTING = struct.Struct(">QII")      # doc_id, term frequency, document length
_POSTING_FIELDS = [("doc", ">u8"), ("tf", ">u4"), ("len", ">u4")]   # numpy dtype of _POSTING
_KEPT_TERMS = 512        # terms whose postings are kept (<= 16 KB each at 1,024)
_NS_STATS = struct.Struct(">QQ")      # document count, total length
_MAX_TERM_BYTES = 256                 # LMDB keys are at most 511 bytes
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1

#: Number of named sub-databases one index needs (for ``lmdb.open(max_dbs=)``).
DB_COUNT = 3


@dataclass
class IndexRecords:
    """Every record one namespace of an index holds (or should hold): postings as
    (key, value) pairs, document lengths by key, and the packed totals (None:
    no totals record).  Compared and rewritten by a store's derived-data check."""

    postings: set[tuple[bytes, bytes]]
    docs: dict[bytes, bytes]
    totals: bytes | None


@dataclass(frozen=True)
class IndexStats:
    """Per-namespace counters: how many docs, how many terms in all."""

    doc_count: int
    total_length: int

    @property
    def avgdl(self) -> float:
        return self.total_length / self.doc_count if self.doc_count else 0.0


class TextIndex:
    """BM25 postings in an LMDB environment; see the module doc for the layout.

    Open it once per environment, inside a transaction that can create the
    sub-databases (a write transaction) or, for a read-only environment, any
    transaction with ``create=False``.
    """

    def __init__(self, env: Any, *, txn: Any = None, prefix: str = "ix",
                 create: bool = True) -> None:
        post, docs, ns = self.db_names(prefix)
        while hasattr(txn, "raw"):              # a Framed/BoundedTxn wraps the lmdb one
            txn = txn.raw
        self._names = (post, docs, ns)
        self._post = env.open_db(post, txn=txn, create=create, dupsort=True, dupfixed=True)
        self._docs = env.open_db(docs, txn=txn, create=create)
        self._ns = env.open_db(ns, txn=txn, create=create)
        # A term's raw postings as read in a snapshot, by (snapshot id, namespace, term,
        # bound): a conversation asks about the same words turn after turn, and reading
        # and verifying a frequent term's 1,024 postings was most of a search.  Only
        # read-only snapshots fill it (see search), so an id names one unchanging state.
        self._kept: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._kept_lock = threading.Lock()

    def handles(self) -> dict[bytes, Any]:
        """The index's database handles by name (for the store's messages)."""
        return dict(zip(self._names, (self._post, self._docs, self._ns)))

    @staticmethod
    def db_names(prefix: str = "ix") -> tuple[bytes, bytes, bytes]:
        """The names of the sub-databases an index with ``prefix`` uses."""
        name = prefix.encode("utf-8")
        return name + b".post", name + b".docs", name + b".ns"

    # -- writing ---------------------------------------------------------

    def add(self, txn: Any, namespace: int, doc_id: int, text: str) -> int:
        """Index ``text`` as document ``doc_id``; returns its length in terms.

        Raises InvalidArgumentError if the document is already indexed (its
        postings would be counted twice): remove it first.
        """
        doc_key = _doc_key(namespace, doc_id)
        if txn.get(doc_key, db=self._docs) is not None:
            raise InvalidArgumentError(
                f"document {doc_id} of namespace {namespace} is already indexed; "
                "call remove() with its old text before indexing it again")
        length, postings = _postings(namespace, doc_id, text)
        for key, value in postings:
            txn.put(key, value, db=self._post, dupdata=True)
        txn.put(doc_key, _U32.pack(length), db=self._docs)
        self._bump(txn, namespace, 1, length)
        return length

    def remove(self, txn: Any, namespace: int, doc_id: int, text: str) -> bool:
        """Drop document ``doc_id``, which must have been indexed with ``text``.

        Returns False if the document is not indexed.  Raises
        InvalidArgumentError if ``text`` is not the text it was indexed with.
        """
        doc_key = _doc_key(namespace, doc_id)
        raw = txn.get(doc_key, db=self._docs)
        if raw is None:
            return False
        length, postings = _postings(namespace, doc_id, text)
        cursor = txn.cursor(db=self._post)
        # Check every posting before deleting any, so a wrong text changes nothing.
        if _U32.unpack(raw)[0] != length or not all(
                cursor.set_key_dup(key, value) for key, value in postings):
            raise InvalidArgumentError(
                f"document {doc_id} of namespace {namespace} was indexed with a "
                "different text; pass the exact text it was added with")
        for key, value in postings:
            cursor.set_key_dup(key, value)
            cursor.delete()
        txn.delete(doc_key, db=self._docs)
        self._bump(txn, namespace, -1, -length)
        return True

    # -- derived-data check and repair -----------------------------------------

    @staticmethod
    def expected(namespace: int, docs: Iterable[tuple[int, str]]) -> IndexRecords:
        """The records :meth:`add` would write for ``docs`` ((doc_id, text) pairs)
        added one by one to an empty namespace."""
        postings: set[tuple[bytes, bytes]] = set()
        lengths: dict[bytes, bytes] = {}
        count = total = 0
        for doc_id, text in docs:
            length, plist = _postings(namespace, doc_id, text)
            postings.update(plist)
            lengths[_doc_key(namespace, doc_id)] = _U32.pack(length)
            count, total = count + 1, total + length
        return IndexRecords(postings, lengths, _NS_STATS.pack(count, total))

    def records(self, txn: Any, namespace: int) -> IndexRecords:
        """The records stored for ``namespace``."""
        prefix = _U64.pack(namespace)
        return IndexRecords(
            postings=set(prefixed(txn, self._post, prefix, dups=True)),
            docs=dict(prefixed(txn, self._docs, prefix)),
            totals=txn.get(prefix, db=self._ns))

    def replace_records(self, txn: Any, namespace: int, have: IndexRecords,
                        want: IndexRecords) -> None:
        """Rewrite ``namespace`` from ``have`` (what :meth:`records` read) to ``want``."""
        for key in {k for k, _ in have.postings}:
            txn.delete(key, db=self._post)            # every duplicate of the key
        for key, value in sorted(want.postings):
            txn.put(key, value, db=self._post, dupdata=True)
        for key in have.docs:
            txn.delete(key, db=self._docs)
        for key, value in want.docs.items():
            txn.put(key, value, db=self._docs)
        prefix = _U64.pack(namespace)
        if want.totals is None:
            txn.delete(prefix, db=self._ns)
        else:
            txn.put(prefix, want.totals, db=self._ns)

    @staticmethod
    def differences(want: IndexRecords, have: IndexRecords, *, doc: str = "document"
                    ) -> list[str]:
        """Human-readable disagreements between two namespaces' records (``doc``
        names what a document is to the caller, e.g. "turn")."""
        problems: list[str] = []
        missing = want.postings - have.postings
        extra = have.postings - want.postings
        if missing:
            ids = {_U64.unpack(v[:8])[0] for _, v in missing}
            problems.append(f"search index lacks {len(missing)} posting(s) of {doc}(s) "
                            f"{sorted(ids)[:10]}")
        if extra:
            ids = {_U64.unpack(v[:8])[0] for _, v in extra}
            problems.append(f"search index holds {len(extra)} posting(s) no stored {doc} "
                            f"gives ({doc} ids {sorted(ids)[:10]})")
        if want.docs != have.docs:
            wrong = sorted(k for k in set(want.docs) | set(have.docs)
                           if want.docs.get(k) != have.docs.get(k))
            shown = ", ".join(str(_U64.unpack(k[8:16])[0]) for k in wrong[:10])
            problems.append(f"search index document lengths disagree for {doc}(s) {shown}")
        # No totals record reads as (0, 0) (see stats()): an empty namespace agrees.
        shown, expected = _totals(have), _totals(want)
        if shown != expected:
            problems.append(f"search index totals are {shown} (documents, terms) but the "
                            f"{doc}s give {expected}")
        return problems

    def _bump(self, txn: Any, namespace: int, docs: int, length: int) -> None:
        stats = self.stats(txn, namespace)
        packed = _NS_STATS.pack(stats.doc_count + docs, stats.total_length + length)
        txn.put(_U64.pack(namespace), packed, db=self._ns)

    # -- reading ---------------------------------------------------------

    def stats(self, txn: Any, namespace: int) -> IndexStats:
        raw = txn.get(_U64.pack(namespace), db=self._ns)
        if raw is None:
            return IndexStats(0, 0)
        return IndexStats(*_NS_STATS.unpack(raw))

    def document_length(self, txn: Any, namespace: int, doc_id: int) -> int | None:
        raw = txn.get(_doc_key(namespace, doc_id), db=self._docs)
        return None if raw is None else _U32.unpack(raw)[0]

    def search(self, txn: Any, namespace: int, query: str, *, k: int = 10,
               accept: Callable[[int], bool] | None = None,
               max_postings: int | None = None,
               snapshot: int | None = None) -> list[tuple[int, float]]:
        """The ``k`` best ``(doc_id, score)`` pairs for ``query``, best first.

        Reads only the postings of the query's terms.  ``accept``, if given,
        filters doc ids; it is called in rank order and only until ``k`` docs
        are accepted, so a caller that must load a document to decide pays for
        few loads.  ``snapshot``: the id of ``txn`` when it is a read-only
        transaction (never a write one, whose id the next snapshot reuses): the
        terms' postings read in it are kept for later searches in the same state.
        """
        import numpy as np
        ids, scores = self._scores(txn, namespace, query, max_postings, snapshot)
        # Best first, ties: the newest document (the larger id).
        if accept is None:
            if 0 < k < len(scores):
                # Only the documents scoring at least the k-th best can be among the
                # k best: sort those (ties at the k-th included), not all of them.
                kth = np.partition(scores, len(scores) - k)[len(scores) - k]
                top = np.flatnonzero(scores >= kth)
                order = top[np.lexsort((-ids[top], -scores[top]))][:k]
            else:
                order = np.lexsort((-ids, -scores))[:k]
            return list(zip(ids[order].tolist(), scores[order].tolist()))
        order = np.lexsort((-ids, -scores))
        accepted: list[tuple[int, float]] = []
        for doc_id, score in zip(ids[order].tolist(), scores[order].tolist()):
            if len(accepted) >= k:
                break
            if accept(doc_id):
                accepted.append((doc_id, score))
        return accepted

    def _scores(self, txn: Any, namespace: int, query: str,
                max_postings: int | None = None,
                snapshot: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """BM25 scores of the documents holding a query term: ``(doc ids, scores)``.

        With ``max_postings`` each term contributes its newest postings only
        (the largest doc ids): a frequent term's list then costs a bounded read
        however long the history grows, while rare, discriminative terms,
        whose lists are short, are read whole.  idf still uses the full
        document frequency.  The arithmetic is numpy's over the raw postings
        (a query reads thousands of them); each document's terms are summed
        in query order, as :func:`bm25_term` would one by one.
        """
        import numpy as np
        terms = list(dict.fromkeys(tokenize(query)))   # distinct, query order
        stats = self.stats(txn, namespace)
        empty = np.zeros(0, dtype=np.int64), np.zeros(0)
        if not terms or not stats.doc_count:
            return empty
        avgdl = stats.avgdl
        prefix = _U64.pack(namespace)
        cursor = txn.cursor(db=self._post)
        doc_parts: list[np.ndarray] = []
        contrib_parts: list[np.ndarray] = []
        for term in terms:
            key = (snapshot, namespace, term, max_postings)
            found = self._kept.get(key) if snapshot is not None else None
            if found is None:
                if not cursor.set_key(prefix + _term_bytes(term)):
                    found = _NO_POSTINGS
                else:
                    df = cursor.count()
                    newest = max_postings if max_postings is not None and df > max_postings \
                        else None
                    found = _term_scores(dup_block(cursor, _POSTING.size, newest=newest),
                                         bm25_idf(stats.doc_count, df), avgdl)
                if snapshot is not None:
                    with self._kept_lock:
                        keep(self._kept, key, found, _KEPT_TERMS)
            if len(found[0]):
                doc_parts.append(found[0])
                contrib_parts.append(found[1])
        if not doc_parts:
            return empty
        ids, inverse = _unique_runs(np, np.concatenate(doc_parts))
        return ids, np.bincount(inverse, weights=np.concatenate(contrib_parts),
                                minlength=len(ids))


def _unique_runs(np: Any, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(docs, return_inverse=True)`` for ``docs`` made of a few ascending
    runs (each term's postings are in doc id order): a stable sort merges the runs
    (timsort) where unique's quicksort sorts from scratch; the answer is the same."""
    perm = np.argsort(docs, kind="stable")
    ordered = docs[perm]
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(len(docs), dtype=np.intp)
    inverse[perm] = np.cumsum(first) - 1
    return ordered[first], inverse


#: What a term without postings contributes (kept like any other term's scores).
_NO_POSTINGS: tuple[Any, Any] = ((), ())


def _term_scores(raw: bytes, idf: float, avgdl: float) -> tuple[np.ndarray, np.ndarray]:
    """One term's postings (``raw``, packed) as doc ids and their BM25 contributions:
    numpy's arithmetic over the whole list, kept per snapshot (its idf and average
    document length are the snapshot's)."""
    import numpy as np
    post = np.frombuffer(raw, dtype=np.dtype(_POSTING_FIELDS))
    tf = post["tf"].astype(np.float64)
    norm = 1.0 - B + B * (post["len"] / avgdl if avgdl else 0.0)
    return post["doc"].astype(np.int64), idf * (tf * (K1 + 1.0) / (tf + K1 * norm))


def _totals(records: IndexRecords) -> tuple[int, int]:
    return (0, 0) if records.totals is None else _NS_STATS.unpack(records.totals)


def _doc_key(namespace: int, doc_id: int) -> bytes:
    if not (0 <= namespace <= _U64_MAX and 0 <= doc_id <= _U64_MAX):
        raise InvalidArgumentError(
            f"namespace {namespace!r} and doc_id {doc_id!r} must be integers in "
            f"0..{_U64_MAX}; pass unsigned 64-bit ids")
    return _U64.pack(namespace) + _U64.pack(doc_id)


def _postings(namespace: int, doc_id: int, text: str) -> tuple[int, list[tuple[bytes, bytes]]]:
    """A document's length and its (key, value) postings."""
    counts = Counter(tokenize(text))
    length = min(sum(counts.values()), _U32_MAX)
    prefix = _U64.pack(namespace)
    return length, [
        (prefix + _term_bytes(term), _POSTING.pack(doc_id, min(tf, _U32_MAX), length))
        for term, tf in counts.items()]


def _term_bytes(term: str) -> bytes:
    raw = term.encode("utf-8")
    if len(raw) <= _MAX_TERM_BYTES:
        return raw
    # 0xFF never starts a UTF-8 sequence, so digests cannot equal a short term.
    return b"\xff" + hashlib.blake2b(raw, digest_size=16).digest()
