:- module(ctxrelay_packer,
          [ pack/4,                 % +Units, +Constraints, +Budget, -Pack
            pack/5,                 % +Units, +Constraints, +Budget, -Pack, +Options
            pack_best/4,            % +Units, +Constraints, +Budget, -Pack
            pack_best/5,            % +Units, +Constraints, +Budget, -Pack, +Options
            pack_greedy/4,          % +Units, +Constraints, +Budget, -Pack
            pack_constraints/6      % +Units, +Constraints, +Budget,
                                    % -Vars, -Cost, -Utility
          ]).
:- use_module(library(clpfd)).
:- use_module(library(apply)).
:- use_module(library(assoc)).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(option)).
:- use_module(library(pairs)).
:- use_module(library(predicate_options)).
:- use_module(library(yall)).

/** <module> Token-budget packer: a multiple-choice knapsack in CLP(FD)

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

The model (pack_constraints/6) is plain CLP(FD). The search (pack/5) does
not label it blindly: see docs/packer.md. In short, units tied by
together/1 form one super-item, a multiple-choice knapsack item whose
LP relaxation is the upper convex hull of its variants. The greedy pack
is the first incumbent; the Lagrangian (Dantzig) bound of the LP
relaxation fixes every option that cannot lead to a better pack; only
the small remaining core is posted to CLP(FD) and labelled by a custom
branch-and-bound that orders options by reduced value and posts the LP
bound as a constraint on the objective at every node.
*/

:- predicate_options(pack/5, 5,
                     [ time_limit(number),
                       max_alternatives(nonneg)
                     ]).
:- predicate_options(pack_best/5, 5,
                     [ pass_to(pack/5, 5)
                     ]).

:- multifile prolog:error_message//1.

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
%   Each alternative is found by a fresh search that excludes the packs
%   already yielded (nogoods) and bounds the utility by the previous one;
%   see docs/packer.md for its cost.
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
    first_solution(Prep, TimeLimit, Sol0),
    enumerate(Prep, TimeLimit, MaxAlt, Sol0, Sol),
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
        first_solution(Prep, TimeLimit, Sol)
    ->  sol_pack(Prep, Sol, Pack)
    ;   no_pack_error(Prep)
    ).

