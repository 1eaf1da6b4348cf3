:- module(ctxrelay_packer_diagnosis,
          [ no_pack_error/5         % +Prep, +Units, +Constraints, +Options, +Budget
          ]).
:- use_module(library(aggregate)).
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(yall)).
:- use_module(problem, [check_problem/5, check_options/4]).
:- use_module(structure, [prepare/2]).
:- use_module(greedy, [initial_allowed/2, group_variants/4, group_chain/3]).
:- use_module(alternatives, [solutions/4]).
:- use_module(user, [source_term/2, is_user_constraint/1, user_constraint/2]).

/** <module> Why there is no pack

pack_best/5 explains an empty problem, in this order:

  1. the mandatory units contradict the structural constraints (no
     budget would do): inconsistent_constraints naming a mandatory unit
     and a minimal set of constraints that excludes it;
  2. the cheapest admissible fill of the mandatory units does not fit
     the budget: context_overflow with that cost;
  3. users' constraints cannot be met with the mandatory units (and,
     when it takes it, the budget): inconsistent_constraints naming a
     minimal set of them, the mandatory units they select, and the
     budget when it is part of the conflict.

Minimal sets are found by QuickXplain (Junker, 2004): a conflict set
with O(k log(n/k)) consistency tests instead of one per constraint.  The
messages are in ctxrelay_packer_messages.
*/

%!  no_pack_error(+Prep, +Units, +Constraints, +Options, +Budget)
%
%   Throws the error that says why the prepared problem Prep (from
%   Units, Constraints, Budget and Options) has no pack.

no_pack_error(prep(inconsistent(U), P, _, _), Units, M:Constraints, Options, Budget) :-
    !,
    P = prob(_, Ids, _, _, _, _),
    arg(U, Ids, Id),
    partition(structural_term, Constraints, Structural, _),
    check_options(Options, _, _, Ctx),
    (   quickxplain([], Structural, structural_ok(Units, M, Budget, Ctx), Conflict)
    ->  maplist(shown, Conflict, Shown)
    ;   Shown = []
    ),
    throw(error(ctxrelay(inconsistent_constraints, _{unit:Id, constraints:Shown}), _)).
no_pack_error(prep(consistent, P, X, St), Units, Constraints, Options, Budget) :-
    X = str(G, _, GM, _, _, _, _, _),
    initial_allowed(P, Allowed),
    aggregate_all(sum(C),
                  ( between(1, G, Gi),
                    arg(Gi, St, in),
                    group_variants(Gi, GM, Allowed, MVs),
                    group_chain(MVs, b(C, _, _), _)
                  ),
                  MC),
    (   MC > Budget
    ->  throw(error(ctxrelay(context_overflow,
                             _{mandatory_cost:MC, budget:Budget}), _))
    ;   user_conflict(P, Units, Constraints, Options, Budget)
    ).

structural_term(C0) :-
    source_term(C0, C),
    \+ is_user_constraint(C).

%   shown(+Constraint, -Text): the constraint as text (the details of an
%   error cross to Python, which takes no Prolog compound).
shown(C0, Text) :-
    (   string(C0)
    ;   atom(C0), source_term(C0, C), C \== C0
    ),
    !,
    atom_string(C0, Text).                  % as the caller wrote it
shown(C0, Text) :-
    source_term(C0, C1),
    (   is_user_constraint(C1)
    ->  user_constraint(C1, user(C, _))
    ;   C = C1
    ),
    format(string(Text), "~W", [C, [quoted(true), spacing(next_argument),
                                   module(ctxrelay_packer_user)]]).

structural_ok(Units, M, Budget, Ctx, Cs) :-
    check_problem(Units, M:Cs, Budget, Ctx, Problem),
    prepare(Problem, prep(consistent, _, _, _)).

%   user_conflict(+P, +Units, +Constraints, +Options, +Budget)
%
%   The users' constraints make the problem empty: find a minimal set of
%   them that does it with the structural constraints, and whether it
%   takes the budget too.  A consistency test that hits the time limit
%   counts as consistent, so the set may then be larger than minimal.

