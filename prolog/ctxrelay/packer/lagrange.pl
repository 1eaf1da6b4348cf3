:- module(ctxrelay_packer_lagrange,
          [ multipliers/5           % +Classes, +Dirs-Bs, +Budget, -Lag, -Slack
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).

/** <module> Lagrange multipliers for users' linear constraints

The search under rows (ctxrelay_packer_rows) bounds the utility of the
packs that satisfy the rows by the Dantzig bound of the classes under the
Lagrangian utility U(o) - mu.(Rv(o) - b).  Any mu of the right signs
(>= 0 for a `=<` row, =< 0 for a `>=` row, free for `=`) gives a valid
bound; a good mu gives a tight one, and a tight bound is what lets the
reduction fix almost every option.

The dual function D(mu) = max over the LP relaxation of the Lagrangian is
convex and piecewise linear, and its subgradient in mu_i is b_i minus the
row value of the LP solution.  It is minimised one row at a time: bracket
the sign change of the subgradient (doubling steps), then intersect the
tangents at the ends of the bracket (a handful of steps: the function is
piecewise linear).  Floats are fine here: the search rounds mu to
integers over a common scale Q and recomputes everything exactly.  Only
the classes that touch a row depend on mu; the others' hulls are built
once.
*/

%!  multipliers(+Classes, +Dirs-Bs, +Budget, -Lag, -Slack) is det.
%
%   Classes is a list of option lists o(C, U, Rv, Sel); Dirs and Bs the
%   directions (le, ge, eq) and right-hand sides of the rows.  Lag is
%   lag(Q, Ps, K0): the integer multipliers Ps = round(Q*mu), Q the
%   scale, K0 = Ps.Bs.  Slack says, row by row, whether the LP solution
%   at mu meets the row with room to spare.

multipliers(Classes, Dirs-Bs, Budget, lag(Q, Ps, K0), Slack) :-
    Q = 1024,
    length(Dirs, NR),
    length(Zero, NR),
    maplist(=(0.0), Zero),
    partition(untouched, Classes, Plain, Touched0),
    fixed_segments(Plain, Zero, PlainPart),
    fixed_segments(Touched0, Zero, TouchedPart),  % at mu = 0 every hull is fixed
    fixed_array(PlainPart, TouchedPart, Zero, Fixed0),
    (   eval(Zero, ctx(Fixed0, [], Budget, Bs, Zero, []), F0, G0)
    ->  % Rows the LP meets with room to spare at mu = 0 keep mu = 0: the
        % classes only they touch join the fixed part, which each
        % evaluation then skips (a floor on the turns' tokens touches
        % half of the classes and seldom binds).
        findall(I, ( nth1(I, Dirs, D), nth1(I, G0, Gi), \+ slack(D, Gi, true) ), Live),
        live_descent(Live, Dirs, PlainPart, Touched0, Budget, Bs, Zero,
                     Zero-F0-G0, Mu-_-G)
    ;   Mu = Zero,                      % the cheapest options do not fit
        G = Zero
    ),
    maplist([D, Gi, S]>>slack(D, Gi, S), Dirs, G, Slack),
    maplist({Q}/[M, D, P]>>( P0 is round(M*Q), sign_ok(D, P0, P) ), Mu, Dirs, Ps),
    foldl([P, B, K1, K2]>>(K2 is K1+P*B), Ps, Bs, 0, K0).

%   slack(+Dir, +Subgradient, -Slack): the LP solution at the multipliers
%   meets the row with room to spare (b - r > 0 for =<, < 0 for >=).
slack(le, G, S) :- ( G > 1.0e-6 -> S = true ; S = false ).
slack(ge, G, S) :- ( G < -1.0e-6 -> S = true ; S = false ).
slack(eq, _, false).

%   live_descent(+Live, +Dirs, +PlainPart, +Touched, +Budget, +Bs, +Zero,
%                +S0, -S): the descent over the rows Live; when its solution
%   breaks a row left out, again with that row too.
live_descent([], _, _, _, _, _, _, S, S) :- !.
live_descent(Live, Dirs, PlainPart, Touched0, Budget, Bs, Zero, S0, S) :-
    partition(touches_any(Live), Touched0, Touched1, Dormant),
    fixed_segments(Dormant, Zero, DormantPart),
    fixed_array(PlainPart, DormantPart, Zero, Fixed),
    maplist(maplist([o(C, U, Rv, _), t(C, U, Rv)]>>true), Touched1, Touched),
    length(Zero, NR),
    scales(Touched, NR, Scales),
    numlist(1, NR, Is),
    maplist({Touched, Live}/[I, TI-TO]>>
            (   memberchk(I, Live)
            ->  partition(touches(I), Touched, TI, TO)
            ;   TI = [], TO = Touched
            ),
            Is, Parts),
    Ctx = ctx(Fixed, Touched, Budget, Bs, Zero, Parts),
    descend(2, Live, Dirs, Scales, Ctx, S0, S1),
    S1 = _-_-G1,
    findall(I, ( nth1(I, Dirs, D), nth1(I, G1, Gi), \+ slack(D, Gi, true) ), Live1),
    (   subtract(Live1, Live, [])
    ->  S = S1
    ;   union(Live, Live1, Live2),
        msort(Live2, Live3),
        live_descent(Live3, Dirs, PlainPart, Touched0, Budget, Bs, Zero, S1, S)
    ).

%   fixed_segments(+Classes, +Zero, -Part): Part is t(BaseC, BaseU,
%   BaseRv, Segs), the classes' hulls under U (mu = 0 on the rows they
%   touch), segments by decreasing slope.
fixed_segments(Classes, Zero, t(BC, BU, BRv, Segs)) :-
    foldl(fixed_class, Classes, t(0, 0, Zero, []), t(BC, BU, BRv, Segs0)),
    sort(1, @>=, Segs0, Segs).

