"""The PostgreSQL append as it was before the server-side ``transcript_append``
(migration 7), kept only as the "before" arm of the benchmarks that compare against it.

The same statements the client used to send itself: lock the session's row, read the
turns stored under the keys, then insert the turn, its postings and document
frequencies, update the counters and the store generation.  Two ways to frame them:

- :func:`two_trip_append`: on an autocommit connection in pipeline mode, BEGIN with
  the lock in one round trip, the writes with COMMIT in another (the protocol of
  commit 4e4cb7c, 22.6 ms p50 in ``bench/results/pg_append.json`` of then);
- :func:`four_trip_append`: in psycopg's own transaction, which syncs after BEGIN and
  again after COMMIT (the protocol before that).

Both write what ``PgTranscript.append`` writes for one turn
(``tests/storage/test_postgres_append.py`` checks the rows agree), so the arms differ
only in how the work reaches the server.
"""
from __future__ import annotations

import json
from typing import Any

from ctxrelay.errors import KeyConflictError
from ctxrelay.storage.common.transcript.records import Counters
from ctxrelay.storage.postgres import textindex

_SESSION = "num, counters, archived"


def _b(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8")


def _lock(cur: Any, session_id: str, pending: Any) -> tuple[tuple, tuple | None]:
    """Lock the session's row and read the turn stored under the key: the session row
    and ``(turn id, digest)`` or None."""
    cur.execute(f"SELECT {_SESSION} FROM sessions WHERE session_id = %s FOR UPDATE",
                (session_id,))
    if pending.key is None:
        return cur.fetchone(), None
    with cur.connection.cursor() as keyed:
        keyed.execute("SELECT turn_id, key_digest FROM turns WHERE session_num = "
                      "(SELECT num FROM sessions WHERE session_id = %s) AND key = %s",
                      (session_id, _b(pending.key)))
        return cur.fetchone(), keyed.fetchone()


def _writes(cur: Any, session: tuple, pending: Any, tokenizer: str) -> int:
    """The writes of one new turn (sent without waiting for any answer)."""
    num, counters_text, _archived = session
    counters = Counters(**json.loads(counters_text))
    turn_id = counters.turns + 1
    length, terms = textindex.doc_terms(pending.content)
    counters.add(pending, tokenizer)
    cur.execute(
        "INSERT INTO turns (session_num, turn_id, role, content, name, tool_call_id, "
        "metadata, ts, key, key_digest, tokens, tokens_exact, ix_length) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (num, turn_id, pending.role, _b(pending.content), _b(pending.name),
         _b(pending.tool_call_id), json.dumps(pending.metadata, separators=(",", ":")),
         pending.timestamp, _b(pending.key),
         pending.digest if pending.key is not None else None,
         pending.tokens, pending.tokens_exact, length))
    textindex.index_add(cur, num, [(turn_id, length, terms)])
    cur.execute("UPDATE sessions SET counters = %s, ix_docs = ix_docs + 1, "
                "ix_length = ix_length + %s WHERE num = %s",
                (json.dumps(counters.__dict__, separators=(",", ":")), length, num))
    cur.execute("UPDATE store_generation SET generation = generation + 1")
    return turn_id


def _append(cur: Any, session_id: str, pending: Any, tokenizer: str) -> int:
    session, known = _lock(cur, session_id, pending)
    if known is not None:
        if bytes(known[1]) != pending.digest:
            raise KeyConflictError(f"key {pending.key!r} was already used")
        return known[0]
    conn = cur.connection
    if conn._pipeline is not None:
        return _writes(cur, session, pending, tokenizer)
    with conn.pipeline():
        return _writes(cur, session, pending, tokenizer)


def two_trip_append(t: Any, session_id: str, content: str, key: str | None = None) -> int:
    """One append in two round trips: BEGIN with the lock (and the key's turn), then
    the writes with COMMIT, each pipelined on an autocommit connection."""
    pending = t._prepare("user", content, key=key)
    tokenizer = t.tokenizer_name
    with t._db.connection(autocommit=True) as conn, conn.cursor() as cur:
        try:
            with conn.pipeline():
                cur.execute("BEGIN")
                turn_id = _append(cur, session_id, pending, tokenizer)
                cur.execute("COMMIT")
        except BaseException:
            if not conn.closed and not conn.broken:
                conn.execute("ROLLBACK")
            raise
    return turn_id


def four_trip_append(t: Any, content: str, session_id: str = "s") -> int:
    """``t.append`` as it was before the 2-round-trip protocol: the same statements in
    psycopg's own transaction, which syncs after BEGIN and after COMMIT."""
    pending = t._prepare("user", content)
    tokenizer = t.tokenizer_name
    with t._db.connection() as conn, conn.cursor() as cur:
        return _append(cur, session_id, pending, tokenizer)
