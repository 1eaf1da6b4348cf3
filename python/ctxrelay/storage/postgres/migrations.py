"""Versioned schema migrations of the PostgreSQL back end, applied at open.

Each migration is ``(version, name, sql)``; ``schema_migrations`` records
the versions applied.  :func:`migrate` runs the missing ones in order, each
in its own transaction, under an advisory lock keyed by the schema, so two
processes opening one new store at once apply each migration once.  A store
whose schema is newer than this code (a version it does not know) is refused
rather than written with old assumptions.

Never edit a released migration: add the next version.
"""
from __future__ import annotations

from typing import Any

from ctxrelay.errors import StoreError

__all__ = ["MIGRATIONS", "migrate", "applied_versions"]

_TRANSCRIPT = """
CREATE TABLE sessions (
    num         bigserial PRIMARY KEY,
    session_id  text NOT NULL UNIQUE,
    created     text NOT NULL,
    metadata    text NOT NULL,            -- JSON as given (key order kept)
    archived    boolean NOT NULL DEFAULT false,
    counters    text NOT NULL,            -- JSON of the running totals (derived)
    ix_docs     bigint NOT NULL DEFAULT 0,  -- text index totals (derived)
    ix_length   bigint NOT NULL DEFAULT 0
);
CREATE TABLE turns (
    session_num  bigint NOT NULL REFERENCES sessions (num),
    turn_id      integer NOT NULL CHECK (turn_id >= 1),
    -- Free text as UTF-8 bytes: a turn may hold U+0000, which a text column cannot.
    role         text NOT NULL,
    content      bytea NOT NULL,
    name         bytea,
    tool_call_id bytea,
    metadata     text NOT NULL,           -- JSON (U+0000 escaped by the encoder)
    ts           text NOT NULL,
    key          bytea,
    key_digest   bytea,                   -- what the key stands for (see append)
    tokens       integer NOT NULL,
    tokens_exact boolean NOT NULL,
    ix_length    integer NOT NULL,        -- index terms of the content (derived)
    PRIMARY KEY (session_num, turn_id)
);
-- Idempotency keys: at most one turn per (session, key), enforced by the database.
CREATE UNIQUE INDEX turns_session_key ON turns (session_num, key) WHERE key IS NOT NULL;
-- The BM25 index: one posting per (session, term, turn), and each term's document
-- frequency, so a query reads only its own terms (newest postings first).
CREATE TABLE postings (
    session_num bigint NOT NULL,
    term        text NOT NULL,
    turn_id     integer NOT NULL,
    tf          integer NOT NULL,
    doclen      integer NOT NULL,
    PRIMARY KEY (session_num, term, turn_id)
);
CREATE TABLE term_df (
    session_num bigint NOT NULL,
    term        text NOT NULL,
    df          integer NOT NULL,
    PRIMARY KEY (session_num, term)
);
-- Moves with every committed write (write_generation); one row.
CREATE TABLE store_generation (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    generation bigint NOT NULL
);
INSERT INTO store_generation VALUES (true, 0);
"""

_TURNLOG = """
-- The turn log (derived from the transcript; storage/postgres/turnlog.py).
CREATE TABLE turnlog_progress (
    session_id text PRIMARY KEY,
    state      text NOT NULL   -- JSON: derived_upto, model_id, next_thread, active_thread
);
CREATE TABLE turnlog_turns (
    session_id text NOT NULL,
    turn_id    integer NOT NULL,
    record     text NOT NULL,  -- JSON: thread_id, entities, references, tool_calls, model_id
    vector     bytea NOT NULL,            -- float32, the embedder's dimension
    PRIMARY KEY (session_id, turn_id)
);
CREATE TABLE turnlog_threads (
    session_id text NOT NULL,
    num        integer NOT NULL,          -- thread "T<num>"
    info       text NOT NULL,             -- JSON: label, members, state override
    centroid   bytea NOT NULL,
    PRIMARY KEY (session_id, num)
);
"""

_WARM = """
-- Warm artifacts (storage/postgres/warm.py): every version of every range, written
-- once; the latest version is max(version), so there is no latest record to go stale.
CREATE TABLE warm_artifacts (
    session_id text NOT NULL,
    start_turn bigint NOT NULL,
    end_turn   bigint NOT NULL,
    version    integer NOT NULL,
    record     text NOT NULL,             -- JSON of the artifact (as the embedded store's)
    key        bytea,
    key_digest bytea,
    PRIMARY KEY (session_id, start_turn, end_turn, version)
);
CREATE UNIQUE INDEX warm_artifacts_key ON warm_artifacts (session_id, key) WHERE key IS NOT NULL;
"""

