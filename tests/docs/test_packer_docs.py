"""The examples in docs/packer.md and README.md ("Packs under your own rules") run as shown.

A block preceded by ``<!-- doc-test: prolog -->`` holds ``?-`` queries; the
last one binds ``P`` and the ``P = ...`` lines after it are its answers, in
order.  A block preceded by ``<!-- doc-test: python -->`` runs as a script in
a fresh directory (its asserts are the checks).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_swipl

DOCS = [ROOT / "docs" / "packer.md", ROOT / "README.md"]
BLOCK = re.compile(r"<!-- doc-test: (prolog|python) -->\n```\w+\n(.*?)```", re.S)


def blocks(kind: str) -> list[object]:
    out = []
    for doc in DOCS:
        for i, (k, body) in enumerate(BLOCK.findall(doc.read_text(encoding="utf-8"))):
            if k == kind:
                out.append(pytest.param(f"{doc.name}#{i}", body, id=f"{doc.name}#{i}"))
    return out


def test_the_docs_have_examples() -> None:
    assert len(blocks("prolog")) >= 2 and len(blocks("python")) >= 3


@pytest.mark.parametrize("name, body", blocks("prolog"))
def test_prolog_example(name: str, body: str, tmp_path: Path) -> None:
    queries, answers, current = [], [], []
    for line in body.splitlines():
        if line.startswith("P = "):
            answers.append(re.sub(r"\s+", "", line[4:].rstrip(" ;.")))
        elif line.startswith("?- ") or current:
            current.append(line[3:] if line.startswith("?- ") else line)
            if line.rstrip().endswith("."):
                queries.append("\n".join(current).rstrip()[:-1])
                current = []
    *setup, last = queries
    program = tmp_path / "doc_example.pl"
    program.write_text(
        "".join(f":- {q}.\n" for q in setup) +      # loading: the operators the text uses
        ":- initialization(main, main).\n"
        "main :-\n" +
        f"    findall(P, ({last}), Ps),\n"
        "    forall(member(P, Ps), ( print(P), nl )).\n", encoding="utf-8")
    proc = run_swipl([str(program)])
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
    got = [re.sub(r"\s+", "", line) for line in proc.stdout.splitlines() if line.strip()]
    assert got == answers, f"{name}: the docs show {answers}, the packer gives {got}"


@pytest.mark.parametrize("name, body", blocks("python"))
def test_python_example(name: str, body: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "python")})
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}\n{proc.stderr}"
