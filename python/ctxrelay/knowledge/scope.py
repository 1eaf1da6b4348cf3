"""Which facts a session may see: the one home of that rule.

A fact promoted from a session's own turns or tool outputs carries the
session's id (``metadata.session_id``, set by ctxrelay.knowledge.promotion):
it belongs to that session, and no other session's pack may hold it.  Facts
added or ingested by an operator carry no session and serve every session
of their namespace.  Every path that offers facts to a pack (the router's
Tier P units, document and hybrid sub-queries) filters through
:func:`visible_to`.
"""
from __future__ import annotations

from typing import Any


def owner(fact: dict[str, Any]) -> str | None:
    """The session a fact belongs to, or None for a shared fact."""
    metadata = fact.get("metadata") if isinstance(fact, dict) else None
    owner_id = metadata.get("session_id") if isinstance(metadata, dict) else None
    return owner_id if isinstance(owner_id, str) else None


def visible_to(fact: dict[str, Any], session_id: str) -> bool:
    """Whether the pack of ``session_id`` may hold ``fact``."""
    found = owner(fact)
    return found is None or found == session_id
