"""An OpenAI-compatible relay that manages the context of each session.

Clients speak the OpenAI chat API and send only the new message(s) with a
session id; the relay keeps the transcript, assembles a bounded pack under the
configured policy, forwards that provider-visible request to an upstream
(any OpenAI-compatible base URL, or ``echo``), stores the turn and returns the
upstream's answer with the ``CRP-*`` headers of the pack::

    python -m ctxrelay.apps.server --store store --port 8000 --upstream echo
    python -m ctxrelay.apps.server --store store --port 8000 \\
        --upstream http://127.0.0.1:8080/v1 --model qwen2.5 --max-context-tokens 8192

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``.
See docs/server.md for the request rules, the headers and the errors.

Modules: ``config`` (what a relay serves), ``request`` (parsing and checking a
request whole), ``turn`` (the managed turn around the upstream call),
``upstream``, ``responses`` (headers, bodies, server-sent events), ``errors``,
``app`` (the shared state, routes, the ASGI app) and ``cli``.
"""
from __future__ import annotations

from .app import Relay, create_app
from .cli import _parser, config_from_args, main
from .config import IDEMPOTENCY_HEADER, POLICY_FLAGS, SESSION_HEADER, ServerConfig
from .errors import ApiError

__all__ = ["ServerConfig", "Relay", "ApiError", "create_app", "main", "SESSION_HEADER",
           "IDEMPOTENCY_HEADER", "POLICY_FLAGS", "config_from_args", "_parser"]
