:- module(ctxrelay_warm,
          [ warm_publish/5,         % +Store, +Session, +Range, +Summary, -Artifact
            warm_publish/6,         % +Store, +Session, +Range, +Summary, -Artifact, +Options
            warm_artifacts/3        % +Store, +Session, -Artifacts
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(apply)).
:- use_module(errors).
:- use_module(options).
:- use_module(store).

/** <module> Warm artifacts: explicit, versioned summaries of turn ranges

Publishing is the only way an artifact comes to be: a managed turn never
summarises or compacts by itself.  Once a store holds artifacts, assembly
ranks them and offers them to the packer in several representations
(verbatim, detailed, compact, facts_only); the turns an included artifact
covers are not packed twice.  The transcript is never touched.
*/

:- predicate_options(warm_publish/6, 6,
                     [ decisions(list), facts(list), unresolved(list),
                       entities(list), producer(text), key(text), metadata(any)
                     ]).

%!  warm_publish(+Store, +Session, +Range, +Summary, -Artifact) is det.
%!  warm_publish(+Store, +Session, +Range, +Summary, -Artifact, +Options) is det.
%
%   Publish Summary for the turns Start-End (inclusive, 1-based) of
%   Session.  Republishing a range makes a new version.  Options:
%   decisions(List), facts(List), unresolved(List), entities(List) (lists
%   of text), producer(Text), key(Key) (idempotent publication),
%   metadata(Dict).
%
%   @error existence_error(session, Session)
%   @error ctxrelay(unknown_turn, Msg) when End is past the last turn
warm_publish(Store, Session, Range, Summary, Artifact) :-
    warm_publish(Store, Session, Range, Summary, Artifact, []).

warm_publish(Store0, Session, Range, Summary, Artifact, Options) :-
    check_options(warm_publish/6, 6, Options),
    store_ref(Store0, Store),
    must_be(text, Session),
    must_be(nonvar, Range),
    (   Range = Start-End -> true ; type_error(turn_range, Range) ),
    must_be(positive_integer, Start),
    must_be(positive_integer, End),
    must_be(text, Summary),
    must_be(list, Options),
    foldl(publish_option(Options), [decisions, facts, unresolved, entities,
                                    producer, key, metadata], [], Pairs),
    dict_pairs(Opts, py, Pairs),
    text_to_string(Session, S),
    text_to_string(Summary, Sum),
    py_api(py_call_plain('ctxrelay.bridge.stores':publish_artifact(Store, S, Start, End, Sum, Opts), Artifact), session(Session)).

publish_option(Options, Name, Pairs0, Pairs) :-
    Opt =.. [Name, Value],
    (   option(Opt, Options)
    ->  check_publish_option(Name, Value, Value1),
        Pairs = [Name-Value1|Pairs0]
    ;   Pairs = Pairs0
    ).

check_publish_option(Name, Value, Strings) :-
    memberchk(Name, [decisions, facts, unresolved, entities]),
    !,
    must_be(list(text), Value),
    maplist(text_to_string, Value, Strings).
check_publish_option(metadata, Value, Value) :- !.
check_publish_option(_, Value, String) :-
    must_be(text, Value),
    text_to_string(Value, String).

%!  warm_artifacts(+Store, +Session, -Artifacts:list(dict)) is det.
%
%   The latest version of every published range of Session.
%   @error existence_error(session, Session) for an unknown session.
warm_artifacts(Store0, Session, Artifacts) :-
    store_ref(Store0, Store),
    must_be(text, Session),
    text_to_string(Session, S),
    py_api(py_call_plain('ctxrelay.bridge.stores':artifacts(Store, S), Artifacts), session(Session)).

