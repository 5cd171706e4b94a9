"""The key index's salted hash: SipHash-1-3 of each key's bytes under the table's seed.

A tablet's key index (:mod:`cdc_sink.tablet.keyindex`) puts a key at the home slot given
by the top bits of its hash, and probes linearly from there, so keys that share a home
slot cost a probe each. With a hash anyone can compute (Spark's ``xxhash64``, seed 42,
which also routes events to buckets), a producer can compute keys that all share one
home slot offline, and every insert and lookup of them then walks one cluster: quadratic
work. Salting with a secret per-table seed only helps if the seed decides which keys
collide. Feeding it to XXH64 as its seed does not: XXH64 adds the seed to its
accumulators, so two keys made to collide under seed 42 keep a difference that the
other seeds barely change (keys built so, 1,500 of one 64-bit hash under seed 42,
take 4 distinct hashes under another seed: ``tests/tablet/test_keyindex_salt.py``), and
no mix of the 64-bit hash afterwards can separate keys whose hashes are equal. A keyed
pseudo-random function of the key bytes can: SipHash (Aumasson and Bernstein), made
for exactly this, and what Python's ``str`` hash and Rust's ``HashMap`` use against hash
flooding, in its 1-3 variant (one compression round per word, three final ones).

Each key column becomes bytes: a fixed-width value its little-endian value bytes
(``-0.0`` as ``0.0`` and one NaN for floats, a null as zeros), a string or binary value
its bytes. A one-column key hashes those bytes; a key of several columns hashes the
concatenation of its columns' hashes (8 bytes each). The 128-bit SipHash key is the
64-bit seed and a splitmix64 of it.

The C extension (``_cslots.siphash``) hashes row after row; without it numpy runs the
same rounds over blocks of rows (their temporaries stay in the CPU cache), one round of
numpy operations per 8-byte word index (the rows sorted by length, so the rows still
that long are a prefix of a block). The numpy rounds are several times slower than the
C loop (docs/benchmarks-history.md, "Salted key index").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from cdc_sink.tablet.keystore import arrow_validity, arrow_values_view, fixed_width_dtype
from cdc_sink.utils.arrays import one_array

try:  # built from cdc_sink/tablet/_cslots.c at install; optional
    from cdc_sink.tablet import _cslots as _cslots
except ImportError:  # pragma: no cover - no C compiler at install: numpy hashes instead
    _cslots = None  # type: ignore[assignment]

__all__ = ["salted_hash", "siphash"]

_M64 = (1 << 64) - 1
#: Derives the second half of the SipHash key from the seed.
_SECOND = 0x9E3779B97F4A7C15
_INIT = (0x736F6D6570736575, 0x646F72616E646F6D, 0x6C7967656E657261, 0x7465646279746573)
#: Rows per block of the numpy rounds (the temporaries stay in the CPU cache).
_BLOCK = 16384
#: ``_TAIL_MASK[t]`` keeps the low ``t`` bytes of a word.
_TAIL_MASK = np.array([(1 << (8 * t)) - 1 for t in range(8)], dtype=np.uint64)


def _splitmix(x: int) -> int:
    x &= _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def salted_hash(keys: Sequence[pa.Array | pa.ChunkedArray], seed: int) -> np.ndarray:
    """The salted index hash of each key (uint64; see the module docstring).

    Args:
        keys: The key columns (equal lengths; at least one).
        seed: The table's index seed (unsigned 64-bit).
    """
    k0, k1 = seed & _M64, _splitmix(seed ^ _SECOND)
    hashes = [_column_hash(one_array(col), k0, k1) for col in keys]
    if len(hashes) == 1:
        return hashes[0]
    words = np.ascontiguousarray(np.stack(hashes, axis=1))
    return siphash(k0, k1, words.reshape(-1).view(np.uint8), None, 8 * len(hashes), len(words))


def _column_hash(arr: pa.Array, k0: int, k1: int) -> np.ndarray:
    """SipHash of each value's bytes (see the module docstring)."""
    n = len(arr)
    dtype = fixed_width_dtype(arr.type)
    if dtype is not None:
        vals = arrow_values_view(arr, dtype)
        if dtype.kind == "f":
            vals = vals + dtype.type(0)  # -0.0 + 0.0 is 0.0 (a fresh array)
            vals[np.isnan(vals)] = np.nan
        valid = arrow_validity(arr)
        if valid is not None:
            vals = np.array(vals)  # writable (a view of an Arrow buffer is not)
            vals[~valid] = np.zeros(1, dtype)[0]
        data = np.ascontiguousarray(vals).reshape(-1).view(np.uint8)
        return siphash(k0, k1, data, None, dtype.itemsize, n)
    large = arr.cast(pa.large_binary())
    bufs = large.buffers()
    offs = np.frombuffer(bufs[1], dtype=np.int64, count=large.offset + n + 1)[large.offset :]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    return siphash(k0, k1, data, offs, 0, n)


