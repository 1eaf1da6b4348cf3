"""Store specs: which back end holds a store, named by a URL-like string.

A *store spec* names where the durable parts of a store live:

``/path/to/dir`` (or any plain path, ``str`` or ``os.PathLike``)
    the embedded default: LMDB environments, mmap rings and blob files in
    that directory (created if missing).
``lmdb:///abs/dir``
    the same, spelled as a URL (the path must be absolute).

A *cache spec* names where the rebuildable hot tier lives: ``None`` or
``memory://`` (the default: an in-process LRU).

Back ends are found by scheme in two registries, :func:`register_backend`
and :func:`register_cache`; a new back end (``postgresql://``, ``redis://``)
registers an opener and passes the conformance suites under
``tests/storage/conformance``.  Nothing else changes: every caller reaches
the parts through :class:`ctxrelay.storage.stores.Stores`.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ctxrelay.errors import InvalidArgumentError

__all__ = ["StoreSpec", "CacheSpec", "parse_store_spec", "parse_cache_spec",
           "register_backend", "register_cache", "backend_opener", "cache_opener",
           "store_schemes", "cache_schemes", "store_identity"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class StoreSpec:
    """A parsed store spec: ``scheme`` (``lmdb``) and ``location`` (for LMDB the
    absolute directory).  ``key`` identifies the store within a process: two
    specs with the same key (a directory and a symlink to it) are one store."""

    scheme: str
    location: str
    text: str
    key: str

    def __str__(self) -> str:
        return self.text

    @property
    def is_url(self) -> bool:
        """False for a plain directory, True for a ``scheme://`` spec."""
        return _SCHEME.match(self.text) is not None


@dataclass(frozen=True)
class CacheSpec:
    """A parsed cache spec: ``scheme`` (``memory``) and the rest of the URL."""

    scheme: str
    location: str
    text: str

    @property
    def key(self) -> str:
        return f"{self.scheme}:{self.location}"


# -- registries: scheme -> opener (a callable, or "module:attr" loaded on first use) --

_lock = threading.Lock()
_backends: dict[str, Callable[..., Any] | str] = {
    "lmdb": "ctxrelay.storage.lmdb.backend:LmdbBackend",
    "postgresql": "ctxrelay.storage.postgres.backend:PostgresBackend",
    "postgres": "ctxrelay.storage.postgres.backend:PostgresBackend",
}
_caches: dict[str, Callable[..., Any] | str] = {
    "memory": "ctxrelay.storage.memory:MemoryCache",
    "redis": "ctxrelay.storage.redis.hotcache:RedisCache",
}


def register_backend(scheme: str, opener: Callable[..., Any] | str) -> None:
    """Make ``<scheme>://`` store specs open through ``opener(spec, *, map_size,
    max_turn_bytes)`` (options the back end may ignore when they mean nothing to it),
    which returns a :class:`ctxrelay.storage.interfaces.backend.Backend`.
    ``opener`` may be ``"module:attr"`` (imported on first use)."""
    with _lock:
        _backends[_check_scheme(scheme)] = opener


def register_cache(scheme: str, opener: Callable[..., Any] | str) -> None:
    """Make ``<scheme>://`` cache specs open through ``opener(spec)``, which
    returns a :class:`ctxrelay.storage.interfaces.backend.CacheBackend`."""
    with _lock:
        _caches[_check_scheme(scheme)] = opener


def store_schemes() -> list[str]:
    return sorted(_backends)


def cache_schemes() -> list[str]:
    return sorted(_caches)


def backend_opener(spec: StoreSpec) -> Callable[..., Any]:
    return _resolve(_backends, spec.scheme)


def cache_opener(spec: CacheSpec) -> Callable[..., Any]:
    return _resolve(_caches, spec.scheme)


def _resolve(registry: dict[str, Any], scheme: str) -> Callable[..., Any]:
    with _lock:
        found = registry[scheme]
        if isinstance(found, str):
            module, _, attr = found.partition(":")
            found = registry[scheme] = getattr(importlib.import_module(module), attr)
        return found


def _check_scheme(scheme: Any) -> str:
    if not isinstance(scheme, str) or not re.fullmatch(r"[a-z][a-z0-9+.-]*", scheme):
        raise InvalidArgumentError(
            f"a scheme is lowercase letters, digits, '+', '.' or '-' starting with a "
            f"letter, not {scheme!r}; pass e.g. 'postgresql'")
    return scheme


