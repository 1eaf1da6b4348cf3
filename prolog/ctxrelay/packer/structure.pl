:- module(ctxrelay_packer_structure,
          [ prepare/2,              % +Problem, -Prep
            set_in/5,               % +Group, +Structure, !State, -Changes, ?Tail
            set_out/5,              % +Group, +Structure, !State, -Changes, ?Tail
            args/3,                 % +Indexes, +Array, -Args
            numlist_/3,             % +Low, +High, -List
            initial_restrictions/2, % +Problem, -Restrictions
            restrictions_array/2,   % +Restrictions, -Array
            apply_restrictions/5    % +I, +N, +Array, +Structure, !State
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).

/** <module> The structure of a packing problem and its propagation

together/1 units form groups (union-find); requires/2, excludes/2 and
at_most_one/1 become links between groups.  Unit propagation over the
group states in/out/free applies the mandatory units and, during the
search, the restrictions of a subproblem.
*/

                 /*******************************
                 *   STRUCTURE AND PROPAGATION  *
                 *******************************/

%   prepare(+Problem, -Prep)
%
%   Prep is prep(Consistency, Problem, Structure, State0):
%
%     - Structure is str(G, UG, GM, GMand, Req, RevReq, AmoOf, AmoSets):
%       G groups (together/1 components, numbered in the order of their
%       first unit), UG unit -> group, GM group -> member units, GMand
%       group -> true/false, Req/RevReq group -> groups it requires / that
%       require it, AmoOf group -> at-most-one set indexes, AmoSets set
%       index -> sorted groups;
%     - State0 is st(S1, ...) with Si in {in, out, free} after propagating
%       the mandatory units;
%     - Consistency is `consistent` or inconsistent(UnitIndex).

prepare(P, prep(Consistency, P, X, St)) :-
    P = prob(N, _, Us, Cs, _, _),
    groups(N, Cs, G, UG, GM),
    X = str(G, UG, GM, GMand, Req, RevReq, AmoOf, AmoSets),
    functor(GMand, gmand, G),
    forall(between(1, G, Gi),
           ( arg(Gi, GM, Ms),
             (   member(M, Ms), arg(M, Us, u(_, true))
             ->  nb_setarg(Gi, GMand, true)
             ;   nb_setarg(Gi, GMand, false)
             ))),
    foldl(implication_pair(UG), Cs, ReqPairs, []),
    pairs_array(G, ReqPairs, Req),
    maplist([A-B, B-A]>>true, ReqPairs, RevPairs),
    pairs_array(G, RevPairs, RevReq),
    foldl(amo_set(UG), Cs, Sets0-Out0, []-[]),
    sort(Out0, OutGroups),
    length(Sets0, NS),
    AmoSets =.. [amo|Sets0],
    findall(Gi-S, (between(1, NS, S), arg(S, AmoSets, Set), member(Gi, Set)),
            AmoPairs),
    pairs_array(G, AmoPairs, AmoOf),
    functor(St, st, G),
    forall(between(1, G, Gi), nb_setarg(Gi, St, free)),
    (   initial_propagation(X, St, OutGroups, FailGroup)
    ->  (   var(FailGroup)
        ->  Consistency = consistent
        ;   arg(FailGroup, GM, [U|_]),
            Consistency = inconsistent(U)
        )
    ;   Consistency = inconsistent(1)
    ).

initial_propagation(X, St, OutGroups, FailGroup) :-
    X = str(G, _, _, GMand, _, _, _, _),
    (   set_all_out(OutGroups, X, St, _, [])
    ->  true
    ;   OutGroups = [FailGroup|_]
    ),
    (   var(FailGroup)
    ->  findall(Gi, (between(1, G, Gi), arg(Gi, GMand, true)), Mand),
        mandatory_in(Mand, X, St, FailGroup)
    ;   true
    ).

mandatory_in([], _, _, _).
mandatory_in([Gi|Gs], X, St, Fail) :-
    (   set_in(Gi, X, St, _, [])
    ->  mandatory_in(Gs, X, St, Fail)
    ;   Fail = Gi
    ).

% groups(+N, +Cs, -G, -UG, -GM): union-find over together/1.

groups(N, Cs, G, UG, GM) :-
    functor(UF, uf, N),
    forall(between(1, N, I), nb_setarg(I, UF, I)),
    forall(member(together([I|Is]), Cs),
           forall(member(J, Is), uf_union(UF, I, J))),
    functor(UG, ug, N),
    numlist_(1, N, Units),
    foldl(assign_group(UF, UG), Units, 0, G),
    findall(Gi-I, (between(1, N, I), arg(I, UG, Gi)), Pairs),
    pairs_array(G, Pairs, GM).

assign_group(UF, UG, I, G0, G) :-
    uf_find(UF, I, R),
    (   R == I
    ->  G is G0+1,
        nb_setarg(I, UG, G)
    ;   arg(R, UG, Gr),
        nb_setarg(I, UG, Gr),
        G = G0
    ).

uf_find(UF, I, R) :-
    arg(I, UF, J),
    (   J =:= I
    ->  R = I
    ;   uf_find(UF, J, R),
        nb_setarg(I, UF, R)
    ).

uf_union(UF, I, J) :-
    uf_find(UF, I, RI),
    uf_find(UF, J, RJ),
    (   RI =:= RJ
    ->  true
    ;   RI < RJ
    ->  nb_setarg(RJ, UF, RI)
    ;   nb_setarg(RI, UF, RJ)
    ).

implication_pair(UG, requires(I, J)) -->
    !,
    { arg(I, UG, A), arg(J, UG, B) },
    (   { A =:= B }
    ->  []
    ;   [A-B]
    ).
implication_pair(_, _) --> [].

amo_set(UG, amo(Is), Sets0-Out0, Sets-Out) :-
    !,
    args(Is, UG, Gs0),
    msort(Gs0, Gs1),
    sort(Gs1, Gs),
    findall(D, (append(_, [D, D2|_], Gs1), D =:= D2), Dups),
    append(Dups, Out, Out0),
    (   Gs = [_, _|_]
    ->  Sets0 = [Gs|Sets]
    ;   Sets0 = Sets
    ).
amo_set(_, _, Acc, Acc).

% args(+Indexes, +Array, -Args): the arguments of Array at Indexes.

args([], _, []).
args([I|Is], Arr, [A|As]) :-
    arg(I, Arr, A),
    args(Is, Arr, As).

% pairs_array(+N, +Pairs, -Array): Array has N arguments, argument K
% holds the sorted set of values V of K-V in Pairs.

pairs_array(N, Pairs, Array) :-
    msort(Pairs, Sorted),
    group_pairs_by_key(Sorted, Grouped),
    array_sets(1, N, Grouped, Sets),
    Array =.. [a|Sets].

%   The sets of keys Low..High in order, [] for a key no pair has (Grouped
%   is sorted by key; a key out of range raises, as nb_setarg/3 did).
array_sets(K, N, Grouped, Sets) :-
    (   K > N
    ->  (   Grouped = [K1-_|_]
        ->  must_be(between(1, N), K1)
        ;   Sets = []
        )
    ;   Grouped = [K-Vs|Rest]
    ->  sort(Vs, Set),
        Sets = [Set|Sets1],
        K1 is K+1,
        array_sets(K1, N, Rest, Sets1)
    ;   Sets = [[]|Sets1],
        K1 is K+1,
        array_sets(K1, N, Grouped, Sets1)
    ).

numlist_(L, H, List) :-
    (   H < L
    ->  List = []
    ;   numlist(L, H, List)
    ).

%   set_in(+G, +X, !St, -Changes, ?Tail)
%   set_out(+G, +X, !St, -Changes, ?Tail)
%
%   Unit propagation of the structural constraints over the group
%   states (backtrackable setarg/3). Changes is a difference list of
%   in(G)/out(G) events. Fails on a conflict.

set_in(Gi, X, St, Ch0, Ch) :-
    arg(Gi, St, S),
    (   S == in
    ->  Ch0 = Ch
    ;   S == free,
        setarg(Gi, St, in),
        Ch0 = [in(Gi)|Ch1],
        X = str(_, _, _, _, Req, _, AmoOf, AmoSets),
        arg(Gi, Req, Hs),
        set_all_in(Hs, X, St, Ch1, Ch2),
        arg(Gi, AmoOf, Ss),
        amo_others_out(Ss, Gi, AmoSets, X, St, Ch2, Ch)
    ).

set_all_in([], _, _, Ch, Ch).
set_all_in([H|Hs], X, St, Ch0, Ch) :-
    set_in(H, X, St, Ch0, Ch1),
    set_all_in(Hs, X, St, Ch1, Ch).

amo_others_out([], _, _, _, _, Ch, Ch).
amo_others_out([S|Ss], Gi, AmoSets, X, St, Ch0, Ch) :-
    arg(S, AmoSets, Set),
    set_others_out(Set, Gi, X, St, Ch0, Ch1),
    amo_others_out(Ss, Gi, AmoSets, X, St, Ch1, Ch).

set_others_out([], _, _, _, Ch, Ch).
set_others_out([H|Hs], Gi, X, St, Ch0, Ch) :-
    (   H == Gi
    ->  Ch1 = Ch0
    ;   set_out(H, X, St, Ch0, Ch1)
    ),
    set_others_out(Hs, Gi, X, St, Ch1, Ch).

set_out(Gi, X, St, Ch0, Ch) :-
    arg(Gi, St, S),
    (   S == out
    ->  Ch0 = Ch
    ;   S == free,
        setarg(Gi, St, out),
        Ch0 = [out(Gi)|Ch1],
        X = str(_, _, _, _, _, RevReq, _, _),
        arg(Gi, RevReq, Hs),
        set_all_out(Hs, X, St, Ch1, Ch)
    ).

set_all_out([], _, _, Ch, Ch).
set_all_out([H|Hs], X, St, Ch0, Ch) :-
    set_out(H, X, St, Ch0, Ch1),
    set_all_out(Hs, X, St, Ch1, Ch).


                 /*******************************
                 *         RESTRICTIONS         *
                 *******************************/

%   A subproblem restricts every unit to a list of allowed options (0 =
%   out, K = variant K): restr(Base, Overrides) with Base an array and
%   Overrides a list of Unit-Options that take precedence (the first
%   one for a unit wins). Alternatives are subproblems (see ENUMERATION).

initial_restrictions(prob(_, _, Us, _, _, _), restr(Base, [])) :-
    Us =.. [_|UList],
    maplist(initial_options, UList, Os),
    Base =.. [r|Os].

initial_options(u(Vs, M), O) :-
    length(Vs, K),
    numlist_(1, K, Ks),
    (   M == true
    ->  O = Ks
    ;   O = [0|Ks]
    ).

restrictions_array(restr(Base, Overrides), R) :-
    duplicate_term(Base, R),
    reverse(Overrides, Rev),
    override(Rev, R).

override([], _).
override([I-O|Os], R) :-
    setarg(I, R, O),
    override(Os, R).

%   apply_restrictions(+I, +N, +R, +X, !St) is semidet.
%
%   Group states implied by the restrictions, propagated.

apply_restrictions(I, N, R, X, St) :-
    (   I > N
    ->  true
    ;   arg(I, R, O),
        X = str(_, UG, _, _, _, _, _, _),
        arg(I, UG, G),
        (   O == []
        ->  fail
        ;   O == [0]
        ->  set_out(G, X, St, _, [])
        ;   O = [0|_]
        ->  true
        ;   set_in(G, X, St, _, [])
        ),
        I1 is I+1,
        apply_restrictions(I1, N, R, X, St)
    ).
