:- module(ctxrelay_packer_absorb,
          [ row_filter/4,           % +Rounds, +Table, +Classes0, -Classes
            absorb_rows/5,          % +Classes0, +Table0, -Classes, -Table, -Keep
            project_rows/5,         % +Keep, +Table0, +Classes0, -Table, -Classes
            project_table/3         % +Table0, +Keep, -Table
          ]).
:- set_prolog_flag(optimise, true).  % arithmetic compiled inline (hot loops)
:- use_module(library(apply)).
:- use_module(library(lists)).
:- use_module(library(pairs)).
:- use_module(library(yall)).

/** <module> Users' rows folded into the classes

row_filter/4 propagates the rows over the classes (an option that no
completion can bring within a bound is dropped); absorb_rows/5 merges the
classes of a row that touches few of them, so that the row disappears.

A user's row such as `tokens(role(tool)) #=< 150` often touches a handful
of classes, whose units are large next to the bound.  Relaxed into the
bound with a multiplier it leaves an integrality gap (the LP takes a
fraction of a tool output), and the search has to close that gap.  Those
classes are better merged into one: its options are the admissible
combinations of theirs that satisfy the row, kept as a Pareto set, and
the row disappears from the problem, as structural constraints do inside
the classes of ctxrelay_packer_classes.  When no row is left the plain
search applies, with its tight bound.

A row is absorbed when it touches at most 8 classes (the Prolog flag
packer_absorb_max_classes; 0 turns merging off) and every step of
the merge has at most 600 candidate states (otherwise it stays a row,
for the Lagrangian bound, which is tight enough for rows over many small
units).  Several rows that touch the same classes are
absorbed together.
*/

:- create_prolog_flag(packer_absorb_max_classes, 8, [type(integer), keep(true)]).

max_support(N) :- current_prolog_flag(packer_absorb_max_classes, N).

max_states(600).

%!  row_filter(+Rounds, +Table, +Classes0, -Classes) is semidet.
%
%   Bounds propagation of the rows over the classes: an option whose row
%   value cannot be completed within a row's bound by the least (for
%   `=<`) or largest (for `>=`) values of the other classes is dropped.
%   Exact, and it matters for the bound: a tool output larger than a
%   token cap on tool output cannot enter any pack, but the LP relaxation
%   would take a fraction of it.  Fails when a class loses every option.

row_filter(Rounds, Table, Classes0, Classes) :-
    Table = rows(Dirs, Bs, _, Zero),
    maplist(class_range(Zero), Classes0, Ranges),
    foldl([mm(Mn, Mx), mm(A0, B0), mm(A, B)]>>( vadd(A0, Mn, A), vadd(B0, Mx, B) ),
          Ranges, mm(Zero, Zero), mm(TotMin, TotMax)),
    maplist(filter_class(Dirs, Bs, TotMin, TotMax), Classes0, Ranges, Classes1, Changes),
    \+ memberchk([], Classes1),
    (   Rounds > 1,
        memberchk(true, Changes)
    ->  R1 is Rounds-1,
        row_filter(R1, Table, Classes1, Classes)
    ;   Classes = Classes1
    ).

class_range(_, [o(_, _, Rv0, _)|Opts], mm(Mn, Mx)) :-
    foldl([o(_, _, Rv, _), mm(A0, B0), mm(A, B)]>>
          ( maplist([X, Y, Z]>>(Z is min(X, Y)), Rv, A0, A),
            maplist([X, Y, Z]>>(Z is max(X, Y)), Rv, B0, B) ),
          Opts, mm(Rv0, Rv0), mm(Mn, Mx)).

filter_class(Dirs, Bs, TotMin, TotMax, Opts, mm(Mn, Mx), Kept, Changed) :-
    vsub(TotMin, Mn, OtherMin),
    vsub(TotMax, Mx, OtherMax),
    include({Dirs, Bs, OtherMin, OtherMax}/[o(_, _, Rv, _)]>>
            completable(Dirs, Rv, OtherMin, OtherMax, Bs),
            Opts, Kept),
    (   same_length(Kept, Opts) -> Changed = false ; Changed = true ).

%!  absorb_rows(+Classes0, +Table0, -Classes, -Table, -Keep) is semidet.
%
%   Classes0 are Options-Units pairs: the options o(C, U, Rv, Sel) of a
%   class (ctxrelay_packer_rows) and its units;
%   Table0 is rows(Dirs, Bs, Res, Zero).  Classes are the classes after
%   merging, their row vectors and Table restricted to the rows left
%   (Table is `none` when none is); Keep says, row by row of Table0,
%   whether it is left (true) or absorbed (false).  Fails when a merged
%   class has no option that satisfies its rows (no pack exists).

absorb_rows(Classes0, Table0, Classes, Table, Keep) :-
    Table0 = rows(Dirs, Bs, _, _),
    length(Dirs, NR),
    numlist(1, NR, Rows),
    supports(Rows, Classes0, Supports),
    max_support(Max),
    include({Max}/[_-S]>>( length(S, L), L =< Max ), Supports, Small0),
    map_list_to_pairs([_-S, L]>>length(S, L), Small0, Keyed),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, Small),
    foldl(absorb_row(Dirs, Bs), Small, Classes0-[], Classes1-Absorbed),
    sort(Absorbed, Gone),
    keep_flags(NR, Gone, Keep),
    (   Gone == []
    ->  Classes = Classes0,
        Table = Table0
    ;   project_table(Table0, Keep, Table),
        maplist(project_class(Keep, Table), Classes1, Classes)
    ).

%!  project_rows(+Keep, +Table0, +Classes0, -Table, -Classes) is semidet.
%
%   Table0 and the option lists Classes0 restricted to the rows Keep
%   marks true (the options of each class reduced to their Pareto set).

project_rows(Keep, Table0, Classes0, Table, Classes) :-
    project_table(Table0, Keep, Table),
    maplist({Keep, Table}/[Opts0, Opts]>>project_class(Keep, Table, Opts0-x, Opts-x),
            Classes0, Classes).

%   supports(+Rows, +Classes, -Supports): Row-ClassIndexes per row.
supports(Rows, Classes, Supports) :-
    findall(I-C, nth1(I, Classes, C), Indexed),
    maplist({Indexed}/[I, I-S]>>
            findall(K, ( member(K-Opts, Indexed), touches(I, Opts) ), S),
            Rows, Supports).

touches(I, Opts-_) :-
    !,
    touches(I, Opts).
touches(I, Opts) :-
    member(o(_, _, Rv, _), Opts),
    nth1(I, Rv, R),
    R =\= 0,
    !.

%   absorb_row(+Dirs, +Bs, +Row-_, +Classes0-Absorbed0, -Classes-Absorbed)
absorb_row(Dirs, Bs, I-_, Classes0-Abs0, Classes-Abs) :-
    (   memberchk(I, Abs0)
    ->  Classes = Classes0, Abs = Abs0
    ;   partition(touches(I), Classes0, Members, Others),
        internal_rows(Dirs, Members, Others, Abs0, Internal),
        (   pairs_keys_values(Members, MOpts, MUnits),
            pairs_keys(Others, OOpts),
            merge(MOpts, OOpts, Dirs, Bs, Internal, Merged)
        ->  append(MUnits, Units1),
            sort(Units1, Units),
            Classes = [Merged-Units|Others],
            append(Internal, Abs0, Abs)
        ;   Classes = Classes0, Abs = Abs0
        )
    ).

%   The rows that only the merged classes touch: the merge settles them.
internal_rows(Dirs, Members, Others, Abs0, Internal) :-
    length(Dirs, NR),
    numlist(1, NR, Rows),
    include({Members, Others, Abs0}/[J]>>
            ( \+ memberchk(J, Abs0),
              \+ ( member(O, Others), touches(J, O) ),
              member(M, Members), touches(J, M) ),
            Rows, Internal).

%   merge(+Members, +Others, +Dirs, +Bs, +Internal, -Options) is semidet.
%
%   The combinations of one option per member class, pruned by the rows
%   (what the remaining classes, members or not, can still add must be
%   able to meet each bound) and kept as a multi-criteria Pareto set;
%   then the internal rows must hold and leave the vectors.  Fails when
%   the states outgrow max_states/1 or no combination satisfies the rows.

