"""ctxrelay: a context runtime for LLM agents.

``import ctxrelay`` embeds SWI-Prolog (janus_swi) and loads library(ctxrelay)
into module ``user``; :class:`Runtime` is the Python entry point.
"""
from __future__ import annotations

from . import _prolog
from .errors import *  # noqa: F401,F403  (the exception classes are public API)
from .errors import CtxRelayError, ContextOverflowError
from .runtime import Runtime
from .types import Hit, SessionInfo, SessionStats, Turn

__all__ = ["Runtime", "Turn", "Hit", "SessionInfo", "SessionStats",
           "CtxRelayError", "ContextOverflowError"]
__version__ = "0.1.0"

_prolog.ensure_loaded()
