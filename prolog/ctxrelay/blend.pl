:- module(ctxrelay_blend,
          [ intent_blend/2,         % +Intent, -Blend
            tier_shares/4,          % +Blend, +Available, +Demand, -Shares
            tier_gate/7,            % +Units, +Constraints, +Blend, +Available,
                                    % -Gated, -GatedConstraints, -Tiers
            unit_tier/2,            % ?Kind, ?Tier
            blend_header/2,         % +Blend, -Text
            intent_weights/5        % ?Intent, ?P, ?C, ?E, ?Novelty (extension point)
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).
:- use_module(library(aggregate)).
:- use_module(library(ordsets)).
:- use_module(library(assoc)).
:- use_module(library(yall)).

/** <module> The tier blend: how much of the budget each horizon is offered

The blend (CRP-SPEC-028 §5.3): an intent sets P/C/E weights; each tier gets
its share of the budget left after the mandatory units, and a share a tier
cannot use (it has fewer candidates than its share) flows to the others in
proportion to their weights.  intent_weights/5 is the table users extend.
*/

:- multifile intent_weights/5.
:- dynamic intent_weights/5.

%!  intent_weights(?Intent, ?P, ?C, ?E, ?Novelty) is nondet.
%
%   The spec's blend table; users may add or override clauses (asserta).
intent_weights(explore,        0.70, 0.25, 0.05, on).
intent_weights(drill_down,     0.30, 0.65, 0.05, off).
intent_weights(clarify,        0.20, 0.75, 0.05, off).
intent_weights(continue,       0.50, 0.40, 0.10, partial).
intent_weights(tool_reference, 0.20, 0.30, 0.50, off).

%!  intent_blend(+Intent, -Blend:dict) is det.
%
%   @error domain_error(intent, Intent)
intent_blend(Intent, blend{intent:Intent, p:P, c:C, e:E, novelty:N}) :-
    must_be(atom, Intent),
    (   intent_weights(Intent, P, C, E, N)
    ->  true
    ;   domain_error(intent, Intent)
    ).

%!  blend_header(+Blend, -Text) is det.
%
%   CRP-Context-Tier-Blend value, P/C/E percentages (e.g. "30/65/5").
blend_header(Blend, Text) :-
    P is round(Blend.p * 100), C is round(Blend.c * 100), E is round(Blend.e * 100),
    format(string(Text), "~w/~w/~w", [P, C, E]).

%!  tier_shares(+Blend, +Available, +Demand, -Shares) is det.
%
%   Available is the token budget left for optional units; Demand is
%   demand{p:DP, c:DC, e:DE}, the tokens each tier's candidates could use.
%   Shares is shares{p:SP, c:SC, e:SE}: each tier gets weight x Available,
%   capped by its demand; the remainder flows to tiers with unmet demand,
%   in proportion to their weights, until nothing more can be placed.
tier_shares(Blend, Available, Demand, Shares) :-
    must_be(nonneg, Available),
    Tiers = [p, c, e],
    maplist(dict_pair(Blend), Tiers, Weights),
    maplist(dict_pair(Demand), Tiers, Demands),
    pairs_values(Demands, DVs), maplist(must_be(nonneg), DVs),
    maplist(zero_pair, Tiers, Zero),
    flow(Weights, Demands, Available, Zero, Given),
    dict_pairs(Shares, shares, Given).

dict_pair(Dict, Key, Key-Value) :-
    get_dict(Key, Dict, Value).

zero_pair(Key, Key-0).

flow(Weights, Demands, Left, Given0, Given) :-
    include(unmet(Demands, Given0), Weights, Open),
    pairs_values(Open, OpenWs),
    sum_list(OpenWs, WSum),
    (   ( Left =< 0 ; Open == [] ; WSum =< 0 )
    ->  Given = Given0
    ;   foldl(offer(Demands, Left, WSum), Open, Given0-0, Given1-Placed),
        Left1 is Left - Placed,
        (   Placed =:= 0
        ->  Given = Given1
        ;   flow(Weights, Demands, Left1, Given1, Given)
        )
    ).

unmet(Demands, Given, T-_) :-
    memberchk(T-D, Demands),
    memberchk(T-G, Given),
    G < D.

offer(Demands, Left, WSum, T-W, Given0-Placed0, Given-Placed) :-
    memberchk(T-D, Demands),
    selectchk(T-G, Given0, Rest),
    Want is D - G,
    Offer is min(Want, floor(Left * W / WSum)),
    Take is max(0, Offer),
    G1 is G + Take,
    Given = [T-G1|Rest],
    Placed is Placed0 + Take.



		 /*******************************
		 *          TIER GATE           *
		 *******************************/

:- multifile unit_tier/2.

%!  unit_tier(?Kind, ?Tier) is nondet.
%
%   The horizon of an optional unit kind: p (CKF knowledge), c
%   (conversation: turns, threads, references, artifacts) or e (tool
%   output summaries).  Mandatory units (system, instructions, the new
%   message, the boundary, the hot tail) stand outside the blend.
unit_tier(fact,           p).
unit_tier(turn,           c).
unit_tier(retrieved,      c).
unit_tier(referenced,     c).
unit_tier(thread,         c).
unit_tier(thread_summary, c).
unit_tier(warm,           c).
unit_tier(scratch,        e).

%!  tier_gate(+Units, +Constraints, +Blend, +Available, -Gated,
%!            -GatedConstraints, -Tiers) is det.
%
%   Offer the packer each tier's candidates up to the tier's share of
%   Available (tier_shares/4: a share a tier cannot use flows to the
%   others).  A tier's items go in by descending utility per token
%   (the order a knapsack fills in), first fit;
%   a together/1 group is one item (tier e if it holds a tool output),
%   and a group with a mandatory member is not gated.  A tier that is the
%   only one with candidates is offered whole (its share is everything and
%   a greedy cut could only lose the packer's optimum).  The packer then
%   chooses exactly among what was offered, so no tier exceeds its
%   share by more than the gap between a unit's cheapest and chosen
%   variant.  Tiers is tiers{p:T, c:T, e:T} with T = tier{share,
%   demand, offered} in tokens.
tier_gate(Units, Constraints, Blend, Available, Gated, GatedCs, Tiers) :-
    findall(Ids, member(together(Ids), Constraints), Groups),
    gate_items(Units, Groups, Items),
    foldl(tier_demand, Items, demand{p:0, c:0, e:0}, Demand),
    tier_shares(Blend, Available, Demand, Shares),
    foldl(tier_offer(Items, Demand, Shares), [p, c, e], [], KeptLists),
    append(KeptLists, Offered),
    findall(Id, ( member(G, Groups), \+ group_item(G, Units, _), member(Id, G) ), Exempt),
    append(Offered, Exempt, Kept0),
    sort(Kept0, Kept),
    id_set(Kept, KeptSet),                  % ~100 lookups: not a scan of Kept each
    include(gate_keeps(KeptSet), Units, Gated),
    gated_constraints(Constraints, Kept, Units, GatedCs),
    maplist(tier_report(Items, Demand, Shares, KeptSet), [p, c, e], Reports),
    dict_pairs(Tiers, tiers, Reports).

%   id_set(+OrdIds, -Set): the ids (an ordered set) as an assoc, for
%   in_set/2.
id_set(Ids, Set) :-
    maplist([Id, Id-true]>>true, Ids, Pairs),
    ord_list_to_assoc(Pairs, Set).

in_set(Id, Set) :-
    get_assoc(Id, Set, _).

%   gate_items(+Units, +Groups, -Items)
%   Items are item(Tier, Cost, Utility, Ids) for the optional units and
%   groups; mandatory units and groups holding one are left out (kept).
gate_items(Units, Groups, Items) :-
    findall(Id, ( member(G, Groups), member(Id, G) ), Grouped0),
    sort(Grouped0, Grouped),
    findall(item(T, C, U, [Id]),
            ( member(Unit, Units), Unit = unit(Id, _, Props),
              \+ ord_memberchk(Id, Grouped),
              \+ memberchk(mandatory(true), Props),
              unit_item(Unit, T, C, U) ),
            Singles),
    findall(Item, ( member(G, Groups), group_item(G, Units, Item) ), GroupItems),
    append(Singles, GroupItems, Items).

unit_item(unit(_, Variants, Props), Tier, Cost, Utility) :-
    memberchk(kind(Kind), Props),
    (   unit_tier(Kind, Tier0) -> Tier = Tier0 ; Tier = c ),
    Variants = [variant(_, C0, U0)|More],           % no variant: not an item
    cheapest_and_best(More, C0, U0, Cost, Utility).

%   The lowest cost and the highest utility over the variants (each
%   gate reads ~100 units: one pass, not two aggregate_all/3 calls).
cheapest_and_best([], C, U, C, U).
cheapest_and_best([variant(_, C1, U1)|Vs], C0, U0, C, U) :-
    C2 is min(C0, C1),
    U2 is max(U0, U1),
    cheapest_and_best(Vs, C2, U2, C, U).

group_item(Ids, Units, item(Tier, Cost, Utility, Ids)) :-
    findall(U, ( member(Id, Ids), member(U, Units), U = unit(Id, _, _) ), Members),
    Members \== [],
    \+ ( member(unit(_, _, Props), Members), memberchk(mandatory(true), Props) ),
    maplist(unit_item, Members, Tiers, Costs, Utilities),
    (   memberchk(e, Tiers) -> Tier = e ; Tiers = [Tier|_] ),
    sum_list(Costs, Cost),
    max_list(Utilities, Utility).

tier_demand(item(T, C, _, _), D0, D) :-
    get_dict(T, D0, V0),
    V is V0 + C,
    put_dict(T, D0, V, D).

tier_offer(Items, Demand, Shares, Tier, Acc, [Ids|Acc]) :-
    findall(NegD-(C-I), ( member(item(Tier, C, U, I), Items), NegD is -U / max(1, C) ), Keyed),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, ByUtility),
    (   alone(Tier, Demand)
    ->  pairs_values(ByUtility, Chosen)     % no other tier to share with: the packer decides
    ;   get_dict(Tier, Shares, Share),
        first_fit(ByUtility, Share, Chosen)
    ),
    append(Chosen, Ids).

alone(Tier, Demand) :-
    forall(( get_dict(T, Demand, D), T \== Tier ), D =:= 0).

first_fit([], _, []).
first_fit([C-Ids|Rest], Left, Chosen) :-
    (   C =< Left
    ->  Left1 is Left - C, Chosen = [Ids|Chosen1]
    ;   Left1 = Left, Chosen = Chosen1
    ),
    first_fit(Rest, Left1, Chosen1).

gate_keeps(KeptSet, unit(Id, _, Props)) :-
    (   memberchk(mandatory(true), Props) -> true
    ;   in_set(Id, KeptSet)
    ).

gated_constraints(Constraints, Kept, Units, Gated) :-
    findall(Id, ( member(unit(Id, _, Props), Units), memberchk(mandatory(true), Props) ), Mand),
    append(Kept, Mand, In0),
    sort(In0, In),
    convlist(gate_constraint(In), Constraints, Gated).

gate_constraint(In, together(Ids), together(Ids)) :-
    forall(member(Id, Ids), memberchk(Id, In)).
gate_constraint(In, excludes(A, B), excludes(A, B)) :-
    memberchk(A, In), memberchk(B, In).
gate_constraint(In, requires(A, B), requires(A, B)) :-
    memberchk(A, In), memberchk(B, In).
gate_constraint(In, at_most_one(Ids0), at_most_one(Ids)) :-
    include([Id]>>memberchk(Id, In), Ids0, Ids),
    Ids = [_, _|_].

tier_report(Items, Demand, Shares, KeptSet, Tier, Tier-tier{share:S, demand:D, offered:O}) :-
    get_dict(Tier, Shares, S),
    get_dict(Tier, Demand, D),
    aggregate_all(sum(C), ( member(item(Tier, C, _, Ids), Items),
                            Ids = [First|_], in_set(First, KeptSet) ), O).