merge(Members, Others, Dirs, Bs, Internal, Options) :-
    max_states(Cap),
    maplist(range, Others, ORanges),
    length(Dirs, NR),
    length(Zero, NR),
    maplist(=(0), Zero),
    sum_ranges(ORanges, Zero, OMin, OMax),
    suffix_ranges(Members, Zero, [_|Rests]),
    foldl(merge_step(Dirs, Bs, OMin, OMax, Cap), Members, Rests,
          [o(0, 0, Zero, [])], States),
    include({Dirs, Bs, Internal}/[o(_, _, Rv, _)]>>internal_hold(Internal, Dirs, Bs, Rv),
            States, Feasible),
    Feasible \== [],
    maplist({Internal}/[o(C, U, Rv, Sel), o(C, U, Rv1, Sel)]>>zero_rows(Internal, 1, Rv, Rv1),
            Feasible, Zeroed),
    pareto(Dirs, Zeroed, Options).

merge_step(Dirs, Bs, OMin, OMax, Cap, Opts, mm(RMin, RMax), States0, States) :-
    vadd(OMin, RMin, Min),
    vadd(OMax, RMax, Max),
    Cap1 is Cap+1,                      % stop generating past the cap: most
    findnsols(Cap1, o(C, U, Rv, Sel),   % merges that fail, fail there
              ( member(o(C0, U0, R0, S0), States0),
                member(o(C1, U1, R1, S1), Opts),
                vadd(R0, R1, Rv),
                completable(Dirs, Rv, Min, Max, Bs),
                C is C0+C1,
                U is U0+U1,
                append(S0, S1, Sel) ),
              Cands),
    !,
    length(Cands, N),
    N =< Cap,
    pareto(Dirs, Cands, States).

internal_hold([], _, _, _).
internal_hold([I|Is], Dirs, Bs, Rv) :-
    nth1(I, Dirs, D),
    nth1(I, Bs, B),
    nth1(I, Rv, R),
    dir_holds(D, R, B),
    internal_hold(Is, Dirs, Bs, Rv).

dir_holds(le, R, B) :- R =< B.
dir_holds(ge, R, B) :- R >= B.
dir_holds(eq, R, B) :- R =:= B.

zero_rows(_, _, [], []).
zero_rows(Is, I, [R|Rs], [Z|Zs]) :-
    (   memberchk(I, Is) -> Z = 0 ; Z = R ),
    I1 is I+1,
    zero_rows(Is, I1, Rs, Zs).

completable([], [], [], [], []).
completable([D|Ds], [R|Rs], [Mn|Mns], [Mx|Mxs], [B|Bs]) :-
    (   D == le
    ->  R+Mn =< B
    ;   D == ge
    ->  R+Mx >= B
    ;   R+Mn =< B,
        R+Mx >= B
    ),
    completable(Ds, Rs, Mns, Mxs, Bs).

range([o(_, _, Rv0, _)|Opts], mm(Mn, Mx)) :-
    foldl([o(_, _, Rv, _), mm(A0, B0), mm(A, B)]>>
          ( maplist([X, Y, Z]>>(Z is min(X, Y)), Rv, A0, A),
            maplist([X, Y, Z]>>(Z is max(X, Y)), Rv, B0, B) ),
          Opts, mm(Rv0, Rv0), mm(Mn, Mx)).

sum_ranges(Ranges, Zero, Min, Max) :-
    foldl([mm(A, B), mm(A0, B0), mm(A1, B1)]>>( vadd(A0, A, A1), vadd(B0, B, B1) ),
          Ranges, mm(Zero, Zero), mm(Min, Max)).

%   suffix_ranges(+Classes, +Zero, -Rests): per suffix, the least and
%   largest row values its classes can add.
suffix_ranges(Classes, Zero, Rests) :-
    reverse(Classes, Rev),
    foldl([Opts, [mm(A0, B0)|T], [mm(A, B), mm(A0, B0)|T]]>>
          ( range(Opts, mm(Mn, Mx)), vadd(A0, Mn, A), vadd(B0, Mx, B) ),
          Rev, [mm(Zero, Zero)], Rests).

