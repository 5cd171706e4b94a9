"""Vectorized building blocks shared by the decoders (private).

- :class:`Parts`: the raw buffers of an input binary array as numpy (data, start/end of
  each value, validity), zero-copy;
- :func:`spans`: byte ranges of the data buffer as an Arrow ``binary_view`` array
  (zero-copy views; Arrow's C++ cast then gathers them into ``binary``/``string``);
- :func:`fixed_array` / :func:`var_array`: typed Arrow arrays from numpy values;
- :func:`cast_rows`: a cast that refuses only the bad rows, found by bisection;
- :func:`b64decode`: base64 decoding of a whole array at once;
- :func:`decimal_fits`: precision check of 128-bit two's-complement integers.

The decoding of events in runs and the assembly of their batch are in
:mod:`._arrays_runs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cdc_sink.errors import InvalidOption

_VIEW_WINDOW = 1 << 30  # a view buffer window starts every 1 GiB and spans 2 GiB
_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF], dtype=np.uint32)


@dataclass
class Parts:
    """The buffers of one binary array of message values.

    Attributes:
        buffer: The Arrow data buffer (``None`` when every value is empty).
        data: The same bytes as a numpy ``uint8`` array.
        starts: Byte offset of each value in ``data`` (int64).
        ends: One past the last byte of each value (int64).
        valid: Whether each value is not null.
    """

    buffer: pa.Buffer | None
    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    valid: np.ndarray

    @property
    def n(self) -> int:
        """Number of values."""
        return len(self.starts)

    @property
    def lengths(self) -> np.ndarray:
        """Byte length of each value."""
        lengths: np.ndarray = self.ends - self.starts
        return lengths


def _is_binary_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_string_view(t)
    )


def binary_parts(values: pa.Array | pa.ChunkedArray) -> Parts:
    """Exposes the buffers of a binary or string array as numpy arrays (zero-copy).

    Raises:
        TypeError: ``values`` is not a binary or string array.
    """
    if isinstance(values, pa.ChunkedArray):
        if not _is_binary_like(values.type):
            raise TypeError(f"message values must be binary or string, got {values.type}")
        if values.num_chunks == 1:
            values = values.chunk(0)
        elif values.num_chunks == 0:
            values = pa.array([], values.type)
        else:  # 64-bit offsets: the chunks together may exceed 2 GiB
            values = pa.concat_arrays([c.cast(pa.large_binary()) for c in values.chunks])
    if not isinstance(values, pa.Array):
        raise TypeError(f"message values must be a pyarrow binary array, got {type(values)}")
    t = values.type
    if pa.types.is_string(t):
        values = values.cast(pa.binary())
    elif pa.types.is_large_string(t) or pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        values = values.cast(pa.large_binary())
    elif not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        raise TypeError(f"message values must be binary or string, got {values.type}")
    n = len(values)
    bufs = values.buffers()
    off_type = np.int64 if pa.types.is_large_binary(values.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=off_type, count=values.offset + n + 1)
    offsets = offsets[values.offset :].astype(np.int64)
    data_buf = bufs[2]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None and data_buf.size
        else np.zeros(0, np.uint8)
    )
    if values.null_count:
        valid = np.asarray(values.is_valid(), dtype=bool)
    else:
        valid = np.ones(n, dtype=bool)
    return Parts(buffer=data_buf, data=data, starts=offsets[:-1], ends=offsets[1:], valid=valid)


def position_array(position: np.ndarray | None, n: int) -> np.ndarray:
    """The caller's source positions as int64, or the value index.

    Raises:
        ValueError: ``position`` does not have ``n`` entries.
    """
    if position is None:
        return np.arange(n, dtype=np.int64)
    pos = np.asarray(position, dtype=np.int64)
    if pos.shape != (n,):
        raise ValueError(f"position must have one entry per value ({n}), got shape {pos.shape}")
    return pos


def key_parts(keys: pa.Array | pa.ChunkedArray | None, n: int) -> Parts | None:
    """The Kafka message keys' buffers (:func:`binary_parts`), one per value, or None.

    Raises:
        ValueError: ``keys`` does not have ``n`` entries.
    """
    if keys is None:
        return None
    kparts = binary_parts(keys)
    if kparts.n != n:
        raise ValueError(f"keys must have one entry per value ({n}), got {kparts.n}")
    return kparts


# ---------------------------------------------------------------------- reasons
def new_reasons(n: int) -> np.ndarray:
    """An object array of ``n`` reasons, all ``None`` (no reason = not rejected)."""
    return np.full(n, None, dtype=object)


def no_reason(reasons: np.ndarray) -> np.ndarray:
    """Mask of the entries of an object array of reasons that are ``None``."""
    mask: np.ndarray = reasons == None  # noqa: E711
    return mask


def refuse(reasons: np.ndarray, mask: np.ndarray, reason: str) -> None:
    """Gives ``reason`` to the events of ``mask`` that have no reason yet."""
    idx = np.flatnonzero(mask)
    if len(idx):
        hit = idx[no_reason(reasons[idx])]
        reasons[hit] = reason


def refuse_each(reasons: np.ndarray, rows: np.ndarray, texts: list[str]) -> None:
    """Gives ``texts[i]`` to event ``rows[i]`` when it has no reason yet (reject path)."""
    for r, text in zip(rows.tolist(), texts, strict=True):
        if reasons[r] is None:
            reasons[r] = text


# ---------------------------------------------------------------------- building arrays
def unaligned(data: np.ndarray, dtype: str) -> np.ndarray:
    """A read-only view of ``data`` where element ``i`` is the ``dtype`` value starting at
    byte ``i`` (overlapping, unaligned): ``unaligned(data, "<u2")[p]`` reads the
    little-endian uint16 at byte ``p`` in one gather."""
    dt_ = np.dtype(dtype)
    count = max(len(data) - dt_.itemsize + 1, 0)
    if count == 0:
        return np.zeros(0, dtype=dt_)
    return np.ndarray(shape=(count,), dtype=dt_, buffer=data, offset=0, strides=(1,))


def spans(
    parts: Parts, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None
) -> pa.Array:
    """Byte ranges ``[starts, ends)`` of ``parts.data`` as a ``binary_view`` array.

    The views point into the input buffer (no copy); ``.cast(pa.binary())`` or
    ``.cast(pa.string())`` gathers them in C++ (the latter validates UTF-8). The views are
    written in blocks of :data:`_SPAN_BLOCK` (the temporaries of a block are all a call
    holds besides the views).
    """
    m = len(starts)
    data = parts.data
    views = np.empty((m, 4), dtype=np.uint32)
    windows = 0
    for a in range(0, m, _SPAN_BLOCK):
        b = min(a + _SPAN_BLOCK, m)
        st = np.asarray(starts[a:b], dtype=np.int64)
        lengths = np.maximum(np.asarray(ends[a:b], dtype=np.int64) - st, 0)
        if valid is not None:
            lengths = np.where(valid[a:b], lengths, 0)
            st = np.where(valid[a:b], st, 0)
        if len(st) and (st.min() < 0 or (st + lengths).max() > len(data)):
            raise ValueError("span outside the data buffer")
        windows = max(windows, _views(data, st, lengths, views[a:b]))
    buffers: list[pa.Buffer | None] = [
        None if valid is None else _bitmap(valid),
        pa.py_buffer(views),
    ]
    if windows:
        assert parts.buffer is not None
        size = parts.buffer.size
        for w in range(windows):
            lo = w * _VIEW_WINDOW
            buffers.append(parts.buffer.slice(lo, min(size - lo, 2 * _VIEW_WINDOW)))
    return pa.Array.from_buffers(pa.binary_view(), m, buffers)


_SPAN_BLOCK = 1 << 16
"""Views :func:`spans` writes at once."""


def _views(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, views: np.ndarray) -> int:
    """Writes the binary views of ``data[starts:starts + lengths]`` into ``views`` (``(k,
    4)`` uint32); returns how many data buffer windows the long ones need (0: none)."""
    k = len(starts)
    u4 = unaligned(data, "<u4")
    short = lengths <= 12
    # Three unaligned 4-byte reads per value: the inline bytes of a short value (bytes past
    # its end masked off), or the 4-byte prefix of a long one.
    safe = starts + 12 <= len(data)
    at = np.where(safe, starts, 0)
    w0 = u4[at] if len(data) >= 12 else np.zeros(k, np.uint32)
    views[:, 0] = lengths
    views[:, 1] = w0 & _MASKS[np.clip(lengths, 0, 4)]
    if short.any() and len(data) >= 12:
        views[:, 2] = np.where(short, u4[at + 4] & _MASKS[np.clip(lengths - 4, 0, 4)], 0)
        views[:, 3] = np.where(short, u4[at + 8] & _MASKS[np.clip(lengths - 8, 0, 4)], 0)
    else:
        views[:, 2:] = 0
    slow = ~safe
    if slow.any():  # values in the last 12 bytes of the buffer: byte by byte
        raw = views.view(np.uint8).reshape(k, 16)
        col = np.arange(12)
        s_start = starts[slow]
        idx = np.minimum(s_start[:, None] + col, max(len(data) - 1, 0))
        raw[slow, 4:16] = np.where(col < lengths[slow][:, None], data[idx], 0) if len(data) else 0
    long_ = ~short
    if not long_.any():
        return 0
    l_start = starts[long_]
    window = l_start // _VIEW_WINDOW
    views[long_, 2] = window
    views[long_, 3] = l_start - window * _VIEW_WINDOW
    return int(window.max()) + 1


def _bitmap(mask: np.ndarray) -> pa.Buffer | None:
    if mask.all():
        return None
    return pa.py_buffer(np.packbits(mask.astype(bool), bitorder="little"))


def with_nulls(arr: pa.Array, mask: np.ndarray) -> pa.Array:
    """``arr`` with its values at ``mask`` made null: the same value buffers under a new
    validity bitmap (no copy of the values)."""
    valid = ~np.asarray(mask, dtype=bool)
    if arr.null_count:
        valid &= np.asarray(arr.is_valid(), dtype=bool)
    if arr.offset:  # the bitmap starts where the buffers start
        valid = np.concatenate([np.zeros(arr.offset, dtype=bool), valid])
    bits = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(arr.type, len(arr), [bits, *arr.buffers()[1:]], offset=arr.offset)


def fixed_array(values: np.ndarray, valid: np.ndarray, type_: pa.DataType) -> pa.Array:
    """An Arrow array of a fixed-width type from numpy values and a validity mask.

    ``values`` must already have the physical layout of ``type_`` (e.g. int32 days for
    date32, int64 micros for timestamps, ``(n, 16)`` uint8 for decimal128, bool).
    """
    n = len(valid)
    if pa.types.is_boolean(type_):
        data = pa.py_buffer(np.packbits(values.astype(bool), bitorder="little"))
    else:
        data = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(type_, n, [_bitmap(valid), data])


def var_array(
    data: np.ndarray, lengths: np.ndarray, valid: np.ndarray, type_: pa.DataType
) -> pa.Array:
    """A binary or string array from concatenated bytes (row order) and lengths."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = pa.types.is_large_binary(type_) or pa.types.is_large_string(type_)
    off = offsets if large else offsets.astype(np.int32)
    return pa.Array.from_buffers(
        type_,
        len(lengths),
        [_bitmap(valid), pa.py_buffer(off), pa.py_buffer(np.ascontiguousarray(data))],
    )


def gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenates ``data[starts[i]:starts[i] + lengths[i]]`` for every ``i``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    starts = np.asarray(starts, np.int64)
    if len(starts) > 1 and (starts[1:] == starts[:-1] + lengths[:-1]).all():
        out0: np.ndarray = data[starts[0] : starts[0] + total].copy()  # contiguous
        return out0
    ends = starts + lengths
    if (starts[1:] >= ends[:-1]).all():
        # Spans in order and apart (as events are): Arrow copies them one memcpy each
        # (issue 38: no index array of one entry per byte).
        picked = _pack_spans(data, starts, ends)
        copied: np.ndarray = np.frombuffer(picked.buffers()[2], np.uint8, count=total).copy()
        return copied
    # Spans in any order, overlapping: views of them, gathered by Arrow's cast.
    whole = Parts(
        buffer=pa.py_buffer(np.ascontiguousarray(data)),
        data=data,
        starts=starts,
        ends=ends,
        valid=np.ones(len(starts), dtype=bool),
    )
    target = pa.binary() if total < 2**31 else pa.large_binary()
    views = spans(whole, starts, ends).cast(target)
    out: np.ndarray = np.frombuffer(views.buffers()[2], np.uint8, count=total).copy()
    return out


def scatter(values: pa.Array, rows: np.ndarray, n: int) -> pa.Array:
    """An array of ``n`` rows holding ``values[i]`` at ``rows[i]`` and nulls elsewhere."""
    if len(rows) == n and (rows == np.arange(n)).all():  # rows may come in any order
        return values
    t = values.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):  # numpy: no index array to build
        out = np.zeros(n, dtype=t.to_pandas_dtype())
        out[rows] = values.fill_null(0).to_numpy(zero_copy_only=False)
        valid = np.zeros(n, dtype=bool)
        valid[rows] = True if values.null_count == 0 else values.is_valid().to_numpy(False)
        return fixed_array(out, valid, t)
    index = np.full(n, -1, dtype=np.int64)
    index[rows] = np.arange(len(rows))
    return values.take(pa.array(index, mask=index < 0))


