"""One relay turn: the managed turn's two phases with the upstream call between them.

The relay runs the same managed turn as ``Runtime.managed_turn`` and Prolog's
``managed_turn/4``: ``Runtime.prepare_turn`` (validation, idempotency, the
bounded pack; nothing stored), then the upstream, then ``Runtime.commit_turn``
(the request's new messages, the user turn and the reply stored in one
transaction, references recorded, promotion).  Only the upstream call and the
streaming differ, and they run on the event loop, outside the Prolog worker.
A turn whose upstream fails, times out, or whose client goes away mid-stream
stores nothing.
"""
from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import httpx
from starlette.responses import JSONResponse, Response

from ctxrelay import providers
from ctxrelay.errors import CtxRelayError, InvalidArgumentError
from ctxrelay.runtime import Runtime
from ctxrelay.types import PreparedTurn, TurnResult

from . import history_tools, observe
from .errors import ApiError, from_ctxrelay, scrubbed
from .request import ChatRequest, policy_for, turn_messages
from .responses import (TurnGuard, TurnStream, completion_body, crp_headers,
                        new_completion_id, openai_tool_calls, sse_error, synthetic_stream,
                        turn_ids_event)
from .upstream import Upstream, relay_metadata, reply_of

if TYPE_CHECKING:
    from .app import Relay


# -- worker jobs: each runs on a Prolog worker with the Runtime as first argument --------

def prepare(rt: Runtime, chat: ChatRequest, policy: dict[str, Any]) -> PreparedTurn:
    return rt.prepare_turn(chat.store_session, turn_messages(chat), key=chat.key,
                           create_session=True, **policy)


def commit(rt: Runtime, prepared: PreparedTurn, content: str,
           metadata: dict[str, Any] | None) -> TurnResult:
    return rt.commit_turn(prepared, content, metadata=metadata)


def stored_metadata(rt: Runtime, session_id: str, turn_id: int) -> dict[str, Any]:
    return dict(rt.turn(session_id, turn_id).metadata or {})


def echo_reply(_rt: Runtime, messages: list[dict[str, Any]], model: str | None) -> dict[str, Any]:
    return providers.complete(messages, {"provider": "echo", **({"model": model} if model else {})})


# -- the turn ---------------------------------------------------------------------------

async def chat_turn(relay: Relay, chat: ChatRequest, guard: TurnGuard) -> Response:
    policy = policy_for(relay.config, chat)
    started = time.perf_counter()
    try:
        prepared = await relay.call(prepare, chat, policy)
    except InvalidArgumentError as e:
        if chat.reserve_param is None:
            raise
        observe.OVERFLOWS.inc()
        # The client's max_tokens became the output reserve and left no input budget.
        raise ApiError(400, f"{chat.reserve_param}={chat.output_reserve} does not fit the "
                       f"relay's context window: it is reserved for the reply, and no room is "
                       f"left for the input ({e}); lower {chat.reserve_param}",
                       param=chat.reserve_param, code="context_length_exceeded") from None
    observe.observe_stage("prepare", started)
    model = chat.model or "echo"

    def streamed(body: AsyncIterator[str], headers: dict[str, str]) -> Response:
        guard.handed_over = True
        return TurnStream(body, guard=guard, headers=headers)

    if prepared.replay:
        meta = await relay.call(stored_metadata, chat.store_session, prepared.assistant_turn)
        relayed = meta.get("relay") or {}
        headers = {**relayed.get("headers", {}),
                   **crp_headers(None, chat, prepared.user_turn, prepared.assistant_turn),
                   "CRP-Idempotent-Replay": "true"}
        model = relayed.get("model") or model
        calls = openai_tool_calls(meta.get("tool_calls"))   # the reply's, as answered
        usage = relayed.get("usage")                         # the first answer's, if it had one
        if chat.stream:
            return streamed(_stored_stream(chat, prepared.reply or "", model, relayed.get("id"),
                                           prepared, calls, usage), headers)
        return JSONResponse(completion_body(prepared.reply or "", model,
                                            completion_id=relayed.get("id"), tool_calls=calls,
                                            usage=usage),
                            headers=headers)

    observe.observe_pack(prepared.result.ledger.total, prepared.result.ledger.input_budget)
    headers = crp_headers(prepared.result, chat, None)
    if relay.config.is_echo:
        reply = await relay.call(echo_reply, prepared.result.messages, chat.model)
        usage = reply.get("usage")
        cid = new_completion_id()
        meta = relay_metadata(None, completion_id=cid, model=model, headers=headers,
                              usage=usage)
        if chat.stream:
            return streamed(_echo_stream(relay, chat, prepared, reply["content"], model, cid,
                                         meta, usage), headers)
        result = await relay.commit(chat, prepared, reply["content"], meta)
        return JSONResponse(completion_body(reply["content"], model, completion_id=cid,
                                            usage=usage),
                            headers={**headers, **_turn_headers(result)})

    upstream = Upstream(relay, chat, headers)
    extra = _history_tools(relay, chat, prepared)
    started = time.perf_counter()
    if chat.stream and not extra:
        response = await upstream.open_stream(prepared.result.messages)
        observe.observe_stage("upstream", started)
        return streamed(_relay_stream(relay, chat, prepared, upstream, response, headers),
                        headers)
    data, rounds = await _with_history_tools(relay, chat, prepared, upstream, extra)
    observe.observe_stage("upstream", started)
    content, tool_meta = reply_of(data, upstream)
    meta = relay_metadata(tool_meta, completion_id=data.get("id"), model=data.get("model"),
                          headers=headers, usage=data.get("usage"))
    if rounds:
        meta["relay"]["history_tool_rounds"] = rounds
        headers = {**headers, "CRP-Context-History-Tool-Rounds": str(rounds)}
    if chat.stream:          # the tool rounds ran unstreamed: the answer goes out as events,
                             # with the calls of the client's own tools it makes
        return streamed(_echo_stream(relay, chat, prepared, content, data.get("model") or model,
                                     data.get("id") or new_completion_id(), meta,
                                     data.get("usage"),
                                     openai_tool_calls((tool_meta or {}).get("tool_calls"))),
                        headers)
    result = await relay.commit(chat, prepared, content, meta)
    return JSONResponse(data, headers={**headers, **_turn_headers(result)})


