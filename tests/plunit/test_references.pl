:- use_module(library(plunit)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(ctxrelay/references)).

%   Referential expressions (CRP-SPEC-028 §4): detection over the turn's
%   tokens, and resolution against prior turns and scratch entries.

types(Text, Types) :-
    references(Text, Refs),
    findall(T, member(ref(T, _, _), Refs), Types).

only_ref(Text, Type, Details) :-
    references(Text, Refs),
    Refs = [ref(Type, Details, _)].

span_text(Text, Type, Sub) :-
    references(Text, Refs),
    member(ref(Type, _, S-E), Refs),
    L is E - S,
    sub_string(Text, S, L, _, Sub).

:- begin_tests(references_tokens).

test(lowercase_words_and_punct, Ws == [fix, that, bug]) :-
    text_words("Fix THAT bug!", Ws).
test(unicode_letters_fold, Ws == ['étcd', 'naïve', 'café', 'ß']) :-
    text_words("ÉTCD naïve CAFÉ ß", Ws).
test(emoji_is_punct, K == punct) :-
    text_tokens("ok \U0001F680 go", Ts),
    memberchk(t(_, K, 3, 4), Ts).
test(joiners_keep_one_word, Ws == ['etcd-3', 'v3.5', 'don\'t', 'it\'s', '--name']) :-
    text_words("etcd-3 v3.5 don't it’s --name", Ws).
test(sentence_dot_splits, Ts == [t(go, word, 0, 2), t('.', punct, 2, 3)]) :-
    text_tokens("go.", Ts).
test(combining_mark_stays_in_word, Ws == ['cafe\u0301']) :-
    text_words("Cafe\u0301", Ws).
test(spans_are_code_points, Sub == "that bug") :-
    Text = "Café \U0001F680 — fix that bug",
    span_text(Text, entity, Sub).
test(mention_words_parts_and_keys, true) :-
    mention_words("sync.RWMutex and certs", Ws),
    memberchk(rwmutex, Ws), memberchk(sync, Ws), memberchk(cert, Ws).
test(not_text, error(type_error(text, 42))) :-
    text_tokens(42, _).

:- end_tests(references_tokens).

:- begin_tests(references_entity).

test(that_bug, Got == [bug]) :-
    only_ref("fix that bug", entity, D),
    Got = D.words.
test(the_tls_config, Got == [[tls, config], the]) :-
    only_ref("can you check the TLS config", entity, D),
    Got = [D.words, D.determiner].
test(this_error, Got == error) :-
    only_ref("this error keeps happening", entity, D),
    Got = D.head.
test(those_certs, Got == [certs]) :-
    only_ref("renew those certs today", entity, D),
    Got = D.words.
test(that_modified_noun, Got == [rwmutex, version]) :-
    only_ref("show me that RWMutex version", entity, D),
    Got = D.words.
test(the_x_one, Got == [[caching], one]) :-
    only_ref("The caching one, please", entity, D),
    Got = [D.words, D.head].
test(span_covers_phrase, Sub == "those certs") :-
    span_text("renew those certs today", entity, Sub).

:- end_tests(references_entity).

:- begin_tests(references_turn).

test(what_you_said_earlier, Got == [earlier]) :-
    only_ref("what you said earlier is wrong", turn, D),
    Got = [D.which].
test(your_last_answer, Got == latest) :-
    only_ref("in your last answer", turn, D),
    Got = D.which.
test(as_you_mentioned, Got == [you, mentioned]) :-
    only_ref("as you mentioned, it needs quorum", turn, D),
    Got = D.marker.
test(you_said_before, Got == earlier) :-
    only_ref("you said before it was safe", turn, D),
    Got = D.which.
test(you_brought_up, Got == latest) :-
    references("the permission you brought up", Refs),
    memberchk(ref(turn, D, _), Refs),
    Got = D.which.
test(did_you_say, Ts == [turn]) :-
    types("why did you say to wait?", Ts).

:- end_tests(references_turn).

:- begin_tests(references_ordinal).

test(the_second_option, Got == [2, option]) :-
    only_ref("the second option", ordinal, D),
    Got = [D.n, D.noun].
test(option_3, Got == 3) :-
    only_ref("I'd go with option 3", ordinal, D),
    Got = D.n.
test(the_last_one, Got == -1) :-
    only_ref("the last one looks risky", ordinal, D),
    Got = D.n.
test(the_first_approach, Got == 1) :-
    only_ref("the first approach", ordinal, D),
    Got = D.n.
test(numeric_suffix, Got == 2) :-
    only_ref("your 2nd suggestion", ordinal, D),
    Got = D.n.
test(step_in_parens, Got == 2) :-
    only_ref("step (2) fails", ordinal, D),
    Got = D.n.