user_conflict(_P, Units, M:Constraints, Options, Budget) :-
    partition(structural_term, Constraints, Structural, User),
    check_options(Options, TimeLimit0, _, _),
    (   TimeLimit0 == inf -> TimeLimit = 5 ; TimeLimit = TimeLimit0 ),
    Test = packs_exist(Units, M, Structural, Options, TimeLimit),
    (   quickxplain([], User, call(Test, Budget), Conflict0)
    ->  Conflict = Conflict0
    ;   Conflict = User
    ),
    maplist(shown, Conflict, Shown),
    mandatory_selected(Units, M, Conflict, Structural, Options, Budget, Mand),
    unlimited(Units, Unlimited),
    (   call(Test, Unlimited, Conflict)
    ->  Details = _{constraints:Shown, mandatory:Mand, budget:Budget}
    ;   Details = _{constraints:Shown, mandatory:Mand}
    ),
    throw(error(ctxrelay(inconsistent_constraints, Details), _)).

packs_exist(Units, M, Structural, Options, TimeLimit, Budget, User) :-
    append(Structural, User, Cs),
    check_options(Options, _, _, Ctx),
    check_problem(Units, M:Cs, Budget, Ctx, Problem),
    prepare(Problem, Prep),
    Prep = prep(consistent, _, _, _),
    catch(once(solutions(Prep, TimeLimit, 0, _)),
          error(ctxrelay(pack_time_limit, _), _),
          true).

%   A budget that holds every unit at its largest variant.
unlimited(Units, Budget) :-
    check_problem(Units, [], 0, _{}, prob(_, _, Us, _, _, _)),
    Us =.. [_|UList],
    foldl([u(Vs, _), B0, B]>>( aggregate_all(max(C), member(v(_, _, C, _), Vs), M),
                               B is B0+M ),
          UList, 0, Budget).

%   The mandatory units that the conflicting constraints select (a
%   nonzero coefficient in one of their relations).
mandatory_selected(Units, Module, Conflict, Structural, Options, Budget, Ids) :-
    append(Structural, Conflict, Cs),
    check_options(Options, _, _, Ctx),
    check_problem(Units, Module:Cs, Budget, Ctx, prob(_, IdArr, Us, _, _, User)),
    (   User == none
    ->  Ids = []
    ;   get_dict(rows, User, Rows),
        get_dict(checks, User, Checks),
        findall(M, ( member(row(_, _, _, Coefs), Rows), member(M-_, Coefs) ), Ms1),
        findall(M, ( member(check(_, Bool), Checks), sub_term(lin(Coefs, _, _), Bool),
                     member(M-_, Coefs) ), Ms2),
        append(Ms1, Ms2, Ms0),
        sort(Ms0, Ms),
        findall(Id, ( member(M, Ms), arg(M, Us, u(_, true)), arg(M, IdArr, Id) ), Ids)
    ).


                 /*******************************
                 *          QUICKXPLAIN         *
                 *******************************/

%   quickxplain(+Background, +Candidates, :Consistent, -Conflict) is semidet.
%
%   Conflict is a minimal subset of Candidates such that Background plus
%   Conflict is inconsistent (call(Consistent, Set) fails); fails when
%   Background plus all Candidates is consistent.

quickxplain(B, C, Consistent, Conflict) :-
    append(B, C, All),
    \+ call(Consistent, All),
    (   C == []
    ->  Conflict = []
    ;   qx(B, [], C, Consistent, Conflict)
    ).

qx(B, D, C, Consistent, X) :-
    (   D \== [],
        \+ call(Consistent, B)
    ->  X = []
    ;   C = [_]
    ->  X = C
    ;   length(C, N),
        K is N // 2,
        length(C1, K),
        append(C1, C2, C),
        append(B, C1, B1),
        qx(B1, C1, C2, Consistent, X2),
        append(B, X2, B2),
        qx(B2, X2, C1, Consistent, X1),
        append(X1, X2, X)
    ).
