"""Append-only storage of one key column, indexed by dense row id.

Key columns never change after a row is created, so a tablet keeps them here once and
serves both the hash index (key verification) and reads (the key columns of a page) from
it. Memory layout::

    fixed width (ints, date, timestamp, decimal, bool):  values[capacity]  (numpy)
    variable width (string, binary):                     offsets[capacity+1] int64
                                                         data[byte capacity] uint8

Growth doubles the capacity into new arrays; Arrow arrays handed to readers keep the old
buffers alive, and rows below the committed row count are never written again (a rolled
back append only rewrites rows no committed version contains), so reads are zero-copy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from cdc_sink.utils.arrays import one_array

__all__ = ["KeyStore", "fixed_width_dtype", "take"]


_DTYPES: dict[pa.DataType, np.dtype | None] = {}


def fixed_width_dtype(t: pa.DataType) -> np.dtype | None:
    """The numpy dtype holding values of a fixed-width Arrow type (None: variable width).

    Booleans map to ``bool`` (Arrow packs them as bits; callers unpack).
    """
    try:
        return _DTYPES[t]
    except KeyError:
        d = _DTYPES[t] = _fixed_width_dtype(t)
        return d


def _fixed_width_dtype(t: pa.DataType) -> np.dtype | None:
    if pa.types.is_boolean(t):
        return np.dtype(bool)
    if pa.types.is_decimal(t):
        return np.dtype("V16")
    if pa.types.is_date32(t):
        return np.dtype(np.int32)
    if pa.types.is_timestamp(t):
        return np.dtype(np.int64)
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.dtype(str(t.to_pandas_dtype().__name__))
    return None


def arrow_values_view(arr: pa.Array, dtype: np.dtype) -> np.ndarray:
    """A numpy view (copy for booleans) of a fixed-width array's values, nulls unspecified."""
    bufs = arr.buffers()
    if dtype == np.dtype(bool):
        if bufs[1] is None:
            return np.zeros(len(arr), dtype=bool)
        bits = np.frombuffer(bufs[1], dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + len(arr)].astype(
            bool
        )
    raw = np.frombuffer(bufs[1], dtype=dtype, count=arr.offset + len(arr))
    return raw[arr.offset :]