test(options_2_and_3, Ns == [2, 3]) :-
    references("options 2 and 3", Refs),
    findall(N, ( member(ref(ordinal, D, _), Refs), get_dict(n, D, N) ), Ns).
test(second_to_last, Got == -2) :-
    only_ref("the second to last option", ordinal, D),
    Got = D.n.
test(the_latter, Got == -1) :-
    only_ref("I prefer the latter.", ordinal, D),
    Got = D.n.
test(huge_ordinal_is_detected, Got == 9999) :-
    only_ref("the 9999th option", ordinal, D),
    Got = D.n.

:- end_tests(references_ordinal).

:- begin_tests(references_action).

test(do_it_again_but_faster, Got == [[do, it, again], [but, faster]]) :-
    only_ref("do it again but faster", action, D),
    Got = [D.marker, D.modifier].
test(same_thing_for, Got == [for, 'etcd-3']) :-
    only_ref("same thing for etcd-3", action, D),
    Got = D.modifier.
test(repeat_that, Got == [repeat, that]) :-
    only_ref("repeat that", action, D),
    Got = D.marker.
test(do_the_same, Ts == [action]) :-
    types("Now do the same for /home.", Ts).
test(imperative_clause_again, Sub == "run the query again") :-
    span_text("ok, run the query again please", action, Sub).
test(explain_again_is_not_an_action, Ts == []) :-
    types("explain again", Ts).
test(report_of_retry_is_not_an_action, Ts == []) :-
    types("I tried again and it failed", Ts).

:- end_tests(references_action).

:- begin_tests(references_tool).

test(the_query_result, Got == [[query], result]) :-
    only_ref("what's in the query result?", tool, D),
    Got = [D.type, D.noun].
test(that_output, Got == [[], output]) :-
    only_ref("that output looks wrong", tool, D),
    Got = [D.type, D.noun].
test(the_logs_you_pulled, Sub == "the logs you pulled") :-
    span_text("paste the logs you pulled", tool, Sub).
test(the_api_response, Got == [api]) :-
    only_ref("the API response has a 502", tool, D),
    Got = D.type.
test(what_the_command_printed, Got == command) :-
    only_ref("the command printed nothing", tool, D),
    Got = D.noun.
test(relative_clause_makes_tool, Got == [query, plan]) :-
    only_ref("the query plan you ran", tool, D),
    Got = D.words.

:- end_tests(references_tool).

:- begin_tests(references_negative).

test(the_alone, Refs == []) :-
    references("the", Refs).
test(empty, Refs == []) :-
    references("", Refs).
test(option_as_verb, Refs == []) :-
    references("we could option the lease for a year", Refs).
test(option_without_number, Refs == []) :-
    references("is there an option to disable it?", Refs).
test(complementizer_that, Refs == []) :-
    references("I think that etcd needs more memory", Refs).
test(relative_that, Refs == []) :-
    references("a systemd unit that restarts nginx", Refs).
test(pronoun_that, Refs == []) :-
    references("Cool, that worked. Does that matter?", Refs).
test(time_nouns, Refs == []) :-
    references("this morning it broke, that time too", Refs).
test(generic_logs_of_a, Refs == []) :-
    references("how do I rotate the logs of a Node app", Refs).
test(the_time_i_ran_is_not_tool, Ts == []) :-
    types("the last time I ran it", Ts).
test(first_time_is_not_ordinal, Ts == []) :-
    types("the first time I ran it", Ts0),
    exclude(==(entity), Ts0, Ts).
test(wait_a_second, Refs == []) :-
    references("wait a second", Refs).
test(cataphoric_this, Refs == []) :-
    references("this query: SELECT 1", Refs).
test(the_plain_noun_needs_known_head, Refs == []) :-
    references("the zone apex", Refs).

:- end_tests(references_negative).

:- begin_tests(references_extension).

%   Each test adds one clause for its goal and erases it afterwards.
with_clause(Clause, Goal) :-
    setup_call_cleanup(assertz(Clause, Ref), Goal, erase(Ref)).

test(turn_marker_added, [Before, After] == [[], [turn]]) :-
    types("as I recall, etcd wants SSDs", Before),
    with_clause(ctxrelay_references:turn_marker([as, i, recall]),
                types("as I recall, etcd wants SSDs", After)).
test(tool_noun_added, [Before, After] == [[], [tool]]) :-
    types("that heapdump", Before0), exclude(==(entity), Before0, Before),
    with_clause(ctxrelay_references:tool_noun(heapdump),
                types("that heapdump", After)).
