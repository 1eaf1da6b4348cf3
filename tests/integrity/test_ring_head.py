"""Issue 15: a damaged rolling-log head is refused, and the Runtime rebuilds the ring.

Before, one flipped byte in a ring's newer head slot made the ring fall back to
its older slot: ``read_recent`` returned the ring as it was one append earlier,
silently.  Now the raw ring raises CorruptStoreError (saying the ring is
rebuilt from the transcript), and the Runtime's reads of recent turns rebuild
it and answer exactly the transcript's turns.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrelay import Runtime
from ctxrelay.errors import CorruptStoreError
from ctxrelay.retrieval.router import Router
from ctxrelay.storage.rolling.ring import SLOT_SIZE, header_len


def _damage_newest_head(ring: Path, session_id: str) -> None:
    """Flip a byte in the body of the head slot with the larger generation."""
    raw = bytearray(ring.read_bytes())
    at = header_len(len(session_id.encode()))
    gens = [int.from_bytes(raw[at + i * SLOT_SIZE:at + i * SLOT_SIZE + 8], "little")
            for i in (0, 1)]
    newest = at + gens.index(max(gens)) * SLOT_SIZE
    raw[newest + 9] ^= 0x10                      # next_seq: the ring would lose a turn
    ring.write_bytes(bytes(raw))


def test_a_damaged_ring_head_is_refused_then_rebuilt_from_the_transcript(tmp_path):
    store = tmp_path / "store"
    with Runtime(store) as rt:
        rt.create_session("s")
        for i in range(6):
            rt.append("s", ("user", "assistant")[i % 2], f"turn {i}: etcd defrag {i}")
        want = [(t.turn_id, t.content) for t in rt.history("s")][-4:]
        assert [(t.turn_id, t.content) for t in rt.recent("s", 4)] == want
    ring = next((store / "rolling").glob("*.ring"))
    _damage_newest_head(ring, "s")
    with Runtime(store) as rt:
        rolling = Router.of(rt._store).rolling
        with pytest.raises(CorruptStoreError, match="rebuilds it from the transcript"):
            rolling.read_recent("s", 4)
        assert [(t.turn_id, t.content) for t in rt.recent("s", 4)] == want
        assert len(rolling.read_recent("s", 4)) == 4          # rebuilt, valid again
        rt.append("s", "user", "after the rebuild")
        assert rt.recent("s", 1)[0].content == "after the rebuild"
