"""CPU time of a managed turn against ``Runtime.assemble`` on the same session (issue #16.2).

Target: a managed turn (echo provider, a 1,000-turn session) costs at most 1.3x
the CPU time (``time.process_time``: every thread of the process) of
``Runtime.assemble`` of a new message on the same session, measured in one
run.  Each round assembles a new message and runs another as a managed turn
(which adds two turns), so both see the same session; every other round the
turn runs as ``prepare_turn`` + the echo reply + ``commit_turn`` (what the
relay does), so the stages are timed on their own.
The assembly and the turn get different messages (no embedding shared through
the vector memo) and their order flips every two rounds (the first call after a
commit reads the changed session anew).

prepare     assembling the pack (the assembly of the turn)
provider    the echo provider's reply
commit      storing the message and the reply, deriving their turn-log entries,
            recording references, promoting durable values

Inside prepare and commit, the Python functions Prolog calls for each part are
timed too (CPU, each part without the parts it calls; ``stages_in_split_turn``):

embedding   the embedder's model runs (texts not in the vector memo)
transcript  storing the turns (``bridge.stores.commit_turns``)
turnlog     deriving the new turns' entries (``TurnLog.sync``, without embedding)
references  recording the turns the message resolved (``api_set_references``)
promotion   the promotion's evidence, similarities and writes
rest        everything else: the Prolog rules, assembly, janus crossings

With ``--relay`` the same session is then served by the relay itself, in this
process (its ASGI app through httpx's ASGI transport, echo upstream, one request at
a time): the CPU of each relay turn (HTTP, JSON, gate, prepare, commit, metrics; the
event loop and the Prolog threads alike) against ``Runtime.assemble`` under the
relay's policy for that request (the client's model, strict alternation, no history
tools), alternating.  This is the issue's figure: a relay turn against an assembly.

The reply's vector reads its first words only, as Prolog's
``ctxrelay_policy:embedded_words/2`` says (the run records the bound in force);
``--assistant-words N`` replaces that rule for the run (0: embed replies whole), to
measure what the bound saves; ``--compare-whole`` adds, in the relay arm, relay turns
whose reply is embedded whole (the rule lifted for each of those turns only), so the
saving is measured side by side in one run.

    .venv/bin/python bench/turn_cost.py [--turns 1000] [--rounds 40] [--embedder NAME] [--relay]
                                        [--assistant-words N] [--compare-whole]

Writes ``bench/results/turn_cost.json``.
"""
from __future__ import annotations

import argparse
import functools
import io
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import git_rev, machine, write
from assembly_bench import TOPICS, synthetic_jsonl
from ctxrelay import Runtime
from ctxrelay.providers import echo_text

QUESTIONS = ["what did we decide about the {t}?", "remind me of the {t} item {i}",
             "go deeper on the {t} and how it relates to item {i}", "and the {t}, what was open?"]
TARGET = 1.3


def cpu_ms(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 3),
            "mean_ms": round(statistics.fmean(ms), 3)}