%   fixed_array(+Part1, +Part2, +Zero, -Fixed): the two parts as the
%   fixed part of an evaluation context (cumulative array).
fixed_array(t(C1, U1, R1, S1), t(C2, U2, R2, S2), Zero, fixed(C, U, R, Arr)) :-
    C is C1+C2,
    U is U1+U2,
    vadd(R1, R2, R),
    merge_desc(S1, S2, Segs),
    cum_array(Segs, Zero, Arr).

touches_any(Rows, Opts) :-
    member(o(_, _, Rv, _), Opts),
    member(I, Rows),
    nth1(I, Rv, R),
    R =\= 0,
    !.

sign_ok(le, P0, P) :- P is max(0, P0).
sign_ok(ge, P0, P) :- P is min(0, P0).
sign_ok(eq, P, P).

untouched(Opts) :-
    forall(member(o(_, _, Rv, _), Opts), maplist(==(0), Rv)).

touches(I, Opts) :-
    member(t(_, _, Rv), Opts),
    nth1(I, Rv, R),
    R =\= 0,
    !.

%   fixed_class(+Options, +Acc0, -Acc): a class whose hull does not move
%   while the multipliers do (no row touches it, or only rows held at
%   mu = 0): its base and hull segments under U; its row values, if any,
%   count in the subgradient.
fixed_class(Opts, t(C0, U0, R0, S0), t(C1, U1, R1, S1)) :-
    (   untouched(Opts)
    ->  maplist([o(C, U, _, _), p(C, U, none)]>>true, Opts, Pts),
        hull_parts(Pts, C, U, _, S1, S0),
        R1 = R0
    ;   % a class touched only by rows held at mu = 0: its hull does not
        % move, but its row values count in the subgradient
        maplist([o(C, U, Rv, _), p(C, U, Rv)]>>true, Opts, Pts),
        hull_parts(Pts, C, U, Rv, S1, S0),
        vadd(R0, Rv, R1)
    ),
    C1 is C0+C,
    U1 is U0+U.

