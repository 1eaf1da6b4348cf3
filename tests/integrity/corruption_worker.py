"""What a corruption trial reads: every record of every store, through the stores' own APIs.

Runs in a child process (a SIGBUS or SIGSEGV there is an outcome, not the
end of the test run).  :func:`read_all` returns, for each read, either
``("ok", value)`` (plain JSON-able data) or ``("corrupt", message)`` for a
:class:`CorruptStoreError`, or ``("error", "Type: message")`` for anything
else; the parent compares the ``ok`` values with the pristine store's.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Imported here so the forkserver loads them once, not once per trial.
import ctxrelay.knowledge.fabric  # noqa: E402,F401
import ctxrelay.storage.stores  # noqa: E402,F401
from ctxrelay.errors import CorruptStoreError
from ctxrelay.storage.lmdb import scratch, transcript, turnlog, warm  # noqa: E402,F401

SESSIONS = ("ops", "notes")
VOLATILE = {"last_access"}     # a read itself moves it (the scratch LRU)
QUERIES = ("etcd defrag", "quota alarm", "backup snapshot")
FACT_KEYS = tuple(f"fact-{i}" for i in range(12))


def close_stores() -> None:
    """Close every store this process opened (so a test can damage the files)."""
    from ctxrelay.storage.lmdb.base import close_all as close_lmdb
    from ctxrelay.storage.stores import close_all
    close_all()
    close_lmdb()


def run_cli(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ctxrelay --store STORE --json ARGS`` of this checkout, in a child process."""
    from support import ROOT
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
    return subprocess.run([str(ROOT / ".venv" / "bin" / "ctxrelay"), "--store", str(store),
                           "--json", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def _plain(value: Any) -> Any:
    if hasattr(value, "tobytes"):          # a vector: compared by its exact bytes
        return hashlib.sha256(value.tobytes()).hexdigest()
    if hasattr(value, "to_dict"):
        return _plain(value.to_dict())
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()
                if k not in VOLATILE}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return hashlib.sha256(value).hexdigest()
    if isinstance(value, float):
        return round(value, 6)
    return value


def _reads(store_dir: Path, part: str) -> list[tuple[str, Callable[[], Any]]]:
    """The reads of one part of the store (``transcript``, ``warm``, ...)."""
    from ctxrelay.storage.stores import open_stores
    stores = open_stores(store_dir)
    t = stores.transcript
    reads: dict[str, list[tuple[str, Callable[[], Any]]]] = {
        "transcript": [("sessions", t.sessions)], "warm": [], "scratch": [], "turnlog": [],
        "rolling": []}
    for s in SESSIONS:
        reads["transcript"] += [
            (f"{s}/history", lambda s=s: t.history(s)),
            (f"{s}/stats", lambda s=s: t.stats(s)),
            (f"{s}/key", lambda s=s: t.turn_for_key(s, "k3")),
            *[(f"{s}/search/{q}", lambda s=s, q=q: [(h.turn_id, h.content)
                                                   for h in t.search(s, q, k=5)])
              for q in QUERIES],
            *[(f"{s}/turn/{i}", lambda s=s, i=i: t.turn(s, i)) for i in (1, 7, 20)]]
        reads["warm"] += [(f"{s}/warm", lambda s=s: stores.warm.latest(s))]
        reads["rolling"] += [(f"{s}/rolling", lambda s=s: stores.rolling.read_recent(s, 20))]
        reads["scratch"] += [(f"{s}/scratch", lambda s=s: [
            (e, stores.scratch.raw(s, e.scratch_id)) for e in stores.scratch.list(s)])]
        reads["turnlog"] += [
            (f"{s}/turnlog", lambda s=s: [stores.turnlog.derived(s, i) for i in range(1, 21)]),
            (f"{s}/vectors", lambda s=s: stores.turnlog.vectors(s, range(1, 21))),
            (f"{s}/threads", lambda s=s: stores.turnlog.threads(s))]
    if part == "facts":
        facts = stores.facts
        snap = facts.backend.snapshot

        def ids(r: Any) -> list[str]:
            return [r.lookup_key("default", k) or "-" for k in FACT_KEYS]
        reads["facts"] = [
            ("facts/keys", lambda: [facts.lookup_key(k) for k in FACT_KEYS]),
            ("facts/get", lambda: snap(lambda r: r.get("default", ids(r)))),
            ("facts/scan", lambda: snap(lambda r: r.scan("default"))),
            ("facts/vectors", lambda: snap(lambda r: r.vectors("default", ids(r)))),
            ("facts/terms", lambda: facts.search_terms("etcd defrag", k=5)),
            ("facts/ann", lambda: [getattr(h, "fact_id", h)
                                   for h in facts.search_ann("etcd defrag", k=5)])]
    return reads[part]


#: Characters of an error message kept per read (the bench's JSON stays small); long enough for a
#: message that names a store under a deep temporary path and still ends with its reason.
MESSAGE_CHARS = 1000


def read_all(store_dir: Path, part: str) -> dict[str, tuple[str, Any]]:
    try:
        reads = _reads(store_dir, part)
    except CorruptStoreError as exc:
        return {"open": ("corrupt", str(exc))}
    except Exception as exc:  # noqa: BLE001 -- an outcome to report, not to hide
        return {"open": ("error", f"{type(exc).__name__}: {exc}")}
    out: dict[str, tuple[str, Any]] = {}
    for name, read in reads:
        try:
            out[name] = ("ok", _plain(read()))
        except CorruptStoreError as exc:
            out[name] = ("corrupt", str(exc)[:MESSAGE_CHARS])
        except Exception as exc:  # noqa: BLE001
            out[name] = ("error", f"{type(exc).__name__}: {str(exc)[:MESSAGE_CHARS]}")
    return out


def populate(store_dir: Path) -> None:
    """The store every trial damages: two sessions of 20 turns, keys, warm
    artifacts, tool outputs, a derived turn log, rolling-log rings and a dozen facts."""
    from ctxrelay.storage.stores import open_stores
    from ctxrelay.text.embed import get_embedder
    embedder = get_embedder("hashing")
    with open_stores(store_dir) as stores:
        t = stores.transcript
        for s in SESSIONS:
            t.create_session(s, metadata={"team": "sre", "n": len(s)})
            for i in range(20):
                t.append(s, ("user", "assistant")[i % 2],
                         f"{s} turn {i}: etcd defrag freed {i} GiB; quota alarm {i % 3}; "
                         f"backup snapshot {i * 7}", key=f"k{i}")
            stores.warm.publish(s, 1, 10, f"{s}: etcd defrag freed space",
                                decisions=["defrag weekly"])
            stores.warm.publish(s, 11, 20, f"{s}: quota alarms cleared")
            for j in range(3):
                stores.scratch.put(s, "kubectl", {"j": j}, f"pod-{j} Running\n" * 40)
            stores.turnlog.sync(t, s, embedder)
            for i in range(20):
                stores.rolling.append(s, f"{s} ring entry {i}: etcd defrag freed {i} GiB")
    from ctxrelay.knowledge.fabric import FactStore
    with FactStore(store_dir / "ckf", embedder="hashing", recluster_every=None) as facts:
        for i, key in enumerate(FACT_KEYS):
            facts.add_fact(f"etcd fact {i}: defrag frees {i} GiB", key=key)


# -- the trials ----------------------------------------------------------------------------

#: every file of the store a trial may damage -> the part whose reads it affects
FILES = {"transcript.lmdb/data.mdb": "transcript", "warm/data.mdb": "warm",
         "turnlog/data.mdb": "turnlog", "scratch/scratch.lmdb/data.mdb": "scratch",
         "ckf/db/data.mdb": "facts", "scratch/blobs": "scratch", "ckf/hnsw": "facts",
         "rolling": "rolling"}
WIDTHS = (1, 8, 64)          # bytes flipped in a row: one byte, a word, a cache line


BATCH = 25                   # trials one child process reads in a row


def _child(jobs: list[tuple[str, str]], conn: Any) -> None:
    """Read each (store dir, part) in turn, answering after each one; a crash
    ends the child, and the parent knows which trial did it."""
    from ctxrelay.storage.lmdb.base import close_all as close_lmdb
    from ctxrelay.storage.stores import close_all
    for index, (store_dir, part) in enumerate(jobs):
        result = read_all(Path(store_dir), part)
        close_all()
        close_lmdb()
        conn.send((index, result))
    conn.close()


def _files(root: Path, name: str) -> list[Path]:
    target = root / name
    return sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]


