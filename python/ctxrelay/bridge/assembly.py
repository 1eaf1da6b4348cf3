"""The assembly's stages as Prolog calls them (``assembly.pl``, ``mode.pl``).

Prolog drives an assembly and makes its decisions; these Python stages compute
what it decides on: the window's candidates, the gathered history and
knowledge, the document's units and term overlaps, the rendered request and its
shape.  They live in :mod:`ctxrelay.retrieval` beside the code they share with
the Python-only paths; this module is the list of those Prolog reaches, so the
surface Prolog calls stays in ``bridge/`` (tests/docs/test_layering.py).  Each
looks its stage up when called, so a stage replaced in its own module (a test's
patch, a bench's timer) is the one Prolog runs.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.retrieval import candidates, document, shape

__all__ = ["window_candidates", "gather", "render", "add_document_units", "term_overlaps",
           "shape_rendered"]


def window_candidates(*args: Any) -> Any:
    return candidates.window_candidates(*args)


def gather(*args: Any) -> Any:
    return candidates.gather(*args)


def render(*args: Any) -> Any:
    return candidates.render(*args)


def add_document_units(*args: Any) -> Any:
    return document.add_document_units(*args)


def term_overlaps(*args: Any) -> Any:
    return document.term_overlaps(*args)


def shape_rendered(*args: Any) -> Any:
    return shape.shape_rendered(*args)
