"""Many records' checksums verified at once: XXH3-64 of short inputs in numpy.

A frequent term's postings are a thousand fixed-size duplicates of one key, each
sealed with ``xxh3_64(key + value)`` (:mod:`ctxrelay.storage.lmdb.framing`).
Verifying them one ``xxhash`` call at a time costs a Python step per posting,
about as much as reading them; here the same function (XXH3's 17..128-byte path
with the default secret and seed 0, as in the reference implementation) runs
over all of them as numpy arrays.

It only ever decides that a record is intact when its recomputed digest equals
the stored one: a record it finds different is checked again with ``xxhash``
itself by the caller, which raises the store's usual error.  So a mistake here
can cost speed, never a damaged record read as intact -- and :func:`available`
is False (every record goes the per-record way) unless the implementation gives
``xxhash``'s digests on a self-check at import.
"""
from __future__ import annotations

import functools
from typing import Any

import xxhash

__all__ = ["available", "MIN_INPUT", "MAX_INPUT", "intact_rows"]

MIN_INPUT, MAX_INPUT = 17, 128            # the input lengths this path covers

# The first 128 bytes of XXH3's default secret (kSecret), which this path reads.
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364")
_PRIME64_1 = 0x9E3779B185EBCA87
_PRIME_MX1 = 0x165667919E3779F9
_LOW32 = 0xFFFFFFFF


def _mul128_fold64(np: Any, a: Any, b: Any) -> Any:
    """The low and high halves of the 128-bit products ``a * b``, xor-ed (uint64 arrays)."""
    low32 = np.uint64(_LOW32)
    s32 = np.uint64(32)
    a_lo, a_hi, b_lo, b_hi = a & low32, a >> s32, b & low32, b >> s32
    lo_lo, hi_lo, lo_hi, hi_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi, a_hi * b_hi
    cross = (lo_lo >> s32) + (hi_lo & low32) + lo_hi       # cannot overflow 64 bits
    upper = (hi_lo >> s32) + (cross >> s32) + hi_hi
    lower = (cross << s32) | (lo_lo & low32)
    return lower ^ upper


def _digests(rows: Any) -> Any:
    """XXH3-64 (seed 0) of each row of ``rows``, a (n, length) uint8 array with
    17 <= length <= 128, as uint64."""
    import numpy as np
    n, length = rows.shape
    secret = np.frombuffer(_SECRET, dtype="<u8")

    def word(at: int) -> Any:
        return np.ascontiguousarray(rows[:, at:at + 8]).view("<u8").reshape(n).astype(np.uint64)

    def mix16(at: int, secret_at: int) -> Any:
        s = secret_at // 8
        return _mul128_fold64(np, word(at) ^ secret[s], word(at + 8) ^ secret[s + 1])

    with np.errstate(over="ignore"):
        acc = np.full(n, (length * _PRIME64_1) & 0xFFFFFFFFFFFFFFFF, dtype=np.uint64)
        if length > 32:
            if length > 64:
                if length > 96:
                    acc += mix16(48, 96)
                    acc += mix16(length - 64, 112)
                acc += mix16(32, 64)
                acc += mix16(length - 48, 80)
            acc += mix16(16, 32)
            acc += mix16(length - 32, 48)
        acc += mix16(0, 0)
        acc += mix16(length - 16, 16)
        acc ^= acc >> np.uint64(37)
        acc *= np.uint64(_PRIME_MX1)
        acc ^= acc >> np.uint64(32)
    return acc


def intact_rows(key: bytes, block: bytes, size: int) -> Any:
    """For ``block``, records of ``size`` bytes each (a value then its 8-byte big-endian
    checksum, all under ``key``), a boolean array: True where the checksum is
    ``xxh3_64(key + value)``.  Only for 17 <= len(key) + size - 8 <= 128."""
    import numpy as np
    body = size - 8
    length = len(key) + body
    if not MIN_INPUT <= length <= MAX_INPUT:
        raise ValueError(f"inputs of {length} bytes are outside {MIN_INPUT}..{MAX_INPUT}")
    records = np.frombuffer(block, dtype=np.uint8).reshape(-1, size)
    rows = np.empty((len(records), length), dtype=np.uint8)
    rows[:, :len(key)] = np.frombuffer(key, dtype=np.uint8)
    rows[:, len(key):] = records[:, :body]
    stored = np.ascontiguousarray(records[:, body:]).view(">u8").reshape(len(records))
    return _digests(rows) == stored.astype(np.uint64)


@functools.cache
def available() -> bool:
    """Whether :func:`intact_rows` gives ``xxhash``'s digests here (checked once, on
    first use, so numpy loads only when a block is verified)."""
    for length in (17, 24, 32, 33, 48, 64, 65, 80, 96, 97, 112, 128):
        key = bytes(range(7, 7 + length - 16))
        values = [bytes((i * 37 + j * 11) % 256 for j in range(16)) for i in range(5)]
        block = b"".join(v + xxhash.xxh3_64_digest(key + v) for v in values)
        try:
            if not intact_rows(key, block, 24).all():
                return False
        except (ArithmeticError, TypeError, ValueError):   # the per-record path stays
            return False
    return True
