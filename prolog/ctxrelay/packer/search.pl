:- module(ctxrelay_packer_search,
          [ solve/5,                % +Prep, +Restrictions, +Lag, +Deadline, -Result
            search_classes/5,       % +Classes, +Units, +Budget, +Deadline, !Box
            class_best/4            % +P, +Q, +Class, -Best
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(problem, [in_time/1]).
:- use_module(structure).
:- use_module(greedy).
:- use_module(classes).
:- use_module(bound).
:- use_module(rows, [rsolve/5]).

/** <module> The exact search

solve/4 finds the best pack of a (restricted) problem: it compiles the
problem into classes, takes the class greedy as the incumbent and
searches windows [T, UB] from the LP bound down, each with the reduction
and a dynamic program over the decision core whose states must reach the
threshold with the LP bound of the classes still to come.  A time limit
returns the incumbent with a proven gap.
*/

                 /*******************************
                 *          CORE SEARCH         *
                 *******************************/

%   core_dp(+Fixed, +Core, +Budget, +T, +Deadline, !Box)
%
%   Exact search of the decision core (the classes with more than one
%   option left): a dynamic program over the core classes whose states
%   s(Cost, Util, Sels) are kept as a Pareto set, each pruned unless Util
%   plus the LP bound of the classes still to come at the remaining
%   capacity reaches max(T, Incumbent+1). Completing a state with the
%   cheapest options of the classes still to come is admissible, so every
%   stage may raise the incumbent, kept in Box = box(inc(Util, Sels), ...)
%   (Sels: a list of Unit-Variant lists).

core_dp(Fixed, Core, Budget, T, Deadline, Box) :-
    option_sums(Fixed, 0, FC, 0, FU),
    option_sels(Fixed, FixedSels),
    suffix_bounds(Core, [_|Bounds]),
    dp_stages(Core, Bounds, [s(FC, FU, FixedSels)], Budget, T, Deadline, Box).

option_sums([], C, C, U, U).
option_sums([o(OC, OU, _)|Os], C0, C, U0, U) :-
    C1 is C0+OC,
    U1 is U0+OU,
    option_sums(Os, C1, C, U1, U).

option_sels([], []).
option_sels([o(_, _, Sel)|Os], [Sel|Sels]) :-
    option_sels(Os, Sels).

dp_stages([], [], _, _, _, _, _).
dp_stages([c(Front, _)|Fronts], [F|Bounds], States0, Budget, T, Deadline, Box) :-
    in_time(Deadline),
    arg(1, Box, inc(IU, _)),
    Need is max(T, IU+1),
    foldl(shift_states(States0, Budget), Front, Keyed, []),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, Cands),
    prune(Cands, -1, F, Budget, Need, States),
    (   States == []
    ->  true
    ;   last(States, s(_, LU, LSels)),
        F = f(_, BU, _),
        Complete is LU+BU,
        (   Complete > IU
        ->  cheapest_sels(Fronts, LSels, Sels),
            nb_setarg(1, Box, inc(Complete, Sels))
        ;   true
        ),
        dp_stages(Fronts, Bounds, States, Budget, T, Deadline, Box)
    ).

shift_states([], _, _, Keyed, Keyed).
shift_states([s(C0, U0, Sels)|States], Budget, O, Keyed0, Keyed) :-
    O = o(OC, OU, OSel),
    C is C0+OC,
    (   C =< Budget
    ->  U is U0+OU,
        NU is -U,
        Keyed0 = [k(C, NU)-s(C, U, [OSel|Sels])|Keyed1]
    ;   Keyed0 = Keyed1
    ),
    shift_states(States, Budget, O, Keyed1, Keyed).

cheapest_sels([], Sels, Sels).
cheapest_sels([c([o(_, _, Sel)|_], _)|Fronts], Sels0, [Sel|Sels]) :-
    cheapest_sels(Fronts, Sels0, Sels).

% prune(+Sorted, +BestU, +F, +Budget, +Need, -States): Pareto filter and
% LP bound test, in order of increasing cost.
prune([], _, _, _, _, []).
prune([S|Ss], Best, F, Budget, Need, States) :-
    S = s(C, U, _),
    (   U > Best
    ->  R is Budget-C,
        (   suffix_value(F, R, V),
            U+V >= Need
        ->  States = [S|States1]
        ;   States = States1
        ),
        prune(Ss, U, F, Budget, Need, States1)
    ;   prune(Ss, Best, F, Budget, Need, States)
    ).


                 /*******************************
                 *            SOLVING           *
                 *******************************/

%   solve(+Prep, +Restrictions, +Lag, +Deadline, -Result) is det.
%
%   Result is sol(Key, Cost, Util, Status, Enum) for the best pack of
%   the (restricted) problem, or `none` when it has none. Key is the
%   sorted list of Unit-Variant pairs; Enum = enum(P/Q, Units, Bests, Lag)
%   holds what bounds the alternatives: the multiplier P/Q of the LP
%   relaxation, the units and best Lagrangian values of the classes, and
%   the multipliers of users' rows (`none` without rows). When the time
%   limit stops the search, the best pack found (at least the greedy one)
%   comes with Status gap(G).  A problem with users' rows goes to
%   ctxrelay_packer_rows:rsolve/5, with Lag the root's multipliers (`none`
%   at the root), and may answer unknown(Bound) when the time limit
%   stopped it before any pack satisfying the rows was found.

