"""The PostgreSQL back end: ``postgresql://user@host:port/db?schema=name``.

PostgreSQL is the system of record: everything durable lives in tables of
one schema (``ctxrelay`` unless the spec names another with ``?schema=``),
so several stores can share a database and several relay processes can
share a store.  The schema is created and brought up to date at open by
versioned migrations (:mod:`ctxrelay.storage.postgres.migrations`, recorded
in ``schema_migrations``).  Connections come from one ``psycopg_pool``
pool per store per process (:mod:`ctxrelay.storage.postgres.connection`).

Parts implemented here: the transcript with its BM25 text index
(:mod:`ctxrelay.storage.postgres.transcript`, the same scores and order as
the embedded back end) and the turn log
(:mod:`ctxrelay.storage.postgres.turnlog`, the embedded derivation over
tables), warm artifacts (:mod:`ctxrelay.storage.postgres.warm`) and the
scratch buffer with its blobs (:mod:`ctxrelay.storage.postgres.scratch`),
and the knowledge fabric's facts with their vectors in pgvector columns,
edges, communities and change feed (:mod:`ctxrelay.storage.postgres.facts`;
the ANN index is per process, kept current from the change feed).

Needs the ``postgres`` extra (``pip install 'ctxrelay[postgres]'``):
psycopg 3, psycopg_pool, pgvector.  ``make services`` starts a local
server for the tests (``scripts/services.sh``).
"""
from ctxrelay.storage.postgres.connection import DatabaseUnavailableError  # noqa: F401
