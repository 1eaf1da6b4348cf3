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
:- use_module(library(aggregate)).
:- use_module(library(apply)).
:- use_module(library(assoc)).
:- use_module(library(debug)).
:- use_module(library(error)).
:- use_module(library(heaps)).
:- use_module(library(lists)).
:- use_module(library(option)).
:- use_module(library(ordsets)).
:- use_module(library(pairs)).
:- use_module(library(predicate_options)).
:- use_module(library(yall)).

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
                 *  GROUP HULLS AND THE GROUP LP  *
                 *******************************/

%   The relaxation behind pack_greedy/4 and the fallback bound: groups
%   of together/1 units are items whose LP options are the Minkowski sum
%   of their members' variant hulls; the other constraints are dropped.

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
    chain_pareto(Ps, U0, Front),
    hull([P0|Front], Chain).

chain_pareto([], _, []).
chain_pareto([P|Ps], Best, Front) :-
    P = p(_, U, _),
    (   U > Best
    ->  Front = [P|Front1],
        chain_pareto(Ps, U, Front1)
    ;   chain_pareto(Ps, Best, Front)
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
                 *        THE GREEDY PACK       *
                 *******************************/

%   greedy_groups(+P, +X, +St, +Allowed, -Key, -Cost, -Util) is semidet.
%
%   Mandatory groups (and their closure) at their cheapest hull points,
%   then the moves of all groups (include at the steepest point from the
%   origin, step along the chain) by decreasing slope, each taken when it
%   fits and the structural propagation accepts it. Two passes, as a
%   group pulled in by requires/2 may make an earlier step applicable.
%   Key is the sorted list of UnitIndex-VariantIndex.

greedy_groups(P, X, St0, Allowed, Key, Cost, Util) :-
    P = prob(_, _, _, _, Budget),
    X = str(G, _, GM, _, _, _, _, _),
    duplicate_term(St0, St),
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
    arg(Gi, St, S),
    (   S == out
    ->  setarg(Gi, Pos, out),
        C = C0,
        Moves0 = Moves
    ;   group_variants(Gi, GM, Allowed, MVs),
        group_chain(MVs, Base, Segs),
        Base = b(BC, _, _),
        nb_setarg(Gi, Chains, ch(Base, Segs)),
        greedy_group_(S, Gi, Base, BC, Segs, Pos, C0, C, Moves0, Moves)
    ).

greedy_group_(S, Gi, Base, BC, Segs, Pos, C0, C, Moves0, Moves) :-
    (   S == in
    ->  setarg(Gi, Pos, 0),
        C is C0+BC,
        group_lp(in, Gi, Base, Segs, _, _, Moves0, Moves)
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
                 *         RESTRICTIONS         *
                 *******************************/

%   A subproblem restricts every unit to a list of allowed options (0 =
%   out, K = variant K): restr(Base, Overrides) with Base an array and
%   Overrides a list of Unit-Options that take precedence (the first
%   one for a unit wins). Alternatives are subproblems (see ENUMERATION).

initial_restrictions(prob(N, _, Us, _, _), restr(Base, [])) :-
    functor(Base, r, N),
    forall(between(1, N, I),
           ( arg(I, Us, u(Vs, M)),
             length(Vs, K),
             numlist_(1, K, Ks),
             (   M == true
             ->  O = Ks
             ;   O = [0|Ks]
             ),
             nb_setarg(I, Base, O)
           )).

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


                 /*******************************
                 *     PARETO SETS AND HULLS    *
                 *******************************/

%   An option is o(Cost, Utility, Sel) with Sel a list of Unit-Variant
%   pairs. A Pareto list is sorted by strictly increasing Cost and
%   strictly increasing Utility: for the optimum only Pareto options of
%   a part matter, as the constraints only see which units are in.

pareto(Options, Front) :-
    keyed_options(Options, Keyed),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, [O|Os]),
    O = o(_, U, _),
    pareto_(Os, U, Front0),
    Front = [O|Front0].

keyed_options([], []).
keyed_options([O|Os], [k(C, NU)-O|Ks]) :-
    O = o(C, U, _),
    NU is -U,
    keyed_options(Os, Ks).

pareto_([], _, []).
pareto_([O|Os], Best, Front) :-
    O = o(_, U, _),
    (   U > Best
    ->  Front = [O|Front1],
        pareto_(Os, U, Front1)
    ;   pareto_(Os, Best, Front)
    ).

%   minkowski(+Front1, +Front2, -Front): Pareto set of all sums.

minkowski([o(0, 0, [])], F2, F) :-
    !,
    F = F2.
minkowski(F1, F2, F) :-
    findall(o(C, U, Sel),
            ( member(o(C1, U1, S1), F1),
              member(o(C2, U2, S2), F2),
              C is C1+C2,
              U is U1+U2,
              append(S1, S2, Sel)
            ),
            Sums),
    pareto(Sums, F).

%   hull_segments(+Front, -Segs, ?Tail)
%
%   The upper concave hull of a Pareto list from its first (cheapest)
%   option, as segments Key-seg(DU, DC, To) (To the 1-based index of
%   the option reached) by strictly decreasing slope Key = DU/DC.

hull_segments([o(C0, U0, _)|Os], Segs, Tail) :-
    hull_points(Os, 2, [p(C0, U0, 1)], Rev),
    reverse(Rev, [P0|Ps]),
    points_segments(Ps, P0, Segs, Tail).

hull_points([], _, Stack, Stack).
hull_points([o(C, U, _)|Os], I, Stack0, Stack) :-
    P = p(C, U, I),
    hull_pop(Stack0, P, Stack1),
    I1 is I+1,
    hull_points(Os, I1, [P|Stack1], Stack).

points_segments([], _, Segs, Segs).
points_segments([P|Ps], p(C0, U0, _), [Key-seg(DU, DC, I)|Segs0], Segs) :-
    P = p(C, U, I),
    DU is U-U0,
    DC is C-C0,
    Key is DU rdiv DC,
    points_segments(Ps, P, Segs0, Segs).


                 /*******************************
                 *  CLASSES: THE MCKP OF A PROBLEM *
                 *******************************/

%   classes(+P, +X, +St, +R, +Deadline, -Classes) is semidet.
%
%   Compiles a (restricted) problem into an exact multiple-choice
%   knapsack: one class per connected component of the structural
%   constraints among the undecided groups, whose options are the Pareto
%   set of the component's admissible selections (a dynamic program over
%   the component, see component_options/5). Groups that propagation put
%   in are classes of their own, groups put out vanish. Classes is a
%   list of c(Front, Hull): Front a non-empty Pareto list, Hull its hull
%   segments; Units lists the units of each class. Fails when a forced
%   group has no admissible selection.

