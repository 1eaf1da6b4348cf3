:- module(ctxrelay_packer_classes,
          [ classes/6,              % +P, +X, +St, +R, +Deadline, -Classes
            classes/7,              % +P, +X, +St, +R, +Deadline, -Classes, -Units
            classes_of/8,           % +Gs, +P, +X, +St, +R, +Deadline, -Classes, -Units
            make_class/2,           % +Front, -Class
            pareto/2,               % +Options, -Front
            hull_segments/3,        % +Front, -Segs, ?Tail
            groups_in_state/4,      % +Gs, +State, +S, -Selected
            free_links/4,           % +X, +St, !Links, +G
            components/3,           % +FreeGs, +Links, -Components
            component_units/3,      % +GM, +Gs, -Units
            component_plan/3,       % +Gs, +Links, -Plan
            dp_context/5,           % +Plan, +Links, +InOpts, +G, -Ctx
            next_sig/6              % +Sig, +Close, +G, +Keep, +Status, -Sig1
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(assoc)).
:- use_module(library(lists)).
:- use_module(library(ordsets)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(problem, [in_time/1]).
:- use_module(structure).
:- use_module(greedy, [hull_pop/3]).

/** <module> Classes: a packing problem as a multiple-choice knapsack

Every connected component of the links among the undecided groups becomes
one class; its options are the Pareto set (cost, utility) of the
component's admissible selections.  No constraint links two classes, so
the multiple-choice knapsack over the classes is the problem itself.
*/

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
    P = prob(_, _, Us, _, _, _),
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
    component_plan(Gs, Links, Plan),
    foldl(dp_group(Plan, Links, InOpts, Deadline), Gs,
          [[]-[s(0, 0, [])]], SigGroups),
    SigGroups = [[]-States],
    states_options(States, Os),
    pareto(Os, Front).

%   component_plan(+Gs, +Links, -Plan): the position of each group in
%   the breadth-first order, its last linked position, and the groups
%   whose last link each position closes (they leave the frontier).

component_plan(Gs, Links, plan(Pos, Last, Closing)) :-
    number_positions(Gs, 1, PosPairs),
    list_to_assoc(PosPairs, Pos),
    maplist(last_link(Links, Pos), PosPairs, LastPairs),
    list_to_assoc(LastPairs, Last),
    findall(L-H, ( member(H-L, LastPairs), get_assoc(H, Pos, PH), L > PH ), Closing0),
    keysort(Closing0, Closing1),
    group_pairs_by_key(Closing1, Closing2),
    list_to_assoc(Closing2, Closing).

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

dp_group(Plan, Links, InOpts, Deadline, Gi, SigGroups0, SigGroups) :-
    in_time(Deadline),
    dp_context(Plan, Links, InOpts, Gi, Ctx),
    expand_sigs(SigGroups0, Ctx, Keyed, []),
    keysort(Keyed, Sorted),
    sig_groups(Sorted, SigGroups).

%   dp_context(+Plan, +Links, +InOpts, +Gi, -Ctx): what the stage of
%   group Gi needs: dp(Gi, Requires, RequiredBy, AtMostOneMates,
%   InOptions, Closed, KeepInSignature).

dp_context(plan(Pos, Last, Closing), Links, InOpts, Gi,
           dp(Gi, Rq, RqBy, Amo, In, Close, Keep)) :-
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
    arg(Gi, Links, l(Rq, RqBy, Amo, _)).

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
