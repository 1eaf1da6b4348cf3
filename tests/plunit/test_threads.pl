:- use_module(library(plunit)).
:- use_module(library(lists)).
:- use_module(library(ctxrelay/threads/rules)).
:- use_module(library(ctxrelay/threads/state)).
:- use_module(library(ctxrelay/intent)).
:- use_module(library(ctxrelay/references)).

%   A candidate thread as Python hands it over.
cand(T, Sim, Overlap, Shared, _{thread:T, sim:Sim, overlap:Overlap, shared:Shared}).

ctx(Previous, Cands, Terms, _{previous:Previous, candidates:Cands, join:0.26, same:0.14,
                              terms:Terms}).

decision(Text, Previous, Cands, Terms, Action-Thread-Rule) :-
    ctx(Previous, Cands, Terms, Ctx),
    thread_decision(Text, Ctx, D),
    Action = D.action, Thread = D.thread, Rule = D.rule.

%   A stand-alone question (five new words, nothing of the current thread)
%   when the current thread T2 has Turns turns.
young_decision(Turns, Action-Thread-Rule) :-
    thread_decision("Which carrier is cheapest for small parcels in Germany?",
                    _{previous:"T2", join:0.26, same:0.14, terms:5,
                      words:[carrier, cheapest, small, parcels, germany],
                      candidates:[_{thread:"T2", sim:0.02, overlap:0.0, shared:[],
                                    turns:Turns, user_turns:1},
                                  _{thread:"T1", sim:0.02, overlap:0.0, shared:[], turns:6}]},
                    D),
    Action = D.action, Thread = D.thread, Rule = D.rule.

%   A decision with the message's content words and the current thread's
%   words it re-names (Shared) and how many its latest exchange used (Recent).
focus_decision(Text, Words, Shared, Recent, Action-Thread-Rule) :-
    thread_decision(Text, _{previous:"T1", join:0.26, same:0.14, terms:3, words:Words,
                            candidates:[_{thread:"T1", sim:0.2, overlap:0.2, shared:Shared,
                                          recent:Recent}]}, D),
    Action = D.action, Thread = D.thread, Rule = D.rule.

etcd(C)    :- cand("T1", 0.05, 0.3, ["etcd"], C).
backup(C)  :- cand("T2", 0.05, 0.0, [], C).
quiet1(C)  :- cand("T1", 0.02, 0.0, [], C).

:- begin_tests(thread_rules).

test(first_turn_starts_a_thread, R == new-""-first) :-
    decision("How do I configure etcd?", "", [], 2, R).
test(return_cue_names_the_topic, R == resume-"T1"-return_cue) :-
    backup(B), etcd(E),
    decision("Back to etcd - what about TLS?", "T2", [B, E], 2, R).
test(return_cue_variants, Rules == [return_cue, return_cue, return_cue, return_cue]) :-
    backup(B), etcd(E),
    findall(Rule, ( member(Text, ["Returning to etcd: how do I add a member?",
                                  "About etcd again, is 3.5 stable?",
                                  "As for etcd, which port do peers use?",
                                  "Going back to etcd, what about snapshots?"]),
                    decision(Text, "T2", [B, E], 3, resume-"T1"-Rule) ), Rules).
test(return_cue_prefers_an_earlier_thread_on_a_tie, R == resume-"T1"-return_cue) :-
    cand("T2", 0.1, 0.3, ["etcd"], B), etcd(E),
    decision("Back to etcd, please.", "T2", [B, E], 1, R).
test(return_cue_prefers_the_thread_whose_user_raised_the_topic, R == resume-"T1"-return_cue) :-
    %   both used "dinner"; only in T1 did the user say it (the wine answer said
    %   "per two guests for dinner"), and T2 overlaps the message more
    cand("T3", 0.05, 0.0, [], D),
    W = _{thread:"T2", sim:0.3, overlap:0.5, shared:[dinner, guest], user_shared:[]},
    M = _{thread:"T1", sim:0.3, overlap:0.3, shared:[dinner], user_shared:[dinner]},
    decision("Back to dinner. One guest is vegetarian, what main can I add?", "T3",
             [D, W, M], 4, R).
test(bare_return_resumes_the_thread_before, R == resume-"T1"-return_cue_earlier) :-
    backup(B), quiet1(Q),
    decision("Anyway, back to what we were discussing.", "T2", [B, Q], 0, R).
test(return_in_other_words_goes_to_the_nearest_earlier_thread, R == resume-"T1"-return_cue_similar) :-
    backup(B), cand("T1", 0.05, 0.2, ["loaf"], L),
    decision("Back to the bread - my loaf comes out flat.", "T2", [B, L], 3, R).
