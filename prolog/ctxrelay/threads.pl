:- module(ctxrelay_threads,
          [ turnlog_derive/3,       % +Store, +Session, +Options
            turn_derived/4,         % +Store, +Session, +TurnId, -Derived
            topic_threads/3,        % +Store, +Session, -Threads
            topic_thread/4,         % +Store, +Session, +ThreadId, -Thread
            thread_state_set/4      % +Store, +Session, +ThreadId, +State
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(errors).
:- use_module(options).
:- use_module(store).
:- use_module(threads/rules, []).         % thread_decision/3: which thread a turn joins
:- use_module(threads/state, []).         % thread_state/2, thread_summary/3

/** <module> The turn log: derived fields, topic threads and their state

Every stored turn has derived fields kept beside the transcript
(<store>/turnlog; the content is never rewritten): its embedding, topic
thread, entities, the turns it refers to and its tool calls.  Assembly
brings them up to date on its own; turnlog_derive/3 does it on demand, or
re-derives a whole session (recompute(true)) after a change of embedder,
with a progress bar on a terminal.

Which thread a turn joins is decided by ctxrelay_thread_rules
(threads/rules.pl: thread_decision/3), for the turns the turn log derives
and for the new message of an assembly alike.  A thread's state
(established facts, open questions, user constraints, each with the turns
it came from) is derived by ctxrelay_thread_state (threads/state.pl);
thread_state_set/4 replaces the fields it is given, and a resumed
thread's Active Thread Summary is built from the result.  See
docs/threads.md.
*/

:- predicate_options(turnlog_derive/3, 3,
                     [embedder(text), recompute(boolean), progress(boolean), result(-dict)]).

%!  turnlog_derive(+Store, +Session, +Options) is det.
%
%   Options: embedder(Name) (default: the best installed; must match the
%   one the session was derived with unless recompute(true)),
%   recompute(Bool), progress(Bool), result(-Dict) (derived count and
%   embedder).
turnlog_derive(Store0, Session, Options) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    check_options(turnlog_derive/3, 3, Options),
    option(embedder(E), Options, ""),
    must_be(text, E),
    option(recompute(R0), Options, false),
    must_be(boolean, R0),
    (   option(progress(P0), Options)
    ->  must_be(boolean, P0), py_bool(P0, P)
    ;   P = @none
    ),
    py_bool(R0, R),
    py_api(py_call_plain('ctxrelay.bridge.threads':api_derive(Store, Session, E, R, P), Result),
           session(Session)),
    ignore(option(result(Result), Options)).

%!  turn_derived(+Store, +Session, +TurnId, -Derived) is semidet.
%
%   The derived fields of a turn; fails if it has not been derived yet.
%   @error existence_error(session, Session) for an unknown session.
turn_derived(Store0, Session, TurnId, Derived) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    must_be(positive_integer, TurnId),
    py_api(py_call_plain('ctxrelay.bridge.threads':api_derived(Store, Session, TurnId), D0),
           session(Session)),
    D0 \== @none,
    Derived = D0.

%!  topic_threads(+Store, +Session, -Threads:list(dict)) is det.
topic_threads(Store0, Session, Threads) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    py_api(py_call_plain('ctxrelay.bridge.threads':api_threads(Store, Session), Threads),
           session(Session)).

%!  topic_thread(+Store, +Session, +ThreadId, -Thread:dict) is det.
%
%   @error existence_error(session, Session) for an unknown session,
%          existence_error(thread, Session-ThreadId) for an unknown thread.
topic_thread(Store0, Session, ThreadId, Thread) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    must_be(text, ThreadId),
    py_api(py_call_plain('ctxrelay.bridge.threads':api_thread(Store, Session, ThreadId), Thread),
           thread(Session, ThreadId)).

%!  thread_state_set(+Store, +Session, +ThreadId, +State:dict) is det.
%
%   State has any of established, open_questions, user_constraints (lists
%   of strings); each field given replaces the derived one from now on,
%   the others stay derived.
%   @error existence_error(thread, Session-ThreadId) for an unknown thread.
thread_state_set(Store0, Session, ThreadId, State) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    must_be(text, ThreadId),
    must_be(dict, State),
    py_api(py_call_plain('ctxrelay.bridge.threads':api_set_thread_state(Store, Session, ThreadId,
                                                                 State), _),
           thread(Session, ThreadId)).

