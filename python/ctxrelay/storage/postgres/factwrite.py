"""The steps of one write transaction of the PostgreSQL fact store.

A :class:`PgFactWriter` is a :class:`PgFactView` of a write transaction that
holds its namespace's row locked (``SELECT ... FOR UPDATE``): writers of one
namespace take turns, in this process or any other, so the change feed's
generations are contiguous and a write's ``link`` sees every fact committed
before it.  The namespace record (the embedded store's JSON: counts, digest,
generation, labels) is changed in memory and saved at the end.  Every change to
a fact keeps, in the same transaction, what depends on it: the expiry column,
the state digest, the status counts, the postings and the change feed.
"""
from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ctxrelay.storage.common.facts import NamespaceSteps, check_transition, still_due
from ctxrelay.storage.interfaces.facts import (
    RETRIEVABLE,
    FactKeyExistsError,
    Linker,
    NamespaceState,
    StatusTransitionError,
    UnknownFactError,
    epoch_of,
)
from ctxrelay.storage.common import factstate
from ctxrelay.storage.postgres.factview import (
    CODE_STATUS,
    STATUS_CODE,
    PgFactView,
    as_uuid,
)
from ctxrelay.storage.postgres.textindex import doc_terms

__all__ = ["PgFactWriter"]


def _key(key: str | None) -> bytes | None:
    return None if key is None else key.encode("utf-8")