def siphash(
    k0: int,
    k1: int,
    data: np.ndarray,
    offsets: np.ndarray | None,
    width: int,
    n: int,
    *,
    rounds: tuple[int, int] = (1, 3),
) -> np.ndarray:
    """SipHash-c-d under the key ``(k0, k1)`` of ``n`` rows of bytes (uint64 each).

    Args:
        k0: First half of the key (unsigned 64-bit).
        k1: Second half.
        data: The bytes (uint8).
        offsets: ``n + 1`` int64 offsets of the rows in ``data``; or None: rows of
            ``width`` bytes one after another.
        width: Bytes per row without ``offsets``.
        n: Rows.
        rounds: ``(c, d)``: compression rounds per word and final rounds (1-3 here;
            2-4 is the reference's default, which the tests check against its vectors).

    Raises:
        ValueError: The offsets or the width do not fit the data.
    """
    out = np.empty(n, dtype=np.uint64)
    if n == 0:
        return out
    c, d = rounds
    data = np.ascontiguousarray(data, dtype=np.uint8)
    offs = None if offsets is None else np.ascontiguousarray(offsets, dtype=np.int64)
    if _cslots is not None:
        _cslots.siphash(k0 & _M64, k1 & _M64, c, d, data, offs, width, out)
        return out
    if offs is None:
        if width < 0 or len(data) < n * width:
            raise ValueError("siphash: offsets must be n + 1 int64, or width * n bytes of data")
        offs = np.arange(n + 1, dtype=np.int64) * width
    elif len(offs) != n + 1:
        raise ValueError("siphash: offsets must be n + 1 int64, or width * n bytes of data")
    lens = np.diff(offs)
    if (lens < 0).any() or offs[0] < 0 or offs[-1] > len(data):
        raise ValueError("siphash: an offset is outside the data")
    return _siphash_numpy(k0, k1, c, d, data, offs[:-1], lens, out)


def _siphash_numpy(
    k0: int,
    k1: int,
    c: int,
    d: int,
    data: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """The rounds over whole columns, in blocks of rows that keep the temporaries in the
    CPU cache; rows sorted by word count, so in a block the rows that have a word ``j``
    are a prefix. Words are read through a 1-byte-stride uint64 view."""
    padded = np.concatenate([data, np.zeros(8, np.uint8)])
    words = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
    full = lens // 8
    order = np.argsort(-full, kind="stable")
    starts, lens, full = starts[order], lens[order], full[order]
    h = np.empty(len(order), dtype=np.uint64)
    for lo in range(0, len(order), _BLOCK):
        hi = min(lo + _BLOCK, len(order))
        h[lo:hi] = _block(k0, k1, c, d, words, starts[lo:hi], lens[lo:hi], full[lo:hi])
    out[order] = h
    return out


def _block(
    k0: int,
    k1: int,
    c: int,
    d: int,
    words: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    full: np.ndarray,
) -> np.ndarray:
    """SipHash of one block of rows (sorted by word count, most first)."""
    n = len(starts)
    v = [np.full(n, _INIT[i] ^ (k0 if i % 2 == 0 else k1), dtype=np.uint64) for i in range(4)]
    with np.errstate(over="ignore"):
        for j in range(int(full[0])):
            k = int(np.searchsorted(-full, -j, side="left"))  # rows with > j words
            m = words[starts[:k] + 8 * j].astype(np.uint64)
            _compress([x[:k] for x in v], m, c)
        tail = lens - 8 * full
        m = words[starts + 8 * full].astype(np.uint64) & _TAIL_MASK[tail]
        m |= lens.astype(np.uint64) << np.uint64(56)
        _compress(v, m, c)
        v[2] ^= np.uint64(0xFF)
        for _ in range(d):
            _round(v)
    h: np.ndarray = v[0] ^ v[1] ^ v[2] ^ v[3]
    return h


def _compress(v: list[np.ndarray], m: np.ndarray, c: int) -> None:
    v[3] ^= m
    for _ in range(c):
        _round(v)
    v[0] ^= m


def _rotl_inplace(x: np.ndarray, b: int, tmp: np.ndarray) -> None:
    """``x = rotl(x, b)`` through ``tmp`` (same length), without new arrays."""
    np.right_shift(x, np.uint64(64 - b), out=tmp)
    x <<= np.uint64(b)
    x |= tmp


def _round(v: list[np.ndarray]) -> None:
    """One SipRound over arrays (in place: each of ``v`` may be a view of a longer one)."""
    v0, v1, v2, v3 = v
    tmp = np.empty_like(v0)
    v0 += v1
    _rotl_inplace(v1, 13, tmp)
    v1 ^= v0
    _rotl_inplace(v0, 32, tmp)
    v2 += v3
    _rotl_inplace(v3, 16, tmp)
    v3 ^= v2
    v0 += v3
    _rotl_inplace(v3, 21, tmp)
    v3 ^= v0
    v2 += v1
    _rotl_inplace(v1, 17, tmp)
    v1 ^= v2
    _rotl_inplace(v2, 32, tmp)
