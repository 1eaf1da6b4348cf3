:- module(ctxrelay_packer_mcpareto,
          [ mc_pareto/3             % +Dirs, +Items, -Front
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(lists)).
:- use_module(library(pairs)).

/** <module> Pareto sets under users' rows

Multi-criteria Pareto sets: the options of a class and the states of the
search under users' rows (ctxrelay_packer_rows) are kept when no other
one is as cheap or cheaper, as useful or more, and not worse on any row
(lower for `=<`, higher for `>=`, equal for `=`).
*/

                 /*******************************
                 *   MULTI-CRITERIA PARETO SETS  *
                 *******************************/

%   mc_pareto(+Dirs, +Items, -Front): the items o(C, U, Rv, ...) or
%   s(C, U, Rv, ...) that no other item dominates (cheaper or as cheap,
%   as useful or more, and not worse on any row), sorted by cost.

mc_pareto(Dirs, Items, Front) :-
    map_list_to_pairs(cost_key, Items, Keyed),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, Ordered),
    mc_filter(Ordered, Dirs, [], Rev),
    reverse(Rev, Front).

cost_key(Item, k(C, NU)) :-
    arg(1, Item, C),
    arg(2, Item, U),
    NU is -U.

%   Items come by increasing cost.  An item is dominated when a kept one
%   is as useful or more and not worse on any row.  Rows are clamped
%   (reachable/6), so the kept items have few distinct row vectors: the
%   test runs over Best, one entry b(Rv, U) per distinct row vector with
%   the best utility kept at it, not over every kept item.  MaxU is the
%   best utility kept so far: an item more useful than every kept one is
%   dominated by none of them (the common case once the rows no longer
%   separate states).
mc_filter(Items, Dirs, Kept0, Kept) :-
    mc_filter(Items, Dirs, -1, [], Kept0, Kept).

mc_filter([], _, _, _, Kept, Kept).
mc_filter([X|Xs], Dirs, MaxU, Best0, Kept, Out) :-
    arg(2, X, U),
    arg(3, X, Rv),
    (   U > MaxU
    ->  best_update(Best0, Rv, U, Best),
        mc_filter(Xs, Dirs, U, Best, [X|Kept], Out)
    ;   dominated(Best0, Dirs, U, Rv)
    ->  mc_filter(Xs, Dirs, MaxU, Best0, Kept, Out)
    ;   best_update(Best0, Rv, U, Best),
        mc_filter(Xs, Dirs, MaxU, Best, [X|Kept], Out)
    ).

dominated([b(RvK, UK)|Bs], Dirs, U, Rv) :-
    (   UK >= U,
        rv_dominates(Dirs, RvK, Rv)
    ->  true
    ;   dominated(Bs, Dirs, U, Rv)
    ).

%   best_update(+Best0, +Rv, +U, -Best): U is kept at Rv, in front (the
%   most useful entries are tested first).  An entry at the same vector
%   has a lower utility (else the item was dominated) and is dropped.
best_update(Best0, Rv, U, Best) :-
    (   Best0 = [b(Rv0, _)|Bs],
        Rv0 == Rv
    ->  Best = [b(Rv, U)|Bs]
    ;   has_rv(Best0, Rv)
    ->  drop_rv(Best0, Rv, Bs),
        Best = [b(Rv, U)|Bs]
    ;   Best = [b(Rv, U)|Best0]
    ).

has_rv([b(Rv0, _)|Bs], Rv) :-
    (   Rv0 == Rv
    ->  true
    ;   has_rv(Bs, Rv)
    ).

drop_rv([B|Bs], Rv, Out) :-
    (   B = b(Rv0, _),
        Rv0 == Rv
    ->  Out = Bs
    ;   Out = [B|Out1],
        drop_rv(Bs, Rv, Out1)
    ).

rv_dominates([], [], []).
rv_dominates([D|Ds], [A|As], [B|Bs]) :-
    rv_dom(D, A, B),
    rv_dominates(Ds, As, Bs).

rv_dom(le, A, B) :- A =< B.
rv_dom(ge, A, B) :- A >= B.
rv_dom(eq, A, B) :- A =:= B.
