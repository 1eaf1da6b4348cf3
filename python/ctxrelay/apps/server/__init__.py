"""An OpenAI-compatible relay that manages the context of each session.

Clients speak the OpenAI chat API and send only the new message(s) with a
session id; the relay keeps the transcript, assembles a bounded pack under the
configured policy, forwards that provider-visible request to an upstream
(any OpenAI-compatible base URL, or ``echo``), stores the turn and returns the
upstream's answer with the ``CRP-*`` headers of the pack::

    python -m ctxrelay.apps.server --store store --port 8000 --upstream echo
    python -m ctxrelay.apps.server --store store --port 8000 \\
        --upstream http://127.0.0.1:8080/v1 --model qwen2.5 --max-context-tokens 8192

Routes: ``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /v1/sessions/{id}/turns``, ``GET /health``, ``/healthz``, ``/readyz``,
``/metrics``.  See docs/server.md for the request rules, the headers and the
errors, and docs/deploy.md for workers, keys and a process manager.

Modules: ``config`` (what a relay serves), ``request`` (parsing and checking a
request whole), ``turn`` (the managed turn around the upstream call),
``upstream``, ``responses`` (headers, bodies, server-sent events), ``errors``,
``gate`` (one turn at a time per session, across workers), ``tenants`` (API
keys), ``limits`` (per-key limits), ``observe`` (metrics, JSON logs), ``app``
(the shared state, routes, the ASGI app) and ``cli``.

The names below load on first use, so ``ctxrelay keys`` (which needs only
``tenants``) does not import the web stack.
"""
from __future__ import annotations

import importlib
from typing import Any

_NAMES = {"Relay": "app", "create_app": "app", "_parser": "cli", "config_from_args": "cli",
          "main": "cli", "IDEMPOTENCY_HEADER": "config", "POLICY_FLAGS": "config",
          "SESSION_HEADER": "config", "ServerConfig": "config", "ApiError": "errors"}

__all__ = ["ServerConfig", "Relay", "ApiError", "create_app", "main", "SESSION_HEADER",
           "IDEMPOTENCY_HEADER", "POLICY_FLAGS", "config_from_args", "_parser"]


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
