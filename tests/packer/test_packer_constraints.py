"""Property tests of users' constraints in the packer (prolog/ctxrelay/packer/).

Small random instances (units with kinds, variants, random structural
constraints, a few mandatory units) get one to three random user
constraints: linear relations over count/tokens/utility of selectors, in/1
and variant/2 (compiled into the search as rows), and relations the search
checks on complete packs (#\\=, disjunctions, implications).  Every answer is
compared with a brute force in Python:

- the first pack of pack/5 is a brute-force optimum of the model including
  the user constraints, and it satisfies them;
- the alternatives enumerate every admissible selection exactly once, in
  non-increasing utility (small instances);
- labelling the CLP(FD) model of pack_constraints/6 with labeling([max(U)])
  finds the same optimum;
- when nothing is admissible, pack/5 fails and pack_best/5 says why: the
  structural contradiction, the overflow of the mandatory units, or a
  minimal set of user constraints that has no pack (checked by brute force:
  the set has none, and dropping any one of them leaves one).

Constraints cross janus as strings and as tuples (both forms must agree).
Hypothesis is derandomized.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

janus = pytest.importorskip("janus_swi")

PACKER = Path(__file__).resolve().parents[2] / "prolog" / "ctxrelay" / "packer.pl"
KINDS = ("ka", "kb", "kc")
Selection = tuple[int, ...]


MODULE = "packer_tests"     # the packer is loaded here, not into user: a test of
                            # what library(ctxrelay) puts into user runs in this process


def query_once(goal: str, bindings: dict[str, Any] | None = None) -> dict[str, Any]:
    return janus.query_once(f"{MODULE}:({goal})", bindings or {})


def query(goal: str, bindings: dict[str, Any]):
    return janus.query(f"{MODULE}:({goal})", bindings)


@pytest.fixture(scope="module", autouse=True, params=[8, 0], ids=["merge", "no-merge"])
def _packer(request) -> None:
    """Every test twice: rows of few classes merged into a class (the default,
    8), and every row kept for the Lagrangian search (0)."""
    janus.query_once(f"{MODULE}:use_module(F)", {"F": str(PACKER)})
    query_once("use_module(library(clpfd))")   # its operators, to read texts back
    query_once("set_prolog_flag(packer_absorb_max_classes, N)", {"N": request.param})
    yield
    query_once("set_prolog_flag(packer_absorb_max_classes, 8)")


# --------------------------------------------------------------------------
# Constraints: a small AST that renders to Prolog text and to janus tuples,
# and that Python evaluates on a selection.

def sel_text(s: Any) -> str:
    tag = s[0]
    if tag == "all":
        return "all"
    if tag == "mandatory":
        return "mandatory"
    if tag == "kind":
        return f"kind({s[1]})"
    if tag == "ids":
        return "ids([" + ", ".join(s[1]) + "])"
    if tag == "and":
        return f"({sel_text(s[1])}, {sel_text(s[2])})"
    if tag == "not":
        return f"\\+ {sel_text(s[1])}"
    raise ValueError(s)


def sel_tuple(s: Any) -> Any:
    tag = s[0]
    if tag in ("all", "mandatory"):
        return tag
    if tag == "kind":
        return ("kind", s[1])
    if tag == "ids":
        return ("ids", list(s[1]))
    if tag == "and":
        return (",", sel_tuple(s[1]), sel_tuple(s[2]))
    if tag == "not":
        return ("\\+", sel_tuple(s[1]))
    raise ValueError(s)


def expr_text(e: Any) -> str:
    tag = e[0]
    if tag == "int":
        return str(e[1])
    if tag in ("count", "tokens", "utility"):
        return f"{tag}({sel_text(e[1])})"
    if tag == "in":
        return f"in({e[1]})"
    if tag == "variant":
        return f"variant({e[1]}, {e[2]})"
    if tag == "add":
        return f"({expr_text(e[1])} + {expr_text(e[2])})"
    if tag == "mul":
        return f"{e[1]}*({expr_text(e[2])})"
    raise ValueError(e)


def expr_tuple(e: Any) -> Any:
    tag = e[0]
    if tag == "int":
        return e[1]
    if tag in ("count", "tokens", "utility"):
        return (tag, sel_tuple(e[1]))
    if tag == "in":
        return ("in", e[1])
    if tag == "variant":
        return ("variant", e[1], e[2])
    if tag == "add":
        return ("+", expr_tuple(e[1]), expr_tuple(e[2]))
    if tag == "mul":
        return ("*", e[1], expr_tuple(e[2]))
    raise ValueError(e)


REL = {"=<": "#=<", "<": "#<", ">=": "#>=", ">": "#>", "=": "#=", "\\=": "#\\="}
BOOL = {"and": "#/\\", "or": "#\\/", "imp": "#==>"}


def con_text(c: Any) -> str:
    tag = c[0]
    if tag in REL:
        return f"({expr_text(c[1])} {REL[tag]} {expr_text(c[2])})"
    if tag in BOOL:
        return f"({con_text(c[1])} {BOOL[tag]} {con_text(c[2])})"
    if tag == "not":
        return f"#\\ {con_text(c[1])}"
    raise ValueError(c)


def con_tuple(c: Any) -> Any:
    tag = c[0]
    if tag in REL:
        return (REL[tag], expr_tuple(c[1]), expr_tuple(c[2]))
    if tag in BOOL:
        return (BOOL[tag], con_tuple(c[1]), con_tuple(c[2]))
    if tag == "not":
        return ("#\\", con_tuple(c[1]))
    raise ValueError(c)


@dataclass(frozen=True)
class Instance:
    variants: tuple[tuple[tuple[int, int], ...], ...]
    kinds: tuple[str, ...]
    mandatory: tuple[bool, ...]
    together: tuple[tuple[int, ...], ...]
    excludes: tuple[tuple[int, int], ...]
    requires: tuple[tuple[int, int], ...]
    user: tuple[Any, ...]
    budget: int

    @property
    def n(self) -> int:
        return len(self.variants)

    def units(self) -> list[Any]:
        return [("unit", f"u{i}", [("variant", f"v{k + 1}", c, u) for k, (c, u) in enumerate(vs)],
                 [("kind", self.kinds[i])] + ([("mandatory", True)] if self.mandatory[i] else []))
                for i, vs in enumerate(self.variants)]

    def structural(self) -> list[Any]:
        cs: list[Any] = [("together", [f"u{i}" for i in g]) for g in self.together]
        cs += [("excludes", f"u{a}", f"u{b}") for a, b in self.excludes]
        cs += [("requires", f"u{a}", f"u{b}") for a, b in self.requires]
        return cs

    def constraints(self, form: str = "text") -> list[Any]:
        if form == "text":
            user = [f"constraint({con_text(c)})" for c in self.user]
        else:
            user = [("constraint", con_tuple(c)) for c in self.user]
        return self.structural() + user


def selects(inst: Instance, s: Any, i: int) -> bool:
    tag = s[0]
    if tag == "all":
        return True
    if tag == "mandatory":
        return inst.mandatory[i]
    if tag == "kind":
        return inst.kinds[i] == s[1]
    if tag == "ids":
        return f"u{i}" in s[1]
    if tag == "and":
        return selects(inst, s[1], i) and selects(inst, s[2], i)
    if tag == "not":
        return not selects(inst, s[1], i)
    raise ValueError(s)


def value(inst: Instance, e: Any, sel: Selection) -> int:
    tag = e[0]
    if tag == "int":
        return e[1]
    if tag in ("count", "tokens", "utility"):
        total = 0
        for i, k in enumerate(sel):
            if k and selects(inst, e[1], i):
                c, u = inst.variants[i][k - 1]
                total += {"count": 1, "tokens": c, "utility": u}[tag]
        return total
    if tag == "in":
        return int(sel[int(e[1][1:])] > 0)
    if tag == "variant":
        return int(sel[int(e[1][1:])] == int(e[2][1:]))
    if tag == "add":
        return value(inst, e[1], sel) + value(inst, e[2], sel)
    if tag == "mul":
        return e[1] * value(inst, e[2], sel)
    raise ValueError(e)


def holds(inst: Instance, c: Any, sel: Selection) -> bool:
    tag = c[0]
    if tag in REL:
        a, b = value(inst, c[1], sel), value(inst, c[2], sel)
        return {"=<": a <= b, "<": a < b, ">=": a >= b, ">": a > b, "=": a == b,
                "\\=": a != b}[tag]
    if tag == "and":
        return holds(inst, c[1], sel) and holds(inst, c[2], sel)
    if tag == "or":
        return holds(inst, c[1], sel) or holds(inst, c[2], sel)
    if tag == "imp":
        return (not holds(inst, c[1], sel)) or holds(inst, c[2], sel)
    if tag == "not":
        return not holds(inst, c[1], sel)
    raise ValueError(c)


# --------------------------------------------------------------------------
# Strategies

def selectors(n: int) -> st.SearchStrategy[Any]:
    leaf = st.one_of(st.just(("all",)), st.just(("mandatory",)),
                     st.sampled_from(KINDS).map(lambda k: ("kind", k)),
                     st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True)
                     .map(lambda l: ("ids", tuple(f"u{i}" for i in sorted(l)))))
    return st.one_of(leaf, st.tuples(st.just("and"), leaf, leaf), st.tuples(st.just("not"), leaf))


@st.composite
def expressions(draw: st.DrawFn, n: int, names: list[list[str]]) -> Any:
    kind = draw(st.sampled_from(["count", "tokens", "utility", "in", "variant", "sum"]))
    if kind in ("count", "tokens", "utility"):
        return (kind, draw(selectors(n)))
    if kind == "in":
        return ("in", f"u{draw(st.integers(0, n - 1))}")
    if kind == "variant":
        i = draw(st.integers(0, n - 1))
        return ("variant", f"u{i}", draw(st.sampled_from(names[i])))
    a = ("count", draw(selectors(n)))
    b = ("tokens", draw(selectors(n)))
    return ("add", ("mul", draw(st.integers(-3, 3)), a), b)


@st.composite
def relations(draw: st.DrawFn, n: int, names: list[list[str]], linear_only: bool) -> Any:
    ops = ["=<", "<", ">=", ">", "="] + ([] if linear_only else ["\\="])
    op = draw(st.sampled_from(ops))
    e = draw(expressions(n, names))
    bound = draw(st.integers(0, 80))
    rel = (op, e, ("int", bound))
    if linear_only or draw(st.integers(0, 3)) > 0:
        return rel
    other = (draw(st.sampled_from(["=<", ">="])), draw(expressions(n, names)),
             ("int", draw(st.integers(0, 60))))
    return (draw(st.sampled_from(["and", "or", "imp"])), rel, other) \
        if draw(st.booleans()) else ("not", rel)


@st.composite
def instances(draw: st.DrawFn, max_units: int = 9, max_combinations: int = 5_000,
              linear_only: bool = False, max_user: int = 3) -> Instance:
    n = draw(st.integers(1, max_units))
    variants, combinations = [], 1
    for _ in range(n):
        room = max_combinations // combinations
        k = draw(st.integers(1, max(1, min(3, room - 1))))
        combinations *= k + 1
        variants.append(tuple((draw(st.integers(0, 30)), draw(st.integers(0, 50)))
                              for _ in range(k)))
    kinds = tuple(draw(st.sampled_from(KINDS)) for _ in range(n))
    mandatory = tuple(draw(st.integers(0, 5)) == 0 for _ in range(n))
    idx = st.integers(0, n - 1)
    together = tuple(tuple(sorted(set(g))) for g in
                     draw(st.lists(st.lists(idx, min_size=2, max_size=2), max_size=1)))
    pairs = st.tuples(idx, idx).filter(lambda p: p[0] != p[1])
    excludes = tuple(draw(st.lists(pairs, max_size=2))) if n > 1 else ()
    requires = tuple(draw(st.lists(pairs, max_size=1))) if n > 1 else ()
    names = [[f"v{k + 1}" for k in range(len(vs))] for vs in variants]
    user = tuple(draw(st.lists(relations(n, names, linear_only), min_size=1, max_size=max_user)))
    total = sum(max(c for c, _ in vs) for vs in variants)
    budget = draw(st.integers(0, total + 5))
    return Instance(tuple(variants), kinds, mandatory, together, excludes, requires, user,
                    budget)


# --------------------------------------------------------------------------
# Brute force

def structurally_ok(inst: Instance, sel: Selection) -> bool:
    inc = [k > 0 for k in sel]
    if any(m and not i for m, i in zip(inst.mandatory, inc)):
        return False
    if any(len({inc[i] for i in g}) > 1 for g in inst.together):
        return False
    if any(inc[a] and inc[b] for a, b in inst.excludes):
        return False
    return not any(inc[a] and not inc[b] for a, b in inst.requires)


def cost_util(inst: Instance, sel: Selection) -> tuple[int, int]:
    cost = util = 0
    for vs, k in zip(inst.variants, sel):
        if k:
            cost += vs[k - 1][0]
            util += vs[k - 1][1]
    return cost, util


def all_selections(inst: Instance) -> list[Selection]:
    return list(itertools.product(*[range(len(vs) + 1) for vs in inst.variants]))


def admissible(inst: Instance, user: tuple[Any, ...] | None = None,
               budget: int | None = None) -> dict[Selection, int]:
    user = inst.user if user is None else user
    budget = inst.budget if budget is None else budget
    out = {}
    for sel in all_selections(inst):
        if not structurally_ok(inst, sel):
            continue
        cost, util = cost_util(inst, sel)
        if cost <= budget and all(holds(inst, c, sel) for c in user):
            out[sel] = util
    return out


def to_selection(inst: Instance, selected: list[Any]) -> Selection:
    sel = [0] * inst.n
    for unit_id, name in selected:
        sel[int(unit_id[1:])] = int(name[1:])
    return tuple(sel)


# --------------------------------------------------------------------------
# Calling the packer

PACK = ("pack(Us, Cs, B, pack(Sel, Cost, Util, _S0), Opts),"
        " ( _S0 = gap(G) -> Status = gap ; Status = _S0, G = 0 )")


def bindings(inst: Instance, form: str = "text", opts: list[Any] | None = None) -> dict[str, Any]:
    return {"Us": inst.units(), "Cs": inst.constraints(form), "B": inst.budget,
            "Opts": opts or []}


def check_pack(inst: Instance, r: dict[str, Any]) -> Selection:
    sel = to_selection(inst, r["Sel"])
    assert structurally_ok(inst, sel)
    cost, util = cost_util(inst, sel)
    assert (cost, util) == (r["Cost"], r["Util"])
    assert cost <= inst.budget
    for c in inst.user:
        assert holds(inst, c, sel), f"the pack {sel} breaks {con_text(c)}"
    return sel


SETTINGS = settings(max_examples=80, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(instances())
def test_first_pack_is_the_optimum_under_user_constraints(inst: Instance) -> None:
    adm = admissible(inst)
    r = query_once(PACK, bindings(inst))
    if not adm:
        assert r["truth"] is False
        return
    assert r["truth"] is True, "pack/5 found nothing where the brute force did"
    check_pack(inst, r)
    assert r["Status"] == "optimal"
    assert r["Util"] == max(adm.values())


@SETTINGS
@given(instances(linear_only=True, max_units=10, max_combinations=20_000))
def test_linear_constraints_are_solved_exactly(inst: Instance) -> None:
    adm = admissible(inst)
    r = query_once(PACK, bindings(inst))
    if not adm:
        assert r["truth"] is False
        return
    check_pack(inst, r)
    assert (r["Util"], r["Status"]) == (max(adm.values()), "optimal")


@SETTINGS
@given(instances(max_units=6, max_combinations=300))
def test_alternatives_are_every_admissible_pack_once_best_first(inst: Instance) -> None:
    adm = admissible(inst)
    with query(PACK, bindings(inst)) as q:
        packs = list(q)
    sels = [check_pack(inst, r) for r in packs]
    utils = [r["Util"] for r in packs]
    assert utils == sorted(utils, reverse=True)
    assert len(sels) == len(set(sels))
    assert set(sels) == set(adm)


@SETTINGS
@given(instances(max_units=7, max_combinations=1_000))
def test_labelling_the_model_agrees(inst: Instance) -> None:
    """pack_constraints/6 (user constraints posted) + labeling([max(U)])."""
    adm = admissible(inst)
    r = query_once(
        "pack_constraints(Us, Cs, B, _Vars, _Cost, Util),"
        " term_variables(_Vars, _Vs), clpfd:labeling([max(Util)], _Vs), !",
        bindings(inst))
    if not adm:
        assert r["truth"] is False
    else:
        assert r["truth"] is True
        assert r["Util"] == max(adm.values())


@SETTINGS
@given(instances(max_units=7, max_combinations=2_000))
def test_strings_and_tuples_are_the_same_constraints(inst: Instance) -> None:
    a = query_once(PACK, bindings(inst, "text"))
    b = query_once(PACK, bindings(inst, "tuple"))
    assert a["truth"] == b["truth"]
    if a["truth"]:
        assert (a["Sel"], a["Util"]) == (b["Sel"], b["Util"])


ERROR = ("catch(( pack_best(Us, Cs, B, pack(_, _, Util, _), []), Kind = none, D = none ),"
         "      error(ctxrelay(Kind, D), _), Util = none)")


@SETTINGS
@given(instances(max_units=7, max_combinations=2_000))
def test_pack_best_names_what_makes_the_problem_empty(inst: Instance) -> None:
    adm = admissible(inst)
    r = query_once(ERROR, bindings(inst))
    assert r["truth"] is True
    if adm:
        assert (r["Kind"], r["Util"]) == ("none", max(adm.values()))
        return
    structural = [s for s in all_selections(inst) if structurally_ok(inst, s)]
    if not structural:
        assert r["Kind"] == "inconsistent_constraints"
        assert "unit" in r["D"]
        return
    cheapest = min(cost_util(inst, s)[0] for s in structural)
    if cheapest > inst.budget:
        assert r["Kind"] == "context_overflow"
        assert r["D"]["mandatory_cost"] == cheapest
        return
    assert r["Kind"] == "inconsistent_constraints"
    named = r["D"]["constraints"]
    texts = {f"constraint({con_text(c)})": c for c in inst.user}
    # the error names constraints the caller gave, as a minimal conflicting set
    parsed = [query_once("term_string(_T, S, [module(packer_tests)]), term_string(_T, S1)", {"S": s})["S1"]
              for s in named]
    given_ = {query_once("term_string(_T, S, [module(packer_tests)]), term_string(_T, S1)", {"S": t})["S1"]: c
              for t, c in texts.items()}
    assert all(p in given_ for p in parsed), (parsed, list(given_))
    conflict = tuple(given_[p] for p in parsed)
    assert not admissible(inst, conflict)
    for i in range(len(conflict)):
        rest = conflict[:i] + conflict[i + 1:]
        assert admissible(inst, rest), "the named set is not minimal"
    if "budget" in r["D"]:
        assert admissible(inst, conflict, budget=10**9), "the budget is not part of it"
    else:
        assert not admissible(inst, conflict, budget=10**9)
