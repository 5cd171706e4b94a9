"""Spark SQL's ``xxhash64``, bit for bit, vectorized over Arrow columns.

This module reproduces Spark SQL's ``xxhash64(col1, col2, ...)``
(``org.apache.spark.sql.catalyst.expressions.XxHash64`` on top of
``org.apache.spark.sql.catalyst.expressions.XXH64``, seed 42), on which the table's
bucket function is built (:mod:`cdc_sink.bucketing`), so that a row is routed to the same
bucket whether the bucket is computed here from Arrow data or inside a Spark job.

Semantics (each checked against real Spark 4.3 by ``tests/integration/test_bucketing_spark.py``):

* The columns are hashed left to right; the hash of column ``i`` is the seed of column
  ``i + 1``. A null value leaves the running hash unchanged (so an all-null row hashes to
  the seed, 42).
* Every value is hashed with XXH64 of its little-endian bytes: ``hashInt`` (4 bytes) for
  Spark's ``ByteType``/``ShortType``/``IntegerType``/``DateType``/``BooleanType`` (the value
  is first widened to a Java ``int``: sign-extended, ``true``/``false`` as ``1``/``0``),
  ``hashLong`` (8 bytes) for ``LongType``/``TimestampType``/``TimestampNTZType``, and
  ``hashUnsafeBytes`` for ``StringType`` (UTF-8 bytes) and ``BinaryType``. All three are
  plain XXH64 of those bytes.
* Floats: ``-0.0`` hashes as ``0.0``; every NaN (any payload, either sign) hashes as the
  canonical NaN (``Float.floatToIntBits``/``Double.doubleToLongBits``). ``FloatType`` uses
  ``hashInt`` of the 32-bit pattern, ``DoubleType`` ``hashLong`` of the 64-bit pattern.
* Decimals: precision <= 18 hashes ``hashLong`` of the unscaled value; a larger precision
  hashes ``hashUnsafeBytes`` of ``BigInteger.toByteArray()`` of the unscaled value (minimal
  big-endian two's complement, at least one byte). The *type's* precision decides, not the
  value's.
* Timestamps: a zoned Arrow timestamp (any zone) is Spark's ``TimestampType`` and hashes
  its UTC microseconds. A zone-less one hashes its stored microseconds, which is Spark's
  ``TimestampNTZType``. Beware: ``spark.createDataFrame(arrow_table)`` turns a zone-less
  timestamp into ``TimestampType`` (wall-clock time in the session zone) unless
  ``spark.sql.timestampType=TIMESTAMP_NTZ``, and then the hashes agree only when the
  session zone is UTC.
* A NullType column (Arrow ``null``) leaves the hash unchanged on every row.

See :data:`SUPPORTED_TYPES` for the Arrow -> Spark type mapping.

Implementation: numpy ``uint64`` arithmetic over whole columns (wrap-around multiplication
is exactly Java's ``long`` arithmetic), in blocks of 65,536 rows so that temporaries stay in
the CPU cache instead of each pass over a whole column going to memory. Fixed-width values
come straight from the Arrow value buffers. Variable-length values (strings, binary, large
decimals) are read from the Arrow offsets/data buffers: 8- and 4-byte little-endian words at
arbitrary byte offsets are gathered through a 1-byte-stride ``uint64``/``uint32`` view of
the (padded) data, 32-byte stripes through a ``V32`` view. The stripe loop of XXH64 runs
once per *stripe index* over the rows still that long (rows sorted by stripe count, so the
active rows are a prefix). What follows the stripes (0-3 words, maybe a 4-byte word, 0-3
bytes) depends only on ``length % 32``; rows are radix-sorted by that class, so each step
runs on a few contiguous slices holding exactly the rows that need it. No Python loop runs
per row (only per stripe index, per step and per length class).

Throughput figures are in docs/benchmarks-history.md ("Spark bucketing hash").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["SUPPORTED_TYPES", "check_hashable", "spark_xxhash64"]

_U64 = npt.NDArray[np.uint64]
_I64 = npt.NDArray[np.int64]

#: The Arrow types :func:`spark_xxhash64` accepts, each with the Spark SQL type it stands
#: for and how Spark hashes a value of that type.
SUPPORTED_TYPES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "null": "NullType: every value is null, the running hash is unchanged",
        "bool": "BooleanType: hashInt(1 or 0)",
        "int8": "ByteType: hashInt(value)",
        "int16": "ShortType: hashInt(value)",
        "int32": "IntegerType: hashInt(value)",
        "int64": "LongType: hashLong(value)",
        "float32": "FloatType: hashInt(floatToIntBits(v)), -0.0 as 0.0, NaN canonical",
        "float64": "DoubleType: hashLong(doubleToLongBits(v)), -0.0 as 0.0, NaN canonical",
        "string, large_string, string_view": "StringType (UTF8_BINARY): "
        "hashUnsafeBytes(UTF-8 bytes)",
        "binary, large_binary, binary_view": "BinaryType: hashUnsafeBytes(bytes)",
        "date32": "DateType: hashInt(days since 1970-01-01)",
        "timestamp[us, tz=<any>]": "TimestampType: hashLong(microseconds since the epoch, UTC)",
        "timestamp[us] (no tz)": "TimestampNTZType: hashLong(stored microseconds)",
        "decimal32/64/128/256(p <= 18, s)": "DecimalType(p, s): hashLong(unscaled value)",
        "decimal128/256(19 <= p <= 38, s)": "DecimalType(p, s): "
        "hashUnsafeBytes(BigInteger.toByteArray(unscaled value))",
        "dictionary<values=T>": "as T (the dictionary is decoded)",
    }
)

_MASK64: Final = (1 << 64) - 1
_P1: Final = np.uint64(0x9E3779B185EBCA87)
_P2: Final = np.uint64(0xC2B2AE3D27D4EB4F)
_P3: Final = np.uint64(0x165667B19E3779F9)
_P4: Final = np.uint64(0x85EBCA77C2B2AE63)
_P5: Final = np.uint64(0x27D4EB2F165667C5)
_P5_PLUS_4: Final = np.uint64((0x27D4EB2F165667C5 + 4) & _MASK64)
_P5_PLUS_8: Final = np.uint64((0x27D4EB2F165667C5 + 8) & _MASK64)
_P1_PLUS_P2: Final = np.uint64((0x9E3779B185EBCA87 + 0xC2B2AE3D27D4EB4F) & _MASK64)
_FLOAT_NAN_BITS: Final = np.uint32(0x7FC00000)
_DOUBLE_NAN_BITS: Final = np.uint64(0x7FF8000000000000)
_MAX_LONG_DIGITS: Final = 18
_MAX_DECIMAL_PRECISION: Final = 38
#: Rows hashed together; small enough that a block's temporaries stay in the CPU cache.
_BLOCK_ROWS: Final = 1 << 16
#: _TAIL_MASKS[k] selects the last k of 16 bytes.
_TAIL_MASKS: Final = np.arange(16)[None, :] >= (16 - np.arange(17))[:, None]


# --------------------------------------------------------------------------------------
# type checks


def _unsupported(type_: pa.DataType, why: str = "") -> TypeError:
    detail = f" ({why})" if why else ""
    return TypeError(
        f"cannot hash Arrow type {type_} like Spark xxhash64{detail}; "
        f"supported: {', '.join(SUPPORTED_TYPES)}"
    )


def check_hashable(type: pa.DataType) -> None:
    """Check that values of an Arrow type can be hashed exactly like Spark does.

    Args:
        type: The Arrow type of a key column.

    Raises:
        TypeError: If the type is not one of :data:`SUPPORTED_TYPES` (for example an
            unsigned integer, ``timestamp[ns]``, ``date64``, a list or a struct), naming
            the type.
    """
    t = pa.types
    if not isinstance(type, pa.DataType):
        raise TypeError(f"expected a pyarrow.DataType, got {type!r}")
    if t.is_dictionary(type):
        check_hashable(type.value_type)
        return
    if (
        t.is_null(type)
        or t.is_boolean(type)
        or t.is_int8(type)
        or t.is_int16(type)
        or t.is_int32(type)
        or t.is_int64(type)
        or t.is_float32(type)
        or t.is_float64(type)
        or t.is_string(type)
        or t.is_large_string(type)
        or t.is_string_view(type)
        or t.is_binary(type)
        or t.is_large_binary(type)
        or t.is_binary_view(type)
        or t.is_date32(type)
    ):
        return
    if t.is_timestamp(type):
        if type.unit != "us":
            raise _unsupported(type, "Spark timestamps are microseconds: cast to unit 'us'")
        return
    if t.is_decimal(type):
        if type.precision > _MAX_DECIMAL_PRECISION:
            raise _unsupported(type, "Spark decimals have a precision of at most 38")
        return
    raise _unsupported(type)


# --------------------------------------------------------------------------------------
# XXH64 building blocks over uint64 arrays (all operations wrap modulo 2**64)


def _rotl(x: _U64, r: int) -> _U64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _rotl_inplace(x: _U64, r: int, tmp: _U64) -> None:
    """``x = rotl(x, r)`` in place; ``tmp`` is scratch space of ``x``'s shape."""
    np.right_shift(x, np.uint64(64 - r), out=tmp)
    np.left_shift(x, np.uint64(r), out=x)
    np.bitwise_or(x, tmp, out=x)


