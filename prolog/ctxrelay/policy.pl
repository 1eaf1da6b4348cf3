:- module(ctxrelay_policy,
          [ policy/2,               % +Options, -Policy
            policy_option_names/1,  % -Names
            embedded_word_bounds/2, % +ModelId, -Bounds
            % extension points (multifile, dynamic)
            embedded_words/2,       % ?Role, ?Words
            embeds_whole/1          % +ModelId
          ]).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(packer/user, [user_constraints/2]).

/** <module> Token policy: caps, reserve, margin and the input budget

The provider's window is a physical ceiling, not the working target: the
effective cap is min(max_context_tokens, provider_context_tokens), so a
300k operator cap stays 300k on a 1M-token model.  The input budget is
what the provider-visible request may use:

    input_budget = effective_cap - output_reserve - safety_margin

A policy whose budget is not positive is refused (domain_error) before
anything is assembled.
*/

%   option_default(Name, Default, Type)
option_default(max_context_tokens,      8192,   positive_integer).
option_default(provider_context_tokens, auto,   provider_window).
option_default(output_reserve,          1024,   nonneg).
option_default(safety_margin,           128,    nonneg).
option_default(min_recent_turns,        4,      nonneg).
option_default(cold_history_boundary,   true,   boolean).
option_default(model,                   "gpt-4", text).
option_default(half_life,               6,      positive_number).
option_default(max_retrieved,           200,    nonneg).
option_default(retrieval,               true,   boolean).
option_default(warm,                    true,   boolean).
option_default(system,                  "",     text).
option_default(provider,                "echo", text).
option_default(provider_options,        _{},    dict).
option_default(key,                     none,   key).
option_default(time_limit,              1.0,    positive_number).
option_default(threads,                 true,   boolean).
option_default(embedder,                "",     text).
option_default(knowledge,               true,   boolean).
option_default(max_facts,               12,     nonneg).
option_default(namespace,               "",     text).
option_default(tier_shares,             true,   boolean).
option_default(mode,                    auto,   context_mode).
option_default(promotion,               true,   boolean).
option_default(alternation,             free,   alternation).
option_default(history_access,          context, history_access).
option_default(constraints,             [],     pack_constraints).

%!  embedded_words(?Role, ?Words) is nondet.
%
%   The vector of a stored turn of Role (its turn-log embedding: topic
%   thread, dense recall, promotion's evidence) is computed from its first
%   Words words only (a word is a run of letters, digits or underscores;
%   the text up to the end of the Words-th word is embedded).  A role
%   without a clause is embedded whole, up to what the embedder reads
%   (MiniLM: 256 word pieces).
%
%   The default bounds the assistant's reply: its embedding is the one
%   piece of a relay turn's CPU that grows with the reply (about 0.35 ms a
%   word piece with minilm-onnx, twice an assembly for a 200-piece reply),
%   and a reply's leading words name what it is about.  The whole reply
%   stays stored, searchable (BM25 reads it all) and packed as it is; only
%   its vector reads less.  Measured in docs/latency.md (CPU) and with the
%   LoCoMo and threads benches (quality).
%
%   Changed like the promotion thresholds, e.g.
%
%       ?- retractall(ctxrelay_policy:embedded_words(assistant, _)),
%          assertz(ctxrelay_policy:embedded_words(assistant, 64)).
%
%   A change applies to the turns derived from then on; turnlog_derive/3
%   with recompute(true) derives a session's turns again under the rule
%   in force.
:- multifile embedded_words/2, embeds_whole/1.
:- dynamic embedded_words/2, embeds_whole/1.

embedded_words(assistant, 24).

