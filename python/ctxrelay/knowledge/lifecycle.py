"""How facts age: the TTL sweep (SPEC-009 §8.1).

Statuses and the changes allowed between them (SPEC-009 §2.2) are the storage's
contract (:data:`ctxrelay.storage.interfaces.facts.TRANSITIONS`).  Expiry is
explicit, so that reads never change the state hash: :func:`sweep` marks ACTIVE
facts past ``ingested_at + ttl`` STALE.  The storage finds the due facts from an
index ordered by due time; they are marked ``EXPIRE_BATCH`` per write
transaction, so a sweep run beside requests (the router's) never holds the
store, or the GIL, for long, and a write made between finding and marking a
fact wins (a deleted or renewed fact is left as it is).
"""
from __future__ import annotations

import time

from ctxrelay.knowledge.live import LiveIndex

__all__ = ["EXPIRE_BATCH", "sweep"]

EXPIRE_BATCH = 16             # facts marked STALE per write transaction of a TTL sweep (~1 ms)


def sweep(live: LiveIndex, ns: str, *, now: float) -> int:
    """Mark the namespace's facts due at ``now`` STALE; how many were."""
    due = live.storage.due(ns, now=now)
    changed = 0
    for lo in range(0, len(due), EXPIRE_BATCH):
        if lo:
            time.sleep(0)           # let waiting threads run between batches
        changed += live.expire(ns, due[lo:lo + EXPIRE_BATCH], now=now)
    return changed
