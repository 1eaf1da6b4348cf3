"""Helpers the test modules share: the project root, the swipl launcher, a tmpfs.

Imported as ``from support import ...`` (the tests directory is on sys.path,
since its conftest.py is not in a package); conftest.py files re-export them.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
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


@contextlib.contextmanager
def mounted_tmpfs(mount_point: Path, size: str):
    """A tmpfs of ``size`` at ``mount_point`` (needs root, as CI and the dev machines
    are; skips the test otherwise); every store is closed before it is unmounted."""
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                           str(mount_point)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        from ctxrelay.storage import close_all
        close_all()
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def spawn_transcript_worker(*args: object) -> subprocess.Popen:
    """Run tests/_transcript_worker.py in its own process (this checkout's code)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT / "python"), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "_transcript_worker.py"),
                             *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def watchdog(proc: subprocess.Popen, seconds: float) -> threading.Timer:
    """Kill ``proc`` if the test is still waiting on it after ``seconds``."""
    timer = threading.Timer(seconds, proc.kill)
    timer.daemon = True
    timer.start()
    return timer


__all__ = ["ROOT", "LAUNCHER", "mounted_tmpfs", "run_swipl", "spawn_transcript_worker",
           "watchdog"]


def fenced_blocks(doc: Path) -> list[tuple[str, list[str]]]:
    """Each fenced block of a Markdown page as (language, its non-blank lines that
    are not comments); language '' for an unlabelled block."""
    found: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
                found.append((line[3:].strip(), current))
            else:
                current = None
        elif current is not None and line.strip() and not line.startswith("#"):
            current.append(line)
    return found