%!  embeds_whole(+ModelId) is semidet.
%
%   The embedders (by the model id of their vector space) that embedded_words/2
%   does not apply to.  Feature hashing embeds a whole reply in under a
%   millisecond, so a bound saves nothing there and loses recall (LoCoMo at
%   2,048 tokens: 0.779 whole, 0.766 with replies' first 24 words).
embeds_whole(ModelId) :-
    string_concat("hashing-", _, ModelId).

%!  embedded_word_bounds(+ModelId, -Bounds:list) is det.
%
%   Bounds is a list of [Role, Words] (Role a string, Words a positive
%   integer), one per role with a bound under the embedder ModelId: the
%   first clause of embedded_words/2 for a role counts, and none when
%   embeds_whole(ModelId).  What the turn log's derivation reads
%   (ctxrelay.text.bounds.embedding_bounds).
%
%   @error type_error(positive_integer, Words) for a bound that is not one
embedded_word_bounds(ModelId, []) :-
    must_be(text, ModelId),
    embeds_whole(ModelId),
    !.
embedded_word_bounds(_, Bounds) :-
    findall(Role-Words, embedded_words(Role, Words), Pairs),
    foldl(first_bound, Pairs, [], Bounds0),
    reverse(Bounds0, Bounds).

first_bound(Role0-Words, Seen, Out) :-
    must_be(positive_integer, Words),
    must_be(text, Role0),
    atom_string(Role0, Role),
    (   memberchk([Role, _], Seen)
    ->  Out = Seen
    ;   Out = [[Role, Words]|Seen]
    ).

%!  policy_option_names(-Names) is det.
policy_option_names(Names) :-
    findall(N, option_default(N, _, _), Names).

%!  policy(+Options, -Policy:dict) is det.
%
%   Validate Options (see option_default/3 for names and defaults) and
%   compute the effective cap and input budget.
%
%   @error domain_error(policy_option, Opt) for an unknown option
%   @error type_error(Type, Value) for a value of the wrong type
%   @error domain_error(positive_input_budget, Figures) when reserve and
%          margin leave nothing for the input

policy(Options, Policy) :-
    ground(Options),
    term_hash(Options, Hash),
    policy_memo(Hash, Options, Policy0),
    !,
    Policy = Policy0.
policy(Options, Policy) :-
    policy_(Options, Policy),
    (   ground(Options)
    ->  term_hash(Options, Hash),
        remember_policy(Hash, Options, Policy)
    ;   true
    ).

%   A policy is a function of its options and every turn of a session
%   passes the same ones: the last few are kept (bounded) rather than
%   checked and derived again on each turn.
:- dynamic policy_memo/3.

remember_policy(Hash, Options, Policy) :-
    (   predicate_property(policy_memo(_, _, _), number_of_clauses(N)), N >= 64
    ->  retractall(policy_memo(_, _, _))
    ;   true
    ),
    assertz(policy_memo(Hash, Options, Policy)).

policy_(Options, Policy) :-
    must_be(list, Options),
    maplist(known_option, Options),
    findall(Name-Value, option_value(Options, Name, Value), Pairs),
    dict_create(P0, policy, Pairs),
    provider_window(P0.provider_context_tokens, P0.model, Provider),
    Cap is min(P0.max_context_tokens, Provider),
    Budget is Cap - P0.output_reserve - P0.safety_margin,
    (   Budget > 0
    ->  true
    ;   domain_error(positive_input_budget,
                     budget{effective_cap:Cap, output_reserve:P0.output_reserve,
                            safety_margin:P0.safety_margin})
    ),
    Policy = P0.put(_{provider_context_tokens:Provider, effective_cap:Cap,
                      input_budget:Budget}).

known_option(Opt) :-
    must_be(compound, Opt),
    (   Opt = (Name = _) -> true ; functor(Opt, Name, 1) ),
    (   option_default(Name, _, _)
    ->  true
    ;   domain_error(policy_option, Opt)
    ).

option_value(Options, Name, Value) :-
    option_default(Name, Default, Type),
    Opt =.. [Name, Value0],
    option(Opt, Options, Default),
    check_type(Type, Name, Value0, Value).

check_type(any, _, V, V) :- !.
%   An idempotency key is non-empty text; `none` (the default) means no key.
%   An unbound one is an error: taken as `none`, it would make a caller's
%   keyed (retry-safe) turn an unkeyed one, and a retry would store it twice.
%   An empty one is refused as turn_append/5 and the relay refuse it (its
%   parts' keys would be ":user" and ":assistant", shared by every empty key).
check_type(key, _, V, V) :- V == none, !.
check_type(key, _, V0, V) :-
    !,
    must_be(text, V0),
    text_to_string(V0, V),
    (   V == ""
    ->  domain_error(idempotency_key, V0)
    ;   true
    ).
check_type(pack_constraints, _, V0, V) :- !, user_constraints(V0, V).
check_type(provider_window, _, auto, auto) :- !.
check_type(context_mode, _, V0, V) :-
    !,
    must_be(text, V0),
    atom_string(V, V0),
    (   memberchk(V, [auto, conversation, document, hybrid])
    ->  true
    ;   domain_error(context_mode, V0)
    ).
check_type(alternation, _, V0, V) :-
    !,
    must_be(text, V0),
    atom_string(V, V0),
    (   memberchk(V, [free, strict])
    ->  true
    ;   domain_error(alternation, V0)
    ).
check_type(history_access, _, V0, V) :-
    !,
    must_be(text, V0),
    atom_string(V, V0),
    (   memberchk(V, [context, tools, none])
    ->  true
    ;   domain_error(history_access, V0)
    ).
check_type(provider_window, _, V, V) :- !, must_be(positive_integer, V).
check_type(text, _, V0, V) :- !, must_be(text, V0), text_to_string(V0, V).
check_type(positive_number, _, V, V) :-
    !,
    must_be(number, V),
    (   V > 0 -> true ; domain_error(positive_number, V) ).
check_type(Type, _, V, V) :-
    must_be(Type, V).

%   provider_window(+Given, +Model, -Window)
%
%   `auto` takes the model's published window when it is known here and
%   otherwise no ceiling beyond the operator cap.
provider_window(auto, Model, Window) :-
    !,
    (   model_window(Prefix, W), string_concat(Prefix, _, Model)
    ->  Window = W
    ;   Window = inf
    ).
provider_window(Window, _, Window).

% Longest prefixes first: gpt-4o must not match gpt-4.
model_window("gpt-4o",        128000).
model_window("gpt-4.1",      1047576).
model_window("gpt-4-turbo",   128000).
model_window("gpt-4-32k",      32768).
model_window("gpt-4",           8192).
model_window("gpt-3.5-turbo",  16385).
model_window("o1",            200000).
model_window("o3",            200000).
