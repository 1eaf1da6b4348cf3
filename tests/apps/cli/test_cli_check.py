"""``ctxrelay check``: what it finds, what it prints (bounded), its progress lines."""
from __future__ import annotations

import io
import json
import struct
import time
from pathlib import Path

import pytest
from cli_support import as_json, ops, run, run_script  # noqa: F401

from ctxrelay.apps.cli.progress import Progress


def test_check_passes_on_a_healthy_store(ops):
    rc, out, err = ops("--json", "check")
    assert rc == 0, out + err
    doc = as_json(out)
    assert doc["ok"] is True and doc["problems"] == 0
    [report] = doc["sessions"]
    assert report["turns"] == 3 and report["search"].startswith("turn 3 found")


def _damage(store: Path, turn_id: int, value: bytes | None) -> None:
    """Rewrite or delete one turn record of the store's first session, below the API.

    Uses the on-disk layout documented in ctxrelay.storage.lmdb.transcript (database ``turns``,
    key = session number + turn id, both u64 big-endian; the first session is 1),
    through py-lmdb only: no private ctxrelay API.
    """
    import lmdb
    env = lmdb.open(str(store / "transcript.lmdb"), max_dbs=64, subdir=True)
    try:
        with env.begin(write=True) as txn:
            turns = env.open_db(b"turns", txn=txn, create=False)
            key = struct.pack(">QQ", 1, turn_id)
            assert txn.get(key, db=turns) is not None
            if value is None:
                txn.delete(key, db=turns)
            else:
                txn.put(key, value, db=turns)
    finally:
        env.close()


def _store_with_turns(tmp_path: Path, n: int) -> Path:
    store = tmp_path / "damaged"
    assert run_script(store, "init").returncode == 0
    jsonl = "\n".join([json.dumps({"type": "session", "session_id": "ops",
                                   "created": "2026-01-01T00:00:00Z", "metadata": {},
                                   "archived": False, "turn_count": n})] +
                      [json.dumps({"type": "turn", "session_id": "ops", "turn_id": i,
                                   "role": "user", "content": f"note {i} about widget{i}",
                                   "timestamp": "2026-01-01T00:00:00Z"})
                       for i in range(1, n + 1)]) + "\n"
    assert run_script(store, "import", "-", input=jsonl).returncode == 0
    return store


def test_check_finds_a_missing_turn(tmp_path):
    store = _store_with_turns(tmp_path, 4)
    _damage(store, 2, None)
    r = run_script(store, "--json", "check")
    assert r.returncode == 1, r.stdout + r.stderr
    [report] = as_json(r.stdout)["sessions"]
    problems = "\n".join(report["problems"])
    assert "not contiguous 1..n: missing 2" in problems
    assert "counter turn_count is 4 but the stored turns give 3" in problems
    text = run_script(store, "check")
    assert text.returncode == 1 and "FAIL ops" in text.stdout


def test_check_finds_an_unparsable_turn(tmp_path):
    store = _store_with_turns(tmp_path, 3)
    _damage(store, 2, b"{not json")
    r = run_script(store, "--json", "check")
    assert r.returncode == 1, r.stdout + r.stderr
    problems = "\n".join(as_json(r.stdout)["sessions"][0]["problems"])
    assert "turn 2 is damaged" in problems and "fails its checksum" in problems


def test_check_unknown_session(ops):
    rc, _, err = ops("check", "ghost")
    assert rc == 2 and "no session 'ghost'" in err


# -- an empty session ------------------------------------------------------------------------

