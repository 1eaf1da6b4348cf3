:- use_module(library(plunit)).
:- use_module(library(ctxrelay/mode)).
:- use_module(library(ctxrelay/blend)).

:- begin_tests(ctxrelay_mode).

test(document_task, M == document) :-
    context_mode("Draft a short report on TLS rotation and backups", auto, 5, M).
test(hybrid_needs_history_and_a_conversation_seed, M == hybrid) :-
    context_mode("write me a guide about what we just discussed", auto, 5, M).
test(no_history_is_a_plain_document, M == document) :-
    context_mode("write me a guide about what we just discussed", auto, 0, M).
test(put_together_a_runbook, M == hybrid) :-
    context_mode("can you put together a runbook from this conversation", auto, 3, M).
test(questions_are_conversation, M == conversation) :-
    context_mode("what is the etcd quota? I need to write it down", auto, 5, M).
test(requested_mode_wins, M == document) :-
    context_mode("hello", "document", 5, M).
test(unknown_mode, error(domain_error(context_mode, essay))) :-
    context_mode("hello", essay, 5, _).
test(user_marker_extends_detection, M == document) :-
    setup_call_cleanup(
        assertz(ctxrelay_mode:document_task_marker([lay, out, gap(3), plan])),
        context_mode("lay out a migration plan", auto, 2, M),
        retract(ctxrelay_mode:document_task_marker([lay, out, gap(3), plan]))).
test(document_blend_has_novelty_on) :-
    intent_blend(drill_down, B0),
    mode_blend(document, B0, B),
    assertion(B.novelty == on),
    assertion(B.p > B0.p),
    mode_blend(conversation, B0, B1),
    assertion(B1 == B0).

:- end_tests(ctxrelay_mode).
