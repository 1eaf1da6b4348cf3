:- module(ctxrelay_packer_checks,
          [ post_user/4,            % +Problem, +Vars, +Totals, -Model
            side_model/2,           % +Problem, -Side
            pack_passes/3,          % +Problem, +Side, +Key
            side_admits/2,          % +Side, +RestrictionsArray
            key_decisions/3         % +Key, +N, -Decisions
          ]).
:- use_module(library(apply)).
:- use_module(library(clpfd)).
:- use_module(library(lists)).
:- use_module(library(yall)).
:- use_module(model, [post_choices/3]).
:- use_module(rows, [key_rows_hold/2]).

/** <module> Users' constraints on the CLP(FD) model and on complete packs

post_user/4 posts the compiled user constraints on the CLP(FD) model of
pack_constraints/7 (rows as scalar products, checks as reified formulas)
and calls users' goals with the model (the dict below).  The search does
not label that model; for the constraints it cannot compile into its
bound (checks and goals), it keeps a *side model*: the choice variables,
the structural constraints and those constraints only.  A complete pack
passes when its checks hold and binding it into the side model
propagates; a subproblem of the enumeration whose restrictions make the
side model fail holds no pack that passes, and is dropped unsolved.

The model a goal receives is

    model{units:Units, tokens:Tokens, utility:Utility, budget:Budget,
          context:Context}

with Units a list of unit{id:Id, props:Props, in:In, variants:Variants,
tokens:TokensExpr, utility:UtilityExpr} in the order of the units: In the
0/1 inclusion variable, Variants a list Name-B of the variants' 0/1
variables, TokensExpr and UtilityExpr CLP(FD) expressions of the unit's
tokens and utility; Tokens and Utility the totals (variables in
pack_constraints/7, expressions in the side model).
*/

%!  post_user(+Problem, +Vars, +Totals, -Model) is semidet.
%
%   Post the user constraints of Problem on the model whose choice
%   variables are Vars (choice(Id, In, Bs) in the order of the units).
%   Totals is Tokens-Utility.  Fails when propagation (or a goal) fails.

post_user(prob(_, _, Us, _, Budget, User), Vars, Totals, Model) :-
    (   User == none
    ->  Model = none
    ;   VarArr =.. [vars|Vars],
        get_dict(rows, User, Rows),
        get_dict(checks, User, Checks),
        get_dict(goals, User, Goals),
        get_dict(unsat, User, Unsat),
        Unsat == [],
        maplist(post_row(VarArr), Rows),
        maplist(post_check(VarArr), Checks),
        (   Goals == []
        ->  Model = none
        ;   model_dict(User, Us, Vars, Totals, Budget, Model),
            maplist(call_goal(Model), Goals)
        )
    ).

post_row(VarArr, row(_, Op, B, Coefs)) :-
    coef_vars(Coefs, VarArr, Cs, Xs),
    fd_op(Op, FOp),
    scalar_product(Cs, Xs, FOp, B).