%   scales(+Touched, +NR, -Scales): per row, the utility per unit of row
%   value of the options that touch it: the order of size of mu.
scales(Touched, NR, Scales) :-
    numlist(1, NR, Is),
    maplist({Touched}/[I, S]>>( aggregate_scale(Touched, I, SU, SR),
                      ( SR > 0 -> S is max(1.0e-6, SU/SR) ; S = 1.0 ) ),
            Is, Scales).

aggregate_scale(Touched, I, SU, SR) :-
    foldl({I}/[Opts, A0-B0, A-B]>>
          foldl({I}/[t(_, U, Rv), X0-Y0, X-Y]>>
                ( nth1(I, Rv, R),
                  (   R =\= 0
                  ->  X is X0+abs(U), Y is Y0+abs(R)
                  ;   X = X0, Y = Y0
                  ) ),
                Opts, A0-B0, A-B),
          Touched, 0-0, SU-SR).

%   eval(+Mu, +Ctx, -F, -G) is semidet: D(Mu) and its subgradient;
%   fails when the cheapest options do not fit.  Touched is a list of
%   option lists t(C, U, Rv) in order of cost (the hot loop of the
%   descent: plain recursion, no sort per class).
eval(Mu, ctx(fixed(FBC, FBU, FRv, FSegs), Touched, Budget, Bs, _, _), F, G) :-
    touched_parts(Touched, Mu, 0, TBC, 0.0, TBL, FRv, TBRv, TSegs0, []),
    sort(1, @>=, TSegs0, TSegs),
    Cap is Budget - FBC - TBC,
    Cap >= 0,
    functor(FSegs, _, N1),
    N is N1-1,
    ffill(TSegs, FSegs, N, 1, Cap, 0.0, TBRv, Gain, Rv),
    dot(Mu, Bs, 0.0, MB),
    F is FBU + TBL + Gain + MB,
    vsub(Bs, Rv, G).

touched_parts([], _, C, C, L, L, R, R, S, S).
touched_parts([Opts|T], Mu, C0, C, L0, L, R0, R, S0, S) :-
    Opts = [t(BC, U0, Rv0)|Os],
    dot(Mu, Rv0, 0.0, M0),
    L1 is U0-M0,
    cheapest_best(Os, Mu, BC, p(BC, L1, Rv0), Base, Rest),
    Base = p(_, BL, BRv),
    hull_scan(Rest, Mu, BL, [Base], Stack),
    reverse(Stack, [H0|Hs]),
    segments(Hs, H0, S0, S1),
    C2 is C0+BC,
    L2 is L0+BL,
    vadd(R0, BRv, R2),
    touched_parts(T, Mu, C2, C, L2, L, R2, R, S1, S).

%   The best (highest L) of the options as cheap as the first.
cheapest_best([t(C, U, Rv)|Os], Mu, C0, P0, P, Rest) :-
    C =:= C0,
    !,
    dot(Mu, Rv, 0.0, M),
    L is U-M,
    P0 = p(_, L0, _),
    (   L > L0
    ->  cheapest_best(Os, Mu, C0, p(C, L, Rv), P, Rest)
    ;   cheapest_best(Os, Mu, C0, P0, P, Rest)
    ).
cheapest_best(Os, _, _, P, P, Os).

%   hull_scan(+Options, +Mu, +BestL, +Stack0, -Stack): the upper hull of
%   the points of strictly increasing L (the (cost, L) Pareto front).
hull_scan([], _, _, Stack, Stack).
hull_scan([t(C, U, Rv)|Os], Mu, Best, Stack0, Stack) :-
    dot(Mu, Rv, 0.0, M),
    L is U-M,
    (   L > Best
    ->  P = p(C, L, Rv),
        hull_pop(Stack0, P, Stack1),
        hull_scan(Os, Mu, L, [P|Stack1], Stack)
    ;   hull_scan(Os, Mu, Best, Stack0, Stack)
    ).

