:- module(ctxrelay_packer_greedy,
          [ greedy_groups/7,        % +P, +X, +St, +Allowed, -Key, -Cost, -Util
            lp_bound/7,             % +X, +St, +Allowed, +Budget, -Bound, -P, -Q
            lp_fill/6,              % +SortedSegs, +Cap, +U0, -Bound, -P, -Q
            hull_pop/3,             % +Stack0, +Point, -Stack
            group_chain/3,          % +MemberVariants, -Base, -Segs
            group_variants/4,       % +G, +GM, +Allowed, -MemberVariants
            initial_allowed/2,      % +Problem, -Allowed
            gap_status/3,           % +Bound, +Util, -Status
            key_cost_util/4         % +Problem, +Key, -Cost, -Util
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(structure).

/** <module> The group relaxation and the greedy pack

The relaxation that keeps together/1 only: each group of together/1 units
is an item whose LP options are the Minkowski sum of its members' variant
hulls.  Its Dantzig bound is the gap of pack_greedy/4 and the fallback
bound when the time limit stops the search before the classes are built;
the greedy pack walks the same hulls.
*/

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

initial_allowed(prob(N, _, Us, _, _, _), Allowed) :-
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
    P = prob(_, _, _, _, Budget, _),
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

key_cost_util(prob(_, _, Us, _, _, _), Key, Cost, Util) :-
    key_cost_util_(Key, Us, 0, Cost, 0, Util).

key_cost_util_([], _, C, C, U, U).
key_cost_util_([M-K|Key], Us, C0, C, U0, U) :-
    arg(M, Us, u(Vs, _)),
    nth1(K, Vs, v(K, _, VC, VU)),
    C1 is C0+VC,
    U1 is U0+VU,
    key_cost_util_(Key, Us, C1, C, U1, U).
