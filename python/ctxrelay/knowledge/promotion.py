"""Promotion: ephemeral context that proved durable becomes CKF knowledge.

CRP-SPEC-035 §4.2 and CRP-SPEC-029 §5.  After a turn, three rules decide
what graduates from the scratch buffer and the turn log into the CKF:

``tool_result``
    A scratch entry that is pinned, or referenced by at least two distinct
    later turns.  A reference is a turn whose text names the scratch id (or
    its ``call_`` id), whose turn-log ``references`` (or the ``references``
    argument, the turn ids the resolver found) include the entry's tool
    turns, or a naming phrase whose antecedent is the entry.  References are
    recorded on the entry (:meth:`ScratchStore.reference`), which also
    auto-pins it at the store's ``auto_pin_after``.
``named``
    A value the user names: "call that the budget figure", "let's call
    4.2M the Q3 revenue", "name that budget_q3", "save that as the build
    matrix".  The fact's key is :func:`name_key` of the name, so
    ``FactStore.fact(name_key(name))`` finds it; naming the same key again
    with another value updates that fact.
``cross_thread``
    A statement of an earlier user or assistant turn whose content
    reappears (term containment, or sentence-embedding similarity) in a
    later turn of a different topic thread: it is now used by at least
    ``min_threads`` threads.  The statement must carry concrete values
    (numbers, identifiers, proper names; :func:`specifics`); every number
    and at least half of those values must reappear too, so a shared
    phrasing with other values is not taken for the same fact.

Volatile readings are never promoted: a scratch entry of class REALTIME or
VOLATILE, and an assistant statement that directly relays such an entry
(the turn right after its tool turns), are skipped.

Idempotence: every promoted fact has a key (``scratch:<scratch id>``, the
name's key, or ``stmt:<content hash>``), so a second call finds the fact
instead of adding one, and reports nothing for it.  Facts keep their
provenance in ``metadata`` (rule, session, turn, content hash, and for tool
results the scratch id, the provenance hash and the freshness class).

Cost: one call reads the processed turns, embeds their new turn-log rows
(incremental sync), scans the turn log's bounded dense window once per
processed turn, and writes only what it promotes.  It never scans the
session's whole history or scratch buffer.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.storage.lmdb.textindex import tokenize
from ctxrelay.types import Turn

__all__ = ["Promotion", "Naming", "promote_after_turn", "promote_scratch_entry",
           "parse_namings", "name_key", "scratch_mentions", "statements", "specifics",
           "is_volatile", "RULES"]

RULES = ("tool_result", "named", "cross_thread")
NEVER_PROMOTED = frozenset({"REALTIME", "VOLATILE"})
MIN_REFERENCES = 2
MIN_THREADS = 2
CANDIDATES = 8               # earlier turns compared per processed turn
CONTAINMENT = 0.7            # share of a statement's terms found in the later turn
SPECIFIC_SHARE = 0.5         # share of its values (numbers, names) found there too
MIN_STATEMENT_TERMS = 4      # a statement shorter than this establishes nothing
MAX_VALUE_CHARS = 600
MAX_ARGS_CHARS = 200
_SCRATCH_ID = re.compile(r"\bscr_[0-9a-f]{32}\b")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z*`(\"'\-\[])|\n+")
_NUMBER = re.compile(r"\d")


# -- results ------------------------------------------------------------------

@dataclass(frozen=True)
class Promotion:
    """One fact added (or, for a renamed value, changed) by a rule."""

    rule: str                          # one of RULES
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


# -- small, explicit rules -------------------------------------------------------

def is_volatile(freshness: Any) -> bool:
    """Whether a freshness class is a reading that is never promoted (SPEC-029 §5.4)."""
    return str(freshness or "VOLATILE").upper() in NEVER_PROMOTED


def scratch_mentions(text: str) -> list[str]:
    """Scratch ids named in ``text`` (also inside ``call_scr_...`` ids), in order."""
    found = re.findall(r"(?:call_)?(scr_[0-9a-f]{32})(?![0-9a-f])", text)
    return list(dict.fromkeys(found))


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


_REF = r"(?P<ref>that|this|it)"
_NAME_END = (r"(?=\s*(?:[.!?;,:)]|$|\n|\s(?:from now on|going forward|for now|please|"
             r"and|so|then|instead|too)\b))")
_QUOTED = r"\"[^\"\n]{1,80}\"|'[^'\n]{1,80}'|`[^`\n]{1,80}`|“[^”\n]{1,80}”"
_IDENT = r"[A-Za-z][\w.-]*(?:_|\d)[\w.-]*"
_WORDS = r"[\w$€£%.'-]+(?:\s+[\w$€£%.'-]+){0,5}?"
# "call that X" needs a marked name (the ..., quotes, an identifier) so
# "call that function again" is not a naming; after "as" plain words do.
_MARKED = rf"(?P<name>{_QUOTED}|the\s+{_WORDS}|{_IDENT})"
_PLAIN = rf"(?P<name>{_QUOTED}|{_WORDS})"
_NAMING_RULES = (
    re.compile(rf"\b(?:call|name)\s+{_REF}\s+{_MARKED}{_NAME_END}", re.I),
    re.compile(rf"\b(?:call|name|save|remember|store|keep|refer\s+to)\s+{_REF}\s+as\s+"
               rf"{_PLAIN}{_NAME_END}", re.I),
    re.compile(rf"\blet(?:'s|’s|\s+us)\s+call\s+(?P<value>(?!(?:that|this|it)\b)(?:[^\n.!?;]|\.(?=\S)){{1,80}}?)"
               rf"\s+(?P<name>{_QUOTED}|the\s+{_WORDS}){_NAME_END}", re.I),
)
_NEGATION = re.compile(r"\b(?:don'?t|do not|never|not|no need to|shouldn'?t|won'?t)\s+(?:\w+\s+){0,2}$",
                       re.I)
_NOT_A_NAME = frozenset({"quits", "done", "even", "off", "over", "good", "fine", "finished",
                         "correct", "wrong", "right", "ok", "okay", "a", "an", "out", "back"})
_VALUE_STOP = re.compile(r"\b(?:and|or|but|again|to|for|with|about|from|now|back)\b", re.I)


def parse_namings(text: str) -> list[Naming]:
    """The naming phrases in a user's ``text`` (see the module doc), in order."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a str, not {type(text).__name__}")
    found: list[Naming] = []
    for rule in _NAMING_RULES:
        for m in rule.finditer(text):
            if _NEGATION.search(text[max(0, m.start() - 40):m.start()]):
                continue
            raw = m.group("name").strip()
            name = raw[1:-1].strip() if raw[:1] in "\"'`“" else raw.rstrip(".'-")
            first = name.split()[0].casefold() if name.split() else ""
            if first in _NOT_A_NAME:
                continue
            value = m.groupdict().get("value")
            if value is not None and _VALUE_STOP.search(value):
                continue
            try:
                key = name_key(name)
            except InvalidArgumentError:
                continue
            shown = re.sub(r"^(?:the|our|my)\s+", "", name, flags=re.I)
            if any(n.start < m.end() and m.start() < n.end for n in found):
                continue
            found.append(Naming(shown, key, value.strip() if value else None,
                                m.start(), m.end()))
    return sorted(found, key=lambda n: n.start)


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


