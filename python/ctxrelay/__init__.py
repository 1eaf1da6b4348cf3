"""ctxrelay: a context runtime for LLM agents.

``import ctxrelay`` embeds SWI-Prolog (janus_swi) and loads library(ctxrelay)
into module ``user``; :class:`Runtime` is the Python entry point.
"""
from __future__ import annotations

import os

# Assembly does many small matrix-vector products (2,000 x 1,024 for dense
# recall); OpenBLAS's thread pool made each one 60x slower on a busy 2-core
# machine (7.7 ms against 0.12 ms on one thread).  Only effective when numpy
# is not imported yet; a value the caller set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from ctxrelay.bridge import engine as _prolog  # noqa: E402
from ctxrelay.errors import *  # noqa: F401,F403,E402  (the exception classes are public API)
from ctxrelay.errors import CtxRelayError, ContextOverflowError  # noqa: E402
from ctxrelay.runtime import Runtime  # noqa: E402
from ctxrelay.types import Hit, SessionInfo, SessionStats, Turn  # noqa: E402

__all__ = ["Runtime", "Turn", "Hit", "SessionInfo", "SessionStats",
           "CtxRelayError", "ContextOverflowError"]
__version__ = "0.1.0"

_prolog.ensure_loaded()
