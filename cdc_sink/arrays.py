"""Arrow array helpers shared by the engine's modules."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["one_array"]


def one_array(arr: Any) -> Any:
    """``arr`` as one contiguous array: a chunked array's only chunk as it is (Arrow's
    ``combine_chunks`` copies even one chunk: ~200 MB for a million-row, 20-column load),
    several chunks concatenated; anything else is returned unchanged."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr
