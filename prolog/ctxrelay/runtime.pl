:- module(ctxrelay_runtime,
          [ managed_turn/4,         % +Session, +Input, -Result, +Options
            turn_prepare/4,         % +Session, +Input, -Turn, +Options
            turn_commit/4,          % +Turn, +Reply, -Result, +Options
            completion/4            % +Messages, -Reply, -Info, +Options
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(errors).
:- use_module(options).
:- use_module(store).
:- use_module(policy).
:- use_module(assembly).
:- use_module(promotion, [promote_turns/5]).

/** <module> The managed conversation runtime

A managed turn is all or nothing.  It has two phases around the stateless
completion/4 primitive, and writes only in the second:

    turn_prepare/4   validate the whole input, find a retried key, assemble
                     the bounded pack (ctxrelay_assembly); nothing is stored
    completion/4     the provider (or any caller's own model call)
    turn_commit/4    store the new input and the reply in one transaction
                     (idempotent by key), record references, promote

managed_turn/4 runs the three.  A turn that fails closed (context
overflow), whose provider fails, or whose input is refused stores
nothing: a retry, keyed or not, never finds a half-stored turn.  The relay
(ctxrelay.apps.server) and any agent that calls its own model run the same
two phases with their call in between.

Idempotency: with key(Key), the new input is stored under Key:m0,
Key:m1, ... (earlier messages), Key:user and the reply under
Key:assistant.  A retry whose reply is stored is a replay (nothing is
stored, no provider is called); a retry whose user turn alone is stored
(a store written by an older version, which stored the user turn first)
resumes: the reply is stored for it.  Nothing here summarises, compacts
or publishes warm artifacts: warm production is an explicit API.
*/

:- predicate_options(turn_prepare/4, 4,
                     [ store(any), key(text), create_session(boolean),
                       pass(policy/2, 1, _)
                     ]).
:- predicate_options(turn_commit/4, 4, [info(dict)]).
:- predicate_options(completion/4, 4, [provider(text), provider_options(dict)]).

%!  completion(+Messages:list(dict), -Reply:string, -Info:dict, +Options) is det.
%
%   The stateless primitive: send Messages to a provider and return the
%   reply text.  Options: provider(Name) (`echo`, the default, needs no
%   network; `openai` talks to any OpenAI-compatible endpoint),
%   provider_options(Dict) (model, base_url, api_key, timeout, ...).
%   The managed runtime calls it unchanged.
%
%   @error existence_error(option, Opt) for an option it does not take
%   @error ctxrelay(provider_error, Msg) and friends for provider failures
completion(Messages, Reply, Info, Options) :-
    must_be(list, Messages),
    check_options(completion/4, 4, Options),
    option(provider(Provider0), Options, echo),
    must_be(text, Provider0),
    option(provider_options(PO0), Options, _{}),
    must_be(dict, PO0),
    atom_string(Provider0, Provider),
    PO = PO0.put(provider, Provider),
    once(py_api(py_call_plain('ctxrelay.bridge.providers':complete(Messages, PO), Info0))),
    Reply = Info0.content,
    Info = Info0.

%!  managed_turn(+Session, +Input, -Result:dict, +Options) is det.
%
%   Run one managed turn: turn_prepare/4, completion/4 with the policy's
%   provider, turn_commit/4.  Input is the user's message (text,
%   message(user, Text) or a dict with content), or a list of messages
%   whose last is the user's (see turn_prepare/4).  Options are the policy
%   options (policy/2) plus store(Store), key(Key) and create_session(Bool).
%
%   Result keys: reply, messages (the provider-visible request), ledger,
%   headers, pack, utility, status, user_turn, assistant_turn, promotions,
%   provider, usage.
%
%   @error ctxrelay(context_overflow, Figures) when the mandatory part
%          does not fit the input budget; nothing is sent or stored.
%   @error domain_error(user_message, M) when the (last) message is not
%          the user's
managed_turn(Session, Input, Result, Options) :-
    prepare(Session, Input, Options, Policy, Turn),
    (   Turn.commit.state == replay
    ->  turn_commit(Turn, Turn.commit.reply, Result, [info(_{provider:"stored", usage:_{}})])
    ;   completion(Turn.messages, Reply, Info,
                   [provider(Policy.provider), provider_options(Policy.provider_options)]),
        turn_commit(Turn, Reply, Result, [info(Info)])
    ).

%!  turn_prepare(+Session, +Input, -Turn:dict, +Options) is det.
%
%   Validate Input and assemble the best pack for it; store nothing.
%   Input is the user's message, or a list of messages (dicts with role
%   and content, and optionally name, tool_call_id, metadata) that ends
%   with the user's: the earlier ones (assistant tool calls, tool results)
%   are new turns too and enter the pack, mandatory, before it.
%
%   Turn has the keys of an assemble/4 result (messages, ledger, headers,
%   pack, utility, status) and `commit`: what turn_commit/4 needs, plain
%   data that survives a round trip through Python.  Turn.commit.state is
%   `new`, `resume` (the user turn is stored, its reply is not) or `replay`
%   (both are stored: Turn.commit.reply is the stored reply; call no
%   provider).  Options: the policy options, store(Store), key(Key),
%   create_session(Bool) (a missing session is created by turn_commit/4
%   instead of being an error; default false).
%
%   @error existence_error(session, Session) for a missing session
%   @error domain_error(message_field, Key) for a field of an earlier
%          message other than those (tool calls go in its metadata)
%   @error ctxrelay(key_conflict, Msg) when Key was used for another message
%   @error ctxrelay(archived_session, Msg) for an archived session (unless
%          the retried Key's reply is stored: a replay)
%   @error ctxrelay(context_overflow, Figures) when the pack cannot fit
turn_prepare(Session, Input, Turn, Options) :-
    prepare(Session, Input, Options, _Policy, Turn).

prepare(Session, Input, Options0, Policy, Turn) :-
    must_be(text, Session),
    text_to_string(Session, S),
    turn_input(Input, Pending0, Text),
    turn_store(Options0, Store, Options1),
    select_option(create_session(Create), Options1, PolicyOptions, false),
    must_be(boolean, Create),
    policy(PolicyOptions, Policy0),
    turn_keys(Policy0.key, Pending0, Pending, Keys),
    turn_state(Store, S, Text, Pending, Create, Keys, State),
    (   State = new(0) -> Policy = Policy0 ; request_policy(Store, S, Policy0, Policy) ),
    state_history_end(State, HistoryEnd),
    once(assembly(request{store:Store, session:S, text:Text, pending:Pending,
                          history_end:HistoryEnd, policy:Policy}, Result)),
    state_fields(State, StateFields),
    dict_pairs(StateDict, _, StateFields),
    Commit0 = commit{store:Store, session:S, text:Text, pending:Pending, keys:Keys,
                     create_session:Create, mode:Result.status.mode,
                     referenced_turns:Result.status.referenced_turns,
                     promotion:Policy.promotion, embedder:Policy.embedder,
                     namespace:Policy.namespace},
    Commit = Commit0.put(StateDict),
    Turn = Result.put(commit, Commit).

%   turn_input(+Input, -Pending, -Text)
%
%   The user's message Text, and the new messages before it (validated
%   message dicts).
turn_input(Input, Pending, Text) :-
    is_list(Input),
    !,
    (   once(append(Earlier, [Last], Input))
    ->  true
    ;   domain_error(non_empty_list, Input)
    ),
    message_text(Last, Text),
    maplist(pending_message, Earlier, Pending).
