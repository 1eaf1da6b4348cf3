:- module(ctxrelay_packer,
          [ pack/4,                 % +Units, +Constraints, +Budget, -Pack
            pack/5,                 % +Units, +Constraints, +Budget, -Pack, +Options
            pack_best/4,            % +Units, +Constraints, +Budget, -Pack
            pack_best/5,            % +Units, +Constraints, +Budget, -Pack, +Options
            pack_greedy/4,          % +Units, +Constraints, +Budget, -Pack
            pack_constraints/6      % +Units, +Constraints, +Budget,
                                    % -Vars, -Cost, -Utility
          ]).
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(predicate_options)).
:- use_module(library(yall)).
:- use_module(packer/problem).
:- use_module(packer/model).
:- use_module(packer/structure).
:- use_module(packer/greedy).
:- use_module(packer/alternatives).
:- use_module(packer/diagnosis).
:- use_module(packer/messages).

/** <module> Token-budget packer: a multiple-choice knapsack

Context units compete for a token budget; the packer picks the admissible
set of highest utility.

A *unit* is `unit(Id, Variants, Props)`:

  - Id is an atom, string or integer, unique among the units;
  - Variants is a non-empty list of `variant(Name, Cost, Utility)` with
    non-negative integers Cost (tokens) and Utility (scaled: the runtime
    multiplies float utilities by 1000); at most one variant of a unit is
    packed;
  - Props is a list; `mandatory(true)` makes the unit compulsory (exactly
    one of its variants is packed); `kind(K)` and any other property are
    ignored here.

*Constraints* is a list of

  - together(Ids): all of Ids are packed or none is (a tool call and its
    result);
  - at_most_one(Ids): at most one of Ids is packed;
  - excludes(A, B): not both A and B (a warm artifact and a turn it covers);
  - requires(A, B): A packed implies B packed.

A *pack* is `pack(Selected, Cost, Utility, Status)`: Selected is a list of
`Id-VariantName` in the order of the units, Status is `optimal` or `gap(G)`
where G is a proven upper bound on the utility of any better pack minus
Utility (only when a time limit cut the search).

Python builds these terms through janus: a Python tuple `(Name, A1, ...)`
arrives as `-(Name, A1, ...)` and is read as `Name(A1, ...)` wherever a
unit, variant, property, constraint or option is expected, and `@true` /
`@false` are read as `true` / `false`.

The model is pack_constraints/6, plain CLP(FD), posted without search so
that its propagation can be tested alone; the tests check every pack
against it. pack/5 solves the same model compiled for speed (posting the
CLP(FD) model of 300 units alone takes longer than the whole solve, see
docs/packer.md):

  1. unit propagation of the structural constraints over the groups of
     together/1 units puts the mandatory closure in and what it excludes
     out; the greedy pack (pack_greedy/4) is the first incumbent;
  2. each connected component of the remaining links (requires/2,
     excludes/2, at_most_one/1) becomes one class of a multiple-choice
     knapsack (MCKP); its options are the Pareto set (cost, utility) of
     the component's admissible selections, found by a dynamic program
     over the component whose states carry the in/out status of its
     frontier. The MCKP is exact: no constraint links two classes;
  3. the LP relaxation of the MCKP (Dantzig over the upper convex hull of
     every class) gives the bound and the multiplier at the critical
     slope;
  4. windows [T, UB] are searched from the top: the Lagrangian bound at
     that multiplier removes every option that cannot reach T (reduction
     fixing), and a dynamic program over the few classes left keeps
     Pareto states whose utility plus the LP bound of the classes still
     to come reaches max(T, incumbent+1) — the bound as a constraint on
     the objective. The first window holding a pack holds the optimum;
  5. alternatives come from Lawler-Murty partitioning of the space left.
*/

:- predicate_options(pack/5, 5,
                     [ time_limit(number),
                       max_alternatives(nonneg)
                     ]).
:- predicate_options(pack_best/5, 5,
                     [ pass_to(pack/5, 5)
                     ]).

%!  pack_constraints(+Units, +Constraints, +Budget, -Vars, -Cost, -Utility)
%!      is semidet.
%
%   The core relation: posts the CLP(FD) model of the packing problem and
%   does no search. Vars is a list of `choice(Id, In, Bs)` in the order
%   of Units: In is the 0/1 inclusion variable of the unit (the units of
%   a together/1 group share it) and Bs is the list of 0/1 variables of
%   its variants, in the order of the variants, with `sum(Bs) #= In`.
%   Cost and Utility are the total tokens and utility; `Cost #=< Budget`
%   is posted. Cost is expressed as "cheapest variant times In plus the
%   extra cost of the chosen variant" so that the mandatory part raises
%   its lower bound at once.
%
%   Fails when propagation alone shows the model unsatisfiable (e.g. a
%   mandatory unit whose cheapest variant exceeds the budget).
%
%   @error instantiation_error if an input is not sufficiently instantiated.
%   @error type_error(pack_unit, U), type_error(pack_variant, V),
%          type_error(unit_id, Id), type_error(nonneg, X), type_error(list, X)
%          for malformed input.
%   @error domain_error(non_empty_list, []) for a unit without variants,
%          domain_error(unique_variant_name, Name),
%          domain_error(unique_unit_id, Id),
%          domain_error(pack_constraint, C) for an unknown constraint,
%          domain_error(known_unit_id, Id) for an id in a constraint that
%          names no unit.