%!  pack_greedy(+Units, +Constraints, +Budget, -Pack) is semidet.
%
%   The greedy pack: the mandatory units (and what they require) at their
%   cheapest variants, then upgrades and inclusions by decreasing utility
%   density (over the convex hull of each unit's variants) while they fit
%   and respect the constraints. Status is `gap(G)` with G the distance to
%   the LP bound, or `optimal` when G is 0. It is the first incumbent of
%   pack/5. Fails when nothing is admissible.
%
%   @error As pack_constraints/6.

pack_greedy(Units, Constraints, Budget, Pack) :-
    check_problem(Units, Constraints, Budget, Problem),
    prepare(Problem, Prep),
    Prep = prep(consistent, _, _, _),
    findall(S, greedy_with_gap(Prep, S), [Sol]),
    sol_pack(Prep, Sol, Pack).

greedy_with_gap(Prep, sol(Key, Cost, Util, Status)) :-
    greedy(Prep, Key, Cost, Util),
    Prep = prep(_, P, X, St0),
    P = prob(_, _, _, _, Budget),
    duplicate_term(St0, St),
    initial_allowed(P, Allowed),
    lp_bound(X, St, Allowed, Budget, Bound, _, _),
    gap_status(Bound, Util, Status).


                 /*******************************
                 *          VALIDATION          *
                 *******************************/

%   check_problem(+Units, +Constraints, +Budget, -Problem)
%
%   Problem is prob(N, Ids, Us, Cs, Budget): Ids = ids(Id1, ...),
%   Us = us(u(Vs, Mandatory), ...) with Vs = [v(K, Name, Cost, Utility)]
%   (K the 1-based variant index) and Cs a list of together(Is), amo(Is)
%   and requires(I, J) over 1-based unit indexes (sets sorted, no
%   duplicates).

check_problem(Units, Constraints, Budget, prob(N, Ids, Us, Cs, Budget)) :-
    must_be(list, Units),
    must_be(list, Constraints),
    must_be(nonneg, Budget),
    maplist(check_unit, Units, IdList, UList),
    length(IdList, N),
    empty_assoc(Index0),
    foldl(index_id, IdList, Index0-1, Index-_),
    Ids =.. [ids|IdList],
    Us =.. [us|UList],
    maplist(check_constraint(Index), Constraints, Cs).

check_unit(U0, Id, u(Vs, Mandatory)) :-
    py_term(U0, U),
    (   U = unit(Id, Vs0, Props)
    ->  true
    ;   type_error(pack_unit, U0)
    ),
    check_id(Id),
    must_be(list, Vs0),
    (   Vs0 == []
    ->  domain_error(non_empty_list, Vs0)
    ;   true
    ),
    foldl(check_variant, Vs0, Vs, 1, _),
    maplist([v(_, Name, _, _), Name]>>true, Vs, Names),
    msort(Names, Sorted),
    (   append(_, [X, Y|_], Sorted), X == Y
    ->  domain_error(unique_variant_name, X)
    ;   true
    ),
    must_be(list, Props),
    foldl(check_prop, Props, false, Mandatory).

check_id(Id) :-
    (   var(Id)
    ->  instantiation_error(Id)
    ;   (atom(Id) ; string(Id) ; integer(Id))
    ->  true
    ;   type_error(unit_id, Id)
    ).

check_variant(V0, v(K, Name, Cost, Utility), K, K1) :-
    py_term(V0, V),
    (   V = variant(Name, Cost, Utility)
    ->  true
    ;   type_error(pack_variant, V0)
    ),
    must_be(atomic, Name),
    must_be(nonneg, Cost),
    must_be(nonneg, Utility),
    K1 is K+1.

check_prop(P0, M0, M) :-
    py_term(P0, P),
    (   P = mandatory(B0)
    ->  py_bool(B0, B),
        must_be(boolean, B),
        (   B == true
        ->  M = true
        ;   M = M0
        )
    ;   M = M0                          % kind(K) and others: ignored
    ).

index_id(Id, A0-I, A-I1) :-
    (   get_assoc(Id, A0, _)
    ->  domain_error(unique_unit_id, Id)
    ;   put_assoc(Id, A0, I, A),
        I1 is I+1
    ).

check_constraint(Index, C0, C) :-
    py_term(C0, C1),
    (   C1 = together(Ids)
    ->  ids_indexes(Index, Ids, Is),
        C = together(Is)
    ;   C1 = at_most_one(Ids)
    ->  ids_indexes(Index, Ids, Is),
        C = amo(Is)
    ;   C1 = excludes(A, B)
    ->  id_index(Index, A, IA),
        id_index(Index, B, IB),
        (   IA == IB
        ->  domain_error(pack_constraint, C0)
        ;   sort([IA, IB], Is),
            C = amo(Is)
        )
    ;   C1 = requires(A, B)
    ->  id_index(Index, A, IA),
        id_index(Index, B, IB),
        C = requires(IA, IB)
    ;   domain_error(pack_constraint, C0)
    ).

ids_indexes(Index, Ids, Is) :-
    must_be(list, Ids),
    maplist(id_index(Index), Ids, Is0),
    sort(Is0, Is).

id_index(Index, Id, I) :-
    (   var(Id)
    ->  instantiation_error(Id)
    ;   get_assoc(Id, Index, I)
    ->  true
    ;   domain_error(known_unit_id, Id)
    ).

check_options(Options, TimeLimit, MaxAlt) :-
    must_be(list, Options),
    maplist(py_term, Options, Opts),
    option(time_limit(TimeLimit), Opts, inf),
    (   TimeLimit == inf
    ->  true
    ;   must_be(number, TimeLimit),
        (   TimeLimit >= 0
        ->  true
        ;   domain_error(non_negative_time_limit, TimeLimit)
        )
    ),
    option(max_alternatives(MaxAlt), Opts, inf),
    (   MaxAlt == inf
    ->  true
    ;   must_be(nonneg, MaxAlt)
    ).

%   py_term(+In, -Term)
%
%   The one adapter for terms built in Python: a tuple (Name, A1, ...)
%   arrives as -(Name, A1, ...) and stands for Name(A1, ...).

py_term(T0, T) :-
    (   var(T0)
    ->  instantiation_error(T0)
    ;   compound(T0),
        compound_name_arguments(T0, -, [Name|Args]),
        atom(Name),
        Args \== []
    ->  compound_name_arguments(T, Name, Args)
    ;   T = T0
    ).

py_bool(B0, B) :-
    (   var(B0)
    ->  instantiation_error(B0)
    ;   B0 = @(B1)
    ->  B = B1
    ;   B = B0
    ).


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

args([], _, []).
args([I|Is], Arr, [A|As]) :-
    arg(I, Arr, A),
    args(Is, Arr, As).

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
    P = prob(N, _, Us, Cs, _),
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

% pairs_array(+N, +Pairs, -Array): Array has N arguments, argument K
% holds the sorted set of values V of K-V in Pairs.

pairs_array(N, Pairs, Array) :-
    functor(Array, a, N),
    msort(Pairs, Sorted),
    group_pairs_by_key(Sorted, Grouped),
    forall(member(K-Vs, Grouped), (sort(Vs, Set), nb_setarg(K, Array, Set))),
    forall(between(1, N, K),
           (   arg(K, Array, A),
               var(A)
           ->  nb_setarg(K, Array, [])
           ;   true
           )).

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
                 *     HULLS AND THE LP BOUND   *
                 *******************************/

%   member_chain(+Vs, -Chain)
%
%   Chain is the upper concave hull of the points v(K,_,C,U) from the
%   cheapest one: [p(C0,U0,K0), p(C1,U1,K1), ...] with C and U strictly
%   increasing and slopes strictly decreasing. Points off the chain are
%   dominated for the LP relaxation (not for the search).

member_chain(Vs, Chain) :-
    maplist([v(K, _, C, U), k(C, NU, K)-p(C, U, K)]>>(NU is -U), Vs, Keyed),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, [P0|Ps]),
    P0 = p(_, U0, _),
    pareto(Ps, U0, Front),
    hull([P0|Front], Chain).

pareto([], _, []).
pareto([P|Ps], Best, Front) :-
    P = p(_, U, _),
    (   U > Best
    ->  Front = [P|Front1],
        pareto(Ps, U, Front1)
    ;   pareto(Ps, Best, Front)
    ).

hull(Points, Chain) :-
    foldl(hull_push, Points, [], Rev),
    reverse(Rev, Chain).

hull_push(P, Stack0, [P|Stack]) :-
    hull_pop(Stack0, P, Stack).

hull_pop([B, A|Rest], P, Stack) :-
    A = p(CA, UA, _),
    B = p(CB, UB, _),
    P = p(CP, UP, _),
    (UB-UA)*(CP-CB) =< (UP-UB)*(CB-CA),
    !,
    hull_pop([A|Rest], P, Stack).
hull_pop(Stack, _, Stack).

%   group_chain(+MemberVariants, -Base, -Segs)
%
%   MemberVariants is a list of M-Vs (unit index and its allowed
%   variants). Base is b(C, U, Sel) (every member at its cheapest hull
%   point; Sel a list of M-K), Segs the Minkowski sum of the member
%   chains: s(Key, DU, DC, M, K) by non-increasing slope Key.

group_chain(MVs, b(BC, BU, Sel), Segs) :-
    foldl(member_chain_segs, MVs, Sel, acc(Segs0, 0, 0), acc([], BC, BU)),
    (   Segs0 = [_, _|_], MVs = [_, _|_]
    ->  sort(1, @>=, Segs0, Segs)
    ;   Segs = Segs0
    ).

member_chain_segs(M-Vs, M-K0, acc(Segs0, C0, U0), acc(Segs, C, U)) :-
    member_chain(Vs, [p(C1, U1, K0)|Chain]),
    C is C0+C1,
    U is U0+U1,
    chain_segs(Chain, C1, U1, M, Segs0, Segs).

