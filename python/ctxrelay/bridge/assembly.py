"""The assembly's stages as Prolog calls them (``assembly.pl``, ``mode.pl``).

Prolog drives an assembly and makes its decisions; these Python stages compute
what it decides on: the window's candidates, the gathered history and
knowledge, the document's units and term overlaps, the rendered request and its
shape.  They live in :mod:`ctxrelay.retrieval` beside the code they share with
the Python-only paths; this module is the list of those Prolog reaches, so the
surface Prolog calls stays in ``bridge/`` (tests/docs/test_layering.py).
"""
from __future__ import annotations

from ctxrelay.retrieval.candidates import gather, render, window_candidates
from ctxrelay.retrieval.document import add_document_units, term_overlaps
from ctxrelay.retrieval.shape import shape_rendered

__all__ = ["window_candidates", "gather", "render", "add_document_units", "term_overlaps",
           "shape_rendered"]
