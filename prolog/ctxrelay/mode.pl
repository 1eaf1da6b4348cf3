:- module(ctxrelay_mode,
          [ context_mode/4,         % +Text, +Requested, +HistoryEnd, -Mode
            mode_blend/3,           % +Mode, +IntentBlend, -Blend
            % extension points (multifile, dynamic)
            document_task_marker/1, % ?Words
            conversation_seed_marker/1, % ?Words
            mode_weights/5          % ?Mode, ?P, ?C, ?E, ?Novelty
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
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
conversation_seed_marker([so, far]).
conversation_seed_marker([everything, above]).
conversation_seed_marker([the, above]).
conversation_seed_marker([what, you, gap(2), said]).
conversation_seed_marker([what, i, gap(2), said]).
