:- module(ctxrelay_router,
          [ retrieve/4,             % +Store, +Access, +Options, -Result
            recent_turns/4,         % +Store, +Session, +N, -Turns
            recent_turns/5,         % +Store, +Session, +N, -Turns, +Options
            access_plan/3,          % +Access, +Options, -Plan
                                    % the decision model (readable, extensible)
            route/2,                % ?Access, ?Steps
            primitive/1,            % ?Primitive
            cacheable/1,            % ?Step
            worth_caching/1         % ?Step
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(errors).
:- use_module(options).
:- use_module(store).

/** <module> The storage router: which primitive serves an access (CRP-SPEC-035 §3)

The decision is data: route/2 maps an access to the primitive operations
that serve it, cacheable/1 and worth_caching/1 say when the hot cache is
looked up first.  retrieve/4 turns the decision into a plan and runs it
through Python (ctxrelay.retrieval.router), which fetches, merges and caches.

Accesses:

  | recent(N)                 | the session's last N turns              | log     |
  | key(K)                    | the fact named K (exact)                | index   |
  | scratch(Id)               | a tool output's summary (freshness-gated)| pointer |
  | search(Q), facts(Q)       | facts like Q: ANN fused with BM25       | graph + index |
  | intent(explore, Q)        | CDR over the CKF (Tier P)               | graph   |
  | intent(drill_down, Q)     | CDGR walk around the anchors            | graph   |
  | intent(continue, Q)       | the recent window (Tier C)              | log     |
  | intent(clarify, Q)        | the recent window                       | log     |
  | intent(tool_reference, Q) | the newest tool outputs (Tier E)        | pointer |
  | blend(Accesses)           | all of them, fetched concurrently, RRF  | several |

Add an access type with a clause of route/2 (it is multifile), e.g.

    ctxrelay_router:route(intent(summarise, Q), [log:recent(window), graph:cdr(Q)]).
*/

:- multifile route/2.

:- predicate_options(retrieve/4, 3,
                     [ session(text), k(positive_integer), namespace(text),
                       recent(nonneg), cache(boolean), records(boolean),
                       coverage(list(text)), novelty(oneof([on, off, partial])),
                       as(oneof([dict, python]))
                     ]).
:- predicate_options(recent_turns/5, 5, [as(oneof([dict, python]))]).

%!  primitive(?Primitive) is nondet.
%
%   The five primitives of CRP-SPEC-035 §2, by their header names (§6).
primitive(cache).
primitive(log).
primitive(index).
primitive(pointer).
primitive(graph).

%!  route(?Access, ?Steps) is nondet.
%
%   Steps are the Primitive:Operation terms that serve Access, in rank
%   order for fusion.  `window` stands for the recent(N) option (default 8).
route(recent(N),                 [log:recent(N)]).
route(key(K),                    [index:key(K)]).
route(scratch(Id),               [pointer:entry(Id)]).
route(search(Q),                 [graph:ann(Q), index:terms(Q)]).
route(facts(Q),                  [graph:ann(Q), index:terms(Q)]).
route(intent(explore, Q),        [graph:cdr(Q)]).
route(intent(drill_down, Q),     [graph:cdgr(Q)]).
route(intent(continue, _),       [log:recent(window)]).
route(intent(clarify, _),        [log:recent(window)]).
route(intent(tool_reference, _), [pointer:recent(window)]).
route(blend(Accesses), Steps) :-
    is_list(Accesses),
    maplist(route_once, Accesses, Lists),
    append(Lists, Steps0),
    list_to_set(Steps0, Steps).

route_once(Access, Steps) :-
    once(route(Access, Steps)).

%!  cacheable(?Step) is semidet.
%
%   The result of Step is a function of what the cache key holds: the CKF
%   state hash (graph, index) or the session's turn count (log).  Pointer
%   reads are not: the freshness gate depends on the clock.
cacheable(graph:_).
cacheable(index:_).
cacheable(log:_).

%!  worth_caching(?Step) is semidet.
%
%   Step costs more than a cache lookup (which embeds the query and reads
%   the state hash).  Log reads and key lookups are point reads already:
%   caching them would only add that cost.
worth_caching(graph:_).
worth_caching(index:terms(_)).

%!  retrieve(+Store, +Access, +Options, -Result:dict) is det.
%
%   Serve Access with the primitives route/2 names, the hot cache first
%   when the plan is cacheable.  Result has items (dicts with kind, id,
%   score, via and text; and record, the whole fact, turn or scratch entry,
%   with records(true)), store_used (primitive names), cache_hit
%   (true/false), retrieval_ms and timings (milliseconds per operation).
%   Options:
%     - session(Id): the session, for accesses that read one
%     - k(K): facts per fact operation (default 10)
%     - namespace(NS): the CKF namespace (default "default")
%     - recent(N): the window of continue/clarify/tool_reference (default 8)
%     - cache(Bool): look up and fill the hot cache (default true)
%     - records(Bool): items carry their whole record (default false)
%     - coverage(Texts), novelty(Mode): for CDR/CDGR steps, what the context
%       already covers and how much that lowers a fact's score (SPEC-024)
%     - as(As): `dict` (default) or `python`, the RetrievalResult object
%       itself, for Python callers that need no conversion
%
%   @error instantiation_error if Access is unbound
%   @error domain_error(ctxrelay_access, Access) for an unknown access
%   @error type_error(T, X) for an ill-typed argument or option value
%   @error existence_error(option, session) when Access reads a session
%          and no session(Id) option was given
retrieve(Store0, Access, Options, Result) :-
    store_ref(Store0, Store),
    access_plan(Access, Options, Plan),
    option(as(As), Options, dict),
    get_dict(session, Plan, S),
    (   S == @none -> Culprit = none ; Culprit = session(S) ),
    (   As == python
    ->  py_api(py_call('ctxrelay.bridge.stores':route(Store, Plan), Result, [py_object(true)]),
               Culprit)
    ;   option(records(Records), Options, false),
        retrieve_dict(Store, Plan, Records, Culprit, Result)
    ).

%   Not py_call_plain over everything: cache_hit is the one boolean of a
%   lean result, and walking every item for @true/@false doubled the cost
%   of a cache hit.  Records hold user JSON: they get the usual adapter.
retrieve_dict(Store, Plan, Records, Culprit, Result) :-
    py_bool(Records, PyRecords),
    py_api(py_call('ctxrelay.bridge.stores':route_plain(Store, Plan, PyRecords), Result0,
                   [py_string_as(string)]), Culprit),
    (   Records == true -> py_plain(Result0, Result1) ; Result1 = Result0 ),
    get_dict(store_used, Result1, Strings),
    atom_list(Strings, Used),
    get_dict(cache_hit, Result1, Hit0),
    py_plain(Hit0, Hit),
    put_dict(_{store_used:Used, cache_hit:Hit}, Result1, Result).

atom_list(Strings, Atoms) :-
    maplist([S, A]>>atom_string(A, S), Strings, Atoms).

%!  access_plan(+Access, +Options, -Plan:dict) is det.
%
%   The plan retrieve/4 hands to Python (see ctxrelay.retrieval.router): the steps
%   with their arguments, the cache query (or @none), the merge rule.
access_plan(Access, Options, Plan) :-
    check_access(Access),
    check_options(retrieve/4, 3, Options),
    once(route(Access, Steps)),
    option(k(K), Options, 10),
    option(recent(Window), Options, 8),
    maplist(step_dict(K, Window), Steps, StepDicts0),
    maplist(novelty_args(Options), StepDicts0, StepDicts),
    session_of(Steps, Options, Session),
    (   option(namespace(NS0), Options) -> text_to_string(NS0, NS) ; NS = @none ),
    cache_query(Access, Steps, Options, CacheQ),
    merge_rule(Access, Steps, K, Merge, Limit),
    Plan = py{steps:StepDicts, cache:CacheQ, session:Session, namespace:NS,
              merge:Merge, limit:Limit}.

session_of(Steps, Options, Session) :-
    (   option(session(S0), Options)
    ->  text_to_string(S0, Session)
    ;   member(P:_, Steps), memberchk(P, [log, pointer])
    ->  throw(error(existence_error(option, session),
                    context(retrieve/4, "this access reads a session: pass session(Id) \c
                                       (Python: retrieve(..., session_id=Id))")))
    ;   Session = @none
    ).

%   The hot cache is looked up when the access has a query, every step's
%   result is keyed by the cache and some step is worth it.
cache_query(Access, Steps, Options, Query) :-
    option(cache(Cache), Options, true),
    (   Cache == true,
        access_query(Access, Query0),
        forall(member(S, Steps), cacheable(S)),
        once(( member(S, Steps), worth_caching(S) ))
    ->  text_to_string(Query0, Query)
    ;   Query = @none
    ).

access_query(search(Q), Q).
access_query(facts(Q), Q).
access_query(intent(_, Q), Q).
access_query(blend(As), Q) :-
    member(A, As),
    access_query(A, Q),
    !.

%   One step: its own order.  Facts found by ANN and BM25: fused, K kept.
%   A blend: fused, every item kept (each step already fetched its K).
merge_rule(_, [_], _, "none", @none) :- !.
merge_rule(search(_), _, K, "rrf", K) :- !.
merge_rule(facts(_), _, K, "rrf", K) :- !.
merge_rule(_, _, _, "rrf", @none).

step_dict(_, W, log:recent(N0), py{op:"log.recent", n:N}) :- !, window(N0, W, N).
step_dict(_, _, index:key(K0), py{op:"index.key", key:K}) :- !, text_to_string(K0, K).
step_dict(K, _, index:terms(Q0), py{op:"index.terms", query:Q, k:K}) :- !, text_to_string(Q0, Q).
step_dict(K, _, graph:ann(Q0), py{op:"graph.ann", query:Q, k:K}) :- !, text_to_string(Q0, Q).
step_dict(K, _, graph:cdr(Q0), py{op:"graph.cdr", query:Q, k:K}) :- !, text_to_string(Q0, Q).
step_dict(K, _, graph:cdgr(Q0), py{op:"graph.cdgr", query:Q, k:K}) :- !, text_to_string(Q0, Q).
step_dict(_, _, pointer:entry(I0), py{op:"pointer.entry", scratch_id:I}) :- !, text_to_string(I0, I).
step_dict(_, W, pointer:recent(N0), py{op:"pointer.recent", n:N}) :- !, window(N0, W, N).
step_dict(_, _, Step, _) :-
    domain_error(ctxrelay_router_step, Step).

novelty_args(Options, Step0, Step) :-
    get_dict(op, Step0, Op),
    (   memberchk(Op, ["graph.cdr", "graph.cdgr"])
    ->  (   option(coverage(C0), Options)
        ->  maplist([T, S]>>text_to_string(T, S), C0, C), put_dict(coverage, Step0, C, Step1)
        ;   Step1 = Step0
        ),
        (   option(novelty(N), Options) -> put_dict(novelty, Step1, N, Step) ; Step = Step1 )
    ;   Step = Step0
    ).

window(window, W, W) :- !.
window(N, _, N).

%   Arguments are checked at this edge; the steps trust them.
check_access(Access) :-
    must_be(nonvar, Access),
    check_access_(Access).

check_access_(recent(N)) :- !, must_be(nonneg, N).
check_access_(key(K)) :- !, must_be(text, K).
check_access_(scratch(Id)) :- !, must_be(text, Id).
check_access_(search(Q)) :- !, must_be(text, Q).
check_access_(facts(Q)) :- !, must_be(text, Q).
check_access_(intent(I, Q)) :-
    !,
    must_be(atom, I),
    must_be(text, Q),
    (   \+ \+ route(intent(I, Q), _) -> true ; domain_error(intent, I) ).
check_access_(blend(As)) :-
    !,
    must_be(list, As),
    (   As == [] -> domain_error(non_empty_list, As) ; true ),
    maplist(check_access, As).
check_access_(Access) :-
    (   \+ \+ route(Access, _)
    ->  true
    ;   domain_error(ctxrelay_access, Access)
    ).

%!  recent_turns(+Store, +Session, +N, -Turns:list(dict)) is det.
%!  recent_turns(+Store, +Session, +N, -Turns, +Options) is det.
%
%   The last N turns of Session from its rolling log (pointer reads, no
%   search), oldest first: always the transcript's last N (the log
%   re-syncs from the transcript when it lags).  Turns are dicts as from
%   history/4; with as(python) Turns is one Python reference to a list of
%   ctxrelay.types.Turn.
%
%   @error existence_error(session, Session)
%   @error type_error(nonneg, N)
recent_turns(Store, Session, N, Turns) :-
    recent_turns(Store, Session, N, Turns, []).

recent_turns(Store0, Session, N, Turns, Options) :-
    check_options(recent_turns/5, 5, Options),
    store_ref(Store0, Store),
    must_be(text, Session),
    must_be(nonneg, N),
    must_be(list, Options),
    option(as(As), Options, dict),
    must_be(oneof([dict, python]), As),
    text_to_string(Session, S),
    (   As == python
    ->  py_api(py_call('ctxrelay.bridge.stores':recent_turns(Store, S, N), Turns,
                       [py_object(true)]), session(Session))
    ;   py_api(py_call_plain('ctxrelay.bridge.stores':recent(Store, S, N), Turns), session(Session))
    ).
