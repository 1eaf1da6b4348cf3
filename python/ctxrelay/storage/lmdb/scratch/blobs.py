"""The blob files of the scratch buffer: one file per tool output, on local disk.

``<blobs>/<D>/<id>.blob`` where ``D`` is the 64 hex digits of sha256(session
id) and ``id`` a checked scratch id; both parts are made here and checked
again on every path, so no argument can name a file outside the directory.
A blob is written to a temporary file in its directory, fsync'ed, renamed to
its name and the directory fsync'ed: durable before the entry that names it
is committed.
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable

from ctxrelay.errors import StoreError, StoreFullError
from ctxrelay.storage.lmdb.base import disk_nearly_full
from ctxrelay.storage.common.scratch.checks import ID_RE
from ctxrelay.storage.common.scratch.errors import UnsafeScratchIdError

__all__ = ["BlobDir", "SweepReport"]

_DIR_RE = re.compile(r"[0-9a-f]{64}")
_TMP_PREFIX = ".tmp-"
_BLOB_SUFFIX = ".blob"


class SweepReport:
    """What :meth:`BlobDir.sweep` removed, and the files it left (not ours)."""

    __slots__ = ("orphans", "temps", "unknown")

    def __init__(self) -> None:
        self.orphans: list[str] = []
        self.temps: list[str] = []
        self.unknown: list[str] = []


class BlobDir:
    """The blob directory of one scratch store."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the blob directory {path} ({exc.strerror}); "
                "check the store directory's permissions") from None

    def location(self) -> str:
        return os.path.abspath(self.path)

    def path_of(self, session_key: bytes, scratch_id: str) -> str:
        # Both parts are made by the store (hex of a hash, a checked id); check
        # again anyway, so no later change can turn an argument into a path.
        directory = session_key.hex()
        if not (_DIR_RE.fullmatch(directory) and ID_RE.fullmatch(scratch_id)):
            raise UnsafeScratchIdError(
                f"refusing to build a blob path from {directory!r} and {scratch_id!r}")
        return os.path.join(self.path, directory, scratch_id + _BLOB_SUFFIX)

    def write(self, session_key: bytes, scratch_id: str, data: bytes) -> str:
        """Write ``data`` durably as the blob of ``scratch_id``; returns its path.

        @raises StoreFullError on a full disk, StoreError otherwise; nothing is
            left behind either way.
        """
        final = self.path_of(session_key, scratch_id)
        directory = os.path.dirname(final)
        try:
            for attempt in range(3):
                created = not os.path.isdir(directory)
                os.makedirs(directory, exist_ok=True)
                if created:
                    _fsync_dir(self.path)
                try:
                    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX + scratch_id + "-",
                                               dir=directory)
                    break
                except FileNotFoundError:   # a sweep removed the empty directory
                    if attempt == 2:
                        raise
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, final)
            except BaseException:
                unlink(tmp)
                raise
            _fsync_dir(directory)
        except OSError as exc:
            if exc.errno == errno.ENOSPC or disk_nearly_full(self.path):
                raise StoreFullError(
                    f"the disk holding {self.path} is full ({exc.strerror}); nothing "
                    "was stored; free disk space or lower disk_budget_bytes") from None
            raise StoreError(
                f"cannot write a blob in {directory} ({exc.strerror}); check the "
                "store directory's permissions") from None
        return final

    def read(self, session_key: bytes, scratch_id: str) -> bytes:
        """The blob's bytes (FileNotFoundError / OSError as the file system says)."""
        with open(self.path_of(session_key, scratch_id), "rb") as blob:
            return blob.read()

    def remove(self, session_key: bytes, scratch_id: str) -> bool:
        """Delete the blob; a failure leaves an orphan that :meth:`sweep` removes."""
        return unlink(self.path_of(session_key, scratch_id))

    def exists(self, session_key: bytes, scratch_id: str) -> bool:
        return os.path.exists(self.path_of(session_key, scratch_id))

    def sha256(self, session_key: bytes, scratch_id: str) -> str:
        digest = hashlib.sha256()
        with open(self.path_of(session_key, scratch_id), "rb") as blob:
            for chunk in iter(lambda: blob.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    def sweep(self, *, grace: float, known: Iterable[tuple[str, str]],
              named: Callable[[bytes, str], bool]) -> SweepReport:
        """Delete temporary files and blobs no entry names, once their mtime is
        ``grace`` seconds old (a put in flight elsewhere keeps its blob).

        ``known`` are (session key hex, scratch id) pairs read before the sweep;
        ``named(session_key, scratch_id)`` is asked again before a blob goes (a
        put may have committed since).  Files that are not ours are listed,
        never deleted; empty session directories past the grace go.
        """
        known = set(known)
        report = SweepReport()
        wall = time.time()
        for directory in sorted(_listdir(self.path)):
            full_dir = os.path.join(self.path, directory)
            if not _DIR_RE.fullmatch(directory) or not os.path.isdir(full_dir):
                report.unknown.append(full_dir)
                continue
            for name in sorted(_listdir(full_dir)):
                full = os.path.join(full_dir, name)
                try:
                    old = wall - os.lstat(full).st_mtime >= grace
                except FileNotFoundError:
                    continue
                scratch_id = name[: -len(_BLOB_SUFFIX)]
                if name.startswith(_TMP_PREFIX):
                    if old and unlink(full):
                        report.temps.append(full)
                elif name.endswith(_BLOB_SUFFIX) and ID_RE.fullmatch(scratch_id):
                    if (directory, scratch_id) not in known and old \
                            and not named(bytes.fromhex(directory), scratch_id) \
                            and unlink(full):
                        report.orphans.append(full)
                else:
                    report.unknown.append(full)
            try:
                if not os.listdir(full_dir) and wall - os.stat(full_dir).st_mtime >= grace:
                    os.rmdir(full_dir)
            except OSError:
                pass
        return report


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
