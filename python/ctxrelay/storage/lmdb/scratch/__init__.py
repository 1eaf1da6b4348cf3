"""The scratch buffer (Tier E): tool outputs as blobs, summaries in context.

This is CRP-SPEC-029's Scratch Buffer on SPEC-035 §2.5's pointer-based
ephemeral store, with the ``local-disk`` backend of SPEC-038 §2.5.  Each tool
output is written once to a blob file named by an unguessable scratch id; the
metadata, including a deterministic summary of at most 256 tokens
(:mod:`ctxrelay.text.summarize`), is kept in LMDB.  Only the summary goes into
context; :meth:`ScratchStore.raw` reads the blob when the full output is
really needed.

Modules: ``store`` (:class:`ScratchStore`), ``table`` (its LMDB records),
``blobs`` (the blob files); the back-end-neutral parts every back end shares are
in :mod:`ctxrelay.storage.common.scratch` (``records``: entries and reports,
``checks``: ids, argument checks, the provenance hash, ``base``: options, put,
pins, promotion, ``freshness``: the gate, ``errors``), re-exported here.

Public API
----------
``ScratchStore(path, *, disk_budget_bytes, default_ttl, ...)`` (or
``open_scratch_store(path, **kw)`` to share one per path per process) with
``put``, ``get``, ``entry_dict``, ``raw``, ``most_recent``, ``list``, ``pin``, ``unpin``,
``reference``, ``delete``, ``evict``, ``stats``, ``check``, ``gate``,
``render``, ``promote``, ``location`` and ``close``.  Module functions:
``gate``, ``render``, ``freshness_header``, ``provenance_hash``,
``check_scratch_id``, ``new_scratch_id``, ``close_all``.

Two clocks per entry
--------------------
*Freshness* (SPEC-029 §4) says whether the value may be shown as current:
the entry's class (``REALTIME`` 30 s, ``VOLATILE`` 5 min, ``STABLE`` 1 h,
``STATIC`` the whole session, i.e. never stale here) gives ``freshness_ttl``,
and :func:`gate` turns age into ``fresh``/``reinvoke``/``warn``/``exclude``.
*Retention* (``ttl``, default ``default_ttl``) says how long the blob is kept:
a stale entry is still useful for "now filter those results" with a staleness
warning, so it is not dropped the moment it goes stale.  Eviction
(:meth:`ScratchStore.evict`, also run by every ``put``) first drops unpinned
entries whose retention has expired (``now > created + ttl``), then the least
recently used unpinned entries until the blob bytes fit ``disk_budget_bytes``.
Pinned entries are never evicted, so pinned bytes may exceed the budget; an
unpinned put that cannot fit even after evicting every other unpinned entry
raises :class:`ScratchFullError` (SPEC-029 §11's ``CRP-Context-Scratch-Full``)
and writes nothing.

On-disk layout
--------------
``path/scratch.lmdb/`` is the LMDB environment, ``path/blobs/<D>/<id>.blob``
the blobs, where ``D`` is the 64 hex digits of sha256(session id) and
``id`` is ``scr_`` + 32 random hex digits (128 bits from :mod:`secrets`).
Both path parts are made here and the id is checked strictly on every call,
so no argument can name a file outside ``path/blobs``.  ``S`` below is the
32-byte sha256 of the session id and every key starts with it (or a time), so
a scratch id only resolves within its own session.  Named sub-databases:

``meta``     ``format`` -> :data:`FORMAT`; ``next_seq`` -> u64; ``usage`` ->
             four u64: entries, blob bytes, pinned entries, pinned bytes.
``entries``  S + id -> JSON record of the entry.
``order``    S + seq (u64) -> id: a session's entries in insertion order.
``lru``      access time (u64 µs) + S + id, unpinned entries only.
``expiry``   retention end (u64 µs) + S + id, unpinned entries with a ttl.

Durability
----------
``put`` writes the blob to a temporary file in its directory, fsyncs it,
``os.replace``-s it to its name and fsyncs the directory, and only then
commits the metadata (LMDB, sync on).  A crash in between leaves an orphan
blob that no call can see; :meth:`ScratchStore.check` deletes it.  Deletion
goes the other way (metadata first, then the file).  The disk budget counts
blob bytes (the raw output sizes), not the LMDB metadata.
"
"""
from __future__ import annotations

from ctxrelay.storage.common.scratch.checks import (FRESHNESS_CLASSES, FRESHNESS_TTL, GATE_ACTIONS,
                                                  MAX_TOOL_NAME_CHARS, NEVER_PROMOTED,
                                                  RETAIN_POLICIES, STALE_POLICIES,
                                                  check_scratch_id, new_scratch_id,
                                                  provenance_hash)
from ctxrelay.storage.common.scratch.errors import (InvalidScratchIdError, NotPromotableError,
                                                  ScratchBlobError, ScratchFullError,
                                                  UnknownFreshnessError, UnknownScratchError,
                                                  UnsafeScratchIdError)
from ctxrelay.storage.common.scratch.freshness import freshness_header, gate, render
from ctxrelay.storage.common.scratch.records import (CheckReport, Evicted, EvictionReport,
                                                   Promotion, Rendered, ScratchEntry,
                                                   ScratchStats)
from ctxrelay.storage.lmdb.scratch.store import (AUTO_PIN_REFERENCES, BLOB_DIRNAME,
                                                 DEFAULT_DISK_BUDGET, DEFAULT_FRESHNESS,
                                                 DEFAULT_TTL, ENV_DIRNAME, FORMAT,
                                                 RAW_TOKEN_LIMIT, ScratchStore, close_all,
                                                 open_scratch_store)

__all__ = [
    "FORMAT", "FRESHNESS_CLASSES", "FRESHNESS_TTL", "GATE_ACTIONS", "STALE_POLICIES",
    "RETAIN_POLICIES", "NEVER_PROMOTED", "DEFAULT_DISK_BUDGET", "DEFAULT_TTL",
    "DEFAULT_FRESHNESS", "AUTO_PIN_REFERENCES", "MAX_TOOL_NAME_CHARS", "RAW_TOKEN_LIMIT",
    "ENV_DIRNAME", "BLOB_DIRNAME",
    "ScratchEntry", "ScratchStats", "Evicted", "EvictionReport", "CheckReport",
    "Rendered", "Promotion", "ScratchStore", "open_scratch_store", "close_all",
    "gate", "render", "freshness_header", "provenance_hash", "check_scratch_id",
    "new_scratch_id",
    "InvalidScratchIdError", "UnsafeScratchIdError", "UnknownScratchError",
    "ScratchFullError", "ScratchBlobError", "UnknownFreshnessError", "NotPromotableError",
]
