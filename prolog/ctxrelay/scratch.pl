:- module(ctxrelay_scratch,
          [ tool_output_record/6,   % +Store, +Session, +Tool, +Args, +Raw, -Result
            tool_output_record/7,   % +Store, +Session, +Tool, +Args, +Raw, -Result, +Options
            scratch_get/4,          % +Store, +Session, +ScratchId, -Entry
            scratch_get/5,          % +Store, +Session, +ScratchId, -Entry, +Options
            scratch_raw/4,          % +Store, +Session, +ScratchId, -Raw
            scratch_pin/3,          % +Store, +Session, +ScratchId
            scratch_entries/3       % +Store, +Session, -Entries
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(errors).
:- use_module(options).
:- use_module(store).
:- use_module(promotion, [promote_scratch_entry/5]).

/** <module> Tool outputs through the scratch buffer (Tier E)

A tool output is stored whole as a blob on disk; the transcript gets the
call and a structure-aware summary (at most 256 tokens), and the pack only
ever carries that summary, gated by freshness.  The raw blob is read on
demand by its scratch id.
*/

:- predicate_options(scratch_get/5, 5, [as(oneof([dict, python]))]).
:- predicate_options(tool_output_record/7, 7,
                     [freshness(oneof(['REALTIME', 'VOLATILE', 'STABLE', 'STATIC'])), key(text)]).

%!  tool_output_record(+Store, +Session, +Tool, +Args:dict, +Raw, -Result:dict) is det.
%!  tool_output_record(+Store, +Session, +Tool, +Args:dict, +Raw, -Result:dict, +Options) is det.
%
%   Record a tool output.  Result has scratch_id, call_turn, tool_turn
%   and summary.  Options: freshness(Class) (default 'VOLATILE'),
%   key(Key) for idempotent retries.
tool_output_record(Store, Session, Tool, Args, Raw, Result) :-
    tool_output_record(Store, Session, Tool, Args, Raw, Result, []).

tool_output_record(Store0, Session, Tool, Args, Raw, Result, Options) :-
    store_ref(Store0, Store),
    must_be(text, Session), must_be(text, Tool), tool_args(Args), must_be(text, Raw),
    check_options(tool_output_record/7, 7, Options),
    option(freshness(F), Options, 'VOLATILE'),
    (   option(key(K), Options) -> true ; K = @none ),
    text_to_string(Raw, RawS),
    py_api(py_call_plain('ctxrelay.bridge.stores':record_tool_output(Store, Session, Tool, Args, RawS,
                                                         py{freshness:F, key:K}), Result), session(Session)).

%!  scratch_get(+Store, +Session, +ScratchId, -Entry:dict) is det.
scratch_get(Store, Session, Id, Entry) :-
    scratch_get(Store, Session, Id, Entry, []).

%!  scratch_get(+Store, +Session, +ScratchId, -Entry, +Options) is det.
%
%   Options: as(python) leaves Entry a Python dict (no conversion; for
%   Python callers), as(dict) (default) converts it to a Prolog dict.
scratch_get(Store0, Session, Id, Entry, Options) :-
    store_ref(Store0, Store),
    must_be(text, Session), must_be(text, Id),
    check_options(scratch_get/5, 5, Options),
    (   option(as(python), Options)
    ->  py_api(py_call('ctxrelay.bridge.stores':scratch_entry(Store, Session, Id, @false), Entry,
                       [py_object(true)]), session(Session))
    ;   py_api(py_call_plain('ctxrelay.bridge.stores':scratch_entry(Store, Session, Id, @false), Entry),
               session(Session))
    ).

%!  scratch_raw(+Store, +Session, +ScratchId, -Raw:string) is det.
%
%   The whole tool output, read from its blob.
scratch_raw(Store0, Session, Id, Raw) :-
    store_ref(Store0, Store),
    must_be(text, Session), must_be(text, Id),
    py_api(py_call_plain('ctxrelay.bridge.stores':scratch_entry(Store, Session, Id, @true), Entry), session(Session)),
    get_dict(raw, Entry, Raw).

%!  scratch_pin(+Store, +Session, +ScratchId) is det.
%
%   Keep the entry from eviction.  A pinned tool result is durable: it is
%   promoted into the CKF at once by rule `tool_result`
%   (ctxrelay_promotion:promote_scratch_entry/5), unless it is a volatile
%   reading.
scratch_pin(Store0, Session, Id) :-
    store_ref(Store0, Store),
    must_be(text, Session), must_be(text, Id),
    py_api(py_call('ctxrelay.bridge.stores':scratch_pin(Store, Session, Id), _), session(Session)),
    promote_scratch_entry(Store, Session, Id, _, []).

%!  scratch_entries(+Store, +Session, -Entries:list(dict)) is det.
%
%   The session's tool outputs (archived sessions too).
%   @error existence_error(session, Session) for an unknown session.
scratch_entries(Store0, Session, Entries) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    py_api(py_call_plain('ctxrelay.bridge.stores':scratch_list(Store, Session), Entries), session(Session)).

%   Tool arguments: a dict, or its JSON object text (how Python callers pass
%   them: dict keys would become atoms on the way).
tool_args(Args) :-
    (   is_dict(Args) -> true
    ;   ( string(Args) ; atom(Args) ) -> true
    ;   must_be(dict, Args)
    ).

%!  freshness_gate(+Age:number, +TTL, +Class:atom, +Policy, +CanReinvoke:bool,
%!                 -Action:atom) is det.
%
%   The freshness gate (CRP-SPEC-029 §4, §8): what to do with a tool output
%   Age seconds old whose class (REALTIME, VOLATILE, STABLE, STATIC) gives
%   it TTL seconds of freshness (`none`: never stale).  Action is `fresh`
%   while Age =< TTL.  A stale output is never shown as current: it gets
%   Policy (the Safety Policy's `tool-output-stale`: `reinvoke`, `warn` or
%   `exclude`; `none` for the class default), else `reinvoke` for REALTIME
%   and `warn` for the others; `reinvoke` becomes `warn` when the dispatch
%   cannot repeat the call (CanReinvoke `false`).  Python computes Age from
%   the entry's creation time and the clock, and renders what this decides;
%   text arguments may be atoms or strings, CanReinvoke also @(Bool).
freshness_gate(Age, TTL0, Class0, Policy0, CanReinvoke0, Action) :-
    maplist(gate_atom, [TTL0, Class0, Policy0, CanReinvoke0],
            [TTL, Class, Policy, CanReinvoke]),
    must_be(number, Age),
    gate_action(Age, TTL, Class, Policy, CanReinvoke, Action).

gate_atom(@(Value), Value) :- !.
gate_atom(Text, Atom) :- string(Text), !, atom_string(Atom, Text).
gate_atom(Value, Value).

gate_action(Age, TTL, _Class, _Policy, _CanReinvoke, fresh) :-
    ( TTL == none ; Age =< TTL ),
    !.
gate_action(_Age, _TTL, Class, Policy, CanReinvoke, Action) :-
    stale_action(Class, Policy, Action0),
    (   Action0 == reinvoke, CanReinvoke == false
    ->  Action = warn
    ;   Action = Action0
    ).

stale_action(_Class, Policy, Policy) :-
    Policy \== none,
    !.
stale_action('REALTIME', _, reinvoke) :- !.
stale_action(_, _, warn).