dot([], [], S, S).
dot([M|Ms], [R|Rs], S0, S) :-
    S1 is S0+M*R,
    dot(Ms, Rs, S1, S).

%   hull_parts(+Points, -BaseC, -BaseL, -BaseRv, ?Segs0, ?Segs): the
%   upper concave hull of points p(C, L, Rv) from the cheapest (the best
%   of the cheapest), as segments seg(Slope, DC, DL, DRv) added to Segs.
hull_parts(Pts, BC, BL, BRv, Segs0, Segs) :-
    map_list_to_pairs([p(C, L, _), k(C, NL)]>>(NL is -L), Pts, Keyed),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, [P0|Ps]),
    P0 = p(BC, BL, BRv),
    front(Ps, BL, Front),
    foldl(hull_push, [P0|Front], [], Rev),
    reverse(Rev, Hull),
    Hull = [H0|Hs],
    segments(Hs, H0, Segs0, Segs).

front([], _, []).
front([P|Ps], Best, F) :-
    P = p(_, L, _),
    (   L > Best
    ->  F = [P|F1],
        front(Ps, L, F1)
    ;   front(Ps, Best, F)
    ).

hull_push(P, Stack0, [P|Stack]) :-
    hull_pop(Stack0, P, Stack).

hull_pop([B, A|Rest], P, Stack) :-
    A = p(CA, LA, _),
    B = p(CB, LB, _),
    P = p(CP, LP, _),
    (LB-LA)*(CP-CB) =< (LP-LB)*(CB-CA),
    !,
    hull_pop([A|Rest], P, Stack).
hull_pop(Stack, _, Stack).

segments([], _, Segs, Segs).
segments([P|Ps], p(C0, L0, R0), [seg(Slope, DC, DL, DRv)|Segs0], Segs) :-
    P = p(C, L, R),
    DC is C-C0,
    DL is L-L0,
    Slope is DL/DC,
    (   R0 == none
    ->  DRv = none
    ;   vsub(R, R0, DRv)
    ),
    segments(Ps, P, Segs0, Segs).

%   The segments of the fixed part are kept as a cumulative array
%   cum(f(Slope1, C, L, Rv), ..., f(end, C, L, Rv)): entry I holds the
%   sums of the segments before segment I, so that a run of them is
%   taken in one step and the break inside a run is found by binary
%   search.  An evaluation then costs the classes of one row, not all.

cum_array(Segs, Zero, Arr) :-
    cum_list(Segs, 0, 0.0, Zero, Fs),
    Arr =.. [cum|Fs].

cum_list([], C, L, R, [f(end, C, L, R)]).
cum_list([seg(S, DC, DL, DRv)|Ss], C, L, R, [f(S, C, L, R)|Fs]) :-
    C1 is C+DC,
    L1 is L+DL,
    add_drv(DRv, 1.0, R, R1),
    cum_list(Ss, C1, L1, R1, Fs).

cum_segments([f(end, _, _, _)], []) :- !.
cum_segments([f(S, C0, L0, R0), F|Fs], [seg(S, DC, DL, DRv)|Segs]) :-
    F = f(_, C1, L1, R1),
    DC is C1-C0,
    DL is L1-L0,
    vsub(R1, R0, DRv),
    cum_segments([F|Fs], Segs).

%   ffill(+Touched, +Arr, +N, +Pos, +Cap, +Gain0, +Rv0, -Gain, -Rv):
%   Dantzig over the fixed segments Pos..N of Arr and the touched
%   segments (slope-ordered), the break segment fractional.
ffill([], Arr, N, Pos, Cap, G0, R0, G, R) :-
    run(Arr, Pos, N, Cap, G0, R0, Taken),
    (   Taken = all(_, G, R)
    ->  true
    ;   Taken = broke(G, R)
    ).
