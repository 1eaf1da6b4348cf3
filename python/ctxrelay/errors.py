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


class StoreError(CtxRelayError):
    """The store directory cannot be used (unwritable, not a directory, ...)."""

    kind = "store_path"


class CorruptStoreError(StoreError):
    """The store exists but its files are not a valid ctxrelay store."""

    kind = "corrupt_store"


class StoreFullError(StoreError):
    """The LMDB map or the disk is full and the write could not be completed."""

    kind = "store_full"


class UnknownSessionError(CtxRelayError, KeyError):
    kind = "unknown_session"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class SessionExistsError(CtxRelayError):
    kind = "session_exists"


class InvalidSessionIdError(CtxRelayError, ValueError):
    kind = "invalid_session_id"


class UnknownTurnError(CtxRelayError, KeyError):
    kind = "unknown_turn"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidRoleError(CtxRelayError, ValueError):
    kind = "invalid_role"


class InvalidContentError(CtxRelayError, TypeError):
    kind = "invalid_content"


class InvalidMetadataError(CtxRelayError, ValueError):
    kind = "invalid_metadata"


class InvalidArgumentError(CtxRelayError, ValueError):
    """A parameter has the wrong type or is out of its range."""

    kind = "invalid_argument"


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
