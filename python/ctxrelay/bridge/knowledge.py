"""Promotion's evidence and writes as Prolog calls them (``promotion.pl``).

Prolog's promotion rules decide what enters the CKF; these functions gather the
evidence they read (a session's named values, repeated tool results, the
facts' similarities) and apply the actions they choose.  The code lives in
:mod:`ctxrelay.knowledge.promotion`; this module is the list of what Prolog
reaches there, so the surface Prolog calls stays in ``bridge/``
(tests/docs/test_layering.py).  Each looks its function up when called, so a
function replaced in its own module (a test's patch, a bench's timer) is the
one Prolog runs.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.knowledge import promotion

__all__ = ["evidence", "entry_evidence", "antecedents", "similarities", "apply"]


def evidence(*args: Any) -> Any:
    return promotion.evidence(*args)


def entry_evidence(*args: Any) -> Any:
    return promotion.entry_evidence(*args)


def antecedents(*args: Any) -> Any:
    return promotion.antecedents(*args)


def similarities(*args: Any) -> Any:
    return promotion.similarities(*args)


def apply(*args: Any) -> Any:
    return promotion.apply(*args)
