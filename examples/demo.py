"""make demo: replay a real-looking ops chat, then run managed turns over it.

1. Replays examples/conversations/etcd_ops.jsonl (75 turns, two days, with
   digressions and returns) into a fresh store and shows what is stored.
2. Searches the transcript through the inverted index.
3. Runs managed turns under a small token cap (echo provider, no network),
   printing each turn's pack and ledger: the cold-history boundary, old
   turns brought back by the index, a warm artifact, the budget held.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from pathlib import Path

from ctxrelay import Runtime

HERE = Path(__file__).resolve().parent
CONVERSATION = HERE / "conversations" / "etcd_ops.jsonl"
POLICY = dict(max_context_tokens=2200, output_reserve=400, safety_margin=100, min_recent_turns=4)


def short(text: str, width: int = 88) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def replay(rt: Runtime, session: str) -> None:
    rt.create_session(session, metadata={"source": CONVERSATION.name})
    for line in CONVERSATION.read_text(encoding="utf-8").splitlines():
        t = json.loads(line)
        rt.append(session, t["role"], t["content"], name=t.get("name"),
                  tool_call_id=t.get("tool_call_id"), metadata=t.get("metadata"),
                  timestamp=t.get("timestamp"), key=f"import-{hash(line) & 0xffffffff:x}")


def show_stored(rt: Runtime, session: str) -> None:
    stats = rt.stats(session)
    print(f"== stored: session {session!r}: {stats.turn_count} turns, {stats.bytes} bytes, "
          f"{stats.tokens} tokens ({'exact' if stats.tokens_exact else 'estimated'}, "
          f"{stats.tokenizer})")
    print(f"   by role: {stats.by_role}; {stats.first_timestamp} .. {stats.last_timestamp}")
    for turn in rt.history(session, 1, 4) + rt.last(session, 2):
        print(f"   #{turn.turn_id:<3} {turn.role:<9} {short(turn.content)}")


def show_search(rt: Runtime, session: str, queries: list[str]) -> None:
    for q in queries:
        print(f"== search {q!r}")
        for hit in rt.search(session, q, k=3):
            print(f"   #{hit.turn_id:<3} {hit.score:6.2f} {hit.role:<9} {short(hit.content, 70)}")


def show_turn(result, question: str) -> None:
    lg = result.ledger
    print(f"\n== managed turn: {question!r}")
    print(f"   reply: {short(result.reply or '', 90)}")
    print(f"   pack ({len(result.pack)} units, utility {result.utility:.3f}, "
          f"{result.status['optimality']}):")
    for u in result.pack:
        turns = f"turns {u.turn_ids[0]}" + (f"-{u.turn_ids[-1]}" if len(u.turn_ids) > 1 else "") \
            if u.turn_ids else ""
        print(f"     {u.kind:<12} {u.variant:<10} {u.tokens:>5} tok  u={u.utility:6.3f}  {turns}")
    print("   ledger:")
    for s in lg.stages:
        print(f"     {s['name']:<10} {s['charged']:>6} charged ({'exact' if s['exact'] else 'estimated'})")
    print(f"     {'framing':<10} {lg.framing:>6} charged (per-message overhead + reply priming)")
    print(f"     {'total':<10} {lg.total:>6} of input budget {lg.input_budget} "
          f"(cap {lg.effective_cap} - reserve {lg.output_reserve} - margin {lg.safety_margin}); "
          f"host-only metadata {lg.host_only_tokens} tokens, not charged")
    b = result.status["cold_history_boundary"]
    if b["inserted"]:
        print(f"   cold-history boundary: turns {b['omitted_first']}-{b['omitted_last']} outside the "
              f"guaranteed tail; {b['turns_not_shown']} stored turns not shown")
    print("   headers: " + ", ".join(f"{k}: {v}" for k, v in sorted(result.headers.items())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", help="store directory (default: a fresh temporary one)")
    args = parser.parse_args(argv)
    store = Path(args.store) if args.store else Path(tempfile.mkdtemp(prefix="ctxrelay-demo-"))
    print(f"store: {store}")
    with Runtime(store) as rt:
        replay(rt, "ops")
        show_stored(rt, "ops")
        show_search(rt, "ops", ["restic retention S3", "fsync p99 etcd-2", "cert-manager"])

        rt.publish_artifact(
            "ops", 12, 25,
            "Backups: hourly etcdctl snapshot save, shipped with restic to the S3 bucket "
            "nw-platform-etcd-backups (eu-west-1); retention keep-hourly 48, keep-daily 30, "
            "keep-weekly 12; a restore drill on drill-1..3.staging.internal was planned.",
            decisions=["restic to S3 with 48 hourly / 30 daily / 12 weekly snapshots"],
            facts=["compliance wants 30 days of dailies", "bucket nw-platform-etcd-backups"],
            unresolved=["S3 Object Lock compliance mode awaits security"],
            producer="demo")
        print("\n== published warm artifact for turns 12-25 (backups); "
              "managed turns only read it")

        for question in ["What was the budget figure again, and how much do we spend now?",
                         "Which retention did we settle on for the restic backups?",
                         "OK — and the second option you listed for the fsync alert, remind me?"]:
            show_turn(rt.managed_turn("ops", question, **POLICY), question)

        print("\n== alternatives for the last question (best first, by backtracking):")
        for i, alt in enumerate(rt.packs("ops", "which certs expire first?", limit=3, **POLICY)):
            kinds = ",".join(sorted({u.kind for u in alt.pack}))
            print(f"   #{i + 1} utility {alt.utility:.3f}  {alt.ledger.total} tokens  [{kinds}]")

        print("\n== cold history on demand: context(session(ops), slice(41, 2), R)")
        for t in rt.context("ops", "slice(41, 2)")["items"]:
            print(f"   #{t['turn_id']:<3} {t['role']:<9} {short(t['content'])}")
    print(textwrap.dedent("""
        The transcript above is stored whole and never rewritten; every request stayed
        under its input budget. Run `make test` for the test suite."""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