pack_constraints(Units, Constraints, Budget, Vars, Cost, Utility) :-
    check_problem(Units, Constraints, Budget, Problem),
    Problem = prob(_N, Ids, Us, Cs, _),
    Ids =.. [_|IdList],
    Us =.. [_|UList],
    maplist([Id, u(Vs, M), cu(Id, Vs, M)]>>true, IdList, UList, CUs),
    post_model(CUs, Cs, Budget, Vars, Cost, Utility).

%!  pack(+Units, +Constraints, +Budget, -Pack) is nondet.
%!  pack(+Units, +Constraints, +Budget, -Pack, +Options) is nondet.
%
%   Pack is the admissible pack of highest utility; on backtracking the
%   next alternatives follow in non-increasing utility, each a different
%   selection. Fails when nothing is admissible (the mandatory part does
%   not fit, or the constraints contradict the mandatory units).
%   Options:
%
%     - time_limit(+Seconds)
%       Wall-clock limit for finding each pack (default `inf`). When it
%       stops the search the best pack found so far is returned, never
%       worse than the greedy pack for the first one, with Status
%       `gap(G)`. When it stops the search for an alternative before any
%       is found, the enumeration ends.
%     - max_alternatives(+N)
%       At most N packs after the best one (default `inf`);
%       `max_alternatives(0)` yields the best pack only.
%
%   Alternatives are found by Lawler-Murty partitioning: once a pack is
%   yielded, the rest of its subproblem is split into disjoint
%   subproblems (the units before the i-th fixed as in the pack, the i-th
%   taking any other option), kept in a priority queue under a cheap
%   upper bound and solved exactly only when they reach the top. A pack
%   whose search was cut by the time limit is not followed by
%   alternatives (their order could not be guaranteed). See
%   docs/packer.md for the cost.
%
%   @error As pack_constraints/6, and type_error/domain_error for bad
%   option values.

pack(Units, Constraints, Budget, Pack) :-
    pack(Units, Constraints, Budget, Pack, []).

pack(Units, Constraints, Budget, Pack, Options) :-
    check_problem(Units, Constraints, Budget, Problem),
    check_options(Options, TimeLimit, MaxAlt),
    prepare(Problem, Prep),
    Prep = prep(consistent, _, _, _),
    first_solution(Prep, TimeLimit, First),
    enumerate(Prep, TimeLimit, MaxAlt, First, Sol),
    sol_pack(Prep, Sol, Pack).

%!  pack_best(+Units, +Constraints, +Budget, -Pack) is det.
%!  pack_best(+Units, +Constraints, +Budget, -Pack, +Options) is det.
%
%   The first pack of pack/5, or an error when nothing is admissible.
%   Only the time_limit/1 option is relevant.
%
%   @error error(ctxrelay(context_overflow, _{mandatory_cost:MC,
%          budget:B}), _) when the cheapest admissible fill of the
%          mandatory units (respecting together/1 and requires/2) costs
%          MC > B tokens.
%   @error error(ctxrelay(inconsistent_constraints, _{unit:Id}), _) when
%          the mandatory unit Id cannot be packed at any budget (e.g. two
%          mandatory units exclude each other).
%   @error As pack/5.

:- det(pack_best/4).
:- det(pack_best/5).

pack_best(Units, Constraints, Budget, Pack) :-
    pack_best(Units, Constraints, Budget, Pack, []).

pack_best(Units, Constraints, Budget, Pack, Options) :-
    check_problem(Units, Constraints, Budget, Problem),
    check_options(Options, TimeLimit, _),
    prepare(Problem, Prep),
    (   Prep = prep(consistent, _, _, _),
        first_solution(Prep, TimeLimit, Sol-_)
    ->  sol_pack(Prep, Sol, Pack)
    ;   no_pack_error(Prep)
    ).

%!  pack_greedy(+Units, +Constraints, +Budget, -Pack) is semidet.
%
%   The greedy pack: the mandatory units (and what they require) at their
%   cheapest variants, then inclusions and variant upgrades by decreasing
%   utility density (over the convex hull of the variants of each
%   together/1 group) while they fit and respect the constraints. Status
%   is `gap(G)` with G the distance to the LP bound of the relaxation
%   that keeps together/1 but drops excludes/2, at_most_one/1 and
%   requires/2, or `optimal` when G is 0. pack/5 never returns less.
%   Fails when nothing is admissible.
%
%   @error As pack_constraints/6.

pack_greedy(Units, Constraints, Budget, Pack) :-
    check_problem(Units, Constraints, Budget, Problem),
    prepare(Problem, Prep),
    Prep = prep(consistent, P, X, St),
    initial_allowed(P, Allowed),
    greedy_groups(P, X, St, Allowed, Key, Cost, Util),
    lp_bound(X, St, Allowed, Budget, Bound, _, _),
    gap_status(Bound, Util, Status),
    sol_pack(Prep, sol(Key, Cost, Util, Status, _), Pack).


                 /*******************************
                 *            RESULTS           *
                 *******************************/

sol_pack(prep(_, P, _, _), sol(Key, Cost, Util, Status, _),
         pack(Selected, Cost, Util, Status)) :-
    P = prob(_, Ids, Us, _, _),
    selected(Key, Ids, Us, Selected).

selected([], _, _, []).
selected([M-K|Key], Ids, Us, [Id-Name|Sel]) :-
    arg(M, Ids, Id),
    arg(M, Us, u(Vs, _)),
    nth1(K, Vs, v(K, Name, _, _)),
    selected(Key, Ids, Us, Sel).
