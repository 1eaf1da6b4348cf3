"""``turn`` and ``assemble``: managed turns and the packs they send, with the policy flags."""
from __future__ import annotations

import argparse
from typing import Any

from ctxrelay.apps.cli.common import (EXIT_OK, count, ensure_session, open_runtime,
                                      positive_float, text_arg)
from ctxrelay.apps.cli.output import emit_json, out, table, turn_ranges, yes
from ctxrelay.apps.cli.parser import Commands

# Flags that set the policy option of the same name (README, "Policy options").
POLICY_FLAGS = ("max_context_tokens", "provider_context_tokens", "output_reserve",
                "safety_margin", "min_recent_turns", "model", "half_life", "max_retrieved",
                "system", "provider", "time_limit")


def policy(args: argparse.Namespace) -> dict[str, Any]:
    """The policy options the flags set; a flag left out keeps the library default."""
    chosen = {name: getattr(args, name) for name in POLICY_FLAGS
              if getattr(args, name) is not None}
    if args.no_cold_history_boundary:
        chosen["cold_history_boundary"] = False
    if args.no_retrieval:
        chosen["retrieval"] = False
    if args.no_warm:
        chosen["warm"] = False
    provider_options = {k: v for k, v in (("model", args.model), ("base_url", args.base_url),
                                          ("api_key", args.api_key), ("timeout", args.timeout),
                                          ("max_tokens", args.max_tokens)) if v is not None}
    if provider_options:
        chosen["provider_options"] = provider_options
    return chosen


def result_json(r: Any) -> dict[str, Any]:
    return {"reply": r.reply, "user_turn": r.user_turn, "assistant_turn": r.assistant_turn,
            "utility": r.utility, "status": r.status, "headers": r.headers,
            "ledger": r.ledger, "pack": r.pack, "messages": r.messages}


def pack_text(r: Any) -> str:
    rows = [[u.id, u.kind, u.variant, u.tokens, f"{u.utility:.3f}", turn_ranges(u.turn_ids)]
            for u in r.pack]
    scalars = ", ".join(f"{k} {v}" for k, v in r.status.items()
                        if k != "optimality" and isinstance(v, (str, int, float)))
    head = (f"pack: {len(r.pack)} units, utility {r.utility:.3f}, "
            f"{r.status.get('optimality', '?')}" + (f" ({scalars})" if scalars else ""))
    return head + "\n" + table(["unit", "kind", "variant", "tokens", "utility", "turns"],
                               rows, right=(3, 4))


def ledger_text(r: Any) -> str:
    lg = r.ledger
    rows = [[s.get("name"), s.get("units", ""), s.get("charged", ""), s.get("observed", ""),
             yes(s.get("exact"))] for s in lg.stages]
    rows.append(["framing", "", lg.framing, "", ""])
    rows.append(["total", "", lg.total, lg.observed_total, yes(lg.exact)])
    head = (f"ledger ({'exact' if lg.exact else 'estimated'} counts): {lg.total} of "
            f"{lg.input_budget} input tokens = effective cap {lg.effective_cap} "
            f"- output reserve {lg.output_reserve} - safety margin {lg.safety_margin}")
    return (head + "\n" + table(["stage", "units", "charged", "observed", "exact"], rows,
                                right=(1, 2, 3))
            + f"\n  host-only tokens (accounted, not sent): {lg.host_only_tokens}")


def headers_text(r: Any) -> str:
    return "headers:\n" + "\n".join(f"  {k}: {v}" for k, v in r.headers.items())


def messages_text(r: Any) -> str:
    lines = [f"messages ({len(r.messages)}):"]
    for m in r.messages:
        lines.append(f"  [{m.get('role')}]")
        lines.extend(f"    {line}" for line in (str(m.get("content") or "").splitlines() or [""]))
    return "\n".join(lines)


def cmd_turn(args: argparse.Namespace) -> int:
    message = text_arg(args.message, "message")
    chosen = policy(args)
    with open_runtime(args) as rt:
        if args.create:
            ensure_session(rt, args.session)
        r = rt.managed_turn(args.session, message, key=args.key, **chosen)
    if args.json:
        emit_json(result_json(r))
        return EXIT_OK
    out(r.reply or "")
    if args.explain:
        out()
        out(pack_text(r))
        out(ledger_text(r))
        out(headers_text(r))
        out(f"turns: user #{r.user_turn}, assistant #{r.assistant_turn}")
    return EXIT_OK


