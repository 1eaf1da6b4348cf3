"""docs/architecture.md's table "One home per decision" names code that exists.

Each cell names Prolog files (``policy.pl``, ``packer/model.pl``) followed by the
predicates that decide (``option_default/3``), and Python modules or functions that
supply numbers: every predicate must be defined in the file named before it, every
Python name must import.  A rename that forgets the page fails here.
"""
from __future__ import annotations

import importlib
import re

import pytest

from support import ROOT

PAGE = ROOT / "docs" / "architecture.md"


def table_rows() -> list[tuple[str, str]]:
    text = PAGE.read_text(encoding="utf-8")
    section = re.search(r"^## One home per decision\n(.*?)^## ", text, flags=re.S | re.M).group(1)
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "---" not in ln]
    return [tuple(cell.strip() for cell in row.strip("|").split(" | "))[:2] for row in rows[1:]]


def references(cell: str) -> list[tuple[str, str]]:
    """(kind, name) for each backticked name of a cell, Prolog predicates paired with
    the file named last before them."""
    out, current = [], None
    for token in re.findall(r"`([^`]+)`", cell):
        if token.endswith(".pl"):
            current = token
            out.append(("pl-file", token))
        elif token.endswith(".py"):
            out.append(("py-file", token))
        elif re.fullmatch(r"[a-z_]+/\d", token):
            out.append(("predicate", f"{current}:{token}"))
        elif token.startswith("ctxrelay."):
            out.append(("python", token))
    return out


ROWS = table_rows()
REFS = sorted({ref for _, cell in ROWS for ref in references(cell)})


def test_the_table_is_there():
    assert len(ROWS) >= 15
    assert sum(kind == "predicate" for kind, _ in REFS) >= 30


@pytest.mark.parametrize("kind, name", REFS)
def test_each_name_in_the_table_exists(kind, name):
    if kind == "pl-file":
        assert (ROOT / "prolog" / "ctxrelay" / name).is_file(), name
    elif kind == "py-file":
        assert (ROOT / "python" / "ctxrelay" / name).is_file(), name
    elif kind == "python":
        module, _, attr = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), name
    else:
        file, _, pi = name.partition(":")
        assert file != "None", f"{pi} is not preceded by the file that defines it"
        pred, arity = pi.split("/")
        source = (ROOT / "prolog" / "ctxrelay" / file).read_text(encoding="utf-8")
        heads = re.findall(rf"^{pred}\((.*?)\)\s*(?::-|-->|=>|\.)", source, flags=re.M)
        assert heads or re.search(rf"^{pred}\s*(?::-|\.)", source, flags=re.M), \
            f"{pred} is not defined in {file}"
