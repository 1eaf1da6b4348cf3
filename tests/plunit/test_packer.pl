/*  plunit suites of prolog/ctxrelay/packer.pl

    Run (exit status 1 when a test fails):

        .deps/swipl/bin/swipl -g "run_tests -> halt(0) ; halt(1)" -t "halt(1)" \
            tests/plunit/test_packer.pl
*/

:- module(test_packer, []).
:- use_module(library(plunit)).
:- use_module(library(clpfd)).
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module('../../prolog/ctxrelay/packer').

                 /*******************************
                 *           FIXTURES           *
                 *******************************/

%   A small context: a system prompt, a tool call/result pair, a warm
%   artifact covering two turns, and a retrieved snippet that requires
%   one of them.

units([ unit(system,   [variant(full, 100, 5000)], [mandatory(true), kind(system)]),
        unit(t1,       [variant(full, 120, 300)], [kind(turn)]),
        unit(t2,       [variant(full, 200, 500)], [kind(turn)]),
        unit(artifact, [variant(verbatim, 300, 900), variant(compact, 80, 600),
                        variant(facts, 20, 250)], [kind(artifact)]),
        unit(call,     [variant(full, 30, 100)], [kind(tool_call)]),
        unit(result,   [variant(full, 250, 700), variant(head, 60, 350)],
             [kind(tool_result)]),
        unit(snippet,  [variant(full, 90, 400)], [kind(retrieved)])
      ]).

constraints([ together([call, result]),
              excludes(artifact, t1),
              excludes(artifact, t2),
              requires(snippet, t2)
            ]).

