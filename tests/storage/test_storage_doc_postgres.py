"""docs/storage.md, its PostgreSQL and Redis section: every example runs as written."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from services import redis_url
from support import ROOT

SECTION = (ROOT / "docs" / "storage.md").read_text(encoding="utf-8") \
    .split("## PostgreSQL and Redis", 1)[1]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, flags=re.S)


@pytest.fixture
def store_url(pg_schema):
    redis_url()                                        # the example names both
    return pg_schema[0]


def _env(store_url: str) -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT / "python"), "CTXRELAY_STORE_URL": store_url,
            "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}/usr/bin:/bin"}


def test_the_python_example_runs_and_prints_what_its_comments_say(store_url):
    [code] = _blocks("py")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=_env(store_url))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "True"]


def test_every_shell_line_runs(store_url, tmp_path):
    status, migrate = _blocks("sh")
    for line in status.strip().splitlines():
        r = subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env=_env(store_url))
        assert r.returncode == 0 and "CTXRELAY_TEST_PG=" in r.stdout, r.stderr
    outs = []
    for line in migrate.strip().splitlines():
        r = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300, env=_env(store_url))
        assert r.returncode == 0, f"`{line}`: {r.stderr}"
        outs.append(r.stdout)
    assert "Restic backups run nightly" in outs[-3]   # the fact, back from PostgreSQL
    assert "our etcd quota is 8 GiB" in outs[-2]     # the history, back from PostgreSQL
    assert "kubectl" in outs[-1]                     # the tool output, back too
    for report in outs[-5:-3]:                       # a line and a checksum per part
        assert all(f"  {part}" in report for part in ("transcript", "facts", "scratch"))
