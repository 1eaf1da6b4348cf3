"""Cold recall: which earlier turns a new message is about.

A question about the past of a conversation is rarely answered by the
single best-matching turn: the answer sits next to the matching turn, in
the same sitting, said by the person the question names, on the day it
names.  The score of an earlier turn therefore combines (constants chosen
on three LoCoMo conversations, checked on two held out, see
bench/locomo.py):

1. lexical: BM25 (k1 1.2, b 0.9) over Snowball-stemmed index terms; the
   query drops the participants' names and question words;
2. dense: cosine with the message (names removed), min-max normalised;
   fused as ``bm25 / max + 1.5 * dense``;
3. date: a message naming a date or month multiplies by
   ``1 + closeness`` of the turn's day (``exp(-gap_days / 7)``);
4. speaker: a message naming exactly one participant multiplies that
   participant's turns by 5;
5. neighbours: ``+ 0.25 * max`` of the adjacent turns' scores (the turns
   two away count half), within one sitting;
6. sitting: ``+ 0.5 * mean`` of the three best scores of the turn's
   sitting (a pause of more than an hour starts a new sitting, or a
   ``session`` number in the turn's metadata says so).

The work is bounded: the latest ``HORIZON`` turns of a session are held
in a per-process index that grows with new turns; older turns are
reached through the store's inverted index (and ``context/3``).
"""
from __future__ import annotations

import calendar
import contextlib
import datetime as dt
import functools
import math
import re
import threading
from array import array
from collections import Counter, OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Sequence

import numpy as np
import snowballstemmer

from ctxrelay.retrieval.prepared import prepared
from ctxrelay.text.bm25 import tokenize
from ctxrelay.types import Turn
from ctxrelay.text.bounds import derived_text

HORIZON = 2000
SITTING_GAP_S = 3600.0
K1, B = 1.2, 0.9
W_DENSE = 1.5
W_DATE, DATE_TAU_DAYS = 1.0, 7.0
W_SPEAKER = 4.0
W_NEIGHBOUR, NEIGHBOUR_WINDOW = 0.25, 2
W_SITTING, SITTING_TOP = 0.5, 3
_SESSIONS_CACHED = 8

QUESTION_WORDS = frozenset(
    "what when where who whom whose which why how did does do is was were are has have had "
    "would could should can may might".split())

_stemmer = snowballstemmer.stemmer("english")
_stem_lock = threading.Lock()      # the generated stemmer keeps state between calls


def analyze(text: str) -> list[str]:
    """Stemmed index terms of ``text`` (the store's tokenizer, then Snowball)."""
    return [_stem(w) for w in tokenize(text)]


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    # A conversation repeats its vocabulary: each distinct word is stemmed once.
    with _stem_lock:
        return _stemmer.stemWord(word)


def strip_names(text: str, names: Sequence[str]) -> str:
    """``text`` without the given names (and their possessive ``'s``)."""
    names = [n for n in names if n]
    if not names:
        return text
    pattern = r"\b(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")(?:'s)?\b"
    return re.sub(r"\s+", " ", re.sub(pattern, " ", text, flags=re.IGNORECASE)).strip()


# -- dates named in a message ------------------------------------------------------------

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MONTHS["sept"] = 9
_M = (r"(january|february|march|april|may|june|july|august|september|october|november|december"
      r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)")
_DATE_PATTERNS = [
    (re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _M + r",?\s+(\d{4})\b", re.I), "dmy"),
    (re.compile(r"\b" + _M + r"\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b", re.I), "mdy"),
    (re.compile(r"\b" + _M + r",?\s+(\d{4})\b", re.I), "my"),
    (re.compile(r"\b(?:in|during|since|by|of|early|late|mid)\s+" + _M + r"\b", re.I), "m"),
    (re.compile(r"\b((?:19|20)\d\d)\b"), "y"),
]


@dataclass(frozen=True)
class DateMention:
    """A date, month or year a message names: a day interval, or a month of any year."""

    start: dt.date | None
    end: dt.date | None
    month: int | None = None


def date_mentions(text: str) -> list[DateMention]:
    """Dates ``text`` names; the most specific pattern wins an overlapping span."""
    out: list[DateMention] = []
    used: list[tuple[int, int]] = []
    for pattern, kind in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if any(a < m.end() and m.start() < b for a, b in used):
                continue
            g = m.groups()
            try:
                if kind == "dmy":
                    day = dt.date(int(g[2]), _MONTHS[g[1].lower()], int(g[0]))
                    found = DateMention(day, day)
                elif kind == "mdy":
                    day = dt.date(int(g[2]), _MONTHS[g[0].lower()], int(g[1]))
                    found = DateMention(day, day)
                elif kind == "my":
                    y, mo = int(g[1]), _MONTHS[g[0].lower()]
                    found = DateMention(dt.date(y, mo, 1), dt.date(y, mo, calendar.monthrange(y, mo)[1]))
                elif kind == "m":
                    found = DateMention(None, None, _MONTHS[g[0].lower()])
                else:
                    y = int(g[0])
                    found = DateMention(dt.date(y, 1, 1), dt.date(y, 12, 31))
            except (ValueError, KeyError):
                continue                      # "31 February 2023" names no day
            used.append((m.start(), m.end()))
            out.append(found)
    return out


