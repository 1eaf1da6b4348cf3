:- use_module(library(plunit)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(ctxrelay)).
:- use_module(library(ctxrelay/promotion)).

%   The promotion rules (CRP-SPEC-035 §4.2, CRP-SPEC-029 §5) decided on
%   evidence as ctxrelay.knowledge.promotion gathers it, and applied
%   through the store from Prolog.

sid(N, Sid) :-
    format(string(Sid), "scr_~|~`0t~d~32+", [N]).

turn(Tid, Role, Content, Extra, T) :-
    T0 = _{turn_id:Tid, role:Role, content:Content, own: @(none), mentions:[], via_turns:[],
           antecedent: @(none), reuses:[]},
    T = T0.put(Extra).

entry(Sid, Pinned, Freshness, Refs, _{scratch_id:Sid, pinned:Pinned, freshness:Freshness,
                                      referenced_by:Refs}).

evidence(Turns, Entries, _{turns:Turns, entries:Entries, at_turn:9,
                           similarity:_{topic_same:0.2, edge:0.3}}).

promoted(Actions, Got) :-
    findall(R-X, ( member(A, Actions), A.do == promote, R = A.rule,
                   ( get_dict(scratch_id, A, X) -> true
                   ; get_dict(name, A, X) -> true
                   ; X = A.statement ) ),
            Got).

referenced(Actions, Got) :-
    findall(S-T, ( member(A, Actions), A.do == reference, S = A.scratch_id, T = A.turn_id ),
            Got).

:- begin_tests(promotion_tool_result).

test(pinned_stable_is_promoted, Got == [tool_result-S]) :-
    sid(1, S),
    entry(S, true, "STABLE", [], E),
    turn(3, "tool", "[tool output]", _{own:S}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, []),
    promoted(As, Got).
test(second_reference_promotes, [Refs-Got == [S-5]-[tool_result-S]]) :-
    sid(1, S),
    entry(S, false, "STABLE", [4], E),
    turn(5, "user", "and again", _{mentions:[_{scratch_id:S, start:0, end:36}]}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, []),
    referenced(As, Refs),
    promoted(As, Got).
test(one_reference_is_not_enough, Got == []) :-
    sid(1, S),
    entry(S, false, "STABLE", [], E),
    turn(5, "user", "use it", _{via_turns:[S]}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, []),
    promoted(As, Got).
test(references_count_across_turns, Got == [tool_result-S]) :-
    sid(1, S),
    entry(S, false, "STABLE", [], E),
    turn(5, "user", "use it", _{via_turns:[S]}, T1),
    turn(6, "assistant", "ok", _{via_turns:[S]}, T2),
    evidence([T1, T2], [E], Ev),
    promotion_actions(Ev, As, []),
    promoted(As, Got).
test(min_references_option, Got == [tool_result-S]) :-
    sid(1, S),
    entry(S, false, "STABLE", [], E),
    turn(5, "user", "use it", _{via_turns:[S]}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, [min_references(1)]),
    promoted(As, Got).
test(volatile_never, Got == []) :-
    sid(1, S),
    entry(S, true, "REALTIME", [2, 3, 4], E),
    turn(5, "user", "use it", _{via_turns:[S]}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, []),
    promoted(As, Got).
test(user_declares_stable_volatile, Got == []) :-
    sid(1, S),
    entry(S, true, "STABLE", [], E),
    turn(3, "tool", "[tool output]", _{own:S}, T),
    evidence([T], [E], Ev),
    setup_call_cleanup(
        assertz(ctxrelay_promotion:never_promoted('STABLE')),
        promotion_actions(Ev, As, []),
        retract(ctxrelay_promotion:never_promoted('STABLE'))),
    promoted(As, Got).
test(unknown_entries_are_not_referenced, Refs == []) :-
    sid(1, S),
    turn(5, "user", "use it", _{via_turns:[S]}, T),
    evidence([T], [], Ev),
    promotion_actions(Ev, As, []),
    referenced(As, Refs).
test(own_output_is_no_reference, Refs == []) :-
    sid(1, S),
    entry(S, false, "STABLE", [], E),
    turn(3, "tool", "[tool output]", _{own:S, mentions:[_{scratch_id:S, start:13, end:49}]}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, []),
    referenced(As, Refs).
test(rule_off, Got == []) :-
    sid(1, S),
    entry(S, true, "STABLE", [], E),
    turn(3, "tool", "[tool output]", _{own:S}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, [rules([named, cross_thread])]),
    promoted(As, Got).
test(unknown_rule, error(domain_error(promotion_rule, guess), _)) :-
    evidence([], [], Ev),
    promotion_actions(Ev, _, [rules([guess])]).
test(min_threads_below_two, error(domain_error(min_threads_at_least_2, 1), _)) :-
    evidence([], [], Ev),
    promotion_actions(Ev, _, [min_threads(1)]).

