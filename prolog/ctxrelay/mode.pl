:- module(ctxrelay_mode,
          [ context_mode/4,         % +Text, +Requested, +HistoryEnd, -Mode
            mode_blend/3,           % +Mode, +IntentBlend, -Blend
            subqueries/3,           % +Task, +Seeds, -Queries
            max_subqueries/1,       % -N
            % extension points (multifile, dynamic)
            document_task_marker/1, % ?Words
            conversation_seed_marker/1, % ?Words
            mode_weights/5          % ?Mode, ?P, ?C, ?E, ?Novelty
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(yall)).
:- use_module(library(janus)).
:- use_module(library(aggregate)).
:- use_module(references).

/** <module> Context modes: conversation, document, hybrid (CRP-SPEC-028 §7.5, §8)

A *document* task is finite: it decomposes into sub-queries, each must be
covered once, and novelty is on (CDR).  A *conversation* is open-ended:
the intent's blend decides.  *Hybrid* is a document task inside a
conversation ("write me a guide about what we just discussed"): the
conversation seeds the sub-queries, Tier P retrieval runs per sub-query,
and the generated document is logged back as an assistant turn.

The mode is requested by the policy (`mode(document)`, ...) or, with
`mode(auto)` (the default), detected: a document-task marker ("write a
guide", "draft a report on") makes a document task; one that also points
at the conversation ("what we discussed", "so far") in a session with
history is hybrid.  Marker phrases are facts users extend, with the
syntax of ctxrelay_references (word lists, gap(N)).
*/

:- multifile document_task_marker/1, conversation_seed_marker/1, mode_weights/5.
:- dynamic document_task_marker/1, conversation_seed_marker/1, mode_weights/5.

%!  context_mode(+Text, +Requested, +HistoryEnd, -Mode) is det.
%
%   Mode is conversation, document or hybrid.  Requested is one of those
%   or auto.
%
%   @error domain_error(context_mode, Requested)
context_mode(Text, Requested0, HistoryEnd, Mode) :-
    must_be(nonneg, HistoryEnd),
    text_to_string(Requested0, RS),
    atom_string(Requested, RS),
    (   memberchk(Requested, [conversation, document, hybrid])
    ->  Mode = Requested
    ;   Requested == auto
    ->  text_tokens(Text, Tokens),
        detected_mode(Tokens, HistoryEnd, Mode)
    ;   domain_error(context_mode, Requested0)
    ).

detected_mode(Tokens, HistoryEnd, Mode) :-
    (   marker_match(document_task_marker, Tokens, _, _)
    ->  (   HistoryEnd > 0,
            marker_match(conversation_seed_marker, Tokens, _, _)
        ->  Mode = hybrid
        ;   Mode = document
        )
    ;   Mode = conversation
    ).

%!  mode_blend(+Mode, +IntentBlend, -Blend) is det.
%
%   In conversation mode the intent's blend stands; a document task
%   retrieves knowledge with novelty on whatever the intent.
mode_blend(conversation, Blend, Blend) :- !.
mode_blend(Mode, Blend0, Blend) :-
    mode_weights(Mode, P, C, E, N),
    !,
    Blend = Blend0.put(_{p:P, c:C, e:E, novelty:N}).
mode_blend(_, Blend, Blend).

mode_weights(document, 0.80, 0.15, 0.05, on).
mode_weights(hybrid,   0.50, 0.45, 0.05, on).

%!  document_task_marker(?Words) is nondet.
%
%   A request for a finite piece of writing.
document_task_marker([Verb, gap(4), Noun]) :-
    writing_verb(Verb),
    document_noun(Noun).
document_task_marker([summarise, everything]).
document_task_marker([summarize, everything]).

writing_verb(write).
writing_verb(draft).
writing_verb(compose).
writing_verb(produce).
writing_verb(prepare).
writing_verb(create).
writing_verb(generate).
writing_verb(put).              % "put together a guide"

document_noun(guide).
document_noun(report).
document_noun(document).
document_noun(doc).
document_noun(documentation).
document_noun(article).
document_noun(overview).
document_noun(tutorial).
document_noun(runbook).
document_noun(playbook).
document_noun(writeup).
document_noun('write-up').
document_noun(memo).
document_noun(brief).
document_noun(whitepaper).
document_noun(handbook).
document_noun(manual).
document_noun(readme).
document_noun(chapter).
document_noun(sections).
document_noun(faq).
document_noun(summary).

%!  conversation_seed_marker(?Words) is nondet.
%
%   The task is about the conversation itself.
conversation_seed_marker([what, we, gap(2), discussed]).
conversation_seed_marker([what, we, gap(2), talked, about]).
conversation_seed_marker([what, we, gap(2), covered]).
conversation_seed_marker([what, we, gap(2), went, over]).
conversation_seed_marker([this, conversation]).
conversation_seed_marker([our, conversation]).
conversation_seed_marker([this, discussion]).
conversation_seed_marker([our, discussion]).
conversation_seed_marker([this, chat]).
conversation_seed_marker([this, thread]).
conversation_seed_marker([everything, so, far]).
conversation_seed_marker([so, far]).
conversation_seed_marker([everything, above]).
conversation_seed_marker([the, above]).

		 /*******************************
		 *     DOCUMENT SUB-QUERIES     *
		 *******************************/

%!  subqueries(+Task, +Seeds:list(string), -Queries:list(string)) is det.
%
%   The sub-queries of a document task (CRP-SPEC-028 §8): the task
%   without its directive (the document_task_marker/1 phrase and a
%   following "about", "on", ...) and without conversation_seed_marker/1
%   phrases, split into its parts at commas, semicolons, line breaks and
%   "and"/"also"/"then"; the whole topic first when there are several
%   parts; then Seeds (hybrid mode: the conversation's recent user
%   turns, first sentence each).  Parts without index terms and near
%   duplicates (subquery_similarity/1 of their index terms, computed by
%   ctxrelay.retrieval.document) are left out; at most max_subqueries/1.
subqueries(Task, Seeds, Queries) :-
    text_to_string(Task, TaskS),
    text_tokens(TaskS, Tokens0),
    drop_directive(Tokens0, Tokens1),
    drop_seed_phrases(Tokens1, Tokens),
    parts(Tokens, Parts0),
    maplist(span_text(TaskS), Parts0, Parts),
    (   Tokens == [] -> Body = "" ; span_text(TaskS, Tokens, Body) ),
    maplist(seed_sentence, Seeds, SeedTexts),
    length(Parts, NParts),
    (   Body \== "", NParts =\= 1 -> Ordered0 = [Body|Parts] ; Ordered0 = Parts ),
    append(Ordered0, SeedTexts, Ordered),
    max_subqueries(Max),
    py_call('ctxrelay.bridge.assembly':term_overlaps(Ordered), Overlaps),
    get_dict(has_terms, Overlaps, HasTerms),
    get_dict(jaccard, Overlaps, Jaccard),
    numlist_from(0, Ordered, Indexes),
    subquery_similarity(Similar),
    foldl(choose_query(HasTerms, Jaccard, Similar, Max), Indexes, [], ChosenRev),
    reverse(ChosenRev, Chosen),
    maplist(nth_of(Ordered), Chosen, Queries0),
    (   Queries0 == [],
        py_call('ctxrelay.bridge.assembly':term_overlaps([TaskS]), O1),
        get_dict(has_terms, O1, [@(true)])
    ->  Queries = [TaskS]
    ;   Queries = Queries0
    ).

%!  max_subqueries(-N) is det.
%!  subquery_similarity(-Jaccard) is det.
%
%   A document task gives at most N sub-queries; two whose index terms
%   overlap by Jaccard or more are one.
max_subqueries(8).
subquery_similarity(0.6).

nth_of(List, I, X) :- nth0(I, List, X).

numlist_from(_, [], []) :- !.
numlist_from(I, [_|T], [I|Is]) :- I1 is I + 1, numlist_from(I1, T, Is).

choose_query(HasTerms, Jaccard, Similar, Max, I, Chosen, Chosen1) :-
    length(Chosen, N),
    (   N < Max,
        nth0(I, HasTerms, @(true)),
        nth0(I, Jaccard, Row),
        \+ ( member(J, Chosen), nth0(J, Row, Sim), Sim >= Similar )
    ->  Chosen1 = [I|Chosen]
    ;   Chosen1 = Chosen
    ).

%   The tokens after the directive ("write a short guide about"), or all.
drop_directive(Tokens, Rest) :-
    (   append(_, [T|After0], Tokens),
        T = t(_, word, _, _),
        marker_at(document_task_marker, [T|After0], After1)
    ->  skip_connective(After1, Rest)
    ;   Rest = Tokens
    ).

marker_at(Marker, Tokens, After) :-
    once(marker_match(Marker, Tokens, _, Start-End)),
    Tokens = [t(_, _, Start, _)|_],
    drop_upto(Tokens, End, After).

drop_upto([], _, []).
drop_upto([t(W, K, S, E)|Ts], End, Rest) :-
    (   S < End -> drop_upto(Ts, End, Rest) ; Rest = [t(W, K, S, E)|Ts] ).

skip_connective([t(W, word, _, _)|Ts], Ts) :-
    memberchk(W, [about, on, of, for, covering, explaining]),
    !.
skip_connective([t(that, word, _, _), t(covers, word, _, _)|Ts], Ts) :- !.
skip_connective(Ts, Ts).

%   Seed phrases ("what we discussed", "so far") and the word that
%   introduces them ("about", "on", ...) are not part of any sub-query.
drop_seed_phrases([], []).
drop_seed_phrases(Tokens, Rest) :-
    Tokens = [T|Ts],
    (   T = t(W, word, _, _),
        memberchk(W, [about, on, of, from, covering]),
        marker_at(conversation_seed_marker, Ts, After)
    ->  drop_seed_phrases(After, Rest)
    ;   T = t(_, word, _, _),
        marker_at(conversation_seed_marker, Tokens, After)
    ->  drop_seed_phrases(After, Rest)
    ;   Rest = [T|Rest1],
        drop_seed_phrases(Ts, Rest1)
    ).

%   The parts of the body: runs of tokens between separators.
parts(Tokens, Parts) :-
    split_tokens(Tokens, [], Parts0),
    include([P]>>(P \== []), Parts0, Parts).

split_tokens([], Cur, [Part]) :-
    reverse(Cur, Part0),
    trim_punct(Part0, Part).
split_tokens([T|Ts], Cur, Parts) :-
    (   separator(T)
    ->  reverse(Cur, Part0),
        trim_punct(Part0, Part),
        Parts = [Part|Parts1],
        split_tokens(Ts, [], Parts1)
    ;   split_tokens(Ts, [T|Cur], Parts)
    ).

separator(t(P, punct, _, _)) :- memberchk(P, [',', ';', '\n']).
separator(t(W, word, _, _)) :- memberchk(W, [and, also, then]).

%   A part loses list bullets and end punctuation ("- ", "1. ", "?").
trim_punct(Ts0, Ts) :-
    drop_bullet(Ts0, Ts1),
    reverse(Ts1, R0),
    drop_punct(R0, R1),
    reverse(R1, Ts).

drop_bullet([t(N, word, _, _), t(P, punct, _, _)|Ts], Rest) :-
    atom_number(N, _), memberchk(P, ['.', ')']),
    !,
    drop_punct(Ts, Rest).
drop_bullet(Ts0, Ts) :-
    drop_punct(Ts0, Ts).

drop_punct([t(_, punct, _, _)|Ts], Rest) :- !, drop_punct(Ts, Rest).
drop_punct(Ts, Ts).

span_text(Text, Tokens, Span) :-
    Tokens = [t(_, _, Start, _)|_],
    last(Tokens, t(_, _, _, End)),
    Len is End - Start,
    sub_string(Text, Start, Len, _, Span).

%   A seed is the first sentence of a user turn, at most 24 words.
seed_sentence(Text, Seed) :-
    text_to_string(Text, S),
    (   aggregate_all(min(B), ( member(Sep, [". ", "? ", "! "]),
                                    once(sub_string(S, B, _, _, Sep)) ), End)
    ->  L is End + 1, sub_string(S, 0, L, _, First)
    ;   First = S
    ),
    split_string(First, " \t\n", " \t\n", Words0),
    exclude(==(""), Words0, Words1),
    (   length(Words1, N), N > 24 -> length(Words, 24), append(Words, _, Words1)
    ;   Words = Words1
    ),
    atomic_list_concat(Words, ' ', SeedA),
    atom_string(SeedA, Seed).
conversation_seed_marker([our, discussion]).
conversation_seed_marker([this, chat]).
conversation_seed_marker([this, thread]).
conversation_seed_marker([so, far]).
conversation_seed_marker([everything, above]).
conversation_seed_marker([the, above]).
conversation_seed_marker([what, you, gap(2), said]).
conversation_seed_marker([what, i, gap(2), said]).
