/*  An agent that packs its context under its own rules (CLP(FD) constraints).

    bin/ctxrelay-swipl examples/packer_constraints.pl STORE_DIR

Part 1 calls the packer directly: a handful of context units (a system
prompt, turns of two topic threads, a tool call and its output, facts of
the knowledge tier, a warm summary), the structural constraints (the tool
call and its output together, the summary instead of the turns it
covers), and the agent's rules:

  - at most 120 tokens of tool output;
  - at least two facts when the turn drills down;
  - the pinned turn of a thread before any other turn of that thread
    (a goal that posts its own CLP(FD) constraint on the model).

It backtracks over the packs, best first, and checks every one against
the rules.  Part 2 gives rules to assemble/4 over a stored session
(echo provider, no network), backtracks over the alternatives, and shows
the error that names the rule the mandatory units cannot satisfy.
Exits 0 on success.
*/

:- use_module(library(ctxrelay)).
:- use_module(library(clpfd)).
:- use_module(library(main)).
:- use_module(library(lists)).
:- use_module(library(apply)).
:- use_module(library(pairs)).

:- initialization(main, main).

main(Argv) :-
    (   Argv = [Dir|_]
    ->  true
    ;   format(user_error, "usage: bin/ctxrelay-swipl examples/packer_constraints.pl STORE_DIR~n", []),
        halt(2)
    ),
    packs_under_rules,
    assembled_under_rules(Dir).


                 /*******************************
                 *   PART 1: THE PACKER ALONE   *
                 *******************************/

units([ unit(system,  [variant(full, 120, 0)], [mandatory(true), kind(system)]),
        unit(t1,      [variant(full, 150, 420)], [kind(turn), thread(deploy), pinned]),
        unit(t2,      [variant(full, 110, 380)], [kind(turn), thread(deploy)]),
        unit(t3,      [variant(full, 90, 300)],  [kind(turn), thread(costs)]),
        unit(call,    [variant(full, 30, 60)],   [kind(tool_call)]),
        unit(output,  [variant(full, 260, 1100), variant(head, 90, 330)], [kind(tool_output)]),
        unit(f1,      [variant(full, 40, 150)],  [kind(fact), tier(p)]),
        unit(f2,      [variant(full, 45, 140)],  [kind(fact), tier(p)]),
        unit(summary, [variant(verbatim, 200, 640), variant(compact, 70, 400)],
                      [kind(warm)])
      ]).

structure([ together([call, output]),
            excludes(summary, t2),
            excludes(summary, t3)
          ]).

