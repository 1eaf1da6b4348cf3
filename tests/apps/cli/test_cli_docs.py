"""Every command docs/cli.md shows runs, as written, and succeeds."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from cli_support import ROOT, SCRIPT, chat, script_env, start_relay, stop_relay
from support import fenced_blocks

from ctxrelay.apps import cli

DOC = ROOT / "docs" / "cli.md"


def blocks(language: str) -> list[list[str]]:
    """The lines of each fenced block of ``language`` ('' for unlabelled blocks)."""
    return [lines for lang, lines in fenced_blocks(DOC) if lang == language]


def shell_env() -> dict[str, str]:
    """This checkout's console script first on PATH, no store preset."""
    return script_env(PATH=f"{SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}")


def run_line(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["bash", "-c", f"set -euo pipefail\n{line}"], cwd=cwd, env=shell_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"docs/cli.md: `{line}` exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def command_blocks() -> list[list[str]]:
    return [b for b in blocks("sh") if not any(" serve " in f" {ln} " for ln in b)]


def serve_lines() -> list[str]:
    return [ln for b in blocks("sh") for ln in b if " serve " in f" {ln} "]


def transcripts() -> list[tuple[str, list[str]]]:
    """Unlabelled blocks that show a command (``$ ctxrelay ...``) and its output."""
    return [(b[0][2:], b[1:]) for b in blocks("") if b and b[0].startswith("$ ctxrelay ")]


def test_the_doc_has_examples_to_run():
    assert len(command_blocks()) >= 2 and len(serve_lines()) >= 2 and transcripts()


@pytest.mark.slow
def test_every_command_shown_in_docs_cli_md_runs(tmp_path):
    for i, block in enumerate(command_blocks()):
        cwd = tmp_path / f"block{i}"
        cwd.mkdir()
        for line in block:
            run_line(line, cwd)
        if i == 0:                      # the tour's store is the one the transcript shows
            tour = cwd
    for command, expected in transcripts():
        out = run_line(command, tour).stdout.splitlines()
        # Numbers and digests vary with the tokenizer and embedder: each line the doc
        # shows must start a line of the real output with the same first word.
        starts = {ln.split()[0] for ln in out if ln.split()}
        for shown in expected:
            if shown.strip() != "...":
                assert shown.split()[0] in starts, (shown, out)


@pytest.mark.slow
def test_every_serve_line_shown_in_docs_cli_md_runs(tmp_path):
    for i, line in enumerate(serve_lines()):
        words = shlex.split(line)
        assert "--port" in words, line
        words[words.index("--port") + 1] = "PORT"
        env = shell_env()
        while "=" in words[0]:                       # VAR=value before the command
            name, value = words.pop(0).split("=", 1)
            env[name] = value
        assert words[:2] == ["ctxrelay", "serve"], line
        cwd = tmp_path / f"serve{i}"
        cwd.mkdir()
        proc, port = start_relay([str(SCRIPT), *words[1:]], cwd=cwd, env=env)
        try:
            assert chat(port, "s1", "hello")["choices"][0]["message"]["content"].startswith("echo")
        finally:
            stop_relay(proc)
        assert (cwd / "store" / "transcript.lmdb").is_dir(), line


def test_every_command_and_action_has_a_runnable_example():
    lines = [ln for b in blocks("sh") for ln in b]
    parser = cli.build_parser()
    top = next(a for a in parser._actions if a.dest == "command")
    prefix = r"ctxrelay(?: --json| --store \S+)*"
    for name, sub in top.choices.items():
        assert any(re.search(rf"{prefix} {name}\b", ln) for ln in lines), name
        for action in sub._actions:
            if action.dest in ("sessions_cmd", "facts_cmd", "scratch_cmd"):
                for inner in action.choices:
                    if (name, inner) == ("sessions", "list"):
                        continue                     # `ctxrelay sessions` is the list
                    assert any(re.search(rf"{prefix} {name} {inner}\b", ln) for ln in lines), \
                        f"{name} {inner}"
