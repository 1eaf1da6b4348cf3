:- module(ctxrelay_runtime,
          [ managed_turn/4,         % +Session, +Message, -Result, +Options
            assemble/4,             % +Session, +Message, -Result, +Options
            completion/4            % +Messages, -Reply, -Info, +Options
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(library(assoc)).
:- use_module(errors).
:- use_module(store).
:- use_module(policy).
:- use_module(context).
:- use_module(packer).
:- use_module(references).
:- use_module(intent).
:- use_module(envelope).
:- use_module(mode).
:- use_module(router).

/** <module> The managed conversation runtime

managed_turn/4 layers durable conversational continuity over the
stateless completion/4 primitive:

    append the user turn (idempotent by key)
    -> gather candidate units (bounded window, indexed cold search,
       warm artifacts, the cold-history boundary)
    -> pack them with CLP(FD) under the input budget (fail closed)
    -> render, count, ledger
    -> completion/4 -> append the assistant turn (idempotent by key)

assemble/4 does the middle part only and yields alternative packs,
best first, on backtracking.  Nothing here summarises, compacts or
publishes warm artifacts: warm production is an explicit API.
*/

%!  completion(+Messages:list(dict), -Reply:string, -Info:dict, +Options) is det.
%
%   The stateless primitive: send Messages to a provider and return the
%   reply text.  Options: provider(Name) (`echo`, the default, needs no
%   network; `openai` talks to any OpenAI-compatible endpoint),
%   provider_options(Dict) (model, base_url, api_key, timeout, ...).
%   The managed runtime calls it unchanged.
%
%   @error ctxrelay(provider_error, Msg) and friends for provider failures
completion(Messages, Reply, Info, Options) :-
    must_be(list, Messages),
    must_be(list, Options),
    option(provider(Provider0), Options, echo),
    must_be(text, Provider0),
    option(provider_options(PO0), Options, _{}),
    must_be(dict, PO0),
    atom_string(Provider0, Provider),
    PO = PO0.put(provider, Provider),
    once(py_api(py_call_plain('ctxrelay.providers':complete(Messages, PO), Info0))),
    Reply = Info0.content,
    Info = Info0.

%!  managed_turn(+Session, +Message, -Result:dict, +Options) is det.
%
%   Run one managed turn.  Message is text, message(user, Text) or a
%   dict with role and content.  Options are the policy options
%   (policy/2), plus store(Store) and key(Key): a retried turn with the
%   same Key appends nothing new and does not call the provider again
%   when the reply is already stored.
%
%   Result keys: reply, messages (the provider-visible request), ledger,
%   headers, pack, utility, status, user_turn, assistant_turn.
%
%   @error ctxrelay(context_overflow, Figures) when the mandatory part
%          does not fit the input budget; nothing is sent.
managed_turn(Session, Message, Result, Options) :-
    must_be(text, Session),
    message_text(Message, Text),
    turn_store(Options, Store, PolicyOptions),
    policy(PolicyOptions, Policy),
    turn_keys(Policy.key, UserKey, AssistantKey),
    turn_append(Store, Session, message(user, Text), UserTurn, UserKey),
    HistoryEnd is UserTurn - 1,
    with_input_context(Store, Session,
                       assemble_best(Store, Session, Text, UserTurn, HistoryEnd,
                                     Policy, Assembly)),
    (   AssistantKey = [key(AK)],
        stored_reply(Store, Session, AK, UserTurn, AssistantTurn, Reply)
    ->  Info = _{provider:"stored", usage:_{}},
        Promoted = []
    ;   completion(Assembly.messages, Reply, Info,
                   [provider(Policy.provider), provider_options(Policy.provider_options)]),
        reply_options(Assembly, AssistantKey, ReplyOptions),
        turn_append(Store, Session, message(assistant, Reply), AssistantTurn, ReplyOptions),
        record_references(Store, Session, UserTurn, Assembly),
        promote(Store, Session, Policy, UserTurn, AssistantTurn, Assembly, Promoted)
    ),
    length(Promoted, NPromoted),
    Headers = Assembly.headers.put('CRP-Context-Promotions', NPromoted),
    Result = Assembly.put(_{reply:Reply, user_turn:UserTurn, headers:Headers,
                            promotions:Promoted,
                            assistant_turn:AssistantTurn,
                            provider:Info.get(provider, ""),
                            usage:Info.get(usage, _{})}).

%   record_references(+Store, +Session, +UserTurn, +Assembly)
%
%   The turns the user's message resolved its references to become its
%   `references` field in the turn log.
record_references(Store, Session, UserTurn, Assembly) :-
    Refs = Assembly.status.referenced_turns,
    (   Refs == []
    ->  true
    ;   py_api(py_call('ctxrelay.storage.lmdb.turnlog':api_set_references(Store, Session, UserTurn, Refs), _))
    ).

%   promote(+Store, +Session, +Policy, +UserTurn, +AssistantTurn, +Assembly, -Promoted)
%
%   After the reply is stored: durable values of the exchange move into
%   the CKF (a tool result pinned or referenced twice, a value the user
%   names, a statement reused across threads; never a volatile reading).
promote(Store, Session, Policy, UserTurn, AssistantTurn, Assembly, Promoted) :-
    (   Policy.promotion == true
    ->  Refs = Assembly.status.referenced_turns,
        py_api(py_call_plain('ctxrelay.knowledge.promotion':promote_managed_turn(
                                 Store, Session, AssistantTurn, UserTurn, Refs,
                                 Policy.embedder, Policy.namespace), Promoted))
    ;   Promoted = []
    ).

%   A generated document (document or hybrid mode) is logged back as an
%   assistant turn that says so in its metadata (CRP-SPEC-028 §8).
reply_options(Assembly, KeyOptions, Options) :-
    Mode = Assembly.status.mode,
    (   Mode == conversation
    ->  Options = KeyOptions
    ;   Options = [metadata(_{mode:Mode})|KeyOptions]
    ).

turn_keys(none, [], []) :- !.
turn_keys(Key, [key(UK)], [key(AK)]) :-
    must_be(text, Key),
    atomics_to_string([Key, ":user"], UK),
    atomics_to_string([Key, ":assistant"], AK).

%   The assistant turn of a retried key, if the first attempt stored it.
stored_reply(Store, Session, Key, _UserTurn, Turn, Reply) :-
    turn_for_key(Store, Session, Key, Turn0),
    integer(Turn0),
    Turn = Turn0,
    turn_get(Store, Session, Turn, T),
    get_dict(content, T, Reply).

%!  assemble(+Session, +Message, -Result:dict, +Options) is nondet.
%
%   Assemble the provider-visible request for Message as the next user
%   turn without appending anything or calling a provider.  The first
%   solution is the highest-utility admissible pack; backtracking yields
%   the alternatives in non-increasing utility.
assemble(Session, Message, Result, Options) :-
    must_be(text, Session),
    message_text(Message, Text),
    turn_store(Options, Store, PolicyOptions),
    policy(PolicyOptions, Policy),
    turn_count(Store, Session, N),
    MessageTurn is N + 1,
    with_input_context(Store, Session,
                       assemble_(Store, Session, Text, MessageTurn, N, Policy, Result)).

assemble_best(Store, Session, Text, MessageTurn, HistoryEnd, Policy, Result) :-
    once(assemble_(Store, Session, Text, MessageTurn, HistoryEnd, Policy, Result)).

%   The candidates live in Python behind one reference (Cands.handle):
%   about a hundred units and their messages.  Left to Prolog's atom
%   garbage collector they pile up over dozens of turns and make every
%   full Python collection slower, so the reference is released as soon
%   as no alternative pack can need it (the last one given, or a cut).
assemble_(Store, Session, Text, MessageTurn, HistoryEnd, Policy, Result) :-
    Holder = handle(_),
    call_cleanup(assemble_(Store, Session, Text, MessageTurn, HistoryEnd, Policy, Holder,
                           Result),
                 release_handle(Holder)).

release_handle(handle(Handle)) :-
    (   var(Handle) -> true ; catch(py_free(Handle), _, true) ).

assemble_(Store, Session, Text, MessageTurn, HistoryEnd, Policy, Holder, Result) :-
    statistics(cputime, T0),
    message_may_fit(Text, Policy),
    candidates(Store, Session, Text, MessageTurn, HistoryEnd, Policy, Cands0),
    nb_setarg(1, Holder, Cands0.handle),
    conversation_analysis(Store, Text, Cands0, Cands1, Analysis00),
    context_mode(Text, Policy.mode, HistoryEnd, Mode),
    mode_blend(Mode, Analysis00.blend, ModeBlend),
    Analysis0 = Analysis00.put(_{mode:Mode, blend:ModeBlend}),
    knowledge_units(Store, Text, Analysis0, Policy, Cands1, Cands, Analysis),
    pack_units(Cands, Policy, Units0, Constraints0),
    Budget is Policy.input_budget - Cands.priming,
    check_mandatory_fits(Units0, Budget, Policy, Cands, Mandatory),
    Available is Budget - Mandatory,
    blend_gate(Units0, Constraints0, Available, Policy, Analysis, Units, Constraints, Tiers),
    TimeLimit = Policy.time_limit,
    pack(Units, Constraints, Budget, Pack, [time_limit(TimeLimit)]),
    Pack = pack(Selected, Cost, Utility, Optimality),
    units_by_id(Cands, ById),
    order_pack(Selected, Units, ById, Plan),
    render(Cands, Plan, Rendered),
    ledger(Rendered, Policy, Cost, Ledger0),
    Ledger = Ledger0.put(tiers, Tiers),
    fail_closed(Ledger, Policy),
    statistics(cputime, T1),
    Ms is round((T1 - T0) * 1000),
    pack_report(Rendered, Units, Report),
    boundary_status(Cands, ById, Selected, Policy, BoundaryStatus),
    storage_report(Cands, Analysis, Storage),
    headers(Ledger, BoundaryStatus, Ms, Analysis.put(storage, Storage), Headers),
    Result = result{messages:Rendered.messages, ledger:Ledger, headers:Headers,
                    pack:Report, utility:Utility,
                    status:status{optimality:Optimality,
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

%   conversation_analysis(+Store, +Text, +Cands0, -Cands, -Analysis)
%
%   Detect and resolve the references of the new message (DCGs), bring
%   the resolved turns in as candidates at full weight, classify the
%   intent (tool refs, clarify markers, any reference, continue markers,
%   topic similarity) and look up its blend.
conversation_analysis(Store, Text, Cands0, Cands, Analysis) :-
    Info = Cands0.info,
    references(Text, Refs),
    resolve_references(Refs, Info.recent_turns, Info.scratch_recent, Resolved),
    resolved_turns(Resolved, Info.recent_turns, TurnIds),
    (   TurnIds == []
    ->  Cands1 = Cands0
    ;   py_api(py_call_plain('ctxrelay.retrieval.candidates':add_turn_units(Cands0.handle, Store, TurnIds),
                             Added)),
        append(Cands0.units, Added, Units1),
        Cands1 = Cands0.put(units, Units1)
    ),
    include(is_resolved, Resolved, Hits),
    length(Hits, NResolved),
    recent_mentions(Info.recent_turns, Mentioned),
    IntentContext = _{topic_similarity:Info.get(topic_similarity, 0.0),
                      topic_threshold:Info.get(topic_threshold, 0.5),
                      mentioned:Mentioned, refs:Refs},
    classify_intent(Text, IntentContext, Intent, _Evidence),
    intent_blend(Intent, Blend),
    Cands = Cands1.put(_{referenced:TurnIds, intent:Intent, blend:Blend}),
    Analysis = _{intent:Intent, blend:Blend, references:NResolved,
                 referenced_turns:TurnIds,
                 thread:_{id:Info.get(active_thread, ""), label:Info.get(thread_label, ""),
                          resumed:Info.get(thread_resumed, false)},
                 embedder:Info.get(embedder, "")}.

is_resolved(resolved(_, _)).

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

message_text(Message, _) :-
    var(Message),
    !,
    instantiation_error(Message).
message_text(message(user, Text0), Text) :-
    !,
    must_be(text, Text0),
    text_to_string(Text0, Text).
message_text(Dict, Text) :-
    is_dict(Dict),
    !,
    (   get_dict(content, Dict, Text0) -> message_text(Text0, Text)
    ;   domain_error(message_with_content, Dict)
    ).
message_text(Text0, Text) :-
    must_be(text, Text0),
    text_to_string(Text0, Text).

turn_store(Options0, Store, Options) :-
    must_be(list, Options0),
    (   selectchk(store(Store0), Options0, Options)
    ->  true
    ;   Store0 = default, Options = Options0
    ),
    (   Store0 == default -> default_store(Store) ; Store = Store0 ).

		 /*******************************
		 *     TIER P AND THE BLEND     *
		 *******************************/

%   knowledge_units(+Store, +Text, +Analysis0, +Policy, +Cands0, -Cands, -Analysis)
%
%   Offer CKF facts (Tier P) for the new message.  The intent's blend
%   says whether novelty against what the conversation already covers
%   is on, off or partial; a message that refers back to prior content
%   turns it off (CRP-SPEC-028 §5.3).  A drill-down walks the
%   similarity graph around the anchors (CDGR), other intents rank by
%   CDR.
knowledge_units(Store, Text, Analysis0, Policy, Cands0, Cands, Analysis) :-
    Analysis0.mode \== conversation,
    !,
    (   Policy.knowledge == true, Policy.max_facts > 0 -> K = Policy.max_facts ; K = 0 ),
    Options = _{k:K, mode:Analysis0.mode, namespace:Policy.namespace},
    py_api(py_call_plain('ctxrelay.retrieval.document':add_document_units(Cands0.handle, Store, Text,
                                                                Options), Out)),
    append(Cands0.units, Out.units, Units),
    Cands = Cands0.put(units, Units),
    Analysis = Analysis0.put(knowledge, _{facts:Out.facts, novelty:on, method:cdr,
                                          store_used:Out.store_used, cache_hit:false,
                                          retrieval_ms:Out.retrieval_ms,
                                          subqueries:Out.subqueries,
                                          coverage:Out.coverage}).
knowledge_units(Store, Text, Analysis0, Policy, Cands0, Cands, Analysis) :-
    Blend = Analysis0.blend,
    (   Analysis0.references > 0 -> Novelty = off ; Novelty = Blend.novelty ),
    knowledge_method(Analysis0.intent, Method),
    (   Policy.knowledge == true, Policy.max_facts > 0,
        py_call('ctxrelay.retrieval.candidates':has_knowledge(Store), @true)
    ->  knowledge_access(Method, Text, Access),
        coverage_texts(Cands0, Novelty, Coverage),
        (   Policy.namespace == "" -> NSOpts = [] ; NSOpts = [namespace(Policy.namespace)] ),
        retrieve(Store, Access, [k(Policy.max_facts), coverage(Coverage), novelty(Novelty),
                                 as(python)|NSOpts], Retrieved),
        py_api(py_call_plain('ctxrelay.retrieval.candidates':add_router_fact_units(Cands0.handle, Retrieved),
                             Out)),
        py_free(Retrieved),                 % its facts are units now
        append(Cands0.units, Out.units, Units),
        Cands = Cands0.put(units, Units),
        Knowledge = _{facts:Out.facts, novelty:Novelty, method:Method,
                      store_used:Out.store_used, cache_hit:Out.cache_hit,
                      retrieval_ms:Out.retrieval_ms}
    ;   Cands = Cands0,
        Knowledge = _{facts:0, novelty:Novelty, method:none, store_used:[], cache_hit:false,
                      retrieval_ms:0}
    ),
    Analysis = Analysis0.put(knowledge, Knowledge).

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

candidates(Store, Session, Text, MessageTurn, HistoryEnd, Policy, Cands) :-
    warm_store(Store, Policy, Warm),
    py_bool(Policy.retrieval, Retrieval),
    py_bool(Policy.warm, UseWarm),
    py_bool(Policy.cold_history_boundary, Boundary),
    py_bool(Policy.threads, Threads),
    PyOptions = _{model:Policy.model, history_end:HistoryEnd,
                  window_tokens:Policy.input_budget,
                  min_recent_turns:Policy.min_recent_turns,
                  max_retrieved:Policy.max_retrieved,
                  retrieval:Retrieval, warm:UseWarm,
                  system:Policy.system,
                  boundary:Boundary, threads:Threads, embedder:Policy.embedder,
                  message_turn_id:MessageTurn},
    py_api(py_call_plain('ctxrelay.retrieval.candidates':candidates(Store, Warm, Session, Text, PyOptions), Cands0), session(Session)),
    Cands = Cands0.put(_{message_turn:MessageTurn, history_end:HistoryEnd}).

warm_store(Store, Policy, Warm) :-
    (   Policy.warm == true
    ->  py_api(py_call('ctxrelay.bridge.stores':warm_store_for(Store), Warm))
    ;   Warm = @none
    ).

		 /*******************************
		 *      UTILITY & CONSTRAINTS   *
		 *******************************/

%   pack_units(+Cands, +Policy, -Units, -Constraints)
%
%   Turn Python's candidate summaries into packer units: a utility per
%   variant (scaled by 1000 to integers), mandatory flags, and the
%   structural constraints (tool pairs together, artifacts exclude the
%   turns they cover).
pack_units(Cands, Policy, Units, Constraints) :-
    maplist(pack_unit(Cands, Policy), Cands.units, Units),
    findall(together(G), member(G, Cands.groups), Together),
    findall(excludes(A, B), member([A, B], Cands.excludes), Excludes),
    append(Together, Excludes, Constraints).

pack_unit(Cands, Policy, U, unit(Id, Variants, [mandatory(M), kind(Kind)])) :-
    Id = U.id,
    atom_string(Kind, U.kind),
    mandatory(Kind, U, Cands, Policy, M),
    maplist(variant_utility(Kind, U, Cands, Policy), U.variants, Variants).

mandatory(system, _, _, _, true) :- !.
mandatory(instructions, _, _, _, true) :- !.
mandatory(message, _, _, _, true) :- !.
mandatory(boundary, _, _, _, true) :- !.
mandatory(Kind, U, Cands, _, M) :-
    memberchk(Kind, [turn, scratch]),
    !,
    U.turn_ids = [T],
    (   T >= Cands.info.tail_first -> M = true ; M = false ).
mandatory(_, _, _, _, false).

variant_utility(Kind, U, Cands, Policy, V, variant(Name, Cost, Utility)) :-
    atom_string(Name, V.name),
    Cost = V.cost,
    utility(Kind, Name, U, Cands, Policy, F),
    Utility is max(0, round(F * 1000)).

%   utility(+Kind, +Variant, +Unit, +Cands, +Policy, -Float)
%
%   Conversation gravity is recency (half-life decay); cold turns found
%   by the index are worth their normalised score; a warm artifact is
%   worth its relevance plus the span it restores, less for terser
%   variants.  Mandatory units carry no utility of their own.
utility(Kind, _, _, _, _, 0.0) :-
    memberchk(Kind, [system, instructions, message, boundary]),
    !.
utility(Kind, Name, U, Cands, Policy, F) :-
    memberchk(Kind, [turn, scratch]),
    !,
    U.turn_ids = [T],
    intent_weights_c(Cands, WRecent, WRetrieved),
    Recency is WRecent * 0.5 ** ((Cands.message_turn - T) / Policy.half_life),
    (   get_dict(relevance, U, R)
    ->  relevant_tokens(U, Name, WRetrieved, R, Relevance)
    ;   Relevance = 0
    ),
    F is max(Recency, Relevance) + 0.001.
utility(retrieved, Name, U, Cands, _, F) :-
    !,
    intent_weights_c(Cands, _, WRetrieved),
    relevant_tokens(U, Name, WRetrieved, U.get(score, 0.0), F).
utility(referenced, _, _, _, _, 1.0) :- !.      % resolved references: full weight
utility(thread, _, U, Cands, Policy, F) :-      % a resumed thread's dormant turns
    !,
    U.turn_ids = [T],
    F is 0.4 + 0.5 * 0.5 ** ((Cands.message_turn - T) / (4 * Policy.half_life)).
utility(thread_summary, _, _, _, _, 0.9) :- !.
utility(fact, _, U, _, _, F) :-                 % CKF facts: their CDR/CDGR score
    !,
    F is 0.1 + 0.9 * U.get(score, 0.0).
utility(warm, Variant, U, _, _, F) :-
    !,
    variant_factor(Variant, VF),
    Span is U.get(end, 0) - U.get(start, 0) + 1,
    F is VF * (0.1 + 0.8 * U.get(relevance, 0.0) + 0.015 * min(Span, 40)).
utility(_, _, _, _, _, 0.01).

%   relevant_tokens(+Unit, +Variant, +Weight, +Score, -Utility)
%
%   A recalled turn is worth its relevance per token: the packer then
%   fills the budget in order of relevance whatever the turns' lengths
%   (a per-unit value would trade one long relevant turn for two short
%   marginal ones).  RefTokens scales a typical turn to about 1.
relevant_tokens(U, Name, Weight, Score, F) :-
    RefTokens = 50,
    (   member(V, U.variants), atom_string(Name, V.name) -> Cost = V.cost ; Cost = RefTokens ),
    F is Weight * (0.1 + 0.9 * Score) * Cost / RefTokens.

%   intent_weights_c(+Cands, -Recent, -Retrieved)
%
%   Within the conversation tier, the intent decides how much recency
%   and indexed recall weigh: a continuation lives in the recent turns,
%   a new question (explore) or a drill-down into earlier ground in what
%   the index finds.
intent_weights_c(Cands, Recent, Retrieved) :-
    (   get_dict(intent, Cands, Intent), recall_weights(Intent, Recent, Retrieved)
    ->  true
    ;   Recent = 1.0, Retrieved = 0.7
    ).

recall_weights(continue,       1.0,  0.6).
recall_weights(clarify,        1.0,  0.8).
recall_weights(drill_down,     0.7,  1.0).
recall_weights(tool_reference, 0.7,  0.6).
recall_weights(explore,        0.35, 1.0).

variant_factor(verbatim,   1.0).
variant_factor(detailed,   0.85).
variant_factor(facts_only, 0.6).
variant_factor(compact,    0.5).

%   message_may_fit(+Text, +Policy)
%
%   A message too long to fit whatever the tokenizer (at least one token
%   per 1,024 bytes, cf. ctxrelay.retrieval.candidates.message_cost) fails closed
%   before any work is spent on it: analysing a 10 MB message takes
%   longer than refusing it.
message_may_fit(Text, Policy) :-
    string_length(Text, Chars),
    (   Chars =< 1024 * (Policy.input_budget + 1)
    ->  true
    ;   Lower is Chars // 1024,
        throw(error(ctxrelay(context_overflow,
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

		 /*******************************
		 *       ORDER AND RENDER       *
		 *******************************/

%   order_pack(+Selected, +Units, +ById, -Plan)
%
%   Instructions first; then the context units (boundary, warm
%   artifacts, thread summary) in the primacy-recency sandwich of
%   CRP-SPEC-003 §7.4 (sandwich/2: mandatory ones count as critical,
%   the others by their utility relative to the best); then the
%   conversation in chronological order (hot, retrieved, referenced and
%   thread turns interleaved by turn id); the new message last.
order_pack(Selected, Units, ById, Plan) :-
    maplist(unit_by_id(ById), Selected, Entries),
    include(entry_section(head), Entries, Head0),
    include(entry_section(context), Entries, Context),
    include(entry_section(conversation), Entries, Conversation0),
    include(entry_section(tail), Entries, Tail),
    sort_entries(Head0, Head),
    sort_entries(Conversation0, Conversation),
    context_scores(Context, Units, Scored),
    sandwich(Scored, ContextOrdered),
    append([Head, ContextOrdered, Conversation, Tail], Ordered),
    maplist(entry_step, Ordered, Plan).

entry_step(e(Id, Var, _)-_, [Id, Var]).

entry_section(Section, e(_, _, U)-_) :-
    atom_string(Kind, U.kind),
    kind_rank(Kind, Rank),
    rank_section(Rank, S),
    S == Section.

rank_section(R, head) :- R =< 1, !.
rank_section(R, context) :- R =< 3, !.
rank_section(4, conversation) :- !.
rank_section(_, tail).

sort_entries(Entries, Sorted) :-
    map_list_to_pairs(order_key, Entries, Keyed),
    keysort(Keyed, KS),
    pairs_values(KS, Sorted).

context_scores(Context, Units, Scored) :-
    maplist(entry_utility(Units), Context, Utilities),
    max_list([1|Utilities], Max),
    maplist(context_score(Units, Max), Context, Utilities, Scored).

entry_utility(Units, e(Id, Var, _)-_, U) :-
    atom_string(VarA, Var),
    (   member(unit(Id, Vs, _), Units), memberchk(variant(VarA, _, U0), Vs)
    ->  U = U0
    ;   U = 0
    ).

context_score(Units, Max, Entry, Utility, Score-Entry) :-
    Entry = e(Id, _, _)-_,
    (   member(unit(Id, _, Props), Units), memberchk(mandatory(true), Props)
    ->  Score = 1.0
    ;   Score is Utility / Max
    ).

unit_by_id(ById, Id-Variant, e(Id, VarS, U)-U) :-
    atom_string(Variant, VarS),
    get_assoc(Id, ById, U).

%   The candidate units by id, for lookups by the selected ids (a pack
%   selects tens of the hundreds of candidates).
units_by_id(Cands, ById) :-
    findall(Id-U, ( member(U, Cands.units), get_dict(id, U, Id) ), Pairs0),
    keysort(Pairs0, Pairs1),                % stable: the first unit of an id wins
    first_of_each_key(Pairs1, Pairs),
    ord_list_to_assoc(Pairs, ById).

first_of_each_key([], []).
first_of_each_key([K-V|T0], [K-V|T]) :-
    skip_key(T0, K, T1),
    first_of_each_key(T1, T).

skip_key([K0-_|T0], K, T) :- K0 == K, !, skip_key(T0, K, T).
skip_key(T, _, T).

order_key(e(_, _, U)-_, Key) :-
    atom_string(Kind, U.kind),
    kind_rank(Kind, Rank),
    (   U.turn_ids = [T|_] -> true ; T = 0 ),
    Key = Rank-T.

kind_rank(system, 0).
kind_rank(instructions, 1).
kind_rank(boundary, 2).
kind_rank(warm, 3).
kind_rank(turn, 4).
kind_rank(retrieved, 4).
kind_rank(scratch, 4).
kind_rank(referenced, 4).
kind_rank(thread, 4).
kind_rank(thread_summary, 3).
kind_rank(fact, 3).
kind_rank(message, 5).

render(Cands, Plan, Rendered) :-
    py_api(py_call_plain('ctxrelay.retrieval.candidates':render(Cands.handle, Plan), Rendered)).

		 /*******************************
		 *            LEDGER            *
		 *******************************/

%   ledger(+Rendered, +Policy, +PackCost, -Ledger)
%
%   Every provider-visible stage with its observed and charged tokens.
%   Charged is what the packer accounted (content of the stage's units);
%   framing collects the per-message overhead and the reply priming.
%   The totals must add up; host-only metadata is counted, not charged.
ledger(Rendered, Policy, PackCost, Ledger) :-
    Units = Rendered.units,
    findall(Stage, stage_name(_, Stage), Stages0),
    sort(Stages0, Stages),
    map_list_to_pairs(unit_stage, Units, Keyed),
    keysort(Keyed, Sorted),
    group_pairs_by_key(Sorted, ByStage),
    maplist(stage_entry(ByStage), Stages, Entries0),
    include(used_stage, Entries0, Entries),
    sum_key(framing, Units, Framing0),
    Framing is Framing0 + Rendered.priming,
    sum_key(charged, Entries, Content),
    Total is Content + Framing,
    Expected is PackCost + Rendered.priming,
    (   Total =:= Expected
    ->  true
    ;   throw(error(ctxrelay(ledger_mismatch,
                             _{stages:Total, pack:Expected}), _))
    ),
    (   all_exact(Units), Rendered.observed_exact == true
    ->  Exact = true
    ;   Exact = false
    ),
    HostOnly = Rendered.host_only,
    Ledger = ledger{stages:Entries,
                    framing:framing{observed:Framing, charged:Framing},
                    total:Total, observed_total:Rendered.observed_total,
                    exact:Exact, input_budget:Policy.input_budget,
                    effective_cap:Policy.effective_cap,
                    output_reserve:Policy.output_reserve,
                    safety_margin:Policy.safety_margin,
                    host_only:host_only{tokens:HostOnly, charged:0}}.

stage_name(system, system).
stage_name(instructions, system).
stage_name(turn, hot_tail).
stage_name(warm, warm).
stage_name(boundary, boundary).
stage_name(retrieved, retrieved).
stage_name(scratch, tool_summaries).
stage_name(referenced, referenced).
stage_name(thread, thread).
stage_name(thread_summary, thread).
stage_name(fact, knowledge).
stage_name(message, message).

stage_entry(ByStage, Stage, stage{name:Stage, observed:Tokens, charged:Tokens,
                                  exact:Exact, units:N}) :-
    (   memberchk(Stage-Us, ByStage) -> true ; Us = [] ),
    length(Us, N),
    sum_key(content_tokens, Us, Tokens),
    (   all_exact(Us) -> Exact = true ; Exact = false ).

%   The stage a rendered unit is charged to (`none`: a kind no stage lists).
unit_stage(Unit, Stage) :-
    get_dict(kind, Unit, KindS),
    atom_string(Kind, KindS),
    (   stage_name(Kind, Stage0) -> Stage = Stage0 ; Stage = none ).

used_stage(Entry) :-
    (   get_dict(charged, Entry, C), C > 0
    ->  true
    ;   get_dict(units, Entry, N), N > 0
    ).

all_exact(Dicts) :-
    forall(member(D, Dicts), get_dict(exact, D, true)).

sum_key(Key, Dicts, Sum) :-
    foldl(add_key(Key), Dicts, 0, Sum).

add_key(Key, Dict, S0, S) :-
    get_dict(Key, Dict, V),
    S is S0 + V.

%   Never send more than the input budget, whatever the accounting said.
fail_closed(Ledger, Policy) :-
    Worst is max(Ledger.total, Ledger.observed_total),
    (   Worst =< Policy.input_budget
    ->  true
    ;   throw(error(ctxrelay(context_overflow,
                             _{request_tokens:Worst,
                               input_budget:Policy.input_budget}), _))
    ).

pack_report(Rendered, Units, Report) :-
    maplist(report_unit(Units), Rendered.units, Report).

report_unit(Units, R, unit{id:Id, kind:R.kind, variant:R.variant, tokens:R.tokens,
                           utility:Utility, turn_ids:TurnIds}) :-
    Id = R.id,
    atom_string(Variant, R.variant),
    (   member(unit(Id, Vs, Props), Units), memberchk(variant(Variant, _, U0), Vs)
    ->  Utility is U0 / 1000
    ;   Utility = 0
    ),
    (   memberchk(kind(K), Props),
        memberchk(K, [turn, retrieved, instructions, scratch, referenced, thread])
    ->  TurnIds = R.turn_ids
    ;   TurnIds = []
    ).

boundary_status(Cands, ById, Selected, Policy, Status) :-
    (   Policy.cold_history_boundary == true,
        get_assoc("boundary", ById, U)
    ->  findall(T, ( member(Id-_, Selected),
                     shown_turn(ById, Id, T) ), Shown0),
        sort(Shown0, Shown),
        get_dict(history_end, Cands, HistoryEnd),
        include(=<(1), Shown, Shown1),
        exclude(<(HistoryEnd), Shown1, ShownHistory),
        length(ShownHistory, NShown),
        NOmitted is HistoryEnd - NShown,
        Status = boundary{inserted:true, omitted_first:U.omitted_first,
                          omitted_last:U.omitted_last,
                          omitted_tokens:U.omitted_tokens,
                          turns_not_shown:NOmitted}
    ;   Status = boundary{inserted:false}
    ).

headers(Ledger, Boundary, Ms, Analysis, Headers) :-
    (   Boundary.inserted == true -> Cold = Boundary.turns_not_shown ; Cold = 0 ),
    (   Ledger.exact == true -> Exactness = "exact" ; Exactness = "estimated" ),
    format(string(Used), "~w/~w", [Ledger.total, Ledger.input_budget]),
    blend_header(Analysis.blend, Blend),
    upcase_atom(Analysis.intent, Intent),
    Thread = Analysis.thread,
    (   Thread.label == "" -> ActiveThread = "none" ; ActiveThread = Thread.label ),
    Headers = _{'CRP-Context-Tokens-Used':Used,
                'CRP-Context-Token-Count':Exactness,
                'CRP-Context-Mode':Analysis.mode,
                'CRP-Context-Tier-Blend':Blend,
                'CRP-Context-Turn-Intent':Intent,
                'CRP-Context-References-Resolved':Analysis.references,
                'CRP-Context-Active-Thread':ActiveThread,
                'CRP-Context-Cold-Turns':Cold,
                'CRP-Context-Assembly-Ms':Ms,
                'CRP-Context-Store-Used':Analysis.storage.used,
                'CRP-Context-Cache-Hit':Analysis.storage.cache_hit,
                'CRP-Context-Retrieval-Ms':Analysis.storage.retrieval_ms,
                'CRP-Context-Promotions':0}.

%   storage_report(+Cands, +Analysis, -Storage)
%
%   The primitives this assembly read (CRP-SPEC-035 §6): log (the rolling
%   log's tail), index (recall over the inverted index), pointer (tool
%   output summaries), graph or cache (Tier P through the router), with
%   the retrieval time of recall and knowledge together.
storage_report(Cands, Analysis, storage{used:Used, cache_hit:Hit, retrieval_ms:Ms}) :-
    Info = Cands.info,
    get_dict(store_used, Info, C0),
    K = Analysis.knowledge,
    append(C0, K.store_used, All0),
    maplist([X, S]>>text_to_string(X, S), All0, All1),
    sort(All1, All),
    (   All == [] -> Used = "none" ; atomic_list_concat(All, ',', UsedA), atom_string(UsedA, Used) ),
    (   K.cache_hit == true -> Hit = "true" ; Hit = "false" ),
    (   get_dict(recall, Info, R), is_dict(R), get_dict(ms, R, RMs) -> true ; RMs = 0 ),
    Total is RMs + K.retrieval_ms,
    format(string(Ms), "~3f", [Total]).

shown_turn(ById, Id, T) :-
    get_assoc(Id, ById, C),
    get_dict(kind, C, Kind),
    memberchk(Kind, ["turn", "retrieved", "instructions", "scratch", "referenced", "thread"]),
    get_dict(turn_ids, C, Ts),
    member(T, Ts).