test(return_to_words_only_the_current_thread_used_goes_back, R == resume-"T2"-return_cue) :-
    %   the daycare thread (current) said "feeding" once; the message is about the solids
    cand("T3", 0.10, 0.10, ["feeding"], D), cand("T2", 0.40, 0.15, ["solids"], F),
    decision("About the feeding again, how much water should she drink with solids?",
             "T3", [D, F], 4, R).
test(as_for_words_of_the_current_thread_stays, R == continue-"T3"-return_cue) :-
    %   "as for" may name the current topic: no strong return, the named thread keeps it
    cand("T3", 0.10, 0.10, ["feeding"], D), cand("T2", 0.40, 0.15, ["solids"], F),
    decision("As for feeding, how much water should she drink with solids?",
             "T3", [D, F], 4, R).
test(strong_return_in_new_words_goes_to_the_nearest_earlier_thread, R == resume-"T2"-return_cue_similar) :-
    %   no thread used "citations" and none reaches the similarity bar, yet "again" says
    %   the topic was talked about
    cand("T1", 0.03, 0.0, [], S), cand("T2", 0.08, 0.0, [], C),
    decision("About the citations again, do I cite the software I used?", "T1", [S, C], 4, R).
test(weak_cue_in_new_words_is_no_return, true(R \== resume-"T2"-return_cue_similar)) :-
    cand("T1", 0.03, 0.0, [], S), cand("T2", 0.08, 0.0, [], C),
    decision("Regarding taxes, can I deduct my home office?", "T1", [S, C], 4, R).
test(go_back_to_work_is_no_return, R == continue-"T2"-follow_up) :-
    %   "work" names no earlier topic: the user leaves, the conversation stays put
    backup(B), cand("T1", 0.05, 0.0, [], W),
    decision("I have to go back to work now.", "T2", [B, W], 0, R).
test(roll_back_is_not_a_return, true(R \== resume-"T1"-return_cue)) :-
    backup(B), cand("T1", 0.05, 0.3, ["version"], V),
    decision("How do I roll back to the previous version?", "T2", [B, V], 2, R).
test(new_focus_in_the_setting_of_the_thread_starts_one, R == new-""-new_focus) :-
    %   "lamb" is the menu thread's, but as the setting of a question about wine
    focus_decision("What wine goes with slow roast lamb?", [wine, slow, roast, lamb],
                   [slow, roast, lamb], 0, R).
test(new_focus_on_something_just_said_follows_up, R == continue-"T1"-continuity) :-
    focus_decision("What wine goes with slow roast lamb?", [wine, slow, roast, lamb],
                   [slow, roast, lamb], 1, R).
test(new_focus_with_a_demonstrative_setting, R == new-""-new_focus) :-
    focus_decision("What kind of oven do I need for that volume?", [oven, volume], [], 0, R).
test(yes_no_question_about_a_new_subject_in_the_setting, R == new-""-new_focus) :-
    focus_decision("Is pet insurance worth it for two cats?", [pet, insurance, cats], [cats],
                   0, R).
test(yes_no_question_about_a_pronoun_follows_up, R == continue-"T1"-continuity) :-
    focus_decision("Do I need special pans for that?", [special, pans], [], 0, R).
test(attribute_of_the_subject_follows_up, R == continue-"T1"-continuity) :-
    focus_decision("What pace for the easy runs?", [pace, easy, runs], [easy, runs], 0, R).
test(elliptical_question_follows_up, R == continue-"T1"-continuity) :-
    focus_decision("How many naps should she have?", [naps], [], 0, R).
test(focus_the_thread_used_follows_up, R == continue-"T1"-continuity) :-
    focus_decision("What lens would you add for portraits?", [lens, add, portraits], [lens],
                   0, R).
test(a_new_scene_then_a_question_starts_a_thread, R == new-""-new_scene) :-
    focus_decision("The defence is in June. How long should my presentation be?",
                   [defence, june, presentation], [], 0, R).
test(a_scene_in_the_thread_words_stays, R == continue-"T1"-continuity) :-
    focus_decision("My instructor shouts a lot. Should I switch?", [instructor, shouts, switch],
                   [instructor], 0, R).
test(a_scene_that_picks_up_the_last_exchange_stays, R == continue-"T1"-continuity) :-
    focus_decision("The defence is in June. How long should my presentation be?",
                   [defence, june, presentation], [], 1, R).
