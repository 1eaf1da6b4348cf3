"""Loading library(ctxrelay) from precompiled .qlf files that are never stale.

Compiling the Prolog sources takes most of ``import ctxrelay`` (about 0.3 s of
a 0.45 s start on a 2-core machine); loading SWI-Prolog's quick-load files
(.qlf, made by ``qcompile/1``) of the same modules takes a fraction of it.
SWI-Prolog already prefers ``foo.qlf`` beside ``foo.pl`` when the .qlf is the
newer file.  That check looks at one file's modification time only, so this
module adds a stronger one: a stamp file, ``.qlf-stamp`` in the Prolog
directory, holds the SHA-256 of every ``*.pl`` under it (the same digest
``bin/ctxrelay-swipl`` computes with ``sha256sum``).  The .qlf files are used
only while the stamp matches the sources; after any edit of any source (even
one that changes how another file compiles) they are rebuilt, or, where the
directory is read-only, ignored.

``CTXRELAY_QLF=off`` loads the sources and ignores every .qlf file (for
debugging a build, or to compare the two in ``bench/cli_startup_bench.py``).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from pathlib import Path
from typing import Iterator

import janus_swi as janus

STAMP = ".qlf-stamp"
ENV = "CTXRELAY_QLF"

# A directive that loads another file: its first argument is the file.
_LOAD = re.compile(r"^:-\s*(?:use_module|reexport|ensure_loaded)\(\s*"
                   r"(?:library\(\s*)?([A-Za-z_][\w/]*)", re.MULTILINE)


def sources(directory: Path) -> list[Path]:
    """Every Prolog source under ``directory``, in the order the digest uses."""
    found = [p.resolve() for p in directory.rglob("*.pl") if p.is_file()]
    return sorted(found, key=lambda p: _manifest_name(directory, p).encode())


def _manifest_name(directory: Path, path: Path) -> str:
    return "./" + path.relative_to(directory.resolve()).as_posix()


def fingerprint(directory: Path) -> str:
    """SHA-256 of the ``sha256sum`` listing of every source (names sorted bytewise).

    ``cd prolog && find . -name '*.pl' -print0 | LC_ALL=C sort -z | xargs -0
    sha256sum | sha256sum`` prints the same digest.
    """
    listing = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  "
                      f"{_manifest_name(directory, p)}\n" for p in sources(directory))
    return hashlib.sha256(listing.encode()).hexdigest()


def stamp(directory: Path) -> str | None:
    """The digest the current .qlf files were built from, or None."""
    try:
        return (directory / STAMP).read_text().strip() or None
    except OSError:
        return None


def qlf_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.qlf"))


def load(directory: Path, goal: str) -> None:
    """Run ``goal`` (which loads library(ctxrelay)) through fresh .qlf files.

    Called once per process by :func:`ctxrelay.bridge.engine.ensure_loaded`
    with the library path already set.  Builds the .qlf files if the stamp
    does not match the sources and the directory is writable; loads the
    sources alone (ignoring any .qlf) if it is not.
    """
    if janus.query_once("current_module(ctxrelay)")["truth"]:
        janus.query_once(goal)              # Prolog came first and loaded it already
        return
    if os.environ.get(ENV) == "off":
        _load_sources(goal)
        return
    digest = fingerprint(directory)
    if stamp(directory) == digest:
        janus.query_once(goal)
        return
    if not _writable(directory):
        _load_sources(goal)
        return
    with _locked(directory):
        if stamp(directory) == digest:     # another process built them meanwhile
            janus.query_once(goal)
            return
        _build(directory, digest, goal)


def system_libraries_from_source() -> list[str]:
    """The SWI-Prolog library files loaded so far that have no .qlf beside them.

    ``make setup`` precompiles these (scripts/setup.sh) in the SWI-Prolog it builds;
    ``ctxrelay doctor`` reports them.
    """
    return list(janus.query_once(
        "current_prolog_flag(home, _H),"
        " findall(_F, ( source_file(_F), sub_atom(_F, 0, _, _, _H),"
        "               file_name_extension(_B, pl, _F), file_name_extension(_B, qlf, _Q),"
        "               \\+ exists_file(_Q) ), Fs)")["Fs"])


def _writable(directory: Path) -> bool:
    dirs = {directory, *(p.parent for p in sources(directory))}
    return all(os.access(d, os.W_OK) for d in dirs)


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on the Prolog directory, so one process builds at a time."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                        # releases the lock


def _load_sources(goal: str) -> None:
    """Run ``goal`` with SWI-Prolog's .qlf lookup switched off.

    ``user:prolog_file_type(qlf, qlf)`` is how the loader finds a .qlf beside
    a source; without it every file compiles from source.
    """
    janus.query_once(
        "( retract(user:prolog_file_type(qlf, qlf)) -> _Restore = true ; _Restore = false ),"
        " setup_call_cleanup(true, (" + goal + "),"
        "   ( _Restore == true -> assertz(user:prolog_file_type(qlf, qlf)) ; true ))")


def _build(directory: Path, digest: str, goal: str) -> None:
    """Compile every source to .qlf while loading it, then write the stamp.

    SWI-Prolog writes a file's .qlf when it loads the file at top level with the
    ``qcompile`` flag ``auto``, but not for files loaded from inside a file being
    compiled that way; so the modules are loaded one by one, each after the
    files it loads, importing nothing into ``user`` (only ``goal`` imports).
    A build that prints an error or warning writes no stamp and keeps no .qlf,
    so the next start compiles (and shows the message) again.
    """
    with contextlib.suppress(FileNotFoundError):
        (directory / STAMP).unlink()
    for old in qlf_files(directory):
        old.unlink()
    # A file without a module header is included by another (its clauses compile
    # into the includer's .qlf); loading it on its own would be an error.
    files = [str(p.with_suffix("")) for p in _dependency_order(directory) if _is_module(p)]
    # Variables named _X stay out of janus's answer (an unbound one cannot cross).
    result = janus.query_once(
        "current_prolog_flag(qcompile, _Old),"
        " flag(ctxrelay_qlf_problems, _, 0),"
        " asserta((user:message_hook(_, _Kind, _) :-"
        "            memberchk(_Kind, [error, warning]),"
        "            flag(ctxrelay_qlf_problems, _N, _N+1), fail), _Hook),"
        " setup_call_cleanup(set_prolog_flag(qcompile, auto),"
        "   ( forall(member(_F, Files), user:use_module(_F, [])), " + goal + " ),"
        "   ( set_prolog_flag(qcompile, _Old), erase(_Hook) )),"
        " flag(ctxrelay_qlf_problems, Problems, 0)",
        {"Files": files})
    if result["Problems"]:
        for made in qlf_files(directory):
            made.unlink()
        return
    tmp = directory / f"{STAMP}.{os.getpid()}.tmp"
    tmp.write_text(digest + "\n")
    os.replace(tmp, directory / STAMP)


_MODULE_HEADER = re.compile(r"^:-\s*module\(", re.MULTILINE)


def _is_module(path: Path) -> bool:
    return bool(_MODULE_HEADER.search(path.read_text(encoding="utf-8", errors="replace")))


def _dependency_order(directory: Path) -> list[Path]:
    """The sources, each after the project files it loads (depth-first post-order)."""
    all_sources = sources(directory)
    known = set(all_sources)

    def deps(path: Path) -> list[Path]:
        found = []
        for name in _LOAD.findall(path.read_text(encoding="utf-8", errors="replace")):
            for base in (path.parent, directory):
                candidate = (base / f"{name}.pl").resolve()
                if candidate in known:
                    found.append(candidate)
                    break
        return found

    order: list[Path] = []
    seen: set[Path] = set()

    def visit(path: Path) -> None:
        if path in seen:
            return
        seen.add(path)
        for dep in deps(path):
            visit(dep)
        order.append(path)

    for path in all_sources:
        visit(path)
    return order
