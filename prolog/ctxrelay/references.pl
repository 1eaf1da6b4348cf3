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
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).

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

:- meta_predicate marker_match(1, +, -, -).

:- det(references/2).
:- det(token_references/2).
:- det(resolve_references/4).
:- det(text_tokens/2).
:- det(text_words/2).
:- det(mention_words/2).
:- det(enumerations/2).
:- det(reference_dict/2).


                 /*******************************
                 *            TOKENS            *
                 *******************************/

%!  text_tokens(+Text, -Tokens:list) is det.
%
%   Tokens is a list of t(Word, Kind, Start, End): Kind is `word` or
%   `punct`, Word a lowercase atom, Start-End the character offsets of
%   the token in Text.  Line breaks are `punct` tokens '\n'.
%
%   @error type_error(text, Text) if Text is not an atom, string, code
%          or character list
%   @error instantiation_error if Text is unbound

text_tokens(Text, Tokens) :-
    must_be(text, Text),
    text_to_string(Text, String),
    string_codes(String, Codes),
    tokens(Codes, 0, 0'\s, Tokens).

tokens([], _, _, []).
tokens([C|Cs], I0, Prev, Tokens) :-
    I1 is I0 + 1,
    (   C == 0'\n
    ->  Tokens = [t('\n', punct, I0, I1)|Tokens1],
        tokens(Cs, I1, C, Tokens1)
    ;   code_type(C, space)
    ->  tokens(Cs, I1, C, Tokens)
    ;   word_start(C)
    ->  word_codes(Cs, WCs, Rest, I1, I),
        word_atom([C|WCs], W),
        Tokens = [t(W, word, I0, I)|Tokens1],
        tokens(Rest, I, 0'a, Tokens1)
    ;   C == 0'-, code_type(Prev, space), flag_rest(Cs, Dashes, Rest0),
        Rest0 = [D|_], word_start(D)
    ->  length(Dashes, ND),
        I2 is I1 + ND,
        word_codes(Rest0, WCs, Rest, I2, I),
        append([C|Dashes], WCs, FCs),
        word_atom(FCs, W),
        Tokens = [t(W, word, I0, I)|Tokens1],
        tokens(Rest, I, 0'a, Tokens1)
    ;   char_code(P, C),
        Tokens = [t(P, punct, I0, I1)|Tokens1],
        tokens(Cs, I1, C, Tokens1)
    ).

flag_rest([0'-|Cs], [0'-], Cs) :- !.
flag_rest(Cs, [], Cs).

%   word_codes(+Codes, -WordCodes, -Rest, +I0, -I)
%   The continuation of a word: word characters, combining marks, and
%   joiners (- . ' ’) that sit between two word characters.
word_codes([C|Cs], [C|Ws], Rest, I0, I) :-
    (   word_start(C) ; combining_mark(C) ),
    !,
    I1 is I0 + 1,
    word_codes(Cs, Ws, Rest, I1, I).
word_codes([J,C|Cs], [J1,C|Ws], Rest, I0, I) :-
    joiner(J, J1),
    word_start(C),
    !,
    I1 is I0 + 2,
    word_codes(Cs, Ws, Rest, I1, I).
word_codes(Rest, [], Rest, I, I).

word_start(C) :- code_type(C, csym).          % Unicode letters, digits, _

joiner(0'-, 0'-).
joiner(0'., 0'.).
joiner(0'', 0'').
joiner(0'\x2019\, 0'').                      % ’ is folded to '

combining_mark(C) :- between(0x0300, 0x036F, C), !.
combining_mark(C) :- between(0x1AB0, 0x1AFF, C), !.
combining_mark(C) :- between(0x1DC0, 0x1DFF, C), !.
combining_mark(C) :- between(0x20D0, 0x20FF, C), !.
combining_mark(C) :- between(0xFE20, 0xFE2F, C).

word_atom(Codes, Word) :-
    atom_codes(A, Codes),
    downcase_atom(A, Word).

%!  text_words(+Text, -Words:list(atom)) is det.
%
%   The lowercase word tokens of Text, in order.
%   @error type_error(text, Text)

text_words(Text, Words) :-
    text_tokens(Text, Tokens),
    token_words(Tokens, Words).

token_words([], []).
token_words([t(W, K, _, _)|Ts], Ws) :-
    (   K == word
    ->  Ws = [W|Ws1]
    ;   Ws = Ws1
    ),
    token_words(Ts, Ws1).

%!  mention_words(+Text, -Words:list(atom)) is det.
%
%   The set of words through which Text mentions things: its word
%   tokens, the parts of compound tokens (`sync.rwmutex` gives `sync`
%   and `rwmutex`) and their match keys (a light stem under which
%   singular and plural meet: `certs` and `cert` give `cert`).  This is what
%   classify_intent/4 expects under the context key `mentioned`.
%   @error type_error(text, Text)

%
%   Results are kept in a bounded table: assembly reads the words of the
%   same recent turns on every turn of a conversation (for intent and for
%   resolving references), and a turn never changes.

mention_words(Text, Words) :-
    must_be(text, Text),
    (   mention_memo_key(Text, Key)
    ->  (   mention_memo(Key, Text, Words0)
        ->  Words = Words0
        ;   mention_words_(Text, Words),
            remember_mentions(Key, Text, Words)
        )
    ;   mention_words_(Text, Words)
    ).

mention_words_(Text, Words) :-
    text_words(Text, Words0),
    foldl(add_mention_forms, Words0, Forms, []),
    sort(Forms, Words).

:- dynamic mention_memo/3.                  % Hash, Text, Words

mention_memo_key(Text, Key) :-
    (   string(Text) -> string_length(Text, Len) ; atom_length(Text, Len) ),
    Len =< 16384,                           % long texts are rare: not kept
    term_hash(Text, Key).

remember_mentions(Key, Text, Words) :-
    flag(ctxrelay_mention_memo, N, N + 1),
    (   N >= 4096
    ->  retractall(mention_memo(_, _, _)),
        flag(ctxrelay_mention_memo, _, 0)
    ;   true
    ),
    assertz(mention_memo(Key, Text, Words)).

add_mention_forms(W, [W, S|Forms0], Forms) :-
    match_key(W, S),
    word_parts(W, Parts),
    (   Parts = [_,_|_]
    ->  foldl(add_part_forms, Parts, Forms0, Forms)
    ;   Forms0 = Forms
    ).

add_part_forms(P, [P, S|Fs], Fs) :-
    match_key(P, S).

%!  mentioned_word(+Word, +Mentioned:list) is semidet.
%
%   Word, or its match key, is in Mentioned (a list of atoms or
%   strings, as built by mention_words/2).

mentioned_word(Word, Mentioned) :-
    match_key(Word, Stem),
    (   in_list(Stem, Mentioned)
    ->  true
    ;   Stem \== Word, in_list(Word, Mentioned)
    ->  true
    ;   word_parts(Word, [_,_|_]),
        word_parts(Word, Parts),
        member(P, Parts),
        match_key(P, PS),
        in_list(PS, Mentioned)
    ->  true
    ).

in_list(W, L) :- memberchk(W, L), !.
in_list(W, L) :- atom_string(W, S), memberchk(S, L).

word_parts(W, Parts) :-
    atomic_list_concat(Parts0, '.', W),
    foldl(split_on('-'), Parts0, Parts1, []),
    foldl(split_on('_'), Parts1, Parts2, []),
    exclude(==(''), Parts2, Parts).

split_on(Sep, A, Parts, Tail) :-
    atomic_list_concat(Ps, Sep, A),
    append(Ps, Tail, Parts).

%   stem(+Word, -Singular): a light plural fold for looking words up
%   in the word lists (certs -> cert, queries -> query, logs -> log).
%   Short words and words ending in ss/us/is stay.
stem(W, S) :-
    atom_length(W, L),
    (   L > 4, atom_concat(B, ies, W)
    ->  atom_concat(B, y, S)
    ;   L > 3, atom_concat(B, s, W),
        \+ atom_concat(_, ss, W), \+ atom_concat(_, us, W), \+ atom_concat(_, is, W)
    ->  S = B
    ;   S = W
    ).

%   match_key(+Word, -Key): the key under which two forms of a word
%   meet: ies -> y, then a trailing ing, es, s or e goes (cache,
%   caches, caching -> cach; patch, patches -> patch; index, indexes ->
%   index).
match_key(W, K) :-
    atom_length(W, L),
    (   L > 4, atom_concat(B, ies, W)
    ->  atom_concat(B, y, K)
    ;   L > 5, atom_concat(B, ing, W)
    ->  K = B
    ;   L > 4, atom_concat(B, es, W)
    ->  K = B
    ;   L > 3, atom_concat(B, s, W), \+ atom_concat(_, ss, W),
        \+ atom_concat(_, us, W), \+ atom_concat(_, is, W)
    ->  K = B
    ;   L > 3, atom_concat(B, e, W)
    ->  K = B
    ;   K = W
    ).


                 /*******************************
                 *           DETECTION          *
                 *******************************/

%!  references(+Text, -Refs:list) is det.
%
%   Refs are the referential expressions of Text in textual order, each
%   ref(Type, Details, Start-End) with Type one of `entity`, `turn`,
%   `ordinal`, `action`, `tool` (see the module documentation).  At one
%   position the first kind that parses wins, in the order ordinal,
%   turn, action, tool, entity; the words it consumes are not scanned
%   again, except that "... again" also yields an action reference
%   spanning its clause.
%
%   @error type_error(text, Text) if Text is not text
%   @error instantiation_error if Text is unbound

references(Text, Refs) :-
    text_tokens(Text, Tokens),
    token_references(Tokens, Refs).

%!  token_references(+Tokens, -Refs:list) is det.
%
%   references/2 over tokens from text_tokens/2.

token_references(Tokens, Refs) :-
    scan(Tokens, [], Refs).

scan([], _, []).
scan([T|Ts], Before, Refs) :-
    (   ref_at([T|Ts], Before, Found, After)
    ->  append(Found, Refs1, Refs),
        push_consumed([T|Ts], After, Before, Before1),
        scan(After, Before1, Refs1)
    ;   again_action(T, Ts, Before, Ref)
    ->  Refs = [Ref|Refs1],
        scan(Ts, [T|Before], Refs1)
    ;   scan(Ts, [T|Before], Refs)
    ).

push_consumed(Ts, After, B, B) :-
    Ts == After,
    !.
push_consumed([T|Ts], After, B0, B) :-
    push_consumed(Ts, After, [T|B0], B).

ref_at(Ts, Before, Refs, After) :-
    Ts = [t(_, word, _, _)|_],
    (   ordinal_refs(Ts, Before, Refs, After)
    ->  true
    ;   turn_ref(Ts, Before, Ref, After)
    ->  Refs = [Ref]
    ;   action_ref(Ts, Before, Ref, After)
    ->  Refs = [Ref]
    ;   tool_ref(Ts, Before, Ref, After)
    ->  Refs = [Ref]
    ;   entity_ref(Ts, Before, Ref, After)
    ->  Refs = [Ref]
    ).

span(Ts, After, Start-End) :-
    Ts = [t(_, _, Start, _)|_],
    last_consumed(Ts, After, End).

last_consumed([t(_, _, _, E)|Ts], After, End) :-
    (   Ts == After
    ->  End = E
    ;   last_consumed(Ts, After, End)
    ).

%   Token-level non-terminals.
w(W) --> [t(W, word, _, _)].
p(P) --> [t(P, punct, _, _)].

content_word(W) -->
    [t(W, word, _, _)],
    { \+ function_word(W) }.

sentence_end_punct('.').
sentence_end_punct('?').
sentence_end_punct('!').
sentence_end_punct(';').
sentence_end_punct('\n').

clause_punct(P) :- sentence_end_punct(P).
clause_punct(',').
clause_punct(':').
clause_punct('(').
clause_punct(')').
clause_punct('"').

at_boundary([]).
at_boundary([t(P, punct, _, _)|_]) :- clause_punct(P).

%!  marker_match(:Marker, +Tokens, -Words, -Span) is nondet.
%
%   A phrase of the marker predicate Marker (called as call(Marker,
%   Phrase)) occurs in Tokens; Words are the matched words and Span its
%   character offsets.  Solutions come left to right; at one position
%   the longest phrase comes first.

marker_match(Marker, Tokens, Words, Span) :-
    marker_scan(Tokens, [], Marker, Words, Span).

marker_scan(Ts, Before, Marker, Words, Span) :-
    Ts = [t(_, word, _, _)|_],
    longest_marker(Marker, Ts, Before, _Phrase, After),
    span(Ts, After, Span),
    phrase_words(Ts, After, Words).
marker_scan([T|Ts], Before, Marker, Words, Span) :-
    marker_scan(Ts, [T|Before], Marker, Words, Span).

phrase_words(Ts, After, []) :-
    Ts == After,
    !.
phrase_words([t(W, K, _, _)|Ts], After, Words) :-
    (   K == word -> Words = [W|Ws] ; Words = Ws ),
    phrase_words(Ts, After, Ws).

%   longest_marker(:Marker, +Tokens, +Before, -Phrase, -After)
%
%   findall/3 collects only the number of tokens each match consumes:
%   copying the rest of the token list into the bag would make a scan
%   quadratic.  After is then a suffix of Tokens, shared, not copied.
longest_marker(Marker, Ts, Before, Phrase, After) :-
    Ts = [t(W, _, _, _)|_],
    \+ \+ marker_at(Marker, W, Ts, Before, _, _),    % cheap: most positions fail here
    findall(N-P,
            ( marker_at(Marker, W, Ts, Before, P, A),
              consumed_count(Ts, A, 0, N0), N is -N0 ),
            Matches),
    Matches \== [],
    keysort(Matches, [Neg-Phrase|_]),
    Count is -Neg,
    length(Prefix, Count),
    append(Prefix, After, Ts),
    !.

consumed_count(Ts, After, N, N) :-
    Ts == After,
    !.
consumed_count([_|Ts], After, N0, N) :-
    N1 is N0 + 1,
    consumed_count(Ts, After, N1, N).

marker_at(Marker, W, Ts, _Before, Phrase, After) :-
    Phrase = [W|_],
    call(Marker, Phrase),
    match_words(Phrase, Ts, After).
marker_at(Marker, _W, Ts, Before, Phrase, After) :-
    sentence_start(Before),
    Phrase = ['^'|Rest],
    call(Marker, Phrase),
    match_words(Rest, Ts, After).

sentence_start([]).
sentence_start([t(P, punct, _, _)|_]) :-
    sentence_end_punct(P).

match_words([], Ts, Ts).
match_words([M|Ms], Ts, After) :-
    (   M == '$'
    ->  Ms == [],
        sentence_ends(Ts),
        After = Ts
    ;   nonvar(M), M = gap(N)
    ->  gap(N, Ts, Ts1),
        match_words(Ms, Ts1, After)
    ;   Ts = [t(W, word, _, _)|Ts1],
        M = W,
        match_words(Ms, Ts1, After)
    ).

sentence_ends([]).
sentence_ends([t(P, punct, _, _)|_]) :-
    sentence_end_punct(P).

%   gap(+N, +Tokens, -Rest): skip up to N words, and any punctuation
%   that does not end the sentence ("what does the 'flat%' column mean").
gap(_, Ts, Ts).
gap(N, [t(W, K, _, _)|Ts0], Ts) :-
    (   K == word
    ->  N > 0,
        N1 is N - 1
    ;   \+ sentence_end_punct(W),
        N1 = N
    ),
    gap(N1, Ts0, Ts).

%   ---------------- ordinal

ordinal_refs(Ts, _Before, Refs, After) :-
    phrase(ordinal_phrase(Ns, Noun), Ts, After),
    span(Ts, After, Span),
    maplist(ordinal_ref(Noun, Span), Ns, Refs).

ordinal_ref(Noun, Span, N, ref(ordinal, ordinal{n:N, noun:Noun}, Span)).

ordinal_phrase([N], Noun) -->              % the second option, your 3rd idea
    ordinal_determiner,
    ordinal(N),
    ordinal_noun_word(Noun),
    !.
ordinal_phrase([N], none) -->              % the latter, "go with the second."
    w(the),
    ordinal(N),
    boundary_ahead,
    !.
ordinal_phrase(Ns, Noun) -->               % option 3, options 2 and 3, step (2)
    ordinal_noun_word(Noun),
    { Noun \== one },
    number_ref(N),
    more_numbers(Ns0),
    !,
    { Ns = [N|Ns0] }.
ordinal_phrase([N], number) -->            % number 2
    w(number),
    number_ref(N),
    !.

ordinal_determiner --> w(D), { ordinal_determiner(D) }.

ordinal_determiner(the).
ordinal_determiner(your).
ordinal_determiner(that).
ordinal_determiner(this).
ordinal_determiner(my).
ordinal_determiner(our).

ordinal(N) -->
    w(W1), w(to), w(W2),                   % second to last
    { ordinal_word(W1, K), integer(K), K > 0, ordinal_word(W2, -1) },
    !,
    { N is -K }.
ordinal(N) -->
    w(W),
    { ordinal_value(W, N) }.

ordinal_value(W, N) :-
    ordinal_word(W, N),
    !.
ordinal_value(W, N) :-                     % 2nd, 9999th
    atom_codes(W, Codes),
    append(Digits, Suffix, Codes),
    Digits \== [],
    maplist(is_digit_code, Digits),
    atom_codes(SA, Suffix),
    memberchk(SA, [st, nd, rd, th]),
    !,
    number_codes(N, Digits),
    N > 0.

is_digit_code(C) :- code_type(C, digit(_)).

ordinal_noun_word(Noun) -->
    w(W),
    { stem(W, Noun0),
      (   ordinal_noun(W) -> Noun = W
      ;   ordinal_noun(Noun0) -> Noun = Noun0
      )
    }.

number_ref(N) --> p('#'), !, number_value(N).
number_ref(N) --> p('('), !, number_value(N), p(')').
number_ref(N) --> number_value(N), ( p(')') -> [] ; [] ).

number_value(N) -->
    w(W),
    { cardinal(W, N) }.

cardinal(W, N) :-
    atom_codes(W, Codes),
    maplist(is_digit_code, Codes),
    !,
    length(Codes, L), L =< 6,
    number_codes(N, Codes),
    N > 0.
cardinal(W, N) :-
    cardinal_word(W, N).

more_numbers([N|Ns]) -->
    ( w(and) ; w(or) ; p(',') ; w(to) ),
    number_ref(N),
    !,
    more_numbers(Ns).
more_numbers([]) --> [].

boundary_ahead(Ts, Ts) :- at_boundary(Ts).

%   ---------------- turn

turn_ref(Ts, Before, ref(turn, turn{marker:Words, which:Which}, Span), After) :-
    longest_marker(turn_marker, Ts, Before, _, After0),
    (   After0 = [t(E, word, _, _)|After1], earlier_word(E)
    ->  After = After1
    ;   After0 = [t(at, word, _, _), t(first, word, _, _)|After1]
    ->  After = After1
    ;   After = After0
    ),
    span(Ts, After, Span),
    phrase_words(Ts, After, Words),
    (   member(X, Words), earlier_word(X)
    ->  Which = earlier
    ;   Before = [t(B, word, _, _)|_], earlier_word(B)
    ->  Which = earlier
    ;   Which = latest
    ).

%   ---------------- action

action_ref(Ts, Before, ref(action, action{marker:Words, modifier:Mod}, Span), After) :-
    longest_marker(action_marker, Ts, Before, _, After),
    span(Ts, After, Span),
    phrase_words(Ts, After, Words),
    modifier(After, Mod).

%   "run the query again", "roll it out again": an imperative clause
%   ending in `again`; the clause is looked up backwards from `again`.
again_action(t(again, word, _, End), Ts, Before, ref(action, action{marker:Words, modifier:Mod}, Start-End)) :-
    clause_back(Before, 0, Clause),
    Clause = [t(First, word, Start, _)|_],
    imperative_start(First, Clause),
    append(Clause, [t(again, word, 0, 0)], All),
    token_words(All, Words),
    modifier(Ts, Mod).

clause_back([T|Ts], N, Clause) :-
    N < 6,
    T = t(W, K, _, _),
    \+ ( K == punct, clause_punct(W) ),
    \+ ( K == word, clause_conjunction(W) ),
    !,
    N1 is N + 1,
    clause_back(Ts, N1, Clause0),
    append(Clause0, [T], Clause).
clause_back(_, _, []).

%   "explain that again", "say it again" ask for a clarification.
speech_verb(W) :- memberchk(W, [explain, say, tell, describe, clarify, rephrase, put]).

clause_conjunction(and).
clause_conjunction(but).
clause_conjunction(then).
clause_conjunction(so).
clause_conjunction(please).
clause_conjunction(now).

imperative_start(W, _) :-
    speech_verb(W),
    !,
    fail.
imperative_start(W, _) :-
    imperative_verb(W),
    !.
imperative_start(W, [_, t(you, word, _, _)|_]) :-
    memberchk(W, [can, could, would, will]).

modifier(Ts, Mod) :-
    modifier_words(Ts, 8, Mod).

modifier_words([t(W, K, _, _)|Ts], N, Mod) :-
    N > 0,
    \+ ( K == punct, sentence_end_punct(W) ),
    !,
    N1 is N - 1,
    (   K == word -> Mod = [W|Mod1] ; Mod = Mod1 ),
    modifier_words(Ts, N1, Mod1).
modifier_words(_, _, []).

%   ---------------- tool

tool_ref(Ts, _Before, ref(tool, Details, Span), After) :-
    phrase(tool_phrase(D, Mods, Noun), Ts, After),
    span(Ts, After, Span),
    append(Mods, [Noun], Words),
    (   generic_tool_noun(Noun) -> Type = Mods ; Type = Words ),
    Details = tool{determiner:D, words:Words, noun:Noun, type:Type}.

tool_phrase(D, Mods, Noun) -->             % the query result, the logs you pulled
    tool_determiner(D),
    modifiers(Mods, 3),
    tool_noun_word(Noun),
    \+ generic_of,
    ( relative_tool_clause -> [] ; [] ),
    !.
tool_phrase(D, Mods, Source) -->           % what the command printed
    tool_determiner(D),
    modifiers(Mods, 2),
    w(Source0), { stem(Source0, Source), tool_source(Source) },
    ( w(V), { tool_verb(V) } -> [] ; w(has), w(V), { tool_verb(V) } ),
    !.
tool_phrase(D, Mods, Noun) -->             % the query plan you ran
    tool_determiner(D),
    modifiers(Mods0, 3),
    { append(Mods, [Noun0], Mods0), stem(Noun0, Noun),
      \+ non_referential_noun(Noun0) },
    relative_tool_clause,
    !.

tool_determiner(D) --> w(D), { tool_determiner(D) }.

tool_determiner(the).
tool_determiner(that).
tool_determiner(this).
tool_determiner(those).
tool_determiner(these).
tool_determiner(your).

modifiers([], _) --> [].
modifiers([W|Ws], N) -->
    { N > 0 },
    content_word(W),
    { \+ tool_verb(W), N1 is N - 1 },
    modifiers(Ws, N1).

tool_noun_word(Noun) -->                   % singular first: logs -> log
    w(W),
    { stem(W, S),
      (   tool_noun(S) -> Noun = S
      ;   tool_noun(W) -> Noun = W
      )
    }.

%   "you" or "we" ran it: the assistant's tools, not the user's.
relative_tool_clause -->
    ( w(that) -> [] ; [] ),
    w(P), { memberchk(P, [you, we]) },
    ( w(just) -> [] ; [] ),
    w(V), { tool_verb(V) }.

%   "the logs of a Node app": a generic description, not a reference.
generic_of --> w(of), w(D), { memberchk(D, [a, an, any, some, every, each, my, our]) }.

generic_tool_noun(result).
generic_tool_noun(output).
generic_tool_noun(response).
generic_tool_noun(listing).
generic_tool_noun(number).
generic_tool_noun(stat).
generic_tool_noun(report).

%   ---------------- entity

entity_ref(Ts, Before, ref(entity, Details, Span), After) :-
    Ts = [t(D, word, _, _)|Rest],
    entity_determiner(D),
    \+ complementizer(D, Before),
    content_run(Rest, 4, Run),
    Run = [_|_],
    noun_phrase(D, Before, Run, NP),
    NP = [_|_],
    last(NP, t(Head, _, _, _)),
    \+ non_referential_noun(Head),
    append(NP, After, Rest),
    \+ cataphoric(D, After),
    \+ ( D == the, phrase(generic_of, After, _) ),
    span(Ts, After, Span),
    token_words(NP, Words0),
    exclude(==(one), Words0, Words),
    Words = [_|_],
    last(Words0, HeadWord),
    Details = entity{determiner:D, words:Words, head:HeadWord}.

%   A run of content words after the determiner.
content_run([T|Ts], N, [T|Run]) :-
    N > 0,
    T = t(W, word, _, _),
    (   \+ function_word(W)
    ;   W == one
    ),
    !,
    N1 is N - 1,
    content_run(Ts, N1, Run).
content_run(_, _, []).

%   The noun phrase ends at its last known noun (entity_noun/1, or `one`
%   after a modifier); without one, a demonstrative takes a single word
%   that does not look like a verb (nor follows an auxiliary, as in
%   "will that lose"), and `the` takes nothing.
noun_phrase(D, Before, Run, NP) :-
    (   last_known_noun(Run, NP)
    ->  true
    ;   weak_needs_noun(D)
    ->  fail
    ;   Run = [T|_],
        T = t(W, _, _, _),
        \+ verb_like(W),
        \+ ( singular_determiner(D), third_person_s(W) ),
        \+ ( Before = [t(Aux, word, _, _)|_], auxiliary(Aux) ),   % "will that lose"
        NP = [T]
    ).

singular_determiner(that).
singular_determiner(this).

%   "that restarts", "this helps": a verb, since "that" + plural noun
%   is not a noun phrase.
third_person_s(W) :-
    atom_concat(_, s, W),
    \+ atom_concat(_, ss, W), \+ atom_concat(_, us, W), \+ atom_concat(_, is, W).

weak_needs_noun(the).

last_known_noun(Run, NP) :-
    append(NP, Rest, Run),
    NP = [_|_],
    last(NP, t(W, _, _, _)),
    known_noun(W, NP),
    \+ ( member(t(W2, _, _, _), Rest), known_noun(W2, _) ),
    !.

known_noun(one, NP) :- !, NP = [_,_|_].
known_noun(W, _) :-
    (   entity_noun(W) -> true
    ;   stem(W, S), entity_noun(S)
    ).

verb_like(W) :- copula_like(W), !.
verb_like(W) :-
    atom_concat(_, ed, W),
    \+ atom_concat(_, eed, W),
    atom_length(W, L), L > 4.

complementizer(that, [t(P, word, _, _)|_]) :-
    complementizer_trigger(P),
    !.

complementizer(that, [t(P, word, _, _), t(D, word, _, _)|_]) :-
    known_noun(P, []),
    memberchk(D, [the, a, an, this, that, your, my, our, their, its]).

%   "this query: SELECT ..." points forward, not back.
cataphoric(this, [t(':', punct, _, _)|_]).
cataphoric(these, [t(':', punct, _, _)|_]).

                 /*******************************
                 *          RESOLUTION          *
                 *******************************/

%!  resolve_references(+Refs, +Turns, +ScratchEntries, -Resolved) is det.
%
%   Resolve each ref(Type, Details, Span) of Refs (as from references/2)
%   against the prior Turns and the scratch buffer, following
%   CRP-SPEC-028 §4.2.  Turns is a list of dicts with keys `turn_id`,
%   `role` (user, assistant, tool, system; atom or string), `content`
%   and optionally `entities` (list of text) and `tool_name`/`name`,
%   oldest first.  ScratchEntries is a list of dicts with keys
%   `scratch_id`, `tool_name` and optionally `created` (comparable
%   values such as ISO 8601 strings or numbers); without `created` the
%   list order (newest last) decides.
%
%   Resolved has one element per Ref, in order: resolved(Ref, Target)
%   or unresolved(Ref, Reason).  Targets:
%
%     - entity: turn(Id), the turn mentioning most words of the noun
%       phrase (words of its content and `entities`; a word of four or
%       more letters also matches as a prefix, config ~ configure), the
%       most recent among equals; Reason no_mention.
%     - turn: turn(Id), the most recent assistant turn; with `which:
%       earlier` ("what you said earlier", "you said before") the
%       assistant turn before it, or the only one there is; Reason
%       no_assistant_turn.
%     - ordinal: item(Id, I, Text), item I (1-based, counted from the
%       start also for "the last one") from the most recent turn with a
%       numbered ("1." "2)" "(3)") or bulleted ("- " "* " "+ " "•")
%       list of at least |N| items (the first such list of that turn);
%       Reason no_enumeration(N).
%     - action: turn(Id), the most recent user turn that is a request
%       (imperative verb or "can/could you ..."), else the most recent
%       user turn; user turns that are themselves action references
%       are skipped; Reason no_request.
%     - tool: scratch(Id), the most recent scratch entry whose tool name
%       matches the named tool type ("the API response", "the logs");
%       else turn(Id), the most recent tool-role turn matching it; else
%       the most recent scratch entry, else tool turn, of any type;
%       Reason no_tool_output.
%
%   @error type_error(list, X) if Refs, Turns or ScratchEntries is not
%          a list
%   @error type_error(dict, X) for a turn or scratch entry that is not
%          a dict
%   @error existence_error(key, Key, Dict) for a missing required key
%   @error domain_error(reference, Ref) for an element of Refs that is
%          not a ref/3 term

resolve_references(Refs, Turns, Scratch, Resolved) :-
    must_be(list, Refs),
    must_be(list, Turns),
    must_be(list, Scratch),
    maplist(check_ref, Refs),
    maplist(turn_record, Turns, Records0),
    reverse(Records0, Records),             % newest first
    scratch_records(Scratch, ScratchNewest),
    maplist(resolve_ref(Records, ScratchNewest), Refs, Resolved).

check_ref(Ref) :-
    (   nonvar(Ref), Ref = ref(Type, Details, _),
        atom(Type), is_dict(Details)
    ->  true
    ;   domain_error(reference, Ref)
    ).

%   turn_record(+Dict, -turn(Id, Role, Content, Entities, Name))
turn_record(Dict, turn(Id, Role, Content, Entities, Name)) :-
    must_be(dict, Dict),
    required_key(turn_id, Dict, Id),
    required_key(role, Dict, Role0),
    required_key(content, Dict, Content),
    must_be(text, Content),
    must_be(text, Role0),
    text_to_string(Role0, RoleS),
    string_lower(RoleS, RoleL),
    atom_string(Role, RoleL),
    (   get_dict(entities, Dict, Es), is_list(Es) -> Entities = Es ; Entities = [] ),
    (   get_dict(tool_name, Dict, N) -> Name = N
    ;   get_dict(name, Dict, N) -> Name = N
    ;   Name = ''
    ).

required_key(Key, Dict, Value) :-
    (   get_dict(Key, Dict, Value)
    ->  true
    ;   existence_error(key, Key, Dict)
    ).

scratch_records(Scratch, Newest) :-
    foldl(scratch_record, Scratch, Keyed, 1, _),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, Oldest),
    reverse(Oldest, Newest).

scratch_record(Dict, (Created-Pos)-scratch(Id, Name), Pos, Pos1) :-
    Pos1 is Pos + 1,
    must_be(dict, Dict),
    required_key(scratch_id, Dict, Id),
    (   get_dict(tool_name, Dict, Name) -> true ; Name = '' ),
    (   get_dict(created, Dict, Created) -> true ; Created = 0 ).

resolve_ref(Turns, Scratch, Ref, Result) :-
    Ref = ref(Type, Details, _),
    (   resolve(Type, Details, Turns, Scratch, Target)
    ->  Result = resolved(Ref, Target)
    ;   unresolved_reason(Type, Details, Reason),
        Result = unresolved(Ref, Reason)
    ).

unresolved_reason(entity, _, no_mention) :- !.
unresolved_reason(turn, _, no_assistant_turn) :- !.
unresolved_reason(ordinal, D, no_enumeration(N)) :- !, get_dict(n, D, N).
unresolved_reason(action, _, no_request) :- !.
unresolved_reason(tool, _, no_tool_output) :- !.
unresolved_reason(Type, _, unknown_type(Type)).

resolve(entity, D, Turns, _, turn(Id)) :-
    get_dict(words, D, Words),
    findall(Score-Id0,
            ( member(turn(Id0, _, Content, Entities, _), Turns),
              turn_mentions(Content, Entities, Mentioned),
              mention_score(Words, Mentioned, Score),
              Score > 0 ),
            Scored),
    best_most_recent(Scored, Id).
resolve(turn, D, Turns, _, turn(Id)) :-
    findall(Id0, member(turn(Id0, assistant, _, _, _), Turns), Ids),
    Ids = [Latest|Older],
    (   get_dict(which, D, earlier), Older = [Earlier|_]
    ->  Id = Earlier
    ;   Id = Latest
    ).
resolve(ordinal, D, Turns, _, item(Id, I, Item)) :-
    get_dict(n, D, N),
    integer(N), N =\= 0,
    Need is abs(N),
    member(turn(Id, _, Content, _, _), Turns),
    enumerations(Content, Lists),
    member(List, Lists),
    length(List, Len),
    Len >= Need,
    !,
    (   N > 0 -> I = N ; I is Len + N + 1 ),
    nth1(I, List, Item).
resolve(action, _, Turns, _, turn(Id)) :-
    findall(Id0-Content,
            ( member(turn(Id0, user, Content, _, _), Turns),
              \+ has_action_ref(Content) ),
            Requests),
    (   member(Id-C, Requests), imperative_text(C)
    ->  true
    ;   Requests = [Id-_|_]
    ).
resolve(tool, D, Turns, Scratch, Target) :-
    get_dict(type, D, Type0),
    maplist(stem, Type0, Type),
    (   Type \== [], member(scratch(Id, Name), Scratch), name_matches(Type, Name)
    ->  Target = scratch(Id)
    ;   Type \== [], member(turn(Id, tool, Content, _, Name), Turns),
        (   name_matches(Type, Name) -> true ; content_matches(Type, Content) )
    ->  Target = turn(Id)
    ;   Scratch = [scratch(Id, _)|_]
    ->  Target = scratch(Id)
    ;   member(turn(Id, tool, _, _, _), Turns)
    ->  Target = turn(Id)
    ).

best_most_recent(Scored, Id) :-
    Scored = [S0-Id0|Rest],
    foldl(better, Rest, S0-Id0, _-Id).

better(S-Id, S0-Id0, Best) :-              % Scored is newest first
    (   S > S0 -> Best = S-Id ; Best = S0-Id0 ).

turn_mentions(Content, Entities, Mentioned) :-
    mention_words(Content, M0),
    foldl(entity_mentions, Entities, M0, Mentioned).

entity_mentions(E, M0, M) :-
    (   is_text(E)
    ->  mention_words(E, Ws),
        append(Ws, M0, M)
    ;   M = M0
    ).

is_text(X) :- ( atom(X) ; string(X) ), !.

mention_score(Words, Mentioned, Score) :-
    aggregate_count(Words, Mentioned, 0, Score).

aggregate_count([], _, S, S).
aggregate_count([W|Ws], M, S0, S) :-
    (   resolution_mention(W, M) -> S1 is S0 + 1 ; S1 = S0 ),
    aggregate_count(Ws, M, S1, S).

%   Resolution also accepts a prefix of four or more letters, so that
%   abbreviations meet their long forms (config ~ configure, cert ~
%   certificate).  Too slow for the intent hot path, fine here.
resolution_mention(W, M) :-
    mentioned_word(W, M),
    !.
resolution_mention(W, M) :-
    atom_length(W, L),
    L >= 4,
    member(X, M),
    sub_atom(X, 0, _, _, W),
    !.

has_action_ref(Content) :-
    references(Content, Refs),
    memberchk(ref(action, _, _), Refs).

imperative_text(Content) :-
    text_words(Content, Words),
    skip_fillers(Words, Rest),
    (   Rest = [V|_], imperative_verb(V)
    ->  true
    ;   Rest = [M, you|_], memberchk(M, [can, could, would, will])
    ).

skip_fillers([W|Ws], Rest) :-
    memberchk(W, [please, now, ok, okay, so, then, and, also, alright, right, hey, hi, just, pls, kindly, next, first]),
    !,
    skip_fillers(Ws, Rest).
skip_fillers(Ws, Ws).

name_matches(Type, Name) :-
    is_text(Name),
    Name \== '', Name \== "",
    text_words(Name, NameWords0),
    foldl(add_name_parts, NameWords0, NameParts, []),
    member(T, Type),
    (   memberchk(T, NameParts)
    ->  true
    ;   tool_alias(T, Alias), memberchk(Alias, NameParts)
    ),
    !.

add_name_parts(W, Parts, Tail) :-
    word_parts(W, Ps0),
    maplist(stem, Ps0, Ps),
    append([W|Ps], Tail, Parts).

content_matches(Type, Content) :-
    mention_words(Content, M),
    member(T, Type),
    mentioned_word(T, M),
    !.

%!  reference_dict(+Term, -Dict) is det.
%
%   The plain form of a reference or a resolution entry for the janus
%   boundary (Python cannot take the compound terms):
%
%     - ref(Type, Details, S-E) -> reference{type:Type,
%       details:Details, start:S, end:E}
%     - resolved(Ref, Target) -> resolution{ref:RefDict,
%       resolved: @true, target:TargetDict}, TargetDict one of
%       target{kind:turn, turn_id:Id}, target{kind:item, turn_id:Id,
%       index:I, text:Text} or target{kind:scratch, scratch_id:Id}
%     - unresolved(Ref, Reason) -> resolution{ref:RefDict,
%       resolved: @false, reason:ReasonString}
%
%   (@true and @false are janus' Python booleans).
%
%   @error domain_error(reference, Term) for anything else

reference_dict(ref(Type, Details, S-E), Dict) =>
    Dict = reference{type:Type, details:Details, start:S, end:E}.
reference_dict(resolved(Ref, Target), Dict) =>
    reference_dict(Ref, RefDict),
    target_dict(Target, TargetDict),
    Dict = resolution{ref:RefDict, resolved: @(true), target:TargetDict}.
reference_dict(unresolved(Ref, Reason), Dict) =>
    reference_dict(Ref, RefDict),
    term_string(Reason, ReasonString),
    Dict = resolution{ref:RefDict, resolved: @(false), reason:ReasonString}.
reference_dict(Term, _) =>
    domain_error(reference, Term).

target_dict(turn(Id), D) => D = target{kind:turn, turn_id:Id}.
target_dict(item(Id, I, Text), D) => D = target{kind:item, turn_id:Id, index:I, text:Text}.
target_dict(scratch(Id), D) => D = target{kind:scratch, scratch_id:Id}.

%!  enumerations(+Text, -Lists:list(list(string))) is det.
%
%   The enumerations in Text, in order, each a list of its item texts
%   (the line after the marker, trimmed).  Items are lines starting,
%   after indentation, with "N." "N)" "(N)" or a bullet "- " "* " "+ "
%   "• ".  Numbered items continue a list when their number is one more
%   than the previous item's, even across unnumbered lines; bullets
%   continue it across blank and more-indented lines.  Lines inside
%   ``` fences are skipped.
%   @error type_error(text, Text)

%
%   Kept in a bounded table like mention_words/2: an ordinal reference
%   ("the second one") reads the enumerations of the same recent turns on
%   every turn of a conversation.

enumerations(Text, Lists) :-
    must_be(text, Text),
    (   mention_memo_key(Text, Key)
    ->  (   enumeration_memo(Key, Text, Lists0)
        ->  Lists = Lists0
        ;   enumerations_(Text, Lists),
            remember_enumerations(Key, Text, Lists)
        )
    ;   enumerations_(Text, Lists)
    ).

enumerations_(Text, Lists) :-
    split_string(Text, "\n", "\r", Lines),
    enum_lines(Lines, outside, none, Lists).

:- dynamic enumeration_memo/3.              % Hash, Text, Lists

remember_enumerations(Key, Text, Lists) :-
    flag(ctxrelay_enumeration_memo, N, N + 1),
    (   N >= 4096
    ->  retractall(enumeration_memo(_, _, _)),
        flag(ctxrelay_enumeration_memo, _, 0)
    ;   true
    ),
    assertz(enumeration_memo(Key, Text, Lists)).

%   enum_lines(+Lines, +Fence, +Open, -Lists)
%   Open is none, numbered(Last, RevItems) or bullet(Char, Indent, RevItems).
enum_lines([], _, Open, Lists) :-
    close_list(Open, Lists, []).
enum_lines([Line|Lines], Fence, Open, Lists) :-
    split_string(Line, "", " \t", [Trimmed]),
    (   sub_string(Trimmed, 0, 3, _, "```")
    ->  (   Fence == outside -> Fence1 = inside ; Fence1 = outside ),
        enum_lines(Lines, Fence1, Open, Lists)
    ;   Fence == inside
    ->  enum_lines(Lines, Fence, Open, Lists)
    ;   item_line(Line, Kind, Item)
    ->  add_item(Kind, Item, Open, Open1, Lists, Lists1),
        enum_lines(Lines, Fence, Open1, Lists1)
    ;   continues(Open, Line, Trimmed)
    ->  enum_lines(Lines, Fence, Open, Lists)
    ;   close_list(Open, Lists, Lists1),
        enum_lines(Lines, Fence, none, Lists1)
    ).

continues(numbered(_, _), _, _).
continues(bullet(_, _, _), _, "") :- !.
continues(bullet(_, Indent, _), Line, _) :-
    indentation(Line, I),
    I > Indent.

close_list(none, L, L).
close_list(numbered(_, Rev), [Items|L], L) :- reverse(Rev, Items).
close_list(bullet(_, _, Rev), [Items|L], L) :- reverse(Rev, Items).

add_item(number(N), Item, numbered(Last, Rev), numbered(N, [Item|Rev]), L, L) :-
    N =:= Last + 1,
    !.
add_item(number(N), Item, Open, numbered(N, [Item]), L0, L) :-
    !,
    close_list(Open, L0, L).
add_item(bullet(C, I), Item, bullet(C, I, Rev), bullet(C, I, [Item|Rev]), L, L) :-
    !.
add_item(bullet(_, I), _Item, bullet(C0, I0, Rev), bullet(C0, I0, Rev), L, L) :-
    I > I0,                                % nested bullet: part of the item
    !.
add_item(bullet(C, I), Item, Open, bullet(C, I, [Item]), L0, L) :-
    close_list(Open, L0, L).

item_line(Line, Kind, Item) :-
    indentation(Line, Indent),
    string_codes(Line, Codes0),
    length(Pre, Indent),
    append(Pre, Codes, Codes0),
    (   Codes = [0'(|Cs1], digits(Cs1, Ds, [0')|Rest])
    ->  number_codes(N, Ds), Kind = number(N)
    ;   digits(Codes, Ds, [Sep|Rest]), memberchk(Sep, [0'., 0')])
    ->  number_codes(N, Ds), Kind = number(N)
    ;   Codes = [B|Rest], memberchk(B, [0'-, 0'*, 0'+, 0'\x2022\, 0'\x2013\])
    ->  Kind = bullet(B, Indent)
    ),
    Rest = [S|_], code_type(S, space),
    string_codes(RestS, Rest),
    split_string(RestS, "", " \t", [Item]),
    Item \== "".

digits(Codes, [D|Ds], Rest) :-
    Codes = [D|Cs],
    code_type(D, digit),
    digits_more(Cs, Ds, Rest),
    length([D|Ds], L), L =< 4.

digits_more([D|Cs], [D|Ds], Rest) :-
    code_type(D, digit),
    !,
    digits_more(Cs, Ds, Rest).
digits_more(Rest, [], Rest).

indentation(Line, I) :-
    string_codes(Line, Codes),
    leading_blanks(Codes, 0, I).

leading_blanks([C|Cs], I0, I) :-
    (   C == 0'\s -> I1 is I0 + 1
    ;   C == 0'\t -> I1 is I0 + 4
    ),
    !,
    leading_blanks(Cs, I1, I).
leading_blanks(_, I, I).


                 /*******************************
                 *        WORD LISTS (user)     *
                 *******************************/

%!  entity_determiner(?Word) is nondet.
%   Determiners that open an entity reference ("that bug").
entity_determiner(that).
entity_determiner(this).
entity_determiner(those).
entity_determiner(these).
entity_determiner(the).

%!  weak_determiner(?Word) is nondet.
%   Determiners that also introduce new things or name things in the
%   world ("the kernel", "the map"): classify_intent/4 counts their
%   references only when a modifier of the noun phrase was mentioned
%   before ("the indices approach", "the TLS config").
weak_determiner(the).

%!  entity_noun(?Word) is nondet.
%   Nouns (singular) that end a noun phrase after an entity determiner.
%   `the` needs one; `that`/`this` fall back to the next word.
entity_noun(W) :- entity_noun_(W).

entity_noun_(bug). entity_noun_(error). entity_noun_(issue). entity_noun_(problem).
entity_noun_(exception). entity_noun_(warning). entity_noun_(crash). entity_noun_(failure).
entity_noun_(fix). entity_noun_(patch). entity_noun_(change). entity_noun_(workaround).
entity_noun_(config). entity_noun_(configuration). entity_noun_(setting). entity_noun_(flag).
entity_noun_(option). entity_noun_(parameter). entity_noun_(param). entity_noun_(variable).
entity_noun_(value). entity_noun_(key). entity_noun_(cert). entity_noun_(certificate).
entity_noun_(token). entity_noun_(secret). entity_noun_(password). entity_noun_(file).
entity_noun_(script). entity_noun_(snippet). entity_noun_(code). entity_noun_(example).
entity_noun_(function). entity_noun_(method). entity_noun_(class). entity_noun_(module).
entity_noun_(package). entity_noun_(library). entity_noun_(command). entity_noun_(query).
entity_noun_(index). entity_noun_(table). entity_noun_(column). entity_noun_(schema).
entity_noun_(migration). entity_noun_(field). entity_noun_(endpoint). entity_noun_(route).
entity_noun_(header). entity_noun_(cookie). entity_noun_(record). entity_noun_(rule).
entity_noun_(policy). entity_noun_(role). entity_noun_(permission). entity_noun_(block).
entity_noun_(section). entity_noun_(approach). entity_noun_(idea). entity_noun_(solution).
entity_noun_(suggestion). entity_noun_(recommendation). entity_noun_(thing). entity_noun_(part).
entity_noun_(bit). entity_noun_(version). entity_noun_(build). entity_noun_(image).
entity_noun_(container). entity_noun_(pod). entity_noun_(node). entity_noun_(cluster).
entity_noun_(server). entity_noun_(service). entity_noun_(instance). entity_noun_(database).
entity_noun_(stage). entity_noun_(layer). entity_noun_(job). entity_noun_(task).
entity_noun_(test). entity_noun_(workflow). entity_noun_(pipeline). entity_noun_(branch).
entity_noun_(commit). entity_noun_(release). entity_noun_(deployment). entity_noun_(trick).
entity_noun_(pattern). entity_noun_(setup). entity_noun_(mode). entity_noun_(loop).
entity_noun_(timeout). entity_noun_(limit). entity_noun_(threshold). entity_noun_(alert).
entity_noun_(expression). entity_noun_(regex). entity_noun_(metric). entity_noun_(design).
entity_noun_(strategy). entity_noun_(bucket). entity_noun_(volume). entity_noun_(port).
entity_noun_(process). entity_noun_(thread). entity_noun_(lock). entity_noun_(mutex).
entity_noun_(cache). entity_noun_(queue). entity_noun_(topic). entity_noun_(partition).
entity_noun_(shard). entity_noun_(replica). entity_noun_(step). 
entity_noun_(tool). entity_noun_(plugin). entity_noun_(extension). entity_noun_(dependency).
entity_noun_(statement). entity_noun_(line).  entity_noun_(model).
entity_noun_(algorithm).  entity_noun_(framework). entity_noun_(api).
entity_noun_(request). entity_noun_(message). entity_noun_(list). entity_noun_(map).
entity_noun_(struct). entity_noun_(type). entity_noun_(interface). entity_noun_(trait).
entity_noun_(macro). entity_noun_(rotation). entity_noun_(proxy). entity_noun_(dashboard).

%!  turn_marker(?Words) is nondet.
%   Phrases that point at an earlier turn of the assistant.
turn_marker([you, said]).
turn_marker([you, just, said]).
turn_marker([did, you, say]).
turn_marker([you, were, saying]).
turn_marker([you, mentioned]).
turn_marker([you, suggested]).
turn_marker([you, recommended]).
turn_marker([you, proposed]).
turn_marker([you, wrote]).
turn_marker([you, described]).
turn_marker([you, explained]).
turn_marker([you, showed]).
turn_marker([you, listed]).
turn_marker([you, outlined]).
turn_marker([you, noted]).
turn_marker([you, pointed, out]).
turn_marker([you, brought, up]).
turn_marker([you, told, me]).
turn_marker([you, gave, me]).
turn_marker([you, talked, about]).
turn_marker([you, were, talking, about]).
turn_marker([you, referred, to]).
turn_marker([you, meant]).
turn_marker([your, A, N]) :- answer_adjective(A), answer_noun(N).
turn_marker([your, N]) :- answer_noun(N).
turn_marker([the, A, N]) :- answer_adjective(A), answer_noun(N).
turn_marker([as, mentioned, above]).
turn_marker([as, mentioned, earlier]).
turn_marker([as, discussed]).
turn_marker([we, discussed]).
turn_marker([we, talked, about]).

answer_adjective(last).
answer_adjective(previous).
answer_adjective(earlier).
answer_adjective(latest).
answer_adjective(original).
answer_adjective(first).

answer_noun(answer).
answer_noun(answers).
answer_noun(reply).
answer_noun(response).
answer_noun(message).
answer_noun(explanation).
answer_noun(summary).
answer_noun(advice).
answer_noun(comment).
answer_noun(point).
answer_noun(post).

%!  earlier_word(?Word) is nondet.
%   Words that move a turn reference to the assistant turn before the
%   latest ("what you said earlier").
earlier_word(earlier).
earlier_word(before).
earlier_word(previously).
earlier_word(originally).
earlier_word(initially).
earlier_word(first).

%!  action_marker(?Words) is nondet.
%   Phrases asking to repeat an earlier action.
action_marker([do, it, again]).
action_marker([do, that, again]).
action_marker([do, this, again]).
action_marker([do, the, same]).
action_marker([the, same, for]).
action_marker([same, thing]).
action_marker([same, for]).
action_marker([same, again]).
action_marker([same, as, before]).
action_marker([repeat, that]).
action_marker([repeat, it]).
action_marker([repeat, this]).
action_marker([repeat, the, same]).
action_marker([redo, it]).
action_marker([redo, that]).
action_marker([rerun, it]).
action_marker([rerun, that]).
action_marker([re-run, it]).
action_marker([re-run, that]).
action_marker([one, more, time]).
action_marker([like, before]).
action_marker([the, same, way]).
action_marker([V, it, again]) :- imperative_verb(V).
action_marker([V, that, again]) :- imperative_verb(V).
action_marker([V, them, again]) :- imperative_verb(V).

%!  imperative_verb(?Word) is nondet.
%   Verbs that open a request ("run the tests", "restart etcd-2").
imperative_verb(W) :- imperative_verb_(W).

imperative_verb_(run). imperative_verb_(rerun). imperative_verb_(do). imperative_verb_(try).
imperative_verb_(restart). imperative_verb_(start). imperative_verb_(stop). imperative_verb_(deploy).
imperative_verb_(roll). imperative_verb_(write). imperative_verb_(generate). imperative_verb_(create).
imperative_verb_(make). imperative_verb_(build). imperative_verb_(list). imperative_verb_(show).
imperative_verb_(fix). imperative_verb_(check). imperative_verb_(test). imperative_verb_(benchmark).
imperative_verb_(rewrite). imperative_verb_(convert). imperative_verb_(compute). imperative_verb_(update).
imperative_verb_(delete). imperative_verb_(remove). imperative_verb_(install). imperative_verb_(add).
imperative_verb_(rename). imperative_verb_(refactor). imperative_verb_(migrate). imperative_verb_(summarize).
imperative_verb_(summarise). imperative_verb_(explain). imperative_verb_(send). imperative_verb_(fetch).
imperative_verb_(pull). imperative_verb_(push). imperative_verb_(query). imperative_verb_(search).
imperative_verb_(find). imperative_verb_(scan). imperative_verb_(compare). imperative_verb_(plot).
imperative_verb_(draw). imperative_verb_(translate). imperative_verb_(format). imperative_verb_(upgrade).
imperative_verb_(downgrade). imperative_verb_(scale). imperative_verb_(drain). imperative_verb_(reboot).
imperative_verb_(apply). imperative_verb_(execute). imperative_verb_(say). imperative_verb_(give).
imperative_verb_(set). imperative_verb_(open). imperative_verb_(close). imperative_verb_(draft).
imperative_verb_(print). imperative_verb_(load). imperative_verb_(analyze). imperative_verb_(analyse).
imperative_verb_(measure). imperative_verb_(profile). imperative_verb_(ping). imperative_verb_(call).
imperative_verb_(retry). imperative_verb_(redo). imperative_verb_(repeat). imperative_verb_(clean).

%!  tool_noun(?Word) is nondet.
%   Nouns (singular) for the output of a tool call ("the query result").
tool_noun(result).
tool_noun(output).
tool_noun(log).
tool_noun(response).
tool_noun(dump).
tool_noun(trace).
tool_noun(traceback).
tool_noun(stacktrace).
tool_noun(stdout).
tool_noun(stderr).
tool_noun(profile).
tool_noun(report).
tool_noun(listing).
tool_noun(printout).
tool_noun(stat).
tool_noun(number).
tool_noun(payload).

%!  tool_source(?Word) is nondet.
%   Things that run and produce output ("what the command printed").
tool_source(query).
tool_source(command).
tool_source(script).
tool_source(call).
tool_source(request).
tool_source(search).
tool_source(scan).
tool_source(tool).
tool_source(job).
tool_source(test).
tool_source(run).
tool_source(check).
tool_source(benchmark).
tool_source(probe).

%!  tool_verb(?Word) is nondet.
%   Verbs telling what a tool produced or how it was run.
tool_verb(W) :- tool_verb_(W).

tool_verb_(returned). tool_verb_(return). tool_verb_(returns). tool_verb_(printed).
tool_verb_(print). tool_verb_(prints). tool_verb_(showed). tool_verb_(shows).
tool_verb_(show). tool_verb_(gave). tool_verb_(give). tool_verb_(gives).
tool_verb_(found). tool_verb_(find). tool_verb_(finds). tool_verb_(produced).
tool_verb_(output). tool_verb_(outputs). tool_verb_(reported). tool_verb_(reports).
tool_verb_(says). tool_verb_(said). tool_verb_(pulled). tool_verb_(ran).
tool_verb_(run). tool_verb_(fetched). tool_verb_(got). tool_verb_(captured).
tool_verb_(executed). tool_verb_(collected). tool_verb_(grabbed). tool_verb_(dumped).
tool_verb_(generated). tool_verb_(queried). tool_verb_(retrieved). tool_verb_(spat).
tool_verb_(emitted). tool_verb_(logged). tool_verb_(displayed). tool_verb_(yielded).

%!  tool_alias(?Word, ?NamePart) is nondet.
%   A word of a tool reference that names tools whose name has
%   NamePart ("the API response" matches a tool named http_get).
tool_alias(api, http).
tool_alias(api, rest).
tool_alias(api, request).
tool_alias(api, curl).
tool_alias(http, curl).
tool_alias(query, sql).
tool_alias(query, db).
tool_alias(query, promql).
tool_alias(sql, query).
tool_alias(log, logs).
tool_alias(search, web).
tool_alias(cli, shell).
tool_alias(cli, bash).
tool_alias(shell, bash).
tool_alias(shell, exec).
tool_alias(command, shell).
tool_alias(command, bash).
tool_alias(command, exec).

%!  ordinal_word(?Word, ?Position) is nondet.
%   Position is 1-based from the start, or negative from the end
%   (last = -1).
ordinal_word(first, 1).
ordinal_word(second, 2).
ordinal_word(third, 3).
ordinal_word(fourth, 4).
ordinal_word(fifth, 5).
ordinal_word(sixth, 6).
ordinal_word(seventh, 7).
ordinal_word(eighth, 8).
ordinal_word(ninth, 9).
ordinal_word(tenth, 10).
ordinal_word(eleventh, 11).
ordinal_word(twelfth, 12).
ordinal_word(last, -1).
ordinal_word(final, -1).
ordinal_word(latter, -1).
ordinal_word(former, 1).
ordinal_word(penultimate, -2).
ordinal_word('second-to-last', -2).

%!  ordinal_noun(?Word) is nondet.
%   Nouns (singular) naming an item of an enumeration.
ordinal_noun(option).
ordinal_noun(approach).
ordinal_noun(one).
ordinal_noun(step).
ordinal_noun(item).
ordinal_noun(point).
ordinal_noun(bullet).
ordinal_noun(suggestion).
ordinal_noun(solution).
ordinal_noun(choice).
ordinal_noun(alternative).
ordinal_noun(idea).
ordinal_noun(method).
ordinal_noun(way).
ordinal_noun(proposal).
ordinal_noun(recommendation).
ordinal_noun(variant).
ordinal_noun(entry).
ordinal_noun(tip).
ordinal_noun(cause).
ordinal_noun(reason).
ordinal_noun(strategy).
ordinal_noun(fix).

cardinal_word(one, 1).
cardinal_word(two, 2).
cardinal_word(three, 3).
cardinal_word(four, 4).
cardinal_word(five, 5).
cardinal_word(six, 6).
cardinal_word(seven, 7).
cardinal_word(eight, 8).
cardinal_word(nine, 9).
cardinal_word(ten, 10).


                 /*******************************
                 *     WORD LISTS (internal)    *
                 *******************************/

%   Words after `that` that make it a complementizer ("I think that
%   etcd ...") rather than a determiner.
complementizer_trigger(W) :- complementizer_trigger_(W), !.

complementizer_trigger_(think). complementizer_trigger_(know). complementizer_trigger_(believe).
complementizer_trigger_(say). complementizer_trigger_(said). complementizer_trigger_(says).
complementizer_trigger_(mean). complementizer_trigger_(means). complementizer_trigger_(meant).
complementizer_trigger_(sure). complementizer_trigger_(so). complementizer_trigger_(such).
complementizer_trigger_(given). complementizer_trigger_(assuming). complementizer_trigger_(assume).
complementizer_trigger_(ensure). complementizer_trigger_(noticed). complementizer_trigger_(notice).
complementizer_trigger_(seems). complementizer_trigger_(hope). complementizer_trigger_(guess).
complementizer_trigger_(heard). complementizer_trigger_(read). complementizer_trigger_(feel).
complementizer_trigger_(saw). complementizer_trigger_(see). complementizer_trigger_(suggests).
complementizer_trigger_(shows). complementizer_trigger_(show). complementizer_trigger_(realize).
complementizer_trigger_(realise). complementizer_trigger_(true). complementizer_trigger_(fact).
complementizer_trigger_(clear). complementizer_trigger_(possible). complementizer_trigger_(likely).
complementizer_trigger_(is). complementizer_trigger_(was). complementizer_trigger_(than).
complementizer_trigger_(expect). complementizer_trigger_(verify). complementizer_trigger_(confirm).
complementizer_trigger_(check). complementizer_trigger_(claim). complementizer_trigger_(claims).
complementizer_trigger_(found). complementizer_trigger_(learned). complementizer_trigger_(told).
complementizer_trigger_(tells). complementizer_trigger_(wrote). complementizer_trigger_(agree).
complementizer_trigger_(now). complementizer_trigger_(except). complementizer_trigger_(provided).
complementizer_trigger_(like). complementizer_trigger_(way). complementizer_trigger_(one).
complementizer_trigger_(mentioned). complementizer_trigger_(suggested). complementizer_trigger_(explained).
complementizer_trigger_(noted). complementizer_trigger_(recommended). complementizer_trigger_(before).
complementizer_trigger_(earlier). complementizer_trigger_(previously). complementizer_trigger_(wrote).

auxiliary(W) :- memberchk(W, [will, would, does, did, do, is, was, can, could, should,
                              might, may, must, shall, 'doesn\'t', 'didn\'t', 'isn\'t',
                              'wasn\'t', 'won\'t', 'wouldn\'t', 'can\'t', 'couldn\'t',
                              'shouldn\'t']).

%   Heads that make "this morning", "that time", "this way" non-references.
non_referential_noun(W) :- non_referential_noun_(W), !.

non_referential_noun_(time). non_referential_noun_(times). non_referential_noun_(moment).
non_referential_noun_(morning). non_referential_noun_(afternoon). non_referential_noun_(evening).
non_referential_noun_(night). non_referential_noun_(day). non_referential_noun_(week).
non_referential_noun_(month). non_referential_noun_(year). non_referential_noun_(quarter).
non_referential_noun_(weekend). non_referential_noun_(case). non_referential_noun_(way).
non_referential_noun_(kind). non_referential_noun_(sort). non_referential_noun_(type).
non_referential_noun_(much). non_referential_noun_(many). non_referential_noun_(far).
non_referential_noun_(long). non_referential_noun_(sense). non_referential_noun_(stage).
non_referential_noun_(end). non_referential_noun_(start). non_referential_noun_(beginning).
non_referential_noun_(rest). non_referential_noun_(same). non_referential_noun_(best).
non_referential_noun_(difference). non_referential_noun_(world). non_referential_noun_(future).
non_referential_noun_(past).  non_referential_noun_(whole).

%   Present-tense verbs a demonstrative is often the subject of.
copula_like(W) :- copula_like_(W), !.

copula_like_(works). copula_like_(worked). copula_like_(helps). copula_like_(helped).
copula_like_(makes). copula_like_(sounds). copula_like_(looks). copula_like_(seems).
copula_like_(means). copula_like_(happens). copula_like_(depends). copula_like_(matters).
copula_like_(goes). copula_like_(went). copula_like_(did). copula_like_(does).
copula_like_(fixed). copula_like_(fails). copula_like_(failed). copula_like_(breaks).
copula_like_(broke). copula_like_(gives). copula_like_(gave). copula_like_(says).
copula_like_(said). copula_like_(feels). copula_like_(needs). copula_like_(requires).
copula_like_(returns). copula_like_(shows). copula_like_(comes). copula_like_(came).
 copula_like_(causes). copula_like_(caused). copula_like_(should).
copula_like_(would). copula_like_(could). copula_like_(will). copula_like_(can).
copula_like_(might). copula_like_(must). copula_like_(may). copula_like_(way).
copula_like_(right). copula_like_(wrong). copula_like_(correct). copula_like_(true).
copula_like_(good). copula_like_(great). copula_like_(fine). copula_like_(weird).
copula_like_(strange). copula_like_(odd). copula_like_(interesting). copula_like_(cool).
copula_like_(nice). copula_like_(helpful). copula_like_(useful). copula_like_(enough).
copula_like_(well). copula_like_(ok). copula_like_(okay). copula_like_(part).

%   Function words end a noun phrase.
function_word(W) :- function_word_(W), !.

function_word_(the). function_word_(a). function_word_(an). function_word_(this).
function_word_(that). function_word_(these). function_word_(those). function_word_(it).
function_word_(its). function_word_('it\'s'). function_word_(is). function_word_(are).
function_word_(was). function_word_(were). function_word_(be). function_word_(been).
function_word_(being). function_word_(am). function_word_(to). function_word_(of).
function_word_(in). function_word_(on). function_word_(for). function_word_(with).
function_word_(without). function_word_(and). function_word_(or). function_word_(but).
function_word_(not). function_word_(no). function_word_(nor). function_word_(do).
function_word_(does). function_word_(did). function_word_(done). function_word_(i).
function_word_(you). function_word_(we). function_word_(they). function_word_(he).
function_word_(she). function_word_(my). function_word_(your). function_word_(our).
function_word_(their). function_word_(his). function_word_(her). function_word_(me).
function_word_(us). function_word_(them). function_word_(him). function_word_(if).
function_word_(then). function_word_(so). function_word_(as). function_word_(at).
function_word_(by). function_word_(from). function_word_(into). function_word_(onto).
function_word_(over). function_word_(under). function_word_(about). function_word_(after).
function_word_(before). function_word_(between). function_word_(through). function_word_(during).
function_word_(what). function_word_(which). function_word_(who). function_word_(whom).
function_word_(whose). function_word_(how). function_word_(why). function_word_(when).
function_word_(where). function_word_(there). function_word_(here). function_word_(can).
function_word_(could). function_word_(would). function_word_(should). function_word_(will).
function_word_(shall). function_word_(may). function_word_(might). function_word_(must).
function_word_(have). function_word_(has). function_word_(had). function_word_(just).
function_word_(also). function_word_(still). function_word_(all). function_word_(any).
function_word_(some). function_word_(more). function_word_(most). function_word_(very).
function_word_(too). function_word_(again). function_word_(like). function_word_(up).
function_word_(out). function_word_(off). function_word_(than). function_word_(now).
function_word_(only). function_word_(even). function_word_(really). function_word_(actually).
function_word_(already). function_word_(yet). function_word_(instead). function_word_(maybe).
function_word_(please). function_word_(exactly). function_word_(one). function_word_(ones).
function_word_('don\'t'). function_word_('doesn\'t'). function_word_('isn\'t'). function_word_('can\'t').
function_word_('won\'t'). function_word_('i\'m'). function_word_('you\'re'). function_word_('that\'s').
function_word_('what\'s'). function_word_(because). function_word_(while). function_word_(since).
function_word_(until). function_word_(unless). function_word_(though). function_word_(although).
function_word_(each). function_word_(every). function_word_(both). function_word_(either).
function_word_(neither). function_word_(such). function_word_(own). function_word_(same).
function_word_(other). function_word_(another). function_word_(much). function_word_(many).
function_word_(few). function_word_(less). function_word_(least). function_word_(well).
function_word_(way). function_word_(via). function_word_(per). function_word_(against).
function_word_(toward). function_word_(towards). function_word_(within). function_word_(across).
function_word_(get). function_word_(got). function_word_(need). function_word_(needs).
function_word_(want). function_word_(wants). function_word_(use). function_word_(uses).
