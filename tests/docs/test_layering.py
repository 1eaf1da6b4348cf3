"""The package layout keeps its layers: who may import whom, no import cycle, small modules.

docs/architecture.md describes the layers; this test holds the code to them.  Imports
are read from the source (``ast``), including the ones inside functions (a lazy import
is still a dependency) and excluding ``if TYPE_CHECKING:`` blocks (annotations only).
"""
from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

from support import ROOT

PACKAGE = ROOT / "python" / "ctxrelay"

#: layer -> the layers it may import (besides itself).  The base modules (errors,
#: types, memo) are importable from everywhere; "ctxrelay" is the package itself
#: (its __init__ loads the engine and the facade).
BASE = {"errors", "types", "memo"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(), "types": set(), "memo": set(),
    "providers": set(),
    "text": set(),
    "storage": {"text"},
    "knowledge": {"text", "storage"},
    "retrieval": {"text", "storage", "knowledge"},
    "bridge": {"text", "storage", "retrieval", "knowledge", "providers"},
    "runtime": {"text", "storage", "bridge", "providers"},
    "ctxrelay": {"bridge", "runtime"},
    "apps": {"ctxrelay", "runtime", "bridge", "text", "storage", "knowledge", "retrieval",
             "providers"},
    "__main__": {"apps"},           # python -m ctxrelay: the CLI
}

#: (importing module, imported module) pairs that cross the layers above, each with
#: why it stays.  Keep it short: a new entry needs a reason a reviewer accepts.
EXCEPTIONS = {
    ("ctxrelay.storage.lmdb.backend", "ctxrelay.knowledge.fabric"):
        "the embedded facts store is the CKF (LMDB + HNSW + graph); the LMDB back end "
        "opens it lazily, so storage does not load knowledge until facts are asked for",
    ("ctxrelay.storage.postgres.backend", "ctxrelay.knowledge.fabric"):
        "the same for PostgreSQL: its open_facts puts the CKF over the PostgreSQL "
        "fact storage, lazily",
    ("ctxrelay.knowledge.promotion", "ctxrelay.bridge.engine"):
        "promote_after_turn() and parse_namings() are Python entries to the Prolog rules "
        "(ctxrelay_promotion, ctxrelay_naming): they call Prolog, they decide nothing",
}


def excused(module: str, target: str) -> bool:
    """``module`` may import ``target`` by an exception (or target's parent package)."""
    return any(m == module and (t == target or t.startswith(target + "."))
               for m, t in EXCEPTIONS)

