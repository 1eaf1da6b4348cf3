:- use_module(library(plunit)).
:- use_module(library(lists)).
:- use_module(library(ctxrelay/utility)).

%   Which candidates are offered, and what a warm artifact is worth.

warm(Id, Start, End, Q, S, U) :-
    U = _{id:Id, kind:"warm", turn_ids:[], start:Start, end:End, version:1,
          query_terms:Q, shared_terms:S,
          variants:[_{name:"verbatim", cost:40}, _{name:"compact", cost:10}]}.

turn_unit(Id, T, _{id:Id, kind:"turn", turn_ids:[T], role:"user",
                   variants:[_{name:"verbatim", cost:20}]}).

cands(Units, Excludes, _{units:Units, groups:[], excludes:Excludes, history_end:10,
                         message_turn:11, tail_first:9}).

policy(_{half_life:8}).

:- begin_tests(warm_relevance).

test(share_of_the_query_terms, R =:= 0.75) :-
    warm("w1_4", 1, 4, 4, 3, U),
    warm_relevance(U, R).
test(a_query_without_terms, R =:= 0.0) :-
    warm("w1_4", 1, 4, 0, 0, U),
    warm_relevance(U, R).
test(more_shared_terms_more_utility, true(A > B)) :-
    warm("w1_4", 1, 4, 4, 4, U1),
    warm("w1_4", 1, 4, 4, 1, U2),
    cands([U1], [], C),
    policy(P),
    utility(warm, verbatim, U1, C, P, A),
    utility(warm, verbatim, U2, C, P, B).

:- end_tests(warm_relevance).

:- begin_tests(offered_units).

test(an_artifact_within_the_history_is_offered) :-
    warm("w1_4", 1, 4, 2, 1, U),
    cands([U], [], C),
    offered(C, U).
test(an_artifact_past_the_history_is_not, fail) :-
    warm("w11_12", 11, 12, 2, 1, U),
    cands([U], [], C),
    offered(C, U).
test(withheld_units_and_their_constraints_leave,
     Ids-Cs == ["w1_4", "t3"]-[excludes("w1_4", "t3")]) :-
    warm("w1_4", 1, 4, 2, 1, W1),
    warm("w11_12", 11, 12, 2, 1, W2),
    turn_unit("t3", 3, T3),
    cands([W1, W2, T3], [["w1_4", "t3"], ["w11_12", "t3"]], C),
    policy(P),
    pack_units(C, P, Units, Cs),
    findall(Id, member(unit(Id, _, _), Units), Ids).

:- end_tests(offered_units).

:- begin_tests(fact_score).

test(the_best_fact_of_a_subquery_is_worth_most, [S0-S1 == 1.0-0.95]) :-
    fact_score(_{kind:"fact", score:0.3, rank:0, subquery:1}, S0),
    fact_score(_{kind:"fact", score:0.99, rank:1, subquery:1}, S1).
test(outside_documents_the_score_stands, S == 0.42) :-
    fact_score(_{kind:"fact", score:0.42}, S).

:- end_tests(fact_score).
