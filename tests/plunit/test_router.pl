:- use_module(library(plunit)).
:- use_module(library(ctxrelay)).
:- use_module(library(ctxrelay/router)).
:- use_module(library(janus)).

%   The storage router seen from Prolog: the decision table, the plans it
%   makes, the errors at its edge, and retrieve/4 and recent_turns/4 run
%   through Python.  Each store lives under CTXRELAY_TEST_TMP; its CKF is
%   created with the hashing embedder (no model).

fresh_store(Store) :-
    getenv('CTXRELAY_TEST_TMP', Tmp),
    uuid(U),
    directory_file_path(Tmp, U, Dir),
    directory_file_path(Dir, ckf, Ckf),
    py_call('ctxrelay.knowledge.fabric':'FactStore'(Ckf, embedder="hashing"), FS),
    py_call(FS:close(), _),
    store_open(Dir, Store, [default(false)]).

store_with_turns(Store, N) :-
    fresh_store(Store),
    session_create(Store, s, []),
    forall(between(1, N, I),
           ( format(string(T), "turn ~w", [I]),
             turn_append(Store, s, message(user, T), _) )).

%   A user extension: a new access type is one clause of route/2.
:- multifile ctxrelay_router:route/2.
ctxrelay_router:route(intent(summarise, Q), [log:recent(window), graph:cdr(Q)]).

:- begin_tests(ctxrelay_router_decisions).

test(recent_goes_to_the_log, Steps == [log:recent(3)]) :-
    route(recent(3), Steps).
test(key_goes_to_the_index, Steps == [index:key(k)]) :-
    route(key(k), Steps).
test(search_is_ann_and_bm25, Steps == [graph:ann("q"), index:terms("q")]) :-
    route(search("q"), Steps).
test(drill_down_walks_the_graph, Steps == [graph:cdgr("q")]) :-
    route(intent(drill_down, "q"), Steps).
test(tool_reference_reads_pointers, Steps == [pointer:recent(window)]) :-
    route(intent(tool_reference, "q"), Steps).
test(blend_is_the_union, Steps == [log:recent(window), graph:cdr("q"), index:key(k)]) :-
    route(blend([intent(continue, "q"), intent(explore, "q"), key(k)]), Steps).
test(search_is_cached_and_fused, [C, M, L] == ["q", "rrf", 5]) :-
    access_plan(search("q"), [k(5)], Plan),
    get_dict(cache, Plan, C), get_dict(merge, Plan, M), get_dict(limit, Plan, L).
test(point_reads_are_not_cached, [C1, C2] == [@(none), @(none)]) :-
    access_plan(recent(3), [session(s)], P1), get_dict(cache, P1, C1),
    access_plan(key(k), [], P2), get_dict(cache, P2, C2).
test(pointer_makes_a_blend_uncached, C == @(none)) :-
    access_plan(blend([scratch("scr_x"), intent(explore, "q")]), [session(s)], P),
    get_dict(cache, P, C).
test(cache_option_turns_it_off, C == @(none)) :-
    access_plan(search("q"), [cache(false)], P),
    get_dict(cache, P, C).
test(window_option_sizes_the_recent_window, N == 3) :-
    access_plan(intent(continue, "go on"), [session(s), recent(3)], P),
    get_dict(steps, P, [Step]), get_dict(n, Step, N).
test(coverage_reaches_the_cdr_step, [C, N] == [["seen text"], partial]) :-
    access_plan(intent(explore, "q"), [coverage(["seen text"]), novelty(partial)], P),
    get_dict(steps, P, [Step]), get_dict(coverage, Step, C), get_dict(novelty, Step, N).
test(bad_novelty, error(type_error(oneof([on, off, partial]), sometimes), _)) :-
    access_plan(intent(explore, "q"), [novelty(sometimes)], _).
test(user_extension_is_routed, Ops == ["log.recent", "graph.cdr"]) :-
    access_plan(intent(summarise, "what did we decide"), [session(s)], P),
    get_dict(steps, P, Steps),
    maplist([D, O]>>get_dict(op, D, O), Steps, Ops).

:- end_tests(ctxrelay_router_decisions).

:- begin_tests(ctxrelay_router_errors).

test(unbound_access, error(instantiation_error, _)) :-
    access_plan(_, [], _).
test(unknown_access, error(domain_error(ctxrelay_access, nearest(q)), _)) :-
    access_plan(nearest(q), [], _).
test(unknown_intent, error(domain_error(intent, ponder), _)) :-
    access_plan(intent(ponder, "q"), [], _).
