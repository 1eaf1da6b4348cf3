"""Topic threads: the numbers their rules decide on (CRP-SPEC-028 §3.3, §6.2).

Which thread a user turn joins is decided by Prolog (``ctxrelay_thread_rules``,
prolog/ctxrelay/threads/rules.pl); what a thread's state holds by
``ctxrelay_thread_state`` (threads/state.pl).  This module computes what those
rules read, and nothing else:

- per candidate thread, the similarity of the message to the thread's latest
  turns (the largest cosine, SPEC-028's ``max_similarity``), the share of the
  message's content words the thread has used (weighted by how few of the
  candidate threads use them) and the message words it shares, its rank by
  last activity;
- a readable, stable label for a new thread (its salient words);
- the thread's turns handed to the state rules.

The same :class:`ThreadBook` places a turn when the turn log derives stored
turns and when an assembly places the new message, so the two cannot
disagree.  The work is bounded: a turn is compared with the
:data:`RECENT_THREADS` most recently active threads, each through its latest
:data:`NEIGHBOURS` turns.
"""
from __future__ import annotations

import functools
import math
import re
import sys
import threading
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import snowballstemmer

from ctxrelay.types import Turn

# The Prolog rules are reached through the embedded engine.  text sits below bridge in
# the layers, so it does not import the engine: it takes the one importing any ctxrelay
# module has loaded (ctxrelay/__init__ loads it first), and costs --help nothing.
def _prolog_once() -> Callable[..., dict[str, Any]]:
    engine = sys.modules.get("ctxrelay.bridge.engine")
    if engine is None:
        raise RuntimeError("the thread rules need the embedded Prolog: import ctxrelay first")
    return engine.once

#: The threads a turn may join: the most recently active ones.  Stated once;
#: the turn log and the assembly both read it.
RECENT_THREADS = 32
#: A thread is compared through its latest turns (user and assistant).
NEIGHBOURS = 16
#: Content words (stems, with counts) kept per thread for word overlap.
PROFILE_TERMS = 96
#: Bridges (follow-ups' similarity to the exchange before them) kept per thread.
BRIDGES = 8
#: Turns of a thread its state is derived from (the latest).
STATE_TURNS = 40
#: Characters of a thread label word.
_LABEL_WORD = 20

_WORD = re.compile(r"[^\W_]+(?:[-.'’][^\W_]+)*", re.UNICODE)
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)$")

# Words that name no topic: function words, question words, pronouns,
# auxiliaries and the generic verbs, adjectives and nouns of questions
# ("what's a good way to ...").  Content words are what is left.
GENERIC: frozenset[str] = frozenset("""
a about above across actually after again against ago all almost also although always am an
and another any anybody anyone anything anyway anyways are aren't around as ask asked asking at
away back bad be because been before being below best better between big bit both but by can
can't cannot could couldn't did didn't do does doesn't doing don't done down during each easy
easier either else enough etc even ever every everything exactly example explain fast few fine
first for from further get gets getting give go goes going gone good got great had hadn't has
hasn't have haven't having he help her here hers him his hmm how however i i'd i'll i'm i've idea
ideas if in instead into is isn't it it's its itself just keep kind know last later least less
let let's like little look lot lots make makes making many maybe me mean means meant might mine
more most much must my myself need needed needs never new next nice no none nor not nothing now
of off ok okay old on once one ones only or other others otherwise our ours out over own perhaps
please point possible pretty probably quick quite rather re really right said same say says
see seem seems set she should shouldn't show simple since so some something sometimes soon sorry
sort still stuff such suggest suppose sure take talk tell than thank thanks that that's the their
theirs them then there there's these they they're thing things think this those though thought
through thus to today too tried try trying two three under unless until up upon us use used
useful uses using usually very via wait want wanted wants was wasn't way ways we we'd we'll we're
we've well went were what what's whatever when where whether which while who whom whose why will
with within without won't work works would wouldn't yeah yes yet you you'd you'll you're you've
your yours approach option options question questions problem problems issue issues thing
strategy recommend recommended recommendation should anything someone somebody
difference differences advice tip tips suggestion suggestions worth enough question
hi hello hey hiya howdy greetings cheers
""".split())

