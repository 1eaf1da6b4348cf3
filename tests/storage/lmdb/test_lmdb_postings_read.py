"""A term's postings are read in one call per term (``dup_block``), their node bounds
checked once and every posting's checksum verified; the postings kept between searches
(by read snapshot) are never served after a write.

These pin what the bulk read must keep from the per-posting one: the same postings in
the same order, a damaged posting still a CorruptStoreError naming ``ix.post``, and a
new turn found by the next search.
"""
from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.lmdb.bounds import dup_block
from ctxrelay.storage.lmdb.transcript import TranscriptStore

TURNS = 30


def _filled(path: Path) -> None:
    with TranscriptStore(path) as store:
        store.create_session("ops")
        for i in range(1, TURNS + 1):
            store.append("ops", "user", f"etcd defrag step {i}" + " freed" * (i % 3))


def _damage_posting(path: Path, term: bytes, doc_id: int) -> None:
    """Flip the checksum of ``term``'s posting of ``doc_id`` (found without the code
    under test: a posting is doc id (u64), tf (u32), length (u32), then 8 checksum bytes)."""
    env = lmdb.open(str(path / "transcript.lmdb"), max_dbs=32)
    try:
        db = env.open_db(b"ix.post", dupsort=True, dupfixed=True, create=False)
        with env.begin(write=True) as txn:
            cursor = txn.cursor(db=db)
            keys = [k for k in cursor.iternext_nodup(keys=True, values=False)
                    if k.endswith(term)]
            assert len(keys) == 1, keys
            cursor.set_key(keys[0])
            stored = next(v for v in cursor.iternext_dup(keys=False, values=True)
                          if int.from_bytes(v[:8], "big") == doc_id)
            damaged = stored[:-1] + bytes([stored[-1] ^ 0x01])
            assert txn.delete(keys[0], stored, db=db)
            assert txn.put(keys[0], damaged, db=db, dupdata=True)
    finally:
        env.close()


def test_bulk_read_gives_the_postings_the_cursor_walk_gives(tmp_path):
    path = tmp_path / "store"
    _filled(path)
    with TranscriptStore(path) as store:
        def read(txn):
            cursor = txn.cursor(db=store._index._post)
            cursor.first()
            key = next(k for k in cursor.iternext_nodup(keys=True, values=False)
                       if k.endswith(b"etcd"))
            assert cursor.set_key(key)
            walked = list(cursor.iternext_dup(keys=False, values=True))
            assert cursor.set_key(key)
            every = dup_block(cursor, 16)
            newest = {}
            # stepped back through the newest (30 > 8 x 3), read whole, more than held
            for n in (3, 7, 20, TURNS + 5):
                assert cursor.set_key(key)
                newest[n] = dup_block(cursor, 16, newest=n)
            return walked, (every, newest)
        walked, (every, newest) = store._read(read)
    assert len(walked) == TURNS
    assert every == b"".join(walked)
    assert newest == {n: b"".join(walked[-n:]) for n in newest}


@pytest.mark.parametrize("max_postings", [None, 3, 5, 10])
def test_a_damaged_newest_posting_is_corrupt_store_error(tmp_path, max_postings):
    path = tmp_path / "store"
    _filled(path)
    _damage_posting(path, b"etcd", TURNS)
    with TranscriptStore(path) as store:
        with pytest.raises(CorruptStoreError, match=r"ix\.post/.*fails its checksum"):
            store.rank("ops", "etcd", k=5, max_postings=max_postings)
        with pytest.raises(CorruptStoreError, match=r"ix\.post/.*fails its checksum"):
            store.search("ops", "etcd", k=5, max_postings=max_postings)
        assert store.rank("ops", "defrag", k=1)[0][0] == TURNS      # other terms read


def test_a_damaged_old_posting_is_read_only_by_an_exhaustive_search(tmp_path):
    path = tmp_path / "store"
    _filled(path)
    _damage_posting(path, b"etcd", 1)
    with TranscriptStore(path) as store:
        # The newest postings are intact: a bounded read, stepped (3) or in one block
        # (10, of which only the newest are verified), never reaches the damage.
        assert len(store.rank("ops", "etcd", k=3, max_postings=3)) == 3
        assert len(store.rank("ops", "etcd", k=5, max_postings=10)) == 5
        with pytest.raises(CorruptStoreError, match=r"ix\.post/.*fails its checksum"):
            store.rank("ops", "etcd", k=5, max_postings=None)


def test_kept_postings_are_not_served_after_a_write(tmp_path):
    path = tmp_path / "store"
    _filled(path)
    with TranscriptStore(path) as store:
        before = store.rank("ops", "etcd", k=3)
        assert before == store.rank("ops", "etcd", k=3)          # served from what was kept
        new = store.append("ops", "assistant", "etcd etcd etcd")
        after = store.rank("ops", "etcd", k=3)
        assert after[0][0] == new and new not in {t for t, _ in before}


def test_the_vectorised_check_gives_xxhash_answers_at_every_length():
    import os

    import xxhash

    from ctxrelay.storage.lmdb import checkblock
    assert checkblock.available()
    for length in range(checkblock.MIN_INPUT, checkblock.MAX_INPUT + 1):
        key = os.urandom(length - 16)
        values = [os.urandom(16) for _ in range(40)]
        block = bytearray(b"".join(v + xxhash.xxh3_64_digest(key + v) for v in values))
        block[24 * 7 + length % 16] ^= 0x10                 # row 7's value
        block[24 * 30 + 16 + length % 8] ^= 0x01            # row 30's checksum
        intact = checkblock.intact_rows(key, bytes(block), 24)
        assert intact.tolist() == [i not in (7, 30) for i in range(40)], length


def test_the_k_best_are_the_head_of_the_whole_ranking_ties_included(tmp_path):
    # Scores repeat (i % 3 gives three lengths): the k-th best score is tied, and the
    # newest of the tied turns must win, as in the fully sorted ranking.
    path = tmp_path / "store"
    _filled(path)
    with TranscriptStore(path) as store:
        whole = store.rank("ops", "etcd freed", k=1000, max_postings=None)
        assert len(whole) == TURNS and len({s for _, s in whole}) < TURNS
        for k in (1, 2, 3, 7, 10, 11, TURNS - 1, TURNS):
            assert store.rank("ops", "etcd freed", k=k, max_postings=None) == whole[:k]
