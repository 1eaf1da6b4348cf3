:- module(ctxrelay, []).
:- use_module(library(janus)).

/** <module> ctxrelay: a context runtime for LLM agents

Load with `:- use_module(library(ctxrelay)).` from a swipl started by
`bin/ctxrelay-swipl` (which puts prolog/ on the library path and the
project's virtual environment under janus), or from Python by
`import ctxrelay`.

The public predicates are re-exported from one module per concern:

  - ctxrelay_store: the durable transcript (sessions, append, history,
    search, export/import, stats)
  - ctxrelay_errors: error terms crossing the janus boundary
  - ctxrelay_policy: caps, reserve, margin, the input budget
  - ctxrelay_context: context/3, lazy bounded cold-history access
  - ctxrelay_warm: explicit, versioned warm artifacts
  - ctxrelay_packer: the CLP(FD) packer
  - ctxrelay_mode: conversation, document and hybrid modes
  - ctxrelay_threads: the turn log (derived fields), topic threads, thread state
  - ctxrelay_runtime: managed_turn/4, assemble/4, completion/4
*/

% Running from a source checkout: make the Python package importable even
% when it is not installed in the active environment.
:- prolog_load_context(directory, Dir),
   directory_file_path(Dir, '../python', PyDir0),
   absolute_file_name(PyDir0, PyDir),
   (   exists_directory(PyDir)
   ->  py_add_lib_dir(PyDir, first)
   ;   true
   ).

:- reexport(ctxrelay/errors).
:- reexport(ctxrelay/store).
:- reexport(ctxrelay/policy).
:- reexport(ctxrelay/context).
:- reexport(ctxrelay/warm).
:- reexport(ctxrelay/scratch).
:- reexport(ctxrelay/knowledge).
:- reexport(ctxrelay/router).
:- reexport(ctxrelay/envelope).
:- reexport(ctxrelay/mode).
:- reexport(ctxrelay/threads).
:- reexport(ctxrelay/references).
:- reexport(ctxrelay/intent).
:- reexport(ctxrelay/packer).
:- reexport(ctxrelay/runtime).

%   py_options(+Pairs, -Options) is det.
%
%   Pairs is a list of [Name, Value] lists from Python (janus has no
%   Name(Value) term on its side); Options is the Prolog option list.
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
