"""What the CKF accepts: input checks, the fact records built from them (with the
source-type defaults of SPEC-009 §4.4 and SPEC-027 §3.5) and the embedding of texts.

Each check raises a specific error whose message says how to fix the input,
before anything is written.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ctxrelay.errors import InvalidArgumentError, InvalidMetadataError
from ctxrelay.knowledge import cdr as _cdr
from ctxrelay.storage.interfaces.facts import (STATUSES, EmbeddingModelMismatchError,
                                               FactKeyExistsError, InvalidFactError)

__all__ = ["SOURCE_TYPES", "DEFAULT_SOURCE_TYPE", "DEFAULT_NAMESPACE", "MAX_KEY_CHARS",
           "MAX_NAMESPACE_CHARS", "RECORD_FIELDS", "Encoder", "fact_record", "fact_records",
           "unit_rows", "sha256",
           "check_namespace", "check_key", "check_content", "check_importance",
           "check_source_type", "check_metadata", "check_count", "check_fraction",
           "check_status", "is_uuid", "is_tty", "progress_bar"]

#: source type -> (importance, default TTL): SPEC-009 §4.4 base weights
#: (version-specific = official + 0.05) and SPEC-027 §3.5 default TTLs; the
#: types SPEC-027 gives no TTL for (and user-provided facts) never expire.
SOURCE_TYPES: Mapping[str, tuple[float, str | None]] = {
    "regulatory": (0.90, "P5Y"),
    "official": (0.80, "P1Y"),
    "version_specific": (0.85, "P6M"),
    "research": (0.75, None),
    "internal": (0.70, None),
    "web": (0.50, None),
    "news": (0.50, "P30D"),
    "user": (0.60, None),
}
DEFAULT_SOURCE_TYPE = "user"
DEFAULT_NAMESPACE = "default"
MAX_KEY_CHARS = 128
MAX_NAMESPACE_CHARS = 100
#: what an item given to ``add_facts`` may hold
RECORD_FIELDS = frozenset({"content", "key", "source", "source_location", "source_type",
                           "importance", "ttl", "metadata"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def is_uuid(text: str) -> bool:
    """Whether ``text`` has the shape of a fact id (lower-case UUID)."""
    return _UUID.match(text) is not None


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_namespace(namespace: Any) -> str:
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not namespace.strip() or namespace != namespace.strip() \
            or len(namespace) > MAX_NAMESPACE_CHARS or _CONTROL.search(namespace):
        raise InvalidArgumentError(
            f"namespace must be a non-empty str of at most {MAX_NAMESPACE_CHARS} characters "
            f"without surrounding blanks or control characters (a tenant name), not {namespace!r}")
    return namespace


def check_key(key: Any) -> str | None:
    if key is None:
        return None
    if not isinstance(key, str) or not key or key != key.strip() or len(key) > MAX_KEY_CHARS \
            or _CONTROL.search(key):
        raise InvalidFactError(
            f"key must be a non-empty str of at most {MAX_KEY_CHARS} characters without "
            f"surrounding blanks or control characters (e.g. 'budget_q3'), not {key!r}")
    if _UUID.match(key.lower()):
        raise InvalidFactError(
            f"key {key!r} looks like a fact id (a UUID), so fact(key) would be ambiguous; "
            "pick a name such as 'budget_q3'")
    return key


def check_content(content: Any) -> str:
    if not isinstance(content, str):
        raise InvalidFactError(
            f"fact content must be a str, not {type(content).__name__}; convert it first")
    text = unicodedata.normalize("NFC", content).strip()
    if not text:
        raise InvalidFactError("fact content is empty; pass the text of the fact")
    return text


def check_importance(value: Any, source_type: str) -> float:
    if value is None:
        return SOURCE_TYPES[source_type][0]
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidFactError(
            f"importance must be a number in [0, 1] (SPEC-009 §2), not {value!r}; or leave "
            f"it out for the source type's default ({SOURCE_TYPES[source_type][0]})")
    return float(value)


def check_source_type(value: Any) -> str:
    if value is None:
        return DEFAULT_SOURCE_TYPE
    if value not in SOURCE_TYPES:
        raise InvalidFactError(
            f"source_type must be one of {', '.join(SOURCE_TYPES)}, not {value!r}")
    return str(value)


def check_metadata(value: Any) -> dict[str, Any]:
    # The one JSON check every stored value passes (depth, size, types); a str
    # holding a JSON object is how the Runtime carries metadata across janus.
    from ctxrelay.storage.validation import normalise_metadata
    return normalise_metadata(dict(value) if isinstance(value, Mapping) else value)


def check_count(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo \
            or (hi is not None and value > hi):
        span = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise InvalidArgumentError(f"{name} must be an int {span}, not {value!r}")
    return value


def check_fraction(name: str, value: Any, lo: float = 0.0, hi: float = 1.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be a number in [{lo}, {hi}], not {value!r}")
    return float(value)


def check_status(value: Any) -> str:
    if value not in STATUSES:
        raise InvalidFactError(f"status must be one of {', '.join(STATUSES)}, not {value!r}")
    return str(value)


def fact_records(items: Iterable[str | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Checked records of ``add_facts`` items (a str, or a dict with ``content`` and
    optionally the other :data:`RECORD_FIELDS`); keys given twice are refused."""
    records = []
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"content": item}
        if not isinstance(item, Mapping) or "content" not in item \
                or set(item) - RECORD_FIELDS:
            raise InvalidFactError(
                f"item {i} must be a str or a dict with 'content' and optionally "
                f"{', '.join(sorted(RECORD_FIELDS - {'content'}))}; got {item!r}"[:300])
        records.append(fact_record(**item))
    keys = [r["key"] for r in records if r["key"] is not None]
    if len(keys) != len(set(keys)):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise FactKeyExistsError(f"key {dup!r} is given to two facts; keys are unique "
                                 "per namespace")
    return records


