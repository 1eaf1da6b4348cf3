"""Document and hybrid modes: knowledge per sub-query, each fact offered once.

A document task (CRP-SPEC-028 §1, §8) is finite: it decomposes into
sub-queries that must each be covered once, so Tier P retrieval runs per
sub-query with novelty on -- the facts chosen for earlier sub-queries are
the coverage set of the later ones (CRP-SPEC-024), and a fact is offered
once.

Prolog decides the mode, the sub-queries and how many facts each may
bring (ctxrelay_mode:subqueries/3, ctxrelay_assembly); this module supplies
the numbers those rules need (:func:`term_overlaps`) and does the retrieval
(:func:`add_document_units`), handing back units for the same packer.
"""
from __future__ import annotations

import time
from typing import Any

from ctxrelay.knowledge.scope import visible_to
from ctxrelay.retrieval.pricing import index_terms


def term_overlaps(texts: list[str]) -> dict[str, Any]:
    """For each text, whether it has index terms, and the Jaccard similarity
    of every pair's index terms (the same terms search uses)."""
    terms = [index_terms(str(t)) for t in texts]
    jaccard = [[(len(a & b) / len(a | b) if a and b else 0.0) for b in terms] for a in terms]
    return {"has_terms": [bool(t) for t in terms], "jaccard": jaccard}


def add_document_units(cands: Any, stores: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Tier P per sub-query, novelty on, each fact offered once.

    ``options``: queries (the sub-queries, in order), per_query (facts each
    may bring), namespace.  Facts another session owns are never offered
    (:func:`ctxrelay.knowledge.scope.visible_to`).  Each fact carries its
    sub-query, its rank there and its score relative to that sub-query's
    best; what that is worth (coverage of every sub-query first) is
    ctxrelay_utility:fact_score/2.
    """
    from ctxrelay.retrieval.candidates import fact_unit, has_knowledge

    queries = [str(q) for q in options.get("queries") or []]
    per_query = int(options.get("per_query", 0))
    out: dict[str, Any] = {"units": [], "coverage": [], "store_used": [],
                           "retrieval_ms": 0.0, "facts": 0}
    if per_query <= 0 or not queries or not has_knowledge(stores):
        return out
    facts = stores.facts
    namespace = options.get("namespace") or None
    covered: list[str] = []
    t0 = time.perf_counter()
    for index, query in enumerate(queries):
        scored = facts.cdr(query, k=per_query, coverage=list(covered), novelty="on",
                           namespace=namespace)
        scored = [s for s in scored if f"f{s.fact_id}" not in cands.units
                  and visible_to(s.fact.to_dict(), cands.session_id)]
        top = max((s.score for s in scored), default=0.0)
        ids = []
        for rank, s in enumerate(scored):
            fact = s.fact.to_dict()
            score = max(0.0, s.score / top) if top > 0 else 0.0
            unit = fact_unit(cands, fact, score, subquery=index, rank=rank, novelty=s.novelty)
            out["units"].append(unit.summary())
            covered.append(fact["content"])
            ids.append(s.fact_id)
        out["coverage"].append({"subquery": query, "facts": ids})
    out["retrieval_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    out["store_used"] = ["graph"]
    out["facts"] = len(out["units"])
    return out
