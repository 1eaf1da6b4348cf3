"""The relay's shared state, its routes and the ASGI app.

Threading: the Runtime embeds SWI-Prolog; janus gives every Python thread its
own Prolog engine, so Runtime calls run on a small pool of threads
(``config.threads``, :meth:`Relay.call`) and a long turn leaves the others
free.  Upstream requests run on the event loop, outside that pool, so a slow
model holds up only its own session.  Turns of one session are serialised by
:class:`~.gate.SessionGate` (within this process and across the workers of the
relay); turns of different sessions overlap.  Several worker processes share
the store (docs/deploy.md says why processes rather than more threads).
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ctxrelay.errors import CtxRelayError, InvalidSessionIdError, UnknownSessionError
from ctxrelay.runtime import Runtime, check_policy

from . import observe
from .config import ServerConfig
from .errors import ApiError, from_ctxrelay, scrubbed
from .gate import SessionGate
from .limits import Limits, PgLimits
from .locks import PgSlots
from .request import ChatRequest, json_body, parse_chat, scoped
from .responses import TurnGuard
from .tenants import RESERVED_PREFIX, KeyRing, Tenant
from .turn import chat_turn, commit
from .upstream import upstream_said

log = logging.getLogger("ctxrelay.apps.server")

T = TypeVar("T")
CONFIG_ENV = "CTXRELAY_RELAY_CONFIG"


class Relay:
    """The shared state of one worker: config, Runtime, Prolog threads, gate, keys, HTTP client."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._executor: ThreadPoolExecutor | None = None
        self._runtime: Runtime | None = None
        self.http: httpx.AsyncClient | None = None
        self.keys: KeyRing | None = KeyRing.configured(config.keys_file)
        self.limits: Limits | PgLimits | None = None
        self.gate: SessionGate | None = None
        self.ready = asyncio.Event()
        self.accepting = asyncio.Event()     # the store is open

        self._ready_sync = threading.Event()
        self.started_at = time.monotonic()
        self._warm: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------
    async def start(self) -> None:
        self.started_at = time.monotonic()
        self._executor = ThreadPoolExecutor(max_workers=self.config.threads,
                                            thread_name_prefix="ctxrelay-prolog")
        loop = asyncio.get_running_loop()
        try:
            # A policy that can serve no turn (no input budget, a bad option) stops the
            # relay here, with policy/2's error, rather than answering every request 400.
            await loop.run_in_executor(self._executor, functools.partial(
                check_policy, **self.config.policy, alternation=self.config.alternation,
                **({"model": self.config.model} if self.config.model else {})))
            self._runtime = await loop.run_in_executor(
                self._executor, functools.partial(Runtime, self.config.store,
                                                  max_turn_bytes=self.config.max_turn_bytes,
                                                  cache=self.config.cache))
        except BaseException as e:
            log.error("ctxrelay relay: cannot start: %s", e)
            self._executor.shutdown(wait=True)
            self._executor = None
            raise
        # The embedder loads once the store is open (/readyz answers 200 then): loading it
        # beside the store's opening made both slower on a busy 2-core machine (importing
        # onnxruntime holds the GIL), and a turn that comes before it is loaded waits for it.
        self._warm = asyncio.create_task(self._warm_up())
        self.gate = SessionGate(self._session_locks(), max_waiting=self.config.session_queue,
                                max_wait=self.config.session_wait)
        if self.keys is not None:
            self.limits = PgLimits(str(self.config.store)) if self.config.is_shared \
                else Limits(self.config.limits_file)
        if not self.config.is_echo:
            self.http = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout),
                                          follow_redirects=False)
        log.info("ctxrelay relay: store %s, upstream %s, %s, pid %d", self.config.store_label,
                 self.config.upstream_label,
                 "tenants from keys" if self.keys is not None else
                 "no keys: one tenant, loopback only", os.getpid())
        self.accepting.set()     # the port opens now: /healthz and /readyz answer 200

    def _session_locks(self) -> Any:
        """What holds a session across processes: an advisory lock of the store's
        PostgreSQL (relays on several hosts), or a lock file beside a store directory
        (the workers of one relay)."""
        if not self.config.cross_process_locks:
            return None
        if self.config.is_shared:
            return PgSlots(str(self.config.store))
        return self.config.lock_file

    async def _warm_up(self) -> None:
        if self.config.warmup:
            assert self._executor is not None
            await asyncio.get_running_loop().run_in_executor(self._executor, _warm_up)
        await self.accepting.wait()
        self.ready.set()
        self._ready_sync.set()
        log.info("ctxrelay relay: ready %.2f s after start", time.monotonic() - self.started_at)

    async def stop(self) -> None:
        if self._warm is not None:
            with contextlib.suppress(Exception):
                await self._warm
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
        if self.gate is not None:
            self.gate.close()
        if self.limits is not None:
            self.limits.close()
        log.info("ctxrelay relay: stopped, store closed")

    # -- the workers -------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(runtime, *args)`` on a Prolog thread and await it."""
        if self._executor is None or self._runtime is None:
            raise RuntimeError("the relay is not started; run the app under its lifespan")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor,
                                          functools.partial(fn, self._runtime, *args))

    def call_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(runtime, *args)`` on a Prolog thread from another thread (tests, tools)."""
        if self._executor is None or self._runtime is None:
            raise RuntimeError("the relay is not started")
        self._ready_sync.wait(timeout=300)
        return self._executor.submit(fn, self._runtime, *args).result()

    async def commit(self, chat: ChatRequest, prepared: Any, content: str,
                     meta: dict[str, Any] | None) -> Any:
        """Store the turn (one transaction), then count the tenant's stored bytes."""
        started = time.perf_counter()
        assert self.gate is not None
        await self.gate.confirm(chat.store_session)    # still ours across relays?
        result = await self.call(commit, prepared, content, meta)
        observe.observe_stage("commit", started)
        if self.limits is not None and chat.namespace is not None:
            added = len(content.encode("utf-8")) + len(chat.message.encode("utf-8")) + sum(
                len(t.content.encode("utf-8")) for t in chat.earlier)
            try:
                await asyncio.get_running_loop().run_in_executor(
                    None, self.limits.add_stored, chat.namespace.split(":", 1)[1], added)
            except CtxRelayError as e:
                # The turn is stored: its answer goes out; only the quota's count lags.
                log.warning("ctxrelay relay: stored bytes of the turn not counted: %s", e)
        return result

    # -- tenants -----------------------------------------------------------
    def tenant_of(self, request: Request) -> Tenant | None:
        """The caller's tenant (None when the relay has no keys); 401 for a bad key."""
        if self.keys is None:
            return None
        auth = request.headers.get("authorization", "")
        scheme, _, key = auth.partition(" ")
        try:
            tenant = self.keys.tenant_of(key.strip()) if scheme.lower() == "bearer" else None
        except CtxRelayError as e:
            # The keys file went missing or bad while serving: refuse, and tell the
            # operator (not the client, who must not learn its path).
            log.error("ctxrelay relay: cannot read the keys: %s", e)
            raise ApiError(503, "the relay cannot check API keys right now; retry later",
                           type="server_error", code="keys_unavailable",
                           headers={"Retry-After": "5"}) from None
        if tenant is None:
            observe.REFUSED.labels("invalid_api_key").inc()
            raise ApiError(401, "missing or invalid API key: send Authorization: Bearer <key> "
                           "with a key from `ctxrelay keys create`", type="invalid_request_error",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        return tenant

    # -- the upstream --------------------------------------------------------
    def upstream_headers(self, *, stream: bool) -> dict[str, str]:
        headers = {"Accept": "text/event-stream" if stream else "application/json",
                   "User-Agent": "ctxrelay-server"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers


def _warm_up(_rt: Runtime | None = None) -> None:
    """Load the embedder and the token vocabulary now rather than on the first request
    (seconds for MiniLM; cl100k_base's BPE ranks, which every turn counts with, took
    ~1 s on a loaded machine)."""
    started = time.monotonic()
    try:
        from ctxrelay.storage.common.transcript.records import load_encoding
        from ctxrelay.text import embed
        load_encoding()
        embed.get_embedder().embed_batch(["warm up"])
    except Exception as e:  # noqa: BLE001 - a failed warm-up only moves the cost to turn one
        log.warning("ctxrelay relay: embedder warm-up failed (%s: %s); the first turn will "
                    "load it", type(e).__name__, e)
        return
    log.info("ctxrelay relay: embedder ready in %.1f s", time.monotonic() - started)


async def _until_ready(relay: Relay) -> None:
    if not relay.ready.is_set():
        try:
            await asyncio.wait_for(relay.ready.wait(), timeout=relay.config.session_wait)
        except asyncio.TimeoutError:
            raise ApiError(503, "the relay is still starting; retry shortly",
                           type="server_error", code="not_ready",
                           headers={"Retry-After": "1"}) from None


async def chat_completions(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    tenant = relay.tenant_of(request)
    raw, size = await json_body(request, relay.config.max_body_bytes)
    if tenant is not None and relay.limits is not None:
        # The body's bytes as received (a count of the characters of its JSON undercounted
        # non-ASCII text up to 4x).
        await asyncio.get_running_loop().run_in_executor(
            None, relay.limits.admit, tenant, size)
    chat = scoped(parse_chat(raw, request.headers, relay.config), tenant)
    await _until_ready(relay)
    assert relay.gate is not None
    started = time.perf_counter()
    observe.QUEUE.inc()
    try:
        held = await relay.gate.hold(chat.session_id, chat.store_session)
    except ApiError as e:
        observe.REFUSED.labels(e.code or "refused").inc()
        raise
    finally:
        observe.QUEUE.dec()
    observe.observe_stage("wait", started)
    guard = TurnGuard(held)
    observe.IN_FLIGHT.inc()
    try:
        response = await chat_turn(relay, chat, guard)
    except ApiError as e:
        raise scrubbed(e, chat.store_session, chat.session_id) from None
    except CtxRelayError as e:
        raise scrubbed(from_ctxrelay(e), chat.store_session, chat.session_id) from None
    finally:
        observe.IN_FLIGHT.dec()
        if not guard.handed_over:
            guard.release()
            observe.observe_stage("total", started)
    return response


async def session_turns(request: Request) -> Response:
    """``GET /v1/sessions/{id}/turns``: the caller's session, or 404 (another tenant's too)."""
    relay: Relay = request.app.state.relay
    tenant = relay.tenant_of(request)
    # Stripped as a chat request's session id is (request._session_id): the same id
    # names the same session on both routes.
    shown = request.path_params["session_id"].strip()
    if not shown or shown.startswith(RESERVED_PREFIX) or (tenant is not None and len(shown) > 180):
        raise _no_session(shown)
    stored = tenant.storage_session(shown) if tenant is not None else shown
    await _until_ready(relay)

    def read(rt: Runtime) -> list[dict[str, Any]] | None:
        try:
            rt.session(stored)
        except (UnknownSessionError, InvalidSessionIdError):
            return None              # 404; anything else (a store that is down or
                                     # closed) is the relay's error, not a missing session
        return [{"turn": t.turn_id, "role": t.role, "content": t.content}
                for t in rt.history(stored)]

    turns = await relay.call(read)
    if turns is None:
        raise _no_session(shown)
    return JSONResponse({"object": "list", "session_id": shown, "data": turns})


def _no_session(shown: str) -> ApiError:
    return ApiError(404, f"no session {shown!r}", param="session_id", code="session_not_found")


async def list_models(request: Request) -> Response:
    relay: Relay = request.app.state.relay
    relay.tenant_of(request)
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
        said, _ = upstream_said(response)
        raise ApiError(502, f"the upstream {label} answered HTTP {response.status_code} to "
                       f"GET /models: {said}", type="upstream_error",
                       code=f"upstream_http_{response.status_code}")
    try:
        return JSONResponse(response.json())
    except ValueError:
        raise ApiError(502, f"the upstream {label} listed its models in a body that is not "
                       "JSON", type="upstream_error", code="upstream_bad_response") from None


async def health(request: Request) -> Response:
    """Liveness; without keys (loopback only) also what the relay serves.  With keys
    the store path and the upstream are not shown: anyone may ask."""
    relay: Relay = request.app.state.relay
    if relay.keys is not None:
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "ok", "upstream": relay.config.upstream_label,
                         "model": relay.config.model, "store": relay.config.store_label})


async def healthz(request: Request) -> Response:
    """The process answers (for a process manager's liveness check)."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """200 once the store is open (``embedder``: ``warming`` until it is loaded, and turns
    wait for it); 503 before that."""
    relay: Relay = request.app.state.relay
    if relay.accepting.is_set() and not request.app.state.draining:
        # The store is open: turns are accepted.  One that arrives while the embedder
        # still loads waits for it (about a second); the body says which.
        return JSONResponse({"status": "ready",
                             "embedder": "ready" if relay.ready.is_set() else "warming"})
    return JSONResponse({"status": "draining" if request.app.state.draining else "starting"},
                        status_code=503, headers={"Retry-After": "1"})


async def metrics(request: Request) -> Response:
    body, ctype = observe.metrics_body()
    return Response(body, media_type=ctype)


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
                         "serves POST /v1/chat/completions, GET /v1/models, GET /v1/sessions/{id}/turns, "
                         "GET /health, /healthz, /readyz and /metrics",
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


class RequestContext:
    """ASGI middleware: a request id for every request (logs, ``X-Request-Id``), one JSON
    access line, and the turn outcome metric."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v.decode("latin-1") for k, v in scope.get("headers", [])
                      if k == b"x-request-id"), None)
        rid = observe.new_request_id(given)
        token = observe.request_id.set(rid)
        started, status = time.perf_counter(), 500

        async def send_with_id(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"],
                                      (observe.REQUEST_ID_HEADER.lower().encode(), rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            path = scope.get("path", "")
            if path == "/v1/chat/completions":
                observe.TURNS.labels("ok" if status < 400 else str(status)).inc()
            if path not in ("/healthz", "/readyz", "/metrics"):
                log.info("%s %s %d", scope.get("method"), path, status, extra={"fields": {
                    "method": scope.get("method"), "path": path, "status": status,
                    "ms": round((time.perf_counter() - started) * 1000, 1)}})
            observe.request_id.reset(token)


def create_app(config: ServerConfig) -> Starlette:
    """The ASGI app; ``app.state.relay`` is its :class:`Relay`."""
    relay = Relay(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await relay.start()
        try:
            yield
        finally:
            # uvicorn has stopped accepting and waited for the requests in flight (every
            # turn they carry is committed or failed) before it runs this.
            app.state.draining = True
            await relay.stop()

    app = Starlette(
        routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                Route("/v1/models", list_models, methods=["GET"]),
                Route("/v1/sessions/{session_id:path}/turns", session_turns, methods=["GET"]),
                Route("/health", health, methods=["GET"]),
                Route("/healthz", healthz, methods=["GET"]),
                Route("/readyz", readyz, methods=["GET"]),
                Route("/metrics", metrics, methods=["GET"])],
        exception_handlers={ApiError: _api_error, CtxRelayError: _ctxrelay_error,
                            HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan)
    app.add_middleware(RequestContext)
    app.state.relay = relay
    app.state.draining = False
    return app


def app_from_env() -> Starlette:
    """The app of one worker process: the config comes in ``$CTXRELAY_RELAY_CONFIG``
    (``python -m ctxrelay.apps.server --workers N`` sets it; uvicorn's factory)."""
    raw = os.environ.get(CONFIG_ENV)
    if not raw:
        raise RuntimeError(f"${CONFIG_ENV} is not set; start the relay with "
                           "python -m ctxrelay.apps.server")
    fields = json.loads(raw)
    for name in ("keys_file",):
        if fields.get(name) is not None:
            fields[name] = Path(fields[name])
    return create_app(ServerConfig(**fields))
