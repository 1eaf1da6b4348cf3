"""The scratch buffer's errors (subclasses of ctxrelay.errors; see docs/scratch.md)."""
from __future__ import annotations

from ctxrelay.errors import (CorruptStoreError, CtxRelayError, InvalidArgumentError, PlainMessage,
                             StoreFullError)

__all__ = ["InvalidScratchIdError", "UnsafeScratchIdError", "UnknownScratchError",
           "ScratchFullError", "ScratchBlobError", "UnknownFreshnessError", "NotPromotableError"]


class InvalidScratchIdError(InvalidArgumentError):
    """A scratch id is not ``scr_`` followed by 32 lowercase hex digits."""

    kind = "invalid_scratch_id"


class UnsafeScratchIdError(InvalidScratchIdError):
    """A scratch id looks like a path: separators, ``..``, absolute, or NUL."""

    kind = "unsafe_scratch_id"


class UnknownScratchError(PlainMessage, CtxRelayError, KeyError):
    """No such entry in this session (never stored, evicted, or another session's)."""

    kind = "unknown_scratch"


class ScratchFullError(StoreFullError):
    """An unpinned output does not fit the disk budget even after evicting."""

    kind = "scratch_full"


class ScratchBlobError(CorruptStoreError):
    """An entry's blob file is missing or no longer matches its sha256."""

    kind = "scratch_blob"


class UnknownFreshnessError(InvalidArgumentError):
    """A freshness class other than REALTIME, VOLATILE, STABLE or STATIC."""

    kind = "unknown_freshness"


class NotPromotableError(CtxRelayError):
    """Promotion to the CKF asked for an unpinned entry or a volatile reading."""

    kind = "not_promotable"
