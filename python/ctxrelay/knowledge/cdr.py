"""Retrieval scoring over the CKF: CDR (CRP-SPEC-024), recency (SPEC-027 §3), CDGR (SPEC-025).

Everything here is a pure function of numbers, vectors and a neighbour map, so
the formulas can be tested without a store; :class:`ctxrelay.knowledge.fabric.FactStore`
gathers the inputs and calls these.

CDR (SPEC-024 §2.2, §7.1, with SPEC-027 §3.3's recency term)::

    coverage_score = Σ w_i · cos(f, c_i) / Σ w_i          (weighted mean, §2.3)
    residual_pull  = max_j cos(f, r_j)    (0 if no residuals)
    novelty        = max(1 - clamp(coverage_score, 0, 0.80), 0.20)  (§2.2, §2.4)
    CDR_score      = importance · max(relevance, residual_pull) · novelty
                     · recency_factor · (1 - ngram_penalty)
    facts with relevance < CDR_MIN_RELEVANCE are dropped first (§2.6)

The penalty is clamped at 0 from below as well: an embedder with signed
features (hashing) can give a fact a negative mean cosine to the coverage set,
and "less than nothing covered" must not lift novelty above 1 (the
CRP-Context-Coverage-Score header reads 1.0 as entirely fresh).

Novelty modes (the runtime's intents): ``"on"`` is the formula above;
``"off"`` sets novelty to 1 (relevance-only ranking, e.g. a re-read);
``"partial"`` applies half the coverage penalty,
``max(1 - 0.5 · min(coverage_score, 0.80), 0.20)``.

Recency (SPEC-027 §3.2), with ``age = now - modified_at``::

    1.0                                     age <= ttl / 2
    1.0 - 0.7 · (age - ttl/2) / (ttl/2)     ttl/2 < age < ttl
    0.30                                    age >= ttl
    1.0                                     no ttl (timeless)

CDGR (SPEC-025 §2): anchors are the top CDR facts; connectors are facts within
``hops`` edges of an anchor; a connector's bridge value is
``bridge_count · mean strength`` where ``bridge_count`` counts pairs of the
anchors it reaches that share no direct edge, and the strength of the way to
one anchor is the geometric mean of the edge weights on the strongest shortest
path; ``connector score = bridge · novelty · recency · max(relevance,
MIN_CONNECTOR_RELEVANCE)`` (§2.5 with SPEC-027 §3.3).
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

import numpy as np

from ctxrelay.errors import InvalidArgumentError

__all__ = [
    "CDR_MIN_RELEVANCE", "MIN_NOVELTY_FLOOR", "COVERAGE_PENALTY_CAP", "PARTIAL_NOVELTY_WEIGHT",
    "NOVELTY_MODES", "NGRAM_N", "NGRAM_STEP", "NGRAM_CAP", "STALE_FLOOR", "FRESH_FRACTION",
    "MIN_CONNECTOR_RELEVANCE", "SPEC_EDGE_THRESHOLD", "DEFAULT_MAX_HOPS",
    "DEFAULT_CONNECTOR_BUDGET", "MAX_CONNECTOR_CANDIDATES",
    "parse_ttl", "recency_factor", "recency_factors", "coverage_scores", "residual_pulls",
    "novelty",
    "ngrams", "ngram_blacklist", "ngram_overlap", "ngram_penalty", "cdr_scores",
    "Reach", "reach_from", "reach_layers", "bridge_value", "split_budget", "assemble_order",
]

# -- SPEC-024 ---------------------------------------------------------------
CDR_MIN_RELEVANCE = 0.55        # §2.6, calibrated for sentence embeddings
MIN_NOVELTY_FLOOR = 0.20        # §2.4
COVERAGE_PENALTY_CAP = 0.80     # §2.2
PARTIAL_NOVELTY_WEIGHT = 0.5    # ctxrelay: share of the penalty applied by novelty="partial"
NOVELTY_MODES: tuple[str, ...] = ("on", "off", "partial")
NGRAM_N = 6                     # §5.1
NGRAM_STEP = 0.15               # §5.2: penalty per matching n-gram
NGRAM_CAP = 0.80                # §5.2
# -- SPEC-027 ---------------------------------------------------------------
STALE_FLOOR = 0.30              # §3.2
FRESH_FRACTION = 0.5            # §3.2: fresh_threshold = 0.5 × ttl
# -- SPEC-025 / SPEC-009 ----------------------------------------------------
MIN_CONNECTOR_RELEVANCE = 0.30  # SPEC-025 §2.5
SPEC_EDGE_THRESHOLD = 0.60      # SPEC-009 §5.2 (sentence embeddings)
DEFAULT_MAX_HOPS = 2            # SPEC-025 §2.3
DEFAULT_CONNECTOR_BUDGET = 0.30  # SPEC-025 §2.2
MAX_CONNECTOR_CANDIDATES = 200  # SPEC-025 §3: "connectors ≤ 200"

_DAY = 86400.0
_TTL = re.compile(
    r"P(?:(?P<Y>\d+(?:\.\d+)?)Y)?(?:(?P<Mo>\d+(?:\.\d+)?)M)?(?:(?P<W>\d+(?:\.\d+)?)W)?"
    r"(?:(?P<D>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<H>\d+(?:\.\d+)?)H)?(?:(?P<Mi>\d+(?:\.\d+)?)M)?(?:(?P<S>\d+(?:\.\d+)?)S)?)?")
_TTL_UNITS = {"Y": 365 * _DAY, "Mo": 30 * _DAY, "W": 7 * _DAY, "D": _DAY,
              "H": 3600.0, "Mi": 60.0, "S": 1.0}
_WORD = re.compile(r"\w+", re.UNICODE)

Node = TypeVar("Node", bound=Hashable)


# -- TTL and recency ----------------------------------------------------------

def parse_ttl(value: Any) -> tuple[str | None, float | None]:
    """``(canonical ISO 8601 duration, seconds)`` of a TTL; ``(None, None)`` = no expiry.

    Accepts an ISO 8601 duration (``"P90D"``, ``"P1Y6M"``, ``"PT12H"``; a year
    is 365 days, a month 30), seconds (int/float), a ``timedelta``, or
    ``"none"``/``None`` for no expiry.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None, None
    if isinstance(value, bool):
        raise InvalidArgumentError(f"ttl {value!r} is a bool; pass an ISO 8601 duration "
                                   "such as 'P90D', seconds, or 'none'")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value <= 0:
            raise InvalidArgumentError(
                f"ttl {value!r} seconds must be finite and > 0; pass e.g. 86400 or 'P1D', "
                "or 'none' for no expiry")
        seconds = float(value)
        text = f"PT{int(seconds)}S" if seconds == int(seconds) else f"PT{seconds!r}S"
        return text, seconds
    if isinstance(value, str):
        text = value.strip().upper()
        match = _TTL.fullmatch(text)
        if match is None or not any(match.groupdict().values()) or text.endswith("T"):
            raise InvalidArgumentError(
                f"ttl {value!r} is not an ISO 8601 duration; pass e.g. 'P90D', 'P1Y', "
                "'PT12H', seconds as a number, or 'none' for no expiry")
        seconds = sum(float(v) * _TTL_UNITS[k] for k, v in match.groupdict().items() if v)
        if seconds <= 0:
            raise InvalidArgumentError(f"ttl {value!r} is zero; pass a positive duration "
                                       "or 'none' for no expiry")
        return text, seconds
    raise InvalidArgumentError(
        f"ttl must be an ISO 8601 duration str, seconds, a timedelta or None, not "
        f"{type(value).__name__}")