test(negative_recent, error(type_error(nonneg, -1), _)) :-
    access_plan(recent(-1), [session(s)], _).
test(bad_k, error(type_error(positive_integer, 0), _)) :-
    access_plan(search("q"), [k(0)], _).
test(not_an_option, error(type_error(compound, fast), _)) :-
    access_plan(search("q"), [fast], _).
test(unknown_option, error(existence_error(option, speed(fast)), _)) :-
    access_plan(search("q"), [speed(fast)], _).
test(empty_blend, error(domain_error(non_empty_list, []), _)) :-
    access_plan(blend([]), [], _).
test(session_needed, error(existence_error(option, session), _)) :-
    access_plan(intent(continue, "go on"), [], _).
test(unknown_session, error(existence_error(session, nope), _)) :-
    fresh_store(St),
    recent_turns(St, nope, 2, _).

:- end_tests(ctxrelay_router_errors).

:- begin_tests(ctxrelay_router_retrieve).

test(recent_turns_is_the_history_tail, Recent == Last) :-
    store_with_turns(St, 12),
    recent_turns(St, s, 4, Recent),
    transcript_history(St, s, last(4), Last).
test(recent_turns_after_direct_appends, Recent == Last) :-
    store_with_turns(St, 3),
    % Appends that bypass the bridge hook: the ring lags and re-syncs.
    py_call(St:transcript, T),
    py_call(T:append("s", "assistant", "direct 1"), _),
    py_call(T:append("s", "user", "direct 2"), _),
    recent_turns(St, s, 5, Recent),
    transcript_history(St, s, last(5), Last).
test(key_through_the_index, [Used, Hit, Text] == [[index], false, "The Q3 budget is 1200 dollars."]) :-
    fresh_store(St),
    fact_add(St, "The Q3 budget is 1200 dollars.", _, [key(budget_q3)]),
    retrieve(St, key(budget_q3), [], R),
    get_dict(store_used, R, Used), get_dict(cache_hit, R, Hit),
    get_dict(items, R, [Item]), get_dict(text, Item, Text).
test(search_then_cache_hit, [U1, H1, U2, H2] == [[graph, index], false, [cache], true]) :-
    fresh_store(St),
    fact_add(St, "Restic keeps 30 daily snapshots of the etcd data.", _, []),
    fact_add(St, "The raft heartbeat interval is 100 ms.", _, []),
    retrieve(St, search("daily restic snapshots"), [k(2)], R1),
    retrieve(St, search("daily restic snapshots"), [k(2)], R2),
    get_dict(store_used, R1, U1), get_dict(cache_hit, R1, H1),
    get_dict(store_used, R2, U2), get_dict(cache_hit, R2, H2).
test(blend_reports_each_primitive, [Used, Kinds] == [[log, graph], [fact, turn]]) :-
    store_with_turns(St, 5),
    fact_add(St, "The etcd cluster has five members across two zones.", _, []),
    retrieve(St, blend([intent(continue, "etcd members"), intent(explore, "etcd members")]),
             [session(s), recent(2)], R),
    get_dict(store_used, R, Used),
    get_dict(items, R, Items),
    maplist([I, K]>>(get_dict(kind, I, K0), atom_string(K, K0)), Items, Ks),
    sort(Ks, Kinds),
    get_dict(timings, R, T),
    assertion(get_dict('log.recent', T, _)),
    assertion(get_dict('graph.cdr', T, _)).
test(records_on_request, [Keys0, Key] == [[id, kind, score, text, via], "hb"]) :-
    fresh_store(St),
    fact_add(St, "The raft heartbeat interval is 100 ms.", _, [key(hb)]),
    retrieve(St, key(hb), [], R0),
    get_dict(items, R0, [I0]), dict_keys(I0, Keys0),
    retrieve(St, key(hb), [records(true)], R1),
    get_dict(items, R1, [I1]), get_dict(record, I1, Rec), get_dict(key, Rec, Key).
test(as_python_is_the_result_object, Hit == false) :-
    fresh_store(St),
    fact_add(St, "The raft heartbeat interval is 100 ms.", _, [key(hb)]),
    retrieve(St, key(hb), [as(python)], R),
    py_call(R:cache_hit, Hit0),
    ( Hit0 == @(false) -> Hit = false ; Hit = Hit0 ).

:- end_tests(ctxrelay_router_retrieve).

dict_keys(D, Keys) :-
    dict_pairs(D, _, Pairs),
    pairs_keys(Pairs, Keys).
