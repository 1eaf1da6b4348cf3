"""library(ctxrelay) from .qlf files: built on first use, never stale after an edit.

Each test works on a copy of python/ctxrelay and prolog/ under tmp_path (so the
checkout's own .qlf files are not touched) and imports ctxrelay from it in a
fresh interpreter.  A stale .qlf is made the hard way: the source is edited and
its modification time set back before the .qlf's, which SWI-Prolog's own check
(source newer than .qlf) cannot see; the stamp must.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = ("\n% qlf test probe\n:- multifile ctxrelay:qlf_probe/1.\n"
         ":- dynamic ctxrelay:qlf_probe/1.\nctxrelay:qlf_probe({}).\n")


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A checkout-shaped copy: python/ctxrelay, prolog/, bin/, and links to .venv and .deps."""
    shutil.copytree(ROOT / "python" / "ctxrelay", tmp_path / "python" / "ctxrelay",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "prolog", tmp_path / "prolog",
                    ignore=shutil.ignore_patterns("*.qlf", ".qlf-*"))
    shutil.copytree(ROOT / "bin", tmp_path / "bin")
    for link in (".venv", ".deps"):
        (tmp_path / link).symlink_to((ROOT / link).resolve())
    return tmp_path


def python(copy: Path, code: str, **env: str) -> str:
    full = {**os.environ, "PYTHONPATH": str(copy / "python"), **env}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=full, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


PROBE_VALUE = ("import janus_swi as janus, ctxrelay; "
               "print(janus.query_once('ctxrelay:qlf_probe(X)')['X'])")


def set_probe(copy: Path, source: str, value: int, *, keep_mtime_below: Path | None = None) -> None:
    """Write the probe clause into ``source``; optionally make it look older than a .qlf."""
    path = copy / "prolog" / source
    text = path.read_text()
    if "% qlf test probe" in text:
        text = text[:text.index("\n% qlf test probe")]
    path.write_text(text + PROBE.format(value))
    if keep_mtime_below is not None:
        old = keep_mtime_below.stat().st_mtime - 100
        os.utime(path, (old, old))


def digest_by_shell(prolog: Path) -> str:
    return subprocess.run(
        "find . -name '*.pl' -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum "
        "| sha256sum | cut -d' ' -f1", shell=True, cwd=prolog, capture_output=True, text=True,
        check=True).stdout.strip()


def test_first_import_builds_a_qlf_per_source_and_a_stamp(copy):
    set_probe(copy, "ctxrelay.pl", 1)
    assert python(copy, PROBE_VALUE) == "1"
    prolog = copy / "prolog"
    # Every module gets its own .qlf; a file it includes compiles into the includer's.
    sources = sorted(p for p in prolog.rglob("*.pl") if ":- module(" in p.read_text())
    assert sorted(p.with_suffix(".pl") for p in prolog.rglob("*.qlf")) == sources
    assert (prolog / "ctxrelay" / "references" / "lexicon.pl") not in sources
    assert (prolog / ".qlf-stamp").read_text().strip() == digest_by_shell(prolog)
    # The second start loads them: nothing is rebuilt.
    before = {p: p.stat().st_mtime_ns for p in prolog.rglob("*.qlf")}
    assert python(copy, PROBE_VALUE) == "1"
    assert {p: p.stat().st_mtime_ns for p in prolog.rglob("*.qlf")} == before


@pytest.mark.parametrize("source", ["ctxrelay.pl", "ctxrelay/policy.pl"])
def test_an_edit_is_seen_even_when_the_source_looks_older_than_its_qlf(copy, source):
    set_probe(copy, source, 1)
    assert python(copy, PROBE_VALUE) == "1"
    qlf = (copy / "prolog" / source).with_suffix(".qlf")
    set_probe(copy, source, 2, keep_mtime_below=qlf)
    assert python(copy, PROBE_VALUE) == "2"
    assert (copy / "prolog" / ".qlf-stamp").read_text().strip() == \
        digest_by_shell(copy / "prolog")


def test_off_loads_the_sources_and_ignores_qlf_files(copy):
    set_probe(copy, "ctxrelay.pl", 1)
    assert python(copy, PROBE_VALUE) == "1"
    qlf = copy / "prolog" / "ctxrelay.qlf"
    set_probe(copy, "ctxrelay.pl", 3, keep_mtime_below=qlf)
    assert python(copy, PROBE_VALUE, CTXRELAY_QLF="off") == "3"
    assert qlf.stat().st_mtime > (copy / "prolog" / "ctxrelay.pl").stat().st_mtime  # untouched


def test_a_build_with_warnings_keeps_no_qlf_and_no_stamp(copy):
    policy = copy / "prolog" / "ctxrelay" / "policy.pl"
    policy.write_text(policy.read_text() + "\nqlf_singleton_warning(X) :- true.\n")
    r = subprocess.run([sys.executable, "-c", "import ctxrelay"], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(copy / "python")},
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Singleton variables" in r.stderr                   # shown, not hidden in a .qlf
    assert not list((copy / "prolog").rglob("*.qlf"))
    assert not (copy / "prolog" / ".qlf-stamp").exists()


def test_the_prolog_first_launcher_never_loads_a_stale_qlf(copy):
    set_probe(copy, "ctxrelay/store.pl", 1)
    assert python(copy, PROBE_VALUE) == "1"
    set_probe(copy, "ctxrelay/store.pl", 5,
              keep_mtime_below=copy / "prolog" / "ctxrelay" / "store.qlf")
    goal = ("use_module(library(ctxrelay)), findall(X, ctxrelay:qlf_probe(X), Xs), "
            "print(Xs), nl")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["VIRTUAL_ENV"] = str(copy / ".venv")
    swipl = (copy / ".deps" / "swipl-path").read_text().strip()
    # The hazard: SWI-Prolog's own check (source newer than .qlf) loads the stale file.
    plain = subprocess.run([swipl, "-p", f"library={copy / 'prolog'}", "-g", goal, "-t", "halt"],
                           capture_output=True, text=True, timeout=300, env=env)
    assert plain.stdout.strip() == "[1]", plain.stderr
    r = subprocess.run([str(copy / "bin" / "ctxrelay-swipl"), "-g", goal, "-t", "halt"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[5]"
    assert (copy / "prolog" / ".qlf-stamp").read_text().strip() == \
        digest_by_shell(copy / "prolog")                       # rebuilt for the next start


def test_a_file_that_loads_the_library_from_its_qlf_can_call_the_python_package(copy):
    """Loaded from ctxrelay.qlf inside another file's load, the library still puts
    the checkout's python/ first on the embedded sys.path (no PYTHONPATH, and the
    venv's editable install is not read by janus): the plunit suites load it so."""
    python(copy, "import ctxrelay")                       # builds the .qlf files
    assert (copy / "prolog" / "ctxrelay.qlf").is_file()
    agent = copy / "agent.pl"
    agent.write_text(":- use_module(library(ctxrelay)).\n"
                     "where(F) :- py_call(ctxrelay:'__file__', F).\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(copy / "bin" / "ctxrelay-swipl"), "-g", "where(F), print(F), nl",
                        "-t", "halt", str(agent)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().strip("'") == str(copy / "python" / "ctxrelay" / "__init__.py")
