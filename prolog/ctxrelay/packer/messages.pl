:- module(ctxrelay_packer_messages, []).
:- use_module(library(lists)).

/** <module> The packer's messages

One prolog:message//1 rule per packer error, so that print_message/2 and
message_to_string/2 say what went wrong and how to fix it.  They are
prolog:message//1 rules, not prolog:error_message//1 ones: the former are
tried first, so a catch-all error_message rule of another module (such as
ctxrelay_errors' rule for every ctxrelay(Kind, Message)) cannot shadow
them whatever the load order.
*/

:- multifile prolog:message//1.

prolog:message(error(ctxrelay(context_overflow, D), _)) -->
    { is_dict(D),
      get_dict(mandatory_cost, D, MC),
      get_dict(budget, D, B)
    },
    [ 'Context overflow: the mandatory units need ~D tokens, the budget is ~D'-
      [MC, B], nl,
      '  Raise the budget, or make fewer units mandatory or give them \c
       cheaper variants'-[]
    ].
prolog:message(error(ctxrelay(inconsistent_constraints, D), _)) -->
    { is_dict(D),
      get_dict(unit, D, Id)
    },
    !,
    [ 'Inconsistent pack constraints: mandatory unit ~p cannot be packed'-[Id] ],
    (   { get_dict(constraints, D, Cs), Cs \== [] }
    ->  [ nl, '  because of '-[] ], texts(Cs)
    ;   []
    ),
    [ nl, '  Drop one of these constraints, or make one of the mandatory \c
           units they join optional'-[] ].
prolog:message(error(ctxrelay(inconsistent_constraints, D), _)) -->
    { is_dict(D),
      get_dict(constraints, D, Cs)
    },
    [ 'No pack satisfies '-[] ], texts(Cs),
    (   { get_dict(mandatory, D, Ms), Ms \== [] }
    ->  [ nl, '  with the mandatory units '-[] ], texts(Ms)
    ;   [ nl, '  with the mandatory units and the pack constraints'-[] ]
    ),
    (   { get_dict(budget, D, B) }
    ->  [ ' within the budget of ~D tokens'-[B] ]
    ;   []
    ),
    [ nl, '  Relax or drop one of these constraints'-[] ],
    (   { get_dict(budget, D, _) }
    ->  [ ', or raise the budget'-[] ]
    ;   [ ', or make fewer units mandatory'-[] ]
    ).
prolog:message(error(ctxrelay(pack_time_limit, D), _)) -->
    { is_dict(D),
      get_dict(time_limit, D, T)
    },
    [ 'The packer''s time limit (~w s) ran out before any pack that \c
       satisfies the user constraints was found (none was proven \c
       impossible either)'-[T], nl,
      '  Raise time_limit, or state the constraints as linear relations \c
       (#=<, #>=, #=), which the search bounds, rather than #\\=, \c
       disjunctions or goals, which it can only check'-[]
    ].
prolog:message(error(domain_error(pack_constraint, C), context(_, Why))) -->
    { string(Why) },
    [ 'Invalid pack constraint ~q: ~w'-[C, Why] ].
prolog:message(error(domain_error(pack_option, O), _)) -->
    [ 'Unknown pack option ~q: the options are time_limit(Seconds), \c
       max_alternatives(N) and context(Dict)'-[O] ].

texts([]) --> [].
texts([X]) --> !, text(X).
texts([X|Xs]) --> text(X), [', '-[]], texts(Xs).

text(X) --> { string(X) }, !, [ '~s'-[X] ].
text(X) --> [ '~q'-[X] ].