def specifics(text: str) -> set[str]:
    """The concrete values of a text: numbers, identifiers and proper names.

    A statement establishes a fact only through these ("three nodes in
    eu-west-1 with 8 GiB"); two sentences built from the same phrasing
    with other values state different facts."""
    from ctxrelay.storage.lmdb.turnlog import extract_entities
    found = _numbers(text)
    found.update(e.casefold() for e in extract_entities(text))
    return found


def _containment(statement: str, text: str) -> float:
    terms = set(tokenize(statement))
    if not terms:
        return 0.0
    return len(terms & set(tokenize(text))) / len(terms)


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


# -- the context of one call --------------------------------------------------------

class _Run:
    """What one promote_after_turn call reads and writes."""

    def __init__(self, stores: Any, session_id: str, facts: Any, scratch: Any,
                 namespace: str | None, turnlog: Any, embedder: Any) -> None:
        self.stores, self.store, self.session_id = stores, stores.transcript, session_id
        self._facts, self.scratch = facts, scratch
        self.namespace, self.turnlog, self.embedder = namespace, turnlog, embedder
        self._turns: dict[int, Turn] = {}
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

    def entry(self, scratch_id: str) -> Any:
        """The session's scratch entry, or None (never stored here, or evicted)."""
        if self.scratch is None:
            return None
        from ctxrelay.storage.lmdb.scratch import UnknownScratchError
        try:
            return self.scratch.get(self.session_id, scratch_id, touch=False)
        except UnknownScratchError:
            return None

    def relays_volatile(self, turn: Turn) -> bool:
        """Whether ``turn`` answers right after a volatile tool result."""
        tid = turn.turn_id - 1
        while tid >= 1:
            prev = self.turn(tid)
            if prev.role == "tool":
                return is_volatile((prev.metadata or {}).get("freshness"))
            if prev.role == "assistant" and not prev.content and (prev.metadata or {}).get(
                    "tool_calls"):
                tid -= 1
                continue
            return False
        return False

    def add(self, rule: str, content: str, key: str, source: str, *,
            metadata: dict[str, Any], scratch_id: str | None, turn_id: int | None,
            at_turn: int, replace: bool = False) -> None:
        """Add the fact under ``key`` unless it is there (``replace``: update a
        named fact whose value changed)."""
        from ctxrelay.knowledge.fabric import FactKeyExistsError
        content = content.strip()
        digest = _sha256(content)
        meta = {"promoted_by": rule, "session_id": self.session_id, "content_hash": digest,
                "promoted_at_turn": at_turn, **metadata}
        existing = self.facts.lookup_key(key, namespace=self.namespace)
        updated = False
        if existing is not None:
            if not replace or existing.metadata.get("content_hash") == digest:
                return
            fact = self.facts.update_fact(existing.fact_id, content=content, metadata=meta,
                                          namespace=self.namespace)
            fact_id, updated = fact.fact_id, True
        else:
            try:
                fact_id = self.facts.add_fact(content, key=key, source=source,
                                              namespace=self.namespace, metadata=meta)
            except FactKeyExistsError:        # another writer promoted it meanwhile
                return
        self.out.append(Promotion(
            rule=rule, fact_id=fact_id, key=key,
            namespace=self.namespace or "default", content=content, content_hash=digest,
            source=source, scratch_id=scratch_id, turn_id=turn_id, promoted_at_turn=at_turn,
            updated=updated, details=metadata))


