:- module(ctxrelay_store,
          [ store_open/2,           % +Dir, -Store
            store_open/3,           % +Dir, -Store, +Options
            store_close/1,          % +Store
            default_store/1,        % -Store
            set_default_store/1,    % +Store
            store_ref/2,            % +StoreOrAlias, -Store
                                    % sessions
            session_create/3,       % +Store, +Session, +Options
            session_info/3,         % +Store, +Session, -Info
            sessions/2,             % +Store, -Sessions
            session_archive/2,      % +Store, +Session
            session_stats/3,        % +Store, +Session, -Stats
                                    % turns
            turn_append/4,          % +Store, +Session, +Message, -TurnId
            turn_append/5,          % +Store, +Session, +Message, -TurnId, +Options
            turn_get/4,             % +Store, +Session, +TurnId, -Turn
            turn_count/3,           % +Store, +Session, -Count
            turn_for_key/4,         % +Store, +Session, +Key, -TurnId
            transcript_history/4,   % +Store, +Session, +Range, -Turns
            transcript_search/4,    % +Store, +Session, +Query, -Hits
            transcript_search/5,    % +Store, +Session, +Query, -Hits, +Options
            transcript_export/3,    % +Store, +Session, -Text
            transcript_import/4     % +Store, +Source, -Session, +Options
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(apply)).
:- use_module(errors).
:- use_module(options).

/** <module> The durable transcript, seen from Prolog

Every conversation is kept whole in a store owned by Python (by default
LMDB, ctxrelay.storage.lmdb.transcript); turns are appended, never
rewritten or deleted.  Prolog holds a reference to the store's Python
`Stores` object (ctxrelay.storage.stores), which holds every part of the
store (transcript, turn log, warm artifacts, scratch buffer, knowledge,
rolling log, hot cache); `default` names the store made default by
store_open/3 or set_default_store/1 (the Python facade sets it for the
Runtime it embeds).

Turns come back as dicts with keys turn_id, role, content, name,
tool_call_id, metadata, timestamp, key, tokens, tokens_exact; text values
are strings.
*/

:- dynamic default_store_/1 as volatile.

:- predicate_options(store_open/3, 3, [default(boolean), map_size(nonneg),
                                      max_turn_bytes(nonneg), cache(text)]).
:- predicate_options(session_create/3, 3, [metadata(any)]).
:- predicate_options(turn_append/5, 5,
                     [ key(text), name(text), tool_call_id(text),
                       metadata(any), timestamp(text)
                     ]).
:- predicate_options(transcript_search/5, 5, [k(positive_integer)]).
:- predicate_options(transcript_import/4, 4, [session(text)]).

roles([system, user, assistant, tool]).

%!  store_open(+Dir, -Store) is det.
%!  store_open(+Dir, -Store, +Options) is det.
%
%   Open (creating if needed) the store in directory Dir, or the store a
%   URL names (lmdb:///abs/dir).  One store object exists per store per
%   process; each store_open/2,3 counts a reference that store_close/1
%   gives back.  Options:
%     - default(Bool): make it the store that `default` names
%       (default `true` when no default store is set yet)
%     - map_size(Bytes): initial LMDB map size (it grows on demand)
%     - max_turn_bytes(Bytes): the largest turn content accepted (UTF-8
%       bytes; default 1 MiB): a larger append or managed turn raises
%       ctxrelay(turn_too_large, Msg) before any work
%     - cache(Spec): where the hot cache lives (memory://, the default)
%
%   @error ctxrelay(store_path, Msg), ctxrelay(corrupt_store, Msg) or
%   ctxrelay(invalid_argument, Msg) for an unknown URL scheme

store_open(Dir, Store) :-
    store_open(Dir, Store, []).

store_open(Dir, Store, Options) :-
    check_options(store_open/3, 3, Options),
    must_be(text, Dir),
    option(map_size(MapSize), Options, 0),
    must_be(nonneg, MapSize),
    option(max_turn_bytes(MaxTurn), Options, 0),
    must_be(nonneg, MaxTurn),
    text_to_string(Dir, DirS),
    (   option(cache(Cache0), Options)
    ->  must_be(text, Cache0), text_to_string(Cache0, Cache)
    ;   Cache = @none
    ),
    py_api(py_call('ctxrelay.bridge.stores':store(DirS, MapSize, MaxTurn, Cache), Store)),
    (   option(default(true), Options)
    ->  set_default_store(Store)
    ;   option(default(false), Options)
    ->  true
    ;   default_store_(_)
    ->  true
    ;   set_default_store(Store)
    ).

%!  store_close(+Store) is det.
%
%   Give back the reference of one store_open/2,3; the last one closes
%   the store (another holder, such as a second Runtime on the same
%   directory, keeps it open and keeps working).  Closing a closed store
%   does nothing; any other use of it raises existence_error(ctxrelay_store,
%   Store), as ISO does for a closed stream.
store_close(Store0) :-
    resolve_store(Store0, Store, any),
    py_api(py_call('ctxrelay.bridge.stores':close(Store), Closed)),
    (   Closed == @true
    ->  retractall(default_store_(Store))
    ;   true
    ).

%!  default_store(-Store) is det.
%
%   @error existence_error(store, default) when no store was opened.
default_store(Store) :-
    (   default_store_(Store0)
    ->  Store = Store0
    ;   existence_error(store, default)
    ).

%!  set_default_store(+Store) is det.
%
%   Store is a store object (or what store_ref/2 takes: dir(Directory)).
%   @error type_error(ctxrelay_store, X) for anything else
set_default_store(Store0) :-
    resolve_store(Store0, Store),
    retractall(default_store_(_)),
    assertz(default_store_(Store)).

%!  store_ref(+StoreOrAlias, -Store) is det.
%
%   Store is the store object that StoreOrAlias names: a store object
%   itself, `default` (the default store) or dir(Directory).
%   @error type_error(ctxrelay_store, X) for anything else
%   @error existence_error(ctxrelay_store, Store) for a closed store
store_ref(Store0, Store) :-
    resolve_store(Store0, Store).

resolve_store(Store0, Store) :-
    resolve_store(Store0, Store, open).

%   resolve_store(+StoreOrAlias, -Store, +Need): Need is `open` (the store
%   is used) or `any` (it is being closed).
resolve_store(Store0, Store, Need) :-
    must_be(nonvar, Store0),
    (   Store0 == default
    ->  default_store(Store)
    ;   Store0 = dir(Dir)
    ->  must_be(text, Dir),
        text_to_string(Dir, DirS),
        py_api(py_call('ctxrelay.bridge.stores':store_for_dir(DirS), Store))
    ;   is_py_object(Store0)
    ->  Store = Store0,
        (   Need == open, closed_store(Store)
        ->  throw(error(existence_error(ctxrelay_store, Store),
                        context(_, "the store was closed (store_close/1); open it again \c
                                    with store_open/2")))
        ;   true
        )
    ;   type_error(ctxrelay_store, Store0)
    ).

%   A closed store is caught here, at the edge, so its error names the
%   Prolog predicates rather than the Python part that found it closed.
%   An object that is not a store is left to fail where it is used.
closed_store(Store) :-
    catch(py_call(Store:closed, @(true)), error(python_error(_, _), _), fail).

is_py_object(X) :-
    blob(X, Type),
    Type \== text,
    Type \== reserved_symbol.

session_string(Session, String) :-
    must_be(text, Session),
    text_to_string(Session, String).

%!  session_create(+Store, +Session, +Options) is det.
%
%   Create Session.  Options: metadata(Dict) (a JSON object).
%   @error ctxrelay(session_exists, Msg), ctxrelay(invalid_session_id, Msg)
session_create(Store0, Session, Options) :-
    check_options(session_create/3, 3, Options),
    resolve_store(Store0, Store),
    session_string(Session, S),
    option(metadata(Meta), Options, @none),
    py_api(py_call('ctxrelay.bridge.stores':create_session(Store, S, Meta), _)).

%!  session_info(+Store, +Session, -Info:dict) is det.
%   @error existence_error(session, Session)
session_info(Store0, Session, Info) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    py_api(py_call_plain('ctxrelay.bridge.stores':session(Store, S), Info), session(Session)).

%!  sessions(+Store, -Sessions:list(dict)) is det.
sessions(Store0, Sessions) :-
    resolve_store(Store0, Store),
    py_api(py_call_plain('ctxrelay.bridge.stores':sessions(Store), Sessions)).

%!  session_archive(+Store, +Session) is det.
%
%   Mark Session archived: its turns stay readable, appends are refused.
%   There is no delete.
session_archive(Store0, Session) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    py_api(py_call('ctxrelay.bridge.stores':archive_session(Store, S), _), session(Session)).

%!  session_stats(+Store, +Session, -Stats:dict) is det.
session_stats(Store0, Session, Stats) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    py_api(py_call_plain('ctxrelay.bridge.stores':stats(Store, S), Stats), session(Session)).

%!  turn_append(+Store, +Session, +Message, -TurnId) is det.
%!  turn_append(+Store, +Session, +Message, -TurnId, +Options) is det.
%
%   Append Message, either message(Role, Content) or a dict with keys
%   role, content and optionally name, tool_call_id, metadata,
%   timestamp, key.  Options (override the dict): key(Key) makes the
%   append idempotent: the same key returns the same TurnId and writes
%   nothing, which keeps retries and backtracking from duplicating turns.
%
%   @error domain_error(role, Role), type_error(text, Content)
%   @error ctxrelay(key_conflict, Msg) when Key was used for another turn
%   @error ctxrelay(archived_session, Msg)
turn_append(Store, Session, Message, TurnId) :-
    turn_append(Store, Session, Message, TurnId, []).

turn_append(Store0, Session, Message, TurnId, Options) :-
    check_options(turn_append/5, 5, Options),
    resolve_store(Store0, Store),
    session_string(Session, S),
    message_parts(Message, Role, Content, Extra0),
    roles(Roles),
    (   memberchk(Role, Roles)
    ->  true
    ;   atomic_list_concat(Roles, ', ', Allowed),
        format(string(Fix), "use one of ~w", [Allowed]),
        throw(error(domain_error(role, Role), context(turn_append/5, Fix)))
    ),
    must_be(text, Content),
    text_to_string(Content, ContentS),
    append_options(Options, Extra0, Extra),
    dict_pairs(ExtraDict, py, Extra),
    py_api(py_call('ctxrelay.bridge.stores':append(Store, S, Role, ContentS, ExtraDict),
                   TurnId), session(Session)).

message_parts(Message, _, _, _) :-
    var(Message),
    !,
    instantiation_error(Message).
message_parts(message(Role0, Content), Role, Content, []) :-
    !,
    role_atom(Role0, Role).
message_parts(Dict, Role, Content, Extra) :-
    is_dict(Dict),
    !,
    (   get_dict(role, Dict, Role0) -> role_atom(Role0, Role)
    ;   domain_error(message_with_role, Dict)
    ),
    (   get_dict(content, Dict, Content) -> true
    ;   domain_error(message_with_content, Dict)
    ),
    dict_pairs(Dict, _, Pairs),
    exclude([K-_]>>memberchk(K, [role, content]), Pairs, Extra).
message_parts(Message, _, _, _) :-
    type_error(ctxrelay_message, Message).

role_atom(Role0, Role) :-
    must_be(text, Role0),
    atom_string(Role, Role0).

append_options(Options, Extra0, Extra) :-
    must_be(list, Options),
    foldl(option_override(Options), [key, name, tool_call_id, metadata, timestamp],
          Extra0, Extra).

option_override(Options, Key, Extra0, Extra) :-
    Opt =.. [Key, Value],
    (   option(Opt, Options)
    ->  (   Key \== metadata -> must_be(text, Value) ; true ),
        (   selectchk(Key-_, Extra0, Extra1) -> true ; Extra1 = Extra0 ),
        Extra = [Key-Value|Extra1]
    ;   Extra = Extra0
    ).

%!  turn_get(+Store, +Session, +TurnId, -Turn:dict) is det.
%   @error existence_error(turn, Session-TurnId)
turn_get(Store0, Session, TurnId, Turn) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    must_be(positive_integer, TurnId),
    py_api(py_call_plain('ctxrelay.bridge.stores':turn(Store, S, TurnId), Turn), turn(Session, TurnId)).

%!  turn_for_key(+Store, +Session, +Key, -TurnId) is det.
%
%   TurnId is the turn appended with idempotency Key, or `none`.
turn_for_key(Store0, Session, Key, TurnId) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    must_be(text, Key),
    text_to_string(Key, K),
    py_api(py_call('ctxrelay.bridge.stores':turn_for_key(Store, S, K), T0), session(Session)),
    (   integer(T0) -> TurnId = T0 ; TurnId = none ).

%!  turn_count(+Store, +Session, -Count) is det.
turn_count(Store0, Session, Count) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    py_api(py_call('ctxrelay.bridge.stores':turn_count(Store, S), Count), session(Session)).

%!  transcript_history(+Store, +Session, +Range, -Turns:list(dict)) is det.
%
%   Range is `all`, Start-End (inclusive, 1-based), from(Start) or
%   last(N).  Ranges past the end are clipped.
%   @error domain_error(history_range, Range)
transcript_history(Store0, Session, Range, Turns) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    must_be(nonvar, Range),
    history_(Range, Store, S, Session, Turns).

history_(all, Store, S, Session, Turns) :-
    !,
    history_(from(1), Store, S, Session, Turns).
history_(from(Start), Store, S, Session, Turns) :-
    !,
    must_be(positive_integer, Start),
    py_api(py_call_plain('ctxrelay.bridge.stores':history(Store, S, Start, @none), Turns), session(Session)).
history_(Start-End, Store, S, Session, Turns) :-
    !,
    must_be(positive_integer, Start),
    must_be(positive_integer, End),
    py_api(py_call_plain('ctxrelay.bridge.stores':history(Store, S, Start, End), Turns), session(Session)).
history_(last(N), Store, S, Session, Turns) :-
    !,
    must_be(nonneg, N),
    py_api(py_call_plain('ctxrelay.bridge.stores':last(Store, S, N), Turns), session(Session)).
history_(Range, _, _, _, _) :-
    domain_error(history_range, Range).

%!  transcript_search(+Store, +Session, +Query, -Hits) is det.
%!  transcript_search(+Store, +Session, +Query, -Hits, +Options) is det.
%
%   BM25-ranked search of Session through the inverted index.  Hits is
%   a list of dicts with turn_id, score, role, content, best first.
%   Options: k(K), the number of hits (default 10).
transcript_search(Store, Session, Query, Hits) :-
    transcript_search(Store, Session, Query, Hits, []).

transcript_search(Store0, Session, Query, Hits, Options) :-
    check_options(transcript_search/5, 5, Options),
    resolve_store(Store0, Store),
    session_string(Session, S),
    must_be(text, Query),
    text_to_string(Query, Q),
    option(k(K), Options, 10),
    must_be(positive_integer, K),
    py_api(py_call_plain('ctxrelay.bridge.stores':search(Store, S, Q, K), Hits), session(Session)).

%!  transcript_export(+Store, +Session, -Text) is det.
%
%   Text is the session as JSON Lines: a session header, then one line
%   per turn.
transcript_export(Store0, Session, Text) :-
    resolve_store(Store0, Store),
    session_string(Session, S),
    py_api(py_call_plain('ctxrelay.bridge.stores':export_jsonl(Store, S, @none), Text), session(Session)).

%!  transcript_import(+Store, +Source, -Session, +Options) is det.
%
%   Import JSON Lines text or file(Path) written by transcript_export/3
%   into a new session.  Options: session(Id) renames it.
transcript_import(Store0, Source, Session, Options) :-
    check_options(transcript_import/4, 4, Options),
    resolve_store(Store0, Store),
    must_be(nonvar, Source),
    (   Source = file(Path)
    ->  must_be(text, Path), text_to_string(Path, Src), IsFile = @true
    ;   must_be(text, Source), text_to_string(Source, Src), IsFile = @false
    ),
    (   option(session(Id0), Options) -> session_string(Id0, Id) ; Id = @none ),
    py_api(py_call_plain('ctxrelay.bridge.stores':import_jsonl(Store, Src, IsFile, Id), Session)).