rules([ constraint(tokens(kind(tool_output)) #=< 120),
        constraint(if(intent(drill_down), count(tier(p)) #>= 2)),
        constraint(pinned_first)
      ]).

%   pinned_first(+Model): a thread's other turns only with its pinned turn.
%   The model gives every unit's 0/1 inclusion variable; the rule is a
%   CLP(FD) implication per turn.
pinned_first(Model) :-
    get_dict(units, Model, Units),
    include(has_prop(pinned), Units, Pinned),
    maplist(pinned_thread_first(Units), Pinned).

pinned_thread_first(Units, P) :-
    get_dict(props, P, PProps),
    memberchk(thread(T), PProps),
    get_dict(in, P, PIn),
    include(has_prop(thread(T)), Units, Same),
    exclude(==(P), Same, Others),
    maplist({PIn}/[U]>>( get_dict(in, U, In), In #==> PIn ), Others).

has_prop(Prop, U) :-
    get_dict(props, U, Props),
    memberchk(Prop, Props).

packs_under_rules :-
    units(Us), structure(S), rules(R),
    append(S, R, Cs),
    Budget = 560,
    format("part 1: ~w units, budget ~w, rules:~n", [9, Budget]),
    forall(member(constraint(C), R), format("  ~q~n", [C])),
    pack_best(Us, S, Budget, pack(FreeSel, _, Free, _), []),
    format("without the rules: utility ~w: ~w~n", [Free, FreeSel]),
    Options = [context(_{intent:drill_down}), max_alternatives(3)],
    findall(P, pack(Us, Cs, Budget, P, Options), Packs),
    forall(nth1(I, Packs, pack(Sel, Cost, U, Status)),
           ( pairs_keys(Sel, Ids),
             check_rules(Us, Sel),
             format("pack ~w: utility ~w, ~w tokens, ~w: ~w~n", [I, U, Cost, Status, Ids]) )),
    pairs_utilities(Packs, Utilities),
    (   msort(Utilities, Asc), reverse(Asc, Utilities)
    ->  format("utilities never increase: ~w~n", [Utilities])
    ;   format("utilities out of order: ~w~n", [Utilities]), halt(1)
    ).

pairs_utilities(Packs, Us) :-
    maplist([pack(_, _, U, _), U]>>true, Packs, Us).

%   The agent's own check of its rules on a pack.
check_rules(Units, Sel) :-
    aggregate_all(sum(C), ( member(Id-V, Sel), member(unit(Id, Vs, Ps), Units),
                            memberchk(kind(tool_output), Ps),
                            memberchk(variant(V, C, _), Vs) ), ToolTokens),
    aggregate_all(count, ( member(Id-_, Sel), member(unit(Id, _, Ps), Units),
                           memberchk(tier(p), Ps) ), Facts),
    (   ToolTokens =< 120, Facts >= 2,
        ( memberchk(t2-_, Sel) -> memberchk(t1-_, Sel) ; true )
    ->  true
    ;   format("a pack breaks the rules: ~w~n", [Sel]), halt(1)
    ).


                 /*******************************
                 *   PART 2: ASSEMBLE/4 RULES   *
                 *******************************/

history([ user-"We deploy the billing service with helm; chart version 4.2.",
          assistant-"Noted: billing via helm, chart 4.2.",
          user-"Costs went up 30% last month, mostly egress.",
          assistant-"Egress is the usual suspect; check the NAT gateway bytes.",
          user-"Rollback plan: helm rollback billing 41 if the canary fails.",
          assistant-"Rollback to revision 41 on a failed canary, understood.",
          user-"The canary runs for 20 minutes at 5% of traffic.",
          assistant-"20 minutes at 5%: enough to see error-rate regressions."
        ]).

policy([ max_context_tokens(420), output_reserve(100), safety_margin(20),
         min_recent_turns(2), time_limit(2.0), embedder("hashing") ]).

assembled_under_rules(Dir) :-
    store_open(Dir, Store, [default(true)]),
    (   catch(session_info(Store, billing, _), _, fail)
    ->  true                                % a second run reuses the session
    ;   session_create(Store, billing, []),
        history(H),
        forall(member(Role-Text, H), turn_append(Store, billing, message(Role, Text), _))
    ),
    turn_count(Store, billing, N),
    format("part 2: session billing, ~w turns~n", [N]),
    policy(P),
    Question = "what was the rollback plan for the canary?",
    Rules = [ "count(role(assistant)) #=< 2",
              "tokens(kind(turn)) #=< 200" ],
    format("rules: ~w~n", [Rules]),
    once(assemble(billing, Question, R0, [store(Store)|P])),
    assistant_turns(Store, R0, NA0),
    format("without the rules: utility ~w, ~w assistant turns~n", [R0.utility, NA0]),
    findall(R, limit(3, assemble(billing, Question, R, [store(Store), constraints(Rules)|P])),
            Results),
    forall(nth1(I, Results, R),
           ( assistant_turns(Store, R, NA),
             turn_tokens(R, TT),
             format("alternative ~w: utility ~w, ~w assistant turns, ~w tokens of turns~n",
                    [I, R.utility, NA, TT]) )),
    catch(assemble(billing, Question, _, [store(Store), constraints(["tokens(kind(message)) #=< 2"])|P]),
          E, ( message_to_string(E, Msg), format("refused: ~w~n", [Msg]) )),
    store_close(Store).

assistant_turns(Store, R, N) :-
    get_dict(pack, R, Pack),
    aggregate_all(count, ( member(U, Pack), get_dict(turn_ids, U, [T|_]),
                           turn_get(Store, billing, T, Turn),
                           get_dict(role, Turn, "assistant") ), N).

turn_tokens(R, N) :-
    get_dict(pack, R, Pack),
    aggregate_all(sum(Tk), ( member(U, Pack), get_dict(kind, U, "turn"),
                             get_dict(tokens, U, Tk) ), N).
