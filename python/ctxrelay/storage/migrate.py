"""Copy a store from one back end to another (``ctxrelay migrate --from A --to B``).

Every durable part is carried, and each is read back from the target and
compared with the source before the report is returned (:func:`migrate`
raises, naming the session or namespace, if anything differs):

- **Sessions and turns**: every session (id, creation time, metadata,
  archived flag) and every turn whole (role, content, name, tool_call_id,
  metadata, timestamp, idempotency key, token count), each session in one
  transaction of the target (the transcript's ``export_jsonl``/
  ``import_jsonl``), compared by a checksum over every field; every
  idempotency key is then looked up at the target (``turn_for_key``) and
  must name its turn, so keyed retries keep being honoured.
- **The knowledge fabric** (:mod:`ctxrelay.storage.factcopy`): every fact
  with its id, status, stored times, access counts, community, key and
  vector, the edges, community keywords and sources, one namespace per
  transaction, compared whole (the state hash too, so ETags stay valid).
  The ANN index is rebuilt from the copied vectors where it is next used.
- **Warm artifacts** and **scratch entries with their blobs**
  (:mod:`ctxrelay.storage.partcopy`): every version of every artifact, every
  entry with its blob, as stored (ids, versions, times, keys, last use, pins,
  references, so retention and LRU order carry over), one session per
  transaction, compared field by field and blob by hash.
- **The turn log** is derived data: it is derived again at the target with
  the session's embedder, then the inputs callers set by hand (thread
  states, references) are copied onto it, and it is compared with the
  source (threads, labels, per-turn records exactly; turn vectors within a
  tolerance).  The rolling log and hot cache rebuild themselves.

Before anything is written, the target is checked for clashes (a session,
fact namespace, or a session's warm artifacts or scratch entries held
already): a clash refuses the whole migration.  The report carries per-part
counts and checksums (:meth:`MigrationReport.to_dict`).
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.errors import InvalidArgumentError, SessionExistsError, StoreError
from ctxrelay.storage.partcopy import PartCopy

__all__ = ["migrate", "MigrationReport", "SessionCopy", "NamespaceCopy", "session_checksum"]

#: Parts derived again on the target (their hand-set inputs copied onto them).
DERIVED_PARTS = ("turnlog",)
#: Parts copied as they are when the source has them (besides the transcript).
DURABLE_PARTS = ("warm", "scratch", "facts")


@dataclass(frozen=True)
class SessionCopy:
    session_id: str
    turns: int
    checksum: str          # sha256 over the session header and every turn's fields
    keys: int = 0          # idempotency keys (each checked at the target)


@dataclass(frozen=True)
class NamespaceCopy:
    namespace: str
    facts: int
    checksum: str          # sha256 of every fact's fields, vector, key, edges, communities


@dataclass
class MigrationReport:
    source: str
    target: str
    sessions: list[SessionCopy] = field(default_factory=list)
    rebuild: list[str] = field(default_factory=list)   # derived parts, derived again at the target
    namespaces: list[NamespaceCopy] = field(default_factory=list)   # the knowledge fabric
    parts: dict[str, PartCopy] = field(default_factory=dict)   # warm, scratch, turnlog
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)   # seconds per part

    @property
    def facts(self) -> int:
        return sum(n.facts for n in self.namespaces)

    @property
    def turns(self) -> int:
        return sum(s.turns for s in self.sessions)

    @property
    def checksum(self) -> str:
        """One checksum of the whole store (sessions in id order)."""
        h = hashlib.sha256()
        for copy in sorted(self.sessions, key=lambda s: s.session_id):
            h.update(copy.checksum.encode())
        for ns in sorted(self.namespaces, key=lambda n: n.namespace):
            h.update(f"|ckf|{ns.namespace}|{ns.checksum}".encode())
        for name in sorted(self.parts):
            h.update(f"|{name}|{self.parts[name].checksum}".encode())
        return h.hexdigest()

    @property
    def keys(self) -> int:
        return sum(s.keys for s in self.sessions)

    def part_totals(self) -> dict[str, dict[str, Any]]:
        """Counts and a checksum per part (what ``ctxrelay migrate`` prints)."""
        transcript = hashlib.sha256()
        for copy in sorted(self.sessions, key=lambda s: s.session_id):
            transcript.update(copy.checksum.encode())
        facts = hashlib.sha256()
        for ns in sorted(self.namespaces, key=lambda n: n.namespace):
            facts.update(f"{ns.namespace}|{ns.checksum}".encode())
        out = {"transcript": {"sessions": len(self.sessions), "turns": self.turns,
                              "keys": self.keys, "checksum": transcript.hexdigest()},
               "facts": {"namespaces": len(self.namespaces), "facts": self.facts,
                         "checksum": facts.hexdigest()}}
        for name in sorted(self.parts):
            out[name] = self.parts[name].to_dict()
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target,
                "sessions": len(self.sessions), "turns": self.turns, "keys": self.keys,
                "checksum": self.checksum, "rebuild": list(self.rebuild),
                "parts": self.part_totals(), "seconds": round(self.seconds, 3),
                "part_seconds": {k: round(v, 3) for k, v in self.timings.items()},
                "per_session": [s.__dict__ for s in self.sessions],
                "facts": self.facts, "per_namespace": [n.__dict__ for n in self.namespaces]}


def session_checksum(transcript: Any, session_id: str) -> tuple[int, str]:
    """``(turns, sha256)`` of a session: its header and every field of every turn."""
    turns, _, digest = _session_print(transcript, session_id)
    return turns, digest


def _session_print(transcript: Any, session_id: str) -> tuple[int, dict[str, int], str]:
    """``(turns, {idempotency key: turn id}, sha256)`` of a session."""
    info = transcript.session(session_id)
    keys: dict[str, int] = {}
    h = hashlib.sha256()
    header = [info.session_id, info.created, info.metadata, info.archived]
    h.update(json.dumps(header, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    count = 0
    for turn in transcript.iter_turns(session_id):
        row = [turn.turn_id, turn.role, turn.content, turn.name, turn.tool_call_id,
               turn.metadata, turn.timestamp, turn.key, turn.tokens, turn.tokens_exact]
        h.update(b"\n" + json.dumps(row, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        count += 1
        if turn.key is not None:
            keys[turn.key] = turn.turn_id
    return count, keys, h.hexdigest()


def migrate(source: Any, target: Any, *,
            on_session: Callable[[SessionCopy], None] | None = None) -> MigrationReport:
    """Copy store ``source`` into store ``target`` (specs: directories or URLs).

    The target must hold none of the source's sessions, fact namespaces, or
    sessions' warm artifacts or scratch entries (copy into a new or disjoint
    store): every part is checked before anything is written.  ``on_session``
    is called after each session is copied and verified (progress).

    @raises InvalidArgumentError when source and target are one store, or the
        source's turn log was derived with an embedder this process lacks.
    @raises SessionExistsError when the target already holds a clashing item
        (nothing is written).
    @raises StoreError when a copied part does not read back equal (the
        message names it).
    """
    from ctxrelay.storage import open_stores
    from ctxrelay.storage.spec import parse_store_spec
    if parse_store_spec(source).key == parse_store_spec(target).key:
        raise InvalidArgumentError(
            f"--from and --to name the same store ({source}); pass another target")
    started = time.perf_counter()
    with open_stores(source) as src, open_stores(target) as dst:
        facts = _FactCopy(src, dst, target) if src.has("facts") else None
        try:
            ids = [info.session_id for info in src.transcript.sessions()]
            clash = [sid for sid in ids if dst.transcript.has_session(sid)]
            if clash:
                raise SessionExistsError(
                    f"the target store {target} already holds {len(clash)} of the source's "
                    f"sessions ({', '.join(map(repr, clash[:5]))}); migrate into an empty "
                    "store, or remove them there first. Nothing was copied")
            parts = _prepare_parts(src, dst, str(target), ids)
        except BaseException:
            if facts is not None:
                facts.close()
            raise
        report = MigrationReport(str(source), str(target),
                                 rebuild=[p for p in DERIVED_PARTS if p in parts])
        try:
            clock = time.perf_counter()
            for sid in ids:
                report.sessions.append(_copy_session(src, dst, sid, str(target)))
                if on_session is not None:
                    on_session(report.sessions[-1])
            report.timings["transcript"] = time.perf_counter() - clock
        except BaseException:
            if facts is not None:
                facts.close()
            raise
        if facts is not None:
            clock = time.perf_counter()
            report.namespaces = facts.copy()
            report.timings["facts"] = time.perf_counter() - clock
        for name, part in parts.items():
            clock = time.perf_counter()
            report.parts[name] = part.copy()
            report.timings[name] = time.perf_counter() - clock
    report.seconds = time.perf_counter() - started
    return report


def _prepare_parts(src: Any, dst: Any, target: str, ids: list[str]) -> dict[str, Any]:
    """The copiers of the source's warm, scratch and turn-log parts, each having
    checked the target for clashes (nothing written yet)."""
    from ctxrelay.storage.partcopy import ScratchCopy, TurnLogCopy, WarmCopy
    parts: dict[str, Any] = {}
    if src.has("warm"):
        parts["warm"] = WarmCopy(src, dst, target)
    if src.has("scratch"):
        parts["scratch"] = ScratchCopy(src, dst, target)
    if src.has("turnlog"):
        parts["turnlog"] = TurnLogCopy(src, dst, target, ids)
    return parts


def _copy_session(src: Any, dst: Any, sid: str, target: str) -> SessionCopy:
    """One session in one transaction of the target, verified field by field and
    key by key."""
    dst.transcript.import_jsonl(src.transcript.export_jsonl(sid))
    turns, keys, digest = _session_print(src.transcript, sid)
    have = _session_print(dst.transcript, sid)
    if have[0::2] != (turns, digest):
        raise StoreError(
            f"session {sid!r} reads back from {target} as {have[0]} turns with "
            f"checksum {have[2][:12]} but the source has {turns} turns, "
            f"{digest[:12]}; the copy is not faithful, do not switch to it")
    lost = [key for key, turn_id in keys.items()
            if dst.transcript.turn_for_key(sid, key) != turn_id]
    if lost:
        raise StoreError(
            f"{len(lost)} idempotency key(s) of session {sid!r} (e.g. {lost[0]!r}) do not "
            f"find their turn in {target}; the copy is not faithful, do not switch to it")
    return SessionCopy(sid, turns, digest, len(keys))


class _FactCopy:
    """The knowledge fabric's part of a migration (checked before any copy)."""

    def __init__(self, src: Any, dst: Any, target: Any) -> None:
        from ctxrelay.storage.factcopy import open_raw_facts
        self.source = open_raw_facts(src)
        self.target = None
        self.dst = dst
        try:
            self.names = self.source.namespaces()
            clash = []
            if dst.has("facts"):        # else made in copy(): a refusal writes nothing
                self.target = open_raw_facts(dst, dict(self.source.config))
                clash = [ns for ns in self.names if self.target.namespace(ns) is not None]
        except BaseException:
            self.close()
            raise
        if clash:
            self.close()
            raise SessionExistsError(
                f"the target store {target} already holds facts in namespace(s) "
                f"{', '.join(map(repr, clash[:5]))}; migrate into an empty store. "
                "Nothing was copied")

    def close(self) -> None:
        for storage in (getattr(self, "target", None), self.source):
            if storage is not None and not storage.closed:
                storage.close()

    def copy(self) -> list[NamespaceCopy]:
        from ctxrelay.storage.factcopy import dump, fingerprint, open_raw_facts, restore
        out = []
        try:
            if self.target is None:
                self.target = open_raw_facts(self.dst, dict(self.source.config))
            for ns in self.names:
                data = dump(self.source, ns)
                restore(self.target, data)
                want = fingerprint(self.source, ns)
                if fingerprint(self.target, ns) != want:
                    raise StoreError(
                        f"the facts of namespace {ns!r} do not read back from the target as "
                        "they are in the source; the copy is not faithful, do not switch to it")
                digest = hashlib.sha256(json.dumps(want, sort_keys=True, default=list)
                                        .encode("utf-8")).hexdigest()
                out.append(NamespaceCopy(ns, len(data.facts), digest))
        finally:
            self.close()
        return out
