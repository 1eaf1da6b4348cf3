"""The storage seam: one Protocol per store (``interfaces``), the back ends that
implement them (``lmdb``, the embedded default; the rolling log and hot cache),
and :func:`open_stores`, which opens a store's parts by a URL-like spec and
hands them out as one :class:`Stores` object."""
from ctxrelay.storage.spec import StoreSpec, register_backend, register_cache
from ctxrelay.storage.stores import Stores, find_stores, open_stores

__all__ = ["open_stores", "find_stores", "close_all", "Stores", "StoreSpec",
           "register_backend", "register_cache"]


def close_all() -> None:
    """Close every store of this process, whoever holds it (tests, shutdown): each
    :class:`Stores`, then every embedded environment still open on its own."""
    from ctxrelay.storage import stores
    stores.close_all()
    from ctxrelay.storage.lmdb import base, scratch, transcript, turnlog, warm
    for kind in (transcript.TranscriptStore, warm.WarmStore, scratch.ScratchStore,
                 turnlog.TurnLog):
        base.close_all(kind)
