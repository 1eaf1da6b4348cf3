/*  plunit suites of users' constraints in the packer (prolog/ctxrelay/packer/)

    Run (exit status 1 when a test fails):

        swipl -g "run_tests -> halt(0) ; halt(1)" -t "halt(1)" \
            tests/plunit/test_packer_constraints.pl
*/

:- module(test_packer_constraints, []).
:- use_module(library(plunit)).
:- use_module(library(clpfd)).
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module('../../prolog/ctxrelay/packer').

                 /*******************************
                 *           FIXTURES           *
                 *******************************/

%   A system prompt, three turns of two threads, a tool call and its
%   result (with a head variant), two retrieved facts and a warm artifact
%   over the first two turns.

units([ unit(system, [variant(full, 100, 0)], [mandatory(true), kind(system)]),
        unit(t1, [variant(full, 120, 300)], [kind(turn), thread(a), turn(1)]),
        unit(t2, [variant(full, 200, 500)], [kind(turn), thread(b), turn(2)]),
        unit(t3, [variant(full, 90, 460)], [kind(turn), thread(a), turn(3), pinned]),
        unit(call, [variant(full, 30, 100)], [kind(tool_call), tier(e)]),
        unit(result, [variant(full, 250, 700), variant(head, 60, 350)],
             [kind(tool_output), tier(e)]),
        unit(f1, [variant(full, 40, 200)], [kind(fact), tier(p)]),
        unit(f2, [variant(full, 50, 180)], [kind(fact), tier(p)]),
        unit(artifact, [variant(verbatim, 300, 900), variant(compact, 80, 600)],
             [kind(warm)])
      ]).

structure([ together([call, result]),
            excludes(artifact, t1),
            excludes(artifact, t2)
          ]).

selection_ids(pack(Sel, _, _, _), Ids) :-
    pairs_keys(Sel, Ids).

best(Cs, Budget, Pack) :-
    units(Us), structure(S), append(S, Cs, All),
    pack_best(Us, All, Budget, Pack).

%   The optimum of the CLP(FD) model, user constraints included, by
%   plain labelling: what every first pack must equal.
labelled_optimum(Cs, Budget, Max) :-
    units(Us), structure(S), append(S, Cs, All),
    pack_constraints(Us, All, Budget, Vars, _, Max),
    term_variables(Vars, Vs),
    once(labeling([max(Max)], Vs)).

%   All the selections the model admits (small fixtures only).
model_selections(Us, Cs, Budget, Sels) :-
    findall(Sel,
            ( pack_constraints(Us, Cs, Budget, Vars, _, _),
              term_variables(Vars, Vs),
              label(Vs),
              foldl(unit_choice, Us, Vars, Sel, []) ),
            Sels0),
    msort(Sels0, Sels).

unit_choice(unit(Id, Vs, _), choice(Id, _, Bs), Sel0, Sel) :-
    (   nth1(K, Bs, 1)
    ->  nth1(K, Vs, variant(Name, _, _)),
        Sel0 = [Id-Name|Sel]
    ;   Sel0 = Sel
    ).

message(E, S) :-
    message_to_string(E, S).


                 /*******************************
                 *     THE MODEL WITH THEM      *
                 *******************************/

:- begin_tests(packer_user_model).