%   Subset sum with even sizes and an odd budget: the LP bound never
%   prunes, the proof needs about 2^40 nodes.
hard(Units, Budget) :-
    numlist(1, 40, Is),
    maplist([I, unit(I, [variant(full, S, S)], [])]>>(S is 2*(1000 + 37*I mod 991)),
            Is, Units),
    foldl([unit(_, [variant(_, S, _)], _), A0, A]>>(A is A0+S), Units, 0, Sum),
    Budget is (Sum // 2) \/ 1.

selection_ids(pack(Sel, _, _, _), Ids) :-
    pairs_keys(Sel, Ids).

utility(pack(_, _, U, _), U).

%   All admissible selections of the CLP(FD) model, by labelling it.
model_selections(Units, Cs, Budget, Sels) :-
    findall(Sel,
            ( pack_constraints(Units, Cs, Budget, Vars, _, _),
              term_variables(Vars, Vs),
              label(Vs),
              vars_selection(Units, Vars, Sel)
            ),
            Sels0),
    msort(Sels0, Sels).

vars_selection(Units, Vars, Sel) :-
    foldl(unit_choice, Units, Vars, Sel, []).

unit_choice(unit(Id, Vs, _), choice(Id, _, Bs), Sel0, Sel) :-
    (   nth1(K, Bs, 1)
    ->  nth1(K, Vs, variant(Name, _, _)),
        Sel0 = [Id-Name|Sel]
    ;   Sel0 = Sel
    ).


                 /*******************************
                 *   THE CORE RELATION ALONE    *
                 *******************************/

:- begin_tests(packer_propagation).

test(posting_does_no_search, true(Free \== [])) :-
    units(Us), constraints(Cs),
    pack_constraints(Us, Cs, 1000, Vars, _, _),
    term_variables(Vars, Free).

test(mandatory_over_budget_fails_when_posting, fail) :-
    pack_constraints([unit(a, [variant(full, 120, 5), variant(compact, 80, 3)],
                           [mandatory(true)])],
                     [], 50, _, _, _).

test(mandatory_raises_the_cost_lower_bound, Min == 80) :-
    pack_constraints([unit(a, [variant(full, 120, 5), variant(compact, 80, 3)],
                           [mandatory(true)]),
                      unit(b, [variant(full, 10, 1)], [])],
                     [], 500, _, Cost, _),
    fd_inf(Cost, Min).

test(mandatory_unit_is_in, In == 1) :-
    units(Us), constraints(Cs),
    pack_constraints(Us, Cs, 1000, Vars, _, _),
    memberchk(choice(system, In, _), Vars).

test(together_with_a_mandatory_unit_forces_it_in, In == 1) :-
    pack_constraints([unit(call, [variant(full, 10, 1)], [mandatory(true)]),
                      unit(result, [variant(full, 50, 4), variant(head, 10, 2)], [])],
                     [together([call, result])], 100, Vars, _, _),
    memberchk(choice(result, In, _), Vars).

test(together_shares_the_inclusion_variable, In1 == In2) :-
    units(Us), constraints(Cs),
    pack_constraints(Us, Cs, 1000, Vars, _, _),
    memberchk(choice(call, In1, _), Vars),
    memberchk(choice(result, In2, _), Vars).

test(excludes_a_mandatory_unit_forces_the_other_out, In == 0) :-
    pack_constraints([unit(a, [variant(full, 10, 1)], [mandatory(true)]),
                      unit(b, [variant(full, 10, 1)], [])],
                     [excludes(a, b)], 100, Vars, _, _),
    memberchk(choice(b, In, _), Vars).

test(at_most_one_propagates, Ins == [1, 0, 0]) :-
    pack_constraints([unit(a, [variant(full, 10, 1)], [mandatory(true)]),
                      unit(b, [variant(full, 10, 1)], []),
                      unit(c, [variant(full, 10, 1)], [])],
                     [at_most_one([a, b, c])], 100, Vars, _, _),
    maplist([choice(_, In, _), In]>>true, Vars, Ins).

test(requires_forces_the_target_in, In == 1) :-
    pack_constraints([unit(a, [variant(full, 10, 1)], [mandatory(true)]),
                      unit(b, [variant(full, 10, 1), variant(small, 5, 1)], [])],
                     [requires(a, b)], 100, Vars, _, _),
    memberchk(choice(b, In, _), Vars).

test(requires_a_unit_that_cannot_fit_keeps_the_source_out, In == 0) :-
    pack_constraints([unit(a, [variant(full, 10, 1)], []),
                      unit(b, [variant(full, 500, 9)], [])],
                     [requires(a, b)], 100, Vars, _, _),
    memberchk(choice(a, In, _), Vars).

test(variants_one_at_most, Count == 4) :-   % out, or one of three variants
    pack_constraints([unit(a, [variant(v1, 1, 1), variant(v2, 2, 2), variant(v3, 3, 3)], [])],
                     [], 10, Vars, _, _),
    term_variables(Vars, Vs),
    aggregate_all(count, label(Vs), Count).

test(variant_over_budget_is_pruned, B1 == 0) :-
    pack_constraints([unit(a, [variant(full, 500, 9), variant(small, 5, 1)], [])],
                     [], 100, [choice(a, _, [B1, _])], _, _).

:- end_tests(packer_propagation).


                 /*******************************
                 *          MANDATORY           *
                 *******************************/

:- begin_tests(packer_mandatory).

test(mandatory_is_packed_even_when_worthless, Ids == [a, b]) :-
    pack_best([unit(a, [variant(full, 50, 0)], [mandatory(true)]),
               unit(b, [variant(full, 50, 10)], []),
               unit(c, [variant(full, 60, 11)], [])],
              [], 100, P),
    selection_ids(P, Ids).

test(mandatory_takes_a_cheaper_variant_to_make_room, Sel == [a-compact, b-full]) :-
    pack_best([unit(a, [variant(full, 90, 10), variant(compact, 40, 8)], [mandatory(true)]),
               unit(b, [variant(full, 60, 50)], [])],
              [], 100, pack(Sel, _, _, _)).

test(nothing_fits_pack_fails, fail) :-
    pack([unit(a, [variant(full, 150, 1)], [mandatory(true)])], [], 100, _).

test(nothing_fits_pack_best_raises, error(ctxrelay(context_overflow, _))) :-
    pack_best([unit(a, [variant(full, 150, 1)], [mandatory(true)])], [], 100, _).

test(overflow_carries_the_cheapest_mandatory_fill, Figures == 130-100) :-
    catch(pack_best([unit(a, [variant(full, 150, 1), variant(small, 70, 1)],
                          [mandatory(true)]),
                     unit(b, [variant(full, 90, 1), variant(small, 60, 1)], []),
                     unit(c, [variant(full, 10, 1)], [])],
                    [together([a, b])], 100, _),
          error(ctxrelay(context_overflow, D), _),
          true),
    get_dict(mandatory_cost, D, MC),
    get_dict(budget, D, B),
    Figures = MC-B.

test(overflow_follows_requires, MC == 170) :-
    catch(pack_best([unit(a, [variant(full, 70, 1)], [mandatory(true)]),
                     unit(b, [variant(full, 100, 1)], [])],
                    [requires(a, b)], 150, _),
          error(ctxrelay(context_overflow, D), _),
          true),
    get_dict(mandatory_cost, D, MC).

test(contradictory_mandatory_units_raise,
     error(ctxrelay(inconsistent_constraints, _))) :-
    pack_best([unit(a, [variant(full, 1, 1)], [mandatory(true)]),
               unit(b, [variant(full, 1, 1)], [mandatory(true)])],
              [excludes(a, b)], 100, _).

test(overflow_message_says_what_and_how_to_fix,
     true(( sub_string(S, _, _, _, "need 150 tokens, the budget is 100"),
            sub_string(S, _, _, _, "Raise the budget") ))) :-
    catch(pack_best([unit(a, [variant(full, 150, 1)], [mandatory(true)])], [], 100, _),
          E, true),
    error_text(E, S).

error_text(E, S) :-
    '$messages':translate_message(E, Lines, []),
    with_output_to(string(S), print_message_lines(current_output, '', Lines)).

:- end_tests(packer_mandatory).


                 /*******************************
                 *            TOGETHER          *
                 *******************************/

:- begin_tests(packer_together).

test(a_pair_that_fits_is_packed_whole, Ids == [call, result]) :-
    pack_best([unit(call, [variant(full, 30, 10)], []),
               unit(result, [variant(full, 60, 90)], [])],
              [together([call, result])], 100, P),
    selection_ids(P, Ids).

test(no_orphan_when_only_one_fits, Ids == [other]) :-
    pack_best([unit(call, [variant(full, 30, 10)], []),
               unit(result, [variant(full, 90, 500)], []),
               unit(other, [variant(full, 40, 20)], [])],
              [together([call, result])], 100, P),
    selection_ids(P, Ids).

test(a_pair_may_shrink_its_variant_to_fit, Sel == [call-full, result-head]) :-
    pack_best([unit(call, [variant(full, 30, 10)], []),
               unit(result, [variant(full, 90, 500), variant(head, 40, 300)], [])],
              [together([call, result])], 100, pack(Sel, _, _, _)).

test(every_alternative_keeps_pairs_whole) :-
    units(Us), constraints(Cs),
    forall(pack(Us, Cs, 700, P, []),
           ( selection_ids(P, Ids),
             (   memberchk(call, Ids) -> memberchk(result, Ids)
             ;   \+ memberchk(result, Ids)
             ))).

:- end_tests(packer_together).


                 /*******************************
                 *           EXCLUDES           *
                 *******************************/

:- begin_tests(packer_excludes).

test(artifact_replaces_the_turns_it_covers, Sel == [system-full, artifact-verbatim]) :-
    pack_best([unit(system, [variant(full, 100, 5000)], [mandatory(true)]),
               unit(t1, [variant(full, 200, 300)], []),
               unit(t2, [variant(full, 200, 300)], []),
               unit(artifact, [variant(verbatim, 300, 900), variant(compact, 80, 500)], [])],
              [excludes(artifact, t1), excludes(artifact, t2)], 400,
              pack(Sel, _, _, _)).

test(turns_win_when_they_are_worth_more, Ids == [system, t1, t2]) :-
    pack_best([unit(system, [variant(full, 100, 5000)], [mandatory(true)]),
               unit(t1, [variant(full, 100, 600)], []),
               unit(t2, [variant(full, 100, 600)], []),
               unit(artifact, [variant(verbatim, 150, 900)], [])],
              [excludes(artifact, t1), excludes(artifact, t2)], 400, P),
    selection_ids(P, Ids).

test(at_most_one_of_a_set, Ids == [c]) :-
    pack_best([unit(a, [variant(full, 10, 5)], []),
               unit(b, [variant(full, 10, 6)], []),
               unit(c, [variant(full, 10, 7)], [])],
              [at_most_one([a, b, c])], 100, P),
    selection_ids(P, Ids).

test(never_both) :-
    units(Us), constraints(Cs),
    forall(pack(Us, Cs, 1000, P, []),
           ( selection_ids(P, Ids),
             \+ ( memberchk(artifact, Ids), memberchk(t1, Ids) ),
             \+ ( memberchk(artifact, Ids), memberchk(t2, Ids) )
           )).

:- end_tests(packer_excludes).


                 /*******************************
                 *           REQUIRES           *
                 *******************************/

:- begin_tests(packer_requires).

test(source_pulls_its_target_in, Ids == [a, b]) :-
    pack_best([unit(a, [variant(full, 40, 100)], []),
               unit(b, [variant(full, 40, 1)], []),
               unit(c, [variant(full, 40, 60)], [])],
              [requires(a, b)], 100, P),
    selection_ids(P, Ids).

test(source_stays_out_when_its_target_does_not_fit, Ids == [c]) :-
    pack_best([unit(a, [variant(full, 40, 100)], []),
               unit(b, [variant(full, 70, 1)], []),
               unit(c, [variant(full, 40, 60)], [])],
              [requires(a, b)], 100, P),
    selection_ids(P, Ids).

test(target_alone_is_fine, Ids == [b]) :-
    pack_best([unit(a, [variant(full, 80, 1)], []),
               unit(b, [variant(full, 40, 10)], [])],
              [requires(a, b)], 100, P),
    selection_ids(P, Ids).

test(every_alternative_respects_requires) :-
    units(Us), constraints(Cs),
    forall(pack(Us, Cs, 700, P, []),
           ( selection_ids(P, Ids),
             ( memberchk(snippet, Ids) -> memberchk(t2, Ids) ; true ))).

:- end_tests(packer_requires).


                 /*******************************
                 *           VARIANTS           *
                 *******************************/

:- begin_tests(packer_variants).

test(best_variant_that_fits, Sel == [a-compact]) :-
    pack_best([unit(a, [variant(verbatim, 300, 900), variant(compact, 80, 600),
                        variant(facts, 20, 250)], [])],
              [], 100, pack(Sel, _, _, _)).

test(variant_split_between_units, Sel == [a-compact, b-facts]) :-
    pack_best([unit(a, [variant(verbatim, 300, 900), variant(compact, 80, 600)], []),
               unit(b, [variant(verbatim, 300, 900), variant(facts, 20, 250)], [])],
              [], 100, pack(Sel, _, _, _)).

test(one_variant_per_unit_in_every_alternative) :-
    units(Us), constraints(Cs),
    forall(pack(Us, Cs, 1000, P, []),
           ( selection_ids(P, Ids),
             sort(Ids, Set),
             same_length(Ids, Set)
           )).

test(selected_in_input_order, Ids == [system, t1, t2, call, result, snippet]) :-
    units(Us), constraints(Cs),
    pack_best(Us, Cs, 2000, P),
    selection_ids(P, Ids).

test(the_model_accepts_the_best_pack, U == Util) :-
    units(Us), constraints(Cs),
    pack_best(Us, Cs, 700, pack(Sel, _, Util, _)),
    pack_constraints(Us, Cs, 700, Vars, _, U),
    maplist(bind_choice(Us, Sel), Vars).

bind_choice(Us, Sel, choice(Id, In, Bs)) :-
    (   memberchk(Id-Name, Sel)
    ->  In = 1,
        memberchk(unit(Id, Vs, _), Us),
        once(nth1(K, Vs, variant(Name, _, _))),
        nth1(K, Bs, 1),
        maplist([B]>>(var(B) -> B = 0 ; true), Bs)
    ;   In = 0
    ).

:- end_tests(packer_variants).


                 /*******************************
                 *            ERRORS            *
                 *******************************/

:- begin_tests(packer_errors).

test(unbound_units, error(instantiation_error)) :-
    pack_best(_, [], 10, _).
test(unbound_budget, error(instantiation_error)) :-
    pack_best([unit(a, [variant(v, 1, 1)], [])], [], _, _).
test(unbound_constraint, error(instantiation_error)) :-
    pack_best([unit(a, [variant(v, 1, 1)], [])], [_], 10, _).
test(unbound_cost, error(instantiation_error)) :-
    pack_best([unit(a, [variant(v, _, 1)], [])], [], 10, _).
test(negative_cost, error(type_error(nonneg, -1))) :-
    pack_best([unit(a, [variant(v, -1, 1)], [])], [], 10, _).
test(negative_utility, error(type_error(nonneg, -3))) :-
    pack_best([unit(a, [variant(v, 1, -3)], [])], [], 10, _).
test(negative_budget, error(type_error(nonneg, -5))) :-
    pack_best([unit(a, [variant(v, 1, 1)], [])], [], -5, _).
test(float_cost, error(type_error(nonneg, 1.5))) :-
    pack_best([unit(a, [variant(v, 1.5, 1)], [])], [], 10, _).
test(malformed_unit, error(type_error(pack_unit, turn(a)))) :-
    pack_best([turn(a)], [], 10, _).
test(malformed_variant, error(type_error(pack_variant, v(1, 1)))) :-
    pack_best([unit(a, [v(1, 1)], [])], [], 10, _).
test(bad_id, error(type_error(unit_id, f(x)))) :-
    pack_best([unit(f(x), [variant(v, 1, 1)], [])], [], 10, _).
test(no_variants, error(domain_error(non_empty_list, []))) :-
    pack_best([unit(a, [], [])], [], 10, _).
test(duplicate_variant_name, error(domain_error(unique_variant_name, v))) :-
    pack_best([unit(a, [variant(v, 1, 1), variant(v, 2, 2)], [])], [], 10, _).
test(duplicate_id, error(domain_error(unique_unit_id, a))) :-
    pack_best([unit(a, [variant(v, 1, 1)], []), unit(a, [variant(v, 1, 1)], [])],
              [], 10, _).
test(bad_mandatory, error(type_error(boolean, yes))) :-
    pack_best([unit(a, [variant(v, 1, 1)], [mandatory(yes)])], [], 10, _).
test(unknown_constraint, error(domain_error(pack_constraint, near(a, b)))) :-
    pack_best([unit(a, [variant(v, 1, 1)], []), unit(b, [variant(v, 1, 1)], [])],
              [near(a, b)], 10, _).
test(unknown_id_in_constraint, error(domain_error(known_unit_id, zz))) :-
    pack_best([unit(a, [variant(v, 1, 1)], [])], [together([a, zz])], 10, _).
test(self_exclusion, error(domain_error(pack_constraint, excludes(a, a)))) :-
    pack_best([unit(a, [variant(v, 1, 1)], [])], [excludes(a, a)], 10, _).
test(together_needs_a_list, error(type_error(list, a))) :-
    pack_best([unit(a, [variant(v, 1, 1)], [])], [together(a)], 10, _).
test(bad_time_limit, error(domain_error(non_negative_time_limit, -1))) :-
    pack_best([unit(a, [variant(v, 1, 1)], [])], [], 10, _, [time_limit(-1)]).
test(bad_max_alternatives, error(type_error(nonneg, many))) :-
    pack([unit(a, [variant(v, 1, 1)], [])], [], 10, _, [max_alternatives(many)]).
test(core_relation_checks_too, error(domain_error(known_unit_id, zz))) :-
    pack_constraints([unit(a, [variant(v, 1, 1)], [])], [requires(a, zz)], 10, _, _, _).
test(other_properties_are_ignored, true) :-
    pack_best([unit(a, [variant(v, 1, 1)], [kind(turn), score(0.3), pinned])], [], 10, _).

:- end_tests(packer_errors).


                 /*******************************
                 *         ALTERNATIVES         *
                 *******************************/

:- begin_tests(packer_alternatives).

test(first_is_the_optimum, U == Max) :-
    units(Us), constraints(Cs),
    pack(Us, Cs, 500, P, []), !,
    utility(P, U),
    pack_constraints(Us, Cs, 500, Vars, _, Max),
    term_variables(Vars, Vs),
    once(labeling([max(Max)], Vs)).

test(non_increasing_utility, Us1 == Sorted) :-
    units(Us), constraints(Cs),
    findall(U, ( pack(Us, Cs, 500, P, []), utility(P, U) ), Us1),
    msort(Us1, Asc),
    reverse(Asc, Sorted).

test(distinct_selections, N == NSet) :-
    units(Us), constraints(Cs),
    findall(Sel, pack(Us, Cs, 500, pack(Sel, _, _, _), []), Sels),
    length(Sels, N),
    sort(Sels, Set),
    length(Set, NSet).

test(every_admissible_selection_exactly_once, Packed == Model) :-
    units(Us), constraints(Cs),
    findall(Sel, pack(Us, Cs, 500, pack(Sel, _, _, _), []), Sels),
    msort(Sels, Packed),
    model_selections(Us, Cs, 500, Model).

test(all_proven, Statuses == [optimal]) :-
    units(Us), constraints(Cs),
    findall(S, pack(Us, Cs, 500, pack(_, _, _, S), []), Ss),
    sort(Ss, Statuses).

test(max_alternatives_zero_yields_the_best_only, N == 1) :-
    units(Us), constraints(Cs),
    aggregate_all(count, pack(Us, Cs, 500, _, [max_alternatives(0)]), N).

test(max_alternatives_bounds_the_rest, N == 3) :-
    units(Us), constraints(Cs),
    aggregate_all(count, pack(Us, Cs, 500, _, [max_alternatives(2)]), N).

test(pack_4_is_pack_5_without_options, Ps4 == Ps5) :-
    units(Us), constraints(Cs),
    findall(P, pack(Us, Cs, 400, P), Ps4),
    findall(P, pack(Us, Cs, 400, P, []), Ps5).

:- end_tests(packer_alternatives).


                 /*******************************
                 *          TIME LIMIT          *
                 *******************************/

:- begin_tests(packer_time_limit).

test(cut_search_reports_a_gap_and_beats_greedy, [true(G >= 1), true(U >= GU)]) :-
    hard(Units, Budget),
    pack_greedy(Units, [], Budget, pack(_, _, GU, _)),
    pack_best(Units, [], Budget, pack(_, Cost, U, Status), [time_limit(0.05)]),
    Status = gap(G),
    assertion(Cost =< Budget),
    assertion(U + G =< Budget).         % the LP bound of subset sum

test(gap_bounds_the_optimum_from_above, true) :-
    units(Us), constraints(Cs),
    pack_best(Us, Cs, 500, pack(_, _, Opt, optimal)),
    pack_best(Us, Cs, 500, pack(_, _, U, S), [time_limit(0)]),
    (   S == optimal
    ->  assertion(U =:= Opt)
    ;   S = gap(G),
        assertion(U =< Opt),
        assertion(Opt =< U + G)
    ).

test(zero_time_still_returns_at_least_greedy, true(U >= GU)) :-
    units(Us), constraints(Cs),
    pack_greedy(Us, Cs, 500, pack(_, _, GU, _)),
    pack_best(Us, Cs, 500, pack(_, _, U, _), [time_limit(0)]).

test(no_alternatives_after_a_cut_search, N == 1) :-
    hard(Units, Budget),
    aggregate_all(count, pack(Units, [], Budget, _, [time_limit(0.02)]), N).

%   A float infinity (Python's float('inf') through the time_limit policy
%   option) means no limit, as the atom inf does; it used to overflow in
%   deadline/2 (evaluation_error(float_overflow)).
test(float_infinity_is_no_limit, S == optimal) :-
    units(Us), constraints(Cs),
    Inf is inf,
    pack_best(Us, Cs, 500, pack(_, _, _, S), [time_limit(Inf)]).

test(greedy_is_admissible_and_not_better, true(U =< Opt)) :-
    units(Us), constraints(Cs),
    pack_greedy(Us, Cs, 500, pack(Sel, Cost, U, _)),
    assertion(Cost =< 500),
    assertion(memberchk(system-_, Sel)),
    pack_best(Us, Cs, 500, pack(_, _, Opt, _)).

:- end_tests(packer_time_limit).


                 /*******************************
                 *        TERMS FROM PYTHON     *
                 *******************************/

:- begin_tests(packer_python_terms).

%   janus turns a Python tuple (Name, A1, ...) into -(Name, A1, ...) and
%   True into @(true).

test(tuples_and_at_true_are_read, Sel == [b-full]) :-
    pack_best([-(unit, a, [-(variant, full, 5, 10), -(variant, small, 1, 4)], []),
               -(unit, b, [-(variant, full, 3, 7)], [-(mandatory, @(true))])],
              [-(excludes, a, b)], 10, pack(Sel, _, _, _)).

test(string_ids_are_ids, Sel == ["a"-full]) :-
    pack_best([unit("a", [variant(full, 1, 1)], [])], [], 10, pack(Sel, _, _, _)).

test(tuple_options, Status == optimal) :-
    pack_best([unit(a, [variant(full, 1, 1)], [])], [], 10, pack(_, _, _, Status),
              [-(time_limit, 1.0)]).

:- end_tests(packer_python_terms).
