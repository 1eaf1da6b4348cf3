"""The shared hot tier across relays (issue 17, point 3): assembly on a PostgreSQL
store with a ``redis://`` cache reads the hot cache (Tier P retrievals, keyed by
the CKF state hash), one relay's entry serves another relay's lookup, and a
fact or a turn written through relay A is in relay B's very next pack --
B asks as soon as A has answered, so the staleness allowed is zero (issue 17
asks for at most 1 s) -- while one session alternating relays reads its own
writes."""
from __future__ import annotations

import json

import httpx
import pytest


from relay_support import RecordingUpstream, Subprocess
from services import redis_url


@pytest.mark.slow
def test_relay_b_reads_relay_a_s_writes_at_once_and_shares_its_hot_cache(tmp_path,
                                                                          pg_schema):
    spec, schema = pg_schema
    cache = f"{redis_url()}?prefix=hot{schema}"
    upstream = RecordingUpstream()
    upstream.reply = lambda body: {"role": "assistant", "content": "Noted: " + [
        m["content"] for m in body["messages"] if m["role"] == "user"][-1]}
    a, b = (Subprocess.relay(spec, tmp_path, "--upstream", upstream.base_url,  # type: ignore[arg-type]
                             "--model", "m", "--cache", cache, "--no-warmup",
                             "--log-level", "warning") for _ in range(2))
    asked: list[tuple[str, str, httpx.Response]] = []

    def ask(relay: Subprocess, text: str) -> str:
        r = httpx.post(f"{relay.url}/v1/chat/completions", timeout=300,
                       headers={"CRP-Session-Id": "ops"},
                       json={"model": "m", "messages": [{"role": "user", "content": text}]})
        assert r.status_code == 200, r.text
        asked.append((relay.url, text, r))
        return json.dumps(upstream.requests[-1]["messages"])

    try:
        a.wait_ready()
        b.wait_ready()
        ask(a, "The billing service listens on port 8001 in production.")
        ask(a, "Let's call 8001 the billing port.")
        pack = ask(b, "What is the billing port?")          # B, right after A's write
        assert "billing port: 8001" in pack
        hit_before = [r.headers["CRP-Context-Cache-Hit"] for _, _, r in asked]
        pack = ask(a, "What is the billing port?")          # the same lookup through A
        assert "billing port: 8001" in pack
        assert asked[-1][2].headers["CRP-Context-Cache-Hit"] == "true", hit_before
        ask(a, "Let's call 9001 the billing port.")        # the fact changes through A
        pack = ask(b, "What is the billing port?")          # B: no stale entry
        assert "billing port: 9001" in pack and "billing port: 8001" not in pack
        # Read-your-writes in one session across relays: each pack holds the previous
        # message and its reply, whichever relay stored them.
        for i, relay in enumerate([a, b, a, b]):
            pack = ask(relay, f"Step {i} of the rollout is done.")
            if i:
                assert f"Step {i - 1} of the rollout is done." in pack
                assert f"Noted: Step {i - 1} of the rollout is done." in pack
    finally:
        a.stop()
        b.stop()
        upstream.close()
