"""Property tests of the packer (prolog/ctxrelay/packer.pl) through janus.

Small random instances (<= 12 units, <= 3 variants per unit, random
together / excludes / at_most_one / requires / mandatory) are solved by brute
force in Python and compared with the packer: the first pack is optimal and
admissible; enumerating the alternatives (<= 7 units, as the number of packs
explodes) yields every admissible selection exactly once in non-increasing
utility; labelling the CLP(FD) model of pack_constraints/6 finds the same
optimum; the greedy pack is admissible and its gap bounds the optimum; a search
cut by time_limit(0) keeps at least the greedy utility and a true gap; and
infeasible instances fail (pack/5) or raise the right ctxrelay error with the
right figures (pack_best/5). Hypothesis is derandomized, 60 examples each.

The plunit suites (tests/plunit/test_packer.pl) are not run from here.
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

Selection = tuple[int, ...]  # per unit: 0 = out, k = variant k (1-based)


MODULE = "packer_tests"     # the packer is loaded here, not into user: a test of
                            # what library(ctxrelay) puts into user runs in this process


def query_once(goal: str, bindings: dict[str, Any] | None = None) -> dict[str, Any]:
    return janus.query_once(f"{MODULE}:({goal})", bindings or {})


def query(goal: str, bindings: dict[str, Any]):
    return janus.query(f"{MODULE}:({goal})", bindings)


@pytest.fixture(scope="module", autouse=True)
def _packer() -> None:
    janus.query_once(f"{MODULE}:use_module(F)", {"F": str(PACKER)})


# --------------------------------------------------------------------------
# Instances


@dataclass(frozen=True)
class Instance:
    variants: tuple[tuple[tuple[int, int], ...], ...]  # per unit: ((cost, util), ...)
    mandatory: tuple[bool, ...]
    together: tuple[tuple[int, ...], ...]
    excludes: tuple[tuple[int, int], ...]
    at_most_one: tuple[tuple[int, ...], ...]
    requires: tuple[tuple[int, int], ...]
    budget: int

    @property
    def n(self) -> int:
        return len(self.variants)

    # Terms for janus: a Python tuple (Name, Args...) stands for Name(Args...).
    def units(self) -> list[Any]:
        return [
            (
                "unit",
                uid(i),
                [("variant", f"v{k + 1}", c, u) for k, (c, u) in enumerate(vs)],
                [("mandatory", True)] if self.mandatory[i] else [("kind", "turn")],
            )
            for i, vs in enumerate(self.variants)
        ]

    def constraints(self) -> list[Any]:
        cs: list[Any] = []
        cs += [("together", [uid(i) for i in g]) for g in self.together]
        cs += [("excludes", uid(a), uid(b)) for a, b in self.excludes]
        cs += [("at_most_one", [uid(i) for i in g]) for g in self.at_most_one]
        cs += [("requires", uid(a), uid(b)) for a, b in self.requires]
        return cs


def uid(i: int) -> str:
    return f"u{i}"


@st.composite
def instances(draw: st.DrawFn, max_units: int = 12, max_combinations: int = 20_000) -> Instance:
    n = draw(st.integers(1, max_units))
    variants = []
    combinations = 1
    for _ in range(n):
        room = max_combinations // combinations
        k = draw(st.integers(1, max(1, min(3, room - 1))))
        combinations *= k + 1
        variants.append(
            tuple(
                (draw(st.integers(0, 40)), draw(st.integers(0, 60)))
                for _ in range(k)
            )
        )
    mandatory = tuple(draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans())
                      for _ in range(n))
    idx = st.integers(0, n - 1)
    together = tuple(
        tuple(sorted(set(g)))
        for g in draw(st.lists(st.lists(idx, min_size=2, max_size=3), max_size=2))
    )
    excludes = ()
    if n > 1:
        pairs = st.tuples(idx, idx).filter(lambda p: p[0] != p[1])
        excludes = tuple(draw(st.lists(pairs, max_size=3)))
    at_most_one = tuple(
        tuple(sorted(set(g)))
        for g in draw(st.lists(st.lists(idx, min_size=2, max_size=3), max_size=1))
    )
    requires = tuple(draw(st.lists(st.tuples(idx, idx), max_size=3)))
    total = sum(max(c for c, _ in vs) for vs in variants)
    budget = draw(st.integers(0, total + 5))
    return Instance(tuple(variants), mandatory, together, excludes, at_most_one,
                    requires, budget)


# --------------------------------------------------------------------------
# Brute force


def structurally_ok(inst: Instance, sel: Selection) -> bool:
    inc = [k > 0 for k in sel]
    if any(m and not i for m, i in zip(inst.mandatory, inc)):
        return False
    for g in inst.together:
        if len({inc[i] for i in g}) > 1:
            return False
    for a, b in inst.excludes:
        if inc[a] and inc[b]:
            return False
    for g in inst.at_most_one:
        if sum(inc[i] for i in g) > 1:
            return False
    for a, b in inst.requires:
        if inc[a] and not inc[b]:
            return False
    return True


def cost_util(inst: Instance, sel: Selection) -> tuple[int, int]:
    cost = util = 0
    for vs, k in zip(inst.variants, sel):
        if k:
            c, u = vs[k - 1]
            cost += c
            util += u
    return cost, util


def all_selections(inst: Instance) -> list[Selection]:
    ranges = [range(len(vs) + 1) for vs in inst.variants]
    return [sel for sel in itertools.product(*ranges) if structurally_ok(inst, sel)]


def admissible(inst: Instance) -> dict[Selection, int]:
    """Every admissible selection with its utility."""
    out = {}
    for sel in all_selections(inst):
        cost, util = cost_util(inst, sel)
        if cost <= inst.budget:
            out[sel] = util
    return out


def to_selection(inst: Instance, selected: list[tuple[str, str]]) -> Selection:
    sel = [0] * inst.n
    for unit_id, name in selected:
        sel[int(unit_id[1:])] = int(name[1:])
    return tuple(sel)


# --------------------------------------------------------------------------
# Calling the packer

PACK = ("pack(Us, Cs, B, pack(Sel, Cost, Util, _S0), Opts),"
        " ( _S0 = gap(G) -> Status = gap ; Status = _S0, G = 0 )")


def pack_first(inst: Instance, opts: list[Any] | None = None) -> dict[str, Any]:
    return query_once(PACK, {"Us": inst.units(), "Cs": inst.constraints(),
                                   "B": inst.budget, "Opts": opts or []})


def pack_all(inst: Instance) -> list[dict[str, Any]]:
    with query(PACK, {"Us": inst.units(), "Cs": inst.constraints(),
                            "B": inst.budget, "Opts": []}) as q:
        return list(q)


def check_pack(inst: Instance, r: dict[str, Any]) -> Selection:
    sel = to_selection(inst, r["Sel"])
    # Selected is in the units' input order, one entry per packed unit.
    assert [int(i[1:]) for i, _ in r["Sel"]] == sorted(int(i[1:]) for i, _ in r["Sel"])
    assert structurally_ok(inst, sel)
    cost, util = cost_util(inst, sel)
    assert (cost, util) == (r["Cost"], r["Util"])
    assert cost <= inst.budget
    return sel


SETTINGS = settings(max_examples=60, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(instances())
def test_first_pack_is_a_brute_force_optimum(inst: Instance) -> None:
    adm = admissible(inst)
    r = pack_first(inst)
    if not adm:
        assert r["truth"] is False
        return
    assert r["truth"] is True
    check_pack(inst, r)
    assert r["Status"] == "optimal"
    assert r["Util"] == max(adm.values())


@SETTINGS
@given(instances())
def test_greedy_is_admissible_and_its_gap_is_a_bound(inst: Instance) -> None:
    adm = admissible(inst)
    r = query_once(
        "pack_greedy(Us, Cs, B, pack(Sel, Cost, Util, _S0)),"
        " ( _S0 = gap(G) -> Status = gap ; Status = _S0, G = 0 )",
        {"Us": inst.units(), "Cs": inst.constraints(), "B": inst.budget})
    if not adm:
        assert r["truth"] is False
        return
    check_pack(inst, r)
    best = max(adm.values())
    assert r["Util"] <= best <= r["Util"] + r["G"]


@SETTINGS
@given(instances(max_units=7, max_combinations=400))
def test_alternatives_enumerate_every_admissible_selection_once(inst: Instance) -> None:
    adm = admissible(inst)
    packs = pack_all(inst)
    sels = [check_pack(inst, r) for r in packs]
    utils = [r["Util"] for r in packs]
    assert utils == sorted(utils, reverse=True)
    assert len(sels) == len(set(sels))
    assert set(sels) == set(adm)
    assert all(r["Status"] == "optimal" for r in packs)


@SETTINGS
@given(instances(max_units=8, max_combinations=2_000))
def test_core_relation_labelled_plainly_agrees(inst: Instance) -> None:
    """pack_constraints/6 + labeling([max(U)]) finds the brute-force optimum."""
    adm = admissible(inst)
    r = query_once(
        "pack_constraints(Us, Cs, B, _Vars, _Cost, Util),"
        " term_variables(_Vars, _Vs),"
        " clpfd:labeling([max(Util)], _Vs), !",
        {"Us": inst.units(), "Cs": inst.constraints(), "B": inst.budget})
    if not adm:
        assert r["truth"] is False
    else:
        assert r["truth"] is True
        assert r["Util"] == max(adm.values())


@SETTINGS
@given(instances())
def test_pack_best_raises_with_the_figures_when_nothing_fits(inst: Instance) -> None:
    adm = admissible(inst)
    r = query_once(
        "catch(( pack_best(Us, Cs, B, pack(_, _, Util, _), []), Kind = none, D = none ),"
        "      error(ctxrelay(Kind, D), _), Util = none)",
        {"Us": inst.units(), "Cs": inst.constraints(), "B": inst.budget})
    assert r["truth"] is True
    if adm:
        assert r["Kind"] == "none"
        assert r["Util"] == max(adm.values())
        return
    structural = all_selections(inst)
    if not structural:
        assert r["Kind"] == "inconsistent_constraints"
    else:
        assert r["Kind"] == "context_overflow"
        cheapest = min(cost_util(inst, sel)[0] for sel in structural)
        assert r["D"] == {"mandatory_cost": cheapest, "budget": inst.budget}
        assert cheapest > inst.budget


@SETTINGS
@given(instances())
def test_a_cut_search_keeps_the_greedy_and_a_true_gap(inst: Instance) -> None:
    """time_limit(0): whatever is returned beats the greedy pack and its gap
    really bounds the optimum."""
    adm = admissible(inst)
    r = pack_first(inst, [("time_limit", 0)])
    if not adm:
        assert r["truth"] is False
        return
    check_pack(inst, r)
    greedy = query_once("pack_greedy(Us, Cs, B, pack(_, _, U, _))",
                              {"Us": inst.units(), "Cs": inst.constraints(),
                               "B": inst.budget})
    best = max(adm.values())
    assert r["Util"] >= greedy["U"]
    if r["Status"] == "optimal":
        assert r["Util"] == best
    else:
        assert r["Util"] <= best <= r["Util"] + r["G"]


def test_time_limit_keeps_at_least_the_greedy_utility() -> None:
    # Subset-sum with even sizes and an odd budget: the LP bound never
    # prunes, so a 2**40 tree cannot be proved within 50 ms.
    sizes = [2 * (1000 + 37 * i % 991) for i in range(40)]
    inst = Instance(
        variants=tuple(((s, s),) for s in sizes), mandatory=(False,) * 40,
        together=(), excludes=(), at_most_one=(), requires=(),
        budget=(sum(sizes) // 2) | 1)
    greedy = query_once("pack_greedy(Us, Cs, B, pack(_, _, U, _))",
                              {"Us": inst.units(), "Cs": [], "B": inst.budget})
    r = pack_first(inst, [("time_limit", 0.05)])
    check_pack(inst, r)
    assert r["Status"] == "gap"
    assert r["G"] >= 1
    assert r["Util"] >= greedy["U"]
    assert r["Util"] + r["G"] <= inst.budget


def test_python_tuples_and_prolog_terms_are_the_same_input() -> None:
    r = query_once(
        "pack_best([unit(a, [variant(full, 5, 10), variant(small, 1, 4)], []),"
        "           unit(b, [variant(full, 3, 7)], [mandatory(true)])],"
        "          [excludes(a, b)], 10, pack(Sel, _, U, _))")
    t = query_once(
        "pack_best(Us, Cs, 10, pack(Sel, _, U, _))",
        {"Us": [("unit", "a", [("variant", "full", 5, 10), ("variant", "small", 1, 4)], []),
                ("unit", "b", [("variant", "full", 3, 7)], [("mandatory", True)])],
         "Cs": [("excludes", "a", "b")]})
    assert r["Sel"] == t["Sel"] == [("b", "full")]
    assert r["U"] == t["U"] == 7
