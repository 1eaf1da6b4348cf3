:- module(ctxrelay_packer_bound,
          [ lp/5,                   % +Classes, +Budget, -Bound, -P, -Q
            class_greedy/4,         % +Classes, +Budget, -Util, -Choice
            reduce/4,               % +Classes, +Budget, +T, -Reduced
            class_values/5,         % +P, +Q, +Class, -Valued, -Best
            suffix_bounds/2,        % +Classes, -Bounds
            suffix_value/3          % +F, +R, -V
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(structure, [numlist_/3]).
:- use_module(greedy, [lp_fill/6]).
:- use_module(classes, [make_class/2]).

/** <module> The bound of the multiple-choice knapsack

The LP relaxation of the classes (Dantzig over the upper convex hull of
every class) gives the upper bound and the multiplier at the critical
slope; the greedy over the same hull steps gives the first incumbent; the
Lagrangian bound at that multiplier fixes the options that cannot reach a
threshold (reduction); suffix bounds bring the LP bound of the classes
still to come into the core search.
*/

                 /*******************************
                 *      THE LP BOUND OF THE MCKP  *
                 *******************************/

%   lp(+Classes, +Budget, -Bound, -P, -Q) is semidet.
%
%   Dantzig bound of the MCKP: every class at its cheapest option, then
%   the hull segments of all classes by decreasing slope while they fit,
%   the break segment fractionally. Bound is the floor of the LP optimum,
%   P/Q the critical slope (0/1 when everything fits). Fails when the
%   cheapest options do not fit.

lp(Classes, Budget, Bound, P, Q) :-
    class_lp_items(Classes, 0, BC, 0, BU, Segs, []),
    Cap is Budget-BC,
    Cap >= 0,
    sort(1, @>=, Segs, Sorted),
    lp_fill(Sorted, Cap, BU, Bound, P, Q).

class_lp_items([], C, C, U, U, Segs, Segs).
class_lp_items([c([o(FC, FU, _)|_], Hull)|Cs], C0, C, U0, U, Segs0, Segs) :-
    C1 is C0+FC,
    U1 is U0+FU,
    append(Hull, Segs1, Segs0),
    class_lp_items(Cs, C1, C, U1, U, Segs1, Segs).


                 /*******************************
                 *       GREEDY OVER CLASSES    *
                 *******************************/

%   class_greedy(+Classes, +Budget, -Util, -Choice) is semidet.
%
%   Every class at its cheapest option, then the hull steps of all
%   classes by decreasing slope (utility density) while they fit, then
%   passes that move a class to its best option that still fits.
%   Choice is the list of chosen options, one per class.

class_greedy(Classes, Budget, Util, Choice) :-
    Arr =.. [cls|Classes],
    length(Classes, N),
    maplist([c(F, _), A]>>(A =.. [opts|F]), Classes, OptArrs),
    OA =.. [oa|OptArrs],
    functor(Pos, pos, N),
    foldl(greedy_start(Pos), Classes, 1-0, _-Used0),
    Used0 =< Budget,
    numlist_(1, N, Is),
    foldl(class_segments(Arr), Is, Segs, []),
    sort(1, @>=, Segs, Sorted),
    foldl(greedy_step(Pos, Budget), Sorted, Used0, Used1),
    greedy_upgrade(3, Is, OA, Pos, Budget, Used1, _),
    findall(O, ( between(1, N, I), arg(I, Pos, J), arg(I, OA, A), arg(J, A, O) ),
            Choice),
    foldl([o(_, U, _), U0, U1]>>(U1 is U0+U), Choice, 0, Util).

greedy_start(Pos, c([o(C, _, _)|_], _), I-U0, I1-U) :-
    setarg(I, Pos, 1),
    U is U0+C,
    I1 is I+1.

class_segments(Arr, I, Segs0, Segs) :-
    arg(I, Arr, c(_, HS)),
    hull_from(HS, I, 1, Segs0, Segs).

hull_from([], _, _, Segs, Segs).
hull_from([Key-seg(_, DC, To)|HS], I, From, [Key-step(I, From, To, DC)|Segs0], Segs) :-
    hull_from(HS, I, To, Segs0, Segs).

greedy_step(Pos, Budget, _-step(I, From, To, DC), Used0, Used) :-
    (   arg(I, Pos, From),
        Used1 is Used0+DC,
        Used1 =< Budget
    ->  setarg(I, Pos, To),
        Used = Used1
    ;   Used = Used0
    ).

greedy_upgrade(Passes, Is, OA, Pos, Budget, Used0, Used) :-
    (   Passes > 0
    ->  foldl(upgrade_class(OA, Pos, Budget), Is, Used0-false, Used1-Changed),
        (   Changed == true
        ->  P1 is Passes-1,
            greedy_upgrade(P1, Is, OA, Pos, Budget, Used1, Used)
        ;   Used = Used1
        )
    ;   Used = Used0
    ).

upgrade_class(OA, Pos, Budget, I, Used0-Ch0, Used-Ch) :-
    arg(I, OA, A),
    arg(I, Pos, J),
    arg(J, A, o(CJ, _, _)),
    Room is Budget-Used0+CJ,
    functor(A, _, NO),
    last_fitting(NO, A, Room, K),
    (   K > J
    ->  arg(K, A, o(CK, _, _)),
        setarg(I, Pos, K),
        Used is Used0-CJ+CK,
        Ch = true
    ;   Used = Used0,
        Ch = Ch0
    ).

last_fitting(K, A, Room, Fit) :-
    arg(K, A, o(C, _, _)),
    (   C =< Room
    ->  Fit = K
    ;   K1 is K-1,
        last_fitting(K1, A, Room, Fit)
    ).


                 /*******************************
                 *          REDUCTION           *
                 *******************************/

%   reduce(+Classes, +Budget, +T, -Reduced) is semidet.
%
%   Drops every option whose Lagrangian bound, at the multiplier P/Q of
%   the critical slope of the LP relaxation, is below T: no pack of
%   utility >= T uses it. With D = P*Budget + sum of the best reduced
%   values Q*U - P*C of the classes, option o of class k survives iff
%   D - best(k) + val(o) >= T*Q. Repeats while it removes options and
%   the LP multiplier moves. Fails when no pack of utility >= T exists.

reduce(Classes, Budget, T, Reduced) :-
    reduce(3, Classes, Budget, T, Reduced).

reduce(Rounds, Classes, Budget, T, Reduced) :-
    lp(Classes, Budget, Bound, P, Q),
    Bound >= T,
    maplist(class_values(P, Q), Classes, Valued, Bests),
    sum_list(Bests, SumBest),
    D is P*Budget + SumBest,
    TQ is T*Q,
    D >= TQ,
    keep_all(Valued, Bests, Classes, D, TQ, Classes1, false, Changed),
    (   Rounds > 1,
        Changed == true
    ->  R1 is Rounds-1,
        reduce(R1, Classes1, Budget, T, Reduced)
    ;   Reduced = Classes1
    ).

class_values(P, Q, c(Front, _), Valued, Best) :-
    option_values(Front, P, Q, Valued),
    pairs_keys(Valued, Vs),
    max_list(Vs, Best).

option_values([], _, _, []).
option_values([O|Os], P, Q, [V-O|VOs]) :-
    O = o(C, U, _),
    V is U*Q - P*C,
    option_values(Os, P, Q, VOs).

keep_all([], [], [], _, _, [], Ch, Ch).
keep_all([V|Vs], [B|Bs], [C0|Cs0], D, TQ, [C|Cs], Ch0, Ch) :-
    keep_options(D, TQ, V, B, C0, C, Ch1),
    (   Ch1 == true
    ->  Ch2 = true
    ;   Ch2 = Ch0
    ),
    keep_all(Vs, Bs, Cs0, D, TQ, Cs, Ch2, Ch).

keep_options(D, TQ, Valued, Best, Class0, Class, Changed) :-
    Min is TQ - D + Best,
    at_least(Valued, Min, Kept),
    (   same_length(Kept, Valued)
    ->  Changed = false,
        Class = Class0
    ;   Changed = true,
        make_class(Kept, Class)
    ).

at_least([], _, []).
at_least([V-O|VOs], Min, Kept) :-
    (   V >= Min
    ->  Kept = [O|Kept1]
    ;   Kept = Kept1
    ),
    at_least(VOs, Min, Kept1).

%   suffix_bounds(+Fronts, -Bounds)
%
%   Bounds is a list, one element per suffix of Fronts (plus the empty
%   suffix): f(BaseC, BaseU, Chain) where Chain is an array of
%   c(CumCost, CumUtil, DU, DC) over the merged hull segments of the
%   suffix, so that its LP value at capacity R is found by search.

suffix_bounds(Fronts, Bounds) :-
    reverse(Fronts, Rev),
    foldl(suffix_bound, Rev, [f(0, 0, [])], Bounds0),
    maplist(bound_array, Bounds0, Bounds).

suffix_bound(c([o(C, U, _)|_], HS), [f(BC0, BU0, Segs0)|Fs],
             [f(BC, BU, Segs), f(BC0, BU0, Segs0)|Fs]) :-
    BC is BC0+C,
    BU is BU0+U,
    merge_segments(HS, Segs0, Segs).

merge_segments([], Ss, Ss) :- !.
merge_segments(Ss, [], Ss) :- !.
merge_segments([A|As], [B|Bs], [S|Ss]) :-
    A = KA-_,
    B = KB-_,
    (   KA @>= KB
    ->  S = A,
        merge_segments(As, [B|Bs], Ss)
    ;   S = B,
        merge_segments([A|As], Bs, Ss)
    ).

bound_array(f(BC, BU, Segs), f(BC, BU, Arr)) :-
    foldl([_-seg(DU, DC, _), c(C, U, DU, DC), C0-U0, C1-U1]>>
          ( C = C0, U = U0, C1 is C0+DC, U1 is U0+DU ),
          Segs, Cs, 0-0, _),
    Arr =.. [chain|Cs].

%   suffix_value(+F, +R, -V) is semidet: LP value of the suffix at
%   capacity R; fails when its cheapest options do not fit.

suffix_value(f(BC, BU, Arr), R, V) :-
    R1 is R-BC,
    R1 >= 0,
    functor(Arr, _, N),
    (   N =:= 0
    ->  V = BU
    ;   arg(N, Arr, c(CN, UN, DUN, DCN)),
        (   CN+DCN =< R1
        ->  V is BU+UN+DUN
        ;   chain_search(1, N, Arr, R1, I),
            arg(I, Arr, c(CI, UI, DU, DC)),
            V is BU + UI + (DU*(R1-CI)) // DC
        )
    ).

% chain_search(+Lo, +Hi, +Arr, +R, -I): the last segment I whose start
% CumCost is =< R (segment 1 starts at 0).
chain_search(Lo, Hi, Arr, R, I) :-
    (   Lo >= Hi
    ->  I = Lo
    ;   Mid is (Lo+Hi+1) // 2,
        arg(Mid, Arr, c(C, _, _, _)),
        (   C =< R
        ->  chain_search(Mid, Hi, Arr, R, I)
        ;   Mid1 is Mid-1,
            chain_search(Lo, Mid1, Arr, R, I)
        )
    ).