#: modules over the size limit that another change is splitting (issue 13); an entry
#: that has come under the limit is simply no longer needed.
SIZE_LIMIT = 800
BEING_SPLIT = {"python/ctxrelay/retrieval/candidates.py", "python/ctxrelay/text/tokens.py",
               "prolog/ctxrelay/references.pl"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ctxrelay"


def imports(path: Path) -> set[str]:
    """The ctxrelay modules ``path`` imports, resolved to module names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    me = module_name(path)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] +
                                ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in MODULES else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    found = {m for m in found if m in MODULES and m != me}
    # Importing a.b.c runs a/__init__ and a/b/__init__ first.
    for m in list(found):
        parts = m.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts))
                     if not me.startswith(".".join(parts[:i]) + ".") and me != ".".join(parts[:i]))
    return found


GRAPH = {m: imports(p) for m, p in MODULES.items()}


def private_imports(me: str, source: str, *, package: bool = False) -> list[str]:
    """``from X import _name`` in module ``me`` (``source``) where X is another ctxrelay
    module and ``_name`` a name of it (not a submodule; dunder names are public),
    inside functions too.  ``from X import public as _alias`` is fine."""
    parent = me.split(".") if package else me.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            base = ".".join(parent[:len(parent) - node.level + 1] +
                            ([node.module] if node.module else []))
        if base not in MODULES or base == me:
            continue
        found += [f"{me}:{node.lineno} imports {alias.name} from {base}"
                  for alias in node.names
                  if alias.name.startswith("_") and not alias.name.endswith("__")
                  and f"{base}.{alias.name}" not in MODULES]
    return found


def test_the_layers_are_known():
    assert {layer(m) for m in MODULES} <= set(ALLOWED), \
        "a new top-level module or subpackage: give it a place in ALLOWED (and in " \
        "docs/architecture.md)"


def test_no_module_imports_a_layer_above_it():
    crossings = []
    for module, targets in GRAPH.items():
        mine = layer(module)
        for target in targets:
            theirs = layer(target)
            if theirs in (mine, *BASE) or theirs in ALLOWED[mine] or target == "ctxrelay":
                continue
            if not excused(module, target):
                crossings.append(f"{module} -> {target}")
    assert not crossings, "imports across the layers of docs/architecture.md:\n" + \
        "\n".join(sorted(crossings))


def test_the_exceptions_are_still_needed():
    stale = [pair for pair in EXCEPTIONS if pair[1] not in GRAPH.get(pair[0], set())]
    if stale:                                       # a warning: parallel work may remove one
        warnings.warn(f"no longer imported, remove from EXCEPTIONS: {stale}")


@pytest.mark.parametrize("low, high", [("storage", "retrieval"), ("storage", "apps"),
                                       ("storage", "bridge"), ("bridge", "apps"),
                                       ("text", "storage"), ("retrieval", "bridge"),
                                       ("retrieval", "apps")])
def test_a_lower_layer_never_imports_a_higher_one(low, high):
    # The rules docs/architecture.md states, checked one by one (ALLOWED must agree).
    assert high not in ALLOWED[low]
    assert not [(m, t) for m, ts in GRAPH.items() if layer(m) == low
                for t in ts if layer(t) == high]


#: storage's back ends: each may use storage/common, storage/interfaces and the
#: modules at storage's top, never another back end's package (a shared part moves to
#: storage/common, as the transcript's, scratch buffer's and facts' state did).
BACK_ENDS = ("lmdb", "postgres", "redis", "memory")


@pytest.mark.parametrize("backend", BACK_ENDS)
def test_a_back_end_never_imports_another(backend):
    me = f"ctxrelay.storage.{backend}"
    assert any(m == me or m.startswith(me + ".") for m in MODULES), f"no package {me}"
    others = [f"ctxrelay.storage.{b}" for b in BACK_ENDS if b != backend]
    crossing = sorted((m, t) for m, ts in GRAPH.items() if m == me or m.startswith(me + ".")
                      for t in ts for o in others if t == o or t.startswith(o + "."))
    assert not crossing, f"{backend} imports another back end's modules: {crossing}"


def test_common_storage_imports_no_back_end():
    crossing = sorted((m, t) for m, ts in GRAPH.items()
                      if m.startswith("ctxrelay.storage.common") for t in ts
                      for b in BACK_ENDS if t.startswith(f"ctxrelay.storage.{b}"))
    assert not crossing, f"storage/common imports a back end: {crossing}"


def test_there_is_no_import_cycle():
    # Tarjan's strongly connected components over the module graph.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_import_graph_is_resolved():
    # The checks above could not fail if imports() resolved nothing.
    assert "ctxrelay.storage.spec" in GRAPH["ctxrelay.storage.stores"]
    assert "ctxrelay.storage" in GRAPH["ctxrelay.knowledge.fabric"]   # the parent package too


def test_no_module_is_over_the_size_limit():
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "prolog").rglob("*.pl")]
    over = [f"{p.relative_to(ROOT)}: {n} lines" for p in sources
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > SIZE_LIMIT
            and str(p.relative_to(ROOT)) not in BEING_SPLIT]
    assert not over, f"modules over {SIZE_LIMIT} lines (split them by concern): {over}"


def test_prolog_calls_python_through_the_bridge():
    # Every Python function Prolog calls is in bridge/ (directly or re-exported there),
    # so the surface the Prolog side depends on is one package.
    called = set()
    for path in (ROOT / "prolog").rglob("*.pl"):
        called.update(re.findall(r"py_call(?:_plain)?\(\s*'(ctxrelay[\w.]*)':",
                                 path.read_text(encoding="utf-8")))
    assert "ctxrelay.bridge.stores" in called
    outside = sorted(m for m in called if not m.startswith("ctxrelay.bridge."))
    assert not outside, f"Prolog calls Python outside bridge/: {outside}"


def test_no_module_imports_another_modules_private_names():
    # A name another module uses is part of its module's interface: public (no
    # underscore), so that a change to it is seen as one.  Splitting a module left
    # its parts sharing underscore names (issue 13); they became public names.
    found = [hit for module, path in MODULES.items()
             for hit in private_imports(module, path.read_text(encoding="utf-8"),
                                        package=path.name == "__init__.py")]
    assert not found, "imports of another module's underscore names (make the name " \
        "public in the module that defines it, or move it):\n" + "\n".join(sorted(found))


def test_private_imports_are_found():
    # The check above could not fail if private_imports() missed these forms.
    source = ("from ctxrelay.retrieval.pricing import _x, ok\n"
              "def f():\n    from .units import _y\n"
              "from ctxrelay.text.tokens import count as _count\n"
              "from ctxrelay.retrieval import __doc__, tail\n")
    hits = private_imports("ctxrelay.retrieval.probe", source)
    assert [h.split(" imports ")[1] for h in hits] == [
        "_x from ctxrelay.retrieval.pricing", "_y from ctxrelay.retrieval.units"]