%   pareto(+Dirs, +Options, -Front): options that no other one dominates
%   (as cheap or cheaper, as useful or more, not worse on any row).
pareto(Dirs, Options, Front) :-
    map_list_to_pairs([o(C, U, _, _), k(C, NU)]>>(NU is -U), Options, Keyed),
    keysort(Keyed, Sorted),
    pairs_values(Sorted, Ordered),
    filter(Ordered, Dirs, -1, [], [], Rev),
    reverse(Rev, Front).

%   As ctxrelay_packer_rows:mc_filter/4: options come by increasing cost;
%   the kept ones are summarised by their best utility per distinct row
%   vector (a count row has a handful of values).
filter([], _, _, _, Kept, Kept).
filter([O|Os], Dirs, MaxU, Best, Kept, Out) :-
    O = o(_, U, Rv, _),
    (   U =< MaxU,
        member(RvK-UK, Best),
        UK >= U,
        no_worse(Dirs, RvK, Rv)
    ->  filter(Os, Dirs, MaxU, Best, Kept, Out)
    ;   MaxU1 is max(MaxU, U),
        best_put(Best, Rv, U, Best1),
        filter(Os, Dirs, MaxU1, Best1, [O|Kept], Out)
    ).

best_put([], Rv, U, [Rv-U]).
best_put([R-V|T], Rv, U, Best) :-
    (   R == Rv
    ->  V1 is max(V, U),
        Best = [R-V1|T]
    ;   Best = [R-V|Best1],
        best_put(T, Rv, U, Best1)
    ).

no_worse([], [], []).
no_worse([D|Ds], [A|As], [B|Bs]) :-
    (   D == le -> A =< B
    ;   D == ge -> A >= B
    ;   A =:= B
    ),
    no_worse(Ds, As, Bs).

vadd([], [], []).
vadd([A|As], [B|Bs], [C|Cs]) :-
    C is A+B,
    vadd(As, Bs, Cs).

vsub([], [], []).
vsub([A|As], [B|Bs], [C|Cs]) :-
    C is A-B,
    vsub(As, Bs, Cs).


                 /*******************************
                 *   THE ROWS THAT ARE LEFT     *
                 *******************************/

keep_flags(NR, Gone, Keep) :-
    numlist(1, NR, Is),
    maplist({Gone}/[I, K]>>( memberchk(I, Gone) -> K = false ; K = true ), Is, Keep).

project(Keep, Rv, Rv1) :-
    foldl([K, R, A0, A]>>( K == true -> A0 = [R|A] ; A0 = A ), Keep, Rv, Rv1, []).

project_table(rows(Dirs, Bs, Res, _), Keep, Table) :-
    project(Keep, Dirs, Dirs1),
    (   Dirs1 == []
    ->  Table = none
    ;   project(Keep, Bs, Bs1),
        functor(Res, F, N),
        functor(Res1, F, N),
        forall(between(1, N, M),
               ( arg(M, Res, Vecs),
                 (   Vecs == []
                 ->  nb_setarg(M, Res1, [])
                 ;   maplist(project(Keep), Vecs, Vecs1),
                     (   forall(member(V, Vecs1), maplist(==(0), V))
                     ->  nb_setarg(M, Res1, [])
                     ;   nb_setarg(M, Res1, Vecs1)
                     )
                 ) )),
        length(Dirs1, NR1),
        length(Zero1, NR1),
        maplist(=(0), Zero1),
        Table = rows(Dirs1, Bs1, Res1, Zero1)
    ).

project_class(Keep, Table, Opts0-Units, Opts-Units) :-
    maplist({Keep}/[o(C, U, Rv, S), o(C, U, Rv1, S)]>>project(Keep, Rv, Rv1), Opts0, Opts1),
    (   Table == none
    ->  Opts = Opts1
    ;   Table = rows(Dirs, _, _, _),
        pareto(Dirs, Opts1, Opts)
    ).
