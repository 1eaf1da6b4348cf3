"""``ctxrelay serve``: the relay's options pass through; the store comes from the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
from cli_support import SCRIPT, chat, ops, run, script_env, start_relay, stop_relay  # noqa: F401

from ctxrelay.apps import cli


# -- serve -------------------------------------------------------------------------------

def test_serve_without_a_server_module(ops, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctxrelay.apps.server", None)   # as if it did not exist
    rc, _, err = ops("serve")
    assert rc == 2
    assert "server is not available in this version" in err


@pytest.fixture
def fake_server(monkeypatch):
    """A stand-in ctxrelay.apps.server whose main() records its argv."""
    seen: dict = {}

    def fake_main(argv):
        seen["argv"] = argv
        return 0
    monkeypatch.setitem(sys.modules, "ctxrelay.apps.server",
                        types.SimpleNamespace(main=fake_main, __name__="ctxrelay.apps.server"))
    return seen


def test_serve_takes_the_relays_options_directly(ops, store_dir, fake_server):
    rc, _, err = ops("serve", "--port", "8000", "--upstream", "echo", store=None)
    assert rc == 0, err
    assert fake_server["argv"] == ["--store", ".ctxrelay", "--port", "8000", "--upstream", "echo"]
    rc, _, err = ops("serve", "--store", str(store_dir), "--port", "8000", "--upstream", "echo",
                     store=None)
    assert rc == 0, err
    assert fake_server["argv"] == ["--store", str(store_dir), "--port", "8000",
                                   "--upstream", "echo"]
    rc, _, err = ops("serve", "--", "--port", "8080")       # the old spelling still works
    assert rc == 0, err
    assert fake_server["argv"] == ["--store", str(store_dir), "--port", "8080"]


def test_serve_takes_the_store_from_the_environment(ops, tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv(cli.STORE_ENV, str(tmp_path / "env-store"))
    rc, _, err = ops("serve", "--upstream", "echo", store=None)
    assert rc == 0, err
    assert fake_server["argv"] == ["--store", str(tmp_path / "env-store"), "--upstream", "echo"]
    rc, _, err = ops("--store", "explicit", "serve", "--upstream", "echo", store=None)
    assert fake_server["argv"][:2] == ["--store", "explicit"]      # --store beats the env


def test_serve_help_shows_its_examples_and_the_relays_options(capsys):
    pytest.importorskip("uvicorn")
    assert cli.main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert "ctxrelay serve --store store --port 8000 --upstream echo" in out
    assert "the relay's options" in out
    for option in ("--upstream", "--port", "--max-context-tokens", "--no-warmup"):
        assert option in out


@pytest.mark.slow
def test_the_serve_example_of_the_help_runs(tmp_path):
    """`ctxrelay serve --store store --port 8000 --upstream echo`, on a free port."""
    pytest.importorskip("uvicorn")
    proc, port = start_relay([str(SCRIPT), "serve", "--store", "store", "--port", "PORT",
                              "--upstream", "echo"], cwd=tmp_path)
    try:
        reply = chat(port, "s1", "our etcd quota is 8 GiB")
        assert reply["choices"][0]["message"]["content"].startswith("echo: ")
    finally:
        stop_relay(proc)
    assert (tmp_path / "store" / "transcript.lmdb").is_dir()      # the store it was given
    history = subprocess.run([str(SCRIPT), "--store", str(tmp_path / "store"), "--json",
                              "history", "s1"], capture_output=True, text=True, env=script_env())
    assert [t["role"] for t in json.loads(history.stdout)["turns"]] == ["user", "assistant"]


def test_serve_on_a_store_path_that_is_a_file_is_a_usage_error(tmp_path):
    # The relay started uvicorn, failed in its lifespan and exited 3 with a traceback in
    # a JSON log line; the CLI's contract is one error line and exit 2 for a bad store.
    pytest.importorskip("uvicorn")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file")
    proc = subprocess.run([sys.executable, str(SCRIPT), "serve", "--store", str(blocker),
                           "--upstream", "echo", "--port", "0", "--no-warmup"],
                          capture_output=True, text=True, env=script_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "is a file, not a directory" in proc.stderr and "Traceback" not in proc.stderr