class PgFactWriter(NamespaceSteps, PgFactView):
    """One write transaction of one namespace (created on the first write to it)."""

    committed = False            # its reads may include rows that roll back

    def __init__(self, store: Any, cur: Any, ns: str, *, create: bool = True) -> None:
        super().__init__(store, cur)
        self.ns = ns
        self.touched: list[int] = []
        #: (seq, fact id) of the facts this write adds: remembered once it commits
        self.added: list[tuple[int, str]] = []
        row = self._lock_row(ns)
        if row is None and create:
            info = factstate.new_info(0)
            del info["id"]                       # the row's id column
            info.update(docs=0, doclen=0)
            cur.execute("INSERT INTO ckf_namespaces (name, info) VALUES (%s, %s) "
                        "ON CONFLICT (name) DO NOTHING", (ns, json.dumps(info)))
            row = self._lock_row(ns)             # ours, or the one a racer committed
        self.ns_id: int | None = None if row is None else row[0]
        self.ns_info: dict[str, Any] | None = None if row is None else row[1]
        self.gen_before = 0 if row is None else self.ns_info["gen"]
        self.stamp_before = 0.0 if row is None else self.ns_info["last_mod"]

    def _lock_row(self, ns: str) -> tuple[int, dict[str, Any]] | None:
        row = self.cur.execute("SELECT id, info FROM ckf_namespaces WHERE name = %s FOR UPDATE",
                               (ns,)).fetchone()
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def _row(self, ns: str) -> tuple[int, dict[str, Any]] | None:
        if ns == self.ns and self.ns_id is not None:
            return self.ns_id, self.ns_info          # the record as this write has it
        return super()._row(ns)

    @property
    def state(self) -> NamespaceState:
        return self.store.state_of(self.ns, self.ns_id, self.ns_info)

    def save_info(self) -> None:
        self.cur.execute("UPDATE ckf_namespaces SET info = %s WHERE id = %s",
                         (json.dumps(self.ns_info), self.ns_id))

    # -- shared steps ------------------------------------------------------------------

    def require(self, ids: Sequence[str]) -> list[tuple[int, str, str, dict[str, Any]]]:
        """``(seq, fact id, status, record)`` of each id, in order;
        UnknownFactError for one not of the namespace."""
        found = self._by_ids(self.ns, ids, "seq, status, record")
        out = []
        for fid in ids:
            row = found.get(fid) if as_uuid(fid) is not None else None
            if row is None:
                raise UnknownFactError(f"no fact {fid!r} in this namespace; check the id "
                                       "(fact ids are UUIDs) and the namespace")
            out.append((int(row[0]), fid, CODE_STATUS[row[1]], json.loads(row[2])))
        return out

    def put_record(self, seq: int, rec: dict[str, Any], **columns: Any) -> None:
        """Write a fact's record and the columns derived from it (and ``columns``)."""
        self.touched.append(seq)
        status = rec["status"]
        values = {"status": STATUS_CODE[status], "importance": rec["importance"],
                  "modified_at": rec["modified_at"], "ttl_seconds": rec.get("ttl_seconds"),
                  "key": _key(rec.get("key")), "due": factstate.due_time(status, rec),
                  "record": json.dumps(rec), **columns}
        sets = ", ".join(f"{name} = %s" for name in values)
        self.cur.execute(f"UPDATE ckf_facts SET {sets} WHERE seq = %s",
                         (*values.values(), seq))

    def log(self, hide: bool, seqs: Sequence[int]) -> None:
        """Change-feed entries, one per seq, in order."""
        info = self.ns_info
        gens = list(range(info["gen"] + 1, info["gen"] + 1 + len(seqs)))
        info["gen"] += len(seqs)
        if seqs:
            self.cur.execute("INSERT INTO ckf_changes (ns_id, gen, hide, seq) "
                             "SELECT %s, g, %s, s FROM unnest(%s::bigint[], %s::bigint[]) "
                             "AS u(g, s)", (self.ns_id, hide, gens, list(seqs)))

    def index_terms(self, docs: Sequence[tuple[int, str]], sign: int) -> None:
        """Add (``sign`` 1) or drop (-1) the postings of ``(seq, content)`` documents."""
        info = self.ns_info
        rows = []
        for seq, content in docs:
            length, terms = doc_terms(content)
            info["docs"] += sign
            info["doclen"] += sign * length
            rows += [(t, seq, tf, length) for t, tf in terms.items()]
        if not rows:
            return
        terms, seqs, tfs, lens = (list(col) for col in zip(*rows))
        if sign > 0:
            self.cur.execute("INSERT INTO ckf_postings (ns_id, term, seq, tf, doclen) "
                             "SELECT %s, * FROM unnest(%s::text[], %s::bigint[], %s::int[], "
                             "%s::int[])", (self.ns_id, terms, seqs, tfs, lens))
        else:
            self.cur.execute("DELETE FROM ckf_postings WHERE ns_id = %s AND seq = ANY(%s)",
                             (self.ns_id, sorted(set(seqs))))

    def store_edges(self, edges: Iterable[tuple[int, int, float]]) -> None:
        """Similarity edges (SPEC-009 §5.2) from the write's seqs, both directions
        (the first weight given for a pair wins, as in the embedded store)."""
        seen: set[tuple[int, int]] = set()
        src: list[int] = []
        dst: list[int] = []
        weight: list[float] = []
        for a, b, w in edges:
            a, b = int(a), int(b)
            if (a, b) in seen:
                continue
            self.ns_info["edges"] += 1
            seen.update(((a, b), (b, a)))
            src += [a, b]
            dst += [b, a]
            weight += [float(w)] * 2
        if src:
            self.cur.execute("INSERT INTO ckf_edges (ns_id, src, dst, weight) "
                             "SELECT %s, * FROM unnest(%s::bigint[], %s::bigint[], %s::real[]) "
                             "ON CONFLICT DO NOTHING", (self.ns_id, src, dst, weight))

    def unlink(self, seq: int) -> None:
        gone = self.cur.execute("DELETE FROM ckf_edges WHERE ns_id = %s AND (src = %s OR dst = %s)"
                                " RETURNING src", (self.ns_id, seq, seq)).fetchall()
        self.ns_info["edges"] -= sum(1 for r in gone if int(r[0]) == seq)

    def status_change(self, seq: int, fact_id: str, old: str, rec: dict[str, Any],
                      status: str, now: float,
                      only_if: Callable[[str, dict[str, Any]], bool] | None = None) -> bool:
        info = self.ns_info
        if old == status or (only_if is not None and not only_if(old, rec)):
            return False
        check_transition(fact_id, old, status)
        old_c = factstate.digest_component(fact_id, rec["content_hash"], old, rec["modified_at"])
        rec["status"] = status
        rec["modified_at"] = self.tick(now)
        columns: dict[str, Any] = {}
        if status == "DELETED":
            self.erase(seq, rec)
            columns = {"vector": None, "access_count": 0, "last_access": None,
                       "community": None}
        self.put_record(seq, rec, **columns)
        self.redigest(old_c, factstate.digest_component(fact_id, rec["content_hash"], status,
                                                    rec["modified_at"]))
        info["counts"][old] -= 1
        info["counts"][status] += 1
        if old in RETRIEVABLE and status not in RETRIEVABLE:
            self.log(True, [seq])
            info["changed"] += 1
        elif old not in RETRIEVABLE and status in RETRIEVABLE:
            self.log(False, [seq])
        elif status not in RETRIEVABLE:
            self.log(True, [seq])          # idempotent; tells caches the edges went
        return True

    def erase(self, seq: int, rec: dict[str, Any]) -> None:
        """Erasure (SPEC-009 §8.3): content, vector, key, terms, edges go; a tombstone stays."""
        self.index_terms([(seq, rec["content"])], -1)
        self.unlink(seq)
        rec.update(content="", content_hash="", key=None, metadata={}, source_location=None)

    # -- the writes -----------------------------------------------------------------------

    def add_facts(self, records: Sequence[Mapping[str, Any]], vectors: np.ndarray, *,
                  now: float, link: Linker | None, source: Mapping[str, Any] | None,
                  supersede: Sequence[str]) -> list[str]:
        info, cur = self.ns_info, self.cur
        keys = [r.get("key") for r in records if r.get("key") is not None]
        twice = [k for k, n in Counter(keys).items() if n > 1]
        taken = twice or [bytes(r[0]).decode("utf-8") for r in cur.execute(
            "SELECT key FROM ckf_facts WHERE ns_id = %s AND key = ANY(%s)",
            (self.ns_id, [_key(k) for k in keys]))] if keys else []
        if taken:
            raise FactKeyExistsError(
                f"key {taken[0]!r} is already taken in namespace {self.ns!r}; change its "
                "fact with update_fact(key, content=...), or delete it first")
        superseded = self.require(list(supersede))
        n = len(records)
        seqs = sorted(int(r[0]) for r in cur.execute(
            "SELECT nextval('ckf_fact_seq') FROM generate_series(1, %s)", (n,))) if n else []
        ids = [str(uuid.uuid4()) for _ in records]
        if link is not None:
            edges = list(link(self, self.state, seqs, vectors, True))
        rows = []
        for seq, fact_id, rec0, vec in zip(seqs, ids, records, vectors):
            t = self.tick(now)
            rec = dict(rec0, status="ACTIVE", ingested_at=t, modified_at=t)
            rows.append((seq, self.ns_id, uuid.UUID(fact_id), "A", rec["importance"], t,
                         rec.get("ttl_seconds"), _key(rec.get("key")),
                         factstate.due_time("ACTIVE", rec), json.dumps(rec), vec))
            self.redigest(None, factstate.digest_component(fact_id, rec["content_hash"], "ACTIVE", t))
        if rows:
            cur.executemany("INSERT INTO ckf_facts (seq, ns_id, fact_id, status, importance, "
                            "modified_at, ttl_seconds, key, due, record, vector) VALUES "
                            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
        self.touched += seqs
        self.added += zip(seqs, ids)
        if link is not None:
            self.store_edges(edges)
        self.index_terms([(seq, rec["content"]) for seq, rec in zip(seqs, records)], 1)
        self.log(False, seqs)
        info["counts"]["ACTIVE"] += n
        info["adds"] += n
        for seq, fid, status, rec in superseded:
            if status == "ACTIVE":
                _, _, now_status, now_rec = self.require([fid])[0]   # as this write left it
                if now_status == "ACTIVE":
                    self.status_change(seq, fid, now_status, now_rec, "STALE", now)
        if source is not None:
            src = dict(source, fact_ids=list(ids), fact_count=len(ids), ingested_at=now)
            cur.execute("INSERT INTO ckf_sources (ns_id, source_id, record) VALUES (%s, %s, %s) "
                        "ON CONFLICT (ns_id, source_id) DO UPDATE SET record = EXCLUDED.record",
                        (self.ns_id, src["source_id"], json.dumps(src)))
        return ids

    def update_fact(self, fact_id: str, changes: Mapping[str, Any], vector: np.ndarray | None,
                    *, now: float, link: Linker | None) -> None:
        info = self.ns_info
        seq, _, status, rec = self.require([fact_id])[0]
        if status == "DELETED":
            raise StatusTransitionError(
                f"fact {fact_id} is DELETED (erased); add its content again as a new fact")
        new_key = changes.get("key")
        rekey = "key" in changes and new_key != rec.get("key")
        if rekey and new_key is not None and self.cur.execute(
                "SELECT 1 FROM ckf_facts WHERE ns_id = %s AND key = %s",
                (self.ns_id, _key(new_key))).fetchone() is not None:
            raise FactKeyExistsError(
                f"key {new_key!r} is already taken in namespace {self.ns!r}; "
                "pick another or delete that fact first")
        edges: list[tuple[int, int, float]] = []
        columns: dict[str, Any] = {}
        if vector is not None:
            vector = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, self.dim)
            if link is not None:        # before anything changes: it reads the state before
                edges = list(link(self, self.state, [seq], vector, status in RETRIEVABLE))
        old_c = factstate.digest_component(fact_id, rec["content_hash"], status, rec["modified_at"])
        if vector is not None:
            self.index_terms([(seq, rec["content"])], -1)
            self.index_terms([(seq, changes["content"])], 1)
            columns["vector"] = vector[0]
            self.unlink(seq)
            self.store_edges(edges)
            self.log(status not in RETRIEVABLE, [seq])
            info["changed"] += 1
            if status == "STALE":   # re-ingested: current again (SPEC-009 §2.2)
                info["counts"]["STALE"] -= 1
                info["counts"]["ACTIVE"] += 1
                status = rec["status"] = "ACTIVE"
        rec.update(changes)
        rec["modified_at"] = self.tick(now)
        self.put_record(seq, rec, **columns)
        self.redigest(old_c, factstate.digest_component(fact_id, rec["content_hash"], status,
                                                    rec["modified_at"]))

    def set_status(self, ids: Sequence[str], status: str, *, now: float) -> int:
        # a fact named twice changes once (the second time it has the status already)
        found = self.require(list(dict.fromkeys(ids)))
        return sum(self.status_change(seq, fid, old, rec, status, now)
                   for seq, fid, old, rec in found)

    def expire(self, ids: Sequence[str], *, now: float) -> int:
        ids = list(dict.fromkeys(ids))
        found = self._by_ids(self.ns, ids, "seq, status, record")
        return sum(self.status_change(int(found[fid][0]), fid, CODE_STATUS[found[fid][1]],
                                      json.loads(found[fid][2]), "STALE", now, still_due(now))
                   for fid in ids if fid in found)

    def record_access(self, ids: Sequence[str], *, now: float) -> None:
        counts = Counter(ids)
        found = self.require(list(counts))
        self.cur.execute(
            "UPDATE ckf_facts f SET access_count = f.access_count + u.n, last_access = %s "
            "FROM unnest(%s::bigint[], %s::bigint[]) AS u(seq, n) WHERE f.seq = u.seq",
            (float(now), [seq for seq, *_ in found], [counts[fid] for _, fid, *_ in found]))

    def save_communities(self, membership: Mapping[str, int],
                         keywords: Mapping[int, Sequence[str]], digest: str, *,
                         now: float) -> bool:
        info = self.ns_info
        info["adds"] = 0
        if info["cdigest"] == digest:
            return False
        members = self.require(list(membership))
        self.cur.execute("UPDATE ckf_facts SET community = NULL "
                         "WHERE ns_id = %s AND community IS NOT NULL", (self.ns_id,))
        if members:
            self.cur.execute(
                "UPDATE ckf_facts f SET community = u.c "
                "FROM unnest(%s::bigint[], %s::int[]) AS u(seq, c) WHERE f.seq = u.seq",
                ([seq for seq, *_ in members], [int(membership[fid]) for _, fid, *_ in members]))
        info["labels"] = {str(c): list(k) for c, k in keywords.items()}
        info["cdigest"] = digest
        self.tick(now)
        return True

    def prune(self, upto: int) -> None:
        """Drop the change-feed entries up to generation ``upto``."""
        self.cur.execute("DELETE FROM ckf_changes WHERE ns_id = %s AND gen <= %s",
                         (self.ns_id, upto))

    def restore(self, data: Any, record: Callable[[Any, float], dict[str, Any]]) -> None:
        """Write a :class:`ctxrelay.storage.factcopy.NamespaceDump` into this (new)
        namespace: fact ids, statuses, stored times, access counts, communities,
        keys, vectors, edges and sources as they were; seqs drawn anew in order."""
        info, cur, n = self.ns_info, self.cur, len(data.facts)
        seqs = sorted(int(r[0]) for r in cur.execute(
            "SELECT nextval('ckf_fact_seq') FROM generate_series(1, %s)", (n,))) if n else []
        rows, docs = [], []
        for seq, fact, modified, vec in zip(seqs, data.facts, data.modified, data.vectors):
            rec = record(fact, modified)
            erased = fact.status == "DELETED"
            last = fact.last_accessed_at
            rows.append((seq, self.ns_id, uuid.UUID(fact.fact_id), STATUS_CODE[fact.status],
                         rec["importance"], modified, rec.get("ttl_seconds"),
                         _key(rec.get("key")), factstate.due_time(fact.status, rec),
                         json.dumps(rec), None if erased else np.asarray(vec, np.float32),
                         fact.access_count, None if last is None else epoch_of(last),
                         fact.community))
            info["counts"][fact.status] += 1
            self.redigest(None, factstate.digest_component(fact.fact_id, fact.content_hash,
                                                       fact.status, modified))
            if not erased:
                docs.append((seq, fact.content))
        if rows:
            cur.executemany("INSERT INTO ckf_facts (seq, ns_id, fact_id, status, importance, "
                            "modified_at, ttl_seconds, key, due, record, vector, access_count, "
                            "last_access, community) VALUES "
                            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
        self.index_terms(docs, 1)
        seq_of = {f.fact_id: s for f, s in zip(data.facts, seqs)}
        self.store_edges((seq_of[a], seq_of[b], w) for a, b, w in data.edges)
        for src in data.sources:
            rec = {k: v for k, v in src.items() if k != "namespace"}
            rec["ingested_at"] = epoch_of(src["ingested_at"])
            cur.execute("INSERT INTO ckf_sources (ns_id, source_id, record) VALUES (%s, %s, %s)",
                        (self.ns_id, src["source_id"], json.dumps(rec)))
        info["labels"] = {str(c): list(k) for c, k in data.keywords.items()}
        info.update(data.info)
