"""What one relay serves: its store, its upstream and its context policy."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.common.transcript.records import DEFAULT_MAX_TURN_BYTES

SESSION_HEADER = "CRP-Session-Id"
IDEMPOTENCY_HEADER = "Idempotency-Key"
POLICY_FLAGS = ("max_context_tokens", "output_reserve", "safety_margin", "min_recent_turns")
DEFAULT_TIMEOUT = 60.0
DEFAULT_THREADS = 2
DEFAULT_SESSION_QUEUE = 8
DEFAULT_SESSION_WAIT = 120.0


@dataclass(frozen=True)
class ServerConfig:
    """What one relay serves: its store, its upstream and its context policy.

    ``upstream`` is ``"echo"`` (the built-in deterministic provider, no network) or
    the base URL of an OpenAI-compatible API, ``/v1`` included.  ``model``, when set,
    pins the upstream model (and the tokenizer) whatever the client asks for.
    ``policy`` holds the policy options given on the command line (see
    :data:`POLICY_FLAGS`); absent ones take the Runtime's defaults.

    ``store`` is a directory (the embedded store) or a store URL such as
    ``postgresql://host/db?schema=NAME``; ``cache`` the hot tier's URL
    (``redis://...``; None: in-process).  On a ``postgresql://`` store the
    relay's shared state (the per-session lock, the per-key counters) lives in
    that database too, so relays on several hosts can serve one store.
    """

    store: Path | str
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
    #: The keys file (see tenants.py); None and no $CTXRELAY_RELAY_KEYS: no tenants.
    keys_file: Path | None = None
    #: Prolog threads of this worker process: a long turn leaves the others free.
    threads: int = DEFAULT_THREADS
    #: Requests that may wait for one busy session in a worker, and for how long.
    session_queue: int = DEFAULT_SESSION_QUEUE
    session_wait: float = DEFAULT_SESSION_WAIT
    #: Lock sessions across processes (the workers of one relay share the store).
    cross_process_locks: bool = True
    #: The hot tier (``redis://host:port/db?prefix=NAME``); None: in-process memory.
    cache: str | None = None

    @property
    def max_body_bytes(self) -> int:
        """The largest request body read: a few turns at the limit, JSON-escaped."""
        return 8 * self.max_turn_bytes + (64 << 10)

    def __post_init__(self) -> None:
        from ctxrelay.storage.spec import parse_cache_spec, parse_store_spec
        spec = parse_store_spec(self.store)      # a bad spec fails here, with the fix
        parse_cache_spec(self.cache)
        if spec.scheme == "lmdb":                # a directory, however it is spelled
            object.__setattr__(self, "store", Path(spec.location) if spec.is_url
                               else Path(self.store))
            if self.store.exists() and not self.store.is_dir():
                # Refused here, before the server starts: opened in its lifespan, the
                # store's error was a traceback in a log line and exit status 3.
                raise InvalidArgumentError(
                    f"store {self.store} is a file, not a directory; pass a directory "
                    "(it is created if missing) or a store URL")
        else:
            object.__setattr__(self, "store", str(self.store))
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
        # max_turn_bytes 0 is not "no limit": the store would take its default (1 MiB)
        # while the body cap became 64 KiB.
        for name in ("threads", "session_queue", "max_turn_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
        if not (isinstance(self.session_wait, (int, float)) and self.session_wait > 0):
            raise InvalidArgumentError(
                f"session_wait must be a positive number of seconds, got {self.session_wait!r}")
        unknown = sorted(set(self.policy) - set(POLICY_FLAGS))
        if unknown:
            raise InvalidArgumentError(
                f"unknown policy option(s) {', '.join(unknown)}; the server takes "
                + ", ".join(POLICY_FLAGS))

    @property
    def is_echo(self) -> bool:
        return self.upstream == "echo"

    @property
    def is_shared(self) -> bool:
        """Whether the store is a database server's (relays on several hosts may share
        it), rather than a directory of this machine."""
        return isinstance(self.store, str)

    @property
    def store_label(self) -> str:
        """The store without credentials, safe to show and log."""
        if not self.is_shared:
            return str(self.store)
        parts = urlsplit(str(self.store))
        return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path,
                           parts.query, ""))

    @property
    def lock_file(self) -> Path:
        """The byte-range lock file of the sessions (beside the store directory)."""
        return Path(self.store).parent / f".{Path(self.store).name}.relay.locks"

    @property
    def limits_file(self) -> Path:
        return Path(self.store).parent / f".{Path(self.store).name}.relay-limits.sqlite"

    @property
    def upstream_label(self) -> str:
        """The upstream without credentials or query, safe to show."""
        if self.is_echo:
            return "echo"
        parts = urlsplit(self.upstream)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"