# ---------------------------------------------------------------------- conversions
def cast_rows(arr: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Casts ``arr`` to ``target``, refusing only the rows that do not convert.

    A failing cast is bisected until the bad rows are isolated (``O(k log n)`` casts for
    ``k`` bad rows), so a clean array costs one vectorized cast; the pieces that convert
    are concatenated once, at the end.

    Returns:
        The cast array (null at the bad rows) and the mask of bad rows.
    """
    try:
        return arr.cast(target), np.zeros(len(arr), dtype=bool)
    except pa.ArrowInvalid:
        if len(arr) <= 1:
            return pa.nulls(len(arr), target), np.ones(len(arr), dtype=bool)
    bad = np.zeros(len(arr), dtype=bool)
    pieces: list[pa.Array] = []
    todo = [(len(arr) // 2, len(arr)), (0, len(arr) // 2)]  # a stack: the first half next
    while todo:
        lo, hi = todo.pop()
        try:
            pieces.append(arr.slice(lo, hi - lo).cast(target))
            continue
        except pa.ArrowInvalid:
            if hi - lo <= 1:
                pieces.append(pa.nulls(hi - lo, target))
                bad[lo:hi] = True
                continue
        mid = (lo + hi) // 2
        todo += [(mid, hi), (lo, mid)]
    return pa.concat_arrays(pieces), bad


_B64 = np.full(256, 255, dtype=np.uint8)
_B64[
    np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", np.uint8)
] = np.arange(64, dtype=np.uint8)
_B64[ord("=")] = 64


_B64_QUADS = 1 << 14
"""Quads of base64 text decoded at once (bounds the temporaries of a decode)."""


def b64decode(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Decodes a binary/string array of standard padded base64, vectorized.

    Nulls stay null. A value that is not valid base64 (length not a multiple of 4, a
    character outside the alphabet, misplaced padding) becomes null and is flagged.

    The quads of all the values are decoded in blocks of :data:`_B64_QUADS` (a long value
    is cut between quads), three bytes each into one buffer, which one copy then packs
    (the padding of each value's last quad left out): what a decode holds is the output
    twice, whatever the values' lengths.

    Returns:
        The decoded ``binary`` array and the mask of bad values.
    """
    parts = binary_parts(arr)
    n = parts.n
    lengths = parts.lengths
    bad = parts.valid & (lengths % 4 != 0)
    use = np.flatnonzero(parts.valid & ~bad & (lengths > 0))
    out_len = np.zeros(n, dtype=np.int64)
    if len(use) == 0:
        return var_array(np.zeros(0, np.uint8), out_len, parts.valid & ~bad, pa.binary()), bad
    starts, ends = parts.starts[use], parts.ends[use]
    nq = (ends - starts) // 4
    first_q = np.cumsum(nq) - nq
    raw = np.empty(3 * int(nq.sum()), dtype=np.uint8)
    value_bad = _b64_quads(parts.data, starts, nq, first_q, raw)
    data = parts.data
    pad2, pad3 = data[ends - 2] == ord("="), data[ends - 1] == ord("=")
    value_bad |= pad2 & ~pad3  # "xx=y": padding then a character
    out_len[use] = np.where(value_bad, 0, 3 * nq - pad2 - pad3)
    bad[use[value_bad]] = True
    q_all = np.zeros(n, dtype=np.int64)
    q_all[use] = nq
    begin = 3 * (np.cumsum(q_all) - q_all)
    packed = _pack_spans(raw, begin, begin + out_len).cast(pa.binary())
    bufs = packed.buffers()
    out = pa.Array.from_buffers(
        pa.binary(), n, [_bitmap(parts.valid & ~bad), bufs[1], bufs[2]], offset=packed.offset
    )
    return out, bad


def _b64_quads(
    data: np.ndarray, starts: np.ndarray, nq: np.ndarray, first_q: np.ndarray, raw: np.ndarray
) -> np.ndarray:
    """Decodes the ``nq[i]`` quads of value ``i`` (from ``data[starts[i]]``) into ``raw``
    (three bytes a quad, quad ``first_q[i]`` first), in blocks; returns the mask of the
    values holding a character outside the alphabet or padding anywhere but in the last
    two places of their last quad."""
    value_bad = np.zeros(len(starts), dtype=bool)
    u4 = unaligned(data, "<u4")
    total = len(raw) // 3
    for q0 in range(0, total, _B64_QUADS):
        q1 = min(q0 + _B64_QUADS, total)
        qi = np.arange(q0, q1, dtype=np.int64)
        owner = np.searchsorted(first_q, qi, side="right") - 1
        k = qi - first_q[owner]
        v = _B64[u4[starts[owner] + 4 * k].view(np.uint8).reshape(-1, 4)]
        pad = v == 64
        last = k == nq[owner] - 1
        quad_bad = (v == 255).any(axis=1) | pad[:, 0] | pad[:, 1]
        quad_bad |= (pad[:, 2] | pad[:, 3]) & ~last
        value_bad[owner[quad_bad]] = True
        v[pad] = 0
        w = v.astype(np.uint32)
        word = (w[:, 0] << 18) | (w[:, 1] << 12) | (w[:, 2] << 6) | w[:, 3]
        out = raw[3 * q0 : 3 * q1].reshape(-1, 3)
        out[:, 0] = word >> 16
        out[:, 1] = (word >> 8) & 0xFF
        out[:, 2] = word & 0xFF
    return value_bad


def _pack_spans(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The spans ``data[starts[i]:ends[i]]`` (in order and apart) as one ``large_binary``
    array, packed by Arrow one memcpy a span: a take of the even elements of an array
    whose offsets interleave every span with the gap after it (no index per byte)."""
    bounds = np.empty(2 * len(starts), dtype=np.int64)
    bounds[0::2], bounds[1::2] = starts, ends
    spans_gaps = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        len(bounds) - 1,
        [None, pa.py_buffer(bounds), pa.py_buffer(np.ascontiguousarray(data))],
    )
    return spans_gaps.take(pa.array(np.arange(0, len(bounds) - 1, 2)))


def decimal_fits(raw: np.ndarray, precision: int) -> np.ndarray:
    """Whether 128-bit little-endian two's-complement integers have at most
    ``precision`` decimal digits.

    Args:
        raw: ``(n, 16)`` uint8 array of unscaled values.
        precision: Maximum number of digits (1..38).
    """
    raw = np.ascontiguousarray(raw)
    lo = raw[:, :8].copy().view("<u8").ravel()
    hi = raw[:, 8:].copy().view("<i8").ravel()
    neg = hi < 0
    hi_u = hi.view(np.uint64)
    with np.errstate(over="ignore"):
        abs_lo = np.where(neg, ~lo + np.uint64(1), lo)
        abs_hi = np.where(neg, ~hi_u + (lo == 0).astype(np.uint64), hi_u)
    bound = 10**precision
    b_hi, b_lo = np.uint64(bound >> 64), np.uint64(bound & 0xFFFFFFFFFFFFFFFF)
    fits: np.ndarray = (abs_hi < b_hi) | ((abs_hi == b_hi) & (abs_lo < b_lo))
    return fits


def decimal_overflow(arr: pa.Array) -> np.ndarray:
    """Mask of the non-null values of a decimal128 array with more digits than its
    precision (Arrow does not check this when casting to precision 38)."""
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=bool)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    raw = raw[arr.offset * 16 : (arr.offset + n) * 16].reshape(n, 16)
    valid = np.asarray(arr.is_valid(), dtype=bool)
    bad: np.ndarray = valid & ~decimal_fits(raw, arr.type.precision)
    return bad


def int_bounds(t: pa.DataType) -> tuple[int, int]:
    """The range of the integer storage of ``t`` (int8..int64, date32, timestamp)."""
    if pa.types.is_date32(t):
        t = pa.int32()
    elif pa.types.is_timestamp(t):
        t = pa.int64()
    info = np.iinfo(t.to_pandas_dtype())
    return int(info.min), int(info.max)


def sub_parts(parts: Parts, lo: int, hi: int) -> Parts:
    """Events ``[lo, hi)`` of ``parts`` (same data buffer: positions stay absolute)."""
    return Parts(
        buffer=parts.buffer,
        data=parts.data,
        starts=parts.starts[lo:hi],
        ends=parts.ends[lo:hi],
        valid=parts.valid[lo:hi],
    )


# ---------------------------------------------------------------------- options
def check_bool(option: str, value: object) -> bool:
    """``value`` when it is a bool.

    Raises:
        InvalidOption: It is not.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidOption(
            f"decoder option {option!r} must be a bool, got {value!r}", option=option
        )
    return bool(value)


def check_choice(option: str, value: object, choices: tuple[str, ...]) -> str:
    """``value`` when it is one of ``choices``.

    Raises:
        InvalidOption: It is not.
    """
    if not isinstance(value, str) or value not in choices:
        raise InvalidOption(
            f"decoder option {option!r} must be one of {list(choices)}, got {value!r}",
            option=option,
        )
    return value
