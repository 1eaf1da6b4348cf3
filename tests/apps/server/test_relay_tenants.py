"""Tenants: an adversarial suite that tries to read or write another tenant's data
through every route, header and body field of the relay, and finds nothing.

Two tenants, alpha and beta, on one relay.  Alpha's data carries markers
(``ALPHA-...``); every request beta makes is checked at the upstream (what the
model would see) and in the answer (body and headers).  Each check is paired
with one showing that alpha *does* reach the same data, so a test that passed
because nothing was ever packed would fail.
"""
from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from ctxrelay.apps.server import cli as server_cli
from ctxrelay.apps.server.tenants import KeyFile, KeyRing

from relay_support import POLICY, RecordingUpstream, start_in_thread

SECRET = "ALPHA-SECRET-7781"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("tenants")
    keys = KeyFile(tmp / "keys.json")
    alpha, _ = keys.create("alpha")
    beta, _ = keys.create("beta")
    limited, _ = keys.create("gamma", limits={"requests_per_minute": 3})
    small_body, _ = keys.create("delta", limits={"body_bytes_per_minute": 600})
    quota, _ = keys.create("epsilon", limits={"stored_bytes": 60})
    upstream = RecordingUpstream()
    relay = start_in_thread(tmp / "store", upstream=upstream.base_url, model="m",
                            policy=POLICY, keys_file=tmp / "keys.json")

    class World:
        pass

    w = World()
    w.__dict__.update(relay=relay, upstream=upstream, alpha=alpha, beta=beta, keys=keys,
                      limited=limited, small_body=small_body, quota=quota, tmp=tmp)
    # Alpha's session "shared" holds the secret.
    r = relay.post("shared", f"remember this: the vault code is {SECRET}", alpha)
    assert r.status_code == 200, r.text
    yield w
    relay.stop()
    upstream.close()


def stored(world: Any, session: str) -> list[str]:
    """Every stored session id and turn text, read from the store itself."""
    return world.relay.relay.call_sync(
        lambda rt: [t.content for t in rt.history(session)]
        if session in {s.session_id for s in rt.sessions()} else [])


def assert_clean(response: httpx.Response, *markers: str) -> None:
    """Nothing of alpha and nothing internal in an answer (body and every header)."""
    everything = response.text + json.dumps(dict(response.headers))
    for marker in (SECRET, "@alpha", "tenant:alpha", *markers):
        assert marker not in everything, (marker, everything[:2000])


# ------------------------------------------------------------------------ authentication


def test_requests_without_a_valid_key_get_401_and_store_nothing(world):
    relay = world.relay
    good = world.alpha
    wrong_secret = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    for headers in ({}, {"Authorization": good}, {"Authorization": f"Basic {good}"},
                    {"Authorization": "Bearer"}, {"Authorization": "Bearer crk_nothing"},
                    {"Authorization": f"Bearer {wrong_secret}"},
                    {"Authorization": "Bearer crk_000000000000_" + "A" * 43}):
        for r in (relay.post("intruder", "hello", headers=headers),
                  httpx.get(f"{relay.url}/v1/models", headers=headers),
                  httpx.get(f"{relay.url}/v1/sessions/shared/turns", headers=headers)):
            assert r.status_code == 401, (headers, r.text)
            assert r.json()["error"]["code"] == "invalid_api_key"
            assert r.headers["WWW-Authenticate"] == "Bearer"
            assert_clean(r)
    assert stored(world, "@alpha/intruder") == [] and stored(world, "intruder") == []


def test_a_revoked_key_is_refused_from_the_next_request_on(world):
    key, record = world.keys.create("alpha", name="laptop")
    assert world.relay.post("rev", "hello", key).status_code == 200
    world.keys.revoke(record.id)
    r = world.relay.post("rev", "hello again", key)
    assert r.status_code == 401
    texts = stored(world, "@alpha/rev")
    assert "hello" in texts and "hello again" not in texts


def test_the_keys_file_holds_no_key(world):
    text = (world.tmp / "keys.json").read_text()
    for key in (world.alpha, world.beta):
        key_id, secret = key[4:].split("_", 1)
        assert key_id in text and secret not in text and key not in text
    ring = KeyRing(world.tmp / "keys.json")
    assert ring.tenant_of(world.alpha).name == "alpha"
    assert ring.tenant_of(world.beta).name == "beta"


# ------------------------------------------------------------------------ sessions


@pytest.mark.parametrize("how", ["header", "session_id", "user"])
def test_another_tenants_session_id_names_the_callers_own_session(world, how):
    relay, up = world.relay, world.upstream
    # Alpha's own next turn on "shared" carries the secret upstream: the data is there.
    assert relay.post("shared", f"what is the vault code? ({how})", world.alpha).status_code == 200
    assert SECRET in up.sent_text()
    session = "shared"
    if how == "header":
        r = relay.post(session, "what is the vault code?", world.beta)
    else:
        r = relay.post(None, "what is the vault code?", world.beta, **{how: session})
    assert r.status_code == 200, r.text
    assert SECRET not in up.sent_text()           # nothing of alpha's reached the model
    assert_clean(r)
    assert r.headers["CRP-Session-Id"] == session
    assert SECRET not in json.dumps(stored(world, "@beta/shared"))
    # And beta's write went to beta's session, not alpha's.
    assert "what is the vault code?" not in stored(world, "@alpha/shared")


