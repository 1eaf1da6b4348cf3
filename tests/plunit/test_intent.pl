:- use_module(library(plunit)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(ctxrelay/intent)).
:- use_module(library(ctxrelay/references)).

%   Per-turn intent (CRP-SPEC-028 §5): the procedure's steps, their
%   precedence, the context keys, extension and errors.

intent_of(Text, Context, Intent) :-
    classify_intent(Text, Context, Intent, _).

step_of(Text, Context, Intent-Step) :-
    classify_intent(Text, Context, Intent, Evidence),
    get_dict(step, Evidence, Step).

with_clause(Clause, Goal) :-
    setup_call_cleanup(assertz(Clause, Ref), Goal, erase(Ref)).

:- begin_tests(intent_steps).

test(tool_reference, R == tool_reference-tool_reference) :-
    step_of("summarise the query result", _{}, R).
test(tool_reference_logs, R == tool_reference) :-
    intent_of("so the logs you pulled say the env var is missing", _{}, R).
test(clarify_marker, R == clarify-clarify_marker) :-
    step_of("what do you mean by quorum?", _{}, R).
test(clarify_rephrase, R == clarify) :-
    intent_of("Could you put that another way?", _{}, R).
test(drill_down_entity, R == drill_down-reference) :-
    step_of("fix that bug", _{}, R).
test(drill_down_turn, R == drill_down) :-
    intent_of("you mentioned compaction; how often?", _{}, R).
test(drill_down_ordinal, R == drill_down) :-
    intent_of("let's do option 2", _{}, R).
test(drill_down_action, R == drill_down) :-
    intent_of("same thing for etcd-3", _{}, R).
test(continue_marker, R == continue-continue_marker) :-
    step_of("go on", _{}, R).
test(continue_anchored_and, R == continue) :-
    intent_of("And for a cluster of five?", _{}, R).
test(continue_anchor_needs_start, R == explore) :-
    intent_of("compare rsync and scp", _{}, R).
test(continue_by_similarity, R == continue-topic_similarity) :-
    step_of("how does raft elect a leader", _{topic_similarity:0.8, topic_threshold:0.5}, R).
test(explore_by_similarity, R == explore-topic_similarity) :-
    step_of("how does raft elect a leader", _{topic_similarity:0.1, topic_threshold:0.5}, R).
test(explore_without_similarity, R == explore-no_topic_similarity) :-
    step_of("how does raft elect a leader", _{}, R).
test(similarity_at_threshold_continues, R == continue) :-
    intent_of("how does raft elect a leader", _{topic_similarity:0.5, topic_threshold:0.5}, R).
test(default_threshold_is_half, [Low, High] == [explore, continue]) :-
    intent_of("how does raft elect a leader", _{topic_similarity:0.49}, Low),
    intent_of("how does raft elect a leader", _{topic_similarity:0.51}, High).
test(python_none_is_absent, R == explore-no_topic_similarity) :-
    step_of("how does raft elect a leader", _{topic_similarity: @(none)}, R).
test(integer_similarity, R == continue) :-
    intent_of("how does raft elect a leader", _{topic_similarity:1}, R).

:- end_tests(intent_steps).

:- begin_tests(intent_precedence).

%   Each test has the signals of two steps; the earlier step wins.
test(tool_ref_beats_clarify, R == tool_reference) :-
    intent_of("what does that output mean? I don't understand", _{}, R).
test(clarify_beats_reference, R == clarify) :-
    intent_of("what do you mean by the second option?", _{}, R).
test(clarify_beats_action, R == clarify) :-
    intent_of("can you explain that again, I'm confused", _{}, R).
test(reference_beats_continue_marker, R == drill_down) :-
    intent_of("go on about that bug", _{}, R).
test(topic_shift_beats_continue_marker, R == explore-topic_shift_marker) :-
    step_of("Unrelated, but what about Helm charts?", _{topic_similarity:0.9}, R).
test(continue_marker_beats_similarity, R == continue) :-
    intent_of("tell me more", _{topic_similarity:0.0}, R).
test(reference_beats_similarity, R == drill_down) :-
    intent_of("fix that bug", _{topic_similarity:0.0}, R).
test(evidence_names_all_refs, [Step, Types] == [clarify_marker, [ordinal]]) :-
    classify_intent("what do you mean by the second option?", _{}, _, E),
    get_dict(step, E, Step),
    get_dict(refs, E, Refs),
    findall(T, member(ref(T, _, _), Refs), Types).
test(evidence_matched_marker, M = marker([go, on], 0-5)) :-
    classify_intent("go on", _{}, _, E),
    get_dict(matched, E, M).

:- end_tests(intent_precedence).

:- begin_tests(intent_mentioned).

test(the_noun_unmentioned_is_not_a_reference, R == explore) :-
    intent_of("how does the kernel schedule threads", _{mentioned:[etcd, raft]}, R).
test(the_noun_without_mentions_counts, R == drill_down) :-
    intent_of("how does the kernel schedule threads", _{}, R).
test(the_modifier_mentioned_counts, R == drill_down) :-
    mention_words("Set the TLS flags on every member.", M),
    intent_of("where does the TLS config live?", _{mentioned:M}, R).
