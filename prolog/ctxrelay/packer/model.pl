:- module(ctxrelay_packer_model,
          [ post_model/6,           % +CUs, +Cs, +Budget, -Vars, -Cost, -Utility
            post_choices/3          % +CUs, +Cs, -Vars
          ]).
:- use_module(library(clpfd)).
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(structure, [args/3]).

/** <module> The CLP(FD) model of a packing problem

The core relation behind pack_constraints/6: it posts the constraints and
does no search, so that its propagation can be tested alone and every pack
the search returns can be checked against it (tests/plunit/test_packer.pl).
The search (ctxrelay_packer_search) solves the same model compiled into a
multiple-choice knapsack; docs/packer.md says why it does not label this
one.
*/

                 /*******************************
                 *        THE CLP(FD) MODEL     *
                 *******************************/

%   post_model(+CUs, +Cs, +Budget, -Vars, -Cost, -Utility)
%
%   CUs is a list of cu(Id, Vs, Mandatory); Cs refers to positions in
%   CUs. Unchecked.

post_model(CUs, Cs, Budget, Vars, Cost, Utility) :-
    length(CUs, N),
    functor(InArr, in, N),
    maplist(post_together(InArr), Cs),
    post_units(CUs, 1, InArr, Vars, CT, [], UT, []),
    maplist(post_structural(InArr), Cs),
    pairs_keys_values(CT, CCs, CVs),
    pairs_keys_values(UT, UCs, UVs),
    scalar_product(CCs, CVs, #=, Cost),
    Cost #=< Budget,
    scalar_product(UCs, UVs, #=, Utility).

%   post_choices(+CUs, +Cs, -Vars)
%
%   The variables of the model and the structural constraints, without
%   the cost and utility sums (posting those for hundreds of units costs
%   more than a whole solve): the side model on which users' checks and
%   goals propagate (ctxrelay_packer_checks).

post_choices(CUs, Cs, Vars) :-
    length(CUs, N),
    functor(InArr, in, N),
    maplist(post_together(InArr), Cs),
    foldl(post_choice(InArr), CUs, Vars, 1, _),
    maplist(post_structural(InArr), Cs).

post_choice(InArr, cu(Id, Vs, M), choice(Id, In, Bs), I, I1) :-
    arg(I, InArr, In),
    In in 0..1,
    same_length(Vs, Bs),
    Bs ins 0..1,
    sum(Bs, #=, In),
    (   M == true
    ->  In = 1
    ;   true
    ),
    I1 is I+1.

post_together(InArr, together([I|Is])) :-
    !,
    arg(I, InArr, In),
    share_in(Is, InArr, In).
post_together(_, _).

share_in([], _, _).
share_in([J|Js], InArr, In) :-
    arg(J, InArr, In),
    share_in(Js, InArr, In).

post_structural(InArr, amo(Is)) :-
    !,
    args(Is, InArr, Ins),
    sum(Ins, #=<, 1).
post_structural(InArr, requires(I, J)) :-
    !,
    arg(I, InArr, A),
    arg(J, InArr, B),
    A #=< B.
post_structural(_, _).

%   Cost   = sum(MinCost*In + (C-MinCost)*B)    (tight lower bound)
%   Utility = sum(MaxUtil*In - (MaxUtil-U)*B)   (tight upper bound)

post_units([], _, _, [], CT, CT, UT, UT).
post_units([cu(Id, Vs, M)|CUs], I, InArr, [choice(Id, In, Bs)|Vars],
           CT0, CT, UT0, UT) :-
    arg(I, InArr, In),
    In in 0..1,
    same_length(Vs, Bs),
    Bs ins 0..1,
    sum(Bs, #=, In),
    (   M == true
    ->  In = 1
    ;   true
    ),
    maplist([v(_, _, C, _), C]>>true, Vs, Cs),
    maplist([v(_, _, _, U), U]>>true, Vs, Us),
    min_list(Cs, MinC),
    max_list(Us, MaxU),
    add_term(MinC, In, CT0, CT1),
    add_term(MaxU, In, UT0, UT1),
    foldl(variant_terms(MinC, MaxU), Vs, Bs, CT1-UT1, CT2-UT2),
    I1 is I+1,
    post_units(CUs, I1, InArr, Vars, CT2, CT, UT2, UT).

variant_terms(MinC, MaxU, v(_, _, C, U), B, CT0-UT0, CT-UT) :-
    DC is C-MinC,
    DU is U-MaxU,
    add_term(DC, B, CT0, CT),
    add_term(DU, B, UT0, UT).

add_term(0, _, T, T) :- !.
add_term(K, V, [K-V|T], T).
