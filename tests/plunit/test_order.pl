:- use_module(library(plunit)).
:- use_module(library(ctxrelay/order)).

%   The primacy-recency sandwich of CRP-SPEC-003 §7.4.

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
