"""``python -m ctxrelay.apps.server``: the relay's command line."""
from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

from ctxrelay.errors import InvalidArgumentError

from ctxrelay.storage.lmdb.transcript import DEFAULT_MAX_TURN_BYTES

from .config import DEFAULT_TIMEOUT, POLICY_FLAGS, ServerConfig


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
                    "(POST /v1/chat/completions, GET /v1/models, GET /health).")
    p.add_argument("--store", required=True, type=Path, help="store directory (created if missing)")
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
    p.add_argument("--max-turn-bytes", type=_positive_int, default=DEFAULT_MAX_TURN_BYTES,
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
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    return p


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    policy = {name: getattr(args, name) for name in POLICY_FLAGS
              if getattr(args, name) is not None}
    return ServerConfig(store=args.store, upstream=args.upstream, model=args.model,
                        api_key=args.api_key or None, timeout=args.timeout, policy=policy,
                        warmup=args.warmup, max_turn_bytes=args.max_turn_bytes,
                        alternation=args.alternation, history_rounds=args.history_rounds)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and serve until interrupted."""
    import uvicorn

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except InvalidArgumentError as e:
        parser.error(str(e))
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(levelname)s:     %(name)s: %(message)s")
    from .app import create_app

    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level=args.log_level,
                lifespan="on")
    return 0
