"""Arrow array helpers shared by the engine's modules."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["GrowingArray", "one_array"]


def one_array(arr: Any) -> Any:
    """``arr`` as one contiguous array: a chunked array's only chunk as it is (Arrow's
    ``combine_chunks`` copies even one chunk: ~200 MB for a million-row, 20-column load),
    several chunks concatenated; anything else is returned unchanged."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr


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
