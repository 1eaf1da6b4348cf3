"""The parts of a scratch buffer that do not depend on where its entries live.

It sits beside the scratch buffer's other back-end-neutral modules (``records``,
``checks``, ``errors``, ``freshness``), which every back end imports from here.

:class:`ScratchBase` holds the store's options (checked once, the same way on
every back end), the put path up to the write (argument checks, the budget
check, the summary, the record), the freshness gate and promotion, pinning and
references on top of each back end's own transaction.  A back end supplies
:meth:`~ScratchBase._pinned_bytes`, :meth:`~ScratchBase._store_new`,
:meth:`~ScratchBase._set_pin`, :meth:`~ScratchBase._add_reference`,
:meth:`~ScratchBase._latest`, :meth:`~ScratchBase._most_recent` and :meth:`get`.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.common.scratch.checks import (FRESHNESS_TTL, NEVER_PROMOTED, RETAIN_POLICIES,
                                                  canonical_args, check_duration,
                                                  check_freshness, check_policy,
                                                  check_scratch_id, check_tool_name, micros,
                                                  new_scratch_id, provenance, raw_bytes,
                                                  seconds)
from ctxrelay.storage.common.scratch.errors import NotPromotableError, ScratchFullError
from ctxrelay.storage.common.scratch.freshness import gate, render
from ctxrelay.storage.common.scratch.records import (Promotion, Rendered, ScratchEntry,
                                                   ScratchStats, entry_of)
from ctxrelay.storage.validation import check_session_id
from ctxrelay.text.summarize import MIN_MAX_TOKENS, summarize
from ctxrelay.text.tokens import count

__all__ = ["ScratchBase", "DEFAULT_DISK_BUDGET", "DEFAULT_TTL", "DEFAULT_FRESHNESS",
           "AUTO_PIN_REFERENCES", "RAW_TOKEN_LIMIT", "UNSET", "tally"]

DEFAULT_DISK_BUDGET = 256 << 20
DEFAULT_TTL = 3600.0
DEFAULT_FRESHNESS = "VOLATILE"
AUTO_PIN_REFERENCES = 2
RAW_TOKEN_LIMIT = 4 << 20        # larger text outputs get an estimated raw_tokens
#: the default of ``put``'s ``freshness_ttl`` and ``ttl`` (None means "forever")
UNSET: Any = object()


class ScratchBase:
    """What every :class:`~ctxrelay.storage.interfaces.scratch.ScratchBuffer`
    back end shares; see the module doc for what a back end adds."""

    _budget: int
    _stale_policy: str | None

    def _configure(self, *, disk_budget_bytes: int, default_ttl: float | None,
                   summary_max_tokens: int, model: str,
                   tool_freshness: Mapping[str, str] | None, stale_policy: str | None,
                   retain: str, auto_pin_after: int | None) -> None:
        """Check the store's options and keep them."""
        if isinstance(disk_budget_bytes, bool) or not isinstance(disk_budget_bytes, int) \
                or disk_budget_bytes < 1:
            raise InvalidArgumentError(
                f"disk_budget_bytes must be an int >= 1, not {disk_budget_bytes!r}; "
                "pass the number of blob bytes the store may keep")
        if isinstance(summary_max_tokens, bool) or not isinstance(summary_max_tokens, int) \
                or summary_max_tokens < MIN_MAX_TOKENS:
            raise InvalidArgumentError(
                f"summary_max_tokens must be an int >= {MIN_MAX_TOKENS}, not "
                f"{summary_max_tokens!r}")
        if not isinstance(model, str) or not model.strip():
            raise InvalidArgumentError(f"model must be a tokenizer name, not {model!r}")
        if retain not in RETAIN_POLICIES:
            raise InvalidArgumentError(
                f"retain {retain!r} is not one of {', '.join(RETAIN_POLICIES)} "
                "(CRP-Safety-Policy tool-output-retain)")
        if auto_pin_after is not None and (isinstance(auto_pin_after, bool) or not
                                           isinstance(auto_pin_after, int)
                                           or auto_pin_after < 1):
            raise InvalidArgumentError(
                f"auto_pin_after must be None or an int >= 1, not {auto_pin_after!r}")
        self._budget = disk_budget_bytes
        self._default_ttl = check_duration(default_ttl, "default_ttl")
        self._summary_max_tokens = summary_max_tokens
        self._model = model
        self._tool_freshness = {
            check_tool_name(name): check_freshness(klass)
            for name, klass in (tool_freshness or {}).items()}
        self._stale_policy = check_policy(stale_policy, "stale_policy")
        self._retain = retain
        self._auto_pin_after = auto_pin_after

    @property
    def disk_budget_bytes(self) -> int:
        return self._budget

    # -- what a back end supplies -------------------------------------------------------

    def _pinned_bytes(self) -> int:
        """The pinned blob bytes of the whole store now."""
        raise NotImplementedError

    def _store_new(self, record: dict[str, Any], data: bytes) -> dict[str, Any]:
        """Write a new entry (blob ``data``, ``record``) and evict to the budget in one
        transaction (checking the room again there); return the stored record."""
        raise NotImplementedError

    def _set_pin(self, session_id: str, scratch_id: str, reason: str | None) -> ScratchEntry:
        raise NotImplementedError

    def _add_reference(self, session_id: str, scratch_id: str, turn_id: int,
                       moment: float) -> ScratchEntry:
        """Touch the entry, add ``turn_id`` to its references (see :meth:`_referenced`)
        and pin it when :meth:`_auto_pins` says so, in one transaction."""
        raise NotImplementedError

    def get(self, session_id: str, scratch_id: str, *,
            now: float | datetime | None = None, touch: bool = True) -> ScratchEntry:
        raise NotImplementedError

    def _latest(self, session_id: str, n: int) -> list[ScratchEntry]:
        raise NotImplementedError

    def _most_recent(self, session_id: str, tool_type: str | None,
                     kind: str | None) -> ScratchEntry | None:
        raise NotImplementedError

    # -- reads whose arguments every back end checks alike ------------------------------

    def latest(self, session_id: str, n: int) -> list[ScratchEntry]:
        """The session's ``n`` newest entries, oldest first (bounded work, whatever the
        number of entries)."""
        session_id = check_session_id(session_id)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgumentError(f"n must be an int >= 0, not {n!r}")
        return self._latest(session_id, n)

    def most_recent(self, session_id: str, tool_type: str | None = None, *,
                    kind: str | None = None) -> ScratchEntry | None:
        """The newest entry of the session whose ``tool_name`` is ``tool_type``
        and whose summary ``kind`` is ``kind`` (either filter optional), or None.

        Reference resolution (SPEC-029 §7): "the query result" is
        ``most_recent(s, kind="table")``, "the error" ``kind="error"``.
        """
        session_id = check_session_id(session_id)
        if tool_type is not None and not isinstance(tool_type, str):
            raise InvalidArgumentError(
                f"tool_type must be a tool name (str) or None, not {tool_type!r}")
        if kind is not None and not isinstance(kind, str):
            raise InvalidArgumentError(f"kind must be a summary kind (str) or None, "
                                       f"not {kind!r}")
        return self._most_recent(session_id, tool_type, kind)

    # -- put ------------------------------------------------------------------------------

    def put(self, session_id: str, tool_name: str, args: Mapping[str, Any],
            raw: str | bytes, *, freshness: str | None = None,
            freshness_ttl: float | None = UNSET, ttl: float | None = UNSET,
            pinned: bool = False, now: float | datetime | None = None) -> ScratchEntry:
        """Store one tool output; return its entry (summary included).

        ``freshness`` is the volatility class (default: the store's
        ``tool_freshness`` for the tool, else VOLATILE); ``freshness_ttl`` and
        ``ttl`` override the class's freshness and the store's retention.  The
        blob is durable before the entry becomes visible.  Eviction runs in
        the same transaction, so when ``put`` returns the blob bytes are
        within the budget (or only pinned bytes exceed it).
        @raises ScratchFullError if an unpinned output cannot fit the budget.
        """
        session_id = check_session_id(session_id)
        tool_name = check_tool_name(tool_name)
        plain_args, args_bytes = canonical_args(args)
        data, raw_type = raw_bytes(raw)
        klass = (check_freshness(freshness) if freshness is not None
                 else self._tool_freshness.get(tool_name, DEFAULT_FRESHNESS))
        fresh_for = (FRESHNESS_TTL[klass] if freshness_ttl is UNSET
                     else check_duration(freshness_ttl, "freshness_ttl"))
        keep_for = self._default_ttl if ttl is UNSET else check_duration(ttl, "ttl")
        if not isinstance(pinned, bool):
            raise InvalidArgumentError(f"pinned must be True or False, not {pinned!r}")
        pin_reason = "user" if pinned else ("audit" if self._retain == "audit" else None)
        moment = seconds(now)
        if pin_reason is None and self._retain != "all":
            # before the summary: an output that cannot fit costs no summarising
            self._check_room(self._pinned_bytes(), len(data))
        scratch_id = new_scratch_id()
        summary = summarize(raw, tool_name=tool_name, scratch_id=scratch_id,
                            max_tokens=self._summary_max_tokens, model=self._model)
        raw_tokens, raw_exact = self._raw_tokens(raw, data, summary.kind)
        record = {
            "scratch_id": scratch_id, "session_id": session_id, "tool_name": tool_name,
            "args": plain_args, "size": len(data),
            "sha256": provenance(tool_name, args_bytes, data),
            "content_sha256": hashlib.sha256(data).hexdigest(), "raw_type": raw_type,
            "created": moment, "freshness": klass, "freshness_ttl": fresh_for,
            "ttl": keep_for, "pinned": pin_reason is not None, "pin_reason": pin_reason,
            "summary": summary.text, "summary_tokens": summary.tokens,
            "summary_exact": summary.exact, "kind": summary.kind,
            "structured": summary.structured, "raw_tokens": raw_tokens,
            "raw_tokens_exact": raw_exact, "last_access": moment,
            "access_us": micros(moment), "referenced_by": [], "seq": 0}
        return entry_of(self._store_new(record, data))

    def _check_room(self, pinned_bytes: int, size: int) -> None:
        """Raise :class:`ScratchFullError` unless an unpinned output of ``size`` bytes
        fits beside ``pinned_bytes`` pinned ones."""
        if size + pinned_bytes <= self._budget:
            return
        if size > self._budget:
            raise ScratchFullError(
                f"the tool output has {size} bytes, more than the whole scratch disk "
                f"budget of {self._budget} bytes; nothing was stored; raise "
                "disk_budget_bytes, pin it (pinned=True) to keep it over budget, or "
                "have the tool return less")
        raise ScratchFullError(
            f"the tool output has {size} bytes but only {self._budget - pinned_bytes} "
            f"of the {self._budget}-byte scratch budget are not pinned "
            "(CRP-Context-Scratch-Full); nothing was stored; unpin entries or raise "
            "disk_budget_bytes")

    def _raw_tokens(self, raw: str | bytes, data: bytes, kind: str) -> tuple[int | None, bool]:
        if kind == "binary":
            return None, False
        if len(data) > RAW_TOKEN_LIMIT:
            return -(-len(data) // 4), False
        text = raw if isinstance(raw, str) else data.decode("utf-8")
        counted = count(text, self._model)
        return counted.n, counted.exact

    # -- pinning and references -----------------------------------------------------------

    def pin(self, session_id: str, scratch_id: str) -> ScratchEntry:
        """Keep the entry regardless of TTL and budget (SPEC-029 §5.2)."""
        return self._set_pin(session_id, scratch_id, "user")

    def unpin(self, session_id: str, scratch_id: str) -> ScratchEntry:
        """Make the entry evictable again (by the next put or evict())."""
        return self._set_pin(session_id, scratch_id, None)

    def reference(self, session_id: str, scratch_id: str, turn_id: int, *,
                  now: float | datetime | None = None) -> ScratchEntry:
        """Record that turn ``turn_id`` used the entry (a use for LRU too); the
        entry is pinned (reason ``auto``) once ``auto_pin_after`` distinct
        turns referenced it (SPEC-029 §5.3)."""
        session_id = check_session_id(session_id)
        scratch_id = check_scratch_id(scratch_id)
        if isinstance(turn_id, bool) or not isinstance(turn_id, int) or turn_id < 1:
            raise InvalidArgumentError(
                f"turn_id must be an int >= 1 (a transcript turn id), not {turn_id!r}")
        return self._add_reference(session_id, scratch_id, turn_id, seconds(now))

    @staticmethod
    def _referenced(record: dict[str, Any], turn_id: int) -> dict[str, Any] | None:
        """``record`` with ``turn_id`` among its references, or None if it already was."""
        if turn_id in record["referenced_by"]:
            return None
        return {**record, "referenced_by": sorted([*record["referenced_by"], turn_id])}

    def _auto_pins(self, record: dict[str, Any]) -> bool:
        """Whether enough distinct turns referenced an unpinned entry to pin it."""
        return (not record["pinned"] and self._auto_pin_after is not None
                and len(record["referenced_by"]) >= self._auto_pin_after)

    # -- freshness and promotion ----------------------------------------------------------

    def gate(self, entry: ScratchEntry, now: float | datetime | None = None, *,
             policy: str | None = None, can_reinvoke: bool = True) -> str:
        """:func:`gate` with the store's ``stale_policy`` as the default policy."""
        return gate(entry, now, policy=policy or self._stale_policy,
                    can_reinvoke=can_reinvoke)

    def render(self, entry: ScratchEntry, now: float | datetime | None = None, *,
               policy: str | None = None, can_reinvoke: bool = True) -> Rendered:
        """:func:`render` with the store's ``stale_policy`` as the default policy."""
        return render(entry, now, policy=policy or self._stale_policy,
                      can_reinvoke=can_reinvoke)

    def promote(self, session_id: str, scratch_id: str) -> Promotion:
        """The entry as a tool-derived fact for the CKF (SPEC-029 §5.4).

        Only pinned entries of class STABLE or STATIC qualify: volatile
        readings have no durable truth value.  Nothing is written here; the
        caller hands the result to the CKF with its provenance hash.
        @raises NotPromotableError otherwise.
        """
        entry = self.get(session_id, scratch_id, touch=False)
        if not entry.pinned:
            raise NotPromotableError(
                f"scratch entry {scratch_id} is not pinned; only results the user "
                "chose to keep are promoted: pin() it first")
        if entry.freshness in NEVER_PROMOTED:
            raise NotPromotableError(
                f"scratch entry {scratch_id} is a {entry.freshness} reading; volatile "
                "readings are never promoted to the CKF (CRP-SPEC-029 §5.4); store a "
                "durable result with freshness='STABLE' or 'STATIC'")
        return Promotion(scratch_id=entry.scratch_id, session_id=entry.session_id,
                         tool_name=entry.tool_name, args=entry.args,
                         provenance_hash=entry.sha256, created=entry.created,
                         kind=entry.kind, summary=entry.summary,
                         structured=entry.structured, referenced_by=entry.referenced_by)


def tally(records: Iterable[tuple[Any, Mapping[str, Any]]], budget: int) -> ScratchStats:
    """The :class:`ScratchStats` of ``(session, record)`` pairs (``session``: anything
    that tells the sessions apart) under a disk budget of ``budget`` bytes."""
    entries = pinned = size = pinned_size = raw_tokens = summary_tokens = 0
    sessions: set[Any] = set()
    by_kind: dict[str, int] = {}
    for session, record in records:
        entries += 1
        size += record["size"]
        sessions.add(session)
        by_kind[record["kind"]] = by_kind.get(record["kind"], 0) + 1
        if record["pinned"]:
            pinned += 1
            pinned_size += record["size"]
        if record["raw_tokens"] is not None:
            raw_tokens += record["raw_tokens"]
            summary_tokens += record["summary_tokens"]
    return ScratchStats(entries=entries, pinned=pinned, bytes=size,
                        pinned_bytes=pinned_size, disk_budget_bytes=budget,
                        over_budget=size > budget, sessions=len(sessions),
                        by_kind=dict(sorted(by_kind.items())),
                        raw_tokens=raw_tokens, summary_tokens=summary_tokens)
