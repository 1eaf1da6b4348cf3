"""A chat loop over Runtime.managed_turn: one line in, one managed turn out.

    .venv/bin/python examples/chat_loop.py --store DIR              # read stdin
    .venv/bin/python examples/chat_loop.py --store DIR --script     # canned lines

Each line you type is appended to the session, a bounded pack is assembled
under the token cap, the provider answers (``echo`` by default: no network,
the reply is a digest of the request) and the reply is appended.  After
each turn the reply and the ledger total (tokens of the provider-visible
request, of the input budget) are printed.  An empty line or EOF ends it.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from ctxrelay import Runtime

SCRIPT = [
    "our etcd quota is 8 GiB",
    "backups go to the S3 bucket nw-platform-etcd-backups with restic",
    "the fsync p99 on etcd-2 spikes during compaction",
    "what was the quota again?",
]


def lines(source: Iterable[str], *, prompt: bool) -> Iterator[str]:
    for line in source:
        text = line.strip()
        if not text:
            return
        if prompt:
            print(f"> {text}")          # echo canned lines so the transcript reads well
        yield text


def stdin_lines() -> Iterator[str]:
    while True:
        if sys.stdin.isatty():
            print("> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            return
        yield line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="store directory (default: a fresh temporary one)")
    parser.add_argument("--session", default="chat", help="session id (default: chat)")
    parser.add_argument("--script", action="store_true",
                        help="run the canned lines instead of reading stdin")
    parser.add_argument("--max-context-tokens", type=int, default=1024)
    parser.add_argument("--provider", default="echo", help="echo (default) or openai")
    args = parser.parse_args(argv)

    store = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="ctxrelay-chat-"))
    print(f"store: {store}, session: {args.session}")
    source = lines(SCRIPT, prompt=True) if args.script else lines(stdin_lines(), prompt=False)
    with Runtime(store) as rt:
        if args.session not in {s.session_id for s in rt.sessions()}:
            rt.create_session(args.session)
        for n, text in enumerate(source, start=1):
            r = rt.managed_turn(args.session, text, max_context_tokens=args.max_context_tokens,
                                output_reserve=256, safety_margin=32, min_recent_turns=4,
                                provider=args.provider)
            print(f"< {r.reply}")
            print(f"  turn {n}: ledger total {r.ledger.total} of input budget "
                  f"{r.ledger.input_budget} ({r.headers['CRP-Context-Token-Count']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