def _fmix(h: _U64) -> _U64:
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def _hash_int(values: _U64, seeds: _U64) -> _U64:
    """XXH64 ``hashInt``: ``values`` hold the zero-extended 32-bit patterns."""
    h = seeds + _P5_PLUS_4
    h ^= values * _P1
    h = _rotl(h, 23)
    h *= _P2
    h += _P3
    return _fmix(h)


def _hash_long(values: _U64, seeds: _U64) -> _U64:
    """XXH64 ``hashLong`` of 64-bit patterns."""
    k = values * _P2
    k = _rotl(k, 31)
    k *= _P1
    h = seeds + _P5_PLUS_8
    h ^= k
    h = _rotl(h, 27)
    h *= _P1
    h += _P4
    return _fmix(h)


def _unaligned_view(data: npt.NDArray[np.uint8], width: int) -> npt.NDArray[Any]:
    """A view whose element ``i`` is the ``width`` bytes of ``data`` starting at byte ``i``.

    Widths 8 and 4 give little-endian ``uint64``/``uint32`` words; 32 gives opaque 32-byte
    blocks (``V32``), gathered much faster than four separate words.
    """
    dtype = np.dtype("<u8" if width == 8 else "<u4" if width == 4 else f"V{width}")
    count = max(data.size - width + 1, 0)
    return np.ndarray(shape=(count,), dtype=dtype, buffer=data, offset=0, strides=(1,))