test(a_subject_just_opened_keeps_its_next_question, R == continue-"T2"-continuity) :-
    %   T2 holds only the exchange that opened it; a question in new words follows it
    young_decision(2, R).
test(an_older_subject_lets_a_stand_alone_question_go, R == new-""-new) :-
    young_decision(6, R).
test(an_unanswered_subject_is_not_held, R == new-""-new) :-
    young_decision(1, R).
test(a_subject_just_opened_keeps_a_question_near_an_earlier_thread,
     R == continue-"T2"-continuity) :-
    %   "Where should the litter box go?" just after the feeding question split off
    %   the cat thread: near the cat thread in meaning, but in none of its words
    thread_decision("Where should the litter box go?",
                    _{previous:"T2", join:0.26, same:0.14, terms:2, words:[litter, box],
                      candidates:[_{thread:"T2", sim:0.2, overlap:0.0, shared:[], turns:2,
                                    user_turns:1},
                                  _{thread:"T1", sim:0.4, overlap:0.0, shared:[], turns:6}]},
                    D),
    R = D.action-D.thread-D.rule.
test(clarification_stays, R == continue-"T1"-clarify) :-
    quiet1(Q), backup(B),
    decision("What do you mean by peer certificates? Explain again.", "T1", [Q, B], 2, R).
test(go_on_stays, R == continue-"T1"-follow_up) :-
    quiet1(Q), backup(B),
    decision("Go on.", "T1", [Q, B], 0, R).
test(opening_pronoun_stays, R == continue-"T1"-follow_up) :-
    quiet1(Q),
    decision("Does it need a restart of the clients too?", "T1", [Q], 2, R).
test(follow_up_naming_another_thread_moves, R == join-"T2"-similar) :-
    quiet1(Q), cand("T2", 0.1, 0.9, ["backups"], B),
    decision("Tell me more about backups", "T1", [Q, B], 1, R).
test(topic_shift_marker_starts_a_thread, R == new-""-new) :-
    cand("T1", 0.05, 0.05, [], Q),
    decision("Unrelated, but which laptop should I buy for writing?", "T1", [Q], 3, R).
test(standalone_question_starts_a_thread, R == new-""-new) :-
    quiet1(Q),
    decision("What's a good recipe for banana bread with walnuts?", "T1", [Q], 4, R).
test(a_statement_continues, R == continue-"T1"-continuity) :-
    quiet1(Q),
    decision("The walls are dark red and I want white.", "T1", [Q], 4, R).
test(similar_earlier_thread_is_joined, R == join-"T2"-similar) :-
    quiet1(Q), cand("T2", 0.4, 0.5, ["postgres", "wal"], B),
    decision("How long should we keep the Postgres WAL archive?", "T1", [Q, B], 4, R).
test(shared_words_of_an_old_topic, R == join-"T2"-shared_words) :-
    quiet1(Q), cand("T2", 0.05, 0.2, ["tomato"], T),
    decision("Should I prune the tomato suckers and side shoots?", "T1", [Q, T], 5, R).
test(strong_current_thread_survives_a_shift_marker, R == continue-"T1"-similar) :-
    cand("T1", 0.5, 0.8, ["etcd"], E),
    decision("By the way, for etcd, should I enable auto-compaction?", "T1", [E], 3, R).
test(one_more_thing_about_x_resumes_x, Rs == [resume-"T1"-return_cue, resume-"T1"-return_cue]) :-
    backup(B), cand("T1", 0.05, 0.3, ["lisbon"], L),
    findall(R, ( member(T, ["One more thing about Lisbon: do I need cash there?",
                            "One more on Lisbon: is the tram worth it?"]),
                 decision(T, "T2", [B, L], 3, R) ), Rs).
test(a_shift_marker_outweighs_similarity_alone, R == new-""-new) :-
    cand("T1", 0.6, 0.17, ["running"], M),
    decision("By the way, how often should I replace running shoes?", "T1", [M], 3, R).
test(picking_up_the_last_answer_is_no_new_question, R == continue-"T1"-continuity) :-
    cand("T1", 0.06, 0.09, ["members"], C0), C = C0.put(recent, 1),
    decision("How many members can fail before we lose quorum?", "T1", [C], 4, R).
test(without_it_the_same_question_stands_alone, R == new-""-new) :-
    cand("T1", 0.06, 0.09, ["members"], C0), C = C0.put(recent, 0),
    decision("How many members can fail before we lose quorum?", "T1", [C], 4, R).
test(an_old_topics_words_outweigh_continuity, R == join-"T1"-shared_words) :-
    cand("T2", 0.05, 0.0, [], Compost), cand("T1", 0.05, 0.3, ["tomato"], Tomato),
    decision("Should I prune the tomato suckers?", "T2", [Compost, Tomato], 3, R).
