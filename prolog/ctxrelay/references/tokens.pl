:- module(ctxrelay_reference_tokens,
          [ text_tokens/2,          % +Text, -Tokens
            text_words/2,           % +Text, -Words
            mention_words/2,        % +Text, -Words
            mentioned_word/2,       % +Word, +Mentioned
            match_key/2,            % +Word, -Key
            stem/2,                 % +Word, -Singular
            word_parts/2,           % +Word, -Parts
            token_words/2,          % +Tokens, -Words
            text_memo/3             % :Derive, +Text, -Result (bounded memo)
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).

/** <module> Tokens of a turn, and the words through which it mentions things

The tokenizer every reference detector and marker works on
(text_tokens/2), and the mention words with their match keys that
reference resolution and intent classification compare
(mention_words/2, mentioned_word/2).  Part of ctxrelay_references,
which re-exports the public predicates.
*/

:- det(text_tokens/2).
:- det(text_words/2).
:- det(mention_words/2).
:- det(match_key/2).

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

%!  token_words(+Tokens, -Words:list(atom)) is det.
%
%   The words of the word tokens among Tokens (text_tokens/2), in order.

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
    text_memo(mention_words_, Text, Words).

mention_words_(Text, Words) :-
    text_words(Text, Words0),
    foldl(add_mention_forms, Words0, Forms, []),
    sort(Forms, Words).

%!  text_memo(:Derive, +Text, -Result) is det.
%
%   Result is call(Derive, Text, Result), kept in a bounded table per
%   Derive: for pure functions of a turn's text that assembly asks of the
%   same recent turns on every turn.  Long texts (rare) are not kept; a
%   table that reaches 4,096 entries is emptied.

:- meta_predicate text_memo(2, +, -).

text_memo(Derive, Text, Result) :-
    (   memo_key(Text, Key)
    ->  (   text_memo_(Derive, Key, Text, Result0)
        ->  Result = Result0
        ;   call(Derive, Text, Result),
            remember(Derive, Key, Text, Result)
        )
    ;   call(Derive, Text, Result)
    ).

:- dynamic text_memo_/4.                    % Derive, Hash, Text, Result

memo_key(Text, Key) :-
    (   string(Text) -> string_length(Text, Len) ; atom_length(Text, Len) ),
    Len =< 16384,                           % long texts are rare: not kept
    term_hash(Text, Key).

remember(Derive, Key, Text, Result) :-
    term_to_atom(Derive, Name),
    atom_concat(ctxrelay_text_memo_, Name, Flag),
    flag(Flag, N, N + 1),
    (   N >= 4096
    ->  retractall(text_memo_(Derive, _, _, _)),
        flag(Flag, _, 0)
    ;   true
    ),
    assertz(text_memo_(Derive, Key, Text, Result)).

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

%!  word_parts(+Word, -Parts:list(atom)) is det.
%
%   The parts of a compound word split at `.`, `-` and `_`
%   (`sync.rwmutex` gives `[sync, rwmutex]`); a plain word is its own
%   only part.

word_parts(W, Parts) :-
    atomic_list_concat(Parts0, '.', W),
    foldl(split_on('-'), Parts0, Parts1, []),
    foldl(split_on('_'), Parts1, Parts2, []),
    exclude(==(''), Parts2, Parts).

split_on(Sep, A, Parts, Tail) :-
    atomic_list_concat(Ps, Sep, A),
    append(Ps, Tail, Parts).

%!  stem(+Word, -Singular) is det.
%
%   A light plural fold for looking words up
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

%!  match_key(+Word, -Key) is det.
%
%   The key under which two forms of a word
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