def _stripes(
    data: npt.NDArray[np.uint8], starts: _I64, lengths: _I64, seeds: _U64, h: _U64, pos: _I64
) -> None:
    """Run the 32-byte stripe loop for the rows of length >= 32, updating ``h`` and ``pos``.

    The rows are sorted by stripe count, descending, so that the rows still active at
    stripe ``j`` are a prefix: the loop runs once per stripe index, not per row.
    """
    long_rows = np.flatnonzero(lengths >= 32)
    if long_rows.size == 0:
        return
    blocks = _unaligned_view(data, 32)
    stripes = lengths[long_rows] >> 5
    most = int(stripes.max())
    key = most - stripes
    # a stable sort of 16-bit keys is a radix sort in numpy
    order = np.argsort(key.astype(np.uint16) if most < 1 << 16 else key, kind="stable")
    long_rows = long_rows[order]
    stripes = stripes[order]
    m = long_rows.size
    lanes = np.empty((m, 4), dtype=np.uint64)
    s = seeds[long_rows]
    np.add(s, _P1_PLUS_P2, out=lanes[:, 0])
    np.add(s, _P2, out=lanes[:, 1])
    lanes[:, 2] = s
    np.subtract(s, _P1, out=lanes[:, 3])
    tmp = np.empty_like(lanes)
    p = starts[long_rows]
    # active[j]: the number of (leading) rows with more than j stripes
    active = np.searchsorted(most - stripes, most - np.arange(most), side="left")
    for j, k in enumerate(active.tolist()):
        acc = lanes[:k]
        lane: _U64 = blocks[p[:k] + 32 * j].view(np.dtype("<u8")).reshape(k, 4)
        lane *= _P2
        lane += acc
        _rotl_inplace(lane, 31, tmp[:k])
        np.multiply(lane, _P1, out=acc)
    # h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18), then merge v1..v4
    rot = np.array([1, 7, 12, 18], dtype=np.uint64)
    rotated = (lanes << rot) | (lanes >> (np.uint64(64) - rot))
    hl: _U64 = rotated[:, 0] + rotated[:, 1]
    hl += rotated[:, 2]
    hl += rotated[:, 3]
    lanes *= _P2
    _rotl_inplace(lanes, 31, tmp)
    lanes *= _P1
    for i in range(4):
        hl ^= lanes[:, i]
        hl *= _P1
        hl += _P4
    h[long_rows] = hl
    pos[long_rows] += stripes << 5


