"""examples/packer_constraints.pl runs as written and its packs keep the agent's rules.

(In the style of tests/docs/test_examples.py: the example runs in its own swipl with a
fresh store under tmp_path; the test checks its exit status and its output.)
"""
from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT, run_swipl

EXAMPLE = ROOT / "examples" / "packer_constraints.pl"


def test_packer_constraints_pl(tmp_path: Path) -> None:
    proc = run_swipl([str(EXAMPLE), str(tmp_path / "store")])
    out = proc.stdout
    assert proc.returncode == 0, f"packer_constraints.pl failed:\n{out}\n{proc.stderr}"

    # Part 1: the rules change the best pack (the full tool output is out) ...
    free = re.search(r"without the rules: utility (\d+): (.*)", out)
    assert free and "output-full" in free.group(2), out
    packs = re.findall(r"pack (\d): utility (\d+), (\d+) tokens, optimal: \[(.*)\]", out)
    assert [int(p[0]) for p in packs] == [1, 2, 3, 4], out
    utilities = [int(p[1]) for p in packs]
    assert utilities == sorted(utilities, reverse=True) and utilities[0] < int(free.group(1))
    for _, _, tokens, ids in packs:
        members = ids.split(",")
        assert int(tokens) <= 560
        assert "f1" in members and "f2" in members          # two facts on a drill-down
        assert "t2" not in members or "t1" in members       # the pinned turn first
    assert "a pack breaks the rules" not in out             # the example's own check

    # Part 2: assemble/4 under rules, alternatives best first, each within them.
    assert "part 2: session billing, 8 turns" in out
    alts = re.findall(r"alternative \d: utility ([\d.]+), (\d+) assistant turns, (\d+) tokens", out)
    assert len(alts) == 3, out
    assert [float(a[0]) for a in alts] == sorted((float(a[0]) for a in alts), reverse=True)
    assert all(int(a[1]) <= 2 and int(a[2]) <= 200 for a in alts)
    assert int(re.search(r"without the rules: utility [\d.]+, (\d+) assistant", out).group(1)) > 2
    assert "refused: No pack satisfies tokens(kind(message)) #=< 2" in out
