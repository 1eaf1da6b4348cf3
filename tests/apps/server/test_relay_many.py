"""Many relays, one store (issue 17, point 3): three relay processes on one
PostgreSQL + Redis, 30 clients, every session served through every relay.

Checked afterwards, against the store itself: each session's turn ids are unique
and contiguous; it holds each acknowledged message exactly once, followed by its
reply (0 lost, 0 duplicated), and no other session's (0 crossed); the turn ids
each answer announced are the ones stored; an idempotency key sent again through
another relay replays the same turn.  Mid-load, one relay is killed with SIGKILL
(its clients retry elsewhere with the same key: no acknowledged write is lost)
and Redis is flushed (only latency may change).
"""
from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis

from ctxrelay.storage import open_stores

from relay_support import Subprocess
from services import redis_url

SESSIONS = 10
CLIENTS = 30                  # 3 per session
TURNS = 4                     # per client
#: A Redis database of its own, so flushing it touches no other test's keys.
REDIS_DB = 7


def _redis_db(url: str, db: int, prefix: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", f"prefix={prefix}", ""))


@dataclass
class Load:
    relays: list[Subprocess]
    dead: set[int] = field(default_factory=set)
    acked: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    replays: list[tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    retried_after_kill: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def post(self, relay: int, session: str, text: str, key: str) -> httpx.Response | None:
        """One try on ``relay``; None when it is unreachable (killed)."""
        try:
            return httpx.post(f"{self.relays[relay].url}/v1/chat/completions", timeout=300,
                              headers={"CRP-Session-Id": session, "Idempotency-Key": key,
                                       "Connection": "close"},
                              json={"model": "echo",
                                    "messages": [{"role": "user", "content": text}]})
        except httpx.TransportError:
            return None

    def send(self, first: int, session: str, text: str, key: str) -> httpx.Response:
        """The request through relay ``first``, else the next live one, same key."""
        for attempt in range(12):
            relay = (first + attempt) % len(self.relays)
            r = self.post(relay, session, text, key)
            if r is None:
                with self.lock:
                    self.retried_after_kill += 1
                continue
            if r.status_code == 200:
                return r
            if r.status_code in (409, 503):
                time.sleep(float(r.headers.get("Retry-After", "1")))
                continue
            raise AssertionError(f"{r.status_code} {r.text[:300]}")
        raise AssertionError(f"{key}: never stored")

    def client(self, c: int) -> None:
        session = f"s{c % SESSIONS}"
        try:
            for j in range(TURNS):
                text, key = f"{session} client {c} turn {j}", f"c{c}-t{j}"
                relay = (c + j) % len(self.relays)
                r = self.send(relay, session, text, key)
                ids = (int(r.headers["CRP-User-Turn"]), int(r.headers["CRP-Assistant-Turn"]))
                with self.lock:
                    self.acked.setdefault(session, []).append((text, *ids))
                if j == 1:        # the same request again through the next relay: a replay
                    again = self.send(relay + 1, session, text, key)
                    assert again.headers.get("CRP-Idempotent-Replay") == "true", again.headers
                    got = (int(again.headers["CRP-User-Turn"]),
                           int(again.headers["CRP-Assistant-Turn"]))
                    with self.lock:
                        self.replays.append((ids, got))
        except Exception as e:  # noqa: BLE001 - reported by the test
            with self.lock:
                self.failures.append(f"client {c}: {e}")

    def acknowledged(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())


@pytest.mark.slow
def test_three_relays_on_one_store_lose_duplicate_and_cross_nothing(tmp_path, pg_schema):
    spec, schema = pg_schema
    cache = _redis_db(redis_url(), REDIS_DB, f"many{schema}")
    relays = [Subprocess.relay(spec, tmp_path, "--upstream", "echo", "--cache", cache,  # type: ignore[arg-type]
                               "--no-warmup", "--log-level", "warning") for _ in range(3)]
    load = Load(relays)
    try:
        for r in relays:
            r.wait_ready()
        threads = [threading.Thread(target=load.client, args=(c,)) for c in range(CLIENTS)]
        for t in threads:
            t.start()
        total = CLIENTS * TURNS
        deadline = time.monotonic() + 600
        while load.acknowledged() < total // 4:
            assert time.monotonic() < deadline and not load.failures, load.failures[:3]
            time.sleep(0.05)
        hot = redis.Redis.from_url(_redis_db(redis_url(), REDIS_DB, "").split("?")[0])
        hot.flushdb()                                    # the hot tier is lost
        while load.acknowledged() < total // 3:
            assert time.monotonic() < deadline and not load.failures, load.failures[:3]
            time.sleep(0.05)
        relays[2].proc.send_signal(signal.SIGKILL)       # a relay dies mid-load
        load.dead.add(2)
        for t in threads:
            t.join(timeout=900)
        assert not load.failures, load.failures[:5]
        assert load.acknowledged() == total
    finally:
        for i, r in enumerate(relays):
            r.stop(signal.SIGKILL if i in load.dead else signal.SIGTERM)
    assert relays[2].proc.returncode == -signal.SIGKILL
    assert load.retried_after_kill >= 1          # the dead relay's clients went elsewhere
    # Idempotency keys honoured across relays: the replay named the same turns.
    assert len(load.replays) == CLIENTS and all(a == b for a, b in load.replays)
    with open_stores(spec) as stores:
        t = stores.transcript
        assert len(t.sessions()) == SESSIONS
        for session, acked in load.acked.items():
            turns = t.history(session)
            assert [x.turn_id for x in turns] == list(range(1, 2 * len(acked) + 1))
            assert [x.role for x in turns] == ["user", "assistant"] * len(acked)
            by_id = {x.turn_id: x for x in turns}
            for text, user_turn, assistant_turn in acked:   # announced == stored
                assert by_id[user_turn].content == text
                assert assistant_turn == user_turn + 1
            users = sorted(x.content for x in turns if x.role == "user")
            assert users == sorted(text for text, _, _ in acked)    # none lost or extra
            assert all(u.startswith(f"{session} ") for u in users)  # none crossed
            assert t.check_derived(session).ok


@pytest.mark.slow
def test_a_fact_promoted_through_one_relay_is_in_the_next_pack_of_another(tmp_path,
                                                                           pg_schema):
    """Relay A promotes a fact (the user names a value); relay B's very next assembly
    of the session packs it -- and packs the new value, not the old, once A updates
    it.  B asks as soon as A has answered, so no staleness bound above zero is
    allowed.  (A fact promoted from a session's turns is offered to that session
    only, by rule -- assembly.pl -- so both relays serve one session here; the
    fact's text, ``etcd quota: 8 GiB``, appears in no turn.)"""
    from ctxrelay.apps.server.tenants import KeyFile
    from relay_support import RecordingUpstream
    spec, schema = pg_schema
    cache = f"{redis_url()}?prefix=facts{schema}"
    key, _ = KeyFile(tmp_path / "keys.json").create("acme")    # facts: tenant:acme
    upstream = RecordingUpstream()
    a, b = (Subprocess.relay(spec, tmp_path, "--upstream", upstream.base_url,  # type: ignore[arg-type]
                             "--model", "m", "--cache", cache, "--no-warmup",
                             "--keys", str(tmp_path / "keys.json"),
                             "--log-level", "warning") for _ in range(2))

    def ask(relay: Subprocess, text: str) -> httpx.Response:
        r = httpx.post(f"{relay.url}/v1/chat/completions", timeout=300,
                       headers={"CRP-Session-Id": "ops", "Authorization": f"Bearer {key}"},
                       json={"model": "m", "messages": [{"role": "user", "content": text}]})
        assert r.status_code == 200, r.text
        return r

    try:
        a.wait_ready()
        b.wait_ready()
        ask(a, "The etcd quota is 8 GiB on the production cluster.")
        named = ask(a, "Let's call 8 GiB the etcd quota.")
        assert int(named.headers["CRP-Context-Promotions"]) >= 1
        ask(b, "What is the etcd quota?")
        assert "etcd quota: 8 GiB" in upstream.sent_text()
        renamed = ask(a, "Let's call 12 GiB the etcd quota.")
        assert int(renamed.headers["CRP-Context-Promotions"]) >= 1
        ask(b, "And what is the etcd quota now?")
        assert "etcd quota: 12 GiB" in upstream.sent_text()
        assert "etcd quota: 8 GiB" not in upstream.sent_text()   # no stale copy
    finally:
        a.stop()
        b.stop()
        upstream.close()