def _class_ranges(bounds: list[int], classes: Iterable[int]) -> list[tuple[int, int]]:
    """Merge the row ranges of the given length classes into non-empty slices."""
    out: list[tuple[int, int]] = []
    for c in classes:
        lo, hi = bounds[c], bounds[c + 1]
        if lo == hi:
            continue
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _merge(h: _U64, k1: _U64, r: int, mul: np.uint64, add: np.uint64 | None, tmp: _U64) -> None:
    """``h = rotl(h ^ k1, r) * mul (+ add)`` in place: how each of XXH64's tail rounds (an
    8-byte word, a 4-byte word, a byte) folds its mixed input ``k1`` into the hash."""
    h ^= k1
    _rotl_inplace(h, r, tmp)
    h *= mul
    if add is not None:
        h += add


def _hash_bytes(data: npt.NDArray[np.uint8], starts: _I64, lengths: _I64, seeds: _U64) -> _U64:
    """XXH64 ``hashUnsafeBytes`` of ``data[starts[i] : starts[i] + lengths[i]]`` per row.

    ``data`` must have at least 8 readable bytes past the end of every row.
    """
    words8 = _unaligned_view(data, 8)
    words4 = _unaligned_view(data, 4)
    h = seeds + _P5
    pos = starts.copy()
    _stripes(data, starts, lengths, seeds, h, pos)
    h += lengths.astype(np.uint64)

    # What is left of each row after its stripes is fixed by its class, len % 32: the
    # number of 8-byte words (class >> 3), a 4-byte word (class & 4) and the tail bytes
    # (class & 3). Sorting the rows by class makes every step below work on a few
    # contiguous slices holding exactly the rows that need it: no masks, no wasted work.
    cls = (lengths & 31).astype(np.uint16)
    order = np.argsort(cls, kind="stable")
    bounds = [0, *np.cumsum(np.bincount(cls, minlength=32)).tolist()]
    hs = h[order]
    ps = pos[order]
    scratch = np.empty_like(hs)

    for w in range(3):  # 8-byte words: classes >= 8 * (w + 1)
        for lo, hi in _class_ranges(bounds, range(8 * (w + 1), 32)):
            hseg, tmp = hs[lo:hi], scratch[lo:hi]
            k1: _U64 = words8[ps[lo:hi]]
            k1 *= _P2
            _rotl_inplace(k1, 31, tmp)
            k1 *= _P1
            _merge(hseg, k1, 27, _P1, _P4, tmp)
            ps[lo:hi] += 8
    # one 4-byte word: classes with bit 4 set
    for lo, hi in _class_ranges(bounds, (c for c in range(32) if c & 4)):
        hseg, tmp = hs[lo:hi], scratch[lo:hi]
        k1 = words4[ps[lo:hi]].astype(np.uint64)
        k1 *= _P1
        _merge(hseg, k1, 23, _P2, _P3, tmp)
        ps[lo:hi] += 4
    for b in range(3):  # tail bytes: classes with (class & 3) > b
        for lo, hi in _class_ranges(bounds, (c for c in range(32) if c & 3 > b)):
            hseg, tmp = hs[lo:hi], scratch[lo:hi]
            k1 = data[ps[lo:hi]].astype(np.uint64)
            k1 *= _P5
            _merge(hseg, k1, 11, _P1, None, tmp)
            ps[lo:hi] += 1

    out = np.empty_like(hs)
    out[order] = _fmix(hs)
    return out


# --------------------------------------------------------------------------------------
# Arrow buffers -> numpy


