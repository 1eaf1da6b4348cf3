"""What an operator sees of a relay: Prometheus metrics and JSON log lines.

Metrics use ``prometheus-client``.  With several worker processes each writes
its samples to ``$PROMETHEUS_MULTIPROC_DIR`` (the relay's command line sets it
to a fresh directory before the workers start) and ``GET /metrics`` of any
worker answers the sum over all of them; with one process the default
registry is used.

Logs: one JSON object a line (``ts``, ``level``, ``logger``, ``msg``, and the
``request_id`` of the request being served, if any).  The request id is the
client's ``X-Request-Id`` when it is short and printable, else a new one; it is
sent back in ``X-Request-Id``.
"""
from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import time
import uuid
from typing import Any

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge,
                               Histogram, generate_latest, multiprocess)

REQUEST_ID_HEADER = "X-Request-Id"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id",
                                                                       default=None)

STAGES = ("wait", "prepare", "upstream", "commit", "total")
_LATENCY_BUCKETS = (.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120)

TURNS = Counter("ctxrelay_turns_total", "Chat turns answered, by outcome",
                ["outcome"])
STAGE_SECONDS = Histogram("ctxrelay_turn_stage_seconds",
                          "Seconds spent per stage of a turn (wait: for the session; "
                          "prepare/commit: Runtime work; upstream: the model)", ["stage"],
                          buckets=_LATENCY_BUCKETS)
TOKENS_USED = Counter("ctxrelay_tokens_used_total", "Input tokens of the packs sent upstream")
TOKENS_BUDGET = Counter("ctxrelay_tokens_budget_total",
                        "Input budget of the same packs (used / budget = fill)")
FILL = Histogram("ctxrelay_pack_fill_ratio", "Tokens used / input budget per pack",
                 buckets=(.1, .25, .5, .75, .9, .95, 1.0))
OVERFLOWS = Counter("ctxrelay_overflow_refusals_total",
                    "Turns refused because the mandatory context does not fit")
UPSTREAM_ERRORS = Counter("ctxrelay_upstream_errors_total", "Upstream failures, by code",
                          ["code"])
REFUSED = Counter("ctxrelay_requests_refused_total",
                  "Requests refused before a turn (401, 409 busy, 429 limits), by code", ["code"])
QUEUE = Gauge("ctxrelay_session_queue_depth", "Requests waiting for their session",
              multiprocess_mode="livesum")
IN_FLIGHT = Gauge("ctxrelay_turns_in_flight", "Turns being served", multiprocess_mode="livesum")


def new_request_id(given: str | None) -> str:
    if given and _REQUEST_ID_RE.fullmatch(given):
        return given
    return uuid.uuid4().hex


def metrics_body() -> tuple[bytes, str]:
    """The exposition text: every worker's samples when several processes write them."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST


def observe_stage(stage: str, started: float) -> float:
    now = time.perf_counter()
    STAGE_SECONDS.labels(stage).observe(now - started)
    return now


def observe_pack(used: int, budget: int) -> None:
    TOKENS_USED.inc(used)
    TOKENS_BUDGET.inc(budget)
    if budget > 0:
        FILL.observe(used / budget)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, with the request id of the current request."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"ts": round(record.created, 3), "level": record.levelname.lower(),
                                "logger": record.name, "msg": record.getMessage()}
        rid = request_id.get()
        if rid is not None:
            line["request_id"] = rid
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, fmt: str) -> dict[str, Any]:
    """Set up the root logger; returns uvicorn's ``log_config`` to match."""
    formatter: dict[str, Any] = ({"()": f"{__name__}.JsonFormatter"} if fmt == "json" else
                                 {"format": "%(levelname)s:     %(name)s: %(message)s"})
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"relay": formatter},
            "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "relay",
                                    "stream": "ext://sys.stderr"}},
            "root": {"handlers": ["stderr"], "level": level.upper()},
            "loggers": {"uvicorn": {"handlers": [], "propagate": True},
                        "uvicorn.error": {"handlers": [], "propagate": True},
                        "uvicorn.access": {"handlers": [], "propagate": False}}}