def test_check_passes_on_a_fresh_store_with_one_empty_session(tmp_path):
    store = tmp_path / "fresh"
    assert run_script(store, "init").returncode == 0
    assert run_script(store, "sessions", "create", "e1").returncode == 0
    r = run_script(store, "check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok   e1: 0 turns" in r.stdout


# -- bounded output -------------------------------------------------------------------------

def test_check_of_a_huge_turn_prints_a_bounded_report(ops):
    huge = "x" * 1_000_000                      # one 1 MB "word": the search check's query
    assert ops("append", "ops", "user", huge)[0] == 0
    rc, out, err = ops("check", "ops")
    assert rc == 0, out + err
    assert len(out) < 2_000, out[:300]
    assert "(1,000,000 characters)" in out and "turn 4 found for 'xxxx" in out
    rc, out, _ = ops("--json", "check", "ops")
    [report] = as_json(out)["sessions"]
    assert len(report["search"]) < 200 and report["search"].startswith("turn 4 found")


def test_a_long_problem_line_is_cut_and_says_where_the_rest_is(ops, monkeypatch):
    from ctxrelay.apps.cli import check
    long_problem = "posting mismatch " + "y" * 10_000
    real = check._check_session

    def with_problem(rt, store, session_id):
        report = real(rt, store, session_id)
        return {**report, "problems": [long_problem], "ok": False}
    monkeypatch.setattr(check, "_check_session", with_problem)
    rc, out, _ = ops("check", "ops")
    assert rc == 1
    line = next(ln for ln in out.splitlines() if "posting mismatch" in ln)
    assert len(line) < 700
    assert "more characters; 'ctxrelay --json check' prints it whole" in line
    rc, out, _ = ops("--json", "check", "ops")
    assert as_json(out)["sessions"][0]["problems"] == [long_problem]


# -- progress -------------------------------------------------------------------------------

def test_check_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    store = _store_with_turns(tmp_path, 3)
    r = run_script(store, "check", "--progress-interval", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stderr.splitlines()
    assert "ctxrelay: check: checking ops (1 of 1 sessions)" in lines
    assert lines[-1].startswith("ctxrelay: check: done in ")
    quiet = run_script(store, "check")          # a short check prints no progress line
    assert quiet.returncode == 0 and quiet.stderr == ""
    silent = run_script(store, "check", "--no-progress", "--progress-interval", "0")
    assert silent.stderr == ""


class _Log(io.StringIO):
    def isatty(self) -> bool:
        return False


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_prints_a_line_every_interval_while_work_runs():
    log = _Log()
    with Progress("ingest", interval=0.05, stream=log) as p:
        p.status("ingesting 1 file (773 KB)")
        assert p.bar is False
        time.sleep(0.5)
    lines = log.getvalue().splitlines()
    ticks = [ln for ln in lines if ln.startswith("ctxrelay: ingest: ingesting 1 file (773 KB), ")]
    assert len(ticks) >= 2 and all(ln.endswith(" elapsed") for ln in ticks), lines
    assert lines[-1].startswith("ctxrelay: ingest: done in ")


def test_progress_leaves_a_terminal_to_the_bar_and_says_nothing_when_quick():
    term = _Terminal()
    with Progress("ingest", interval=0.01, stream=term) as p:
        assert p.bar is True
        time.sleep(0.05)
    assert term.getvalue() == ""
    log = _Log()
    with Progress("check", interval=60, stream=log) as p:
        p.status("checking")
    assert log.getvalue() == ""                  # done before the first line was due
    with pytest.raises(RuntimeError):
        with Progress("check", interval=0, stream=log) as p:
            p.status("checking a")
            raise RuntimeError("boom")
    assert log.getvalue().splitlines()[-1].startswith("ctxrelay: check: failed after ")


def test_ingest_prints_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    store = tmp_path / "s"
    assert run_script(store, "init").returncode == 0
    doc = tmp_path / "runbook.md"
    doc.write_text("# etcd\nThe quota is 8 GiB.\n")
    r = run_script(store, "ingest", str(doc), "--progress-interval", "0")
    assert r.returncode == 0, r.stderr
    assert "ctxrelay: ingest: ingesting 1 file (" in r.stderr
    assert "ctxrelay: ingest: done in " in r.stderr and "1 document(s)" in r.stderr