ffill([seg(S, DC, DL, DRv)|Ts], Arr, N, Pos, Cap, G0, R0, G, R) :-
    last_at_least(Arr, S, Pos, N, K),
    run(Arr, Pos, K, Cap, G0, R0, Taken),
    (   Taken = all(Cap1, G1, R1)
    ->  (   DC =< Cap1
        ->  G2 is G1+DL,
            add_drv(DRv, 1.0, R1, R2),
            Cap2 is Cap1-DC,
            Pos1 is K+1,
            ffill(Ts, Arr, N, Pos1, Cap2, G2, R2, G, R)
        ;   Frac is Cap1/DC,
            G is G1+Frac*DL,
            add_drv(DRv, Frac, R1, R)
        )
    ;   Taken = broke(G, R)
    ).

%   last_at_least(+Arr, +S, +Lo, +Hi, -K): the last index K in Lo..Hi
%   whose slope is >= S (Lo-1 when none).
last_at_least(Arr, S, Lo, Hi, K) :-
    (   Lo > Hi
    ->  K is Lo-1
    ;   arg(Lo, Arr, f(SL, _, _, _)),
        SL < S
    ->  K is Lo-1
    ;   bsearch_slope(Arr, S, Lo, Hi, K)
    ).

bsearch_slope(Arr, S, Lo, Hi, K) :-         % slope(Lo) >= S
    (   Lo >= Hi
    ->  K = Lo
    ;   Mid is (Lo+Hi+1) // 2,
        arg(Mid, Arr, f(SM, _, _, _)),
        (   SM >= S
        ->  bsearch_slope(Arr, S, Mid, Hi, K)
        ;   Mid1 is Mid-1,
            bsearch_slope(Arr, S, Lo, Mid1, K)
        )
    ).

%   run(+Arr, +Pos, +K, +Cap, +G0, +R0, -Taken): take the fixed segments
%   Pos..K: all(Cap1, G, R) when they fit, else broke(G, R) with the
%   break segment fractional.
run(Arr, Pos, K, Cap, G0, R0, Taken) :-
    (   K < Pos
    ->  Taken = all(Cap, G0, R0)
    ;   arg(Pos, Arr, f(_, C0, L0, RA)),
        K1 is K+1,
        arg(K1, Arr, f(_, C1, L1, RB)),
        Cost is C1-C0,
        (   Cost =< Cap
        ->  Cap1 is Cap-Cost,
            G is G0+L1-L0,
            vdiff_add(RB, RA, 1.0, R0, R),
            Taken = all(Cap1, G, R)
        ;   Limit is C0+Cap,
            bsearch_cost(Arr, Limit, Pos, K, J),   % segment J breaks
            arg(J, Arr, f(_, CJ, LJ, RJ)),
            J1 is J+1,
            arg(J1, Arr, f(_, CJ1, LJ1, RJ1)),
            Frac is (Limit-CJ)/(CJ1-CJ),
            G is G0 + (LJ-L0) + Frac*(LJ1-LJ),
            vdiff_add(RJ, RA, 1.0, R0, R1),
            vdiff_add(RJ1, RJ, Frac, R1, R),
            Taken = broke(G, R)
        )
    ).

%   bsearch_cost(+Arr, +Limit, +Lo, +Hi, -J): the last J in Lo..Hi whose
%   cumulative cost before it is =< Limit.
bsearch_cost(Arr, Limit, Lo, Hi, J) :-
    (   Lo >= Hi
    ->  J = Lo
    ;   Mid is (Lo+Hi+1) // 2,
        arg(Mid, Arr, f(_, CM, _, _)),
        (   CM =< Limit
        ->  bsearch_cost(Arr, Limit, Mid, Hi, J)
        ;   Mid1 is Mid-1,
            bsearch_cost(Arr, Limit, Lo, Mid1, J)
        )
    ).