chain_segs([], _, _, _, Segs, Segs).
chain_segs([p(C, U, K)|Ps], C0, U0, M, [s(Key, DU, DC, M, K)|Segs0], Segs) :-
    DU is U-U0,
    DC is C-C0,
    Key is DU rdiv DC,
    chain_segs(Ps, C, U, M, Segs0, Segs).

%   group_lp(+Mode, +Gi, +Base, +Segs, -BC, -BU, -LPSegs, ?Tail)
%
%   The LP items of group Gi. Mode `in`: the base is forced and the
%   chain segments follow. Mode `opt`: the upper hull from (0,0): one
%   segment to the chain point of steepest slope from the origin, then
%   the chain after it. LP segments are Key-seg(DU, DC, Tag) with Tag
%   step(Gi, I) (chain point I to I+1, 0-based) or inc(Gi, J) (out to
%   chain point J).

group_lp(in, Gi, b(BC, BU, _), Segs, BC, BU, LP0, LP) :-
    in_segs(Segs, Gi, 0, LP0, LP).
group_lp(opt, Gi, b(BC, BU, _), Segs, 0, 0, LP0, LP) :-
    origin_key(BC, BU, Key0),
    best_origin_point(Segs, BC, BU, 1, Key0, 0, BC, BU, J, KeyJ, CJ, UJ),
    (   UJ > 0
    ->  LP0 = [KeyJ-seg(UJ, CJ, inc(Gi, J))|LP1],
        length(Skip, J),
        append(Skip, Rest, Segs),
        in_segs(Rest, Gi, J, LP1, LP)
    ;   LP0 = LP
    ).

origin_key(C, U, Key) :-
    (   C =:= 0
    ->  (   U > 0
        ->  Key = inf
        ;   Key = 0
        )
    ;   Key is U rdiv C
    ).

best_origin_point([], _, _, _, Key, J, C, U, J, Key, C, U).
best_origin_point([s(_, DU, DC, _, _)|Segs], C0, U0, I, BKey, BJ, BC, BU,
                  J, Key, C, U) :-
    C1 is C0+DC,
    U1 is U0+DU,
    origin_key(C1, U1, K1),
    I1 is I+1,
    (   K1 @>= BKey
    ->  best_origin_point(Segs, C1, U1, I1, K1, I, C1, U1, J, Key, C, U)
    ;   best_origin_point(Segs, C1, U1, I1, BKey, BJ, BC, BU, J, Key, C, U)
    ).

in_segs([], _, _, LP, LP).
in_segs([s(Key, DU, DC, _, _)|Segs], Gi, I, [Key-seg(DU, DC, step(Gi, I))|LP0],
        LP) :-
    I1 is I+1,
    in_segs(Segs, Gi, I1, LP0, LP).

%   lp_fill(+SortedSegs, +Cap, +U0, -Bound, -P, -Q)
%
%   Dantzig: take segments by decreasing slope while they fit, the break
%   segment fractionally. Bound is the floor of the LP optimum, P/Q the
%   critical slope (0/1 when everything fits).

lp_fill([], _, U, U, 0, 1).
lp_fill([_-seg(DU, DC, _)|Ss], Cap, U0, B, P, Q) :-
    (   DC =< Cap
    ->  Cap1 is Cap-DC,
        U1 is U0+DU,
        lp_fill(Ss, Cap1, U1, B, P, Q)
    ;   B is U0 + (DU*Cap) // DC,
        P = DU,
        Q = DC
    ).

%   lp_bound(+X, +St, +Allowed, +Budget, -Bound, -P, -Q) is semidet.
%
%   LP bound of the problem in state St with the variants in Allowed
%   (array unit -> allowed v/4 list). Fails if the forced part does
%   not fit.

lp_bound(X, St, Allowed, Budget, Bound, P, Q) :-
    X = str(G, _, GM, _, _, _, _, _),
    lp_items(1, G, GM, St, Allowed, 0, BC, 0, BU, Segs, []),
    Cap is Budget-BC,
    Cap >= 0,
    sort(1, @>=, Segs, Sorted),
    lp_fill(Sorted, Cap, BU, Bound, P, Q).

lp_items(Gi, G, GM, St, Allowed, BC0, BC, BU0, BU, Segs0, Segs) :-
    (   Gi > G
    ->  BC = BC0, BU = BU0, Segs0 = Segs
    ;   arg(Gi, St, S),
        (   S == out
        ->  BC1 = BC0, BU1 = BU0, Segs1 = Segs0
        ;   group_variants(Gi, GM, Allowed, MVs),
            group_chain(MVs, Base, GSegs),
            mode(S, Mode),
            group_lp(Mode, Gi, Base, GSegs, C, U, Segs0, Segs1),
            BC1 is BC0+C,
            BU1 is BU0+U
        ),
        Gi1 is Gi+1,
        lp_items(Gi1, G, GM, St, Allowed, BC1, BC, BU1, BU, Segs1, Segs)
    ).

mode(in, in).
mode(free, opt).

group_variants(Gi, GM, Allowed, MVs) :-
    arg(Gi, GM, Ms),
    member_variants(Ms, Allowed, MVs).

member_variants([], _, []).
member_variants([M|Ms], Allowed, [M-Vs|MVs]) :-
    arg(M, Allowed, Vs),
    member_variants(Ms, Allowed, MVs).

initial_allowed(prob(N, _, Us, _, _), Allowed) :-
    functor(Allowed, allowed, N),
    forall(between(1, N, I),
           ( arg(I, Us, u(Vs, _)), nb_setarg(I, Allowed, Vs) )).

gap_status(Bound, Util, Status) :-
    G is max(0, Bound-Util),
    (   G =:= 0
    ->  Status = optimal
    ;   Status = gap(G)
    ).


                 /*******************************
                 *            GREEDY            *
                 *******************************/

%   greedy(+Prep, -Key, -Cost, -Util) is semidet.
%
%   Mandatory groups (and their closure) at their cheapest hull points,
%   then the moves of all groups (include at the steepest point from the
%   origin, step along the chain) by decreasing slope, each taken when it
%   fits and the structural propagation accepts it. Two passes, as a
%   group pulled in by requires/2 may make an earlier step applicable.
%   Key is the sorted list of UnitIndex-VariantIndex.