# Common verbs and vague words: content words for overlap, but no topic name.
LABEL_SKIP: frozenset[str] = frozenset("""
run runs running ran start started stop add added remove delete update change changed fix
fixed check create created handle write read build built call send find move turn put pick
choose compare learn understand happen happens cause mean make doing happened wrong enable
enabled disable disabled support supported supports allow allowed keep kept real actual
possible safe better worth different similar current latest whole main typical common
usual normal general specific certain proper correct important sure quick slow big small
large long short high low fine bad good nice great terrible awful morning evening night
today tomorrow week weeks year years month months day days hours minutes thousands hundreds
feels feel looks hosting getting trying planning going unrelated random separate quick
topic another totally completely off buy sell buying
""".split())
# Words that make a question word with "how" ("how long", "how often"): any
# topic asks them, so after "how" they name none.
HOW_DEGREE: frozenset[str] = frozenset("""
long often far hard late early soon large high deep wide heavy strong frequently
""".split())
# Units written like names ("8 GiB"): never a topic name.
UNITS: frozenset[str] = frozenset("kb mb gb tb kib mib gib tib ms ns us hz khz mhz ghz rpm "
                                  "am pm utc gmt".split())

# Words that say which facet of a topic a question is about: a label names
# the topic and, when there is one, its facet ("etcd-config").
FACETS: dict[str, str] = {
    "configure": "config", "configuring": "config", "configuration": "config",
    "config": "config", "configs": "config", "setup": "setup",
    "install": "install", "installing": "install", "installation": "install",
    "backup": "backup", "backups": "backup", "restore": "restore", "restoring": "restore",
    "deploy": "deploy", "deploying": "deploy", "deployment": "deploy",
    "upgrade": "upgrade", "upgrading": "upgrade", "migrate": "migration",
    "migrating": "migration", "migration": "migration", "monitor": "monitoring",
    "monitoring": "monitoring", "debug": "debug", "debugging": "debug",
    "troubleshoot": "debug", "secure": "security", "security": "security",
    "test": "testing", "testing": "testing", "tests": "testing", "tune": "tuning",
    "tuning": "tuning", "optimize": "tuning", "optimise": "tuning", "performance": "tuning",
    "scale": "scaling", "scaling": "scaling", "authenticate": "auth",
    "authentication": "auth", "auth": "auth", "encrypt": "encryption",
    "encryption": "encryption", "logging": "logging", "cost": "cost", "costs": "cost",
    "pricing": "cost", "budget": "budget", "schedule": "schedule", "plan": "plan",
    "planning": "plan", "recipe": "recipe", "recipes": "recipe",
}

