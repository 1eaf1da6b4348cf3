"""Redis Cluster safety of the Redis back end: every command it sends, every
script call and every ``MULTI`` transaction, touches keys of one hash slot.

Cluster refuses anything else with CROSSSLOT.  No Cluster server runs here: the
test records every command the process sends to the test Redis (at the
connection, so pipelines and transactions are seen as sent), asks that Redis
which arguments are keys (``COMMAND GETKEYS``, the server's own answer, EVALSHA
included) and computes each key's slot as Cluster does (CRC16 mod 16384,
``redis.crc.key_slot``, hash tags included)."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import redis
from redis.connection import Connection
from redis.crc import key_slot

from ctxrelay import Runtime
from ctxrelay.retrieval.router import Router
from ctxrelay.storage import open_stores
from ctxrelay.storage.redis.rolling import RedisRollingLog
from services import redis_url

#: Session ids whose braces would break a tag made of the id itself.
AWKWARD = ["plain", "a{b}c", "}{", "{", "x}", "{}", "é{\x00}"]


class Sent:
    """Every command sent on a redis-py connection while active, grouped as Cluster
    sees them: a command alone, or every command of one MULTI ... EXEC."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.groups: list[list[tuple]] = []
        send, pack = Connection.send_command, Connection.pack_commands
        sent = self

        def send_command(conn, *args, **kwargs):
            sent.groups.append([args])
            return send(conn, *args, **kwargs)

        def pack_commands(conn, commands):
            commands = [tuple(c) for c in commands]
            if commands and str(commands[0][0]).upper() == "MULTI":
                sent.groups.append([c for c in commands if str(c[0]).upper()
                                    not in ("MULTI", "EXEC")])
            else:
                sent.groups.extend([c] for c in commands)
            return pack(conn, commands)
        monkeypatch.setattr(Connection, "send_command", send_command)
        monkeypatch.setattr(Connection, "pack_commands", pack_commands)
        self.undo = monkeypatch.undo

    def slots(self) -> Iterator[tuple[list[tuple], list[bytes], set[int]]]:
        """(group, its keys, their slots) for every group that has keys."""
        self.undo()                                  # GETKEYS below is not recorded
        client = redis.Redis.from_url(redis_url())
        try:
            for group in self.groups:
                keys: list[bytes] = []
                for command in group:
                    try:
                        keys += client.execute_command("COMMAND GETKEYS", *command)
                    except redis.ResponseError:     # a command without keys (PING, SCAN)
                        pass
                keys = [k if isinstance(k, bytes) else k.encode("utf-8") for k in keys]
                if keys:
                    yield group, keys, {key_slot(k) for k in keys}
        finally:
            client.close()


@pytest.fixture
def cache():
    prefix = f"slots{uuid.uuid4().hex[:12]}"
    yield f"{redis_url()}?prefix={prefix}"
    client = redis.Redis.from_url(redis_url())
    doomed = list(client.scan_iter(match=f"{prefix}:*"))
    if doomed:
        for key in doomed:
            client.delete(key)
    client.close()


def _vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=32).astype(np.float32)
    return v / np.linalg.norm(v)


def test_every_command_script_and_transaction_touches_one_slot(pg_schema, cache,
                                                                monkeypatch):
    spec, _ = pg_schema
    sent = Sent(monkeypatch)
    with Runtime(spec, cache=cache) as rt, open_stores(spec) as stores:
        rt.create_session("ops")
        for i in range(6):
            rt.append("ops", "user", f"turn {i} about the etcd quota")
        rt.managed_turn("ops", "what was the etcd quota?", provider="echo")
        assert [t.turn_id for t in rt.recent("ops", 3)] == [6, 7, 8]
        tail = stores.rolling
        assert isinstance(tail, RedisRollingLog)
        Router.of(stores)._tail.rebuild("ops")                  # the replace mode
        for session in AWKWARD:
            assert tail.append_turns(session, [(1, f"{session} 1"), (2, "two")]) == "appended"
            assert tail.append_turns(session, [(4, "four")]) == "gap"
            tail.append(session, "plain")
            assert tail.read_recent(session, 2) == ["two", "plain"]
            assert tail.roll_off(session, 1) == 1
            assert tail.stats(session).entries == 2
        assert set(AWKWARD) <= set(tail.sessions())
        assert tail.stats().sessions >= len(AWKWARD)
        with tail.exclusive():
            assert all(tail.drop(s) for s in AWKWARD)
        assert tail.sessions() == ["ops"]

        hot = stores.cache
        for seed, (etag, scope) in enumerate([("e1", "s1"), ("e1", "s2"), ("e2", "s1")]):
            hot.put(hot.key(_vec(seed), etag, scope), {"pack": seed})
        assert hot.get(hot.key(_vec(0), "e1", "s1")) == {"pack": 0}
        assert hot.invalidate("e1", scope="s1") == 1
        assert hot.invalidate("e1") == 1
        assert hot.invalidate(scope="s1") == 1
        hot.put(hot.key(_vec(5), "e3", "s3"), "again")
        assert hot.invalidate_all() == 1
        assert hot.errors == 0

    checked = list(sent.slots())
    spread = [(group, keys) for group, keys, slots in checked if len(slots) > 1]
    assert spread == []
    # The check saw what it is about (it cannot pass by seeing nothing): the
    # append and roll-off scripts with both keys, one MULTI, multi-key commands.
    names = [[str(c[0]).upper() for c in g] for g, _, _ in checked]
    assert sum(1 for g, keys, _ in checked if str(g[0][0]).upper() == "EVALSHA"
               and len(keys) == 2) >= 2 * len(AWKWARD)
    assert any(len(n) > 1 for n in names)                            # a transaction
    assert any(len(keys) > 1 and n == ["DEL"] for (_, keys, _), n in zip(checked, names))


def test_a_session_s_keys_share_a_tag_whatever_its_id_holds(tmp_path, cache):
    with open_stores(tmp_path / "store", cache=cache) as stores:
        tail = stores.rolling
        slots = set()
        for session in AWKWARD + ["x" * 1000]:
            listed, meta = tail._keys(session)
            assert key_slot(listed) == key_slot(meta)
            assert listed.endswith(b":l:" + session.encode("utf-8", "surrogatepass"))
            slots.add(key_slot(listed))
        assert len(slots) > 1                      # the tag is the session's, not a constant


def test_a_prefix_with_braces_is_refused():
    from ctxrelay.errors import InvalidArgumentError
    from ctxrelay.storage.redis.hotcache import parse_redis_url
    for bad in ("t{1}", "t}", "{"):
        with pytest.raises(InvalidArgumentError, match="braces"):
            parse_redis_url(f"redis://127.0.0.1:6379/0?prefix={bad}")