:- end_tests(promotion_tool_result).

:- begin_tests(promotion_named).

antecedent(Tid, Role, Extra, A) :-
    A0 = _{turn_id:Tid, role:Role, scratch_id: @(none), freshness: @(none), mentions:[],
           after_tool:false, tool_freshness: @(none), value:"The Q3 total is $3,600."},
    A = A0.put(Extra).

test(explicit_value, Got == [action{do:promote, rule:named, name:"the Q3 revenue",
                                    value:"4.2M", at_turn:4}]) :-
    turn(4, "user", "let's call 4.2M the Q3 revenue", _{}, T),
    evidence([T], [], Ev),
    promotion_actions(Ev, Got, []).
test(that_is_the_previous_value, Got == [action{do:promote, rule:named,
                                                name:"the budget figure", from_turn:3,
                                                at_turn:4}]) :-
    antecedent(3, "assistant", _{}, A),
    turn(4, "user", "Call that the budget figure.", _{antecedent:A}, T),
    evidence([T], [], Ev),
    promotion_actions(Ev, Got, []).
test(that_is_a_tool_output_and_a_reference, [Refs-Got == [S-4]-[named-S]]) :-
    sid(7, S),
    entry(S, false, "STABLE", [], E),
    antecedent(3, "tool", _{scratch_id:S, freshness:"STABLE"}, A),
    turn(4, "user", "name that budget_q3", _{antecedent:A}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, As, []),
    referenced(As, Refs),
    promoted(As, Got).
test(the_id_named_before_the_phrase_wins, Got == [named-S1]) :-
    sid(1, S1), sid(2, S2),
    entry(S1, false, "STABLE", [], E1),
    entry(S2, false, "STABLE", [], E2),
    antecedent(3, "tool", _{scratch_id:S2, freshness:"STABLE"}, A),
    format(string(Text), "(see ~w) call that the baseline", [S1]),
    turn(4, "user", Text, _{antecedent:A, mentions:[_{scratch_id:S1, start:5, end:41}]}, T),
    evidence([T], [E1, E2], Ev),
    promotion_actions(Ev, As, []),
    findall(named-X, ( member(Ac, As), Ac.do == promote, X = Ac.scratch_id ), Got).
test(volatile_output_is_not_named, Got == []) :-
    sid(7, S),
    entry(S, false, "VOLATILE", [], E),
    antecedent(3, "tool", _{scratch_id:S, freshness:"VOLATILE"}, A),
    turn(4, "user", "call that the load figure", _{antecedent:A}, T),
    evidence([T], [E], Ev),
    promotion_actions(Ev, Got, []).
test(an_unlabelled_reading_counts_as_volatile, Got == []) :-
    sid(7, S),
    antecedent(3, "tool", _{scratch_id:S}, A),
    turn(4, "user", "call that the load figure", _{antecedent:A}, T),
    evidence([T], [], Ev),
    promotion_actions(Ev, Got, []).
test(a_relayed_volatile_reading_is_not_named, Got == []) :-
    antecedent(3, "assistant", _{after_tool:true, tool_freshness:"VOLATILE"}, A),
    turn(4, "user", "call that the load figure", _{antecedent:A}, T),
    evidence([T], [], Ev),
    promotion_actions(Ev, Got, []).
test(assistants_do_not_name, Got == []) :-
    antecedent(3, "user", _{}, A),
    turn(4, "assistant", "Let's call that the budget figure.", _{antecedent:A}, T),
    evidence([T], [], Ev),
    promotion_actions(Ev, Got, []).
test(naming_role_is_an_extension_point, Got == [named-"the budget figure"]) :-
    antecedent(3, "user", _{}, A),
    turn(4, "assistant", "Let's call that the budget figure.", _{antecedent:A}, T),
    evidence([T], [], Ev),
    setup_call_cleanup(
        assertz(ctxrelay_promotion:naming_role(assistant)),
        promotion_actions(Ev, As, []),
        retract(ctxrelay_promotion:naming_role(assistant))),
    promoted(As, Got).

:- end_tests(promotion_named).

:- begin_tests(promotion_cross_thread).

statement(Id, Share, Numbers, Containment, Terms, Extra, St) :-
    St0 = _{id:Id, value_share:Share, numbers_recur:Numbers, containment:Containment,
            terms:Terms},
    St = St0.put(Extra).

origin(Statements, Extra, O) :-
    O0 = _{origin_turn:2, origin_role:"user", threads:["t1", "t2"], after_tool:false,
           tool_freshness: @(none), statements:Statements},
    O = O0.put(Extra).

reuse_turn(Origins, T) :-
    turn(9, "assistant", "...", _{reuses:Origins}, T).

decide(Origins, Options, Got) :-
    reuse_turn(Origins, T),
    evidence([T], [], Ev),
    promotion_actions(Ev, As, Options),
    promoted(As, Got).

