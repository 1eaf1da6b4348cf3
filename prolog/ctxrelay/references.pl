:- module(ctxrelay_references,
          [ % detection
            references/2,           % +Text, -Refs
            token_references/2,     % +Tokens, -Refs
            % resolution
            resolve_references/4,   % +Refs, +Turns, +ScratchEntries, -Resolved
            enumerations/2,         % +Text, -Lists
            reference_dict/2,       % +RefOrResolved, -Dict
            % tokens and markers (shared with ctxrelay_intent)
            text_tokens/2,          % +Text, -Tokens
            text_words/2,           % +Text, -Words
            mention_words/2,        % +Text, -Words
            mentioned_word/2,       % +Word, +Mentioned
            marker_match/4,         % :Marker, +Tokens, -Words, -Span
            % extension points (multifile, dynamic)
            entity_determiner/1,    % ?Word
            weak_determiner/1,      % ?Word
            entity_noun/1,          % ?Word
            turn_marker/1,          % ?Words
            action_marker/1,        % ?Words
            tool_noun/1,            % ?Word
            tool_source/1,          % ?Word
            tool_verb/1,            % ?Word
            tool_alias/2,           % ?Word, ?NamePart
            ordinal_word/2,         % ?Word, ?Position
            ordinal_noun/1,         % ?Word
            earlier_word/1,         % ?Word
            imperative_verb/1       % ?Word
          ]).
:- reexport(references/tokens, [text_tokens/2, text_words/2, mention_words/2, mentioned_word/2]).
:- reexport(references/grammar, [references/2, token_references/2, marker_match/4]).
:- reexport(references/resolve, [resolve_references/4, enumerations/2, reference_dict/2]).

/** <module> Referential expressions in a turn, and what they point at

CRP-SPEC-028 §4.  A turn is tokenised into lowercase word and punctuation
tokens (Unicode letters and digits, with `-`, `.`, `'` joining the parts
of one word such as `etcd-3`, `v3.5`, `don't`; a leading `--` stays on a
flag such as `--name`).  DCGs over the tokens find five kinds of
referential expression, returned as ref(Type, Details, Span) with Span
=|Start-End|= character offsets into the text (End exclusive):

  | Type    | Examples                                            | Details (dict)               |
  |---------|-----------------------------------------------------|------------------------------|
  | entity  | that bug, the TLS config, this error, those certs    | determiner, words, head      |
  | turn    | what you said earlier, your last answer, as you mentioned | marker, which (latest/earlier) |
  | ordinal | the second option, option 3, the last one, #2       | n (1-based, negative from the end), noun |
  | action  | do it again but faster, same thing for etcd-3, repeat that | marker, modifier          |
  | tool    | the query result, that output, the logs you pulled, the API response | determiner, words, noun, type |

The word lists behind the grammar are facts that users extend by adding
clauses (they are multifile and dynamic), for example

    :- multifile ctxrelay_references:tool_noun/1.
    ctxrelay_references:tool_noun(heapdump).

Marker phrases (turn_marker/1, action_marker/1 and, in ctxrelay_intent,
clarify_marker/1 and continue_marker/1) are lists of lowercase words.
An unbound element matches any one word, gap(N) skips up to N words
(and punctuation) inside a sentence, a leading `^` anchors the phrase at the start of a
sentence and a trailing `$` at its end.  Phrases are looked up by their
first word, so a phrase starting with a variable is tried everywhere.

resolve_references/4 applies the spec's resolution procedure to a list of
prior turns (dicts, newest last) and scratch-buffer entries.
*/

:- multifile
    entity_determiner/1, weak_determiner/1, entity_noun/1, turn_marker/1,
    action_marker/1, tool_noun/1, tool_source/1, tool_verb/1, tool_alias/2,
    ordinal_word/2, ordinal_noun/1, earlier_word/1, imperative_verb/1.
:- dynamic
    entity_determiner/1, weak_determiner/1, entity_noun/1, turn_marker/1,
    action_marker/1, tool_noun/1, tool_source/1, tool_verb/1, tool_alias/2,
    ordinal_word/2, ordinal_noun/1, earlier_word/1, imperative_verb/1.

%   The default clauses of the word lists above (and the cardinal numbers
%   the ordinal grammar reads), in this module so that users extend them
%   here as documented.
:- include(references/lexicon).
