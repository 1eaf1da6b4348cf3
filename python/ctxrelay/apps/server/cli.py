"""``python -m ctxrelay.apps.server``: the relay's command line."""
from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import os
import tempfile
from pathlib import Path

from ctxrelay.errors import InvalidArgumentError

from ctxrelay.storage.common.transcript.records import DEFAULT_MAX_TURN_BYTES

from .config import (DEFAULT_SESSION_QUEUE, DEFAULT_SESSION_WAIT, DEFAULT_THREADS,
                     DEFAULT_TIMEOUT, POLICY_FLAGS, ServerConfig)
from .tenants import KEYS_ENV

KEYS_FILE_ENV = "CTXRELAY_KEYS_FILE"


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` reaches this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m ctxrelay.apps.server",
        description="OpenAI-compatible relay with managed context per session "
                    "(POST /v1/chat/completions, GET /v1/models, GET /v1/sessions/ID/turns, "
                    "GET /health, /healthz, /readyz, /metrics). Running it as a shared "
                    "service (workers, keys, systemd): docs/deploy.md.")
    p.add_argument("--store", required=True,
                   help="store directory (created if missing), or a PostgreSQL store URL "
                        "such as postgresql://user@host/db?schema=NAME: relays on several "
                        "hosts may then serve one store (docs/deploy.md)")
    p.add_argument("--cache", default=None,
                   help="the hot cache shared by relays on one store, e.g. "
                        "redis://host:6379/0?prefix=NAME (default: in each process)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--upstream", required=True,
                   help="'echo' or an OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1")
    p.add_argument("--model", help="pin the upstream model (default: the client's model)")
    p.add_argument("--api-key", default=os.environ.get("CTXRELAY_UPSTREAM_API_KEY"),
                   help="key sent to the upstream as Bearer (default: "
                        "$CTXRELAY_UPSTREAM_API_KEY; none if unset)")
    p.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT,
                   help=f"seconds to wait for the upstream (default {DEFAULT_TIMEOUT:g})")
    for name in POLICY_FLAGS:
        p.add_argument(f"--{name.replace('_', '-')}", type=_positive_int, dest=name,
                       help=f"policy option {name} (default: the Runtime's)")
    p.add_argument("--max-turn-bytes", type=_at_least_one, default=DEFAULT_MAX_TURN_BYTES,
                   help="largest message stored as a turn, in UTF-8 bytes (default "
                        f"{DEFAULT_MAX_TURN_BYTES:,}); a larger one gets 413")
    p.add_argument("--alternation", choices=["strict", "free"], default="strict",
                   help="strict (default): every request has the shape strict chat templates "
                        "accept (one system message, then user and assistant alternating); "
                        "free: the pack's own order")
    p.add_argument("--history-rounds", type=_positive_int, default=3,
                   help="rounds of the cold-history tool loop per turn: the relay offers "
                        "context_search/slice/peek when a pack hides turns and runs them "
                        "itself (default 3; 0 turns the tools off)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="do not load the embedder at start-up")
    p.add_argument("--workers", type=_at_least_one, default=1,
                   help="worker processes sharing the store (default 1); see docs/deploy.md")
    p.add_argument("--threads", type=_at_least_one, default=DEFAULT_THREADS,
                   help=f"Prolog threads per worker (default {DEFAULT_THREADS}): a long turn "
                        "leaves the others free")
    p.add_argument("--keys", type=Path, default=os.environ.get(KEYS_FILE_ENV) or None,
                   help=f"the API keys file (default: ${KEYS_FILE_ENV}; or the keys' JSON in "
                        f"${KEYS_ENV}). Without keys the relay binds loopback only")
    p.add_argument("--session-queue", type=_at_least_one, default=DEFAULT_SESSION_QUEUE,
                   help="requests that may wait for one busy session per worker (default "
                        f"{DEFAULT_SESSION_QUEUE}); more get 409 session_busy")
    p.add_argument("--session-wait", type=_positive_float, default=DEFAULT_SESSION_WAIT,
                   help="seconds a request waits for its busy session (default "
                        f"{DEFAULT_SESSION_WAIT:g}); then 409 session_busy")
    p.add_argument("--graceful-timeout", type=_positive_float, default=30.0,
                   help="on SIGTERM, seconds to let the turns in flight finish (default 30)")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--log-format", default="json", choices=["json", "text"],
                   help="json (default): one JSON object per line with a request id")
    return p


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    policy = {name: getattr(args, name) for name in POLICY_FLAGS
              if getattr(args, name) is not None}
    return ServerConfig(store=args.store, cache=args.cache, upstream=args.upstream, model=args.model,
                        api_key=args.api_key or None, timeout=args.timeout, policy=policy,
                        warmup=args.warmup, max_turn_bytes=args.max_turn_bytes,
                        alternation=args.alternation, history_rounds=args.history_rounds,
                        keys_file=args.keys, threads=args.threads,
                        session_queue=args.session_queue, session_wait=args.session_wait)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve until interrupted (SIGTERM drains, then stops)."""
    import uvicorn

    from .observe import MULTIPROC_ENV, configure_logging
    from .tenants import KeyRing

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        keys = KeyRing.configured(config.keys_file)
    except InvalidArgumentError as e:
        parser.error(str(e))
    if keys is None and not is_loopback(args.host):
        parser.error(f"refusing to bind {args.host} without API keys: anyone who reaches the "
                     "port could read and write every session. Create keys with `ctxrelay "
                     "keys create TENANT --keys FILE` and pass --keys FILE, or bind 127.0.0.1")
    log_config = configure_logging(args.log_level, args.log_format)
    import logging
    import logging.config
    logging.config.dictConfig(log_config)
    if keys is None:
        logging.getLogger("ctxrelay.apps.server").warning(
            "no API keys configured: serving %s only (loopback), every client is one tenant",
            args.host)
    common = dict(host=args.host, port=args.port, log_level=args.log_level, lifespan="on",
                  log_config=log_config, access_log=False,
                  timeout_graceful_shutdown=int(args.graceful_timeout))
    if args.workers == 1:
        from .app import create_app
        uvicorn.run(create_app(config), **common)
        return 0
    # Several processes: each worker builds its app from the config in the environment,
    # and writes its metrics where /metrics of any worker can sum them.
    fields = {k: (str(v) if isinstance(v, Path) else v)
              for k, v in dataclasses.asdict(config).items()}
    fields["policy"] = dict(config.policy)
    from .app import CONFIG_ENV
    os.environ[CONFIG_ENV] = json.dumps(fields)
    if not os.environ.get(MULTIPROC_ENV):
        os.environ[MULTIPROC_ENV] = tempfile.mkdtemp(prefix="ctxrelay-metrics-")
    uvicorn.run("ctxrelay.apps.server.app:app_from_env", factory=True, workers=args.workers,
                **common)
    return 0
