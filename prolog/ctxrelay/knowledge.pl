:- module(ctxrelay_knowledge,
          [ fact_add/4,             % +Store, +Content, -FactId, +Options
            facts_search/4,         % +Store, +Query, -Facts, +Options
            fact_get/4,             % +Store, +KeyOrId, -Fact, +Options
            knowledge_ingest/4,     % +Store, +Sources, -Report, +Options
            knowledge_reindex/3     % +Store, -Report, +Options
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(apply)).
:- use_module(errors).
:- use_module(options).
:- use_module(store).

/** <module> Persistent knowledge (Tier P): the Contextual Knowledge Fabric

Facts live in the CKF beside the transcript (<store>/ckf): LMDB records,
an HNSW index per namespace, similarity edges and Leiden communities.
These predicates are the Prolog face of ctxrelay.knowledge.fabric.FactStore.
*/

:- predicate_options(fact_add/4, 4,
                     [key(text), source(text), importance(number), ttl(any),
                      namespace(text), metadata(any)]).
:- predicate_options(facts_search/4, 4, [k(positive_integer), namespace(text)]).
:- predicate_options(fact_get/4, 4, [namespace(text), as(oneof([dict, python]))]).
:- predicate_options(knowledge_ingest/4, 4,
                     [namespace(text), source_type(text), progress(boolean)]).
:- predicate_options(knowledge_reindex/3, 3, [namespace(text)]).

%!  fact_add(+Store, +Content, -FactId, +Options) is det.
%
%   Store a fact.  Options: key(Name) (exact lookup later), source(S),
%   importance(0..1), ttl(TTL) (an ISO 8601 duration such as "P90D", seconds
%   as a number, or none; the CKF checks it), namespace(NS), metadata(Dict).
fact_add(Store0, Content, Id, Options) :-
    check_options(fact_add/4, 4, Options),
    store_ref(Store0, Store),
    must_be(text, Content),
    text_to_string(Content, C),
    option_dict(Options, [key, source, importance, ttl, namespace, metadata], Opts),
    py_api(py_call_plain('ctxrelay.bridge.stores':add_fact(Store, C, Opts), Id)).

%!  facts_search(+Store, +Query, -Facts:list(dict), +Options) is det.
%
%   The K facts most similar to Query (k(K), default 10; namespace(NS)).
facts_search(Store0, Query, Facts, Options) :-
    check_options(facts_search/4, 4, Options),
    store_ref(Store0, Store),
    must_be(text, Query),
    option(k(K), Options, 10),
    must_be(positive_integer, K),
    namespace(Options, NS),
    text_to_string(Query, Q),
    py_api(py_call_plain('ctxrelay.bridge.stores':facts(Store, Q, K, NS), Facts)).

%!  fact_get(+Store, +KeyOrId, -Fact:dict, +Options) is det.
%
%   @error ctxrelay(unknown_fact, Msg)
fact_get(Store0, KeyOrId, Fact, Options) :-
    check_options(fact_get/4, 4, Options),
    store_ref(Store0, Store),
    must_be(text, KeyOrId),
    namespace(Options, NS),
    text_to_string(KeyOrId, K),
    (   option(as(python), Options)
    ->  % Python callers take the dict as it is: no conversion either way.
        py_api(py_call('ctxrelay.bridge.stores':fact(Store, K, NS), Fact, [py_object(true)]))
    ;   py_api(py_call_plain('ctxrelay.bridge.stores':fact(Store, K, NS), Fact))
    ).

%!  knowledge_ingest(+Store, +Sources:list, -Report:dict, +Options) is det.
%
%   Sources are text(T) or file(Path) terms (a directory is read
%   recursively); paragraphs become facts.
knowledge_ingest(Store0, Sources, Report, Options) :-
    check_options(knowledge_ingest/4, 4, Options),
    store_ref(Store0, Store),
    must_be(list, Sources),
    maplist(source_dict, Sources, Items),
    option_dict(Options, [namespace, source_type], Opts0),
    (   option(progress(P), Options)
    ->  must_be(boolean, P),
        py_bool(P, PyP),
        Opts = Opts0.put(progress, PyP)
    ;   Opts = Opts0
    ),
    py_api(py_call_plain('ctxrelay.bridge.stores':ingest(Store, Items, Opts), Report)).

%!  knowledge_reindex(+Store, -Report:dict, +Options) is det.
%
%   Rebuild the ANN index of one namespace (namespace(NS)) or of every
%   namespace from the stored vectors of its retrievable facts, inserting
%   on one thread, and snapshot it.  An index is a function of its
%   insertion order, so after this the store's nearest facts are the ones
%   any other copy of it (another back end, another relay) finds; use it
%   on an index grown by an older version on two threads (docs/storage.md).
%   Report: namespaces (those rebuilt), vectors (how many their indexes
%   hold), seconds.  A store
%   without a knowledge base rebuilds nothing.
%
%   @error ctxrelay(invalid_argument, Msg) for a namespace the store lacks
knowledge_reindex(Store0, Report, Options) :-
    check_options(knowledge_reindex/3, 3, Options),
    store_ref(Store0, Store),
    namespace(Options, NS),
    py_api(py_call_plain('ctxrelay.bridge.stores':reindex_facts(Store, NS), Report)).

source_dict(text(T), py{text:S}) :- !, must_be(text, T), text_to_string(T, S).
source_dict(file(P), py{path:S}) :- !, must_be(text, P), text_to_string(P, S).
source_dict(X, _) :- domain_error(knowledge_source, X).

namespace(Options, NS) :-
    (   option(namespace(NS0), Options) -> text_to_string(NS0, NS) ; NS = @none ).

option_dict(Options, Names, Dict) :-
    must_be(list, Options),
    findall(N-V, ( member(N, Names), Opt =.. [N, V], option(Opt, Options) ), Pairs),
    dict_pairs(Dict, py, Pairs).