test(ordinal_word_added, Got == 99) :-
    with_clause(ctxrelay_references:ordinal_word(umpteenth, 99),
                only_ref("the umpteenth option", ordinal, D)),
    Got = D.n.
test(entity_determiner_added, Got == yonder) :-
    with_clause(ctxrelay_references:entity_determiner(yonder),
                only_ref("yonder bug", entity, D)),
    Got = D.determiner.
test(action_marker_with_wildcard, Ts == [action]) :-
    with_clause(ctxrelay_references:action_marker([once, _, more]),
                types("once again more", Ts)).

:- end_tests(references_extension).

:- begin_tests(references_enumerations).

test(numbered_styles, Lists == [["alpha", "beta", "gamma"]]) :-
    enumerations("Intro\n1. alpha\n   detail\n2) beta\n\n(3) gamma\n", Lists).
test(bullets, Lists == [["x", "y"], ["z"]]) :-
    enumerations("- x\n- y\n  - nested\nText\n* z\n", Lists).
test(fences_skipped, Lists == [["real"]]) :-
    enumerations("```\n- code\n1. code\n```\n- real\n", Lists).
test(restart_numbering, Lists == [["a", "b"], ["c"]]) :-
    enumerations("1. a\n2. b\n1. c\n", Lists).
test(no_list, Lists == []) :-
    enumerations("3 nodes. 2) is not at the start", Lists).

:- end_tests(references_enumerations).

turns([ _{turn_id:1, role:user, content:"How do I configure TLS for etcd?"},
        _{turn_id:2, role:"assistant",
          content:"Three ways:\n1. cert-manager\n2. cfssl\n3. self-signed certs"},
        _{turn_id:3, role:user, content:"Run the benchmark against staging."},
        _{turn_id:4, role:assistant, content:"Done. Here is the config:\n- quota\n- snapshot"},
        _{turn_id:5, role:tool, content:"rows: 42", name:"sql_query"},
        _{turn_id:6, role:user, content:"do it again"},
        _{turn_id:7, role:assistant, content:"Ran it again."}
      ]).

scratch([ _{scratch_id:"q1", tool_name:"sql_query", created:"2026-05-01T10:00:00Z"},
          _{scratch_id:"h1", tool_name:"http_get", created:"2026-05-01T12:00:00Z"},
          _{scratch_id:"q0", tool_name:"sql_query", created:"2026-05-01T09:00:00Z"} ]).

resolve1(Text, Result) :-
    turns(Ts), scratch(Sc),
    resolve1(Text, Ts, Sc, Result).
resolve1(Text, Turns, Scratch, Result) :-
    references(Text, Refs),
    resolve_references(Refs, Turns, Scratch, [R]),
    (   R = resolved(_, Target) -> Result = Target
    ;   R = unresolved(_, Reason), Result = unresolved(Reason)
    ).

:- begin_tests(references_resolve).

test(ordinal_numbered, T == item(2, 2, "cfssl")) :-
    turns([T1, T2, T3|_]),
    resolve1("the second option", [T1, T2, T3], [], T).
test(ordinal_most_recent_long_enough, T == item(4, 2, "snapshot")) :-
    resolve1("the second option", T).
test(ordinal_bulleted_most_recent, T == item(4, 1, "quota")) :-
    resolve1("the first one", T).
test(ordinal_needs_enough_items, T == item(2, 3, "self-signed certs")) :-
    resolve1("option 3", T).
test(ordinal_last, T == item(4, 2, "snapshot")) :-
    resolve1("the last one", T).
test(ordinal_9999_unresolved, T == unresolved(no_enumeration(9999))) :-
    resolve1("the 9999th option", T).
test(entity_most_words, T == turn(1)) :-
    resolve1("the TLS config", T).          % turn 4 says only "config"
test(entity_most_recent_among_equals, T == turn(4)) :-
    resolve1("that config", T).
test(entity_from_entities_key, T == turn(1)) :-
    resolve1("that zookeeper thing",
             [ _{turn_id:1, role:user, content:"setup", entities:["ZooKeeper"]},
               _{turn_id:2, role:assistant, content:"ok"} ], [], T).
test(entity_unmentioned, T == unresolved(no_mention)) :-
    resolve1("that kafka bug", T).
test(turn_latest, T == turn(7)) :-
    resolve1("your last answer", T).
test(turn_earlier, T == turn(4)) :-
    resolve1("what you said earlier", T).
test(turn_earlier_single, T == turn(2)) :-
    resolve1("you said before", [ _{turn_id:1, role:user, content:"q"},
                                 _{turn_id:2, role:assistant, content:"a"} ], [], T).
test(turn_none, T == unresolved(no_assistant_turn)) :-
    resolve1("as you mentioned", [ _{turn_id:1, role:user, content:"q"} ], [], T).