greedy(prep(consistent, P, X, St0), Key, Cost, Util) :-
    P = prob(_, _, _, _, Budget),
    X = str(G, _, GM, _, _, _, _, _),
    duplicate_term(St0, St),
    initial_allowed(P, Allowed),
    functor(Chains, chains, G),
    functor(Pos, pos, G),
    numlist_(1, G, Gs),
    foldl(greedy_group(St, GM, Allowed, Chains, Pos), Gs, 0-Moves, Cost0-[]),
    Cost0 =< Budget,
    sort(1, @>=, Moves, Sorted),
    pairs_values(Sorted, Tags),
    foldl(greedy_move(X, St, Chains, Pos, Budget), Tags, Cost0, Cost1),
    foldl(greedy_move(X, St, Chains, Pos, Budget), Tags, Cost1, _),
    foldl(group_selection(Chains, Pos), Gs, Key0, []),
    msort(Key0, Key),
    key_cost_util(P, Key, Cost, Util).

greedy_group(St, GM, Allowed, Chains, Pos, Gi, C0-Moves0, C-Moves) :-
    group_variants(Gi, GM, Allowed, MVs),
    group_chain(MVs, Base, Segs),
    Base = b(BC, _, _),
    nb_setarg(Gi, Chains, ch(Base, Segs)),
    arg(Gi, St, S),
    (   S == in
    ->  setarg(Gi, Pos, 0),
        C is C0+BC,
        group_lp(in, Gi, Base, Segs, _, _, Moves0, Moves)
    ;   S == out
    ->  setarg(Gi, Pos, out),
        C = C0,
        Moves0 = Moves
    ;   setarg(Gi, Pos, out),
        C = C0,
        group_lp(opt, Gi, Base, Segs, _, _, Moves0, Moves1),
        (   Moves0 \== Moves1,
            Moves0 = [_-seg(_, _, inc(_, J))|_]
        ->  J1 = J                          % chain steps from the base too
        ;   J1 = 0
        ),
        steps_before(Segs, Gi, 0, J1, Moves1, Moves)
    ).

% For a group pulled in at its base by requires/2, the chain steps the
% origin hull skipped.
steps_before(Segs, Gi, I, J, Moves0, Moves) :-
    (   I >= J
    ->  Moves0 = Moves
    ;   nth0(I, Segs, s(Key, DU, DC, _, _)),
        Moves0 = [Key-seg(DU, DC, step(Gi, I))|Moves1],
        I1 is I+1,
        steps_before(Segs, Gi, I1, J, Moves1, Moves)
    ).

greedy_move(X, St, Chains, Pos, Budget, seg(DU, DC, Tag), C0, C) :-
    greedy_move_(Tag, DU, DC, X, St, Chains, Pos, Budget, C0, C).

greedy_move_(step(Gi, I), _DU, DC, _X, _St, _Chains, Pos, Budget, C0, C) :-
    arg(Gi, Pos, I0),
    (   I0 == I,
        C1 is C0+DC,
        C1 =< Budget
    ->  I1 is I+1,
        setarg(Gi, Pos, I1),
        C = C1
    ;   C = C0
    ).
greedy_move_(inc(Gi, J), _DU, DC, X, St, Chains, Pos, Budget, C0, C) :-
    (   arg(Gi, Pos, out),
        arg(Gi, St, free),
        set_in(Gi, X, St, Changes, []),
        foldl(pulled_cost(Gi, Chains), Changes, 0, Extra),
        C1 is C0+DC+Extra,
        C1 =< Budget
    ->  place_pulled(Changes, Gi, J, Pos),
        C = C1
    ;   C = C0
    ).

place_pulled([], _, _, _).
place_pulled([Ev|Evs], Gi, J, Pos) :-
    (   Ev = in(H)
    ->  (   H == Gi
        ->  setarg(Gi, Pos, J)
        ;   setarg(H, Pos, 0)
        )
    ;   true
    ),
    place_pulled(Evs, Gi, J, Pos).

pulled_cost(Gi, Chains, Ev, C0, C) :-
    (   Ev = in(H), H \== Gi
    ->  arg(H, Chains, ch(b(BC, _, _), _)),
        C is C0+BC
    ;   C = C0
    ).

group_selection(Chains, Pos, Gi, Key0, Key) :-
    arg(Gi, Pos, P),
    (   P == out
    ->  Key0 = Key
    ;   arg(Gi, Chains, ch(b(_, _, Sel0), Segs)),
        length(Prefix, P),
        append(Prefix, _, Segs),
        foldl(select_member, Prefix, Sel0, Sel),
        append(Sel, Key, Key0)
    ).

select_member(s(_, _, _, M, K), Sel0, Sel) :-
    selectchk(M-_, Sel0, M-K, Sel).

key_cost_util(prob(_, _, Us, _, _), Key, Cost, Util) :-
    key_cost_util_(Key, Us, 0, Cost, 0, Util).

key_cost_util_([], _, C, C, U, U).
key_cost_util_([M-K|Key], Us, C0, C, U0, U) :-
    arg(M, Us, u(Vs, _)),
    nth1(K, Vs, v(K, _, VC, VU)),
    C1 is C0+VC,
    U1 is U0+VU,
    key_cost_util_(Key, Us, C1, C, U1, U).


                 /*******************************
                 *    REDUCTION (BOUND FIXING)  *
                 *******************************/

%   reduce(+T, +X, !St, !Allowed, +Budget, -Bound) is semidet.
%
%   Removes every option (a group in or out, a member variant) whose
%   Lagrangian bound, with the multiplier P/Q at the critical slope of
%   the LP relaxation, is below T: no pack of utility >= T uses it.
%   Propagates the structural constraints and repeats until nothing
%   changes. Bound is the final LP bound. Fails when no pack of utility
%   >= T exists.

reduce(T, X, St, Allowed, Budget, Bound) :-
    reduce(8, T, X, St, Allowed, Budget, Bound).

