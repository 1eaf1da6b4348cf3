/*  The default word lists of ctxrelay_references: the extension points
    users add clauses to (they are multifile and dynamic in that module).
    This file is included by references.pl into module ctxrelay_references.
*/

                 /*******************************
                 *        WORD LISTS (user)     *
                 *******************************/

%!  entity_determiner(?Word) is nondet.
%   Determiners that open an entity reference ("that bug").
entity_determiner(that).
entity_determiner(this).
entity_determiner(those).
entity_determiner(these).
entity_determiner(the).

%!  weak_determiner(?Word) is nondet.
%   Determiners that also introduce new things or name things in the
%   world ("the kernel", "the map"): classify_intent/4 counts their
%   references only when a modifier of the noun phrase was mentioned
%   before ("the indices approach", "the TLS config").
weak_determiner(the).

%!  entity_noun(?Word) is nondet.
%   Nouns (singular) that end a noun phrase after an entity determiner.
%   `the` needs one; `that`/`this` fall back to the next word.
entity_noun(W) :- entity_noun_(W).

entity_noun_(bug). entity_noun_(error). entity_noun_(issue). entity_noun_(problem).
entity_noun_(exception). entity_noun_(warning). entity_noun_(crash). entity_noun_(failure).
entity_noun_(fix). entity_noun_(patch). entity_noun_(change). entity_noun_(workaround).
entity_noun_(config). entity_noun_(configuration). entity_noun_(setting). entity_noun_(flag).
entity_noun_(option). entity_noun_(parameter). entity_noun_(param). entity_noun_(variable).
entity_noun_(value). entity_noun_(key). entity_noun_(cert). entity_noun_(certificate).
entity_noun_(token). entity_noun_(secret). entity_noun_(password). entity_noun_(file).
entity_noun_(script). entity_noun_(snippet). entity_noun_(code). entity_noun_(example).
entity_noun_(function). entity_noun_(method). entity_noun_(class). entity_noun_(module).
entity_noun_(package). entity_noun_(library). entity_noun_(command). entity_noun_(query).
entity_noun_(index). entity_noun_(table). entity_noun_(column). entity_noun_(schema).
entity_noun_(migration). entity_noun_(field). entity_noun_(endpoint). entity_noun_(route).
entity_noun_(header). entity_noun_(cookie). entity_noun_(record). entity_noun_(rule).
entity_noun_(policy). entity_noun_(role). entity_noun_(permission). entity_noun_(block).
entity_noun_(section). entity_noun_(approach). entity_noun_(idea). entity_noun_(solution).
entity_noun_(suggestion). entity_noun_(recommendation). entity_noun_(thing). entity_noun_(part).
entity_noun_(bit). entity_noun_(version). entity_noun_(build). entity_noun_(image).
entity_noun_(container). entity_noun_(pod). entity_noun_(node). entity_noun_(cluster).
entity_noun_(server). entity_noun_(service). entity_noun_(instance). entity_noun_(database).
entity_noun_(stage). entity_noun_(layer). entity_noun_(job). entity_noun_(task).
entity_noun_(test). entity_noun_(workflow). entity_noun_(pipeline). entity_noun_(branch).
entity_noun_(commit). entity_noun_(release). entity_noun_(deployment). entity_noun_(trick).
entity_noun_(pattern). entity_noun_(setup). entity_noun_(mode). entity_noun_(loop).
entity_noun_(timeout). entity_noun_(limit). entity_noun_(threshold). entity_noun_(alert).
entity_noun_(expression). entity_noun_(regex). entity_noun_(metric). entity_noun_(design).
entity_noun_(strategy). entity_noun_(bucket). entity_noun_(volume). entity_noun_(port).
entity_noun_(process). entity_noun_(thread). entity_noun_(lock). entity_noun_(mutex).
entity_noun_(cache). entity_noun_(queue). entity_noun_(topic). entity_noun_(partition).
entity_noun_(shard). entity_noun_(replica). entity_noun_(step). 
entity_noun_(tool). entity_noun_(plugin). entity_noun_(extension). entity_noun_(dependency).
entity_noun_(statement). entity_noun_(line).  entity_noun_(model).
entity_noun_(algorithm).  entity_noun_(framework). entity_noun_(api).
entity_noun_(request). entity_noun_(message). entity_noun_(list). entity_noun_(map).
entity_noun_(struct). entity_noun_(type). entity_noun_(interface). entity_noun_(trait).
entity_noun_(macro). entity_noun_(rotation). entity_noun_(proxy). entity_noun_(dashboard).