def date_closeness(mentions: Sequence[DateMention], day: dt.date | None) -> float:
    """1 inside a named interval (or month), decaying with the gap in days."""
    if day is None:
        return 0.0
    best = 0.0
    for m in mentions:
        if m.month is not None:
            value = 1.0 if day.month == m.month else 0.0
        else:
            assert m.start is not None and m.end is not None
            gap = 0 if m.start <= day <= m.end else \
                min(abs((day - m.start).days), abs((day - m.end).days))
            value = math.exp(-gap / DATE_TAU_DAYS)
        best = max(best, value)
    return best


# -- the per-session index ---------------------------------------------------------------

def _turn_day_and_time(turn: Turn) -> tuple[dt.date | None, float | None]:
    try:
        when = dt.datetime.fromisoformat(str(turn.timestamp).replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None, None
    return when.date(), when.timestamp()


@dataclass
class _SessionIndex:
    """Lexical statistics and structure of a session's latest turns."""

    ids: list[int] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    sittings: list[int] = field(default_factory=list)
    days: list[dt.date | None] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    # term -> (positions, term frequencies), typed arrays numpy reads in one copy
    postings: dict[str, tuple[array, array]] = field(
        default_factory=lambda: defaultdict(lambda: (array("q"), array("d"))))
    names: set[str] = field(default_factory=set)     # named speakers (not role names)
    upto: int = 0
    _last_time: float | None = None
    _last_marker: Any = None
    _sitting: int = 0
    _arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    _groups: tuple[np.ndarray, list[np.ndarray]] | None = None
    _dense_at: tuple[Any, ...] | None = None
    # Held while the index is extended or read: threads share one index per session.
    lock: Any = field(default_factory=threading.Lock, repr=False, compare=False)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Turn ids, lengths and sittings as arrays, made again only after turns are added."""
        cached = self._arrays
        if cached is None or len(cached[0]) != len(self.ids):
            cached = (np.asarray(self.ids, dtype=np.int64),
                      np.asarray(self.lengths, dtype=np.float64), np.asarray(self.sittings))
            self._arrays = cached
        return cached

    def sitting_groups(self) -> list[np.ndarray]:
        """The positions of each sitting's turns (made again only after turns are added)."""
        sittings = self.arrays()[2]
        cached = self._groups
        if cached is None or cached[0] is not sittings:
            order = np.argsort(sittings, kind="stable")
            boundaries = np.flatnonzero(np.diff(sittings[order])) + 1
            cached = self._groups = (sittings, np.split(order, boundaries))
        return cached[1]

    def dense_positions(self, dense_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where :func:`_aligned` puts the values given for ``dense_ids``: the turn
        positions that have one and the index of its value, kept while the turns and
        the dense window (an array kept under the turn log's generation) are the same."""
        turn_ids = self.arrays()[0]
        cached = self._dense_at
        if cached is None or cached[0] is not turn_ids or cached[1] is not dense_ids:
            cached = self._dense_at = (turn_ids, dense_ids, *_positions(turn_ids, dense_ids))
        return cached[2], cached[3]

    def add(self, turn: Turn) -> None:
        day, when = _turn_day_and_time(turn)
        marker = turn.metadata.get("session") if isinstance(turn.metadata, dict) else None
        if self.ids and (
                (marker is not None and marker != self._last_marker)
                or (marker is None and when is not None and self._last_time is not None
                    and when - self._last_time > SITTING_GAP_S)):
            self._sitting += 1
        self._last_marker, self._last_time = marker, when if when is not None else self._last_time
        pos = len(self.ids)
        terms = Counter(analyze(derived_text(turn.content)))
        for term, tf in terms.items():
            positions, freqs = self.postings[term]
            positions.append(pos)
            freqs.append(tf)
        self.ids.append(turn.turn_id)
        speaker = turn.name or turn.role
        self.speakers.append(speaker)
        if speaker and speaker not in ("user", "assistant"):
            self.names.add(speaker)
        self.sittings.append(self._sitting)
        self.days.append(day)
        self.lengths.append(sum(terms.values()))
        self.upto = turn.turn_id


class RecallIndex:
    """Per-process recall indexes of the sessions of one store (see :meth:`of`)."""

    def __init__(self, stores: Any = None) -> None:
        self._sessions: OrderedDict[str, _SessionIndex] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, stores: Any) -> "RecallIndex":
        """The recall indexes of ``stores`` (kept in it, dropped when it closes)."""
        return stores.state("recall", cls)

    def session(self, store: Any, session_id: str, upto: int) -> _SessionIndex:
        """The index of ``session_id`` covering turns up to ``upto`` (brought up to date).
        Another thread may extend it as soon as this returns: a caller that reads it
        beside other threads uses :meth:`reading`."""
        with self.reading(store, session_id, upto) as idx:
            return idx

    @contextlib.contextmanager
    def reading(self, store: Any, session_id: str, upto: int):
        """:meth:`session`'s index, held until the block ends: no thread extends or
        rebuilds it meanwhile (one that needs later turns waits), so the block reads
        turns ``..upto`` and arrays of one length throughout."""
        with self._lock:
            idx = self._sessions.pop(session_id, None)
            if idx is None or idx.upto > upto:
                idx = _SessionIndex()
            self._sessions[session_id] = idx
            while len(self._sessions) > _SESSIONS_CACHED:
                self._sessions.popitem(last=False)
        with contextlib.ExitStack() as held:
            held.enter_context(idx.lock)
            if idx.upto > upto:
                # Another thread took it past ``upto`` since it was picked: this call
                # reads an index of its own (a rare race; not kept).
                idx = _SessionIndex()
            if idx.upto < upto:
                lo = max(idx.upto + 1, upto - HORIZON + 1)
                for start in range(lo, upto + 1, 256):
                    for turn in store.history(session_id, start, min(upto, start + 255)):
                        idx.add(turn)
                if len(idx.ids) > HORIZON + HORIZON // 4:
                    # Rebuild over the horizon only: amortised, positions stay dense.
                    fresh = _SessionIndex()
                    for turn in store.history(session_id, upto - HORIZON + 1, upto):
                        fresh.add(turn)
                    held.enter_context(fresh.lock)     # held before others can see it
                    with self._lock:
                        self._sessions[session_id] = fresh
                    idx = fresh
            yield idx


class Scored(NamedTuple):
    turn_id: int
    score: float


class Ranking(Sequence[Scored]):
    """Turn ids and scores, best first: a sequence of :class:`Scored`.

    Kept as two plain lists (``ids``, ``scores``) because a ranking covers
    every turn of the horizon and is rebuilt on every query; a caller that
    walks all of it reads the lists, one that wants items indexes them.
    """

    __slots__ = ("ids", "scores")

    def __init__(self, ids: list[int], scores: list[float]) -> None:
        self.ids = ids
        self.scores = scores

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [Scored(t, s) for t, s in zip(self.ids[i], self.scores[i])]
        return Scored(self.ids[i], self.scores[i])

    def __iter__(self) -> Any:
        return map(Scored._make, zip(self.ids, self.scores))


def participants_of(idx: _SessionIndex) -> list[str]:
    """The named speakers of the indexed turns (role names are not names)."""
    return sorted(idx.names)


def _aligned(turn_ids: np.ndarray, ids: np.ndarray, values: np.ndarray,
             positions: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """``values`` (given for ``ids``) at ``turn_ids``; NaN where a turn has none.
    ``positions``: what :func:`_positions` gives for these ids (kept by the caller)."""
    out = np.full(len(turn_ids), np.nan)
    if len(ids) == 0:
        return out
    found, source = _positions(turn_ids, ids) if positions is None else positions
    out[found] = values[source]
    return out


def _positions(turn_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``turn_ids`` are among ``ids`` (a mask) and, for those, where in ``ids``."""
    if len(ids) == 0:
        return np.zeros(len(turn_ids), dtype=bool), np.zeros(0, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    at = np.minimum(np.searchsorted(sorted_ids, turn_ids), len(ids) - 1)
    found = sorted_ids[at] == turn_ids
    return found, order[at[found]]


def score_turns(idx: _SessionIndex, query: str,
                dense: tuple[np.ndarray, np.ndarray] | None,
                participants: list[str] | None = None) -> np.ndarray:
    """The structure-aware score of every indexed turn for ``query`` (see the module doc).

    ``dense`` is ``(turn_ids, cosines)`` for the turns that have a vector.
    """
    n = len(idx.ids)
    if n == 0:
        return np.zeros(0)
    if participants is None:
        participants = participants_of(idx)
    lexical_query = strip_names(query, participants)
    terms = list(dict.fromkeys(analyze(lexical_query)))
    terms = [t for t in terms if t not in QUESTION_WORDS] or terms
    turn_ids, lengths, sittings = idx.arrays()
    avgdl = float(lengths.mean()) or 1.0
    bm = np.zeros(n)
    for term in terms:
        plist = idx.postings.get(term)
        if not plist or not plist[0]:
            continue
        pos, tf = np.array(plist[0], dtype=np.int64), np.array(plist[1], dtype=np.float64)
        df = len(pos)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        norm = 1 - B + B * lengths[pos] / avgdl
        bm[pos] += idf * tf * (K1 + 1) / (tf + K1 * norm)
    s = bm / bm.max() if bm.max() > 0 else bm
    if dense is not None and len(dense[0]):
        cos = _aligned(turn_ids, *dense, positions=idx.dense_positions(dense[0]))
        known = ~np.isnan(cos)
        if known.any():
            lo, hi = float(np.nanmin(cos)), float(np.nanmax(cos))
            dn = np.where(known, (np.nan_to_num(cos, nan=lo) - lo) / (hi - lo) if hi > lo else 0.0, 0.0)
            s = s + W_DENSE * dn
    mentions = date_mentions(query)
    if mentions:
        # A session's turns fall on few days: each day's closeness is computed once.
        by_day = {d: date_closeness(mentions, d) for d in set(idx.days)}
        closeness = np.array([by_day[d] for d in idx.days])
        s = s * (1 + W_DATE * closeness)
    lowered = query.lower()
    named = [p for p in participants if re.search(r"\b" + re.escape(p.lower()) + r"\b", lowered)]
    if len(named) == 1:
        s = s * (1 + W_SPEAKER * np.array([sp == named[0] for sp in idx.speakers], dtype=np.float64))
    near = np.zeros(n)
    for d in range(1, NEIGHBOUR_WINDOW + 1):
        if d >= n:
            break
        same = sittings[d:] == sittings[:-d]
        before = np.zeros(n)
        before[d:] = s[:-d] * same
        after = np.zeros(n)
        after[:-d] = s[d:] * same
        near = np.maximum(near, np.maximum(before, after) / d)
    s = s + W_NEIGHBOUR * near
    sitting_score = np.zeros(n)
    for group in idx.sitting_groups():
        top = np.sort(s[group])[::-1][:SITTING_TOP]
        sitting_score[group] = top.mean()
    return s + W_SITTING * sitting_score


def recall(stores: Any, session_id: str, query: str, *, upto: int,
           dense: Any = None, embedder: Any = None,
           dense_generation: Any = None) -> tuple[Ranking, dict[str, Any]]:
    """Turns ``1..upto`` of ``session_id`` ranked for ``query``, best first, with
    scores normalised to the best (1.0); turns older than the horizon come
    from the store's inverted index at half weight.

    ``dense`` is ``(turn_log, query_vector)`` or None; when the query names
    a participant and ``embedder`` is given, the dense query is re-embedded
    without the names (names pull every turn of that speaker alike).
    ``dense_generation``: the turn log's write generation when the caller read
    it (read here when None); the dense window is kept under it.
    """
    store = stores.transcript
    query = derived_text(query)
    with RecallIndex.of(stores).reading(store, session_id, upto) as idx:
        return _recall(stores, store, idx, session_id, query, upto, dense, embedder,
                       dense_generation)


def _recall(stores: Any, store: Any, idx: _SessionIndex, session_id: str, query: str,
            upto: int, dense: Any, embedder: Any,
            dense_generation: Any) -> tuple[Ranking, dict[str, Any]]:
    info: dict[str, Any] = {"horizon_turns": len(idx.ids)}
    sims: dict[int, float] | None = None
    names = participants_of(idx)
    if dense is not None:
        log, vec = dense
        stripped = strip_names(query, names)
        if embedder is not None and stripped != query and stripped:
            vec = embedder.embed_batch([derived_text(stripped)])[0]
        # The dense window changes only with the turn log: kept under its generation.
        ids, matrix = prepared(stores).get(
            ("dense_window", session_id),
            log.write_generation() if dense_generation is None else dense_generation,
            lambda: (log.dense_window(session_id), frozenset()))[0]
        if len(ids):
            values = matrix @ np.asarray(vec, dtype=np.float32)
            sims = (ids, values)
    scores = score_turns(idx, query, sims, names)
    ranked_ids: list[int] = []
    ranked_scores: list[float] = []
    if len(scores):
        top = float(scores.max()) or 1.0
        turn_ids = idx.arrays()[0]
        order = np.lexsort((-turn_ids, -scores))      # best first, ties: newest
        ranked_ids = turn_ids[order].tolist()
        ranked_scores = (scores[order] / top).tolist()
    first = idx.ids[0] if idx.ids else upto + 1
    if first > 1:
        hits = [(t, score) for t, score in store.rank(session_id, query, k=50) if t < first]
        best = max((score for _, score in hits), default=0.0)
        if best > 0:
            ranked_ids.extend(t for t, _ in hits)
            ranked_scores.extend(0.5 * score / best for _, score in hits)
        info["older_hits"] = len(hits)
    return Ranking(ranked_ids, ranked_scores), info
