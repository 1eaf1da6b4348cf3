:- module(ctxrelay_errors,
          [ py_api/1,               % :Goal
            py_api/2,               % :Goal, +Culprit
            py_call_plain/2,        % +Call, -Result
            py_plain/2,             % +PythonValue, -PrologValue
            py_bool/2,              % +Bool, -PyBool
            error_info/2            % +Error, -Info
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).

/** <module> Errors crossing the janus boundary

Python failures raised inside py_call/2,3 arrive as
error(python_error(Class, Obj), _).  At the public Prolog edge they become
ISO error terms where one fits (existence_error(session, Id) for an unknown
session) and otherwise the project's error(ctxrelay(Kind, Message), _),
where Kind is the `kind` attribute of the Python exception class
(ctxrelay.errors).  error_info/2 does the reverse for the Python facade.
*/

:- meta_predicate
    py_api(0),
    py_api(0, +).

%!  py_api(:Goal) is det.
%!  py_api(:Goal, +Culprit) is det.
%
%   Run Goal, which calls Python, and rethrow Python exceptions as
%   Prolog error terms.  Culprit is session(Id), turn(Session, Turn) or
%   thread(Session, Thread) and lets unknown-session/turn/thread errors
%   name what was missing.
%
%   @error existence_error(session, Id), existence_error(turn, S-T),
%          existence_error(thread, S-Thread)
%   @error ctxrelay(Kind, Message) for every other Python-side failure

py_api(Goal) :-
    py_api(Goal, none).

py_api(Goal, Culprit) :-
    catch(Goal, error(python_error(Class, Obj), _),
          rethrow_python(Class, Obj, Culprit)).

rethrow_python(Class, Obj, Culprit) :-
    python_kind(Class, Obj, Kind),
    py_call(str(Obj), Message, [py_string_as(string)]),
    (   iso_formal(Kind, Culprit, Formal)
    ->  throw(error(Formal, context(_, Message)))
    ;   throw(error(ctxrelay(Kind, Message), _))
    ).

python_kind(_Class, Obj, Kind) :-
    catch(py_call(Obj:kind, Kind0, [py_string_as(atom)]), error(_, _), fail),
    !,
    Kind = Kind0.
python_kind(Class, _Obj, python(Class)).

iso_formal(unknown_session, session(Id), existence_error(session, Id)).
iso_formal(unknown_session, turn(Id, _), existence_error(session, Id)).
iso_formal(unknown_turn, turn(Session, Turn), existence_error(turn, Session-Turn)).
iso_formal(unknown_session, thread(Id, _), existence_error(session, Id)).
iso_formal(unknown_thread, thread(Session, Thread), existence_error(thread, Session-Thread)).

%!  py_call_plain(+Call, -Result) is det.
%
%   py_call/3 asking for strings, with Python's True/False made the plain
%   atoms true/false throughout Result (py_plain/2).
py_call_plain(Call, Result) :-
    py_call(Call, Result0, [py_string_as(string)]),
    py_plain(Result0, Result).

%!  py_plain(+In, -Out) is det.
%
%   The one adapter for janus booleans: @true -> true, @false -> false,
%   inside dicts and lists too.  @none (Python's None) is kept: janus maps
%   it back to None when the value returns to Python.
%   Every value of every crossing goes through here (a managed turn
%   converts about a thousand), so strings and numbers leave first and
%   the walks are plain recursion rather than maplist/3.
py_plain(V, V) :- var(V), !.
py_plain(V, V) :- atomic(V), !.
py_plain(@(true), true) :- !.
py_plain(@(false), false) :- !.
py_plain(D0, D) :-
    is_dict(D0, Tag),
    !,
    dict_pairs(D0, Tag, Pairs0),
    plain_pairs(Pairs0, Pairs),
    dict_pairs(D, Tag, Pairs).
py_plain(L0, L) :-
    is_list(L0),
    !,
    plain_list(L0, L).
py_plain(V, V).

plain_list([], []).
plain_list([H0|T0], [H|T]) :-
    py_plain(H0, H),
    plain_list(T0, T).

%   User JSON (metadata, tool arguments) keeps Python's constants, so it
%   returns to Python unchanged.
plain_pairs([], []).
plain_pairs([K-V0|T0], [K-V|T]) :-
    (   atomic(V0) -> V = V0
    ;   opaque_key(K) -> V = V0
    ;   py_plain(V0, V)
    ),
    plain_pairs(T0, T).

opaque_key(metadata).
opaque_key(args).
opaque_key(structured).

%!  error_info(+Error, -Info:dict) is det.
%
%   Describe an error term for the Python facade: Info has keys `kind`
%   (a ctxrelay kind or the ISO formal's name), `message` (the text
%   print_message/2 would show), `formal` (the formal term as a string),
%   `said` (the text of the error's context, when it has one: a fix, or the
%   message of the Python exception it came from), for existence errors
%   `what` and `culprit`, for type and domain errors `expected` and
%   `culprit` (a value Python can show), for syntax errors `what`; the
%   Python facade words its own message from these.

error_info(Error, Info) :-
    error_text(Error, Message),
    (   Error = error(Formal, _), nonvar(Formal)
    ->  true
    ;   Formal = Error
    ),
    formal_kind(Formal, Kind, Extra0),
    (   Error = error(_, context(_, Said)), string(Said)
    ->  Extra = [said-Said|Extra0]            % the fix (or the Python text) it carries
    ;   Extra = Extra0
    ),
    term_string(Formal, FormalString),
    dict_create(Info, error, [kind-Kind, message-Message, formal-FormalString|Extra]).

formal_kind(ctxrelay(Kind0, Details), Kind, [details-Details]) :-
    is_dict(Details),
    !,
    (   atom(Kind0) -> Kind = Kind0 ; term_string(Kind0, Kind) ).
formal_kind(ctxrelay(Kind0, _), Kind, []) :-
    !,
    (   atom(Kind0) -> Kind = Kind0 ; term_string(Kind0, Kind) ).
formal_kind(existence_error(What, Culprit), existence_error,
            [what-What, culprit-CulpritString]) :-
    !,
    culprit_string(Culprit, CulpritString).
formal_kind(type_error(Type, Culprit), type_error, [expected-TypeS, culprit-C]) :-
    !,
    term_string(Type, TypeS),
    culprit_value(Culprit, C).
formal_kind(domain_error(Domain, Culprit), domain_error, [expected-DomainS, culprit-C]) :-
    !,
    term_string(Domain, DomainS),
    culprit_value(Culprit, C).
formal_kind(syntax_error(What), syntax_error, [what-WhatS]) :-
    !,
    term_string(What, WhatS).
formal_kind(Formal, Kind, []) :-
    compound(Formal),
    !,
    compound_name_arity(Formal, Kind, _).
formal_kind(Formal, Kind, []) :-
    (   atom(Formal) -> Kind = Formal ; Kind = unknown ).

%   The culprit of a type or domain error as Python can show it: numbers,
%   strings and dicts of them as they are, @none as None, anything else
%   as its text.
culprit_value(V, V) :- number(V), !.
culprit_value(V, V) :- string(V), !.
culprit_value(@(none), @(none)) :- !.
culprit_value(@(true), @(true)) :- !.
culprit_value(@(false), @(false)) :- !.
culprit_value(V, D) :- is_dict(V), !, dict_pairs(V, _, Ps), dict_pairs(D, py, Ps).
culprit_value(V, S) :- atom(V), !, atom_string(V, S).
culprit_value(V, S) :- term_string(V, S).

culprit_string(Culprit, String) :-
    (   string(Culprit) -> String = Culprit
    ;   atom(Culprit) -> atom_string(Culprit, String)
    ;   term_string(Culprit, String)
    ).

error_text(error(ctxrelay(_, Message), _), Text) :-
    string(Message),
    !,
    Text = Message.
error_text(Error, Text) :-
    message_to_string(Error, Text).

:- multifile prolog:error_message//1.

prolog:error_message(ctxrelay(context_overflow, Figures)) -->
    { is_dict(Figures) },
    !,
    [ 'ctxrelay: context overflow: the mandatory part of the request does not fit; nothing was sent.'-[], nl ],
    figure_lines(Figures),
    [ nl, 'Fix: raise max_context_tokens, lower output_reserve, safety_margin or min_recent_turns, or shorten the system text or message.'-[] ].
prolog:error_message(ctxrelay(Kind, Message)) -->
    [ 'ctxrelay: ~w: ~w'-[Kind, Message] ].

figure_lines(Figures) -->
    { dict_pairs(Figures, _, Pairs) },
    figure_pairs(Pairs).

figure_pairs([]) --> [].
figure_pairs([K-V|T]) -->
    [ '  ~w = ~w'-[K, V] ],
    (   { T == [] } -> [] ; [nl] ),
    figure_pairs(T).

%!  py_bool(+Bool, -PyBool) is semidet.
%
%   Prolog's true/false as Python's True/False (@true/@false): janus
%   passes the atoms true and false to Python as the strings 'true' and
%   'false'.
py_bool(true, @true).
py_bool(false, @false).
