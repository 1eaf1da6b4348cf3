"""Shared fixtures: the project root, the swipl launcher, a fresh store."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "bin" / "ctxrelay-swipl"


def run_swipl(args: list[str], *, cwd: Path | None = None, timeout: float = 300,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the project's swipl launcher (Prolog as host, Python embedded)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([str(LAUNCHER), *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def python_path_env() -> dict[str, str]:
    return {"PYTHONPATH": str(ROOT / "python"), "PATH": os.environ.get("PATH", "")}


__all__ = ["ROOT", "LAUNCHER", "run_swipl", "sys"]
