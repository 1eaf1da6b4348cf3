"""The ``ctxrelay`` command line: subprocesses of the console script, and main(argv) in-process."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ctxrelay.apps import cli
from ctxrelay.runtime import Runtime

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".venv" / "bin" / "ctxrelay"


def run_script(store: Path, *args: str, input: str | None = None,
               cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed console script, in a subprocess, with --store (unless None)."""
    env = {k: v for k, v in os.environ.items() if k != cli.STORE_ENV}
    argv = [str(SCRIPT), *(["--store", str(store)] if store is not None else []), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                          input=input if input is not None else "", cwd=cwd or store.parent)


@pytest.fixture
def run(store_dir, capsys, monkeypatch):
    """main(["--store", store, *argv]) in-process; returns (exit code, stdout, stderr)."""
    monkeypatch.delenv(cli.STORE_ENV, raising=False)

    def call(*argv: str, store: Path | None = store_dir) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = cli.main([*(["--store", str(store)] if store is not None else []), *argv])
        out, err = capsys.readouterr()
        return rc, out, err
    return call


@pytest.fixture
def ops(run):
    """A store with session 'ops' and three turns."""
    assert run("init")[0] == 0
    assert run("sessions", "create", "ops")[0] == 0
    for role, text in (("user", "our etcd quota is 8 GiB"),
                       ("assistant", "Noted: --quota-backend-bytes=8589934592."),
                       ("user", "the defrag window is Sunday 02:00 UTC")):
        assert run("append", "ops", role, text)[0] == 0
    return run


def as_json(out: str) -> dict:
    return json.loads(out)


# -- the console script, end to end -----------------------------------------------------

def test_round_trip_through_the_console_script(tmp_path):
    assert SCRIPT.exists(), "run .venv/bin/pip install -e . --no-deps to create the script"
    a, b = tmp_path / "a", tmp_path / "b"
    r = run_script(a, "init")
    assert r.returncode == 0, r.stderr
    assert "initialised" in r.stdout
    assert run_script(a, "sessions", "create", "ops").returncode == 0
    r = run_script(a, "append", "ops", "user", "our etcd quota is 8 GiB", "--key", "m1")
    assert (r.returncode, r.stdout.strip()) == (0, "ops #1")
    r = run_script(a, "append", "ops", "assistant", "-", input="Noted: quota-backend-bytes.")
    assert (r.returncode, r.stdout.strip()) == (0, "ops #2")

    r = run_script(a, "history", "ops")
    assert r.returncode == 0
    assert "#1 user" in r.stdout and "our etcd quota is 8 GiB" in r.stdout
    assert "#2 assistant" in r.stdout

    r = run_script(a, "--json", "search", "ops", "quota")
    assert r.returncode == 0, r.stderr
    assert {h["turn_id"] for h in as_json(r.stdout)["hits"]} == {1, 2}

    r = run_script(a, "turn", "ops", "what was the quota again?", "--max-context-tokens", "4096",
                   "--output-reserve", "512", "--safety-margin", "64", "--min-recent-turns", "2",
                   "--provider", "echo")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("echo: ") and "what was the quota again?" in r.stdout

    r = run_script(a, "assemble", "ops", "and the defrag plan?", "--explain",
                   "--max-context-tokens", "2048")
    assert r.returncode == 0, r.stderr
    for heading in ("pack:", "ledger (", "headers:", "CRP-Context-Tokens-Used", "total"):
        assert heading in r.stdout
    assert run_script(a, "--json", "stats", "ops").returncode == 0
    assert as_json(run_script(a, "--json", "stats", "ops").stdout)["turn_count"] == 4

    exported = run_script(a, "export", "ops")
    assert exported.returncode == 0
    assert len(exported.stdout.splitlines()) == 5          # header + 4 turns
    assert run_script(b, "init").returncode == 0
    r = run_script(b, "import", "-", input=exported.stdout)
    assert (r.returncode, r.stdout.strip()) == (0, "imported ops (4 turns)")
    again = run_script(b, "export", "ops")
    assert [json.loads(x)["content"] for x in again.stdout.splitlines()[1:]] == \
        [json.loads(x)["content"] for x in exported.stdout.splitlines()[1:]]
    assert run_script(b, "check").returncode == 0