_SCRATCH = """
-- The scratch buffer (storage/postgres/scratch.py): one row per tool output, its blob
-- in the row, so the entry and its bytes commit together (no orphan files).
CREATE TABLE scratch_entries (
    session_id text NOT NULL,
    scratch_id text NOT NULL,
    seq        bigserial,
    record     text NOT NULL,             -- JSON of the entry (as the embedded store's)
    blob       bytea NOT NULL,
    size       bigint NOT NULL,
    pinned     boolean NOT NULL,
    access_us  bigint NOT NULL,           -- last use, for LRU eviction
    expires_us bigint,                    -- end of retention (NULL: kept until evicted by LRU)
    PRIMARY KEY (session_id, scratch_id)
);
CREATE INDEX scratch_entries_order ON scratch_entries (session_id, seq);
CREATE INDEX scratch_entries_lru ON scratch_entries (access_us) WHERE NOT pinned;
CREATE INDEX scratch_entries_expiry ON scratch_entries (expires_us)
    WHERE NOT pinned AND expires_us IS NOT NULL;
"""

_THREAD_LABELS = """
-- Topic thread labels (storage/turnlog_derivation.py): one row per label, so a new
-- thread's label is unique in its session; derived like the rest of the turn log.
CREATE TABLE turnlog_labels (
    session_id text NOT NULL,
    label      text NOT NULL,
    num        integer NOT NULL,          -- thread "T<num>"
    PRIMARY KEY (session_id, label)
);
"""

_FACTS = """
-- The knowledge fabric (storage/postgres/facts.py).  pgvector's type lives in public
-- (the store's schema may be dropped); one creator at a time across schemas.
SELECT pg_advisory_xact_lock(hashtext('ctxrelay:pgvector'));
CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;
CREATE TABLE ckf_config (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    config  text NOT NULL,                -- JSON: model_id, dim, embedder, hnsw parameters
    version bigint NOT NULL DEFAULT 0     -- moves with every committed write to the facts
);
CREATE TABLE ckf_namespaces (
    id   bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    -- JSON: gen, changed, adds, digest, cdigest, labels, edges, last_mod, counts,
    -- docs, doclen; the row is also the lock writers of the namespace take turns on
    info text NOT NULL
);
-- A fact's seq: unique in the store, increasing, never reused (the ANN label).
CREATE SEQUENCE ckf_fact_seq;
CREATE TABLE ckf_facts (
    seq          bigint PRIMARY KEY,
    ns_id        bigint NOT NULL REFERENCES ckf_namespaces (id),
    fact_id      uuid NOT NULL UNIQUE,
    status       text NOT NULL,           -- A, S, D, Q (the embedded status bytes)
    importance   float8 NOT NULL,
    modified_at  float8 NOT NULL,
    ttl_seconds  float8,
    key          bytea,                   -- UTF-8 (a key may hold U+0000)
    due          float8,                  -- ACTIVE with a TTL: ingested_at + ttl (expiry)
    record       text NOT NULL,           -- JSON of the record (the embedded store's)
    vector       vector,                  -- pgvector; NULL once erased
    access_count bigint NOT NULL DEFAULT 0,
    last_access  float8,
    community    integer
);
CREATE INDEX ckf_facts_ns ON ckf_facts (ns_id, seq);
-- Keys: at most one fact per (namespace, key), enforced by the database.
CREATE UNIQUE INDEX ckf_facts_key ON ckf_facts (ns_id, key) WHERE key IS NOT NULL;
CREATE INDEX ckf_facts_due ON ckf_facts (ns_id, due) WHERE due IS NOT NULL;
CREATE INDEX ckf_facts_hidden ON ckf_facts (ns_id, seq) WHERE status IN ('Q', 'D');
CREATE INDEX ckf_facts_members ON ckf_facts (ns_id) WHERE community IS NOT NULL;
-- Similarity edges, both directions.
CREATE TABLE ckf_edges (
    ns_id  bigint NOT NULL,
    src    bigint NOT NULL,
    dst    bigint NOT NULL,
    weight real NOT NULL,
    PRIMARY KEY (ns_id, src, dst)
);
-- The change feed: what a vector index of the namespace must apply, in order.
CREATE TABLE ckf_changes (
    ns_id bigint NOT NULL,
    gen   bigint NOT NULL,
    hide  boolean NOT NULL,
    seq   bigint NOT NULL,
    PRIMARY KEY (ns_id, gen)
);
CREATE TABLE ckf_sources (
    ns_id     bigint NOT NULL,
    source_id text NOT NULL,
    record    text NOT NULL,
    PRIMARY KEY (ns_id, source_id)
);
-- BM25 over the facts' terms (the transcript's tokenizer and arithmetic).
CREATE TABLE ckf_postings (
    ns_id  bigint NOT NULL,
    term   text NOT NULL,
    seq    bigint NOT NULL,
    tf     integer NOT NULL,
    doclen integer NOT NULL,
    PRIMARY KEY (ns_id, term, seq)
);
"""

