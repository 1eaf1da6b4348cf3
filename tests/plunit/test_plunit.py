"""Run every plunit suite under tests/plunit from pytest: one command, one verdict.

Each .pl file runs in its own swipl (started by bin/ctxrelay-swipl, so janus
embeds the project's Python); the file fails here when any of its tests fail.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import ROOT, run_swipl

SUITES = sorted((ROOT / "tests" / "plunit").glob("test_*.pl"))


@pytest.mark.parametrize("suite", SUITES, ids=[p.stem for p in SUITES])
def test_plunit_suite(suite: Path, tmp_path: Path) -> None:
    goal = "(run_tests -> halt(0) ; halt(1))"
    proc = run_swipl(["-g", goal, str(suite)],
                     env={"CTXRELAY_TEST_TMP": str(tmp_path)})
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"plunit suite {suite.name} failed:\n{report}"
    assert "No tests to run" not in report, f"{suite.name} ran no test:\n{report}"


def test_plunit_suites_exist() -> None:
    assert SUITES, "no plunit suites found under tests/plunit"
