"""The completion call of a managed turn as Prolog makes it (``runtime.pl``'s
``completion/4``): the provider registry and clients live in
:mod:`ctxrelay.providers`; this module is what Prolog reaches there, so the
surface Prolog calls stays in ``bridge/`` (tests/docs/test_layering.py).  It
looks the function up when called, so a patched ``providers.complete`` is the one
Prolog runs.
"""
from __future__ import annotations

from typing import Any

from ctxrelay import providers

__all__ = ["complete"]


def complete(*args: Any) -> Any:
    return providers.complete(*args)