solve(Prep, Restr, Lag, Deadline, Result) :-
    Prep = prep(_, prob(_, _, _, _, _, User), _, _),
    (   User \== none,
        get_dict(table, User, Table),
        Table \== none
    ->  rsolve(Prep, Restr, Lag, Deadline, Result)
    ;   solve(Prep, Restr, Deadline, Result)
    ).

solve(prep(_, P, X, St0), Restr, Deadline, Result) :-
    P = prob(N, _, _, _, Budget, _),
    duplicate_term(St0, St),
    restrictions_array(Restr, R),
    (   apply_restrictions(1, N, R, X, St)
    ->  Box = box(none, none, 0/1, none),
        catch(( exact(P, X, St, R, Budget, Deadline, Box)
              ->  Done = true
              ;   Done = infeasible
              ),
              packer_time_limit,
              Done = false),
        (   Done == infeasible
        ->  Result = none
        ;   Done == true
        ->  solve_result(P, Box, optimal, Result)
        ;   cut_result(P, X, St, R, Budget, Box, Result)
        )
    ;   Result = none
    ).

%   cut_result(+P, +X, +St, +R, +Budget, !Box, -Result)
%
%   The time limit stopped the search: return the better of the best
%   pack found and the greedy pack, with the proven gap. When the classes
%   could not even be built, the bound is the group LP bound.

cut_result(P, X, St, R, Budget, Box, Result) :-
    allowed_from(P, R, Allowed),
    (   greedy_groups(P, X, St, Allowed, GKey, _, GU)
    ->  arg(1, Box, Inc),
        (   Inc = inc(IU, _), IU >= GU
        ->  true
        ;   nb_setarg(1, Box, inc(GU, [GKey]))
        ),
        (   arg(2, Box, none)
        ->  lp_bound(X, St, Allowed, Budget, UB, PL, QL),
            nb_setarg(2, Box, UB),
            nb_setarg(3, Box, PL/QL)
        ;   true
        ),
        arg(1, Box, inc(IU1, _)),
        arg(2, Box, UB1),
        gap_status(UB1, IU1, Status),
        solve_result(P, Box, Status, Result)
    ;   Result = none
    ).

solve_result(P, Box, Status, sol(Key, Cost, Util, Status, Enum)) :-
    arg(1, Box, inc(Util, Sels)),
    append(Sels, Key0),
    msort(Key0, Key),
    key_cost_util(P, Key, Cost, Util1),
    assertion(Util1 =:= Util),
    arg(3, Box, PL/QL),
    arg(4, Box, ClassInfo),
    (   ClassInfo = ci(Classes, Units)
    ->  maplist(class_best(PL, QL), Classes, Bests),
        Enum = enum(PL/QL, Units, Bests, none)
    ;   Enum = none
    ).

