"""Byte stream split: the filter a compressed page's fixed-width values go through.

A column of 8-byte integers, floats or timestamps rarely uses every byte of every value:
the high bytes of ids, prices or event times repeat from row to row, and floats that
come from decimal quantities end in zero bytes. A general-purpose codec (zstd, lz4) sees
those bytes interleaved with the varying ones and finds short matches only. Writing byte
0 of every value, then byte 1 of every value, and so on (Parquet's ``BYTE_STREAM_SPLIT``
encoding, Blosc's shuffle filter) puts the repeating bytes in long runs, which the
codec then finds: pages come out smaller and zstd encodes them faster
(docs/benchmarks-history.md, "Byte-split compressed pages", per codec and per column).

A ``decimal128`` page whose values all fit in 64 bits (every high word the sign of its
low word, as for any precision up to 18) is split as its low words; other decimal pages
are not split (zstd compresses their sign words better interleaved, and a 16-way split
is slow).

The bytes move in C (``cdc_sink/storage/_cbytesplit.c``: 8x8 byte blocks transposed in
registers, without the GIL) when the extension was built, else in numpy (one strided
pass per stream, slower: docs/benchmarks-history.md, "Byte-split compressed pages", "How the
bytes are moved"); both write the same bytes.

The filter is applied only to pages that are compressed: an uncompressed page stays the
Arrow layout that is memory-mapped without a copy. A split page is an Arrow array whose
data buffer holds the split bytes, stored with field metadata naming the filter
(:data:`SPLIT_KEY`); :func:`join_page` restores the array. A page written without the
filter has no such metadata and reads as it was written.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

try:  # built from cdc_sink/storage/_cbytesplit.c at install; optional
    from cdc_sink.storage import _cbytesplit as _cbytesplit
except ImportError:  # pragma: no cover - no C compiler at install: numpy does it
    _cbytesplit = None  # type: ignore[assignment]

__all__ = ["NARROW_KEY", "SPLIT_KEY", "join_page", "split_page"]

SPLIT_KEY = b"cdc_sink.split"
"""Field metadata key of a split page: the byte width of its values, in ASCII."""

NARROW_KEY = b"cdc_sink.decimal"
"""Field metadata key of a ``decimal128`` page stored as its low words:
``"<precision>,<scale>"``."""


def _width(type: pa.DataType) -> int:
    """The byte width of ``type``'s values if a page of it may be split, else 0."""
    if pa.types.is_boolean(type) or pa.types.is_dictionary(type):
        return 0
    try:
        bits = type.bit_width
    except ValueError:
        return 0
    return bits // 8 if bits in (16, 32, 64) or pa.types.is_decimal128(type) else 0


def _values(arr: pa.Array, width: int) -> np.ndarray:
    """The bytes of ``arr``'s values (offset applied) as an ``(n, width)`` view."""
    data = np.frombuffer(arr.buffers()[1], np.uint8)
    start = arr.offset * width
    return data[start : start + len(arr) * width].reshape(len(arr), width)