def unit_rows(vectors: Any, n: int, dim: int) -> np.ndarray:
    """``n`` given vectors of dimension ``dim``, checked and scaled to unit length."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.shape != (n, dim) or not np.isfinite(vectors).all():
        raise InvalidArgumentError(
            f"vectors must be a finite ({n}, {dim}) array, "
            f"one row per item, not shape {vectors.shape}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def fact_record(content: Any, *, key: Any = None, source: Any = None,
                source_location: Any = None, source_type: Any = None, importance: Any = None,
                ttl: Any = None, metadata: Any = None) -> dict[str, Any]:
    """A checked record for :meth:`FactStorage.add_facts`, with the source type's
    default importance and TTL where none is given."""
    text = check_content(content)
    stype = check_source_type(source_type)
    if ttl is None:
        ttl = SOURCE_TYPES[stype][1]
    ttl_text, ttl_s = _cdr.parse_ttl(ttl)
    if source is not None and not isinstance(source, str):
        raise InvalidFactError(f"source must be a str (a source id or URI), not {source!r}")
    return {"content": text, "content_hash": sha256(text), "key": check_key(key),
            "source_id": source, "source_location": source_location,
            "source_type": stype, "importance": check_importance(importance, stype),
            "ttl": ttl_text, "ttl_seconds": ttl_s, "metadata": check_metadata(metadata)}


class Encoder:
    """Texts and query inputs to vectors of the store's model and dimension."""

    def __init__(self, embedder: Any, dim: int) -> None:
        self.embedder = embedder
        self.dim = int(dim)

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vecs = np.asarray(self.embedder.embed_batch(list(texts)), dtype=np.float32)
        if vecs.shape != (len(texts), self.dim):
            raise EmbeddingModelMismatchError(
                f"the embedder returned shape {vecs.shape} for {len(texts)} texts; the store "
                f"holds {self.dim}-dimensional vectors")
        return vecs

    def query(self, query: Any) -> np.ndarray:
        """A text (embedded) or a finite vector of the store's dimension."""
        if isinstance(query, str):
            return self.embed([query])[0]
        vec = np.asarray(query, dtype=np.float32).reshape(-1)
        if vec.shape != (self.dim,) or not np.isfinite(vec).all():
            raise InvalidArgumentError(
                f"query must be a str or a finite vector of dimension {self.dim} from "
                f"{self.model_id!r}, not shape {vec.shape}")
        return vec


def is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress_bar(total: int, wanted: bool | None, desc: str, unit: str) -> Any:
    """A tqdm bar when asked for, or by default on a terminal; None otherwise."""
    if wanted is False or (wanted is None and not is_tty()) or total <= 0:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit)