reduce(Rounds, T, X, St, Allowed, Budget, Bound) :-
    lp_bound(X, St, Allowed, Budget, Bound0, P, Q),
    Bound0 >= T,
    (   Rounds > 0
    ->  reduce_round(T, P, Q, X, St, Allowed, Budget, Changed),
        (   Changed == true
        ->  R1 is Rounds-1,
            reduce(R1, T, X, St, Allowed, Budget, Bound)
        ;   Bound = Bound0
        )
    ;   Bound = Bound0
    ).

reduce_round(T, P, Q, X, St, Allowed, Budget, Changed) :-
    X = str(G, _, GM, _, _, _, _, _),
    numlist_(1, G, Gs),
    foldl(group_values(P, Q, St, GM, Allowed), Gs, Infos, 0, Sum),
    D is P*Budget + Sum,
    TQ is T*Q,
    D >= TQ,
    foldl(eliminate(D, TQ, X, St, Allowed), Infos, false, Changed).

%   gi(Gi, State, InValue, Best, Members): Members is a list of
%   mi(M, BestM, [Val-V, ...]).

group_values(P, Q, St, GM, Allowed, Gi, gi(Gi, S, InV, Best, MIs), Sum0, Sum) :-
    arg(Gi, St, S),
    (   S == out
    ->  InV = 0, Best = 0, MIs = []
    ;   arg(Gi, GM, Ms),
        maplist(member_values(P, Q, Allowed), Ms, MIs),
        foldl([mi(_, B, _), V0, V]>>(V is V0+B), MIs, 0, InV),
        (   S == in
        ->  Best = InV
        ;   Best is max(0, InV)
        )
    ),
    Sum is Sum0+Best.

member_values(P, Q, Allowed, M, mi(M, Best, VVs)) :-
    arg(M, Allowed, Vs),
    reduced_values(Vs, P, Q, VVs),
    pairs_keys(VVs, Vals),
    max_list(Vals, Best).

%   reduced_values(+Vs, +P, +Q, -Pairs): Val-V with Val = Q*U - P*C, the
%   Lagrangian value of V at multiplier P/Q, scaled by Q.

reduced_values([], _, _, []).
reduced_values([V|Vs], P, Q, [Val-V|VVs]) :-
    V = v(_, _, C, U),
    Val is U*Q - P*C,
    reduced_values(Vs, P, Q, VVs).

eliminate(_, _, _, _, _, gi(_, out, _, _, _), Ch, Ch) :- !.
eliminate(D, TQ, X, St, Allowed, gi(Gi, S, InV, Best, MIs), Ch0, Ch) :-
    Rest is D-Best,
    (   S == free, Rest + InV < TQ
    ->  set_out(Gi, X, St, _, []),
        Ch = true
    ;   (   S == free, Rest < TQ
        ->  set_in(Gi, X, St, _, []),
            Ch1 = true
        ;   Ch1 = Ch0
        ),
        Base is Rest+InV,
        foldl(eliminate_variants(Base, TQ, Allowed), MIs, Ch1, Ch)
    ).

at_least([], _, []).
at_least([Val-V|VVs], Min, Vs) :-
    (   Val >= Min
    ->  Vs = [V|Vs1]
    ;   Vs = Vs1
    ),
    at_least(VVs, Min, Vs1).

eliminate_variants(Base, TQ, Allowed, mi(M, BestM, VVs), Ch0, Ch) :-
    Min is TQ - Base + BestM,               % keep Val >= Min
    (   VVs = [_, _|_],
        pairs_keys(VVs, Vals),
        min_list(Vals, Low),
        Low < Min
    ->  at_least(VVs, Min, Vs),
        setarg(M, Allowed, Vs),
        Ch = true
    ;   Ch = Ch0
    ).


                 /*******************************
                 *            SOLVING           *
                 *******************************/

%   first_solution(+Prep, +TimeLimit, -Sol) is semidet.
%
%   Sol is sol(Key, Cost, Util, Status), the optimum (or the best found
%   in time), starting from the greedy incumbent.

first_solution(Prep, TimeLimit, Sol) :-
    deadline(TimeLimit, Deadline),
    findall(S, first_solution_(Prep, Deadline, S), [Sol]).

first_solution_(Prep, Deadline, Sol) :-
    greedy(Prep, GKey, GCost, GUtil),
    !,
    empty_assoc(NoGoods),
    T is GUtil+1,
    solve(Prep, T, inf, NoGoods, Deadline, Result),
    (   Result = found(Key, Util, Status)
    ->  key_cost(Prep, Key, Cost),
        Sol = sol(Key, Cost, Util, Status)
    ;   Result = none(Bound)
    ->  gap_status(Bound, GUtil, Status),
        Sol = sol(GKey, GCost, GUtil, Status)
    ).

deadline(inf, inf) :- !.
deadline(Limit, Deadline) :-
    get_time(Now),
    Deadline is Now+Limit.

key_cost(prep(_, P, _, _), Key, Cost) :-
    key_cost_util(P, Key, Cost, _).

%   solve(+Prep, +T, +UMax, +NoGoods, +Deadline, -Result) is det.
%
%   Result is found(Key, Util, Status) for the best pack with
%   T =< Util =< UMax whose Key is not in NoGoods, or none(Bound) when
%   there is none (Bound: proven upper bound on such packs when the time
%   limit cut the search, else -1), or timeout when the time limit
%   stopped the search before it found any.

solve(prep(_, P, X, St0), T, UMax, NoGoods, Deadline, Result) :-
    P = prob(_, _, _, _, Budget),
    duplicate_term(St0, St),
    initial_allowed(P, Allowed),
    (   reduce(T, X, St, Allowed, Budget, Bound0)
    ->  upper_bound(Bound0, UMax, Bound),
        core(P, X, St, Allowed, Core),
        search_core(Core, T, UMax, NoGoods, Deadline, Best, TimedOut),
        result(Best, TimedOut, Bound, Result)
    ;   Result = none(-1)
    ).

upper_bound(Bound0, UMax, Bound) :-
    (   UMax == inf
    ->  Bound = Bound0
    ;   Bound is min(Bound0, UMax)
    ).