# -- rule (a): tool results ------------------------------------------------------

def _own_turn(turn: Turn, scratch_id: str) -> bool:
    return (turn.metadata or {}).get("scratch_id") == scratch_id


def _referenced_scratch(run: _Run, turn: Turn, resolved: Iterable[int]) -> list[str]:
    """Scratch ids ``turn`` refers to: named in its text, or through the turns
    its references resolved to (turn log or ``resolved``)."""
    ids = scratch_mentions(turn.content)
    targets = set(int(t) for t in resolved)
    if run.turnlog is not None:
        derived = run.turnlog.derived(run.session_id, turn.turn_id)
        if derived is not None:
            targets.update(derived.references)
    for tid in sorted(targets):
        if 1 <= tid < turn.turn_id:
            sid = (run.turn(tid).metadata or {}).get("scratch_id")
            if isinstance(sid, str):
                ids.append(sid)
    return [sid for sid in dict.fromkeys(ids) if not _own_turn(turn, sid)]


def _promote_entry(run: _Run, entry: Any, at_turn: int, *,
                   min_references: int = MIN_REFERENCES) -> None:
    if entry is None or is_volatile(entry.freshness):
        return
    if not (entry.pinned or len(entry.referenced_by) >= min_references):
        return
    run.add("tool_result", tool_result_content(entry), f"scratch:{entry.scratch_id}",
            entry.scratch_id,
            metadata={"provenance": "tool-derived", "scratch_id": entry.scratch_id,
                      "provenance_hash": entry.provenance_hash, "tool_name": entry.tool_name,
                      "freshness": entry.freshness, "pinned": entry.pinned,
                      "referenced_by": list(entry.referenced_by)},
            scratch_id=entry.scratch_id, turn_id=None, at_turn=at_turn)


