"""CDR (SPEC-024 with SPEC-027 §3) and CDGR (SPEC-025) over a CKF: the numbers.

:class:`Retriever` gathers the inputs of the pure formulas of
:mod:`ctxrelay.knowledge.cdr` -- the query's nearest facts from the ANN index,
their scoring heads and vectors, the anchors' neighbourhood in the similarity
graph -- and ranks.  Checking the caller's arguments is the facade's
(:class:`ctxrelay.knowledge.fabric.FactStore`) job.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.knowledge import cdr as _cdr
from ctxrelay.knowledge.inputs import Encoder, check_fraction
from ctxrelay.knowledge.live import LiveIndex
from ctxrelay.knowledge.records import CoverageEntry, HeadArrays, ScoredFact, pick
from ctxrelay.storage.interfaces.facts import EmbeddingModelMismatchError, FactStorage

__all__ = ["Window", "Retriever", "bridged_candidates", "recency_of"]


@dataclass(frozen=True)
class Window:
    """What a retrieval call scores facts against (SPEC-024): the coverage and
    residual sets as vectors, the n-gram blacklist, the novelty mode, the time."""

    coverage: np.ndarray
    weights: np.ndarray
    residual: np.ndarray
    blacklist: set[tuple[str, ...]]
    novelty: str
    now: float


class Candidates(dict):
    """CDGR's connector candidates, ``id -> (approximate bridge value, row)``, with
    the rows' bridged pair counts (``n_pairs``)."""

    n_pairs: np.ndarray


def recency_of(heads: HeadArrays, now: float) -> np.ndarray:
    """SPEC-027 §3.2's factor; a STALE fact is penalised like one past its TTL
    (SPEC-009 §2.2)."""
    r = _cdr.recency_factors(now - heads.modified, heads.ttl)
    stale = heads.status == b"S"
    return np.where(stale, np.minimum(r, _cdr.STALE_FLOOR), r) if stale.any() else r


