:- module(ctxrelay_options,
          [ check_options/3         % :PI, +Arg, +Options
          ]).
:- use_module(library(error)).
:- use_module(library(apply)).
:- use_module(library(predicate_options)).

/** <module> One rule for options: unknown or ill-typed options are errors

Every public predicate that takes an option list declares its options with
predicate_options/3 (names, types) and checks the list it is given against
that declaration with check_options/3 before doing anything: an option it
does not know raises existence_error(option, Opt), an ill-typed value the
type error of its declaration.  The declarations are the one place the
options are written down (pldoc and the checks read the same list).
*/

:- meta_predicate check_options(:, +, +).

%!  check_options(:PI, +Arg, +Options) is det.
%
%   Options, given as argument Arg of PI, are all declared for it and well
%   typed.
%
%   @error type_error(list, Options)
%   @error existence_error(option, Opt) for an option PI does not take
%   @error type_error(Type, Value) for a value of the wrong type
check_options(M:PI, Arg, Options) :-
    must_be(list, Options),
    maplist(check_option(M:PI, Arg), Options).

check_option(PI, Arg, Option) :-
    must_be(compound, Option),
    catch(once(check_predicate_option(PI, Arg, Option)), Error, true),
    (   var(Error)
    ->  true
    ;   Error = error(type_error(oneof(Allowed), V), _), string(V),
        atom_string(A, V), memberchk(A, Allowed)
    ->  true                    % a name given as text (Python passes strings)
    ;   throw(Error)
    ).
