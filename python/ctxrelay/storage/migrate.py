"""Copy a store from one back end to another (``ctxrelay migrate --from A --to B``).

What is copied: every session (id, creation time, metadata, archived flag)
and every turn whole (role, content, name, tool_call_id, metadata,
timestamp, idempotency key, token count), each session in one transaction of
the target (the transcript's ``export_jsonl``/``import_jsonl``, so a failure
leaves no half session).  Then each session is read back from the target and
compared with the source by a checksum over every field: :func:`migrate`
returns the per-session counts and checksums, and raises if any differ.

The knowledge fabric is copied too, one namespace per transaction of the
target (:mod:`ctxrelay.storage.factcopy`): every fact with its id, status,
stored times, access counts, community, key and vector, the edges, community
keywords and sources; each namespace is then compared whole with the source
(every fact's fields, vector, key lookup, edge, community, source and the
state hash), and the report carries its count and checksum.  The ANN index is
rebuilt from the copied vectors where it is next used.

What is not copied, by design: the turn log, rolling log and hot cache are
derived and rebuilt on the target (``ctxrelay derive`` rebuilds the turn
log; the others rebuild themselves).  Warm artifacts and the scratch buffer
are not copied yet (a faithful copy -- versions, creation times, blobs -- is
still to be written): a source that has either is refused before anything is
written, naming the parts, so nothing is silently dropped.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxrelay.errors import InvalidArgumentError, SessionExistsError, StoreError

__all__ = ["migrate", "MigrationReport", "SessionCopy", "NamespaceCopy", "session_checksum"]

#: Parts that are rebuilt on the target rather than copied.
DERIVED_PARTS = ("turnlog",)
#: Parts a migration must carry when the source has them.
DURABLE_PARTS = ("warm", "scratch", "facts")
#: Durable parts this migration cannot carry yet (refused at the source).
NOT_COPIED = ("warm", "scratch")


@dataclass(frozen=True)
class SessionCopy:
    session_id: str
    turns: int
    checksum: str          # sha256 over the session header and every turn's fields


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
    rebuild: list[str] = field(default_factory=list)   # derived parts to rebuild on the target
    namespaces: list[NamespaceCopy] = field(default_factory=list)   # the knowledge fabric

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
        return h.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target,
                "sessions": len(self.sessions), "turns": self.turns,
                "checksum": self.checksum, "rebuild": list(self.rebuild),
                "per_session": [s.__dict__ for s in self.sessions],
                "facts": self.facts, "per_namespace": [n.__dict__ for n in self.namespaces]}


def session_checksum(transcript: Any, session_id: str) -> tuple[int, str]:
    """``(turns, sha256)`` of a session: its header and every field of every turn."""
    info = transcript.session(session_id)
    h = hashlib.sha256()
    header = [info.session_id, info.created, info.metadata, info.archived]
    h.update(json.dumps(header, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    count = 0
    for turn in transcript.iter_turns(session_id):
        row = [turn.turn_id, turn.role, turn.content, turn.name, turn.tool_call_id,
               turn.metadata, turn.timestamp, turn.key, turn.tokens, turn.tokens_exact]
        h.update(b"\n" + json.dumps(row, ensure_ascii=False, sort_keys=True).encode("utf-8"))
        count += 1
    return count, h.hexdigest()


def migrate(source: Any, target: Any, *,
            on_session: Callable[[SessionCopy], None] | None = None) -> MigrationReport:
    """Copy store ``source`` into store ``target`` (specs: directories or URLs).

    The target must not hold any of the source's sessions (copy into a new or
    disjoint store).  ``on_session`` is called after each session is copied
    and verified (progress).

    @raises InvalidArgumentError when source and target are one store.
    @raises StoreError when the source holds parts the copy cannot carry, or a
        copied session does not read back equal (the report names it).
    @raises SessionExistsError when the target already holds a source session.
    """
    from ctxrelay.storage import open_stores
    from ctxrelay.storage.spec import parse_store_spec
    if parse_store_spec(source).key == parse_store_spec(target).key:
        raise InvalidArgumentError(
            f"--from and --to name the same store ({source}); pass another target")
    with open_stores(source) as src:
        carried = [part for part in NOT_COPIED if src.has(part)]
        if carried:
            raise StoreError(
                f"the source store {source} holds {', '.join(carried)}, which this migration "
                "cannot copy yet (it copies sessions, turns and facts); nothing was copied")
        with open_stores(target) as dst:
            facts = _FactCopy(src, dst, target) if src.has("facts") else None
            ids = [info.session_id for info in src.transcript.sessions()]
            clash = [sid for sid in ids if dst.transcript.has_session(sid)]
            if clash:
                raise SessionExistsError(
                    f"the target store {target} already holds {len(clash)} of the source's "
                    f"sessions ({', '.join(map(repr, clash[:5]))}); migrate into an empty "
                    "store, or remove them there first. Nothing was copied")
            report = MigrationReport(str(source), str(target),
                                     rebuild=[p for p in DERIVED_PARTS if src.has(p)])
            for sid in ids:
                dst.transcript.import_jsonl(src.transcript.export_jsonl(sid))
                want = session_checksum(src.transcript, sid)
                have = session_checksum(dst.transcript, sid)
                if have != want:
                    raise StoreError(
                        f"session {sid!r} reads back from {target} as {have[0]} turns with "
                        f"checksum {have[1][:12]} but the source has {want[0]} turns, "
                        f"{want[1][:12]}; the copy is not faithful, do not switch to it")
                copy = SessionCopy(sid, *want)
                report.sessions.append(copy)
                if on_session is not None:
                    on_session(copy)
            if facts is not None:
                report.namespaces = facts.copy()
    return report


class _FactCopy:
    """The knowledge fabric's part of a migration (checked before any copy)."""

    def __init__(self, src: Any, dst: Any, target: Any) -> None:
        from ctxrelay.storage.factcopy import open_raw_facts
        self.source = open_raw_facts(src)
        try:
            self.names = self.source.namespaces()
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
        from ctxrelay.storage.factcopy import dump, fingerprint, restore
        out = []
        try:
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
