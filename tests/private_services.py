"""A PostgreSQL and a Redis of a test's own, which the test may restart, stop or flush.

The shared servers of ``make services`` (tests/services.py) serve every test at
once, so no test may restart them.  The outage tests need to: these fixtures
start a private PostgreSQL (``initdb`` into a fresh directory, the binaries
``make services`` installed, so pgvector is there too) and a private
``redis-server``, each on a free loopback port, and tear both down after the
test.

PostgreSQL refuses to run as root.  As root (CI, the dev machines) the server
runs as the unprivileged service user of ``make services``
(``$CTXRELAY_SERVICES_USER``, default ``ctxrelay``), in a directory of
``/tmp`` that user owns -- pytest's ``tmp_path`` is under a root-only (0700)
directory the user cannot enter; the directory is removed with the server.
As anyone else the server runs as that user, in ``tmp_path``.

Without the binaries a test skips saying how to install them, except where
``CTXRELAY_REQUIRE_SERVICES=1`` (CI): there it fails, as tests/services.py does.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

PG_BIN = Path(os.environ.get("CTXRELAY_PG_BIN", "/usr/lib/postgresql/15/bin"))
SERVICE_USER = os.environ.get("CTXRELAY_SERVICES_USER", "ctxrelay")
HOW = ("install them with 'make services' (as root on Debian 12: PostgreSQL 15 + pgvector "
       "and redis-server)")
DB = "ctxrelay"


def _missing(what: str) -> None:
    message = f"{what} is not installed; {HOW}"
    if os.environ.get("CTXRELAY_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " [CTXRELAY_REQUIRE_SERVICES=1: required here]")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user(argv: list[str]) -> list[str]:
    return ["runuser", "-u", SERVICE_USER, "--", *argv] if os.geteuid() == 0 else argv


class PrivatePostgres:
    """One PostgreSQL cluster: :meth:`restart` (``pg_ctl restart -m MODE``),
    :meth:`stop`, :meth:`start`; :attr:`url` is the database ``ctxrelay`` on it."""

    def __init__(self, tmp_path: Path) -> None:
        for tool in ("initdb", "pg_ctl", "pg_isready"):
            if not (PG_BIN / tool).exists():
                _missing(f"PostgreSQL ({PG_BIN / tool})")
        if os.geteuid() == 0:
            try:
                import pwd
                pwd.getpwnam(SERVICE_USER)
            except KeyError:
                _missing(f"the service user {SERVICE_USER!r} (made by 'make services')")
            self.home = Path(tempfile.mkdtemp(prefix="ctxrelay-pg-"))
            shutil.chown(self.home, SERVICE_USER, SERVICE_USER)
            self._owned = True
        else:
            self.home = tmp_path / "pg"
            self.home.mkdir()
            self._owned = False
        self.data = self.home / "data"
        self.log = self.home / "pg.log"
        self.port = free_port()
        self.url = f"postgresql://{SERVICE_USER if os.geteuid() == 0 else _me()}" \
                   f"@127.0.0.1:{self.port}/{DB}"
        user = SERVICE_USER if os.geteuid() == 0 else _me()
        self._run([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", user,
                   "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                       f"unix_socket_directories = '{self.home}'\nmax_connections = 100\n"
                       "shared_buffers = 32MB\nfsync = on\n")
        self.start()
        self._run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
                   "-U", user, DB])

    def _run(self, argv: list[str], timeout: float = 120) -> None:
        done = subprocess.run(_as_user(argv), capture_output=True, text=True, timeout=timeout,
                              check=False)
        if done.returncode:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}\n{tail}")

    def _ctl(self, *args: str) -> None:
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                   "-w", "-t", "60", *args])

    def start(self) -> None:
        self._ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: returns when the server accepts connections."""
        self._ctl("-m", mode, "restart")

    def ready(self) -> bool:
        return subprocess.run([str(PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p",
                               str(self.port)], check=False).returncode == 0

    def close(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._ctl("-m", "immediate", "stop")
        finally:
            if self._owned:
                shutil.rmtree(self.home, ignore_errors=True)


class PrivateRedis:
    """One ``redis-server`` (no persistence: a restart starts empty, as the shared
    one): :meth:`flushall`, :meth:`stop`, :meth:`start`, :meth:`restart`."""

    def __init__(self, tmp_path: Path) -> None:
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            _missing("redis-server")
        self.port = free_port()
        self.dir = tmp_path / f"redis-{self.port}"
        self.dir.mkdir()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def client(self):      # -> redis.Redis (imported here: only these tests need it)
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> None:
        self._log = open(self.dir / "redis.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
             "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.client().ping():
                    return
            except Exception:                            # not listening yet
                pass
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                f"redis-server did not start: {(self.dir / 'redis.log').read_text()[-1000:]}"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None
        self._log.close()

    def restart(self) -> None:
        self.stop()
        self.start()

    def flushall(self) -> None:
        self.client().flushall()

    def close(self) -> None:
        self.stop()


def _me() -> str:
    import getpass
    return getpass.getuser()
