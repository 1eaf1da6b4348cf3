"""Shared fixtures: a fresh store directory, the Python path for subprocesses.

The helpers (ROOT, the swipl launcher, a tmpfs) live in ``support.py`` and are
re-exported here, so ``from conftest import ROOT`` keeps working in every
test directory (each directory's conftest re-exports them too).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from support import LAUNCHER, ROOT, mounted_tmpfs, run_swipl  # noqa: F401  (re-exported)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def python_path_env() -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT / "python"), "PATH": os.environ.get("PATH", "")}


__all__ = ["ROOT", "LAUNCHER", "mounted_tmpfs", "run_swipl"]


# Property tests draw the same examples on every run (the suite is deterministic: a
# red CI is a change's fault, not the draw's).  HYPOTHESIS_PROFILE=explore draws
# fresh examples, many more of them, to look for cases the fixed draw misses.
settings.register_profile("fixed", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=1000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


# -- a PostgreSQL and a Redis of the test's own (tests/private_services.py) ------------


@pytest.fixture
def private_postgres(tmp_path: Path):
    """A PostgreSQL cluster only this test uses (it may restart or stop it); removed after."""
    from private_services import PrivatePostgres
    server = PrivatePostgres(tmp_path)
    yield server
    server.close()


@pytest.fixture
def private_redis(tmp_path: Path):
    """A redis-server only this test uses (it may flush, stop or restart it)."""
    from private_services import PrivateRedis
    server = PrivateRedis(tmp_path)
    yield server
    server.close()


@pytest.fixture
def pg_schemas():
    """Makes PostgreSQL schemas of the test's own on the test server: each call gives
    ``(spec, schema)``; afterwards every store in the process is closed and every
    schema made dropped (stop the processes that use them -- relays -- in the test)."""
    from services import drop_schema, fresh_schema_url

    from ctxrelay.storage import close_all
    made: list[str] = []

    def make() -> tuple[str, str]:
        spec, schema = fresh_schema_url()
        made.append(schema)
        return spec, schema
    yield make
    close_all()
    for schema in made:
        drop_schema(schema)


@pytest.fixture
def pg_schema(pg_schemas):
    """A PostgreSQL schema of the test's own on the test server: ``(spec, schema)``;
    afterwards every store opened on it is closed and the schema dropped."""
    return pg_schemas()