@pytest.mark.parametrize("how", ["header", "session_id", "user"])
def test_stored_session_ids_cannot_be_named(world, how):
    before = len(world.upstream.requests)
    for session in ("@alpha/shared", "@alpha/", "@beta/x", " @alpha/shared"):
        if how == "header" and session.startswith(" "):
            continue                        # HTTP clients strip a header's leading blank
        if how == "header":
            r = world.relay.post(session, "read it", world.beta)
        else:
            r = world.relay.post(None, "read it", world.beta, **{how: session})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_session_id"
    assert len(world.upstream.requests) == before
    assert "read it" not in json.dumps(stored(world, "@alpha/shared"))


def test_reading_another_tenants_session_is_404_like_a_missing_one(world):
    relay = world.relay
    mine = relay.get("/v1/sessions/shared/turns", world.alpha)
    assert mine.status_code == 200 and SECRET in mine.text
    theirs = relay.get("/v1/sessions/only-alpha-never-beta/turns", world.beta)
    assert relay.post("only-alpha-never-beta", "alpha only", world.alpha).status_code == 200
    after = relay.get("/v1/sessions/only-alpha-never-beta/turns", world.beta)
    missing = relay.get("/v1/sessions/nobody-ever/turns", world.beta)
    for r in (theirs, after, missing):
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "session_not_found"
        assert_clean(r)
    # The same answer whether or not the session exists for someone else.
    assert after.json()["error"]["message"].replace("only-alpha-never-beta", "X") == \
        missing.json()["error"]["message"].replace("nobody-ever", "X")
    for path in ("/v1/sessions/@alpha/shared/turns", "/v1/sessions/%40alpha%2Fshared/turns"):
        r = relay.get(path, world.beta)
        assert r.status_code == 404 and SECRET not in r.text