%!  turn_marker(?Words) is nondet.
%   Phrases that point at an earlier turn of the assistant.
turn_marker([you, said]).
turn_marker([you, just, said]).
turn_marker([did, you, say]).
turn_marker([you, were, saying]).
turn_marker([you, mentioned]).
turn_marker([you, suggested]).
turn_marker([you, recommended]).
turn_marker([you, proposed]).
turn_marker([you, wrote]).
turn_marker([you, described]).
turn_marker([you, explained]).
turn_marker([you, showed]).
turn_marker([you, listed]).
turn_marker([you, outlined]).
turn_marker([you, noted]).
turn_marker([you, pointed, out]).
turn_marker([you, brought, up]).
turn_marker([you, told, me]).
turn_marker([you, gave, me]).
turn_marker([you, talked, about]).
turn_marker([you, were, talking, about]).
turn_marker([you, referred, to]).
turn_marker([you, meant]).
turn_marker([your, A, N]) :- answer_adjective(A), answer_noun(N).
turn_marker([your, N]) :- answer_noun(N).
turn_marker([the, A, N]) :- answer_adjective(A), answer_noun(N).
turn_marker([as, mentioned, above]).
turn_marker([as, mentioned, earlier]).
turn_marker([as, discussed]).
turn_marker([we, discussed]).
turn_marker([we, talked, about]).

answer_adjective(last).
answer_adjective(previous).
answer_adjective(earlier).
answer_adjective(latest).
answer_adjective(original).
answer_adjective(first).

answer_noun(answer).
answer_noun(answers).
answer_noun(reply).
answer_noun(response).
answer_noun(message).
answer_noun(explanation).
answer_noun(summary).
answer_noun(advice).
answer_noun(comment).
answer_noun(point).
answer_noun(post).

%!  earlier_word(?Word) is nondet.
%   Words that move a turn reference to the assistant turn before the
%   latest ("what you said earlier").
earlier_word(earlier).
earlier_word(before).
earlier_word(previously).
earlier_word(originally).
earlier_word(initially).
earlier_word(first).

%!  action_marker(?Words) is nondet.
%   Phrases asking to repeat an earlier action.
action_marker([do, it, again]).
action_marker([do, that, again]).
action_marker([do, this, again]).
action_marker([do, the, same]).
action_marker([the, same, for]).
action_marker([same, thing]).
action_marker([same, for]).
action_marker([same, again]).
action_marker([same, as, before]).
action_marker([repeat, that]).
action_marker([repeat, it]).
action_marker([repeat, this]).
action_marker([repeat, the, same]).
action_marker([redo, it]).
action_marker([redo, that]).
action_marker([rerun, it]).
action_marker([rerun, that]).
action_marker([re-run, it]).
action_marker([re-run, that]).
action_marker([one, more, time]).
action_marker([like, before]).
action_marker([the, same, way]).
action_marker([V, it, again]) :- imperative_verb(V).
action_marker([V, that, again]) :- imperative_verb(V).
action_marker([V, them, again]) :- imperative_verb(V).

%!  imperative_verb(?Word) is nondet.
%   Verbs that open a request ("run the tests", "restart etcd-2").
imperative_verb(W) :- imperative_verb_(W).

imperative_verb_(run). imperative_verb_(rerun). imperative_verb_(do). imperative_verb_(try).
imperative_verb_(restart). imperative_verb_(start). imperative_verb_(stop). imperative_verb_(deploy).
imperative_verb_(roll). imperative_verb_(write). imperative_verb_(generate). imperative_verb_(create).
imperative_verb_(make). imperative_verb_(build). imperative_verb_(list). imperative_verb_(show).
imperative_verb_(fix). imperative_verb_(check). imperative_verb_(test). imperative_verb_(benchmark).
imperative_verb_(rewrite). imperative_verb_(convert). imperative_verb_(compute). imperative_verb_(update).
imperative_verb_(delete). imperative_verb_(remove). imperative_verb_(install). imperative_verb_(add).
imperative_verb_(rename). imperative_verb_(refactor). imperative_verb_(migrate). imperative_verb_(summarize).
imperative_verb_(summarise). imperative_verb_(explain). imperative_verb_(send). imperative_verb_(fetch).
imperative_verb_(pull). imperative_verb_(push). imperative_verb_(query). imperative_verb_(search).
imperative_verb_(find). imperative_verb_(scan). imperative_verb_(compare). imperative_verb_(plot).
imperative_verb_(draw). imperative_verb_(translate). imperative_verb_(format). imperative_verb_(upgrade).
imperative_verb_(downgrade). imperative_verb_(scale). imperative_verb_(drain). imperative_verb_(reboot).
imperative_verb_(apply). imperative_verb_(execute). imperative_verb_(say). imperative_verb_(give).
imperative_verb_(set). imperative_verb_(open). imperative_verb_(close). imperative_verb_(draft).
imperative_verb_(print). imperative_verb_(load). imperative_verb_(analyze). imperative_verb_(analyse).
imperative_verb_(measure). imperative_verb_(profile). imperative_verb_(ping). imperative_verb_(call).
imperative_verb_(retry). imperative_verb_(redo). imperative_verb_(repeat). imperative_verb_(clean).

