"""Load for the outage tests (test_relay_outages.py) and bench/relay_outage.py: clients
that send turns through two relays, each with its own session and an idempotency key
per message, and that retry a 503 after its ``Retry-After`` with the same key.

Every answer is recorded (time, status, code, ``Retry-After``); an answer that is
neither 200 nor a 503 ``store_unavailable`` with ``Retry-After`` is a failure.
:func:`check_store` then reads the store itself (the transcript, direct SQL and
``ctxrelay check``) and :func:`recovery` says when each relay served again.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[3]
#: 503 codes of an outage: nothing stored; or lost while committing (stored or not)
UNAVAILABLE_CODES = ("store_unavailable", "store_outcome_unknown")


@dataclass
class Answer:
    at: float                  # time.monotonic() when it came
    relay: int
    status: int
    code: str | None
    retry_after: str | None
    seconds: float             # how long it took
    replay: bool = False       # CRP-Idempotent-Replay: the turn had been stored before
    key: str = ""              # the request's Idempotency-Key


@dataclass
class Load:
    """Clients ``0..clients-1`` (session ``<prefix>c<n>``), each alternating relays."""

    urls: list[str]
    clients: int = 6
    prefix: str = "o"
    pause: float = 0.0                 # between one client's turns
    answers: list[Answer] = field(default_factory=list)
    acked: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def post(self, relay: int, session: str, text: str, key: str) -> httpx.Response:
        t0 = time.monotonic()
        r = httpx.post(f"{self.urls[relay]}/v1/chat/completions", timeout=120,
                       headers={"CRP-Session-Id": session, "Idempotency-Key": key},
                       json={"model": "echo", "messages": [{"role": "user", "content": text}]})
        code = None
        if r.status_code != 200:
            try:
                code = r.json()["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = "?"
        with self.lock:
            self.answers.append(Answer(time.monotonic(), relay, r.status_code, code,
                                       r.headers.get("Retry-After"), time.monotonic() - t0,
                                       r.headers.get("CRP-Idempotent-Replay") == "true", key))
        return r

    def client(self, c: int) -> None:
        session = f"{self.prefix}c{c}"
        j = 0
        try:
            while not self.stop.is_set():
                text = f"{session} turn {j}: the deploy of service {c * 100 + j} went fine"
                key, relay = f"{session}-k{j}", (c + j) % len(self.urls)
                for _ in range(200):
                    r = self.post(relay, session, text, key)
                    if r.status_code == 200:
                        ids = (int(r.headers["CRP-User-Turn"]),
                               int(r.headers["CRP-Assistant-Turn"]))
                        with self.lock:
                            self.acked.setdefault(session, []).append((text, *ids))
                        break
                    retry = r.headers.get("Retry-After")
                    if r.status_code != 503 or self.answers[-1].code not in UNAVAILABLE_CODES \
                            or retry is None or int(retry) < 1:
                        raise AssertionError(f"{r.status_code} {retry!r} {r.text[:300]}")
                    # Retry-After says 2 s; the tests wait less to see recovery sooner
                    # (the relay must cope with impatient clients too).
                    time.sleep(min(float(retry), 0.25))
                    relay = (relay + 1) % len(self.urls)    # and try the other relay
                else:
                    raise AssertionError(f"{key}: never stored")
                j += 1
                if self.pause:
                    time.sleep(self.pause)
        except Exception as e:  # noqa: BLE001 - reported by the test
            with self.lock:
                self.failures.append(f"client {c}: {type(e).__name__}: {e}")

    def start(self) -> None:
        self.threads = [threading.Thread(target=self.client, args=(c,), daemon=True)
                        for c in range(self.clients)]
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=300)

    def acknowledged(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    def wait_for(self, acks: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.acknowledged() < acks:
            assert time.monotonic() < deadline and not self.failures, self.failures[:3]
            time.sleep(0.02)

    def since(self, t: float) -> list[Answer]:
        with self.lock:
            return [a for a in self.answers if a.at >= t]


def recovery(load: Load, down_at: float, ready_at: float, relays: int,
             timeout: float = 120) -> dict[str, Any]:
    """After the database went down at ``down_at`` and accepted connections again at
    ``ready_at``: how long until each relay answered 200 again (seconds after
    ``ready_at``; a relay that never failed counts 0), and the 503s seen."""
    deadline = time.monotonic() + timeout
    while True:
        after = load.since(down_at)
        last_503 = {r: max((a.at for a in after if a.relay == r and a.status == 503),
                           default=None) for r in range(relays)}
        back = {}
        for r in range(relays):
            ok = [a.at for a in after if a.relay == r and a.status == 200
                  and (last_503[r] is None or a.at > last_503[r]) and a.at >= ready_at]
            if ok:
                back[r] = max(0.0, min(ok) - ready_at) if last_503[r] is not None else 0.0
        if len(back) == relays or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    return {"recovered_s": back, "errors_503": sum(1 for a in after if a.status == 503),
            # 503s answered once the server accepted connections again: requests that
            # met a connection the restart had broken (each fails once)
            "errors_503_after_ready": sum(1 for a in after if a.status == 503
                                          and a.at - a.seconds >= ready_at),
            "answers": len(after), "not_recovered": [r for r in range(relays) if r not in back]}


# -- what the store holds afterwards ------------------------------------------------------

#: Direct SQL: each query lists what must not exist (a half-written turn).
ORPHANS = {
    "postings without their turn": """
        SELECT p.session_num, p.turn_id FROM postings p
        LEFT JOIN turns t ON t.session_num = p.session_num AND t.turn_id = p.turn_id
        WHERE t.turn_id IS NULL LIMIT 5""",
    "turns without postings": """
        SELECT t.session_num, t.turn_id FROM turns t
        WHERE t.ix_length > 0 AND NOT EXISTS (
            SELECT 1 FROM postings p WHERE p.session_num = t.session_num
                                       AND p.turn_id = t.turn_id) LIMIT 5""",
    "document frequencies that disagree with the postings": """
        SELECT d.session_num, d.term FROM term_df d
        LEFT JOIN (SELECT session_num, term, count(*) AS n FROM postings
                   GROUP BY session_num, term) p USING (session_num, term)
        WHERE d.df <> coalesce(p.n, 0) LIMIT 5""",
    "a key on two turns": """
        SELECT session_num, key FROM turns WHERE key IS NOT NULL
        GROUP BY session_num, key HAVING count(*) > 1 LIMIT 5""",
    "a turn log entry without its turn": """
        SELECT l.session_id, l.turn_id FROM turnlog_turns l
        JOIN sessions s ON s.session_id = l.session_id
        LEFT JOIN turns t ON t.session_num = s.num AND t.turn_id = l.turn_id
        WHERE t.turn_id IS NULL LIMIT 5""",
    "session totals that disagree with the turns": """
        SELECT s.session_id FROM sessions s
        WHERE s.ix_docs <> (SELECT count(*) FROM turns t WHERE t.session_num = s.num)
        LIMIT 5""",
}


def check_store(spec: str, server_url: str, schema: str, load: Load) -> dict[str, Any]:
    """Everything the store holds against what was acknowledged; returns the figures.

    Raises AssertionError on: a turn id gap, an acknowledged message missing or stored
    twice, a turn whose announced id is not its stored one, a half-written record
    (:data:`ORPHANS`), a problem ``ctxrelay check`` reports.
    """
    import psycopg

    from ctxrelay.storage import close_all, open_stores
    stored = 0
    try:
        with open_stores(spec) as stores:
            t = stores.transcript
            for session, acked in load.acked.items():
                turns = t.history(session)
                stored += len(turns)
                assert [x.turn_id for x in turns] == list(range(1, len(turns) + 1)), session
                assert [x.role for x in turns] == ["user", "assistant"] * (len(turns) // 2), \
                    session
                by_id = {x.turn_id: x for x in turns}
                for text, user_turn, assistant_turn in acked:     # announced == stored
                    assert by_id[user_turn].content == text, (session, user_turn)
                    assert assistant_turn == user_turn + 1
                users = [x.content for x in turns if x.role == "user"]
                # Each acknowledged message once; a message sent but never acknowledged
                # (its client stopped) may be stored once, never twice.
                assert len(users) == len(set(users)), session
                assert {text for text, _, _ in acked} <= set(users), session
                assert len(users) - len(acked) <= 1, (session, len(users), len(acked))
    finally:
        close_all()
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'SET search_path = "{schema}", public')
        for what, query in ORPHANS.items():
            rows = conn.execute(query).fetchall()
            assert not rows, f"{what}: {rows}"
    done = subprocess.run([sys.executable, "-m", "ctxrelay.apps.cli", "--json", "--store", spec,
                           "check", "--no-progress"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT / "python")},
                          check=False)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    assert done.returncode == 0 and report.get("ok"), (done.returncode, done.stdout[-2000:],
                                                       done.stderr[-2000:])
    return {"sessions": len(load.acked), "turns_stored": stored,
            "acknowledged": load.acknowledged(), "checked_sessions": len(report["sessions"])}


# -- a scripted conversation, for comparing packs --------------------------------------------


def script(c: int) -> list[str]:
    """Session ``c``'s messages: facts stated and named (promotions), the same question
    asked again (hot-cache lookups), a value renamed (a CKF change between two asks)."""
    svc, port, moved = f"billing{c}", 8000 + c, 9000 + c
    return [f"The {svc} service listens on port {port} in production.",
            f"Let's call {port} the {svc} port.",
            f"What is the {svc} port?",
            f"The deploy of {svc} went fine yesterday after the schema change.",
            f"What is the {svc} port?",
            f"Let's call {moved} the {svc} port.",
            f"What is the {svc} port?",
            f"What is the {svc} port?",
            f"Remind me what we said about the deploy of {svc}.",
            f"What is the {svc} port?"]


@dataclass
class Scripted:
    """Each session ``p<c>`` sends :func:`script` (c) in order through alternating relays;
    every answer must be 200.  ``packs`` maps each message to what the upstream got
    for it (the assembled pack); ``hits`` counts answers with a hot-cache hit."""

    urls: list[str]
    sessions: int = 4
    prefix: str = "p"
    acked: int = 0
    hits: int = 0
    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, c: int) -> None:
        session = f"{self.prefix}{c}"
        try:
            for j, text in enumerate(script(c)):
                t0 = time.monotonic()
                r = httpx.post(f"{self.urls[(c + j) % len(self.urls)]}/v1/chat/completions",
                               timeout=120, headers={"CRP-Session-Id": session},
                               json={"model": "m",
                                     "messages": [{"role": "user", "content": text}]})
                assert r.status_code == 200, f"{r.status_code} {r.text[:300]}"
                with self.lock:
                    self.seconds.append(time.monotonic() - t0)
                    self.acked += 1
                    self.hits += r.headers.get("CRP-Context-Cache-Hit") == "true"
        except Exception as e:  # noqa: BLE001 - reported by the test
            with self.lock:
                self.failures.append(f"session {session}: {type(e).__name__}: {e}")

    def run(self, during: Any = None) -> None:
        """All sessions at once; ``during(self)`` runs beside them (the faults)."""
        threads = [threading.Thread(target=self.client, args=(c,), daemon=True)
                   for c in range(self.sessions)]
        for t in threads:
            t.start()
        if during is not None:
            during(self)
        for t in threads:
            t.join(timeout=600)

    def wait_for(self, acks: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.acked < acks and not self.failures:
            assert time.monotonic() < deadline, "the load stalled"
            time.sleep(0.02)


def packs(requests: list[dict[str, Any]]) -> dict[tuple[str, int], str]:
    """What the upstream got, by the user message that asked it and how many times it
    had been asked before (one session's messages come in order)."""
    found: dict[tuple[str, int], str] = {}
    for body in requests:
        asked = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
        n = sum(1 for k in found if k[0] == asked)
        found[(asked, n)] = _fact_ids_by_order(json.dumps(body["messages"], sort_keys=True))
    return found


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _fact_ids_by_order(text: str) -> str:
    """Fact ids are random (uuid4) in each run: each becomes its order of appearance."""
    order: dict[str, str] = {}
    return _UUID.sub(lambda m: order.setdefault(m.group(0), f"<fact {len(order) + 1}>"), text)


def reply_to(body: dict[str, Any]) -> dict[str, Any]:
    """The recording upstream's answer as a function of the question alone, so that two
    runs store the same replies whatever order the sessions' requests came in."""
    asked = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
    return {"role": "assistant", "content": f"Noted: {asked}"}
