:- module(ctxrelay_intent,
          [ classify_intent/4,      % +Text, +Context, -Intent, -Evidence
            intent/1,               % ?Intent
            evidence_dict/2,        % +Evidence, -Dict
            % extension points (multifile, dynamic)
            clarify_marker/1,       % ?Words
            continue_marker/1,      % ?Words
            topic_shift_marker/1    % ?Words
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(references).

/** <module> Per-turn conversational intent (CRP-SPEC-028 §5)

classify_intent/4 puts a user turn in one of five intents by the spec's
procedure, first match wins:

  1. a tool reference ("the query result", "that output") -> `tool_reference`
  2. a clarify marker ("what do you mean", "explain that again"), or a
     definition question about a term the conversation already used
     ("what's a raft index?" after "raft index" was said) -> `clarify`
  3. any other reference to prior content (entity, turn, ordinal,
     action; see ctxrelay_references) -> `drill_down`
  4. a continue marker ("go on", "and then", "tell me more") -> `continue`
  5. the topic: when the caller knows whether the turn starts a topic
     thread (ctxrelay_thread_rules:thread_decision/3), a new thread ->
     `explore`, an existing one -> `continue`; else topic similarity:
     at or above the threshold -> `continue`, below -> `explore`;
     without a similarity -> `explore` (a new topic)

One addition to the spec: between 3 and 4 an explicit topic-shift marker
("unrelated, but ...", "different question") gives `explore`, because
such turns often carry continue words ("unrelated, but what about X?").

Everything is pattern matching over the turn's tokens (no Python, no
model); the similarity is computed by the caller.  The marker phrases
are facts users extend; see ctxrelay_references for their syntax (word
lists, `_` for any word, gap(N), `^` and `$` anchors).

    :- multifile ctxrelay_intent:clarify_marker/1.
    ctxrelay_intent:clarify_marker([say, what, '?']).
*/

:- multifile clarify_marker/1, continue_marker/1, topic_shift_marker/1.
:- dynamic clarify_marker/1, continue_marker/1, topic_shift_marker/1.

:- det(classify_intent/4).
:- det(evidence_dict/2).

%!  intent(?Intent) is nondet.
%
%   The five intents of CRP-SPEC-028 §5.1.  Their tier blends (§5.3)
%   are ctxrelay_envelope:intent_blend/2.

intent(explore).
intent(drill_down).
intent(clarify).
intent(continue).
intent(tool_reference).

%!  classify_intent(+Text, +Context:dict, -Intent, -Evidence:dict) is det.
%
%   Classify the user turn Text.  Context is a dict; all keys are
%   optional:
%
%     - topic_similarity: a number, the caller's similarity of Text to
%       the active thread (e.g. the maximum cosine against its turns);
%       absent (or `@none`/`none`) means there is no thread: a new topic
%     - topic_threshold: a number, default 0.50 (the spec's value; pass
%       the embedder's own calibrated threshold)
%     - mentioned: the words prior turns used, as built by
%       ctxrelay_references:mention_words/2 (atoms or strings).  With
%       it, entity references under a weak determiner ("the kernel",
%       "the map") count only when a modifier of the noun was mentioned
%       ("the TLS config" after "TLS"), and definition questions about
%       mentioned terms are clarifications.
%     - refs: references/2 of Text, when the caller has already found
%       them (the managed runtime resolves them before classifying);
%       they are not looked for again.
%     - topic: `new` when Text starts a topic thread, `same` when it
%       stays in or returns to one (the thread rules' decision); it
%       decides step 5 in place of the similarity.
%
%   Evidence is evidence{step:Step, refs:Refs, matched:Matched}: Step
%   names the rule that decided (tool_reference, clarify_marker,
%   definition, reference, topic_shift_marker, continue_marker,
%   topic_thread, topic_similarity, no_topic_similarity), Refs are all references in
%   Text (references/2) and Matched what the rule matched: the refs it
%   used, marker(Words, Span), definition(Words, Span),
%   similarity(Sim, Threshold), topic(New) or `none`.
%
%   @error type_error(text, Text) if Text is not text
%   @error type_error(dict, Context) if Context is not a dict
%   @error type_error(number, X) for a non-numeric similarity or
%          threshold
%   @error type_error(list, X) if `mentioned` is not a list
%   @error domain_error(topic, X) if `topic` is not new or same

classify_intent(Text, Context, Intent, Evidence) :-
    must_be(text, Text),
    must_be(dict, Context),
    context_similarity(Context, Similarity),
    context_threshold(Context, Threshold),
    context_mentioned(Context, Mentioned),
    context_topic(Context, Topic),
    text_tokens(Text, Tokens),
    (   get_dict(refs, Context, Refs0)
    ->  must_be(list, Refs0),
        Refs = Refs0
    ;   token_references(Tokens, Refs)
    ),
    classify_(Tokens, Refs, Topic-Similarity, Threshold, Mentioned, Intent, Step, Matched),
    Evidence = evidence{step:Step, refs:Refs, matched:Matched}.

context_similarity(Context, Similarity) :-
    (   get_dict(topic_similarity, Context, S0), \+ no_value(S0)
    ->  must_be(number, S0),
        Similarity = S0
    ;   Similarity = none
    ).

context_threshold(Context, Threshold) :-
    (   get_dict(topic_threshold, Context, T0), \+ no_value(T0)
    ->  must_be(number, T0),
        Threshold = T0
    ;   Threshold = 0.50
    ).

context_topic(Context, Topic) :-
    (   get_dict(topic, Context, T0), \+ no_value(T0)
    ->  must_be(text, T0),
        atom_string(T, T0),
        (   memberchk(T, [new, same]) -> Topic = T ; domain_error(topic, T0) )
    ;   Topic = none
    ).

context_mentioned(Context, Mentioned) :-
    (   get_dict(mentioned, Context, M0), \+ no_value(M0)
    ->  must_be(list, M0),
        Mentioned = M0
    ;   Mentioned = none
    ).

no_value(V) :- var(V), !.
no_value(none).
no_value(@(none)).
no_value(null).
no_value(@(null)).

classify_(_Tokens, Refs, _Sim, _Thr, _M, tool_reference, tool_reference, ToolRefs) :-
    include(ref_type(tool), Refs, ToolRefs),
    ToolRefs \== [],
    !.
classify_(Tokens, _Refs, _Sim, _Thr, _M, clarify, clarify_marker, marker(Words, Span)) :-
    marker_match(clarify_marker, Tokens, Words, Span),
    !.
classify_(Tokens, _Refs, _Sim, _Thr, M, clarify, definition, definition(Words, Span)) :-
    M \== none,
    definition_question(Tokens, M, Words, Span),
    !.
classify_(_Tokens, Refs, _Sim, _Thr, M, drill_down, reference, Counted) :-
    include(counts_as_reference(M), Refs, Counted),
    Counted \== [],
    !.
classify_(Tokens, _Refs, _Sim, _Thr, _M, explore, topic_shift_marker, marker(Words, Span)) :-
    marker_match(topic_shift_marker, Tokens, Words, Span),
    !.
classify_(Tokens, _Refs, _Sim, _Thr, _M, continue, continue_marker, marker(Words, Span)) :-
    marker_match(continue_marker, Tokens, Words, Span),
    !.
classify_(_Tokens, _Refs, new-_, _Thr, _M, explore, topic_thread, topic(new)) :-
    !.
classify_(_Tokens, _Refs, same-_, _Thr, _M, continue, topic_thread, topic(same)) :-
    !.
classify_(_Tokens, _Refs, none-none, _Thr, _M, explore, no_topic_similarity, none) :-
    !.
classify_(_Tokens, _Refs, none-Sim, Thr, _M, Intent, topic_similarity, similarity(Sim, Thr)) :-
    (   Sim >= Thr
    ->  Intent = continue
    ;   Intent = explore
    ).

ref_type(Type, ref(Type, _, _)).

%!  evidence_dict(+Evidence, -Dict) is det.
%
%   Evidence of classify_intent/4 in plain types for the janus boundary:
%   evidence{step, refs, matched} where refs are reference_dict/2 dicts
%   and matched is one of matched{kind:refs, refs:Dicts},
%   matched{kind:marker, words:Ws, start:S, end:E},
%   matched{kind:definition, words:Ws, start:S, end:E},
%   matched{kind:similarity, similarity:Sim, threshold:T},
%   matched{kind:topic, topic:New} or matched{kind:none}.

evidence_dict(Evidence, Dict) :-
    get_dict(step, Evidence, Step),
    get_dict(refs, Evidence, Refs),
    get_dict(matched, Evidence, Matched),
    maplist(reference_dict, Refs, RefDicts),
    matched_dict(Matched, MatchedDict),
    Dict = evidence{step:Step, refs:RefDicts, matched:MatchedDict}.

matched_dict(none, D) => D = matched{kind:none}.
matched_dict(marker(Ws, S-E), D) => D = matched{kind:marker, words:Ws, start:S, end:E}.
matched_dict(definition(Ws, S-E), D) => D = matched{kind:definition, words:Ws, start:S, end:E}.
matched_dict(similarity(Sim, T), D) => D = matched{kind:similarity, similarity:Sim, threshold:T}.
matched_dict(topic(New), D) => D = matched{kind:topic, topic:New}.
matched_dict(Refs, D), is_list(Refs) =>
    maplist(reference_dict, Refs, Dicts),
    D = matched{kind:refs, refs:Dicts}.

%   An entity reference under a weak determiner ("the") counts only
%   when a modifier of its noun was mentioned before ("the indices
%   approach", "the caching one"), if we know what was: a bare "the
%   map" continues a topic rather than pointing back at a turn.
counts_as_reference(Mentioned, ref(entity, D, _)) :-
    !,
    (   Mentioned == none
    ->  true
    ;   get_dict(determiner, D, Det),
        weak_determiner(Det)
    ->  get_dict(words, D, Words),
        get_dict(head, D, Head),
        (   Head == one -> Modifiers = Words ; append(Modifiers, [_], Words) ),
        member(M, Modifiers),
        \+ ordinal_word(M, _),
        mentioned_word(M, Mentioned),
        !
    ;   true
    ).
counts_as_reference(_, _).

%   definition_question(+Tokens, +Mentioned, -Words, -Span)
%
%   "what is X?", "what's a X?", "what exactly is X?", "what are X?"
%   at the start of a sentence, X a short noun phrase ending the
%   sentence, every word of X mentioned before.
definition_question(Tokens, Mentioned, Words, Span) :-
    definition_question(Tokens, none, Mentioned, Words, Span).

definition_question([T0|Rest0], Prev, Mentioned, Words, Span) :-
    (   sentence_initial(Prev),
        definition_at([T0|Rest0], Mentioned, Words, Span)
    ->  true
    ;   definition_question(Rest0, T0, Mentioned, Words, Span)
    ).

definition_at([T0|Rest0], Mentioned, Words, Start-End) :-
    T0 = t(_, word, Start, _),
    phrase(what_is, [T0|Rest0], Rest1),
    (   Rest1 = [t(D, word, _, _)|Rest2], memberchk(D, [a, an, the])
    ->  true
    ;   Rest2 = Rest1
    ),
    definition_np(Rest2, 4, NP, After),
    NP = [_|_],
    definition_end(After),
    last(NP, t(_, _, _, End)),
    findall(W, member(t(W, _, _, _), NP), Words),
    forall(member(W, Words), mentioned_word(W, Mentioned)).

sentence_initial(none) :- !.
sentence_initial(t(P, punct, _, _)) :-
    memberchk(P, ['.', '?', '!', ',', ':', ';', '\n']).

what_is --> [t(what, word, _, _), t(is, word, _, _)].
what_is --> [t(what, word, _, _), t(are, word, _, _)].
what_is --> [t('what\'s', word, _, _)].
what_is --> [t(whats, word, _, _)].
what_is --> [t(what, word, _, _), t(exactly, word, _, _), t(is, word, _, _)].
what_is --> [t('what\'s', word, _, _), t(exactly, word, _, _)].

definition_np([T|Ts], N, [T|NP], After) :-
    N > 0,
    T = t(W, word, _, _),
    \+ memberchk(W, [a, an, the, of, for, in, on, to, with, between, and, or, i, you,
                     we, it, is, are, do, does, good, best, better, way, difference]),
    !,
    N1 is N - 1,
    definition_np(Ts, N1, NP, After).
definition_np(Ts, _, [], Ts).

definition_end([]).
definition_end([t(P, punct, _, _)|_]) :-
    memberchk(P, ['?', '.', '!', ',', '\n']).
definition_end([t(W, word, _, _)|Ts]) :-
    memberchk(W, [here, exactly, again, then]),
    definition_end(Ts).


                 /*******************************
                 *        MARKERS (user)        *
                 *******************************/

%!  clarify_marker(?Words) is nondet.
%   Phrases asking to re-explain something already said.
clarify_marker([what, do, you, mean]).
clarify_marker([what, did, you, mean]).
clarify_marker([what, exactly, do, you, mean]).
clarify_marker([what, does, gap(4), mean]).
clarify_marker([what, do, gap(4), mean]).
clarify_marker([what, is, meant, by]).
clarify_marker(['what\'s', meant, by]).
clarify_marker([what, gap(3), supposed, to, mean]).
clarify_marker([what, does, gap(4), stand, for]).
clarify_marker([meaning, what]).
clarify_marker([explain, again]).
clarify_marker([explain, gap(3), again]).
clarify_marker([explain, that, once, more]).
clarify_marker([say, that, again]).
clarify_marker([say, it, again]).
clarify_marker([say, that, once, more]).
clarify_marker([come, again]).
clarify_marker([rephrase]).
clarify_marker([reword]).
clarify_marker([reformulate]).
clarify_marker([put, that, another, way]).
clarify_marker([put, it, another, way]).
clarify_marker([put, differently]).
clarify_marker([in, other, words]).
clarify_marker([simpler, terms]).
clarify_marker([more, simply]).
clarify_marker([simpler, please]).
clarify_marker([plain, english]).
clarify_marker(['layman\'s', terms]).
clarify_marker([eli5]).
clarify_marker([like, 'i\'m', five]).
clarify_marker([i, 'don\'t', understand]).
clarify_marker([i, do, not, understand]).
clarify_marker(['don\'t', understand]).
clarify_marker(['don\'t', gap(1), get]).
clarify_marker(['didn\'t', get, that]).
clarify_marker(['don\'t', follow]).
clarify_marker([not, following]).
clarify_marker([not, sure, i, follow]).
clarify_marker([not, sure, what]).
clarify_marker(['i\'m', confused]).
clarify_marker([i, am, confused]).
clarify_marker([confused]).
clarify_marker([confusing]).
clarify_marker([lost, me]).
clarify_marker(['i\'m', lost]).
clarify_marker([clarify]).
clarify_marker([unclear]).
clarify_marker([not, clear, to, me]).
clarify_marker([huh]).
clarify_marker([break, down, what]).
clarify_marker([break, that, down]).
clarify_marker([break, it, down]).
clarify_marker([unpack]).

%!  continue_marker(?Words) is nondet.
%   Phrases asking to go on along the current thread.
continue_marker([go, on]).
continue_marker([keep, going]).
continue_marker([carry, on]).
continue_marker([continue]).
continue_marker([proceed]).
continue_marker([and, then]).
continue_marker([then, what]).
continue_marker([what, then]).
continue_marker([what, next]).
continue_marker(['what\'s', next]).
continue_marker([what, now]).
continue_marker([next, step]).
continue_marker([next, steps]).
continue_marker(['^', next]).
continue_marker([next, '$']).
continue_marker([after, that]).
continue_marker([tell, me, more]).
continue_marker([say, more]).
continue_marker(['^', more]).
continue_marker([more, please]).
continue_marker([more, on]).
continue_marker([more, about]).
continue_marker([more, details]).
continue_marker([more, detail]).
continue_marker([more, examples]).
continue_marker([more, ideas]).
continue_marker([more, tips]).
continue_marker([few, more]).
continue_marker([some, more]).
continue_marker([a, bit, more]).
continue_marker([go, further]).
continue_marker([what, else]).
continue_marker([anything, else]).
continue_marker([any, other]).
continue_marker([other, ways]).
continue_marker([keep, digging]).
continue_marker([what, about]).
continue_marker([how, about]).
continue_marker(['^', and]).
continue_marker(['^', also]).
continue_marker(['^', now]).
continue_marker(['^', then]).
continue_marker(['^', so, how]).
continue_marker(['^', so, what]).

%!  topic_shift_marker(?Words) is nondet.
%   Phrases announcing a new topic.
topic_shift_marker([unrelated]).
topic_shift_marker([different, question]).
topic_shift_marker([different, topic]).
topic_shift_marker([another, question]).
topic_shift_marker([new, question]).
topic_shift_marker([new, topic]).
topic_shift_marker([separate, question]).
topic_shift_marker([side, question]).
topic_shift_marker([switching, topics]).
topic_shift_marker([switching, gears]).
topic_shift_marker([changing, topics]).
topic_shift_marker([change, of, topic]).
topic_shift_marker([changing, the, subject]).
topic_shift_marker([on, another, note]).
topic_shift_marker([on, a, different, note]).
topic_shift_marker([completely, different]).
topic_shift_marker([off, topic]).
topic_shift_marker([btw]).
topic_shift_marker([by, the, way]).
