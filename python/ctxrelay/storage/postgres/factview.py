"""Reads of the PostgreSQL fact store on one cursor (a :class:`FactReader`).

:class:`PgFactView` serves :meth:`PgFacts.snapshot` (a ``REPEATABLE READ``
read-only transaction: one consistent state) and the callbacks a write makes
(its own transaction, after the namespace row is locked, so they see the state
the write starts from).  Tables: migration 6 of
:mod:`ctxrelay.storage.postgres.migrations`.
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Container, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ctxrelay.storage.common.facts import source_record
from ctxrelay.storage.interfaces.facts import (
    RETRIEVABLE,
    Change,
    Fact,
    FactTable,
    HeadArrays,
    NamespaceState,
    SourceRecord,
    UnknownFactError,
    community_label,
    iso_time,
)
from ctxrelay.storage.common import factstate
from ctxrelay.storage.postgres.textindex import query_terms, ranked, scores

__all__ = ["PgFactView", "as_uuid", "STATUS_CODE", "CODE_STATUS", "VISIBLE_CODES"]

STATUS_CODE = {"ACTIVE": "A", "STALE": "S", "DELETED": "D", "QUARANTINED": "Q"}
CODE_STATUS = {v: k for k, v in STATUS_CODE.items()}
VISIBLE_CODES = [STATUS_CODE[s] for s in sorted(RETRIEVABLE)]
_ACCEPT_BATCH = 64          # BM25 candidates whose status is read per round trip


def as_uuid(fact_id: Any) -> uuid.UUID | None:
    """The UUID of a fact id as the store draws them (canonical lowercase), else None:
    anything else names no fact, on every back end."""
    if not isinstance(fact_id, str) or len(fact_id) != 36:
        return None
    try:
        parsed = uuid.UUID(fact_id)
    except ValueError:
        return None
    return parsed if str(parsed) == fact_id else None


def as_array(vec: Any) -> np.ndarray:
    """A loaded ``vector`` value (pgvector's ``Vector`` in binary) as float32."""
    return np.asarray(vec.to_numpy() if hasattr(vec, "to_numpy") else vec, dtype=np.float32)


class PgFactView:
    """The fact store as one transaction sees it (``store``: the :class:`PgFacts`)."""

    def __init__(self, store: Any, cur: Any, *, early: tuple[Any, list[str]] | None = None
                 ) -> None:
        self.store = store
        self.cur = cur
        self.model_id: str = store.model_id
        self.dim: int = store.dim
        self._seen: dict[str, tuple[int, dict[str, Any]] | None] = {}
        #: (a cursor, the names it asked for): the rows of namespaces sent for early,
        #: in this view's transaction, taken on first need
        self._early = early

    def _take_early(self) -> None:
        cur, names = self._early
        self._early = None
        found = {name: (int(nid), json.loads(info)) for name, nid, info in cur.fetchall()}
        for name in names:
            self._seen[name] = found.get(name)

    # -- namespaces ----------------------------------------------------------------

    def _row(self, ns: str) -> tuple[int, dict[str, Any]] | None:
        """``(id, info)`` of the namespace (read once per view)."""
        if self._early is not None:
            self._take_early()
        if ns in self._seen:
            return self._seen[ns]
        row = self.cur.execute("SELECT id, info FROM ckf_namespaces WHERE name = %s",
                               (ns,)).fetchone()
        found = None if row is None else (int(row[0]), json.loads(row[1]))
        self._seen[ns] = found
        if found is not None:
            self.store.nids[ns] = found[0]
        return found

    def nid(self, ns: str) -> int | None:
        """The namespace's id (never changes once made: remembered by the store)."""
        nid = self.store.nids.get(ns)
        if nid is not None:
            return nid
        found = self._row(ns)
        return None if found is None else found[0]

    def info(self, ns: str) -> dict[str, Any] | None:
        found = self._row(ns)
        return None if found is None else found[1]

    def namespace(self, ns: str) -> NamespaceState | None:
        found = self._row(ns)
        return None if found is None else self.store.state_of(ns, found[0], found[1])

    def namespaces(self) -> list[str]:
        return sorted(r[0] for r in self.cur.execute("SELECT name FROM ckf_namespaces"))

    def state_hash(self, ns: str) -> str:
        return factstate.state_hash(self.model_id, ns, self.info(ns))

    # -- facts ----------------------------------------------------------------------

    def _by_ids(self, ns: str, ids: Sequence[str], columns: str) -> dict[str, tuple]:
        """Rows of the facts of ``ids`` in the namespace, by fact id (str)."""
        nid = self.nid(ns)
        wanted = list({u for u in map(as_uuid, ids) if u is not None})
        if nid is None or not wanted:
            return {}
        rows = self.cur.execute(f"SELECT fact_id, {columns} FROM ckf_facts "
                                "WHERE ns_id = %s AND fact_id = ANY(%s)", (nid, wanted))
        return {str(r[0]): r[1:] for r in rows}

    def _by_seqs(self, ns: str, seqs: Sequence[int], columns: str) -> dict[int, tuple]:
        nid = self.nid(ns)
        wanted = [int(s) for s in seqs if int(s) >= 0]
        if nid is None or not wanted:
            return {}
        rows = self.cur.execute(f"SELECT seq, {columns} FROM ckf_facts "
                                "WHERE ns_id = %s AND seq = ANY(%s)", (nid, wanted))
        return {int(r[0]): r[1:] for r in rows}

    _FACT = "fact_id, status, record, access_count, last_access, community"

    def _fact(self, ns: str, row: tuple) -> Fact:
        fact_id, status, record, count, last, community = row
        rec = json.loads(record)
        kws = None if community is None else self.info(ns)["labels"].get(str(community))
        return Fact(fact_id=str(fact_id), namespace=ns, content=rec["content"],
                    content_hash=rec["content_hash"], key=rec.get("key"),
                    source_id=rec.get("source_id"), source_location=rec.get("source_location"),
                    source_type=rec["source_type"], importance=rec["importance"],
                    status=CODE_STATUS[status], ttl=rec.get("ttl"),
                    ttl_seconds=rec.get("ttl_seconds"), community=community,
                    community_label=None if kws is None else community_label(kws),
                    ingested_at=iso_time(rec["ingested_at"]),
                    modified_at=iso_time(rec["modified_at"]), access_count=int(count),
                    last_accessed_at=iso_time(last), metadata=rec.get("metadata") or {},
                    model_id=self.model_id)

    def get(self, ns: str, ids: Sequence[str]) -> list[Fact | None]:
        found = self._by_ids(ns, ids, self._FACT)
        return [None if fid not in found else self._fact(ns, found[fid])
                for fid in ids]

    def scan(self, ns: str) -> list[Fact]:
        nid = self.nid(ns)
        if nid is None:
            return []
        rows = self.cur.execute(f"SELECT {self._FACT} FROM ckf_facts WHERE ns_id = %s "
                                "ORDER BY seq", (nid,)).fetchall()
        return [self._fact(ns, row) for row in rows]

    def locate(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        nid, known = self.nid(ns), self.store.seq_of
        missing = [f for f in ids if (nid, f) not in known]
        if missing:
            found = {fid: int(seq) for fid, (seq,) in self._by_ids(ns, missing, "seq").items()}
            self._remember(nid, [(s, f) for f, s in found.items()])
            return np.array([known.get((nid, f), found.get(f, -1)) for f in ids], dtype=np.int64)
        return np.array([known[(nid, f)] for f in ids], dtype=np.int64)

    def ids_at(self, ns: str, seqs: Sequence[int]) -> list[str | None]:
        # A fact's seq and id never change and a fact is never removed (a deleted one
        # stays as a tombstone), so the pairs once read are remembered: the ANN
        # search path maps its hits to ids without a query.
        nid, known = self.nid(ns), self.store.id_at
        missing = [s for s in seqs if (nid, int(s)) not in known]
        if missing:
            found = {seq: str(fid) for seq, (fid,) in self._by_seqs(ns, missing, "fact_id").items()}
            self._remember(nid, found.items())
            return [known.get((nid, int(s)), found.get(int(s))) for s in seqs]
        return [known[(nid, int(s))] for s in seqs]

    #: whether what this view reads is committed (a write's view may yet roll back)
    committed = True

    def _remember(self, nid: int | None, pairs: Iterable[tuple[int, str]]) -> None:
        if self.committed and nid is not None:
            for seq, fid in pairs:
                self.store.remember(nid, seq, fid)

    def lookup_key(self, ns: str, key: str, *, any_status: bool = False) -> str | None:
        nid = self.nid(ns)
        if nid is None:
            return None
        row = self.cur.execute("SELECT fact_id, status FROM ckf_facts "
                               "WHERE ns_id = %s AND key = %s",
                               (nid, key.encode("utf-8"))).fetchone()
        if row is None or (not any_status and row[1] not in VISIBLE_CODES):
            return None
        return str(row[0])

    _HEAD = "status, importance, modified_at, ttl_seconds"

    @staticmethod
    def _head(row: tuple | None) -> tuple | None:
        return None if row is None else (CODE_STATUS[row[0]], row[1], row[2], row[3])

    def heads(self, ns: str, ids: Sequence[str]) -> HeadArrays:
        found = self._by_ids(ns, ids, self._HEAD)
        return HeadArrays.from_rows([self._head(found.get(f)) for f in ids])

    def heads_at(self, ns: str, seqs: Sequence[int]) -> HeadArrays:
        found = self._by_seqs(ns, seqs, self._HEAD)
        return HeadArrays.from_rows([self._head(found.get(int(s))) for s in seqs])

    def _rows(self, vectors: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        out = np.zeros((len(vectors), self.dim), dtype=np.float32)
        found = np.zeros(len(vectors), dtype=bool)
        for i, vec in enumerate(vectors):
            if vec is not None:
                out[i] = as_array(vec)
                found[i] = True
        return out, found

    def vectors(self, ns: str, ids: Sequence[str]) -> np.ndarray:
        found = self._by_ids(ns, ids, "vector")
        if self.nid(ns) is not None:
            for fid in ids:
                if fid not in found:
                    raise UnknownFactError(f"no fact {fid!r} in this namespace; check the id "
                                           "(fact ids are UUIDs) and the namespace")
        return self._rows([found[f][0] if f in found else None for f in ids])[0]

    def vectors_at(self, ns: str, seqs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        found = self._by_seqs(ns, seqs, "vector")
        return self._rows([found[int(s)][0] if int(s) in found else None for s in seqs])

    def fact_table(self, ns: str) -> FactTable:
        nid = self.nid(ns)
        rows = [] if nid is None else self.cur.execute(
            f"SELECT seq, fact_id, {self._HEAD} FROM ckf_facts WHERE ns_id = %s ORDER BY seq",
            (nid,)).fetchall()
        return FactTable(np.array([r[0] for r in rows], dtype=np.int64),
                         [str(r[1]) for r in rows],
                         HeadArrays.from_rows([self._head(r[2:]) for r in rows]),
                         0.0 if nid is None else self.info(ns)["last_mod"])

    # -- vectors and edges for in-memory structures --------------------------------------

    def iter_vectors(self, ns: str, chunk: int, *, skip: Container[int] = ()
                     ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The stored vectors in seq order (those of ``skip`` left out), read
        ``chunk`` rows per round trip (keyset pages of this view's snapshot)."""
        nid = self.nid(ns)
        if nid is None:
            return
        after = -1
        seqs: list[int] = []
        rows: list[np.ndarray] = []
        while True:
            page = self.cur.execute(
                "SELECT seq, vector FROM ckf_facts WHERE ns_id = %s AND seq > %s "
                "AND vector IS NOT NULL ORDER BY seq LIMIT %s", (nid, after, chunk)).fetchall()
            for seq, vec in page:
                if int(seq) in skip:
                    continue
                seqs.append(int(seq))
                rows.append(as_array(vec))
                if len(seqs) >= chunk:
                    yield np.array(seqs, dtype=np.int64), np.stack(rows)
                    seqs, rows = [], []
            if len(page) < chunk:
                break
            after = int(page[-1][0])
        if seqs:
            yield np.array(seqs, dtype=np.int64), np.stack(rows)

    def hidden(self, ns: str) -> set[int]:
        nid = self.nid(ns)
        if nid is None:
            return set()
        return {int(r[0]) for r in self.cur.execute(
            "SELECT seq FROM ckf_facts WHERE ns_id = %s AND status IN ('Q', 'D')", (nid,))}

    def edges(self, ns: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        nid = self.nid(ns)
        rows = [] if nid is None else self.cur.execute(
            "SELECT src, dst, weight FROM ckf_edges WHERE ns_id = %s ORDER BY src, dst",
            (nid,)).fetchall()
        return (np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[1] for r in rows], dtype=np.int64),
                np.array([r[2] for r in rows], dtype=np.float32))

    def edge_rows(self, ns: str, seqs: Iterable[int]) -> dict[int, tuple[list[int], list[float]]]:
        seqs = [int(s) for s in seqs]
        out: dict[int, tuple[list[int], list[float]]] = {s: ([], []) for s in seqs}
        nid = self.nid(ns)
        if nid is None or not seqs:
            return out
        for src, dst, weight in self.cur.execute(
                "SELECT src, dst, weight FROM ckf_edges WHERE ns_id = %s AND src = ANY(%s) "
                "ORDER BY src, dst", (nid, seqs)):
            out[int(src)][0].append(int(dst))
            out[int(src)][1].append(float(np.float32(weight)))
        return out

    def changes(self, ns: str, since: int, upto: int) -> list[Change] | None:
        nid = self.nid(ns)
        if nid is None:
            return [] if upto <= since else None
        out: list[Change] = []
        expect = since + 1
        for gen, hide, seq in self.cur.execute(
                "SELECT gen, hide, seq FROM ckf_changes WHERE ns_id = %s AND gen > %s "
                "AND gen <= %s ORDER BY gen", (nid, since, upto)):
            if gen != expect:
                break
            out.append(Change(int(gen), bool(hide), int(seq)))
            expect += 1
        return out if expect == max(upto, since) + 1 else None

    # -- terms, sources, communities, expiry ---------------------------------------------

    def search_terms(self, ns: str, query: str, k: int) -> list[tuple[str, float]]:
        found = self._row(ns)
        terms = query_terms(query)
        if found is None or not terms or k <= 0:
            return []
        nid, info = found
        rows = self.cur.execute(
            "SELECT term, count(*), array_agg(seq), array_agg(tf), array_agg(doclen) "
            "FROM ckf_postings WHERE ns_id = %s AND term = ANY(%s) GROUP BY term",
            (nid, terms)).fetchall()
        postings = {t: (int(df), (ids, tfs, lens)) for t, df, ids, tfs, lens in rows}
        order = ranked(*scores(terms, postings, info.get("docs", 0), info.get("doclen", 0)))
        out: list[tuple[str, float]] = []
        for lo in range(0, len(order), _ACCEPT_BATCH):       # best first, until k accepted
            batch = order[lo:lo + _ACCEPT_BATCH]
            named = self._by_seqs(ns, [s for s, _ in batch], "fact_id, status")
            for seq, score in batch:
                row = named.get(seq)
                if row is not None and row[1] in VISIBLE_CODES:
                    out.append((str(row[0]), float(score)))
                    if len(out) >= k:
                        return out
        return out

    def source(self, ns: str, source_id: str) -> SourceRecord | None:
        nid = self.nid(ns)
        row = None if nid is None else self.cur.execute(
            "SELECT record FROM ckf_sources WHERE ns_id = %s AND source_id = %s",
            (nid, source_id)).fetchone()
        if row is None:
            return None
        return source_record(ns, row[0])

    def communities(self, ns: str) -> tuple[dict[str, int], dict[int, tuple[str, ...]]]:
        found = self._row(ns)
        if found is None:
            return {}, {}
        nid, info = found
        membership = {str(fid): int(c) for fid, c in self.cur.execute(
            "SELECT fact_id, community FROM ckf_facts WHERE ns_id = %s "
            "AND community IS NOT NULL AND status = ANY(%s) ORDER BY seq",
            (nid, VISIBLE_CODES))}
        return membership, {int(c): tuple(k) for c, k in info["labels"].items()}

    def due(self, ns: str, now: float) -> list[str]:
        nid = self.nid(ns)
        if nid is None:
            return []
        return [str(r[0]) for r in self.cur.execute(
            "SELECT fact_id FROM ckf_facts WHERE ns_id = %s AND due IS NOT NULL AND due < %s "
            "ORDER BY seq", (nid, float(now)))]
