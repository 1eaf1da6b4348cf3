:- module(ctxrelay_packer_user,
          [ user_constraints/2,     % +List, -Normalised
            user_constraint/2,      % +Term, -user(Source, Ast)
            is_user_constraint/1,   % +Term
            source_term/2,          % +In, -Term
            compile_user/4,         % +Sources, +Units, +Module, -User
            row_table/4,            % +Rows, +Us, +N, -Table
            text_unify/2            % ?A, ?B
          ]).
:- use_module(library(apply)).
:- use_module(library(clpfd)).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).

/** <module> Users' constraints: the vocabulary and its compilation

A user constraint is a CLP(FD) relation over per-unit variables and
aggregates of the units, written in the packer's constraint list as
`constraint(C)` (or C alone), or as text (Python strings arrive as atoms):

    Relation  := Expr Op Expr            Op: #=< #< #>= #> #= #\=
                                          (=< < >= > =:= =\= too)
               | Relation #/\ Relation | Relation #\/ Relation
               | Relation #==> Relation | Relation #<== Relation
               | Relation #<==> Relation | #\ Relation
               | if(Condition, Relation)
    Expr      := Integer | Expr + Expr | Expr - Expr | - Expr
               | Integer * Expr | Expr * Integer | budget
               | count(Selector) | tokens(Selector) | utility(Selector)
               | in(Id) | variant(Id, Name)
               | count | tokens | utility       (over all units)
    Selector  := all | id(Id) | ids(Ids) | mandatory | optional
               | (Selector, Selector) | (Selector ; Selector) | \+ Selector
               | Property                       (a unit whose properties
                                                 unify with it: kind(K),
                                                 tier(T), thread(T), ...)
    Condition := Key(Value) (the pack's context(Dict) holds Key: Value)
               | (Condition, Condition) | (Condition ; Condition)
               | \+ Condition | true | false

`constraint(Goal)` for any other callable Goal calls Goal with the model
(user_model/5) as an extra argument; Goal posts CLP(FD) constraints on its
variables.

Compilation turns every relation into a linear row over the 0/1
variables of the variants (count = sum of In, tokens = sum of cost times
variant, ...).  A conjunction of rows that are `=<`, `>=` or `=` goes to
the search as resource rows (ctxrelay_packer_rows); anything else (`#\=`,
disjunctions, implications, goals) is a *check*: evaluated on every
complete pack and posted on a small CLP(FD) side model whose propagation
prunes whole subproblems of the enumeration.
*/

:- multifile prolog:message//1.

                 /*******************************
                 *     SYNTAX (NO UNITS NEEDED)   *
                 *******************************/

%!  user_constraints(+List, -Normalised) is det.
%
%   Check the syntax of a list of user constraints (the `constraints`
%   policy option) and normalise each element to the term the packer's
%   constraint list takes: text is parsed, Python tuples are read as
%   terms, a bare relation is wrapped in constraint/1.  Nothing depends
%   on the units yet: ids and variant names are checked by pack/5.
%
%   @error domain_error(pack_constraint, C) naming the bad constraint.

user_constraints(List, Normalised) :-
    must_be(list, List),
    maplist(normalise, List, Normalised).

normalise(C0, Term) :-
    source_term(C0, C1),
    (   structural(C1)
    ->  Term = C1
    ;   user_constraint(C1, user(Term0, Ast)),
        (   text_constraint(C0), Ast \= goal(_)
        ->  Term = C0                       % checked; kept as written, for messages
        ;   Term = Term0                    % a goal as constraint(Goal): pack/5 reads
        )                                   % text only as a relation or constraint(_)
    ).

structural(C) :-
    compound(C),
    compound_name_arity(C, Name, Arity),
    memberchk(Name/Arity, [together/1, at_most_one/1, excludes/2, requires/2]).

%!  is_user_constraint(+Term) is semidet.
%
%   Term (after source_term/2) is a user constraint rather than one of
%   the structural ones.

is_user_constraint(C) :-
    (   C = constraint(_)
    ->  true
    ;   compound(C),
        compound_name_arity(C, Name, Arity),
        connective(Name, Arity)
    ).