classes(P, X, St, R, Deadline, Classes) :-
    classes(P, X, St, R, Deadline, Classes, _).

classes(P, X, St, R, Deadline, Classes, Units) :-
    X = str(G, _, _, _, _, _, _, _),
    numlist_(1, G, Gs),
    classes_of(Gs, P, X, St, R, Deadline, Classes, Units).

%   classes_of(+Gs, +P, +X, +St, +R, +Deadline, -Classes, -Units)
%
%   As classes/7 for the groups Gs only; Gs must be closed under the
%   links among free groups.

classes_of(Gs, P, X, St, R, Deadline, Classes, Units) :-
    X = str(G, _, GM, _, _, _, _, _),
    functor(InOpts, in_options, G),
    groups_in_state(Gs, St, in, InGs),
    groups_in_state(Gs, St, free, FreeGs),
    maplist(group_in_options(P, X, R, InOpts), InGs),
    maplist(group_in_options(P, X, R, InOpts), FreeGs),
    maplist(forced_class(InOpts), InGs, Forced),
    functor(Links, links, G),
    maplist(free_links(X, St, Links), FreeGs),
    components(FreeGs, Links, Components),
    maplist(component_class(Links, InOpts, Deadline), Components, Free),
    append(Forced, Free, Fronts),
    maplist(make_class, Fronts, Classes),
    maplist([Gi, [Gi]]>>true, InGs, InComps),
    append(InComps, Components, AllComps),
    maplist(component_units(GM), AllComps, Units).

component_units(GM, Gs, Units) :-
    group_units(Gs, GM, Units0),
    sort(Units0, Units).

