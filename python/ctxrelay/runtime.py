"""The Python facade: one Runtime per store directory.

Every method calls the same Prolog predicate a Prolog program would call
(library(ctxrelay)); Prolog in turn reaches the Python stores through janus.
There is one implementation of each operation, not one per language.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import os
from pathlib import Path
from typing import Any, Iterable

from ctxrelay.bridge import engine as _prolog
from ctxrelay.bridge.crossing import check_encodable
from ctxrelay.errors import InvalidArgumentError, StoreClosedError
from ctxrelay.types import (Hit, Ledger, PackUnit, PreparedTurn, RetrievalResult, SessionInfo,
                            SessionStats,
                            Turn, TurnResult)


_POLICY_NAMES: tuple[str, ...] | None = None


def policy_option_names() -> tuple[str, ...]:
    """The policy options, as ``ctxrelay_policy:policy_option_names/1`` lists them
    (the one list: Prolog's policy/2 checks them)."""
    global _POLICY_NAMES
    if _POLICY_NAMES is None:
        names = _prolog.once("ctxrelay_policy:policy_option_names(L)")["L"]
        _POLICY_NAMES = tuple(str(n) for n in names if str(n) != "key")
    return _POLICY_NAMES


def check_policy(**policy: Any) -> None:
    """Raise what Prolog's policy/2 raises for these policy options (an unknown or
    ill-typed option, or a budget that leaves no room for the input); nothing is opened.
    A service checks its fixed policy once, at start-up, with it."""
    pairs = [[name, value] for name, value in _policy_pairs(policy)]
    check_encodable({"OptPairs": pairs}, _ARGUMENT_NAMES)
    _prolog.once("ctxrelay:py_options(OptPairs, _Opts), ctxrelay_policy:policy(_Opts, _)",
                 {"OptPairs": pairs})


def _policy_pairs(policy: dict[str, Any]) -> list[tuple[str, Any]]:
    names = policy_option_names()
    unknown = sorted(set(policy) - set(names))
    if unknown:
        raise InvalidArgumentError(
            f"unknown policy option(s) {', '.join(unknown)}; valid options are: "
            + ", ".join(names))
    if "constraints" in policy:
        policy = {**policy, "constraints": _constraints(policy["constraints"])}
    return list(policy.items())


def _constraints(constraints: Any) -> list[Any]:
    """The ``constraints`` keyword: pack constraints as Prolog text
    (``"tokens(role(tool)) #=< 300"``) or as tuples ``(Name, Arg, ...)`` for
    ``Name(Arg, ...)`` (``("#=<", ("tokens", ("role", "tool")), 300)``).  Only
    their shape is checked here; Prolog checks what they say (the packer's
    vocabulary, docs/packer.md) and raises InvalidConstraintError naming the
    bad one."""
    from ctxrelay.errors import InvalidConstraintError
    if isinstance(constraints, (str, bytes)) or not isinstance(constraints, (list, tuple)):
        raise InvalidConstraintError(
            f"constraints must be a list of constraints, not {type(constraints).__name__}; "
            "pass constraints=[\"tokens(role(tool)) #=< 300\"]",
            constraint=repr(constraints))
    for c in constraints:
        if not isinstance(c, (str, tuple)) or isinstance(c, tuple) and not c:
            raise InvalidConstraintError(
                f"pack constraint {c!r} is neither Prolog text nor a (Name, Arg, ...) tuple; "
                "write it as text, e.g. \"count(tier(p)) #>= 2\"", constraint=repr(c))
    return list(constraints)


_BOOL_KEYS = frozenset({"exact", "tokens_exact", "archived", "truncated", "inserted", "more",
                        "pinned", "observed_exact", "raw_tokens_exact", "summary_exact",
                        "resumed"})


_OPAQUE_KEYS = frozenset({"metadata", "args", "structured", "content", "summary", "raw"})


def _plain(value: Any) -> Any:
    """Prolog's true/false atoms arrive as the strings 'true'/'false': make the
    known boolean fields Python bools.  Only those keys are touched, so a
    message whose text is "true" stays a string."""
    if isinstance(value, dict):
        return {str(k): (value[k] if k in _OPAQUE_KEYS
                         else value[k] == "true" if k in _BOOL_KEYS and value[k] in ("true", "false")
                         else _plain(value[k])) for k in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _result(r: dict[str, Any]) -> TurnResult:
    messages = [dict(m) for m in r["messages"]]   # provider-visible text stays as it is
    r = _plain({k: v for k, v in r.items() if k not in ("messages", "reply")}) | \
        {"messages": messages, "reply": r.get("reply")}
    lg = r["ledger"]
    ledger = Ledger(total=lg["total"], observed_total=lg["observed_total"], exact=lg["exact"],
                    stages=[dict(s) for s in lg["stages"]], framing=lg["framing"]["charged"],
                    input_budget=lg["input_budget"], effective_cap=lg["effective_cap"],
                    output_reserve=lg["output_reserve"], safety_margin=lg["safety_margin"],
                    host_only_tokens=lg["host_only"]["tokens"],
                    tiers={str(t): dict(v) for t, v in lg.get("tiers", {}).items()},
                    excerpts=[str(x) for x in lg.get("excerpts", [])],
                    shape=dict(lg.get("shape") or {}))
    pack = [PackUnit(id=u["id"], kind=u["kind"], variant=u["variant"], tokens=u["tokens"],
                     utility=float(u["utility"]), turn_ids=list(u["turn_ids"]))
            for u in r["pack"]]
    status = dict(r["status"])
    status["optimality"] = str(status["optimality"])
    return TurnResult(messages=messages, ledger=ledger,
                      headers={str(k): v for k, v in r["headers"].items()}, pack=pack,
                      utility=float(r["utility"]), status=status,
                      reply=r.get("reply"), user_turn=r.get("user_turn"),
                      assistant_turn=r.get("assistant_turn"))


def _json_metadata(metadata: Any) -> Any:
    """Metadata crosses janus as JSON text: as a dict its keys would become
    Prolog atoms, which cut a NUL and mangle Latin-1 characters."""
    if metadata is None or isinstance(metadata, str):
        return metadata               # JSON text: the store parses and checks it
    import json
    from ctxrelay.storage.validation import normalise_metadata
    return json.dumps(normalise_metadata(metadata), ensure_ascii=False)


_TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".json", ".jsonl", ".csv", ".log",
                  ".html", ".htm", ".xml", ".yaml", ".yml", ".pl", ".py")


def _ingest_sources(paths_or_texts: Any) -> list[dict[str, str]]:
    """What ``ingest`` reads: a path (an ``os.PathLike``, or a str that names a file
    or looks like a path: no line break, a path separator or a text-file suffix),
    else text.  A path that does not exist is an error, not a fact."""
    if paths_or_texts is None:
        raise InvalidArgumentError("ingest needs a path, a text, or a list of them; got None")
    items = [paths_or_texts] if isinstance(paths_or_texts, (str, os.PathLike)) \
        else list(paths_or_texts) if isinstance(paths_or_texts, (list, tuple)) else None
    if items is None:
        raise InvalidArgumentError(
            f"ingest takes a path, a text, or a list of them, not "
            f"{type(paths_or_texts).__name__}")
    sources = []
    for item in items:
        if isinstance(item, os.PathLike) or (
                isinstance(item, str) and "\n" not in item and len(item) < 4096
                and (os.path.exists(item) or os.sep in item
                     or item.lower().endswith(_TEXT_SUFFIXES))):
            path = os.fspath(item)
            if not os.path.exists(path):
                raise InvalidArgumentError(
                    f"no file or directory {path!r} to ingest; check the path, or pass the "
                    "text itself (text with a line break, or without a path's shape)")
            sources.append({"path": path})
        elif isinstance(item, str):
            sources.append({"text": item})
        else:
            raise InvalidArgumentError(
                f"ingest items are paths or texts, not {type(item).__name__}")
    return sources


def _turn_input(message: Any) -> Any:
    """A managed turn's input for Prolog: the text, or the list of messages."""
    if isinstance(message, (list, tuple)):
        out = []
        for i, m in enumerate(message):
            if not isinstance(m, dict):
                raise InvalidArgumentError(
                    f"message[{i}] must be a dict with role and content, not "
                    f"{type(m).__name__}")
            out.append({k: v for k, v in m.items() if v is not None})
        return out
    return message


def json_object(value: Any, name: str) -> dict[str, Any]:
    """``value`` as a JSON object that crosses to Prolog unchanged."""
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{name} must be a dict, not {type(value).__name__}")
    import json
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{name} must be JSON-serialisable ({exc}); pass plain "
                                   "dicts, lists, strings and numbers") from None