def _read_in_children(ctx: Any, jobs: list[tuple[str, str]], timeout: float = 60.0
                      ) -> list[tuple[str, dict[str, tuple[str, Any]] | None]]:
    """Each job's (state, reads): ``done`` or how its child died (``crash``/``hang``)."""
    out: list[tuple[str, dict[str, tuple[str, Any]] | None]] = []
    while len(out) < len(jobs):
        rest = jobs[len(out):]
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_child, args=(rest, child))
        proc.start()
        child.close()
        got = 0
        while got < len(rest):
            try:
                if not parent.poll(timeout):
                    break
                index, result = parent.recv()
            except EOFError:          # the child died before it answered
                break
            out.append(("done", result))
            got += 1
        proc.join(timeout if got == len(rest) else 5)
        if proc.is_alive():
            proc.kill()
            proc.join()
            if got < len(rest):
                out.append(("hang", None))
        elif got < len(rest):
            out.append((f"crash (exit {proc.exitcode})", None))
        parent.close()
    return out


def run_trials(pristine: Path, work: Path, *, trials_per_file: int, seed: int
               ) -> dict[str, Any]:
    """Flip bytes at random offsets of every store file, one trial per damage;
    each read must return the pristine data or raise CorruptStoreError."""
    import multiprocessing
    import random
    import shutil
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["corruption_worker"])
    rng = random.Random(seed)
    parts = sorted(set(FILES.values()))
    baseline = _read_in_children(ctx, [(str(pristine), part) for part in parts])
    expected = {}
    for part, (state, result) in zip(parts, baseline):
        assert state == "done" and all(v[0] == "ok" for v in result.values()), result
        expected[part] = result
    summary: dict[str, Any] = {"trials": 0, "bytes_flipped": 0, "reads": 0, "same": 0,
                               "corrupt_store_error": 0, "other_error": [], "wrong": [],
                               "crash": [], "by_file": {}}
    plan = [(name, part) for name, part in FILES.items() for _ in range(trials_per_file)]
    started = time.perf_counter()
    for first in range(0, len(plan), BATCH):
        batch = []
        for offset, (name, part) in enumerate(plan[first:first + BATCH]):
            trial_dir = work / f"t{first + offset}"
            shutil.copytree(pristine, trial_dir)
            target = rng.choice(_files(trial_dir, name))
            data = bytearray(target.read_bytes())
            width = rng.choice(WIDTHS)
            at = rng.randrange(max(1, len(data) - width))
            for i in range(at, min(at + width, len(data))):
                data[i] ^= rng.randrange(1, 256)
            target.write_bytes(bytes(data))
            batch.append((name, part, trial_dir, f"{target.relative_to(trial_dir)}@{at}+{width}",
                          width))
        results = _read_in_children(ctx, [(str(b[2]), b[1]) for b in batch])
        for (name, part, trial_dir, where, width), (state, result) in zip(batch, results):
            per_file = summary["by_file"].setdefault(
                name, {"trials": 0, "same": 0, "corrupt_store_error": 0})
            summary["trials"] += 1
            per_file["trials"] += 1
            summary["bytes_flipped"] += width
            if state != "done":
                summary["crash"].append(f"{where}: {state}")
            else:
                for read, (kind, value) in result.items():
                    summary["reads"] += 1
                    if kind == "ok" and value == expected[part].get(read, ("ok", None))[1]:
                        summary["same"] += 1
                        per_file["same"] += 1
                    elif kind == "corrupt":
                        summary["corrupt_store_error"] += 1
                        per_file["corrupt_store_error"] += 1
                    elif kind == "error":
                        summary["other_error"].append(f"{where} {read}: {value}")
                    else:
                        summary["wrong"].append(f"{where} {read}")
            shutil.rmtree(trial_dir, ignore_errors=True)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    return summary


def as_written_before_checksums(env_dir: Path) -> None:
    """Rewrite an LMDB store as an older ctxrelay wrote it: no checksums, the old format."""
    import lmdb

    from ctxrelay.storage.lmdb.framing import CHECKSUM_BYTES
    env = lmdb.open(str(env_dir), max_dbs=32, subdir=True)
    try:
        with env.begin(write=True) as txn:
            for name in [bytes(k) for k, _ in txn.cursor()]:
                db = env.open_db(name, txn=txn, create=False)
                items = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
                for k in dict.fromkeys(k for k, _ in items):     # dupfixed: all dups first
                    txn.delete(k, db=db)
                for k, v in items:
                    txn.put(k, v.removesuffix(b"+xxh3") if name == b"meta" and k == b"format"
                            else v[:-CHECKSUM_BYTES], db=db)
    finally:
        env.close()
