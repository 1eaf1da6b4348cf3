"""Fixtures of the integrity tests (issue 15); helpers re-exported from support.py."""
from __future__ import annotations

from pathlib import Path

import pytest
from support import LAUNCHER, ROOT, mounted_tmpfs, run_swipl  # noqa: F401  (re-exported)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, request) -> Path:
    """A populated store of every part, closed, for the tests of one module to copy."""
    import corruption_worker
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    store = tmp_path_factory.mktemp(name) / "store"
    corruption_worker.populate(store)
    corruption_worker.close_stores()
    return store