%!  tool_noun(?Word) is nondet.
%   Nouns (singular) for the output of a tool call ("the query result").
tool_noun(result).
tool_noun(output).
tool_noun(log).
tool_noun(response).
tool_noun(dump).
tool_noun(trace).
tool_noun(traceback).
tool_noun(stacktrace).
tool_noun(stdout).
tool_noun(stderr).
tool_noun(profile).
tool_noun(report).
tool_noun(listing).
tool_noun(printout).
tool_noun(stat).
tool_noun(number).
tool_noun(payload).

%!  tool_source(?Word) is nondet.
%   Things that run and produce output ("what the command printed").
tool_source(query).
tool_source(command).
tool_source(script).
tool_source(call).
tool_source(request).
tool_source(search).
tool_source(scan).
tool_source(tool).
tool_source(job).
tool_source(test).
tool_source(run).
tool_source(check).
tool_source(benchmark).
tool_source(probe).

%!  tool_verb(?Word) is nondet.
%   Verbs telling what a tool produced or how it was run.
tool_verb(W) :- tool_verb_(W).

tool_verb_(returned). tool_verb_(return). tool_verb_(returns). tool_verb_(printed).
tool_verb_(print). tool_verb_(prints). tool_verb_(showed). tool_verb_(shows).
tool_verb_(show). tool_verb_(gave). tool_verb_(give). tool_verb_(gives).
tool_verb_(found). tool_verb_(find). tool_verb_(finds). tool_verb_(produced).
tool_verb_(output). tool_verb_(outputs). tool_verb_(reported). tool_verb_(reports).
tool_verb_(says). tool_verb_(said). tool_verb_(pulled). tool_verb_(ran).
tool_verb_(run). tool_verb_(fetched). tool_verb_(got). tool_verb_(captured).
tool_verb_(executed). tool_verb_(collected). tool_verb_(grabbed). tool_verb_(dumped).
tool_verb_(generated). tool_verb_(queried). tool_verb_(retrieved). tool_verb_(spat).
tool_verb_(emitted). tool_verb_(logged). tool_verb_(displayed). tool_verb_(yielded).

%!  tool_alias(?Word, ?NamePart) is nondet.
%   A word of a tool reference that names tools whose name has
%   NamePart ("the API response" matches a tool named http_get).
tool_alias(api, http).
tool_alias(api, rest).
tool_alias(api, request).
tool_alias(api, curl).
tool_alias(http, curl).
tool_alias(query, sql).
tool_alias(query, db).
tool_alias(query, promql).
tool_alias(sql, query).
tool_alias(log, logs).
tool_alias(search, web).
tool_alias(cli, shell).
tool_alias(cli, bash).
tool_alias(shell, bash).
tool_alias(shell, exec).
tool_alias(command, shell).
tool_alias(command, bash).
tool_alias(command, exec).

%!  ordinal_word(?Word, ?Position) is nondet.
%   Position is 1-based from the start, or negative from the end
%   (last = -1).
ordinal_word(first, 1).
ordinal_word(second, 2).
ordinal_word(third, 3).
ordinal_word(fourth, 4).
ordinal_word(fifth, 5).
ordinal_word(sixth, 6).
ordinal_word(seventh, 7).
ordinal_word(eighth, 8).
ordinal_word(ninth, 9).
ordinal_word(tenth, 10).
ordinal_word(eleventh, 11).
ordinal_word(twelfth, 12).
ordinal_word(last, -1).
ordinal_word(final, -1).
ordinal_word(latter, -1).
ordinal_word(former, 1).
ordinal_word(penultimate, -2).
ordinal_word('second-to-last', -2).

%!  ordinal_noun(?Word) is nondet.
%   Nouns (singular) naming an item of an enumeration.
ordinal_noun(option).
ordinal_noun(approach).
ordinal_noun(one).
ordinal_noun(step).
ordinal_noun(item).
ordinal_noun(point).
ordinal_noun(bullet).
ordinal_noun(suggestion).
ordinal_noun(solution).
ordinal_noun(choice).
ordinal_noun(alternative).
ordinal_noun(idea).
ordinal_noun(method).
ordinal_noun(way).
ordinal_noun(proposal).
ordinal_noun(recommendation).
ordinal_noun(variant).
ordinal_noun(entry).
ordinal_noun(tip).
ordinal_noun(cause).
ordinal_noun(reason).
ordinal_noun(strategy).
ordinal_noun(fix).

cardinal_word(one, 1).
cardinal_word(two, 2).
cardinal_word(three, 3).
cardinal_word(four, 4).
cardinal_word(five, 5).
cardinal_word(six, 6).
cardinal_word(seven, 7).
cardinal_word(eight, 8).
cardinal_word(nine, 9).
cardinal_word(ten, 10).