def test_script_errors_go_to_stderr_with_exit_codes(tmp_path):
    store = tmp_path / "s"
    r = run_script(store, "sessions")
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith("ctxrelay: error: no ctxrelay store at")
    assert "init" in r.stderr
    assert not store.exists()                     # a read command never creates a store
    assert run_script(store, "init").returncode == 0
    r = run_script(store, "append", "nope", "user", "hi")
    assert r.returncode == 2
    assert "ctxrelay: error: no session" in r.stderr and "nope" in r.stderr
    assert "ctxrelay sessions create" in r.stderr          # the hint says what to do
    r = run_script(store, "append", "nope", "robot", "hi")
    assert r.returncode == 2 and "invalid choice: 'robot'" in r.stderr


def test_store_defaults_to_env_then_dot_ctxrelay(tmp_path):
    env_store = tmp_path / "from-env"
    env = {**{k: v for k, v in os.environ.items() if k != cli.STORE_ENV},
           cli.STORE_ENV: str(env_store)}
    r = subprocess.run([str(SCRIPT), "init"], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (env_store / "transcript.lmdb").is_dir()
    assert run_script(None, "init", cwd=tmp_path).returncode == 0
    assert (tmp_path / ".ctxrelay" / "transcript.lmdb").is_dir()


def test_doctor_reports_swi_prolog_9_and_passes(tmp_path):
    r = run_script(tmp_path / "s", "--json", "doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    report = as_json(r.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"] is True
    assert checks["swi-prolog"]["status"] == "ok"
    assert checks["swi-prolog"]["detail"].startswith("SWI-Prolog 9.")
    assert checks["embedded python"]["status"] == "ok", checks["embedded python"]
    assert sys.prefix in checks["embedded python"]["detail"]
    assert {"janus", "library(ctxrelay)", "tokenizers", "embedders"} <= set(checks)
    text = run_script(tmp_path / "s", "doctor")
    assert text.returncode == 0 and "ok   swi-prolog: SWI-Prolog 9." in text.stdout


# -- help --------------------------------------------------------------------------------

def _commands() -> list[list[str]]:
    parser = cli.build_parser()
    top = next(a for a in parser._actions if a.dest == "command")
    found = []
    for name, sub in top.choices.items():
        found.append([name])
        for action in sub._actions:
            if action.dest in ("sessions_cmd", "facts_cmd", "scratch_cmd"):
                found += [[name, inner] for inner in action.choices]
    return found


@pytest.mark.parametrize("argv", [[]] + _commands(), ids=lambda a: " ".join(a) or "ctxrelay")
def test_every_help_shows_an_example(argv, capsys):
    assert cli.main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    example_lines = [ln.strip() for ln in out.split("examples:", 1)[1].splitlines()
                     if ln.strip().startswith(("ctxrelay ", "OPENAI_API_KEY")) or " | ctxrelay " in ln]
    assert example_lines, out
    assert any(" ".join(["ctxrelay", *argv]) in ln for ln in example_lines), out


def test_expected_commands_exist():
    names = {c[0] for c in _commands()}
    assert names >= {"init", "sessions", "append", "history", "search", "turn", "assemble",
                     "ingest", "facts", "scratch", "stats", "export", "import", "check",
                     "serve", "doctor"}


def test_help_path_imports_only_the_standard_library():
    """cli.py loaded on its own (not as ctxrelay.apps.cli) answers --help without the package."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('cli_alone', {str(cli.__file__)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "for argv in (['--help'], ['turn', '--help'], ['doctor', '--help']):\n"
        "    try:\n"
        "        m.main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(n for n in sys.modules if n.split('.')[0] in\n"
        "               ('ctxrelay', 'janus_swi', 'numpy', 'torch', 'tiktoken', 'lmdb'))\n"
        "print('HEAVY', heavy)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout


def test_cli_roles_match_the_library():
    from ctxrelay.types import ROLES
    assert cli.ROLES == ROLES


# -- sessions, append, history, search ---------------------------------------------------

def test_sessions_json_and_show(ops):
    rc, out, _ = ops("--json", "sessions")
    assert rc == 0
    [s] = as_json(out)["sessions"]
    assert (s["session_id"], s["turn_count"], s["archived"]) == ("ops", 3, False)
    rc, out, _ = ops("sessions", "create", "b", "--metadata", '{"team": "sre"}', "--json")
    assert rc == 0 and as_json(out)["metadata"] == {"team": "sre"}
    rc, out, _ = ops("sessions", "archive", "b")
    assert rc == 0 and "archived session b" in out
    rc, out, _ = ops("--json", "sessions", "show", "b")
    assert as_json(out)["archived"] is True
    rc, _, err = ops("append", "b", "user", "more")
    assert rc == 2 and err.startswith("ctxrelay: error: ")


def test_append_json_key_and_create(run):
    run("init")
    rc, out, err = run("--json", "append", "new", "user", "hello", "--create", "--key", "k1",
                       "--metadata", '{"source": "cli"}')
    assert rc == 0, err
    assert as_json(out) == {"session_id": "new", "turn_id": 1, "created_session": True}
    rc, out, _ = run("--json", "append", "new", "user", "hello", "--key", "k1",
                     "--metadata", '{"source": "cli"}')
    assert as_json(out)["turn_id"] == 1                     # idempotent by key
    rc, out, _ = run("--json", "history", "new")
    [turn] = as_json(out)["turns"]
    assert (turn["key"], turn["metadata"], turn["content"]) == ("k1", {"source": "cli"}, "hello")


def test_history_ranges(ops):
    def ids(*argv: str) -> list[int]:
        rc, out, err = ops("--json", "history", "ops", *argv)
        assert rc == 0, err
        return [t["turn_id"] for t in as_json(out)["turns"]]
    assert ids() == [1, 2, 3]
    assert ids("--start", "2") == [2, 3]
    assert ids("--start", "2", "--end", "2") == [2]
    assert ids("--end", "2") == [1, 2]
    assert ids("--last", "2") == [2, 3]
    assert ids("--last", "0") == []
    rc, _, err = ops("history", "ops", "--last", "2", "--start", "1")
    assert rc == 2 and "--last cannot be combined" in err
    rc, _, err = ops("history", "ops", "--start", "3", "--end", "1")
    assert rc == 2 and "before --start" in err
    rc, _, err = ops("history", "ops", "--start", "0")
    assert rc == 2 and "less than 1" in err


def test_search_json_fields(ops):
    rc, out, _ = ops("search", "ops", "defrag", "--json", "-k", "1")
    assert rc == 0
    doc = as_json(out)
    assert doc["query"] == "defrag"
    [hit] = doc["hits"]
    assert set(hit) == {"session_id", "turn_id", "score", "role", "content", "tokens"}
    assert hit["turn_id"] == 3
    rc, out, _ = ops("search", "ops", "zzzznothing")
    assert rc == 0 and "no turn of ops matches" in out


# -- managed turns and packs -------------------------------------------------------------

def test_turn_json_and_idempotent_key(ops):
    rc, out, err = ops("--json", "turn", "ops", "what was the quota?", "--key", "t1",
                       "--max-context-tokens", "4096", "--output-reserve", "256")
    assert rc == 0, err
    doc = as_json(out)
    assert doc["reply"].startswith("echo: ")
    assert (doc["user_turn"], doc["assistant_turn"]) == (4, 5)
    assert set(doc) >= {"headers", "ledger", "pack", "status", "messages", "utility"}
    assert doc["ledger"]["effective_cap"] == 4096 and doc["ledger"]["output_reserve"] == 256
    assert doc["ledger"]["total"] <= doc["ledger"]["input_budget"]
    assert doc["messages"][-1] == {"role": "user", "content": "what was the quota?"}
    rc, out, _ = ops("--json", "turn", "ops", "what was the quota?", "--key", "t1")
    assert (as_json(out)["user_turn"], as_json(out)["assistant_turn"]) == (4, 5)
    rc, out, _ = ops("--json", "stats", "ops")
    assert as_json(out)["turn_count"] == 5


def test_turn_explain_prints_pack_ledger_headers(ops):
    rc, out, err = ops("turn", "ops", "and the defrag plan?", "--explain",
                       "--no-cold-history-boundary", "--min-recent-turns", "1")
    assert rc == 0, err
    reply, explain = out.split("\n\n", 1)
    assert reply.startswith("echo: ")
    assert "pack:" in explain and "unit" in explain and "kind" in explain
    assert "ledger (" in explain and "effective cap 8192" in explain
    assert "CRP-Context-Tokens-Used:" in explain
    assert "turns: user #4, assistant #5" in explain


def test_policy_flags_reach_the_runtime(ops):
    rc, out, err = ops("--json", "assemble", "ops", "quota?", "--max-context-tokens", "3000",
                       "--provider-context-tokens", "2000", "--output-reserve", "100",
                       "--safety-margin", "50")
    assert rc == 0, err
    lg = as_json(out)["ledger"]
    assert (lg["effective_cap"], lg["output_reserve"], lg["safety_margin"]) == (2000, 100, 50)
    assert lg["input_budget"] == 2000 - 100 - 50
    rc, out, _ = ops("--json", "stats", "ops")
    assert as_json(out)["turn_count"] == 3                  # assemble appends nothing


def test_context_overflow_exits_1_with_figures(ops):
    rc, out, err = ops("turn", "ops", "hello", "--max-context-tokens", "40",
                       "--output-reserve", "10", "--safety-margin", "5")
    assert rc == 1
    assert out == ""
    assert err.startswith("ctxrelay: error: context overflow")
    assert "input_budget = 25" in err and "Fix:" in err


def test_unknown_provider_and_bad_numbers(ops):
    rc, _, err = ops("turn", "ops", "hi", "--provider", "nope")
    assert rc == 2 and "unknown provider 'nope'" in err
    rc, _, err = ops("turn", "ops", "hi", "--max-context-tokens", "lots")
    assert rc == 2 and "'lots' is not an integer" in err


def test_openai_provider_unreachable_is_a_failure(ops):
    rc, _, err = ops("turn", "ops", "hi", "--provider", "openai", "--model", "m",
                     "--base-url", "http://127.0.0.1:9/v1", "--api-key", "x", "--timeout", "5")
    assert rc == 1
    assert err.startswith("ctxrelay: error: ")


def test_assemble_messages(ops):
    rc, out, err = ops("assemble", "ops", "status?", "--messages")
    assert rc == 0, err
    assert "messages (" in out and "[user]" in out and "status?" in out
    assert "--explain shows the ledger" in out


# -- export / import ---------------------------------------------------------------------

def test_export_file_and_import_under_new_id(ops, tmp_path):
    dest = tmp_path / "ops.jsonl"
    rc, out, err = ops("--json", "export", "ops", "-o", str(dest))
    assert rc == 0, err
    assert as_json(out) == {"session_id": "ops", "turns": 3, "path": str(dest.resolve())}
    rc, _, err = ops("import", str(dest))
    assert rc == 2 and "already exists" in err and "--session" in err
    rc, out, _ = ops("--json", "import", str(dest), "--session", "copy")
    assert as_json(out) == {"session_id": "copy", "turns": 3}
    rc, out, _ = ops("--json", "export", "copy")
    lines = as_json(out)["jsonl"].splitlines()
    assert json.loads(lines[0])["session_id"] == "copy" and len(lines) == 4


def test_import_bad_input(ops, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')
    rc, _, err = ops("import", str(bad))
    assert rc == 2 and "line 1" in err
    rc, _, err = ops("import", str(tmp_path / "missing.jsonl"))
    assert rc == 2 and "is not a file" in err


# -- scratch -----------------------------------------------------------------------------

def test_scratch_record_list_show_raw_pin(ops, tmp_path):
    output = "".join(f"pod-{i} Running\n" for i in range(40))
    f = tmp_path / "pods.txt"
    f.write_text(output)
    rc, out, err = ops("scratch", "record", "ops", "kubectl", str(f), "--args", '{"cmd": "get pods"}')
    assert rc == 0, err
    sid = out.strip()
    assert sid.startswith("scr_")
    rc, out, _ = ops("--json", "scratch", "list", "ops")
    [entry] = as_json(out)["entries"]
    assert (entry["scratch_id"], entry["tool_name"], entry["pinned"]) == (sid, "kubectl", False)
    rc, out, _ = ops("scratch", "show", "ops", sid)
    assert "summary:" in out and "tool_name: kubectl" in out
    rc, out, _ = ops("scratch", "show", "ops", sid, "--raw")
    assert out == output
    rc, out, _ = ops("scratch", "pin", "ops", sid)
    assert rc == 0 and f"pinned {sid}" in out
    rc, out, _ = ops("--json", "scratch", "show", "ops", sid)
    assert as_json(out)["pinned"] is True
    rc, _, err = ops("scratch", "show", "ops", "scr_nope")
    assert rc == 2 and "scratch id" in err


# -- stats, check ------------------------------------------------------------------------

def test_store_stats(ops):
    ops("sessions", "create", "empty")
    rc, out, _ = ops("--json", "stats")
    doc = as_json(out)
    assert (doc["sessions"], doc["turns"]) == (2, 3)
    assert {s["session_id"]: s["turn_count"] for s in doc["by_session"]} == {"empty": 0, "ops": 3}


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
    assert "turn 2 does not parse" in problems


def test_check_unknown_session(ops):
    rc, _, err = ops("check", "ghost")
    assert rc == 2 and "no session 'ghost'" in err


# -- knowledge store ---------------------------------------------------------------------

def test_ingest_and_facts_say_when_this_version_lacks_them(ops, tmp_path, monkeypatch):
    for name in ("ingest", "facts", "fact"):
        monkeypatch.delattr(Runtime, name, raising=False)
    doc = tmp_path / "runbook.md"
    doc.write_text("# etcd\nThe quota is 8 GiB.\n")
    for argv in (["ingest", str(doc)], ["facts", "search", "quota"], ["facts", "show", "k"]):
        rc, out, err = ops(*argv)
        assert rc == 2, argv
        assert err.startswith("ctxrelay: error: the knowledge store is not available in this "
                              "version of ctxrelay")
    rc, out, err = ops("--json", "ingest", str(doc))
    assert rc == 2 and as_json(out)["error"]["exit_code"] == 2


@pytest.mark.skipif(not hasattr(Runtime, "ingest"),
                    reason="Runtime.ingest is not in this version yet (the error path is tested)")
def test_ingest_directory_then_search_and_show(ops, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "etcd.md").write_text("# etcd\nThe etcd quota is 8 GiB; defrag on Sundays.\n")
    (docs / "backup.txt").write_text("Restic backups run nightly at 01:00 UTC.\n")
    rc, out, err = ops("--json", "ingest", str(docs), "--no-progress")
    assert rc == 0, err
    report = as_json(out)
    assert report.get("documents", 2) == 2
    rc, out, err = ops("--json", "facts", "search", "etcd quota", "-k", "1")
    assert rc == 0, err
    [hit] = as_json(out)["facts"]
    fact = hit.get("fact", hit)
    assert "8 GiB" in fact["content"]
    rc, out, err = ops("--json", "facts", "show", fact["fact_id"])
    assert rc == 0, err
    assert as_json(out)["fact_id"] == fact["fact_id"]


def test_ingest_missing_path(ops, tmp_path):
    if not hasattr(Runtime, "ingest"):
        pytest.skip("Runtime.ingest is not in this version yet")
    rc, _, err = ops("ingest", str(tmp_path / "nope"))
    assert rc == 2 and "does not exist" in err


# -- serve -------------------------------------------------------------------------------

def test_serve_without_a_server_module(ops, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctxrelay.apps.server", None)   # as if it did not exist
    rc, _, err = ops("serve")
    assert rc == 2
    assert "server is not available in this version" in err


def test_serve_delegates_to_server_main(ops, store_dir, monkeypatch):
    seen = {}

    def fake_main(argv):
        seen["argv"], seen["store"] = argv, os.environ.get(cli.STORE_ENV)
        return 0
    monkeypatch.setitem(sys.modules, "ctxrelay.apps.server",
                        types.SimpleNamespace(main=fake_main, __name__="ctxrelay.apps.server"))
    monkeypatch.delenv(cli.STORE_ENV, raising=False)
    rc, _, err = ops("serve", "--", "--port", "8080")
    assert rc == 0, err
    assert seen == {"argv": ["--port", "8080"], "store": str(store_dir)}


# -- usage errors ------------------------------------------------------------------------

def test_usage_errors_exit_2_and_answer_json(run):
    rc, out, err = run("--json", "history")
    assert rc == 2 and "required: SESSION" in err
    assert as_json(out)["error"]["kind"] == "usage"
    rc, _, err = run("frobnicate")
    assert rc == 2 and "invalid choice: 'frobnicate'" in err
    run("init")
    rc, _, err = run("append", "x", "user", "hi", "--metadata", "[1, 2]", "--create")
    assert rc == 2 and "must be a JSON object" in err
    rc, _, err = run("append", "x", "user", "hi", "--metadata", "{oops", "--create")
    assert rc == 2 and "is not valid JSON" in err


def test_missing_store_in_process(run, tmp_path):
    rc, out, err = run("--json", "history", "ops", store=tmp_path / "nowhere")
    assert rc == 2
    assert "no ctxrelay store at" in err
    assert as_json(out) == {"ok": False, "error": {
        "kind": "usage", "message": as_json(out)["error"]["message"], "exit_code": 2}}
    assert not (tmp_path / "nowhere").exists()


def test_init_refuses_a_file(run, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    rc, _, err = run("init", store=f)
    assert rc == 2 and "not a directory" in err


def test_json_flag_after_the_command(ops):
    rc, out, _ = ops("sessions", "--json")
    assert rc == 0 and as_json(out)["sessions"][0]["session_id"] == "ops"
    rc, out, _ = ops("--json", "init")
    assert as_json(out)["created"] is False and as_json(out)["sessions"] == 1
