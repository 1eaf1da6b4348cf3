"""The transcript in PostgreSQL: sessions, turns, keys and the BM25 index.

Tables (migration 1, :mod:`ctxrelay.storage.postgres.migrations`):
``sessions`` (one row per session, with its running counters and index
totals), ``turns`` (one row per turn, written once), ``postings`` and
``term_df`` (the index, :mod:`ctxrelay.storage.postgres.textindex`).

Appends
    One call of the server-side function ``transcript_append`` (migration 7):
    one statement, one round trip.  It locks its session's row (``SELECT ...
    FOR UPDATE``), so the appenders of one session -- threads, processes,
    relays on other hosts -- take turns: the ids are the counter + 1, 2, ...,
    and the turns, their postings, the counters and the store generation
    commit in the statement's own transaction.  Appends to different sessions
    do not wait for each other except on the one generation row, which each
    write updates last (just before commit).
Idempotency keys
    A unique index on (session, key) holds at most one turn per key; the
    turn keeps the digest of what the key stood for, so a retry with other
    content is a :class:`~ctxrelay.errors.KeyConflictError`.
Durability
    A write returns after its commit (with the server's ``synchronous_commit``).

Validation, token counting, timestamps and JSONL files are the embedded
back end's own functions, so both back ends accept and refuse the same input.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ctxrelay.errors import (ArchivedSessionError, InvalidArgumentError, KeyConflictError,
                             SessionExistsError, StoreError, UnknownSessionError,
                             UnknownTurnError)
from ctxrelay.storage.common.transcript import jsonl
from ctxrelay.storage.common.transcript.records import (DEFAULT_MAX_TURN_BYTES,
                                                      SEARCH_MAX_POSTINGS, Counters,
                                                      DerivedReport, Pending, TokenCounter,
                                                      check_range, check_search, hit_of,
                                                      role_list)
from ctxrelay.storage.common.transcript.base import TranscriptBase
from ctxrelay.storage.postgres import textindex
from ctxrelay.storage.postgres.part import PgPart
from ctxrelay.storage.postgres.connection import bump_generation, read_generation
from ctxrelay.storage.validation import (check_int, check_optional_str,
                                         check_role, check_session_id, normalise_metadata,
                                         normalise_timestamp)
from ctxrelay.types import Hit, SessionInfo, SessionStats, Turn

__all__ = ["PgTranscript"]

_TURN_COLUMNS = ("turn_id, role, content, name, tool_call_id, metadata, ts, key, tokens, "
                 "tokens_exact")
_CHUNK = 512                  # turns per query in iter_turns()
# One append: the server-side function of migration 7 (its parameters, in order).
_APPEND_CALL = (
    "SELECT transcript_append(%s, %s, %s, %s, %s, %s, %s, %s::text[], %s::bytea[], "
    "%s::bytea[], %s::bytea[], %s::text[], %s::text[], %s::bytea[], %s::bytea[], "
    "%s::integer[], %s::boolean[], %s::integer[], %s::integer[], %s::text[], %s::integer[])")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Session:
    __slots__ = ("num", "session_id", "created", "metadata", "archived", "counters",
                 "ix_docs", "ix_length")

    def __init__(self, row: tuple) -> None:
        (self.num, self.session_id, self.created, metadata, self.archived, counters,
         self.ix_docs, self.ix_length) = row
        self.metadata = json.loads(metadata)
        self.counters = Counters(**json.loads(counters))

    def info(self) -> SessionInfo:
        return SessionInfo(session_id=self.session_id, created=self.created,
                           metadata=self.metadata, archived=self.archived,
                           turn_count=self.counters.turns)


_SESSION_COLUMNS = "num, session_id, created, metadata, archived, counters, ix_docs, ix_length"
_S_COLUMNS = ", ".join(f"s.{c.strip()}" for c in _SESSION_COLUMNS.split(","))


def _b(text: str | None) -> bytes | None:
    """Free text as stored (UTF-8 bytes; see the migration)."""
    return None if text is None else text.encode("utf-8")


def _s(raw: bytes | None) -> str | None:
    return None if raw is None else bytes(raw).decode("utf-8")


def _turn(session_id: str, row: tuple) -> Turn:
    turn_id, role, content, name, tool_call_id, metadata, ts, key, tokens, exact = row
    return Turn(session_id=session_id, turn_id=turn_id, role=role, content=_s(content),
                name=_s(name), tool_call_id=_s(tool_call_id), metadata=json.loads(metadata),
                timestamp=ts, key=_s(key), tokens=tokens, tokens_exact=exact)


class PgTranscript(TranscriptBase, PgPart):
    """The :class:`~ctxrelay.storage.interfaces.transcript.Transcript` of a
    PostgreSQL store (see the module doc)."""

    def __init__(self, db: Any, *, max_turn_bytes: int | None = None,
                 token_counter: TokenCounter | None = None) -> None:
        PgPart.__init__(self, db)
        self._max_turn_bytes = check_int(max_turn_bytes or DEFAULT_MAX_TURN_BYTES,
                                         "max_turn_bytes", minimum=1)
        self._token_counter = token_counter

    # -- identity -------------------------------------------------------------
    # (_read serves reads of one statement, and of turns: they never change once written)

    def __repr__(self) -> str:
        return f"PgTranscript({self._db.url!r})"

    def _live(self) -> None:
        if self.closed:
            raise StoreError(f"store {self._db.url} is closed; open it again "
                             "(Runtime(spec) or open_stores(spec))")

    def _joined(self, cur: Any, session_id: str, lateral: str,
                params: tuple = ()) -> tuple[_Session, list[tuple]]:
        """The session and the rows of ``lateral`` (a query over ``s.num``'s rows whose
        first column is never NULL) in one statement, so one round trip."""
        cur.execute(f"SELECT {_S_COLUMNS}, x.* FROM sessions s "
                    f"LEFT JOIN LATERAL ({lateral}) x ON true WHERE s.session_id = %s",
                    (*params, session_id))
        rows = cur.fetchall()
        if not rows:
            self._unknown(session_id)
        width = len(_SESSION_COLUMNS.split(","))
        return _Session(rows[0][:width]), [r[width:] for r in rows if r[width] is not None]

    def _unknown(self, session_id: str) -> None:
        raise UnknownSessionError(
            f"no session {session_id!r} in {self.path}; create the session first, "
            "or name one of the store's sessions")

    def write_generation(self) -> int | None:
        if self.closed:
            return None
        return self._read(read_generation)

    # -- sessions -----------------------------------------------------------------

    def create_session(self, session_id: str, *,
                       metadata: dict[str, Any] | str | None = None) -> SessionInfo:
        session_id = check_session_id(session_id)
        meta = normalise_metadata(metadata)
        created = normalise_timestamp(None)

        def write(cur: Any) -> SessionInfo:
            session = self._create(cur, session_id, created, meta)
            bump_generation(cur)
            return session.info()
        return self._run(write)

    def _create(self, cur: Any, session_id: str, created: str,
                metadata: dict[str, Any]) -> _Session:
        cur.execute(
            "INSERT INTO sessions (session_id, created, metadata, counters) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (session_id) DO NOTHING "
            f"RETURNING {_SESSION_COLUMNS}",
            (session_id, created, _dumps(metadata), _dumps(Counters().__dict__)))
        row = cur.fetchone()
        if row is None:
            raise SessionExistsError(
                f"session {session_id!r} already exists; choose another id, or "
                "read it with session() / append to it")
        return _Session(row)

    def _find(self, cur: Any, session_id: str, *, lock: bool = False) -> _Session | None:
        cur.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE session_id = %s"
                    + (" FOR UPDATE" if lock else ""), (session_id,))
        row = cur.fetchone()
        return None if row is None else _Session(row)

    def _require(self, cur: Any, session_id: str, *, lock: bool = False) -> _Session:
        session = self._find(cur, session_id, lock=lock)
        if session is None:
            self._unknown(session_id)
        return session

    def session(self, session_id: str) -> SessionInfo:
        session_id = check_session_id(session_id)
        return self._read(lambda cur: self._require(cur, session_id).info())

    def has_session(self, session_id: str) -> bool:
        session_id = check_session_id(session_id)
        return self._read(lambda cur: cur.execute(
            "SELECT 1 FROM sessions WHERE session_id = %s", (session_id,)).fetchone()) is not None

    def sessions(self) -> list[SessionInfo]:
        def read(cur: Any) -> list[SessionInfo]:
            cur.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions")
            infos = [_Session(row).info() for row in cur.fetchall()]
            # Python's order (code points), as the embedded back end sorts.
            return sorted(infos, key=lambda info: info.session_id)
        return self._read(read)

    def archive_session(self, session_id: str) -> SessionInfo:
        session_id = check_session_id(session_id)

        def write(cur: Any) -> SessionInfo:
            session = self._require(cur, session_id, lock=True)
            cur.execute("UPDATE sessions SET archived = true WHERE num = %s", (session.num,))
            session.archived = True
            bump_generation(cur)
            return session.info()
        return self._run(write)

    # -- appending -------------------------------------------------------------------

    def append(self, session_id: str, role: str, content: str, *,
               name: str | None = None, tool_call_id: str | None = None,
               metadata: dict[str, Any] | str | None = None,
               timestamp: str | datetime | None = None,
               key: str | None = None) -> int:
        session_id = check_session_id(session_id)
        pending = self._prepare(role, content, name=name, tool_call_id=tool_call_id,
                                metadata=metadata, timestamp=timestamp, key=key)
        return self._append_call(session_id, [pending], mode="existing")[0]

    def append_many(self, session_id: str, turns: Iterable[dict[str, Any]], *,
                    create: bool = False,
                    session_metadata: dict[str, Any] | str | None = None) -> list[int]:
        session_id = check_session_id(session_id)
        pendings = [self._prepare(t.get("role"), t.get("content"), name=t.get("name"),
                                  tool_call_id=t.get("tool_call_id"),
                                  metadata=t.get("metadata"), timestamp=t.get("timestamp"),
                                  key=t.get("key"))
                    for t in turns]
        meta = normalise_metadata(session_metadata) if create else {}
        return self._append_call(session_id, pendings, mode="create" if create else "existing",
                                 metadata=meta)

    def _append_call(self, session_id: str, pendings: list[Pending], *, mode: str,
                     metadata: dict[str, Any] | None = None, created: str | None = None,
                     archive: bool = False) -> list[int]:
        """Append ``pendings`` with one call of the server-side ``transcript_append``
        (migration 7): one statement, so one round trip and one transaction -- the
        session's lock, the turns already stored under the keys, the ids, the turns,
        their postings, the counters and the store generation, committed before the
        answer comes back (an error anywhere rolls it all back).

        ``mode``: ``existing`` (the session must exist), ``create`` (created if
        missing, with ``metadata``), ``new`` (created here; an import)."""
        self._live()
        params = self._append_params(session_id, pendings, mode, metadata or {},
                                     created or normalise_timestamp(None), archive)
        psycopg = self._db.driver
        try:
            with self._db.connection(autocommit=True, writes=True) as conn:
                return conn.execute(_APPEND_CALL, params).fetchone()[0]
        except psycopg.Error as exc:
            self._append_refused(exc, session_id, pendings)
            raise

    def _append_params(self, session_id: str, pendings: list[Pending], mode: str,
                       metadata: dict[str, Any], created: str, archive: bool) -> tuple:
        columns: list[list[Any]] = [[] for _ in range(11)]
        post_rows: list[int] = []
        post_terms: list[str] = []
        post_tfs: list[int] = []
        for row, p in enumerate(pendings, 1):
            length, terms = textindex.doc_terms(p.content)
            keyed = p.key is not None
            for column, value in zip(columns, (
                    p.role, _b(p.content), _b(p.name), _b(p.tool_call_id),
                    _dumps(p.metadata), p.timestamp, _b(p.key),
                    p.digest if keyed else None, p.tokens, p.tokens_exact, length)):
                column.append(value)
            post_rows += [row] * len(terms)
            post_terms += terms
            post_tfs += terms.values()
        return (session_id, mode, created, _dumps(metadata), _dumps(Counters().__dict__),
                archive, self.tokenizer_name, *columns, post_rows, post_terms, post_tfs)

    def _append_refused(self, exc: Any, session_id: str, pendings: list[Pending]) -> None:
        """Raise the library's error for a refusal of ``transcript_append`` (SQLSTATEs
        of class CR, see the migration); return for any other error."""
        state = getattr(exc, "sqlstate", None)
        if state == "CR001":
            self._unknown(session_id)
        if state == "CR002":
            raise SessionExistsError(
                f"session {session_id!r} already exists; choose another id, or "
                "read it with session() / append to it") from None
        if state == "CR003":
            raise ArchivedSessionError(
                f"session {session_id!r} is archived and takes no new "
                "turns; append to a new session (it can be read as before)") from None
        if state == "CR004":
            row, turn_id = (int(x) for x in exc.diag.message_detail.split())
            raise KeyConflictError(
                f"key {pendings[row - 1].key!r} was already used for turn {turn_id} of "
                f"session {session_id!r} with a different role, content, "
                "name, tool_call_id or metadata; use a new key for a new turn") from None

    # -- reading turns ------------------------------------------------------------------

    def turn(self, session_id: str, turn_id: int) -> Turn:
        session_id = check_session_id(session_id)
        turn_id = check_int(turn_id, "turn_id", minimum=1)
        return self.turns(session_id, [turn_id])[0]

    def turns(self, session_id: str, turn_ids: Iterable[int]) -> list[Turn]:
        session_id = check_session_id(session_id)
        if isinstance(turn_ids, (str, bytes)) or not isinstance(turn_ids, Iterable):
            raise InvalidArgumentError(
                f"turn_ids must be an iterable of ints such as [3, 4], got {turn_ids!r}")
        ids = [check_int(t, "turn_id", minimum=1) for t in turn_ids]

        def read(cur: Any) -> list[Turn]:
            session, rows = self._joined(
                cur, session_id, f"SELECT {_TURN_COLUMNS} FROM turns "
                "WHERE session_num = s.num AND turn_id = ANY(%s)", (sorted(set(ids)),))
            found = {row[0]: _turn(session_id, row) for row in rows}
            for turn_id in ids:
                if turn_id not in found:
                    count = session.counters.turns
                    shown = f"turns 1..{count}" if count else "no turns yet"
                    raise UnknownTurnError(
                        f"session {session_id!r} has {shown}; turn {turn_id} does not "
                        "exist, ask for a turn_id in that range")
            return [found[t] for t in ids]
        return self._read(read)

    def turn_for_key(self, session_id: str, key: str) -> int | None:
        session_id = check_session_id(session_id)
        key = check_optional_str(key, "key", empty_ok=False)

        def read(cur: Any) -> int | None:
            _, rows = self._joined(cur, session_id, "SELECT turn_id FROM turns "
                                   "WHERE session_num = s.num AND key = %s", (_b(key),))
            return rows[0][0] if rows else None
        return self._read(read)

    def turn_count(self, session_id: str) -> int:
        session_id = check_session_id(session_id)
        return self._read(lambda cur: self._require(cur, session_id).counters.turns)

    def history(self, session_id: str, start: int = 1, end: int | None = None) -> list[Turn]:
        session_id = check_session_id(session_id)
        start, end = check_range(start, end)
        return self._read(lambda cur: self._history(cur, session_id, start, end))

    def _history(self, cur: Any, session_id: str, start: int, end: int | None) -> list[Turn]:
        _, rows = self._joined(
            cur, session_id, f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_num = s.num "
            "AND turn_id >= %s AND (%s::int IS NULL OR turn_id <= %s) ORDER BY turn_id",
            (start, end, end))
        return [_turn(session_id, row) for row in rows]

    def _scan(self, cur: Any, session: _Session, start: int, end: int | None) -> list[Turn]:
        cur.execute(f"SELECT {_TURN_COLUMNS} FROM turns WHERE session_num = %s "
                    "AND turn_id >= %s AND (%s::int IS NULL OR turn_id <= %s) ORDER BY turn_id",
                    (session.num, start, end, end))
        return [_turn(session.session_id, row) for row in cur.fetchall()]

    def iter_turns(self, session_id: str, start: int = 1,
                   end: int | None = None) -> Iterator[Turn]:
        session_id = check_session_id(session_id)
        start, end = check_range(start, end)
        count = self.turn_count(session_id)
        last = count if end is None else min(end, count)
        return self._chunks(session_id, start, last)

    def _chunks(self, session_id: str, start: int, last: int) -> Iterator[Turn]:
        while start <= last:
            stop = min(start + _CHUNK - 1, last)
            yield from self._read(lambda cur, a=start, b=stop: self._history(
                cur, session_id, a, b))
            start = stop + 1

    def last(self, session_id: str, n: int) -> list[Turn]:
        session_id = check_session_id(session_id)
        n = check_int(n, "n", minimum=0)

        def read(cur: Any) -> list[Turn]:
            _, rows = self._joined(cur, session_id, f"SELECT {_TURN_COLUMNS} FROM turns "
                                   "WHERE session_num = s.num ORDER BY turn_id DESC LIMIT %s",
                                   (n,))
            return [_turn(session_id, row) for row in reversed(rows)]
        return self._read(read) if n else []

    # -- search ------------------------------------------------------------------------------

    def search(self, session_id: str, query: str, *, k: int = 10,
               roles: Iterable[str] | None = None,
               max_postings: int | None = SEARCH_MAX_POSTINGS) -> list[Hit]:
        session_id, k = check_search(session_id, query, k)
        wanted = None if roles is None else {check_role(r) for r in role_list(roles)}
        if not k:
            return []

        def read(cur: Any) -> list[Hit]:
            session, order = self._ranked(cur, session_id, query, max_postings)
            if wanted is None:
                chosen = order[:k]
                turns = self._load(cur, session, [t for t, _ in chosen])
                return [hit_of(turns.get(t), s) for t, s in chosen]
            hits: list[Hit] = []
            # Load candidates in rank order, a batch at a time, until k pass the roles.
            for at in range(0, len(order), max(4 * k, 32)):
                batch = order[at:at + max(4 * k, 32)]
                turns = self._load(cur, session, [t for t, _ in batch])
                for turn_id, score in batch:
                    turn = turns.get(turn_id)
                    if turn is None:
                        hit_of(None, score)             # raises: the index is damaged
                    if turn.role in wanted:
                        hits.append(hit_of(turn, score))
                        if len(hits) >= k:
                            return hits
            return hits
        return self._read(read)

    def rank(self, session_id: str, query: str, *, k: int = 10,
             max_postings: int | None = SEARCH_MAX_POSTINGS) -> list[tuple[int, float]]:
        session_id, k = check_search(session_id, query, k)
        if not k:
            return []
        return self._read(lambda cur: self._ranked(cur, session_id, query, max_postings)[1][:k])

    def _ranked(self, cur: Any, session_id: str, query: str,
                max_postings: int | None) -> tuple[_Session, list[tuple[int, float]]]:
        """The session and its turns ranked for ``query``: one statement (the session
        row with the postings of the query's terms)."""
        terms = textindex.query_terms(query)
        session, rows = self._joined(cur, session_id, textindex.POSTINGS_OF_TERMS,
                                     (max_postings, terms))
        if not terms or not session.ix_docs:
            return session, []
        found = textindex.collect(rows)
        ids, values = textindex.scores(terms, found, session.ix_docs, session.ix_length)
        return session, textindex.ranked(ids, values)

    def _load(self, cur: Any, session: _Session, ids: list[int]) -> dict[int, Turn]:
        if not ids:
            return {}
        cur.execute(f"SELECT {_TURN_COLUMNS} FROM turns "
                    "WHERE session_num = %s AND turn_id = ANY(%s)", (session.num, ids))
        return {row[0]: _turn(session.session_id, row) for row in cur.fetchall()}

    # -- stats ------------------------------------------------------------------------------

    def stats(self, session_id: str) -> SessionStats:
        session_id = check_session_id(session_id)

        def read(cur: Any) -> SessionStats:
            c = self._require(cur, session_id).counters
            return SessionStats(
                session_id=session_id, turn_count=c.turns, bytes=c.bytes, tokens=c.tokens,
                tokens_exact=c.estimated == 0,
                tokenizer="+".join(c.tokenizers) or self.tokenizer_name,
                by_role=dict(c.by_role), first_timestamp=c.first, last_timestamp=c.last)
        return self._read(read)

    # -- derived records ----------------------------------------------------------------------

    def check_derived(self, session_id: str) -> DerivedReport:
        session_id = check_session_id(session_id)
        return self._run(lambda cur: self._derived(cur, self._require(cur, session_id),
                                                   repair=False))

    def repair_derived(self, session_id: str) -> DerivedReport:
        session_id = check_session_id(session_id)
        return self._run(lambda cur: self._derived(
            cur, self._require(cur, session_id, lock=True), repair=True))

    def _derived(self, cur: Any, session: _Session, *, repair: bool) -> DerivedReport:
        turns = self._scan(cur, session, 1, None)
        ids = [t.turn_id for t in turns]
        if ids != list(range(1, len(ids) + 1)):
            missing = sorted(set(range(1, max(ids, default=0) + 1)) - set(ids))
            return DerivedReport(session.session_id, (
                f"turn ids are not contiguous 1..n (missing {missing[:10]}); the "
                "transcript itself is damaged, restore it from a backup",), False)
        want_counters = Counters()
        want_post: set[tuple[str, int, int, int]] = set()
        want_len: dict[int, int] = {}
        for turn in turns:
            want_counters.add(Pending(turn.role, turn.content, turn.name, turn.tool_call_id,
                                      turn.metadata, turn.timestamp, turn.key, turn.tokens,
                                      turn.tokens_exact), self.tokenizer_name)
            length, terms = textindex.doc_terms(turn.content)
            want_len[turn.turn_id] = length
            want_post |= {(term, turn.turn_id, tf, length) for term, tf in terms.items()}
        if session.counters.tokenizers or not turns:
            want_counters.tokenizers = list(session.counters.tokenizers)
        cur.execute("SELECT term, turn_id, tf, doclen FROM postings WHERE session_num = %s",
                    (session.num,))
        have_post = set(cur.fetchall())
        cur.execute("SELECT term, df FROM term_df WHERE session_num = %s", (session.num,))
        have_df = dict(cur.fetchall())
        cur.execute("SELECT turn_id, ix_length FROM turns WHERE session_num = %s",
                    (session.num,))
        have_len = dict(cur.fetchall())
        want_df: dict[str, int] = {}
        for term, *_ in want_post:
            want_df[term] = want_df.get(term, 0) + 1
        problems: list[str] = []
        if want_post != have_post:
            problems.append(f"search index: {len(want_post - have_post)} posting(s) missing, "
                            f"{len(have_post - want_post)} no stored turn gives")
        if want_df != have_df:
            problems.append("search index document frequencies disagree with the turns")
        if want_len != have_len:
            problems.append("search index document lengths disagree with the turns")
        totals = (len(turns), sum(want_len.values()))
        if (session.ix_docs, session.ix_length) != totals:
            problems.append(f"search index totals are {(session.ix_docs, session.ix_length)} "
                            f"(documents, terms) but the turns give {totals}")
        for name, value in want_counters.__dict__.items():
            if session.counters.__dict__.get(name) != value:
                problems.append(f"counter {name} is {session.counters.__dict__.get(name)!r} "
                                f"but the stored turns give {value!r}")
        if repair and problems:
            self._rewrite_derived(cur, session, want_post, want_df, want_len, want_counters,
                                  totals)
        return DerivedReport(session.session_id, tuple(problems), True)

    def _rewrite_derived(self, cur: Any, session: _Session, post: set, df: dict,
                         lengths: dict, counters: Counters, totals: tuple[int, int]) -> None:
        num = session.num
        cur.execute("DELETE FROM postings WHERE session_num = %s", (num,))
        cur.execute("DELETE FROM term_df WHERE session_num = %s", (num,))
        rows = sorted(post)
        if rows:
            terms, ids, tfs, lens = (list(c) for c in zip(*rows))
            cur.execute("INSERT INTO postings (session_num, term, turn_id, tf, doclen) "
                        "SELECT %s, * FROM unnest(%s::text[], %s::int[], %s::int[], %s::int[])",
                        (num, terms, ids, tfs, lens))
            cur.execute("INSERT INTO term_df (session_num, term, df) "
                        "SELECT %s, * FROM unnest(%s::text[], %s::int[])",
                        (num, list(df), list(df.values())))
        if lengths:
            cur.execute("UPDATE turns SET ix_length = u.n FROM unnest(%s::int[], %s::int[]) "
                        "AS u(t, n) WHERE session_num = %s AND turn_id = u.t",
                        (list(lengths), list(lengths.values()), num))
        cur.execute("UPDATE sessions SET counters = %s, ix_docs = %s, ix_length = %s "
                    "WHERE num = %s", (_dumps(counters.__dict__), *totals, num))
        bump_generation(cur)

    # -- export / import ----------------------------------------------------------------------

    def _import(self, session_id: str, header: jsonl.Header, pending: list[Pending]) -> None:
        self._append_call(session_id, pending, mode="new", metadata=header.metadata,
                          created=header.created, archive=bool(header.archived))
