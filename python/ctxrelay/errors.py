"""Exceptions raised by ctxrelay.

Every failure has its own class under :class:`CtxRelayError`; each message says
what was wrong and how to fix it.  The Prolog side maps the same failures to ISO
error terms (see ``prolog/ctxrelay/errors.pl``); :attr:`CtxRelayError.kind`
is the name used there.
"""
from __future__ import annotations

from typing import Any


class CtxRelayError(Exception):
    """Base class of every ctxrelay error."""

    kind = "ctxrelay_error"


class PlainMessage:
    """Mixin (listed first) for the errors that are also a :class:`KeyError` or
    :class:`LookupError`: ``str()`` is the message as given, where KeyError would
    quote it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # type: ignore[attr-defined]


class StoreError(CtxRelayError):
    """The store directory cannot be used (unwritable, not a directory, ...)."""

    kind = "store_path"


class CorruptStoreError(StoreError):
    """The store exists but its files are not a valid ctxrelay store."""

    kind = "corrupt_store"


class StoreFullError(StoreError):
    """The LMDB map or the disk is full and the write could not be completed."""

    kind = "store_full"


class UnknownSessionError(PlainMessage, CtxRelayError, KeyError):
    kind = "unknown_session"


class SessionExistsError(CtxRelayError):
    kind = "session_exists"


class InvalidSessionIdError(CtxRelayError, ValueError):
    kind = "invalid_session_id"


class UnknownTurnError(PlainMessage, CtxRelayError, KeyError):
    kind = "unknown_turn"


class UnknownThreadError(PlainMessage, CtxRelayError, KeyError):
    """No topic thread of that id in the session (``threads()`` lists them)."""

    kind = "unknown_thread"


class InvalidRoleError(CtxRelayError, ValueError):
    kind = "invalid_role"


class InvalidContentError(CtxRelayError, TypeError):
    kind = "invalid_content"


class TurnTooLargeError(InvalidContentError):
    """A turn's content is over the store's ``max_turn_bytes``: refused before any work."""

    kind = "turn_too_large"


class InvalidMetadataError(CtxRelayError, ValueError):
    kind = "invalid_metadata"


class InvalidArgumentError(CtxRelayError, ValueError):
    """A parameter has the wrong type or is out of its range."""

    kind = "invalid_argument"


class StoreClosedError(InvalidArgumentError):
    """A call on a Runtime after its close(): the Runtime's own state, not the
    call's arguments (an InvalidArgumentError for callers that caught that)."""

    kind = "store_closed"


class EmbedderMismatchError(InvalidArgumentError):
    """A session's turn log was derived with another embedder than the one asked for."""

    kind = "turnlog_embedder_mismatch"


class InvalidPathError(InvalidArgumentError):
    """A file path given to write to (e.g. an export's ``dest``) cannot be used."""

    kind = "invalid_path"


class KeyConflictError(CtxRelayError):
    """An idempotency key was reused for a different turn."""

    kind = "key_conflict"


class ArchivedSessionError(CtxRelayError):
    kind = "archived_session"


class ImportFormatError(CtxRelayError, ValueError):
    kind = "import_format"


class TokenizerUnavailableError(CtxRelayError, LookupError):
    """A tokenizer was asked for exactly but its vocabulary is not installed."""

    kind = "tokenizer_unavailable"


class PrologError(CtxRelayError):
    """An error raised by the Prolog side that has no more specific class."""

    kind = "prolog"


class ContextOverflowError(CtxRelayError):
    """The mandatory part of a pack does not fit the input budget (fail closed)."""

    kind = "context_overflow"

    def __init__(self, message: str, **figures: Any) -> None:
        super().__init__(message)
        self.figures = figures
        for name, value in figures.items():
            setattr(self, name, value)


class UnknownProviderError(PlainMessage, CtxRelayError, LookupError):
    """No completion provider is registered under the requested name."""

    kind = "unknown_provider"


class ProviderError(CtxRelayError):
    """A completion provider failed; for an HTTP error reply ``status`` is its code.

    ``provider_message``, ``error_type`` and ``error_code`` come from an OpenAI-style
    body ``{"error": {"message", "type", "code"}}`` when the provider sent one.
    """

    kind = "provider_error"

    def __init__(self, message: str, *, provider: str | None = None, status: int | None = None,
                 provider_message: str | None = None, error_type: str | None = None,
                 error_code: Any = None, url: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.provider_message = provider_message
        self.error_type = error_type
        self.error_code = error_code
        self.url = url


class ProviderUnavailableError(ProviderError):
    """The provider could not be reached (connection refused, unknown host, reset)."""

    kind = "provider_unavailable"


class ProviderTimeoutError(ProviderError, TimeoutError):
    """The provider did not answer within the ``timeout`` option."""

    kind = "provider_timeout"


class ProviderResponseError(ProviderError):
    """The provider answered, but not with a usable reply (bad JSON, no choices, ...)."""

    kind = "provider_response"


# -- warm artifacts (ctxrelay.storage.lmdb.warm) -------------------------------------------

class InvalidRangeError(InvalidArgumentError):
    """A turn range is not two ints 1 <= start <= end."""

    kind = "invalid_range"


class InvalidArtifactError(CtxRelayError, ValueError):
    """A warm artifact's summary, lists or producer have the wrong shape."""

    kind = "invalid_artifact"


class UnknownArtifactError(PlainMessage, CtxRelayError, KeyError):
    """No warm artifact (or no such version of one) for a session's turn range."""

    kind = "unknown_artifact"


class ArtifactKeyConflictError(KeyConflictError):
    """An idempotency key was reused for a different warm artifact."""

    kind = "artifact_key_conflict"


class InconsistentConstraintsError(CtxRelayError):
    """No pack satisfies the constraints with the mandatory units.

    ``constraints`` names a minimal conflicting set (as the caller wrote them),
    ``mandatory`` the mandatory units they select, ``budget`` is set when the
    conflict takes the budget too; ``unit`` is the mandatory unit that the
    structural constraints (together/excludes/at_most_one/requires) exclude.
    """

    kind = "inconsistent_constraints"

    def __init__(self, message: str, *, constraints: list[str] | None = None,
                 mandatory: list[str] | None = None, budget: int | None = None,
                 unit: str | None = None) -> None:
        super().__init__(message)
        self.constraints = list(constraints or [])
        self.mandatory = list(mandatory or [])
        self.budget = budget
        self.unit = unit


class InvalidConstraintError(InvalidArgumentError):
    """A pack constraint (the ``constraints`` policy option) is malformed;
    ``constraint`` is the offending constraint as text."""

    kind = "invalid_constraint"

    def __init__(self, message: str, *, constraint: str | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint


class PackTimeLimitError(CtxRelayError):
    """The packer's time limit ran out before any pack satisfying the user
    constraints was found (none was proven impossible either)."""

    kind = "pack_time_limit"
