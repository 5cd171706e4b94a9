"""Arrow array helpers shared by the engine's modules."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["GrowingArray", "one_array", "search_sorted"]


def one_array(arr: Any) -> Any:
    """``arr`` as one contiguous array: a chunked array's only chunk as it is (Arrow's
    ``combine_chunks`` copies even one chunk: ~200 MB for a million-row, 20-column load),
    several chunks concatenated; anything else is returned unchanged."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr


def search_sorted(a: np.ndarray, values: Any) -> np.ndarray:
    """``np.searchsorted(a, values)`` (side "left") for a sorted unsigned-integer ``a``
    (row ids), with the integer ``values`` searched in ``a``'s own dtype.

    numpy converts the *array* to the common dtype when the two differ: searching a
    10M-row ``uint32`` array for a few ``int64`` page starts copied all of it to
    ``int64`` first, on every call (docs/benchmarks-history.md, "The larger workload: 10M rows,
    500K-event micro-batches", "numpy converting row ids on every search"). Values above
    ``a``'s dtype range are past every element; negative ones before every element.
    """
    v = np.asarray(values, dtype=np.int64)
    if a.dtype == v.dtype:
        return np.searchsorted(a, v)
    top = int(np.iinfo(a.dtype).max)
    out = np.searchsorted(a, np.clip(v, 0, top).astype(a.dtype))
    if len(a) and (v > top).any():
        out[v > top] = len(a)
    return out


class GrowingArray:
    """A numpy array that grows by doubling (a tablet's dense per-row state).

    Attributes:
        a: The array; rows past the last :meth:`ensure` hold ``fill``.
        fill: The value of rows never written.
    """

    def __init__(self, dtype: Any, fill: Any, capacity: int) -> None:
        self.fill = fill
        self.a = np.full(max(capacity, 16), fill, dtype=dtype)

    def ensure(self, n: int) -> None:
        """Grows the array to at least ``n`` rows."""
        if n > len(self.a):
            grown = np.full(max(2 * len(self.a), n), self.fill, dtype=self.a.dtype)
            grown[: len(self.a)] = self.a
            self.a = grown


def run_starts(a: np.ndarray) -> np.ndarray:
    """Per element of ``a``: whether it starts a run of equal values (the first does).
    One concatenation, where ``np.r_`` parses its index expression on every call."""
    out = np.empty(len(a), dtype=bool)
    if len(a):
        out[0] = True
        np.not_equal(a[1:], a[:-1], out=out[1:])
    return out


def run_ends(a: np.ndarray) -> np.ndarray:
    """Per element of ``a``: whether it ends a run of equal values (the last does)."""
    out = np.empty(len(a), dtype=bool)
    if len(a):
        out[-1] = True
        np.not_equal(a[1:], a[:-1], out=out[:-1])
    return out
