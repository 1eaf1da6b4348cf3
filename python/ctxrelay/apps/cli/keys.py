"""``keys``: the relay's API keys (create, list, revoke) in its keys file.

A key maps to a tenant: every session, fact namespace, scratch entry and
artifact the relay stores for the key's requests is that tenant's (see
``ctxrelay.apps.server.tenants``).  The file keeps a salted hash of each key,
never the key, so ``create`` prints the key once.  A running relay re-reads
the file when it changes: a revoked key is refused from the next request on.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from ctxrelay.apps.cli.common import EXIT_OK, CLIError
from ctxrelay.apps.cli.output import emit_json, out, table
from ctxrelay.apps.cli.parser import Commands

KEYS_FILE_ENV = "CTXRELAY_KEYS_FILE"
LIMIT_FLAGS = ("requests_per_minute", "body_bytes_per_minute", "stored_bytes")


def _keys_file(args: argparse.Namespace) -> Any:
    # Only this module of the CLI needs the relay's key code, and only when it runs.
    from ctxrelay.apps.server.tenants import KeyFile
    path = args.keys or os.environ.get(KEYS_FILE_ENV)
    if not path:
        raise CLIError(f"no keys file: pass --keys FILE or set ${KEYS_FILE_ENV} "
                       "(the file the relay reads with --keys)")
    return KeyFile(Path(path))


def _public(record: Any) -> dict[str, Any]:
    return {"id": record.id, "tenant": record.tenant, "name": record.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
            "revoked": record.revoked, "limits": dict(record.limits)}


def cmd_keys(args: argparse.Namespace) -> int:
    from ctxrelay.errors import InvalidArgumentError
    keys = _keys_file(args)
    try:
        if args.keys_cmd == "create":
            limits = {name: getattr(args, name) for name in LIMIT_FLAGS
                      if getattr(args, name) is not None}
            key, record = keys.create(args.tenant, name=args.name or "", limits=limits)
            if args.json:
                emit_json({"key": key, **_public(record)})
            else:
                out(key)
                out(f"# tenant {record.tenant}, id {record.id}: the key is shown once; "
                    "send it as Authorization: Bearer <key>")
        elif args.keys_cmd == "list":
            records = [_public(r) for r in keys.load().values()]
            if args.json:
                emit_json({"keys": records})
            elif not records:
                out("no keys")
            else:
                out(table(["id", "tenant", "name", "created", "revoked", "limits"],
                          [[r["id"], r["tenant"], r["name"], r["created"],
                            "yes" if r["revoked"] else "no",
                            ", ".join(f"{k}={v}" for k, v in r["limits"].items()) or "-"]
                           for r in records], indent=""))
        else:
            record = keys.revoke(args.key_id)
            if args.json:
                emit_json(_public(record))
            else:
                out(f"revoked {record.id} (tenant {record.tenant})")
    except InvalidArgumentError as e:
        raise CLIError(str(e)) from None
    return EXIT_OK


def register(commands: Commands) -> None:
    p = commands.add("keys", "the relay's API keys (tenants): create, list, revoke",
                     ["ctxrelay keys create acme --keys relay-keys.json",
                      "ctxrelay keys list --keys relay-keys.json",
                      "ctxrelay keys revoke 3f2a9c1b7e4d --keys relay-keys.json"],
                     func=cmd_keys)
    actions = p.add_subparsers(dest="keys_cmd", metavar="ACTION", required=True)
    keys_opt = argparse.ArgumentParser(add_help=False)
    keys_opt.add_argument("--keys", metavar="FILE", default=argparse.SUPPRESS,
                          help=f"the keys file (default ${KEYS_FILE_ENV})")
    p.set_defaults(keys=None)
    q = commands.add("create", "a new key for a tenant; prints the key once",
                     ["ctxrelay keys create acme --keys relay-keys.json "
                      "--requests-per-minute 600"], within=actions, parents=[keys_opt])
    q.add_argument("tenant", metavar="TENANT", help="a-z, 0-9, '_' or '-' (up to 63)")
    q.add_argument("--name", help="a label for the key (who holds it)")
    for name in LIMIT_FLAGS:
        q.add_argument(f"--{name.replace('_', '-')}", type=int, dest=name, metavar="N",
                       help=f"limit: {name.replace('_', ' ')} (default: none)")
    commands.add("list", "every key: id, tenant, created, revoked, limits (never the key)",
                 ["ctxrelay keys list --keys relay-keys.json"], within=actions,
                 parents=[keys_opt])
    q = commands.add("revoke", "refuse a key from now on (the relay re-reads the file)",
                     ["ctxrelay keys revoke 3f2a9c1b7e4d --keys relay-keys.json"],
                     within=actions, parents=[keys_opt])
    q.add_argument("key_id", metavar="KEY_ID", help="the id `keys list` shows (or the key)")