def _history_tools(relay: Relay, chat: ChatRequest, prepared: PreparedTurn) -> list[dict[str, Any]]:
    """The cold-history tools, offered when the pack hides turns (and the relay may)."""
    boundary = prepared.result.status.get("cold_history_boundary") or {}
    if relay.config.history_rounds <= 0 or not boundary.get("turns_not_shown"):
        return []
    return history_tools.offered(chat.forward.get("tools"))


async def _with_history_tools(relay: Relay, chat: ChatRequest, prepared: PreparedTurn,
                              upstream: Upstream, extra: list[dict[str, Any]]
                              ) -> tuple[dict[str, Any], int]:
    """Call the upstream; while it calls only the history tools, run them and call it
    again with their results (at most ``history_rounds`` rounds, each request within
    the input budget).  Returns the final completion and the rounds run."""
    messages = list(prepared.result.messages)
    budget = prepared.result.ledger.input_budget
    # Ours are the tools offered: a client tool of the same name is the client's to run.
    names = {t["function"]["name"] for t in extra}
    rounds = 0
    while True:
        tools = extra if extra and rounds < relay.config.history_rounds else None
        data = await upstream.post(messages, extra_tools=tools)
        calls = history_tools.calls_of(data)
        ours = [c for c in calls if c["function"].get("name") in names]
        if tools is None or not ours or len(ours) != len(calls):
            return history_tools.without_calls(data, names), rounds
        rounds += 1
        asked = {"role": "assistant", "content": None, "tool_calls": ours}
        used = await relay.call(history_tools.request_tokens, messages + [asked], chat.model)
        room = budget - used - history_tools.ROUND_MARGIN
        for _ in range(4):            # results too big for the room: ask for less
            results = await relay.call(history_tools.run_calls, chat.store_session, ours, room,
                                       chat.session_id)
            grown = messages + [asked, *results]
            size = await relay.call(history_tools.request_tokens, grown, chat.model)
            if size <= budget:
                break
            room -= size - budget + history_tools.ROUND_MARGIN
        else:
            results = [{**r, "content": json.dumps({"error": "no room is left in the context "
                                                   "window for this result; answer with what "
                                                   "you have"})} for r in results]
            grown = messages + [asked, *results]
        messages = grown


def _turn_headers(result: TurnResult) -> dict[str, str]:
    return {"CRP-User-Turn": str(result.user_turn),
            "CRP-Assistant-Turn": str(result.assistant_turn),
            "CRP-Context-Promotions": str(result.headers.get("CRP-Context-Promotions", 0))}


