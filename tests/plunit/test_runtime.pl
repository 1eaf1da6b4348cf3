:- use_module(library(plunit)).
:- use_module(library(ctxrelay)).
:- use_module(library(lists)).
:- use_module(library(apply)).

%   The managed runtime driven from Prolog, as an AgentProlog session would.

fresh_session(Store, Turns) :-
    getenv('CTXRELAY_TEST_TMP', Tmp),
    uuid(U),
    directory_file_path(Tmp, U, Dir),
    store_open(Dir, Store, [default(true)]),
    session_create(Store, s, []),
    forall(between(1, Turns, I),
           ( (I mod 2 =:= 1 -> R = user ; R = assistant),
             format(string(C), "turn ~d about topic ~d with some padding words here", [I, I mod 5]),
             turn_append(Store, s, message(R, C), _) )).

policy([max_context_tokens(600), output_reserve(100), safety_margin(20),
        min_recent_turns(2)]).

:- begin_tests(ctxrelay_managed_turn).

test(reply_and_two_new_turns, [N1 == 22, Role == "assistant"]) :-
    fresh_session(St, 20),
    policy(P),
    managed_turn(s, "what about topic 3?", R, [store(St)|P]),
    turn_count(St, s, N1),
    turn_get(St, s, N1, T),
    Role = T.role,
    assertion(T.content == R.reply).
test(request_within_budget) :-
    fresh_session(St, 30),
    policy(P),
    managed_turn(s, "go on", R, [store(St)|P]),
    Ledger = R.ledger,
    assertion(Ledger.total =< Ledger.input_budget),
    assertion(Ledger.input_budget =:= 600 - 100 - 20).
test(retry_with_key_is_idempotent, [N2 == N1]) :-
    fresh_session(St, 10),
    policy(P),
    managed_turn(s, "again", _, [store(St), key("k1")|P]),
    turn_count(St, s, N1),
    managed_turn(s, "again", _, [store(St), key("k1")|P]),
    turn_count(St, s, N2).
test(overflow_fails_closed, error(ctxrelay(context_overflow, Figures), _)) :-
    fresh_session(St, 10),
    managed_turn(s, "hello", _, [store(St), max_context_tokens(120), output_reserve(10),
                                 safety_margin(0), min_recent_turns(6)]),
    is_dict(Figures).
test(unknown_option, error(domain_error(policy_option, colour(red)), _)) :-
    fresh_session(St, 2),
    managed_turn(s, "x", _, [store(St), colour(red)]).

test(overflow_stores_nothing, [N1 == N0]) :-
    fresh_session(St, 10),
    turn_count(St, s, N0),
    catch(managed_turn(s, "hello", _, [store(St), max_context_tokens(120), output_reserve(10),
                                       safety_margin(0), min_recent_turns(6)]),
          error(ctxrelay(context_overflow, _), _), true),
    turn_count(St, s, N1).
test(provider_failure_stores_nothing, [N1 == N0]) :-
    fresh_session(St, 4),
    policy(P),
    turn_count(St, s, N0),
    catch(managed_turn(s, "hi", _, [store(St), provider(no_such_provider)|P]), error(_, _), true),
    turn_count(St, s, N1).
test(assistant_message_is_refused, error(domain_error(user_message, _), _)) :-
    fresh_session(St, 2),
    managed_turn(s, message(assistant, "hi"), _, [store(St)]).

:- end_tests(ctxrelay_managed_turn).

:- begin_tests(ctxrelay_turn_phases).

%   An agent that calls its own model: prepare, call, commit.
test(prepare_stores_nothing_commit_stores_both, [N1-Ids == N0-[U, A]]) :-
    fresh_session(St, 6),
    policy(P),
    turn_count(St, s, N0),
    turn_prepare(s, "what about topic 2?", Turn, [store(St)|P]),
    turn_count(St, s, N0),
    is_list(Turn.messages),
    turn_commit(Turn, "my own model's answer", R, []),
    U is N0 + 1, A is N0 + 2,
    Ids = [R.user_turn, R.assistant_turn],
    turn_count(St, s, N2),
    N1 is N2 - 2,
    turn_get(St, s, A, T),
    assertion(T.content == "my own model's answer").
