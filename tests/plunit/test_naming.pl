:- use_module(library(plunit)).
:- use_module(library(lists)).
:- use_module(library(ctxrelay/naming)).

%   Naming phrases (CRP-SPEC-035 §4.2): "a computed value the user names".

names(Text, Got) :-
    namings(Text, Ns),
    findall(N-V, member(naming(N, V, _, _), Ns), Got).

:- begin_tests(naming_forms).

test(call_that_the, Got == ["the budget figure"-none]) :-
    names("Call that the budget figure.", Got).
test(lets_call_a_value, Got == ["the Q3 revenue"-"4.2M"]) :-
    names("let's call 4.2M the Q3 revenue", Got).
test(curly_apostrophe_and_let_us, Got == ["the zebra launch code"-"7741-ALPHA",
                                          "the cluster size"-"12 nodes"]) :-
    names("Let’s call 7741-ALPHA the zebra launch code. And let us call 12 nodes the cluster size.",
          Got).
test(identifier, Got == ["budget_q3"-none]) :-
    names("name that budget_q3", Got).
test(save_as_plain_words, Got == ["the build matrix"-none]) :-
    names("Save that as the build matrix, please.", Got).
test(quoted, Got == ["launch plan"-none]) :-
    names("call it \"launch plan\" from now on", Got).
test(curly_quotes, Got == ["Project X"-none]) :-
    names("call this “Project X” going forward", Got).
test(refer_to_as, Got == ["deploy target"-none]) :-
    names("refer to it as deploy target", Got).
test(line_break_ends_a_name, Got == ["the budget figure"-none]) :-
    names("call that the budget figure\nthen move on", Got).
test(span, [S-E == 10-37]) :-
    namings("Sure. Ok, call that the budget figure.", [naming(_, _, S, E)]).
test(a_name_ends_with_its_sentence, Got == ["the q3 number"-none]) :-
    names("Call that the q3 number. Also send it to finance please", Got).
test(two_in_order, Got == ["the q3 number"-none, "budget_2"-none]) :-
    names("So call that the q3 number. Also name this budget_2 then", Got).

:- end_tests(naming_forms).

:- begin_tests(naming_refusals).

test(call_that_function_again, Got == []) :-
    names("Can you call that function again?", Got).
test(call_it_a_day, Got == []) :-
    names("Let's call it a day.", Got).
test(negated, Got == []) :-
    names("Don't call that the budget figure.", Got).
test(negated_two_words_before, Got == []) :-
    names("don't ever really call that the budget figure", Got).
test(negation_three_words_before_does_not_count, Got == ["the budget figure"-none]) :-
    names("don't ever really truly call that the budget figure", Got).
test(call_that_out, Got == []) :-
    names("We should call that out in the review.", Got).
test(name_the_files, Got == []) :-
    names("Please name the files after the date.", Got).
test(value_with_a_stop_word, Got == []) :-
    names("let's call the API and the database", Got).
test(not_a_name, Got == []) :-
    names("keep that as done", Got).
test(no_word_in_the_name, Got == []) :-
    names("call that \"...\"", Got).
test(no_trigger_word_no_scan, Got == []) :-
    names("The Q3 revenue was 4.2M, as we said.", Got).
test(not_text, error(type_error(text, 42))) :-
    namings(42, _).

:- end_tests(naming_refusals).

:- begin_tests(naming_lexicon).

test(user_verb, Got == ["the baseline"-none]) :-
    setup_call_cleanup(
        assertz(ctxrelay_naming:naming_as_verb([bookmark])),
        names("bookmark that as the baseline", Got),
        retract(ctxrelay_naming:naming_as_verb([bookmark]))).
test(without_the_user_verb, Got == []) :-
    names("bookmark that as the baseline", Got).
test(user_negation, Got == []) :-
    setup_call_cleanup(
        assertz(ctxrelay_naming:naming_negation([hardly])),
        names("hardly call that the budget figure", Got),
        retract(ctxrelay_naming:naming_negation([hardly]))).
test(user_not_a_name, [Before, After] == [["pending"-none], []]) :-
    names("save that as pending", Before),
    setup_call_cleanup(
        assertz(ctxrelay_naming:not_a_name(pending)),
        names("save that as pending", After),
        retract(ctxrelay_naming:not_a_name(pending))).

:- end_tests(naming_lexicon).
