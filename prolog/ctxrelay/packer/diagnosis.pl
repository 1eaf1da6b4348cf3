:- module(ctxrelay_packer_diagnosis,
          [ no_pack_error/1         % +Prep
          ]).
:- use_module(library(aggregate)).
:- use_module(greedy, [initial_allowed/2, group_variants/4, group_chain/3]).

/** <module> Why there is no pack

pack_best/5 explains an empty problem: the mandatory units contradict the
constraints (no budget would do), or their cheapest admissible fill does
not fit the budget.  The messages are in ctxrelay_packer_messages.
*/

%!  no_pack_error(+Prep)
%
%   Throws the error that says why the prepared problem Prep has no pack.

no_pack_error(prep(inconsistent(U), P, _, _)) :-
    !,
    P = prob(_, Ids, _, _, _),
    arg(U, Ids, Id),
    throw(error(ctxrelay(inconsistent_constraints, _{unit:Id}), _)).
no_pack_error(prep(consistent, P, X, St)) :-
    P = prob(_, _, _, _, Budget),
    X = str(G, _, GM, _, _, _, _, _),
    initial_allowed(P, Allowed),
    aggregate_all(sum(C),
                  ( between(1, G, Gi),
                    arg(Gi, St, in),
                    group_variants(Gi, GM, Allowed, MVs),
                    group_chain(MVs, b(C, _, _), _)
                  ),
                  MC),
    throw(error(ctxrelay(context_overflow,
                         _{mandatory_cost:MC, budget:Budget}), _)).
