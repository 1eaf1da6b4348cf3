"""The transcript store itself (see the package doc for the layout and rules)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

from ctxrelay.errors import (
    ArchivedSessionError,
    CorruptStoreError,
    InvalidArgumentError,
    KeyConflictError,
    SessionExistsError,
    UnknownSessionError,
    UnknownTurnError,
)
from ctxrelay.storage.lmdb import base
from ctxrelay.storage.lmdb.base import LmdbStore
from ctxrelay.storage.lmdb.textindex import DB_COUNT as INDEX_DBS
from ctxrelay.storage.lmdb.textindex import TextIndex
from ctxrelay.storage.common.transcript import jsonl
from ctxrelay.storage.lmdb.transcript.derived import (Derived, DerivedReport, derived_problems,
                                                      expected_derived)
from ctxrelay.storage.common.transcript.records import (DEFAULT_MAX_TURN_BYTES, FORMAT,
                                                      SEARCH_MAX_POSTINGS, U64, Counters, Pending,
                                                      SessionRecord, TokenCounter, check_range,
                                                      check_search, hit_of, parse_session,
                                                      parse_turn, role_list, session_info)
from ctxrelay.storage.common.transcript.base import TranscriptBase
from ctxrelay.storage.validation import (check_int, check_optional_str,
                                         check_role, check_session_id, dumps,
                                         normalise_metadata, normalise_timestamp, sha256)
from ctxrelay.types import Hit, SessionInfo, SessionStats, Turn

__all__ = ["TranscriptStore", "open_store", "close_all", "ENV_DIRNAME", "SEARCH_MAX_POSTINGS",
           "DEFAULT_MAX_TURN_BYTES"]

ENV_DIRNAME = "transcript.lmdb"
_CHUNK = 256                # turns per read transaction in iter_turns()


# -- one shared store per path per process ------------------------------------

def open_store(path: str | os.PathLike[str], **kw: Any) -> "TranscriptStore":
    """The one shared :class:`TranscriptStore` of ``path`` in this process.

    Keyword arguments apply when the store is first opened; a later call with a
    different ``readonly``, ``token_counter`` or ``max_turn_bytes`` raises
    InvalidArgumentError.
    """
    return TranscriptStore.open(path, **kw)


def close_all() -> None:
    """Close every transcript store opened in this process."""
    base.close_all(TranscriptStore)


# -- the store -----------------------------------------------------------------

class TranscriptStore(TranscriptBase, LmdbStore):
    """Append-only store of sessions and their turns (see the module doc).

    Use :func:`open_store` to share one instance per path in a process; a
    second direct construction on an open path raises StoreError.
    """

    KIND = "store"
    FORMAT = FORMAT
    DB_NAMES = (b"meta", b"session_ids", b"sessions", b"counters", b"turns", b"keys")
    # rebuilt from the turns by repair_derived (the text index, counters, key records)
    DERIVED_DBS = frozenset({b"counters", b"keys", *TextIndex.db_names()})
    ENV_DIRNAME = ENV_DIRNAME
    EXTRA_DBS = INDEX_DBS
    OPEN_HINT = "ctxrelay.storage.lmdb.transcript.open_store(path)"
    FULL_HINT = "archive old sessions to a new store (export_jsonl/import_jsonl)"
    FORMAT_HINT = ("open it with the ctxrelay version that wrote it (and export_jsonl/"
                   "import_jsonl to move sessions), or use a new directory")
    DEFAULT_MAP_SIZE = 1 << 30

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = 1 << 30,
                 readonly: bool = False,
                 token_counter: TokenCounter | None = None,
                 max_turn_bytes: int = DEFAULT_MAX_TURN_BYTES) -> None:
        self._max_turn_bytes = check_int(max_turn_bytes, "max_turn_bytes", minimum=1)
        self._token_counter = token_counter
        super().__init__(path, map_size=map_size, readonly=readonly)
        self.name_handles(self._index.handles())
        dbs = self.dbs
        self._meta, self._ids, self._sessions = dbs[b"meta"], dbs[b"session_ids"], dbs[b"sessions"]
        self._counters, self._turns, self._keys = dbs[b"counters"], dbs[b"turns"], dbs[b"keys"]

    def _reopen_conflict(self, kw: dict[str, Any]) -> str | None:
        if "token_counter" in kw and kw["token_counter"] is not self._token_counter \
                and kw["token_counter"] != self._token_counter:
            return "token_counter"
        if "max_turn_bytes" in kw and kw["max_turn_bytes"] != self._max_turn_bytes:
            return f"max_turn_bytes (it is open with {self._max_turn_bytes})"
        return super()._reopen_conflict(kw)

    def _open_extra(self, txn: Any, create: bool) -> None:
        self._index = TextIndex(self._env, txn=txn, create=create)

    def _extra_db_names(self) -> tuple[bytes, ...]:
        return TextIndex.db_names()

    def _initialise(self, txn: Any, dbs: dict[bytes, Any]) -> None:
        txn.put(b"next_session", U64.pack(1), db=dbs[b"meta"])

    # The transactions of the base class, under the names this module uses
    # (aliases, not wrappers: a summary read is a few microseconds).
    _read = LmdbStore.read
    _write = LmdbStore.write

    # -- token counting ------------------------------------------------

    # -- sessions --------------------------------------------------------

    def create_session(self, session_id: str, *,
                       metadata: dict[str, Any] | str | None = None) -> SessionInfo:
        """Create an empty session; SessionExistsError if the id is taken."""
        session_id = check_session_id(session_id)
        meta = normalise_metadata(metadata)
        created = normalise_timestamp(None)
        session = self._write(lambda txn: self._create_txn(txn, session_id, created, meta))
        return session_info(session, Counters())

    def session(self, session_id: str) -> SessionInfo:
        session_id = check_session_id(session_id)
        return self._read(lambda txn: self._info_txn(txn, session_id))

    def has_session(self, session_id: str) -> bool:
        session_id = check_session_id(session_id)
        return self._read(lambda txn: self._find_session(txn, session_id)) is not None

    def sessions(self) -> list[SessionInfo]:
        """Every session, sorted by id."""
        def read(txn: Any) -> list[SessionInfo]:
            infos = []
            for num_key, raw in txn.cursor(db=self._sessions):
                session = parse_session(U64.unpack(num_key)[0], raw)
                infos.append(session_info(session, self._load_counters(txn, session.num)))
            return sorted(infos, key=lambda info: info.session_id)
        return self._read(read)

    def archive_session(self, session_id: str) -> SessionInfo:
        """Mark a session archived: reads still work, appends raise."""
        session_id = check_session_id(session_id)

        def archive(txn: Any) -> SessionInfo:
            session = replace(self._require_session(txn, session_id), archived=True)
            txn.put(U64.pack(session.num), session.record(), db=self._sessions)
            return session_info(session, self._load_counters(txn, session.num))
        return self._write(archive)

    def _create_txn(self, txn: Any, session_id: str, created: str,
                    metadata: dict[str, Any]) -> SessionRecord:
        id_key = sha256(session_id)
        if txn.get(id_key, db=self._ids) is not None:
            raise SessionExistsError(
                f"session {session_id!r} already exists; choose another id, or "
                "read it with session() / append to it")
        num = U64.unpack(txn.get(b"next_session", db=self._meta))[0]
        txn.put(b"next_session", U64.pack(num + 1), db=self._meta)
        session = SessionRecord(num, session_id, created, metadata, False)
        txn.put(id_key, U64.pack(num), db=self._ids)
        txn.put(U64.pack(num), session.record(), db=self._sessions)
        return session

    def _find_session(self, txn: Any, session_id: str) -> SessionRecord | None:
        raw_num = txn.get(sha256(session_id), db=self._ids)
        if raw_num is None:
            return None
        num = U64.unpack(raw_num)[0]
        session = parse_session(num, txn.get(raw_num, db=self._sessions))
        if session.session_id != session_id:
            raise CorruptStoreError(
                f"session number {num} should hold {session_id!r} but holds "
                f"{session.session_id!r}; the store is damaged, restore a backup")
        return session

    def _require_session(self, txn: Any, session_id: str) -> SessionRecord:
        session = self._find_session(txn, session_id)
        if session is None:
            raise UnknownSessionError(
                f"no session {session_id!r} in {self._path}; create the session first, "
                "or name one of the store's sessions")
        return session

    def _info_txn(self, txn: Any, session_id: str) -> SessionInfo:
        session = self._require_session(txn, session_id)
        return session_info(session, self._load_counters(txn, session.num))

    def _load_counters(self, txn: Any, num: int) -> Counters:
        raw = txn.get(U64.pack(num), db=self._counters)
        return Counters() if raw is None else Counters(**json.loads(raw))

    # -- appending -------------------------------------------------------

    def append(self, session_id: str, role: str, content: str, *,
               name: str | None = None, tool_call_id: str | None = None,
               metadata: dict[str, Any] | str | None = None,
               timestamp: str | datetime | None = None,
               key: str | None = None) -> int:
        """Append one turn and return its id (1-based within the session).

        With ``key``, a retry of the same turn returns the first id and writes
        nothing (even once the session is archived, since nothing new is
        added); the same key with a different role, content, name,
        tool_call_id or metadata raises KeyConflictError.
        """
        session_id = check_session_id(session_id)
        pending = self._prepare(role, content, name=name, tool_call_id=tool_call_id,
                                metadata=metadata, timestamp=timestamp, key=key)
        tokenizer = self.tokenizer_name
        return self._write(lambda txn: self._append_txn(
            txn, self._require_session(txn, session_id), pending, tokenizer))

    def append_many(self, session_id: str, turns: Iterable[dict[str, Any]], *,
                    create: bool = False,
                    session_metadata: dict[str, Any] | str | None = None) -> list[int]:
        """Append several turns in one transaction: all are stored or none is.

        Each item is a dict with ``role`` and ``content`` and optionally
        ``name``, ``tool_call_id``, ``metadata``, ``timestamp`` and ``key``
        (the same rules as :meth:`append`, keys included: a keyed turn
        already stored is not stored again).  With ``create`` a missing
        session is created in the same transaction.  Returns the turn ids.
        """
        session_id = check_session_id(session_id)
        pendings = [self._prepare(t.get("role"), t.get("content"), name=t.get("name"),
                                  tool_call_id=t.get("tool_call_id"),
                                  metadata=t.get("metadata"), timestamp=t.get("timestamp"),
                                  key=t.get("key"))
                    for t in turns]
        meta = normalise_metadata(session_metadata) if create else None
        created = normalise_timestamp(None)
        tokenizer = self.tokenizer_name

        def write(txn: Any) -> list[int]:
            session = self._find_session(txn, session_id)
            if session is None:
                if not create:
                    session = self._require_session(txn, session_id)
                else:
                    session = self._create_txn(txn, session_id, created, meta or {})
            return [self._append_txn(txn, session, p, tokenizer) for p in pendings]
        return self._write(write)

    def _append_txn(self, txn: Any, session: SessionRecord, pending: Pending,
                    tokenizer: str) -> int:
        prefix = U64.pack(session.num)
        key_key = prefix + sha256(pending.key) if pending.key is not None else None
        if key_key is not None:
            known = txn.get(key_key, db=self._keys)
            if known is not None:
                return self._replayed(session, pending, known)
        if session.archived:
            raise ArchivedSessionError(
                f"session {session.session_id!r} is archived and takes no new "
                "turns; append to a new session (it can be read as before)")
        counters = self._load_counters(txn, session.num)
        turn_id = counters.turns + 1
        if not txn.put(prefix + U64.pack(turn_id), pending.record(),
                       db=self._turns, overwrite=False):
            raise CorruptStoreError(
                f"turn {turn_id} of session {session.session_id!r} exists beyond "
                "the session counter; the store is damaged, restore a backup")
        if key_key is not None:
            txn.put(key_key, U64.pack(turn_id) + pending.digest, db=self._keys)
        self._index.add(txn, session.num, turn_id, pending.content)
        counters.add(pending, tokenizer)
        txn.put(prefix, dumps(counters.__dict__), db=self._counters)
        return turn_id

    @staticmethod
    def _replayed(session: SessionRecord, pending: Pending, known: bytes) -> int:
        turn_id = U64.unpack(known[:8])[0]
        if known[8:] != pending.digest:
            raise KeyConflictError(
                f"key {pending.key!r} was already used for turn {turn_id} of "
                f"session {session.session_id!r} with a different role, content, "
                "name, tool_call_id or metadata; use a new key for a new turn")
        return turn_id

    # -- reading turns ---------------------------------------------------

    def turn(self, session_id: str, turn_id: int) -> Turn:
        session_id = check_session_id(session_id)
        turn_id = check_int(turn_id, "turn_id", minimum=1)

        def read(txn: Any) -> Turn:
            session = self._require_session(txn, session_id)
            turn = self._load_turn(txn, session, turn_id)
            if turn is None:
                count = self._load_counters(txn, session.num).turns
                self._missing(session_id, turn_id, count)
                shown = f"turns 1..{count}" if count else "no turns yet"
                raise UnknownTurnError(
                    f"session {session_id!r} has {shown}; turn {turn_id} does not "
                    "exist, ask for a turn_id in that range")
            return turn
        return self._read(read)

    def turns(self, session_id: str, turn_ids: Iterable[int]) -> list[Turn]:
        """The turns with these ids, in the order given, in one read (ids may repeat).

        Raises UnknownTurnError naming the first id the session does not have.
        """
        session_id = check_session_id(session_id)
        if isinstance(turn_ids, (str, bytes)) or not isinstance(turn_ids, Iterable):
            raise InvalidArgumentError(
                f"turn_ids must be an iterable of ints such as [3, 4], got {turn_ids!r}")
        ids = [check_int(t, "turn_id", minimum=1) for t in turn_ids]

        def read(txn: Any) -> list[Turn]:
            session = self._require_session(txn, session_id)
            out = []
            for turn_id in ids:
                turn = self._load_turn(txn, session, turn_id)
                if turn is None:
                    count = self._load_counters(txn, session.num).turns
                    self._missing(session_id, turn_id, count)
                    raise UnknownTurnError(
                        f"session {session_id!r} has turns 1..{count}; turn {turn_id} does "
                        "not exist, ask for turn_ids in that range")
                out.append(turn)
            return out
        return self._read(read)

    def turn_for_key(self, session_id: str, key: str) -> int | None:
        """The turn id appended with idempotency ``key``, or None (one point read)."""
        session_id = check_session_id(session_id)
        key = check_optional_str(key, "key", empty_ok=False)

        def read(txn: Any) -> int | None:
            session = self._require_session(txn, session_id)
            known = txn.get(U64.pack(session.num) + sha256(key), db=self._keys)
            return None if known is None else U64.unpack(known[:8])[0]
        return self._read(read)

    def turn_count(self, session_id: str) -> int:
        session_id = check_session_id(session_id)
        return self._read(lambda txn: self._load_counters(
            txn, self._require_session(txn, session_id).num).turns)

    def history(self, session_id: str, start: int = 1, end: int | None = None) -> list[Turn]:
        """Turns ``start..end`` inclusive (``end`` None: to the last), in order."""
        session_id = check_session_id(session_id)
        start, end = check_range(start, end)

        def read(txn: Any) -> list[Turn]:
            session = self._require_session(txn, session_id)
            turns = list(self._scan(txn, session, start, end))
            if not turns or turns[-1].turn_id - turns[0].turn_id + 1 != len(turns) \
                    or turns[0].turn_id != start:
                count = self._load_counters(txn, session.num).turns
                last = count if end is None else min(end, count)
                have = {t.turn_id for t in turns}
                for turn_id in range(start, last + 1):
                    if turn_id not in have:
                        self._missing(session_id, turn_id, count)
            return turns
        return self._read(read)

    def _missing(self, session_id: str, turn_id: int, count: int) -> None:
        """A turn the counters say is stored but a read cannot find: its key was
        damaged on disk (a key's checksum is checked only when the key is read)."""
        if 1 <= turn_id <= count:
            raise CorruptStoreError(
                f"turn {turn_id} of session {session_id!r} is missing from {self.env_path} "
                f"although the session has turns 1..{count} (a damaged record key); run "
                "'ctxrelay check', export the intact sessions or restore a backup")

    def iter_turns(self, session_id: str, start: int = 1,
                   end: int | None = None) -> Iterator[Turn]:
        """Like :meth:`history` but lazy: reads ``_CHUNK`` turns at a time.

        Each chunk is its own short read transaction (turns never change, so
        chunks agree); turns appended after the call are not included.
        """
        session_id = check_session_id(session_id)
        start, end = check_range(start, end)
        count = self.turn_count(session_id)           # also checks the session
        last = count if end is None else min(end, count)
        return self._iter_chunks(session_id, start, last)

    def _iter_chunks(self, session_id: str, start: int, last: int) -> Iterator[Turn]:
        while start <= last:
            stop = min(start + _CHUNK - 1, last)
            chunk = self._read(lambda txn, a=start, b=stop: list(self._scan(
                txn, self._require_session(txn, session_id), a, b)))
            yield from chunk
            start = stop + 1

    def last(self, session_id: str, n: int) -> list[Turn]:
        """The last ``n`` turns in chronological order (read backwards)."""
        session_id = check_session_id(session_id)
        n = check_int(n, "n", minimum=0)

        def read(txn: Any) -> list[Turn]:
            session = self._require_session(txn, session_id)
            prefix = U64.pack(session.num)
            cursor = txn.cursor(db=self._turns)
            # Start just past this session's keys and step back into them.
            found = cursor.set_range(U64.pack(session.num + 1))
            found = cursor.prev() if found else cursor.last()
            turns: list[Turn] = []
            while found and len(turns) < n and cursor.key()[:8] == prefix:
                turns.append(parse_turn(session.session_id, cursor.key(), cursor.value()))
                found = cursor.prev()
            return turns[::-1]
        return self._read(read) if n else []

    def _scan(self, txn: Any, session: SessionRecord, start: int,
              end: int | None) -> Iterator[Turn]:
        prefix = U64.pack(session.num)
        cursor = txn.cursor(db=self._turns)
        if not cursor.set_range(prefix + U64.pack(start)):
            return
        for key, value in cursor:
            if key[:8] != prefix or (end is not None and U64.unpack(key[8:])[0] > end):
                return
            yield parse_turn(session.session_id, key, value)

    def _load_turn(self, txn: Any, session: SessionRecord, turn_id: int) -> Turn | None:
        key = U64.pack(session.num) + U64.pack(turn_id)
        raw = txn.get(key, db=self._turns)
        return None if raw is None else parse_turn(session.session_id, key, raw)

    # -- search ------------------------------------------------------------

    def search(self, session_id: str, query: str, *, k: int = 10,
               roles: Iterable[str] | None = None,
               max_postings: int | None = SEARCH_MAX_POSTINGS) -> list[Hit]:
        """BM25 hits for ``query`` in one session, best first (ties: newest).

        Reads the postings of the query's terms and then only the turns it
        returns (plus, with ``roles``, the higher-ranked turns it skips).
        A term found in more than ``max_postings`` turns contributes its
        newest ``max_postings`` only, so a search costs the same on a
        100,000-turn session as on a short one; pass None for exhaustive
        scoring.
        """
        session_id, k = check_search(session_id, query, k)
        wanted = None if roles is None else {check_role(r) for r in role_list(roles)}

        def read(txn: Any) -> list[Hit]:
            session = self._require_session(txn, session_id)
            loaded: dict[int, Turn | None] = {}

            def load(turn_id: int) -> Turn | None:
                if turn_id not in loaded:
                    loaded[turn_id] = self._load_turn(txn, session, turn_id)
                return loaded[turn_id]

            accept = None if wanted is None else (
                lambda turn_id: (t := load(turn_id)) is not None and t.role in wanted)
            self._check_index_size(txn, session, session_id)
            ranked = self._index.search(txn, session.num, query, k=k, accept=accept,
                                        max_postings=max_postings)
            return [hit_of(load(turn_id), score) for turn_id, score in ranked]
        return self._read(read) if k else []

    def rank(self, session_id: str, query: str, *, k: int = 10,
             max_postings: int | None = SEARCH_MAX_POSTINGS) -> list[tuple[int, float]]:
        """Like :meth:`search` without loading the turns: ``(turn_id, score)`` pairs, best first."""
        session_id, k = check_search(session_id, query, k)
        if not k:
            return []
        def read(txn: Any) -> list[tuple[int, float]]:
            session = self._require_session(txn, session_id)
            self._check_index_size(txn, session, session_id)
            return self._index.search(txn, session.num, query, k=k, max_postings=max_postings,
                                      snapshot=txn.raw.id())
        return self._read(read)

    def _check_index_size(self, txn: Any, session: Any, session_id: str) -> None:
        """Every turn is indexed in its append's transaction, so the index counts
        exactly the session's turns; anything else is a damaged index (e.g. its
        database record in LMDB's catalogue, which makes it read as empty: a
        search would answer nothing, not fail)."""
        docs = self._index.stats(txn, session.num).doc_count
        turns = self._load_counters(txn, session.num).turns
        if docs != turns:
            raise CorruptStoreError(
                f"the search index of session {session_id!r} counts {docs} turn(s) but the "
                f"session holds {turns} (a damaged index); run 'ctxrelay check --repair' "
                "to rebuild it from the turns")

    # -- stats ---------------------------------------------------------------

    def stats(self, session_id: str) -> SessionStats:
        """Totals from the session's stored counters (no scan of its turns)."""
        session_id = check_session_id(session_id)

        def read(txn: Any) -> SessionStats:
            counters = self._load_counters(txn, self._require_session(txn, session_id).num)
            return SessionStats(
                session_id=session_id, turn_count=counters.turns, bytes=counters.bytes,
                tokens=counters.tokens, tokens_exact=counters.estimated == 0,
                tokenizer="+".join(counters.tokenizers) or self.tokenizer_name,
                by_role=dict(counters.by_role), first_timestamp=counters.first,
                last_timestamp=counters.last)
        return self._read(read)

    # -- derived records: check and repair --------------------------------

    def check_derived(self, session_id: str) -> "DerivedReport":
        """Compare the session's derived records with what its turns give.

        Derived records are everything :meth:`append` writes besides the
        turn itself: the BM25 postings, document lengths and namespace
        totals, the session counters and the idempotency-key records.
        Nothing is written.  A damaged transcript (unparsable records, ids
        not contiguous from 1) is reported with ``repairable=False``: the
        turns are the source of truth and are never guessed.
        """
        session_id = check_session_id(session_id)
        return self._read(lambda txn: self._derived_txn(
            txn, self._require_session(txn, session_id), repair=False))

    def repair_derived(self, session_id: str) -> "DerivedReport":
        """Rewrite the session's derived records from its turns, if they disagree.

        Runs in one write transaction (a crash leaves the old records), so
        concurrent appenders wait and never see a half-rebuilt index.  The
        turns are read, never written.  Returns what was found (and so
        fixed); a report with ``repairable=False`` changed nothing.
        """
        session_id = check_session_id(session_id)
        return self._write(lambda txn: self._derived_txn(
            txn, self._require_session(txn, session_id), repair=True))

    def _derived_txn(self, txn: Any, session: SessionRecord, *, repair: bool) -> "DerivedReport":
        try:
            turns = list(self._scan(txn, session, 1, None))
        except (ValueError, TypeError, KeyError) as exc:
            return DerivedReport(session.session_id, (
                f"a turn record does not parse ({type(exc).__name__}: {exc}); the "
                "transcript itself is damaged, restore it from a backup",), False)
        ids = [t.turn_id for t in turns]
        if ids != list(range(1, len(ids) + 1)):
            missing = sorted(set(range(1, max(ids, default=0) + 1)) - set(ids))
            return DerivedReport(session.session_id, (
                f"turn ids are not contiguous 1..n (missing {missing[:10]}); the "
                "transcript itself is damaged, restore it from a backup",), False)
        stored_counters = self._load_counters(txn, session.num)
        want = expected_derived(session, turns, stored_counters, self.tokenizer_name)
        have = self._stored_derived(txn, session)
        problems = derived_problems(want, have)
        if repair and problems:
            self._rewrite_derived(txn, session, have, want)
        return DerivedReport(session.session_id, tuple(problems), True)

    def _stored_derived(self, txn: Any, session: SessionRecord) -> "Derived":
        prefix = U64.pack(session.num)
        raw_counters = txn.get(prefix, db=self._counters)
        return Derived(
            index=self._index.records(txn, session.num),
            # No counters record reads as zero counters (see _load_counters).
            counters=dict(Counters().__dict__) if raw_counters is None
            else json.loads(raw_counters),
            keys=dict(base.prefixed(txn, self._keys, prefix)))

    def _rewrite_derived(self, txn: Any, session: SessionRecord, have: "Derived",
                         want: "Derived") -> None:
        prefix = U64.pack(session.num)
        self._index.replace_records(txn, session.num, have.index, want.index)
        txn.put(prefix, dumps(want.counters), db=self._counters)
        for key in have.keys:
            txn.delete(key, db=self._keys)
        for key, value in want.keys.items():
            txn.put(key, value, db=self._keys)

    # -- export / import -------------------------------------------------

    def _import(self, session_id: str, header: jsonl.Header, pending: list[Pending]) -> None:
        tokenizer = self.tokenizer_name

        def write(txn: Any) -> None:
            session = self._create_txn(txn, session_id, header.created, header.metadata)
            for item in pending:
                self._append_txn(txn, session, item, tokenizer)
            if header.archived:
                session = replace(session, archived=True)
                txn.put(U64.pack(session.num), session.record(), db=self._sessions)
        self._write(write)
