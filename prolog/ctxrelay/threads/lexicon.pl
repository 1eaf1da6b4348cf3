/*  The default word lists of ctxrelay_thread_rules: the extension points
    users add clauses to (they are multifile and dynamic in that module).
    This file is included by threads/rules.pl into module ctxrelay_thread_rules,
    as references/lexicon.pl is into ctxrelay_references: the rules apart
    from the words they read.
*/

                 /*******************************
                 *        LEXICON (user)        *
                 *******************************/

%!  return_cue(?Before, ?After) is nondet.
%
%   A return to an earlier topic: the words Before name the return, the
%   topic follows them, up to the words After when there are any ("about
%   X again") or the end of the clause.
return_cue([back, to], []).
return_cue([back, on], []).
return_cue([returning, to], []).
return_cue([return, to], []).
return_cue([coming, back, to], []).
return_cue([circling, back, to], []).
return_cue([getting, back, to], []).
return_cue([revisit], []).
return_cue([revisiting], []).
return_cue([about], [again]).
return_cue([on], [again]).
return_cue(['^', as, for], []).
return_cue(['^', regarding], []).
return_cue(['^', re], []).
return_cue([where, were, we], []).
return_cue([one, more, thing, about], []).     % "one more thing about Lisbon: ..."
return_cue([one, more, thing, on], []).
return_cue([one, more, about], []).            % "one more about the database: ..."
return_cue([one, more, on], []).
return_cue([last, thing, about], []).
return_cue([last, thing, on], []).
return_cue([last, question, about], []).
return_cue([more, questions, about], []).
return_cue([where, we, left, off], []).
return_cue([as, i, was, saying], []).

%!  open_target_word(?Word) is nondet.
%
%   Words that point back without naming the topic ("back to the
%   earlier question", "back to what we were discussing"): a return
%   whose topic holds only these resumes the thread before the current
%   one.
open_target_word(W) :-
    memberchk(W, [previous, earlier, original, main, other, first, last, old, before,
                  topic, topics, question, questions, subject, thing, things, discussion,
                  point, conversation, thread, problem, issue, business, we, were,
                  discussing, talking, said, was, saying, what]).

%!  everyday_destination(?Word) is nondet.
%
%   Places and activities people go back to ("go back to work", "back to
%   bed"): a return cue whose topic holds only these (and times) names no
%   earlier topic, so it is no return.
everyday_destination(W) :-
    memberchk(W, [work, working, home, bed, sleep, sleeping, school, class, classes, college,
                  uni, university, office, job, desk, gym, normal, reality, town, studying]).

%!  attribute_word(?Word) is nondet.
%
%   Words that ask for a property of the subject at hand, not for a new
%   thing: "What pace for the easy runs?", "What temperature for the
%   lamb?" follow the thread up (new_focus/4 does not split them).
attribute_word(W) :-
    memberchk(W, [pace, time, times, temperature, size, sizes, length, speed, price, prices,
                  cost, costs, colour, color, version, format, order, number, amount, ratio,
                  weight, height, width, depth, distance, duration, frequency, percentage,
                  level, setting, settings, value, rate, schedule, step, steps, part, parts,
                  day, days, hour, hours, minutes, week, weeks, month, months, year, years,
                  age, date, mode, style, brand, model, ones, one, else, exactly]).

%!  follow_up_marker(?Words) is nondet.
%
%   Phrases that continue the previous turn whatever words they use.
follow_up_marker([go, on]).
follow_up_marker([keep, going]).
follow_up_marker([carry, on]).
follow_up_marker(['^', continue]).
follow_up_marker([tell, me, more]).
follow_up_marker([say, more]).
follow_up_marker([more, detail]).
follow_up_marker([more, details]).
follow_up_marker(['^', and, then]).
follow_up_marker([then, what]).
follow_up_marker([what, next]).
follow_up_marker(['what\'s', next]).
follow_up_marker([next, step]).
follow_up_marker([next, steps]).
follow_up_marker([after, that]).
follow_up_marker(['^', why]).
follow_up_marker(['^', how, come]).
follow_up_marker(['^', how, so]).
follow_up_marker(['^', such, as]).
follow_up_marker(['^', like, what]).
follow_up_marker([for, example, '$']).
follow_up_marker([an, example]).
follow_up_marker([another, example]).
follow_up_marker([what, else]).
follow_up_marker([anything, else]).
follow_up_marker([are, you, sure]).
follow_up_marker(['^', really]).
follow_up_marker(['^', ok]).
follow_up_marker(['^', okay]).
follow_up_marker(['^', thanks]).
follow_up_marker(['^', thank, you]).
follow_up_marker(['^', got, it]).
follow_up_marker(['^', makes, sense]).
follow_up_marker(['^', sounds, good]).
follow_up_marker(['^', great]).
follow_up_marker(['^', perfect]).
follow_up_marker(['^', yes]).
follow_up_marker(['^', no]).
follow_up_marker(['^', yeah]).
follow_up_marker(['^', hmm]).
follow_up_marker(['^', wait]).
follow_up_marker([in, that, case]).
follow_up_marker([what, if]).
follow_up_marker([instead, '$']).
follow_up_marker([step, by, step]).
follow_up_marker([the, same, way]).

%!  topic_opener(?Words) is nondet.
%
%   Openers that often bring a new subject without announcing it ("Actually,
%   what's a good backup?"): after one, a question of a single content
%   word the current thread never used starts a thread.
topic_opener(['^', actually]).
topic_opener(['^', also]).
topic_opener(['^', oh, and]).
topic_opener(['^', one, more, thing]).
topic_opener(['^', another, thing]).
topic_opener(['^', quick, question]).
topic_opener(['^', random, question]).
topic_opener(['^', while, 'i\'m', at, it]).
topic_opener(['^', i, also, want]).            % "I also want to start composting."
topic_opener(['^', i, also, need]).
topic_opener(['^', we, also, want]).
topic_opener(['^', we, also, need]).
topic_opener(['^', 'we\'re', also]).         % "We're also looking at daycares ..."
topic_opener(['^', we, are, also]).
topic_opener(['^', 'i\'m', also]).
topic_opener(['^', i, am, also]).
topic_opener(['^', separately]).
topic_opener(['^', on, another, subject]).

%!  request_opener(?Words) is nondet.
%
%   Openers of a request, which asks like a question without a question
%   mark ("Tell me about coral reefs.").
request_opener(['^', tell, me]).
request_opener(['^', explain]).
request_opener(['^', describe]).
request_opener(['^', show, me]).
request_opener(['^', give, me]).
request_opener(['^', help, me]).
request_opener(['^', i, want, to, know]).
request_opener(['^', i, need, help]).
request_opener(['^', can, you]).
request_opener(['^', could, you]).
request_opener(['^', please]).