result(none, false, _, none(-1)).
result(none, true, Bound, R) :-
    (   Bound >= 0
    ->  R = none(Bound)
    ;   R = none(-1)
    ).
result(best(Key, Util), false, _, found(Key, Util, optimal)).
result(best(Key, Util), true, Bound, found(Key, Util, Status)) :-
    gap_status(Bound, Util, Status).

%   core(+P, +X, +St, +Allowed, -Core)
%
%   Core is core(CUs, Cs, CoreBudget, FixedKey, FixedUtil, CGroups):
%   the decision core as units for post_model/6 (ids are the unit
%   indexes, variant names their indexes), with the groups decided by
%   the reduction folded into FixedKey/FixedUtil and the budget.

core(P, X, St, Allowed, core(CUs, Cs, CoreBudget, FixedKey, FixedU, CGroups)) :-
    P = prob(_, _, _, Cons, Budget),
    X = str(G, UG, GM, _, _, _, _, _),
    numlist_(1, G, Gs),
    foldl(classify_group(St, GM, Allowed), Gs, CGroups0-Fixed, []-[]),
    msort(Fixed, FixedKey),
    key_cost_util(P, FixedKey, FixedC, FixedU),
    CoreBudget is Budget-FixedC,
    CoreBudget >= 0,
    append(CGroups0, CMembers),
    foldl([cm(M, _, _), M-Pos0, Pos0, Pos]>>(Pos is Pos0+1),
          CMembers, PosPairs, 1, _),
    list_to_assoc(PosPairs, PosOf),
    maplist([cm(M, Vs, Mode), cu(M, Vs, Mand)]>>mode_mandatory(Mode, Mand),
            CMembers, CUs),
    foldl(core_together(PosOf), CGroups0, Cs0, Cs1),
    foldl(core_constraint(UG, St, PosOf), Cons, Cs1, []),
    sort(Cs0, Cs),
    CGroups = CGroups0.

mode_mandatory(in, true).
mode_mandatory(opt, false).

classify_group(St, GM, Allowed, Gi, CG0-F0, CG-F) :-
    arg(Gi, St, S),
    arg(Gi, GM, Ms),
    member_variants(Ms, Allowed, MVs),
    maplist([M-Vs, cm(M, Vs, _)]>>true, MVs, CMs),
    (   S == out
    ->  CG0 = CG, F0 = F
    ;   S == in,
        forall(member(cm(_, Vs, _), CMs), Vs = [_])
    ->  CG0 = CG,
        foldl([cm(M, [v(K, _, _, _)], _), [M-K|T], T]>>true, CMs, F0, F)
    ;   mode(S, Mode),
        set_modes(CMs, Mode),
        CG0 = [CMs|CG],
        F0 = F
    ).

set_modes([], _).
set_modes([cm(_, _, Mode)|CMs], Mode) :-
    set_modes(CMs, Mode).

positions([], _, []).
positions([I|Is], PosOf, [P|Ps]) :-
    get_assoc(I, PosOf, P),
    positions(Is, PosOf, Ps).

free_units([], _, _, []).
free_units([I|Is], UG, St, Free) :-
    arg(I, UG, A),
    (   arg(A, St, free)
    ->  Free = [I|Free1]
    ;   Free = Free1
    ),
    free_units(Is, UG, St, Free1).

core_together(PosOf, CMs, Cs0, Cs) :-
    (   CMs = [_, _|_]
    ->  maplist([cm(M, _, _), M]>>true, CMs, Ms),
        positions(Ms, PosOf, Ps),
        Cs0 = [together(Ps)|Cs]
    ;   Cs0 = Cs
    ).

% Only constraints between free groups remain: all others were satisfied
% or propagated by set_in/set_out.
core_constraint(UG, St, PosOf, requires(I, J), Cs0, Cs) :-
    !,
    arg(I, UG, A), arg(J, UG, B),
    (   A =\= B,
        arg(A, St, free), arg(B, St, free)
    ->  get_assoc(I, PosOf, PI),
        get_assoc(J, PosOf, PJ),
        Cs0 = [requires(PI, PJ)|Cs]
    ;   Cs0 = Cs
    ).
core_constraint(UG, St, PosOf, amo(Is), Cs0, Cs) :-
    !,
    free_units(Is, UG, St, Free),
    (   Free = [_, _|_]
    ->  positions(Free, PosOf, Ps),
        Cs0 = [amo(Ps)|Cs]
    ;   Cs0 = Cs
    ).
core_constraint(_, _, _, _, Cs, Cs).

%   search_core(+Core, +T, +UMax, +NoGoods, +Deadline, -Best, -TimedOut)
%
%   Branch and bound over the CLP(FD) model of the core. The context
%   term ctx(Threshold, Best, TimedOut) is updated with nb_setarg/3.

search_core(Core, T, UMax, NoGoods, Deadline, Best, TimedOut) :-
    Core = core(CUs, Cs, CoreBudget, FixedKey, FixedU, CGroups),
    Ctx = ctx(T, none, false),
    (   CUs == []
    ->  core_leaf_fixed(FixedKey, FixedU, T, UMax, NoGoods, Ctx)
    ;   \+ \+ core_bb(CUs, Cs, CoreBudget, FixedKey, FixedU, CGroups,
                      UMax, NoGoods, Deadline, Ctx)
    ->  true
    ;   true
    ),
    arg(2, Ctx, Best),
    arg(3, Ctx, TimedOut).

core_leaf_fixed(Key, Util, T, UMax, NoGoods, Ctx) :-
    (   Util >= T,
        ( UMax == inf -> true ; Util =< UMax ),
        \+ get_assoc(Key, NoGoods, _)
    ->  nb_setarg(2, Ctx, best(Key, Util))
    ;   true
    ).

