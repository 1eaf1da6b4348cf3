"""The transcript's back-end-neutral parts: turn and session records, limits and
the derived-records report (``records``), JSON Lines export and import (``jsonl``)
and :class:`~ctxrelay.storage.common.transcript.base.TranscriptBase`, which every
back end's transcript inherits (token counting, the size check, import/export).
The LMDB transcript is :mod:`ctxrelay.storage.lmdb.transcript`, the PostgreSQL one
:mod:`ctxrelay.storage.postgres.transcript`.
"""