test(earlier_messages_enter_the_pack_and_commit_together, [Roles == ["assistant", "user", "assistant"]]) :-
    fresh_session(St, 4),
    policy(P),
    turn_prepare(s, [_{role:assistant, content:"a note the client kept"},
                     _{role:user, content:"and now?"}], Turn, [store(St)|P]),
    last(Turn.messages, Last),
    assertion(Last.content == "and now?"),
    turn_commit(Turn, "ok", _, []),
    transcript_history(St, s, last(3), Ts),
    maplist([D, Ro]>>get_dict(role, D, Ro), Ts, Roles).
%   A field a stored turn does not take (OpenAI's top-level tool_calls) was
%   dropped without a word: the pack held a tool result without its call.
test(an_unknown_message_field_is_refused, error(domain_error(message_field, tool_calls), _)) :-
    fresh_session(St, 4),
    policy(P),
    turn_prepare(s, [_{role:assistant, content:"", tool_calls:[]},
                     _{role:user, content:"and now?"}], _, [store(St)|P]).
test(retried_key_replays, [State-Reply == replay-"first answer"]) :-
    fresh_session(St, 4),
    policy(P),
    turn_prepare(s, "q?", T1, [store(St), key("kx")|P]),
    turn_commit(T1, "first answer", _, []),
    turn_prepare(s, "q?", T2, [store(St), key("kx")|P]),
    atom_string(State, T2.commit.state),
    Reply = T2.commit.reply.
test(a_key_names_one_message, error(ctxrelay(key_conflict, _), _)) :-
    fresh_session(St, 4),
    policy(P),
    turn_prepare(s, "q?", T1, [store(St), key("ky")|P]),
    turn_commit(T1, "answer", _, []),
    turn_prepare(s, "another question", _, [store(St), key("ky")|P]).
test(missing_session_is_created_at_commit_only, [Before-After == false-true]) :-
    fresh_session(St, 0),
    policy(P),
    turn_prepare(fresh, "hello", T, [store(St), create_session(true)|P]),
    ( catch(session_info(St, fresh, _), _, fail) -> Before = true ; Before = false ),
    turn_commit(T, "hi", _, []),
    ( catch(session_info(St, fresh, _), _, fail) -> After = true ; After = false ).
%   An archived session takes no new turns: turn_prepare/4 says so before the
%   caller's model is called (turn_commit/4 would refuse it only after).
test(archived_session_refused_at_prepare, error(ctxrelay(archived_session, _), _)) :-
    fresh_session(St, 2),
    policy(P),
    session_archive(St, s),
    turn_prepare(s, "still there?", _, [store(St)|P]).
%   ... but a retried key whose turn is stored still replays it (nothing is stored).
test(archived_session_replays_a_stored_key, [State-Reply == replay-"first answer"]) :-
    fresh_session(St, 2),
    policy(P),
    turn_prepare(s, "q?", T1, [store(St), key("ka")|P]),
    turn_commit(T1, "first answer", _, []),
    session_archive(St, s),
    turn_prepare(s, "q?", T2, [store(St), key("ka")|P]),
    atom_string(State, T2.commit.state),
    Reply = T2.commit.reply.

:- end_tests(ctxrelay_turn_phases).

:- begin_tests(ctxrelay_assemble).

test(alternatives_best_first, true(Sorted == Us)) :-
    fresh_session(St, 20),
    policy(P),
    findall(U, limit(4, ( assemble(s, "topic 2?", R, [store(St)|P]), get_dict(utility, R, U) )), Us),
    length(Us, 4),
    msort(Us, Asc), reverse(Asc, Sorted).
test(assemble_appends_nothing, N == 12) :-
    fresh_session(St, 12),
    policy(P),
    once(assemble(s, "anything", _, [store(St)|P])),
    turn_count(St, s, N).

:- end_tests(ctxrelay_assemble).

:- begin_tests(ctxrelay_context).

test(input_context_inside_scope, Ids == [3, 4]) :-
    fresh_session(St, 6),
    with_input_context(St, s, context(input(context), slice(3, 2), R)),
    maplist([T, I]>>get_dict(turn_id, T, I), R.items, Ids).
test(input_context_outside_scope, error(existence_error(input_context, context), _)) :-
    context(input(context), peek(item(1)), _).
test(peek_item_is_one_based, C == "turn 1 about topic 1 with some padding words here") :-
    fresh_session(_, 3),
    context(session(s), peek(item(1)), T),
    C = T.content.
test(search_backtracks, true(N > 1)) :-
    fresh_session(_, 12),
    aggregate_all(count, context(session(s), search("topic"), _), N).
test(unknown_operation, error(domain_error(context_operation, rewind(3)), _)) :-
    fresh_session(_, 3),
    context(session(s), rewind(3), _).
test(past_the_end, error(existence_error(turn, _), _)) :-
    fresh_session(_, 3),
    context(session(s), slice(7, 2), _).
test(unbound_source, error(instantiation_error, _)) :-
    context(_, peek(item(1)), _).

:- end_tests(ctxrelay_context).

:- begin_tests(ctxrelay_completion).

test(echo_is_deterministic, R1 == R2) :-
    Ms = [_{role:"user", content:"hi"}],
    completion(Ms, R1, _, []),
    completion(Ms, R2, _, [provider(echo)]).
test(unknown_provider, error(ctxrelay(unknown_provider, _), _)) :-
    completion([_{role:"user", content:"hi"}], _, _, [provider(nowhere)]).

:- end_tests(ctxrelay_completion).

:- begin_tests(ctxrelay_scratch).

test(record_and_read_back, [Raw == "id,v\n1,2\n", Kind == "table"]) :-
    fresh_session(St, 2),
    tool_output_record(St, s, sql, _{query:"select 1"}, "id,v\n1,2\n", R),
    get_dict(scratch_id, R, Id),
    scratch_raw(St, s, Id, Raw),
    scratch_get(St, s, Id, E),
    get_dict(kind, E, Kind).
test(pinned, Pinned == true) :-
    fresh_session(St, 2),
    tool_output_record(St, s, ls, _{}, "a\nb\n", R),
    get_dict(scratch_id, R, Id),
    scratch_pin(St, s, Id),
    scratch_get(St, s, Id, E),
    get_dict(pinned, E, Pinned).
test(traversal_refused, error(ctxrelay(_, _), _)) :-
    fresh_session(St, 2),
    scratch_raw(St, s, "../../etc/passwd", _).

:- end_tests(ctxrelay_scratch).

:- begin_tests(ctxrelay_recent_mentions).

%   The per-turn memo gives the words mention_words/2 gives for the joined
%   text, on a first read and on a second one served from the memo.
test(union_per_turn_is_the_joined_text) :-
    Turns = [_{content:"The etcd-quota was raised; certs rotated."},
             _{content:"check sync.RWMutex usage\nand the backup window"},
             _{content:""}],
    findall(C, member(_{content:C}, Turns), Cs),
    atomic_list_concat(Cs, '\n', All),
    ctxrelay_references:mention_words(All, Expected),
    ctxrelay_assembly:recent_mentions(Turns, First),
    ctxrelay_assembly:recent_mentions(Turns, Second),
    assertion(First == Expected),
    assertion(Second == Expected).

:- end_tests(ctxrelay_recent_mentions).

:- begin_tests(ctxrelay_policy_memo).

%   A remembered policy is the one policy_/2 derives; options that differ
%   get their own; a refused policy is refused again (never remembered).
test(remembered_equals_derived) :-
    Opts = [max_context_tokens(3000), output_reserve(200), model("gpt-4o")],
    ctxrelay_policy:policy(Opts, First),
    ctxrelay_policy:policy(Opts, Second),
    ctxrelay_policy:policy_(Opts, Derived),
    assertion(First =@= Derived),
    assertion(Second =@= Derived),
    ctxrelay_policy:policy([max_context_tokens(2000)|Opts], Other),
    assertion(Other.input_budget =\= Derived.input_budget).

test(refused_every_time, [error(domain_error(positive_input_budget, _))]) :-
    Opts = [max_context_tokens(100), output_reserve(90), safety_margin(20)],
    catch(ctxrelay_policy:policy(Opts, _), error(domain_error(_, _), _), true),
    ctxrelay_policy:policy(Opts, _).

:- end_tests(ctxrelay_policy_memo).

:- begin_tests(ctxrelay_py_plain).

%   Python's booleans become plain atoms at any depth, except inside
%   user JSON (metadata, args, structured), which keeps them for the
%   way back; None, strings, numbers and variables are left alone.
test(booleans_at_any_depth) :-
    In = _{a: @(true), b:[@(false), _{c: @(true), d:"true"}], e: @(none), f:1.5,
           metadata:_{flag: @(true)}, g:[], h:"x"},
    ctxrelay_errors:py_plain(In, Out),
    assertion(Out.a == true),
    assertion(Out.b =@= [false, _{c:true, d:"true"}]),
    assertion(Out.e == @(none)),
    assertion(Out.f == 1.5),
    assertion(Out.metadata =@= _{flag: @(true)}),
    assertion(Out.g == []),
    assertion(Out.h == "x").

test(unbound_stays_unbound) :-
    ctxrelay_errors:py_plain([X, @(true)], Out),
    Out = [Y, B],
    assertion(B == true),
    assertion(var(Y)),
    assertion(X == Y).

:- end_tests(ctxrelay_py_plain).

:- begin_tests(ctxrelay_options).

%   One rule: every public predicate refuses options it does not declare,
%   and ill-typed values, before doing anything.
test(context_unknown_option, error(existence_error(option, bogus(1)), _)) :-
    fresh_session(St, 3),
    context(session(s), slice(1, 2), _, [store(St), bogus(1)]).
test(tool_output_freshness_checked, error(type_error(oneof(_), 'FRESHISH'), _)) :-
    fresh_session(St, 1),
    tool_output_record(St, s, ls, _{}, "a b c", _, [freshness('FRESHISH')]).
test(tool_output_freshness_as_text) :-
    fresh_session(St, 1),
    tool_output_record(St, s, ls, _{}, "a b c", R, [freshness("STABLE")]),
    get_dict(scratch_id, R, _).
test(search_unknown_option, error(existence_error(option, limit(3)), _)) :-
    fresh_session(St, 3),
    transcript_search(St, s, "topic", _, [limit(3)]).
test(append_ill_typed_option, error(type_error(text, 42), _)) :-
    fresh_session(St, 0),
    turn_append(St, s, message(user, "x"), _, [key(42)]).
test(completion_unknown_option, error(existence_error(option, colour(red)), _)) :-
    completion([_{role:"user", content:"hi"}], _, _, [colour(red)]).
test(completion_ill_typed_option, error(type_error(dict, nodict), _)) :-
    completion([_{role:"user", content:"hi"}], _, _, [provider_options(nodict)]).
%   An unbound key must not quietly turn the idempotent turn into an
%   unkeyed one (a retry would then store the turn twice).
test(prepare_unbound_key, error(instantiation_error, _)) :-
    fresh_session(St, 1),
    turn_prepare(s, "x", _, [store(St), key(_)]).
test(managed_turn_unbound_key_stores_nothing, [N1 == N0]) :-
    fresh_session(St, 1),
    turn_count(St, s, N0),
    catch(managed_turn(s, "x", _, [store(St), key(_)]), error(instantiation_error, _), true),
    turn_count(St, s, N1).
test(managed_turn_unbound_key, error(instantiation_error, _)) :-
    fresh_session(St, 1),
    managed_turn(s, "x", _, [store(St), key(_)]).
%   An empty key is refused, as turn_append/5 and the relay refuse it (it made
%   the parts' keys ":user" and ":assistant", shared by every empty key).
test(prepare_empty_key, error(domain_error(idempotency_key, ""), _)) :-
    fresh_session(St, 1),
    turn_prepare(s, "x", _, [store(St), key("")]).
test(prepare_ill_typed_key, error(type_error(text, 42), _)) :-
    fresh_session(St, 1),
    turn_prepare(s, "x", _, [store(St), key(42)]).

:- end_tests(ctxrelay_options).
