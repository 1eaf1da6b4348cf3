:- module(ctxrelay_packer_rows,
          [ rsolve/5,               % +Prep, +Restr, +Lag0, +Deadline, -Result
            rclasses_of/9,          % +Gs, +P, +X, +St, +R, +Table, +Deadline,
                                    % -Classes, -Units
            rclass_best/5,          % +PL, +QL, +Lag, +Options, -Best
            key_rows_hold/2         % +Table, +Key
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(assoc)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(problem, [in_time/1]).
:- use_module(structure).
:- use_module(greedy, [key_cost_util/4, greedy_groups/7, initial_allowed/2]).
:- use_module(classes).
:- use_module(bound, [lp/5, class_greedy/4, suffix_bounds/2, suffix_value/3]).
:- use_module(lagrange, [multipliers/5]).
:- use_module(absorb, [row_filter/4, absorb_rows/5, project_rows/5, project_table/3]).
:- use_module(search, [search_classes/5, class_best/4]).
:- use_module(mcpareto, [mc_pareto/3]).
:- use_module(defer, [defer_mask/4, unit_rv/5, key_rv/3]).

/** <module> The exact search under users' linear constraints (rows)

A user constraint that compiles to linear rows `Sum a*x =< b`, `>= b` or
`= b` over the 0/1 variables of the variants keeps the problem a
multiple-choice knapsack, with resources: every option of a class carries
the vector Rv of its contributions to the rows.

  - Classes are built as in ctxrelay_packer_classes, but an option is
    dominated only by one that is cheaper, not less useful and not worse
    on any row (lower for `=<`, higher for `>=`, equal for `=`).
  - The bound relaxes the rows with Lagrange multipliers mu
    (ctxrelay_packer_lagrange): for every feasible pack,
    q*U(x) =< L(x) = Sum_classes (q*U(o) - p.Rv(o)) + p.b, with p = q*mu
    of the sign of each row, so the Dantzig bound of the classes under L
    bounds the utility of every pack that satisfies the rows.
  - The reduction drops every option whose Lagrangian bound misses the
    window's threshold; the core search is the dynamic program of
    ctxrelay_packer_search over states s(Cost, Util, Rv, L, Sels), pruned
    by the suffix bound under L and by the rows (a state whose row value
    cannot come back within bounds with what the remaining classes can
    add), kept as a Pareto set under the same dominance as the options.

The result is exact: the first window that holds a pack satisfying the
rows holds the best one.
*/

                 /*******************************
                 *             ROWS             *
                 *******************************/

%   The row table (ctxrelay_packer_user:row_table/4) gives each variant
%   of a unit its vector of row coefficients (unit_rv/5).

%!  key_rows_hold(+Table, +Key) is semidet.
%
%   The pack Key (a list of Unit-Variant) satisfies every row.

key_rows_hold(Table, Key) :-
    key_rv(Table, Key, Rv),
    Table = rows(Dirs, Bs, _, _),
    rows_hold(Dirs, Rv, Bs).

rows_hold([], [], []).
rows_hold([D|Ds], [R|Rs], [B|Bs]) :-
    dir_holds(D, R, B),
    rows_hold(Ds, Rs, Bs).

dir_holds(le, R, B) :- R =< B.
dir_holds(ge, R, B) :- R >= B.
dir_holds(eq, R, B) :- R =:= B.

vadd([], [], []).
vadd([A|As], [B|Bs], [C|Cs]) :-
    C is A+B,
    vadd(As, Bs, Cs).

vsub([], [], []).
vsub([A|As], [B|Bs], [C|Cs]) :-
    C is A-B,
    vsub(As, Bs, Cs).

dot([], [], S, S).
dot([P|Ps], [R|Rs], S0, S) :-
    S1 is S0+P*R,
    dot(Ps, Rs, S1, S).


                 /*******************************
                 *     CLASSES WITH RESOURCES    *
                 *******************************/

%!  rclasses_of(+Gs, +P, +X, +St, +R, +Table, +Deadline, -Classes, -Units)
%!      is semidet.
%
%   As ctxrelay_packer_classes:classes_of/8, with options o(C, U, Rv, Sel)
%   kept under the dominance of mc_pareto/3.  Classes is a list of
%   option lists.  Fails when a forced group has no admissible selection.

rclasses_of(Gs, P, X, St, R, Table, Deadline, Classes, Units) :-
    X = str(G, _, GM, _, _, _, _, _),
    functor(InOpts, in_options, G),
    groups_in_state(Gs, St, in, InGs),
    groups_in_state(Gs, St, free, FreeGs),
    maplist(group_options(P, X, R, Table, InOpts), InGs),
    maplist(group_options(P, X, R, Table, InOpts), FreeGs),
    maplist(forced_options(InOpts), InGs, Forced),
    functor(Links, links, G),
    maplist(free_links(X, St, Links), FreeGs),
    components(FreeGs, Links, Components),
    maplist(component_rclass(Links, InOpts, Table, Deadline), Components, Free),
    append(Forced, Free, Classes),
    maplist([Gi, [Gi]]>>true, InGs, InComps),
    append(InComps, Components, AllComps),
    maplist(component_units(GM), AllComps, Units).

rclasses(P, X, St, R, Table, Deadline, Classes, Units) :-
    X = str(G, _, _, _, _, _, _, _),
    numlist_(1, G, Gs),
    rclasses_of(Gs, P, X, St, R, Table, Deadline, Classes, Units).

forced_options(InOpts, Gi, Opts) :-
    arg(Gi, InOpts, Opts),
    Opts \== [].

group_options(P, X, R, Table, InOpts, Gi) :-
    X = str(_, _, GM, _, _, _, _, _),
    P = prob(_, _, Us, _, _, _),
    Table = rows(Dirs, _, _, Zero),
    arg(Gi, GM, Ms),
    foldl(member_options(Us, R, Table), Ms, [o(0, 0, Zero, [])], Opts0),
    (   Opts0 == []
    ->  Opts = []
    ;   mc_pareto(Dirs, Opts0, Opts)
    ),
    nb_setarg(Gi, InOpts, Opts).

member_options(Us, R, Table, M, F0, F) :-
    (   F0 == []
    ->  F = []
    ;   arg(M, R, O),
        arg(M, Us, u(Vs, _)),
        Table = rows(_, _, Res, Zero),
        findall(o(C, U, Rv, [M-K]),
                ( member(K, O), K > 0,
                  nth1(K, Vs, v(K, _, C, U)),
                  unit_rv(Res, Zero, M, K, Rv) ),
                Os),
        sums(F0, Os, F)
    ).

sums(F0, Os, F) :-
    findall(o(C, U, Rv, Sel),
            ( member(o(C1, U1, R1, S1), F0),
              member(o(C2, U2, R2, S2), Os),
              C is C1+C2,
              U is U1+U2,
              vadd(R1, R2, Rv),
              append(S1, S2, Sel) ),
            F).

component_rclass(_, InOpts, Table, _, [Gi], Opts) :-
    !,
    arg(Gi, InOpts, In),
    Table = rows(Dirs, _, _, Zero),
    mc_pareto(Dirs, [o(0, 0, Zero, [])|In], Opts).
component_rclass(Links, InOpts, Table, Deadline, Gs, Opts) :-
    component_plan(Gs, Links, Plan),
    Table = rows(Dirs, _, _, Zero),
    foldl(rdp_group(Plan, Links, InOpts, Dirs, Deadline), Gs,
          [[]-[s(0, 0, Zero, [])]], SigGroups),
    SigGroups = [[]-States],
    maplist([s(C, U, Rv, Sels), o(C, U, Rv, Sel)]>>append(Sels, Sel), States, Os),
    mc_pareto(Dirs, Os, Opts).

%   The dynamic program of ctxrelay_packer_classes:component_options/5,
%   with row vectors in the states and mc_pareto/3 within a signature.
rdp_group(Plan, Links, InOpts, Dirs, Deadline, Gi, SigGroups0, SigGroups) :-
    in_time(Deadline),
    dp_context(Plan, Links, InOpts, Gi, Ctx),
    foldl(rexpand(Ctx), SigGroups0, Keyed, []),
    keysort(Keyed, Sorted),
    group_pairs_by_key(Sorted, Grouped),
    maplist({Dirs}/[Sig-Ss0, Sig-Ss]>>mc_pareto(Dirs, Ss0, Ss), Grouped, SigGroups).

rexpand(Ctx, Sig-States, K0, K) :-
    Ctx = dp(Gi, Rq, RqBy, Amo, In, Close, Keep),
    (   \+ ( member(H, RqBy), memberchk(H-in, Sig) )
    ->  next_sig(Sig, Close, Gi, Keep, out, SigOut),
        foldl({SigOut}/[S, [SigOut-S|T], T]>>true, States, K0, K1)
    ;   K1 = K0
    ),
    (   In \== [],
        \+ ( member(H, Rq), memberchk(H-out, Sig) ),
        \+ ( member(H, Amo), memberchk(H-in, Sig) )
    ->  next_sig(Sig, Close, Gi, Keep, in, SigIn),
        findall(SigIn-s(C, U, Rv, [OSel|Sels]),
                ( member(o(OC, OU, ORv, OSel), In),
                  member(s(C0, U0, Rv0, Sels), States),
                  C is C0+OC,
                  U is U0+OU,
                  vadd(Rv0, ORv, Rv) ),
                New),
        append(New, K, K1)
    ;   K1 = K
    ).


                 /*******************************
                 *      LAGRANGIAN CLASSES       *
                 *******************************/

%   A class for the search is rc(Options, View): Options the list of
%   ol(C, U, Rv, L, Sel) with L = Q*U - P.Rv its Lagrangian utility, View
%   = c(Front, Hull) the (cost, L) Pareto front of the options as
%   o(C, L, Option) with its hull segments, the form that
%   ctxrelay_packer_bound's LP and suffix bounds read.

lag_class(lag(Q, Ps, _, _), Opts0, rc(Opts, View)) :-
    maplist({Q, Ps}/[o(C, U, Rv, Sel), ol(C, U, Rv, L, Sel)]>>
            ( dot(Ps, Rv, 0, PR), L is Q*U - PR ),
            Opts0, Opts),
    class_view(Opts, View).

class_view(Opts, c(Front, Hull)) :-
    maplist([O, o(C, L, O)]>>( O = ol(C, _, _, L, _) ), Opts, Keyed),
    pareto(Keyed, Front),
    hull_segments(Front, Hull, []).

view(rc(_, View), View).

%!  rclass_best(+PL, +QL, +Lag, +Options, -Best) is det.
%
%   The best Lagrangian value QL*L - PL*C over a class's o/4 options.

rclass_best(PL, QL, lag(Q, Ps, _, _), Opts, Best) :-
    foldl({PL, QL, Q, Ps}/[o(C, U, Rv, _), B0, B]>>
          ( dot(Ps, Rv, 0, PR), V is QL*(Q*U - PR) - PL*C, B is max(B0, V) ),
          Opts, -inf, Best).

%   unit_lags(+P, +Table, +Q, +Ps, -LUs): per unit, the list of the
%   Lagrangian utilities of its variants (children bounds of the
%   enumeration need them unit by unit).
unit_lags(prob(N, _, Us, _, _, _), rows(_, _, Res, Zero), Q, Ps, LUs) :-
    functor(LUs, lu, N),
    forall(between(1, N, M),
           ( arg(M, Us, u(Vs, _)),
             findall(L, ( member(v(K, _, _, U), Vs),
                          unit_rv(Res, Zero, M, K, Rv),
                          dot(Ps, Rv, 0, PR),
                          L is Q*U - PR ), Ls),
             nb_setarg(M, LUs, Ls) )).


                 /*******************************
                 *           SOLVING            *
                 *******************************/

%!  rsolve(+Prep, +Restr, +Lag0, +Deadline, -Result) is det.
%
%   As ctxrelay_packer_search:solve/5 for a problem with rows.  Lag0 is
%   the multiplier term of the root (`none`: compute it from this
%   problem's classes).  Result is sol(Key, Cost, Util, Status, Enum),
%   `none` (no pack satisfies the rows), or unknown(UB) when the time
%   limit stopped the search before any pack satisfying them was found.

rsolve(prep(_, P, X, St0), Restr, Lag0, Deadline, Result) :-
    P = prob(N, _, _, _, Budget, User),
    get_dict(table, User, Table),
    duplicate_term(St0, St),
    restrictions_array(Restr, R),
    (   apply_restrictions(1, N, R, X, St)
    ->  Box = box(inc(-1, none), none, 0/1, none),
        catch(( rexact(P, X, St, R, Budget, Table, Lag0, Deadline, Box)
              ->  Done = true
              ;   Done = infeasible
              ),
              packer_time_limit,
              Done = false),
        arg(1, Box, inc(IU, _)),
        (   Done == infeasible
        ->  Result = none
        ;   Done == true
        ->  (   IU < 0
            ->  Result = none
            ;   rsolve_result(P, Box, optimal, Result)
            )
        ;   rcut_result(P, X, St, R, Table, Box, Result)
        )
    ;   Result = none
    ).

rcut_result(P, X, St, R, Table, Box, Result) :-
    (   arg(1, Box, inc(IU00, Sels0)),      % found under a relaxation (rows
        IU00 >= 0,                          % deferred or left out): it
        append(Sels0, Key00),               % counts only if it meets them
        msort(Key00, Key0),
        \+ key_rows_hold(Table, Key0)
    ->  nb_setarg(1, Box, inc(-1, none))
    ;   true
    ),
    arg(1, Box, inc(IU0, _)),
    (   IU0 < 0,
        initial_allowed_r(P, R, Allowed),
        greedy_groups(P, X, St, Allowed, GKey, _, GU),
        key_rows_hold(Table, GKey)
    ->  nb_setarg(1, Box, inc(GU, [GKey]))
    ;   true
    ),
    arg(1, Box, inc(IU, _)),
    arg(2, Box, UB),
    (   IU < 0
    ->  ( UB == none -> Result = unknown(none) ; Result = unknown(UB) )
    ;   UB == none
    ->  rsolve_result(P, Box, gap(unknown), Result)
    ;   G is max(0, UB-IU),
        (   G =:= 0 -> Status = optimal ; Status = gap(G) ),
        rsolve_result(P, Box, Status, Result)
    ).

initial_allowed_r(P, R, Allowed) :-
    P = prob(N, _, Us, _, _, _),
    initial_allowed(P, Allowed0),
    functor(Allowed, allowed, N),
    forall(between(1, N, I),
           ( arg(I, R, O), arg(I, Us, u(Vs, _)), arg(I, Allowed0, _),
             include({O}/[v(K, _, _, _)]>>memberchk(K, O), Vs, AVs),
             nb_setarg(I, Allowed, AVs) )).

rsolve_result(P, Box, Status, sol(Key, Cost, Util, Status, Enum)) :-
    arg(1, Box, inc(Util, Sels)),
    append(Sels, Key0),
    msort(Key0, Key),
    key_cost_util(P, Key, Cost, Util1),
    call(assertion, Util1 =:= Util),        % called: optimise would drop it
    arg(3, Box, PL/QL),
    arg(4, Box, ClassInfo),
    (   ClassInfo = ci(Classes, Units, Lag)
    ->  maplist({PL, QL}/[rc(Opts, _), B]>>rc_best(PL, QL, Opts, B), Classes, Bests),
        Enum = enum(PL/QL, Units, Bests, Lag)
    ;   ClassInfo = ci(Classes, Units)      % every row merged into a class
    ->  maplist(class_best(PL, QL), Classes, Bests),
        Enum = enum(PL/QL, Units, Bests, none)
    ;   Enum = none
    ).

rc_best(PL, QL, Opts, Best) :-
    foldl({PL, QL}/[ol(C, _, _, L, _), B0, B]>>( V is QL*L - PL*C, B is max(B0, V) ),
          Opts, -inf, Best).

%   rexact(+P, +X, +St, +R, +Budget, +Table, +Lag0, +Deadline, !Box)
%   is semidet: the classes, the multipliers, an incumbent if the greedy
%   over the Lagrangian hulls satisfies the rows, and the windows.
%
%   Rows that the greedy pack meets with room to spare are deferred: the
%   classes are built without them (a floor on the turns' tokens touches
%   most classes and makes every subset of turns an option of its own,
%   yet seldom binds).  That solves a relaxation: when its pack meets the
%   deferred rows it is the optimum; otherwise the search runs again
%   with every row.  Fails when no pack satisfies the rows.

rexact(P, X, St, R, Budget, Table0, Lag0, Deadline, Box) :-
    defer_mask(P, R, Table0, Build),
    (   memberchk(false, Build)
    ->  rexact_built(Build, P, X, St, R, Budget, Table0, Lag0, Deadline, Box),
        arg(1, Box, inc(IU, Sels)),
        (   IU < 0
        ->  true
        ;   append(Sels, Key0),
            msort(Key0, Key),
            key_rows_hold(Table0, Key)
        ->  true
        ;   maplist([_, true]>>true, Build, All),
            box_reset(Box),
            rexact_built(All, P, X, St, R, Budget, Table0, Lag0, Deadline, Box)
        )
    ;   rexact_built(Build, P, X, St, R, Budget, Table0, Lag0, Deadline, Box)
    ).

box_reset(Box) :-
    nb_setarg(1, Box, inc(-1, none)),
    nb_setarg(2, Box, none),
    nb_setarg(3, Box, 0/1),
    nb_setarg(4, Box, none).

%   rexact_built(+Build, ...): the search with the classes built under
%   the rows Build marks (the others are not seen).
rexact_built(Build, P, X, St, R, Budget, Table0, Lag0, Deadline, Box) :-
    (   memberchk(true, Build)
    ->  (   memberchk(false, Build)
        ->  project_table(Table0, Build, TableB)
        ;   TableB = Table0
        ),
        rclasses(P, X, St, R, TableB, Deadline, Classes00, Units0),
        row_filter(5, TableB, Classes00, Classes01),
        pairs_keys_values(Pairs0, Classes01, Units0),
        absorb_rows(Pairs0, TableB, Pairs, Table, Keep0),
        compose_keep(Build, Keep0, Keep),
        pairs_keys_values(Pairs, Classes0, Units),
        (   Table == none
        ->  maplist(plain_class, Classes0, Plain),
            search_classes(Plain, Units, Budget, Deadline, Box)
        ;   rexact_(P, Classes0, Units, Budget, Table, Keep, Lag0, Deadline, Box)
        )
    ;   Table0 = rows(_, _, Res, _),          % every row deferred
        functor(Res, F, N),
        functor(Empty, F, N),
        forall(between(1, N, M), nb_setarg(M, Empty, [])),
        rclasses(P, X, St, R, rows([], [], Empty, []), Deadline, Classes0, Units),
        maplist(plain_class, Classes0, Plain),
        search_classes(Plain, Units, Budget, Deadline, Box)
    ).

%   compose_keep(+Build, +Keep0, -Keep): Keep0 marks the rows of the
%   built table that are left after the merges; Keep marks the
%   problem's rows that are.
compose_keep([], _, []).
compose_keep([B|Bs], Ks0, [K|Ks]) :-
    (   B == true
    ->  Ks0 = [K|Ks1]
    ;   K = false,
        Ks1 = Ks0
    ),
    compose_keep(Bs, Ks1, Ks).

%   A class with no row left: the plain Pareto front of its options.
plain_class(Opts, Class) :-
    maplist([o(C, U, _, Sel), o(C, U, Sel)]>>true, Opts, Os),
    pareto(Os, Front),
    make_class(Front, Class).

%   rexact_(+P, +Classes, +Units, +Budget, +Table, +Keep, +Lag0, +Deadline, !Box)
%
%   The search under the rows of Table (those Keep, a mask over the
%   problem's rows, left after the merges).  The multipliers Ps of Lag
%   are indexed by all the problem's rows (0 for a merged row): children
%   of the enumeration rebuild classes with every row.
%
%   A row that the LP solution meets with room to spare and whose
%   multiplier is 0 does not bind the bound; it is left out of the search
%   (states do not carry it, so the Pareto sets stay small) and the pack
%   found is checked against it.  When the pack breaks it, the search
%   runs again with every row: the first search solved a relaxation, so
%   a pack it finds that meets every row is the optimum.

rexact_(P, Classes0, Units, Budget, Table, Keep, Lag0, Deadline, Box) :-
    P = prob(_, _, _, _, _, User),
    get_dict(table, User, Full),
    Table = rows(Dirs, Bs, _, _),
    (   Lag0 = lag(_, PsFull, _, _)
    ->  project(Keep, PsFull, Ps),          % a subproblem: the root's multipliers
        maplist([Pi, A]>>( Pi =:= 0 -> A = false ; A = true ), Ps, Active0),
        Lag = Lag0
    ;   multipliers(Classes0, Dirs-Bs, Budget, lag(Q, Ps, _), Slack),
        maplist([Pi, S, A]>>( Pi =:= 0, S == true -> A = false ; A = true ), Ps, Slack,
                Active0),
        embed(Keep, Ps, PsFull),
        Full = rows(_, FBs, _, _),
        dot(PsFull, FBs, 0, K0),
        unit_lags(P, Full, Q, PsFull, LUs),
        Lag = lag(Q, PsFull, K0, LUs)
    ),
    (   memberchk(false, Active0)
    ->  (   active_search(Active0, Keep, Classes0, Units, Budget, Table, Lag, Deadline, Box),
            arg(1, Box, inc(IU, Sels)),
            (   IU < 0
            ;   append(Sels, Key0), msort(Key0, Key), key_rows_hold(Full, Key)
            )
        ->  true
        ;   nb_setarg(1, Box, inc(-1, none)),   % the pack breaks a left-out row
            maplist([_, true]>>true, Active0, All),
            active_search(All, Keep, Classes0, Units, Budget, Table, Lag, Deadline, Box)
        )
    ;   active_search(Active0, Keep, Classes0, Units, Budget, Table, Lag, Deadline, Box)
    ).

%   embed(+Keep, +Values, -Full): Values at the rows Keep marks, 0 elsewhere.
embed([], [], []).
embed([K|Ks], Vs0, [V|Vs]) :-
    (   K == true
    ->  Vs0 = [V|Vs1]
    ;   V = 0,
        Vs1 = Vs0
    ),
    embed(Ks, Vs1, Vs).

project([], [], []).
project([K|Ks], [V|Vs], Out) :-
    (   K == true -> Out = [V|Out1] ; Out = Out1 ),
    project(Ks, Vs, Out1).

%   active_search(+Active, +Keep, +Classes, +Units, +Budget, +Table,
%                 +Lag, +Deadline, !Box): the search under the rows of
%   Table that Active marks; Keep maps Table's rows to the problem's.
active_search(Active, Keep, Classes0, Units, Budget, Table0, Lag, Deadline, Box) :-
    (   memberchk(false, Active)
    ->  project_rows(Active, Table0, Classes0, Table, Classes1)
    ;   Table = Table0,
        Classes1 = Classes0
    ),
    (   Table == none
    ->  maplist(plain_class, Classes1, Plain),
        search_classes(Plain, Units, Budget, Deadline, Box)
    ;   embed(Keep, Active, Mask0),
        maplist([K, A, M]>>( K == true, A == true -> M = true ; M = false ), Keep, Mask0, Mask),
        rsearch(Mask, Classes1, Units, Budget, Table, Lag, Deadline, Box)
    ).

%   rsearch(+Mask, +Classes0, +Units, +Budget, +Table, +Lag, +Deadline, !Box):
%   the Lagrangian classes, an incumbent when the class greedy meets the
%   rows, the windows.  Mask marks the problem's rows that Table has:
%   Lag's multipliers (one per problem row) are brought to Table's.
rsearch(Mask, Classes0, Units, Budget, Table, LagFull, Deadline, Box) :-
    LagFull = lag(Q, PsFull, K0, LUs),
    project(Mask, PsFull, Ps),
    Lag = lag(Q, Ps, K0, LUs),
    maplist(lag_class(Lag), Classes0, Classes),
    setarg(4, Box, ci(Classes, Units, LagFull)),
    maplist(view, Classes, Views),
    (   class_greedy(Views, Budget, _, Choice),
        maplist([o(_, _, O), O]>>true, Choice, Chosen),
        chosen_feasible(Chosen, Table, U, Sels)
    ->  nb_setarg(1, Box, inc(U, Sels))
    ;   true
    ),
    lp(Views, Budget, UBL, PL, QL),
    UB is (UBL + K0) div Q,
    nb_setarg(2, Box, UB),
    nb_setarg(3, Box, PL/QL),
    rwindows(Classes, Budget, UB, Lag, Table, Deadline, Box).

chosen_feasible(Chosen, rows(Dirs, Bs, _, Zero), U, Sels) :-
    foldl([ol(_, OU, ORv, _, OSel), t(U0, R0, S0), t(U1, R1, [OSel|S0])]>>
          ( U1 is U0+OU, vadd(R0, ORv, R1) ),
          Chosen, t(0, Zero, []), t(U, Rv, Sels)),
    rows_hold(Dirs, Rv, Bs).

%   rwindows(+Classes, +Budget, +UB, +Lag, +Table, +Deadline, !Box):
%   ctxrelay_packer_search's windows, with thresholds on L.

rwindows(Classes, Budget, UB0, Lag, Table, Deadline, Box) :-
    arg(1, Box, inc(IU, _)),
    (   UB0 =< IU
    ->  true
    ;   IU >= 0
    ->  Step is max(1, (UB0 - IU) // 8),    % the gap of rows is wider than
        rwindow(Classes, Budget, UB0, Step, Lag, Table, Deadline, Box)  % the plain one
    ;   Step is max(1, UB0 // 4000),
        rwindow(Classes, Budget, UB0, Step, Lag, Table, Deadline, Box)
    ).

rwindow(Classes, Budget, UB, Step, Lag, Table, Deadline, Box) :-
    arg(1, Box, inc(IU, _)),
    T is max(IU+1, UB-Step+1),
    nb_setarg(2, Box, UB),
    rwindow_search(Classes, Budget, T, Lag, Table, Deadline, Box),
    arg(1, Box, inc(IU1, _)),
    (   IU1 >= T
    ->  true
    ;   T =< IU1+1
    ->  true
    ;   UB1 is T-1,
        Step1 is Step*2,
        rwindow(Classes, Budget, UB1, Step1, Lag, Table, Deadline, Box)
    ).

rwindow_search(Classes, Budget, T, Lag, Table, Deadline, Box) :-
    Lag = lag(Q, _, K0, _),
    TL is Q*T - K0,
    (   rreduce(3, Classes, Budget, TL, Reduced)
    ->  partition([rc([_], _)]>>true, Reduced, Fixed, Core),

        rcore(Fixed, Core, Budget, T, Lag, Table, Deadline, Box)
    ;   true
    ).


                 /*******************************
                 *          REDUCTION           *
                 *******************************/

%   rreduce(+Rounds, +Classes, +Budget, +TL, -Reduced) is semidet:
%   ctxrelay_packer_bound:reduce/4 over the Lagrangian views, testing
%   every option of a class (not only those on its (cost, L) front: an
%   option behind it may be the one the rows need).

rreduce(Rounds, Classes, Budget, TL, Reduced) :-
    maplist(view, Classes, Views),
    lp(Views, Budget, Bound, P, Q),
    Bound >= TL,
    maplist(rc_values(P, Q), Classes, Valued, Bests),
    sum_list(Bests, SumBest),
    D is P*Budget + SumBest,
    TQ is TL*Q,
    D >= TQ,
    foldl(keep_rc(D, TQ), Valued, Bests, Classes, Classes1, false, Changed),
    (   Rounds > 1,
        Changed == true
    ->  R1 is Rounds-1,
        rreduce(R1, Classes1, Budget, TL, Reduced)
    ;   Reduced = Classes1
    ).

rc_values(P, Q, rc(Opts, _), Valued, Best) :-
    maplist({P, Q}/[O, V-O]>>( O = ol(C, _, _, L, _), V is Q*L - P*C ), Opts, Valued),
    pairs_keys(Valued, Vs),
    max_list(Vs, Best).

keep_rc(D, TQ, Valued, Best, Class0, Class, Ch0, Ch) :-
    Min is TQ - D + Best,
    include({Min}/[V-_]>>(V >= Min), Valued, Kept0),
    (   same_length(Kept0, Valued)
    ->  Class = Class0,
        Ch = Ch0
    ;   pairs_values(Kept0, Kept),
        class_view(Kept, View),
        Class = rc(Kept, View),
        Ch = true
    ).


                 /*******************************
                 *          CORE SEARCH         *
                 *******************************/

%   rcore(+Fixed, +Core, +Budget, +T, +Lag, +Table, +Deadline, !Box)
%
%   The dynamic program over the core classes.  A state is
%   s(Cost, Util, Rv, L, Sels); it survives a stage when it fits, when
%   L + the suffix LP bound under L at the remaining capacity + K0
%   reaches Q*max(T, incumbent+1), and when every row can still be met
%   by what the remaining classes can add (their least and largest
%   contributions).  Completing a state with the cheapest options of the
%   remaining classes gives an incumbent when it satisfies the rows.

rcore(Fixed, Core0, Budget, T, Lag, Table, Deadline, Box) :-
    Table = rows(Dirs, Bs, _, Zero),
    partition(touched_class, Core0, Touched, Untouched),
    append(Touched, Untouched, Core),       % once past the last class of a
                                            % row, its clamped value is one
    foldl([rc([ol(C, U, Rv, L, Sel)], _), s(C0, U0, R0, L0, S0),
           s(C1, U1, R1, L1, [Sel|S0])]>>
          ( C1 is C0+C, U1 is U0+U, vadd(R0, Rv, R1), L1 is L0+L ),
          Fixed, s(0, 0, Zero, 0, []), Start),
    maplist(view, Core, Views),
    suffix_bounds(Views, [_|Bounds]),
    suffix_rests(Core, Zero, [_|Rests]),
    suffix_cheapest(Core, Zero, [_|Cheapest]),
    Start = s(SC, _, _, _, _),
    (   SC =< Budget
    ->  rstages(Core, Bounds, Rests, Cheapest, [Start],
                ctx(Budget, T, Lag, Dirs, Bs, Deadline), Box)
    ;   true
    ).

touched_class(rc(Opts, _)) :-
    member(ol(_, _, Rv, _, _), Opts),
    member(R, Rv),
    R =\= 0,
    !.

%   suffix_rests(+Classes, +Zero, -Rests): per suffix, mm(Mins, Maxs)
%   the least and largest row contributions of its classes.
suffix_rests(Classes, Zero, Rests) :-
    reverse(Classes, Rev),
    foldl([rc(Opts, _), [mm(Mn0, Mx0)|T], [mm(Mn, Mx), mm(Mn0, Mx0)|T]]>>
          ( maplist([ol(_, _, Rv, _, _), Rv]>>true, Opts, [R1|Rvs]),
            foldl([Rv, A0, A]>>maplist([X, Y, Z]>>(Z is min(X, Y)), Rv, A0, A), Rvs, R1, Mn1),
            foldl([Rv, A0, A]>>maplist([X, Y, Z]>>(Z is max(X, Y)), Rv, A0, A), Rvs, R1, Mx1),
            vadd(Mn0, Mn1, Mn), vadd(Mx0, Mx1, Mx) ),
          Rev, [mm(Zero, Zero)], Rests).

%   suffix_cheapest(+Classes, +Zero, -Cs): per suffix, the completion by
%   the cheapest option of every class, cc(C, U, Rv, Sels).
suffix_cheapest(Classes, Zero, Cs) :-
    reverse(Classes, Rev),
    foldl([rc([ol(C, U, Rv, _, Sel)|_], _), [cc(C0, U0, R0, S0)|T],
           [cc(C1, U1, R1, [Sel|S0]), cc(C0, U0, R0, S0)|T]]>>
          ( C1 is C0+C, U1 is U0+U, vadd(R0, Rv, R1) ),
          Rev, [cc(0, 0, Zero, [])], Cs).

rstages([], [], [], [], _, _, _).
rstages([rc(Opts, _)|Classes], [F|Bounds], [Rest|Rests], [Cheap|Cheaps], States0,
        Ctx, Box) :-
    Ctx = ctx(Budget, T, Lag, Dirs, Bs, Deadline),
    in_time(Deadline),
    arg(1, Box, inc(IU, _)),
    Need is max(T, IU+1),
    Lag = lag(Q, _, K0, _),
    NeedL is Q*Need - K0,
    extend_all(Opts, States0, x(Budget, F, NeedL, Rest, Dirs, Bs), Cands),
    mc_pareto(Dirs, Cands, States),
    (   States == []
    ->  true
    ;   try_complete(States, Cheap, Budget, Dirs, Bs, Box),
        rstages(Classes, Bounds, Rests, Cheaps, States, Ctx, Box)
    ).

%   extend_all(+Opts, +States, +X, -Cands): every state extended by
%   every option (options outer, as the order of the candidates decides
%   which of two equal ones the Pareto filter keeps).  Plain recursion,
%   not findall/3: a state's selection list grows with the stages, and
%   findall/3 would copy it for every candidate.
extend_all([], _, _, []).
extend_all([O|Os], States, X, Cands) :-
    extend_each(States, O, X, Cands, Tail),
    extend_all(Os, States, X, Tail).

extend_each([], _, _, Tail, Tail).
extend_each([S0|Ss], O, X, Cands, Tail) :-
    X = x(Budget, F, NeedL, Rest, Dirs, Bs),
    (   extend(S0, O, Budget, F, NeedL, Rest, Dirs, Bs, S)
    ->  Cands = [S|Cands1]
    ;   Cands = Cands1
    ),
    extend_each(Ss, O, X, Cands1, Tail).

extend(s(C0, U0, R0, L0, Sels), ol(OC, OU, ORv, OL, OSel), Budget, F, NeedL,
       mm(Mn, Mx), Dirs, Bs, s(C, U, Rv, L, [OSel|Sels])) :-
    C is C0+OC,
    C =< Budget,
    L is L0+OL,
    R is Budget-C,
    suffix_value(F, R, V),
    L+V >= NeedL,
    U is U0+OU,
    vadd(R0, ORv, Rv1),
    reachable(Dirs, Rv1, Mn, Mx, Bs, Rv).

%   reachable(+Dirs, +Rv0, +Mins, +Maxs, +Bs, -Rv): every row can still be
%   met by adding what the remaining classes can add (between Mins and
%   Maxs).  Rv is Rv0 clamped: two values of a row that every completion
%   keeps within bounds are equivalent (for `=<`, all values up to
%   B - Max; for `>=`, all values from B - Min), so they are made equal
%   and the row stops separating states the Pareto filter should merge.
%   Once no remaining class touches a row, every surviving state has the
%   same clamped value there.

reachable([], [], [], [], [], []).
reachable([D|Ds], [R0|Rs0], [Mn|Mns], [Mx|Mxs], [B|Bs], [R|Rs]) :-
    (   D == le
    ->  R0+Mn =< B,
        R is max(R0, B-Mx)
    ;   D == ge
    ->  R0+Mx >= B,
        R is min(R0, B-Mn)
    ;   R0+Mn =< B,
        R0+Mx >= B,
        R = R0
    ),
    reachable(Ds, Rs0, Mns, Mxs, Bs, Rs).

try_complete(States, cc(CC, CU, CRv, CSels), Budget, Dirs, Bs, Box) :-
    arg(1, Box, inc(IU, _)),
    (   member(s(C, U, Rv, _, Sels), States),
        U+CU > IU,
        C+CC =< Budget,
        vadd(Rv, CRv, R1),
        rows_hold(Dirs, R1, Bs)
    ->  append(CSels, Sels, All),
        U1 is U+CU,
        best_completion(States, cc(CC, CU, CRv, CSels), Budget, Dirs, Bs, U1, All, UBest, SBest),
        nb_setarg(1, Box, inc(UBest, SBest))
    ;   true
    ).

best_completion([], _, _, _, _, U, S, U, S).
best_completion([s(C, U0, Rv, _, Sels)|Ss], Cheap, Budget, Dirs, Bs, UB0, SB0, UB, SB) :-
    Cheap = cc(CC, CU, CRv, CSels),
    U is U0+CU,
    (   U > UB0,
        C+CC =< Budget,
        vadd(Rv, CRv, R1),
        rows_hold(Dirs, R1, Bs)
    ->  append(CSels, Sels, S1),
        best_completion(Ss, Cheap, Budget, Dirs, Bs, U, S1, UB, SB)
    ;   best_completion(Ss, Cheap, Budget, Dirs, Bs, UB0, SB0, UB, SB)
    ).
