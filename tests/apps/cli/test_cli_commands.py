"""The ``ctxrelay`` commands: subprocesses of the console script, and main(argv) in-process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_support import ROOT, SCRIPT, as_json, ops, run, run_script, script_env  # noqa: F401

from ctxrelay.apps import cli
from ctxrelay.runtime import Runtime


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


def test_store_is_the_option_then_the_env_then_dot_ctxrelay(tmp_path):
    env_store, opt_store = tmp_path / "from-env", tmp_path / "from-option"
    env = script_env(**{cli.STORE_ENV: str(env_store)})
    r = run_script(None, "init", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (env_store / "transcript.lmdb").is_dir()
    assert run_script(env_store, "sessions", "create", "e", env=env).returncode == 0
    r = run_script(None, "--json", "sessions", env=env, cwd=tmp_path)          # the env's store
    assert [s["session_id"] for s in as_json(r.stdout)["sessions"]] == ["e"]
    assert run_script(opt_store, "init", env=env).returncode == 0              # --store wins
    r = run_script(opt_store, "--json", "sessions", env=env)
    assert as_json(r.stdout)["sessions"] == []
    r = run_script(None, "sessions", "--store", str(opt_store), "--json", env=env, cwd=tmp_path)
    assert as_json(r.stdout)["sessions"] == []
    assert run_script(None, "init", cwd=tmp_path).returncode == 0              # neither
    assert (tmp_path / ".ctxrelay" / "transcript.lmdb").is_dir()
    r = run_script(None, "sessions", env=script_env(**{cli.STORE_ENV: str(tmp_path / "none")}),
                   cwd=tmp_path)
    assert r.returncode == 2 and f"(from {cli.STORE_ENV})" in r.stderr


def test_doctor_reports_swi_prolog_9_and_passes(tmp_path):
    r = run_script(tmp_path / "s", "--json", "doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    report = as_json(r.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"] is True
    assert checks["swi-prolog"]["status"] == "ok"
    assert checks["swi-prolog"]["detail"].startswith("SWI-Prolog 9.")
    assert checks["embedded python"]["status"] == "ok", checks["embedded python"]
    detail = checks["embedded python"]["detail"]
    assert sys.prefix in detail or os.path.realpath(sys.prefix) in detail
    assert {"janus", "library(ctxrelay)", "tokenizers", "embedders"} <= set(checks)
    precompiled = checks["precompiled prolog"]
    assert precompiled["status"] in ("ok", "info")
    assert precompiled["detail"].startswith("library(ctxrelay) from .qlf files")
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


HEAVY = ("numpy", "torch", "tiktoken", "lmdb", "hnswlib", "igraph", "leidenalg",
         "sentence_transformers", "starlette", "uvicorn", "tqdm")


def test_help_loads_no_model_store_or_heavy_module():
    """--help pays for the package (janus, library(ctxrelay)) and argparse, nothing more."""
    code = (
        "import sys\n"
        "from ctxrelay.apps.cli import main\n"
        "for argv in (['--help'], ['turn', '--help'], ['doctor', '--help'], ['check', '--help']):\n"
        "    assert main(argv) == 0\n"
        f"print('HEAVY', sorted(n for n in sys.modules if n.split('.')[0] in {HEAVY!r}))\n"
        "print('STORES', sorted(n for n in sys.modules if n.startswith('ctxrelay.storage')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=script_env())
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout and "STORES []" in r.stdout, r.stdout


@pytest.mark.parametrize("argv", [["sessions"], ["history", "ops", "--last", "2"],
                                  ["search", "ops", "quota"], ["stats"]], ids=" ".join)
def test_store_commands_load_no_embedder_tokenizer_or_vector_index(ops, store_dir, argv):
    """Only the store's own libraries (lmdb, numpy for the text index) come in."""
    code = (
        "import sys\n"
        "from ctxrelay.apps.cli import main\n"
        f"assert main(['--store', {str(store_dir)!r}, *{argv!r}]) == 0\n"
        f"print(' '.join(sorted({{n.split('.')[0] for n in sys.modules}} & set({HEAVY!r}))))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=script_env())
    assert r.returncode == 0, r.stderr
    assert set(r.stdout.splitlines()[-1].split()) <= {"lmdb", "numpy"}, r.stdout


def test_cli_modules_import_only_the_standard_library_at_module_level():
    """Beyond what ``import ctxrelay`` loads, the CLI's modules bring in the stdlib only."""
    code = (
        "import sys\n"
        "import ctxrelay\n"
        "before = set(sys.modules)\n"
        "import ctxrelay.apps.cli\n"
        "new = set(sys.modules) - before\n"
        "ours = sorted(m for m in new if m.startswith('ctxrelay.apps.cli'))\n"
        "other = sorted(m for m in new if not m.startswith('ctxrelay.apps')\n"
        "               and m.split('.')[0] not in sys.stdlib_module_names)\n"
        "print('OTHER', other, 'OURS', len(ours))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=script_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("OTHER [] OURS "), r.stdout
    assert int(r.stdout.split()[-1]) >= 15            # one module per command group and more


def test_no_cli_module_is_long():
    for path in (ROOT / "python" / "ctxrelay" / "apps" / "cli").glob("*.py"):
        assert len(path.read_text().splitlines()) <= 400, path


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
    assert as_json(out) == {"ok": True, "session_id": "new", "turn_id": 1,
                            "created_session": True}
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
    assert as_json(out) == {"ok": True, "session_id": "ops", "turns": 3,
                            "path": str(dest.resolve())}
    rc, _, err = ops("import", str(dest))
    assert rc == 2 and "already exists" in err and "--session" in err
    rc, out, _ = ops("--json", "import", str(dest), "--session", "copy")
    assert as_json(out) == {"ok": True, "session_id": "copy", "turns": 3}
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


def test_scratch_record_of_a_file_it_cannot_read_is_a_usage_error(ops, tmp_path):
    # A missing file or a directory died with a FileNotFoundError / IsADirectoryError
    # traceback (exit 1) instead of the CLI's error line (exit 2), as import says.
    for bad in (tmp_path / "missing.txt", tmp_path):
        rc, out, err = ops("scratch", "record", "ops", "kubectl", str(bad))
        assert (rc, out) == (2, "") and "Traceback" not in err
        assert f"ctxrelay: error: {bad} is not a file" in err
    rc, out, _ = ops("scratch", "list", "ops")
    assert "no tool outputs in ops" in out                 # nothing was recorded


def test_scratch_list_of_an_unknown_session_is_an_error(ops):
    # Every other session command exits 2 for a misspelt session; this one said
    # "no tool outputs in opz" and exited 0.
    rc, out, err = ops("scratch", "list", "opz")
    assert (rc, out) == (2, "") and "no session 'opz'" in err
    rc, out, _ = ops("scratch", "list", "ops")
    assert rc == 0 and "no tool outputs in ops" in out


# -- stats ---------------------------------------------------------------------------------------

def test_store_stats(ops):
    ops("sessions", "create", "empty")
    rc, out, _ = ops("--json", "stats")
    doc = as_json(out)
    assert (doc["sessions"], doc["turns"]) == (2, 3)
    assert {s["session_id"]: s["turn_count"] for s in doc["by_session"]} == {"empty": 0, "ops": 3}


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


def test_ingest_text_that_is_not_utf8_is_a_usage_error(ops):
    # argv bytes that are not UTF-8 arrive as surrogates (surrogateescape); sizing the
    # text for the progress line raised UnicodeEncodeError with a traceback (exit 1).
    rc, out, err = ops("ingest", "--text", "quota \udcff", "--no-progress")
    assert (rc, out) == (2, "") and "surrogate" in err and "Traceback" not in err


def test_ingest_missing_path(ops, tmp_path):
    if not hasattr(Runtime, "ingest"):
        pytest.skip("Runtime.ingest is not in this version yet")
    rc, _, err = ops("ingest", str(tmp_path / "nope"))
    assert rc == 2 and "does not exist" in err


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


# -- --version, --json ---------------------------------------------------------------------

def test_version_goes_to_stdout_and_answers_json(run):
    from importlib.metadata import version
    rc, out, err = run("--version", store=None)
    assert (rc, out, err) == (0, f"ctxrelay {version('ctxrelay')}\n", "")
    for argv in (["--json", "--version"], ["--version", "--json"]):
        rc, out, err = run(*argv, store=None)
        assert rc == 0 and err == ""
        assert as_json(out) == {"ok": True, "version": version("ctxrelay")}


def test_version_from_the_console_script():
    r = run_script(None, "--version")
    assert r.returncode == 0 and r.stdout.startswith("ctxrelay ") and r.stderr == ""


SUCCESSFUL_JSON = [
    ["init"], ["sessions"], ["sessions", "show", "ops"], ["sessions", "create", "other"],
    ["sessions", "archive", "ops"], ["append", "ops", "user", "more"], ["history", "ops"],
    ["search", "ops", "quota"], ["stats"], ["stats", "ops"], ["export", "ops"],
    ["assemble", "ops", "quota?"], ["turn", "ops", "quota?"], ["check"],
    ["scratch", "list", "ops"], ["derive", "ops", "--embedder", "hashing"],
]


@pytest.mark.parametrize("argv", SUCCESSFUL_JSON, ids=" ".join)
def test_every_successful_json_document_says_ok_true(ops, argv):
    rc, out, err = ops("--json", *argv)
    assert rc == 0, err
    doc = as_json(out)
    assert next(iter(doc)) == "ok" and doc["ok"] is True, doc


def test_unknown_options_are_usage_errors_except_for_serve(ops):
    rc, out, err = ops("--json", "history", "ops", "--bogus", "1")
    assert rc == 2 and "unrecognized arguments: --bogus 1" in err
    assert as_json(out)["ok"] is False


def test_derive_brings_the_turn_log_up_to_date(ops):
    rc, out, err = ops("--json", "derive", "ops", "--embedder", "hashing")
    assert rc == 0, err
    doc = as_json(out)
    assert doc["derived"] == 3 and doc["embedder"].startswith("hashing")
    rc, out, _ = ops("--json", "derive", "ops", "--embedder", "hashing")
    assert as_json(out)["derived"] == 0                    # nothing new to derive
    rc, out, _ = ops("derive", "ops", "--embedder", "hashing", "--recompute")
    assert rc == 0 and out.startswith("ops: 3 turn(s) derived with hashing")


def test_derive_with_another_embedder_hints_at_the_cli_spelling(ops):
    # The library's message names Runtime.derive(..., recompute=True); docs/cli.md promises
    # a hint line where the CLI command differs from the Python call the message names.
    assert ops("derive", "ops", "--embedder", "hashing")[0] == 0
    rc, _, err = ops("derive", "ops", "--embedder", "minilm-onnx", "--no-progress")
    assert rc == 2 and "was derived with" in err
    assert "ctxrelay: hint: 'ctxrelay derive SESSION --embedder NAME --recompute'" in err
    rc, out, _ = ops("--json", "derive", "ops", "--embedder", "minilm-onnx")
    assert as_json(out)["error"]["kind"] == "turnlog_embedder_mismatch"


def test_the_cli_roles_are_the_library_roles() -> None:
    # The parser keeps its own copy so that `ctxrelay --help` imports no library module.
    from ctxrelay.apps.cli.common import ROLES as CLI_ROLES
    from ctxrelay.types import ROLES
    assert CLI_ROLES == ROLES


def test_python_dash_m_ctxrelay_is_the_cli():
    """``python -m ctxrelay`` runs the same parser as ``ctxrelay`` (its exit code too)."""
    ok = subprocess.run([sys.executable, "-m", "ctxrelay", "--help"], capture_output=True,
                        text=True, timeout=120, env=script_env())
    assert ok.returncode == 0, ok.stderr
    assert "usage: ctxrelay" in ok.stdout and "turn" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "ctxrelay", "no-such-command"],
                         capture_output=True, text=True, timeout=120, env=script_env())
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
