:- module(ctxrelay_promotion,
          [ promote_turns/5,          % +Store, +Session, +Turns, -Promoted, +Options
            promote_scratch_entry/5,  % +Store, +Session, +ScratchId, -Promoted, +Options
            promotion_actions/3,      % +Evidence, -Actions, +Options
            % extension points (multifile, dynamic)
            promotion_rule/1,         % ?Rule
            promotion_threshold/2,    % ?Name, ?Value
            never_promoted/1,         % ?FreshnessClass
            naming_role/1,            % ?Role
            similarity_floor/3        % +TopicSame, +Edge, -Floor
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(assoc)).
:- use_module(library(ordsets)).
:- use_module(errors).
:- use_module(options).
:- use_module(store, [store_ref/2]).
:- use_module(naming).

/** <module> Promotion: when ephemeral context becomes durable knowledge

CRP-SPEC-035 §4.2 and CRP-SPEC-029 §5.  After a turn, three rules decide
what graduates from the scratch buffer and the turn log into the CKF:

  | Rule           | Promoted when                                                  |
  |----------------|----------------------------------------------------------------|
  | `tool_result`  | a scratch entry is pinned, or referenced by at least `min_references` (2) distinct later turns |
  | `named`        | a user turn names a value (ctxrelay_naming: "call that the budget figure", "let's call 4.2M the Q3 revenue") |
  | `cross_thread` | a statement of an earlier turn is reused in a turn of another topic thread (`min_threads`, 2): at least `value_share` (0.5) of its concrete values and every number recur there, and its terms (`containment`, 0.7) or its meaning (sentence cosine >= similarity_floor/3) |

Volatile readings are never promoted (never_promoted/1: classes REALTIME
and VOLATILE; a reading without a class counts as VOLATILE): not a
scratch entry of such a class, not a value named from it, and not an
assistant statement that relays it (the turn right after its tool turns).

A turn *references* a scratch entry when it names its id, when the turns
its references resolved to include the entry's tool turns, or when a
naming's "that" points at it.  "that" is, in this order: a scratch id the
naming turn names before the phrase, the previous turn's tool output, a
scratch id the previous turn names, or the previous turn's own value.

Python gathers the evidence and writes what the rules accept
(ctxrelay.knowledge.promotion: `evidence`, `similarities`, `apply`):
one crossing for the evidence, one to apply what was accepted (none when
nothing was), and one more only when a statement's terms do not settle
the cosine rule.  Keys, content, metadata and idempotence are Python's.

Users change the rules by changing the facts, e.g.

    :- multifile ctxrelay_promotion:never_promoted/1.
    ctxrelay_promotion:never_promoted('STABLE').      % promote STATIC only

    ?- retract(ctxrelay_promotion:promotion_threshold(min_references, _)),
       assertz(ctxrelay_promotion:promotion_threshold(min_references, 3)).
*/

:- multifile promotion_rule/1, promotion_threshold/2, never_promoted/1, naming_role/1,
             similarity_floor/3.
:- dynamic promotion_rule/1, promotion_threshold/2, never_promoted/1, naming_role/1,
           similarity_floor/3.

:- det(promote_turns/5).
:- det(promote_scratch_entry/5).
:- det(promotion_actions/3).

:- predicate_options(promote_turns/5, 5,
                     [ references(list(integer)), rules(list(text)), namespace(text),
                       embedder(any), min_references(positive_integer),
                       min_threads(integer), stores(dict), as(oneof([prolog, python]))
                     ]).
:- predicate_options(promote_scratch_entry/5, 5,
                     [ namespace(text), min_references(positive_integer), stores(dict),
                       as(oneof([prolog, python]))
                     ]).

%!  promotion_rule(?Rule) is nondet.
%
%   The rules.  Within a turn they apply in the order named,
%   tool_result (a naming's "that" is a reference too), cross_thread.
promotion_rule(tool_result).
promotion_rule(named).
promotion_rule(cross_thread).

%!  promotion_threshold(?Name, ?Value) is nondet.
%
%   The thresholds of the rules:
%
%     - min_references: referencing turns that make a scratch entry durable
%     - min_threads: topic threads a statement must be used in
%     - value_share: share of a statement's concrete values (numbers,
%       identifiers, names) that must recur in the later turn
%     - containment: share of its terms that must recur there (else the
%       sentence cosine decides, similarity_floor/3)
%     - nearest: earlier turns compared with each processed turn
promotion_threshold(min_references, 2).
promotion_threshold(min_threads, 2).
promotion_threshold(value_share, 0.5).
promotion_threshold(containment, 0.7).
promotion_threshold(nearest, 8).

%!  never_promoted(?FreshnessClass) is nondet.
%
%   Readings of these classes have no durable truth value (SPEC-029 §5.4).
never_promoted('REALTIME').
never_promoted('VOLATILE').

%!  naming_role(?Role) is nondet.
%
%   Turns of these roles can name values ("Let's call that ..." from the
%   assistant names nothing).
naming_role(user).

%!  similarity_floor(+TopicSame, +Edge, -Floor) is det.
%
%   The sentence cosine at which a statement whose terms did not recur
%   counts as restated, from the embedder's calibrated thresholds: well
%   above "same topic", and at least its similarity-edge and 0.5.
similarity_floor(TopicSame, Edge, Floor) :-
    Floor is max(Edge, max(2 * TopicSame, 0.5)).

		 /*******************************
		 *          ENTRY POINTS        *
		 *******************************/

%!  promote_turns(+Store, +Session, +Turns, -Promoted:list, +Options) is det.
%
%   Apply the rules to the turns First-Last (Turns) of Session and write
%   what they accept.  Promoted has one dict per fact added (or renamed
%   value updated): rule, fact_id, key, source, scratch_id, turn_id,
%   content, ...; a second call over the same turns gives [].  Options:
%
%     - references(+TurnIds): the turns Last's message resolved to
%     - rules(+Rules): the rules to apply (default: all of promotion_rule/1)
%     - min_references(+N), min_threads(+N): override promotion_threshold/2
%     - namespace(+NS): the CKF namespace (default: the store's default)
%     - embedder(+E): the turn log's embedder (a name; default the default)
%     - stores(+Dict): Python stores to use instead of those beside Store
%       (facts, scratch, turnlog, embedder)
%     - as(+Form): `prolog` (default: dicts of scalar fields) or `python`
%       (the Python list, for Python callers)
%
%   @error domain_error(promotion_rule, R) for an unknown rule
%   @error existence_error(option, Opt) for an option it does not take
%   @error ctxrelay(invalid_argument, Msg) for turns outside the session
promote_turns(Store0, Session, Turns, Promoted, Options) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    (   Turns = First-Last -> true ; type_error(turn_range, Turns) ),
    must_be(integer, First),
    must_be(integer, Last),
    check_options(promote_turns/5, 5, Options),
    settings(Options, Settings),
    option(references(Refs), Options, []),
    must_be(list(integer), Refs),
    option(embedder(Embedder), Options, ""),
    option(namespace(NS), Options, ""),
    option(stores(Stores), Options, _{}),
    findall(R, ( rule_on(named, Settings), naming_role(R) ), Roles),
    (   rule_on(cross_thread, Settings) -> CrossThread = @(true) ; CrossThread = @(false) ),
    PyOptions = _{first:First, last:Last, references:Refs, embedder:Embedder,
                  namespace:NS, stores:Stores, naming_roles:Roles,
                  cross_thread:CrossThread, nearest:Settings.nearest},
    py_api(py_call_plain('ctxrelay.bridge.knowledge':evidence(Store, Session, PyOptions), Ev),
           session(Session)),
    decide_and_apply(Ev, Settings, Promoted, Options).

%!  promote_scratch_entry(+Store, +Session, +ScratchId, -Promoted:list, +Options) is det.
%
%   Rule `tool_result` for one scratch entry, e.g. right after it was
%   pinned.  Options: namespace(NS), min_references(N), stores(Dict) and
%   as(Form), as for promote_turns/5.
promote_scratch_entry(Store0, Session, Id, Promoted, Options) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    must_be(text, Id),
    check_options(promote_scratch_entry/5, 5, Options),
    settings([rules([tool_result])|Options], Settings),
    option(namespace(NS), Options, ""),
    option(stores(Stores), Options, _{}),
    py_api(py_call_plain('ctxrelay.bridge.knowledge':entry_evidence(
                             Store, Session, Id, _{namespace:NS, stores:Stores}), Ev),
           session(Session)),
    entries_assoc(Ev.entries, Entries),
    text_to_string(Id, Sid),
    (   tool_result(Sid, Entries, Settings)
    ->  Actions = [action{do:promote, rule:tool_result, scratch_id:Sid, at_turn:Ev.at_turn}]
    ;   Actions = []
    ),
    call_cleanup(apply_actions(Ev, Actions, Promoted, Options), free_handle(Ev)).

decide_and_apply(Ev, Settings, Promoted, Options) :-
    call_cleanup(( actions(Ev, Settings, Actions),
                   apply_actions(Ev, Actions, Promoted, Options) ),
                 free_handle(Ev)).

%   apply_actions(+Evidence, +Actions, -Promoted, +Options)
%   Nothing accepted, nothing to write: no crossing.
apply_actions(Ev, Actions, Promoted, Options) :-
    option(as(As0), Options, prolog),
    atom_string(As, As0),
    (   Actions == []
    ->  (   As == python -> py_call(builtins:list(), Promoted, [py_object(true)]) ; Promoted = [] )
    ;   As == python
    ->  py_api(py_call('ctxrelay.bridge.knowledge':apply(Ev.handle, Actions, @false),
                       Promoted, [py_object(true)]))
    ;   py_api(py_call_plain('ctxrelay.bridge.knowledge':apply(Ev.handle, Actions, @true),
                             Promoted))
    ).

free_handle(Ev) :-
    (   get_dict(handle, Ev, H), is_py_object(H) -> py_free(H) ; true ).

is_py_object(X) :-
    blob(X, Type),
    Type \== text,
    Type \== reserved_symbol.

		 /*******************************
		 *           SETTINGS           *
		 *******************************/

%   settings(+Options, -Settings)
%   The rules and thresholds of one call: promotion_threshold/2 with the
%   overrides of Options.
settings(Options, Settings) :-
    findall(R, promotion_rule(R), AllRules),
    option(rules(Rules0), Options, AllRules),
    must_be(list, Rules0),
    maplist(rule_name, Rules0, Rules),
    threshold(min_references, Options, MinRefs),
    must_be(positive_integer, MinRefs),
    threshold(min_threads, Options, MinThreads),
    must_be(integer, MinThreads),
    (   MinThreads >= 2 -> true ; domain_error(min_threads_at_least_2, MinThreads) ),
    threshold(value_share, Options, Share),
    threshold(containment, Options, Containment),
    threshold(nearest, Options, Nearest),
    Settings = settings{rules:Rules, min_references:MinRefs, min_threads:MinThreads,
                        value_share:Share, containment:Containment, nearest:Nearest}.

threshold(Name, Options, Value) :-
    Opt =.. [Name, Value],
    (   option(Opt, Options) -> true ; once(promotion_threshold(Name, Value)) ).

rule_name(R0, R) :-
    must_be(text, R0),
    atom_string(R, R0),
    (   promotion_rule(R)
    ->  true
    ;   findall(K, promotion_rule(K), Known),
        atomic_list_concat(Known, ', ', KnownText),
        format(string(Msg), "unknown promotion rule ~w; choose from ~w", [R, KnownText]),
        throw(error(domain_error(promotion_rule, R0), context(_, Msg)))
    ).

rule_on(Rule, Settings) :-
    memberchk(Rule, Settings.rules).


		 /*******************************
		 *            DECIDE            *
		 *******************************/

%!  promotion_actions(+Evidence:dict, -Actions:list(dict), +Options) is det.
%
%   What the rules decide on Evidence (as ctxrelay.knowledge.promotion's
%   `evidence` gives it), in the order it is to be carried out: `reference`
%   actions (scratch_id, turn_id) and `promote` actions (rule, at_turn, and
%   scratch_id, name, value, from_turn or statement); each is a dict
%   whose key `do` says which.  Options as for
%   promote_turns/5 (rules, min_references, min_threads).  A statement
%   that needs its sentence cosine and has none (key `similarity`) has it
%   computed through Evidence.handle, and so has the antecedent of a
%   naming's "that" (a turn's key `antecedent`).
promotion_actions(Evidence, Actions, Options) :-
    must_be(dict, Evidence),
    must_be(list, Options),
    settings(Options, Settings),
    actions(Evidence, Settings, Actions).

actions(Ev, Settings, Actions) :-
    turn_namings(Ev, Settings, Turns, MoreEntries),
    append(Ev.entries, MoreEntries, AllEntries),
    entries_assoc(AllEntries, Entries),
    similarity_context(Ev, Settings, Sim),
    turns_actions(Turns, Settings, Sim, Entries, Actions, []).

%   turn_namings(+Evidence, +Settings, -Turns, -Entries)
%
%   The turns with their naming phrases (key `namings`, parsed for the
%   roles that name values) and, for those with a "that", its antecedent
%   (key `antecedent`): asked of Python in one call, and only then, with
%   the scratch entries it names.
turn_namings(Ev, S, Turns, Entries) :-
    maplist(add_namings(S), Ev.turns, Turns0),
    findall(Tid, ( member(T, Turns0), \+ get_dict(antecedent, T, _),
                   memberchk(naming(_, none, _, _), T.namings), Tid = T.turn_id ),
            Wanted),
    (   Wanted \== [],
        get_dict(handle, Ev, H)
    ->  py_api(py_call_plain('ctxrelay.bridge.knowledge':antecedents(H, Wanted), Found)),
        Entries = Found.entries,
        maplist(add_antecedent(Found.antecedents), Turns0, Turns)
    ;   Entries = [],
        Turns = Turns0
    ).

add_namings(S, T0, T) :-
    atom_string(Role, T0.role),
    (   rule_on(named, S),
        naming_role(Role)
    ->  namings(T0.content, Ns)
    ;   Ns = []
    ),
    T = T0.put(namings, Ns).

add_antecedent(Found, T0, T) :-
    (   member([Tid, A], Found),
        Tid =:= T0.turn_id
    ->  T = T0.put(antecedent, A)
    ;   T = T0
    ).

turns_actions([], _, _, _, As, As).
turns_actions([T|Ts], S, Sim, E0, As0, As) :-
    turn_actions(T, S, Sim, E0, E1, As0, As1),
    turns_actions(Ts, S, Sim, E1, As1, As).

%   turn_actions(+Turn, +Settings, +Sim, +Entries0, -Entries, -As0, +As)
%
%   One turn: its namings, then the references it makes (recorded on
%   the entries this session knows), then the tool results it makes
%   durable, then the statements it reuses from other threads.
turn_actions(T, S, Sim, E0, E, As0, As) :-
    Tid = T.turn_id,
    atom_string(Role, T.role),
    own(T, Own),
    dict_ids(T.mentions, Mentioned),
    append(Mentioned, T.via_turns, Ids0),
    exclude(==(Own), Ids0, Ids1),
    naming_actions(T, E0, NamedIds, As0, As1),
    append(Ids1, NamedIds, Ids2),
    list_to_set(Ids2, Touched),
    include(known(E0), Touched, Known),
    reference_actions(Known, Tid, As1, As2),
    foldl(add_reference(Tid), Known, E0, E),
    (   rule_on(tool_result, S)
    ->  (   Role == tool, Own \== none, known(E, Own)
        ->  append(Known, [Own], Candidates)
        ;   Candidates = Known
        ),
        tool_result_actions(Candidates, Tid, E, S, As2, As3)
    ;   As3 = As2
    ),
    (   rule_on(cross_thread, S)
    ->  reuse_actions(T.reuses, Tid, S, Sim, As3, As)
    ;   As = As3
    ).

%   Scratch ids are strings, as the evidence gives them; `none` is no id.
own(T, Own) :-
    (   get_dict(own, T, Own0), string(Own0) -> Own = Own0 ; Own = none ).

dict_ids(Dicts, Ids) :-
    findall(Id, ( member(D, Dicts), Id = D.scratch_id ), Ids).

reference_actions([], _, As, As).
reference_actions([Sid|Sids], Tid, [action{do:reference, scratch_id:Sid, turn_id:Tid}|As0], As) :-
    reference_actions(Sids, Tid, As0, As).

tool_result_actions([], _, _, _, As, As).
tool_result_actions([Sid|Sids], Tid, E, S, As0, As) :-
    (   tool_result(Sid, E, S)
    ->  As0 = [action{do:promote, rule:tool_result, scratch_id:Sid, at_turn:Tid}|As1]
    ;   As1 = As0
    ),
    tool_result_actions(Sids, Tid, E, S, As1, As).

%   tool_result(+ScratchId, +Entries, +Settings) is semidet.
%   Pinned, or referenced by enough turns; never a volatile reading.
tool_result(Sid, Entries, S) :-
    get_assoc(Sid, Entries, entry(Pinned, Class, Refs)),
    \+ never_promoted(Class),
    (   Pinned == true
    ->  true
    ;   length(Refs, N),
        N >= S.min_references
    ).

%   entries_assoc(+Entries, -Assoc): scratch id -> entry(Pinned, Class, Refs)
entries_assoc(Entries, Assoc) :-
    findall(Sid-entry(Pinned, Class, Refs),
            ( member(D, Entries),
              text_to_string(D.scratch_id, Sid),
              Pinned = D.pinned,
              reading_class(D.freshness, Class),
              sort(D.referenced_by, Refs)
            ),
            Pairs0),
    sort(1, @<, Pairs0, Pairs),             % an entry read twice is one entry
    list_to_assoc(Pairs, Assoc).

known(Entries, Sid) :-
    get_assoc(Sid, Entries, _).

add_reference(Tid, Sid, E0, E) :-
    get_assoc(Sid, E0, entry(P, C, Refs0)),
    ord_add_element(Refs0, Tid, Refs),
    put_assoc(Sid, E0, entry(P, C, Refs), E).

%   reading_class(+Freshness, -Class): a reading without a class counts
%   as VOLATILE (its caller never said it is durable).
reading_class(F, Class) :-
    (   ( F == @(none) ; F == "" ; F == null )
    ->  Class = 'VOLATILE'
    ;   text_to_string(F, S),
        string_upper(S, U),
        atom_string(Class, U)
    ).

volatile_class(F) :-
    reading_class(F, Class),
    never_promoted(Class).

%   relays_volatile(+Turn): an assistant turn right after a volatile
%   reading's tool turns relays it.
relays_volatile(D) :-
    D.after_tool == true,
    volatile_class(D.tool_freshness).

		 /*******************************
		 *             NAMED            *
		 *******************************/

%   naming_actions(+Turn, +Entries, -Referenced, -As0, +As)
naming_actions(T, E, Referenced, As0, As) :-
    namings_actions(T.namings, T, E, Referenced, As0, As).

namings_actions([], _, _, [], As, As).
namings_actions([N|Ns], T, E, Refs, As0, As) :-
    naming_action(N, T, E, Refs, Refs1, As0, As1),
    namings_actions(Ns, T, E, Refs1, As1, As).

naming_action(naming(Name, Value, _, _), T, _, Refs, Refs, As0, As) :-
    Value \== none,
    !,
    As0 = [action{do:promote, rule:named, name:Name, value:Value, at_turn:T.turn_id}|As].
naming_action(naming(Name, none, Start, _), T, E, Refs0, Refs, As0, As) :-
    get_dict(antecedent, T, A),
    is_dict(A),
    !,
    antecedent_scratch(T, A, Start, Sid),
    (   Sid \== none
    ->  (   get_assoc(Sid, E, entry(_, Class, _))
        ->  true
        ;   reading_class(A.freshness, Class)
        ),
        (   never_promoted(Class)
        ->  Refs0 = Refs, As0 = As
        ;   Refs0 = [Sid|Refs],
            As0 = [action{do:promote, rule:named, name:Name, scratch_id:Sid, from_turn:A.turn_id,
                           at_turn:T.turn_id}|As]
        )
    ;   A.role == "assistant", relays_volatile(A)
    ->  Refs0 = Refs, As0 = As
    ;   A.value == ""
    ->  Refs0 = Refs, As0 = As
    ;   Refs0 = Refs,
        As0 = [action{do:promote, rule:named, name:Name, from_turn:A.turn_id, at_turn:T.turn_id}|As]
    ).
naming_action(_, _, _, Refs, Refs, As, As).      % "that" points at nothing

%   antecedent_scratch(+Turn, +Antecedent, +Start, -ScratchId)
%   The tool output "that" names: a scratch id the naming turn names
%   before the phrase, else the previous turn's tool output, else the
%   last scratch id the previous turn names; `none` when there is none.
antecedent_scratch(T, A, Start, Sid) :-
    findall(Id, ( member(M, T.mentions), M.end =< Start, Id = M.scratch_id ), Before),
    (   last(Before, Sid0)
    ->  Sid = Sid0
    ;   A.role == "tool"
    ->  (   string(A.scratch_id) -> Sid = A.scratch_id ; Sid = none )
    ;   last(A.mentions, Last)
    ->  Sid = Last
    ;   Sid = none
    ).

		 /*******************************
		 *         CROSS THREAD         *
		 *******************************/

%   reuse_actions(+Origins, +TurnId, +Settings, +Sim, -As0, +As)
%
%   The earlier turns come best first; a statement that the ones already
%   taken from this turn contain (a weaker restatement of the same fact)
%   is not taken again.
reuse_actions(Origins, Tid, S, Sim, As0, As) :-
    foldl(origin_actions(Tid, S, Sim), Origins, []-As0, _-As).

origin_actions(Tid, S, Sim, O, Taken0-As0, Taken-As) :-
    (   origin_qualifies(O, S)
    ->  foldl(statement_action(Tid, S, Sim), O.statements, Taken0-As0, Taken-As)
    ;   Taken = Taken0, As = As0
    ).

origin_qualifies(O, S) :-
    length(O.threads, NThreads),
    NThreads >= S.min_threads,
    \+ ( O.origin_role == "assistant", relays_volatile(O) ).

statement_action(Tid, S, Sim, St, Taken0-As0, Taken-As) :-
    (   statement_reused(St, S, Sim),
        \+ taken_contains(St.terms, Taken0, S)
    ->  ord_union(Taken0, St.terms, Taken),
        As0 = [action{do:promote, rule:cross_thread, statement:St.id, at_turn:Tid}|As]
    ;   Taken = Taken0, As0 = As
    ).

%   statement_reused(+Statement, +Settings, +Sim) is semidet.
statement_reused(St, S, Sim) :-
    statement_values_recur(St, S),
    (   St.containment >= S.containment
    ->  true
    ;   statement_similarity(St, Sim, Cos),
        Cos >= Sim.floor
    ).

statement_values_recur(St, S) :-
    St.value_share >= S.value_share,
    St.numbers_recur == true.

taken_contains(Terms, Taken, S) :-
    Taken \== [],
    length(Terms, N),
    N > 0,
    ord_intersection(Terms, Taken, Common),
    length(Common, C),
    C / N >= S.containment.

statement_similarity(St, Sim, Cos) :-
    (   get_dict(similarity, St, Cos0)
    ->  Cos = Cos0
    ;   get_assoc(St.id, Sim.cosines, Cos)
    ).

%   similarity_context(+Evidence, +Settings, -Sim)
%
%   The cosine floor, and the cosines of the statements whose values
%   recur but whose terms do not settle the rule: asked of Python in one
%   call, and only for those.
similarity_context(Ev, S, sim{floor:Floor, cosines:Cosines}) :-
    (   get_dict(similarity, Ev, T), is_dict(T)
    ->  similarity_floor(T.topic_same, T.edge, Floor)
    ;   Floor = 1.0
    ),
    (   rule_on(cross_thread, S),
        findall(Id, open_statement(Ev, S, Id), Ids),
        Ids \== [],
        get_dict(handle, Ev, H)
    ->  py_api(py_call('ctxrelay.bridge.knowledge':similarities(H, Ids), Pairs)),
        findall(Id-Cos, member([Id, Cos], Pairs), KVs),
        list_to_assoc(KVs, Cosines)
    ;   empty_assoc(Cosines)
    ).

open_statement(Ev, S, Id) :-
    member(T, Ev.turns),
    member(O, T.reuses),
    origin_qualifies(O, S),
    member(St, O.statements),
    statement_values_recur(St, S),
    St.containment < S.containment,
    \+ get_dict(similarity, St, _),
    Id = St.id.
