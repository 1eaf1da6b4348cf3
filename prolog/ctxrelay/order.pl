:- module(ctxrelay_order,
          [ order_pack/4,           % +Selected, +Units, +ById, -Plan
            units_by_id/2,          % +Cands, -ById
            unit_table/2,           % +Units, -Table
            sandwich/2,             % +ScoredItems, -Ordered
            kind_rank/2             % ?Kind, ?Rank
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(assoc)).

/** <module> Order: where each packed unit goes in the request

Instructions first; then the context units in the primacy-recency sandwich
of CRP-SPEC-003 §7.4; then the conversation in chronological order; the new
input last.

Position optimisation: the most important items take the first and last
positions, supporting items the middle, where attention is weakest.  The
pseudocode of §7.4 takes critical[0], critical[-1], then the supporting and
important items, then critical[1:-1]; with one critical item that would
repeat it, and with none it fails.  sandwich/2 implements the same order
without either defect: no critical item -> supporting then important; one
-> it first; two or more -> first, last, supporting, important, the rest of
the critical ones.
*/

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
    sections(Entries, Head0, Context, Conversation0, Tail0),
    sort_entries(Tail0, Tail),
    sort_entries(Head0, Head),
    sort_entries(Conversation0, Conversation),
    context_scores(Context, Units, Scored),
    sandwich(Scored, ContextOrdered),
    append([Head, ContextOrdered, Conversation, Tail], Ordered),
    maplist(entry_step, Ordered, Plan).

entry_step(e(Id, Var, _)-_, [Id, Var]).

%   sections(+Entries, -Head, -Context, -Conversation, -Tail): the entries
%   of each section, in the order of Entries (one pass).
sections([], [], [], [], []).
sections([E|Es], H, C, V, T) :-
    (   entry_section(E, S0) -> S = S0 ; S = none ),      % a kind without a rank: left out
    (   S == none -> H = H1, C = C1, V = V1, T = T1
    ;   S == head -> H = [E|H1], C = C1, V = V1, T = T1
    ;   S == context -> H = H1, C = [E|C1], V = V1, T = T1
    ;   S == conversation -> H = H1, C = C1, V = [E|V1], T = T1
    ;   H = H1, C = C1, V = V1, T = [E|T1]
    ),
    sections(Es, H1, C1, V1, T1).

entry_section(e(_, _, U)-_, S) :-
    atom_string(Kind, U.kind),
    kind_rank(Kind, Rank),
    rank_section(Rank, S).

rank_section(R, head) :- R =< 1, !.
rank_section(R, context) :- R =< 3, !.
rank_section(4, conversation) :- !.
rank_section(_, tail).

sort_entries(Entries, Sorted) :-
    map_list_to_pairs(order_key, Entries, Keyed),
    keysort(Keyed, KS),
    pairs_values(KS, Sorted).

context_scores([], _, []) :- !.
context_scores(Context, Units, Scored) :-
    unit_table(Units, Table),
    maplist(entry_utility(Table), Context, Utilities),
    max_list([1|Utilities], Max),
    maplist(context_score(Table, Max), Context, Utilities, Scored).

entry_utility(Table, e(Id, Var, _)-_, U) :-
    atom_string(VarA, Var),
    (   get_assoc(Id, Table, unit(_, Vs, _)), memberchk(variant(VarA, _, U0), Vs)
    ->  U = U0
    ;   U = 0
    ).

context_score(Table, Max, Entry, Utility, Score-Entry) :-
    Entry = e(Id, _, _)-_,
    (   get_assoc(Id, Table, unit(_, _, Props)), memberchk(mandatory(true), Props)
    ->  Score = 1.0
    ;   Score is Utility / Max
    ).

%!  unit_table(+Units, -Table) is det.
%
%   The packer's units (unit(Id, Variants, Props)) by id, as an assoc:
%   the first unit of an id wins, as member/2 would find it (pack/5
%   allows no duplicate ids anyway).
unit_table(Units, Table) :-
    unit_pairs(Units, Pairs0),
    keysort(Pairs0, Pairs1),                % stable: the first unit of an id wins
    first_of_each_key(Pairs1, Pairs),
    ord_list_to_assoc(Pairs, Table).

unit_pairs([], []).
unit_pairs([U|Us], [Id-U|Ps]) :-
    arg(1, U, Id),
    unit_pairs(Us, Ps).

unit_by_id(ById, Id-Variant, e(Id, VarS, U)-U) :-
    atom_string(Variant, VarS),
    get_assoc(Id, ById, U).

%   The candidate units by id, for lookups by the selected ids (a pack
%   selects tens of the hundreds of candidates).
units_by_id(Cands, ById) :-
    id_pairs(Cands.units, Pairs0),          % not findall/3: no copy of each unit
    keysort(Pairs0, Pairs1),                % stable: the first unit of an id wins
    first_of_each_key(Pairs1, Pairs),
    ord_list_to_assoc(Pairs, ById).

id_pairs([], []).
id_pairs([U|Us], Pairs) :-
    (   get_dict(id, U, Id)
    ->  Pairs = [Id-U|Pairs1]
    ;   Pairs = Pairs1
    ),
    id_pairs(Us, Pairs1).

first_of_each_key([], []).
first_of_each_key([K-V|T0], [K-V|T]) :-
    skip_key(T0, K, T1),
    first_of_each_key(T1, T).

skip_key([K0-_|T0], K, T) :- K0 == K, !, skip_key(T0, K, T).
skip_key(T, _, T).

order_key(e(_, _, U)-_, Key) :-
    atom_string(Kind, U.kind),
    kind_rank(Kind, Rank),
    (   U.turn_ids = [T|_] -> true ; T = U.get(position, 0) ),
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
kind_rank(pending, 5).
kind_rank(message, 6).


%!  sandwich(+ScoredItems:list(pair), -Ordered:list) is det.
%
%   ScoredItems is a list of Score-Item with Score in 0..1 (composite
%   score).  Critical >= 0.80, important 0.50..0.80, supporting < 0.50
%   (CRP-SPEC-003 §7.4); within a class, items keep descending score
%   (stable for ties).
sandwich(Scored, Ordered) :-
    must_be(list, Scored),
    sort_desc(Scored, Sorted),
    partition(score_at_least(0.80), Sorted, Critical, Rest),
    partition(score_at_least(0.50), Rest, Important, Supporting),
    pairs_values(Critical, Cs),
    pairs_values(Important, Is),
    pairs_values(Supporting, Ss),
    (   Cs = []
    ->  append(Ss, Is, Ordered)
    ;   Cs = [C]
    ->  Ordered = [C|Middle], append(Ss, Is, Middle)
    ;   Cs = [First|Others],
        once(append(Inner, [Last], Others)),
        append([[First, Last], Ss, Is, Inner], Ordered)
    ).

score_at_least(Min, Score-_) :-
    Score >= Min.

sort_desc(Pairs, Sorted) :-
    maplist(negated_key, Pairs, Keyed),
    keysort(Keyed, KS),                  % stable: ties keep input order
    pairs_values(KS, Sorted).

negated_key(S-I, N-(S-I)) :-
    N is -S.
