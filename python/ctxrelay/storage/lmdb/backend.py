"""The embedded back end: every part of a store in one directory.

Layout of a store directory (each part in its own subdirectory, created on
first use, so a store that never used a part has none):

``transcript.lmdb/``  the transcript and its text index
                      (:mod:`ctxrelay.storage.lmdb.transcript`)
``turnlog/``          derived per-turn fields (:mod:`ctxrelay.storage.lmdb.turnlog`)
``warm/``             warm artifacts (:mod:`ctxrelay.storage.lmdb.warm`)
``scratch/``          the scratch buffer: LMDB metadata and blob files
                      (:mod:`ctxrelay.storage.lmdb.scratch`)
``ckf/``              the knowledge fabric (:mod:`ctxrelay.knowledge.fabric`)
``rolling/``          the rolling log's mmap rings (:mod:`ctxrelay.storage.rolling`)

Each LMDB environment is the one shared instance of its path in the process.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ctxrelay.storage.spec import StoreSpec, store_identity

__all__ = ["LmdbBackend"]

# What shows that a part exists (its LMDB data file, or its directory).
_MARKERS = {"turnlog": ("turnlog", "data.mdb"), "warm": ("warm",),
            "scratch": ("scratch",), "facts": ("ckf",)}


class LmdbBackend:
    """Opens the parts of the store in ``spec.location`` (see the module doc)."""

    def __init__(self, spec: StoreSpec, *, map_size: int | None = None,
                 max_turn_bytes: int | None = None) -> None:
        self.spec = spec
        self.dir = Path(spec.location)
        self._transcript_options = {name: int(value) for name, value in (
            ("map_size", map_size), ("max_turn_bytes", max_turn_bytes)) if value}

    def identity(self) -> str:
        """The store's id (see :meth:`ctxrelay.storage.interfaces.backend.Backend.identity`):
        a digest of the directory's real path, which every spelling of it (relative,
        through a symlink, ``lmdb://``) resolves to.  Not an id file in the
        directory: a copy of the directory (``cp -r``, a backup restored beside it)
        would carry the file and share Redis tails with its original."""
        return store_identity(self.spec)

    def open_transcript(self) -> Any:
        from ctxrelay.storage.lmdb.transcript import open_store
        return open_store(os.fspath(self.dir), **self._transcript_options)

    def open_turnlog(self) -> Any:
        from ctxrelay.storage.lmdb.turnlog import TurnLog
        return TurnLog.open(self.dir / "turnlog")

    def open_warm(self) -> Any:
        from ctxrelay.storage.lmdb.warm import open_warm_store
        return open_warm_store(self.dir / "warm")

    def open_scratch(self) -> Any:
        from ctxrelay.storage.lmdb.scratch import open_scratch_store
        return open_scratch_store(self.dir / "scratch")

    def open_facts(self) -> Any:
        from ctxrelay.knowledge.fabric import FactStore
        return FactStore.open(self.dir / "ckf")

    def open_rolling(self, *, capacity_entries: int, capacity_bytes: int) -> Any:
        from ctxrelay.storage.rolling import RollingLog
        return RollingLog(self.dir / "rolling", capacity_entries=capacity_entries,
                          capacity_bytes=capacity_bytes)

    def has(self, part: str) -> bool:
        marker = self.dir.joinpath(*_MARKERS[part])
        return marker.is_file() if marker.suffix == ".mdb" else marker.is_dir()

    def close(self) -> None:
        """The parts close themselves; the directory holds nothing else open."""