group_units([], _, []).
group_units([Gi|Gs], GM, Units) :-
    arg(Gi, GM, Ms),
    append(Ms, Units1, Units),
    group_units(Gs, GM, Units1).

%   make_class(+Front, -Class): Class is c(Front, Hull), Hull the hull
%   segments of the Pareto list Front (hull_segments/3), computed once.

make_class(Front, c(Front, Hull)) :-
    hull_segments(Front, Hull, []).

groups_in_state([], _, _, []).
groups_in_state([G|Gs], St, S, Sel) :-
    (   arg(G, St, S)
    ->  Sel = [G|Sel1]
    ;   Sel = Sel1
    ),
    groups_in_state(Gs, St, S, Sel1).

group_in_options(P, X, R, InOpts, Gi) :-
    X = str(_, _, GM, _, _, _, _, _),
    P = prob(_, _, Us, _, _),
    arg(Gi, GM, Ms),
    foldl(member_front(Us, R), Ms, [o(0, 0, [])], Front),
    nb_setarg(Gi, InOpts, Front).

member_front(Us, R, M, F0, F) :-
    arg(M, R, O),
    arg(M, Us, u(Vs, _)),
    variant_options(O, Vs, M, Os),
    (   Os == []
    ->  F = []
    ;   F0 == []
    ->  F = []
    ;   Os = [_]
    ->  minkowski(F0, Os, F)
    ;   pareto(Os, MF),
        minkowski(F0, MF, F)
    ).

variant_options([], _, _, []).
variant_options([K|Ks], Vs, M, Os) :-
    (   K =:= 0
    ->  Os = Os1
    ;   nth1(K, Vs, v(K, _, C, U)),
        Os = [o(C, U, [M-K])|Os1]
    ),
    variant_options(Ks, Vs, M, Os1).

forced_class(InOpts, Gi, Front) :-
    arg(Gi, InOpts, Front),
    Front \== [].

%   free_links(+X, +St, !Links, +G)
%
%   Links of free group G to other free groups: l(Requires, RequiredBy,
%   AtMostOneMates, All), sorted sets. Links to groups that are in or out
%   need no care: propagation has already enforced them.

free_links(X, St, Links, Gi) :-
    X = str(_, _, _, _, Req, RevReq, AmoOf, AmoSets),
    arg(Gi, Req, R1),
    free_others(R1, Gi, St, Rq),
    arg(Gi, RevReq, R2),
    free_others(R2, Gi, St, RqBy),
    arg(Gi, AmoOf, Ss),
    amo_mates(Ss, AmoSets, Mates0),
    sort(Mates0, Mates1),
    free_others(Mates1, Gi, St, Amo),
    append([Rq, RqBy, Amo], All0),
    sort(All0, All),
    setarg(Gi, Links, l(Rq, RqBy, Amo, All)).

amo_mates([], _, []).
amo_mates([S|Ss], AmoSets, Mates) :-
    arg(S, AmoSets, Set),
    append(Set, Mates1, Mates),
    amo_mates(Ss, AmoSets, Mates1).

free_others([], _, _, []).
free_others([H|Hs], Gi, St, Ns) :-
    (   H =\= Gi,
        arg(H, St, free)
    ->  Ns = [H|Ns1]
    ;   Ns = Ns1
    ),
    free_others(Hs, Gi, St, Ns1).

% components(+FreeGs, +Links, -Components): connected components of the
% links among free groups, each a list of groups in breadth-first order.

components([], _, []) :- !.
components(FreeGs, Links, Components) :-
    functor(Links, _, G),
    functor(Seen, seen, G),
    components_(FreeGs, Links, Seen, Components).

components_([], _, _, []).
components_([Gi|Gs], Links, Seen, Cs) :-
    (   arg(Gi, Seen, S), S == true
    ->  components_(Gs, Links, Seen, Cs)
    ;   setarg(Gi, Seen, true),
        bfs([Gi], Links, Seen, Comp),
        Cs = [[Gi|Comp]|Cs1],
        components_(Gs, Links, Seen, Cs1)
    ).

