"""What every embedder in :mod:`ctxrelay.text.embed` shares.

The threshold keys and the specs' values, the errors, the :class:`Embedder`
protocol, the checks of texts and thresholds, row normalisation and the
memo of recent vectors.  numpy only: importing this loads no model.
"""
from __future__ import annotations

import re
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ctxrelay.errors import CtxRelayError, InvalidArgumentError
from ctxrelay.memo import keep

#: The keys every embedder's ``thresholds`` has.
THRESHOLD_KEYS = ("thread_join", "topic_same", "edge")

#: The specs' figures, written for sentence embeddings: SPEC-028 §3.3 (join a
#: thread above 0.70), §5.2 (new topic below 0.50), SPEC-009 §5.2 (edges at
#: 0.60 and up).  The default of :class:`CallableEmbedder`, whose model we do
#: not know; the built-in embedders carry calibrated values instead.
SPEC_THRESHOLDS: Mapping[str, float] = {"thread_join": 0.70, "topic_same": 0.50, "edge": 0.60}

#: A word: a text without one embeds to the zero vector in every built-in embedder.
WORD = re.compile(r"\w+", re.UNICODE)


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

def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a checked list of str (one string alone is refused)."""
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


class VectorMemo:
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


# The process's memo of recently embedded texts, shared by the embedders.
VECTORS = VectorMemo()


def normalise_rows(m: np.ndarray) -> np.ndarray:
    """The rows of ``m`` scaled to unit length (zero rows stay zero), as float32."""
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32, copy=False)


def check_thresholds(values: Mapping[str, float], owner: str) -> dict[str, float]:
    """A checked copy of an embedder's thresholds (exactly :data:`THRESHOLD_KEYS`)."""
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
