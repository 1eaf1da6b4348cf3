"""The relay and Prolog write the rolling hot tail in Redis that a Python Runtime
reads (issue 17, item 1; the tail itself: tests/storage/test_redis_tail.py)."""
from __future__ import annotations

import json
import uuid

import httpx
import pytest

from ctxrelay.storage import open_stores
from ctxrelay.storage.redis.rolling import RedisRollingLog
from relay_support import Subprocess
from services import redis_url
from support import run_swipl


@pytest.fixture
def cache():
    url = f"{redis_url()}?prefix=tail{uuid.uuid4().hex[:12]}"
    yield url
    import redis
    client = redis.Redis.from_url(redis_url())
    doomed = list(client.scan_iter(match=f"{url.rpartition('=')[2]}:*"))
    if doomed:
        client.delete(*doomed)
    client.close()


def test_every_entry_point_writes_the_shared_tail(pg_schema, cache, tmp_path):
    """Prolog's store_open/3 with cache(...) and a relay started with --cache write the
    same Redis tail a Python Runtime then reads."""
    spec, _ = pg_schema
    goal = (f"use_module(library(ctxrelay)), store_open('{spec}', S, [cache('{cache}')]), "
            "session_create(S, pl, []), "
            "turn_append(S, pl, message(user, \"from prolog one\"), _, []), "
            "turn_append(S, pl, message(user, \"from prolog two\"), _, []), store_close(S)")
    done = run_swipl(["-g", goal, "-t", "halt"], timeout=300)
    assert done.returncode == 0, done.stderr
    relay = Subprocess.relay(spec, tmp_path, "--upstream", "echo", "--cache", cache,  # type: ignore[arg-type]
                             "--no-warmup")
    try:
        relay.wait_ready()
        answer = httpx.post(f"{relay.url}/v1/chat/completions", timeout=120,
                            headers={"CRP-Session-Id": "http"},
                            json={"model": "m", "messages": [
                                {"role": "user", "content": "from the relay"}]})
        assert answer.status_code == 200, answer.text
    finally:
        relay.stop()
    with open_stores(spec, cache=cache) as stores:
        tail = stores.rolling
        assert isinstance(tail, RedisRollingLog)
        assert [json.loads(e)[2] for e in tail.read_recent("pl", 5)] == \
            ["from prolog one", "from prolog two"]
        http = [json.loads(e)[:2] for e in tail.read_recent("http", 5)]
        assert http[0] == [1, "user"] and [i for i, _ in http] == [1, 2]
