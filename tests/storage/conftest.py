"""Fixtures of the storage tests: the back ends each conformance suite runs on.

Each module of ``conformance/`` names the store it tests (``STORE = "warm"``)
and asks for the ``backend`` fixture; it is parametrised here by every back
end that implements that store (:data:`BACKENDS`).  A second back end
(PostgreSQL, Redis) joins the suites by adding its name to the stores it
implements and a harness to :data:`HARNESSES`; the tests themselves use the
Protocols only (``conformance/protocol_view.py``).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from support import LAUNCHER, ROOT, mounted_tmpfs, run_swipl  # noqa: F401  (re-exported)

#: store -> the back ends its conformance suite runs on
BACKENDS: dict[str, list[str]] = {
    "transcript": ["lmdb", "postgres"],
    "turnlog": ["lmdb", "postgres"],
    "warm": ["lmdb", "postgres"],
    "scratch": ["lmdb", "postgres"],
    "rolling": ["mmap", "memory", "redis"],
    "cache": ["memory", "redis"],
}


class StoresHarness:
    """A back end reached as users reach it: ``open_stores(spec)``, parts as attributes.

    ``open()`` gives the :class:`~ctxrelay.storage.stores.Stores`; ``reopen()``
    closes it and opens the same spec again (what the next process sees).
    """

    durable = True

    def __init__(self, spec: str, **options: Any) -> None:
        self.spec, self.options = spec, options
        self.stores: Any = None

    def open(self, **options: Any) -> Any:
        from ctxrelay.storage import open_stores
        self.options = {**self.options, **options}
        self.stores = open_stores(self.spec, **self.options)
        return self.stores

    def reopen(self) -> Any:
        self.close()
        return self.open()

    def close(self) -> None:
        if self.stores is not None:
            while not self.stores.close():     # every reference a test took
                pass
            self.stores = None


class PostgresHarness(StoresHarness):
    """A store in a schema of its own on the test server (``tests/services.py``),
    dropped after the test; skips (or, under ``make test``/CI, fails) without one."""

    def __init__(self, **options: Any) -> None:
        from services import fresh_schema_url
        spec, self.schema = fresh_schema_url()
        super().__init__(spec, **options)

    def reopen(self) -> Any:
        StoresHarness.close(self)             # the stores only: the schema stays
        return self.open()

    def close(self) -> None:
        from services import drop_schema
        super().close()
        drop_schema(self.schema)


class RedisHarness(StoresHarness):
    """A store whose hot tier is the test Redis, under a key prefix of its own
    (its keys are deleted after the test)."""

    def __init__(self, spec: str) -> None:
        import uuid

        from services import redis_url
        self.redis = redis_url()
        self.prefix = f"t{uuid.uuid4().hex[:16]}"
        sep = "&" if "?" in self.redis else "?"
        super().__init__(spec, cache=f"{self.redis}{sep}prefix={self.prefix}")

    def reopen(self) -> Any:
        StoresHarness.close(self)             # the stores only: the Redis keys stay
        return self.open()

    def close(self) -> None:
        import redis
        super().close()
        client = redis.Redis.from_url(self.redis)
        doomed = list(client.scan_iter(match=f"{self.prefix}:*"))
        if doomed:
            client.delete(*doomed)
        client.close()


class MemoryRollingHarness:
    """The ``memory`` rolling log: the same contract, nothing kept across opens."""

    durable = False

    def __init__(self) -> None:
        self.log: Any = None

    def open(self, ring_entries: int = 128, ring_bytes: int = 256 << 10) -> Any:
        from ctxrelay.storage.rolling import MemoryRollingLog
        self.log = MemoryRollingLog(capacity_entries=ring_entries, capacity_bytes=ring_bytes)
        return _Parts(rolling=self.log)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


class _Parts:
    def __init__(self, **parts: Any) -> None:
        self.__dict__.update(parts)


HARNESSES: dict[tuple[str, str], Callable[[Path], Any]] = {
    **{(store, "lmdb"): (lambda tmp: StoresHarness(str(tmp / "store")))
       for store in ("transcript", "turnlog", "warm", "scratch")},
    ("transcript", "postgres"): lambda tmp: PostgresHarness(),
    ("turnlog", "postgres"): lambda tmp: PostgresHarness(),
    ("warm", "postgres"): lambda tmp: PostgresHarness(),
    ("scratch", "postgres"): lambda tmp: PostgresHarness(),
    ("rolling", "mmap"): lambda tmp: StoresHarness(str(tmp / "store")),
    ("rolling", "memory"): lambda tmp: MemoryRollingHarness(),
    ("cache", "memory"): lambda tmp: StoresHarness(str(tmp / "store"), cache="memory://"),
    ("cache", "redis"): lambda tmp: RedisHarness(str(tmp / "store")),
    ("rolling", "redis"): lambda tmp: RedisHarness(str(tmp / "store")),
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    store = getattr(metafunc.module, "STORE", None)
    if store is not None and "backend" in metafunc.fixturenames:
        # (a suite without STORE, such as test_facts.py, brings its own backend fixture)
        metafunc.parametrize("backend", [(store, name) for name in BACKENDS[store]],
                             ids=BACKENDS[store], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    harness = HARNESSES[request.param](tmp_path)
    yield harness
    harness.close()


@pytest.fixture(autouse=True)
def _close_every_store():
    """Every store a test opened is closed after it (LMDB: one environment per path)."""
    yield
    from ctxrelay.storage import close_all
    close_all()


@pytest.fixture(autouse=True, scope="session")
def _ann_snapshots_in_a_temporary_directory(tmp_path_factory):
    """The per-process ANN snapshots of PostgreSQL stores (storage/postgres/annslot.py)
    go under the test run's directory, not the machine's temporary directory."""
    import os
    before = os.environ.get("CTXRELAY_ANN_DIR")
    os.environ["CTXRELAY_ANN_DIR"] = str(tmp_path_factory.mktemp("ann"))
    yield
    if before is None:
        os.environ.pop("CTXRELAY_ANN_DIR", None)
    else:
        os.environ["CTXRELAY_ANN_DIR"] = before
