"""One object that holds a store's parts: :func:`open_stores` and :class:`Stores`.

Every caller -- the bridge functions Prolog calls, the retrieval code, the
CLI -- reaches a part as an attribute of the one :class:`Stores` of its
store: ``stores.transcript``, ``stores.turnlog``, ``stores.warm``,
``stores.scratch``, ``stores.facts``, ``stores.rolling``, ``stores.cache``.
Which back end implements the parts is decided once, by the spec given to
:func:`open_stores` (see :mod:`ctxrelay.storage.spec`).

Lifetime
--------
There is one :class:`Stores` per store per process.  :func:`open_stores`
returns it and counts a reference; :meth:`Stores.close` drops one, and the
last one closes every part.  So two ``Runtime`` objects on one directory
share it, and closing one never breaks the other.

The transcript is opened at once; every other part is opened on first use.
The ``*_if_present`` accessors return a part only if the store holds one
already, without creating it: read paths use them, so reading a store that
never had a scratch buffer, warm artifacts or a knowledge base creates none.

Higher layers keep per-store state here too (the router's rolling-log sync,
query memo and ETags; recall's indexes): :meth:`Stores.state` makes it once
and drops it when the store closes.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ctxrelay.errors import InvalidArgumentError, StoreError
from ctxrelay.storage.interfaces.backend import PARTS
from ctxrelay.storage.spec import (CacheSpec, StoreSpec, backend_opener, cache_opener,
                                   parse_cache_spec, parse_store_spec, store_identity)

if TYPE_CHECKING:
    from ctxrelay.storage.interfaces.cache import HotCacheBackend
    from ctxrelay.storage.interfaces.rolling import RollingLogBackend
    from ctxrelay.storage.interfaces.scratch import ScratchBuffer
    from ctxrelay.storage.interfaces.transcript import Transcript
    from ctxrelay.storage.interfaces.turnlog import TurnLogStore
    from ctxrelay.storage.interfaces.warm import WarmArtifacts

__all__ = ["Stores", "open_stores", "find_stores", "close_all", "RING_ENTRIES", "RING_BYTES"]

T = TypeVar("T")

RING_ENTRIES = 128               # turns kept per session ring
RING_BYTES = 256 << 10           # payload bytes per session ring (reserved on disk per
                                 # session); a longer turn is kept as a pointer instead

_registry: dict[str, "Stores"] = {}
_registry_lock = threading.RLock()


def open_stores(spec: Any, *, cache: Any = None, map_size: int | None = None,
                max_turn_bytes: int | None = None, ring_entries: int | None = None,
                ring_bytes: int | None = None) -> "Stores":
    """The one :class:`Stores` of ``spec`` in this process, with one more reference.

    ``spec`` is a directory (the embedded LMDB default) or a URL such as
    ``lmdb:///abs/dir``; ``cache`` is None or ``memory://``.  ``map_size``
    (the transcript's initial LMDB map), ``max_turn_bytes`` (the largest turn
    it takes), ``ring_entries`` and ``ring_bytes`` (the rolling log's
    per-session capacity) apply when the store is first opened in the process; a
    later call may leave them out or repeat them, not change them (``map_size`` is
    only where the map starts, so it is not compared).  Use the result as a context
    manager, or call :meth:`Stores.close` once per call of this function.

    @raises InvalidArgumentError for a bad spec (an unknown scheme names the
        supported ones), or a cache spec or limit other than the one the store is
        open with.
    """
    store_spec = parse_store_spec(spec)
    cache_spec = parse_cache_spec(cache)
    with _registry_lock:
        found = _registry.get(store_spec.key)
        if found is not None and not found.closed:
            if cache is not None and cache_spec.key != found.cache_spec.key:
                raise InvalidArgumentError(
                    f"store {store_spec} is already open in this process with cache "
                    f"{found.cache_spec.text}; close it first to reopen it with "
                    f"{cache_spec.text}, or pass the same cache")
            asked = {"max_turn_bytes": max_turn_bytes, "ring_entries": ring_entries,
                     "ring_bytes": ring_bytes}
            held = found.limits()
            differ = [f"{name} {held[name]}" for name, value in asked.items()
                      if value is not None and value != held[name]]
            if differ:
                # Taking the store as it is would leave the caller's limit unapplied
                # without a word (a relay's --max-turn-bytes, say).
                raise InvalidArgumentError(
                    f"store {store_spec} is already open in this process with "
                    f"{', '.join(differ)}; pass the same value (or none), or close every "
                    "holder of it first to reopen it with another")
            found._refs += 1
            return found
        stores = Stores(store_spec, cache_spec, map_size=map_size,
                        max_turn_bytes=max_turn_bytes, ring_entries=ring_entries,
                        ring_bytes=ring_bytes)
        _registry[store_spec.key] = stores
        return stores


def find_stores(spec: Any) -> "Stores | None":
    """The open :class:`Stores` of ``spec`` in this process, or None; no reference
    is counted (for aliases that name an open store, such as Prolog's ``dir(D)``)."""
    key = parse_store_spec(spec).key
    with _registry_lock:
        found = _registry.get(key)
        return found if found is not None and not found.closed else None


def close_all() -> None:
    """Close every store opened in this process, whatever its references (tests,
    shutdown)."""
    with _registry_lock:
        every = list(_registry.values())
    for stores in every:
        stores._close_parts()


class Stores:
    """The parts of one store (see the module doc); made by :func:`open_stores`."""

    def __init__(self, spec: StoreSpec, cache_spec: CacheSpec, *, map_size: int | None,
                 max_turn_bytes: int | None, ring_entries: int | None,
                 ring_bytes: int | None) -> None:
        self.spec = spec
        self.cache_spec = cache_spec
        self._ring = (RING_ENTRIES if ring_entries is None else ring_entries,
                      RING_BYTES if ring_bytes is None else ring_bytes)
        self._lock = threading.RLock()
        self._refs = 1
        self._closed = False
        self._state: dict[str, Any] = {}
        self._turnlog: Any = None
        self._warm: Any = None
        self._scratch: Any = None
        self._facts: Any = None
        self._rolling: Any = None
        self._hot: Any = None
        self._cache_backend: Any = None
        self.backend = backend_opener(spec)(spec, map_size=map_size,
                                            max_turn_bytes=max_turn_bytes)
        try:
            #: The durable transcript (with its text index); opened at once.
            self.transcript: Transcript = self.backend.open_transcript()
        except BaseException:
            self.backend.close()
            raise

    # -- identity and lifetime ------------------------------------------------------

    @property
    def location(self) -> str:
        """Where the store lives: the directory of an embedded store."""
        return self.spec.location

    @property
    def path(self) -> str:
        """The transcript's own path (the store directory for LMDB)."""
        return str(self.transcript.path)

    @property
    def closed(self) -> bool:
        return self._closed or self.transcript.closed

    def limits(self) -> dict[str, int]:
        """The limits the store was opened with: ``max_turn_bytes`` (the transcript's),
        ``ring_entries`` and ``ring_bytes`` (the rolling log's per session)."""
        return {"max_turn_bytes": self.transcript.max_turn_bytes,
                "ring_entries": self._ring[0], "ring_bytes": self._ring[1]}

    def close(self) -> bool:
        """Drop one reference; the last one closes every part.  Returns True when
        the parts were closed (no other holder is left)."""
        with _registry_lock:
            if self._closed:
                return True
            self._refs -= 1
            if self._refs > 0:
                return False
        self._close_parts()
        return True

    def __enter__(self) -> "Stores":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Stores({self.spec.text!r}, {'closed' if self.closed else 'open'})"

    def _close_parts(self) -> None:
        with _registry_lock:
            if _registry.get(self.spec.key) is self:
                del _registry[self.spec.key]
            if self._closed:
                return
            self._closed = True
            self._refs = 0
        with self._lock:
            states, self._state = list(self._state.values()), {}
            parts = [*states, self._rolling, self._hot, self._cache_backend, self._warm,
                     self._scratch, self._facts, self._turnlog, self.transcript, self.backend]
            self._rolling = self._hot = self._cache_backend = None
            self._warm = self._scratch = self._facts = self._turnlog = None
        failure: BaseException | None = None
        for part in parts:      # state first: the router drains work that uses the parts
            close = getattr(part, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception as exc:      # close the rest, then report the first
                failure = failure or exc
        if failure is not None:
            raise failure

    def _live(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.spec.text} is closed; open it again "
                             "(Runtime(store_dir) or open_stores(spec))")

    # -- parts opened on first use ----------------------------------------------------

    @property
    def turnlog(self) -> "TurnLogStore":
        """Derived per-turn fields: embeddings, topic threads, references."""
        log = self._turnlog
        if log is None or log.closed:
            with self._lock:
                self._live()
                log = self._turnlog
                if log is None or log.closed:
                    log = self._turnlog = self.backend.open_turnlog()
        return log

    @property
    def warm(self) -> "WarmArtifacts":
        """Warm artifacts (created on first use: use it to publish, passing
        ``transcript=stores.transcript`` so the range is checked)."""
        warm = self._warm
        if warm is None or warm.closed:
            with self._lock:
                self._live()
                warm = self._warm
                if warm is None or warm.closed:
                    warm = self._warm = self.backend.open_warm()
        return warm

    @property
    def scratch(self) -> "ScratchBuffer":
        """The scratch buffer of tool outputs (created on first use)."""
        scratch = self._scratch
        if scratch is None or scratch.closed:
            with self._lock:
                self._live()
                scratch = self._scratch
                if scratch is None or scratch.closed:
                    scratch = self._scratch = self.backend.open_scratch()
        return scratch

    @property
    def facts(self) -> Any:
        """The knowledge fabric (CKF), opened on first use (creating it)."""
        facts = self._facts
        if facts is None or facts.closed:
            with self._lock:
                self._live()
                facts = self._facts
                if facts is None or facts.closed:
                    facts = self._facts = self.backend.open_facts()
        return facts

    @property
    def rolling(self) -> "RollingLogBackend":
        """The rolling log: each session's most recent turns (rebuildable)."""
        rolling = self._rolling
        if rolling is None:
            with self._lock:
                self._live()
                rolling = self._rolling
                if rolling is None:
                    entries, size = self._ring
                    rolling = self._cache_side().open_rolling(
                        capacity_entries=entries, capacity_bytes=size,
                        store=self.identity())
                    if rolling is None:       # the cache keeps none: the store's own
                        rolling = self.backend.open_rolling(capacity_entries=entries,
                                                            capacity_bytes=size)
                    self._rolling = rolling
        return rolling

    def identity(self) -> str:
        """The store's id for caches shared by processes: the back end's
        ``identity()`` (the same for every spelling of the spec that reaches the
        store), or, for a back end without one, a digest of the spec
        (:func:`~ctxrelay.storage.spec.store_identity`)."""
        ident = getattr(self.backend, "identity", None)
        return ident() if ident is not None else store_identity(self.spec)

    @property
    def cache(self) -> "HotCacheBackend":
        """The hot cache of retrievals (rebuildable; made on first use)."""
        hot = self._hot
        if hot is None:
            with self._lock:
                self._live()
                hot = self._hot
                if hot is None:
                    hot = self._hot = self._cache_side().open_hot_cache()
        return hot

    def _cache_side(self) -> Any:
        if self._cache_backend is None:
            self._cache_backend = cache_opener(self.cache_spec)(self.cache_spec)
        return self._cache_backend

    # -- parts only if the store has them ------------------------------------------------

    def turnlog_if_present(self) -> "TurnLogStore | None":
        return self._present("turnlog", "_turnlog")

    def warm_if_present(self) -> "WarmArtifacts | None":
        return self._present("warm", "_warm")

    def scratch_if_present(self) -> "ScratchBuffer | None":
        return self._present("scratch", "_scratch")

    def facts_if_present(self) -> Any:
        return self._present("facts", "_facts")

    def has(self, part: str) -> bool:
        """Whether the store holds ``part`` (``turnlog``, ``warm``, ``scratch``,
        ``facts``) already; nothing is opened or created."""
        if part not in PARTS:
            raise InvalidArgumentError(f"no store part {part!r}; the parts are "
                                       f"{', '.join(PARTS)} (the transcript always exists)")
        found = getattr(self, "_" + part)
        return (found is not None and not found.closed) or self.backend.has(part)

    def _present(self, part: str, attr: str) -> Any:
        found = getattr(self, attr)
        if found is not None and not found.closed:
            return found
        return getattr(self, part) if self.backend.has(part) else None

    # -- state of the layers above ---------------------------------------------------------

    def state(self, key: str, make: Callable[["Stores"], T]) -> T:
        """The per-store object ``key`` of a higher layer, made by ``make(self)`` on
        first use; it is closed (if it has ``close``) when the store closes."""
        found = self._state.get(key)
        if found is None:
            with self._lock:
                self._live()
                found = self._state.get(key)
                if found is None:
                    found = self._state[key] = make(self)
        return found
