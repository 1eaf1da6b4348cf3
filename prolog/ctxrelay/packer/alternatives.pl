:- module(ctxrelay_packer_alternatives,
          [ first_solution/3,       % +Prep, +TimeLimit, -Sol
            enumerate/5             % +Prep, +TimeLimit, +MaxAlt, +First, -Sol
          ]).
:- use_module(library(apply)).
:- use_module(library(heaps)).
:- use_module(library(lists)).
:- use_module(library(yall)).
:- use_module(problem, [deadline/2]).
:- use_module(structure).
:- use_module(classes, [classes_of/8]).
:- use_module(search).

/** <module> The best pack and the alternatives, in non-increasing utility

Lawler-Murty partitioning: once a pack is yielded, the rest of its
subproblem is split into disjoint subproblems kept in a priority queue
under a cheap upper bound, and solved exactly only when they reach the
top.
*/

                 /*******************************
                 *          ENUMERATION         *
                 *******************************/

%   first_solution(+Prep, +TimeLimit, -Sol) is semidet.

first_solution(Prep, TimeLimit, Sol) :-
    Prep = prep(_, P, _, _),
    initial_restrictions(P, Restr),
    deadline(TimeLimit, Deadline),
    solve(Prep, Restr, Deadline, Result),
    Result = sol(_, _, _, _, _),
    Sol = Result-Restr.

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
        next_solved(H1, Prep, Deadline, Sol1, R1, H2),
        (   Left == inf
        ->  Left1 = inf
        ;   Left1 is Left-1
        ),
        enum_yield(Sol1, R1, Prep, TimeLimit, Left1, H2, Sol)
    ).

next_solved(H0, Prep, Deadline, Sol, R, H) :-
    get_from_heap(H0, _, Entry, H1),
    (   Entry = solved(Sol, R)
    ->  H = H1
    ;   Entry = open(R0),
        solve(Prep, R0, Deadline, Result),
        (   Result = sol(_, _, U, optimal, _)
        ->  NU is -U,
            add_to_heap(H1, p(NU, 0), solved(Result, R0), H2)
        ;   Result == none
        ->  H2 = H1
        ;   fail                            % timeout: stop enumerating
        ),
        next_solved(H2, Prep, Deadline, Sol, R, H)
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
%   propagation: no pack differs there.

children(prep(_, P, X, St0), sol(Key, _, U, _, Enum), Restr, H0, H) :-
    Enum = enum(PL/QL, ClassUnits, Bests),
    P = prob(N, _, Us, _, Budget),
    restrictions_array(Restr, R),
    duplicate_term(St0, St),
    apply_restrictions(1, N, R, X, St),
    decisions(Key, N, D),
    sum_list(Bests, SumBest),
    D0 is PL*Budget + SumBest,
    Restr = restr(Base, Over0),
    Ctx = lm(D, R, Us, PL, QL, U, Base, P, X, St),
    class_children(ClassUnits, Bests, Ctx, D0, Over0, H0, H).

class_children([], [], _, _, _, H, H).
class_children([Units|CUs], [Best|Bests], Ctx, D0, Over0, H0, H) :-
    Ctx = lm(D, R, Us, PL, QL, _, _, _, _, _),
    with_choice(Units, R, Choice),
    unit_children(Choice, Units, [], Best, Ctx, D0, Over0, Over, H0, H1),
    foldl(pack_value(D, Us, PL, QL), Units, 0, VS),
    D1 is D0 - Best + VS,
    class_children(CUs, Bests, Ctx, D1, Over, H1, H).

unit_children([], _, _, _, _, _, Over, Over, H, H).
unit_children([I|Is], Units, Fixed, Best, Ctx, D0, Over0, Over, H0, H) :-
    Ctx = lm(D, R, _, _, QL, U, Base, _, _, _),
    arg(I, D, DI),
    arg(I, R, O),
    selectchk(DI, O, Others),
    (   findall(V, child_class_value(Ctx, Units, Fixed, I, Others, V), [V])
    ->  Bound is (D0 - Best + V) // QL,
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

child_class_value(lm(_, R, _, PL, QL, _, _, P, X, St), Units, Fixed, I, Others, V) :-
    restrict_units([I-Others|Fixed], R, X, St),
    X = str(_, UG, _, _, _, _, _, _),
    args(Units, UG, Gs0),
    sort(Gs0, Gs),
    classes_of(Gs, P, X, St, R, inf, Classes, _),
    maplist(class_best(PL, QL), Classes, Bs),
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

pack_value(D, Us, PL, QL, I, V0, V) :-
    arg(I, D, DI),
    arg(I, Us, u(Vs, _)),
    option_value(Vs, PL, QL, DI, VI),
    V is V0+VI.

with_choice([], _, []).
with_choice([I|Is], R, Choice) :-
    (   arg(I, R, [_, _|_])
    ->  Choice = [I|Choice1]
    ;   Choice = Choice1
    ),
    with_choice(Is, R, Choice1).

decisions(Key, N, D) :-
    functor(D, d, N),
    forall(member(M-K, Key), nb_setarg(M, D, K)),
    forall(between(1, N, I), ( arg(I, D, X), var(X) -> nb_setarg(I, D, 0) ; true )).

option_value(_, _, _, 0, 0) :- !.
option_value(Vs, PL, QL, K, V) :-
    nth1(K, Vs, v(K, _, C, U)),
    V is U*QL - PL*C.
