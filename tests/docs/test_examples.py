"""Every example runs as written, and the Prolog side installs as a pack.

Each example runs in its own subprocess with a fresh store under tmp_path
(passed with --store, or as the argument of the Prolog example); the test
asserts exit status 0 and a few lines of the output, so a broken example
fails here.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, run_swipl

EXAMPLES = ROOT / "examples"


def run_example(args: list[str], *, timeout: float = 300,
                stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, \
        f"{args[0]} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_agent_session_pl(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = run_swipl([str(EXAMPLES / "agent_session.pl"), str(store)])
    out = proc.stdout
    assert proc.returncode == 0, f"agent_session.pl failed:\n{out}\n{proc.stderr}"
    assert "8 turns stored" in out
    assert out.count("\n< echo: ") == 3                 # three managed turns answered
    # The small cap leaves stored turns out of the pack: the boundary says so.
    not_shown = [int(n) for n in re.findall(r"cold-history boundary: .*, (\d+) not shown", out)]
    assert not_shown and max(not_shown) > 0, out
    assert "peek(item(1)): #1 user: Our etcd cluster" in out
    assert "slice(3, 2): #4 assistant: Quota noted: 8 GiB." in out
    assert re.search(r'search\("fsync compaction"\): #7 ', out), out
    assert "input(context) peek(tail(2)): 2 of 14 turns" in out
    utilities = [float(u) for u in re.findall(r"alternative \d: utility ([\d.]+)", out)]
    assert len(utilities) == 3 and utilities == sorted(utilities, reverse=True), out
    assert store.is_dir()                               # the store was created where asked


def test_chat_loop_script(tmp_path: Path) -> None:
    out = run_example([str(EXAMPLES / "chat_loop.py"), "--store", str(tmp_path / "store"),
                       "--script"]).stdout
    totals = [int(t) for t in re.findall(r"ledger total (\d+) of input budget", out)]
    assert len(totals) == 4, out
    assert totals[-1] > totals[0]                       # history is carried along
    assert "< echo: 1 messages, roles=user" in out
    assert "last user: what was the quota again?" in out


def test_chat_loop_stdin(tmp_path: Path) -> None:
    out = run_example([str(EXAMPLES / "chat_loop.py"), "--store", str(tmp_path / "store")],
                      stdin="hello there\nwhat did I say?\n\nnot read\n").stdout
    assert out.count("ledger total") == 2, out          # the empty line ends the loop
    assert "last user: what did I say?" in out
    assert "not read" not in out


def test_ingest_and_ask(tmp_path: Path) -> None:
    out = run_example([str(EXAMPLES / "ingest_and_ask.py"), "--store",
                       str(tmp_path / "store")]).stdout
    assert "ingested 3 documents into namespace 'docs'" in out
    quota = out.split("? How large is the etcd backend quota?")[1].splitlines()[1]
    assert "[etcd_runbook.md" in quota, out            # the top fact for the question
    backups = out.split("? Where are the backups stored")[1].splitlines()[1]
    assert "[backup_policy.md" in backups, out


def test_tool_outputs(tmp_path: Path) -> None:
    out = run_example([str(EXAMPLES / "tool_outputs.py"), "--store",
                       str(tmp_path / "store")]).stdout
    assert re.search(r"^scratch id: scr_[0-9a-f]+$", out, re.M), out
    assert "columns: order_id, region, amount_eur, status" in out
    assert "verbatim raw rows in the request: 0 of 400" in out
    assert "raw rows absent from the request: True" in out
    assert "raw read on demand: 400 rows, identical to the tool output: True" in out


def test_relay_client() -> None:
    out = run_example([str(EXAMPLES / "relay_client.py")]).stdout
    assert "> what was the quota again?" in out
    assert "3 messages, roles=user,assistant,user" in out
    assert re.search(r"crp-context-tokens-used: \d+/\d+", out, re.I), out


def test_demo(tmp_path: Path) -> None:
    store = tmp_path / "store"
    out = run_example([str(EXAMPLES / "demo.py"), "--store", str(store)], timeout=600).stdout
    assert f"store: {store}" in out
    assert "== stored: session 'ops': 75 turns" in out
    assert out.count("== managed turn:") == 3
    assert "== alternatives for the last question" in out


def test_pack_install_provides_the_library(tmp_path: Path) -> None:
    """pack_install/2 from a local directory, then library(ctxrelay) from the pack alone
    (the procedure docs/prolog_pack.md shows, under tmp_path).

    The source directory links pack.pl, prolog/ and python/ of the checkout:
    the checkout's root Makefile would make pack_install run it as a
    foreign build (make; make install), which is not what installs this
    pack.  The second swipl is started without -p library=prolog/, so only
    the attached pack can provide library(ctxrelay).
    """
    source, packs, store = tmp_path / "src" / "ctxrelay", tmp_path / "packs", tmp_path / "store"
    source.mkdir(parents=True)
    packs.mkdir()
    for name in ("pack.pl", "prolog", "python"):
        (source / name).symlink_to(ROOT / name)
    install = ("pack_install(Url, [interactive(false), pack_directory(Packs), link(true),"
               " register(false)]), halt")
    proc = run_swipl(["-g", f"Url = '{source.as_uri()}', Packs = '{packs}', {install}"])
    assert proc.returncode == 0, f"pack_install failed:\n{proc.stdout}\n{proc.stderr}"
    assert (packs / "ctxrelay" / "pack.pl").exists()

    swipl = (ROOT / ".deps" / "swipl-path").read_text().strip()
    goal = (f"attach_packs('{packs}', []), use_module(library(ctxrelay)),"
            " module_property(ctxrelay, file(F)), format('loaded ~w~n', [F]),"
            " pack_property(ctxrelay, version(V)), format('version ~w~n', [V]),"
            f" store_open('{store}', S), session_create(S, p, []),"
            " turn_append(S, p, message(user, \"hi\"), Id), format('turn ~w~n', [Id]), halt")
    env = {**os.environ, "VIRTUAL_ENV": str(ROOT / ".venv")}
    proc = subprocess.run([swipl, "-g", goal], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"library(ctxrelay) from the pack:\n{proc.stdout}\n{proc.stderr}"
    assert f"loaded {packs}/ctxrelay/prolog/ctxrelay.pl" in proc.stdout
    assert "version 0.1.0" in proc.stdout
    assert "turn 1" in proc.stdout
