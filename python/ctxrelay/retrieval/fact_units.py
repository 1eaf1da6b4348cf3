"""CKF facts (Tier P) as candidate units: labelled reference material with its
source, never with system authority, and only a session's own or shared facts.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.knowledge.scope import visible_to
from ctxrelay.retrieval.pricing import add_unit
from ctxrelay.retrieval.units import Candidates, Unit
from ctxrelay.storage.stores import Stores


def knowledge_text(fact: dict[str, Any]) -> str:
    """A CKF fact as context: labelled as knowledge with its source, so the
    model can tell reference material from the conversation."""
    source = fact.get("source_location") or fact.get("source_id") or "knowledge store"
    return f"[knowledge {fact['fact_id']} from {source}]\n{fact['content']}"


def has_knowledge(stores: Stores) -> bool:
    """Whether the store has a knowledge base (Tier P) to retrieve from at all."""
    return stores.has("facts")


def add_router_fact_units(cands: Candidates, result: Any) -> dict[str, Any]:
    """Offer the facts of a router retrieval (``ctxrelay.retrieval.router``) as units."""
    # A fact another session owns never enters this session's pack.
    items = [i for i in result.items if i.get("kind") == "fact"
             and visible_to(i.get("record") or {}, cands.session_id)]
    out: dict[str, Any] = {"units": [], "facts": 0, "store_used": list(result.store_used),
                           "cache_hit": bool(result.cache_hit),
                           "retrieval_ms": round(float(result.retrieval_ms), 3)}
    if not items:
        return out
    top = max(max(float(i["score"]) for i in items), 1e-9)
    for item in items:
        if f"f{item['id']}" in cands.units:
            continue
        fact = item.get("record") or {"fact_id": item["id"], "content": item.get("text", "")}
        unit = fact_unit(cands, fact, max(0.0, float(item["score"]) / top),
                         role=item.get("role", "match"))
        out["units"].append(unit.summary())
    out["facts"] = len(out["units"])
    return out


def fact_unit(cands: Candidates, fact: dict[str, Any], score: float, **features: Any) -> Unit:
    """Add a CKF fact (Tier P) as a candidate: a user-role message named
    ``knowledge``, so reference material never gains system authority."""
    message = {"role": "user", "name": "knowledge", "content": knowledge_text(fact)}
    return add_unit(cands.units, Unit(id=f"f{fact['fact_id']}", kind="fact", turn_ids=[],
                                      variants={"verbatim": message},
                                      features={"fact_id": fact["fact_id"], "score": score,
                                                "source": fact.get("source_id") or "", **features}),
                cands.model)
