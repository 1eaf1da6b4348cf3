:- module(ctxrelay_context,
          [ context/3,              % +Source, +Operation, -Result
            context/4,              % +Source, +Operation, -Result, +Options
            with_input_context/3    % +Store, +Session, :Goal
          ]).
:- use_module(library(janus)).
:- use_module(library(error)).
:- use_module(library(option)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(errors).
:- use_module(options).
:- use_module(store).

/** <module> Cold history: bounded, lazy access to the whole transcript

The managed runtime keeps only a bounded pack in front of the model; the
rest of the transcript stays addressable through context/3.  Every
operation reads only what it asks for from LMDB and is bounded in items
and tokens; a result cut by a bound says `truncated: true`.

Turn positions are 1-based turn ids everywhere: peek(item(1)) is the first
turn and slice(1, 3) is turns 1, 2 and 3.
*/

:- meta_predicate with_input_context(+, +, 0).

:- thread_local input_context_/2.

:- predicate_options(context/4, 4,
                     [ max_items(positive_integer), max_tokens(positive_integer),
                       k(positive_integer), as(oneof([solutions, list])),
                       store(any)
                     ]).

default_max_items(20).
default_max_tokens(4000).

%!  with_input_context(+Store, +Session, :Goal)
%
%   Run Goal with `input(context)` naming Session of Store.  The
%   managed runtime wraps assembly in it; an agent can scope a session
%   itself the same way.
with_input_context(Store, Session, Goal) :-
    must_be(text, Session),
    setup_call_cleanup(asserta(input_context_(Store, Session), Ref),
                       Goal,
                       erase(Ref)).

%!  context(+Source, +Operation, -Result) is nondet.
%!  context(+Source, +Operation, -Result, +Options) is nondet.
%
%   Source is input(context) (the session of the current managed turn,
%   or of with_input_context/3) or session(Id) (in the default store, or
%   the one given by option store(S)).  Operation is one of:
%
%     - peek(item(I)): Result is turn I (a dict)
%     - peek(head(N)), peek(tail(N)): the first / last N turns
%     - peek(text(I, Start, Length)): characters Start.. of turn I's text
%       (at most 4 per max_tokens), for turns too long to read whole:
%       Result is text{turn_id, start, length, total_length, text, more}
%     - slice(Start, Length): turns Start .. Start+Length-1 (clipped at
%       the end of the conversation)
%     - search(Query): BM25-ranked hits, one per solution on
%       backtracking, or all in one result with option as(list)
%
%   List results are dicts context{items:Items, truncated:Bool,
%   total_turns:N, tokens:T}.  Options: max_items(N) (default 20),
%   max_tokens(N) (default 4000; the sum of the items' stored token
%   counts), k(K) search hits (default 10), as(solutions|list).
%
%   @error domain_error(context_operation, Op) for an unknown operation
%   @error domain_error(context_source, Source) for an unknown source
%   @error existence_error(input_context, context) outside a managed turn
%   @error existence_error(turn, Session-I) for a position past the end
%   @error type_error(positive_integer, X) for a bad position or count

context(Source, Operation, Result) :-
    context(Source, Operation, Result, []).

context(Source, Operation, Result, Options) :-
    check_options(context/4, 4, Options),
    source_store_session(Source, Options, Store, Session),
    must_be(nonvar, Operation),
    context_(Operation, Store, Session, Result, Options).

source_store_session(Source, _, _, _) :-
    var(Source),
    !,
    instantiation_error(Source).
source_store_session(input(context), _, Store, Session) :-
    !,
    (   input_context_(Store, Session)
    ->  true
    ;   existence_error(input_context, context)
    ).
source_store_session(session(Session), Options, Store, Session) :-
    !,
    must_be(text, Session),
    (   option(store(Store0), Options) -> true ; Store0 = default ),
    store_ref(Store0, Store).
source_store_session(Source, _, _, _) :-
    domain_error(context_source, Source).


context_(peek(What), Store, Session, Result, Options) :-
    !,
    must_be(nonvar, What),
    peek(What, Store, Session, Result, Options).
context_(slice(Start, Length), Store, Session, Result, Options) :-
    !,
    must_be(positive_integer, Start),
    must_be(positive_integer, Length),
    turn_count(Store, Session, Count),
    (   Start =< Count
    ->  true
    ;   existence_error(turn, Session-Start)
    ),
    limits(Options, MaxItems, MaxTokens),
    End0 is Start + Length - 1,
    End is min(End0, min(Count, Start + MaxItems - 1)),
    transcript_history(Store, Session, Start-End, Turns),
    bounded(Turns, MaxTokens, Items, Truncated0),
    (   End < min(End0, Count) -> Truncated = true ; Truncated = Truncated0 ),
    list_result(Items, Truncated, Count, Result).
context_(search(Query), Store, Session, Result, Options) :-
    !,
    must_be(text, Query),
    option(k(K), Options, 10),
    must_be(positive_integer, K),
    transcript_search(Store, Session, Query, Hits, [k(K)]),
    (   option(as(list), Options)
    ->  limits(Options, MaxItems, MaxTokens),
        take(MaxItems, Hits, Hits1, Cut),
        bounded(Hits1, MaxTokens, Items, Truncated0),
        (   Cut == true -> Truncated = true ; Truncated = Truncated0 ),
        turn_count(Store, Session, Count),
        list_result(Items, Truncated, Count, Result)
    ;   member(Result, Hits)
    ).
context_(Operation, _, _, _, _) :-
    domain_error(context_operation, Operation).

peek(item(I), Store, Session, Turn, _Options) :-
    !,
    must_be(positive_integer, I),
    turn_get(Store, Session, I, Turn).
peek(head(N), Store, Session, Result, Options) :-
    !,
    must_be(positive_integer, N),
    context_(slice(1, N), Store, Session, Result, Options).
peek(tail(N), Store, Session, Result, Options) :-
    !,
    must_be(positive_integer, N),
    limits(Options, MaxItems, MaxTokens),
    Take is min(N, MaxItems),
    transcript_history(Store, Session, last(Take), Turns),
    turn_count(Store, Session, Count),
    reverse(Turns, Newest),            % keep the newest when tokens run out
    bounded(Newest, MaxTokens, Kept, Truncated0),
    reverse(Kept, Items),
    (   Take < min(N, Count) -> Truncated = true ; Truncated = Truncated0 ),
    list_result(Items, Truncated, Count, Result).
peek(text(I, Start, Length), Store, Session, Result, Options) :-
    !,
    must_be(positive_integer, I),
    must_be(nonneg, Start),
    must_be(positive_integer, Length),
    limits(Options, _, MaxTokens),
    turn_get(Store, Session, I, Turn),
    string_length(Turn.content, Total),
    Max is MaxTokens * 4,                  % characters: a generous 4 per token
    Take is max(0, min(min(Length, Max), Total - min(Start, Total))),
    From is min(Start, Total),
    sub_string(Turn.content, From, Take, _, Text),
    Next is From + Take,
    (   Next < Total -> More = true ; More = false ),
    Result = text{turn_id:I, start:From, length:Take, total_length:Total, text:Text,
                  more:More}.
peek(What, _, _, _, _) :-
    domain_error(context_operation, peek(What)).

limits(Options, MaxItems, MaxTokens) :-
    default_max_items(DI),
    default_max_tokens(DT),
    option(max_items(MaxItems), Options, DI),
    must_be(positive_integer, MaxItems),
    option(max_tokens(MaxTokens), Options, DT),
    must_be(positive_integer, MaxTokens).

%   bounded(+Items, +MaxTokens, -Kept, -Truncated)
%
%   Keep the longest prefix whose token total fits MaxTokens.  Every item
%   (a turn or a search hit) carries its stored token count: the store
%   counts (or, for an unknown tokenizer, estimates) each turn once, so
%   no estimate is made here.
bounded(Items, MaxTokens, Kept, Truncated) :-
    bounded_(Items, 0, MaxTokens, Kept, Truncated).

bounded_([], _, _, [], false).
bounded_([Item|Items], Used, Max, Kept, Truncated) :-
    item_tokens(Item, T),
    Used1 is Used + T,
    (   Used1 =< Max
    ->  Kept = [Item|Rest],
        bounded_(Items, Used1, Max, Rest, Truncated)
    ;   Kept = [],
        Truncated = true
    ).

item_tokens(Item, T) :-
    get_dict(tokens, Item, T).

take(N, List, Taken, Cut) :-
    length(List, Len),
    (   Len =< N
    ->  Taken = List, Cut = false
    ;   length(Taken, N), append(Taken, _, List), Cut = true
    ).

list_result(Items, Truncated, Count, context{items:Items, truncated:Truncated,
                                             total_turns:Count, tokens:Tokens}) :-
    foldl([I, T0, T]>>(item_tokens(I, X), T is T0 + X), Items, 0, Tokens).
