"""LMDB's catalogue records, checked when a store opens (they carry no checksum of ours).

LMDB keeps each named database's ``MDB_db`` (flags, depth, page counts,
entries, root page) as a record of its main database.  A flipped byte there
can point a database at another database's pages, whose records pass their
checksums (wrong data), or change how its keys compare.  :func:`check_catalogue`
verifies what can be verified without reading every page, reading the file
with ``pread`` (never through the map, so damage here cannot SIGBUS).
"""
from __future__ import annotations

import os
import struct
from typing import Any

from ctxrelay.errors import CorruptStoreError

__all__ = ["check_catalogue"]

#: LMDB's persistent flags of a named database (MDB_db.md_flags)
_DUPSORT, _DUPFIXED, _ALL_FLAGS = 0x04, 0x10, 0x7E
_P_BRANCH, _P_LEAF = 0x01, 0x02
_NO_PAGE = (1 << 64) - 1        # P_INVALID: the root of an empty database
_CATALOGUE = struct.Struct("<IHHQQQQQ")   # pad, flags, depth, branch, leaf, overflow, entries, root
_PAGE_HEADER = struct.Struct("<QHHHH")    # pgno, pad, flags, lower, upper


def check_catalogue(env: Any, data_path: str, flags: dict[bytes, int],
                    extra: tuple[bytes, ...], where: str) -> None:
    """Verify the catalogue record of each of our named databases (the
    ``MDB_db`` LMDB keeps in its main database, which carries no checksum).

    A flipped byte there could point a database at another database's pages
    (whose records' checksums pass: wrong data) or change how its keys compare.
    Checked: the flags are the ones the store opens the database with; the
    root, depth, page counts and entries are consistent with each other and
    with the file; the root page is the page it says, of the right type (and
    a one-page database's holds ``entries`` records); no two databases share a
    root; a deeper tree's branch pages (and up to ``_MAX_LEAF_HEADERS`` leaf
    headers) give the page and record counts the record states.  Raises
    CorruptStoreError naming the database.  Not caught: a root moved onto a
    stale copy of the same tree of the same shape and record count; a dupsort
    database gets the record-level checks only.
    """
    psize = env.stat()["psize"]
    last = env.info()["last_pgno"]
    main = env.open_db(None)                  # the main database: the catalogue
    with env.begin() as txn:
        records = {bytes(k): bytes(v) for k, v in txn.cursor(db=main)
                   if bytes(k) in flags or bytes(k) in extra}
    roots: dict[int, bytes] = {}
    with open(data_path, "rb") as data:
        for name, record in records.items():
            problem = _catalogue_problem(name, record, flags.get(name), psize, last,
                                         data.fileno())
            if problem is None:
                root = _CATALOGUE.unpack(record)[7]
                if root != _NO_PAGE and root in roots:
                    problem = f"its root page {root} is also {roots[root].decode()}'s"
                roots[root] = name
            if problem:
                raise CorruptStoreError(
                    f"{where}: the catalogue record of database {name.decode()} is damaged "
                    f"({problem}); restore the store from a backup, or export what "
                    "'ctxrelay check' finds readable")


