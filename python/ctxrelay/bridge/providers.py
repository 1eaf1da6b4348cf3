"""The completion call of a managed turn as Prolog makes it (``runtime.pl``'s
``completion/4``): the provider registry and clients live in
:mod:`ctxrelay.providers`; this module is what Prolog reaches there, so the
surface Prolog calls stays in ``bridge/`` (tests/docs/test_layering.py).
"""
from __future__ import annotations

from ctxrelay.providers import complete

__all__ = ["complete"]
