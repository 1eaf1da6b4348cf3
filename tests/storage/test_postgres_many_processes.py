"""Many processes, one PostgreSQL store: turn ids per session contiguous, every
idempotency key honoured once across processes, nothing lost or duplicated."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter

from ctxrelay.storage import close_all, open_stores
from support import ROOT

SESSIONS = [f"s{i}" for i in range(4)]
PER_PROCESS = 30

WORKER = r"""
import sys
from ctxrelay.storage import open_stores
spec, me = sys.argv[1], sys.argv[2]
sessions = sys.argv[3].split(",")
with open_stores(spec) as stores:
    t = stores.transcript
    for i in range(int(sys.argv[4])):
        sid = sessions[i % len(sessions)]
        # every process sends every shared message once (the same key: a retry
        # from another relay), and one of its own
        t.append(sid, "user", f"shared {i}", key=f"shared-{i}")
        t.append(sid, "assistant", f"{me} says {i}", key=f"{me}-{i}")
print("done")
"""


def test_three_processes_append_to_the_same_sessions(tmp_path, pg_schema):
    spec, _ = pg_schema
    with open_stores(spec) as stores:
        for sid in SESSIONS:
            stores.transcript.create_session(sid)
    close_all()
    env = {"PYTHONPATH": str(ROOT / "python"), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, spec, f"p{n}",
                               ",".join(SESSIONS), str(PER_PROCESS)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for n in range(3)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "done", err
    with open_stores(spec) as stores:
        t = stores.transcript
        contents = Counter()
        for sid in SESSIONS:
            turns = t.history(sid)
            assert [x.turn_id for x in turns] == list(range(1, len(turns) + 1))
            contents.update((sid, x.content) for x in turns)
            assert t.check_derived(sid).ok
        # each shared message once (the other two sends were retries); each own one once
        want = Counter({(SESSIONS[i % len(SESSIONS)], f"shared {i}"): 1
                        for i in range(PER_PROCESS)})
        want.update({(SESSIONS[i % len(SESSIONS)], f"p{n} says {i}"): 1
                     for n in range(3) for i in range(PER_PROCESS)})
        assert contents == want