fd_op(=<, #=<).
fd_op(>=, #>=).
fd_op(=, #=).
fd_op(\=, #\=).

coef_vars([], _, [], []).
coef_vars([M-Ks|T], VarArr, Cs, Xs) :-
    arg(M, VarArr, choice(_, _, Bs)),
    coef_pairs(Ks, Bs, Cs, Xs, Cs1, Xs1),
    coef_vars(T, VarArr, Cs1, Xs1).

coef_pairs([], [], Cs, Xs, Cs, Xs).
coef_pairs([K|Ks], [B|Bs], Cs0, Xs0, Cs, Xs) :-
    (   K =:= 0
    ->  Cs0 = Cs1, Xs0 = Xs1
    ;   Cs0 = [K|Cs1], Xs0 = [B|Xs1]
    ),
    coef_pairs(Ks, Bs, Cs1, Xs1, Cs, Xs).

post_check(VarArr, check(_, Bool)) :-
    formula(Bool, VarArr, F),
    call(F).

formula(lin(Coefs, Op, B), VarArr, F) :-
    coef_vars(Coefs, VarArr, Cs, Xs),
    foldl([C, X, E0, E0+C*X]>>true, Cs, Xs, 0, E),
    fd_op(Op, FOp),
    F =.. [FOp, E, B].
formula(not(A), VarArr, #\ FA) :- formula(A, VarArr, FA).
formula(and(A, B), VarArr, FA #/\ FB) :- formula(A, VarArr, FA), formula(B, VarArr, FB).
formula(or(A, B), VarArr, FA #\/ FB) :- formula(A, VarArr, FA), formula(B, VarArr, FB).
formula(imp(A, B), VarArr, FA #==> FB) :- formula(A, VarArr, FA), formula(B, VarArr, FB).
formula(equiv(A, B), VarArr, FA #<==> FB) :- formula(A, VarArr, FA), formula(B, VarArr, FB).

call_goal(Model, goal(_, Goal)) :-
    call(Goal, Model).

model_dict(User, Us, Vars, Tokens-Utility, Budget,
           model{units:Units, tokens:Tokens, utility:Utility, budget:Budget,
                 context:Context}) :-
    get_dict(units, User, units(_, _, Props, _, _, Context)),
    foldl(unit_dict(Us, Props), Vars, Units, 1, _).

unit_dict(Us, Props, choice(Id, In, Bs), unit{id:Id, props:P, in:In, variants:Named,
                                              tokens:TE, utility:UE}, M, M1) :-
    arg(M, Us, u(Vs, _)),
    arg(M, Props, P),
    maplist([v(_, Name, _, _), B, Name-B]>>true, Vs, Bs, Named),
    foldl([v(_, _, C, _), B, E0, E0+C*B]>>true, Vs, Bs, 0, TE),
    foldl([v(_, _, _, U), B, E0, E0+U*B]>>true, Vs, Bs, 0, UE),
    M1 is M+1.


                 /*******************************
                 *          SIDE MODEL          *
                 *******************************/

%!  side_model(+Problem, -Side) is semidet.
%
%   Side is `none` when Problem has no check and no goal, else
%   side(VarArr, Checks, Goals, Table): the choice variables (an array)
%   with the structural constraints, the checks and the goals posted.
%   Fails when propagation shows that no pack can pass.

side_model(P, Side) :-
    P = prob(_, Ids, Us, Cs, _, User),
    (   User == none
    ->  Side = none
    ;   get_dict(checks, User, Checks),
        get_dict(goals, User, Goals),
        (   Checks == [], Goals == []
        ->  Side = none
        ;   Ids =.. [_|IdList],
            Us =.. [_|UList],
            maplist([Id, u(Vs, M), cu(Id, Vs, M)]>>true, IdList, UList, CUs),
            post_choices(CUs, Cs, Vars),
            VarArr =.. [vars|Vars],
            maplist(post_check(VarArr), Checks),
            (   Goals == []
            ->  true
            ;   totals(Us, Vars, Totals),
                model_dict(User, Us, Vars, Totals, _, Model0),
                P = prob(_, _, _, _, Budget, _),
                Model = Model0.put(budget, Budget),
                maplist(call_goal(Model), Goals)
            ),
            get_dict(table, User, Table),
            Side = side(VarArr, Checks, Goals, Table)
        )
    ).

totals(Us, Vars, T-U) :-
    foldl({Us}/[choice(_, _, Bs), t(M, T0, U0), t(M1, T1, U1)]>>
          ( arg(M, Us, u(Vs, _)),
            foldl([v(_, _, C, Ut), B, a(X0, Y0), a(X0+C*B, Y0+Ut*B)]>>true,
                  Vs, Bs, a(T0, U0), a(T1, U1)),
            M1 is M+1 ),
          Vars, t(1, 0, 0), t(_, T, U)).

%!  pack_passes(+Problem, +Side, +Key) is semidet.
%
%   The pack Key (sorted Unit-Variant list) satisfies the rows, the
%   checks and the goals of Problem.

pack_passes(prob(N, _, _, _, _, User), Side, Key) :-
    (   User == none
    ->  true
    ;   get_dict(unsat, User, []),
        get_dict(table, User, Table),
        (   Table == none
        ->  true
        ;   key_rows_hold(Table, Key)
        ),
        (   Side == none
        ->  true
        ;   Side = side(VarArr, Checks, Goals, _),
            key_decisions(Key, N, D),
            forall(member(check(_, Bool), Checks), holds(Bool, D)),
            (   Goals == []
            ->  true
            ;   \+ \+ bind_pack(N, D, VarArr)
            )
        )
    ).

holds(lin(Coefs, Op, B), D) :-
    lin_value(Coefs, D, 0, V),
    op_holds(Op, V, B).
holds(not(A), D) :- \+ holds(A, D).
holds(and(A, B), D) :- holds(A, D), holds(B, D).
holds(or(A, B), D) :- ( holds(A, D) -> true ; holds(B, D) ).
holds(imp(A, B), D) :- ( holds(A, D) -> holds(B, D) ; true ).
holds(equiv(A, B), D) :- ( holds(A, D) -> holds(B, D) ; \+ holds(B, D) ).

lin_value([], _, V, V).
lin_value([M-Ks|T], D, V0, V) :-
    arg(M, D, K),
    (   K =:= 0
    ->  V1 = V0
    ;   nth1(K, Ks, C),
        V1 is V0+C
    ),
    lin_value(T, D, V1, V).

op_holds(=<, V, B) :- V =< B.
op_holds(>=, V, B) :- V >= B.
op_holds(=, V, B) :- V =:= B.
op_holds(\=, V, B) :- V =\= B.

bind_pack(N, D, VarArr) :-
    bind_units(1, N, D, VarArr).

bind_units(M, N, D, VarArr) :-
    (   M > N
    ->  true
    ;   arg(M, D, K),
        arg(M, VarArr, choice(_, In, Bs)),
        (   K =:= 0
        ->  In = 0
        ;   In = 1,
            bind_variant(Bs, 1, K)
        ),
        M1 is M+1,
        bind_units(M1, N, D, VarArr)
    ).

bind_variant([], _, _).
bind_variant([B|Bs], I, K) :-
    (   I =:= K -> B = 1 ; B = 0 ),
    I1 is I+1,
    bind_variant(Bs, I1, K).

%!  side_admits(+Side, +R) is semidet.
%
%   The restrictions R (array unit -> allowed options, 0 = out) leave the
%   side model consistent.  Leaves no binding behind.

side_admits(none, _) :- !.
side_admits(side(VarArr, _, _, _), R) :-
    \+ \+ restrict(VarArr, R).

restrict(VarArr, R) :-
    functor(R, _, N),
    restrict_units(1, N, VarArr, R).

restrict_units(M, N, VarArr, R) :-
    (   M > N
    ->  true
    ;   arg(M, R, O),
        arg(M, VarArr, choice(_, In, Bs)),
        (   O == [0]
        ->  In = 0
        ;   memberchk(0, O)
        ->  true
        ;   In = 1
        ),
        restrict_variants(Bs, 1, O),
        M1 is M+1,
        restrict_units(M1, N, VarArr, R)
    ).

restrict_variants([], _, _).
restrict_variants([B|Bs], K, O) :-
    (   memberchk(K, O) -> true ; B = 0 ),
    K1 is K+1,
    restrict_variants(Bs, K1, O).

%!  key_decisions(+Key, +N, -D) is det.
%
%   D is an array unit -> chosen variant (0: out) of the pack Key.

key_decisions(Key, N, D) :-
    functor(D, d, N),
    forall(member(M-K, Key), nb_setarg(M, D, K)),
    forall(between(1, N, I), ( arg(I, D, X), var(X) -> nb_setarg(I, D, 0) ; true )).