test(the_bare_head_mentioned_is_a_topic, R == continue) :-
    mention_words("Protect the map with a mutex.", M),
    intent_of("does the map need a lock for reads?", _{mentioned:M, topic_similarity:0.6}, R).
test(demonstrative_counts_unmentioned, R == drill_down) :-
    intent_of("fix that bug", _{mentioned:[]}, R).
test(strings_as_mentions, R == drill_down) :-
    intent_of("where does the TLS config live?", _{mentioned:["tls"]}, R).
test(definition_of_mentioned_term, R == clarify-definition) :-
    mention_words("The raft index of etcd-2 matches the leader's.", M),
    step_of("What's a raft index?", _{mentioned:M}, R).
test(definition_of_new_term, R == explore) :-
    mention_words("The raft index of etcd-2 matches the leader's.", M),
    intent_of("What is a bloom filter?", _{mentioned:M}, R).
test(definition_needs_mentions, R == explore) :-
    intent_of("What's a raft index?", _{}, R).

:- end_tests(intent_mentioned).

:- begin_tests(intent_extension).

test(clarify_marker_added, [Before, After] == [explore, clarify]) :-
    intent_of("say what, mate?", _{}, Before),
    with_clause(ctxrelay_intent:clarify_marker([say, what]),
                intent_of("say what, mate?", _{}, After)).
test(continue_marker_added, [Before, After] == [explore, continue]) :-
    intent_of("onwards!", _{}, Before),
    with_clause(ctxrelay_intent:continue_marker([onwards]),
                intent_of("onwards!", _{}, After)).
test(topic_shift_marker_added, [Before, After] == [continue, explore]) :-
    intent_of("pivoting: how is raft tested", _{topic_similarity:0.9}, Before),
    with_clause(ctxrelay_intent:topic_shift_marker([pivoting]),
                intent_of("pivoting: how is raft tested", _{topic_similarity:0.9}, After)).
test(reference_marker_added, [Before, After] == [explore, drill_down]) :-
    intent_of("per your musings, how", _{}, Before),
    with_clause(ctxrelay_references:turn_marker([your, musings]),
                intent_of("per your musings, how", _{}, After)).
test(tool_noun_added, [Before, After] == [drill_down, tool_reference]) :-
    intent_of("open that heapdump", _{}, Before),
    with_clause(ctxrelay_references:tool_noun(heapdump),
                intent_of("open that heapdump", _{}, After)).
test(marker_gap, R == clarify) :-
    intent_of("what does the 'flat%' column mean?", _{}, R).

:- end_tests(intent_extension).

:- begin_tests(intent_api).

test(five_intents, L == [clarify, continue, drill_down, explore, tool_reference]) :-
    findall(I, intent(I), L0),
    msort(L0, L).
test(unicode_text, R == drill_down) :-
    intent_of("Füge das hinzu — fix that bug 🚀", _{}, R).
test(atom_and_codes_text, [A, C] == [continue, continue]) :-
    intent_of('go on', _{}, A),
    atom_codes('go on', Codes),
    intent_of(Codes, _{}, C).
test(evidence_dict_plain, [Step, Kind, Type, S, E] == [reference, refs, entity, 4, 12]) :-
    classify_intent("fix that bug", _{}, _, Ev),
    evidence_dict(Ev, D),
    Step = D.step,
    Kind = D.matched.kind,
    [R] = D.refs,
    Type = R.type, S = R.start, E = R.end.
test(evidence_dict_similarity, M == matched{kind:similarity, similarity:0.2, threshold:0.5}) :-
    classify_intent("raft", _{topic_similarity:0.2}, _, Ev),
    evidence_dict(Ev, D),
    M = D.matched.
test(given_refs_are_used_as_found, [I1, Ev1] == [I2, Ev2]) :-
    Text = "fix that bug, then the second option",
    ctxrelay_references:references(Text, Refs),
    classify_intent(Text, _{}, I1, Ev1),
    classify_intent(Text, _{refs:Refs}, I2, Ev2).
test(given_refs_decide, I == continue) :-
    classify_intent("fix that bug", _{refs:[], topic_similarity:0.9}, I, _).
test(no_choicepoint_left, Det == true) :-
    call_cleanup(classify_intent("that output, go on", _{topic_similarity:0.2}, _, _),
                 Det = true).

:- end_tests(intent_api).

:- begin_tests(intent_errors).

test(text_number, error(type_error(text, 42))) :-
    classify_intent(42, _{}, _, _).
test(text_unbound, error(instantiation_error)) :-
    classify_intent(_, _{}, _, _).
test(context_not_dict, error(type_error(dict, [topic_similarity=0.5]))) :-
    classify_intent("go on", [topic_similarity=0.5], _, _).
test(similarity_not_number, error(type_error(number, "high"))) :-
    classify_intent("go on", _{topic_similarity:"high"}, _, _).
test(threshold_not_number, error(type_error(number, x))) :-
    classify_intent("go on", _{topic_threshold:x}, _, _).
test(mentioned_not_list, error(type_error(list, foo))) :-
    classify_intent("go on", _{mentioned:foo}, _, _).
test(refs_not_list, error(type_error(list, foo))) :-
    classify_intent("go on", _{refs:foo}, _, _).

:- end_tests(intent_errors).