#: The caller's names of the goals' variables, for error messages.
_ARGUMENT_NAMES = {"S": "session_id", "M": "message", "C": "content", "Role": "role",
                   "Q": "query", "OpText": "operation", "Sum": "summary", "NS": "namespace",
                   "Items": "paths_or_texts", "K": "k", "Key": "key",
                   "KeyOrId": "key_or_id"}


def _check_session_id(session_id: Any) -> None:
    """A session id is a str: anything else (a list of characters, bytes) would be
    read as text by Prolog and name another session."""
    if not isinstance(session_id, str):
        from ctxrelay.errors import InvalidSessionIdError
        raise InvalidSessionIdError(
            f"session_id must be a str, not {type(session_id).__name__}; pass the "
            "session's id as text")


def _flag(name: str, value: Any) -> bool:
    """A True/False keyword: bool("no") is True, so anything else is refused (as the
    policy flags are by Prolog's boolean type)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, not {value!r}")
    return value


def _text_or_none(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InvalidArgumentError(f"{name} must be a str or None, not {type(value).__name__}; "
                               f"pass {name}=str(value)")


class Runtime:
    """A ctxrelay store opened for a program.

    ``Runtime(store_dir)`` opens (or creates) the store and makes it the
    default store of the embedded Prolog, so ``context/3`` and the other
    predicates that take ``default`` see it too.  ``store_dir`` is a
    directory (the embedded default) or a store URL such as
    ``lmdb:///abs/dir`` or ``postgresql://…``; ``cache`` is None (in-process),
    ``memory://`` or ``redis://…``.  Runtimes on one
    store share it (closing one leaves the others working); ``max_turn_bytes``
    applies when the store is first opened in the process, and a later Runtime on
    it may repeat it or leave it out but not change it (InvalidArgumentError).
    Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, store_dir: str | os.PathLike[str], *, map_size: int | None = None,
                 max_turn_bytes: int | None = None, cache: str | None = None) -> None:
        if not isinstance(store_dir, (str, os.PathLike)):
            raise InvalidArgumentError(
                f"store_dir must be a path, not {type(store_dir).__name__}; "
                "pass the directory that holds (or will hold) the store")
        from ctxrelay.storage.spec import parse_cache_spec, parse_store_spec
        spec = parse_store_spec(store_dir)        # a bad spec fails here, before Prolog
        parse_cache_spec(cache)
        # A plain directory stays as given (relative paths too); a URL gives its location.
        self.store_dir = Path(spec.location) if spec.is_url else Path(store_dir)
        sizes = {"map_size": map_size, "max_turn_bytes": max_turn_bytes}
        for name, value in sizes.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise InvalidArgumentError(f"{name} must be a positive int, not {value!r}")
        opts = "[default(true), map_size(M), max_turn_bytes(T)" + \
            (", cache(Cache)]" if cache is not None else "]")
        self._store = _prolog.once(
            f"ctxrelay:store_open(Dir, Store, {opts})",
            {"Dir": os.fspath(store_dir), "M": map_size or 0, "T": max_turn_bytes or 0,
             "Cache": cache})["Store"]

    # -- lifecycle -------------------------------------------------------
    def close(self) -> None:
        if self._store is not None:
            _prolog.once("ctxrelay:store_close(S)", {"S": self._store})
            self._store = None

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live_store(self) -> Any:
        if self._store is None:
            raise StoreClosedError("this Runtime is closed; open a new Runtime(store_dir)")
        return self._store

    def _call(self, goal: str, *, opts: list[tuple[str, Any]] | None = None,
              **bindings: Any) -> dict[str, Any]:
        store = self._live_store()
        if "S" in bindings:
            _check_session_id(bindings["S"])
        if opts is not None:
            # Values cross in the bindings dict; Prolog builds Name(Value).
            goal = "ctxrelay:py_options(OptPairs, _Opts), " + goal
            bindings["OptPairs"] = [[name, value] for name, value in opts]
        check_encodable(bindings, _ARGUMENT_NAMES)
        return _prolog.once(goal, {"St": store, **bindings}, names=_ARGUMENT_NAMES)

    # -- sessions --------------------------------------------------------
    def create_session(self, session_id: str, *, metadata: dict[str, Any] | None = None) -> SessionInfo:
        opts = [] if metadata is None else [("metadata", _json_metadata(metadata))]
        self._call("ctxrelay:session_create(St, S, _Opts)", S=session_id,
                   opts=opts)
        return self.session(session_id)

    # Like turn() below: straight to the store session_info/3 reads, since a
    # Prolog dict cannot carry every metadata key back (Latin-1, NUL).
    def session(self, session_id: str) -> SessionInfo:
        return self._live_store().transcript.session(session_id)

    def sessions(self) -> list[SessionInfo]:
        return self._live_store().transcript.sessions()

    def archive_session(self, session_id: str) -> None:
        self._call("ctxrelay:session_archive(St, S)", S=session_id)

    def stats(self, session_id: str) -> SessionStats:
        return SessionStats(**_plain(self._call("ctxrelay:session_stats(St, S, X)",
                                                S=session_id)["X"]))

    # -- turns -----------------------------------------------------------
    def append(self, session_id: str, role: str, content: str, *, name: str | None = None,
               tool_call_id: str | None = None, metadata: dict[str, Any] | str | None = None,
               timestamp: str | _dt.datetime | None = None, key: str | None = None) -> int:
        """Append one turn and return its 1-based id.  Same ``key`` → same id, no new write."""
        if not isinstance(role, str):
            raise InvalidArgumentError(f"role must be a str such as 'user', not {type(role).__name__}")
        if not isinstance(content, str):
            from ctxrelay.errors import InvalidContentError
            raise InvalidContentError(
                f"content must be str, not {type(content).__name__}; "
                "serialise structured content (e.g. json.dumps) before appending")
        if isinstance(timestamp, _dt.datetime):
            timestamp = timestamp.isoformat()
        opts = [(k, v) for k, v in (("name", _text_or_none("name", name)),
                                    ("tool_call_id", _text_or_none("tool_call_id", tool_call_id)),
                                    ("timestamp", _text_or_none("timestamp", timestamp)),
                                    ("key", _text_or_none("key", key)),
                                    ("metadata", _json_metadata(metadata))) if v is not None]
        return self._call("ctxrelay:turn_append(St, S, message(Role, C), Id, _Opts)",
                          S=session_id, Role=role, C=content, opts=opts)["Id"]

    # Reads go straight to the store the Prolog predicates read (turn_get/4,
    # history/4 call the same TranscriptStore methods through the bridge): no
    # round trip through Prolog dicts, whose atom keys cannot carry every
    # metadata key (a NUL is cut, Latin-1 keys do not decode).  The store
    # validates the arguments.
    def turn(self, session_id: str, turn_id: int) -> Turn:
        return self._live_store().transcript.turn(session_id, turn_id)

    def history(self, session_id: str, start: int = 1, end: int | None = None) -> list[Turn]:
        return self._live_store().transcript.history(session_id, start, end)

    def last(self, session_id: str, n: int) -> list[Turn]:
        return self._live_store().transcript.last(session_id, n)

    def turn_for_key(self, session_id: str, key: str) -> int | None:
        """The id of the turn appended with idempotency ``key``, or None."""
        found = self._call("ctxrelay:turn_for_key(St, S, Key, T)", S=session_id, Key=key)["T"]
        return None if found in (None, "none") else int(found)

    def turn_count(self, session_id: str) -> int:
        return self._call("ctxrelay:turn_count(St, S, N)", S=session_id)["N"]

    def search(self, session_id: str, query: str, *, k: int = 10) -> list[Hit]:
        hits = self._call("ctxrelay:transcript_search(St, S, Q, L, [k(K)])",
                          S=session_id, Q=query, K=k)["L"]
        return [Hit(**h) for h in hits]

    # -- export / import -------------------------------------------------
    def export(self, session_id: str, dest: str | os.PathLike[str] | None = None) -> str | None:
        """Return the session as JSON Lines, or write it to ``dest``."""
        text = self._call("ctxrelay:transcript_export(St, S, X)", S=session_id)["X"]
        if dest is None:
            return text
        from ctxrelay.storage.common.transcript.jsonl import write_text
        write_text(dest, text)      # atomic; a bad dest is InvalidPathError, no .tmp left
        return None

    def import_jsonl(self, source: str | os.PathLike[str] | Iterable[str], *,
                     session_id: str | None = None) -> str:
        """Import a session exported by :meth:`export`; ``source`` is a path, JSONL text
        or its lines.  A str is text or a path as the store's own import tells them
        (``jsonl.is_jsonl_text``: blank, starting with ``{`` or with a line break is text)."""
        from ctxrelay.storage.common.transcript.jsonl import is_jsonl_text
        if isinstance(source, os.PathLike) or (isinstance(source, str)
                                               and not is_jsonl_text(source)):
            src = "file(P)"
            binding: dict[str, Any] = {"P": os.fspath(source)}
        elif isinstance(source, str):
            src, binding = "T", {"T": source}
        else:
            lines = list(source) if isinstance(source, Iterable) \
                and not isinstance(source, (bytes, bytearray)) else None
            if lines is None or not all(isinstance(line, str) for line in lines):
                from ctxrelay.errors import ImportFormatError
                raise ImportFormatError(
                    f"source must be a path, JSON Lines text or an iterable of str lines, "
                    f"not {type(source).__name__}; decode bytes first (data.decode('utf-8'))")
            # Lines as a file gives them (with "\n") or as splitlines() does (without).
            src, binding = "T", {"T": "".join(line if line.endswith("\n") else line + "\n"
                                              for line in lines)}
        opts = [] if session_id is None else [("session", session_id)]
        return self._call(f"ctxrelay:transcript_import(St, {src}, Id, _Opts)",
                          opts=opts, **binding)["Id"]


    # -- managed turns ---------------------------------------------------
    def managed_turn(self, session_id: str, message: str, *, key: str | None = None,
                     **policy: Any) -> TurnResult:
        """Append ``message``, assemble a bounded pack, call the provider, append the reply.

        Policy keywords: see :func:`policy_option_names`; ``constraints`` is a
        list of pack constraints (text or tuples, see docs/packer.md) the pack
        must satisfy.  The same ``key`` retried appends nothing new.  Raises
        :class:`ContextOverflowError` (nothing sent) when the mandatory part
        cannot fit the input budget, :class:`InconsistentConstraintsError`
        when no pack satisfies the constraints, :class:`InvalidConstraintError`
        for a malformed one.
        """
        opts = _policy_pairs(policy) + ([("key", key)] if key is not None else [])
        r = self._call("ctxrelay:managed_turn(S, M, R, [store(St)|_Opts])",
                       opts=opts, S=session_id, M=message)["R"]
        return _result(r)

    def prepare_turn(self, session_id: str, message: str | list[dict[str, Any]], *,
                     key: str | None = None, create_session: bool = False,
                     **policy: Any) -> PreparedTurn:
        """Assemble the pack of a managed turn without storing anything.

        The first half of :meth:`managed_turn` for a caller that calls its own
        model (the relay does): send ``prepared.result.messages``, then
        :meth:`commit_turn` with the reply.  ``message`` is the user's text or a
        list of new messages ending with the user's (earlier ones are tool
        results or assistant messages; they enter the pack and are stored with
        the turn).  With ``create_session`` a missing session is created at
        commit.  Raises :class:`ContextOverflowError` when the pack cannot fit.
        """
        opts = _policy_pairs(policy) + ([("key", key)] if key is not None else [])
        opts.append(("create_session", _flag("create_session", create_session)))
        r = self._call("ctxrelay:turn_prepare(S, M, R, [store(St)|_Opts])",
                       opts=opts, S=session_id, M=_turn_input(message))["R"]
        commit = r["commit"]
        replay = str(commit["state"]) == "replay"
        return PreparedTurn(result=_result({k: v for k, v in r.items() if k != "commit"}),
                            replay=replay, reply=commit.get("reply") if replay else None,
                            user_turn=commit.get("user_turn"),
                            assistant_turn=commit.get("assistant_turn"), turn=r)

    def commit_turn(self, prepared: PreparedTurn, reply: str, *,
                    metadata: dict[str, Any] | None = None,
                    provider: str = "", usage: dict[str, Any] | None = None) -> TurnResult:
        """Store a prepared turn with its reply, all in one transaction.

        The new messages, the user's and the reply are stored together (a
        replayed turn stores nothing); then the references the message resolved
        are recorded and durable values promoted.  ``metadata`` goes on the
        reply turn.  A prepared turn is committed once: a second commit raises
        InvalidArgumentError (without a key it would store the turn again); a
        commit that raised may be tried again.
        """
        if not isinstance(prepared, PreparedTurn):
            raise InvalidArgumentError(
                f"prepared must be what prepare_turn() returned, not "
                f"{type(prepared).__name__}")
        if not isinstance(reply, str):
            raise InvalidArgumentError(f"reply must be a str, not {type(reply).__name__}")
        if not isinstance(provider, str):
            raise InvalidArgumentError(f"provider must be a str, not {type(provider).__name__}")
        answer: Any = reply if metadata is None else \
            {"content": reply, "metadata": json_object(metadata, "metadata")}
        info = {"provider": provider, "usage": json_object(usage or {}, "usage")}
        # The turn is stored in this Runtime's store: the one it was prepared on (its
        # handle, or the same store opened again since), never another one.
        commit, store = prepared.turn["commit"], self._live_store()
        held = commit.get("store")
        if held is not store:
            if getattr(getattr(held, "spec", None), "key", None) != store.spec.key:
                raise InvalidArgumentError(
                    "this turn was prepared on another store; commit it with the Runtime "
                    "that prepared it (or prepare it again on this one)")
            commit = {**commit, "store": store}
        # turn_commit/4 reads the turn's `commit` and `headers` only, and hands the rest
        # back unchanged: the pack (messages, ledger, units: thousands of strings) stays
        # on this side instead of crossing janus twice more and being converted again.
        turn = {"commit": commit, "headers": prepared.turn["headers"]}
        # The mark is set before the commit (setdefault is atomic: of two threads
        # committing one prepared turn, one stores it) and taken back if it fails.
        mark = object()
        if prepared.turn.setdefault("committed_by", mark) is not mark:
            raise InvalidArgumentError(
                "this prepared turn was already committed; prepare_turn() the next one "
                "(with key= a retried turn is stored once)")
        try:
            r = self._call("ctxrelay:turn_commit(T, A, R, [info(I)])", T=turn, A=answer,
                           I=info)["R"]
        except BaseException:
            prepared.turn.pop("committed_by", None)
            raise
        return dataclasses.replace(
            prepared.result, headers={str(k): v for k, v in r["headers"].items()},
            reply=r.get("reply"), user_turn=r.get("user_turn"),
            assistant_turn=r.get("assistant_turn"))

    def assemble(self, session_id: str, message: str, **policy: Any) -> TurnResult:
        """The best pack for ``message`` as the next turn: nothing appended, no provider call.

        ``constraints=[...]`` (text or tuples) are pack constraints it must
        satisfy, as for :meth:`managed_turn`."""
        r = self._call("ctxrelay:assemble(S, M, R, [store(St)|_Opts]), !",
                       opts=_policy_pairs(policy), S=session_id, M=message)["R"]
        return _result(r)

    def packs(self, session_id: str, message: str, *, limit: int | None = None,
              **policy: Any):
        """Iterate over alternative packs, best first (non-increasing utility).

        With ``constraints=[...]`` every pack satisfies them; the first is the
        optimum of the model that includes them."""
        _check_session_id(session_id)
        store = self._live_store()
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise InvalidArgumentError(f"limit must be None or an int >= 0, not {limit!r}; "
                                       "pass how many packs to return at most")
        if limit == 0:
            return                          # no pack asked for: assemble none
        goal = ("ctxrelay:py_options(OptPairs, _Opts), "
                "ctxrelay:assemble(S, M, R, [store(St)|_Opts])")
        bindings = {"S": session_id, "M": message,
                    "OptPairs": [[k, v] for k, v in _policy_pairs(policy)]}
        check_encodable(bindings, _ARGUMENT_NAMES)      # as _call does: no surrogate to janus
        bindings["St"] = store
        for n, answer in enumerate(_prolog.solutions(goal, bindings, names=_ARGUMENT_NAMES)):
            if limit is not None and n >= limit:
                return
            yield _result(answer["R"])

    def context(self, session_id: str, operation: str, **options: Any) -> Any:
        """Run ``context(session(Id), Operation, Result)``; ``operation`` is Prolog text.

        Example: ``rt.context("s", "slice(10, 3)")``.  Search returns every hit
        as one bounded result (``as(list)``).
        """
        if not isinstance(operation, str):
            raise InvalidArgumentError(
                f"operation must be Prolog text such as \"slice(10, 3)\", not "
                f"{type(operation).__name__}")
        opts = list(options.items())
        if operation.lstrip().startswith("search("):
            opts.append(("as", "list"))
        return _plain(self._call("term_string(_Op, OpText), "
                                 "ctxrelay:context(session(S), _Op, R, [store(St)|_Opts])",
                                 opts=opts, S=session_id, OpText=operation)["R"])

    # -- turn log and topic threads -----------------------------------------------
    def derive(self, session_id: str, *, embedder: str | None = None, recompute: bool = False,
               progress: bool | None = None) -> dict[str, Any]:
        """Bring the session's derived fields (embedding, thread, entities, references,
        tool calls) up to date; ``recompute=True`` drops and re-derives them all (after
        changing the embedder), with a progress bar on a terminal."""
        opts: list[tuple[str, Any]] = [("recompute", _flag("recompute", recompute))]
        if embedder:
            opts.append(("embedder", embedder))
        if progress is not None:
            opts.append(("progress", _flag("progress", progress)))
        r = self._call("ctxrelay:turnlog_derive(St, S, [result(R)|_Opts])", S=session_id,
                       opts=opts)
        return _plain(r["R"])

    def derived(self, session_id: str, turn_id: int) -> dict[str, Any] | None:
        """A turn's derived fields, or None if it has not been derived yet."""
        _check_session_id(session_id)
        store = self._live_store()
        check_encodable({"S": session_id, "T": turn_id}, _ARGUMENT_NAMES)
        answers = _prolog.solutions("ctxrelay:turn_derived(St, S, T, D)",
                                    {"St": store, "S": session_id, "T": turn_id},
                                    names={"S": "session_id", "T": "turn_id"})
        try:
            answer = next(answers, None)
        finally:
            answers.close()
        return None if answer is None else _plain(answer["D"])

    def threads(self, session_id: str) -> list[dict[str, Any]]:
        """The session's topic threads, dicts with ``thread_id``, ``label``, ``turn_ids``
        (the latest), ``turn_count``, ``recent_turns``, ``user_turns``, ``last_active_turn``
        and ``state``."""
        return _plain(self._call("ctxrelay:topic_threads(St, S, X)", S=session_id)["X"])

    def thread(self, session_id: str, thread_id: str) -> dict[str, Any]:
        """One thread with its state derived from its latest turns (or as set by hand)."""
        return _plain(self._call("ctxrelay:topic_thread(St, S, T, X)", S=session_id,
                                 T=thread_id)["X"])

    def set_thread_state(self, session_id: str, thread_id: str, *,
                         established: list[str] | None = None,
                         open_questions: list[str] | None = None,
                         user_constraints: list[str] | None = None) -> None:
        """Set a thread's state by hand; derived values no longer replace it."""
        state = {k: v for k, v in (("established", established),
                                   ("open_questions", open_questions),
                                   ("user_constraints", user_constraints)) if v is not None}
        self._call("ctxrelay:thread_state_set(St, S, T, X)", S=session_id, T=thread_id, X=state)

    # -- warm artifacts --------------------------------------------------
    def publish_artifact(self, session_id: str, start: int, end: int, summary: str, *,
                         decisions: list[str] = (), facts: list[str] = (),
                         unresolved: list[str] = (), entities: list[str] = (),
                         producer: str = "api", key: str | None = None,
                         metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Publish a warm artifact for turns ``start..end``; a range republished gets a new version."""
        lists = {"decisions": decisions, "facts": facts, "unresolved": unresolved,
                 "entities": entities}
        for name, value in lists.items():
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                # list() of a str would store one item per character.
                from ctxrelay.errors import InvalidArtifactError
                raise InvalidArtifactError(
                    f"{name} must be a list of str, not {type(value).__name__}; pass "
                    f"{name}=[{value!r}] for one item" if isinstance(value, str) else
                    f"{name} must be a list of str, not {type(value).__name__}")
        opts = [(name, list(value)) for name, value in lists.items()] + [("producer", producer)]
        opts += [(k, v) for k, v in (("key", key), ("metadata", _json_metadata(metadata)))
                 if v is not None]
        self._call("ctxrelay:warm_publish(St, S, B-E, Sum, _A, _Opts)", opts=opts,
                   S=session_id, B=start, E=end, Sum=summary)
        # The artifact is read back from the store, not through a Prolog dict,
        # whose atom keys cannot carry every metadata key (Latin-1, NUL).
        warm = self._live_store().warm
        found = [a for a in warm.versions(session_id, start, end) if a.key == key] \
            if key is not None else []
        return (found[-1] if found else warm.get(session_id, start, end)).to_dict()

    def artifacts(self, session_id: str) -> list[dict[str, Any]]:
        self._call("ctxrelay:warm_artifacts(St, S, _L)", S=session_id)   # checks the session
        # (and its arguments); the artifacts are read from the store, not from Prolog dicts
        warm = self._live_store().warm_if_present()
        return [] if warm is None else [a.to_dict() for a in warm.latest(session_id)]

    # -- tool outputs (scratch buffer) ---------------------------------------
    def record_tool_output(self, session_id: str, tool_name: str, args: dict[str, Any] | None,
                           raw: str | bytes, *, freshness: str = "VOLATILE",
                           key: str | None = None) -> str:
        """Store ``raw`` as a blob, append the call and its summary as turns; return the scratch id."""
        if args is not None and not isinstance(args, dict):     # text and bytes alike
            raise InvalidArgumentError(f"args must be a dict of the tool's arguments, not "
                                       f"{type(args).__name__}")
        if isinstance(raw, bytes):
            # Bytes cross janus as text only if decodable; binary outputs go straight to Python.
            from ctxrelay.bridge import stores as bridge
            opts = {"freshness": freshness, "key": key}
            return bridge.record_tool_output(self._live_store(), session_id, tool_name, args or {}, raw,
                                             opts)["scratch_id"]
        opts = [("freshness", freshness)] + ([("key", key)] if key is not None else [])
        from ctxrelay.storage.validation import MAX_ARGS_BYTES, check_json
        _, args_json = check_json(args or {}, "args", InvalidArgumentError,
                                  max_bytes=MAX_ARGS_BYTES)
        return self._call("ctxrelay:tool_output_record(St, S, T, A, R, X, _Opts)", opts=opts,
                          S=session_id, T=tool_name, A=args_json, R=raw)["X"]["scratch_id"]

    def scratch(self, session_id: str, scratch_id: str, *, raw: bool = False) -> Any:
        """The entry (summary, provenance, freshness), or with ``raw=True`` the whole output."""
        if raw:
            from ctxrelay.bridge import stores as bridge
            entry = bridge.scratch_entry(self._live_store(), session_id, scratch_id, True)
            return entry["raw"].encode("latin-1") if entry["raw_is_bytes"] else entry["raw"]
        return self._call("ctxrelay:scratch_get(St, S, I, E, [as(python)])", S=session_id,
                          I=scratch_id)["E"]

    def pin(self, session_id: str, scratch_id: str) -> None:
        """Keep a tool output from eviction."""
        self._call("ctxrelay:scratch_pin(St, S, I)", S=session_id, I=scratch_id)

    def scratch_entries(self, session_id: str) -> list[dict[str, Any]]:
        return _plain(self._call("ctxrelay:scratch_entries(St, S, L)", S=session_id)["L"])

    # -- knowledge (CKF) ------------------------------------------------------
    def add_fact(self, content: str, *, key: str | None = None, source: str | None = None,
                 importance: float | None = None, ttl: str | float | None = None,
                 namespace: str | None = None, metadata: dict[str, Any] | None = None) -> str:
        """Store a fact in the knowledge fabric; returns its id.  ``ttl`` is an ISO 8601
        duration (``"P90D"``), seconds, or ``"none"``, as ``FactStore.add_fact`` takes it."""
        if not isinstance(content, str):    # janus would turn bytes into text
            from ctxrelay.storage.validation import check_content
            check_content(content)
        opts = [(k, v) for k, v in (("key", key), ("source", source), ("importance", importance),
                                    ("ttl", ttl), ("namespace", namespace),
                                    ("metadata", _json_metadata(metadata))) if v is not None]
        return self._call("ctxrelay:fact_add(St, C, Id, _Opts)", opts=opts, C=content)["Id"]

    def facts(self, query: str, *, k: int = 10, namespace: str | None = None) -> list[dict[str, Any]]:
        """The ``k`` facts most similar to ``query`` (cosine), best first."""
        opts = [("k", k)] + ([("namespace", namespace)] if namespace is not None else [])
        hits = _plain(self._call("ctxrelay:facts_search(St, Q, L, _Opts)", opts=opts,
                                 Q=query)["L"])
        # A fact's fields with its score beside them (the score's terms under "scoring").
        return [{**h["fact"], "score": h["score"],
                 "scoring": {k: v for k, v in h.items() if k not in ("fact", "fact_id", "score")}}
                for h in hits]

    def fact(self, key_or_id: str, *, namespace: str | None = None) -> dict[str, Any]:
        """One fact by id or key (any status)."""
        opts = [("namespace", namespace)] if namespace is not None else []
        return self._call("ctxrelay:fact_get(St, KeyOrId, F, [as(python)|_Opts])", opts=opts,
                          KeyOrId=key_or_id)["F"]

    def reindex_facts(self, *, namespace: str | None = None) -> dict[str, Any]:
        """Rebuild the knowledge store's ANN index (one namespace, or all) on one thread;
        returns ``{"namespaces", "vectors", "seconds"}`` (``knowledge_reindex/3``)."""
        opts = [("namespace", namespace)] if namespace is not None else []
        return _plain(self._call("ctxrelay:knowledge_reindex(St, R, _Opts)", opts=opts)["R"])

    def ingest(self, paths_or_texts: Any, *, namespace: str | None = None,
               source_type: str | None = None, progress: bool | None = None) -> dict[str, Any]:
        """Chunk documents (paths, directories or texts) into facts; a progress bar on a TTY."""
        sources = _ingest_sources(paths_or_texts)
        opts = [(k, v) for k, v in (("namespace", namespace), ("source_type", source_type),
                                    ("progress", progress)) if v is not None]
        check_encodable({"Items": sources, "OptPairs": opts}, _ARGUMENT_NAMES)
        goal = ("ctxrelay:py_options(OptPairs, _Opts), "
                "maplist([_D, _T]>>( get_dict(path, _D, _P) -> _T = file(_P)"
                " ; get_dict(text, _D, _X), _T = text(_X) ), Items, _Srcs),"
                " ctxrelay:knowledge_ingest(St, _Srcs, R, _Opts)")
        return _plain(_prolog.once(goal, {"St": self._live_store(), "Items": sources,
                                          "OptPairs": [[k, v] for k, v in opts]})["R"])

    # -- storage router
    _ACCESS_TEMPLATES = {
        "search": "search(Q)", "facts": "facts(Q)", "key": "key(Q)", "scratch": "scratch(Q)",
        "recent": "recent(K)", "explore": "intent(explore, Q)",
        "drill_down": "intent(drill_down, Q)", "continue": "intent(continue, Q)",
        "clarify": "intent(clarify, Q)", "tool_reference": "intent(tool_reference, Q)",
    }

    def recent(self, session_id: str, n: int) -> list[Turn]:
        """The session's last ``n`` turns from its rolling log (pointer reads), oldest first."""
        _check_session_id(session_id)
        store = self._live_store()
        check_encodable({"S": session_id, "N": n}, _ARGUMENT_NAMES)
        # as(python): the Turn list crosses janus as one reference, not n dicts.
        return _prolog.once("ctxrelay:recent_turns(St, S, N, L, [as(python)])",
                            {"St": store, "S": session_id, "N": n},
                            names={"S": "session_id", "N": "n"})["L"]

    def retrieve(self, query: str, *, session_id: str | None = None,
                 access: str | list[str] | None = None, k: int = 10,
                 namespace: str | None = None, cache: bool = True) -> "RetrievalResult":
        """Serve an access through the storage router (SPEC-035 §3), cache first.

        ``access`` names the access type (default ``"search"``: facts by ANN fused
        with BM25): ``"facts"``, ``"key"`` (``query`` is the key), ``"scratch"``
        (``query`` is the scratch id), ``"recent"`` (the last ``k`` turns), or an
        intent -- ``"explore"`` (CDR), ``"drill_down"`` (CDGR), ``"continue"``,
        ``"clarify"``, ``"tool_reference"``; a list of names is a blended access,
        fetched concurrently and fused.  Accesses that read a session need
        ``session_id``.
        """
        store = self._live_store()
        if not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a str, not {type(query).__name__}; "
                                       "pass the query text (or the key / scratch id)")
        if session_id is not None:
            _check_session_id(session_id)
        names = [access or "search"] if not isinstance(access, list) else access
        terms = []
        for name in names:
            template = self._ACCESS_TEMPLATES.get(name) if isinstance(name, str) else None
            if template is None:
                raise InvalidArgumentError(
                    f"unknown access {name!r}; use one of "
                    f"{', '.join(sorted(self._ACCESS_TEMPLATES))} or a list of them")
            terms.append(template)
        if not terms:
            raise InvalidArgumentError("access is an empty list; name at least one access")
        term = terms[0] if len(terms) == 1 else f"blend([{', '.join(terms)}])"
        # Option templates are fixed text: every value crosses in the bindings.
        opts = ["as(python)", "k(K)"] + ([] if _flag("cache", cache) else ["cache(false)"])
        bindings: dict[str, Any] = {"Q": query, "K": k}
        if session_id is not None:
            opts.append("session(S)")
            bindings["S"] = session_id
        if namespace is not None:
            opts.append("namespace(NS)")
            bindings["NS"] = namespace
        goal = f"ctxrelay:retrieve(St, {term}, [{', '.join(opts)}], R)"
        check_encodable(bindings, _ARGUMENT_NAMES)
        return _prolog.once(goal, {"St": store, **bindings}, names=_ARGUMENT_NAMES)["R"]
