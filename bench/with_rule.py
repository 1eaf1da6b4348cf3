"""Run a bench script with a rule of library(ctxrelay) replaced, as a user would change it.

    .venv/bin/python bench/with_rule.py --rule 'ctxrelay_policy:embedded_words(assistant, 48)' \\
        bench/locomo.py --budgets 2048 --methods ctxrelay --out locomo_2048_w48

For each ``--rule Module:Head``, every clause of Head's predicate whose first argument
is Head's is retracted and Head asserted; ``none`` as Head's last argument only
retracts (``embedded_words(assistant, none)``: replies embedded whole).  The script
then runs in this process as ``__main__`` with the arguments after it.  For measuring
the rules users may change (the rule's predicate must be dynamic), not for shipping
another default: the defaults live in the Prolog sources.
"""
from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))


def replace_rule(clause: str) -> None:
    from ctxrelay.bridge import engine
    engine.once("term_string(_M:_H, S), _H =.. [_F, _A|_Args], length(_Args, _N), "
                "length(_Vs, _N), _H1 =.. [_F, _A|_Vs], retractall(_M:_H1), "
                "(last(_Args, none) -> true ; assertz(_M:_H))", {"S": clause})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rule", action="append", default=[], metavar="MODULE:HEAD",
                    help="a clause that replaces its predicate's clauses for the same first "
                         "argument (repeatable)")
    ap.add_argument("script", help="the bench script to run, e.g. bench/locomo.py")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    args = ap.parse_args()
    for clause in args.rule:
        replace_rule(clause)
    sys.argv = [args.script, *args.args]
    runpy.run_path(args.script, run_name="__main__")


if __name__ == "__main__":
    main()