vdiff_add([], [], _, [], []).
vdiff_add([B|Bs], [A|As], F, [R0|Rs0], [R|Rs]) :-
    R is R0 + F*(B-A),
    vdiff_add(Bs, As, F, Rs0, Rs).

add_drv(none, _, R, R) :- !.
add_drv([], _, [], []).
add_drv([D|Ds], Frac, [A|As], [B|Bs]) :-
    B is A+Frac*D,
    add_drv(Ds, Frac, As, Bs).

vadd([], [], []).
vadd([A|As], [B|Bs], [C|Cs]) :- C is A+B, vadd(As, Bs, Cs).

vsub([], [], []).
vsub([A|As], [B|Bs], [C|Cs]) :- C is A-B, vsub(As, Bs, Cs).


                 /*******************************
                 *     COORDINATE DESCENT       *
                 *******************************/

%   descend(+Cycles, +Rows, +Dirs, +Scales, +Ctx, +Mu0-F0-G0, -Mu-F-G):
%   cycles of coordinate minimisation over Rows.

descend(0, _, _, _, _, S, S) :- !.
descend(N, Is, Dirs, Scales, Ctx, S0, S) :-
    foldl(coordinate(Dirs, Scales, Ctx), Is, S0, S1),
    S0 = _-F0-_,
    S1 = _-F1-_,
    (   F0 - F1 < 0.5                    % less than half a unit of utility
    ->  S = S1
    ;   N1 is N-1,
        descend(N1, Is, Dirs, Scales, Ctx, S1, S)
    ).

%   coordinate(+Dirs, +Scales, +Ctx, +I, +Mu0-F0-G0, -Mu-F-G): minimise
%   D along mu_I within its sign.
coordinate(Dirs, Scales, Ctx0, I, Mu0-F0-G0, S) :-
    row_context(Ctx0, I, Mu0, Ctx),
    nth1(I, Dirs, Dir),
    nth1(I, Scales, H),
    nth1(I, Mu0, T0),
    nth1(I, G0, Gi),
    (   abs(Gi) =< 1.0e-9
    ->  S = Mu0-F0-G0
    ;   Gi > 0
    ->  limit(Dir, down, Lim),
        (   T0 =< Lim
        ->  S = Mu0-F0-G0
        ;   bracket(I, -1, Lim, H, Ctx, T0, Mu0-F0-G0, S)
        )
    ;   limit(Dir, up, Lim),
        (   T0 >= Lim
        ->  S = Mu0-F0-G0
        ;   bracket(I, 1, Lim, H, Ctx, T0, Mu0-F0-G0, S)
        )
    ).

%   row_context(+Ctx0, +I, +Mu, -Ctx): while mu_I alone moves, the
%   classes that do not touch row I keep their hulls: they join the
%   fixed part, and an evaluation only rebuilds the classes of row I.
row_context(ctx(Fixed, _, Budget, Bs, Zero, Parts), I, Mu, Ctx) :-
    nth1(I, Parts, TI-TO),
    touched_parts(TO, Mu, 0, OC, 0.0, OL, Zero, ORv, OSegs0, []),
    sort(1, @>=, OSegs0, OSegs),
    Fixed = fixed(FC, FL, FRv, FArr),
    FArr =.. [_|FCum],
    cum_segments(FCum, FSegs),
    merge_desc(FSegs, OSegs, Segs),
    C is FC+OC,
    L is FL+OL,
    vadd(FRv, ORv, Rv),
    cum_array(Segs, Zero, Arr),
    Ctx = ctx(fixed(C, L, Rv, Arr), TI, Budget, Bs, Zero, Parts).

merge_desc([], Bs, Bs) :- !.
merge_desc(As, [], As) :- !.
merge_desc([A|As], [B|Bs], [C|Cs]) :-
    arg(1, A, KA),
    arg(1, B, KB),
    (   KA >= KB
    ->  C = A,
        merge_desc(As, [B|Bs], Cs)
    ;   C = B,
        merge_desc([A|As], Bs, Cs)
    ).

