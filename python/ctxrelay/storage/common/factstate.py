"""A fact's state as every fact back end keeps it, whatever its layout: the namespace
digest's terms (SPEC-009 §6), the state hash, when a fact with a TTL is due
(§8.1), a new namespace's bookkeeping and its public view.

The LMDB byte layout is ``storage/lmdb/factcodec.py``'s, the PostgreSQL schema the
migrations'; both stores compute these the same way, so a copy between them (or a
relay on each) gives the same digests, state hashes and due times.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ctxrelay.storage.interfaces.facts import STATUSES, Fact, NamespaceState
from ctxrelay.types import copy_plain

DIGEST_MOD = 1 << 256


def fresh_copy(fact: Fact) -> Fact:
    """A copy of a decoded fact with its own metadata dict: callers own what they get.
    Built through ``__dict__``, not the constructor: a frozen dataclass sets each of
    its twenty fields through ``object.__setattr__``, which costs more than the copy."""
    out = object.__new__(Fact)
    out.__dict__.update(fact.__dict__)
    out.__dict__["metadata"] = copy_plain(dict(fact.metadata)) if fact.metadata else {}
    return out


def digest_component(fact_id: str, content_hash: str, status: str, modified: float) -> int:
    """One fact's term of the namespace digest (a sum mod 2^256, SPEC-009 §6)."""
    text = f"{fact_id}:{content_hash}:{status}:{modified!r}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


def state_hash(model_id: str, namespace: str, info: Mapping[str, Any] | None) -> str:
    digest, cdigest = (info["digest"], info["cdigest"]) if info else ("0", "")
    text = f"crp-ckf-state/1|{model_id}|{namespace}|{digest}|{cdigest}"
    return hashlib.sha256(text.encode()).hexdigest()


def due_time(status: str, rec: Mapping[str, Any]) -> float | None:
    """When an ACTIVE fact with a TTL is past it (SPEC-009 §8.1): ``ingested_at + ttl``,
    with ``ingested_at`` as a read returns it (ISO, microseconds), as expire always
    compared it.  None for a fact the sweep never changes."""
    ttl = rec.get("ttl_seconds")
    if status != "ACTIVE" or ttl is None:
        return None
    # epoch_of(iso_time(t)) without the formatting (and without filling its cache)
    return datetime.fromtimestamp(rec["ingested_at"], timezone.utc).timestamp() + ttl


def new_info(nid: int) -> dict[str, Any]:
    return {"id": nid, "gen": 0, "saved_gen": 0, "changed": 0, "adds": 0,
            "digest": "0", "cdigest": "", "labels": {}, "edges": 0, "last_mod": 0.0,
            "counts": {s: 0 for s in STATUSES}, "expiry": 1}


def namespace_state(name: str, info: Mapping[str, Any]) -> NamespaceState:
    return NamespaceState(
        name=name, id=info["id"], gen=info["gen"], saved_gen=info["saved_gen"],
        churn=info["changed"], pending=info["adds"], edges=info["edges"],
        last_mod=info["last_mod"], counts=dict(info["counts"]),
        communities=len(info["labels"]),
        ef=None if info.get("ef") is None else int(info["ef"]))
