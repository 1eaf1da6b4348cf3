"""The servers of the PostgreSQL and Redis back ends, for the tests that need them.

``make services`` (scripts/services.sh) starts them and writes their URLs to
``.services.env``; ``CTXRELAY_TEST_PG`` / ``CTXRELAY_TEST_REDIS`` in the
environment override it.  Without them a test skips, saying how to start
them -- except where ``CTXRELAY_REQUIRE_SERVICES=1`` (``make test``, CI):
there a missing server fails the test, so a green run cannot hide it.
"""
from __future__ import annotations

import os
import uuid
from functools import lru_cache

import pytest

from support import ROOT

HOW = ("start them with 'make services' (as root on Debian 12: installs and starts "
       "PostgreSQL+pgvector and Redis on loopback ports)")


@lru_cache(maxsize=None)
def _env_file() -> dict[str, str]:
    path = ROOT / ".services.env"
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _url(name: str) -> str | None:
    return os.environ.get(name) or _env_file().get(name)


def _missing(what: str, detail: str) -> None:
    message = f"{what} is not available ({detail}); {HOW}"
    if os.environ.get("CTXRELAY_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " [CTXRELAY_REQUIRE_SERVICES=1: required here]")
    pytest.skip(message)


@lru_cache(maxsize=None)
def _pg_problem(url: str) -> str | None:
    try:
        import psycopg
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:          # any failure: the server is not usable
        return f"{type(exc).__name__}: {str(exc).strip()[:200]}"
    return None


@lru_cache(maxsize=None)
def _redis_problem(url: str) -> str | None:
    try:
        import redis
        redis.Redis.from_url(url, socket_timeout=5).ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip()[:200]}"
    return None


def postgres_url() -> str:
    """The test server's URL (skip or fail as the module doc says)."""
    url = _url("CTXRELAY_TEST_PG")
    if not url:
        _missing("PostgreSQL", "no CTXRELAY_TEST_PG and no .services.env")
    problem = _pg_problem(url)
    if problem:
        _missing("PostgreSQL", f"{url}: {problem}")
    return url


def redis_url() -> str:
    url = _url("CTXRELAY_TEST_REDIS")
    if not url:
        _missing("Redis", "no CTXRELAY_TEST_REDIS and no .services.env")
    problem = _redis_problem(url)
    if problem:
        _missing("Redis", f"{url}: {problem}")
    return url


def fresh_schema_url() -> tuple[str, str]:
    """A store spec on the test server in a schema of its own: (spec, schema)."""
    base = postgres_url()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema={schema}", schema


def drop_schema(schema: str) -> None:
    import psycopg
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
