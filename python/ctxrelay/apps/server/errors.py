"""Errors answered in OpenAI's shape ``{"error": {message, type, param, code}}``."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse

from ctxrelay.errors import (
    ArchivedSessionError,
    ContextOverflowError,
    CtxRelayError,
    InvalidArgumentError,
    InvalidContentError,
    InvalidMetadataError,
    InvalidRoleError,
    InvalidSessionIdError,
    KeyConflictError,
    StoreClosedError,
    TurnTooLargeError,
)

from ctxrelay.storage.postgres.connection import CommitOutcomeUnknownError, \
    DatabaseUnavailableError

from . import observe
from .config import IDEMPOTENCY_HEADER

#: Seconds a client is told to wait when the database is unavailable: about what a
#: restart or a failover of PostgreSQL takes.
UNAVAILABLE_RETRY_AFTER = 2

log = logging.getLogger("ctxrelay.apps.server")


class ApiError(Exception):
    """An error answered with an OpenAI-style body ``{"error": {...}}``."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = dict(headers or {})
        if type == "upstream_error":
            # The label is bounded: an upstream's own codes are counted together.
            label = code if code and code.startswith("upstream_") else "upstream_coded"
            observe.UPSTREAM_ERRORS.labels(label).inc()

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def scrubbed(error: ApiError, stored: str, shown: str) -> ApiError:
    """The error with the stored session id replaced by the client's (no tenant prefix)."""
    if stored != shown and stored in error.message:
        error.message = error.message.replace(stored, shown)
    return error


def unavailable(message: str, code: str = "store_unavailable") -> ApiError:
    """503 with ``Retry-After``: the store's database cannot be reached.  With
    ``store_unavailable`` nothing of the request was stored, so the client may send it
    again as it was; with ``store_outcome_unknown`` the database went away while the
    turn was committing, and a retry with the same Idempotency-Key answers the stored
    turn if it was stored."""
    observe.REFUSED.labels(code).inc()
    return ApiError(503, message, type="server_error", code=code,
                    headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER)})


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def from_ctxrelay(exc: CtxRelayError) -> ApiError:
    """The HTTP answer for an error raised by the Runtime."""
    if isinstance(exc, CommitOutcomeUnknownError):
        log.warning("ctxrelay relay: store lost while committing: %s", exc)
        return unavailable("the relay's store went away while this turn was committing: it "
                           "may or may not be stored; retry after "
                           f"{UNAVAILABLE_RETRY_AFTER} s with the same Idempotency-Key (the "
                           "answer is the stored turn if it was stored)",
                           code="store_outcome_unknown")
    if isinstance(exc, DatabaseUnavailableError):
        log.warning("ctxrelay relay: store unavailable: %s", exc)
        # The client is not told where the store is; the log is.
        return unavailable("the relay's store is unavailable right now; nothing of this "
                           f"request was stored, retry after {UNAVAILABLE_RETRY_AFTER} s "
                           "(with the same Idempotency-Key, if it had one)")
    if isinstance(exc, StoreClosedError):
        # The relay's Runtime was closed under it: the server's state, not the request's
        # (an InvalidArgumentError, which would be a 400 below).
        log.error("ctxrelay relay: the store is closed: %s", exc)
        return ApiError(503, "the relay's store is closed; nothing of this request was "
                        "stored; retry later (the relay must be restarted if this persists)",
                        type="server_error", code="store_closed",
                        headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER)})
    if isinstance(exc, ContextOverflowError):
        observe.OVERFLOWS.inc()
        return ApiError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, InvalidSessionIdError):
        return ApiError(400, str(exc), param="session_id", code="invalid_session_id")
    if isinstance(exc, KeyConflictError):
        return ApiError(409, f"{exc} (header {IDEMPOTENCY_HEADER})", param=IDEMPOTENCY_HEADER,
                        code="idempotency_key_conflict", headers={"x-should-retry": "false"})
    if isinstance(exc, TurnTooLargeError):
        return ApiError(413, str(exc), param="messages", code="turn_too_large")
    if isinstance(exc, ArchivedSessionError):
        return ApiError(400, str(exc), param="session_id", code="session_archived")
    if isinstance(exc, (InvalidArgumentError, InvalidContentError, InvalidRoleError,
                        InvalidMetadataError)):
        return ApiError(400, str(exc), code=exc.kind)
    log.error("ctxrelay error: %s", exc)
    return ApiError(500, f"ctxrelay failed: {exc}", type="server_error", code=exc.kind)
