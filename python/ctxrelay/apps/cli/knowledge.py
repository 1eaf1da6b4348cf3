"""``ingest`` and ``facts``: the knowledge store (CKF)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ctxrelay.apps.cli.common import (EXIT_OK, CLIError, accepts, count, open_runtime,
                                      runtime_method)
from ctxrelay.apps.cli.output import emit_json, one_line, out, plain, table
from ctxrelay.apps.cli.parser import Commands, progress_options
from ctxrelay.apps.cli.progress import Progress


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.0f} {unit}"
        n /= 1024
    return str(n)


def _describe(items: list[Any]) -> str:
    """What is being ingested, for the progress lines: '2 files, 1 directory (773 KB)'."""
    files = [i for i in items if isinstance(i, Path) and i.is_file()]
    dirs = [i for i in items if isinstance(i, Path) and i.is_dir()]
    texts = [i for i in items if isinstance(i, str)]
    parts = [f"{len(xs)} {one if len(xs) == 1 else many}"
             for xs, one, many in ((files, "file", "files"), (dirs, "directory", "directories"),
                                   (texts, "text", "texts")) if xs]
    # surrogatepass: a text from argv that is not UTF-8 is sized here and refused,
    # with its message, by Runtime.ingest (not by a UnicodeEncodeError here).
    size = sum(f.stat().st_size for f in files) + sum(
        len(t.encode("utf-8", "surrogatepass")) for t in texts)
    known = f" ({_size(size)}{' + directories' if dirs else ''})" if files or texts else ""
    return "ingesting " + ", ".join(parts) + known


def cmd_ingest(args: argparse.Namespace) -> int:
    ingest = runtime_method("ingest")         # before opening the store: fail fast
    items: list[Any] = []
    for p in args.paths:
        if p == "-":
            items.append(sys.stdin.read())
        elif not Path(p).exists():
            raise CLIError(f"{p} does not exist; pass existing files or directories "
                           "(or --text TEXT for a text)")
        else:
            items.append(Path(p))
    items.extend(args.text or [])
    if not items:
        raise CLIError("nothing to ingest; pass files, directories, '-' for stdin or --text TEXT")
    kwargs = {k: v for k, v in (("namespace", args.namespace),
                                ("source_type", args.source_type)) if v is not None}
    with Progress("ingest", enabled=not args.no_progress,
                  interval=args.progress_interval) as progress:
        progress.status(_describe(items))
        if accepts(ingest, "progress"):
            kwargs["progress"] = progress.bar
        with open_runtime(args) as rt:
            report = rt.ingest(items, **kwargs)
        data = plain(report)
        if isinstance(data, dict):
            progress.status(f"{data.get('documents', '?')} document(s), "
                            f"{data.get('facts_added', '?')} fact(s) added")
    if args.json:
        emit_json(data)
    elif isinstance(data, dict):
        out("ingested: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in data.items()
                                     if isinstance(v, (int, float, str)) and k != "namespace")
            + (f" (namespace {data['namespace']})" if data.get("namespace") else ""))
    else:
        out(f"ingested: {data}")
    return EXIT_OK


def _fact_fields(item: Any) -> dict[str, Any]:
    d = plain(item)
    if not isinstance(d, dict):
        return {"content": d}
    fact = d.get("fact") if isinstance(d.get("fact"), dict) else {}
    return {**fact, **{k: v for k, v in d.items() if k != "fact"}}


def cmd_facts_reindex(args: argparse.Namespace) -> int:
    runtime_method("reindex_facts")
    kwargs = {} if args.namespace is None else {"namespace": args.namespace}
    with open_runtime(args) as rt:
        report = rt.reindex_facts(**kwargs)
    if args.json:
        emit_json(report)
    elif not report["namespaces"]:
        out("no knowledge namespace to rebuild")
    else:
        out(f"rebuilt the ANN index of {', '.join(report['namespaces'])}: "
            f"{report['vectors']} vectors in {report['seconds']:.1f} s")
    return EXIT_OK


def cmd_facts(args: argparse.Namespace) -> int:
    action = args.facts_cmd
    runtime_method("facts" if action == "search" else "fact")
    kwargs = {} if args.namespace is None else {"namespace": args.namespace}
    with open_runtime(args) as rt:
        if action == "search":
            found = rt.facts(args.query, k=args.k, **kwargs)
        else:
            found = rt.fact(args.key_or_id, **kwargs)
    if args.json:
        emit_json({"query": args.query, "facts": found} if action == "search" else found)
        return EXIT_OK
    if action == "search":
        rows = [_fact_fields(f) for f in found]
        if not rows:
            out(f"no fact matches {args.query!r}")
        else:
            out(table(["score", "fact", "key", "status", "content"],
                      [[f"{float(r.get('score', 0.0)):.3f}", str(r.get("fact_id", ""))[:8],
                        r.get("key") or "", r.get("status", ""),
                        one_line(r.get("content", ""), 80)] for r in rows],
                      indent="", right=(0,)))
        return EXIT_OK
    fields = _fact_fields(found)
    for k, v in fields.items():
        if k != "content":
            out(f"{k}: {json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v}")
    out("content:")
    for line in str(fields.get("content", "")).splitlines():
        out(f"    {line}")
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add("ingest", "add files, directories or texts to the knowledge store",
                     ["ctxrelay ingest docs/",
                      "ctxrelay ingest runbook.md notes.txt --namespace ops",
                      "ctxrelay ingest --text 'the etcd quota is 8 GiB' --source-type "
                      "user",
                      "curl -s https://example.org/page.md | ctxrelay ingest -",
                      "ctxrelay ingest big.md 2> ingest.log   # a progress line every 10 s"],
                     parents=[progress_options()], func=cmd_ingest)
    p.add_argument("paths", metavar="PATH", nargs="*",
                   help="files or directories (searched recursively); '-' reads a text on stdin")
    p.add_argument("--text", action="append", metavar="TEXT", help="a text to ingest (repeatable)")
    p.add_argument("--namespace", help="knowledge namespace (default: the store's default)")
    p.add_argument("--source-type", metavar="TYPE", help="source type of these documents")

    p = commands.add("facts", "search, inspect or reindex the knowledge store",
                     ["ctxrelay facts search 'etcd quota'",
                      "ctxrelay facts search quota -k 3 --namespace ops",
                      "ctxrelay facts show 0b5c1f2e-...", "ctxrelay facts show my-key",
                      "ctxrelay facts reindex"],
                     func=cmd_facts)
    actions = p.add_subparsers(dest="facts_cmd", metavar="ACTION", required=True)
    q = commands.add("search", "semantic search over facts",
                     ["ctxrelay facts search 'etcd quota' -k 5"], within=actions, func=cmd_facts)
    q.add_argument("query", metavar="QUERY")
    q.add_argument("-k", type=count(1), default=10, metavar="N", help="facts (default 10)")
    q.add_argument("--namespace")
    q = commands.add("show", "one fact by id or key, whatever its status",
                     ["ctxrelay facts show my-key"], within=actions, func=cmd_facts)
    q.add_argument("key_or_id", metavar="KEY_OR_ID")
    q.add_argument("--namespace")
    q.set_defaults(query=None)
    q = commands.add("reindex", "rebuild the ANN index from the stored vectors, on one thread "
                     "(an index grown on two threads by an older version answers like "
                     "every other copy of the store afterwards)",
                     ["ctxrelay facts reindex", "ctxrelay facts reindex --namespace ops"],
                     within=actions, func=cmd_facts_reindex)
    q.add_argument("--namespace", help="one namespace (default: every namespace)")
