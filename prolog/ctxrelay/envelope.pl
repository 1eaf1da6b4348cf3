:- module(ctxrelay_envelope,
          [ sandwich/2,             % +ScoredItems, -Ordered
            intent_blend/2,         % +Intent, -Blend
            tier_shares/4,          % +Blend, +Available, +Demand, -Shares
            blend_header/2          % +Blend, -Text
          ]).
:- use_module(library(error)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).

/** <module> Envelope: the primacy-recency sandwich and the tier blend

Position optimisation (CRP-SPEC-003 §7.4): the most important items take
the first and last positions, supporting items the middle, where attention
is weakest.  The pseudocode there takes critical[0], critical[-1], then the
supporting and important items, then critical[1:-1]; with one critical
item that would repeat it, and with none it fails.  sandwich/2 implements
the same order without either defect: no critical item -> supporting then
important; one -> it first; two or more -> first, last, supporting,
important, the rest of the critical ones.

The blend (CRP-SPEC-028 §5.3): an intent sets P/C/E weights; each tier gets
its share of the budget left after the mandatory units, and a share a tier
cannot use (it has fewer candidates than its share) flows to the others in
proportion to their weights.
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
