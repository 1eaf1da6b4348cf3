:- use_module(library(plunit)).
:- use_module(library(ctxrelay/envelope)).

:- begin_tests(ctxrelay_sandwich).

test(no_critical, O == [s1, i1]) :-
    sandwich([0.6-i1, 0.2-s1], O).
test(one_critical_not_repeated, O == [c1, s1, i1]) :-
    sandwich([0.6-i1, 0.9-c1, 0.2-s1], O).
test(two_critical_first_and_last_up_front, O == [c1, c2, s1, i1]) :-
    sandwich([0.85-c2, 0.6-i1, 0.95-c1, 0.1-s1], O).
test(many_critical, O == [c1, c4, s1, i1, c2, c3]) :-
    sandwich([0.99-c1, 0.9-c2, 0.88-c3, 0.81-c4, 0.7-i1, 0.3-s1], O).
test(empty, O == []) :-
    sandwich([], O).
test(nothing_lost_or_repeated, [true(Sorted == Items)]) :-
    numlist(1, 30, Ns),
    maplist([N, S-N]>>(S is (N mod 10) / 10), Ns, Scored),
    sandwich(Scored, O),
    msort(O, Sorted), msort(Ns, Items).
test(not_a_list, error(type_error(list, foo), _)) :-
    sandwich(foo, _).

:- end_tests(ctxrelay_sandwich).

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