core_bb(CUs, Cs, CoreBudget, FixedKey, FixedU, CGroups, UMax, NoGoods,
        Deadline, Ctx) :-
    post_model(CUs, Cs, CoreBudget, Vars, _Cost, Util),
    (   UMax == inf
    ->  true
    ;   Util #=< UMax-FixedU
    ),
    core_groups(CGroups, Vars, Groups, Order0),
    % Branching order: groups by the slope of their first LP segment
    % (forced ones first), options by their reduced value.
    lp_groups(Groups, CoreBudget, _, P, Q),
    maplist(group_rank, Groups, Ranks),
    maplist(branch_member(P, Q, Ranks), Order0, Keyed),
    keysort(Keyed, KOrder),
    pairs_values(KOrder, Order),
    B = bb(Groups, CoreBudget, Util, FixedU, FixedKey, NoGoods, Deadline),
    \+ bb_node(Order, B, Ctx).

%   Groups: list of g(In, [m(M, Bs, Vs)]) for the node LP. Order: list of
%   bm(M, In, Bs, Options) with Options the ordered list of out | b(B).

core_groups(CGroups, Vars, Groups, Order) :-
    core_groups_(CGroups, Vars, Groups),
    group_order(Groups, Order, []).

core_groups_([], [], []).
core_groups_([CMs|CGs], Vars0, [g(In, Ms)|Gs]) :-
    core_group_members(CMs, In, Ms, Vars0, Vars),
    core_groups_(CGs, Vars, Gs).

core_group_members([], _, [], Vars, Vars).
core_group_members([cm(M, Vs, _)|CMs], In, [m(M, Bs, Vs)|Ms],
                   [choice(M, In, Bs)|Vars0], Vars) :-
    core_group_members(CMs, In, Ms, Vars0, Vars).

group_order([], Order, Order).
group_order([g(In, Ms)|Gs], Order0, Order) :-
    group_order_members(Ms, In, Ms, Order0, Order1),
    group_order(Gs, Order1, Order).

group_order_members([], _, _, Order, Order).
group_order_members([m(M, Bs, Vs)|Rest], In, Ms,
                    [x(M, In, Bs, Vs, Ms)|Order0], Order) :-
    group_order_members(Rest, In, Ms, Order0, Order).

%   group_rank(+Group, -Rank): groups by decreasing slope of their first
%   LP segment (utility density); groups without one (decided or worthless)
%   first.

group_rank(g(In, Ms), Ms-Rank) :-
    lp_group(g(In, Ms), acc(Segs, 0, 0), acc([], _, _)),
    (   Segs = [Key-_|_], Key \== inf
    ->  Rank = k(1, Neg),
        Neg is -Key
    ;   Rank = k(0, 0)
    ).

branch_member(P, Q, Ranks, x(M, In, Bs, Vs, Ms), k(Rank, M)-bm(M, In, Bs, Opts)) :-
    memberchk(Ms-Rank, Ranks),
    reduced_values(Vs, P, Q, VVs),
    pairs_keys_values(VVs, Vals, _),
    maplist([Val, B, Val-b(B)]>>true, Vals, Bs, VOpts),
    other_members_value(Ms, M, P, Q, 0, Others),
    (   In == 1
    ->  All = VOpts
    ;   OutVal is -Others,
        All = [OutVal-out|VOpts]
    ),
    sort(1, @>=, All, Sorted),
    pairs_values(Sorted, Opts).

other_members_value([], _, _, _, S, S).
other_members_value([m(M2, _, Vs)|Ms], M, P, Q, S0, S) :-
    (   M2 == M
    ->  S1 = S0
    ;   reduced_values(Vs, P, Q, VVs),
        pairs_keys(VVs, Vals),
        max_list(Vals, Best),
        S1 is S0+Best
    ),
    other_members_value(Ms, M, P, Q, S1, S).

bb_node(Order, B, Ctx) :-
    bb_bound(B, Ctx),
    bb_branch(Order, B, Ctx).

bb_branch([], B, Ctx) :-
    bb_leaf(B, Ctx).
bb_branch([bm(_, In, Bs, Opts)|Order], B, Ctx) :-
    (   decided(In, Bs)
    ->  bb_branch(Order, B, Ctx)
    ;   B = bb(_, _, _, _, _, _, Deadline),
        in_time(Deadline, Ctx),
        member(Opt, Opts),
        apply_option(Opt, In),
        bb_bound(B, Ctx),
        bb_branch(Order, B, Ctx)
    ).

decided(In, Bs) :-
    (   In == 0
    ->  true
    ;   memberchk_eq(1, Bs)
    ).

memberchk_eq(X, [Y|Ys]) :-
    (   X == Y
    ->  true
    ;   memberchk_eq(X, Ys)
    ).

apply_option(out, In) :-
    In \== 1,
    In = 0.
apply_option(b(B), _) :-
    B \== 0,
    B = 1.

in_time(inf, _) :- !.
in_time(Deadline, Ctx) :-
    get_time(Now),
    (   Now =< Deadline
    ->  true
    ;   nb_setarg(3, Ctx, true),
        fail
    ).

%   bb_bound(+B, +Ctx) is semidet.
%
%   The LP (Dantzig) bound of the node as a constraint on the objective:
%   Threshold =< Util =< Bound.

bb_bound(bb(Groups, CoreBudget, Util, FixedU, _, _, _), Ctx) :-
    lp_groups(Groups, CoreBudget, Bound, _, _),
    arg(1, Ctx, T),
    Need is T-FixedU,
    Bound >= Need,
    Util #=< Bound,
    Util #>= Need.

bb_leaf(bb(Groups, _, _, FixedU, FixedKey, NoGoods, _), Ctx) :-
    foldl(leaf_group, Groups, CoreKey-FixedU, []-Total),
    append(FixedKey, CoreKey, Key0),
    msort(Key0, Key),
    (   get_assoc(Key, NoGoods, _)
    ->  true
    ;   
        nb_setarg(2, Ctx, best(Key, Total)),
        T is Total+1,
        nb_setarg(1, Ctx, T)
    ),
    fail.

leaf_group(g(In, Ms), K0-U0, K-U) :-
    (   In == 0
    ->  K0 = K, U0 = U
    ;   leaf_members(Ms, K0, K, U0, U)
    ).