def _catalogue_problem(name: bytes, record: bytes, want_flags: int | None, psize: int,
                       last: int, fd: int) -> str | None:
    if len(record) != _CATALOGUE.size:
        return f"{len(record)} bytes, not {_CATALOGUE.size}"
    _, flags, depth, branch, leaf, overflow, entries, root = _CATALOGUE.unpack(record)
    if want_flags is not None and flags != want_flags:
        return f"flags {flags:#x}, the store opens it with {want_flags:#x}"
    if flags & ~(_DUPSORT | _DUPFIXED) & _ALL_FLAGS or (flags & _DUPFIXED and
                                                         not flags & _DUPSORT):
        return f"flags {flags:#x}"
    if root == _NO_PAGE:
        if depth or branch or leaf or overflow or entries:
            return "empty, but with pages or entries"
        return None
    pages = branch + leaf + overflow
    if not (1 <= depth <= 32 and root <= last and pages <= last + 1 and leaf >= 1
            and entries >= 1 and branch >= depth - 1 and (depth > 1 or branch == 0)):
        return (f"root {root}, depth {depth}, {branch}+{leaf}+{overflow} pages, "
                f"{entries} entries, in a file of {last + 1} pages")
    header = os.pread(fd, _PAGE_HEADER.size, root * psize)
    if len(header) < _PAGE_HEADER.size:
        return f"root page {root} is past the end of the file"
    pgno, _, page_flags, lower, _ = _PAGE_HEADER.unpack(header)
    want = _P_LEAF if depth == 1 else _P_BRANCH
    if pgno != root or not page_flags & want:
        return f"root page {root} is page {pgno} with flags {page_flags:#x}"
    if depth == 1 and not flags & _DUPSORT and (lower - _PAGE_HEADER.size) // 2 != entries:
        return f"{entries} entries, but its one page holds {(lower - 16) // 2}"
    if depth > 1 and not flags & _DUPSORT and branch <= _MAX_WALK:
        return _walk_problem(fd, root, depth, branch, leaf, entries, psize, last)
    return None


_MAX_WALK = 1 << 16             # branch pages read at open, at most (~1% of the leaves)
_MAX_LEAF_HEADERS = 1 << 12     # leaf headers read at open (their record counts), at most
_BRANCH_NODE = struct.Struct("<HHH")       # a branch node's child page number (48 bits)


def _walk_problem(fd: int, root: int, depth: int, branch: int, leaf: int, entries: int,
                  psize: int, last: int) -> str | None:
    """Read the branch pages of a database's tree (pread, not the map), and the
    16-byte headers of its leaves when there are at most ``_MAX_LEAF_HEADERS``,
    and compare what they give with the catalogue: a root moved onto another
    branch page (a stale copy of the tree from an older transaction, say) gives
    other page or record counts, or pages of the wrong type.  A stale tree of
    the same shape and record count (values changed in place since) is not
    told apart."""
    level, seen = [root], 0
    for height in range(depth - 1):
        children: list[int] = []
        for pgno in level:
            page = os.pread(fd, psize, pgno * psize)
            if len(page) < psize:
                return f"branch page {pgno} is past the end of the file"
            own, _, page_flags, lower, _ = _PAGE_HEADER.unpack_from(page)
            if own != pgno or not page_flags & _P_BRANCH or not 16 < lower <= psize:
                return f"page {pgno} of its tree is not a branch page"
            for at in range(_PAGE_HEADER.size, lower, 2):
                (node,) = struct.unpack_from("<H", page, at)
                if node + 8 > psize:
                    return f"branch page {pgno} is damaged"
                lo, hi, top = _BRANCH_NODE.unpack_from(page, node)
                child = lo | hi << 16 | top << 32
                if child > last:
                    return f"branch page {pgno} points past the file"
                children.append(child)
        seen += len(level)
        if seen > branch:
            return f"its tree has more than the {branch} branch pages it records"
        level = children
    if seen != branch or len(level) != leaf:
        return (f"its tree has {seen} branch and {len(level)} leaf pages, the record "
                f"says {branch} and {leaf}")
    if len(level) <= _MAX_LEAF_HEADERS:
        records = 0
        for pgno in level:
            header = os.pread(fd, _PAGE_HEADER.size, pgno * psize)
            if len(header) < _PAGE_HEADER.size:
                return f"leaf page {pgno} is past the end of the file"
            own, _, page_flags, lower, _ = _PAGE_HEADER.unpack(header)
            if own != pgno or not page_flags & _P_LEAF:
                return f"page {pgno} of its tree is not a leaf page"
            records += (lower - _PAGE_HEADER.size) // 2
        if records != entries:
            return f"its leaves hold {records} records, the record says {entries}"
    return None
