"""Derived records of a session (index postings, counters, key records): what the
turns give, and how that differs from what is stored.  The transcript's
``check_derived``/``repair_derived`` use these; turns are never derived."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxrelay.storage.lmdb.textindex import IndexRecords, TextIndex
from ctxrelay.storage.common.transcript.records import (U64, Counters, DerivedReport, Pending,
                                                        SessionRecord)
from ctxrelay.storage.validation import sha256
from ctxrelay.types import Turn

__all__ = ["DerivedReport", "Derived", "expected_derived", "derived_problems"]


@dataclass
class Derived:
    index: IndexRecords
    counters: dict[str, Any] | None
    keys: dict[bytes, bytes]


def expected_derived(session: SessionRecord, turns: list[Turn], stored: Counters,
                      tokenizer: str) -> Derived:
    """The derived records that appending ``turns`` one by one would have written."""
    keys: dict[bytes, bytes] = {}
    counters = Counters()
    prefix = U64.pack(session.num)
    for turn in turns:
        pending = Pending(turn.role, turn.content, turn.name, turn.tool_call_id,
                           turn.metadata, turn.timestamp, turn.key, turn.tokens,
                           turn.tokens_exact)
        counters.add(pending, tokenizer)
        if turn.key is not None:
            keys[prefix + sha256(turn.key)] = U64.pack(turn.turn_id) + pending.digest
    # Which tokenizer counted each turn is not recorded per turn: keep the list.
    if stored.tokenizers or not turns:
        counters.tokenizers = list(stored.tokenizers)
    index = TextIndex.expected(session.num, ((t.turn_id, t.content) for t in turns))
    return Derived(index, dict(counters.__dict__), keys)


def derived_problems(want: Derived, have: Derived) -> list[str]:
    problems = TextIndex.differences(want.index, have.index, doc="turn")
    have_counters = have.counters or {}
    for name, value in (want.counters or {}).items():
        if have_counters.get(name) != value:
            problems.append(f"counter {name} is {have_counters.get(name)!r} but the stored "
                            f"turns give {value!r}")
    if want.keys != have.keys:
        wrong = {k for k in set(want.keys) | set(have.keys)
                 if want.keys.get(k) != have.keys.get(k)}
        problems.append(f"{len(wrong)} idempotency-key record(s) disagree with the turns")
    return problems
