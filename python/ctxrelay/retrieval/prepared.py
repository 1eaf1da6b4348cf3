"""What an assembly reads that does not depend on the new message, kept between turns.

The recent window, the boundary's token count and the recent threads' vectors
are the same for every message until the session's stores change, and an
assistant asks many questions of one unchanged session (a retried turn, the
packs of a prepared turn, every ``assemble``).  Each is kept per store (in its
``Stores``) under the store's write generation: LMDB's last transaction id,
which moves with every committed write by any process, so a kept value is never
served after a write it has not seen.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ctxrelay.memo import keep
from ctxrelay.storage.stores import Stores

T = TypeVar("T")
_MAX = 256               # kept values per store: a few per live session


@dataclass(frozen=True, slots=True)
class _Kept:
    generation: Any
    value: Any
    used: frozenset[str]          # the primitives the read used (CRP-Context-Store-Used)


class Prepared:
    """One store's kept reads, keyed by what they read and checked by generation."""

    def __init__(self, _: Stores) -> None:
        self._kept: dict[tuple[Any, ...], _Kept] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...], generation: Any,
            read: Callable[[], tuple[T, frozenset[str]]]) -> tuple[T, frozenset[str]]:
        """``read()`` (a value and the primitives it used), or what it gave for ``key``
        at the same ``generation`` (a store's write generation, or a tuple of several);
        a None among them (a closed store) never keeps."""
        usable = generation is not None and not (isinstance(generation, tuple)
                                                 and None in generation)
        found = self._kept.get(key)
        if found is not None and usable and found.generation == generation:
            return found.value, found.used
        value, used = read()
        if usable:
            with self._lock:
                keep(self._kept, key, _Kept(generation, value, frozenset(used)), _MAX)
        return value, used


def prepared(stores: Stores) -> Prepared:
    """The kept reads of ``stores`` (made on first use, dropped when it closes)."""
    return stores.state("prepared_reads", Prepared)