async def _stored_stream(chat: ChatRequest, content: str, model: str, cid: str | None,
                         prepared: PreparedTurn, tool_calls: list[dict[str, Any]] | None = None,
                         usage: Mapping[str, Any] | None = None) -> AsyncIterator[str]:
    """A replayed reply as SSE (nothing is stored)."""
    for event in synthetic_stream(content, model, completion_id=cid, tool_calls=tool_calls,
                                  usage=usage if chat.include_usage else None):
        yield event
    yield turn_ids_event(prepared.user_turn, prepared.assistant_turn)
    yield "data: [DONE]\n\n"


async def _echo_stream(relay: Relay, chat: ChatRequest, prepared: PreparedTurn, content: str,
                       model: str, cid: str, meta: dict[str, Any],
                       usage: Mapping[str, Any] | None,
                       tool_calls: list[dict[str, Any]] | None = None) -> AsyncIterator[str]:
    """A whole reply (the echo's, or the upstream's after history tool rounds) as SSE;
    the turn is stored before ``[DONE]``."""
    for event in synthetic_stream(content, model, completion_id=cid,
                                  usage=usage if chat.include_usage else None,
                                  tool_calls=tool_calls):
        yield event
    event, stored = await _commit_event(relay, chat, prepared, content, meta)
    yield event
    if stored:
        yield "data: [DONE]\n\n"


async def _commit_event(relay: Relay, chat: ChatRequest, prepared: PreparedTurn, content: str,
                        meta: dict[str, Any]) -> tuple[str, bool]:
    """Store a streamed turn: (the event with its ids, True), or (its error as an event,
    False).  A stream's status went out with its first event, so a failed commit (a store
    lost while committing: 503 store_outcome_unknown) is told as an error event in place
    of [DONE], as upstream failures are, not as a connection cut mid-body."""
    try:
        result = await relay.commit(chat, prepared, content, meta)
    except ApiError as e:
        return sse_error(scrubbed(e, chat.store_session, chat.session_id)), False
    except CtxRelayError as e:
        return sse_error(scrubbed(from_ctxrelay(e), chat.store_session, chat.session_id)), False
    return turn_ids_event(result.user_turn, result.assistant_turn), True


async def _relay_stream(relay: Relay, chat: ChatRequest, prepared: PreparedTurn,
                        upstream: Upstream, response: httpx.Response,
                        headers: dict[str, str]) -> AsyncIterator[str]:
    """Pass the upstream's events through line by line; store the turn when it is complete.

    The turn is stored when ``data: [DONE]`` arrives (before it is passed on, so
    a client that saw the end of the stream finds the turn stored) or when the
    stream ends after a finish_reason.  A stream cut short, an error event or a
    timeout stores nothing.
    """
    parts: list[str] = []
    finished = failed = stored = False
    completion_id = model = usage = None

    async def store() -> tuple[str, bool]:
        nonlocal stored
        stored = True
        meta = relay_metadata(None, completion_id=completion_id, model=model, headers=headers,
                              usage=usage)
        return await _commit_event(relay, chat, prepared, "".join(parts), meta)

    try:
        try:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        if not failed and not stored:
                            event, ok = await store()
                            yield event
                            if not ok:
                                return          # the error event ends it, not [DONE]
                    else:
                        try:
                            event = json.loads(payload)
                        except ValueError:
                            event = None
                        if not isinstance(event, dict) or event.get("error") is not None:
                            failed = True
                        else:
                            completion_id = completion_id or event.get("id")
                            model = model or event.get("model")
                            usage = event.get("usage") or usage   # the last chunk's, if asked
                            for choice in event.get("choices") or []:
                                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                                    continue        # n > 1: the transcript keeps choice 0
                                delta = choice.get("delta")
                                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                                    parts.append(delta["content"])
                                if choice.get("finish_reason"):
                                    finished = True
                yield line + "\n"
        except httpx.TimeoutException:
            yield sse_error(upstream.timeout("streaming the reply"))
            return
        except httpx.HTTPError as e:
            yield sse_error(upstream.unreachable(e))
            return
        if not stored and not failed:
            if finished:
                yield (await store())[0]
            else:
                yield sse_error(upstream.bad("a stream that ended before [DONE] or a "
                                             "finish_reason"))
    finally:
        await response.aclose()