# The transcript's append as one server-side call (storage/postgres/transcript.py), so
# an append is one round trip: the session's lock, its keys, the id allocation and all
# the writes in one statement, in the implicit transaction of that statement.  Each
# statement inside takes its own snapshot (READ COMMITTED), so the key lookup after the
# lock sees what the appender it waited for committed.  Errors are raised with SQLSTATEs
# of class CR (transcript.py turns them into the library's exceptions); any error rolls
# the whole call back.
_TRANSCRIPT_APPEND = """
CREATE FUNCTION transcript_append(
    p_session text,
    p_mode text,                -- 'existing', 'create' (if missing) or 'new' (must not exist)
    p_created text, p_session_meta text, p_counters text,   -- a session created here
    p_archive boolean,          -- archive the session after the append (an import)
    p_tokenizer text,
    p_roles text[], p_contents bytea[], p_names bytea[], p_tool_call_ids bytea[],
    p_metadata text[], p_ts text[], p_keys bytea[], p_digests bytea[],
    p_tokens integer[], p_exact boolean[], p_lengths integer[],
    p_post_rows integer[], p_post_terms text[], p_post_tfs integer[])
RETURNS integer[] LANGUAGE plpgsql AS $fn$
DECLARE
    s        sessions;
    c        json;
    created  boolean := false;
    n        integer;           -- rows
    ids      integer[];
    fresh    boolean[];
    bad      integer;            -- first row whose key stands for other content
    first_new integer;           -- first row that is a new turn
    added    integer;
    add_bytes bigint; add_tokens bigint; add_estimated bigint; add_length bigint;
    first_ts text; last_ts text;
    roles    json;
BEGIN
    SELECT * INTO s FROM sessions WHERE session_id = p_session FOR UPDATE;
    IF FOUND AND p_mode = 'new' THEN
        RAISE EXCEPTION 'session exists' USING ERRCODE = 'CR002';
    ELSIF NOT FOUND THEN
        IF p_mode = 'existing' THEN
            RAISE EXCEPTION 'unknown session' USING ERRCODE = 'CR001';
        END IF;
        INSERT INTO sessions (session_id, created, metadata, counters)
        VALUES (p_session, p_created, p_session_meta, p_counters)
        ON CONFLICT (session_id) DO NOTHING RETURNING * INTO s;
        IF FOUND THEN
            created := true;
        ELSIF p_mode = 'new' THEN
            RAISE EXCEPTION 'session exists' USING ERRCODE = 'CR002';
        ELSE                     -- created meanwhile by another appender: take turns
            SELECT * INTO STRICT s FROM sessions WHERE session_id = p_session FOR UPDATE;
        END IF;
    END IF;
    c := s.counters::json;

    -- Each row's turn: a new one (the next ids, in row order), or the turn its key
    -- already stands for (stored before, or the key's first row in this batch).
    n := coalesce(array_length(p_roles, 1), 0);
    IF cardinality(array_remove(p_keys, NULL)) = 0 THEN
        ids := ARRAY(SELECT (c->>'turns')::integer + g FROM generate_series(1, n) g);
        fresh := array_fill(true, ARRAY[n]);
        first_new := CASE WHEN n > 0 THEN 1 END;
    ELSE
        WITH b AS (
            SELECT k, d, i::integer AS i, min(i::integer) OVER (PARTITION BY k) AS first_i
            FROM unnest(p_keys, p_digests) WITH ORDINALITY AS b(k, d, i)
        ), r AS (
            -- One index probe per key, never a scan of the session's keys (LIMIT 1:
            -- the planner keeps the LATERAL as it is instead of turning it into a join).
            SELECT b.*, st.turn_id AS stored_id, st.key_digest AS stored_d,
                   (b.k IS NULL OR (st.turn_id IS NULL AND b.first_i = b.i)) AS is_new
            FROM b LEFT JOIN LATERAL (
                SELECT t.turn_id, t.key_digest FROM turns t
                WHERE t.session_num = s.num AND t.key = b.k LIMIT 1) st ON true
        ), m AS (
            SELECT r.*, CASE WHEN is_new THEN (c->>'turns')::integer
                        + count(*) FILTER (WHERE is_new) OVER (ORDER BY i) END AS new_id
            FROM r
        ), f AS (
            SELECT m.i, m.is_new, coalesce(m.new_id, m.stored_id, o.new_id) AS turn_id,
                   (NOT m.is_new AND m.d IS DISTINCT FROM coalesce(m.stored_d, o.d)) AS conflict
            FROM m LEFT JOIN m o ON o.i = m.first_i AND NOT m.is_new AND m.stored_id IS NULL
        )
        SELECT array_agg(turn_id ORDER BY i), array_agg(is_new ORDER BY i),
               min(i) FILTER (WHERE conflict), min(i) FILTER (WHERE is_new)
        INTO ids, fresh, bad, first_new FROM f;
    END IF;

    -- The first problem in row order wins, as a row-by-row append would meet it.
    IF s.archived AND first_new IS NOT NULL AND (bad IS NULL OR first_new < bad) THEN
        RAISE EXCEPTION 'archived session' USING ERRCODE = 'CR003';
    ELSIF bad IS NOT NULL THEN
        RAISE EXCEPTION 'key conflict' USING ERRCODE = 'CR004',
            DETAIL = format('%s %s', bad, ids[bad]);
    END IF;

    IF first_new IS NOT NULL THEN
        INSERT INTO turns (session_num, turn_id, role, content, name, tool_call_id, metadata,
                           ts, key, key_digest, tokens, tokens_exact, ix_length)
        SELECT s.num, ids[u.i], u.role, u.content, u.name, u.tool_call_id, u.metadata, u.ts,
               u.k, u.d, u.tokens, u.exact, u.len
        FROM unnest(p_roles, p_contents, p_names, p_tool_call_ids, p_metadata, p_ts, p_keys,
                    p_digests, p_tokens, p_exact, p_lengths)
             WITH ORDINALITY AS u(role, content, name, tool_call_id, metadata, ts, k, d,
                                  tokens, exact, len, i)
        WHERE fresh[u.i];

        INSERT INTO postings (session_num, term, turn_id, tf, doclen)
        SELECT s.num, p.term, ids[p.r], p.tf, p_lengths[p.r]
        FROM unnest(p_post_rows, p_post_terms, p_post_tfs) AS p(r, term, tf)
        WHERE fresh[p.r];
        INSERT INTO term_df (session_num, term, df)
        SELECT s.num, p.term, count(*)
        FROM unnest(p_post_rows, p_post_terms) AS p(r, term)
        WHERE fresh[p.r] GROUP BY p.term
        ON CONFLICT (session_num, term) DO UPDATE SET df = term_df.df + EXCLUDED.df;

        -- The running counters, as records.Counters.add moves them row by row; json
        -- (not jsonb), in Counters' field order, so the keys keep Python's order.
        SELECT count(*), sum(octet_length(u.content)), sum(u.tokens),
               count(*) FILTER (WHERE NOT u.exact), sum(u.len),
               (array_agg(u.ts ORDER BY u.i))[1], (array_agg(u.ts ORDER BY u.i DESC))[1]
        INTO added, add_bytes, add_tokens, add_estimated, add_length, first_ts, last_ts
        FROM unnest(p_contents, p_tokens, p_exact, p_lengths, p_ts)
             WITH ORDINALITY AS u(content, tokens, exact, len, ts, i)
        WHERE fresh[u.i];
        WITH x AS (SELECT u.role, count(*) AS n, min(u.i) AS first_i
                   FROM unnest(p_roles) WITH ORDINALITY AS u(role, i)
                   WHERE fresh[u.i] GROUP BY u.role),
             e AS (SELECT key AS role, value::text::bigint AS n, ord
                   FROM json_each(c->'by_role') WITH ORDINALITY AS e(key, value, ord))
        SELECT json_object_agg(coalesce(e.role, x.role), coalesce(e.n, 0) + coalesce(x.n, 0)
                               ORDER BY e.ord NULLS LAST, x.first_i)
        INTO roles FROM e FULL JOIN x ON x.role = e.role;
        c := json_build_object(
            'turns', (c->>'turns')::bigint + added,
            'bytes', (c->>'bytes')::bigint + add_bytes,
            'tokens', (c->>'tokens')::bigint + add_tokens,
            'estimated', (c->>'estimated')::bigint + add_estimated,
            'by_role', roles,
            'first', CASE WHEN coalesce(c->>'first', '') <> '' THEN c->'first'
                          ELSE to_json(first_ts) END,
            'last', to_json(last_ts),
            'tokenizers', CASE WHEN (c->'tokenizers')::jsonb ? p_tokenizer THEN c->'tokenizers'
                               ELSE ((c->'tokenizers')::jsonb || to_jsonb(p_tokenizer))::json END);
        UPDATE sessions SET counters = c::text, ix_docs = ix_docs + added,
                            ix_length = ix_length + add_length
        WHERE num = s.num;
    END IF;
    IF p_archive THEN
        UPDATE sessions SET archived = true WHERE num = s.num;
    END IF;
    IF first_new IS NOT NULL OR created OR p_archive THEN
        -- Last, so the one generation row is locked only until commit.
        UPDATE store_generation SET generation = generation + 1;
    END IF;
    RETURN ids;
END
$fn$;
"""

