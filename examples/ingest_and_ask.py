"""Ingest a few documents into the knowledge fabric, then ask it questions.

    .venv/bin/python examples/ingest_and_ask.py --store DIR

Writes three short markdown files (an etcd runbook, a backup policy and an
on-call note) into a temporary directory, ingests them with
``Runtime.ingest`` (each file is chunked into facts with its source kept),
and asks ``Runtime.facts`` a few questions, printing the top facts with
their score and where they come from (file, paragraph).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from pathlib import Path

from ctxrelay import Runtime

DOCS = {
    "etcd_runbook.md": """\
        # etcd runbook

        The production etcd cluster has three members: etcd-1, etcd-2 and etcd-3.
        The backend quota is 8 GiB, set with --quota-backend-bytes=8589934592.

        ## Defragmentation

        Defragment one member at a time, followers first, never the leader during
        business hours. Run etcdctl defrag against each endpoint separately.
        """,
    "backup_policy.md": """\
        # Backup policy

        Hourly snapshots are taken with etcdctl snapshot save and shipped by restic
        to the S3 bucket nw-platform-etcd-backups in eu-west-1.

        Retention: keep-hourly 48, keep-daily 30, keep-weekly 12. Compliance requires
        thirty days of daily snapshots. A restore drill runs every quarter.
        """,
    "oncall.md": """\
        # On-call notes

        The fsync p99 on etcd-2 spikes to 40 ms during compaction. The fix under
        discussion is moving etcd-2 to local NVMe disks.

        Certificates are issued by cert-manager; the peer certificates expire first,
        so renew them before the serving certificates.
        """,
}

QUESTIONS = [
    "How large is the etcd backend quota?",
    "Where are the backups stored and how long are they kept?",
    "Which member has slow fsync?",
]


def write_docs(directory: Path) -> list[Path]:
    paths = []
    for name, text in DOCS.items():
        path = directory / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        paths.append(path)
    return paths


def short(text: str, width: int = 90) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="store directory (default: a fresh temporary one)")
    parser.add_argument("-k", type=int, default=3, help="facts per question (default 3)")
    args = parser.parse_args(argv)

    store = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="ctxrelay-ingest-"))
    print(f"store: {store}")
    with tempfile.TemporaryDirectory(prefix="ctxrelay-docs-") as tmp, Runtime(store) as rt:
        paths = write_docs(Path(tmp))
        report = rt.ingest(paths, namespace="docs")     # a progress bar on a terminal
        print(f"ingested {report['documents']} documents into namespace "
              f"{report['namespace']!r}: {report['facts_added']} facts added")
        for question in QUESTIONS:
            print(f"\n? {question}")
            for rank, fact in enumerate(rt.facts(question, k=args.k, namespace="docs"), start=1):
                where = f"{fact['metadata'].get('title', '?')}, {fact['source_location']}"
                print(f"  {rank}. {fact['score']:.3f} [{where}] {short(fact['content'], 70)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
