"""Promotion: the evidence the rules need, and the facts they accept.

CRP-SPEC-035 §4.2 and CRP-SPEC-029 §5: ephemeral context that proved
durable becomes CKF knowledge.  The rules -- ``tool_result`` (a scratch
entry pinned or referenced by enough later turns), ``named`` (a value the
user names: "call that the budget figure"), ``cross_thread`` (a statement
reused in another topic thread), "volatile readings are never promoted" --
and their thresholds live in Prolog (``prolog/ctxrelay/promotion.pl``,
module ``ctxrelay_promotion``; the naming grammar in ``naming.pl``), where
users can read and change them.  Every entry point reaches them there: the
managed turn, ``scratch_pin/3``, and the Python functions below, which call
``ctxrelay_promotion:promote_turns/5`` / ``promote_scratch_entry/5``.

This module does the work on either side of the decision:

:func:`evidence`
    One call: the processed turns with what they mention (scratch ids and
    their offsets, the ids reached through resolved references), the
    statements of earlier turns in other topic threads that share a
    concrete value with a turn (with their value share, whether every
    number recurs, their term containment and their terms), and the
    scratch entries involved (pinned, freshness class, referencing turns).
    Nothing is written.
:func:`antecedents`
    The turn a naming's "that" points at, asked for only for turns with
    such a naming.
:func:`similarities`
    Sentence cosines, asked for only for statements whose terms do not
    settle the rule (the one embedding a paraphrase needs).
:func:`apply`
    Writes what the rules accepted, in order: references on scratch
    entries (``ScratchStore.reference``), and facts with deterministic keys
    (``scratch:<id>``, :func:`name_key` of a name, ``stmt:<hash>``), their
    content and provenance metadata.  A fact already there is left alone
    (idempotent), except that naming a key again with another value updates
    it; a ``FactKeyExistsError`` means another writer promoted it first.

Cost: :func:`evidence` reads the processed turns, syncs the turn log
incrementally (embedding only new turns), scans the turn log's bounded
dense window once per processed user or assistant turn, and reads the
scratch entries the turns name.  It never scans the session's history or
scratch buffer.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.memo import keep
from ctxrelay.text.bm25 import tokenize
from ctxrelay.types import Turn

__all__ = ["Promotion", "Naming", "promote_after_turn", "promote_scratch_entry",
           "parse_namings", "name_key", "display_name", "scratch_mentions", "statements",
           "specifics", "evidence", "entry_evidence", "antecedents", "similarities", "apply"]

MIN_STATEMENT_TERMS = 4      # a sentence with fewer distinct terms states no fact
MAX_VALUE_CHARS = 600
MAX_ARGS_CHARS = 200
ANTECEDENT_LOOKBACK = 11     # earlier turns searched for what "that" points at
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z*`(\"'\-\[])|\n+")
_NUMBER = re.compile(r"\d")
_MENTION = re.compile(r"(?:call_)?(scr_[0-9a-f]{32})(?![0-9a-f])")
_DETERMINER = re.compile(r"^(?:the|our|my)\s+", re.I)


# -- results ------------------------------------------------------------------

@dataclass(frozen=True)
class Promotion:
    """One fact added (or, for a renamed value, changed) by a rule."""

    rule: str                          # tool_result | named | cross_thread
    fact_id: str
    key: str
    namespace: str
    content: str
    content_hash: str
    source: str                        # the scratch id, or "turn:<id>"
    scratch_id: str | None = None
    turn_id: int | None = None         # the turn the value came from
    promoted_at_turn: int | None = None
    updated: bool = False              # a named fact that got a new value
    details: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Naming:
    """A naming phrase: ``value`` is the explicit value, or None for "that"/"this"/"it"."""

    name: str
    key: str
    value: str | None
    start: int
    end: int


# -- text helpers (numbers, not rules) -----------------------------------------------

def scratch_mentions(text: str) -> list[str]:
    """Scratch ids named in ``text`` (also inside ``call_scr_...`` ids), in order."""
    return [m["scratch_id"] for m in _mention_spans(text)]


def _mention_spans(text: str) -> list[dict[str, Any]]:
    """Each scratch id of ``text`` at its first occurrence, with its offsets."""
    seen: dict[str, dict[str, Any]] = {}
    for m in _MENTION.finditer(text):
        sid = m.group(1)
        if sid not in seen:
            seen[sid] = {"scratch_id": sid, "start": m.start(), "end": m.end()}
    return list(seen.values())


def name_key(name: str) -> str:
    """The fact key of a user-given name: words lowercased and joined by ``_``.

    ``"the Budget Figure"`` -> ``"budget_figure"``; ``"budget_q3"`` stays.
    @raises InvalidArgumentError for a name with no word in it.
    """
    if not isinstance(name, str):
        raise InvalidArgumentError(f"a name must be a str, not {type(name).__name__}")
    words = re.findall(r"[\w$€£%.-]+", name.casefold())
    words = [w.strip(".-") for w in words if w.strip(".-")]
    if words and words[0] in ("the", "our", "my"):
        words = words[1:]
    key = "_".join(words)[:128].strip("_")
    if not key:
        raise InvalidArgumentError(
            f"the name {name!r} has no word to make a key of; name the value with "
            "words, e.g. 'call that the budget figure'")
    return key


def display_name(name: str) -> str:
    """A name as a fact shows it: without a leading "the", "our" or "my"."""
    return _DETERMINER.sub("", name)


def parse_namings(text: str) -> list[Naming]:
    """The naming phrases of a user's ``text``, in order (the grammar is
    ``ctxrelay_naming:namings/2``; names without a key are left out)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a str, not {type(text).__name__}")
    from ctxrelay.bridge import engine
    found = engine.once("ctxrelay_naming:naming_dicts(T, Ns)", {"T": text})["Ns"]
    out = []
    for n in found:
        try:
            key = name_key(n["name"])
        except InvalidArgumentError:
            continue
        value = n["value"]
        out.append(Naming(display_name(n["name"]), key, value if isinstance(value, str) else None,
                          int(n["start"]), int(n["end"])))
    return out


