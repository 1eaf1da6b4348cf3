:- module(ctxrelay_turn_pack,
          [ turn_pack/8             % +Request, +All, +Gated, +Budget, +Analysis,
                                    % +Cands, -Units, -Pack
          ]).
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(error)).
:- use_module(packer).
:- use_module(packer/user, [source_term/2]).
:- use_module(blend, [unit_tier/2]).
:- use_module(threads, [turn_derived/4]).

/** <module> The pack of a turn under the users' constraints

assembly/2 hands the packer the turn's candidate units; this module adds
what the `constraints` policy option asks for.  With no user constraint
(the default) it is pack/5 with the policy's time limit, nothing more.

With user constraints, each unit gets the properties they select by, as
`Name(Value)` terms next to `mandatory(M)` and `kind(K)`:

  - tier(T): p, c or e (ctxrelay_blend:unit_tier/2), for optional kinds;
  - role(R): user, assistant or tool, for stored turns;
  - turn(N): the transcript turn a unit shows (one per turn id);
  - thread(Id): the topic thread of that turn (looked up in the turn log
    only when a constraint mentions thread/1);

and the pack's context(Dict) is `_{intent:I, mode:M, thread:Id}` of the
turn, for if(Condition, C) constraints and goals.  An unqualified
constraint(Goal) is called in module user (write M:Goal for another).  The tier gate is a
preference (each tier offered up to its share); user constraints are
rules: when the gated candidates admit no pack that satisfies them, the
whole candidate set is packed, and when that has none either, pack_best/5
raises the error that names the conflicting constraints.
*/

%!  turn_pack(+Request, +All, +Gated, +Budget, +Analysis, +Cands, -Units,
%!            -Pack) is nondet.
%
%   All and Gated are Units-Constraints before and after the tier gate.
%   Units is the unit list Pack was chosen from.  Alternatives on
%   backtracking, as pack/5.
%
%   @error error(ctxrelay(inconsistent_constraints, D), _) when no pack
%          satisfies the users' constraints (D names a minimal set).

turn_pack(Request, _, Units-Constraints, Budget, _, _, Units, Pack) :-
    Policy = Request.policy,
    Policy.constraints == [],
    !,
    pack(Units, Constraints, Budget, Pack, [time_limit(Policy.time_limit)]).
turn_pack(Request, Units0-Cs0, UnitsG0-CsG, Budget, Analysis, Cands, Units, Pack) :-
    Policy = Request.policy,
    User = Policy.constraints,
    unit_properties(Request, User, Cands, Props),
    maplist(with_properties(Props), Units0, All),
    maplist(with_properties(Props), UnitsG0, Gated),
    turn_context(Analysis, Context),
    Options = [time_limit(Policy.time_limit), context(Context)],
    append(CsG, User, GatedCs),
    append(Cs0, User, AllCs),
    (   Units = Gated,
        pack(Gated, user:GatedCs, Budget, Pack, Options)
    *-> true
    ;   Units = All,
        pack(All, user:AllCs, Budget, Pack, Options)
    *-> true
    ;   pack_best(All, user:AllCs, Budget, _, Options),
        fail                                % not reached: it raises why
    ).

turn_context(Analysis, _{intent:Analysis.intent, mode:Analysis.mode,
                         thread:Analysis.thread.id}).

%   unit_properties(+Request, +User, +Cands, -Props): Id-Properties for
%   every candidate (an association list; a few hundred at most).
unit_properties(Request, User, Cands, Props) :-
    maplist(source_term, User, Terms),          % text is read here too
    (   sub_term(T, Terms), compound(T), compound_name_arity(T, thread, 1)
    ->  Threads = lookup(Request.store, Request.session)
    ;   Threads = none
    ),
    foldl(candidate_properties(Threads), Cands.units, Props, []).

candidate_properties(Threads, U, [Id-Props|T], T) :-
    Id = U.id,
    atom_string(Kind, U.kind),
    (   unit_tier(Kind, Tier) -> Props0 = [tier(Tier)] ; Props0 = [] ),
    (   get_dict(role, U, R) -> atom_string(Role, R), Props1 = [role(Role)|Props0]
    ;   Props1 = Props0
    ),
    (   get_dict(turn_ids, U, TurnIds) -> true ; TurnIds = [] ),
    findall(turn(N), member(N, TurnIds), TurnProps),
    thread_properties(Threads, TurnIds, ThreadProps),
    append([Props1, TurnProps, ThreadProps], Props).

thread_properties(none, _, []) :- !.
thread_properties(lookup(Store, Session), TurnIds, Props) :-
    findall(thread(Thread),
            ( member(N, TurnIds),
              integer(N),
              turn_derived(Store, Session, N, D),
              get_dict(thread_id, D, Id0),
              Id0 \== "",
              atom_string(Thread, Id0) ),
            Props0),
    sort(Props0, Props).

with_properties(Props, unit(Id, Vs, Ps0), unit(Id, Vs, Ps)) :-
    (   memberchk(Id-Extra, Props)
    ->  append(Ps0, Extra, Ps)
    ;   Ps = Ps0
    ).