test(a_count_row_propagates_when_posted, [Ins == [0, 0]]) :-
    units(Us), structure(S),
    pack_constraints(Us, [constraint(count(kind(fact)) #= 0)|S], 2000, Vars, _, _),
    findall(In, ( member(choice(Id, In, _), Vars), memberchk(Id, [f1, f2]) ), Ins).

test(a_tokens_row_prunes_the_big_variant, [B == 0]) :-
    units(Us), structure(S),
    pack_constraints(Us, [constraint(tokens(kind(tool_output)) #=< 100)|S], 2000,
                     Vars, _, _),
    memberchk(choice(result, _, [B, _]), Vars).

test(a_goal_receives_the_model_and_posts_on_it, [In == 0]) :-
    units(Us), structure(S),
    pack_constraints(Us, [constraint(no_thread_b)|S], 2000, Vars, _, _),
    memberchk(choice(t2, In, _), Vars).

test(labelling_the_model_meets_every_user_constraint) :-
    Cs = [constraint(tokens(kind(tool_output)) #=< 100),
          constraint(count(tier(p)) #>= 2)],
    units(Us), structure(S), append(S, Cs, All),
    forall(( pack_constraints(Us, All, 600, Vars, _, _),
             term_variables(Vars, Vs), label(Vs) ),
           ( memberchk(choice(result, _, [0, _]), Vars),
             memberchk(choice(f1, 1, _), Vars),
             memberchk(choice(f2, 1, _), Vars) )).

:- end_tests(packer_user_model).

%   A goal: no turn of thread b.  Called with the model dict.
%   (forall/2 would undo what it posts: a goal keeps its constraints.)
no_thread_b(M) :-
    get_dict(units, M, Units),
    include(in_thread(b), Units, Bs),
    maplist(left_out, Bs).

in_thread(T, U) :- get_dict(props, U, Ps), memberchk(thread(T), Ps).
left_out(U) :- get_dict(in, U, In), In #= 0.


                 /*******************************
                 *        LINEAR (ROWS)         *
                 *******************************/

:- begin_tests(packer_user_rows).

test(tool_output_capped_takes_the_head_variant, [Sel == head]) :-
    best([constraint(tokens(kind(tool_output)) #=< 100)], 2000, pack(P, _, _, optimal)),
    memberchk(result-Sel, P).

test(the_optimum_equals_labelling, [U == Max]) :-
    Cs = [constraint(tokens(kind(tool_output)) #=< 100), constraint(count(kind(turn)) #=< 2)],
    best(Cs, 700, pack(_, _, U, optimal)),
    labelled_optimum(Cs, 700, Max).

test(at_least_two_facts_of_the_knowledge_tier, [true((subtract([f1, f2], Ids, []), U == Max))]) :-
    Cs = [constraint(count(tier(p)) #>= 2)],
    best(Cs, 280, P),
    P = pack(_, _, U, _),
    labelled_optimum(Cs, 280, Max),
    selection_ids(P, Ids).

test(without_the_rule_the_facts_lose, [true(\+ memberchk(f2, Ids))]) :-
    best([], 280, P),
    selection_ids(P, Ids).

test(a_variant_is_forbidden, [true(\+ memberchk(artifact-verbatim, Sel))]) :-
    best([constraint(variant(artifact, verbatim) #= 0)], 2000, pack(Sel, _, _, _)).

test(in_forces_a_unit, [true(memberchk(f2, Ids))]) :-
    best([constraint(in(f2) #= 1)], 300, P),
    selection_ids(P, Ids).

test(linear_combination, [U == Max]) :-
    Cs = [constraint(2*count(kind(fact)) + tokens(tier(e)) #=< 150)],
    best(Cs, 1000, pack(_, _, U, _)),
    labelled_optimum(Cs, 1000, Max).

test(selectors_combine, [true(\+ memberchk(t1, Ids))]) :-
    best([constraint(count((kind(turn), thread(a), \+ pinned)) #= 0)], 2000, P),
    selection_ids(P, Ids).

test(utility_aggregate, [U == Max]) :-
    Cs = [constraint(utility(kind(turn)) #=< 800)],
    best(Cs, 2000, pack(_, _, U, _)),
    labelled_optimum(Cs, 2000, Max).

test(budget_is_an_expression, [true(Cost =< 500)]) :-
    best([constraint(tokens(all) * 4 #=< budget * 1)], 2000, pack(_, Cost, _, _)).

test(text_and_tuples_are_read, [P1 == P2]) :-
    best(["tokens(kind(tool_output)) #=< 100"], 2000, P1),
    best([-(constraint, -(#=<, -(tokens, -(kind, tool_output)), 100))], 2000, P2).

test(a_bare_relation_is_a_constraint, [P1 == P2]) :-
    best([count(kind(fact)) #=< 1], 2000, P1),
    best([constraint(count(kind(fact)) #=< 1)], 2000, P2).

%   Floors the greedy pack meets are deferred: the classes are built
%   without them and the pack found is checked against them.  Here the
%   greedy pack {x, y3} meets tokens(kind(x)) >= 30, the optimum without
%   the floor {y1, y2} (200) breaks it, and the search runs again with
%   it; with a floor on y the relaxed optimum meets it and stands.
floor_units([ unit(x, [variant(full, 60, 130)], [kind(x)]),
              unit(y1, [variant(full, 50, 100)], [kind(y)]),
              unit(y2, [variant(full, 50, 100)], [kind(y)]),
              unit(y3, [variant(full, 40, 50)], [kind(y)]) ]).

floor_labelled(Cs, Max) :-
    floor_units(Us),
    pack_constraints(Us, Cs, 100, Vars, _, Max),
    term_variables(Vars, Vs),
    once(labeling([max(Max)], Vs)).

test(a_deferred_floor_that_the_relaxation_breaks,
     [true((P == pack([x-full, y3-full], 100, 180, optimal), Sels == Model))]) :-
    floor_units(Us),
    Cs = [constraint(tokens(kind(x)) #>= 30)],
    pack_greedy(Us, [], 100, pack([x-full, y3-full], _, _, _)),   % meets the floor
    pack_best(Us, [constraint(count(kind(y)) #=< 3)|Cs], 100, P),
    floor_labelled(Cs, 180),
    findall(S, pack(Us, Cs, 100, pack(S, _, _, _)), Sels0),
    msort(Sels0, Sels),
    model_selections(Us, Cs, 100, Model).

test(a_deferred_floor_that_the_relaxation_meets,
     [true((P == pack([y1-full, y2-full], 100, 200, optimal), U == Max))]) :-
    floor_units(Us),
    Cs = [constraint(tokens(kind(y)) #>= 40), constraint(count(kind(x)) #=< 1)],
    pack_best(Us, Cs, 100, P),
    P = pack(_, _, U, _),
    floor_labelled(Cs, Max).

:- end_tests(packer_user_rows).


                 /*******************************
                 *    CHECKED (NOT LINEAR)      *
                 *******************************/

:- begin_tests(packer_user_checks).

test(not_equal, [true(N =\= 2)]) :-
    best([constraint(count(kind(fact)) #\= 2)], 2000, P),
    selection_ids(P, Ids),
    aggregate_all(count, ( member(I, Ids), memberchk(I, [f1, f2]) ), N).

test(implication_optimum_equals_labelling, [U == Max]) :-
    Cs = [constraint(in(artifact) #==> count(kind(fact)) #= 0)],
    best(Cs, 800, pack(_, _, U, _)),
    labelled_optimum(Cs, 800, Max).

test(disjunction, [U == Max]) :-
    Cs = [constraint(tokens(kind(tool_output)) #=< 60 #\/ count(kind(turn)) #=< 1)],
    best(Cs, 2000, pack(_, _, U, _)),
    labelled_optimum(Cs, 2000, Max).

test(a_goal_constraint_is_honoured, [true(\+ memberchk(t2, Ids))]) :-
    best([constraint(no_thread_b)], 2000, P),
    selection_ids(P, Ids).

test(if_reads_the_context,
     [true(( memberchk(f2, Ids1), Ids2 == Ids0, \+ memberchk(f2, Ids0) ))]) :-
    units(Us), structure(S),
    C = constraint(if(intent(drill_down), count(tier(p)) #>= 2)),
    pack_best(Us, [C|S], 280, P1, [context(_{intent:drill_down})]),
    pack_best(Us, [C|S], 280, P2, [context(_{intent:explore})]),
    pack_best(Us, S, 280, P0),
    maplist(selection_ids, [P1, P2, P0], [Ids1, Ids2, Ids0]).

test(every_alternative_passes_and_they_are_all_there, [Packed == Model]) :-
    Us = [unit(a, [variant(f, 3, 5), variant(s, 1, 2)], [kind(x)]),
          unit(b, [variant(f, 2, 4)], [kind(x)]),
          unit(c, [variant(f, 2, 3)], [kind(y)]),
          unit(d, [variant(f, 1, 1)], [kind(y), mandatory(true)])],
    Cs = [constraint(count(kind(x)) #\= 1), constraint(tokens(kind(y)) #=< 2 #\/ in(a) #= 1)],
    findall(Sel, pack(Us, Cs, 6, pack(Sel, _, _, _)), Sels),
    findall(U, pack(Us, Cs, 6, pack(_, _, U, _)), Utils),
    msort(Utils, Asc), reverse(Asc, Desc),
    assertion(Utils == Desc),
    msort(Sels, Packed),
    model_selections(Us, Cs, 6, Model).

:- end_tests(packer_user_checks).


                 /*******************************
                 *           ERRORS             *
                 *******************************/

:- begin_tests(packer_user_errors).

bad(C, Why) :-
    units(Us),
    catch(pack_best(Us, [C], 1000, _), error(domain_error(pack_constraint, _), context(_, Why)), true),
    string(Why).

test(not_linear, [true(sub_string(W, _, _, _, "not linear"))]) :-
    bad(constraint(count(all) * tokens(all) #=< 3), W).
test(unknown_expression, [true(sub_string(W, _, _, _, "not an expression"))]) :-
    bad(constraint(size(all) #=< 3), W).
test(not_a_relation, [true(sub_string(W, _, _, _, "not a relation"))]) :-
    bad(constraint(count(all) + 3), W).
test(not_a_relation_but_a_functor, [true(sub_string(W, _, _, _, "not a relation"))]) :-
    bad(constraint(in(t1) #==> tokens(all)), W).
test(unknown_unit, [true(sub_string(W, _, _, _, "names no unit"))]) :-
    bad(constraint(in(zz) #= 1), W).
test(unknown_variant, [true(sub_string(W, _, _, _, "no variant"))]) :-
    bad(constraint(variant(t1, tiny) #= 1), W).
test(unbound_expression, [true(sub_string(W, _, _, _, "unbound"))]) :-
    bad(constraint(_ #=< 3), W).
test(syntax_error_in_text, [true(sub_string(W, _, _, _, "syntax error"))]) :-
    bad("tokens(kind(x) #=< 3", W).
test(unknown_goal, [true(sub_string(W, _, _, _, "no predicate"))]) :-
    bad(constraint(no_such_rule_here), W).
test(bad_condition, [true(sub_string(W, _, _, _, "not a condition"))]) :-
    bad(constraint(if(42, count(all) #>= 1)), W).
test(unknown_option, [error(domain_error(pack_option, colour(red)))]) :-
    units(Us), pack_best(Us, [], 100, _, [colour(red)]).
test(bad_context, [error(type_error(dict, nope))]) :-
    units(Us), pack_best(Us, [], 100, _, [context(nope)]).

test(pack_fails_when_nothing_satisfies_them, [fail]) :-
    units(Us),
    pack(Us, [constraint(tokens(kind(system)) #=< 50)], 1000, _).

test(conflict_with_a_mandatory_unit,
     [[C, M, HasBudget] == [["constraint(tokens(kind(system))#=<50)"], [system], false]]) :-
    units(Us),
    catch(pack_best(Us, [constraint(count(kind(fact)) #=< 2),
                         constraint(tokens(kind(system)) #=< 50)], 1000, _),
          error(ctxrelay(inconsistent_constraints, D), _), true),
    C = D.constraints, M = D.mandatory,
    ( get_dict(budget, D, _) -> HasBudget = true ; HasBudget = false ).

test(conflict_that_takes_the_budget, [Cs-B == ["constraint(count(kind(turn))#>=3)"]-250]) :-
    units(Us),
    catch(pack_best(Us, [constraint(count(kind(turn)) #>= 3)], 250, _),
          error(ctxrelay(inconsistent_constraints, D), _), true),
    Cs = D.constraints, B = D.budget.

test(the_minimal_set_leaves_out_the_innocent, [Cs == ["count(kind(fact))#>=2", "in(f1)#=0"]]) :-
    units(Us),
    catch(pack_best(Us, [count(kind(turn)) #=< 3, count(kind(fact)) #>= 2,
                         tokens(kind(tool_output)) #=< 100, in(f1) #= 0], 2000, _),
          error(ctxrelay(inconsistent_constraints, D), _), true),
    maplist([S0, S]>>( sub_string(S0, 11, _, 1, S) ), D.constraints, Cs0),
    msort(Cs0, Cs).

test(structural_conflict_names_the_constraint, [Cs == ["excludes(a, b)"]]) :-
    catch(pack_best([unit(a, [variant(f, 1, 1)], [mandatory(true)]),
                     unit(b, [variant(f, 1, 1)], [mandatory(true)]),
                     unit(c, [variant(f, 1, 1)], [])],
                    [requires(c, a), excludes(a, b)], 10, _),
          error(ctxrelay(inconsistent_constraints, D), _), true),
    Cs = D.constraints.

test(a_time_limit_before_any_passing_pack_is_an_error,
     [error(ctxrelay(pack_time_limit, _))]) :-
    numlist(1, 30, Is),
    maplist([I, unit(I, [variant(f, S, S)], [kind(k)])]>>(S is 2*(1000 + 37*I mod 991)),
            Is, Us),
    pack_best(Us, [constraint(count(kind(k)) #=< 1 #\/ count(kind(k)) #>= 29)], 25001, _,
              [time_limit(0)]).

:- end_tests(packer_user_errors).


                 /*******************************
                 *           MESSAGES           *
                 *******************************/

:- begin_tests(packer_user_messages).

test(conflict_message_names_constraint_and_units,
     [ true(( sub_string(S, _, _, _, "No pack satisfies constraint(tokens(kind(system))#=<50)"),
              sub_string(S, _, _, _, "mandatory units system") )) ]) :-
    units(Us),
    catch(pack_best(Us, [constraint(tokens(kind(system)) #=< 50)], 1000, _), E, true),
    message(E, S).

test(structural_message_names_the_constraint,
     [ true(sub_string(S, _, _, _, "because of excludes(a, b)")) ]) :-
    catch(pack_best([unit(a, [variant(f, 1, 1)], [mandatory(true)]),
                     unit(b, [variant(f, 1, 1)], [mandatory(true)])],
                    [excludes(a, b)], 10, _), E, true),
    message(E, S).

test(invalid_constraint_message, [ true(sub_string(S, _, _, _, "Invalid pack constraint")) ]) :-
    units(Us),
    catch(pack_best(Us, [constraint(count(all) * count(all) #=< 1)], 10, _), E, true),
    message(E, S).

:- end_tests(packer_user_messages).
