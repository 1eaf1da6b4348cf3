"""Fixtures of the storage tests: the back ends each conformance suite runs on.

A second back end (PostgreSQL, Redis) joins the suites by adding a param to
the fixture of each store it implements; the tests use the Protocols only.
"""
from __future__ import annotations

import pytest

from support import LAUNCHER, ROOT, mounted_tmpfs, run_swipl  # noqa: F401  (re-exported)


@pytest.fixture(autouse=True)
def _close_every_store():
    """Every store a test opened is closed after it (LMDB: one environment per path)."""
    yield
    from ctxrelay.storage import close_all
    close_all()
