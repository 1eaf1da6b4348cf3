"""Per-process state stays bounded however many sessions a process serves."""
from __future__ import annotations

import numpy as np

from ctxrelay.text.embed import get_embedder
from ctxrelay.storage.lmdb.transcript import TranscriptStore
from ctxrelay.storage.lmdb.turnlog import TurnLog
from ctxrelay.storage.turnlog_derivation import DENSE_SESSIONS


def test_turn_log_keeps_dense_windows_of_the_latest_sessions_only(tmp_path):
    st = TranscriptStore(tmp_path / "t")
    log = TurnLog.open(tmp_path / "tl")
    emb = get_embedder("hashing")
    sessions = [f"s{i}" for i in range(DENSE_SESSIONS + 4)]
    try:
        for sid in sessions:
            st.create_session(sid)
            st.append(sid, "user", f"etcd member {sid} has a slow disk")
            st.append(sid, "user", f"restic backups for {sid} run nightly")
            log.sync(st, sid, emb)
        query = emb.embed_batch(["etcd member slow disk"])[0]
        first = log.nearest(sessions[0], query, k=1, before=3)
        for sid in sessions:
            assert log.nearest(sid, query, k=1, before=3)[0][0] == 1
        cache = log._dense_cache
        assert len(cache) == DENSE_SESSIONS
        # keyed by (session, vector space); the least recently used sessions left
        assert [key[0] for key in cache] == sessions[-DENSE_SESSIONS:]
        # A session whose window was dropped reads it again, with the same answer.
        again = log.nearest(sessions[0], query, k=1, before=3)
        assert again[0][0] == first[0][0] and np.isclose(again[0][1], first[0][1])
        assert sessions[0] in {key[0] for key in cache} and len(cache) == DENSE_SESSIONS
    finally:
        log.close()
        st.close()