def arrow_validity(arr: pa.Array) -> np.ndarray | None:
    """Boolean validity of an array, or None when it has no nulls."""
    if arr.null_count == 0:
        return None
    bufs = arr.buffers()
    if bufs[0] is None:  # null-type arrays
        return np.zeros(len(arr), dtype=bool)
    bits = np.frombuffer(bufs[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + len(arr)].astype(bool)


def numpy_to_arrow(values: np.ndarray, valid: np.ndarray | None, t: pa.DataType) -> pa.Array:
    """Wraps numpy values (and an optional validity mask) as an Arrow array of type ``t``."""
    n = len(values)
    vbuf = None
    null_count = 0
    if valid is not None and not valid.all():
        vbuf = pa.py_buffer(np.packbits(valid, bitorder="little"))
        null_count = int(n - np.count_nonzero(valid))
    if values.dtype == np.dtype(bool):
        dbuf = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        dbuf = pa.py_buffer(np.ascontiguousarray(values))
    return pa.Array.from_buffers(t, n, [vbuf, dbuf], null_count=null_count)


def take(arr: pa.Array, indices: np.ndarray) -> pa.Array:
    """``arr[indices]``: a numpy gather for fixed-width types, Arrow's take otherwise."""
    arr = one_array(arr)
    dtype = fixed_width_dtype(arr.type)
    if dtype is None or dtype == np.dtype(bool):
        return arr.take(pa.array(indices))
    values = arrow_values_view(arr, dtype)[indices]
    valid = arrow_validity(arr)
    return numpy_to_arrow(values, None if valid is None else valid[indices], arr.type)


class KeyStore:
    """Key values of one key column by row id (see the module docstring)."""

    def __init__(self, t: pa.DataType, capacity: int = 1024) -> None:
        self.type = t
        self.dtype = fixed_width_dtype(t)
        self.length = 0
        capacity = max(capacity, 16)
        if self.dtype is not None:
            self._values = np.zeros(capacity, dtype=self.dtype)
        else:
            self._offsets = np.zeros(capacity + 1, dtype=np.int64)
            self._data = np.zeros(max(capacity * 8, 64), dtype=np.uint8)

    @property
    def nbytes(self) -> int:
        """Bytes held (capacity, not length)."""
        if self.dtype is not None:
            return int(self._values.nbytes)
        return int(self._offsets.nbytes + self._data.nbytes)

    def append(self, arr: pa.Array) -> None:
        """Appends the (non-null) values of ``arr`` as rows ``length..length+len(arr)-1``."""
        k = len(arr)
        if k == 0:
            return
        n = self.length
        if self.dtype is not None:
            if n + k > len(self._values):
                grown = np.zeros(max(2 * len(self._values), n + k), dtype=self.dtype)
                grown[:n] = self._values[:n]
                self._values = grown
            self._values[n : n + k] = arrow_values_view(arr, self.dtype)
        else:
            arr = one_array(arr)
            large = arr.cast(pa.large_binary())
            offs = np.frombuffer(large.buffers()[1], dtype=np.int64, count=large.offset + k + 1)[
                large.offset :
            ]
            data_start = int(offs[0])
            nbytes = int(offs[-1]) - data_start
            base = int(self._offsets[n])
            if n + k + 1 > len(self._offsets):
                grown = np.zeros(max(2 * len(self._offsets), n + k + 1), dtype=np.int64)
                grown[: n + 1] = self._offsets[: n + 1]
                self._offsets = grown
            if base + nbytes > len(self._data):
                grown_d = np.zeros(max(2 * len(self._data), base + nbytes), dtype=np.uint8)
                grown_d[:base] = self._data[:base]
                self._data = grown_d
            self._offsets[n + 1 : n + k + 1] = offs[1:] - data_start + base
            if nbytes:
                src = np.frombuffer(large.buffers()[2], dtype=np.uint8, count=data_start + nbytes)[
                    data_start:
                ]
                self._data[base : base + nbytes] = src
        self.length = n + k

    def truncate(self, n: int) -> None:
        """Forgets rows ``n..`` (rollback of rows no committed version contains)."""
        self.length = min(self.length, n)

    def slice(self, start: int, stop: int) -> pa.Array:
        """Rows ``start..stop-1`` as an Arrow array of the column type (zero-copy for
        fixed width; string offsets are rebased)."""
        stop = min(stop, self.length)
        if self.dtype is not None:
            return numpy_to_arrow(self._values[start:stop], None, self.type)
        offs = self._offsets[start : stop + 1]
        first = int(offs[0])
        last = int(offs[-1])
        rebased = (offs - first).astype(np.int32)
        data = pa.py_buffer(self._data[first:last])
        return pa.Array.from_buffers(self.type, stop - start, [None, pa.py_buffer(rebased), data])

    def numpy(self) -> np.ndarray:
        """Fixed-width values of rows ``0..length-1`` (a view)."""
        assert self.dtype is not None
        return self._values[: self.length]

    def take(self, rows: np.ndarray) -> pa.Array:
        """Values at ``rows`` as an Arrow array of the column type."""
        if self.dtype is not None:
            return numpy_to_arrow(self._values[rows], None, self.type)
        whole = pa.Array.from_buffers(
            pa.large_binary(),
            self.length,
            [None, pa.py_buffer(self._offsets[: self.length + 1]), pa.py_buffer(self._data)],
        )
        return whole.take(pa.array(rows)).cast(self.type)

    def equals(self, rows: np.ndarray, query: pa.Array) -> np.ndarray:
        """Whether the stored key at ``rows[i]`` equals ``query[i]`` (vectorized)."""
        if self.dtype is not None:
            q = arrow_values_view(query, self.dtype)
            return np.asarray(self._values[rows] == q, dtype=bool)
        return _pc_equal(self.take(rows), query)

    def equals_at(
        self, rows: np.ndarray, query: pa.Array | pa.ChunkedArray, at: np.ndarray
    ) -> np.ndarray:
        """Whether the stored key at ``rows[i]`` equals ``query[at[i]]`` (fixed-width
        keys compared in numpy, without taking the query's keys first)."""
        if self.dtype is not None:
            q = arrow_values_view(one_array(query), self.dtype)[at]
            return np.asarray(self._values[rows] == q, dtype=bool)
        return self.equals(rows, query.take(pa.array(at)))


def _pc_equal(a: pa.Array, b: pa.Array) -> np.ndarray:
    import pyarrow.compute as pc

    b = one_array(b)
    return np.asarray(
        pc.equal(a, b.cast(a.type)).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool
    )