turn_input(Input, [], Text) :-
    message_text(Input, Text).

pending_message(M, _) :-
    var(M),
    !,
    instantiation_error(M).
pending_message(message(Role, Content), P) :-
    !,
    pending_message(_{role:Role, content:Content}, P).
pending_message(M, P) :-
    is_dict(M),
    !,
    (   get_dict(role, M, Role0) -> true ; domain_error(message_with_role, M) ),
    (   get_dict(content, M, Content0) -> true ; domain_error(message_with_content, M) ),
    text_to_string(Role0, Role),
    (   memberchk(Role, ["user", "assistant", "tool"])
    ->  true
    ;   domain_error(turn_role, Role0)
    ),
    must_be(text, Content0),
    text_to_string(Content0, Content),
    forall(get_dict(Key, M, _), message_field(Key)),
    P0 = message{role:Role, content:Content},
    foldl(copy_field(M), [name, tool_call_id, metadata], P0, P).
pending_message(M, _) :-
    type_error(ctxrelay_message, M).

%   A field a stored turn does not keep is refused rather than dropped
%   (OpenAI's tool_calls belong in metadata, as the relay stores them).
message_field(Key) :-
    (   memberchk(Key, [role, content, name, tool_call_id, metadata])
    ->  true
    ;   domain_error(message_field, Key)
    ).

copy_field(From, Key, D0, D) :-
    (   get_dict(Key, From, V), V \== @(none), V \== null
    ->  (   Key == metadata -> true ; must_be(text, V) ),
        D = D0.put(Key, V)
    ;   D = D0
    ).

%   turn_keys(+Key, +Pending0, -Pending, -Keys)
%
%   The idempotency keys of a turn's parts: one rule for every entry
%   point (the relay sends its Idempotency-Key here).
turn_keys(none, Pending, Pending, none) :- !.
turn_keys(Key0, Pending0, Pending, keys{key:Key, user:UK, assistant:AK}) :-
    must_be(text, Key0),
    text_to_string(Key0, Key),
    atomics_to_string([Key, ":user"], UK),
    atomics_to_string([Key, ":assistant"], AK),
    foldl(pending_key(Key), Pending0, Pending, 0, _).

pending_key(Key, P0, P, I, I1) :-
    pending_key_text(Key, I, K),
    P = P0.put(key, K),
    I1 is I + 1.

%   The key of the I-th (0-based) earlier message of the turn keyed Key.
pending_key_text(Key, I, K) :-
    atomics_to_string([Key, ":m", I], K).

%   turn_state(+Store, +Session, +Text, +Pending, +Create, +Keys, -State)
%
%   An archived session takes no new turns: refused here, before any
%   model is called (the commit would refuse it only after the call), but
%   a retried key whose reply is stored still replays it.
turn_state(Store, S, Text, Pending, Create, Keys, State) :-
    session_state(Store, S, Session),
    turn_state_(Session, Store, S, Text, Pending, Create, Keys, State),
    (   Session == archived, State \= replay(_, _, _)
    ->  format(string(Msg), "session '~w' is archived and takes no new turns; \c
                             append to a new session (it can be read as before)", [S]),
        throw(error(ctxrelay(archived_session, Msg), _))
    ;   true
    ).

turn_state_(none, _Store, S, _Text, _Pending, Create, _Keys, State) :-
    !,
    (   Create == true
    ->  State = new(0)
    ;   existence_error(session, S)
    ).
turn_state_(_, Store, S, Text, Pending, _, Keys, State) :-
    (   Keys == none
    ->  turn_count(Store, S, N),
        State = new(N)
    ;   stored_key(Store, S, Keys.assistant, AT)
    ->  stored_request(Store, S, Keys, Text, Pending, UT),
        turn_get(Store, S, AT, Reply),
        State = replay(UT, AT, Reply.content)
    ;   stored_key(Store, S, Keys.user, _)
    ->  stored_request(Store, S, Keys, Text, Pending, UT),
        State = resume(UT)
    ;   turn_count(Store, S, N),
        State = new(N)
    ).

%   session_state(+Store, +Session, -State): none, open or archived (one read).
session_state(Store, S, State) :-
    py_api(py_call('ctxrelay.bridge.stores':session_state(Store, S), State0)),
    atom_string(State, State0).

stored_key(Store, S, Key, Turn) :-
    turn_for_key(Store, S, Key, Turn),
    integer(Turn).

%   stored_request(+Store, +Session, +Keys, +Text, +Pending, -UserTurn)
%
%   What is stored under the key must be this request (its user message
%   and its earlier messages); UserTurn is the stored user turn.
stored_request(Store, S, Keys, Text, Pending, UT) :-
    stored_user_turn(Store, S, Keys, Text, UT),
    stored_pending(Store, S, Keys, Pending, UT).

%   The user turn stored under the key must be this message: a key names
%   one turn, and reusing it for another message is a conflict.
stored_user_turn(Store, S, Keys, Text, UT) :-
    (   stored_key(Store, S, Keys.user, UT)
    ->  turn_get(Store, S, UT, Stored),
        (   Stored.role == "user", Stored.content == Text
        ->  true
        ;   format(string(Msg),
                   "key ~q was already used for turn ~w of session ~q with a different \c
                    message; use a new key for a new turn",
                   [Keys.user, UT, S]),
            throw(error(ctxrelay(key_conflict, Msg), _))
        )
    ;   format(string(Msg), "the reply stored under key ~q has no user turn under ~q; \c
                             the store is damaged (run ctxrelay check)",
               [Keys.assistant, Keys.user]),
        throw(error(ctxrelay(corrupt_store, Msg), _))
    ).

%   The earlier messages stored with the key's user turn (in the same
%   transaction) must be these, no more and no fewer: a retry that sends
%   other ones is another request under the same key, which a replay would
%   answer with a reply to messages it never saw.
stored_pending(Store, S, Keys, Pending, UT) :-
    length(Pending, N),
    Key = Keys.key,
    pending_key_text(Key, N, Beyond),
    (   forall(member(P, Pending), stored_message(Store, S, P)),
        \+ stored_key(Store, S, Beyond, _)
    ->  true
    ;   format(string(Msg),
               "key ~q was already used for turn ~w of session ~q with different earlier \c
                messages (tool results or assistant messages before the user's); use a \c
                new key for a new turn",
               [Key, UT, S]),
        throw(error(ctxrelay(key_conflict, Msg), _))
    ).

stored_message(Store, S, P) :-
    stored_key(Store, S, P.key, T),
    turn_get(Store, S, T, Stored),
    Stored.role == P.role,
    Stored.content == P.content.

state_history_end(new(N), N).
state_history_end(resume(UT), N) :- N is UT - 1.
state_history_end(replay(UT, _, _), N) :- N is UT - 1.

state_fields(new(_), [state-new]).
state_fields(resume(UT), [state-resume, user_turn-UT]).
state_fields(replay(UT, AT, Reply), [state-replay, user_turn-UT, assistant_turn-AT,
                                     reply-Reply]).

%!  turn_commit(+Turn:dict, +Reply, -Result:dict, +Options) is det.
%
%   Store the turn prepared by turn_prepare/4 with its Reply: the new
%   messages, the user turn and the reply in one transaction (a missing
%   session is created in it when the turn was prepared with
%   create_session(true)), then record the references the message
%   resolved and promote durable values into the knowledge store.  A
%   replayed turn stores nothing.  Reply is the reply text or a dict with
%   content and metadata.  Options: info(Dict), the provider's answer
%   details (provider, usage) to report in Result.  Commit a prepared turn
%   once: a Turn is a value, so a second turn_commit/4 of one prepared
%   without a key stores it again (with key(K) it is stored once; Python's
%   Runtime.commit_turn refuses a second commit).
%
%   Result is Turn without `commit`, plus reply, user_turn,
%   assistant_turn, promotions, provider and usage.
turn_commit(Turn, Reply0, Result, Options) :-
    check_options(turn_commit/4, 4, Options),
    must_be(dict, Turn),
    (   get_dict(commit, Turn, C) -> true ; domain_error(prepared_turn, Turn) ),
    option(info(Info), Options, _{}),
    reply_message(Reply0, ReplyText, ReplyMeta),
    atom_string(State, C.state),
    store_ref(C.store, Store),
    commit_(State, C, Store, ReplyText, ReplyMeta, UserTurn, AssistantTurn),
    (   State == replay
    ->  Promoted = []
    ;   after_commit(C, ( record_references(Store, C, UserTurn),
                          promote(Store, C, UserTurn, AssistantTurn, Promoted) ),
                     Promoted)
    ),
    length(Promoted, NPromoted),
    del_dict(commit, Turn, _, Result0),
    Headers = Result0.headers.put('CRP-Context-Promotions', NPromoted),
    Result = Result0.put(_{reply:ReplyText, user_turn:UserTurn, assistant_turn:AssistantTurn,
                           headers:Headers, promotions:Promoted,
                           provider:Info.get(provider, ""),
                           usage:Info.get(usage, _{})}).

%   after_commit(+Commit, :Goal, -Promoted)
%
%   The turn is stored (one transaction) before Goal records its references
%   and promotions.  A store that becomes unavailable in between must not
%   turn the stored turn into an error: the caller would be told (the relay:
%   503) that nothing was stored, and a retry without an idempotency key
%   would store the turn twice.  The turn is answered; what Goal would have
%   added is skipped with a warning (a replay of the turn adds nothing
%   either).  Any other error is raised as before.
after_commit(C, Goal, Promoted) :-
    catch(Goal, Error, store_lost_after_commit(Error, C, Promoted)).

store_lost_after_commit(error(ctxrelay(Kind, Message), _), C, []) :-
    store_lost(Kind),
    !,
    print_message(warning,
                  format("ctxrelay: turn stored in session ~w; its references and \c
                          promotions were skipped: ~w", [C.session, Message])).
store_lost_after_commit(Error, _, _) :-
    throw(Error).

%   store_lost(+Kind): the store's server went away (before or while committing).
store_lost(store_unavailable).
store_lost(store_outcome_unknown).

reply_message(Reply, Text, Meta) :-
    is_dict(Reply),
    !,
    (   get_dict(content, Reply, Text0) -> true ; domain_error(reply_with_content, Reply) ),
    must_be(text, Text0),
    text_to_string(Text0, Text),
    (   get_dict(metadata, Reply, Meta), is_dict(Meta) -> true ; Meta = _{} ).
reply_message(Reply, Text, _{}) :-
    must_be(text, Reply),
    text_to_string(Reply, Text).

commit_(replay, C, _, _, _, UT, AT) :-
    !,
    get_dict(user_turn, C, UT),
    get_dict(assistant_turn, C, AT).
commit_(resume, C, Store, Text, Meta, UT, AT) :-
    !,
    get_dict(user_turn, C, UT),
    reply_turn(C, Text, Meta, Reply),
    py_api(py_call('ctxrelay.bridge.stores':commit_turns(Store, C.session, [Reply], @false),
                   [AT]), session(C.session)).
commit_(new, C, Store, Text, Meta, UT, AT) :-
    user_turn(C, User),
    reply_turn(C, Text, Meta, Reply),
    append(C.pending, [User, Reply], Turns),
    truthy(C.create_session, Create),
    py_api(py_call('ctxrelay.bridge.stores':commit_turns(Store, C.session, Turns, Create),
                   Ids), session(C.session)),
    once(append(_, [UT, AT], Ids)).

user_turn(C, User) :-
    User0 = message{role:"user", content:C.text},
    (   is_dict(C.keys) -> User = User0.put(key, C.keys.user) ; User = User0 ).

%   The reply turn: a generated document (document or hybrid mode) says
%   so in its metadata (CRP-SPEC-028 §8), beside the caller's metadata.
reply_turn(C, Text, Meta0, Reply) :-
    atom_string(Mode, C.mode),
    (   Mode == conversation -> Meta = Meta0 ; Meta = Meta0.put(mode, Mode) ),
    Reply0 = message{role:"assistant", content:Text},
    (   dict_pairs(Meta, _, []) -> Reply1 = Reply0 ; Reply1 = Reply0.put(metadata, Meta) ),
    (   is_dict(C.keys) -> Reply = Reply1.put(key, C.keys.assistant) ; Reply = Reply1 ).

truthy(V, B) :-
    (   memberchk(V, [true, "true", @(true)]) -> B = @(true) ; B = @(false) ).

%   record_references(+Store, +Commit, +UserTurn)
%
%   The turns the user's message resolved its references to become its
%   `references` field in the turn log.
record_references(Store, C, UserTurn) :-
    (   C.referenced_turns == []
    ->  true
    ;   py_api(py_call('ctxrelay.bridge.threads':api_set_references(
                           Store, C.session, UserTurn, C.referenced_turns, C.embedder), _))
    ).

%   promote(+Store, +Commit, +UserTurn, +AssistantTurn, -Promoted)
%
%   After the reply is stored: durable values of the exchange move into
%   the CKF by the rules of ctxrelay_promotion (a tool result pinned or
%   referenced twice, a value the user names, a statement reused across
%   threads; never a volatile reading).
promote(Store, C, UserTurn, AssistantTurn, Promoted) :-
    truthy(C.promotion, @(true)),
    !,
    promote_turns(Store, C.session, UserTurn-AssistantTurn, Promoted,
                  [ references(C.referenced_turns), embedder(C.embedder),
                    namespace(C.namespace)
                  ]).
promote(_, _, _, _, []).
