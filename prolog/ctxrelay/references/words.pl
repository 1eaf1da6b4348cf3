:- module(ctxrelay_reference_words,
          [ entity_determiner/1, weak_determiner/1, entity_noun/1, turn_marker/1,
            action_marker/1, tool_noun/1, tool_source/1, tool_verb/1, tool_alias/2,
            ordinal_word/2, ordinal_noun/1, earlier_word/1, imperative_verb/1,
            cardinal_word/2
          ]).

/** <module> The word lists the reference grammar and resolver read

The word lists are extension points of module ctxrelay_references (users
add clauses there; the defaults are in lexicon.pl).  The grammar and the
resolver call them through these forwarders, so that a clause a user adds
is seen by both.
*/

entity_determiner(A1) :- ctxrelay_references:entity_determiner(A1).
weak_determiner(A1) :- ctxrelay_references:weak_determiner(A1).
entity_noun(A1) :- ctxrelay_references:entity_noun(A1).
turn_marker(A1) :- ctxrelay_references:turn_marker(A1).
action_marker(A1) :- ctxrelay_references:action_marker(A1).
tool_noun(A1) :- ctxrelay_references:tool_noun(A1).
tool_source(A1) :- ctxrelay_references:tool_source(A1).
tool_verb(A1) :- ctxrelay_references:tool_verb(A1).
tool_alias(A1, A2) :- ctxrelay_references:tool_alias(A1, A2).
ordinal_word(A1, A2) :- ctxrelay_references:ordinal_word(A1, A2).
ordinal_noun(A1) :- ctxrelay_references:ordinal_noun(A1).
earlier_word(A1) :- ctxrelay_references:earlier_word(A1).
imperative_verb(A1) :- ctxrelay_references:imperative_verb(A1).
cardinal_word(W, N) :- ctxrelay_references:cardinal_word(W, N).
