"""The relay's shared state, its routes and the ASGI app.

Threading: the Runtime embeds SWI-Prolog, whose engines are per thread, so
every Runtime call runs on a dedicated worker thread (:meth:`Relay.call`).
Upstream requests run on the event loop, outside it, so a slow model holds
up only its own session: turns of one session are serialised by a
per-session lock, turns of different sessions overlap.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ctxrelay.errors import CtxRelayError
from ctxrelay.runtime import Runtime

from .config import ServerConfig
from .errors import ApiError, from_ctxrelay
from .request import json_body, parse_chat
from .responses import TurnGuard
from .turn import chat_turn
from .upstream import _upstream_said

log = logging.getLogger("ctxrelay.apps.server")

T = TypeVar("T")


class Relay:
    """The shared state of one server: config, Runtime, worker thread, HTTP client."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._executor: ThreadPoolExecutor | None = None
        self._runtime: Runtime | None = None
        self.http: httpx.AsyncClient | None = None
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    # -- lifecycle -------------------------------------------------------
    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxrelay-prolog")
        loop = asyncio.get_running_loop()
        self._runtime = await loop.run_in_executor(
            self._executor, functools.partial(Runtime, self.config.store,
                                              max_turn_bytes=self.config.max_turn_bytes))
        if self.config.warmup:
            await loop.run_in_executor(self._executor, _warm_up)
        if not self.config.is_echo:
            self.http = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout),
                                          follow_redirects=False)
        log.info("ctxrelay relay: store %s, upstream %s", self.config.store,
                 self.config.upstream_label)

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.aclose()
            self.http = None
        if self._executor is not None:
            loop = asyncio.get_running_loop()
            if self._runtime is not None:
                await loop.run_in_executor(self._executor, self._runtime.close)
                self._runtime = None
            self._executor.shutdown(wait=True)
            self._executor = None

    # -- the worker --------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(runtime, *args)`` on the Prolog worker thread and await it."""
        if self._executor is None or self._runtime is None:
            raise RuntimeError("the relay is not started; run the app under its lifespan")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor,
                                          functools.partial(fn, self._runtime, *args))

    def call_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(runtime, *args)`` on the worker from another thread (tests, tools)."""
        if self._executor is None or self._runtime is None:
            raise RuntimeError("the relay is not started")
        return self._executor.submit(fn, self._runtime, *args).result()

    def session_lock(self, session_id: str) -> asyncio.Lock:
        """One lock per session: its turns run one after another."""
        return self._locks.setdefault(session_id, asyncio.Lock())

    # -- the upstream --------------------------------------------------------
    def upstream_headers(self, *, stream: bool) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if stream else "application/json",
                   "User-Agent": "ctxrelay-server"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers


def _warm_up(_rt: Runtime | None = None) -> None:
    """Load the embedder now rather than on the first request (seconds for MiniLM)."""
    started = time.monotonic()
    try:
        from ctxrelay.text import embed
        embed.get_embedder().embed_batch(["warm up"])
    except Exception as e:  # noqa: BLE001 - a failed warm-up only moves the cost to turn one
        log.warning("ctxrelay relay: embedder warm-up failed (%s: %s); the first turn will "
                    "load it", type(e).__name__, e)
        return
    log.info("ctxrelay relay: embedder ready in %.1f s", time.monotonic() - started)



async def chat_completions(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    chat = parse_chat(await json_body(request, relay.config.max_body_bytes), request.headers,
                      relay.config)
    lock = relay.session_lock(chat.session_id)
    await lock.acquire()
    guard = TurnGuard(lock)
    try:
        return await chat_turn(relay, chat, guard)
    finally:
        if not guard.handed_over:
            guard.release()


async def list_models(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    config = relay.config
    if config.model is not None or config.is_echo:
        return JSONResponse({"object": "list", "data": [
            {"id": config.model or "echo", "object": "model", "created": 0,
             "owned_by": "ctxrelay"}]})
    assert relay.http is not None
    label = config.upstream_label
    try:
        response = await relay.http.get(f"{config.upstream}/models",
                                        headers=relay.upstream_headers(stream=False))
    except httpx.TimeoutException:
        raise ApiError(504, f"the upstream {label} did not list its models within "
                       f"{config.timeout:g} s", type="upstream_error",
                       code="upstream_timeout") from None
    except httpx.HTTPError as e:
        raise ApiError(502, f"cannot reach the upstream {label}: {e}", type="upstream_error",
                       code="upstream_unreachable") from None
    if not 200 <= response.status_code < 300:
        said, _ = _upstream_said(response)
        raise ApiError(502, f"the upstream {label} answered HTTP {response.status_code} to "
                       f"GET /models: {said}", type="upstream_error",
                       code=f"upstream_http_{response.status_code}")
    try:
        return JSONResponse(response.json())
    except ValueError:
        raise ApiError(502, f"the upstream {label} listed its models in a body that is not "
                       "JSON", type="upstream_error", code="upstream_bad_response") from None


async def health(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    return JSONResponse({"status": "ok", "upstream": relay.config.upstream_label,
                         "model": relay.config.model, "store": str(relay.config.store)})


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _ctxrelay_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, CtxRelayError)
    return from_ctxrelay(exc).response()


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        error = ApiError(404, f"unknown route {request.method} {request.url.path}; the relay "
                         "serves POST /v1/chat/completions, GET /v1/models and GET /health",
                         code="unknown_url")
    elif exc.status_code == 405:
        error = ApiError(405, f"method {request.method} is not allowed on {request.url.path}",
                         code="method_not_allowed", headers=dict(exc.headers or {}))
    else:
        error = ApiError(exc.status_code, str(exc.detail), headers=dict(exc.headers or {}))
    return error.response()


async def _server_error(_request: Request, exc: Exception) -> Response:
    # Starlette re-raises after answering, so uvicorn logs the traceback.
    return ApiError(500, f"the relay failed: {type(exc).__name__}: {exc}", type="server_error",
                    code="internal_error").response()


def create_app(config: ServerConfig) -> Starlette:
    """The ASGI app; ``app.state.relay`` is its :class:`Relay`."""
    relay = Relay(config)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await relay.start()
        try:
            yield
        finally:
            await relay.stop()

    app = Starlette(
        routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                Route("/v1/models", list_models, methods=["GET"]),
                Route("/health", health, methods=["GET"])],
        exception_handlers={ApiError: _api_error, CtxRelayError: _ctxrelay_error,
                            HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan)
    app.state.relay = relay
    return app