class_best(P, Q, c(Front, _), Best) :-
    class_values(P, Q, c(Front, _), _, Best).

allowed_from(prob(N, _, Us, _, _, _), R, Allowed) :-
    functor(Allowed, allowed, N),
    forall(between(1, N, I),
           ( arg(I, R, O),
             arg(I, Us, u(Vs, _)),
             allowed_variants(Vs, O, AVs),
             nb_setarg(I, Allowed, AVs)
           )).

allowed_variants([], _, []).
allowed_variants([V|Vs], O, AVs) :-
    V = v(K, _, _, _),
    (   memberchk(K, O)
    ->  AVs = [V|AVs1]
    ;   AVs = AVs1
    ),
    allowed_variants(Vs, O, AVs1).

%   exact(+P, +X, +St, +R, +Budget, +Deadline, !Box) is semidet.
%
%   Compiles the problem into classes, takes the class greedy as the
%   incumbent and searches the windows. Box holds the incumbent, the
%   proven upper bound and the LP multiplier. Fails when the problem has
%   no admissible pack; throws packer_time_limit when the deadline passes.
%   The group greedy (pack_greedy/4) is only needed when the search is
%   cut: a proven optimum is never below it.

exact(P, X, St, R, Budget, Deadline, Box) :-
    classes(P, X, St, R, Deadline, Classes, Units),
    search_classes(Classes, Units, Budget, Deadline, Box).

%!  search_classes(+Classes, +Units, +Budget, +Deadline, !Box) is semidet.
%
%   The search of exact/7 over classes built elsewhere (the classes into
%   which ctxrelay_packer_absorb merged users' rows).

search_classes(Classes, Units, Budget, Deadline, Box) :-
    setarg(4, Box, ci(Classes, Units)),     % no copy; only used when done
    class_greedy(Classes, Budget, CU, Choice),
    option_sels(Choice, Sels),
    nb_setarg(1, Box, inc(CU, Sels)),
    lp(Classes, Budget, UB, PL, QL),
    nb_setarg(2, Box, UB),
    nb_setarg(3, Box, PL/QL),
    windows(Classes, Budget, UB, Deadline, Box).

%   windows(+Classes, +Budget, +UB, +Deadline, !Box)
%
%   Searches windows [T, UB] from the top: with T close to the LP bound
%   the reduction leaves a tiny core; a window without a pack proves
%   UB < T and the next one is twice as deep, down to the incumbent.
%   The first window that holds a pack holds the optimum.

windows(Classes, Budget, UB0, Deadline, Box) :-
    arg(1, Box, inc(IU, _)),
    Gap is UB0-IU,
    (   Gap =< 0
    ->  true
    ;   window(Classes, Budget, UB0, 1, Deadline, Box)
    ).

window(Classes, Budget, UB, Step, Deadline, Box) :-
    arg(1, Box, inc(IU, _)),
    T is max(IU+1, UB-Step+1),
    nb_setarg(2, Box, UB),
    window_search(Classes, Budget, T, Deadline, Box),
    arg(1, Box, inc(IU1, _)),
    (   IU1 >= T                        % found in [T, UB]: optimal
    ->  true
    ;   T =< IU1+1                      % nothing above the incumbent
    ->  true
    ;   UB1 is T-1,
        Step1 is Step*2,
        window(Classes, Budget, UB1, Step1, Deadline, Box)
    ).

window_search(Classes, Budget, T, Deadline, Box) :-
    (   reduce(Classes, Budget, T, Reduced)
    ->  split_fixed(Reduced, Fixed, Core),
        core_dp(Fixed, Core, Budget, T, Deadline, Box)
    ;   true
    ).

split_fixed([], [], []).
split_fixed([Class|Cs], Fixed, Core) :-
    (   Class = c([O], _)
    ->  Fixed = [O|Fixed1],
        split_fixed(Cs, Fixed1, Core)
    ;   Core = [Class|Core1],
        split_fixed(Cs, Fixed, Core1)
    ).