# The relay's per-key counters (apps/server/limits.py), shared by every relay on the
# store: requests and body bytes per key per one-minute window, stored bytes per tenant.
_RELAY_LIMITS = """
CREATE TABLE relay_limit_windows (
    key_id     text NOT NULL,
    start      bigint NOT NULL,           -- the window's first second (Unix time)
    requests   integer NOT NULL,
    body_bytes bigint NOT NULL,
    PRIMARY KEY (key_id, start)
);
CREATE TABLE relay_stored_bytes (
    tenant text PRIMARY KEY,
    bytes  bigint NOT NULL
);
"""

# The store's own id (PostgresBackend.identity): made once, with the schema, so every
# relay that reaches this schema -- however its URL is spelled -- reads the same one.
# Shared caches key their per-store entries by it (the Redis hot tails).
_STORE_ID = """
CREATE TABLE store_id (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    id  uuid NOT NULL DEFAULT gen_random_uuid()
);
INSERT INTO store_id DEFAULT VALUES;
"""

#: (version, name, SQL); applied in order, never edited once released.
MIGRATIONS: list[tuple[int, str, str]] = [
    (1, "transcript, keys and text index", _TRANSCRIPT),
    (2, "turn log: derived turns, vectors, topic threads", _TURNLOG),
    (3, "warm artifacts", _WARM),
    (4, "scratch buffer: entries with their blobs", _SCRATCH),
    (5, "turn log: topic thread labels", _THREAD_LABELS),
    (6, "knowledge fabric: facts, pgvector vectors, edges, change feed, terms", _FACTS),
    (7, "transcript: the append as one server-side call", _TRANSCRIPT_APPEND),
    (8, "store: its own random id", _STORE_ID),
    # 10: the relay's own tables; version 9 is left to the store's parts.
    (10, "relay: per-key limit counters", _RELAY_LIMITS),
]


def applied_versions(cur: Any) -> list[int]:
    cur.execute("SELECT version FROM schema_migrations ORDER BY version")
    return [row[0] for row in cur.fetchall()]


def migrate(db: Any) -> list[int]:
    """Bring ``db``'s schema up to date; returns the versions applied now."""
    schema = db.schema
    known = {version for version, _, _ in MIGRATIONS}
    done_now: list[int] = []
    with db.connection() as conn, conn.cursor() as cur:
        # One migrator at a time per schema (a transaction-scoped advisory lock).
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"ctxrelay:{schema}",))
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        cur.execute(f'CREATE TABLE IF NOT EXISTS "{schema}".schema_migrations ('
                    "version integer PRIMARY KEY, name text NOT NULL, "
                    "applied_at timestamptz NOT NULL DEFAULT now())")
        have = applied_versions(cur)
        newer = sorted(set(have) - known)
        if newer:
            raise StoreError(
                f"the store in schema {schema!r} has migrations {newer} that this "
                "ctxrelay does not know (a newer version wrote it); upgrade ctxrelay")
        for version, name, sql in MIGRATIONS:
            if version in have:
                continue
            with conn.transaction():
                cur.execute(sql)
                cur.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                            (version, name))
            done_now.append(version)
    return done_now
