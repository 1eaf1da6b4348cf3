:- module(ctxrelay_packer_messages, []).

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
    [ 'Inconsistent pack constraints: mandatory unit ~p cannot be packed'-[Id],
      nl,
      '  Check together/excludes/at_most_one/requires against the \c
       mandatory units'-[]
    ].