# -- rule (b): named values -------------------------------------------------------

def _antecedent(run: _Run, turn: Turn) -> Turn | None:
    """The turn "that" points at: the latest earlier turn with content."""
    for tid in range(turn.turn_id - 1, max(0, turn.turn_id - 12), -1):
        prev = run.turn(tid)
        if prev.role == "system" or not prev.content.strip():
            continue
        return prev
    return None


def _promote_namings(run: _Run, turn: Turn, referenced: list[str]) -> None:
    if turn.role != "user":
        return
    for naming in parse_namings(turn.content):
        meta: dict[str, Any] = {"name": naming.name, "provenance": "user-named"}
        if naming.value is not None:
            run.add("named", f"{naming.name}: {naming.value}", naming.key,
                    f"turn:{turn.turn_id}", metadata=meta, scratch_id=None,
                    turn_id=turn.turn_id, at_turn=turn.turn_id, replace=True)
            continue
        prev = _antecedent(run, turn)
        if prev is None:
            continue
        # "that" is a tool output the naming turn (before the phrase) or the
        # previous turn names, else the previous turn's own value.
        named_ids = (scratch_mentions(turn.content[:naming.start])
                     or ([(prev.metadata or {}).get("scratch_id")] if prev.role == "tool"
                         else scratch_mentions(prev.content)))
        sid = named_ids[-1] if named_ids and isinstance(named_ids[-1], str) else None
        if sid is not None:
            entry = run.entry(sid)
            freshness = entry.freshness if entry is not None else \
                (prev.metadata or {}).get("freshness")
            if is_volatile(freshness):
                continue
            referenced.append(sid)
            body = _summary_body(entry.summary if entry is not None else prev.content)
            meta.update(provenance="tool-derived", scratch_id=sid, freshness=freshness,
                        provenance_hash=entry.provenance_hash if entry is not None else None)
            run.add("named", f"{naming.name}: {body}", naming.key, sid, metadata=meta,
                    scratch_id=sid, turn_id=prev.turn_id, at_turn=turn.turn_id, replace=True)
        else:
            if prev.role == "assistant" and run.relays_volatile(prev):
                continue
            value = value_of_turn(prev)
            if value:
                run.add("named", f"{naming.name}: {value}", naming.key, f"turn:{prev.turn_id}",
                        metadata=meta, scratch_id=None, turn_id=prev.turn_id,
                        at_turn=turn.turn_id, replace=True)


# -- rule (c): facts reused across threads ------------------------------------------

def _reuse_score(run: _Run, stmt: str, later: Turn, later_values: set[str],
                 later_vecs: Any) -> tuple[float, float] | None:
    """(term containment, best sentence cosine) if ``stmt`` reappears in
    ``later``, else None.  The embedding is computed only for a statement
    whose values reappear but whose terms do not (a paraphrase)."""
    values = specifics(stmt)
    if not values or len(values & later_values) < SPECIFIC_SHARE * len(values):
        return None
    if not _numbers(stmt) <= later_values:      # a number is the value: all must recur
        return None
    overlap = _containment(stmt, later.content)
    if overlap >= CONTAINMENT:
        return overlap, float("nan")
    floor = float(run.embedder.thresholds["topic_same"])
    edge = float(run.embedder.thresholds["edge"])
    vec = np.asarray(run.embedder.embed_batch([stmt]), dtype=np.float32)[0]
    cos = float((later_vecs() @ vec).max())
    return (overlap, cos) if cos >= max(edge, 2 * floor, 0.5) else None


