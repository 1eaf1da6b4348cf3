"""The scratch buffer's back-end-neutral parts: entries and reports (``records``),
ids and argument checks (``checks``), its errors, the freshness gate
(``freshness``) and :class:`~ctxrelay.storage.common.scratch.base.ScratchBase`,
which every back end's store inherits (options, put up to the write, pins,
references, promotion).  The LMDB store is :mod:`ctxrelay.storage.lmdb.scratch`,
the PostgreSQL one :mod:`ctxrelay.storage.postgres.scratch`.
"""
