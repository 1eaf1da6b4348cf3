:- module(ctxrelay_naming,
          [ namings/2,              % +Text, -Namings
            % extension points (multifile, dynamic)
            naming_verb/1,          % ?Words
            naming_as_verb/1,       % ?Words
            naming_value_opener/1,  % ?Words
            naming_reference/1,     % ?Word
            marked_name_start/1,    % ?Word
            name_end_marker/1,      % ?Words
            name_end_punct/1,       % ?Char
            naming_negation/1,      % ?Words
            not_a_name/1,           % ?Word
            value_stop_word/1       % ?Word
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(references, [text_tokens/2]).

/** <module> Naming phrases: a value the user names ("call that the budget figure")

CRP-SPEC-035 §4.2 promotes "a computed value the user names" into the
CKF (rule `named` of ctxrelay_promotion).  This module finds the naming
phrases of a text, over the tokens of ctxrelay_references:text_tokens/2
(lowercase words and punctuation with their character offsets).  Three
forms, tried in this order:

  | Form   | Examples                                         | Name                         |
  |--------|--------------------------------------------------|------------------------------|
  | marked | call that the budget figure, name that budget_q3, call it "launch plan" | `the` + up to six words, a quoted text, or an identifier (a word with `_` or a digit) |
  | as     | save that as the build matrix, remember this as build matrix | a quoted text or up to six words |
  | value  | let's call 4.2M the Q3 revenue                   | `the` + words, or a quoted text; the words between are the value |

A name ends at punctuation (`. ! ? ; , : )`), a line break, the end of
the text, or a phrase such as "from now on", "please", "and" (the
name_end_marker/1 facts).  "call that X" needs a *marked* name so that
"call that function again" is not a naming; after "as" plain words do.
A phrase is not a naming when a negation stands just before it ("don't
call that ...", up to two words between, within 40 characters), when its
name starts with a word such as "a", "out" or "done" ("call it a day",
"save that as done"), or when its value holds a word such as "and" or
"to" ("let's call the API and the database").  Phrases of a later form
that overlap an earlier one are dropped.

The word lists are facts that users extend (multifile, dynamic), e.g.

    :- multifile ctxrelay_naming:naming_as_verb/1.
    ctxrelay_naming:naming_as_verb([bookmark]).     % "bookmark that as the baseline"

Phrases (naming_verb/1, naming_as_verb/1, naming_value_opener/1,
name_end_marker/1, naming_negation/1) are lists of lowercase words.

The fact key of a name (`budget_figure`) and the name as shown ("budget
figure", without "the") are made where the fact is written
(ctxrelay.knowledge.promotion.name_key/display_name).
*/

:- multifile
    naming_verb/1, naming_as_verb/1, naming_value_opener/1, naming_reference/1,
    marked_name_start/1, name_end_marker/1, name_end_punct/1, naming_negation/1,
    not_a_name/1, value_stop_word/1.
:- dynamic
    naming_verb/1, naming_as_verb/1, naming_value_opener/1, naming_reference/1,
    marked_name_start/1, name_end_marker/1, name_end_punct/1, naming_negation/1,
    not_a_name/1, value_stop_word/1.

:- det(namings/2).

%!  namings(+Text, -Namings:list) is det.
%
%   Namings are the naming phrases of Text in textual order, each
%   naming(Name, Value, Start, End): Name is the name as written (a
%   string, quotes removed, "the" kept), Value the explicitly named
%   value (a string, for "let's call 4.2M the Q3 revenue") or `none`
%   ("call that ...": the value is what "that" points at), and
%   Start-End the character offsets of the phrase (End exclusive).
%
%   @error type_error(text, Text) if Text is not text
%   @error instantiation_error if Text is unbound

namings(Text, Namings) :-
    must_be(text, Text),
    text_to_string(Text, String),
    (   may_name(String)
    ->  text_tokens(String, Tokens),
        foldl(form_namings(String, Tokens), [marked, as, value], [], Found),
        sort(3, @=<, Found, Namings)
    ;   Namings = []
    ).

%   may_name(+Text): Text holds a word every phrase of some form needs.
%   Almost no turn names anything: this substring test spares them the
%   tokenising and the scan.  Each phrase contributes its longest word
%   without an apostrophe (text_tokens/2 folds ’ to '); a phrase without
%   such a word makes every text a candidate.
may_name(Text) :-
    triggers(Triggers),
    (   Triggers == all
    ->  true
    ;   string_lower(Text, Lower),
        member(Word, Triggers),
        sub_string(Lower, _, _, _, Word)
    ->  true
    ).

%   triggers(-Words): the trigger words of the current lexicon, kept until
%   a phrase predicate changes (its last-modified generation moves).
:- dynamic trigger_cache/2 as volatile.     % Generations, Words

triggers(Words) :-
    lexicon_generations(Gs),
    (   trigger_cache(Gs, Words0)
    ->  Words = Words0
    ;   findall(W, ( naming_phrase(P), ( trigger_word(P, W) -> true ; W = all ) ), Ws0),
        (   memberchk(all, Ws0) -> Words = all ; sort(Ws0, Words) ),
        retractall(trigger_cache(_, _)),
        assertz(trigger_cache(Gs, Words))
    ).

lexicon_generations([G1, G2, G3]) :-
    generation(naming_verb(_), G1),
    generation(naming_as_verb(_), G2),
    generation(naming_value_opener(_), G3).

generation(Head, G) :-
    (   predicate_property(Head, last_modified_generation(G0)) -> G = G0 ; G = 0 ).

naming_phrase(P) :- naming_verb(P).
naming_phrase(P) :- naming_as_verb(P).
naming_phrase(P) :- naming_value_opener(P).

trigger_word(Phrase, Word) :-
    include(plain_word, Phrase, Plain),
    Plain \== [],
    map_list_to_pairs(atom_length, Plain, Pairs),
    max_member(_-Atom, Pairs),
    atom_string(Atom, Word).

plain_word(W) :-
    atom(W),
    \+ sub_atom(W, _, _, _, '\'').

%   naming_dicts(+Text, -Dicts): namings/2 for the Python facade
%   (ctxrelay.knowledge.promotion.parse_namings): name, value (None when
%   `none`), start, end.
naming_dicts(Text, Dicts) :-
    namings(Text, Ns),
    findall(_{name:N, value:V, start:S, end:E},
            ( member(naming(N, V0, S, E), Ns),
              ( V0 == none -> V = @(none) ; V = V0 ) ),
            Dicts).

		 /*******************************
		 *             SCAN             *
		 *******************************/

%   form_namings(+Text, +Tokens, +Form, +Found0, -Found)
%
%   The phrases of one form, left to right.  At each word the first
%   parse of the form is taken (shorter names and values first); a
%   parse that is then refused (negation, not a name, a value stop word,
%   overlap) is skipped whole, and the scan resumes after it.
form_namings(Text, Tokens, Form, Found0, Found) :-
    scan(Tokens, [], Form, Text, Found0, Found).

scan([], _, _, _, Found, Found).
scan([T|Ts], Before, Form, Text, Found0, Found) :-
    (   T = t(_, word, _, _),
        naming_at(Form, [T|Ts], Match, After)
    ->  keep(Match, Before, Text, Found0, Found1),
        consumed([T|Ts], After, Before, Before1),
        scan(After, Before1, Form, Text, Found1, Found)
    ;   scan(Ts, [T|Before], Form, Text, Found0, Found)
    ).

consumed(Ts, After, Before, Before) :-
    Ts == After,
    !.
consumed([T|Ts], After, Before0, Before) :-
    consumed(Ts, After, [T|Before0], Before).

%   naming_at(+Form, +Tokens, -Match, -After) is semidet.
%
%   Match is m(Start, End, NameSpec, ValueSpec).
naming_at(marked, Ts0, m(Start, End, Name, none), Ts) :-
    phrase_at(naming_verb, Ts0, Start, E1, Ts1),
    reference_at(Ts1, E1, E2, Ts2),
    spaced(Ts2, E2, Ts3),
    marked_name(Ts3, Name, End, Ts),
    name_end(Ts),
    !.
naming_at(as, Ts0, m(Start, End, Name, none), Ts) :-
    phrase_at(naming_as_verb, Ts0, Start, E1, Ts1),
    reference_at(Ts1, E1, E2, Ts2),
    spaced(Ts2, E2, [t(as, word, _, E3)|Ts3]),
    spaced(Ts3, E3, Ts4),
    plain_name(Ts4, Name, End, Ts),
    name_end(Ts),
    !.
naming_at(value, Ts0, m(Start, End, Name, value(VS, VE, VTs)), Ts) :-
    phrase_at(naming_value_opener, Ts0, Start, E1, Ts1),
    spaced(Ts1, E1, Ts2),
    Ts2 = [t(W1, _, VS, _)|_],
    \+ naming_reference(W1),
    value_tokens(Ts2, VS, VE, VTs, Ts3),
    spaced(Ts3, VE, Ts4),
    value_name(Ts4, Name, End, Ts),
    name_end(Ts),
    !.

%   phrase_at(:Marker, +Tokens, -Start, -End, -After)
%   A phrase of Marker, its words separated by white space (line breaks
%   included).
phrase_at(Marker, Ts0, Start, End, Ts) :-
    Ts0 = [t(W, word, Start, E0)|Ts1],
    call(Marker, [W|Ws]),
    phrase_rest(Ws, Ts1, E0, End, Ts).

phrase_rest([], Ts, E, E, Ts).
phrase_rest([W|Ws], Ts0, E0, E, Ts) :-
    spaced(Ts0, E0, [t(W, word, _, E1)|Ts1]),
    phrase_rest(Ws, Ts1, E1, E, Ts).

reference_at(Ts0, E0, E, Ts) :-
    spaced(Ts0, E0, [t(W, word, _, E)|Ts]),
    naming_reference(W).

%   spaced(+Tokens, +End, -Next): white space (line breaks included)
%   separates End from the first token of Next.
spaced(Ts0, E, Ts) :-
    skip_breaks(Ts0, Ts),
    Ts = [t(_, _, S, _)|_],
    S > E.

skip_breaks([t('\n', punct, _, _)|Ts0], Ts) :-
    !,
    skip_breaks(Ts0, Ts).
skip_breaks(Ts, Ts).

%   A marked name: a quoted text, "the" and words, or an identifier.
marked_name(Ts0, Name, End, Ts) :-
    (   quoted_name(Ts0, Name, End, Ts)
    ;   the_words(Ts0, Name, End, Ts)
    ;   Ts0 = [t(W, word, S, E0)|Ts1],
        identifier(W),
        ident_rest(Ts1, E0, End, Ts),
        Name = words(S, End)
    ).

plain_name(Ts0, Name, End, Ts) :-
    (   quoted_name(Ts0, Name, End, Ts)
    ;   Ts0 = [t(_, _, S, _)|_],
        name_words(Ts0, End, Ts),
        Name = words(S, End)
    ).

value_name(Ts0, Name, End, Ts) :-
    (   quoted_name(Ts0, Name, End, Ts)
    ;   the_words(Ts0, Name, End, Ts)
    ).

the_words([t(W, word, S, E1)|Ts1], words(S, End), End, Ts) :-
    marked_name_start(W),
    spaced(Ts1, E1, Ts2),
    name_words(Ts2, End, Ts).

%   quoted_name(+Tokens, -Name, -End, -After)
%   A quoted text of 1 to 80 characters on one line.
quoted_name([t(Q, punct, _, OpenEnd)|Ts0], quoted(OpenEnd, CloseStart), End, Ts) :-
    quote_pair(Q, Close),
    quote_close(Ts0, Close, CloseStart, End, Ts),
    Len is CloseStart - OpenEnd,
    between(1, 80, Len).

quote_close([t(P, K, S, E)|Ts0], Close, CS, CE, Ts) :-
    (   K == punct, P == Close
    ->  CS = S, CE = E, Ts = Ts0
    ;   P \== '\n',
        quote_close(Ts0, Close, CS, CE, Ts)
    ).

quote_pair('"', '"').
quote_pair('\'', '\'').
quote_pair('`', '`').
quote_pair('“', '”').

%   name_words(+Tokens, -End, -After)
%
%   One to six chunks separated by white space, the fewest first; a
%   chunk is a run of adjacent word tokens and $ € £ % . ' - signs, the
%   longest first ("$3", "4.2M", "Q3"), that does not end a sentence.
name_words(Ts0, End, Ts) :-
    chunk(Ts0, E1, Ts1),
    more_chunks(5, E1, Ts1, End, Ts).

more_chunks(_, E, Ts, E, Ts).
more_chunks(N, E0, Ts0, E, Ts) :-
    N > 0,
    spaced(Ts0, E0, Ts1),
    chunk(Ts1, E1, Ts2),
    N1 is N - 1,
    more_chunks(N1, E1, Ts2, E, Ts).

chunk([T|Ts0], E, Ts) :-
    chunk_token(T),
    T = t(_, _, _, E0),
    chunk_rest(Ts0, E0, E, Ts).

chunk_rest([T|Ts1], E0, E, Ts) :-
    T = t(P, _, S, E1),
    S =:= E0,
    chunk_token(T),
    \+ ( P == '.', sentence_end(Ts1, E1) ),
    chunk_rest(Ts1, E1, E, Ts).
chunk_rest(Ts, E, E, Ts).

%   A `.` followed by white space or the end ends a sentence, not a
%   chunk: "call that the q3 number. Also ..." names "the q3 number".
sentence_end([], _).
sentence_end([t(_, _, S, _)|_], E) :-
    S > E.

chunk_token(t(_, word, _, _)) :- !.
chunk_token(t(P, punct, _, _)) :-
    memberchk(P, ['$', '€', '£', '%', '.', '\'', '-']).

%   An identifier runs on over adjacent `.` and `-` signs, the longest
%   first (they are stripped from the name again).
ident_rest([t(P, punct, S, E1)|Ts1], E0, E, Ts) :-
    S =:= E0,
    memberchk(P, ['.', '-']),
    ident_rest(Ts1, E1, E, Ts).
ident_rest(Ts, E, E, Ts).

%   identifier(+Word): an ASCII letter first, then a `_` or a digit
%   somewhere (budget_q3, q3-2024); no apostrophe.
identifier(W) :-
    atom_codes(W, [C|Cs]),
    between(0'a, 0'z, C),
    \+ memberchk(0'', Cs),
    once(( member(D, Cs), ( D == 0'_ ; code_type(D, digit) ) )).

%   value_tokens(+Tokens, +Start, -End, -ValueTokens, -After)
%
%   The value of "let's call V the N": one line of at most 80
%   characters without sentence punctuation (a `.` inside a token run
%   such as "4.2" is fine); the shortest first.
value_tokens([T|Ts0], VS, VE, [T|VTs], Ts) :-
    value_token(T, Ts0),
    T = t(_, _, _, E),
    E - VS =< 80,
    (   VE = E, VTs = [], Ts = Ts0
    ;   value_tokens(Ts0, VS, VE, VTs, Ts)
    ).

value_token(t(_, word, _, _), _) :- !.
value_token(t('.', punct, _, E), Next) :-
    !,
    Next = [t(_, _, S, _)|_],
    S =:= E.
value_token(t(P, punct, _, _), _) :-
    \+ memberchk(P, ['\n', '!', '?', ';']).

%   name_end(+After): what follows a name ends it.
name_end([]) :- !.
name_end([t(P, punct, _, _)|_]) :-
    name_end_punct(P),
    !.
name_end(Ts) :-
    name_end_marker([W|Ws]),
    Ts = [t(W, word, _, E)|Ts1],
    phrase_rest(Ws, Ts1, E, _, _),
    !.

		 /*******************************
		 *            REFUSAL           *
		 *******************************/

%   keep(+Match, +Before, +Text, +Found0, -Found)
keep(m(Start, End, NameSpec, ValueSpec), Before, Text, Found0, Found) :-
    (   \+ negated(Before, Start),
        name_text(NameSpec, Text, Name),
        named_word(Name),
        \+ ( first_word(Name, First), not_a_name(First) ),
        value_text(ValueSpec, Text, Value),
        \+ overlaps(Found0, Start, End)
    ->  Found = [naming(Name, Value, Start, End)|Found0]
    ;   Found = Found0
    ).

name_text(quoted(S, E), Text, Name) :-
    Len is E - S,
    sub_string(Text, S, Len, _, Raw),
    split_string(Raw, "", " \t\r\n", [Name]).
name_text(words(S, E), Text, Name) :-
    Len is E - S,
    sub_string(Text, S, Len, _, Raw0),
    split_string(Raw0, "", " \t\r\n", [Raw1]),
    rstrip_chars(Raw1, ".'-", Name).

rstrip_chars(S0, Chars, S) :-
    (   sub_string(S0, B, 1, 0, Last),
        sub_string(Chars, _, _, _, Last)
    ->  sub_string(S0, 0, B, _, S1),
        rstrip_chars(S1, Chars, S)
    ;   S = S0
    ).

%   A name has a letter or digit in it ("..." names nothing).
named_word(Name) :-
    string_codes(Name, Cs),
    once(( member(C, Cs), code_type(C, alnum) )).

first_word(Name, First) :-
    split_string(Name, " \t\r\n", " \t\r\n", Parts),
    once(( member(P, Parts), P \== "" )),
    string_lower(P, L),
    atom_string(First, L).

value_text(none, _, none).
value_text(value(S, E, Tokens), Text, Value) :-
    \+ ( member(t(W, word, _, _), Tokens), value_stop_word(W) ),
    Len is E - S,
    sub_string(Text, S, Len, _, Raw),
    split_string(Raw, "", " \t\r\n", [Value]).

overlaps(Found, Start, End) :-
    member(naming(_, _, S, E), Found),
    S < End,
    Start < E,
    !.

%   negated(+Before, +Start)
%
%   A negation phrase ends just before the naming, or one or two plain
%   words before it ("don't ever call that ..."), and starts at most 40
%   characters before it.  Line breaks count as white space.
negated(Before, Start) :-
    Limit is Start - 40,
    between(0, 2, Skip),
    skip_words(Skip, Before, Start, Rest, Next),
    naming_negation(Phrase),
    reverse(Phrase, [Last|Earlier]),
    previous_word(Rest, Next, Last, S, Rest1),
    negation_rest(Earlier, Rest1, S, NegStart),
    NegStart >= Limit,
    !.

skip_words(0, Ts, Next, Ts, Next) :- !.
skip_words(N, Ts0, Next0, Ts, Next) :-
    previous_word(Ts0, Next0, W, S, Ts1),
    atom_codes(W, Cs),
    forall(member(C, Cs), code_type(C, csym)),
    N1 is N - 1,
    skip_words(N1, Ts1, S, Ts, Next).

%   previous_word(+Before, +Next, ?Word, -Start, -Rest): the token before
%   offset Next is the word Word, white space between.
previous_word([t('\n', punct, _, _)|Ts], Next, W, S, Rest) :-
    !,
    previous_word(Ts, Next, W, S, Rest).
previous_word([t(W, word, S, E)|Rest], Next, W, S, Rest) :-
    E < Next.

negation_rest([], _, S, S).
negation_rest([W|Ws], Ts, Next, S) :-
    previous_word(Ts, Next, W, S1, Ts1),
    negation_rest(Ws, Ts1, S1, S).

		 /*******************************
		 *            LEXICON           *
		 *******************************/

%!  naming_verb(?Words) is nondet.
%
%   "VERB that NAME" with a marked name: call that the budget figure.
naming_verb([call]).
naming_verb([name]).

%!  naming_as_verb(?Words) is nondet.
%
%   "VERB that as NAME": save that as the build matrix.
naming_as_verb([call]).
naming_as_verb([name]).
naming_as_verb([save]).
naming_as_verb([remember]).
naming_as_verb([store]).
naming_as_verb([keep]).
naming_as_verb([refer, to]).

%!  naming_value_opener(?Words) is nondet.
%
%   "OPENER VALUE NAME": let's call 4.2M the Q3 revenue.
naming_value_opener(['let\'s', call]).
naming_value_opener([let, us, call]).

%!  naming_reference(?Word) is nondet.
%
%   What "that" is in "call that ...": the value just before.
naming_reference(that).
naming_reference(this).
naming_reference(it).

%!  marked_name_start(?Word) is nondet.
%
%   A word that marks what follows as a name: call that *the* budget figure.
marked_name_start(the).

%!  name_end_marker(?Words) is nondet.
%
%   Words after a name that end it: call it "launch plan" from now on.
name_end_marker([from, now, on]).
name_end_marker([going, forward]).
name_end_marker([for, now]).
name_end_marker([please]).
name_end_marker([and]).
name_end_marker([so]).
name_end_marker([then]).
name_end_marker([instead]).
name_end_marker([too]).

%!  name_end_punct(?Char) is nondet.
%
%   Punctuation tokens that end a name (a line break is the token '\n').
name_end_punct('.').
name_end_punct('!').
name_end_punct('?').
name_end_punct(';').
name_end_punct(',').
name_end_punct(':').
name_end_punct(')').
name_end_punct('\n').

%!  naming_negation(?Words) is nondet.
%
%   "don't call that the budget figure" names nothing.
naming_negation(['don\'t']).
naming_negation([dont]).
naming_negation([do, not]).
naming_negation([never]).
naming_negation([not]).
naming_negation([no, need, to]).
naming_negation(['shouldn\'t']).
naming_negation([shouldnt]).
naming_negation(['won\'t']).
naming_negation([wont]).

%!  not_a_name(?Word) is nondet.
%
%   A first word that makes the phrase an idiom, not a naming: call it
%   a day, call it quits, save that as done.
not_a_name(quits).
not_a_name(done).
not_a_name(even).
not_a_name(off).
not_a_name(over).
not_a_name(good).
not_a_name(fine).
not_a_name(finished).
not_a_name(correct).
not_a_name(wrong).
not_a_name(right).
not_a_name(ok).
not_a_name(okay).
not_a_name(a).
not_a_name(an).
not_a_name(out).
not_a_name(back).

%!  value_stop_word(?Word) is nondet.
%
%   A word that makes "let's call V the N" an instruction rather than a
%   value: let's call the API and the database.
value_stop_word(and).
value_stop_word(or).
value_stop_word(but).
value_stop_word(again).
value_stop_word(to).
value_stop_word(for).
value_stop_word(with).
value_stop_word(about).
value_stop_word(from).
value_stop_word(now).
value_stop_word(back).