limit(le, down, 0.0) :- !.
limit(ge, up, 0.0) :- !.
limit(_, down, -inf).
limit(_, up, inf).

%   bracket(+I, +Sign, +Limit, +Step, +Ctx, +T0, +S0, -S): walk from T0 in
%   direction Sign, doubling the step, until the subgradient changes
%   sign (then refine) or the limit is reached (the minimum is there).
bracket(I, Sign, Lim, Step0, Ctx, T0, S0, S) :-
    Step is max(Step0, abs(T0)),
    bracket_(20, I, Sign, Lim, Step, Ctx, T0, S0, S).

bracket_(K, I, Sign, Lim, Step, Ctx, T0, S0, S) :-
    T1 is T0 + Sign*Step,
    (   Sign > 0 -> T is min(T1, Lim) ; T is max(T1, Lim) ),
    S0 = Mu0-_-_,
    set_nth1(I, Mu0, T, Mu),
    (   eval(Mu, Ctx, F, G)
    ->  nth1(I, G, Gi),
        S1 = Mu-F-G,
        (   Sign*Gi >= 0                % the derivative changed sign
        ->  (   Sign > 0
            ->  refine(6, I, Ctx, S0, S1, S1, S)
            ;   refine(6, I, Ctx, S1, S0, S1, S)
            )
        ;   ( T =:= Lim ; K =< 1 )
        ->  S = S1
        ;   K1 is K-1,
            Step1 is Step*2,
            bracket_(K1, I, Sign, Lim, Step1, Ctx, T, S1, S)
        )
    ;   S = S0
    ).

%   refine(+N, +I, +Ctx, +Left, +Right, +Best0, -Best): Left has a
%   negative subgradient in mu_I, Right a non-negative one; the next
%   point is where their tangents meet.
refine(N, I, _Ctx, L, R, Best0, Best) :-
    L = MuL-_-GL,
    R = MuR-_-GR,
    nth1(I, MuL, TL), nth1(I, GL, GiL),
    nth1(I, MuR, TR), nth1(I, GR, GiR),
    better(L, Best0, Best1),
    better(R, Best1, Best2),
    (   N =< 0
    ;   GiR - GiL =< 1.0e-12
    ;   TR - TL =< 1.0e-12 * max(1.0, abs(TR))
    ),
    !,
    Best = Best2.
refine(N, I, Ctx, L, R, Best0, Best) :-
    L = MuL-FL-GL,
    R = _-FR-GR,
    nth1(I, MuL, TL), nth1(I, GL, GiL),
    R = MuR-_-_, nth1(I, MuR, TR), nth1(I, GR, GiR),
    T is (FR - FL + GiL*TL - GiR*TR) / (GiL - GiR),
    Tangent is FL + GiL*(T-TL),
    set_nth1(I, MuL, T, Mu),
    (   eval(Mu, Ctx, F, G)
    ->  S = Mu-F-G,
        better(L, Best0, B1),
        better(R, B1, B2),
        better(S, B2, B3),
        nth1(I, G, Gi),
        (   F - Tangent < 0.25              % the bound is floored: enough
        ->  Best = B3                   % on both tangents: the minimum
        ;   N1 is N-1,
            (   Gi < 0
            ->  refine(N1, I, Ctx, S, R, B3, Best)
            ;   refine(N1, I, Ctx, L, S, B3, Best)
            )
        )
    ;   better(L, Best0, B1),
        better(R, B1, Best)
    ).

better(S, Best0, Best) :-
    S = _-F-_,
    Best0 = _-F0-_,
    (   F < F0 -> Best = S ; Best = Best0 ).

set_nth1(1, [_|T], X, [X|T]) :- !.
set_nth1(N, [H|T0], X, [H|T]) :-
    N1 is N-1,
    set_nth1(N1, T0, X, T).
