"""Prolog reaches the PostgreSQL back end with the same spec: store_open/3 takes the URL
(and the Redis cache), and the predicates work on it as on a directory."""
from __future__ import annotations

from services import redis_url
from support import run_swipl


def test_store_open_takes_a_postgresql_url_and_a_redis_cache(pg_schema):
    spec, schema = pg_schema
    cache = f"{redis_url()}?prefix=pl{schema}"
    goal = (
        f"use_module(library(ctxrelay)), "
        f"store_open('{spec}', S, [cache('{cache}')]), "
        "session_create(S, ops, []), "
        "turn_append(S, ops, message(user, \"the raft timeout is 1000 ms\"), T1, [key(k1)]), "
        "turn_append(S, ops, message(user, \"the raft timeout is 1000 ms\"), T2, [key(k1)]), "
        "turn_count(S, ops, N), transcript_search(S, ops, \"raft timeout\", [H|_]), "
        "get_dict(turn_id, H, Id), format('~w ~w ~w ~w~n', [T1, T2, N, Id]), store_close(S)")
    done = run_swipl(["-g", goal, "-t", "halt"], timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-4:] == ["1", "1", "1", "1"]