test(terms_recur, Got == [cross_thread-1]) :-
    statement(1, 1.0, true, 0.9, ["etcd", "nodes"], _{}, St),
    origin([St], _{}, O),
    decide([O], [], Got).
test(a_paraphrase_by_cosine, Got == [cross_thread-1]) :-
    statement(1, 1.0, true, 0.3, ["etcd", "nodes"], _{similarity:0.6}, St),
    origin([St], _{}, O),
    decide([O], [], Got).
test(cosine_below_the_floor, Got == []) :-
    statement(1, 1.0, true, 0.3, ["etcd", "nodes"], _{similarity:0.45}, St),
    origin([St], _{}, O),
    decide([O], [], Got).
test(too_few_values_recur, Got == []) :-
    statement(1, 0.4, true, 0.9, ["etcd", "nodes"], _{}, St),
    origin([St], _{}, O),
    decide([O], [], Got).
test(a_number_differs, Got == []) :-
    statement(1, 1.0, false, 0.9, ["etcd", "nodes"], _{}, St),
    origin([St], _{}, O),
    decide([O], [], Got).
test(a_weaker_restatement_is_the_same_fact, Got == [cross_thread-1]) :-
    statement(1, 1.0, true, 0.9, ["cluster", "etcd", "nodes", "three"], _{}, St1),
    statement(2, 1.0, true, 0.9, ["etcd", "nodes", "three"], _{}, St2),
    origin([St1], _{}, O1),
    origin([St2], _{origin_turn:3}, O2),
    decide([O1, O2], [], Got).
test(relayed_volatile_reading, Got == []) :-
    statement(1, 1.0, true, 0.9, ["cpu", "load"], _{}, St),
    origin([St], _{origin_role:"assistant", after_tool:true, tool_freshness:"REALTIME"}, O),
    decide([O], [], Got).
test(min_threads_three, Got == []) :-
    statement(1, 1.0, true, 0.9, ["etcd", "nodes"], _{}, St),
    origin([St], _{}, O),
    decide([O], [min_threads(3)], Got).
test(threshold_fact_changes_the_rule, Got == []) :-
    statement(1, 1.0, true, 0.8, ["etcd", "nodes"], _{similarity:0.1}, St),
    origin([St], _{}, O),
    setup_call_cleanup(
        ( retract(ctxrelay_promotion:promotion_threshold(containment, C0)),
          assertz(ctxrelay_promotion:promotion_threshold(containment, 0.85)) ),
        decide([O], [], Got),
        ( retract(ctxrelay_promotion:promotion_threshold(containment, _)),
          assertz(ctxrelay_promotion:promotion_threshold(containment, C0)) )).

:- end_tests(promotion_cross_thread).

:- begin_tests(promotion_store).

%   The CKF made with the hashing embedder first, so opening it loads no model.
fresh_store(Store) :-
    getenv('CTXRELAY_TEST_TMP', Tmp),
    uuid(U),
    directory_file_path(Tmp, U, Dir),
    directory_file_path(Dir, ckf, Ckf),
    py_call('ctxrelay.knowledge.fabric':'FactStore'(Ckf, embedder=hashing), Facts),
    py_call(Facts:close()),
    store_open(Dir, Store, []),
    session_create(Store, s, []).

test(a_named_value_from_prolog, [Rule-Key == "named"-"budget_figure"]) :-
    fresh_store(St),
    turn_append(St, s, message(assistant, "The p99 latency target is 180 ms."), _),
    turn_append(St, s, message(user, "Call that the budget figure."), T),
    promote_turns(St, s, T-T, [P], [embedder(hashing)]),
    Rule = P.rule, Key = P.key,
    promote_turns(St, s, T-T, Again, [embedder(hashing)]),
    assertion(Again == []).
test(pinning_promotes_a_durable_result, [Keys == [Key]]) :-
    fresh_store(St),
    tool_output_record(St, s, calc, _{expr:"1200*3"}, "3600", R, [freshness('STABLE')]),
    scratch_pin(St, s, R.scratch_id),
    string_concat("scratch:", R.scratch_id, Key),
    fact_get(St, Key, F, []),
    Keys = [F.key].
test(pinning_a_volatile_reading_promotes_nothing,
     error(ctxrelay(unknown_fact, _), _)) :-
    fresh_store(St),
    tool_output_record(St, s, metrics, _{q:"cpu"}, "93%", R, [freshness('VOLATILE')]),
    scratch_pin(St, s, R.scratch_id),
    atom_concat('scratch:', R.scratch_id, Key),
    fact_get(St, Key, _, []).
test(turns_outside_the_session, error(ctxrelay(invalid_argument, _), _)) :-
    fresh_store(St),
    promote_turns(St, s, 1-3, _, []).

:- end_tests(promotion_store).
