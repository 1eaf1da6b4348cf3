"""Where one process keeps the ANN snapshots of a PostgreSQL store's facts.

The CKF's hnswlib index lives in each process (kept current from the change
feed), and a snapshot file lets a restarted process load it and replay the
feed from the snapshot's generation instead of building it again from every
stored vector (minutes at 100k facts).  A snapshot describes the index of the
process that wrote it, so each process holds a *slot* of its own: a directory
``<root>/<store id>/slot-<n>`` locked with ``flock`` while the process lives
(a restarted process takes a free slot, usually the one its predecessor left),
holding the snapshot files and ``state.json`` (per namespace: the generation
the snapshot reflects, its tuned ef, the churn base).  The store id is drawn
when the store's CKF is created, so a dropped and re-created schema never
meets an old slot.  ``root`` is ``$CTXRELAY_ANN_DIR``, else
``<tmp>/ctxrelay-ann-<uid>``: losing it costs a rebuild, never correctness.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from typing import Any

__all__ = ["AnnSlot", "MAX_SLOTS"]

MAX_SLOTS = 64            # processes of one store on one host with their own snapshots


def _root() -> str:
    return os.environ.get("CTXRELAY_ANN_DIR") or os.path.join(
        tempfile.gettempdir(), f"ctxrelay-ann-{os.getuid()}")


class AnnSlot:
    """A snapshot directory this process holds alone (see the module doc); a private
    temporary one, removed at close, when the store has no id or no slot is free."""

    def __init__(self, store_id: str | None) -> None:
        self._fd: int | None = None
        self.private = True
        if store_id:
            base = os.path.join(_root(), store_id)
            try:
                os.makedirs(base, mode=0o700, exist_ok=True)
                for n in range(MAX_SLOTS):
                    path = os.path.join(base, f"slot-{n}")
                    os.makedirs(path, mode=0o700, exist_ok=True)
                    fd = os.open(os.path.join(path, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        os.close(fd)
                        continue
                    self.dir, self._fd, self.private = path, fd, False
                    return
            except OSError:
                pass            # an unusable root: a private directory does the job
        self.dir = tempfile.mkdtemp(prefix="ctxrelay-ann-")

    @property
    def _state_path(self) -> str:
        return os.path.join(self.dir, "state.json")

    def read(self) -> dict[int, dict[str, Any]]:
        """What the slot's snapshots reflect, by namespace id (empty if unreadable)."""
        try:
            with open(self._state_path, encoding="utf-8") as f:
                return {int(k): v for k, v in json.load(f).items()}
        except (OSError, ValueError):
            return {}

    def write(self, states: dict[int, dict[str, Any]]) -> None:
        tmp = self._state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({str(k): v for k, v in states.items()}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._state_path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)            # releases the flock
            self._fd = None
        if self.private:
            shutil.rmtree(self.dir, ignore_errors=True)
