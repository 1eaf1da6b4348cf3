:- use_module(library(plunit)).
:- use_module(library(ctxrelay/scratch)).

%   The freshness gate (CRP-SPEC-029 §4, §8) decides in Prolog; Python only
%   computes the age and renders the action.

gate(Age, TTL, Class, Policy, Can, Action) :-
    ctxrelay_scratch:freshness_gate(Age, TTL, Class, Policy, Can, Action).

:- begin_tests(scratch_freshness_gate).

test(fresh_within_ttl) :-
    gate(30, 30, 'REALTIME', none, true, A), A == fresh.
test(static_never_stale) :-
    gate(1.0e9, none, 'STATIC', none, true, A), A == fresh.
test(realtime_stale_reinvokes) :-
    gate(30.5, 30, 'REALTIME', none, true, A), A == reinvoke.
test(other_classes_warn) :-
    forall(member(C, ['VOLATILE', 'STABLE']),
           ( gate(4000, 300, C, none, true, A), A == warn )).
test(policy_overrides_the_class_default) :-
    gate(4000, 300, 'VOLATILE', exclude, true, A), A == exclude.
test(reinvoke_becomes_warn_when_the_call_cannot_repeat) :-
    gate(31, 30, 'REALTIME', none, false, A1), A1 == warn,
    gate(400, 300, 'VOLATILE', reinvoke, false, A2), A2 == warn.
test(text_and_janus_booleans_as_python_sends_them) :-
    gate(31, 30, "REALTIME", "none", @(false), A), A == warn.
test(age_must_be_a_number, [error(type_error(number, soon))]) :-
    gate(soon, 30, 'REALTIME', none, true, _).

:- end_tests(scratch_freshness_gate).
