"""Runtime on PostgreSQL + Redis: the public API (through Prolog's store_open/3)
reaches the same back end by URL."""
from __future__ import annotations

import pytest

from ctxrelay import Runtime
from services import drop_schema, fresh_schema_url, redis_url


@pytest.fixture
def urls():
    spec, schema = fresh_schema_url()
    yield spec, f"{redis_url()}?prefix=rt{schema}"
    from ctxrelay.storage import close_all
    close_all()
    drop_schema(schema)


def test_a_runtime_on_postgres_appends_searches_and_reopens(urls):
    spec, cache = urls
    with Runtime(spec, cache=cache) as rt:
        rt.create_session("ops")
        assert rt.append("ops", "user", "the raft election timeout is 1000 ms", key="m1") == 1
        assert rt.append("ops", "user", "the raft election timeout is 1000 ms", key="m1") == 1
        assert rt.append("ops", "assistant", "noted") == 2
        assert [h.turn_id for h in rt.search("ops", "raft timeout")] == [1]
    with Runtime(spec, cache=cache) as again:            # another open sees every write
        assert [t.content for t in again.history("ops")] == [
            "the raft election timeout is 1000 ms", "noted"]


def test_what_postgres_does_not_keep_yet_is_refused_with_a_clear_error(urls):
    spec, cache = urls
    with Runtime(spec, cache=cache) as rt:
        rt.create_session("ops")
        rt.append("ops", "user", "what is the raft timeout?")
        with pytest.raises(Exception, match="not kept in PostgreSQL yet"):
            rt.derive("ops")
