"""Plain result records shared by the stores, the facade and the CLI."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


def copy_plain(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars): several times
    faster than copy.deepcopy or a JSON round trip, which matters on reads."""
    if type(value) is dict:
        return {k: copy_plain(v) for k, v in value.items()}
    if type(value) is list or type(value) is tuple:     # a tuple reads back as a list
        return [copy_plain(v) for v in value]
    return value


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
    """A search result: a turn, its BM25 score and its stored token count."""

    session_id: str
    turn_id: int
    score: float
    role: str
    content: str
    tokens: int = 0

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


@dataclass(frozen=True)
class PackUnit:
    """One unit of a pack: what it is, what it costs, what it is worth."""

    id: str
    kind: str                    # system | instructions | turn | retrieved | warm | boundary | message
    variant: str
    tokens: int                  # charged tokens, framing included
    utility: float
    turn_ids: list[int]          # transcript turns this unit carries verbatim


@dataclass(frozen=True)
class Ledger:
    """Provider-visible tokens per stage; ``total`` is what the request costs."""

    total: int
    observed_total: int
    exact: bool
    stages: list[dict[str, Any]]
    framing: int
    input_budget: int
    effective_cap: int
    output_reserve: int
    safety_margin: int
    host_only_tokens: int
    # Per horizon (p, c, e): the share of the budget left after the
    # mandatory units, the tokens its candidates asked for, what was offered.
    tiers: dict[str, dict[str, int]] = field(default_factory=dict)
    # Units packed as a bounded excerpt of a stored turn too long to show whole.
    excerpts: list[str] = field(default_factory=list)
    # What alternation(strict) did: messages before and after, and the tokens
    # it added (negative: merged messages share their framing).
    shape: dict[str, int] = field(default_factory=dict)

    def stage(self, name: str) -> dict[str, Any] | None:
        return next((s for s in self.stages if s["name"] == name), None)


@dataclass(frozen=True)
class TurnResult:
    """What a managed turn (or an assembly, without reply) produced."""

    messages: list[dict[str, Any]]
    ledger: Ledger
    headers: dict[str, Any]
    pack: list[PackUnit]
    utility: float
    status: dict[str, Any]
    reply: str | None = None
    user_turn: int | None = None
    assistant_turn: int | None = None


@dataclass(frozen=True)
class PreparedTurn:
    """A managed turn assembled but not stored (``Runtime.prepare_turn``).

    ``result`` is the pack to send (``result.messages``); ``replay`` is true
    when the key's reply is already stored (``reply`` holds it: send nothing,
    commit to get the ids).  Pass it to ``Runtime.commit_turn`` with the reply
    to store the turn; drop it to store nothing.
    """

    result: TurnResult
    replay: bool
    reply: str | None
    user_turn: int | None
    assistant_turn: int | None
    turn: dict[str, Any] = field(repr=False)        # the Prolog turn, passed back as is


@dataclass(frozen=True)
class RetrievalResult:
    """What the storage router returned for one access (SPEC-035 §3, §6).

    ``items`` are dicts, best first (reading order for a log-only access):
    ``kind`` (``fact``, ``turn`` or ``scratch``), ``id``, ``score``, ``via``
    (the primitives that found it), ``text`` (what a pack would carry; None for
    a scratch entry its freshness gate withholds) and ``record`` (the whole
    fact, turn or scratch entry).  ``store_used`` names the primitives that
    served the access (``["cache"]`` on a hit), ``timings`` the milliseconds
    of the cache lookup and of each primitive operation, ``retrieval_ms`` the
    wall-clock time of the whole retrieval.  Treat ``items`` as read-only: a
    cache hit returns the cached dicts.
    """

    items: list[dict[str, Any]]
    store_used: list[str]
    cache_hit: bool
    retrieval_ms: float
    timings: dict[str, float] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        """The SPEC-035 §6 response headers for this retrieval."""
        return {"CRP-Context-Store-Used": ",".join(self.store_used) or "none",
                "CRP-Context-Cache-Hit": "true" if self.cache_hit else "false",
                "CRP-Context-Retrieval-Ms": f"{self.retrieval_ms:.3f}"}

    def to_dict(self) -> dict[str, Any]:
        return {"items": self.items, "store_used": list(self.store_used),
                "cache_hit": self.cache_hit, "retrieval_ms": self.retrieval_ms,
                "timings": dict(self.timings)}
