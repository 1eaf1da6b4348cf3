:- module(ctxrelay_packer_problem,
          [ check_problem/5,        % +Units, +Constraints, +Budget, +Context,
                                    % -Problem
            check_options/4,        % +Options, -TimeLimit, -MaxAlternatives,
                                    % -Context
            py_term/2,              % +In, -Term
            deadline/2,             % +TimeLimit, -Deadline
            in_time/1               % +Deadline
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(assoc)).
:- use_module(library(apply)).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(option)).
:- use_module(library(yall)).
:- use_module(user, [ source_term/2, is_user_constraint/1, user_constraint/2,
                      compile_user/4 ]).

/** <module> The packer's input: checked units, constraints and options

The public predicates of the packer check their arguments here, once, and
work on the compact problem term below; nothing after this module
validates again.  Terms built in Python arrive through janus as
`-(Name, A1, ...)` (a tuple) and `@(true)`; py_term/2 is the one adapter.
*/

                 /*******************************
                 *          VALIDATION          *
                 *******************************/

%   check_problem(+Units, +Constraints, +Budget, +Context, -Problem)
%
%   Problem is prob(N, Ids, Us, Cs, Budget, User): Ids = ids(Id1, ...),
%   Us = us(u(Vs, Mandatory), ...) with Vs = [v(K, Name, Cost, Utility)]
%   (K the 1-based variant index), Cs a list of together(Is), amo(Is)
%   and requires(I, J) over 1-based unit indexes (sets sorted, no
%   duplicates), and User the compiled user constraints
%   (ctxrelay_packer_user:compile_user/3; `none` when there are none).
%   Context is the dict that if(Condition, C) constraints read.
%   Constraints may be module-qualified (M:List): constraint(Goal) calls
%   an unqualified Goal in M.

check_problem(Units, Constraints0, Budget, Context,
              prob(N, Ids, Us, Cs, Budget, User)) :-
    strip_module(Constraints0, Module, Constraints),
    must_be(list, Units),
    must_be(list, Constraints),
    must_be(nonneg, Budget),
    maplist(check_unit, Units, IdList, UList),
    length(IdList, N),
    id_index(IdList, Index),
    Ids =.. [ids|IdList],
    Us =.. [us|UList],
    maplist(check_constraint(Index), Constraints, Cs0),
    (   memberchk(user(_, _), Cs0)
    ->  partition([C]>>(C = user(_, _)), Cs0, Sources, Cs),
        maplist(unit_props, Units, PropList),
        Props =.. [props|PropList],
        compile_user(Sources, units(Ids, Us, Props, Index, Budget, Context), Module,
                     User)
    ;   Cs = Cs0,
        User = none
    ).

%   The properties of a unit as user constraints' selectors see them.
unit_props(U0, Props) :-
    py_term(U0, unit(_, _, Props0)),
    maplist(prop_term, Props0, Props).

prop_term(P0, P) :-
    py_term(P0, P1),
    (   P1 = mandatory(B0)
    ->  py_bool(B0, B),
        P = mandatory(B)
    ;   P = P1
    ).

check_unit(U0, Id, u(Vs, Mandatory)) :-
    py_term(U0, U),
    (   U = unit(Id, Vs0, Props)
    ->  true
    ;   type_error(pack_unit, U0)
    ),
    check_id(Id),
    (   is_list(Vs0) -> true ; must_be(list, Vs0) ),
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
    (   is_list(Props) -> true ; must_be(list, Props) ),
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
    (   atomic(Name) -> true ; must_be(atomic, Name) ),
    nonneg(Cost),
    nonneg(Utility),
    K1 is K+1.

%   must_be(nonneg, X) without its type dispatch when X is one (a pack
%   checks a few hundred numbers).
nonneg(X) :-
    (   integer(X), X >= 0 -> true ; must_be(nonneg, X) ).

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

%   id_index(+IdList, -Index): Index maps each id to its 1-based position.
%   Built from the sorted pairs in one pass (one put_assoc/4 per unit cost
%   a tenth of a pack); with a duplicate id, the pass in order below names
%   the same id the error always named.
id_index(IdList, Index) :-
    numbered_ids(IdList, 1, Pairs0),
    keysort(Pairs0, Pairs),
    (   adjacent_key(Pairs)
    ->  empty_assoc(Index0),
        foldl(index_id, IdList, Index0-1, Index-_)
    ;   ord_list_to_assoc(Pairs, Index)
    ).

numbered_ids([], _, []).
numbered_ids([Id|Ids], I, [Id-I|Pairs]) :-
    I1 is I+1,
    numbered_ids(Ids, I1, Pairs).

adjacent_key([K1-_, K2-_|T]) :-
    (   K1 == K2
    ->  true
    ;   adjacent_key([K2-_|T])
    ).

index_id(Id, A0-I, A-I1) :-
    (   get_assoc(Id, A0, _)
    ->  domain_error(unique_unit_id, Id)
    ;   put_assoc(Id, A0, I, A),
        I1 is I+1
    ).

check_constraint(Index, C0, C) :-
    (   var(C0)
    ->  instantiation_error(C0)
    ;   source_term(C0, C1)
    ),
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
    ;   is_user_constraint(C1)
    ->  user_constraint(C1, C)
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

%   check_options(+Options, -TimeLimit, -MaxAlternatives, -Context)
%
%   The options of pack/5: time_limit(Seconds), max_alternatives(N),
%   context(Dict).  Unknown options are errors (one rule for every
%   predicate of the project).

check_options(Options, TimeLimit, MaxAlt, Context) :-
    must_be(list, Options),
    maplist(check_option, Options, Opts),
    option(time_limit(TimeLimit), Opts, inf),
    option(max_alternatives(MaxAlt), Opts, inf),
    option(context(Context), Opts, _{}).

check_option(O0, O) :-
    py_term(O0, O),
    (   O = time_limit(T)
    ->  (   T == inf
        ->  true
        ;   must_be(number, T),
            (   T >= 0
            ->  true
            ;   domain_error(non_negative_time_limit, T)
            )
        )
    ;   O = max_alternatives(N)
    ->  (   N == inf
        ->  true
        ;   must_be(nonneg, N)
        )
    ;   O = context(Ctx)
    ->  must_be(dict, Ctx)
    ;   domain_error(pack_option, O0)
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
                 *          TIME LIMIT          *
                 *******************************/

%   deadline(+TimeLimit, -Deadline): the wall-clock time at which a
%   search started now must stop (`inf`: never).  A float infinity (what
%   Python's float('inf') becomes) is `inf` too: adding it to the clock
%   would raise evaluation_error(float_overflow).

deadline(inf, inf) :- !.
deadline(Limit, inf) :- Limit =:= inf, !.
deadline(Limit, Deadline) :-
    get_time(Now),
    Deadline is Now+Limit.

%   in_time(+Deadline): throws `packer_time_limit` once Deadline has
%   passed.  The searches call it once per stage, and the solver catches
%   the ball to return its incumbent with a gap.

in_time(inf) :- !.
in_time(Deadline) :-
    get_time(Now),
    (   Now =< Deadline
    ->  true
    ;   throw(packer_time_limit)
    ).
