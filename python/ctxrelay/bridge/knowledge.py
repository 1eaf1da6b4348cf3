"""Promotion's evidence and writes as Prolog calls them (``promotion.pl``).

Prolog's promotion rules decide what enters the CKF; these functions gather the
evidence they read (a session's named values, repeated tool results, the
facts' similarities) and apply the actions they choose.  The code lives in
:mod:`ctxrelay.knowledge.promotion`; this module is the list of what Prolog
reaches there, so the surface Prolog calls stays in
``bridge/`` (tests/docs/test_layering.py).
"""
from __future__ import annotations

from ctxrelay.knowledge.promotion import (antecedents, apply, entry_evidence, evidence,
                                          similarities)

__all__ = ["evidence", "entry_evidence", "antecedents", "similarities", "apply"]