bfs([], _, _, []).
bfs([Gi|Queue], Links, Seen, Order) :-
    arg(Gi, Links, l(_, _, _, Ns)),
    unseen(Ns, Seen, New),
    append(Queue, New, Queue1),
    append(New, Order1, Order),
    bfs(Queue1, Links, Seen, Order1).

unseen([], _, []).
unseen([N|Ns], Seen, New) :-
    (   arg(N, Seen, S), S == true
    ->  New = New1
    ;   setarg(N, Seen, true),
        New = [N|New1]
    ),
    unseen(Ns, Seen, New1).

component_class(_, InOpts, _, [Gi], Front) :-
    !,
    arg(Gi, InOpts, In),
    with_out(In, Front).
component_class(Links, InOpts, Deadline, Gs, Front) :-
    component_options(Gs, Links, InOpts, Deadline, Front).

% with_out(+InFront, -Front): the Pareto set of {out} and InFront.
with_out([], [o(0, 0, [])]).
with_out([O|Os], Front) :-
    O = o(C, U, _),
    (   C =:= 0, U > 0
    ->  Front = [O|Os]
    ;   U =:= 0
    ->  Front = [o(0, 0, [])|Os]
    ;   Front = [o(0, 0, []), O|Os]
    ).

%   component_options(+Gs, +Links, +InOpts, +Deadline, -Front)
%
%   Dynamic program over the groups of a component in breadth-first
%   order. States are grouped by their signature Sig: the in/out status
%   of the processed groups that still have a link to an unprocessed one
%   (the frontier); within a signature only the Pareto set of
%   s(Cost, Util, Sels) is kept. The width of the frontier bounds the
%   work; the time limit guards it.

component_options(Gs, Links, InOpts, Deadline, Front) :-
    number_positions(Gs, 1, PosPairs),
    list_to_assoc(PosPairs, Pos),
    maplist(last_link(Links, Pos), PosPairs, LastPairs),
    list_to_assoc(LastPairs, Last),
    findall(L-H, ( member(H-L, LastPairs), get_assoc(H, Pos, PH), L > PH ), Closing0),
    keysort(Closing0, Closing1),
    group_pairs_by_key(Closing1, Closing2),
    list_to_assoc(Closing2, Closing),
    foldl(dp_group(Links, Pos, Last, Closing, InOpts, Deadline), Gs,
          [[]-[s(0, 0, [])]], SigGroups),
    SigGroups = [[]-States],
    states_options(States, Os),
    pareto(Os, Front).

number_positions([], _, []).
number_positions([G|Gs], P, [G-P|Ps]) :-
    P1 is P+1,
    number_positions(Gs, P1, Ps).

last_link(Links, Pos, Gi-P, Gi-Last) :-
    arg(Gi, Links, l(_, _, _, Ns)),
    max_position(Ns, Pos, P, Last).

max_position([], _, L, L).
max_position([N|Ns], Pos, L0, L) :-
    get_assoc(N, Pos, PN),
    L1 is max(L0, PN),
    max_position(Ns, Pos, L1, L).

states_options([], []).
states_options([s(C, U, Sels)|Ss], [o(C, U, Sel)|Os]) :-
    append(Sels, Sel),
    states_options(Ss, Os).

dp_group(Links, Pos, Last, Closing, InOpts, Deadline, Gi, SigGroups0, SigGroups) :-
    in_time(Deadline),
    get_assoc(Gi, Pos, P),
    get_assoc(Gi, Last, LastG),
    (   get_assoc(P, Closing, Close)
    ->  true
    ;   Close = []
    ),
    (   LastG > P
    ->  Keep = true
    ;   Keep = false
    ),
    arg(Gi, InOpts, In),
    arg(Gi, Links, l(Rq, RqBy, Amo, _)),
    Ctx = dp(Gi, Rq, RqBy, Amo, In, Close, Keep),
    expand_sigs(SigGroups0, Ctx, Keyed, []),
    keysort(Keyed, Sorted),
    sig_groups(Sorted, SigGroups).

