"""Plain result records shared by the stores, the facade and the CLI."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class Turn:
    """One stored transcript turn. ``turn_id`` is 1-based within its session."""

    session_id: str
    turn_id: int
    role: str
    content: str
    name: str | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp: str = ""          # ISO 8601, UTC
    key: str | None = None       # idempotency key given at append time
    tokens: int = 0              # content tokens under the store's tokenizer
    tokens_exact: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Hit:
    """A search result: a turn and its BM25 score."""

    session_id: str
    turn_id: int
    score: float
    role: str
    content: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    created: str                 # ISO 8601, UTC
    metadata: dict[str, Any] = field(default_factory=dict)
    archived: bool = False
    turn_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SessionStats:
    session_id: str
    turn_count: int
    bytes: int                   # UTF-8 bytes of all contents
    tokens: int                  # sum of per-turn content tokens
    tokens_exact: bool           # False when any turn's count is an estimate
    tokenizer: str
    by_role: dict[str, int] = field(default_factory=dict)
    first_timestamp: str | None = None
    last_timestamp: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