leaf_members([], K, K, U, U).
leaf_members([m(M, Bs, Vs)|Ms], [M-Kv|K0], K, U0, U) :-
    chosen(Bs, Vs, v(Kv, _, _, VU)),
    U1 is U0+VU,
    leaf_members(Ms, K0, K, U1, U).

chosen([B|Bs], [V|Vs], C) :-
    (   B == 1
    ->  C = V
    ;   chosen(Bs, Vs, C)
    ).

%   lp_groups(+Groups, +Cap, -Bound, -P, -Q) is semidet.
%
%   LP bound of the core from the current CLP(FD) domains.

lp_groups(Groups, Cap, Bound, P, Q) :-
    foldl(lp_group, Groups, acc(Segs, 0, 0), acc([], BC, BU)),
    Cap1 is Cap-BC,
    Cap1 >= 0,
    sort(1, @>=, Segs, Sorted),
    lp_fill(Sorted, Cap1, BU, Bound, P, Q).

lp_group(g(In, Ms), acc(Segs0, BC0, BU0), acc(Segs, BC, BU)) :-
    (   In == 0
    ->  BC = BC0, BU = BU0, Segs0 = Segs
    ;   maplist(live_variants, Ms, MVs),
        group_chain(MVs, Base, GSegs),
        (   In == 1
        ->  Mode = in
        ;   Mode = opt
        ),
        group_lp(Mode, 0, Base, GSegs, C, U, Segs0, Segs),
        BC is BC0+C,
        BU is BU0+U
    ).

live_variants(m(M, Bs, Vs), M-Live) :-
    live_variants_(Bs, Vs, Live).

live_variants_([], [], []).
live_variants_([B|Bs], [V|Vs], Live) :-
    (   B == 0
    ->  Live = Live1
    ;   Live = [V|Live1]
    ),
    live_variants_(Bs, Vs, Live1).


                 /*******************************
                 *          ENUMERATION         *
                 *******************************/

%   enumerate(+Prep, +TimeLimit, +MaxAlt, +Sol0, -Sol) is nondet.
%
%   Sol0, then the next best packs: each is the best pack with utility
%   =< the previous one that was not yielded yet (nogoods). The search
%   for it is narrowed to windows [T, U] of decreasing T so that the
%   reduction keeps fixing most of the problem.

enumerate(Prep, TimeLimit, MaxAlt, Sol0, Sol) :-
    Sol0 = sol(Key, _, _, _),
    empty_assoc(Yielded0),
    put_assoc(Key, Yielded0, true, Yielded),
    enumerate_(Prep, TimeLimit, MaxAlt, Sol0, Yielded, Sol).

enumerate_(Prep, TimeLimit, Left, Sol0, Yielded, Sol) :-
    (   Left == 0
    ->  Sol = Sol0
    ;   (   Sol = Sol0
        ;   Sol0 = sol(_, _, U, _),
            next_solution(Prep, TimeLimit, U, Yielded, Sol1),
            Sol1 = sol(Key, _, _, _),
            put_assoc(Key, Yielded, true, Yielded1),
            (   Left == inf
            ->  Left1 = inf
            ;   Left1 is Left-1
            ),
            enumerate_(Prep, TimeLimit, Left1, Sol1, Yielded1, Sol)
        )
    ).

next_solution(Prep, TimeLimit, U, Yielded, Sol) :-
    deadline(TimeLimit, Deadline),
    Step is max(1, U // 1024),
    findall(S, next_solution_(Prep, U, U, Step, Yielded, Deadline, S), [Sol]).

next_solution_(Prep, UMax, T, Step, Yielded, Deadline, Sol) :-
    solve(Prep, T, UMax, Yielded, Deadline, Result),
    (   Result = found(Key, Util, Status)
    ->  key_cost(Prep, Key, Cost),
        Sol = sol(Key, Cost, Util, Status)
    ;   Result = none(-1),
        T > 0
    ->  T1 is max(0, UMax-Step),
        Step1 is Step*2,
        next_solution_(Prep, UMax, T1, Step1, Yielded, Deadline, Sol)
    ).


                 /*******************************
                 *            RESULTS           *
                 *******************************/

sol_pack(prep(_, P, _, _), sol(Key, Cost, Util, Status),
         pack(Selected, Cost, Util, Status)) :-
    P = prob(_, Ids, Us, _, _),
    selected(Key, Ids, Us, Selected).

selected([], _, _, []).
selected([M-K|Key], Ids, Us, [Id-Name|Sel]) :-
    arg(M, Ids, Id),
    arg(M, Us, u(Vs, _)),
    nth1(K, Vs, v(K, Name, _, _)),
    selected(Key, Ids, Us, Sel).

no_pack_error(prep(inconsistent(U), P, _, _)) :-
    !,
    P = prob(_, Ids, _, _, _),
    arg(U, Ids, Id),
    throw(error(ctxrelay(inconsistent_constraints, _{unit:Id}), _)).
no_pack_error(prep(consistent, P, X, St)) :-
    P = prob(_, _, _, _, Budget),
    X = str(G, _, GM, _, _, _, _, _),
    initial_allowed(P, Allowed),
    aggregate_all(sum(C),
                  ( between(1, G, Gi),
                    arg(Gi, St, in),
                    group_variants(Gi, GM, Allowed, MVs),
                    group_chain(MVs, b(C, _, _), _)
                  ),
                  MC),
    throw(error(ctxrelay(context_overflow,
                         _{mandatory_cost:MC, budget:Budget}), _)).

prolog:error_message(ctxrelay(context_overflow, D)) -->
    { get_dict(mandatory_cost, D, MC),
      get_dict(budget, D, B)
    },
    [ 'Context overflow: the mandatory units need ~D tokens, the budget is ~D'-
      [MC, B], nl,
      '  Raise the budget, or make fewer units mandatory or give them \c
       cheaper variants'
    ].
prolog:error_message(ctxrelay(inconsistent_constraints, D)) -->
    { get_dict(unit, D, Id) },
    [ 'Inconsistent pack constraints: mandatory unit ~p cannot be packed'-[Id],
      nl,
      '  Check together/excludes/at_most_one/requires against the \c
       mandatory units'
    ].