_stemmer = snowballstemmer.stemmer("english")
_stem_lock = threading.Lock()        # the generated stemmer keeps state between calls


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The Snowball (English) stem of a lowercase word; a conversation repeats
    its vocabulary, so each distinct word is stemmed once."""
    with _stem_lock:
        return _stemmer.stemWord(word)


def words(text: str) -> list[str]:
    """The lowercase words of ``text`` in order (``v3.5``, ``cert-manager`` and
    ``don't`` stay whole)."""
    folded = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    return _WORD.findall(folded)


def content_words(text: str, *, parts: bool = True) -> list[str]:
    """The words of ``text`` that can name a topic, in order, each once: not
    generic, not a bare number, two characters at least.  A compound word
    (``slow-roasted``, ``etcd.conf``) comes with its parts unless ``parts``
    is false."""
    seen: dict[str, None] = {}
    before = ""
    for w in words(text):
        w = w[:-2] if w.endswith("'s") else w
        w, before = ("", w) if before == "how" and w in HOW_DEGREE else (w, w)
        # The parts of a compound that are words ("slow-roasted", not "v3.5").
        split = [x for x in re.split(r"[-.']", w) if sum(c.isalpha() for c in x) >= 3
                 and not any(c.isdigit() for c in x)] if parts and re.search(r"[-.']", w) else []
        for x in [w, *split]:
            if len(x) < 2 or x in GENERIC or x.replace(".", "").isdigit():
                continue
            seen.setdefault(x, None)
    return list(seen)


def content_stems(text: str) -> list[str]:
    """The stems of :func:`content_words` (each once)."""
    return list(dict.fromkeys(stem(w) for w in content_words(text)))


# -- labels ---------------------------------------------------------------------------

def _entity_like(text: str) -> set[str]:
    """Lowercased words written as names: capitalised inside a sentence, all
    capitals, letters with a digit (``ext4``), or inside backticks; not units."""
    found: set[str] = set()
    for m in re.finditer(r"`([^`]{1,60})`", text):
        found.update(words(m.group(1)))
    for m in _WORD.finditer(text):
        w = m.group(0)
        low = w.casefold()
        letters = sum(c.isalpha() for c in w)
        if any(c.isdigit() for c in w):
            if letters >= 3 and w[0].isalpha():
                found.add(low)
        elif len(w) >= 2 and w.isupper():
            found.add(low)
        elif w[:1].isupper() and len(w) >= 4 and not _SENTENCE_START.search(text[:m.start()]):
            found.add(low)
    return found - UNITS


def label_words(text: str) -> list[str]:
    """Up to two words naming the topic of ``text``: the first name-like word
    (else the first content word that is neither a facet nor a common verb
    or adjective), then its facet (configure -> config) or the next such word."""
    content = content_words(text, parts=False)
    names = _entity_like(text)
    topical = [w for w in content if w not in FACETS and w not in LABEL_SKIP
               and w not in UNITS and not w[0].isdigit()
               and (w in names or not any(c.isdigit() for c in w))]   # no "v35" label
    primary = next((w for w in topical if w in names), None) or \
        next(iter(topical), None)
    facet = next((FACETS[w] for w in content if w in FACETS), None)
    out: list[str] = []
    for w in (primary, facet):
        if w and w not in out:
            out.append(w)
    if len(out) < 2:
        out += [w for w in topical if w not in out][: 2 - len(out)]
    cleaned = [re.sub(r"[^0-9a-z]+", "", w.replace(".", ""))[:_LABEL_WORD] for w in out]
    return [w for w in cleaned if w]


def make_label(text: str, taken: Callable[[str], bool]) -> str:
    """The label of a thread started by ``text``: its :func:`label_words`
    joined by ``-`` (``topic`` without any), suffixed ``-2``, ``-3`` ... when
    ``taken`` says another thread of the session has it."""
    base = "-".join(label_words(text)) or "topic"
    label, n = base, 2
    while taken(label):
        label, n = f"{base}-{n}", n + 1
    return label


# -- the candidate threads and their numbers -----------------------------------------

@dataclass
class ThreadEntry:
    """What placement needs of one candidate thread (its record, its latest vectors)."""

    record: dict[str, Any]
    vectors: list[np.ndarray] = field(default_factory=list)

    @property
    def thread_id(self) -> str:
        return self.record["thread_id"]


@dataclass(frozen=True)
class Placement:
    """Where a user turn goes: ``action`` is continue, resume, join or new
    (the thread rules' decision), ``thread_id`` the thread ("" for new: the
    turn log numbers it), ``rule`` the rule that decided, ``similarity`` the
    message's similarity to that thread (None for new) and ``restore`` whether
    the assembly brings its dormant turns and state back."""

    action: str
    thread_id: str
    rule: str
    similarity: float | None
    candidates: int
    restore: bool = False          # the rules: bring the thread's dormant turns and state back

    @property
    def resumed(self) -> bool:
        return self.action in ("resume", "join")


class ThreadBook:
    """The candidate threads of one session, most recently active first.

    The turn log loads one to derive a chunk of turns (and updates it as
    turns join); an assembly loads one to place the new message.  Both call
    :meth:`place`, which asks the thread rules.
    """

    def __init__(self, entries: Iterable[ThreadEntry], previous: str | None,
                 thresholds: dict[str, float]) -> None:
        self.entries: dict[str, ThreadEntry] = {e.thread_id: e for e in entries}
        self.order: list[str] = [tid for tid in self.entries]   # most recent first
        self.previous = previous
        self.thresholds = thresholds

    # -- the numbers
    def features(self, text: str, vec: np.ndarray) -> list[dict[str, Any]]:
        """One dict per candidate thread: thread, rank (0 = most recently
        active), sim, overlap (0..1), shared (the message's words the
        thread used), user_shared (those its user turns used: a return
        names a topic the user raised), recent (how many of them its
        latest exchange, the last user turn and what followed it, used)
        and bridge (the largest
        cosine against that exchange: a question that does not pick up the
        last answer, by word or by meaning, may start another sub-topic)."""
        if not self.order:
            return []
        msg_words = content_words(text)
        stems = {w: stem(w) for w in msg_words}
        unique = list(dict.fromkeys(stems.values()))
        profiles = [self.entries[tid].record.get("terms") or {} for tid in self.order]
        n = len(profiles)
        # A word every candidate uses tells threads apart less than one only a few use.
        idf = {s: math.log(1.0 + (n + 1) / (1 + sum(1 for p in profiles if s in p)))
               for s in unique}
        total = sum(idf.values())
        # A word the thread used once may be incidental; one it keeps using
        # is what it is about: a shared word counts half at one use, fully
        # from three.
        out = []
        for rank, (tid, profile) in enumerate(zip(self.order, profiles)):
            entry = self.entries[tid]
            if entry.vectors:
                sims = np.stack(entry.vectors) @ vec.astype(np.float32)
                sim = float(np.max(sims))
                bridge = float(np.max(sims[-_exchange_size(entry):]))
            else:
                sim = bridge = 0.0
            hit = [s for s in unique if s in profile]
            overlap = sum(idf[s] * min(1.0, 0.25 + 0.25 * profile[s]) for s in hit) / total \
                if total else 0.0
            shared = [w for w in msg_words if stems[w] in profile]
            said = entry.record.get("user_terms") or {}
            exchange = set(entry.record.get("exchange_terms") or ())
            bridges = entry.record.get("bridges") or []
            out.append({"thread": tid, "rank": rank, "sim": round(sim, 4),
                        "overlap": round(overlap, 4), "shared": shared,
                        "user_shared": [w for w in shared if stems[w] in said],
                        "bridge": round(bridge, 4),
                        "bridge_mean": round(sum(bridges) / len(bridges), 4)
                        if len(bridges) >= 2 else None,
                        "recent": sum(1 for s in unique if s in exchange),
                        "turns": int(entry.record.get("turn_count", 0)),
                        "user_turns": len(entry.record.get("user_turns") or ())})
        return out

    def place(self, text: str, vec: np.ndarray) -> Placement:
        """Ask the thread rules where a user turn with ``text`` goes."""
        cands = self.features(text, vec)
        context = {"previous": self.previous or "", "candidates": cands,
                   "join": float(self.thresholds["thread_join"]),
                   "same": float(self.thresholds["topic_same"]),
                   "terms": len(content_stems(text)),
                   "words": content_words(text, parts=False)}
        d = _prolog_once()("ctxrelay_thread_rules:thread_decision(T, C, D)",
                        {"T": text, "C": context})["D"]
        tid = str(d["thread"])
        sim = next((c["sim"] for c in cands if c["thread"] == tid), None)
        return Placement(str(d["action"]), tid, str(d["rule"]), sim, len(cands),
                         d.get("restore") is True or d.get("restore") == "true")

    # -- updates while deriving
    def touch(self, thread_id: str) -> None:
        """``thread_id`` is now the most recently active thread."""
        if thread_id in self.order:
            self.order.remove(thread_id)
        self.order.insert(0, thread_id)
        del self.order[RECENT_THREADS:]     # read at call time (tests lower it)

    def add(self, entry: ThreadEntry) -> None:
        self.entries[entry.thread_id] = entry
        self.touch(entry.thread_id)

    def record_turn(self, thread_id: str, turn: Turn, vec: np.ndarray) -> dict[str, Any]:
        """Add a turn to a thread's record: members, latest turns and their
        vectors, word profile, last activity.  Returns the record."""
        entry = self.entries[thread_id]
        info = entry.record
        if turn.role == "user" and thread_id == self.previous and entry.vectors:
            # How this follow-up met the thread's latest exchange: the thread's
            # own measure of a bridge, against which a later question's is read.
            sims = np.stack(entry.vectors[-_exchange_size(entry):]) @ vec.astype(np.float32)
            info["bridges"] = [*(info.get("bridges") or [])[-(BRIDGES - 1):],
                               round(float(np.max(sims)), 4)]
        info.setdefault("turn_ids", []).append(turn.turn_id)
        info["turn_count"] = info.get("turn_count", 0) + 1
        if turn.role == "user":
            info.setdefault("user_turns", []).append(turn.turn_id)
            del info["user_turns"][:-NEIGHBOURS]
        info.setdefault("recent_turns", []).append(turn.turn_id)
        del info["recent_turns"][:-NEIGHBOURS]
        entry.vectors.append(vec.astype(np.float32))
        del entry.vectors[:-NEIGHBOURS]
        info["terms"] = add_terms(info.get("terms") or {}, turn.content)
        if turn.role == "user":      # what the user raised: the topics a return names
            info["user_terms"] = add_terms(info.get("user_terms") or {}, turn.content)
        # The latest exchange (a user turn and the answers after it): a question
        # that picks up one of its words follows it up.
        stems = content_stems(turn.content)
        if turn.role == "user":
            info["exchange_terms"] = stems[:PROFILE_TERMS]
        else:
            info["exchange_terms"] = list(dict.fromkeys(
                (info.get("exchange_terms") or []) + stems))[:PROFILE_TERMS]
        info["last_active_turn"] = turn.turn_id
        self.touch(thread_id)
        if turn.role == "user":
            self.previous = thread_id
        return info


def _exchange_size(entry: ThreadEntry) -> int:
    """How many of ``entry``'s latest vectors are its latest exchange: its
    last user turn and the turns after it (at least one, at most all kept)."""
    recent = entry.record.get("recent_turns") or []
    users = entry.record.get("user_turns") or []
    last_user = users[-1] if users else None
    k = sum(1 for t in recent if last_user is None or t >= last_user)
    return max(1, min(k, len(entry.vectors)))


def add_terms(profile: dict[str, int], text: str) -> dict[str, int]:
    """``profile`` with the content stems of ``text`` counted in, bounded to
    the :data:`PROFILE_TERMS` most used (the latest used win ties)."""
    counts = dict(profile)
    for s in content_stems(text):
        counts[s] = counts.pop(s, 0) + 1        # re-inserted: the order is last use
    if len(counts) > PROFILE_TERMS:
        ranked = sorted(enumerate(counts.items()), key=lambda p: (-p[1][1], -p[0]))
        kept = {k for _, (k, _) in ranked[:PROFILE_TERMS]}
        counts = {k: v for k, v in counts.items() if k in kept}
    return counts


# -- thread state ---------------------------------------------------------------------

STATE_FIELDS = ("established", "open_questions", "user_constraints")


@dataclass(frozen=True)
class ThreadState:
    """A topic's state (SPEC-028 §6.2): facts settled, questions open and the
    user's constraints, each item with the turns it came from (``sources``
    maps a field to one list of turn ids per item)."""

    thread_id: str
    established: list[str] = field(default_factory=list)
    open_questions: list[str] = field(default_factory=list)
    user_constraints: list[str] = field(default_factory=list)
    last_active_turn: int = 0
    sources: dict[str, list[list[int]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self, label: str) -> str:
        """The Active Thread Summary (SPEC-028 §6.1), rendered by the state rules."""
        state = {f: list(getattr(self, f)) for f in STATE_FIELDS}
        return str(_prolog_once()("ctxrelay_thread_state:thread_summary(L, S, X)",
                               {"L": label, "S": state})["X"])


def derive_state(thread_id: str, turns: Sequence[Turn]) -> ThreadState:
    """ThreadState from a thread's turns (oldest first), by the state rules."""
    plain = [{"turn_id": t.turn_id, "role": t.role, "content": t.content} for t in turns]
    s = _prolog_once()("ctxrelay_thread_state:thread_state(Ts, S)", {"Ts": plain})["S"]
    values: dict[str, list[str]] = {}
    sources: dict[str, list[list[int]]] = {}
    for name in STATE_FIELDS:
        items = list(s[name])
        values[name] = [str(i["text"]) for i in items]
        sources[name] = [[int(t) for t in i["turns"]] for i in items]
    return ThreadState(thread_id, last_active_turn=turns[-1].turn_id if turns else 0,
                       sources=sources, **values)


def with_override(state: ThreadState, override: dict[str, Any] | None) -> ThreadState:
    """A copy of ``state`` with the fields a caller set by hand in place of the
    derived ones (their items point at no turn)."""
    override = override or {}
    values = {f: list(getattr(state, f)) for f in STATE_FIELDS}
    sources = {f: [list(s) for s in state.sources.get(f, [])] for f in STATE_FIELDS}
    for name in STATE_FIELDS:
        if override.get(name) is not None:
            values[name] = [str(v) for v in override[name]]
            sources[name] = [[] for _ in override[name]]
    return ThreadState(state.thread_id, last_active_turn=state.last_active_turn,
                       sources=sources, **values)
