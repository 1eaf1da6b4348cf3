"""Document and hybrid modes: sub-queries, per-sub-query knowledge, coverage.

A document task (CRP-SPEC-028 §1, §8) is finite: it decomposes into
sub-queries that must each be covered once, so Tier P retrieval runs per
sub-query with novelty on -- the facts chosen for earlier sub-queries are
the coverage set of the later ones (CRP-SPEC-024), and a fact is offered
once.  In hybrid mode the conversation seeds the decomposition: the
recent user turns and the active thread become sub-queries beside the
parts of the request itself.

Prolog decides the mode (ctxrelay_mode); this module does the text and
retrieval work and hands back units for the same packer.
"""
from __future__ import annotations

import re
import time
from typing import Any

from ctxrelay.storage.lmdb.textindex import tokenize

MAX_SUBQUERIES = 8
_SIMILAR = 0.6                 # Jaccard of index terms above which two sub-queries are one
_DIRECTIVE = re.compile(
    r"^\s*(?:please\s+|can you\s+|could you\s+|now\s+)*"
    r"(?:write|draft|compose|produce|prepare|create|generate|put together)\b"
    r"(?:\s+(?:me|us|up))?\s+(?:(?:a|an|the|short|brief|detailed|complete|full|\d+[- ]\w+)\s+)*"
    r"(?:guide|report|document|doc|documentation|article|overview|tutorial|runbook|playbook|"
    r"write-?up|memo|brief|whitepaper|handbook|manual|readme|chapter|sections|faq|summary)\b"
    r"\s*(?:about|on|of|for|covering|that covers|explaining)?\s*",
    re.IGNORECASE)
_SEED_PHRASE = re.compile(
    r"\b(?:(?:about|on|of|from|covering)\s+)?(?:what\s+(?:we|i|you)\s+(?:\w+\s+){0,2}?"
    r"(?:discussed|talked about|covered|went over|said)|this conversation|our conversation|"
    r"this discussion|our discussion|this chat|this thread|(?:everything\s+)?so far|"
    r"everything above|the above)\b",
    re.IGNORECASE)
_SPLIT = re.compile(r"\s*(?:[,;\n]|\band\b|\balso\b|\bthen\b|^\s*(?:[-*•]|\d+[.)])\s+)\s*",
                    re.IGNORECASE | re.MULTILINE)


def _terms(text: str) -> set[str]:
    return set(tokenize(text))


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def subqueries(task: str, seeds: list[str] | None = None, *,
               limit: int = MAX_SUBQUERIES) -> list[str]:
    """The sub-queries of ``task``: its parts (enumerations, "A, B and C"),
    then the ``seeds`` (hybrid: what the conversation discussed), without
    near-duplicates; the whole topic first when the task has several parts."""
    body = _SEED_PHRASE.sub(" ", _DIRECTIVE.sub("", task, count=1)).strip(" .?!:")
    parts = [p.strip(" .?!:") for p in _SPLIT.split(body) if p and p.strip(" .?!:")]
    parts = [p for p in parts if _terms(p)]
    ordered: list[str] = []
    if body and _terms(body) and len(parts) != 1:
        ordered.append(body)
    ordered.extend(parts)
    ordered.extend(s for s in (seeds or []) if s and _terms(s))
    chosen: list[str] = []
    seen: list[set[str]] = []
    for q in ordered:
        terms = _terms(q)
        if any(_jaccard(terms, s) >= _SIMILAR for s in seen):
            continue
        chosen.append(q)
        seen.append(terms)
        if len(chosen) >= limit:
            break
    return chosen or ([task] if _terms(task) else [])


def conversation_seeds(recent_turns: list[dict[str, Any]], task: str = "",
                       *, limit: int = MAX_SUBQUERIES) -> list[str]:
    """Hybrid mode: what the conversation discussed, newest first -- the
    first sentence of each recent user turn (the questions and statements
    that set its topics), the task itself left out."""
    seeds: list[str] = []
    users = [t["content"] for t in recent_turns
             if t.get("role") == "user" and t.get("content") and t["content"] != task]
    for text in reversed(users):
        first = re.split(r"(?<=[.?!])\s+", text.strip(), maxsplit=1)[0]
        seeds.append(" ".join(first.split()[:24]))
        if len(seeds) >= limit:
            break
    return seeds


def add_document_units(cands: Any, stores: Any, task: str, options: dict[str, Any]) -> dict[str, Any]:
    """Tier P per sub-query, novelty on, each fact offered once.

    ``options``: mode (document or hybrid), k (facts per sub-query),
    namespace.  The best fact of every sub-query scores 1.0 so that each
    sub-query is covered before any gets a second fact, budget allowing.
    """
    from ctxrelay.retrieval.candidates import fact_unit, has_knowledge

    mode = str(options.get("mode") or "document")
    seeds = conversation_seeds(cands.info.get("recent_turns", []), task) \
        if mode == "hybrid" else []
    queries = subqueries(task, seeds)
    out: dict[str, Any] = {"units": [], "subqueries": queries, "coverage": [],
                           "store_used": [], "retrieval_ms": 0.0, "facts": 0}
    k = int(options.get("k", 0))
    if k <= 0 or not queries or not has_knowledge(stores):
        return out
    facts = stores.facts
    namespace = options.get("namespace") or None
    per_query = max(1, -(-k // len(queries)) + 1)
    covered: list[str] = []
    t0 = time.perf_counter()
    for index, query in enumerate(queries):
        scored = facts.cdr(query, k=per_query, coverage=list(covered), novelty="on",
                           namespace=namespace)
        scored = [s for s in scored if f"f{s.fact_id}" not in cands.units]
        top = max((s.score for s in scored), default=0.0)
        ids = []
        for rank, s in enumerate(scored):
            fact = s.fact.to_dict()
            score = 1.0 if rank == 0 else max(0.0, min(0.95, s.score / top if top > 0 else 0.0))
            unit = fact_unit(cands, fact, score, subquery=index, novelty=s.novelty)
            out["units"].append(unit.summary())
            covered.append(fact["content"])
            ids.append(s.fact_id)
        out["coverage"].append({"subquery": query, "facts": ids})
    out["retrieval_ms"] = round((time.perf_counter() - t0) * 1000, 3)
    out["store_used"] = ["graph"]
    out["facts"] = len(out["units"])
    return out