test(action_skips_repeat_requests, T == turn(3)) :-
    resolve1("same thing for etcd-3", T).
test(tool_typed_scratch, T == scratch("q1")) :-
    resolve1("the query result", T).        % newest sql_query by created
test(tool_untyped_newest_scratch, T == scratch("h1")) :-
    resolve1("that output", T).
test(tool_alias, T == scratch("h1")) :-
    resolve1("the API response", T).
test(tool_turn_without_scratch, T == turn(5)) :-
    turns(Ts),
    resolve1("that output", Ts, [], T).
test(tool_typed_turn_before_other_scratch, T == turn(5)) :-
    turns(Ts),
    resolve1("the query result", Ts, [_{scratch_id:"h9", tool_name:"http_get"}], T).
test(tool_nothing, T == unresolved(no_tool_output)) :-
    resolve1("that output", [], [], T).
test(one_entry_per_ref, [N, Kinds] == [3, [resolved, resolved, unresolved]]) :-
    turns(Ts), scratch(Sc),
    references("the second option, that output and the 9999th option", Refs),
    resolve_references(Refs, Ts, Sc, Resolved),
    length(Resolved, N),
    maplist([R, K]>>functor(R, K, _), Resolved, Kinds).
test(reference_dicts, [RD, TD] == [reference{type:ordinal, details:ordinal{n:2, noun:option}, start:0, end:17},
                                    target{kind:item, turn_id:2, index:2, text:"cfssl"}]) :-
    turns([T1, T2, T3|_]),
    references("the second option", Refs),
    resolve_references(Refs, [T1, T2, T3], [], [Res]),
    reference_dict(Res, D),
    RD = D.ref, TD = D.target.
test(reference_dict_unresolved, Reason == "no_enumeration(9999)") :-
    references("the 9999th option", Refs),
    resolve_references(Refs, [], [], [Res]),
    reference_dict(Res, D),
    Reason = D.reason.
test(reference_dict_bad, error(domain_error(reference, foo))) :-
    reference_dict(foo, _).
test(no_refs, R == []) :-
    turns(Ts),
    resolve_references([], Ts, [], R).

:- end_tests(references_resolve).

:- begin_tests(references_errors).

test(refs_not_list, error(type_error(list, foo))) :-
    resolve_references(foo, [], [], _).
test(turns_not_list, error(type_error(list, "x"))) :-
    resolve_references([], "x", [], _).
test(turn_not_dict, error(type_error(dict, turn(1)))) :-
    resolve_references([], [turn(1)], [], _).
test(turn_missing_key, error(existence_error(key, content, _))) :-
    resolve_references([], [_{turn_id:1, role:user}], [], _).
test(content_not_text, error(type_error(text, 7))) :-
    resolve_references([], [_{turn_id:1, role:user, content:7}], [], _).
test(bad_ref, error(domain_error(reference, foo))) :-
    resolve_references([foo], [], [], _).
test(scratch_missing_id, error(existence_error(key, scratch_id, _))) :-
    resolve_references([], [], [_{tool_name:"x"}], _).
test(text_unbound, error(instantiation_error)) :-
    references(_, _).
test(text_compound, error(type_error(text, f(x)))) :-
    references(f(x), _).
test(enumerations_not_text, error(type_error(text, [a|b]))) :-
    enumerations([a|b], _).
test(tokens_not_list, error(type_error(list, foo))) :-
    token_references(foo, _).
test(tokens_unbound, error(instantiation_error)) :-
    token_references(_, _).
test(reference_dict_unbound, error(instantiation_error)) :-
    reference_dict(_, _).

:- end_tests(references_errors).

:- begin_tests(ctxrelay_mention_memo).

%   mention_words/2 keeps results; a kept result is the computed one, for
%   strings and atoms alike, and a text past the length bound is not kept.
test(kept_results_equal_computed_ones) :-
    T = "Rotate the etcd-peer certs; check sync.RWMutex",
    ctxrelay_reference_tokens:mention_words_(T, Expected),
    mention_words(T, First),
    mention_words(T, Second),
    atom_string(A, T),
    mention_words(A, FromAtom),
    assertion(First == Expected),
    assertion(Second == Expected),
    assertion(FromAtom == Expected).
test(long_texts_are_not_kept) :-
    length(Cs, 20000), maplist(=(0'a), Cs), string_codes(Long, Cs),
    mention_words(Long, _),
    term_hash(Long, H),
    assertion(\+ ctxrelay_reference_tokens:text_memo_(_, H, Long, _)).
test(bad_input, [error(type_error(text, 42))]) :-
    mention_words(42, _).

:- end_tests(ctxrelay_mention_memo).
