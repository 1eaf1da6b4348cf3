:- use_module(library(plunit)).
:- use_module(library(ctxrelay/blend)).



:- begin_tests(ctxrelay_blend).

test(spec_table, H == "30/65/5") :-
    intent_blend(drill_down, B), blend_header(B, H).
test(unknown_intent, error(domain_error(intent, chat), _)) :-
    intent_blend(chat, _).
test(shares_follow_weights, S == shares{p:700, c:250, e:50}) :-
    intent_blend(explore, B),
    tier_shares(B, 1000, demand{p:5000, c:5000, e:5000}, S).
test(unused_share_flows, [P, E, CBig] == [0, 40, true]) :-
    intent_blend(explore, B),                      % no CKF facts: P's share flows on
    tier_shares(B, 1000, demand{p:0, c:5000, e:40}, S),
    get_dict(p, S, P), get_dict(e, S, E), get_dict(c, S, C),
    ( C >= 900 -> CBig = true ; CBig = false ).
test(never_more_than_available, true(Sum =< 1000)) :-
    intent_blend(continue, B),
    tier_shares(B, 1000, demand{p:300, c:5000, e:5000}, S),
    S = shares{p:P, c:C, e:E},
    Sum is P + C + E.
test(all_demand_met_when_small, S == shares{p:10, c:20, e:30}) :-
    intent_blend(clarify, B),
    tier_shares(B, 1000, demand{p:10, c:20, e:30}, S).

:- end_tests(ctxrelay_blend).

:- begin_tests(ctxrelay_tier_gate).

gate_units([ unit(m,  [variant(verbatim, 10, 0)],   [mandatory(true),  kind(message)]),
             unit(f1, [variant(verbatim, 40, 900)], [mandatory(false), kind(fact)]),
             unit(f2, [variant(verbatim, 40, 800)], [mandatory(false), kind(fact)]),
             unit(f3, [variant(verbatim, 40, 700)], [mandatory(false), kind(fact)]),
             unit(t1, [variant(verbatim, 30, 500)], [mandatory(false), kind(retrieved)]),
             unit(t2, [variant(verbatim, 30, 400)], [mandatory(false), kind(retrieved)]),
             unit(c1, [variant(verbatim, 20, 300)], [mandatory(false), kind(turn)]),
             unit(s1, [variant(verbatim, 20, 600)], [mandatory(false), kind(scratch)])
           ]).

gated_ids(Units, Ids) :-
    findall(Id, member(unit(Id, _, _), Units), Ids).

%   explore: P 70%, C 25%, E 5% of 100 tokens -> P may offer 70 (one
%   fact of 40 fits, a second would make 80); C 25 -> nothing of 30;
%   E 5 -> nothing of 20: the leftovers flow on to unmet demand.
test(shares_bound_each_tier) :-
    gate_units(Us),
    intent_blend(explore, B),
    tier_gate(Us, [], B, 100, Gated, _, Tiers),
    gated_ids(Gated, Ids),
    assertion(memberchk(m, Ids)),
    forall(member(T, [p, c, e]),
           ( get_dict(T, Tiers, R), get_dict(offered, R, O), get_dict(share, R, S),
             assertion(O =< S) )),
    get_dict(p, Tiers, P), get_dict(offered, P, PO),
    assertion(PO > 0),
    aggregate_all(sum(S), ( member(T, [p, c, e]), get_dict(T, Tiers, R),
                            get_dict(share, R, S) ), Sum),
    assertion(Sum =< 100).

test(unused_share_flows_to_others) :-
    gate_units(Us0),
    exclude([unit(_, _, P)]>>memberchk(kind(fact), P), Us0, Us),
    intent_blend(explore, B),
    tier_gate(Us, [], B, 100, Gated, _, Tiers),
    assertion(Tiers.p.share =:= 0),
    gated_ids(Gated, Ids),
    % without facts the conversation and scratch take the budget: 30+30+20+20 > 100
    aggregate_all(sum(C), ( member(unit(Id, [variant(_, C, _)], _), Us), Id \== m,
                            memberchk(Id, Ids) ), Offered),
    assertion(Offered > 60),
    assertion(Offered =< 100).

test(best_utility_first_within_a_tier) :-
    gate_units(Us),
    intent_blend(explore, B),
    tier_gate(Us, [], B, 100, Gated, _, _),
    gated_ids(Gated, Ids),
    assertion(memberchk(f1, Ids)),
    assertion(\+ memberchk(f3, Ids)).

test(group_gated_as_one_and_constraints_follow) :-
    gate_units(Us),
    intent_blend(clarify, B),
    Cs = [together([t1, s1]), excludes(f1, t2)],
    tier_gate(Us, Cs, B, 60, Gated, GCs, _),
    gated_ids(Gated, Ids),
    (   memberchk(t1, Ids) -> assertion(memberchk(s1, Ids)) ; assertion(\+ memberchk(s1, Ids)) ),
    forall(member(together(G), GCs), forall(member(I, G), memberchk(I, Ids))),
    forall(member(excludes(A, C), GCs), (memberchk(A, Ids), memberchk(C, Ids))).

test(group_with_mandatory_member_is_kept) :-
    Us = [ unit(a, [variant(verbatim, 30, 0)],   [mandatory(true),  kind(turn)]),
           unit(r, [variant(verbatim, 500, 10)], [mandatory(false), kind(scratch)]) ],
    intent_blend(explore, B),
    tier_gate(Us, [together([a, r])], B, 10, Gated, GCs, _),
    gated_ids(Gated, Ids),
    assertion(Ids == [a, r]),
    assertion(GCs == [together([a, r])]).

:- end_tests(ctxrelay_tier_gate).