# -- parsing --------------------------------------------------------------------------

def parse_store_spec(spec: Any) -> StoreSpec:
    """The :class:`StoreSpec` of a plain directory or a ``scheme://`` URL.

    @raises InvalidArgumentError for an empty or non-text spec, text UTF-8
        cannot hold, a relative ``lmdb://`` path, or a scheme no back end is
        registered for (the message names the supported ones).
    """
    if isinstance(spec, StoreSpec):
        return spec
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, bytes) or not isinstance(spec, str):
        raise InvalidArgumentError(
            f"a store spec is a directory path or a URL such as lmdb:///abs/dir, not "
            f"{type(spec).__name__}; pass a str or a pathlib.Path")
    _check_text(spec, "store spec")
    if not spec.strip():
        raise InvalidArgumentError(
            "the store spec is empty; pass the directory that holds (or will hold) "
            "the store, e.g. './store', or a URL such as lmdb:///abs/dir")
    match = _SCHEME.match(spec)
    if match is None:
        return _lmdb(spec, spec)
    scheme = match.group(1).lower()
    rest = spec[match.end():]
    if scheme not in _backends:
        raise InvalidArgumentError(
            f"no store back end for {scheme}:// (in {spec!r}); supported: "
            + ", ".join(f"{s}://" for s in store_schemes())
            + " or a plain directory path")
    if scheme == "lmdb":
        if not rest.startswith("/"):
            raise InvalidArgumentError(
                f"an lmdb:// store spec takes an absolute path after the scheme, as in "
                f"lmdb:///abs/dir, not {spec!r}; pass a plain directory for a relative path")
        return _lmdb(rest, spec)
    return StoreSpec(scheme, rest, spec, f"{scheme}://{rest}")


def _lmdb(path: str, text: str) -> StoreSpec:
    return StoreSpec("lmdb", os.path.abspath(path), text, "lmdb://" + os.path.realpath(path))


def parse_cache_spec(spec: Any) -> CacheSpec:
    """The :class:`CacheSpec` of ``None`` (``memory://``) or a ``scheme://`` URL.

    @raises InvalidArgumentError for anything but text naming a registered scheme.
    """
    if isinstance(spec, CacheSpec):
        return spec
    if spec is None:
        return CacheSpec("memory", "", "memory://")
    if not isinstance(spec, str):
        raise InvalidArgumentError(
            f"a cache spec is a URL such as memory://, not {type(spec).__name__}; "
            "pass a str or None for the in-process default")
    _check_text(spec, "cache spec")
    match = _SCHEME.match(spec)
    scheme = None if match is None else match.group(1).lower()
    if scheme is None or scheme not in _caches:
        shown = f"{scheme}://" if scheme else repr(spec)
        raise InvalidArgumentError(
            f"no cache back end for {shown}; supported: "
            + ", ".join(f"{s}://" for s in cache_schemes()) + " (or None for memory://)")
    return CacheSpec(scheme, spec[match.end():], spec)


def store_identity(spec: StoreSpec) -> str:
    """A short stable id of the store ``spec`` names, from the spec alone: a
    directory's real path; for a URL, its scheme, host, port, database and
    ``schema`` (not the user, password or other options).

    The LMDB back end's ``identity()``, and the fallback for a registered back
    end without one.  For a server it depends on the spelling (``localhost`` and
    ``127.0.0.1`` differ), which is why the PostgreSQL back end reads its id from
    the store instead (:meth:`ctxrelay.storage.postgres.backend.PostgresBackend.identity`)."""
    if spec.scheme == "lmdb":
        ident = spec.key
    else:
        parts = urlsplit(spec.text)
        schema = [v for k, v in parse_qsl(parts.query) if k == "schema"]
        scheme = "postgresql" if spec.scheme == "postgres" else spec.scheme
        ident = f"{scheme}://{parts.hostname or ''}:{parts.port or ''}{parts.path}" \
                f"?schema={schema[-1] if schema else ''}"
    return hashlib.sha256(ident.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _check_text(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"the {what} holds a lone surrogate U+{ord(text[exc.start]):04X} at index "
            f"{exc.start}, which no file system path or URL can hold; decode the path "
            "with errors='surrogateescape' only for bytes you pass on as bytes, or fix it") \
            from None
