:- module(ctxrelay_utility,
          [ pack_units/4,           % +Cands, +Policy, -Units, -Constraints
            utility/6,              % +Kind, +Variant, +Unit, +Cands, +Policy, -Float
            offered/2,              % +Cands, +Unit
            warm_relevance/2,       % +Unit, -Relevance
            fact_score/2            % +Unit, -Score
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).

/** <module> Utility: what each candidate unit is worth, and which are mandatory

Python offers candidate units with their costs and the numbers that score
them (recency by turn id, recall and knowledge scores, the term counts
of warm artifacts); the rules here decide which are offered and turn
them into packer units: a utility per variant (scaled by 1,000 to
integers), the mandatory flags (instructions, the new input, the
boundary, the guaranteed tail) and the structural constraints (a tool
call with its results, artifacts exclude the turns they cover).
*/

%   pack_units(+Cands, +Policy, -Units, -Constraints)
%
%   Turn Python's candidate summaries into packer units: the offered
%   candidates (offered/2), a utility per variant (scaled by 1000 to
%   integers), mandatory flags, and the structural constraints (tool
%   pairs together, artifacts exclude the turns they cover) among them.
pack_units(Cands, Policy, Units, Constraints) :-
    partition(offered(Cands), Cands.units, Offered, Withheld),
    maplist(pack_unit(Cands, Policy), Offered, Units),
    findall(together(G), member(G, Cands.groups), Together),
    (   Withheld == []
    ->  findall(excludes(A, B), member([A, B], Cands.excludes), Excludes)
    ;   findall(Id, ( member(U, Withheld), atom_string(Id, U.id) ), Gone),
        findall(excludes(A, B),
                ( member([A, B], Cands.excludes),
                  \+ ( member(X, [A, B]), atom_string(XA, X), memberchk(XA, Gone) ) ),
                Excludes)
    ),
    append(Together, Excludes, Constraints).

%!  offered(+Cands, +Unit) is semidet.
%
%   Whether a candidate is offered to the packer.  A warm artifact is
%   offered when it starts within the history this pack may show (a
%   retried turn's pack never shows an artifact of its own future).
offered(Cands, U) :-
    U.kind == "warm",
    !,
    U.start =< Cands.history_end.
offered(_, _).

%!  fact_score(+Unit, -Score) is det.
%
%   A CKF fact's score (0..1, relative to the best of its retrieval).  A
%   fact retrieved for a document sub-query (it has a `rank` there) is
%   worth 1.0 when it is its sub-query's best and at most 0.95 otherwise,
%   so that every sub-query is covered once before any gets a second
%   fact, budget allowing.
fact_score(U, S) :-
    Score = U.get(score, 0.0),
    (   get_dict(rank, U, Rank)
    ->  (   Rank =:= 0 -> S = 1.0 ; S is min(0.95, Score) )
    ;   S = Score
    ).

%!  warm_relevance(+Unit, -Relevance) is det.
%
%   The share of the query's index terms a warm artifact holds:
%   |query terms ∩ artifact terms| / |query terms|, 0 for a query
%   without terms.  Python reports the counts (query_terms,
%   shared_terms).
warm_relevance(U, R) :-
    Q = U.get(query_terms, 0),
    (   Q > 0
    ->  R is U.get(shared_terms, 0) / Q
    ;   R = 0.0
    ).

pack_unit(Cands, Policy, U, unit(Id, Variants, [mandatory(M), kind(Kind)])) :-
    Id = U.id,
    atom_string(Kind, U.kind),
    mandatory(Kind, U, Cands, Policy, M),
    maplist(variant_utility(Kind, U, Cands, Policy), U.variants, Variants).

mandatory(system, _, _, _, true) :- !.
mandatory(instructions, _, _, _, true) :- !.
mandatory(message, _, _, _, true) :- !.
mandatory(pending, _, _, _, true) :- !.
mandatory(boundary, _, _, _, true) :- !.
mandatory(Kind, U, Cands, _, M) :-
    memberchk(Kind, [turn, scratch]),
    !,
    U.turn_ids = [T],
    (   T >= Cands.tail_first -> M = true ; M = false ).
mandatory(_, _, _, _, false).

variant_utility(Kind, U, Cands, Policy, V, variant(Name, Cost, Utility)) :-
    atom_string(Name, V.name),
    Cost = V.cost,
    utility(Kind, Name, U, Cands, Policy, F),
    Utility is max(0, round(F * 1000)).

%   utility(+Kind, +Variant, +Unit, +Cands, +Policy, -Float)
%
%   Conversation gravity is recency (half-life decay); cold turns found
%   by the index are worth their normalised score; a warm artifact is
%   worth its relevance plus the span it restores, less for terser
%   variants.  Mandatory units carry no utility of their own.
utility(Kind, _, _, _, _, 0.0) :-
    memberchk(Kind, [system, instructions, message, pending, boundary]),
    !.
utility(Kind, Name, U, Cands, Policy, F) :-
    memberchk(Kind, [turn, scratch]),
    !,
    U.turn_ids = [T],
    intent_weights_c(Cands, WRecent, WRetrieved),
    Recency is WRecent * 0.5 ** ((Cands.message_turn - T) / Policy.half_life),
    (   get_dict(relevance, U, R)
    ->  relevant_tokens(U, Name, WRetrieved, R, Relevance)
    ;   Relevance = 0
    ),
    F is max(Recency, Relevance) + 0.001.
utility(retrieved, Name, U, Cands, _, F) :-
    !,
    intent_weights_c(Cands, _, WRetrieved),
    relevant_tokens(U, Name, WRetrieved, U.get(score, 0.0), F).
utility(referenced, _, _, _, _, 1.0) :- !.      % resolved references: full weight
utility(thread, _, U, Cands, Policy, F) :-      % a resumed thread's dormant turns
    !,
    U.turn_ids = [T],
    F is 0.4 + 0.5 * 0.5 ** ((Cands.message_turn - T) / (4 * Policy.half_life)).
utility(thread_summary, _, _, _, _, 0.9) :- !.
utility(fact, _, U, _, _, F) :-                 % CKF facts: their CDR/CDGR score
    !,
    fact_score(U, S),
    F is 0.1 + 0.9 * S.
utility(warm, Variant, U, _, _, F) :-
    !,
    variant_factor(Variant, VF),
    Span is U.get(end, 0) - U.get(start, 0) + 1,
    warm_relevance(U, R),
    F is VF * (0.1 + 0.8 * R + 0.015 * min(Span, 40)).
utility(_, _, _, _, _, 0.01).

%   relevant_tokens(+Unit, +Variant, +Weight, +Score, -Utility)
%
%   A recalled turn is worth its relevance per token: the packer then
%   fills the budget in order of relevance whatever the turns' lengths
%   (a per-unit value would trade one long relevant turn for two short
%   marginal ones).  RefTokens scales a typical turn to about 1.
relevant_tokens(U, Name, Weight, Score, F) :-
    RefTokens = 50,
    (   member(V, U.variants), atom_string(Name, V.name) -> Cost = V.cost ; Cost = RefTokens ),
    F is Weight * (0.1 + 0.9 * Score) * Cost / RefTokens.

%   intent_weights_c(+Cands, -Recent, -Retrieved)
%
%   Within the conversation tier, the intent decides how much recency
%   and indexed recall weigh: a continuation lives in the recent turns,
%   a new question (explore) or a drill-down into earlier ground in what
%   the index finds.
intent_weights_c(Cands, Recent, Retrieved) :-
    (   get_dict(intent, Cands, Intent), recall_weights(Intent, Recent, Retrieved)
    ->  true
    ;   Recent = 1.0, Retrieved = 0.7
    ).

recall_weights(continue,       1.0,  0.6).
recall_weights(clarify,        1.0,  0.8).
recall_weights(drill_down,     0.7,  1.0).
recall_weights(tool_reference, 0.7,  0.6).
recall_weights(explore,        0.35, 1.0).

variant_factor(verbatim,   1.0).
variant_factor(detailed,   0.85).
variant_factor(facts_only, 0.6).
variant_factor(compact,    0.5).

