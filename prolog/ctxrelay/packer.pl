:- module(ctxrelay_packer,
          [ pack/4,                 % +Units, +Constraints, +Budget, -Pack
            pack/5,                 % +Units, +Constraints, +Budget, -Pack, +Options
            pack_best/4,            % +Units, +Constraints, +Budget, -Pack
            pack_best/5,            % +Units, +Constraints, +Budget, -Pack, +Options
            pack_greedy/4,          % +Units, +Constraints, +Budget, -Pack
            pack_constraints/6,     % +Units, +Constraints, +Budget,
                                    % -Vars, -Cost, -Utility
            pack_constraints/7      % +Units, +Constraints, +Budget,
                                    % -Vars, -Cost, -Utility, +Options
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
:- use_module(packer/checks).
:- use_module(packer/diagnosis).
:- use_module(packer/messages).

/** <module> Token-budget packer: CLP(FD) model, exact search

Context units compete for a token budget; the packer picks the admissible
set of highest utility, and on backtracking the next ones.

A *unit* is `unit(Id, Variants, Props)`:

  - Id is an atom, string or integer, unique among the units;
  - Variants is a non-empty list of `variant(Name, Cost, Utility)` with
    non-negative integers Cost (tokens) and Utility (scaled: the runtime
    multiplies float utilities by 1000); at most one variant of a unit is
    packed;
  - Props is a list; `mandatory(true)` makes the unit compulsory (exactly
    one of its variants is packed).  The other properties (`kind(K)`,
    `tier(T)`, `thread(T)`, anything) are what users' constraints select
    units by.

*Constraints* is a list of structural constraints

  - together(Ids): all of Ids are packed or none is (a tool call and its
    result);
  - at_most_one(Ids): at most one of Ids is packed;
  - excludes(A, B): not both A and B (a warm artifact and a turn it covers);
  - requires(A, B): A packed implies B packed;

and of users' constraints, `constraint(C)`: a CLP(FD) relation over
per-unit variables and aggregates, such as
`constraint(tokens(kind(tool_output)) #=< 300)` or
`constraint(count(tier(p)) #>= 2)`, or `constraint(Goal)` where Goal is
called with the model (ctxrelay_packer_user has the vocabulary,
docs/packer.md the details).  Text (a string, or a Python str) is read as
a Prolog term.

A *pack* is `pack(Selected, Cost, Utility, Status)`: Selected is a list of
`Id-VariantName` in the order of the units, Status is `optimal` or `gap(G)`
where G is a proven upper bound on the utility of any better pack minus
Utility (only when a time limit cut the search).

Python builds these terms through janus: a Python tuple `(Name, A1, ...)`
arrives as `-(Name, A1, ...)` and is read as `Name(A1, ...)` wherever a
unit, variant, property, constraint or option is expected, and `@true` /
`@false` are read as `true` / `false`.

*What is modelled and what searches it.*  The model is
pack_constraints/7, plain CLP(FD) over 0/1 variables (one per unit, one
per variant), users' constraints included, posted without search so that
its propagation can be tested alone; the tests check every pack against
it.  pack/5 does not label it (labelling takes seconds at 25 units): it
solves the same model compiled into an exact multiple-choice knapsack
(docs/packer.md):

  1. unit propagation of the structural constraints over the groups of
     together/1 units puts the mandatory closure in and what it excludes
     out;
  2. each connected component of the remaining structural links becomes
     one class whose options are the Pareto set of its admissible
     selections (no constraint links two classes);
  3. the LP relaxation of the classes (Dantzig) bounds the utility; users'
     linear constraints are relaxed into it with Lagrange multipliers;
  4. windows [T, UB] are searched from the bound down, each with the
     reduction (options that cannot reach T are dropped) and a dynamic
     program over the few classes left, whose states must still reach
     the threshold and, under users' rows, still be able to meet them;
  5. alternatives come from Lawler-Murty partitioning of the space left;
     users' constraints that are not linear (`#\=`, disjunctions,
     implications, goals) are checked on each pack of that enumeration,
     so the first pack that passes is the optimum of the whole model.
*/

:- meta_predicate
    pack(+, :, +, -),
    pack(+, :, +, -, +),
    pack_best(+, :, +, -),
    pack_best(+, :, +, -, +),
    pack_greedy(+, :, +, -),
    pack_constraints(+, :, +, -, -, -),
    pack_constraints(+, :, +, -, -, -, +).

:- predicate_options(pack/5, 5,
                     [ time_limit(number),
                       max_alternatives(nonneg),
                       context(dict)
                     ]).
:- predicate_options(pack_best/5, 5,
                     [ pass_to(pack/5, 5)
                     ]).
:- predicate_options(pack_constraints/7, 7,
                     [ context(dict)
                     ]).

%!  pack_constraints(+Units, +Constraints, +Budget, -Vars, -Cost, -Utility)
%!      is semidet.
%!  pack_constraints(+Units, +Constraints, +Budget, -Vars, -Cost, -Utility,
%!                   +Options) is semidet.
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
%   Users' constraints are posted too: a linear relation as a scalar
%   product over the variant variables (count(S) sums the In of the
%   selected units, tokens(S) their costs, ...), any other relation as a
%   reified CLP(FD) formula, and `constraint(Goal)` calls Goal with the
%   model dict of ctxrelay_packer_checks (units, tokens: Cost, utility:
%   Utility, budget, context).  The only option is context(Dict), the
%   dict that if(Condition, C) constraints read (default `_{}`).
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
%          domain_error(pack_constraint, C) for an unknown or malformed
%          constraint (a user constraint is named whole, with the reason
%          in the error's context), domain_error(known_unit_id, Id) for
%          an id in a structural constraint that names no unit.

pack_constraints(Units, Constraints, Budget, Vars, Cost, Utility) :-
    pack_constraints(Units, Constraints, Budget, Vars, Cost, Utility, []).

pack_constraints(Units, Constraints, Budget, Vars, Cost, Utility, Options) :-
    check_options(Options, _, _, Context),
    check_problem(Units, Constraints, Budget, Context, Problem),
    Problem = prob(_N, Ids, Us, Cs, _, _),
    Ids =.. [_|IdList],
    Us =.. [_|UList],
    maplist([Id, u(Vs, M), cu(Id, Vs, M)]>>true, IdList, UList, CUs),
    post_model(CUs, Cs, Budget, Vars, Cost, Utility),
    post_user(Problem, Vars, Cost-Utility, _).

%!  pack(+Units, +Constraints, +Budget, -Pack) is nondet.
%!  pack(+Units, +Constraints, +Budget, -Pack, +Options) is nondet.
%
%   Pack is the admissible pack of highest utility; on backtracking the
%   next alternatives follow in non-increasing utility, each a different
%   selection and each satisfying every constraint, users' ones included.
%   Fails when nothing is admissible (the mandatory part does not fit, or
%   the constraints contradict the mandatory units).  Options:
%
%     - time_limit(+Seconds)
%       Wall-clock limit for finding each pack (default `inf`). When it
%       stops the search the best pack found so far is returned, never
%       worse than the greedy pack for the first one when there are no
%       users' constraints, with Status `gap(G)`; a pack found under a
%       cut search is not followed by alternatives. When it stops the
%       search for an alternative before any is found, the enumeration
%       ends.  When it stops the search for the first pack before any
%       pack satisfying users' constraints is found, the error below.
%     - max_alternatives(+N)
%       At most N packs after the best one (default `inf`);
%       `max_alternatives(0)` yields the best pack only.
%     - context(+Dict)
%       What if(Condition, C) constraints test, e.g.
%       `_{intent:drill_down}` (assemble/4 passes the turn's intent, mode
%       and thread); also `Model.context` for goals.  Default `_{}`.
%
%   Alternatives are found by Lawler-Murty partitioning: once a pack is
%   yielded, the rest of its subproblem is split into disjoint
%   subproblems (the units before the i-th fixed as in the pack, the i-th
%   taking any other option), kept in a priority queue under a cheap
%   upper bound and solved exactly only when they reach the top.  See
%   docs/packer.md for the cost.
%
%   @error As pack_constraints/7; domain_error(pack_option, O) for an
%          unknown option, type_error/domain_error for bad option values.
%   @error error(ctxrelay(pack_time_limit, _{time_limit:T, bound:B}), _)
%          when the time limit stops the search before any pack that
%          satisfies the users' constraints is found.

pack(Units, Constraints, Budget, Pack) :-
    pack(Units, Constraints, Budget, Pack, []).

pack(Units, Constraints, Budget, Pack, Options) :-
    check_options(Options, TimeLimit, MaxAlt, Context),
    check_problem(Units, Constraints, Budget, Context, Problem),
    prepare(Problem, Prep),
    Prep = prep(consistent, _, _, _),
    solutions(Prep, TimeLimit, MaxAlt, Sol),
    sol_pack(Prep, Sol, Pack).

%!  pack_best(+Units, +Constraints, +Budget, -Pack) is det.
%!  pack_best(+Units, +Constraints, +Budget, -Pack, +Options) is det.
%
%   The first pack of pack/5, or an error that says why there is none.
%   The options are those of pack/5 (max_alternatives/1 is irrelevant).
%
%   @error error(ctxrelay(context_overflow, _{mandatory_cost:MC,
%          budget:B}), _) when the cheapest admissible fill of the
%          mandatory units (respecting together/1 and requires/2) costs
%          MC > B tokens.
%   @error error(ctxrelay(inconsistent_constraints, _{unit:Id,
%          constraints:Cs}), _) when the mandatory unit Id cannot be
%          packed at any budget; Cs is a minimal set of the structural
%          constraints that excludes it (e.g. excludes(a, b) between two
%          mandatory units).
%   @error error(ctxrelay(inconsistent_constraints, _{constraints:Cs,
%          mandatory:Ids}), _) when no pack satisfies the users'
%          constraints Cs (a minimal conflicting set) with the mandatory
%          units; Ids are the mandatory units they select.  The dict also
%          has `budget:B` when the conflict takes the budget (the
%          constraints could be met with more tokens).
%   @error As pack/5.

:- det(pack_best/4).
:- det(pack_best/5).

pack_best(Units, Constraints, Budget, Pack) :-
    pack_best(Units, Constraints, Budget, Pack, []).

pack_best(Units, Constraints, Budget, Pack, Options) :-
    check_options(Options, TimeLimit, _, Context),
    check_problem(Units, Constraints, Budget, Context, Problem),
    prepare(Problem, Prep),
    (   Prep = prep(consistent, _, _, _),
        once(solutions(Prep, TimeLimit, 0, Sol))
    ->  sol_pack(Prep, Sol, Pack)
    ;   no_pack_error(Prep, Units, Constraints, Options, Budget)
    ).

%!  pack_greedy(+Units, +Constraints, +Budget, -Pack) is semidet.
%
%   The greedy pack: the mandatory units (and what they require) at their
%   cheapest variants, then inclusions and variant upgrades by decreasing
%   utility density (over the convex hull of the variants of each
%   together/1 group) while they fit and respect the structural
%   constraints. Status is `gap(G)` with G the distance to the LP bound
%   of the relaxation that keeps together/1 but drops excludes/2,
%   at_most_one/1, requires/2 and users' constraints, or `optimal` when
%   G is 0. pack/5 never returns less.  Fails when nothing is admissible,
%   and when the greedy pack does not satisfy the users' constraints (the
%   greedy does not look at them while it fills).
%
%   @error As pack_constraints/6.

pack_greedy(Units, Constraints, Budget, Pack) :-
    check_problem(Units, Constraints, Budget, _{}, Problem),
    prepare(Problem, Prep),
    Prep = prep(consistent, P, X, St),
    initial_allowed(P, Allowed),
    greedy_groups(P, X, St, Allowed, Key, Cost, Util),
    (   P = prob(_, _, _, _, _, none)
    ->  true
    ;   side_model(P, Side),
        pack_passes(P, Side, Key)
    ),
    lp_bound(X, St, Allowed, Budget, Bound, _, _),
    gap_status(Bound, Util, Status),
    sol_pack(Prep, sol(Key, Cost, Util, Status, _), Pack).


                 /*******************************
                 *            RESULTS           *
                 *******************************/

sol_pack(prep(_, P, _, _), sol(Key, Cost, Util, Status, _),
         pack(Selected, Cost, Util, Status)) :-
    P = prob(_, Ids, Us, _, _, _),
    selected(Key, Ids, Us, Selected).

selected([], _, _, []).
selected([M-K|Key], Ids, Us, [Id-Name|Sel]) :-
    arg(M, Ids, Id),
    arg(M, Us, u(Vs, _)),
    nth1(K, Vs, v(K, Name, _, _)),
    selected(Key, Ids, Us, Sel).
