:- module(ctxrelay_packer_defer,
          [ defer_mask/4,           % +P, +R, +Table, -Build
            unit_rv/5,              % +Res, +Zero, +M, +K, -Rv
            key_rv/3                % +Table, +Key, -Rv
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).
:- use_module(structure, [numlist_/3]).

/** <module> Row values of packs, and the floors the search may defer

The row table of a problem (ctxrelay_packer_user:row_table/4) is
rows(Dirs, Bs, Res, Zero): per unit M, Res holds the vector of row
coefficients of each of its variants ([] when no row touches the unit).
ctxrelay_packer_rows builds its classes without the floors that
defer_mask/4 marks, and checks the pack found against them.
*/

%!  unit_rv(+Res, +Zero, +M, +K, -Rv) is det.
%
%   The row vector of variant K of unit M.

unit_rv(Res, Zero, M, K, Rv) :-
    arg(M, Res, Vecs),
    (   Vecs == []
    ->  Rv = Zero
    ;   nth1(K, Vecs, Rv)
    ).

%!  key_rv(+Table, +Key, -Rv) is det.
%
%   The row values of the pack Key (a list of Unit-Variant).

key_rv(rows(_, _, Res, Zero), Key, Rv) :-
    foldl({Res, Zero}/[M-K, R0, R]>>( unit_rv(Res, Zero, M, K, Rv1), vadd(R0, Rv1, R) ),
          Key, Zero, Rv).

vadd([], [], []).
vadd([A|As], [B|Bs], [C|Cs]) :-
    C is A+B,
    vadd(As, Bs, Cs).

%!  defer_mask(+P, +R, +Table, -Build) is det.
%
%   Per row of Table, false for a `>=` row that a quick fill of problem
%   P under the restrictions R meets with room to spare (r > b), true
%   otherwise.  Only floors: a greedy packs less than the
%   optimum, so a floor it meets is seldom broken by the optimum, while a
%   cap it meets often is (on the bench instances, deferring caps too
%   made 31 of 200 searches run twice; floors alone, none).  The fill
%   only guesses (exactness comes from the check of the pack found), so
%   it ignores the structural constraints: the mandatory units at their
%   cheapest variant, then variants by decreasing utility per token,
%   one per unit, while they fit.

defer_mask(P, R, Table, Build) :-
    Table = rows(Dirs, Bs, _, _),
    (   memberchk(ge, Dirs)
    ->  quick_fill(P, R, Key),
        key_rv(Table, Key, Rv),
        maplist(build_row, Dirs, Rv, Bs, Build)
    ;   maplist([_, true]>>true, Dirs, Build)
    ).

quick_fill(prob(N, _, Us, _, Budget, _), R, Key) :-
    numlist_(1, N, Ms),
    foldl(quick_candidates(Us, R), Ms, Mand-Opt, []-[]),
    foldl([M-K-C, Ke0-C0, [M-K|Ke0]-C1]>>(C1 is C0+C), Mand, []-0, Key0-Cost0),
    keysort(Opt, ByDensity),
    functor(Taken, taken, N),
    foldl(quick_take(Budget, Taken), ByDensity, Key0-Cost0, Key-_).

quick_candidates(Us, R, M, Mand0-Opt0, Mand-Opt) :-
    arg(M, Us, u(Vs, Mandatory)),
    arg(M, R, O),
    (   Mandatory == true
    ->  Opt0 = Opt,
        (   findall(C-K, ( member(K, O), K > 0, memberchk(v(K, _, C, _), Vs) ), CKs),
            keysort(CKs, [C-K|_])
        ->  Mand0 = [M-K-C|Mand]
        ;   Mand0 = Mand
        )
    ;   Mand0 = Mand,
        foldl({M, Vs}/[K, T0, T]>>
              (   K > 0,
                  memberchk(v(K, _, C, U), Vs)
              ->  D is -(U / max(C, 1)),
                  T0 = [D-(M-K-C)|T]
              ;   T0 = T
              ),
              O, Opt0, Opt)
    ).

quick_take(Budget, Taken, _-(M-K-C), Key0-Cost0, Key-Cost) :-
    (   arg(M, Taken, T),
        var(T),
        Cost1 is Cost0+C,
        Cost1 =< Budget
    ->  nb_setarg(M, Taken, K),
        Key = [M-K|Key0],
        Cost = Cost1
    ;   Key = Key0,
        Cost = Cost0
    ).

build_row(le, _, _, true).
build_row(ge, R, B, Build) :- ( R > B -> Build = false ; Build = true ).
build_row(eq, _, _, true).
