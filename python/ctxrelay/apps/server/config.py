"""What one relay serves: its store, its upstream and its context policy."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.lmdb.transcript import DEFAULT_MAX_TURN_BYTES

SESSION_HEADER = "CRP-Session-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
POLICY_FLAGS = ("max_context_tokens", "output_reserve", "safety_margin", "min_recent_turns")
DEFAULT_TIMEOUT = 60.0


@dataclass(frozen=True)
class ServerConfig:
    """What one relay serves: its store, its upstream and its context policy.

    ``upstream`` is ``"echo"`` (the built-in deterministic provider, no network) or
    the base URL of an OpenAI-compatible API, ``/v1`` included.  ``model``, when set,
    pins the upstream model (and the tokenizer) whatever the client asks for.
    ``policy`` holds the policy options given on the command line (see
    :data:`POLICY_FLAGS`); absent ones take the Runtime's defaults.
    """

    store: Path
    upstream: str
    model: str | None = None
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    policy: Mapping[str, int] = field(default_factory=dict)
    warmup: bool = True
    max_turn_bytes: int = DEFAULT_MAX_TURN_BYTES
    #: ``strict``: every request has the shape strict chat templates accept (one
    #: system message, then user/assistant alternating; see ctxrelay_shape).
    alternation: str = "strict"
    #: Rounds of the cold-history tool loop per turn (0: the tools are not offered).
    history_rounds: int = 3

    @property
    def max_body_bytes(self) -> int:
        """The largest request body read: a few turns at the limit, JSON-escaped."""
        return 8 * self.max_turn_bytes + (64 << 10)

    def __post_init__(self) -> None:
        if self.upstream != "echo":
            parts = urlsplit(self.upstream)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise InvalidArgumentError(
                    f"upstream must be 'echo' or an http(s) base URL such as "
                    f"'http://127.0.0.1:8080/v1', got {self.upstream!r}")
            object.__setattr__(self, "upstream", self.upstream.rstrip("/"))
        if not (isinstance(self.timeout, (int, float)) and self.timeout > 0):
            raise InvalidArgumentError(
                f"timeout must be a positive number of seconds, got {self.timeout!r}")
        if self.alternation not in ("strict", "free"):
            raise InvalidArgumentError(
                f"alternation must be 'strict' or 'free', got {self.alternation!r}")
        unknown = sorted(set(self.policy) - set(POLICY_FLAGS))
        if unknown:
            raise InvalidArgumentError(
                f"unknown policy option(s) {', '.join(unknown)}; the server takes "
                + ", ".join(POLICY_FLAGS))

    @property
    def is_echo(self) -> bool:
        return self.upstream == "echo"

    @property
    def upstream_label(self) -> str:
        """The upstream without credentials or query, safe to show."""
        if self.is_echo:
            return "echo"
        parts = urlsplit(self.upstream)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