def _promote_reused(run: _Run, turn: Turn, *, min_threads: int) -> None:
    log = run.turnlog
    if log is None or turn.role not in ("user", "assistant") or not turn.content.strip():
        return
    later_values = specifics(turn.content)
    if not later_values:                     # nothing concrete to have been reused
        return
    mine = log.derived(run.session_id, turn.turn_id)
    if mine is None or not mine.thread_id:
        return
    vec = log.vectors(run.session_id, [turn.turn_id]).get(turn.turn_id)
    if vec is None:
        return
    floor = float(run.embedder.thresholds["topic_same"])
    cache: list[Any] = []

    def later_vecs() -> Any:
        if not cache:
            sents = [s for s in (" ".join(x.split()) for x in _SENTENCE.split(turn.content))
                     if s]
            cache.append(np.asarray(run.embedder.embed_batch(sents or [""]), dtype=np.float32))
        return cache[0]

    taken: list[str] = []
    for cand_id, sim in log.nearest(run.session_id, vec, k=CANDIDATES, before=turn.turn_id):
        if sim < floor:
            continue
        origin = log.derived(run.session_id, cand_id)
        if origin is None or not origin.thread_id or origin.thread_id == mine.thread_id:
            continue
        threads = {origin.thread_id, mine.thread_id}
        if len(threads) < min_threads:
            continue
        cand = run.turn(cand_id)
        if cand.role not in ("user", "assistant") or (
                cand.role == "assistant" and run.relays_volatile(cand)):
            continue
        for stmt in statements(cand.content):
            score = _reuse_score(run, stmt, turn, later_values, later_vecs)
            if score is None:
                continue
            # Candidates come best first: a later, weaker restatement of what
            # this turn already promoted ("Understood: three etcd members")
            # is the same fact, not another one.
            if taken and _containment(stmt, " ".join(taken)) >= CONTAINMENT:
                continue
            taken.append(stmt)
            overlap, cos = score
            run.add("cross_thread", stmt, f"stmt:{_sha256(stmt.casefold())[:40]}",
                    f"turn:{cand_id}",
                    metadata={"provenance": f"{cand.role}-stated", "origin_turn": cand_id,
                              "threads": sorted(threads), "reused_in_turn": turn.turn_id,
                              "term_containment": round(overlap, 3),
                              "similarity": None if cos != cos else round(cos, 3)},
                    scratch_id=None, turn_id=cand_id, at_turn=turn.turn_id)


# -- entry points ------------------------------------------------------------------

def _open_defaults(stores: Any, facts: Any, scratch: Any, turnlog: Any, embedder: Any,
                   use_turnlog: bool) -> tuple[Any, Any, Any, Any]:
    if scratch is None:
        scratch = stores.scratch_if_present()
    if use_turnlog and (embedder is None or isinstance(embedder, str)):
        from ctxrelay.text.embed import get_embedder
        embedder = get_embedder(embedder)
    if turnlog is None and use_turnlog:
        turnlog = stores.turnlog
    return facts, scratch, turnlog, embedder


