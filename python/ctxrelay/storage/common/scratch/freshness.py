"""The freshness gate (SPEC-029 §4, §8): a stale reading is never shown as current.

The rule is Prolog's (``ctxrelay_scratch:freshness_gate/6``, where users can read
and change it); this module computes the entry's age for it and renders its
answer.  Back-end neutral: it looks at an entry and a time, nothing stored.
"""
from __future__ import annotations

import sys
from datetime import datetime

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.common.scratch.checks import check_policy, seconds
from ctxrelay.storage.common.scratch.records import Rendered, ScratchEntry

__all__ = ["gate", "freshness_header", "render"]


def gate(entry: ScratchEntry, now: float | datetime | None = None, *,
         policy: str | None = None, can_reinvoke: bool = True) -> str:
    """``fresh``, or what to do with a stale entry: never inject it as current.

    Prolog's ``ctxrelay_scratch:freshness_gate/6`` decides: fresh while
    ``age <= freshness_ttl`` (STATIC never goes stale); a stale entry gets
    ``policy`` (the Safety Policy's ``tool-output-stale``) if given, else the
    class default: ``reinvoke`` for REALTIME, ``warn`` otherwise; ``reinvoke``
    becomes ``warn`` when the dispatch strategy cannot repeat the call
    (``can_reinvoke=False``).  A pinned entry is gated like any other.
    """
    if not isinstance(entry, ScratchEntry):
        raise InvalidArgumentError(
            f"gate() takes a ScratchEntry, not {type(entry).__name__}")
    policy = check_policy(policy)
    age = seconds(now) - entry.created
    # The embedded Prolog is loaded with the package (ctxrelay/__init__ imports the
    # bridge); reached through sys.modules so that storage imports no upper layer.
    engine = sys.modules["ctxrelay.bridge.engine"]
    answer = engine.once(
        "ctxrelay_scratch:freshness_gate(Age, TTL, Class, Policy, Can, Action)",
        {"Age": float(age), "TTL": "none" if entry.freshness_ttl is None
         else float(entry.freshness_ttl), "Class": entry.freshness,
         "Policy": policy or "none", "Can": bool(can_reinvoke)})
    return str(answer["Action"])


def freshness_header(entry: ScratchEntry, now: float | datetime | None = None) -> str:
    """The ``CRP-Context-Scratch-Freshness`` value: ``fresh`` or
    ``stale; age=240s; class=VOLATILE``.  Stale is what the gate says."""
    moment = seconds(now)
    return _header(entry, moment - entry.created, gate(entry, moment))


def _header(entry: ScratchEntry, age: float, action: str) -> str:
    return "fresh" if action == "fresh" else f"stale; age={int(age)}s; class={entry.freshness}"


def render(entry: ScratchEntry, now: float | datetime | None = None, *,
           policy: str | None = None, can_reinvoke: bool = True) -> Rendered:
    """The gate's action plus the text to inject: the summary when fresh, the
    summary under a ``NOTE: This result is from … ago and may be outdated:``
    line on ``warn``, nothing on ``reinvoke``/``exclude``."""
    moment = seconds(now)
    action = gate(entry, moment, policy=policy, can_reinvoke=can_reinvoke)
    age = moment - entry.created
    if action == "fresh":
        text: str | None = entry.summary
    elif action == "warn":
        text = (f"NOTE: This result is from {_age_words(age)} ago and may be outdated "
                f"(class {entry.freshness}, fresh for {_age_words(entry.freshness_ttl or 0)}):"
                f"\n{entry.summary}")
    else:
        text = None
    return Rendered(action=action, text=text, header=_header(entry, age, action), age=age)


def _age_words(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        value, unit = round(seconds), "second"
    elif seconds < 90 * 60:
        value, unit = round(seconds / 60), "minute"
    elif seconds < 36 * 3600:
        value, unit = round(seconds / 3600), "hour"
    else:
        value, unit = round(seconds / 86400), "day"
    return f"{value} {unit}{'' if value == 1 else 's'}"
