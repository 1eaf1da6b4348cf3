"""The relay's answer for a store lost while a turn committed: 503 with its own code,
so a client knows the turn may be stored and retries with its key."""
from __future__ import annotations

from ctxrelay.apps.server.errors import from_ctxrelay
from ctxrelay.storage.postgres.connection import (CommitOutcomeUnknownError,
                                                  DatabaseUnavailableError)


def test_lost_while_committing_is_503_store_outcome_unknown():
    error = from_ctxrelay(CommitOutcomeUnknownError("lost at 127.0.0.1 (test)"))
    assert (error.status, error.code) == (503, "store_outcome_unknown")
    assert int(error.headers["Retry-After"]) >= 1
    assert "Idempotency-Key" in error.message and "127.0.0.1" not in error.message


def test_lost_before_anything_was_sent_is_503_store_unavailable():
    error = from_ctxrelay(DatabaseUnavailableError("down at 127.0.0.1 (test)"))
    assert (error.status, error.code) == (503, "store_unavailable")
    assert "nothing of this request was stored" in error.message