class Retriever:
    """CDR and CDGR over one store's facts (``storage``) and indexes (``live``)."""

    def __init__(self, storage: FactStorage, live: LiveIndex, encoder: Encoder,
                 clock: Callable[[], float]) -> None:
        self._storage = storage
        self._live = live
        self._encoder = encoder
        self._clock = clock

    # -- the request's side -------------------------------------------------------------

    def _entries(self, items: Any, what: str) -> tuple[list[str], list[np.ndarray | None],
                                                         list[float]]:
        if isinstance(items, (str, CoverageEntry, Mapping)):
            items = [items]
        texts: list[str] = []
        vecs: list[np.ndarray | None] = []
        weights: list[float] = []
        model_id = self._encoder.model_id
        for i, item in enumerate(items or ()):
            if isinstance(item, str):
                item = CoverageEntry(text=item)
            elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
                item = CoverageEntry(text=item[0], depth_weight=item[1])
            elif isinstance(item, Mapping):
                try:
                    item = CoverageEntry(**item)
                except TypeError:
                    item = None
            if not isinstance(item, CoverageEntry) \
                    or (item.text is None) == (item.embedding is None):
                raise InvalidArgumentError(
                    f"{what} entry {i} must be a str, a (text, depth_weight) pair, or a "
                    "CoverageEntry/dict with exactly one of text or embedding")
            w = check_fraction(f"{what} entry {i} depth_weight", item.depth_weight)
            if item.embedding is not None:
                if item.model_id != model_id:
                    raise EmbeddingModelMismatchError(
                        f"{what} entry {i} was embedded with {item.model_id!r}, the CKF with "
                        f"{model_id!r}; embed it with the CKF's model or pass "
                        "its text (SPEC-024 §2.5)")
                texts.append("")
                vecs.append(self._encoder.query(item.embedding))
            else:
                if not isinstance(item.text, str):
                    raise InvalidArgumentError(f"{what} entry {i} text must be a str")
                texts.append(item.text)
                vecs.append(None)
            weights.append(w)
        return texts, vecs, weights

    def window(self, coverage: Any, residual: Any, recent_outputs: Any, novelty: str,
               now: float | None) -> Window:
        """The request's side of the CDR terms, embedded once per call."""
        _cdr.check_novelty_mode(novelty)
        ctexts, cvecs, cw = self._entries(coverage, "coverage")
        rtexts, rvecs, _ = self._entries(residual, "residual")
        pending = [t for t, v in zip(ctexts + rtexts, cvecs + rvecs) if v is None]
        embedded = iter(self._encoder.embed(pending)) if pending else iter(())
        dim = self._encoder.dim
        cov = np.array([v if v is not None else next(embedded) for v in cvecs],
                       dtype=np.float32).reshape(-1, dim)
        res = np.array([v if v is not None else next(embedded) for v in rvecs],
                       dtype=np.float32).reshape(-1, dim)
        if isinstance(recent_outputs, str):
            recent_outputs = [recent_outputs]
        return Window(cov, np.asarray(cw, dtype=np.float64), res,
                      _cdr.ngram_blacklist(recent_outputs or ()), novelty,
                      self._clock() if now is None else float(now))

    # -- CDR (SPEC-024 + SPEC-027 §3) -------------------------------------------------------

    def _score(self, ns: str, ids: Sequence[str], heads: HeadArrays, relevance: np.ndarray,
               win: Window, vecs: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The CDR terms of facts given their scoring heads; vectors (``vecs`` if
        given) are read only for a coverage or residual set, contents only for the
        n-gram guard."""
        n = len(ids)
        if len(win.coverage) or len(win.residual):
            if vecs is None:
                vecs = self._live.vectors(ns, ids)
            coverage_s = _cdr.coverage_scores(vecs, win.coverage, win.weights)
            pull = _cdr.residual_pulls(vecs, win.residual)
        else:
            coverage_s, pull = np.zeros(n), np.zeros(n)
        if win.blacklist:
            ngp = np.array([_cdr.ngram_penalty(_cdr.ngram_overlap(f.content, win.blacklist))
                            for f in self._storage.get(ns, ids)], dtype=np.float64)
        else:
            ngp = np.zeros(n)
        return {"relevance": np.asarray(relevance, dtype=np.float64), "coverage": coverage_s,
                "pull": pull, "novelty": _cdr.novelty(coverage_s, win.novelty),
                "recency": recency_of(heads, win.now), "ngram": ngp,
                "importance": heads.importance}

    def rank(self, q: np.ndarray, ns: str, win: Window, k: int, *, gate: float, pool: int,
             role: str = "anchor") -> list[ScoredFact]:
        """The ``k`` best CDR facts among the ``pool`` nearest with relevance >= ``gate``."""
        if k == 0:
            return []
        hits = [(fid, sim) for fid, sim in self._live.search(ns, q, max(pool, k))
                if sim >= gate]
        if not hits:
            return []
        ids = [fid for fid, _ in hits]
        heads = self._live.heads(ns, ids)
        keep = np.flatnonzero(heads.retrievable)
        relevance = np.array([sim for _, sim in hits], dtype=np.float64)[keep]
        ids = [ids[i] for i in keep.tolist()]
        t = self._score(ns, ids, heads.take(keep), relevance, win)
        scores = _cdr.cdr_scores(t["importance"], t["relevance"], t["pull"], t["novelty"],
                                 t["recency"], t["ngram"])
        rel = t["relevance"].tolist()
        score_of = scores.tolist()
        order = sorted(range(len(ids)), key=lambda i: (-score_of[i], -rel[i], ids[i]))[:k]
        facts = dict(zip([ids[i] for i in order],
                         self._storage.get(ns, [ids[i] for i in order])))
        terms = {name: t[name][order].tolist() for name in ("relevance", "novelty", "recency",
                                                           "coverage", "pull", "ngram")}
        return [ScoredFact(facts[ids[i]], score_of[i], terms["relevance"][x], role=role,
                           novelty=terms["novelty"][x], recency=terms["recency"][x],
                           coverage=terms["coverage"][x], residual_pull=terms["pull"][x],
                           ngram_penalty=terms["ngram"][x]) for x, i in enumerate(order)]

    # -- CDGR (SPEC-025) ----------------------------------------------------------------------

    def cdgr(self, q: np.ndarray, ns: str, win: Window, k: int, *, hops: int, budget: float,
             gate: float, floor: float) -> list[ScoredFact]:
        """Anchors (the top CDR facts) and the connectors that bridge them, in reading
        order (see :meth:`ctxrelay.knowledge.fabric.FactStore.cdgr`)."""
        n_anchor, n_conn = _cdr.split_budget(k, budget)
        anchors = self.rank(q, ns, win, n_anchor, gate=gate, pool=max(4 * n_anchor, 50))
        if len(anchors) < 2 or n_conn == 0 or hops == 0:
            return anchors
        anchor_ids = [a.fact_id for a in anchors]
        nodes, hop, product, linked = self._live.anchor_reach(ns, anchor_ids, hops)
        if not len(nodes):
            return anchors
        link = (linked | linked.T) & ~np.eye(len(anchor_ids), dtype=bool)
        bridged = bridged_candidates(nodes, hop, product, link)
        if not bridged:
            return anchors
        ids = pick(nodes, [bridged[x][1] for x in sorted(bridged)])
        n_pairs = bridged.n_pairs
        exact: dict[str, tuple[float, list[float]]] = {}

        def value_of(node: str) -> float:
            """The exact bridge value (Python strengths) of a candidate."""
            if node not in exact:
                r = bridged[node][1]
                strength = [p ** (1.0 / h) for h, p in
                            zip(hop[r].tolist(), product[r].tolist()) if h]
                exact[node] = (int(n_pairs[r]) * (sum(strength) / len(strength)), strength)
            return exact[node][0]

        chosen, t = self._connectors(q, ns, win, ids, np.array([bridged[x][0] for x in ids]),
                                     value_of, n_conn, floor)
        facts = dict(zip([c[1] for c in chosen], self._storage.get(ns, [c[1] for c in chosen])))
        rank = {a: i for i, a in enumerate(anchor_ids)}
        by_id = {a.fact_id: a for a in anchors}
        placed: list[tuple[str, tuple[str, str]]] = []
        touched: dict[str, dict[str, _cdr.Reach]] = {}
        linked_to = link.tolist()               # Python lists: a few lookups each, no numpy scalars
        terms = {name: t[name].tolist() for name in ("relevance", "novelty", "recency",
                                                    "coverage", "pull", "ngram")}
        for score, node, i in chosen:
            r, strength = bridged[node][1], exact[node][1]
            reached = [(a, h) for a, h in zip(anchor_ids, hop[r].tolist()) if h]
            touched[node] = {a: _cdr.Reach(h, s) for (a, h), s in zip(reached, strength)}
            names = [a for a, _ in reached]
            pairs = [(a, b) for x, a in enumerate(names)
                     for b in names[x + 1:] if not linked_to[rank[a]][rank[b]]]
            best = min(pairs, key=lambda p: (max(rank[p[0]], rank[p[1]]),
                                             min(rank[p[0]], rank[p[1]])))
            placed.append((node, best))
            by_id[node] = ScoredFact(
                facts[node], score, terms["relevance"][i], role="connector",
                novelty=terms["novelty"][i], recency=terms["recency"][i],
                coverage=terms["coverage"][i], residual_pull=terms["pull"][i],
                ngram_penalty=terms["ngram"][i], bridge=exact[node][0],
                bridges=tuple(pairs), hops=min(h for _, h in reached))
        order = _cdr.assemble_order(
            anchor_ids, placed, distance=lambda c, a: touched[c][a].hops if a in touched[c] else 99)
        return [by_id[x] for x in order]

    def _connectors(self, q: np.ndarray, ns: str, win: Window, ids: Sequence[str],
                    values: np.ndarray, value_of: Callable[[str], float], n_conn: int,
                    floor: float) -> tuple[list[tuple[float, str, int]], dict[str, np.ndarray]]:
        """The best ``n_conn`` connectors with a positive score (SPEC-025 §2.5) as
        ``(score, id, i)`` best first, and the CDR terms of the ``ids[i]`` scored.
        ``values`` are the bridge values within ``1e-12`` (relative), ``value_of``
        gives the exact one.

        score = bridge value · novelty · recency · max(relevance, ``floor``).
        Relevance (and coverage) need the stored vectors; where the walk can bound
        them (:meth:`LiveIndex.similarity_bounds`) only the candidates whose upper
        bound reaches the ``n_conn``-th best lower bound are read and scored exactly,
        which gives the same result.
        """
        heads = self._live.heads(ns, ids)
        recency = recency_of(heads, win.now)
        exact = np.arange(len(ids))
        if len(ids) > n_conn:
            bounds = self._live.similarity_bounds(
                ns, ids, np.vstack([q[None, :], win.coverage]))
            if bounds is not None:
                approx, err = bounds
                rel_lo, rel_hi = approx[:, 0] - err[:, 0], approx[:, 0] + err[:, 0]
                total = float(win.weights.sum()) if len(win.coverage) else 0.0
                if total > 0:
                    w = win.weights / total
                    cov_lo = (approx[:, 1:] - err[:, 1:]) @ w
                    cov_hi = (approx[:, 1:] + err[:, 1:]) @ w
                else:
                    cov_lo = cov_hi = np.zeros(len(ids))
                base = values * recency
                with np.errstate(invalid="ignore"):
                    lo = base * _cdr.novelty(cov_hi, win.novelty) * np.maximum(rel_lo, floor)
                    hi = base * _cdr.novelty(cov_lo, win.novelty) * np.maximum(rel_hi, floor)
                # values are within 1e-12 and the products round: widen by far more
                lo = np.where(np.isnan(lo), -np.inf, lo) - 1e-9 * np.abs(lo)
                hi = np.where(np.isnan(hi), np.inf, hi) + 1e-9 * np.abs(hi)
                cut = np.partition(lo, len(lo) - n_conn)[len(lo) - n_conn]
                exact = np.flatnonzero(hi >= cut)
        sub = pick(ids, exact)
        vecs = self._live.vectors(ns, sub)
        # float64 row by row: a fact's relevance must not depend on which others
        # are scored with it (BLAS kernels round differently by batch shape)
        relevance = (vecs.astype(np.float64) * q.astype(np.float64)).sum(axis=1)
        t = self._score(ns, sub, heads.take(exact), relevance, win, vecs)
        exact_values = np.array([value_of(x) for x in sub], dtype=np.float64)
        scores = (exact_values * t["novelty"] * t["recency"] *
                  np.maximum(t["relevance"], floor)).tolist()
        scored = [(score, node, i) for i, (score, node) in enumerate(zip(scores, sub))
                  if score > 0]
        scored.sort(key=lambda s: (-s[0], s[1]))
        return scored[:n_conn], t


def bridged_candidates(nodes: Sequence[str], hop: np.ndarray, product: np.ndarray,
                       link: np.ndarray) -> Candidates:
    """SPEC-025 §2.4 for the connector candidates: ``node -> (bridge value, row)``
    for those with a positive value, the value from numpy's strengths (within
    ``1e-12`` of the exact one; :meth:`Retriever.cdgr` asks for exact values where
    they decide something).

    The candidates are the ``MAX_CONNECTOR_CANDIDATES`` rows reaching the most
    anchors, by strongest way to one of them, then by id.  A value is the anchor
    pairs a row reaches minus those joined by an edge, times its mean strength.
    Strengths that decide the cut are Python floats: numpy's vectorised pow may
    differ from libm's in the last bit, and the results must not depend on which
    one ran.
    """
    reached = hop > 0
    n_reached = reached.sum(axis=1)
    # float64 BLAS: the counts are small integers, exact in floats
    rf = reached.astype(np.float64)
    linked_pairs = ((rf @ link.astype(np.float64)) * rf).sum(1).astype(np.int64) // 2
    n_pairs = n_reached * (n_reached - 1) // 2 - linked_pairs
    cap = _cdr.MAX_CONNECTOR_CANDIDATES
    # strength = product ** (1 / hops), within an ulp or two of libm's pow (an
    # unreached cell has product 0, so its square root is 0 too)
    approx = np.sqrt(product)
    np.copyto(approx, product, where=hop == 1)
    deep = hop == 3
    if deep.any():
        np.copyto(approx, np.cbrt(product), where=deep)
    if len(nodes) <= cap:
        rows = np.arange(len(nodes))
    else:
        # The cut-off is the cap-th row by (anchors reached desc, strongest way
        # desc): its anchor count from the counts, its strength by partition.
        best = approx.max(axis=1)           # strengths are >= 0 and unreached cells 0
        counts = np.bincount(n_reached)
        ahead = np.cumsum(counts[::-1])[::-1]       # rows reaching >= c anchors
        n_edge = int(np.flatnonzero(ahead >= cap)[-1])
        sure = np.flatnonzero(n_reached > n_edge)
        same = n_reached == n_edge
        m = cap - len(sure)
        b_edge = -np.partition(-best[same], m - 1)[m - 1]
        # Rows with the cut-off row's anchor count and a strength beyond rounding
        # of its strength are in (above) or out (below) whatever the rounding; those
        # within it are ranked again with exact strengths (libm's pow, as value_of).
        tol = 1e-9 * max(1.0, abs(b_edge))
        above = np.flatnonzero(same & (best > b_edge + tol))
        band = np.flatnonzero(same & (best >= b_edge - tol) & (best <= b_edge + tol))
        exact = {r: max(p ** (1.0 / h) for h, p in zip(hs, ps) if h) for r, hs, ps in
                 zip(band.tolist(), hop[band].tolist(), product[band].tolist())}
        ranked = sorted(exact, key=lambda r: (-exact[r], nodes[r]))
        rows = np.concatenate([sure, above, np.asarray(
            ranked[:cap - len(sure) - len(above)], dtype=np.int64)])
    # a strength is positive exactly when its product is, in numpy as in libm
    values = n_pairs[rows] * (approx[rows].sum(axis=1) / n_reached[rows])
    keep = (n_pairs[rows] > 0) & (product[rows] > 0).any(axis=1)
    out = Candidates({nodes[r]: (v, r) for r, v in
                      zip(rows[keep].tolist(), values[keep].tolist())})
    out.n_pairs = n_pairs
    return out