def promote_after_turn(stores: Any, session_id: str, turn_id: int, *, facts: Any = None,
                       scratch: Any = None, since: int | None = None,
                       references: Iterable[int] = (), namespace: str | None = None,
                       turnlog: Any = None, embedder: Any = None,
                       min_references: int = MIN_REFERENCES,
                       min_threads: int = MIN_THREADS,
                       rules: Sequence[str] = RULES) -> list[dict[str, Any]]:
    """Apply the promotion rules to turns ``since..turn_id`` of ``session_id``.

    ``stores`` is the store's :class:`~ctxrelay.storage.stores.Stores`; ``facts``
    (the CKF), ``scratch`` and ``turnlog`` default to its parts (the turn log is
    synced here with ``embedder``, a name or object,
    which must be the one the turn log was derived with).  ``references``
    are turn ids that ``turn_id``'s message resolved to (the assembler's
    ``referenced_turns``).  Returns one dict per fact added (or renamed
    value updated) in this call: ``rule``, ``fact_id``, ``key``, ``source``,
    ``scratch_id`` / ``turn_id`` (where it came from), ``content``...; a
    second call over the same turns returns ``[]``.
    @raises InvalidArgumentError for a bad turn range or an unknown rule.
    """
    store = stores.transcript
    count = store.turn_count(session_id)
    if isinstance(turn_id, bool) or not isinstance(turn_id, int) or not 1 <= turn_id <= count:
        raise InvalidArgumentError(
            f"turn_id must be an int in 1..{count} (a turn of {session_id!r}), not {turn_id!r}")
    start = turn_id if since is None else since
    if isinstance(start, bool) or not isinstance(start, int) or not 1 <= start <= turn_id:
        raise InvalidArgumentError(
            f"since must be an int in 1..{turn_id} (the first turn to look at), not {since!r}")
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        raise InvalidArgumentError(
            f"unknown promotion rule(s) {', '.join(unknown)}; choose from {', '.join(RULES)}")
    if isinstance(min_references, bool) or not isinstance(min_references, int) \
            or min_references < 1:
        raise InvalidArgumentError(f"min_references must be an int >= 1, not {min_references!r}")
    if isinstance(min_threads, bool) or not isinstance(min_threads, int) or min_threads < 2:
        raise InvalidArgumentError(f"min_threads must be an int >= 2, not {min_threads!r}")
    facts, scratch, turnlog, embedder = _open_defaults(
        stores, facts, scratch, turnlog, embedder, use_turnlog=True)
    turnlog.sync(store, session_id, embedder)
    run = _Run(stores, session_id, facts, scratch, namespace, turnlog, embedder)
    resolved = [int(t) for t in references]
    for tid in range(start, turn_id + 1):
        turn = run.turn(tid)
        if turn.role == "system":
            continue
        referenced = _referenced_scratch(run, turn, resolved if tid == turn_id else ())
        if "named" in rules:
            _promote_namings(run, turn, referenced)
        touched = list(dict.fromkeys(referenced))
        if scratch is not None:
            from ctxrelay.storage.lmdb.scratch import UnknownScratchError
            entries = []
            for sid in touched:
                try:
                    entries.append(scratch.reference(session_id, sid, tid))
                except UnknownScratchError:    # another session's id, or evicted
                    continue
            own = (turn.metadata or {}).get("scratch_id")
            if turn.role == "tool" and isinstance(own, str):
                entries.append(run.entry(own))   # pinned at put (pinned=True, audit)
            if "tool_result" in rules:
                for entry in entries:
                    _promote_entry(run, entry, tid, min_references=min_references)
        if "cross_thread" in rules:
            _promote_reused(run, turn, min_threads=min_threads)
    return [p.to_dict() for p in run.out]


def promote_scratch_entry(stores: Any, session_id: str, scratch_id: str, *, facts: Any = None,
                          scratch: Any = None, namespace: str | None = None,
                          min_references: int = MIN_REFERENCES) -> list[dict[str, Any]]:
    """Rule ``tool_result`` for one entry, e.g. right after it is pinned."""
    facts, scratch, _, _ = _open_defaults(stores, facts, scratch, None, None,
                                          use_turnlog=False)
    if scratch is None:
        return []
    from ctxrelay.storage.lmdb.scratch import check_scratch_id
    run = _Run(stores, session_id, facts, scratch, namespace, None, None)
    entry = run.entry(check_scratch_id(scratch_id))
    _promote_entry(run, entry, run.store.turn_count(session_id),
                   min_references=min_references)
    return [p.to_dict() for p in run.out]


def promote_managed_turn(stores: Any, session_id: str, assistant_turn: int, user_turn: int,
                         references: Sequence[int], embedder: str = "",
                         namespace: str = "") -> list[dict[str, Any]]:
    """The managed runtime's call after a reply is stored: the rules over the
    user turn and the reply, with the turns the user's message referred to.
    Returns plain dicts (what was promoted), for Prolog."""
    found = promote_after_turn(stores, session_id, int(assistant_turn), since=int(user_turn),
                               references=[int(t) for t in references],
                               embedder=embedder or None, namespace=namespace or None)
    return [{k: v for k, v in item.items() if isinstance(v, (str, int, float, bool)) or v is None}
            for item in found]
