:- use_module(library(plunit)).
:- use_module(library(ctxrelay)).
:- use_module(library(filesex)).

%   The transcript seen from Prolog: Prolog is the host here, Python is
%   embedded (the reverse of the pytest suites).  Each test gets its own
%   store under CTXRELAY_TEST_TMP.

fresh_store(Store) :-
    getenv('CTXRELAY_TEST_TMP', Tmp),
    uuid(U),
    directory_file_path(Tmp, U, Dir),
    store_open(Dir, Store, [default(false)]).

:- begin_tests(ctxrelay_store_sessions).

test(create_and_list, Ids == ["a", "b"]) :-
    fresh_store(St),
    session_create(St, b, []),
    session_create(St, "a", [metadata(_{project:"etcd", n:3})]),
    sessions(St, L),
    maplist([D, Id]>>get_dict(session_id, D, Id), L, Ids).
test(metadata_round_trip, Meta == py{n:3, project:"etcd"}) :-
    fresh_store(St),
    session_create(St, s, [metadata(_{project:"etcd", n:3})]),
    session_info(St, s, Info),
    get_dict(metadata, Info, Meta).
test(duplicate_session, error(ctxrelay(session_exists, _), _)) :-
    fresh_store(St),
    session_create(St, s, []),
    session_create(St, s, []).
test(unknown_session, error(existence_error(session, nope), _)) :-
    fresh_store(St),
    session_info(St, nope, _).
test(archived_refuses_append, error(ctxrelay(archived_session, _), _)) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, "hi"), _),
    session_archive(St, s),
    turn_append(St, s, message(user, "again"), _).
%   Only a store can be the default: anything else was taken, and the next
%   call on `default` failed with a Python AttributeError.
test(default_store_must_be_a_store, error(type_error(ctxrelay_store, foo), _)) :-
    set_default_store(foo).
test(default_store_kept_after_a_refusal, D == St) :-
    fresh_store(St),
    set_default_store(St),
    catch(set_default_store(foo), error(type_error(_, _), _), true),
    default_store(D).
%   A closed store is an existence error at the edge, naming the Prolog fix
%   (it was a Python StoreError naming a Python function); closing it again
%   does nothing, and the data written before the close is there when the
%   directory is opened again.
test(closed_store_is_an_existence_error, [E == existence_error(ctxrelay_store, St),
                                          Turns == 1]) :-
    getenv('CTXRELAY_TEST_TMP', Tmp),
    uuid(U),
    directory_file_path(Tmp, U, Dir),
    store_open(Dir, St, [default(false)]),
    session_create(St, s, []),
    turn_append(St, s, message(user, "kept"), _),
    store_close(St),
    catch(turn_append(St, s, message(user, "lost?"), _), error(E, context(_, Said)), true),
    sub_string(Said, _, _, _, "store_open/2"),
    catch((turn_count(St, s, _), fail), error(existence_error(ctxrelay_store, _), _), true),
    store_close(St),
    store_open(Dir, St2, [default(false)]),
    turn_count(St2, s, Turns),
    store_close(St2).

:- end_tests(ctxrelay_store_sessions).

:- begin_tests(ctxrelay_store_turns).

test(ids_are_a_sequence, Ids == [1, 2, 3]) :-
    fresh_store(St),
    session_create(St, s, []),
    findall(Id, ( member(M, [message(user, "a"), message(assistant, "b"),
                             message(user, "c")]),
                  turn_append(St, s, M, Id) ), Ids).
test(text_survives_exactly, Got == Text) :-
    fresh_store(St),
    session_create(St, s, []),
    Text = "quotes ' \" \\ newline\nRTL \u200F\u05E9\u05DC\u05D5\u05DD emoji \U0001F680 nul \u0000 end",
    turn_append(St, s, message(user, Text), Id),
    turn_get(St, s, Id, Turn),
    get_dict(content, Turn, Got).
