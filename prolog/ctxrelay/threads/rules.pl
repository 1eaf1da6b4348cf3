:- module(ctxrelay_thread_rules,
          [ thread_decision/3,      % +Text, +Context, -Decision
            return_target/2,        % +Tokens, -Target
            % extension points (multifile, dynamic)
            return_cue/2,           % ?Before, ?After
            open_target_word/1,     % ?Word
            follow_up_marker/1,     % ?Words
            topic_opener/1,         % ?Words
            request_opener/1,       % ?Words
            everyday_destination/1, % ?Word
            attribute_word/1        % ?Word
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(aggregate)).
:- use_module(library(yall)).
:- use_module(library(ctxrelay/references)).
:- use_module(library(ctxrelay/references/tokens), [word_parts/2, token_words/2]).
:- use_module(library(ordsets)).
:- use_module(library(ctxrelay/intent), [clarify_marker/1, topic_shift_marker/1]).

/** <module> Which topic thread a user turn joins (CRP-SPEC-028 §3.3)

One home for the decision: the turn log calls thread_decision/3 for every
stored user turn it derives, and an assembly for the new message, with
the numbers Python computed (ctxrelay.text.threads): for each
candidate thread (the most recently active ones, most recent first) its
similarity to the message (`sim`, the largest cosine against its latest
turns), the share of the message's content words it used (`overlap`,
0..1, rarer words weigh more) and those words (`shared`).  The rules,
first match wins:

  1. `first`: no thread yet -> a new thread.
  2. `return_cue`: an explicit return ("back to etcd", "returning to the
     TLS question", "about the backups again", "as for Postgres, ...")
     names a topic; the thread that shared most of its words is
     resumed (its words, not the embedding, decide).
  3. `return_cue_similar`: a return naming a topic in words no thread
     used ("back to the bread" when the thread spoke of loaves) resumes
     the earlier thread the message is most about, if any shares a word
     or the `same` similarity; `return_cue_earlier`: a return that names
     no topic ("back to what we were discussing") resumes the most
     recent thread before the current one.
  4. `clarify`: a clarification ("what do you mean by ...", "explain
     again") stays in the thread of the turn it asks about.
  5. `follow_up`: a follow-up of the previous turn stays in its thread:
     a follow-up marker ("go on", "tell me more", "why?"), a reference
     to prior content ("that bug", "the second option", "what you said"),
     a pronoun that opens the turn ("does it ...", "is that ..."), or a
     turn without a content word ("thanks!") -- unless the message names
     another thread the current one never used, or announces a new
     topic (ctxrelay_intent:topic_shift_marker/1).
  6. `similar`: an earlier thread joins the turn if its similarity
     reaches the embedder's `join` threshold or its overlap reaches flag
     ctxrelay_thread_overlap_join, and beats the current thread, which
     gets flag ctxrelay_thread_continuity as a bonus (conversations
     stay on topic more often than they jump) except after a
     topic-shift marker.  `shared_words`: a message that uses none of
     the current thread's words but an earlier thread's goes back to
     it.  `new_focus`: a question whose focus is a new thing and that
     names the thread's subject only as its setting ("What wine goes
     with slow roast lamb?") starts a thread; `new_scene`: so does a
     statement in words the thread never used followed by a question.
     `continuity`: without a topic-shift marker the current thread
     keeps the turn unless it is a stand-alone question on another
     subject (standalone/4); a thread that holds only its opening
     exchange keeps it in any case, and loses it to an earlier thread
     only on that thread's words.  The current thread also keeps a turn its
     evidence reaches the bar for; after a topic-shift marker only on
     its words, not on similarity alone.
  7. `new`: otherwise a new thread.

The cue and marker phrases are facts users extend, in the syntax of
ctxrelay_references (word lists, gap(N), `^` and `$` anchors):

    :- multifile ctxrelay_thread_rules:return_cue/2.
    ctxrelay_thread_rules:return_cue([picking, up], [again]).
*/

:- multifile return_cue/2, open_target_word/1, follow_up_marker/1, topic_opener/1,
             request_opener/1, everyday_destination/1, attribute_word/1.
:- dynamic return_cue/2, open_target_word/1, follow_up_marker/1, topic_opener/1,
           request_opener/1, everyday_destination/1, attribute_word/1.

:- create_prolog_flag(ctxrelay_thread_overlap_join, 0.4, [keep(true), type(float)]).
:- create_prolog_flag(ctxrelay_thread_overlap_same, 0.2, [keep(true), type(float)]).
:- create_prolog_flag(ctxrelay_thread_continuity, 0.25, [keep(true), type(float)]).
:- create_prolog_flag(ctxrelay_thread_standalone_terms, 4, [keep(true), type(integer)]).
:- create_prolog_flag(ctxrelay_thread_standalone_overlap, 0.25, [keep(true), type(float)]).
:- create_prolog_flag(ctxrelay_thread_standalone_similarity, 1.0, [keep(true), type(float)]).
:- create_prolog_flag(ctxrelay_thread_unbridged_terms, 2, [keep(true), type(integer)]).
:- create_prolog_flag(ctxrelay_thread_bridge_floor, 0.1, [keep(true), type(float)]).
:- create_prolog_flag(ctxrelay_thread_bridge_relative, 0.5, [keep(true), type(float)]).

:- det(thread_decision/3).

%!  thread_decision(+Text, +Context:dict, -Decision:dict) is det.
%
%   Decide the thread of the user turn Text.  Context has:
%
%     - previous: the thread of the turn before (text; "" for none)
%     - candidates: a list of dicts, most recently active first, each
%       with thread (text), sim, overlap (numbers), shared (list of
%       text: the message's words the thread used) and optionally
%       recent (integer: how many of them the thread's latest exchange
%       used; 0 when absent), turns and user_turns (how many turns and
%       user turns it holds; optional), user_shared (the shared words the
%       thread's user turns used; shared when absent) and rank
%     - join, same: the embedder's thread_join and topic_same
%       similarity thresholds (numbers)
%     - terms: the number of content words of Text (optional)
%     - words: the content words of Text, in order (optional; without
%       them the new_focus rule does not apply)
%
%   Decision is decision{action:Action, thread:Thread, rule:Rule,
%   restore:Bool}: Action is `continue` (the previous thread), `resume`
%   (an earlier thread the message returns to by name), `join` (an
%   earlier thread it is about) or `new` (Thread is ""); Rule names the
%   rule that decided (see the module doc); Restore says whether the
%   thread's dormant turns and state come back into the pack (on a
%   resume, and on a join whose similarity reaches `join`).
%
%   @error type_error(text, Text)
%   @error type_error(dict, Context)
%   @error existence_error(key, Key, Context) for a missing candidates,
%          join or same
%   @error type_error(number, X) for a non-numeric threshold or score

thread_decision(Text, Context, Decision) :-
    must_be(text, Text),
    must_be(dict, Context),
    context_value(candidates, Context, Cands0),
    must_be(list, Cands0),
    maplist(candidate, Cands0, Cands),
    context_value(join, Context, Join),
    must_be(number, Join),
    context_value(same, Context, Same),
    must_be(number, Same),
    (   get_dict(previous, Context, P0), P0 \== "", P0 \== '', \+ no_value(P0)
    ->  text_to_string(P0, Previous)
    ;   Previous = none
    ),
    (   get_dict(terms, Context, Terms), integer(Terms) -> true ; Terms = unknown ),
    (   get_dict(words, Context, Ws0), is_list(Ws0)
    ->  maplist(shared_atom, Ws0, Words)
    ;   Words = []
    ),
    text_tokens(Text, Tokens),
    (   return_target(Tokens, Target) -> Return = return(Target) ; Return = none ),
    young(Previous, Cands0, Young),
    decide(Tokens-Return, Terms/Words/Young, Previous, Cands, Join-Same, Action, Thread, Rule),
    restore(Action, Rule, Thread, Cands, Join, Restore),
    Decision = decision{action:Action, thread:Thread, rule:Rule, restore:Restore}.

%   restore(+Action, +Rule, +Thread, +Cands, +Join, -Bool)
%
%   Whether the assembly brings the thread's dormant turns and its state
%   back (§3.3, §6.2): on an explicit return, and on a join the embedding
%   confirms (similarity at the join threshold).  A join on shared words
%   alone places the turn without spending the budget on the old turns
%   (recall still finds the ones that match).
restore(resume, _, _, _, _, true) :- !.
restore(join, _, Thread, Cands, Join, true) :-
    memberchk(c(Thread, Sim, _, _, _, _, _), Cands),
    Sim >= Join,
    !.
restore(_, _, _, _, _, false).

context_value(Key, Dict, Value) :-
    (   get_dict(Key, Dict, Value)
    ->  true
    ;   existence_error(key, Key, Dict)
    ).

no_value(@(none)).
no_value(none).

%   candidate(+Dict, -c(Thread, Sim, Overlap, Shared, Recent, _, _))
candidate(D, c(Thread, Sim, Overlap, Shared, Recent, Bridge, UserShared)) :-
    must_be(dict, D),
    context_value(thread, D, T0),
    text_to_string(T0, Thread),
    context_value(sim, D, Sim),
    must_be(number, Sim),
    context_value(overlap, D, Overlap),
    must_be(number, Overlap),
    (   get_dict(shared, D, S0) -> must_be(list, S0) ; S0 = [] ),
    maplist(shared_atom, S0, Shared),
    (   get_dict(user_shared, D, U0) -> must_be(list, U0) ; U0 = S0 ),
    maplist(shared_atom, U0, UserShared),
    (   get_dict(recent, D, Recent), integer(Recent) -> true ; Recent = 0 ),
    (   get_dict(bridge, D, B), number(B)
    ->  (   get_dict(bridge_mean, D, M), number(M) -> true ; M = none ),
        Bridge = bridge(B, M)
    ;   Bridge = none
    ).

shared_atom(S, A) :-
    (   atom(S) -> A = S ; atom_string(A, S) ).

%   decide(+Tokens-Return, +Terms, +Previous, +Cands, +Join-Same, -Action, -Thread, -Rule)
%
%   Return is return(Target) for a message with an explicit return
%   (return_target/2), else `none`: the first three rules read it, so it
%   is found once per decision, not once per rule.
decide(_, _, _, [], _, new, "", first) :-
    !.
decide(Tokens-return(Target), _, Previous, Cands, Join-_, Action, Thread, return_cue) :-
    Target = [_|_],
    best_named(Target, Previous, Cands, Named),
    (   Named == Previous,                     % only the current thread used the words:
        strong_return(Tokens),                 % a return leaves it for the earlier thread
        earlier_about(Previous, Cands, Join, Thread)   % the message is more about
    ->  true
    ;   Thread = Named
    ),
    !,
    action(Previous, Thread, resume, Action).
decide(Tokens-return([_|_]), _, Previous, Cands, Join-Same, resume, Thread,
       return_cue_similar) :-
    findall(E-T, ( member(c(T, Sim, O, _, _, _, _), Cands), T \== Previous,   % names a topic in
                   ( O > 0 ; Sim >= Same ),                            % words no thread used:
                   evidence(T, Cands, Join, E) ), Earlier),             % the earlier thread the
    (   max_member(_-Thread, Earlier)                                   % message is most about
    ->  true
    ;   strong_return(Tokens),                 % "about X again" says X came up before:
        earlier_about(Previous, Cands, Join, Thread)   % the earlier thread it is more about
    ),
    !.
decide(_-return([]), _, Previous, Cands, _, resume, Thread, return_cue_earlier) :-
    member(c(Thread, _, _, _, _, _, _), Cands),
    Thread \== Previous,
    !.
decide(Tokens-_, _, Previous, _, _, continue, Previous, clarify) :-
    Previous \== none,
    marker_match(clarify_marker, Tokens, _, _),
    !.
decide(Tokens-_, Terms/Words/_, Previous, Cands, _, continue, Previous, follow_up) :-
    Previous \== none,
    \+ marker_match(topic_shift_marker, Tokens, _, _),
    follow_up(Tokens, Terms, Previous, Cands),
    \+ names_another_thread(Previous, Cands),
    \+ new_focus(Tokens, Words, Previous, Cands),
    !.
decide(Tokens-_, Terms0/Words/Young, Previous, Cands, Join-Same, Action, Thread, Rule) :-
    (   marker_match(topic_shift_marker, Tokens, _, _) -> Shift = true ; Shift = false ),
    (   (   memberchk(t('?', punct, _, _), Tokens)
        ;   marker_match(request_opener, Tokens, _, _)
        )
    ->  (   marker_match(topic_opener, Tokens, _, _)
        ->  Terms = opener(Terms0)
        ;   Terms = Terms0
        )
    ;   Terms = statement
    ),
    current_prolog_flag(ctxrelay_thread_continuity, Bonus),
    evidence(Previous, Cands, Join, EP),
    findall(E-T, ( member(c(T, _, _, _, _, _, _), Cands), T \== Previous,
                   evidence(T, Cands, Join, E) ), Others),
    (   Shift == false -> Stay is EP + Bonus ; Stay = EP ),
    (   max_member(EO-TO, Others), EO >= 1.0, EO > Stay,
        (   Young == true, Shift == false               % a subject just opened keeps its
        ->  names_thread(TO, Cands)                     % follow-up unless it names another
        ;   true
        )
    ->  Thread = TO, Rule = similar                      % clearly about an earlier thread
    ;   Shift == false,
        back_in_old_words(Previous, Cands, TN)
    ->  Thread = TN, Rule = shared_words                 % a new question in an old topic's words
    ;   Previous \== none, Shift == false,
        new_focus(Tokens, Words, Previous, Cands)
    ->  Thread = "", Rule = new_focus                   % a new subject of the same situation
    ;   Previous \== none, Shift == false,
        new_scene(Tokens, Words, Previous, Cands)
    ->  Thread = "", Rule = new_scene                   % a new scene set, then a question
    ;   Previous \== none, Shift == false,
        (   Young == true, Terms \= opener(_)
        ->  true                                        % the subject just opened goes on
        ;   \+ standalone(Terms, Previous, Cands, Same)
        )
    ->  Thread = Previous, Rule = continuity            % nothing says the topic changed
    ;   Previous \== none, EP >= 1.0,
        stays_after_shift(Shift, Previous, Cands)
    ->  Thread = Previous, Rule = similar
    ),
    !,
    action(Previous, Thread, join, Action).
decide(_, _, _, _, _, new, "", new).

action(_, "", _, new) :-
    !.
action(Previous, Thread, _, continue) :-
    Thread == Previous,
    !.
action(_, _, Earlier, Earlier).

%   young(+Previous, +CandDicts, -Young)
%
%   Young is `true` when the current thread holds only the exchange that
%   opened it (two turns: the user's and the answer): the user has just
%   raised the subject and heard back, and the next question follows it
%   up unless something says otherwise (a marker, an opener, a cue, words
%   of another thread).  Messages stacked before any answer are not
%   held: nothing was said yet to follow up.
young(Previous, Dicts, Young) :-
    (   Previous \== none,
        member(D, Dicts),
        get_dict(thread, D, T0), text_to_string(T0, Previous),
        get_dict(turns, D, N), N == 2,
        get_dict(user_turns, D, U), U == 1
    ->  Young = true
    ;   Young = false
    ).

%   names_thread(+Thread, +Cands): the message uses Thread's words, at
%   least flag ctxrelay_thread_overlap_join of them.
names_thread(Thread, Cands) :-
    memberchk(c(Thread, _, Overlap, _, _, _, _), Cands),
    current_prolog_flag(ctxrelay_thread_overlap_join, OJ),
    Overlap >= OJ.

%   strong_return(+Tokens)
%
%   The return cue of Tokens can only point back ("back to X", "about X
%   again", "one more thing about X"): X was talked about before.  The
%   cues anchored at the start ("as for X", "regarding X", "re X") may
%   also bring X up for the first time, so they are not strong.
strong_return(Tokens) :-
    return_cue(Before, _),
    Before \= ['^'|_],
    marker_match(=(Before), Tokens, _, Start-_),
    \+ not_a_return(Tokens, Start),
    !.

%   earlier_about(+Previous, +Cands, +Join, -Thread)
%
%   The earlier thread the message is most about, when it is more about
%   it than about the current thread: "about the feeding again, how much
%   water with the solids?" after a daycare answer that said "feeding"
%   goes back to the thread about solids.
earlier_about(Previous, Cands, Join, Thread) :-
    evidence(Previous, Cands, Join, EP),
    findall(E-T, ( member(c(T, _, _, _, _, _, _), Cands), T \== Previous,
                   evidence(T, Cands, Join, E) ), Earlier),
    max_member(EO-Thread, Earlier),
    EO > EP.

%   evidence(+Thread, +Cands, +Join, -E)
%
%   How strongly the message is about Thread, 1 at the bar of joining:
%   its similarity over the embedder's join threshold, or its overlap
%   over flag ctxrelay_thread_overlap_join, whichever is larger.
evidence(none, _, _, 0) :-
    !.
evidence(Thread, Cands, Join, E) :-
    memberchk(c(Thread, Sim, Overlap, _, _, _, _), Cands),
    !,
    current_prolog_flag(ctxrelay_thread_overlap_join, OJ),
    E is max(Sim / max(Join, 0.01), Overlap / max(OJ, 0.01)).
evidence(_, _, _, 0).

%   back_in_old_words(+Previous, +Cands, -Thread)
%
%   The message uses none of the current thread's words (and none of its
%   latest exchange) but at least flag ctxrelay_thread_overlap_same of an
%   earlier thread's: "should I prune the tomato suckers?" while talking
%   compost goes back to the tomatoes.
back_in_old_words(Previous, Cands, Thread) :-
    memberchk(c(Previous, _, OP, _, 0, _, _), Cands),
    OP =:= 0,
    current_prolog_flag(ctxrelay_thread_overlap_same, OS),
    findall(O-T, ( member(c(T, _, O, _, _, _, _), Cands), T \== Previous, O >= OS ), Named),
    max_member(_-Thread, Named).

%   stays_after_shift(+Shift, +Previous, +Cands)
%
%   After a topic-shift marker ("by the way", "unrelated") the user says
%   the subject changes: the current thread keeps the turn only if the
%   message uses its words (overlap at flag ctxrelay_thread_overlap_join),
%   not on embedding similarity alone ("by the way, how often should I
%   replace running shoes?" is near a marathon thread, yet not about it).
stays_after_shift(false, _, _) :-
    !.
stays_after_shift(true, Previous, Cands) :-
    memberchk(c(Previous, _, Overlap, _, _, _, _), Cands),
    current_prolog_flag(ctxrelay_thread_overlap_join, OJ),
    Overlap >= OJ.

%   standalone(+Terms, +Previous, +Cands, +Same)
%
%   The message reads as a question of its own on another subject: a
%   question or a request (Terms is `statement` for a message with
%   neither a question mark nor a request_opener/1: "the walls are dark
%   red" answers the last turn) with at least
%   flag ctxrelay_thread_standalone_terms content words, (almost) none
%   of which the current thread used, none of its latest exchange (the
%   candidate's `recent`: "how many members can fail?" after an answer
%   about each member follows it up), and no similarity to it.  After a
%   topic opener ("Actually, ...", "Also, ...") one content word is
%   enough and the latest exchange does not count.
standalone(Terms0, Previous, Cands, Same) :-
    unbridged(Terms0, Previous, Cands, Same),
    !.
standalone(Terms0, Previous, Cands, Same) :-
    (   Terms0 = opener(Terms)
    ->  Min = 1,                             % "Actually, what's a good backup?"
        Opener = true
    ;   Terms = Terms0,
        current_prolog_flag(ctxrelay_thread_standalone_terms, Min),
        Opener = false
    ),
    integer(Terms),
    Terms >= Min,
    memberchk(c(Previous, Sim, Overlap, _, Recent, _, _), Cands),
    current_prolog_flag(ctxrelay_thread_standalone_overlap, OS),
    Overlap < OS,
    (   Opener == true
    ->  true
    ;   Recent =:= 0                         % "how many members can fail?" after an
    ),                                       % answer about each member follows it up
    current_prolog_flag(ctxrelay_thread_standalone_similarity, K),
    Sim < K * Same.

%   unbridged(+Terms, +Previous, +Cands, +Same)
%
%   A question that does not pick up the current thread at all: at least
%   flag ctxrelay_thread_unbridged_terms content words, none of which the
%   thread used (overlap 0) nor its latest exchange, and a similarity to
%   that exchange (the candidate's `bridge`: the last user turn of the
%   thread and the answers after it) under flag
%   ctxrelay_thread_bridge_floor times the embedder's `same` threshold.
%   "How do we get mobile data there?" after an answer about Hakone
%   day trips asks about something else; "How do I phrase the email?"
%   after an answer about a counter-offer does not share its words
%   either, yet is close to it in meaning.  A thread that has bridges of
%   its own (`bridge_mean`: the mean similarity of its follow-ups to the
%   exchange before each, from two on) also counts a bridge under flag
%   ctxrelay_thread_bridge_relative times that mean as none: what is
%   close for one embedder and thread is far for another.  Without a
%   bridge number (older callers) the rule does not apply.
unbridged(Terms0, Previous, Cands, Same) :-
    (   Terms0 = opener(Terms) -> true ; Terms = Terms0 ),
    integer(Terms),
    current_prolog_flag(ctxrelay_thread_unbridged_terms, Min),
    Terms >= Min,
    memberchk(c(Previous, _, Overlap, _, Recent, bridge(Bridge, Mean), _), Cands),
    Overlap =:= 0,
    Recent =:= 0,
    current_prolog_flag(ctxrelay_thread_bridge_floor, F),
    (   Bridge < F * Same
    ->  true
    ;   number(Mean),
        current_prolog_flag(ctxrelay_thread_bridge_relative, R),
        Bridge < R * Mean
    ).

%   new_focus(+Tokens, +Words, +Previous, +Cands)
%
%   The question asks for a new kind of thing and names the current
%   situation only as its setting: "What wine goes with slow roast lamb?"
%   in a dinner-menu thread, "How much food do we need per guest?" after
%   the venue, "What kind of oven do I need for that volume?" after the
%   prices, "Is pet insurance worth it for two cats?".  Its focus, the
%   content word a wh-determiner asks about ("what X", "which X", "how
%   much X", "how many X", "what kind of X"), else the subject of a yes/no
%   question (yes_no_focus/4), is one the current thread never used and no attribute_word/1 (a
%   question about the pace or the size of the thread's subject follows
%   it up); after the focus, a prepositional phrase ("with ...", "per
%   ...", "for ...", "like ...") re-names an earlier word of the thread
%   or points back with a demonstrative ("for that volume", "like
%   that"); and the message uses no word of the thread's latest exchange.
%   A follow-up leaves the given subject unsaid ("How many naps should
%   she have?"); re-naming it as a setting while asking for something
%   new moves to a new subject of the same situation.  Words is the
%   message's content words (Python's), which the focus must be one of.
new_focus(Tokens, Words, Previous, Cands) :-
    memberchk(t('?', punct, _, _), Tokens),
    memberchk(c(Previous, _, _, Shared, 0, _, _), Cands),
    (   append(_, Rest0, Tokens),
        wh_focus(Rest0, Focus, Rest)
    ->  true
    ;   yes_no_focus(Tokens, Words, Focus, Rest)
    ),
    memberchk(Focus, Words),
    \+ memberchk(Focus, Shared),
    \+ attribute_word(Focus),
    setting_phrase(Rest, Shared).

%   new_scene(+Tokens, +Words, +Previous, +Cands)
%
%   The message sets a scene in a statement and then asks about it: "The
%   defence is in June. How long should my presentation be?" after talk
%   of the thesis structure.  The statement has content words, none of
%   which the current thread used, and the message uses no word of the
%   thread's latest exchange: a user who answers or adds to the last
%   turn re-uses its words or points at it ("We both work all day. Does
%   that change things?" is a follow-up, decided before), one who
%   presents a new fact before asking opens a new subject, however close
%   in meaning it is.
new_scene(Tokens, Words, Previous, Cands) :-
    memberchk(c(Previous, _, _, Shared, 0, _, _), Cands),
    append(Statement, [t(P, punct, _, _)|Rest], Tokens),
    memberchk(P, ['.', '!']),
    !,
    \+ memberchk(t('?', punct, _, _), Statement),
    memberchk(t('?', punct, _, _), Rest),
    token_words(Statement, SWs),
    include([W]>>memberchk(W, Words), SWs, Content),
    Content = [_|_],
    \+ ( member(W, Content), memberchk(W, Shared) ).

%   wh_focus(+Tokens, -Focus, -Rest): Tokens start with a wh-determiner
%   and the word it asks about.
wh_focus([t(W, word, _, _)|Ts0], Focus, Rest) :-
    (   memberchk(W, [what, which])
    ->  Ts1 = Ts0
    ;   W == how,
        Ts0 = [t(Q, word, _, _)|Ts1],
        memberchk(Q, [much, many])
    ),
    (   Ts1 = [t(K, word, _, _), t(of, word, _, _)|Ts2],
        memberchk(K, [kind, kinds, type, types, sort, sorts])
    ->  true
    ;   Ts2 = Ts1
    ),
    Ts2 = [t(Focus, word, _, _)|Rest].

%   yes_no_focus(+Tokens, +Words, -Focus, -Rest): a yes/no question
%   ("Is pet insurance worth it for two cats?") asks about its subject:
%   the first content word after the opening auxiliary (and a
%   determiner), when the subject is no pronoun.
yes_no_focus([t(Aux, word, _, _)|Ts0], Words, Focus, Rest) :-
    memberchk(Aux, [is, are, was, were, does, do, did, can, could, should, would, will]),
    (   Ts0 = [t(D, word, _, _)|Ts1], memberchk(D, [a, an, the, my, our, your, their])
    ->  true
    ;   Ts1 = Ts0
    ),
    Ts1 = [t(Focus, word, _, _)|Rest],
    memberchk(Focus, Words).

%   setting_phrase(+Tokens, +Shared): a preposition before the end of
%   the sentence, followed within four words by a word the thread used or
%   by a demonstrative.
setting_phrase(Tokens, Shared) :-
    append(_, [t(P, word, _, _)|After], Tokens),
    memberchk(P, [with, for, per, before, after, during, at, on, in, from, like, to]),
    first_words(After, 4, Ws),
    member(W, Ws),
    (   memberchk(W, Shared)
    ->  true
    ;   memberchk(W, [that, this, these, those])
    ),
    !.

%   best_named(+Target, +Previous, +Cands, -Thread)
%
%   The thread that used the most words of Target (at least one); among
%   equals an earlier thread before the current one (the cue says the
%   topic is not the current one), then the one whose user turns used
%   more of them (a return goes back to a topic the user raised: "back
%   to dinner" is the dinner-party thread, not the wine thread whose
%   answer said "for dinner"), then the larger overlap, then the more
%   recently active.
best_named(Target, Previous, Cands, Thread) :-
    findall(k(N, Earlier, NU, Overlap, I)-T,
            ( nth0(I0, Cands, c(T, _, Overlap, Shared, _, _, UserShared)),
              I is -I0,
              aggregate_all(count, ( member(W, Target), target_word_shared(W, Shared) ), N),
              N > 0,
              aggregate_all(count, ( member(W, Target), target_word_shared(W, UserShared) ),
                            NU),
              ( T == Previous -> Earlier = 0 ; Earlier = 1 ) ),
            Found),
    Found \== [],
    max_member(_-Thread, Found).

target_word_shared(W, Shared) :-
    memberchk(W, Shared),
    !.
target_word_shared(W, Shared) :-
    atom_concat(B, '\'s', W),
    memberchk(B, Shared),
    !.
target_word_shared(W, Shared) :-
    word_parts(W, [_,_|_]),
    word_parts(W, Parts),
    member(P, Parts),
    memberchk(P, Shared),
    !.

%   names_another_thread(+Previous, +Cands)
%
%   The message uses words of another candidate thread (at least half
%   of its content words by weight) and none the current thread used.
names_another_thread(Previous, Cands) :-
    memberchk(c(Previous, _, OP, _, _, _, _), Cands),
    OP =:= 0,
    current_prolog_flag(ctxrelay_thread_overlap_join, OJ),
    member(c(T, _, Overlap, _, _, _, _), Cands),
    T \== Previous,
    Overlap >= OJ,
    !.

		 /*******************************
		 *      RETURNS, FOLLOW-UPS     *
		 *******************************/

%!  return_target(+Tokens, -Target:list(atom)) is semidet.
%
%   Tokens (text_tokens/2) hold an explicit return to an earlier topic:
%   a return_cue/2 phrase.  Target holds the content words of the topic
%   it names ("back to the etcd TLS setup" gives [etcd, tls, setup]);
%   [] when it names none ("back to what we were discussing", "back to
%   the earlier question").  Fails without a cue.

return_target(Tokens, Target) :-
    token_words(Tokens, Present0),
    sort(Present0, Present),
    return_cue(Before, After),
    cue_words_present(Before, Present),           % cheap: most cues fail here
    marker_match(=(Before), Tokens, _, Start-End),
    \+ not_a_return(Tokens, Start),
    tokens_after(Tokens, End, Rest),
    \+ back_to_someone(Rest),
    target_words(Rest, After, Words),
    !,
    exclude(open_or_function_word, Words, Target),
    \+ everyday_return(Target).

%   "I'll get back to you", "back to them": the cue names a person, not a topic.
back_to_someone([t(W, word, _, _)|_]) :-
    memberchk(W, [you, me, him, her, them, us]).

%   "I have to go back to work now", "back to bed": the words after the cue
%   name only an everyday place or activity (everyday_destination/1), maybe
%   with a time ("tomorrow"): the user leaves, no earlier topic is named.
%   A topic that merely starts with such a word ("back to the home server")
%   has other words and stays a return.
everyday_return(Target) :-
    Target = [_|_],
    forall(member(W, Target), ( everyday_destination(W) ; time_word(W) )),
    \+ forall(member(W, Target), time_word(W)).

time_word(W) :-
    memberchk(W, [now, today, tonight, tomorrow, soon, later, morning, afternoon, evening,
                  week, weekend, monday, tuesday, wednesday, thursday, friday, saturday,
                  sunday, after, early, anyway, then]).

%   cue_words_present(+Before, +Present): every word the cue must match is
%   among the message's words (Present: an ordered set), so the cue may
%   match; the scan of the message (marker_match/4) decides.  Only words
%   are checked: '^' (start of a sentence), '$' and gap(N) are not words.
cue_words_present(Before, Present) :-
    \+ ( member(W, Before),
         atom(W), W \== '^', W \== '$',
         \+ ord_memberchk(W, Present) ).

%   "roll back to 3.4", "fall back to polling": a verb that takes "back"
%   itself, not a return to a topic.
not_a_return(Tokens, Start) :-
    append(_, [t(W, word, _, _), t(_, word, Start, _)|_], Tokens),
    !,
    memberchk(W, [roll, rolled, rolling, fall, falls, falling, fell, scale, scaled,
                  switch, switched, switching, write, writes, call, bring, set, step,
                  revert, reverting, downgrade, cut, pull, trace, map, maps, link,
                  links, points, point, redirect, redirects, defaults, default]).

tokens_after([], _, []).
tokens_after([T|Ts], End, Rest) :-
    T = t(_, _, S, _),
    (   S >= End
    ->  Rest = [T|Ts]
    ;   tokens_after(Ts, End, Rest)
    ).

%   target_words(+Tokens, +After, -Words)
%
%   The words naming the topic: up to the After phrase when the cue has
%   one ("about X again"), else up to the end of the clause; at most six.
target_words(Tokens, [], Words) :-
    !,
    clause_words(Tokens, 6, Words).
target_words(Tokens, After, Words) :-
    append(Before, AfterTokens, Tokens),
    length(Before, N),
    N =< 6,
    maplist([t(W, word, _, _), W]>>true, Before, Words),
    words_prefix(After, AfterTokens),
    !.

words_prefix([], _).
words_prefix([W|Ws], [t(W, word, _, _)|Ts]) :-
    words_prefix(Ws, Ts).

clause_words([t(W, word, _, _)|Ts], N, [W|Ws]) :-
    N > 0,
    \+ clause_stop(W),
    !,
    N1 is N - 1,
    clause_words(Ts, N1, Ws).
clause_words(_, _, []).

%   Words that end the named topic: the question that follows it.
clause_stop(W) :-
    memberchk(W, [what, how, why, when, where, which, who, can, could, should, would,
                  is, are, do, does, did, will, i, we, you, and, but, so, then, now,
                  again, please, for, with]).

open_or_function_word(W) :- open_target_word(W), !.
open_or_function_word(W) :- memberchk(W, [the, a, an, this, that, these, those, our, my,
                                          your, its, their, of, on, about, to, in, at,
                                          it, them, one, bit, stuff, part]).

%   follow_up(+Tokens, +Terms, +Previous, +Cands)
follow_up(Tokens, _, _, _) :-
    marker_match(follow_up_marker, Tokens, _, _),
    !.
follow_up(Tokens, Terms, _, _) :-
    token_references(Tokens, Refs),
    member(ref(Type, D, _), Refs),
    backward_reference(Type, D, Terms),
    !.
follow_up(Tokens, Terms, Previous, Cands) :-
    opening_pronoun(Tokens),
    (   integer(Terms), Terms =< 2
    ->  true
    ;   memberchk(c(Previous, _, Overlap, _, _, _, _), Cands),  % "is it possible to run X" is
        Overlap > 0                                     % about X, not about "it"
    ),
    !.
follow_up(_, Terms, _, _) :-
    Terms == 0.

backward_reference(turn, _, _).
backward_reference(action, _, _).
backward_reference(tool, _, _).
backward_reference(ordinal, _, Terms) :-       % "the second one", not "job number 2
    integer(Terms), Terms =< 2.                 % of our Postgres backups"
backward_reference(entity, D, _) :-
    get_dict(determiner, D, Det),
    \+ weak_determiner(Det).

%   A pronoun among the first four words of the turn points at what was
%   just said ("does it scale?", "is that safe?", "why do they ...").
opening_pronoun(Tokens) :-
    first_words(Tokens, 4, Words),
    member(W, Words),
    memberchk(W, [it, 'it\'s', its, they, them, 'they\'re', that, 'that\'s', this, these,
                  those, he, she, him, her]),
    !.

first_words([t(W, word, _, _)|Ts], N, [W|Ws]) :-
    N > 0,
    !,
    N1 is N - 1,
    first_words(Ts, N1, Ws).
first_words([t(P, punct, _, _)|Ts], N, Ws) :-
    N > 0,
    \+ memberchk(P, ['.', '?', '!', '\n']),
    !,
    first_words(Ts, N, Ws).
first_words(_, _, []).


%   The default clauses of the word lists (return cues, follow-up markers,
%   openers, everyday destinations, attribute words), in this module so that
%   users extend them here as documented.
:- include(lexicon).