def recency_factor(age_seconds: float, ttl_seconds: float | None) -> float:
    """SPEC-027 §3.2's piecewise curve (see the module doc); no TTL → 1.0."""
    if ttl_seconds is None:
        return 1.0
    fresh = FRESH_FRACTION * ttl_seconds
    age = max(0.0, float(age_seconds))
    if age <= fresh:
        return 1.0
    if age >= ttl_seconds:
        return STALE_FLOOR
    return 1.0 - (1.0 - STALE_FLOOR) * ((age - fresh) / (ttl_seconds - fresh))


def recency_factors(age_seconds: np.ndarray, ttl_seconds: np.ndarray) -> np.ndarray:
    """:func:`recency_factor` of arrays (a NaN TTL: none): the same floats, since
    the same IEEE operations run in the same order."""
    ttl = np.asarray(ttl_seconds, dtype=np.float64)
    timeless = np.isnan(ttl)
    if timeless.all():              # the usual case: most facts never expire
        return np.ones(ttl.shape)
    age = np.maximum(np.asarray(age_seconds, dtype=np.float64), 0.0)
    fresh = FRESH_FRACTION * ttl
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 1.0 - (1.0 - STALE_FLOOR) * ((age - fresh) / (ttl - fresh))
        out = np.where(age >= ttl, STALE_FLOOR, out)
        return np.where((age <= fresh) | timeless, 1.0, out)


# -- coverage, residuals and novelty -------------------------------------------