def test_idempotency_keys_are_per_tenant(world):
    relay, up = world.relay, world.upstream
    first = relay.post("idem", "say hi", world.alpha, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 200
    replay = relay.post("idem", "say hi", world.alpha, headers={"Idempotency-Key": "k-1"})
    assert replay.headers.get("CRP-Idempotent-Replay") == "true"     # the key works
    before = len(up.requests)
    theirs = relay.post("idem", "say hi", world.beta, headers={"Idempotency-Key": "k-1"})
    assert theirs.status_code == 200
    assert "CRP-Idempotent-Replay" not in theirs.headers
    assert theirs.json()["id"] != first.json()["id"]
    assert len(up.requests) == before + 1              # a new turn, answered by the model
    other = relay.post("idem", "something else", world.beta,
                       headers={"Idempotency-Key": "k-2"})
    assert other.status_code == 200
    conflict = relay.post("idem", "not hi", world.alpha, headers={"Idempotency-Key": "k-1"})
    assert conflict.status_code == 409                  # alpha's own key still guards alpha
    assert_clean(theirs)


def test_facts_are_per_tenant(world):
    relay, up = world.relay, world.upstream
    relay.relay.call_sync(lambda rt: rt.add_fact(
        "The launch password of the rocket project is ALPHA-ZEBRA-4491.",
        namespace="tenant:alpha", key="launch-password"))
    question = "What is the launch password of the rocket project?"
    assert relay.post("facts", question, world.alpha).status_code == 200
    assert "ALPHA-ZEBRA-4491" in up.sent_text()
    assert relay.post("facts", question, world.beta).status_code == 200
    assert "ALPHA-ZEBRA-4491" not in up.sent_text()


def test_history_tools_reach_only_the_callers_session(world):
    """The model's context_search/slice/peek calls run on the caller's session only."""
    relay, up = world.relay, world.upstream
    words = " ".join(f"filler{i}" for i in range(120))

    def seed(rt: Any) -> None:
        for session, mark in (("@alpha/hist", SECRET), ("@beta/hist", "BETA-OWN-5150")):
            rt.create_session(session)
            for i in range(24):
                rt.append(session, "user" if i % 2 == 0 else "assistant",
                          f"{mark if i == 2 else 'note'} {i} {words}")
    relay.relay.call_sync(seed)
    calls = [{"id": "c1", "type": "function", "function": {
                 "name": "context_search", "arguments": json.dumps({"query": "note 2 vault"})}},
             {"id": "c2", "type": "function", "function": {
                 "name": "context_slice", "arguments": json.dumps({"start": 1, "length": 6})}},
             {"id": "c3", "type": "function", "function": {
                 "name": "context_peek", "arguments": json.dumps({"turn": 3})}}]

    def reply(body: dict[str, Any]) -> dict[str, Any] | None:
        offered = {t["function"]["name"] for t in body.get("tools") or []}
        if "context_search" in offered and not any(m.get("role") == "tool"
                                                   for m in body["messages"]):
            return {"role": "assistant", "content": None, "tool_calls": calls}
        return None

    up.reply = reply
    try:
        before = len(up.requests)
        r = relay.post("hist", "what did the third note say?", world.beta)
        assert r.status_code == 200, r.text
        assert r.headers.get("CRP-Context-History-Tool-Rounds") == "1"
        tool_round = json.dumps(up.requests[before + 1:])
        assert "BETA-OWN-5150" in tool_round          # the tools ran, on beta's session
        assert SECRET not in tool_round and "@alpha" not in tool_round \
            and "@beta" not in tool_round
        assert_clean(r, "@beta")
        before = len(up.requests)
        r = relay.post("hist", "what did the third note say?", world.alpha)
        assert r.status_code == 200
        assert SECRET in json.dumps(up.requests[before + 1:])   # alpha's own: found
    finally:
        up.reply = None


# ------------------------------------------------------------------------ answers


def test_answers_show_no_internals_to_anyone(world):
    relay = world.relay
    r = relay.post("hdr", "hello", world.beta)
    assert r.status_code == 200
    assert_clean(r, "@beta", "tenant:beta", str(world.tmp))
    assert r.headers["CRP-Session-Id"] == "hdr"
    bad = relay.post("x" * 181, "hello", world.beta)
    assert bad.status_code == 400 and "@beta" not in bad.text
    for path in ("/health", "/healthz", "/readyz"):
        h = httpx.get(f"{relay.url}{path}")
        assert h.status_code == 200
        assert str(world.tmp) not in h.text and "upstream" not in h.text


# ------------------------------------------------------------------------ limits


def test_requests_per_minute_is_429_with_retry_after_and_stores_nothing(world):
    relay = world.relay
    for i in range(3):
        assert relay.post("rpm", f"turn {i}", world.limited).status_code == 200
    r = relay.post("rpm", "one too many", world.limited)
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "requests_per_minute_exceeded"
    assert 1 <= int(r.headers["Retry-After"]) <= 61
    assert "one too many" not in stored(world, "@gamma/rpm")
    # Another key is not limited by gamma's count.
    assert relay.post("rpm", "fine", world.beta).status_code == 200


def test_body_bytes_and_stored_bytes_limits(world):
    relay = world.relay
    r = relay.post("big", "x" * 700, world.small_body)
    assert r.status_code == 429 and r.json()["error"]["code"] == "body_bytes_per_minute_exceeded"
    assert int(r.headers["Retry-After"]) >= 1
    assert relay.post("big", "small", world.small_body).status_code == 200
    first = relay.post("quota", "a first message of about fifty bytes, or so.", world.quota)
    assert first.status_code == 200
    r = relay.post("quota", "and one more", world.quota)
    assert r.status_code == 429 and r.json()["error"]["code"] == "stored_bytes_exceeded"
    assert "and one more" not in stored(world, "@epsilon/quota")


def test_body_bytes_are_counted_in_utf8_bytes(world):
    """body_bytes_per_minute counts bytes: a body of 300 'é' (600 bytes of text, about
    680 with its JSON) passes a limit of 600 bytes, though it has only about 380
    characters."""
    key, _ = world.keys.create("zeta", limits={"body_bytes_per_minute": 600})
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "é" * 300}]},
                      ensure_ascii=False).encode("utf-8")
    assert len(body) > 600 > len(body.decode("utf-8"))
    r = httpx.post(f"{world.relay.url}/v1/chat/completions", content=body, timeout=60,
                   headers={"Authorization": f"Bearer {key}", "CRP-Session-Id": "accents",
                            "Content-Type": "application/json"})
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "body_bytes_per_minute_exceeded"


# ------------------------------------------------------------------------ binding


def test_binding_beyond_loopback_needs_keys(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CTXRELAY_RELAY_KEYS", raising=False)
    monkeypatch.delenv("CTXRELAY_KEYS_FILE", raising=False)
    with pytest.raises(SystemExit) as exc:
        server_cli.main(["--store", str(tmp_path / "s"), "--upstream", "echo",
                         "--host", "0.0.0.0"])
    assert exc.value.code == 2
    assert "refusing to bind 0.0.0.0 without API keys" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
    assert server_cli.is_loopback("127.0.0.1") and server_cli.is_loopback("::1")
    assert server_cli.is_loopback("localhost") and not server_cli.is_loopback("10.0.0.1")


def test_a_keys_file_gone_while_serving_refuses_without_showing_its_path(tmp_path):
    keys = KeyFile(tmp_path / "keys.json")
    key, _ = keys.create("solo")
    relay = start_in_thread(tmp_path / "store", upstream="echo", policy=POLICY,
                            keys_file=tmp_path / "keys.json")
    try:
        assert relay.post("s", "hello", key).status_code == 200
        (tmp_path / "keys.json").unlink()
        r = relay.post("s", "hello again", key)
        assert r.status_code == 503 and r.json()["error"]["code"] == "keys_unavailable"
        assert str(tmp_path) not in r.text and "Retry-After" in r.headers
    finally:
        relay.stop()
