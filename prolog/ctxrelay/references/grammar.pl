:- module(ctxrelay_reference_grammar,
          [ references/2,           % +Text, -Refs
            token_references/2,     % +Tokens, -Refs
            marker_match/4          % :Marker, +Tokens, -Words, -Span
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(tokens).
:- use_module(words).

/** <module> The grammar of referential expressions (CRP-SPEC-028 §4.1)

DCGs over the tokens of text_tokens/2 that find the five kinds of
referential expression (entity, turn, ordinal, action, tool), and the
marker-phrase matcher shared with intent and mode detection.  The word
lists the grammar reads are the extension points of ctxrelay_references
(lexicon.pl); the closed-class lists it keeps to itself (function
words, complementizer triggers, ...) are at the end of this file.
Part of ctxrelay_references, which re-exports the public predicates.
*/

:- meta_predicate marker_match(1, +, -, -).

:- det(references/2).
:- det(token_references/2).


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
%
%   @error type_error(list, Tokens), instantiation_error for a partial list

token_references(Tokens, Refs) :-
    must_be(list, Tokens),          % else scan/3 raises a determinism_error
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