class StageClock:
    """CPU time of the Python functions a turn's stages run, each without its callees."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.acc: dict[tuple[str, str], float] = {}
        self._stack: list[list[float]] = []     # [start, time spent in callees]

    def wrap(self, owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def timed(*a: Any, **k: Any) -> Any:
            if self.phase is None:
                return fn(*a, **k)
            frame = [time.process_time(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*a, **k)
            finally:
                self._stack.pop()
                spent = time.process_time() - frame[0]
                key = (self.phase, label)
                self.acc[key] = self.acc.get(key, 0.0) + spent - frame[1]
                if self._stack:
                    self._stack[-1][1] += spent
        setattr(owner, name, timed)

    def install(self) -> None:
        from ctxrelay.bridge import stores
        from ctxrelay.bridge import threads as bridge_threads
        from ctxrelay.knowledge import promotion
        from ctxrelay.storage.lmdb import turnlog
        from ctxrelay.text import embed_hashing, embed_onnx
        self.wrap(embed_hashing.HashingEmbedder, "_embed", "embedding")
        self.wrap(embed_onnx.OnnxMiniLMEmbedder, "_embed", "embedding")
        self.wrap(stores, "commit_turns", "transcript")
        self.wrap(turnlog.TurnLog, "sync", "turnlog")
        self.wrap(bridge_threads, "api_set_references", "references")
        for name in ("evidence", "antecedents", "similarities", "apply"):
            self.wrap(promotion, name, "promotion")


def set_assistant_words(words: int) -> None:
    """Replace the bound on the words of a reply that are embedded (0: none), as a user
    would (the rule is dynamic)."""
    from ctxrelay.bridge import engine
    engine.once("retractall(ctxrelay_policy:embedded_words(assistant, _))")
    if words > 0:
        engine.once("assertz(ctxrelay_policy:embedded_words(assistant, N))", {"N": words})


def assistant_words() -> int:
    """The rule's bound on a reply's embedded words (0: none), whatever the embedder."""
    from ctxrelay.bridge import engine
    return engine.once("(ctxrelay_policy:embedded_words(assistant, W) -> true ; W = 0)")["W"]


def assistant_words_embedded(embedder: str | None) -> int | None:
    """The bound in force for ``embedder`` (None: replies embedded whole)."""
    from ctxrelay.text.bounds import embedding_bounds
    from ctxrelay.text.embed import get_embedder
    return embedding_bounds(get_embedder(embedder).model_id).get("assistant")


RELAY_MODEL = "gpt-4o"


def relay_arm(store: Path, rounds: int, rng: random.Random,
              compare_whole: bool = False) -> dict[str, Any]:
    """CPU of relay turns (in-process ASGI app, echo upstream) and of assemblies under
    the relay's policy, alternating, on session ``s`` of ``store``.

    With ``compare_whole`` a third step runs a relay turn whose reply is embedded whole
    (the rule embedded_words(assistant, _) lifted for that turn only), so the bound's
    saving is measured in the same run; the three steps rotate every round."""
    import asyncio

    import httpx

    from ctxrelay.apps.server.app import create_app
    from ctxrelay.apps.server.config import ServerConfig

    # What request.policy_for gives a plain request with "model" to an echo relay.
    relay_policy = {"model": RELAY_MODEL, "alternation": "strict", "history_access": "none"}
    steps = ("assemble", "turn", "turn_whole") if compare_whole else ("assemble", "turn")
    label = {"assemble": "assemble_relay_policy", "turn": "relay_turn",
             "turn_whole": "relay_turn_reply_whole"}
    cost: dict[str, list[float]] = {label[s]: [] for s in steps}
    shipped = assistant_words()

    async def run() -> None:
        app = create_app(ServerConfig(store=store, upstream="echo"))
        relay = app.state.relay
        async with app.router.lifespan_context(app):
            await relay.ready.wait()
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://relay") as http:
                for i in range(-4, rounds):
                    asked = QUESTIONS[i % 4].format(t=rng.choice(TOPICS),
                                                    i=rng.randrange(5000)) + f" (ra{i})"
                    text = QUESTIONS[(i + 1) % 4].format(t=rng.choice(TOPICS),
                                                         i=rng.randrange(5000)) + f" (rt{i})"
                    if compare_whole:
                        k = i % 3
                        order = steps[k:] + steps[:k]
                    else:
                        order = ("turn", "assemble") if i % 4 >= 2 else ("assemble", "turn")
                    for step in order:
                        if step == "turn_whole":
                            set_assistant_words(0)
                        c0 = time.process_time()
                        if step == "assemble":
                            await relay.call(lambda rt: rt.assemble("s", asked, **relay_policy))
                        else:
                            r = await http.post("/v1/chat/completions",
                                                headers={"CRP-Session-Id": "s"},
                                                json={"model": RELAY_MODEL, "messages": [
                                                    {"role": "user", "content": text}]})
                            if r.status_code != 200:
                                raise SystemExit(f"relay turn failed: {r.status_code} {r.text}")
                        spent = time.process_time() - c0
                        if step == "turn_whole":
                            set_assistant_words(shipped)
                        if i >= 0:
                            cost[label[step]].append(spent)

    asyncio.run(run())
    stats = {k: cpu_ms(v) for k, v in cost.items()}
    out = {"cpu": stats, "ratio_relay_turn_over_assemble": round(
        stats["relay_turn"]["median_ms"] / stats["assemble_relay_policy"]["median_ms"], 3)}
    if compare_whole:
        out["ratio_relay_turn_reply_whole_over_assemble"] = round(
            stats["relay_turn_reply_whole"]["median_ms"]
            / stats["assemble_relay_policy"]["median_ms"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--embedder", default=None, help="default: the default embedder")
    ap.add_argument("--relay", action="store_true",
                    help="also time turns of the relay (in process) against assemblies")
    ap.add_argument("--assistant-words", type=int, default=None,
                    help="replace the rule ctxrelay_policy:embedded_words(assistant, N) for "
                         "this run (0: embed replies whole); default: the rule as shipped")
    ap.add_argument("--compare-whole", action="store_true",
                    help="with --relay: also time relay turns whose reply is embedded whole "
                         "(the rule lifted for those turns), in the same run")
    ap.add_argument("--out", default="turn_cost")
    args = ap.parse_args()
    if args.assistant_words is not None:
        set_assistant_words(args.assistant_words)
    policy = {"embedder": args.embedder} if args.embedder else {}
    rng = random.Random(11)
    cost: dict[str, list[float]] = {k: [] for k in (
        "assemble", "managed_turn", "assemble_beside_split", "split_turn", "prepare",
        "provider", "commit")}
    clock = StageClock()
    clock.install()
    with tempfile.TemporaryDirectory() as tmp, Runtime(Path(tmp) / "store") as rt:
        rt.import_jsonl(io.StringIO(synthetic_jsonl("s", args.turns, seed=3)).getvalue(),
                        session_id="s")
        t0 = time.perf_counter()
        rt.assemble("s", "warm up: derive the turn log", **policy)
        derive_s = time.perf_counter() - t0
        for i in range(-4, args.rounds):
            def question(tag: str) -> str:
                return QUESTIONS[i % 4].format(t=rng.choice(TOPICS),
                                               i=rng.randrange(5000)) + f" ({tag}{i})"
            # Different texts (no embedding memo shared), and the order flips every
            # round: the first call after a commit reads the session anew.
            asked, text = question("a"), question("t")
            turn_first = i % 4 >= 2
            c_turn, c_asm = 0.0, 0.0
            for step in (("turn", "assemble") if turn_first else ("assemble", "turn")):
                c0 = time.process_time()
                if step == "assemble":
                    rt.assemble("s", asked, **policy)
                    c_asm = time.process_time() - c0
                elif i % 2 == 0:
                    rt.managed_turn("s", text, **policy)
                    c_turn = time.process_time() - c0
                else:
                    clock.phase = "prepare" if i >= 0 else None
                    prepared = rt.prepare_turn("s", text, **policy)
                    clock.phase = None
                    c1 = time.process_time()
                    # what the echo provider would return for this request
                    reply = echo_text(prepared.result.messages)
                    c2 = time.process_time()
                    clock.phase = "commit" if i >= 0 else None
                    rt.commit_turn(prepared, reply, provider="echo")
                    clock.phase = None
                    c3 = time.process_time()
                    if i >= 0:
                        cost["prepare"].append(c1 - c0)
                        cost["provider"].append(c2 - c1)
                        cost["commit"].append(c3 - c2)
                    c_turn = c3 - c0
            if i >= 0:
                cost["assemble" if i % 2 == 0 else "assemble_beside_split"].append(c_asm)
                cost["managed_turn" if i % 2 == 0 else "split_turn"].append(c_turn)
        turns_after = rt.turn_count("s")
        relay = relay_arm(Path(tmp) / "store", args.rounds, rng, args.compare_whole) \
            if args.relay else None
        if relay is not None:
            turns_after = rt.turn_count("s")
            print(f"relay turn / assemble CPU: {relay['ratio_relay_turn_over_assemble']}"
                  + (f" (reply embedded whole: "
                     f"{relay['ratio_relay_turn_reply_whole_over_assemble']})"
                     if args.compare_whole else ""))
    stats = {k: cpu_ms(v) for k, v in cost.items()}
    ratio = round(stats["managed_turn"]["median_ms"] / stats["assemble"]["median_ms"], 3)
    split = {k: round(stats[k]["median_ms"] / stats["assemble_beside_split"]["median_ms"], 3)
             for k in ("split_turn", "prepare", "provider", "commit")}
    split_rounds = len(cost["commit"])
    inside: dict[str, dict[str, float]] = {}
    for phase in ("prepare", "commit"):
        parts = {label: round(clock.acc.get((phase, label), 0.0) * 1000 / split_rounds, 3)
                 for label in ("embedding", "transcript", "turnlog", "references", "promotion")}
        parts["rest"] = round(stats[phase]["mean_ms"] - sum(parts.values()), 3)
        inside[phase] = parts
    print(f"inside the split turn, mean CPU ms: {inside}")
    payload = {
        "benchmark": "turn_cost", "commit": git_rev(), "machine": machine(),
        "session_turns": args.turns, "turns_after": turns_after, "rounds": args.rounds,
        "embedder": args.embedder or "default", "derive_session_s": round(derive_s, 1),
        "assistant_words_embedded": assistant_words_embedded(args.embedder),
        "cpu": stats,
        "ratio_managed_turn_over_assemble": ratio,
        "stages_over_assemble": split,
        "stages_in_split_turn_mean_cpu_ms": inside,
        **({"relay": relay} if relay is not None else {}),
        "target": f"managed turn CPU <= {TARGET}x assemble CPU",
        "target_met": ratio <= TARGET,
        **({"target_relay": f"relay turn CPU <= {TARGET}x assemble CPU (the issue's figure)",
            "target_relay_met": relay["ratio_relay_turn_over_assemble"] <= TARGET}
           if relay is not None else {}),
    }
    print(f"managed turn / assemble CPU: {ratio} (stages over assemble: {split})")
    print(f"-> {write(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