%   The bridge: a short question that picks up nothing of the current thread,
%   in words or in meaning (its similarity to the thread's latest exchange
%   under ctxrelay_thread_bridge_floor x same), starts a thread; the same
%   question close to the last answer stays, and so does one without a
%   bridge number (older callers).
bridged(Bridge, Recent, C) :-
    cand("T1", 0.05, 0.0, [], C0),
    (   Bridge == none -> C1 = C0 ; C1 = C0.put(bridge, Bridge) ),
    C = C1.put(recent, Recent).
test(an_unbridged_short_question_starts_a_thread, R == new-""-new) :-
    bridged(-0.02, 0, C),
    decision("How do we get mobile data there?", "T1", [C], 2, R).
test(a_bridged_short_question_stays, R == continue-"T1"-continuity) :-
    bridged(0.05, 0, C),
    decision("How do I phrase the email?", "T1", [C], 2, R).
test(a_question_using_the_last_answers_words_stays, R == continue-"T1"-continuity) :-
    bridged(-0.02, 1, C),
    decision("How do we get mobile data there?", "T1", [C], 2, R).
test(one_content_word_is_not_enough, R == continue-"T1"-continuity) :-
    bridged(-0.02, 0, C),
    decision("When do I need lifetimes?", "T1", [C], 1, R).
test(a_bridge_far_below_the_threads_own_starts_a_thread, R == new-""-new) :-
    bridged(0.1, 0, C0), C = C0.put(bridge_mean, 0.4),
    decision("Do I need to shoot raw?", "T1", [C], 2, R).
test(a_bridge_near_the_threads_own_stays, R == continue-"T1"-continuity) :-
    bridged(0.1, 0, C0), C = C0.put(bridge_mean, 0.15),
    decision("Do I need to shoot raw?", "T1", [C], 2, R).
test(no_bridge_number_no_bridge_rule, R == continue-"T1"-continuity) :-
    bridged(none, 0, C),
    decision("How do we get mobile data there?", "T1", [C], 2, R).
test(flags_are_read_at_call_time, [setup(current_prolog_flag(ctxrelay_thread_standalone_terms, Old)),
                                   cleanup(set_prolog_flag(ctxrelay_thread_standalone_terms, Old)),
                                   R == continue-"T1"-continuity]) :-
    set_prolog_flag(ctxrelay_thread_standalone_terms, 9),
    quiet1(Q),
    decision("What's a good recipe for banana bread with walnuts?", "T1", [Q], 4, R).


restore(Text, Previous, Cands, Terms, Restore) :-
    ctx(Previous, Cands, Terms, Ctx),
    thread_decision(Text, Ctx, D),
    Restore = D.restore.

test(a_return_restores_the_thread, R == true) :-
    backup(B), etcd(E),
    restore("Back to etcd - what about TLS?", "T2", [B, E], 2, R).
test(a_join_the_embedding_confirms_restores, R == true) :-
    quiet1(Q), cand("T2", 0.4, 0.5, ["postgres", "wal"], B),
    restore("How long should we keep the Postgres WAL archive?", "T1", [Q, B], 4, R).
test(a_join_on_shared_words_alone_does_not, R == false) :-
    quiet1(Q), cand("T2", 0.05, 0.2, ["tomato"], T),
    restore("Should I prune the tomato suckers and side shoots?", "T1", [Q, T], 5, R).
test(continuing_restores_nothing, R == false) :-
    quiet1(Q), restore("Go on.", "T1", [Q], 0, R).

:- end_tests(thread_rules).

:- begin_tests(thread_rules_errors).

test(text, [error(type_error(text, 42))]) :-
    thread_decision(42, _{candidates:[], join:0.3, same:0.1}, _).
test(context, [error(type_error(dict, nope))]) :-
    thread_decision("x", nope, _).
test(missing_join, [error(existence_error(key, join, _))]) :-
    thread_decision("x", _{candidates:[], same:0.1}, _).
test(bad_similarity, [error(type_error(number, high))]) :-
    thread_decision("x", _{candidates:[_{thread:"T1", sim:high, overlap:0}], join:0.3, same:0.1}, _).

:- end_tests(thread_rules_errors).

:- begin_tests(return_target).

test(named, T == [etcd, tls, setup]) :-
    text_tokens("Back to the etcd TLS setup - is it done?", Ts), return_target(Ts, T).
test(about_again, T == [backups]) :-
    text_tokens("About the backups again: how long?", Ts), return_target(Ts, T).