def statements(text: str) -> list[str]:
    """Declarative sentences of ``text`` long enough to establish a fact."""
    out = []
    for sentence in _SENTENCE.split(text or ""):
        sentence = " ".join(sentence.split()).strip(" -*")
        if not sentence or sentence.endswith("?") or sentence.startswith("[tool output"):
            continue
        if len(set(tokenize(sentence))) >= MIN_STATEMENT_TERMS:
            out.append(sentence)
    return out


def _numbers(text: str) -> set[str]:
    return {m.group(0) for m in re.finditer(r"\d+(?:[.,]\d+)*", text)}


_SPECIFICS: dict[str, frozenset[str]] = {}
_SPECIFICS_MAX = 8192


def specifics(text: str) -> frozenset[str]:
    """The concrete values of a text: numbers, identifiers and proper names.

    A statement establishes a fact only through these ("three nodes in
    eu-west-1 with 8 GiB"); two sentences built from the same phrasing
    with other values state different facts.  Memoised (a pure function of
    the text): every commit compares its turns with the same nearest earlier
    statements again."""
    found = _SPECIFICS.get(text)
    if found is None:
        from ctxrelay.storage.turnlog_derivation import extract_entities
        values = _numbers(text)
        values.update(e.casefold() for e in extract_entities(text))
        found = frozenset(values)
        if len(text) <= 4096:
            keep(_SPECIFICS, text, found, _SPECIFICS_MAX)
    return found


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _summary_body(summary: str) -> str:
    lines = [ln for ln in summary.splitlines()
             if not (ln.startswith("[tool output ") or ln.startswith("[end tool output"))]
    return "\n".join(lines).strip() or summary.strip()


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_result_content(entry: Any) -> str:
    """The fact text of a scratch entry: tool, arguments and its summary's body."""
    args = json.dumps(entry.args, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return (f"{entry.tool_name}({_clip(args, MAX_ARGS_CHARS)}) returned: "
            f"{_summary_body(entry.summary)}")


def value_of_turn(turn: Turn) -> str:
    """The part of a turn a name refers to: its last sentence with a number, else
    its last sentence (the value stated just before the naming)."""
    sentences = [s for s in (" ".join(x.split()) for x in _SENTENCE.split(turn.content)) if s]
    if not sentences:
        return ""
    with_number = [s for s in sentences if _NUMBER.search(s)]
    return _clip((with_number or sentences)[-1], MAX_VALUE_CHARS)


# -- the state of one promotion (the handle Prolog holds) ------------------------------

class _Run:
    """What one promotion reads and writes, from evidence to apply."""

    def __init__(self, stores: Any, session_id: str, facts: Any, scratch: Any,
                 namespace: str | None, turnlog: Any, embedder: Any) -> None:
        # ``stores`` is the store's Stores object; ``store`` its transcript.
        self.stores, self.store, self.session_id = stores, stores.transcript, session_id
        self._facts, self.scratch = facts, scratch
        self.namespace, self.turnlog, self.embedder = namespace, turnlog, embedder
        # What this promotion read, so each turn, record and vector is read once,
        # and many in one call where the ids are known ahead (prefetch_*).
        self._turns: dict[int, Turn] = {}
        self.turn_count = 0                      # as evidence() found it (prefetch's bound)
        self.vectors_ahead: Iterable[int] = ()   # the vectors to read with the first one
        self._derived: dict[int, Any] = {}
        self._vectors: dict[int, Any] = {}
        self._entries: dict[str, Any] = {}      # as the last reference left them
        # statement id -> (text, origin turn, origin role, threads, reusing turn, containment)
        self.statements: dict[int, tuple[str, int, str, list[str], int, float]] = {}
        self.cosines: dict[int, float] = {}
        self._sentence_vecs: dict[int, Any] = {}
        self.out: list[Promotion] = []

    @property
    def facts(self) -> Any:
        """The CKF, opened on the first promotion (most turns promote nothing,
        and opening it may load the default embedder)."""
        if self._facts is None:
            self._facts = self.stores.facts
        return self._facts

    def turn(self, turn_id: int) -> Turn:
        if turn_id not in self._turns:
            self._turns[turn_id] = self.store.turn(self.session_id, turn_id)
        return self._turns[turn_id]

    def prefetch(self, turn_ids: Iterable[int]) -> None:
        """Read the turns among ``turn_ids`` not read yet in one call (one round trip
        on a server back end, where :meth:`turn` one by one costs one each); ids
        outside the session are left out, so :meth:`turn` still reports them."""
        missing = sorted({t for t in turn_ids if 1 <= t <= self.turn_count} - set(self._turns))
        if missing:
            self._turns.update(zip(missing, self.store.turns(self.session_id, missing)))

    def derived(self, turn_id: int) -> Any:
        """The turn log's record of ``turn_id`` (None: not derived), read once."""
        if turn_id not in self._derived:
            self._derived[turn_id] = self.turnlog.derived(self.session_id, turn_id)
        return self._derived[turn_id]

    def derived_of(self, turn_ids: Iterable[int]) -> dict[int, Any]:
        """The records read so far of the derived turns among ``turn_ids``."""
        return {t: self._derived[t] for t in turn_ids if self._derived.get(t) is not None}

    def prefetch_derived(self, turn_ids: Iterable[int]) -> None:
        """The turn log's records of ``turn_ids`` not read yet, in one call."""
        missing = sorted(set(turn_ids) - set(self._derived))
        if missing and self.turnlog is not None:
            found = self.turnlog.derived_many(self.session_id, missing)
            self._derived.update({t: found.get(t) for t in missing})

    def vector(self, turn_id: int) -> Any:
        """The turn log's vector of ``turn_id`` (None: not derived), read once."""
        if turn_id not in self._vectors:
            self.prefetch_vectors([turn_id, *self.vectors_ahead])
        return self._vectors[turn_id]

    def prefetch_vectors(self, turn_ids: Iterable[int]) -> None:
        missing = sorted(set(turn_ids) - set(self._vectors))
        if missing and self.turnlog is not None:
            found = self.turnlog.vectors(self.session_id, missing)
            self._vectors.update({t: found.get(t) for t in missing})

    def entry(self, scratch_id: str) -> Any:
        """The session's scratch entry, or None (never stored here, or evicted)."""
        if scratch_id in self._entries:
            return self._entries[scratch_id]
        if self.scratch is None:
            return None
        from ctxrelay.storage.common.scratch.errors import UnknownScratchError
        try:
            found = self.scratch.get(self.session_id, scratch_id, touch=False)
        except UnknownScratchError:
            found = None
        self._entries[scratch_id] = found
        return found

    def relayed_reading(self, turn: Turn) -> dict[str, Any]:
        """Whether ``turn`` comes right after a tool result (past empty tool-call
        turns), and that reading's freshness class as stored."""
        tid = turn.turn_id - 1
        while tid >= 1:
            prev = self.turn(tid)
            if prev.role == "tool":
                return {"after_tool": True, "tool_freshness": (prev.metadata or {}).get("freshness")}
            if prev.role == "assistant" and not prev.content and (prev.metadata or {}).get(
                    "tool_calls"):
                tid -= 1
                continue
            break
        return {"after_tool": False, "tool_freshness": None}

    def sentence_vectors(self, turn_id: int) -> Any:
        if turn_id not in self._sentence_vecs:
            content = self.turn(turn_id).content
            sents = [s for s in (" ".join(x.split()) for x in _SENTENCE.split(content)) if s]
            self._sentence_vecs[turn_id] = np.asarray(self.embedder.embed_batch(sents or [""]),
                                                      dtype=np.float32)
        return self._sentence_vecs[turn_id]


# -- evidence --------------------------------------------------------------------------

def _open_stores(stores: Any, given: dict[str, Any], use_turnlog: bool
                 ) -> tuple[Any, Any, Any, Any]:
    facts, scratch = given.get("facts"), given.get("scratch")
    turnlog, embedder = given.get("turnlog"), given.get("embedder")
    if scratch is None:
        scratch = stores.scratch_if_present()
    if use_turnlog and (embedder is None or isinstance(embedder, str)):
        from ctxrelay.text.embed import get_embedder
        embedder = get_embedder(embedder or None)
    if turnlog is None and use_turnlog:
        turnlog = stores.turnlog
    return facts, scratch, turnlog, embedder


def _turn_range(stores: Any, session_id: str, first: Any, last: Any) -> tuple[int, int, int]:
    """``(first, last, the session's turn count)``, checked."""
    count = stores.transcript.turn_count(session_id)
    if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= count:
        raise InvalidArgumentError(
            f"turn_id must be an int in 1..{count} (a turn of {session_id!r}), not {last!r}")
    if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= last:
        raise InvalidArgumentError(
            f"since must be an int in 1..{last} (the first turn to look at), not {first!r}")
    return first, last, count


def evidence(store: Any, session_id: str, options: dict[str, Any]) -> dict[str, Any]:
    """What the promotion rules need about turns ``first..last`` of ``session_id``.

    ``options`` (set by ``ctxrelay_promotion:promote_turns/5``): first, last,
    references (the turn ids ``last``'s message resolved to), namespace,
    embedder (a name or an embedder; the turn log's), stores (facts, scratch,
    turnlog objects to use instead of those beside ``store``), naming_roles
    (the roles whose turns may name values: only their text is handed over),
    cross_thread (gather reused statements), nearest (earlier turns compared
    per processed turn).  Returns plain data and ``handle`` (for :func:`antecedents`,
    :func:`similarities` and :func:`apply`).
    @raises InvalidArgumentError for a turn range outside the session.
    """
    first, last, count = _turn_range(store, session_id, options.get("first"),
                                     options.get("last"))
    given = dict(options.get("stores") or {})
    if options.get("embedder"):
        given.setdefault("embedder", options["embedder"])
    facts, scratch, turnlog, embedder = _open_stores(store, given, use_turnlog=True)
    turnlog.sync(store.transcript, session_id, embedder)
    run = _Run(store, session_id, facts, scratch, options.get("namespace") or None,
               turnlog, embedder)
    resolved = [int(t) for t in options.get("references") or ()]
    naming_roles = set(options.get("naming_roles") or ())
    cross_thread = bool(options.get("cross_thread"))
    nearest = int(options.get("nearest") or 0)
    run.turn_count = count
    # Each kind in one read rather than one per turn: the turn-log records of the
    # turns looked at; then those turns, the one before them (a relayed reading looks
    # one back) and the earlier turns their references resolve to; their vectors on
    # the first one asked for.
    run.prefetch_derived(range(first, last + 1))
    wanted = {*range(first - 1, last + 1), *(t for t in resolved if t < last)}
    for tid, derived in run.derived_of(range(first, last + 1)).items():
        wanted.update(t for t in derived.references if 1 <= t < tid)
    run.prefetch(wanted)
    run.vectors_ahead = range(first, last + 1)
    turns, ids = [], []
    for tid in range(first, last + 1):
        turn = run.turn(tid)
        if turn.role == "system":
            continue
        item = _turn_evidence(run, turn, resolved if tid == last else (), ids)
        if turn.role in naming_roles:
            item["content"] = turn.content
        if cross_thread and nearest > 0:
            item["reuses"] = _reuse_evidence(run, turn, nearest)
        turns.append(item)
    thresholds = dict(embedder.thresholds)
    return {"handle": run, "turns": turns, "entries": _entries(run, ids), "at_turn": last,
            "similarity": {"topic_same": float(thresholds["topic_same"]),
                           "edge": float(thresholds["edge"])}}


def _turn_evidence(run: _Run, turn: Turn, resolved: Iterable[int], ids: list[str]
                   ) -> dict[str, Any]:
    """A processed turn: its text, the scratch ids it names, and those it
    reaches through the turns its references resolved to (turn log or
    ``resolved``)."""
    own = (turn.metadata or {}).get("scratch_id")
    mentions = _mention_spans(turn.content)
    targets = set(int(t) for t in resolved)
    if run.turnlog is not None:
        derived = run.derived(turn.turn_id)
        if derived is not None:
            targets.update(derived.references)
    via = []
    run.prefetch(t for t in targets if 1 <= t < turn.turn_id)
    for tid in sorted(targets):
        if 1 <= tid < turn.turn_id:
            sid = (run.turn(tid).metadata or {}).get("scratch_id")
            if isinstance(sid, str):
                via.append(sid)
    ids.extend(m["scratch_id"] for m in mentions)
    ids.extend(via)
    if isinstance(own, str):
        ids.append(own)
    return {"turn_id": turn.turn_id, "role": turn.role,
            "own": own if isinstance(own, str) else None, "mentions": mentions,
            "via_turns": via, "reuses": []}


def antecedents(run: _Run, turn_ids: Sequence[int]) -> dict[str, Any]:
    """For turns that name "that": the turn it points at (the latest earlier
    turn with content: role, scratch id, freshness, the scratch ids it names,
    whether it relays a reading, its value), and the scratch entries those
    name.  Asked for only when a naming needs it."""
    ids: list[str] = []
    found = [[int(t), _antecedent_evidence(run, run.turn(int(t)), ids)] for t in turn_ids]
    return {"antecedents": found, "entries": _entries(run, ids)}


def _antecedent_evidence(run: _Run, turn: Turn, ids: list[str]) -> dict[str, Any] | None:
    """The turn "that" would point at: the latest earlier turn with content."""
    for tid in range(turn.turn_id - 1, max(0, turn.turn_id - 1 - ANTECEDENT_LOOKBACK), -1):
        prev = run.turn(tid)
        if prev.role == "system" or not prev.content.strip():
            continue
        meta = prev.metadata or {}
        sid = meta.get("scratch_id") if prev.role == "tool" else None
        mentions = scratch_mentions(prev.content)
        ids.extend(mentions)
        if isinstance(sid, str):
            ids.append(sid)
        return {"turn_id": prev.turn_id, "role": prev.role,
                "scratch_id": sid if isinstance(sid, str) else None,
                "freshness": meta.get("freshness"), "mentions": mentions,
                **_relayed(run, prev), "value": value_of_turn(prev)}
    return None


def _reuse_evidence(run: _Run, turn: Turn, nearest: int) -> list[dict[str, Any]]:
    """Earlier turns (user or assistant, at most ``nearest``, best first) on
    ``turn``'s topic (the embedder's ``topic_same``) but in another topic
    thread, with their statements that share a concrete value with ``turn``."""
    log = run.turnlog
    if log is None or turn.role not in ("user", "assistant") or not turn.content.strip():
        return []
    later_values = specifics(turn.content)
    if not later_values:                     # nothing concrete to have been reused
        return []
    mine = run.derived(turn.turn_id)
    if mine is None or not mine.thread_id:
        return []
    vec = run.vector(turn.turn_id)
    if vec is None:
        return []
    floor = float(run.embedder.thresholds["topic_same"])
    later_terms: set[str] | None = None
    out = []
    near = [cand_id for cand_id, sim in log.nearest(
        run.session_id, vec, k=nearest, before=turn.turn_id) if sim >= floor]
    run.prefetch_derived(near)

    def elsewhere(origin: Any) -> bool:
        return origin is not None and bool(origin.thread_id) \
            and origin.thread_id != mine.thread_id
    # The candidates in another thread (best first), then their turns and the turn
    # before each (its relayed reading) in one read.
    other = [cand_id for cand_id in near if elsewhere(run.derived(cand_id))]
    run.prefetch(t for cand_id in other for t in (cand_id - 1, cand_id))
    for cand_id in other:
        origin = run.derived(cand_id)
        cand = run.turn(cand_id)
        if cand.role not in ("user", "assistant"):
            continue
        threads = sorted({origin.thread_id, mine.thread_id})
        found = []
        for stmt in statements(cand.content):
            values = specifics(stmt)
            shared = values & later_values
            if not shared:
                continue
            terms = set(tokenize(stmt))
            if later_terms is None:
                later_terms = set(tokenize(turn.content))
            containment = len(terms & later_terms) / len(terms) if terms else 0.0
            sid = len(run.statements) + 1
            run.statements[sid] = (stmt, cand_id, cand.role, threads, turn.turn_id, containment)
            found.append({"id": sid, "value_share": len(shared) / len(values),
                          "numbers_recur": _numbers(stmt) <= later_values,
                          "containment": containment, "terms": sorted(terms)})
        if found:
            out.append({"origin_turn": cand_id, "origin_role": cand.role, "threads": threads,
                        **_relayed(run, cand), "statements": found})
    return out


def _relayed(run: _Run, turn: Turn) -> dict[str, Any]:
    """Whether an assistant turn answers a tool result, and that reading's class
    (only an assistant turn answers one: a user turn's is always false)."""
    if turn.role != "assistant":
        return {"after_tool": False, "tool_freshness": None}
    return run.relayed_reading(turn)


def _entries(run: _Run, ids: Iterable[str]) -> list[dict[str, Any]]:
    """The scratch entries of this session among ``ids`` (others are unknown here)."""
    out = []
    for sid in dict.fromkeys(ids):
        entry = run.entry(sid)
        if entry is not None:
            out.append({"scratch_id": entry.scratch_id, "pinned": bool(entry.pinned),
                        "freshness": entry.freshness,
                        "referenced_by": [int(t) for t in entry.referenced_by]})
    return out


def entry_evidence(store: Any, session_id: str, scratch_id: str,
                   options: dict[str, Any]) -> dict[str, Any]:
    """The evidence of rule ``tool_result`` for one scratch entry (e.g. just pinned).

    @raises InvalidScratchIdError for a malformed id.
    """
    from ctxrelay.storage.common.scratch.checks import check_scratch_id
    check_scratch_id(scratch_id)
    facts, scratch, _, _ = _open_stores(store, dict(options.get("stores") or {}),
                                        use_turnlog=False)
    run = _Run(store, session_id, facts, scratch, options.get("namespace") or None, None, None)
    return {"handle": run, "turns": [], "entries": _entries(run, [scratch_id]),
            "at_turn": store.transcript.turn_count(session_id), "similarity": None}


def similarities(run: _Run, ids: Sequence[int]) -> list[list[Any]]:
    """[[statement id, cosine]]: each statement against the sentences of the
    turn that reused it (the best match)."""
    out = []
    for sid in ids:
        stmt, _, _, _, later, _ = run.statements[int(sid)]
        vec = np.asarray(run.embedder.embed_batch([stmt]), dtype=np.float32)[0]
        cos = float((run.sentence_vectors(later) @ vec).max())
        run.cosines[int(sid)] = cos
        out.append([int(sid), cos])
    return out


# -- apply -----------------------------------------------------------------------------

def apply(run: _Run, actions: Sequence[dict[str, Any]], plain: bool = False
          ) -> list[dict[str, Any]]:
    """Carry out what the rules decided, in order; returns one dict per fact
    added (or renamed value updated).  ``plain`` keeps scalar fields only
    (for Prolog's result dicts)."""
    from ctxrelay.storage.common.scratch.errors import UnknownScratchError
    for action in actions:
        kind = str(action["do"])
        if kind == "reference":
            if run.scratch is not None:
                sid = str(action["scratch_id"])
                try:
                    run._entries[sid] = run.scratch.reference(run.session_id, sid,
                                                              int(action["turn_id"]))
                except UnknownScratchError:    # evicted since the evidence was read
                    pass
        elif kind == "promote":
            _PROMOTE[str(action["rule"])](run, action)
        else:
            raise InvalidArgumentError(f"unknown promotion action {kind!r}; "
                                       "expected reference or promote")
    found = [p.to_dict() for p in run.out]
    if plain:
        found = [{k: v for k, v in item.items()
                  if isinstance(v, (str, int, float, bool)) or v is None} for item in found]
    return found


def _add(run: _Run, rule: str, content: str, key: str, source: str, *,
         metadata: dict[str, Any], scratch_id: str | None, turn_id: int | None,
         at_turn: int, replace: bool = False) -> None:
    """Add the fact under ``key`` unless it is there (``replace``: update a
    named fact whose value changed)."""
    from ctxrelay.knowledge.fabric import FactKeyExistsError
    content = content.strip()
    digest = _sha256(content)
    meta = {"promoted_by": rule, "session_id": run.session_id, "content_hash": digest,
            "promoted_at_turn": at_turn, **metadata}
    existing = run.facts.lookup_key(key, namespace=run.namespace)
    updated = False
    if existing is not None:
        if not replace or existing.metadata.get("content_hash") == digest:
            return
        fact = run.facts.update_fact(existing.fact_id, content=content, metadata=meta,
                                     namespace=run.namespace)
        fact_id, updated = fact.fact_id, True
    else:
        try:
            fact_id = run.facts.add_fact(content, key=key, source=source,
                                         namespace=run.namespace, metadata=meta)
        except FactKeyExistsError:        # another writer promoted it meanwhile
            return
    run.out.append(Promotion(
        rule=rule, fact_id=fact_id, key=key,
        namespace=run.namespace or "default", content=content, content_hash=digest,
        source=source, scratch_id=scratch_id, turn_id=turn_id, promoted_at_turn=at_turn,
        updated=updated, details=metadata))


def _promote_tool_result(run: _Run, action: dict[str, Any]) -> None:
    entry = run.entry(str(action["scratch_id"]))
    if entry is None:                         # evicted since the evidence was read
        return
    _add(run, "tool_result", tool_result_content(entry), f"scratch:{entry.scratch_id}",
         entry.scratch_id,
         metadata={"provenance": "tool-derived", "scratch_id": entry.scratch_id,
                   "provenance_hash": entry.provenance_hash, "tool_name": entry.tool_name,
                   "freshness": entry.freshness, "pinned": entry.pinned,
                   "referenced_by": list(entry.referenced_by)},
         scratch_id=entry.scratch_id, turn_id=None, at_turn=int(action["at_turn"]))


def _promote_named(run: _Run, action: dict[str, Any]) -> None:
    """A named value: the explicit value, a tool output, or an earlier turn's value."""
    try:
        key = name_key(str(action["name"]))
    except InvalidArgumentError:
        return
    name = display_name(str(action["name"]))
    at = int(action["at_turn"])
    meta: dict[str, Any] = {"name": name, "provenance": "user-named"}
    value = action.get("value")
    if isinstance(value, str):
        _add(run, "named", f"{name}: {value}", key, f"turn:{at}", metadata=meta,
             scratch_id=None, turn_id=at, at_turn=at, replace=True)
        return
    prev = run.turn(int(action["from_turn"]))
    sid = action.get("scratch_id")
    if isinstance(sid, str):
        entry = run.entry(sid)
        freshness = entry.freshness if entry is not None else \
            (prev.metadata or {}).get("freshness")
        body = _summary_body(entry.summary if entry is not None else prev.content)
        meta.update(provenance="tool-derived", scratch_id=sid, freshness=freshness,
                    provenance_hash=entry.provenance_hash if entry is not None else None)
        _add(run, "named", f"{name}: {body}", key, sid, metadata=meta, scratch_id=sid,
             turn_id=prev.turn_id, at_turn=at, replace=True)
        return
    value = value_of_turn(prev)
    if value:
        _add(run, "named", f"{name}: {value}", key, f"turn:{prev.turn_id}", metadata=meta,
             scratch_id=None, turn_id=prev.turn_id, at_turn=at, replace=True)


def _promote_statement(run: _Run, action: dict[str, Any]) -> None:
    sid = int(action["statement"])
    stmt, origin, role, threads, later, containment = run.statements[sid]
    cos = run.cosines.get(sid)
    _add(run, "cross_thread", stmt, f"stmt:{_sha256(stmt.casefold())[:40]}", f"turn:{origin}",
         metadata={"provenance": f"{role}-stated", "origin_turn": origin,
                   "threads": list(threads), "reused_in_turn": later,
                   "term_containment": round(containment, 3),
                   "similarity": None if cos is None else round(cos, 3)},
         scratch_id=None, turn_id=origin, at_turn=int(action["at_turn"]))


_PROMOTE = {"tool_result": _promote_tool_result, "named": _promote_named,
            "cross_thread": _promote_statement}


# -- entry points (they reach the rules in Prolog) ------------------------------------

def promote_after_turn(store: Any, session_id: str, turn_id: int, *, facts: Any = None,
                       scratch: Any = None, since: int | None = None,
                       references: Iterable[int] = (), namespace: str | None = None,
                       turnlog: Any = None, embedder: Any = None,
                       min_references: int | None = None, min_threads: int | None = None,
                       rules: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Apply the promotion rules to turns ``since..turn_id`` of ``session_id``
    (``ctxrelay_promotion:promote_turns/5``).

    ``store`` is the store's :class:`~ctxrelay.storage.stores.Stores`; ``facts``
    (the CKF), ``scratch`` and ``turnlog`` default to its parts (the turn log synced here with ``embedder``, a name or object,
    which must be the one the turn log was derived with).  ``references``
    are turn ids that ``turn_id``'s message resolved to (the assembler's
    ``referenced_turns``).  ``min_references``, ``min_threads`` and
    ``rules`` override the Prolog defaults (promotion_threshold/2,
    promotion_rule/1).  Returns one dict per fact added (or renamed value
    updated) in this call: ``rule``, ``fact_id``, ``key``, ``source``,
    ``scratch_id`` / ``turn_id`` (where it came from), ``content``...; a
    second call over the same turns returns ``[]``.
    @raises InvalidArgumentError for a bad turn range or an unknown rule.
    """
    first = turn_id if since is None else since
    stores = {"facts": facts, "scratch": scratch, "turnlog": turnlog, "embedder": embedder}
    options: list[list[Any]] = [["stores", {k: v for k, v in stores.items() if v is not None}],
                                ["references", [int(t) for t in references]],
                                ["namespace", namespace or ""]]
    if rules is not None:
        options.append(["rules", [str(r) for r in rules]])
    if min_references is not None:
        options.append(["min_references", min_references])
    if min_threads is not None:
        options.append(["min_threads", min_threads])
    return _promote("promote_turns(St, S, First-Last, P, _Opts)", store, session_id, options,
                    First=first, Last=turn_id)


def promote_scratch_entry(store: Any, session_id: str, scratch_id: str, *, facts: Any = None,
                          scratch: Any = None, namespace: str | None = None,
                          min_references: int | None = None) -> list[dict[str, Any]]:
    """Rule ``tool_result`` for one entry, e.g. right after it is pinned
    (``ctxrelay_promotion:promote_scratch_entry/5``)."""
    stores = {"facts": facts, "scratch": scratch}
    options: list[list[Any]] = [["stores", {k: v for k, v in stores.items() if v is not None}],
                                ["namespace", namespace or ""]]
    if min_references is not None:
        options.append(["min_references", min_references])
    return _promote("promote_scratch_entry(St, S, I, P, _Opts)", store, session_id, options,
                    I=scratch_id)


def _promote(goal: str, store: Any, session_id: str, options: list[list[Any]],
             **bindings: Any) -> list[dict[str, Any]]:
    from ctxrelay.bridge import engine
    options.append(["as", "python"])
    found = engine.once(f"ctxrelay:py_options(Pairs, _Opts), ctxrelay_promotion:{goal}",
                        {"St": store, "S": session_id, "Pairs": options, **bindings})["P"]
    return list(found)
