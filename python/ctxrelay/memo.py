"""One bounded memo discipline for values that never change once computed.

Token counts of a text, vectors of a text, the state derived from a fixed
set of turns: each is kept in a plain dict, and a full dict drops its oldest
quarter (insertion order) in one go instead of tracking recency per read.
"""
from __future__ import annotations

import itertools
from typing import Any

__all__ = ["keep"]


def keep(memo: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Store ``memo[key] = value``, first dropping the oldest quarter when full."""
    if len(memo) >= limit:
        for old in list(itertools.islice(memo, max(1, limit // 4))):
            memo.pop(old, None)
    memo[key] = value