expand_sigs([], _, K, K).
expand_sigs([Sig-States|SGs], Ctx, K0, K) :-
    Ctx = dp(Gi, Rq, RqBy, Amo, In, Close, Keep),
    (   \+ ( member(H, RqBy), memberchk(H-in, Sig) )
    ->  next_sig(Sig, Close, Gi, Keep, out, SigOut),
        emit_states(States, SigOut, 0, 0, [], K0, K1)
    ;   K1 = K0
    ),
    (   In \== [],
        \+ ( member(H, Rq), memberchk(H-out, Sig) ),
        \+ ( member(H, Amo), memberchk(H-in, Sig) )
    ->  next_sig(Sig, Close, Gi, Keep, in, SigIn),
        emit_in(In, States, SigIn, K1, K2)
    ;   K2 = K1
    ),
    expand_sigs(SGs, Ctx, K2, K).

emit_in([], _, _, K, K).
emit_in([o(OC, OU, OSel)|Os], States, Sig, K0, K) :-
    emit_states(States, Sig, OC, OU, OSel, K0, K1),
    emit_in(Os, States, Sig, K1, K).

emit_states([], _, _, _, _, K, K).
emit_states([s(C0, U0, Sels)|Ss], Sig, OC, OU, OSel, [k(Sig, C, NU)-s(C, U, Sels1)|K0], K) :-
    C is C0+OC,
    U is U0+OU,
    NU is -U,
    (   OSel == []
    ->  Sels1 = Sels
    ;   Sels1 = [OSel|Sels]
    ),
    emit_states(Ss, Sig, OC, OU, OSel, K0, K).

next_sig(Sig, Close, Gi, Keep, Status, Sig1) :-
    (   Close == []
    ->  Sig0 = Sig
    ;   drop_closed(Sig, Close, Sig0)
    ),
    (   Keep == true
    ->  ord_union(Sig0, [Gi-Status], Sig1)
    ;   Sig1 = Sig0
    ).

drop_closed([], _, []).
drop_closed([H-S|Sig], Close, Open) :-
    (   memberchk(H, Close)
    ->  Open = Open1
    ;   Open = [H-S|Open1]
    ),
    drop_closed(Sig, Close, Open1).

% sig_groups(+Sorted, -SigGroups): Sig-States with the Pareto states of
% each signature, from pairs sorted by k(Sig, Cost, -Util).
sig_groups([], []).
sig_groups([k(Sig, _, NU)-S|Ks], [Sig-[S|States]|SGs]) :-
    U is -NU,
    sig_group(Ks, Sig, U, States, Rest),
    sig_groups(Rest, SGs).

sig_group([], _, _, [], []).
sig_group([K|Ks], Sig, Best, States, Rest) :-
    K = k(Sig1, _, NU)-S,
    (   Sig1 == Sig
    ->  U is -NU,
        (   U > Best
        ->  States = [S|States1],
            sig_group(Ks, Sig, U, States1, Rest)
        ;   sig_group(Ks, Sig, Best, States, Rest)
        )
    ;   States = [],
        Rest = [K|Ks]
    ).

in_time(inf) :- !.
in_time(Deadline) :-
    get_time(Now),
    (   Now =< Deadline
    ->  true
    ;   throw(packer_time_limit)
    ).


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
                 *   REDUCTION AND CORE SEARCH  *
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

%   solve(+Prep, +Restrictions, +Deadline, -Result) is det.
%
%   Result is sol(Key, Cost, Util, Status, Lambda) for the best pack of
%   the (restricted) problem, or `none` when it has none. Key is the
%   sorted list of Unit-Variant pairs, Lambda = P/Q the multiplier of the
%   LP relaxation (it bounds the alternatives). When the time limit stops
%   the search, the best pack found (at least the greedy one) comes with
%   Status gap(G).

solve(prep(_, P, X, St0), Restr, Deadline, Result) :-
    P = prob(N, _, _, _, Budget),
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
        Enum = enum(PL/QL, Units, Bests)
    ;   Enum = none
    ).

class_best(P, Q, c(Front, _), Best) :-
    class_values(P, Q, c(Front, _), _, Best).

allowed_from(prob(N, _, Us, _, _), R, Allowed) :-
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

deadline(inf, inf) :- !.
deadline(Limit, Deadline) :-
    get_time(Now),
    Deadline is Now+Limit.

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
