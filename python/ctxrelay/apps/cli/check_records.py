"""``check``'s first pass: every record's checksum in every store (issue #15).

With ``--repair`` the damaged records are copied to ``<store>/quarantine/<time>/``;
the derived ones are dropped (the repairs that follow rebuild them from intact
primaries), a damaged primary is left in place and stays a problem.  A store
written before record checksums is reported, and sealed once the store checks clean.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

__all__ = ["check_records", "add_checksums"]


def _lmdb_parts(stores: Any) -> list[tuple[str, Any]]:
    """Every part of the store that keeps checksummed records (LMDB back end)."""
    parts = [("transcript", stores.transcript), ("turnlog", stores.turnlog_if_present()),
             ("warm", stores.warm_if_present()), ("scratch", stores.scratch_if_present()),
             ("facts", stores.facts_if_present())]
    found = []
    for name, part in parts:
        part = getattr(part, "backend", part)          # the CKF's storage under it
        if part is not None and hasattr(part, "damaged_records"):
            found.append((name, part))
    return found


def check_records(stores: Any, store_dir: str, repair: bool) -> list[dict[str, Any]]:
    """Every record's checksum; with ``repair`` the damaged ones are quarantined
    (copied out; derived ones dropped, to be rebuilt by the repairs that follow)."""
    import time
    reports = []
    quarantine = os.path.join(store_dir, "quarantine",
                              time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    for name, part in _lmdb_parts(stores):
        damaged = [dataclasses.replace(rec, store=name) for rec in part.damaged_records()]
        report: dict[str, Any] = {"store": f"{name} records", "repaired": [], "problems": [],
                                  "notices": []}
        if not part.framed:
            report["notices"].append(
                f"UNVERIFIED: the {name} store was written before record checksums: its "
                "reads are not verified (damage reads as data); 'ctxrelay check --repair' "
                "adds them once the store checks clean")
        derived = {db.decode() for db in part.DERIVED_DBS}
        if damaged and repair:
            files = part.quarantine(damaged, quarantine, name)
            for rec, path in zip(damaged, files):
                if rec.db in derived and rec.key:
                    report["repaired"].append(f"{rec.describe()}: quarantined to {path}, "
                                              "rebuilt from intact records")
                else:
                    report["problems"].append(
                        f"{rec.describe()}: a primary record, copied to {path} and left in "
                        "place; restore the store from a backup or export the intact sessions")
        else:
            report["problems"] += [
                rec.describe() + ("; 'ctxrelay check --repair' rebuilds it" if rec.db in derived
                                  else "; a primary record: restore it from a backup")
                for rec in damaged]
        if name == "facts":
            _check_fact_indexes(stores.facts_if_present(), part, damaged, repair, report)
        reports.append(report)
    return reports


def _check_fact_indexes(fabric: Any, part: Any, damaged: list[Any], repair: bool,
                        report: dict[str, Any]) -> None:
    """The CKF's derived indexes against its intact fact records; with ``repair``
    they are rebuilt from them (ids, keys, hidden, expiry, terms), and so are the
    communities (a damaged ``members`` record) and the ANN index (any damage)."""
    from ctxrelay.errors import CtxRelayError
    unsealed = _unsealed_ann_files(fabric)
    if unsealed and not repair:
        report["notices"].append(
            f"UNVERIFIED: {len(unsealed)} ANN index file(s) written before checksums "
            f"({', '.join(os.path.basename(p) for p in unsealed)}) are loaded unchecked; "
            "'ctxrelay check --repair' rebuilds them with one")
    if not repair:
        try:
            report["problems"] += part.index_problems()
        except CtxRelayError as exc:
            report["problems"].append(f"the fact store's indexes cannot be checked: {exc}")
        return
    try:
        report["repaired"] += [f"{p}: rebuilt from the fact records"
                               for p in part.repair_indexes()]
        if damaged or unsealed:
            graph = any(rec.db == "edges" for rec in damaged)
            for ns in fabric.namespaces():
                if graph:
                    count = part.relink(ns, knn=fabric.knn, threshold=fabric.edge_threshold)
                    report["repaired"].append(f"similarity graph of namespace {ns!r}: "
                                              f"{count} edge(s) rebuilt from the vectors")
                if graph or any(rec.db == "members" for rec in damaged):
                    part.forget_communities(ns)
                    fabric.recluster(namespace=ns)
                    report["repaired"].append(f"communities of namespace {ns!r}: reclustered")
                fabric.rebuild_index(namespace=ns)
                report["repaired"].append(f"ANN index of namespace {ns!r}: rebuilt from the "
                                          "stored vectors")
        report["problems"] += part.index_problems()
    except CtxRelayError as exc:
        report["problems"].append(f"the fact store's indexes cannot be rebuilt: {exc}")


def _unsealed_ann_files(fabric: Any) -> list[str]:
    """The CKF's ANN index files without their ``.xxh3`` checksum (an older store's)."""
    import glob
    from ctxrelay.knowledge.graph import DIGEST_SUFFIX
    found = sorted(glob.glob(os.path.join(fabric.path, "hnsw", "ns-*.bin")))
    return [p for p in found if not os.path.exists(p + DIGEST_SUFFIX)]


def add_checksums(stores: Any) -> list[str]:
    """Seal the records of parts written before checksums (the store checked clean)."""
    return [f"added checksums to {part.add_checksums()} record(s) of the {name} store"
            for name, part in _lmdb_parts(stores) if not part.framed]
