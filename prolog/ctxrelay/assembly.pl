:- module(ctxrelay_assembly,
          [ assemble/4,             % +Session, +Message, -Result, +Options
            assembly/2,             % +Request, -Result
            request_policy/4,       % +Store, +Session, +Policy0, -Policy
            message_text/2,         % +Message, -Text
            turn_store/3            % +Options0, -Store, -Options
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(aggregate)).
:- use_module(errors).
:- use_module(store).
:- use_module(policy).
:- use_module(context).
:- use_module(packer).
:- use_module(turn_pack).
:- use_module(references).
:- use_module(intent).
:- use_module(blend).
:- use_module(mode).
:- use_module(router).
:- use_module(utility).
:- use_module(order).
:- use_module(ledger).
:- use_module(library(assoc)).
:- use_module(shape).

/** <module> Assembly: the bounded pack of one turn

assembly/2 runs the middle of a managed turn, without writing anything:

    candidates, first stage (Python: the window, the message's thread)
    -> references resolved, intent classified, mode and blend, Tier P's plan
    -> candidates, second stage, one crossing (Python: recall, warm,
       boundary, referenced turns; Tier P through the router side by side)
       (or Tier P per sub-query in document mode)
    -> utilities and constraints -> the tier gate
    -> the CLP(FD) pack under the input budget (fail closed)
    -> order, render, count, ledger, headers

The first answer is the highest-utility admissible pack; backtracking
yields the alternatives in non-increasing utility.  assemble/4 is the
public entry for "what would the next turn send"; the managed runtime
(ctxrelay_runtime) calls assembly/2 with the turn's own request.
*/

%!  assemble(+Session, +Message, -Result:dict, +Options) is nondet.
%
%   Assemble the provider-visible request for Message as the next user
%   turn without storing anything or calling a provider.  The first
%   solution is the highest-utility admissible pack; backtracking yields
%   the alternatives in non-increasing utility.  Options are the policy
%   options (policy/2) and store(Store).
%
%   The packer searches for at most the policy's time_limit seconds per
%   pack.  A pack found when the limit cut the search says so:
%   Result.status.optimality is `gap` and Result.status.gap bounds the
%   utility a better pack could add (`optimal` and 0 otherwise); after a
%   cut search, alternatives may be missing, so fewer solutions come on
%   backtracking.  Result.utility is the pack's utility (the sum of its
%   units' utilities, floats as in Result.pack).
%
%   @error ctxrelay(context_overflow, Figures) when the mandatory part
%          does not fit the input budget
assemble(Session, Message, Result, Options) :-
    must_be(text, Session),
    message_text(Message, Text),
    turn_store(Options, Store, PolicyOptions),
    policy(PolicyOptions, Policy0),
    turn_count(Store, Session, N),
    request_policy(Store, Session, Policy0, Policy),
    assembly(request{store:Store, session:Session, text:Text, pending:[],
                     history_end:N, policy:Policy}, Result).

%   optimality(+PackStatus, -Name, -Gap)
%
%   A pack is `optimal` (proven, Gap 0) or was cut by the time limit
%   (`gap`: Gap bounds how much utility, in the units' scale, a better pack
%   could add; alternatives after it may be missing).  Plain data, for
%   every caller.
optimality(optimal, optimal, 0) :- !.
optimality(gap(G), gap, Gap) :- !, Gap is G / 1000.
optimality(Other, Name, 0) :- term_string(Other, Name).

%!  request_policy(+Store, +Session, +Policy0, -Policy) is det.
%
%   The policy of one request on Session: a session's embedder is its own,
%   so a policy that names none uses the embedder the session's turn log
%   was derived with (a process whose default differs never fails the
%   session's turns); a new session, or a policy that names one, keeps it.
request_policy(Store, Session, Policy0, Policy) :-
    (   Policy0.embedder == ""
    ->  text_to_string(Session, S),
        py_api(py_call('ctxrelay.bridge.threads':api_session_embedder(Store, S), Name,
                       [py_string_as(string)])),
        (   Name == "" -> Policy = Policy0 ; Policy = Policy0.put(embedder, Name) )
    ;   Policy = Policy0
    ).

%!  assembly(+Request:dict, -Result:dict) is nondet.
%
%   Request has store, session, text (the new user message), pending (the
%   other new messages, not stored yet, that come before it: dicts with
%   role, content and optional name, tool_call_id, metadata), history_end
%   (the last stored turn the pack may show; 0 for a session that does
%   not exist yet) and policy (policy/2).
assembly(Request, Result) :-
    Store = Request.store,
    Session = Request.session,
    with_input_context(Store, Session, assembly_(Request, Result)).

%   The candidates live in Python behind one reference (Cands.handle):
%   about a hundred units and their messages.  Left to Prolog's atom
%   garbage collector they pile up over dozens of turns and make every
%   full Python collection slower, so the reference is released as soon
%   as no alternative pack can need it (the last one given, or a cut).
assembly_(Request, Result) :-
    Holder = handle(_),
    call_cleanup(assembly_(Request, Holder, Result),
                 release_handle(Holder)).

release_handle(handle(Handle)) :-
    (   var(Handle) -> true ; catch(py_free(Handle), _, true) ).

assembly_(Request, Holder, Result) :-
    statistics(cputime, T0),
    Policy = Request.policy,
    Store = Request.store,
    Text = Request.text,
    message_may_fit(Store, Text, Request.pending, Policy),
    candidates(Request, Cands0),
    nb_setarg(1, Holder, Cands0.handle),
    conversation_analysis(Text, Cands0, Cands1, Analysis00),
    context_mode(Text, Policy.mode, Request.history_end, Mode),
    mode_blend(Mode, Analysis00.blend, ModeBlend),
    Analysis0 = Analysis00.put(_{mode:Mode, blend:ModeBlend}),
    knowledge_plan(Request, Analysis0, Cands1, KnowledgePlan),
    gather(Request, KnowledgePlan, Cands1, Cands2, Analysis0, Analysis1),
    document_units(Request, Analysis1, Cands2, Cands, Analysis),
    pack_units(Cands, Policy, Units0, Constraints0),
    Budget is Policy.input_budget - Cands.priming,
    check_mandatory_fits(Units0, Budget, Policy, Cands, Mandatory),
    Available is Budget - Mandatory,
    blend_gate(Units0, Constraints0, Available, Policy, Analysis, Gated, GatedCs, Tiers),
    shape_slack(Policy, Slack),
    history_room(Policy, Room),
    PackBudget is max(Mandatory, Budget - Slack - Room),
    turn_pack(Request, Units0-Constraints0, Gated-GatedCs, PackBudget, Analysis, Cands,
              Units, Pack),
    Pack = pack(Selected0, Cost0, Utility, Optimality),
    units_by_id(Cands, ById),
    drop_idle_boundary(Cands, ById, Selected0, Cost0, Units, Selected, Cost),
    order_pack(Selected, Units, ById, Plan),
    render(Cands, Plan, Rendered0),
    shape_request(Policy, Cands, Rendered0, Rendered),
    ledger(Rendered, Policy, Cost, Ledger0),
    Ledger = Ledger0.put(tiers, Tiers),
    fail_closed(Ledger, Policy),
    statistics(cputime, T1),
    Ms is round((T1 - T0) * 1000),
    pack_report(Rendered, Units, Report),
    boundary_status(Cands, ById, Selected, Policy, BoundaryStatus),
    storage_report(Cands, Analysis, Storage),
    headers(Ledger, BoundaryStatus, Ms, Analysis.put(storage, Storage), Headers),
    UtilityF is Utility / 1000,              % the units' utilities are floats too
    optimality(Optimality, OptimalityName, Gap),
    Result = result{messages:Rendered.messages, ledger:Ledger, headers:Headers,
                    pack:Report, utility:UtilityF,
                    status:status{optimality:OptimalityName, gap:Gap,
                                  cold_history_boundary:BoundaryStatus,
                                  intent:Analysis.intent,
                                  references:Analysis.references,
                                  thread:Analysis.thread,
                                  knowledge:Analysis.knowledge,
                                  mode:Analysis.mode,
                                  referenced_turns:Analysis.referenced_turns,
                                  embedder:Analysis.embedder}}.

		 /*******************************
		 *   REFERENCES, INTENT, BLEND  *
		 *******************************/

%   conversation_analysis(+Text, +Cands0, -Cands, -Analysis)
%
%   Detect and resolve the references of the new message (DCGs): the
%   resolved turns come in as candidates at full weight (gather/6 adds
%   them, after recall); classify the intent (tool refs, clarify markers,
%   any reference, continue markers, topic similarity) and look up its
%   blend.
conversation_analysis(Text, Cands0, Cands, Analysis) :-
    Info = Cands0.info,
    references(Text, Refs),
    resolve_references(Refs, Info.recent_turns, Info.scratch_recent, Resolved),
    resolved_turns(Resolved, Info.recent_turns, TurnIds),
    include(is_resolved, Resolved, Hits),
    length(Hits, NResolved),
    Mentioned = Info.recent_mentions,
    thread_topic(Info, Topic),
    IntentContext = _{topic_similarity:Info.get(topic_similarity, 0.0),
                      topic_threshold:Info.get(topic_threshold, 0.5),
                      mentioned:Mentioned, refs:Refs, topic:Topic},
    classify_intent(Text, IntentContext, Intent, _Evidence),
    intent_blend(Intent, Blend),
    Cands = Cands0.put(_{referenced:TurnIds, intent:Intent, blend:Blend}),
    Analysis = _{intent:Intent, blend:Blend, references:NResolved,
                 referenced_turns:TurnIds,
                 thread:_{id:Info.get(active_thread, ""), label:Info.get(thread_label, ""),
                          resumed:Info.get(thread_resumed, false),
                          action:Info.get(thread_action, ""), rule:Info.get(thread_rule, "")},
                 embedder:Info.get(embedder, "")}.

is_resolved(resolved(_, _)).

%   The thread rules' decision for the message, as the intent's topic
%   step reads it: a message that starts a thread starts a topic (EXPLORE,
%   §5.2); one that returns to a thread by name ("back to etcd") goes on
%   with that topic (CONTINUE); any other is compared with the user turns
%   of the thread the conversation is in (topic_similarity: the spec's
%   max_similarity to the active thread).
thread_topic(Info, Topic) :-
    (   get_dict(thread_action, Info, A0)
    ->  atom_string(A, A0),
        (   A == new -> Topic = new
        ;   A == resume -> Topic = same
        ;   Topic = none
        )
    ;   Topic = none
    ).

resolved_turns(Resolved, RecentTurns, TurnIds) :-
    findall(T, ( member(resolved(_, Target), Resolved),
                 target_turn(Target, RecentTurns, T) ), Ts),
    sort(Ts, TurnIds).

target_turn(turn(T), _, T).
target_turn(item(T, _, _), _, T).
target_turn(scratch(Id), Recent, T) :-
    member(D, Recent),
    get_dict(role, D, "tool"),
    get_dict(turn_id, D, T),
    get_dict(content, D, C),
    sub_string(C, _, _, _, Id),
    !.

%   The words the recent turns mention, as mention_words/2 gives for their
%   joined text (no word spans a line break, so the union per turn is the
%   same set; mention_words/2 keeps each turn's words, see there).
recent_mentions(RecentTurns, Words) :-
    findall(Ws, ( member(D, RecentTurns), get_dict(content, D, C), mention_words(C, Ws) ),
            WordSets),
    append(WordSets, All),
    sort(All, Words).                       % one C sort beats 40 pairwise ord_unions

%!  message_text(+Message, -Text) is det.
%
%   The text of the user message of a turn: text, message(user, Text) or
%   a dict with content (and role user, if it has a role).
%
%   @error domain_error(user_message, Message) for another role: a managed
%          turn answers a user message (store other roles with turn_append/5,
%          or pass them before the user message in a list to turn_prepare/4)
message_text(Message, _) :-
    var(Message),
    !,
    instantiation_error(Message).
message_text(message(Role, Text0), Text) :-
    !,
    user_role(Role, message(Role, Text0)),
    must_be(text, Text0),
    text_to_string(Text0, Text).
message_text(Dict, Text) :-
    is_dict(Dict),
    !,
    (   get_dict(role, Dict, Role) -> user_role(Role, Dict) ; true ),
    (   get_dict(content, Dict, Text0) -> message_text(Text0, Text)
    ;   domain_error(message_with_content, Dict)
    ).
message_text(Text0, Text) :-
    must_be(text, Text0),
    text_to_string(Text0, Text).

user_role(Role, Message) :-
    (   atom(Role) -> atom_string(Role, S) ; S = Role ),
    (   S == "user"
    ->  true
    ;   domain_error(user_message, Message)
    ).

%!  turn_store(+Options0, -Store, -Options) is det.
%
%   The store of a turn: option store(Store) (a store object, `default`
%   or dir(Dir)), else the default store; Options are the rest.
turn_store(Options0, Store, Options) :-
    must_be(list, Options0),
    (   selectchk(store(Store0), Options0, Options)
    ->  true
    ;   Store0 = default, Options = Options0
    ),
    store_ref(Store0, Store).

		 /*******************************
		 *     TIER P AND THE BLEND     *
		 *******************************/

%   knowledge_plan(+Request, +Analysis, +Cands, -Plan)
%
%   The router plan of Tier P for the new message (ctxrelay_router:
%   access_plan/3), or @none.  The intent's blend says whether novelty
%   against what the conversation already covers is on, off or partial; a
%   message that refers back to prior content turns it off (CRP-SPEC-028
%   §5.3).  A drill-down walks the similarity graph around the anchors
%   (CDGR), other intents rank by CDR.  Facts promoted from another
%   session's turns are never offered (the session scope travels with
%   every retrieval).  Document and hybrid modes plan per sub-query
%   instead (document_units/5).
knowledge_plan(Request, Analysis, Cands, Plan) :-
    Analysis.mode == conversation,
    max_facts(Request.policy, K),
    K > 0,
    !,
    Policy = Request.policy,
    knowledge_novelty(Analysis, Novelty),
    knowledge_method(Analysis.intent, Method),
    knowledge_access(Method, Request.text, Access),
    coverage_texts(Cands, Novelty, Coverage),
    (   Policy.namespace == "" -> NSOpts = [] ; NSOpts = [namespace(Policy.namespace)] ),
    access_plan(Access, [k(K), coverage(Coverage), novelty(Novelty), as(python)|NSOpts], Plan).
knowledge_plan(_, _, _, @none).

knowledge_novelty(Analysis, Novelty) :-
    (   Analysis.references > 0 -> Novelty = off ; Novelty = Analysis.blend.novelty ).

%   gather(+Request, +KnowledgePlan, +Cands0, -Cands, +Analysis0, -Analysis)
%
%   The second stage of the candidates, one crossing: recalled turns, warm
%   artifacts, the boundary, the turns the references resolved to, and
%   (side by side with recall, in Python) Tier P's facts by KnowledgePlan.
gather(Request, Plan, Cands0, Cands, Analysis0, Analysis) :-
    py_api(py_call_plain('ctxrelay.bridge.assembly':gather(
                             Cands0.handle, Request.store,
                             _{referenced:Cands0.referenced, knowledge:Plan}), Out),
           session(Request.session)),
    Info0 = Cands0.info,                    % the recent turns may be Prolog's kept ones
    Info = Out.info.put(_{recent_turns:Info0.recent_turns,
                          recent_mentions:Info0.recent_mentions}),
    Cands = Cands0.put(_{units:Out.units, groups:Out.groups, excludes:Out.excludes,
                         info:Info}),
    knowledge_novelty(Analysis0, Novelty),
    (   Analysis0.mode \== conversation
    ->  Analysis = Analysis0
    ;   Out.has_knowledge == true
    ->  K = Out.knowledge,
        knowledge_method(Analysis0.intent, Method),
        Analysis = Analysis0.put(knowledge,
                                 _{facts:K.facts, novelty:Novelty, method:Method,
                                   store_used:K.store_used, cache_hit:K.cache_hit,
                                   retrieval_ms:K.retrieval_ms})
    ;   Analysis = Analysis0.put(knowledge,
                                 _{facts:0, novelty:Novelty, method:none, store_used:[],
                                   cache_hit:false, retrieval_ms:0})
    ).

%   document_units(+Request, +Analysis0, +Cands0, -Cands, -Analysis)
%
%   Document and hybrid modes: Tier P per sub-query of the task, every
%   sub-query covered before any gets a second fact.
document_units(Request, Analysis0, Cands0, Cands, Analysis) :-
    Analysis0.mode \== conversation,
    !,
    Policy = Request.policy,
    max_facts(Policy, K),
    document_plan(Request.text, Analysis0.mode, Cands0, K, Plan),
    Options = _{queries:Plan.queries, per_query:Plan.per_query, k:K,
                namespace:Policy.namespace, session:Request.session},
    py_api(py_call_plain('ctxrelay.bridge.assembly':add_document_units(
                             Cands0.handle, Request.store, Options), Out)),
    append(Cands0.units, Out.units, Units),
    Cands = Cands0.put(units, Units),
    Analysis = Analysis0.put(knowledge, _{facts:Out.facts, novelty:on, method:cdr,
                                          store_used:Out.store_used, cache_hit:false,
                                          retrieval_ms:Out.retrieval_ms,
                                          subqueries:Plan.queries,
                                          coverage:Out.coverage}).
document_units(_, Analysis, Cands, Cands, Analysis).

max_facts(Policy, K) :-
    (   Policy.knowledge == true -> K = Policy.max_facts ; K = 0 ).

%   document_plan(+Task, +Mode, +Cands, +K, -Plan)
%
%   A document task's sub-queries (ctxrelay_mode:subqueries/3; in hybrid
%   mode the conversation's recent user turns seed them) and how many
%   facts each may bring: every sub-query is covered before any gets a
%   second fact, so each asks for its share of K plus one.
document_plan(Task, Mode, Cands, K, plan{queries:Queries, per_query:PerQuery}) :-
    (   Mode == hybrid
    ->  findall(C, ( member(D, Cands.info.recent_turns),
                     get_dict(role, D, "user"), get_dict(content, D, C), C \== Task ),
                Seeds0),
        reverse(Seeds0, Seeds1),           % newest first
        max_subqueries(Max),
        (   length(Seeds1, NS), NS > Max
        ->  length(Seeds, Max), append(Seeds, _, Seeds1)
        ;   Seeds = Seeds1
        )
    ;   Seeds = []
    ),
    subqueries(Task, Seeds, Queries),
    length(Queries, NQ),
    (   NQ =:= 0 -> PerQuery = 0 ; PerQuery is max(1, -(-K // NQ) + 1) ).

%   The router's access for Tier P: the graph walk for a drill-down,
%   coverage-differential ranking otherwise (ctxrelay_router:route/2).
knowledge_access(cdgr, Text, intent(drill_down, Text)).
knowledge_access(cdr, Text, intent(explore, Text)).

%   What the conversation already covers (the window's last turns), for
%   novelty; nothing when novelty is off.
coverage_texts(_, off, []) :- !.
coverage_texts(Cands, _, Texts) :-
    Recent = Cands.info.recent_turns,
    length(Recent, N),
    Skip is max(0, N - 8),
    length(Prefix, Skip),
    append(Prefix, Last, Recent),
    findall(C, ( member(D, Last), get_dict(content, D, C), C \== "" ), Texts).

knowledge_method(drill_down, cdgr) :- !.
knowledge_method(_, cdr).

%   blend_gate(+Units0, +Constraints0, +Available, +Policy, +Analysis, -Units, -Constraints, -Tiers)
%
%   Each tier is offered up to its share of Available, the budget the
%   mandatory units leave (tier_gate/7); with tier_shares(false) every
%   candidate is offered and the shares are only reported.
blend_gate(Units0, Constraints0, Available, Policy, Analysis, Units, Constraints, Tiers) :-
    tier_gate(Units0, Constraints0, Analysis.blend, Available, Gated, GatedCs, Tiers),
    (   Policy.tier_shares == true
    ->  Units = Gated, Constraints = GatedCs
    ;   Units = Units0, Constraints = Constraints0
    ).

		 /*******************************
		 *          CANDIDATES          *
		 *******************************/

%   candidates(+Request, -Cands)
%
%   The first stage of the candidates (the window and the message's
%   thread: what the analysis of the message reads); gather/6 brings the
%   rest.  Python gathers the candidate units within the limits decided here:
%   the guaranteed tail starts at TailFirst (the last min_recent_turns
%   stored turns), the cold-history boundary is offered when turns lie
%   before it, recalled turns are offered until they hold Oversupply
%   times the input budget (the packer chooses among them).
candidates(Request, Cands) :-
    Policy = Request.policy,
    Store = Request.store,
    HistoryEnd = Request.history_end,
    MessageTurn is HistoryEnd + 1,
    tail_first(HistoryEnd, Policy, TailFirst),
    (   Policy.cold_history_boundary == true, TailFirst > 1
    ->  Boundary = @true
    ;   Boundary = @false
    ),
    retrieval_oversupply(Oversupply),
    RetrieveTokens is round(Oversupply * Policy.input_budget),
    reference_horizon(ReferenceTurns),
    instruction_turns(InstructionTurns),
    excerpt_limits(Policy.input_budget, ExcerptAbove, ExcerptTokens),
    turn_preview_chars(PreviewChars),
    (   pair_recalled_turns(Policy) -> PairTurns = @true ; PairTurns = @false ),
    py_bool(Policy.retrieval, Retrieval),
    py_bool(Policy.warm, UseWarm),
    py_bool(Policy.threads, Threads),
    max_facts(Policy, K),
    (   K > 0 -> Knowledge = @true ; Knowledge = @false ),
    PyOptions = _{model:Policy.model, history_end:HistoryEnd,
                  window_tokens:Policy.input_budget,
                  min_recent_turns:Policy.min_recent_turns,
                  tail_first:TailFirst,
                  max_retrieved:Policy.max_retrieved,
                  retrieve_tokens:RetrieveTokens,
                  excerpt_above:ExcerptAbove, excerpt_tokens:ExcerptTokens,
                  preview_chars:PreviewChars,
                  retrieval:Retrieval, warm:UseWarm, knowledge:Knowledge,
                  system:Policy.system,
                  boundary:Boundary, threads:Threads, embedder:Policy.embedder,
                  history_access:Policy.history_access,
                  pair_turns:PairTurns,
                  message_turn_id:MessageTurn,
                  reference_turns:ReferenceTurns,
                  instruction_turns:InstructionTurns,
                  pending:Request.pending,
                  known_recent:KnownKey},
    text_to_string(Request.session, Session),
    kept_recent(Session, KnownKey, KnownTurns, KnownMentions),
    py_api(py_call_plain('ctxrelay.bridge.assembly':window_candidates(
                             Store, Request.session, Request.text, PyOptions), Cands0),
           session(Request.session)),
    Info0 = Cands0.info,
    (   get_dict(recent_turns, Info0, Recent)
    ->  recent_mentions(Recent, Mentioned),
        keep_recent(Session, Info0.recent_key, Recent, Mentioned),
        Info = Info0.put(recent_mentions, Mentioned)
    ;   Info = Info0.put(_{recent_turns:KnownTurns, recent_mentions:KnownMentions})
    ),
    Cands = Cands0.put(_{message_turn:MessageTurn, history_end:HistoryEnd,
                         tail_first:TailFirst, info:Info}).

%   The recent turns Python last gave for a session and the words they
%   mention, with the key that names them (the store, its write generation
%   and the window's limits): the next assembly names the key, and Python
%   sends the turns again only when they are not those.  One entry per
%   session, a bounded table.
:- dynamic recent_kept/4.                   % Session, Key, Turns, Mentions

kept_recent(Session, Key, Turns, Mentions) :-
    (   recent_kept(Session, Key0, Turns0, Mentions0)
    ->  Key = Key0, Turns = Turns0, Mentions = Mentions0
    ;   Key = "", Turns = [], Mentions = []
    ).

keep_recent(_, "", _, _) :- !.
keep_recent(Session, Key, Turns, Mentions) :-
    with_mutex(ctxrelay_recent_kept,
               ( retractall(recent_kept(Session, _, _, _)),
                 (   predicate_property(recent_kept(_, _, _, _), number_of_clauses(N)),
                     N >= 256
                 ->  retractall(recent_kept(_, _, _, _))
                 ;   true
                 ),
                 assertz(recent_kept(Session, Key, Turns, Mentions)) )).

%!  tail_first(+HistoryEnd, +Policy, -TailFirst) is det.
%
%   The first turn of the guaranteed tail: the last min_recent_turns
%   stored turns are always packed.
tail_first(HistoryEnd, Policy, TailFirst) :-
    TailFirst is max(1, HistoryEnd - Policy.min_recent_turns + 1).

%!  excerpt_limits(+InputBudget, -Above, -Tokens) is det.
%
%   A stored turn whose verbatim cost is over Above tokens is also offered
%   as a bounded excerpt of about Tokens tokens (its head and tail, its
%   size, and how to read the rest with context/3): one huge turn never
%   makes the mandatory part impossible, and the packer keeps the verbatim
%   turn whenever it fits.
excerpt_limits(Budget, Above, Tokens) :-
    Above is max(512, Budget // 4),
    Tokens is min(1024, Above // 2).

%!  pair_recalled_turns(+Policy) is semidet.
%
%   A recalled answer comes with its question and a recalled question with
%   its answer (together or not at all) when the request must have the
%   strict shape: there, a reply without its question reads as a turn of
%   the conversation out of place.  Off otherwise: at a fixed budget the
%   partners cost what other recalled evidence would use (LoCoMo evidence
%   recall 0.859 -> 0.787 at 2,048 tokens with pairing always on).
pair_recalled_turns(Policy) :-
    Policy.alternation == strict.

%!  turn_preview_chars(-N) is det.
%
%   The references, mentions, novelty and hybrid seeds read the first N
%   characters of each recent turn (the rest of a long turn names nothing
%   they use, and a huge turn would cost its size on every assembly).
turn_preview_chars(2000).

%   Recalled earlier turns are offered until they hold this many times the
%   input budget (1.5 gave +0.003 LoCoMo recall at 1,024 only, ~15% slower).
retrieval_oversupply(1.0).

%   References resolve among the latest turns and scratch entries: "what
%   you said earlier" reaches this many turns back (older ground is found
%   by recall, not by reference).
reference_horizon(40).

%   System turns among a session's first turns are its standing
%   instructions: they are offered whatever the window (and are mandatory,
%   ctxrelay_utility).
instruction_turns(3).

%   render(+Cands, +Plan, -Rendered)
render(Cands, Plan, Rendered) :-
    py_api(py_call_plain('ctxrelay.bridge.assembly':render(Cands.handle, Plan), Rendered)).

%   drop_idle_boundary(+Cands, +ById, +Selected0, +Cost0, +Units, -Selected, -Cost)
%
%   The cold-history note is for turns the pack does not show: when the
%   pack shows every earlier turn (recall brought the rest in), the note
%   goes, and its tokens with it.
drop_idle_boundary(Cands, ById, Selected0, Cost0, Units, Selected, Cost) :-
    (   memberchk("boundary"-Variant, Selected0),
        hidden_turns(Cands, ById, Selected0, 0)
    ->  selectchk("boundary"-Variant, Selected0, Selected),
        atom_string(VariantA, Variant),
        memberchk(unit("boundary", Variants, _), Units),
        memberchk(variant(VariantA, BCost, _), Variants),
        Cost is Cost0 - BCost
    ;   Selected = Selected0,
        Cost = Cost0
    ).

%   shape_request(+Policy, +Cands, +Rendered0, -Rendered)
%
%   With alternation(strict) the request takes the shape strict chat
%   templates accept (ctxrelay_shape:shape_plan/2); Rendered.shape says
%   how many messages went in and out and what it cost, counted exactly.
shape_request(Policy, Cands, Rendered0, Rendered) :-
    (   Policy.alternation == strict
    ->  Messages = Rendered0.messages,
        maplist(message_shape_role, Messages, Roles),
        shape_plan(Roles, ShapePlan),
        py_api(py_call_plain('ctxrelay.bridge.assembly':shape_rendered(Cands.handle, Messages,
                                                                      ShapePlan), Shaped)),
        length(Messages, Before),
        length(Shaped.messages, After),
        Delta is Shaped.observed_total - Rendered0.observed_total,
        Rendered = Rendered0.put(_{messages:Shaped.messages,
                                   observed_total:Shaped.observed_total,
                                   observed_exact:Shaped.observed_exact,
                                   shape:shape{messages_before:Before, messages_after:After,
                                               tokens:Delta}})
    ;   Rendered = Rendered0
    ).

message_shape_role(M, Role) :-
    atom_string(Role0, M.role),
    (   Role0 == assistant, get_dict(tool_calls, M, Calls), Calls \== []
    ->  Role = assistant_call
    ;   Role = Role0
    ).

%!  history_room(+Policy, -Tokens) is det.
%
%   With history_access(tools) the caller runs a cold-history tool loop
%   (the relay): the pack leaves a quarter of the input budget for what the
%   tools bring back, so a round can add results and stay within the cap.
history_room(Policy, Room) :-
    (   Policy.history_access == tools -> Room is Policy.input_budget // 4 ; Room = 0 ).

%!  shape_slack(+Policy, -Tokens) is det.
%
%   What the packer keeps free for the strict shape: framing an opening
%   assistant message costs a few tokens (merging saves them: each merged
%   message sheds its framing), and the request is counted again after.
shape_slack(Policy, Slack) :-
    (   Policy.alternation == strict -> Slack = 32 ; Slack = 0 ).

		 /*******************************
		 *          FAIL CLOSED         *
		 *******************************/

%   message_may_fit(+Store, +Text, +Pending, +Policy)
%
%   New input over the store's turn size limit is refused
%   (ctxrelay(turn_too_large, Msg)), and input too long to fit whatever the
%   tokenizer fails closed, both before any work is spent on it: analysing
%   a 10 MB message takes longer than refusing it.  The lower bound is the
%   tokenizers' own fact (ctxrelay.text.tokens.lower_bound/1: no token is
%   longer than its maximum length).
message_may_fit(Store, Text, Pending, Policy) :-
    findall(C, ( member(P, Pending), get_dict(content, P, C) ), Contents0),
    Contents = [Text|Contents0],
    py_api(py_call('ctxrelay.bridge.stores':check_input(Store, Contents), Lower)),
    (   Lower =< Policy.input_budget
    ->  true
    ;   throw(error(ctxrelay(context_overflow,
                             _{mandatory_tokens:Lower, input_budget:Policy.input_budget,
                               effective_cap:Policy.effective_cap,
                               output_reserve:Policy.output_reserve,
                               safety_margin:Policy.safety_margin,
                               min_recent_turns:Policy.min_recent_turns}), _))
    ).

%   The mandatory part alone must fit, else fail closed with the figures.
check_mandatory_fits(Units, Budget, Policy, Cands, Mandatory) :-
    foldl(mandatory_cost, Units, 0, Mandatory),
    (   Mandatory =< Budget
    ->  true
    ;   Figures = _{mandatory_tokens:Mandatory, input_budget:Policy.input_budget,
                    reply_priming:Cands.priming,
                    effective_cap:Policy.effective_cap,
                    output_reserve:Policy.output_reserve,
                    safety_margin:Policy.safety_margin,
                    min_recent_turns:Policy.min_recent_turns},
        throw(error(ctxrelay(context_overflow, Figures), _))
    ).

mandatory_cost(unit(_, Variants, Props), C0, C) :-
    (   memberchk(mandatory(true), Props)
    ->  aggregate_all(min(Cost), member(variant(_, Cost, _), Variants), Min),
        C is C0 + Min
    ;   C = C0
    ).
