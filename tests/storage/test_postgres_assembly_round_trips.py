"""Round trips of an assembly on PostgreSQL (issue 17, point 5).

An assembly asks for the store's generation (the transcript's and the turn
log's ``write_generation``: one counter on PostgreSQL) five times and whether
the warm and scratch parts exist twice; inside its first stage the generation
is pinned (``PinnableDatabase.pinned``): one statement answers all of them.
The knowledge fabric's steps of one retrieval share one read transaction
(``PgFacts.reading``).  Budget for one assembly with knowledge on a small
store: :data:`ASSEMBLY_BUDGET` round trips on the wire (PostgreSQL; 7 and 9
measured; 12 and 16 without the pin; on the bench's store 28 before both changes).
"""
from __future__ import annotations

import pytest

from ctxrelay import Runtime
from ctxrelay.storage import close_all, open_stores
from pg_proxy import TcpProxy

ASSEMBLY_BUDGET = 12
POLICY = dict(max_context_tokens=2048, output_reserve=256, safety_margin=32, min_recent_turns=4,
              embedder="hashing", knowledge=True, max_facts=8)


@pytest.fixture
def proxied(pg_schema):
    spec, _ = pg_schema
    proxy, url = TcpProxy.to_url(spec)
    yield proxy, url
    close_all()                      # before the proxy goes (pg_schema drops the schema)
    proxy.close()


def _trips(proxy: TcpProxy, call) -> tuple[int, object]:
    before = proxy.round_trips
    value = call()
    return proxy.round_trips - before, value


def test_a_pinned_generation_is_read_once_and_a_write_ends_the_pin(proxied):
    proxy, url = proxied
    stores = open_stores(url)
    t, log, backend = stores.transcript, stores.turnlog, stores.backend
    t.create_session("s")
    t.append("s", "user", "etcd quorum")
    live = t.write_generation()
    with backend.pinned():
        trips, seen = _trips(proxy, lambda: [t.write_generation(), log.write_generation(),
                                             t.write_generation(), backend.has("warm"),
                                             backend.has("scratch")])
        assert trips == 0
        assert seen == [live, live, live, False, False]
        t.append("s", "user", "a write inside the block")      # ends this thread's pin
        trips, after = _trips(proxy, t.write_generation)
        assert trips == 1 and after > live
    # outside a block: each read is a round trip, as before
    assert _trips(proxy, t.write_generation) == (1, after)
    assert _trips(proxy, lambda: backend.has("scratch"))[0] == 1


def test_the_pin_belongs_to_the_thread_that_made_it(proxied):
    import threading
    _, url = proxied
    stores = open_stores(url)
    t = stores.transcript
    t.create_session("s")
    with stores.backend.pinned():
        pinned = t.write_generation()
        box = {}
        other = threading.Thread(target=lambda: box.update(
            wrote=t.append("s", "user", "from another thread"), seen=t.write_generation()))
        other.start()
        other.join()
        assert box["seen"] > pinned            # the other thread reads live
        assert t.write_generation() == pinned  # this one, as of its pin


def test_an_assembly_stays_within_its_round_trip_budget(proxied, tmp_path):
    proxy, url = proxied
    with open_stores(url) as stores:
        stores.facts.add_facts([{"content": f"the etcd quota of member {i} is {i} GiB",
                                 "key": f"q{i}"} for i in range(30)])
    with Runtime(url) as rt:
        rt.create_session("s")
        for i in range(20):
            rt.append("s", "user" if i % 2 == 0 else "assistant",
                      f"turn {i}: the etcd quota and the restic backup of member {i % 5}")
        for m in ("warm up", "what is the etcd quota of member 3?"):
            rt.assemble("s", m, **POLICY)
        counts = [_trips(proxy, lambda m=m: rt.assemble("s", m, **POLICY))[0]
                  for m in ("and the restic backup?", "what did member 4 say about quota?")]
    assert max(counts) <= ASSEMBLY_BUDGET, counts