connective(Op, 2) :- relation_op(Op, _).
connective(Op, 2) :- bool_op(Op, _).
connective(#\, 1).
connective(if, 2).

relation_op(#=<, =<).  relation_op(=<, =<).
relation_op(#<, <).    relation_op(<, <).
relation_op(#>=, >=).  relation_op(>=, >=).
relation_op(#>, >).    relation_op(>, >).
relation_op(#=, =).    relation_op(=:=, =).
relation_op(#\=, \=).  relation_op(=\=, \=).

bool_op(#/\, and).
bool_op(#\/, or).
bool_op(#==>, imp).
bool_op(#<==, rimp).
bool_op(#<==>, equiv).

%!  user_constraint(+Term, -User) is det.
%
%   User is user(Source, Ast): Source is the constraint as the user wrote
%   it, normalised to constraint(C) (the form messages show), Ast its
%   parsed form.

user_constraint(C0, user(constraint(C), Ast)) :-
    source_term(C0, C1),
    (   C1 = constraint(C2)
    ->  source_term(C2, C)
    ;   C = C1
    ),
    (   var(C)
    ->  bad(constraint(C), "an unbound variable where a relation is expected")
    ;   is_user_constraint(C)
    ->  relation(C, constraint(C), Ast)
    ;   compound(C),
        compound_name_arity(C, Name, _),
        ( relation_op(Name, _) ; bool_op(Name, _) ; Name == (#\) ; Name == if )
    ->  ( Name == (#\) -> N = 1 ; N = 2 ),
        format(string(Why), "~q: ~w takes ~w arguments", [C, Name, N]),
        bad(constraint(C), Why)
    ;   expression_term(C)
    ->  format(string(Why), "~q is an expression, not a relation: compare it \c
                             with #=<, #<, #>=, #>, #= or #\\=", [C]),
        bad(constraint(C), Why)
    ;   callable(C)
    ->  Ast = goal(C)
    ;   bad(constraint(C), "expected a relation such as tokens(kind(K)) #=< 300, \c
                             or a goal")
    ).

%   source_term(+In, -Term): text is parsed (Python strings are atoms);
%   a Python tuple -(Name, A1, ...) is Name(A1, ...), all the way down.

source_term(T0, T) :-
    (   var(T0)
    ->  T = T0
    ;   text_constraint(T0)
    ->  parse(T0, T1),
        source_term(T1, T)
    ;   py_tuple(T0)
    ->  py_deep(T0, T)
    ;   T = T0
    ).

%   Text is a string, or an atom that is not a plain name (a plain name
%   such as my_rule is a goal: constraint(my_rule)).
text_constraint(T) :-
    (   string(T)
    ->  true
    ;   atom(T),
        \+ ( atom_codes(T, [C|Cs]),
             code_type(C, csymf),
             forall(member(D, Cs), code_type(D, csym)) )
    ).

parse(Text, Term) :-
    catch(term_string(Term, Text, [module(ctxrelay_packer_user)]),
          error(syntax_error(What), _),
          (   format(string(Why), "cannot be read: syntax error (~w)", [What]),
              bad(Text, Why)
          )).

py_tuple(T) :-
    compound(T),
    compound_name_arguments(T, -, [Name, _|_]),
    atom(Name).

py_deep(T0, T) :-
    (   var(T0)
    ->  T = T0
    ;   T0 = @(B)
    ->  T = B
    ;   is_list(T0)
    ->  maplist(py_deep, T0, T)
    ;   py_tuple(T0)
    ->  compound_name_arguments(T0, -, [Name|Args0]),
        maplist(py_deep, Args0, Args),
        compound_name_arguments(T, Name, Args)
    ;   T = T0
    ).

bad(Culprit, Why) :-
    throw(error(domain_error(pack_constraint, Culprit), context(_, Why))).

%   relation(+Term, +Source, -Ast)

relation(C, Src, _) :-
    var(C),
    !,
    bad(Src, "an unbound variable where a relation is expected").
relation(if(Cond, C), Src, if(CondAst, Ast)) :-
    !,
    condition(Cond, Src, CondAst),
    relation(C, Src, Ast).
relation(#\ C, Src, not(Ast)) :-
    !,
    relation(C, Src, Ast).
relation(in(Id), Src, rel(=, in(Id), int(1))) :-       % a 0/1 variable as a Boolean
    !,
    unit_id(Id, Src).
relation(variant(Id, Name), Src, Ast) :-
    !,
    expression(variant(Id, Name), Src, E),
    Ast = rel(=, E, int(1)).
relation(C, Src, Ast) :-
    compound(C),
    compound_name_arguments(C, Name, [A, B]),
    (   relation_op(Name, Op)
    ->  !,
        expression(A, Src, EA),
        expression(B, Src, EB),
        Ast = rel(Op, EA, EB)
    ;   bool_op(Name, Op)
    ->  !,
        relation(A, Src, RA),
        relation(B, Src, RB),
        Ast =.. [Op, RA, RB]
    ).
relation(C, Src, _) :-
    format(string(Why), "~q is not a relation: compare two expressions with \c
                         #=<, #<, #>=, #>, #= or #\\=, or combine relations \c
                         with #/\\, #\\/, #==>, #<==>, #\\", [C]),
    bad(Src, Why).

expression(E, Src, _) :-
    var(E),
    !,
    bad(Src, "an unbound variable where an expression is expected").
expression(N, _, int(N)) :-
    integer(N),
    !.
expression(A+B, Src, add(EA, EB)) :-
    !,
    expression(A, Src, EA),
    expression(B, Src, EB).
expression(A-B, Src, add(EA, mul(-1, EB))) :-
    !,
    expression(A, Src, EA),
    expression(B, Src, EB).
expression(-A, Src, mul(-1, EA)) :-
    !,
    expression(A, Src, EA).
expression(A*B, Src, Ast) :-
    !,
    expression(A, Src, EA),
    expression(B, Src, EB),
    (   constant(EA, K)
    ->  Ast = mul(K, EB)
    ;   constant(EB, K)
    ->  Ast = mul(K, EA)
    ;   format(string(Why), "~q is not linear: one factor of * must be an \c
                             integer", [A*B]),
        bad(Src, Why)
    ).
expression(budget, _, budget) :- !.
expression(Agg, Src, Ast) :-
    aggregate_name(Agg, Name, Sel),
    !,
    selector(Sel, Src, SelAst),
    Ast =.. [Name, SelAst].
expression(in(Id), Src, in(Id)) :-
    !,
    unit_id(Id, Src).
expression(variant(Id, Name), Src, variant(Id, Name)) :-
    !,
    unit_id(Id, Src),
    (   atomic(Name)
    ->  true
    ;   bad(Src, "variant(Id, Name): Name must be a variant name")
    ).
expression(E, Src, _) :-
    format(string(Why), "~q is not an expression: use integers, +, -, \c
                         Integer*Expr, count(S), tokens(S), utility(S), \c
                         in(Id), variant(Id, Name) or budget", [E]),
    bad(Src, Why).

%   A term that reads as an expression (a likely slip for a relation).
expression_term(C) :-
    (   integer(C)
    ->  true
    ;   compound(C),
        compound_name_arity(C, Name, Arity),
        memberchk(Name/Arity, [(+)/2, (-)/2, (*)/2, (-)/1, count/1, tokens/1,
                               utility/1, variant/2])
    ;   memberchk(C, [count, tokens, utility, budget])
    ).

aggregate_name(count, count, all).
aggregate_name(tokens, tokens, all).
aggregate_name(utility, utility, all).
aggregate_name(count(S), count, S).
aggregate_name(tokens(S), tokens, S).
aggregate_name(utility(S), utility, S).

unit_id(Id, Src) :-
    (   var(Id)
    ->  bad(Src, "an unbound unit id")
    ;   (atom(Id) ; string(Id) ; integer(Id))
    ->  true
    ;   format(string(Why), "~q is not a unit id", [Id]),
        bad(Src, Why)
    ).

constant(int(N), N).
constant(add(A, B), N) :- constant(A, NA), constant(B, NB), N is NA+NB.
constant(mul(K, A), N) :- constant(A, NA), N is K*NA.

selector(S, Src, _) :-
    var(S),
    !,
    bad(Src, "an unbound selector: use all, or a property such as kind(K)").
selector(all, _, all) :- !.
selector(mandatory, _, mandatory) :- !.
selector(optional, _, not(mandatory)) :- !.
selector(id(Id), Src, id(Id)) :- !, unit_id(Id, Src).
selector(ids(Ids), Src, ids(Ids)) :-
    !,
    (   is_list(Ids)
    ->  maplist({Src}/[Id]>>unit_id(Id, Src), Ids)
    ;   bad(Src, "ids(Ids): Ids must be a list of unit ids")
    ).
selector((A, B), Src, and(SA, SB)) :- !, selector(A, Src, SA), selector(B, Src, SB).
selector((A ; B), Src, or(SA, SB)) :- !, selector(A, Src, SA), selector(B, Src, SB).
selector(\+ A, Src, not(SA)) :- !, selector(A, Src, SA).
selector(P, _, prop(P)) :-
    callable(P),
    !.
selector(S, Src, _) :-
    format(string(Why), "~q is not a selector: use all, id(Id), ids(Ids), \c
                         mandatory, optional, a unit property such as \c
                         kind(K), or (S1, S2), (S1 ; S2), \\+ S", [S]),
    bad(Src, Why).

condition(C, Src, _) :-
    var(C),
    !,
    bad(Src, "if(Condition, C): Condition is unbound").
condition(true, _, true) :- !.
condition(false, _, false) :- !.
condition((A, B), Src, and(CA, CB)) :- !, condition(A, Src, CA), condition(B, Src, CB).
condition((A ; B), Src, or(CA, CB)) :- !, condition(A, Src, CA), condition(B, Src, CB).
condition(\+ A, Src, not(CA)) :- !, condition(A, Src, CA).
condition(C, _, key(Key, Value)) :-
    compound(C),
    compound_name_arguments(C, Key, [Value]),
    !.
condition(C, Src, _) :-
    format(string(Why), "if(Condition, C): ~q is not a condition; use \c
                         Key(Value) for a key of the pack's context (e.g. \c
                         intent(drill_down)), true, false, (A, B), (A ; B) \c
                         or \\+ A", [C]),
    bad(Src, Why).


                 /*******************************
                 *   COMPILATION AGAINST UNITS  *
                 *******************************/

%!  compile_user(+Sources, +Units, +Module, -User) is det.
%
%   Sources is a list of user(Source, Ast); Units is
%   units(Ids, Us, Props, Index, Budget, Context) (Ids, Us as in the
%   problem term, Props the array of each unit's properties, Index the
%   id -> position assoc), Module the module in which unqualified goals
%   are called.  User is `none` when Sources is empty, else a
%   dict with keys sources, asts, rows, checks, goals, unsat, table and
%   units (Units):
%
%     - sources: array of the sources, position = source number; asts:
%       the list Sources;
%     - rows: row(S, Op, B, Coefs) with Op in =<, >=, = : the linear
%       rows the search handles, Coefs a list M-VariantCoefficients
%       ordered by unit M (no all-zero entry);
%     - checks: check(S, Bool) evaluated on complete packs, Bool over
%       lin(Coefs, Op, B) leaves with and/or/not/imp/equiv;
%     - goals: goal(S, Module:Goal);
%     - unsat: the sources that no pack can satisfy (a false constant);
%     - table: row_table/4 of the rows (`none` without rows).
%
%   @error domain_error(pack_constraint, C) when C names no unit or no
%          variant of its unit.

compile_user([], _, _, none) :- !.
compile_user(Sources, Units, Module, User) :-
    length(Sources, NS),
    numlist(1, NS, Ns),
    pairs_keys_values(Numbered, Ns, Sources),
    foldl(compile_one(Units, Module), Numbered,
          acc([], [], [], []), acc(Rows0, Checks0, Goals0, Unsat0)),
    maplist([user(S, _), S]>>true, Sources, SrcList),
    Srcs =.. [srcs|SrcList],
    reverse(Rows0, Rows),
    reverse(Checks0, Checks),
    reverse(Goals0, Goals),
    reverse(Unsat0, Unsat),
    Units = units(Ids, Us, _, _, _, _),
    functor(Ids, _, N),
    (   Rows == []
    ->  Table = none
    ;   row_table(Rows, Us, N, Table)
    ),
    User = user{sources:Srcs, asts:Sources, rows:Rows, checks:Checks,
                goals:Goals, unsat:Unsat, table:Table, units:Units}.

compile_one(Units, Module, S-user(Src, Ast), acc(R0, C0, G0, U0), acc(R, C, G, U)) :-
    (   Ast = goal(Goal0)
    ->  goal_module(Module:Goal0, Src, Goal),
        R = R0, C = C0, U = U0, G = [goal(S, Goal)|G0]
    ;   bool(Ast, Units, Src, Bool0),
        simplify(Bool0, Bool),
        (   Bool == true
        ->  R = R0, C = C0, G = G0, U = U0
        ;   Bool == false
        ->  R = R0, C = C0, G = G0, U = [S|U0]
        ;   rows_of(Bool, Rs)
        ->  foldl({S}/[lin(Cs, Op, B), A0, [row(S, Op, B, Cs)|A0]]>>true, Rs, R0, R),
            C = C0, G = G0, U = U0
        ;   R = R0, G = G0, U = U0, C = [check(S, Bool)|C0]
        )
    ).

%   A goal is called in the caller's module unless qualified; it must
%   exist with one more argument (the model).
goal_module(Goal0, Src, M:Goal) :-
    strip_module(Goal0, M, Goal),
    (   callable(Goal)
    ->  true
    ;   bad(Src, "constraint(Goal): Goal must be callable")
    ),
    functor(Goal, Name, Arity),
    Arity1 is Arity+1,
    functor(Head, Name, Arity1),
    (   predicate_property(M:Head, defined)
    ->  true
    ;   format(string(Why), "constraint(Goal): there is no predicate ~w:~w/~w \c
                             to call with the model as its last argument",
               [M, Name, Arity1]),
        bad(Src, Why)
    ).

%   bool(+Ast, +Units, +Src, -Bool): relations become lin(Coefs, Op, B)
%   leaves (Sum Coefs*Vars Op B), conditions are decided.

bool(if(Cond, A), Units, Src, Bool) :-
    Units = units(_, _, _, _, _, Context),
    (   holds(Cond, Context)
    ->  bool(A, Units, Src, Bool)
    ;   Bool = true
    ).
bool(not(A), Units, Src, not(B)) :-
    bool(A, Units, Src, B).
bool(rel(Op, EA, EB), Units, Src, Lin) :-
    linear(EA, Units, Src, LA),
    linear(EB, Units, Src, LB),
    lin_add(LA, LB, -1, l(Cs, K)),
    B is -K,
    normal_op(Op, B, Op1, B1),
    Lin = lin(Cs, Op1, B1).
bool(and(A, B), Units, Src, and(BA, BB)) :-
    bool2(A, B, Units, Src, BA, BB).
bool(or(A, B), Units, Src, or(BA, BB)) :-
    bool2(A, B, Units, Src, BA, BB).
bool(imp(A, B), Units, Src, imp(BA, BB)) :-
    bool2(A, B, Units, Src, BA, BB).
bool(rimp(A, B), Units, Src, imp(BB, BA)) :-
    bool2(A, B, Units, Src, BA, BB).
bool(equiv(A, B), Units, Src, equiv(BA, BB)) :-
    bool2(A, B, Units, Src, BA, BB).

bool2(A, B, Units, Src, BA, BB) :-
    bool(A, Units, Src, BA),
    bool(B, Units, Src, BB).

normal_op(<, B, =<, B1) :- !, B1 is B-1.
normal_op(>, B, >=, B1) :- !, B1 is B+1.
normal_op(Op, B, Op, B).

holds(true, _).
holds(and(A, B), Ctx) :- holds(A, Ctx), holds(B, Ctx).
holds(or(A, B), Ctx) :- ( holds(A, Ctx) -> true ; holds(B, Ctx) ).
holds(not(A), Ctx) :- \+ holds(A, Ctx).
holds(key(Key, Value), Ctx) :-
    is_dict(Ctx),
    get_dict(Key, Ctx, V),
    text_unify(Value, V).

%   simplify(+Bool0, -Bool): constant leaves decided, negations pushed
%   into relations where that keeps them linear.

simplify(true, true) :- !.
simplify(false, false) :- !.
simplify(lin(Cs, Op, B), S) :-
    !,
    (   Cs == []
    ->  ( holds_op(Op, 0, B) -> S = true ; S = false )
    ;   S = lin(Cs, Op, B)
    ).
simplify(not(A0), S) :-
    !,
    simplify(A0, A),
    (   A == true -> S = false
    ;   A == false -> S = true
    ;   A = lin(Cs, =<, B) -> B1 is B+1, S = lin(Cs, >=, B1)
    ;   A = lin(Cs, >=, B) -> B1 is B-1, S = lin(Cs, =<, B1)
    ;   A = lin(Cs, =, B) -> S = lin(Cs, \=, B)
    ;   A = lin(Cs, \=, B) -> S = lin(Cs, =, B)
    ;   A = not(S) -> true
    ;   S = not(A)
    ).
simplify(Bool0, S) :-
    Bool0 =.. [Op, A0, B0],
    simplify(A0, A),
    simplify(B0, B),
    simplify_op(Op, A, B, S).

simplify_op(and, A, B, S) :-
    (   ( A == false ; B == false ) -> S = false
    ;   A == true -> S = B
    ;   B == true -> S = A
    ;   S = and(A, B)
    ).
simplify_op(or, A, B, S) :-
    (   ( A == true ; B == true ) -> S = true
    ;   A == false -> S = B
    ;   B == false -> S = A
    ;   S = or(A, B)
    ).
simplify_op(imp, A, B, S) :-
    (   ( A == false ; B == true ) -> S = true
    ;   A == true -> S = B
    ;   B == false -> simplify(not(A), S)
    ;   S = imp(A, B)
    ).
simplify_op(equiv, A, B, S) :-
    (   A == true -> S = B
    ;   B == true -> S = A
    ;   A == false -> simplify(not(B), S)
    ;   B == false -> simplify(not(A), S)
    ;   S = equiv(A, B)
    ).

holds_op(=<, V, B) :- V =< B.
holds_op(>=, V, B) :- V >= B.
holds_op(=, V, B) :- V =:= B.
holds_op(\=, V, B) :- V =\= B.

%   rows_of(+Bool, -Rows): a conjunction of linear =<, >=, = relations.
rows_of(lin(Cs, Op, B), [lin(Cs, Op, B)]) :-
    Op \== (\=).
rows_of(and(A, B), Rows) :-
    rows_of(A, RA),
    rows_of(B, RB),
    append(RA, RB, Rows).

%   linear(+Expr, +Units, +Src, -Lin): Lin is l(Coefs, Const), Coefs an
%   ordered list of M-VariantCoefficients.

linear(int(N), _, _, l([], N)).
linear(budget, units(_, _, _, _, Budget, _), _, l([], Budget)).
linear(add(A, B), Units, Src, L) :-
    linear(A, Units, Src, LA),
    linear(B, Units, Src, LB),
    lin_add(LA, LB, 1, L).
linear(mul(K, A), Units, Src, L) :-
    linear(A, Units, Src, LA),
    lin_scale(LA, K, L).
linear(count(Sel), Units, Src, l(Cs, 0)) :-
    selected_units(Sel, Units, Src, Ms),
    Units = units(_, Us, _, _, _, _),
    findall(M-Ks, ( member(M, Ms), arg(M, Us, u(Vs, _)),
                    maplist([_, 1]>>true, Vs, Ks) ), Cs).
linear(tokens(Sel), Units, Src, l(Cs, 0)) :-
    selected_units(Sel, Units, Src, Ms),
    Units = units(_, Us, _, _, _, _),
    findall(M-Ks, ( member(M, Ms), arg(M, Us, u(Vs, _)),
                    maplist([v(_, _, C, _), C]>>true, Vs, Ks),
                    \+ maplist(==(0), Ks) ), Cs).
linear(utility(Sel), Units, Src, l(Cs, 0)) :-
    selected_units(Sel, Units, Src, Ms),
    Units = units(_, Us, _, _, _, _),
    findall(M-Ks, ( member(M, Ms), arg(M, Us, u(Vs, _)),
                    maplist([v(_, _, _, U), U]>>true, Vs, Ks),
                    \+ maplist(==(0), Ks) ), Cs).
linear(in(Id), Units, Src, l([M-Ks], 0)) :-
    unit_index(Id, Units, Src, M),
    Units = units(_, Us, _, _, _, _),
    arg(M, Us, u(Vs, _)),
    maplist([_, 1]>>true, Vs, Ks).
linear(variant(Id, Name), Units, Src, l([M-Ks], 0)) :-
    unit_index(Id, Units, Src, M),
    Units = units(Ids, Us, _, _, _, _),
    arg(M, Us, u(Vs, _)),
    variant_flags(Vs, Name, Ks),
    (   memberchk(1, Ks)
    ->  true
    ;   arg(M, Ids, UId),
        format(string(Why), "unit ~q has no variant ~q", [UId, Name]),
        bad(Src, Why)
    ).

variant_flags([], _, []).
variant_flags([v(_, N, _, _)|Vs], Name, [K|Ks]) :-
    (   text_unify(Name, N)
    ->  K = 1
    ;   K = 0
    ),
    variant_flags(Vs, Name, Ks).

unit_index(Id, units(_, _, _, Index, _, _), Src, M) :-
    (   index_lookup(Id, Index, M)
    ->  true
    ;   format(string(Why), "~q names no unit", [Id]),
        bad(Src, Why)
    ).

index_lookup(Id, Index, M) :-
    (   get_assoc_(Id, Index, M)
    ->  true
    ;   atom(Id), atom_string(Id, S), get_assoc_(S, Index, M)
    ->  true
    ;   string(Id), atom_string(A, Id), get_assoc_(A, Index, M)
    ).

get_assoc_(Key, Assoc, Value) :-
    assoc:get_assoc(Key, Assoc, Value).

lin_add(l(A, KA), l(B, KB), Sign, l(C, K)) :-
    K is KA + Sign*KB,
    (   Sign =:= 1
    ->  B1 = B
    ;   maplist([M-Ks0, M-Ks]>>maplist([X, Y]>>(Y is -X), Ks0, Ks), B, B1)
    ),
    merge_coefs(A, B1, C).

merge_coefs([], B, B) :- !.
merge_coefs(A, [], A) :- !.
merge_coefs([MA-KA|As], [MB-KB|Bs], C) :-
    (   MA < MB
    ->  C = [MA-KA|C1],
        merge_coefs(As, [MB-KB|Bs], C1)
    ;   MA > MB
    ->  C = [MB-KB|C1],
        merge_coefs([MA-KA|As], Bs, C1)
    ;   maplist([X, Y, Z]>>(Z is X+Y), KA, KB, KC),
        (   maplist(==(0), KC)
        ->  C = C1
        ;   C = [MA-KC|C1]
        ),
        merge_coefs(As, Bs, C1)
    ).

lin_scale(l(Cs0, K0), F, l(Cs, K)) :-
    K is K0*F,
    (   F =:= 0
    ->  Cs = []
    ;   maplist({F}/[M-Ks0, M-Ks]>>maplist({F}/[X, Y]>>(Y is F*X), Ks0, Ks), Cs0, Cs)
    ).

%   selected_units(+Sel, +Units, +Src, -Ms): the positions of the units
%   Sel selects, in increasing order (an id that names no unit selects
%   nothing: selectors describe, in(Id) and variant(Id, N) insist).
selected_units(Sel, Units, _Src, Ms) :-
    Units = units(Ids, Us, Props, Index, _, _),
    functor(Ids, _, N),
    (   Sel = id(Id)
    ->  unit_positions([Id], Index, Ms)
    ;   Sel = ids(List)
    ->  unit_positions(List, Index, Ms)
    ;   findall(M, ( between(1, N, M), selects(Sel, M, Ids, Us, Props) ), Ms)
    ).

unit_positions(Ids, Index, Ms) :-
    findall(M, ( member(Id, Ids), index_lookup(Id, Index, M) ), Ms0),
    sort(Ms0, Ms).

selects(all, _, _, _, _).
selects(mandatory, M, _, Us, _) :- arg(M, Us, u(_, true)).
selects(id(Id), M, Ids, _, _) :- arg(M, Ids, Id1), text_unify(Id, Id1).
selects(ids(List), M, Ids, _, _) :- arg(M, Ids, Id1), member(Id, List), text_unify(Id, Id1), !.
selects(and(A, B), M, Ids, Us, Ps) :- selects(A, M, Ids, Us, Ps), selects(B, M, Ids, Us, Ps).
selects(or(A, B), M, Ids, Us, Ps) :- ( selects(A, M, Ids, Us, Ps) -> true ; selects(B, M, Ids, Us, Ps) ).
selects(not(A), M, Ids, Us, Ps) :- \+ selects(A, M, Ids, Us, Ps).
selects(prop(P), M, _, _, Props) :-
    arg(M, Props, List),
    \+ \+ ( member(P1, List), text_unify(P, P1) ).

%   text_unify(?A, ?B): unification where an atom and a string with the
%   same text are equal (Python sends atoms, Prolog code may use either).
text_unify(A, B) :-
    (   ( var(A) ; var(B) )
    ->  A = B
    ;   ( atom(A) ; string(A) ), ( atom(B) ; string(B) )
    ->  atom_string(A, S), atom_string(B, S)
    ;   compound(A), compound(B)
    ->  compound_name_arguments(A, N, As),
        compound_name_arguments(B, N, Bs),
        maplist(text_unify, As, Bs)
    ;   A == B
    ).


                 /*******************************
                 *          ROW TABLE           *
                 *******************************/

%!  row_table(+Rows, +Us, +N, -Table) is det.
%
%   Table is rows(Dirs, Bs, Res, Zero): Dirs the direction of each row
%   (le, ge, eq), Bs their right-hand sides, Res an array unit -> `[]`
%   (the unit is in no row) or the list of its variants' row vectors,
%   Zero the zero vector.

row_table(Rows, Us, N, rows(Dirs, Bs, Res, Zero)) :-
    maplist([row(_, Op, B, _), D, B]>>op_dir(Op, D), Rows, Dirs, Bs),
    length(Rows, NR),
    length(Zero, NR),
    maplist(=(0), Zero),
    functor(Res, res, N),
    forall(between(1, N, M), nb_setarg(M, Res, [])),
    length(Rows, NR),
    numlist(1, NR, RowIdx),
    foldl(row_entries, RowIdx, Rows, Entries, []),
    msort(Entries, Sorted),
    group_pairs_by_key(Sorted, ByUnit),
    forall(member(M-IKs, ByUnit),
           ( arg(M, Us, u(Vs, _)),
             length(Vs, NV),
             unit_vectors(1, NV, NR, IKs, Vecs),
             nb_setarg(M, Res, Vecs) )).

op_dir(=<, le).
op_dir(>=, ge).
op_dir(=, eq).

row_entries(I, row(_, _, _, Coefs), E0, E) :-
    foldl({I}/[M-Ks, [M-(I-Ks)|T], T]>>true, Coefs, E0, E).

%   unit_vectors(+K, +NV, +NR, +RowCoefs, -Vecs): Vecs lists, per variant
%   K, its vector over the NR rows.
unit_vectors(K, NV, NR, IKs, Vecs) :-
    (   K > NV
    ->  Vecs = []
    ;   numlist(1, NR, Is),
        maplist({IKs, K}/[I, C]>>( memberchk(I-Ks, IKs) -> nth1(K, Ks, C) ; C = 0 ), Is, Vec),
        Vecs = [Vec|Vecs1],
        K1 is K+1,
        unit_vectors(K1, NV, NR, IKs, Vecs1)
    ).

