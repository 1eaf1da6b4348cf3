/*  An agent driving ctxrelay from Prolog (AgentProlog style).

    bin/ctxrelay-swipl examples/agent_session.pl STORE_DIR

Opens (or creates) the store in STORE_DIR, creates a session, appends a
few turns, runs managed turns under a small token cap (echo provider, no
network) so the cold-history boundary appears, reads cold history through
context/3 (peek, slice, search, and input(context) inside
with_input_context/3), and backtracks over the alternative packs of
assemble/4, best first.  Exits 0 on success.
*/

:- use_module(library(ctxrelay)).
:- use_module(library(main)).
:- use_module(library(lists)).
:- use_module(library(apply)).

:- initialization(main, main).

session(agent).

%   Small enough that eight turns of history do not all fit: the tail is
%   guaranteed, older turns come back by search or stay behind the
%   cold-history boundary.
policy([ max_context_tokens(440), output_reserve(120), safety_margin(32),
         min_recent_turns(2), time_limit(0.5)
       ]).

history_turns([ user-"Our etcd cluster has three members: etcd-1, etcd-2 and etcd-3.",
                assistant-"Noted: three members, etcd-1..3.",
                user-"The backend quota is 8 GiB (--quota-backend-bytes=8589934592).",
                assistant-"Quota noted: 8 GiB.",
                user-"Backups run hourly with etcdctl snapshot save, shipped by restic to S3.",
                assistant-"Hourly snapshots, restic to S3; retention still to decide.",
                user-"The fsync p99 on etcd-2 spikes to 40 ms during compaction.",
                assistant-"Two options: move etcd-2 to local NVMe, or stagger compaction."
              ]).

questions([ "What was the backend quota again?",
            "Remind me which member has the fsync spikes.",
            "And how are the backups shipped?"
          ]).

main(Argv) :-
    (   Argv = [Dir|_]
    ->  true
    ;   format(user_error, "usage: bin/ctxrelay-swipl examples/agent_session.pl STORE_DIR~n", []),
        halt(2)
    ),
    store_open(Dir, Store, [default(true)]),
    session(S),
    ensure_session(Store, S),
    format("store ~w, session ~w~n", [Dir, S]),
    append_history(Store, S),
    managed_turns(Store, S),
    cold_history(Store, S),
    alternatives(Store, S),
    store_close(Store).

%   A second run on the same store reuses the session; the history turns
%   are appended by key, so they are not duplicated.
ensure_session(Store, S) :-
    (   catch(session_info(Store, S, _), error(existence_error(_, _), _), fail)
    ->  true
    ;   session_create(Store, S, [])
    ).

append_history(Store, S) :-
    history_turns(Turns),
    forall(nth1(I, Turns, Role-Text),
           ( format(string(Key), "history-~d", [I]),      % idempotent by key
             turn_append(Store, S, message(Role, Text), Id, [key(Key)]),
             format("appended #~d ~w~n", [Id, Role]) )),
    turn_count(Store, S, N),
    format("~d turns stored~n", [N]).

managed_turns(Store, S) :-
    policy(Policy),
    questions(Qs),
    forall(member(Q, Qs),
           ( managed_turn(S, Q, R, [store(Store)|Policy]),
             show_turn(Q, R) )).

show_turn(Q, R) :-
    Ledger = R.ledger,
    format("~n> ~s~n", [Q]),
    format("< ~s~n", [R.reply]),
    length(R.pack, NUnits),
    format("  pack: ~d units, utility ~3f, ledger ~d of input budget ~d~n",
           [NUnits, R.utility, Ledger.total, Ledger.input_budget]),
    B = R.status.cold_history_boundary,
    (   B.inserted == true
    ->  format("  cold-history boundary: turns ~w-~w outside the guaranteed tail, ~w not shown~n",
               [B.omitted_first, B.omitted_last, B.turns_not_shown])
    ;   format("  no cold-history boundary~n")
    ).

cold_history(Store, S) :-
    format("~n== cold history through context/3~n"),
    context(session(S), peek(item(1)), First),
    format("peek(item(1)): #~d ~w: ~s~n", [First.turn_id, First.role, First.content]),
    context(session(S), slice(3, 2), Slice),
    forall(member(T, Slice.items),
           format("slice(3, 2): #~d ~w: ~s~n", [T.turn_id, T.role, T.content])),
    forall(limit(2, context(session(S), search("fsync compaction"), Hit)),
           format("search(\"fsync compaction\"): #~d score ~2f~n", [Hit.turn_id, Hit.score])),
    with_input_context(Store, S,
                       ( context(input(context), peek(tail(2)), Tail),
                         length(Tail.items, NTail),
                         format("input(context) peek(tail(2)): ~d of ~d turns~n",
                                [NTail, Tail.total_turns]) )).

alternatives(Store, S) :-
    policy(Policy),
    format("~n== alternative packs for \"which member needs NVMe?\" (best first)~n"),
    findall(U, limit(3, ( assemble(S, "which member needs NVMe?", R, [store(Store)|Policy]),
                          get_dict(utility, R, U) )),
            Us),
    forall(nth1(I, Us, U), format("alternative ~d: utility ~3f~n", [I, U])),
    (   non_increasing(Us)
    ->  format("utilities non-increasing: true~n")
    ;   format("utilities non-increasing: false~n"),
        halt(1)
    ).

non_increasing([]).
non_increasing([_]).
non_increasing([A, B|T]) :-
    A >= B,
    non_increasing([B|T]).
