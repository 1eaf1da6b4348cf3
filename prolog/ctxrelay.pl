:- module(ctxrelay, []).
:- use_module(library(janus)).

/** <module> ctxrelay: a context runtime for LLM agents

Load with `:- use_module(library(ctxrelay)).` from a swipl started by
`bin/ctxrelay-swipl` (which puts prolog/ on the library path and the
project's virtual environment under janus), or from Python by
`import ctxrelay`.

This module is the public API: it re-exports the documented user
predicates of the modules below and nothing else, so loading it adds no
plumbing and no generic names to the importing module.

  | Group            | Predicates                                              | Module             |
  |------------------|---------------------------------------------------------|--------------------|
  | managed turns    | managed_turn/4, turn_prepare/4, turn_commit/4, completion/4 | ctxrelay_runtime |
  | assembly, packs  | assemble/4, pack/5, pack_best/5                         | ctxrelay_assembly, ctxrelay_packer |
  | cold history     | context/3, context/4, with_input_context/3              | ctxrelay_context   |
  | the store        | store_open/2,3, store_close/1, default_store/1, set_default_store/1, session_create/3, session_info/3, sessions/2, session_archive/2, session_stats/3, turn_append/4,5, turn_get/4, turn_count/3, turn_for_key/4, transcript_history/4, transcript_search/4,5, transcript_export/3, transcript_import/4 | ctxrelay_store |
  | knowledge (P)    | fact_add/4, facts_search/4, fact_get/4, knowledge_ingest/4, knowledge_reindex/3 | ctxrelay_knowledge |
  | tool output (E)  | tool_output_record/6,7, scratch_get/4,5, scratch_raw/4, scratch_pin/3, scratch_entries/3 | ctxrelay_scratch |
  | warm artifacts   | warm_publish/5,6, warm_artifacts/3                      | ctxrelay_warm      |
  | topic threads    | turnlog_derive/3, turn_derived/4, topic_threads/3, topic_thread/4, thread_state_set/4 | ctxrelay_threads |
  | storage router   | retrieve/4, recent_turns/4,5                            | ctxrelay_router    |

The decision models that users extend (multifile, dynamic hooks) stay in
their modules and are reached module-qualified: the intent markers
(ctxrelay_intent), the reference lexicon (ctxrelay_references), the
thread cues and state markers (ctxrelay_thread_rules,
ctxrelay_thread_state), the
document and seed markers (ctxrelay_mode), the blend weights
(ctxrelay_blend), the router's access model (ctxrelay_router:route/2),
the policy defaults (ctxrelay_policy), the promotion rules and thresholds
(ctxrelay_promotion, which also offers promote_turns/5 to agents that
run their own turns) and the naming-phrase lexicon (ctxrelay_naming).
See docs/architecture.md.
*/

% Running from a source checkout: make the Python package importable even
% when it is not installed in the active environment.  The module's own file,
% not prolog_load_context/2: loaded from its .qlf inside another file's load,
% the load context is that other file's directory.
:- module_property(ctxrelay, file(File)),
   file_directory_name(File, Dir),
   directory_file_path(Dir, '../python', PyDir0),
   absolute_file_name(PyDir0, PyDir),
   (   exists_directory(PyDir)
   ->  py_add_lib_dir(PyDir, first)
   ;   true
   ).

:- reexport(ctxrelay/runtime,
            [ managed_turn/4, turn_prepare/4, turn_commit/4, completion/4 ]).
:- reexport(ctxrelay/assembly,
            [ assemble/4 ]).
:- reexport(ctxrelay/packer,
            [ pack/5, pack_best/5 ]).
:- reexport(ctxrelay/context,
            [ context/3, context/4, with_input_context/3 ]).
:- reexport(ctxrelay/store,
            [ store_open/2, store_open/3, store_close/1,
              default_store/1, set_default_store/1,
              session_create/3, session_info/3, sessions/2,
              session_archive/2, session_stats/3,
              turn_append/4, turn_append/5, turn_get/4, turn_count/3,
              turn_for_key/4, transcript_history/4,
              transcript_search/4, transcript_search/5,
              transcript_export/3, transcript_import/4
            ]).
:- reexport(ctxrelay/knowledge,
            [ fact_add/4, facts_search/4, fact_get/4, knowledge_ingest/4,
              knowledge_reindex/3 ]).
:- reexport(ctxrelay/scratch,
            [ tool_output_record/6, tool_output_record/7,
              scratch_get/4, scratch_get/5, scratch_raw/4,
              scratch_pin/3, scratch_entries/3
            ]).
:- reexport(ctxrelay/warm,
            [ warm_publish/5, warm_publish/6, warm_artifacts/3 ]).
:- reexport(ctxrelay/threads,
            [ turnlog_derive/3, turn_derived/4, topic_threads/3,
              topic_thread/4, thread_state_set/4
            ]).
:- reexport(ctxrelay/router,
            [ retrieve/4, recent_turns/4, recent_turns/5 ]).

%   py_options(+Pairs, -Options) is det.
%
%   For the Python facade: Pairs is a list of [Name, Value] lists (janus
%   has no Name(Value) term on its side); Options is the Prolog option
%   list.  Not exported: Python calls it as ctxrelay:py_options/2.
py_options(Pairs, Options) :-
    maplist(py_option, Pairs, Options).

py_option([Name0, Value0], Option) :-
    atom_string(Name, Name0),
    py_value(Value0, Value),
    Option =.. [Name, Value].

%   Python's True/False arrive as @true/@false; options want plain atoms.
py_value(V, V) :- var(V), !.
py_value(@(true), true) :- !.
py_value(@(false), false) :- !.
py_value(V, V).