def _fixed_values(arr: pa.Array, dtype: npt.DTypeLike) -> npt.NDArray[np.generic]:
    """The values buffer of a fixed-width array as numpy, honouring ``arr.offset``."""
    buf = arr.buffers()[1]
    np_dtype = np.dtype(dtype)
    count = arr.offset + len(arr)
    return np.frombuffer(buf, dtype=np_dtype, count=count)[arr.offset :]


def _validity(arr: pa.Array) -> npt.NDArray[np.bool_] | None:
    """A boolean mask of the non-null rows, or ``None`` when no row is null."""
    if arr.null_count == 0:
        return None
    bitmap = arr.buffers()[0]
    bits = np.unpackbits(
        np.frombuffer(bitmap, dtype=np.uint8, count=(arr.offset + len(arr) + 7) // 8),
        bitorder="little",
    )
    return bits[arr.offset : arr.offset + len(arr)].view(np.bool_)


def _padded(data: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    out = np.zeros(data.size + 8, dtype=np.uint8)
    out[: data.size] = data
    return out


def _hash_varbinary(arr: pa.Array, seeds: _U64) -> _U64:
    t = pa.types
    if t.is_string_view(arr.type):
        arr = arr.cast(pa.large_string())
    elif t.is_binary_view(arr.type):
        arr = arr.cast(pa.large_binary())
    large = t.is_large_string(arr.type) or t.is_large_binary(arr.type)
    _, offsets_buf, data_buf = arr.buffers()
    n = len(arr)
    offsets = np.frombuffer(
        offsets_buf, dtype=np.int64 if large else np.int32, count=arr.offset + n + 1
    )[arr.offset :].astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    if data_buf is None or last == first:
        data = np.zeros(8, dtype=np.uint8)
    else:
        data = _padded(np.frombuffer(data_buf, dtype=np.uint8, count=last)[first:])
    starts = offsets[:-1] - first
    lengths = np.diff(offsets)
    return _hash_bytes(data, starts, lengths, seeds)


def _hash_decimal(arr: pa.Array, seeds: _U64) -> _U64:
    precision = arr.type.precision
    if not pa.types.is_decimal128(arr.type):
        arr = arr.cast(pa.decimal128(precision, arr.type.scale))
    n = len(arr)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(arr.offset + n) * 16)[
        arr.offset * 16 :
    ]
    if precision <= _MAX_LONG_DIGITS:
        low = raw.view("<u8")[0::2].astype(np.uint64, copy=False)
        return _hash_long(low, seeds)
    # BigInteger.toByteArray(): the minimal big-endian two's complement, >= 1 byte. Its
    # length is bitLength // 8 + 1, where bitLength is that of x, or of ~x when x < 0.
    words = raw.view("<u8")
    lo = words[0::2].astype(np.uint64, copy=False)
    hi = words[1::2].view(np.int64)
    sign = hi >> np.int64(63)  # 0 or -1
    mag_hi = (hi ^ sign).view(np.uint64)
    mag_lo = lo ^ sign.view(np.uint64)
    big = mag_hi != 0
    top = np.where(big, mag_hi, mag_lo)
    # bit length of `top` from the float exponent, corrected where the conversion rounded
    # up to the next power of two
    exp = np.minimum(np.frexp(top.astype(np.float64))[1].astype(np.int64), 64)
    exp -= (top >> np.maximum(exp - 1, 0).astype(np.uint64)) == 0
    bit_length = np.maximum(exp, 0) + 64 * big
    lengths = bit_length // 8 + 1
    be = np.empty((n, 2), dtype=np.uint64)
    be[:, 0] = hi.view(np.uint64)
    be[:, 1] = lo
    be_bytes = be.byteswap().view(np.uint8).reshape(n, 16)
    data = _padded(be_bytes[_TAIL_MASKS[lengths]])
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return _hash_bytes(data, starts, lengths, seeds)


def _hash_array(arr: pa.Array, seeds: _U64) -> _U64:
    """Hash one (non-chunked) column, each row seeded by ``seeds``."""
    t = pa.types
    typ = arr.type
    if len(arr) == 0 or t.is_null(typ):
        return seeds.copy()
    if t.is_dictionary(typ):
        return _hash_array(arr.dictionary_decode(), seeds)
    if t.is_int8(typ) or t.is_int16(typ) or t.is_int32(typ) or t.is_date32(typ):
        src = np.int8 if t.is_int8(typ) else np.int16 if t.is_int16(typ) else np.int32
        ints = _fixed_values(arr, src).astype(np.int32, copy=False).view(np.uint32)
        h = _hash_int(ints.astype(np.uint64), seeds)
    elif t.is_boolean(typ):
        bits = np.unpackbits(
            np.frombuffer(arr.buffers()[1], dtype=np.uint8, count=(arr.offset + len(arr) + 7) // 8),
            bitorder="little",
        )[arr.offset : arr.offset + len(arr)]
        h = _hash_int(bits.astype(np.uint64), seeds)
    elif t.is_int64(typ) or t.is_timestamp(typ):
        h = _hash_long(_fixed_values(arr, np.int64).view(np.uint64), seeds)
    elif t.is_float32(typ):
        f32 = _fixed_values(arr, np.float32)
        bits32 = f32.view(np.uint32).copy()
        bits32[f32 == 0] = 0
        bits32[np.isnan(f32)] = _FLOAT_NAN_BITS
        h = _hash_int(bits32.astype(np.uint64), seeds)
    elif t.is_float64(typ):
        f64 = _fixed_values(arr, np.float64)
        bits64 = f64.view(np.uint64).copy()
        bits64[f64 == 0] = 0
        bits64[np.isnan(f64)] = _DOUBLE_NAN_BITS
        h = _hash_long(bits64, seeds)
    elif t.is_decimal(typ):
        h = _hash_decimal(arr, seeds)
    else:
        h = _hash_varbinary(arr, seeds)
    valid = _validity(arr)
    if valid is not None:
        np.copyto(h, seeds, where=~valid)
    return h


# --------------------------------------------------------------------------------------
# public API


def spark_xxhash64(
    columns: Sequence[pa.Array | pa.ChunkedArray], *, seed: int = 42
) -> npt.NDArray[np.int64]:
    """Compute Spark SQL's ``xxhash64(columns...)`` for every row.

    Args:
        columns: One or more key columns of equal length, hashed left to right (the
            hash of one column seeds the next). Each is a ``pyarrow.Array`` or
            ``pyarrow.ChunkedArray`` of a type in :data:`SUPPORTED_TYPES`; the columns
            may be chunked differently.
        seed: The initial seed, a signed 64-bit integer. Spark's ``xxhash64`` uses 42.

    Returns:
        An ``int64`` array with one hash per row, equal to what Spark returns.

    Raises:
        ValueError: If ``columns`` is empty, the columns differ in length, or ``seed``
            is not a signed 64-bit integer.
        TypeError: If a column is not an Arrow array or its type is not supported.
    """
    if isinstance(columns, (pa.Array, pa.ChunkedArray)):
        raise TypeError("columns must be a sequence of Arrow arrays, not a single array")
    if len(columns) == 0:
        raise ValueError("xxhash64 requires at least one column")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if not -(2**63) <= seed < 2**63:
        raise ValueError(f"seed must be a signed 64-bit integer, got {seed}")
    n = len(columns[0])
    for col in columns:
        if not isinstance(col, (pa.Array, pa.ChunkedArray)):
            raise TypeError(f"expected a pyarrow Array or ChunkedArray, got {type(col).__name__}")
        check_hashable(col.type)
        if len(col) != n:
            raise ValueError(f"all columns must have the same length: {len(col)} != {n}")

    h: _U64 = np.full(n, seed & _MASK64, dtype=np.uint64)
    with np.errstate(over="ignore"):
        # Row blocks keep the working set (temporaries, gathered bytes) in the CPU cache.
        for lo in range(0, n, _BLOCK_ROWS):
            size = min(_BLOCK_ROWS, n - lo)
            hb = h[lo : lo + size]
            for col in columns:
                part = col.slice(lo, size)
                if isinstance(part, pa.ChunkedArray):
                    out = np.empty_like(hb)
                    start = 0
                    for chunk in part.chunks:
                        stop = start + len(chunk)
                        out[start:stop] = _hash_array(chunk, hb[start:stop])
                        start = stop
                    hb = out
                else:
                    hb = _hash_array(part, hb)
            h[lo : lo + size] = hb
    return h.view(np.int64)