def cmd_assemble(args: argparse.Namespace) -> int:
    message = text_arg(args.message, "message")
    with open_runtime(args) as rt:
        r = rt.assemble(args.session, message, **policy(args))
    if args.json:
        emit_json(result_json(r))
        return EXIT_OK
    out(pack_text(r))
    if args.explain:
        out(ledger_text(r))
        out(headers_text(r))
    else:
        out(f"tokens: {r.ledger.total} of {r.ledger.input_budget} "
            f"({'exact' if r.ledger.exact else 'estimated'}); --explain shows the ledger")
    if args.messages:
        out(messages_text(r))
    return EXIT_OK


def policy_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("policy (defaults: README 'Policy options')")
    nonneg = count(0)
    g.add_argument("--max-context-tokens", type=count(1), metavar="N",
                   help="operator cap (default 8192)")
    g.add_argument("--provider-context-tokens", type=count(1), metavar="N",
                   help="the model's window; the cap is min(operator cap, this)")
    g.add_argument("--output-reserve", type=nonneg, metavar="N",
                   help="tokens kept for the reply (default 1024)")
    g.add_argument("--safety-margin", type=nonneg, metavar="N",
                   help="slack kept free (default 128)")
    g.add_argument("--min-recent-turns", type=nonneg, metavar="N",
                   help="last turns always packed (default 4)")
    g.add_argument("--no-cold-history-boundary", action="store_true",
                   help="do not insert the cold-history boundary unit")
    g.add_argument("--half-life", type=positive_float, metavar="TURNS",
                   help="recency decay of turn utility (default 6)")
    g.add_argument("--max-retrieved", type=nonneg, metavar="N",
                   help="cold turns fetched per turn (default 8)")
    g.add_argument("--no-retrieval", action="store_true", help="no cold search")
    g.add_argument("--no-warm", action="store_true", help="no published warm artifacts")
    g.add_argument("--system", metavar="TEXT", help="runtime instructions")
    g.add_argument("--time-limit", type=positive_float, metavar="S",
                   help="seconds the packer may search (default 1.0)")
    g = p.add_argument_group("model and provider")
    g.add_argument("--model", metavar="NAME",
                   help="tokenizer, framing and provider model (default gpt-4)")
    g.add_argument("--provider", metavar="NAME",
                   help="echo (default, no network) or openai (any /v1/chat/completions)")
    g.add_argument("--base-url", metavar="URL",
                   help="provider endpoint, e.g. http://127.0.0.1:8000/v1 "
                        "(default $OPENAI_BASE_URL)")
    g.add_argument("--api-key", metavar="KEY",
                   help="provider key (default $OPENAI_API_KEY; prefer the variable: "
                        "arguments show in process lists)")
    g.add_argument("--timeout", type=positive_float, metavar="S",
                   help="provider timeout in seconds (default 60)")
    g.add_argument("--max-tokens", type=count(1), metavar="N",
                   help="reply length limit sent to the provider")
    return p


def register(commands: Commands) -> None:
    policy_parent = policy_options()
    p = commands.add(
        "turn", "run one managed turn: append the message, pack, call the provider, "
        "append and print the reply",
        ["ctxrelay turn ops 'what was the quota again?'",
         "ctxrelay turn ops 'and the defrag plan?' --max-context-tokens 4096 "
         "--output-reserve 512 --explain",
         "OPENAI_API_KEY=... ctxrelay turn ops hi --provider openai --model gpt-4o-mini",
         "ctxrelay turn ops hi --provider openai --base-url http://127.0.0.1:8000/v1 "
         "--model qwen2.5"],
        parents=[policy_parent], func=cmd_turn)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("message", metavar="MESSAGE", nargs="?",
                   help="the user message; '-' or nothing reads stdin")
    p.add_argument("--key", help="idempotency key: a retried turn appends and sends nothing new")
    p.add_argument("--create", action="store_true", help="create the session if it is missing")
    p.add_argument("--explain", action="store_true",
                   help="after the reply, print the pack, the token ledger and the headers")

    p = commands.add("assemble", "show the pack the next turn would get (nothing appended or "
                     "sent)",
                     ["ctxrelay assemble ops 'and the defrag plan?'",
                      "ctxrelay assemble ops 'and the defrag plan?' --max-context-tokens 2048 "
                      "--explain",
                      "ctxrelay assemble ops 'status?' --messages"],
                     parents=[policy_parent], func=cmd_assemble)
    p.add_argument("session", metavar="SESSION")
    p.add_argument("message", metavar="MESSAGE", nargs="?",
                   help="the next user message; '-' or nothing reads stdin")
    p.add_argument("--explain", action="store_true", help="also print the ledger and headers")
    p.add_argument("--messages", action="store_true",
                   help="also print the provider-visible messages")