def coverage_scores(facts: np.ndarray, coverage: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted mean cosine of each fact row to the coverage rows (SPEC-024 §2.3).

    Rows are L2-normalised, so dot products are cosines.  An empty coverage set
    or a zero total weight gives 0 (Window 1, §2.7).
    """
    n = facts.shape[0]
    total = float(np.sum(weights)) if len(weights) else 0.0
    if coverage.shape[0] == 0 or total <= 0.0:
        return np.zeros(n, dtype=np.float64)
    sims = _dots(facts, coverage)
    return np.einsum("ik,k->i", sims, np.asarray(weights, dtype=np.float64)) / total


def _dots(facts: np.ndarray, others: np.ndarray) -> np.ndarray:
    """float64 dot products of every row pair.  einsum, not BLAS: a BLAS kernel
    rounds a row's products differently with the number of rows it is given, and
    a fact's score must not depend on which other facts are scored with it."""
    return np.einsum("ij,kj->ik", np.asarray(facts, dtype=np.float64),
                     np.asarray(others, dtype=np.float64))


def residual_pulls(facts: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """Max cosine of each fact row to the residual rows; 0 without residuals."""
    if residual.shape[0] == 0:
        return np.zeros(facts.shape[0], dtype=np.float64)
    return np.max(_dots(facts, residual), axis=1)


def novelty(coverage_score: np.ndarray | float, mode: str = "on") -> np.ndarray:
    """Novelty of facts with the given coverage scores under ``mode`` (module doc)."""
    check_novelty_mode(mode)
    score = np.asarray(coverage_score, dtype=np.float64)
    if mode == "off":
        return np.ones_like(score)
    penalty = np.clip(score, 0.0, COVERAGE_PENALTY_CAP)
    if mode == "partial":
        penalty = PARTIAL_NOVELTY_WEIGHT * penalty
    return np.maximum(1.0 - penalty, MIN_NOVELTY_FLOOR)


def check_novelty_mode(mode: Any) -> str:
    if mode not in NOVELTY_MODES or not isinstance(mode, str):
        raise InvalidArgumentError(
            f"novelty must be one of {', '.join(NOVELTY_MODES)}, not {mode!r}")
    return mode


# -- the n-gram output guard (SPEC-024 §5) -----------------------------------

def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def ngrams(text: str, n: int = NGRAM_N) -> set[tuple[str, ...]]:
    """Word n-grams of ``text`` (NFKC, casefolded ``\\w+`` words, stopwords kept)."""
    words = _words(text)
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def ngram_blacklist(outputs: Iterable[str], n: int = NGRAM_N) -> set[tuple[str, ...]]:
    """Every n-gram of the prior window outputs (§5.1)."""
    found: set[tuple[str, ...]] = set()
    for text in outputs:
        if not isinstance(text, str):
            raise InvalidArgumentError(
                f"recent outputs must be str, not {type(text).__name__}; pass the "
                "texts of prior window outputs")
        found |= ngrams(text, n)
    return found


def ngram_overlap(text: str, blacklist: set[tuple[str, ...]], n: int = NGRAM_N) -> int:
    """How many distinct n-grams of ``text`` are blacklisted."""
    return len(ngrams(text, n) & blacklist) if blacklist else 0


def ngram_penalty(overlap: int) -> float:
    """``min(0.80, 0.15 × overlap)`` (§5.2)."""
    return min(NGRAM_CAP, NGRAM_STEP * max(0, overlap))


# -- the CDR score ------------------------------------------------------------

def cdr_scores(importance: np.ndarray, relevance: np.ndarray, residual_pull: np.ndarray,
               novelty_: np.ndarray, recency: np.ndarray,
               ngram_penalty_: np.ndarray) -> np.ndarray:
    """SPEC-027 §3.3: importance · max(rel, pull) · novelty · recency · (1 - ngram)."""
    return (np.asarray(importance, dtype=np.float64)
            * np.maximum(relevance, residual_pull) * novelty_ * recency
            * (1.0 - np.asarray(ngram_penalty_, dtype=np.float64)))


# -- CDGR (SPEC-025) ------------------------------------------------------------

class Reach(NamedTuple):
    """How a node is reached from one anchor: hop distance and path strength."""

    hops: int
    strength: float      # geometric mean of the edge weights on the strongest shortest path


def reach_from(anchor: Node, neighbours: Callable[[Node], Mapping[Node, float]],
               max_hops: int) -> dict[Node, Reach]:
    """Breadth-first reach of ``anchor`` up to ``max_hops`` edges (anchor excluded).

    For each node the shortest hop distance and, among shortest paths, the
    largest product of edge weights (reported as its geometric mean).
    """
    hops_of, product = reach_layers(anchor, neighbours, max_hops)
    return {node: Reach(h, product[node] ** (1.0 / h) if product[node] > 0 else 0.0)
            for node, h in hops_of.items() if h > 0}


def reach_layers(anchor: Node, neighbours: Callable[[Node], Mapping[Node, float]],
                 max_hops: int) -> tuple[dict[Node, int], dict[Node, float]]:
    """:func:`reach_from`'s raw result: hop distance and best path-weight product per
    node, the anchor itself included at 0 hops."""
    hops_of: dict[Node, int] = {anchor: 0}
    product: dict[Node, float] = {anchor: 1.0}
    frontier = [anchor]
    for hop in range(1, max_hops + 1):
        layer: dict[Node, float] = {}
        get = layer.get
        for node in frontier:
            base = product[node]
            for nb, weight in neighbours(node).items():
                if nb in hops_of:
                    continue
                p = base * weight
                if p > get(nb, -1.0):
                    layer[nb] = p
        if not layer:
            break
        for nb, p in layer.items():
            hops_of[nb] = hop
            product[nb] = p
        frontier = list(layer)
    return hops_of, product


def _order_key(node: Any) -> Any:
    return (str(type(node)), node) if not isinstance(node, (int, str)) else (0, node)


def bridge_value(touched: Mapping[Node, Reach], has_edge: Callable[[Node, Node], bool], *,
                 ordered: bool = False) -> tuple[float, list[tuple[Node, Node]]]:
    """SPEC-025 §2.4 for one connector: ``(value, bridged anchor pairs)``.

    ``touched`` maps each anchor the connector reaches (within the hop limit) to
    how it reaches it.  Fewer than two anchors → 0.  Pairs of anchors joined by
    a direct edge are redundant and do not count.  Pairs are listed in the
    anchors' sort order, or in ``touched``'s own order with ``ordered=True``.
    """
    if len(touched) < 2:
        return 0.0, []
    anchors = list(touched) if ordered else sorted(touched, key=_order_key)
    if len(anchors) < 2:
        return 0.0, []
    pairs = [(a, b) for i, a in enumerate(anchors) for b in anchors[i + 1:]
             if not has_edge(a, b)]
    if not pairs:
        return 0.0, []
    strength = sum(touched[a].strength for a in anchors) / len(anchors)
    return len(pairs) * strength, pairs


def split_budget(k: int, connector_budget: float) -> tuple[int, int]:
    """``(anchors, connectors)`` for an envelope of ``k`` facts (SPEC-025 §2.2).

    ``anchors = ⌊(1 - connector_budget) · k⌋`` but at least 1.
    """
    anchors = max(1, math.floor((1.0 - connector_budget) * k + 1e-9))
    return anchors, max(0, k - anchors)


def assemble_order(anchors: Sequence[Node],
                   connectors: Sequence[tuple[Node, tuple[Node, Node]]], *,
                   distance: Callable[[Node, Node], int] | None = None) -> list[Node]:
    """Reading order: each connector next to an anchor it bridges (SPEC-025 §2.6).

    ``anchors`` are best first; ``connectors`` are ``(connector, (x, y))`` best
    first, where ``x`` and ``y`` are the anchor pair the connector bridges;
    ``distance(connector, anchor)`` (hops, optional) orders connectors that
    bridge the same pair.  Anchors are visited in rank order, so the best
    anchor opens the envelope (its primacy position).  Visiting anchor ``a``
    emits ``a``; then the connectors between ``a`` and an anchor already
    placed, nearest to ``a`` first; then, for each unplaced partner ``p`` in
    order, the connectors of the pair ``(a, p)`` nearest to ``a`` first,
    followed by a visit of ``p``, so a chain reads anchor → connector(s) →
    anchor.  Every connector therefore sits in a run of connectors of one
    pair, bordered by an anchor of that pair.
    """
    dist = distance or (lambda c, a: 0)
    by_anchor: dict[Node, dict[Node, list[Node]]] = {a: {} for a in anchors}
    for connector, (x, y) in connectors:
        by_anchor[x].setdefault(y, []).append(connector)
        by_anchor[y].setdefault(x, []).append(connector)
    out: list[Node] = []
    placed: set[Node] = set()

    def emit(anchor: Node, group: list[Node]) -> None:
        for c in sorted((c for c in group if c not in placed), key=lambda c: dist(c, anchor)):
            out.append(c)
            placed.add(c)

    def visit(anchor: Node) -> None:
        out.append(anchor)
        placed.add(anchor)
        groups = by_anchor[anchor]
        for partner, group in groups.items():
            if partner in placed:
                emit(anchor, group)
        for partner, group in groups.items():
            if partner not in placed:
                emit(anchor, group)
                visit(partner)

    for anchor in anchors:
        if anchor not in placed:
            visit(anchor)
    return out
