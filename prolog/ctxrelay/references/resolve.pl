:- module(ctxrelay_reference_resolve,
          [ resolve_references/4,   % +Refs, +Turns, +ScratchEntries, -Resolved
            enumerations/2,         % +Text, -Lists
            reference_dict/2        % +RefOrResolved, -Dict
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(tokens).
:- use_module(grammar).
:- use_module(words).

/** <module> Resolution of referential expressions (CRP-SPEC-028 §4.2)

resolve_references/4 applies the spec's procedure to the prior turns and
the scratch buffer; enumerations/2 finds the numbered and bulleted lists
that ordinal references point into.  Part of ctxrelay_references, which
re-exports the public predicates.
*/

:- det(resolve_references/4).
:- det(enumerations/2).
:- det(reference_dict/2).


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
%   @error instantiation_error for an unbound Term
%   @error domain_error(reference, Term) for anything else

reference_dict(Term, _), var(Term) =>
    instantiation_error(Term).
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
    text_memo(enumerations_, Text, Lists).

enumerations_(Text, Lists) :-
    split_string(Text, "\n", "\r", Lines),
    enum_lines(Lines, outside, none, Lists).

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


