:- module(ctxrelay_thread_state,
          [ thread_state/2,         % +Turns, -State
            thread_summary/3,       % +Label, +State, -Text
            % extension points (multifile, dynamic)
            constraint_marker/1,    % ?Words
            open_marker/1,          % ?Words
            settled_marker/1,       % ?Words
            acceptance_marker/1,    % ?Words
            user_fact_marker/1      % ?Words
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(ctxrelay/references)).
:- use_module(library(ctxrelay/references/tokens), [match_key/2]).
:- use_module(library(ctxrelay/intent), [clarify_marker/1]).

/** <module> The state of a topic thread (CRP-SPEC-028 §6.2)

thread_state/2 fills a thread's state from its turns, deterministically
and without a model, sentence by sentence:

  - `open_questions`: the user's questions no assistant turn of the
    thread has answered yet (a later assistant turn closes them), and
    statements marked open ("not yet decided", "TBD") until a later
    sentence settles them ("we'll go with ...", "decided") with one of
    their words;
  - `established`: what the user states about their setup ("we run
    v3.5", "our cluster has 3 nodes": a user-fact marker or a concrete
    value), assistant statements that carry concrete values (numbers,
    flags, paths, names, code) and assistant statements the user then
    accepted ("ok, let's do that", "perfect");
  - `user_constraints`: the user's statements with a constraint marker
    ("must", "never", "don't", "only", "at most", ...).

Each item is item{text, turns}: the sentence (clipped) and the turns it
came from.  Each list keeps its latest eight items.  thread_summary/3
renders the Active Thread Summary of §6.1.  The marker phrases are facts
users extend (syntax of ctxrelay_references).
*/

:- multifile constraint_marker/1, open_marker/1, settled_marker/1, acceptance_marker/1,
             user_fact_marker/1.
:- dynamic constraint_marker/1, open_marker/1, settled_marker/1, acceptance_marker/1,
           user_fact_marker/1.

:- det(thread_state/2).
:- det(thread_summary/3).

state_items(8).                 % items kept per list (the latest)
summary_items(3).               % items per list in the Active Thread Summary
item_chars(200).                % characters kept per item

%!  thread_state(+Turns:list(dict), -State:dict) is det.
%
%   Turns are the thread's turns, oldest first: dicts with turn_id, role
%   (user, assistant, ...) and content.  State is
%   state{established:Items, open_questions:Items, user_constraints:Items},
%   each Item item{text:String, turns:TurnIds}.
%
%   @error type_error(list, Turns)
%   @error type_error(dict, T) for a turn that is not a dict
%   @error existence_error(key, Key, T) for a turn without turn_id, role
%          or content

thread_state(Turns, State) :-
    must_be(list, Turns),
    maplist(turn_sentences, Turns, Parsed),
    foldl(state_step, Parsed, s([], [], [], []), s(Est0, Open0, Cons0, _)),
    keep_latest(Est0, Est),
    keep_latest(Open0, Open),
    keep_latest(Cons0, Cons),
    State = state{established:Est, open_questions:Open, user_constraints:Cons}.

%   turn_sentences(+Dict, -turn(Id, Role, Sentences))
%   Sentences: s(Text, Tokens, Question) per sentence.
turn_sentences(Dict, turn(Id, Role, Sentences)) :-
    must_be(dict, Dict),
    key(turn_id, Dict, Id),
    key(role, Dict, Role0),
    key(content, Dict, Content0),
    text_to_string(Role0, RoleS),
    atom_string(Role, RoleS),
    text_to_string(Content0, Content),
    text_tokens(Content, Tokens),
    sentences(Tokens, Content, Sentences).

key(K, D, V) :-
    (   get_dict(K, D, V) -> true ; existence_error(key, K, D) ).

sentences([], _, []) :- !.
sentences(Tokens, Content, Sentences) :-
    sentence(Tokens, Sentence, Rest),
    (   Sentence = [t(_, _, S, _)|_]
    ->  last(Sentence, t(Last, _, _, E)),
        Len is E - S,
        sub_string(Content, S, Len, _, Raw0),
        normalize_space(string(Raw), Raw0),
        (   Last == '?' -> Q = true ; Q = false ),
        string_length(Raw, RL),
        (   RL >= 4, memberchk(t(_, word, _, _), Sentence)
        ->  Sentences = [s(Raw, Sentence, Q, Raw0-S)|More]
        ;   Sentences = More
        )
    ;   Sentences = More
    ),
    sentences(Rest, Content, More).

sentence([], [], []).
sentence([T|Ts], [T|S], Rest) :-
    (   T = t(P, punct, _, _), memberchk(P, ['.', '?', '!', '\n'])
    ->  S = [], Rest = Ts
    ;   sentence(Ts, S, Rest)
    ).

%   state_step(+Turn, +S0, -S): s(Established, Open, Constraints, Seen)
%   with Seen the earlier turns (newest first) for acceptance.
state_step(turn(Id, user, Sentences), s(E0, O0, C0, Seen), s(E, O, C, [turn(Id, user, Sentences)|Seen])) :-
    !,
    accepted_reply(Sentences, Id, Seen, E0, E1),
    foldl(user_sentence(Id), Sentences, E1-O0-C0, E2-O1-C),
    settle(Sentences, O1, O),
    E = E2.
state_step(turn(Id, assistant, Sentences), s(E0, O0, C, Seen), s(E, O, C, [turn(Id, assistant, Sentences)|Seen])) :-
    !,
    answer_questions(O0, O1),
    settle(Sentences, O1, O2),
    foldl(assistant_sentence(Id), Sentences, E0-O2, E-O).
state_step(T, S0, S) :-
    S0 = s(E, O, C, Seen),
    S = s(E, O, C, [T|Seen]).

user_sentence(Id, s(Text, Tokens, Q, Orig), E0-O0-C0, E-O-C) :-
    (   Q == true, \+ marker_match(clarify_marker, Tokens, _, _)
    ->  add_item(question(Text), [Id], O0, O), E = E0, C = C0
    ;   Q == true
    ->  E = E0, O = O0, C = C0
    ;   marker_match(open_marker, Tokens, _, _)
    ->  add_item(Text, [Id], O0, O), E = E0, C = C0
    ;   marker_match(constraint_marker, Tokens, _, _),
        \+ marker_match(clarify_marker, Tokens, _, _)
    ->  add_item(Text, [Id], C0, C), E = E0, O = O0
    ;   ( marker_match(user_fact_marker, Tokens, _, _) ; concrete(Orig, Tokens) )
    ->  add_item(Text, [Id], E0, E), O = O0, C = C0
    ;   E = E0, O = O0, C = C0
    ).

assistant_sentence(Id, s(Text, Tokens, Q, Orig), E0-O0, E-O) :-
    (   Q == true
    ->  E = E0, O = O0
    ;   marker_match(open_marker, Tokens, _, _)
    ->  add_item(Text, [Id], O0, O), E = E0
    ;   concrete(Orig, Tokens)
    ->  add_item(Text, [Id], E0, E), O = O0
    ;   E = E0, O = O0
    ).

%   A user turn that opens by accepting ("ok", "perfect, let's do that")
%   establishes the first statement of the assistant turn just before.
accepted_reply(Sentences, Id, Seen, E0, E) :-
    Sentences = [s(_, Tokens, _, _)|_],
    Tokens = [t(_, word, S0, _)|_],
    marker_match(acceptance_marker, Tokens, _, S0-_),
    Seen = [turn(A, assistant, ASentences)|_],
    member(s(Text, _, false, _), ASentences),
    !,
    add_item(Text, [A, Id], E0, E).
accepted_reply(_, _, _, E, E).

%   An assistant turn answers the user's open questions so far.
answer_questions(Open0, Open) :-
    exclude([item(question(_), _)]>>true, Open0, Open).

%   A settling sentence ("we'll go with the internal CA") closes the open
%   statements it shares a content word with.
settle(Sentences, Open0, Open) :-
    findall(Ws, ( member(s(_, Tokens, false, _), Sentences),
                  marker_match(settled_marker, Tokens, _, _),
                  content_keys(Tokens, Ws) ), Settled),
    (   Settled == []
    ->  Open = Open0
    ;   append(Settled, Keys),
        exclude(settled_by(Keys), Open0, Open)
    ).

settled_by(Keys, item(Text, _)) :-
    string(Text),
    text_tokens(Text, Tokens),
    content_keys(Tokens, Ws),
    member(W, Ws),
    memberchk(W, Keys),
    !.

content_keys(Tokens, Keys) :-
    findall(K, ( member(t(W, word, _, _), Tokens),
                 atom_length(W, L), L >= 3,
                 \+ common_word(W),
                 match_key(W, K) ), Keys).

common_word(W) :-
    memberchk(W, [that, this, with, what, have, will, would, should, could, about, which,
                  there, their, them, they, then, than, when, where, your, yours, ours,
                  from, into, just, also, still, yet, decided, decide, going, approach,
                  question, open, sure, need, needs, the, and, for, are, not, yet, our, its,
                  was, has, had, you, can, use, uses, now, all, any]).

%   concrete(+Raw-Start, +Tokens)
%
%   The sentence (its original text Raw at offset Start of the turn)
%   carries a concrete value: a number, a flag, a path, code, or a name
%   written with a capital inside the sentence.
concrete(Raw-Start, Tokens) :-
    (   member(t(W, word, _, _), Tokens),
        (   atom_codes(W, Cs), member(C, Cs), code_type(C, digit)
        ;   sub_atom(W, 0, 1, _, '-')
        )
    ->  true
    ;   sub_string(Raw, _, _, _, "`")
    ->  true
    ;   sub_string(Raw, B, 1, _, "/"),
        B > 0, B1 is B + 1,
        sub_string(Raw, B1, 1, _, C1), char_type(C1, alnum)
    ->  true
    ;   Tokens = [_|Later],
        member(t(W, word, S, _), Later),
        \+ memberchk(W, [i, 'i\'m', 'i\'ve', 'i\'d', 'i\'ll']),
        Off is S - Start,
        sub_string(Raw, Off, 1, _, C),
        char_type(C, upper(_))
    ->  true
    ).

%   add_item(+Text, +Turns, +Items0, -Items): append, the same text once
%   (its turns merged).
add_item(Text0, Turns, Items0, Items) :-
    clip(Text0, Text),
    (   select(item(Text, T0), Items0, Rest)
    ->  union(T0, Turns, T),
        append(Rest, [item(Text, T)], Items)
    ;   append(Items0, [item(Text, Turns)], Items)
    ).

clip(question(T0), question(T)) :- !, clip(T0, T).
clip(T0, T) :-
    item_chars(Max),
    string_length(T0, L),
    (   L =< Max
    ->  T = T0
    ;   Keep is Max - 1,
        sub_string(T0, 0, Keep, _, T1),
        string_concat(T1, "…", T)
    ).

keep_latest(Items0, Items) :-
    state_items(Max),
    length(Items0, N),
    Drop is max(0, N - Max),
    length(Prefix, Drop),
    append(Prefix, Kept, Items0),
    maplist(item_dict, Kept, Items).

item_dict(item(question(T), Turns), item{text:T, turns:Turns}) :- !.
item_dict(item(T, Turns), item{text:T, turns:Turns}).

%!  thread_summary(+Label, +State:dict, -Text:string) is det.
%
%   The Active Thread Summary (CRP-SPEC-028 §6.1) of a thread called
%   Label with State (as thread_state/2 gives, or any dict with the
%   lists established, open_questions and user_constraints, whose
%   elements are items or text):
%
%       Active thread: etcd-config.
%       Established: we run v3.5 on a 3-node cluster.
%       Open: Which CA should sign the peer certs?
%       User constraints: we must not restart all members at once.
%
%   Each line shows the latest three items of its list (the summary is
%   a compact anchor; the whole state is in the thread's record); lists
%   that are empty are left out.
%   @error type_error(dict, State)

thread_summary(Label, State, Text) :-
    must_be(dict, State),
    format(string(Head), "Active thread: ~w.", [Label]),
    findall(Line, ( member(Key-Title, [established-"Established", open_questions-"Open",
                                        user_constraints-"User constraints"]),
                    get_dict(Key, State, Items), Items \== [],
                    summary_line(Title, Items, Line) ), Lines),
    atomic_list_concat([Head|Lines], '\n', Atom),
    atom_string(Atom, Text).

summary_line(Title, Items0, Line) :-
    summary_items(Max),
    length(Items0, N),
    Drop is max(0, N - Max),
    length(Prefix, Drop),
    append(Prefix, Items, Items0),
    maplist(item_text, Items, Texts),
    atomic_list_concat(Texts, '; ', Joined),
    (   sub_atom(Joined, _, 1, 0, Last), memberchk(Last, ['?', '!', '.'])
    ->  format(string(Line), "~w: ~w", [Title, Joined])
    ;   format(string(Line), "~w: ~w.", [Title, Joined])
    ).

item_text(Item, Text) :-
    (   is_dict(Item) -> get_dict(text, Item, T0) ; T0 = Item ),
    text_to_string(T0, T1),
    (   sub_string(T1, B, 1, 0, "."), B > 0
    ->  sub_string(T1, 0, B, _, Text)
    ;   Text = T1
    ).


		 /*******************************
		 *        LEXICON (user)        *
		 *******************************/

%!  constraint_marker(?Words) is nondet.
%   Phrases by which the user states a constraint.
constraint_marker([must]).
constraint_marker(['mustn\'t']).
constraint_marker([never]).
constraint_marker(['don\'t']).
constraint_marker([do, not]).
constraint_marker(['can\'t']).
constraint_marker([cannot]).
constraint_marker([only]).
constraint_marker([at, most]).
constraint_marker([at, least]).
constraint_marker([no, more, than]).
constraint_marker([no, less, than]).
constraint_marker([not, allowed]).
constraint_marker(['isn\'t', allowed]).
constraint_marker([without]).
constraint_marker([avoid]).
constraint_marker(['shouldn\'t']).
constraint_marker([should, not]).
constraint_marker([has, to]).
constraint_marker([have, to]).
constraint_marker([required]).
constraint_marker([requirement]).
constraint_marker([no, downtime]).
constraint_marker([within]).
constraint_marker([under, no, circumstances]).
constraint_marker([under]).

%!  open_marker(?Words) is nondet.
%   Phrases that mark a point as still open.
open_marker([not, yet, decided]).
open_marker([not, decided]).
open_marker(['haven\'t', decided]).
open_marker([have, not, decided]).
open_marker([undecided]).
open_marker([still, deciding]).
open_marker([still, need, to, decide]).
open_marker([yet, to, be, decided]).
open_marker([to, be, decided]).
open_marker([open, question]).
open_marker([tbd]).
open_marker([not, sure, yet]).
open_marker([unresolved]).
open_marker([waiting, on]).
open_marker([pending]).

%!  settled_marker(?Words) is nondet.
%   Phrases that settle an open point.
settled_marker([decided]).
settled_marker([decision]).
settled_marker([go, with]).
settled_marker([going, with]).
settled_marker([settled, on]).
settled_marker([agreed]).
settled_marker([we, will, use]).
settled_marker(['we\'ll', use]).
settled_marker([let, us, use]).
settled_marker(['let\'s', use]).
settled_marker([resolved]).

%!  acceptance_marker(?Words) is nondet.
%   Phrases that open a user turn accepting the assistant's last answer.
acceptance_marker(['^', ok]).
acceptance_marker(['^', okay]).
acceptance_marker(['^', great]).
acceptance_marker(['^', perfect]).
acceptance_marker(['^', sounds, good]).
acceptance_marker(['^', that, works]).
acceptance_marker(['^', that, 'works']).
acceptance_marker(['^', 'let\'s', do, that]).
acceptance_marker(['^', 'let\'s', go, with]).
acceptance_marker(['^', agreed]).
acceptance_marker(['^', makes, sense]).
acceptance_marker(['^', got, it]).
acceptance_marker(['^', thanks]).
acceptance_marker(['^', thank, you]).
acceptance_marker(['^', yes]).
acceptance_marker(['^', done]).

%!  user_fact_marker(?Words) is nondet.
%   Phrases by which the user states a fact about their setup.
user_fact_marker([we, run]).
user_fact_marker([we, use]).
user_fact_marker([we, have]).
user_fact_marker(['we\'re', on]).
user_fact_marker(['we\'re', running]).
user_fact_marker(['we\'re', using]).
user_fact_marker([we, are, on]).
user_fact_marker([we, are, running]).
user_fact_marker([our]).
user_fact_marker(['i\'m', using]).
user_fact_marker(['i\'m', running]).
user_fact_marker([i, use]).
user_fact_marker([i, run]).
user_fact_marker([i, have]).
user_fact_marker([my]).