test(dict_message_with_fields, [Name, Tool, Meta] == ["search", "call_1", py{rows:2}]) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, _{role:tool, content:"2 rows", name:"search",
                         tool_call_id:"call_1", metadata:_{rows:2}}, Id),
    turn_get(St, s, Id, T),
    _{name:Name, tool_call_id:Tool, metadata:Meta} :< T.
test(idempotent_key, [Id1, Id2, N] == [1, 1, 1]) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, "once"), Id1, [key(k1)]),
    turn_append(St, s, message(user, "once"), Id2, [key(k1)]),
    turn_count(St, s, N).
test(backtracking_does_not_duplicate, N == 1) :-
    fresh_store(St),
    session_create(St, s, []),
    forall(between(1, 3, _),
           turn_append(St, s, message(user, "retry"), _, [key(same)])),
    turn_count(St, s, N).
test(key_conflict, error(ctxrelay(key_conflict, _), _)) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, "one"), _, [key(k)]),
    turn_append(St, s, message(user, "two"), _, [key(k)]).
test(bad_role, error(domain_error(role, robot), _)) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(robot, "x"), _).
test(non_text_content, error(type_error(text, f(x)), _)) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, f(x)), _).
test(unbound_message, error(instantiation_error, _)) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, _, _).
test(unknown_turn, error(existence_error(turn, s-9), _)) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, "x"), _),
    turn_get(St, s, 9, _).
test(ranges, [Mid, Last] == [[2, 3, 4], [4, 5]]) :-
    fresh_store(St),
    session_create(St, s, []),
    forall(between(1, 5, I), ( format(string(C), "turn ~d", [I]),
                               turn_append(St, s, message(user, C), _) )),
    transcript_history(St, s, 2-4, L1), maplist(get_dict(turn_id), L1, Mid),
    transcript_history(St, s, last(2), L2), maplist(get_dict(turn_id), L2, Last).
test(bad_range, error(domain_error(history_range, sideways), _)) :-
    fresh_store(St),
    session_create(St, s, []),
    transcript_history(St, s, sideways, _).

:- end_tests(ctxrelay_store_turns).

:- begin_tests(ctxrelay_store_search).

test(bm25_finds_the_turn, First == 2) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, "How do I configure etcd?"), _),
    turn_append(St, s, message(assistant, "Enable TLS with --cert-file and peer certificates."), _),
    turn_append(St, s, message(user, "What backup tool do you like?"), _),
    transcript_search(St, s, "TLS certificates", [H|_], [k(3)]),
    get_dict(turn_id, H, First).
test(sessions_are_isolated, Hits == []) :-
    fresh_store(St),
    session_create(St, a, []),
    session_create(St, b, []),
    turn_append(St, a, message(user, "secret zebra launch code"), _),
    transcript_search(St, b, "zebra", Hits).

:- end_tests(ctxrelay_store_search).

:- begin_tests(ctxrelay_store_export).

test(export_import_round_trip, Turns2 == Turns1) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, "line one\nline \"two\""), _),
    turn_append(St, s, message(assistant, "r\u00E9ponse"), _),
    transcript_export(St, s, Text),
    transcript_import(St, Text, New, [session(copy)]),
    assertion(New == "copy"),
    transcript_history(St, s, all, H1), transcript_history(St, copy, all, H2),
    maplist(turn_core, H1, Turns1), maplist(turn_core, H2, Turns2).
test(stats_add_up, [N, Bytes] == [2, 8]) :-
    fresh_store(St),
    session_create(St, s, []),
    turn_append(St, s, message(user, "abcd"), _),
    turn_append(St, s, message(assistant, "efgh"), _),
    session_stats(St, s, Stats),
    _{turn_count:N, bytes:Bytes} :< Stats.

:- end_tests(ctxrelay_store_export).

turn_core(T, core(Id, R, C, TS)) :-
    _{turn_id:Id, role:R, content:C, timestamp:TS} :< T.
