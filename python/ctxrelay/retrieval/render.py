"""The chosen pack rendered to provider messages and counted again, with the
host-only records kept beside the request.
"""
from __future__ import annotations

import json
from typing import Any

from ctxrelay.memo import keep
from ctxrelay.retrieval.units import Candidates
from ctxrelay.text import tokens as tok


def render(cands: Candidates, plan: list[list[str]]) -> dict[str, Any]:
    """Render ``plan`` ([unit id, variant] in order) and count it as the provider will.

    Returns the messages, the per-unit charged tokens, the per-stage ledger
    figures, the observed total (a fresh count of the whole request) and the
    host-only tokens (:func:`host_only_tokens`).
    """
    messages: list[dict[str, Any]] = []
    per_unit: list[dict[str, Any]] = []
    rule = tok.resolve(cands.model).framing      # once: every unit was counted with it
    for unit_id, variant in plan:
        unit = cands.unit(unit_id)
        msg = dict(unit.variants[variant])
        messages.append(msg)
        whole = unit.costs[variant]
        # The message was checked when it was counted: its framing is the rule's.
        framing = rule.tokens_per_message + (rule.tokens_per_name if msg.get("name") is not None
                                             else 0)
        per_unit.append({"id": unit_id, "kind": unit.kind, "variant": variant,
                         "turn_ids": unit.turn_ids, "tokens": whole,
                         "content_tokens": whole - framing, "framing": framing,
                         "exact": unit.variant_exact(variant)})
    observed = tok.count_messages(messages, cands.model) if messages else None
    return {"messages": messages, "units": per_unit,
            "observed_total": observed.n if observed else cands.priming,
            "observed_exact": observed.exact if observed else True,
            "priming": cands.priming,
            "host_only": host_only_tokens(cands, plan, cands.model)}


# Scores that chose this pack: reported with the pack, not part of a unit's record.
_PER_QUERY = frozenset({"relevance", "score", "rank", "query_terms", "shared_terms"})


def host_only_tokens(cands: Candidates, plan: list[list[str]],
                     model: str | tok.Tokenizer) -> int:
    """Tokens of what the host keeps beside the request: one metadata record per
    packed unit (its id, turn ids and own fields, as sorted-key JSON), never sent.

    Each record is counted on its own, so a unit packed again on the next turn
    costs a memo lookup rather than another BPE pass over the whole list.
    """
    counter = tok.resolve(model)
    which = (counter, id(counter.counter))
    total = 0
    for unit_id, _variant in plan:
        unit = cands.unit(unit_id)
        key = _record_key(unit, which)
        n = _RECORD_TOKENS.get(key) if key is not None else None
        if n is None:
            record = {k: v for k, v in unit.features.items() if k not in _PER_QUERY}
            record.update(id=unit.id, turn_ids=unit.turn_ids)
            n = counter.count(json.dumps(record, sort_keys=True, default=str)).n
            if key is not None:
                keep(_RECORD_TOKENS, key, n, _RECORD_TOKENS_MAX)
        total += n
    return total


# A packed unit's record is counted once: a unit packed on the next turn again has
# the same record (its own fields; the per-query scores are left out), and building
# its JSON costs more than this key.  Keyed by the tokenizer and the record's values
# with their types (1, 1.0 and True are equal keys but different JSON).
_RECORD_TOKENS: dict[tuple[Any, ...], int] = {}
_RECORD_TOKENS_MAX = 8192
_SCALARS = (str, int, float, bool, type(None))


def _record_key(unit: Any, tokenizer: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The memo key of a unit's record, or None when a field is not a plain scalar
    (such a record is counted from its JSON every time)."""
    fields = []
    for k, v in unit.features.items():
        if k in _PER_QUERY:
            continue
        if type(v) not in _SCALARS:
            return None
        fields.append((k, type(v), v))
    turn_ids = unit.turn_ids
    if any(type(t) is not int for t in turn_ids):
        return None
    fields.sort(key=lambda f: f[0])
    return (tokenizer, unit.id, tuple(turn_ids), tuple(fields))
