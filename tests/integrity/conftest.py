"""Fixtures of the integrity tests (issue 15); helpers re-exported from support.py."""
from __future__ import annotations

from support import LAUNCHER, ROOT, mounted_tmpfs, run_swipl  # noqa: F401  (re-exported)
