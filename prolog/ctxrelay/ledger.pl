:- module(ctxrelay_ledger,
          [ ledger/4,               % +Rendered, +Policy, +PackCost, -Ledger
            fail_closed/2,          % +Ledger, +Policy
            pack_report/3,          % +Rendered, +Units, -Report
            boundary_status/5,      % +Cands, +ById, +Selected, +Policy, -Status
            hidden_turns/4,         % +Cands, +ById, +Selected, -N
            headers/5,              % +Ledger, +Boundary, +Ms, +Analysis, -Headers
            storage_report/3,       % +Cands, +Analysis, -Storage
            stage_name/2            % ?Kind, ?Stage
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(assoc)).
:- use_module(library(yall)).
:- use_module(blend).
:- use_module(order, [unit_table/2]).

/** <module> The ledger: every token of the request accounted, and the headers

The ledger charges each provider-visible stage what the packer accounted
for its units; framing (per-message overhead and the reply priming) is a
stage of its own; the totals must add up to the pack's cost, and the
request is refused (fail closed) if it would exceed the input budget
whatever the accounting said.  Host-only metadata is counted, never
charged.  The CRP-* headers of a result are made here.
*/

%   ledger(+Rendered, +Policy, +PackCost, -Ledger)
%
%   Every provider-visible stage with its observed and charged tokens.
%   Charged is what the packer accounted (content of the stage's units);
%   framing collects the per-message overhead and the reply priming;
%   shape is what bringing the request into a strict template's shape
%   changed (ctxrelay_shape; exact, often negative: merged messages share
%   their framing).  The totals must add up; host-only metadata is counted,
%   not charged.
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
    Shape = Rendered.get(shape, shape{messages_before:0, messages_after:0, tokens:0}),
    Total is Content + Framing + Shape.tokens,
    Expected is PackCost + Rendered.priming + Shape.tokens,
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
    findall(Id, ( member(U, Units), get_dict(variant, U, "excerpt"), get_dict(id, U, Id) ),
            Excerpts),
    Ledger = ledger{stages:Entries, excerpts:Excerpts, shape:Shape,
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
stage_name(pending, message).
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
    unit_table(Units, Table),
    maplist(report_unit(Table), Rendered.units, Report).

report_unit(Table, R, unit{id:Id, kind:R.kind, variant:R.variant, tokens:R.tokens,
                           utility:Utility, turn_ids:TurnIds}) :-
    Id = R.id,
    atom_string(Variant, R.variant),
    (   get_assoc(Id, Table, unit(Id, Vs, Props)), memberchk(variant(Variant, _, U0), Vs)
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
        memberchk("boundary"-_, Selected),
        get_assoc("boundary", ById, U)
    ->  hidden_turns(Cands, ById, Selected, NOmitted),
        Status = boundary{inserted:true, omitted_first:U.omitted_first,
                          omitted_last:U.omitted_last,
                          omitted_tokens:U.omitted_tokens,
                          turns_not_shown:NOmitted}
    ;   Status = boundary{inserted:false}
    ).

%!  hidden_turns(+Cands, +ById, +Selected, -N) is det.
%
%   N stored turns (up to the history end) are shown by no packed unit.
hidden_turns(Cands, ById, Selected, NOmitted) :-
    findall(T, ( member(Id-_, Selected),
                 shown_turn(ById, Id, T) ), Shown0),
    sort(Shown0, Shown),
    get_dict(history_end, Cands, HistoryEnd),
    include(=<(1), Shown, Shown1),
    exclude(<(HistoryEnd), Shown1, ShownHistory),
    length(ShownHistory, NShown),
    NOmitted is HistoryEnd - NShown.

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