def _validity(arr: pa.Array) -> pa.Buffer | None:
    """``arr``'s validity bitmap starting at its first value (None without nulls)."""
    if arr.null_count == 0:
        return None
    if arr.offset % 8 == 0:
        return arr.buffers()[0].slice(arr.offset // 8, (len(arr) + 7) // 8)
    bits = np.asarray(arr.is_valid())
    return pa.py_buffer(np.packbits(bits, bitorder="little"))


def _fits_64_bits(arr: pa.Array) -> bool:
    """Whether every value of a ``decimal128`` array fits in its low word."""
    words = _values(arr, 16).view(np.int64)
    low, high = words[:, 0], words[:, 1]
    if arr.null_count:
        valid = np.asarray(arr.is_valid())
        return bool(np.array_equal(high[valid], low[valid] >> 63))
    return bool(np.array_equal(high, low >> 63))


def _split(values: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` streams of the first ``width`` bytes of each row of ``values``
    (``(n, stride)`` bytes, contiguous): byte ``j`` of value ``i`` at ``[j, i]``."""
    n, stride = values.shape
    streams = np.empty((width, n), np.uint8)
    if _cbytesplit is not None:
        _cbytesplit.split(values, streams, n, width, stride)
    else:
        for j in range(width):  # one strided pass per stream beats a copy of the transpose
            streams[j] = values[:, j]
    return streams


def _join(streams: np.ndarray, values: np.ndarray, width: int) -> None:
    """Writes ``width`` streams of ``n`` bytes each into the first ``width`` bytes of each
    row of ``values`` (``(n, stride)`` bytes, contiguous)."""
    n, stride = values.shape
    if _cbytesplit is not None:
        _cbytesplit.join(streams, values, n, width, stride)
    else:
        for j, stream in enumerate(streams.reshape(width, n)):
            values[:, j] = stream


def split_page(arr: pa.Array) -> tuple[pa.Array, dict[bytes, bytes]] | None:
    """``arr`` with its values' bytes split into streams, and the field metadata that
    says so; None for an array the filter does not apply to (not fixed-width, booleans,
    one-byte values, ``decimal128`` values that need more than 64 bits, wider decimals).
    """
    type = arr.type
    width = _width(type)
    if len(arr) == 0 or not width or arr.buffers()[1] is None:
        return None
    meta = {SPLIT_KEY: str(width).encode()}
    values = _values(arr, width)
    if pa.types.is_decimal128(type):
        # 16-byte values: split only as 64-bit words (a wide split is slow, and its
        # sign words compress better interleaved: docs/benchmarks-history.md)
        if not _fits_64_bits(arr):
            return None
        width, type = 8, pa.int64()
        meta = {SPLIT_KEY: b"8", NARROW_KEY: f"{arr.type.precision},{arr.type.scale}".encode()}
    streams = _split(values, width)
    carrier = pa.Array.from_buffers(
        type, len(arr), [_validity(arr), pa.py_buffer(streams)], null_count=arr.null_count
    )
    return carrier, meta


def _decimal_of(spec: bytes) -> pa.DataType:
    precision, scale = (int(x) for x in spec.decode().split(","))
    return pa.decimal128(precision, scale)


def join_page(arr: pa.Array, meta: dict[bytes, bytes] | None) -> pa.Array:
    """The page ``arr`` as written: its values' bytes joined back if ``meta`` (its
    field metadata) says they were split (:func:`split_page`), else ``arr`` itself.

    Raises:
        ValueError: The metadata does not fit the array (a damaged page).
    """
    if not meta or SPLIT_KEY not in meta:
        return arr
    width = int(meta[SPLIT_KEY])
    if width not in (2, 4, 8) or width != arr.type.bit_width // 8 or arr.offset != 0:
        raise ValueError(f"a split page of {arr.type} cannot have {width}-byte values")
    n = len(arr)
    streams = np.frombuffer(arr.buffers()[1], np.uint8)[: n * width]
    if len(streams) != n * width:
        raise ValueError("a split page's data buffer is short")
    type = arr.type
    narrowed = NARROW_KEY in meta
    if narrowed:
        if width != 8:
            raise ValueError("a narrowed decimal page must have 8-byte values")
        type = _decimal_of(meta[NARROW_KEY])
    # the low words of a narrowed decimal land in place, at a 16-byte stride
    values: np.ndarray = np.empty((n, 16 if narrowed else width), np.uint8)
    _join(streams, values, width)
    if narrowed:
        words = values.view(np.int64)
        np.right_shift(words[:, 0], 63, out=words[:, 1])
    validity = arr.buffers()[0] if arr.null_count else None
    return pa.Array.from_buffers(
        type, n, [validity, pa.py_buffer(values)], null_count=arr.null_count
    )