test(bare, T == []) :-
    text_tokens("Back to what we were discussing.", Ts), return_target(Ts, T).
test(none, fail) :-
    text_tokens("How do I configure etcd?", Ts), return_target(Ts, _).
test(go_back_to_work_is_no_return, fail) :-
    text_tokens("I have to go back to work now.", Ts), return_target(Ts, _).
test(back_to_everyday_places_are_no_return, Found == []) :-
    findall(T, ( member(X, ["Ok, back to bed for me.", "Going back to the office tomorrow.",
                            "We're also looking at daycares for when I go back to work.",
                            "I'll get back to you on that."]),
                 text_tokens(X, Ts), return_target(Ts, T) ), Found).
test(a_topic_after_an_everyday_word_is_a_return, T == [home, server, backups]) :-
    text_tokens("Back to the home server backups: how often?", Ts), return_target(Ts, T).

:- end_tests(return_target).

turns(Ts) :-
    Ts = [ _{turn_id:1, role:user,
             content:"We run etcd v3.5 on a 3-node cluster. We must not restart all members at once. Which CA should sign the peer certs?"},
           _{turn_id:2, role:assistant,
             content:"Use the internal CA. Set --peer-cert-file on each member. The TLS approach is not yet decided."},
           _{turn_id:3, role:user, content:"Perfect. How do I rotate them?"} ].

texts(Items, Texts) :- maplist([I, T]>>get_dict(text, I, T), Items, Texts).

:- begin_tests(thread_state).

test(constraints_point_at_their_turn, Cs == [item{text:"We must not restart all members at once.", turns:[1]}]) :-
    turns(Ts), thread_state(Ts, S), Cs = S.user_constraints.
test(user_facts_are_established) :-
    turns(Ts), thread_state(Ts, S),
    memberchk(item{text:"We run etcd v3.5 on a 3-node cluster.", turns:[1]}, S.established).
test(accepted_and_concrete_answers_are_established) :-
    turns(Ts), thread_state(Ts, S),
    memberchk(item{text:"Use the internal CA.", turns:[2, 3]}, S.established),
    memberchk(item{text:"Set --peer-cert-file on each member.", turns:[2]}, S.established).
test(answered_questions_close, Open == ["The TLS approach is not yet decided.", "How do I rotate them?"]) :-
    turns(Ts), thread_state(Ts, S), texts(S.open_questions, Open).
test(settled_points_close, Open == []) :-
    thread_state([ _{turn_id:1, role:assistant, content:"The TLS approach is not yet decided."},
                   _{turn_id:2, role:user, content:"We decided: the TLS approach uses our internal CA."} ],
                 S),
    texts(S.open_questions, Open).
test(bounded, N == 8) :-
    findall(_{turn_id:I, role:user, content:C},
            ( between(1, 20, I), format(string(C), "We must keep replica ~w online.", [I]) ), Ts),
    thread_state(Ts, S), length(S.user_constraints, N).
test(empty, S == state{established:[], open_questions:[], user_constraints:[]}) :-
    thread_state([], S).
test(bad_turn, [error(existence_error(key, content, _))]) :-
    thread_state([_{turn_id:1, role:user}], _).

:- end_tests(thread_state).

:- begin_tests(thread_summary).

test(spec_shape, X == "Active thread: etcd-config.\nEstablished: user runs v3.5, 3-node cluster.\nOpen: TLS setup approach not yet decided.") :-
    thread_summary('etcd-config', _{established:["user runs v3.5, 3-node cluster."],
                                     open_questions:[item{text:"TLS setup approach not yet decided", turns:[3]}],
                                     user_constraints:[]}, X).
test(questions_keep_their_mark, X == "Active thread: t.\nOpen: Which CA?") :-
    thread_summary(t, _{established:[], open_questions:["Which CA?"], user_constraints:[]}, X).

:- end_tests(thread_summary).

:- begin_tests(intent_topic).

test(new_thread_explores, I == explore) :-
    classify_intent("How do I configure etcd?", _{topic:new, topic_similarity:0.9}, I, _).
test(same_thread_continues, I-M == continue-topic(same)) :-
    classify_intent("How do I configure etcd?", _{topic:same, topic_similarity:0.0}, I, E),
    M = E.matched.
test(markers_still_come_first, I == clarify) :-
    classify_intent("What do you mean by peers?", _{topic:new}, I, _).
test(bad_topic, [error(domain_error(topic, maybe))]) :-
    classify_intent("x", _{topic:maybe}, _, _).

:- end_tests(intent_topic).
