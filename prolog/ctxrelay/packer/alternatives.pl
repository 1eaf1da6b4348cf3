:- module(ctxrelay_packer_alternatives,
          [ solutions/4             % +Prep, +TimeLimit, +MaxAlt, -Sol
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(heaps)).
:- use_module(library(lists)).
:- use_module(library(yall)).
:- use_module(problem, [deadline/2]).
:- use_module(structure).
:- use_module(classes, [classes_of/8]).
:- use_module(search).
:- use_module(rows, [rclasses_of/9, rclass_best/5]).
:- use_module(checks, [side_model/2, pack_passes/3, side_admits/2, key_decisions/3]).

/** <module> The best pack and the alternatives, in non-increasing utility

Lawler-Murty partitioning: once a pack is yielded, the rest of its
subproblem is split into disjoint subproblems kept in a priority queue
under a cheap upper bound, and solved exactly only when they reach the
top.
*/

                 /*******************************
                 *          SOLUTIONS           *
                 *******************************/

%!  solutions(+Prep, +TimeLimit, +MaxAlt, -Sol) is nondet.
%
%   The packs of the consistent prepared problem Prep, best first, as
%   sol(Key, Cost, Util, Status, Enum) terms; at most MaxAlt after the
%   best.  Fails when there is none.  Packs that satisfy the rows but
%   not the users' checks or goals are skipped: the first that passes is
%   the optimum of the whole model, as the enumeration is in
%   non-increasing utility.
%
%   @error error(ctxrelay(pack_time_limit, Details), _) when the time
%          limit stops the search before any pack satisfying the user
%          constraints is found.

solutions(Prep, TimeLimit, MaxAlt, Sol) :-
    Prep = prep(consistent, P, _, _),
    P = prob(_, _, _, _, _, User),
    (   User \== none
    ->  get_dict(unsat, User, []),
        side_model(P, Side)
    ;   Side = none
    ),
    initial_restrictions(P, Restr),
    deadline(TimeLimit, Deadline),
    solve(Prep, Restr, none, Deadline, Result),
    (   Side == none
    ->  first_result(Result, TimeLimit),
        enumerate(Prep, TimeLimit, MaxAlt, Result-Restr, Sol)
    ;   checked(Result, Restr, Prep, Side, TimeLimit, Deadline, MaxAlt, Sol)
    ).

first_result(Result, TimeLimit) :-
    (   Result = sol(_, _, _, _, _)
    ->  true
    ;   Result = unknown(UB)
    ->  time_limit_error(TimeLimit, UB)
    ;   fail
    ).

time_limit_error(TimeLimit, UB) :-
    throw(error(ctxrelay(pack_time_limit, _{time_limit:TimeLimit, bound:UB}), _)).


                 /*******************************
                 *          ENUMERATION         *
                 *******************************/

%   enumerate(+Prep, +TimeLimit, +MaxAlt, +First, -Sol) is nondet.
%
%   The first pack, then the next ones in non-increasing utility, by
%   Lawler-Murty partitioning: when a pack S of subproblem R is yielded,
%   the rest of R is split into disjoint subproblems R_i: the units with
%   a choice before the i-th one are fixed as in S, the i-th one may
%   take any of its options but S's. Subproblems wait in a priority
%   queue under an upper bound (children/5, capped by the parent's
%   utility) and are solved only when they reach the top; solved ones
%   wait under their exact utility. Each yielded pack costs one bound per
%   unit with a choice and one exact solve per subproblem that reaches
%   the top.

enumerate(Prep, TimeLimit, MaxAlt, Sol0-R0, Sol) :-
    (   MaxAlt == 0
    ->  Sol = Sol0
    ;   Sol0 = sol(_, _, _, Status, _),
        Status \== optimal
    ->  Sol = Sol0
    ;   empty_heap(H0),
        enum_yield(Sol0, R0, Prep, TimeLimit, MaxAlt, H0, Sol)
    ).

enum_yield(Sol0, R0, Prep, TimeLimit, Left, H0, Sol) :-
    (   Sol = Sol0
    ;   Left \== 0,
        children(Prep, Sol0, R0, H0, H1),
        deadline(TimeLimit, Deadline),
        sol_lag(Sol0, Lag),
        next_solved(H1, Prep, Lag, Deadline, Sol1, R1, H2),
        (   Left == inf
        ->  Left1 = inf
        ;   Left1 is Left-1
        ),
        enum_yield(Sol1, R1, Prep, TimeLimit, Left1, H2, Sol)
    ).

sol_lag(sol(_, _, _, _, enum(_, _, _, Lag)), Lag).

next_solved(H0, Prep, Lag, Deadline, Sol, R, H) :-
    get_from_heap(H0, _, Entry, H1),
    (   Entry = solved(Sol, R)
    ->  H = H1
    ;   Entry = open(R0),
        solve(Prep, R0, Lag, Deadline, Result),
        (   Result = sol(_, _, U, optimal, _)
        ->  NU is -U,
            add_to_heap(H1, p(NU, 0), solved(Result, R0), H2)
        ;   Result == none
        ->  H2 = H1
        ;   fail                            % timeout: stop enumerating
        ),
        next_solved(H2, Prep, Lag, Deadline, Sol, R, H)
    ).

%   checked(+First, +R0, +Prep, +Side, +TimeLimit, +Deadline, +MaxAlt, -Sol)
%
%   The enumeration when users' checks or goals apply: every pack in
%   the Lawler-Murty order is tested (pack_passes/3) and yielded only if
%   it passes; open subproblems whose restrictions make the side model
%   fail are dropped unsolved (side_admits/2).  Until the first pack
%   passes, the time limit of the first pack applies and its expiry is
%   an error (no pack found, none proven absent); afterwards each
%   alternative has its own limit and its expiry ends the enumeration.

checked(Result, R0, Prep, Side, TimeLimit, Deadline, MaxAlt, Sol) :-
    (   Result = sol(_, _, _, Status, _)
    ->  (   Status == optimal
        ->  empty_heap(H0),
            checked_yield(Result, R0, Prep, Side, TimeLimit, Deadline, first,
                          MaxAlt, H0, Sol)
        ;   Prep = prep(_, P, _, _),
            Result = sol(Key, _, _, _, _),
            (   pack_passes(P, Side, Key)
            ->  Sol = Result                % a cut search: no alternatives
            ;   time_limit_error(TimeLimit, none)
            )
        )
    ;   first_result(Result, TimeLimit)
    ).

checked_yield(Sol0, R0, Prep, Side, TimeLimit, Deadline, Phase, Left, H0, Sol) :-
    Prep = prep(_, P, _, _),
    Sol0 = sol(Key, _, _, _, _),
    (   pack_passes(P, Side, Key)
    ->  (   Sol = Sol0
        ;   Left \== 0,
            (   Left == inf -> Left1 = inf ; Left1 is Left-1 ),
            deadline(TimeLimit, Deadline1),
            checked_next(Sol0, R0, Prep, Side, TimeLimit, Deadline1, later, Left1,
                         H0, Sol)
        )
    ;   checked_next(Sol0, R0, Prep, Side, TimeLimit, Deadline, Phase, Left, H0, Sol)
    ).

checked_next(Sol0, R0, Prep, Side, TimeLimit, Deadline, Phase, Left, H0, Sol) :-
    children(Prep, Sol0, R0, H0, H1),
    sol_lag(Sol0, Lag),
    catch(next_checked(H1, Prep, Side, Lag, Deadline, Sol1, R1, H2),
          packer_enumeration_time_limit,
          (   Phase == first
          ->  time_limit_error(TimeLimit, none)
          ;   fail
          )),
    checked_yield(Sol1, R1, Prep, Side, TimeLimit, Deadline, Phase, Left, H2, Sol).

next_checked(H0, Prep, Side, Lag, Deadline, Sol, R, H) :-
    get_from_heap(H0, _, Entry, H1),
    (   Entry = solved(Sol, R)
    ->  H = H1
    ;   Entry = open(R0),
        restrictions_array(R0, RA),
        (   side_admits(Side, RA)
        ->  solve(Prep, R0, Lag, Deadline, Result),
            (   Result = sol(_, _, U, optimal, _)
            ->  NU is -U,
                add_to_heap(H1, p(NU, 0), solved(Result, R0), H2)
            ;   Result == none
            ->  H2 = H1
            ;   throw(packer_enumeration_time_limit)
            )
        ;   H2 = H1
        ),
        next_checked(H2, Prep, Side, Lag, Deadline, Sol, R, H)
    ).

%   children(+Prep, +Sol, +Restr, +H0, -H)
%
%   The Lawler-Murty subproblems of Restr minus Sol's pack. Decisions are
%   taken class by class (the classes of Sol's solve) and a child is
%   bounded by the Lagrangian bound at Sol's multiplier: P*Budget, plus
%   Sol's value in the classes before, the best value of the classes
%   after, and the best value of its own class under its restrictions
%   (a small class dynamic program; a child whose class has no admissible
%   selection is empty and dropped). Units in no class were out by
%   propagation: no pack differs there.  Under users' rows the values
%   are those of the Lagrangian utility (Lag = lag(Q, Ps, K0, LUs)) and
%   the bound is brought back to utility as (Bound + K0) div Q.

children(prep(_, P, X, St0), sol(Key, _, U, _, Enum), Restr, H0, H) :-
    Enum = enum(PL/QL, ClassUnits, Bests, Lag),
    P = prob(N, _, Us, _, Budget, _),
    restrictions_array(Restr, R),
    duplicate_term(St0, St),
    apply_restrictions(1, N, R, X, St),
    key_decisions(Key, N, D),
    sum_list(Bests, SumBest),
    D0 is PL*Budget + SumBest,
    Restr = restr(Base, Over0),
    Ctx = lm(D, R, Us, PL, QL, U, Base, P, X, St, Lag),
    class_children(ClassUnits, Bests, Ctx, D0, Over0, H0, H).

class_children([], [], _, _, _, H, H).
class_children([Units|CUs], [Best|Bests], Ctx, D0, Over0, H0, H) :-
    Ctx = lm(D, R, Us, PL, QL, _, _, _, _, _, Lag),
    with_choice(Units, R, Choice),
    unit_children(Choice, Units, [], Best, Ctx, D0, Over0, Over, H0, H1),
    foldl(pack_value(D, Us, PL, QL, Lag), Units, 0, VS),
    D1 is D0 - Best + VS,
    class_children(CUs, Bests, Ctx, D1, Over, H1, H).

unit_children([], _, _, _, _, _, Over, Over, H, H).
unit_children([I|Is], Units, Fixed, Best, Ctx, D0, Over0, Over, H0, H) :-
    Ctx = lm(D, R, _, _, QL, U, Base, _, _, _, Lag),
    arg(I, D, DI),
    arg(I, R, O),
    selectchk(DI, O, Others),
    (   findall(V, child_class_value(Ctx, Units, Fixed, I, Others, V), [V])
    ->  Bound0 is (D0 - Best + V) // QL,
        (   Lag == none
        ->  Bound = Bound0
        ;   Lag = lag(Q, _, K0, _),
            Bound is (Bound0 + K0) div Q
        ),
        Key is min(U, Bound),
        NK is -Key,
        add_to_heap(H0, p(NK, 1), open(restr(Base, [I-Others|Over0])), H1)
    ;   H1 = H0                             % empty subproblem
    ),
    unit_children(Is, Units, [I-DI|Fixed], Best, Ctx, D0, [I-[DI]|Over0], Over,
                  H1, H).

%   child_class_value(+Ctx, +Units, +Fixed, +I, +Others, -V) is semidet.
%
%   Best Lagrangian value of the class of Units when the units in Fixed
%   keep their option and unit I takes one of Others. Changes to the
%   restrictions and states are undone by the caller's findall/3.

child_class_value(lm(_, R, _, PL, QL, _, _, P, X, St, Lag), Units, Fixed, I, Others,
                  V) :-
    restrict_units([I-Others|Fixed], R, X, St),
    X = str(_, UG, _, _, _, _, _, _),
    args(Units, UG, Gs0),
    sort(Gs0, Gs),
    (   Lag == none
    ->  classes_of(Gs, P, X, St, R, inf, Classes, _),
        maplist(class_best(PL, QL), Classes, Bs)
    ;   P = prob(_, _, _, _, _, User),
        get_dict(table, User, Table),
        rclasses_of(Gs, P, X, St, R, Table, inf, Classes, _),
        maplist(rclass_best(PL, QL, Lag), Classes, Bs)
    ),
    sum_list(Bs, V).

restrict_units([], _, _, _).
restrict_units([I-O0|Us], R, X, St) :-
    (   integer(O0)
    ->  O = [O0]
    ;   O = O0
    ),
    setarg(I, R, O),
    X = str(_, UG, _, _, _, _, _, _),
    arg(I, UG, G),
    (   O == [0]
    ->  set_out(G, X, St, _, [])
    ;   O = [0|_]
    ->  true
    ;   set_in(G, X, St, _, [])
    ),
    restrict_units(Us, R, X, St).

pack_value(D, Us, PL, QL, Lag, I, V0, V) :-
    arg(I, D, DI),
    arg(I, Us, u(Vs, _)),
    option_value(Lag, I, Vs, PL, QL, DI, VI),
    V is V0+VI.

with_choice([], _, []).
with_choice([I|Is], R, Choice) :-
    (   arg(I, R, [_, _|_])
    ->  Choice = [I|Choice1]
    ;   Choice = Choice1
    ),
    with_choice(Is, R, Choice1).

option_value(_, _, _, _, _, 0, 0) :- !.
option_value(none, _, Vs, PL, QL, K, V) :-
    !,
    nth1(K, Vs, v(K, _, C, U)),
    V is U*QL - PL*C.
option_value(lag(_, _, _, LUs), I, Vs, PL, QL, K, V) :-
    nth1(K, Vs, v(K, _, C, _)),
    arg(I, LUs, Ls),
    nth1(K, Ls, L),
    V is L*QL - PL*C.
