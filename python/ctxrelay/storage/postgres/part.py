"""What every part of a PostgreSQL store shares: its :class:`Database`, closing,
the check that it is still open, and its transactions."""
from __future__ import annotations

from typing import Any, ClassVar

from ctxrelay.errors import StoreError

__all__ = ["PgPart"]


class PgPart:
    """One part (transcript, turn log, warm artifacts, scratch) of a store's schema.

    Closing a part closes only it; the database is the store's (closed with it)."""

    #: the part's name in the error of a call after closing ("the warm store")
    WHAT: ClassVar[str] = "the store"

    def __init__(self, db: Any) -> None:
        self._db = db
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or self._db.closed

    def close(self) -> None:
        self._closed = True

    @property
    def path(self) -> str:
        return self._db.url

    def _live(self) -> None:
        if self.closed:
            raise StoreError(f"{self.WHAT} of {self._db.url} is closed; open the store again")

    def _run(self, fn: Any) -> Any:
        """``fn(cursor)`` in one transaction (writes, and reads that need one snapshot)."""
        self._live()
        return self._db.run(fn)

    def _read(self, fn: Any) -> Any:
        """``fn(cursor)`` outside a transaction: reads of one statement."""
        self._live()
        return self._db.read(fn)
