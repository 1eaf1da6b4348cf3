"""Candidate context units: what one assembly may choose from, and the provider
message of a stored turn (content passed as data, tool calls in OpenAI's shape).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.types import Turn


@dataclass
class Unit:
    """A candidate context unit; ``variants`` maps variant name to message."""

    id: str
    kind: str                     # system | message | turn | retrieved | warm | boundary
    turn_ids: list[int]
    variants: dict[str, dict[str, Any]]
    costs: dict[str, int] = field(default_factory=dict)
    exact: bool = True
    features: dict[str, Any] = field(default_factory=dict)
    inexact: set[str] = field(default_factory=set)     # variants charged a bound, not a count

    def summary(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "turn_ids": list(self.turn_ids),
                "variants": [{"name": name, "cost": self.costs[name]} for name in self.variants],
                "exact": self.exact, **self.features}

    def variant_exact(self, name: str) -> bool:
        return self.exact and name not in self.inexact


@dataclass
class Candidates:
    """What one assembly may choose from; Prolog keeps a reference to it."""

    session_id: str
    model: str
    units: dict[str, Unit]
    priming: int
    groups: list[list[str]]
    excludes: list[list[str]]
    info: dict[str, Any]
    stage: Any = None             # between the two stages of gathering (candidates.py)

    def unit(self, unit_id: str) -> Unit:
        return self.units[unit_id]


def message_for_turn(turn: Turn) -> dict[str, Any]:
    """The provider message of a stored turn; content is passed as data."""
    msg: dict[str, Any] = {"role": turn.role, "content": turn.content}
    calls = turn.metadata.get("tool_calls") if isinstance(turn.metadata, dict) else None
    if turn.role == "assistant" and isinstance(calls, list) and calls:
        msg["tool_calls"] = [_openai_tool_call(c) for c in calls if isinstance(c, dict)]
    if turn.role == "tool":
        msg["tool_call_id"] = turn.tool_call_id or f"turn_{turn.turn_id}"
    elif turn.name:
        msg["name"] = _safe_name(turn.name)
    return msg


def _openai_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    args = call.get("arguments", {})
    return {"id": str(call.get("id", "")), "type": "function",
            "function": {"name": str(call.get("name", "")),
                         "arguments": args if isinstance(args, str) else json.dumps(args, sort_keys=True)}}


def _safe_name(name: str) -> str:
    # OpenAI accepts names matching ^[a-zA-Z0-9_-]{1,64}$; keep the rest as data elsewhere.
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]
    return cleaned or "speaker"


def tool_call_ids(turn: Turn) -> list[str]:
    """The ids of the tool calls an assistant turn made (none for other turns)."""
    calls = turn.metadata.get("tool_calls") if isinstance(turn.metadata, dict) else None
    if turn.role != "assistant" or not isinstance(calls, list):
        return []
    return [str(c.get("id")) for c in calls if isinstance(c, dict) and c.get("id")]
