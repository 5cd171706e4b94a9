"""The records the router reads schemas from: :func:`representatives` keeps the first
record of each distinct (schema key, Kafka partition) of a table's records, ordered by
partition and offset, checked against a plain reference on random batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.spark.database import representatives


@st.composite
def _records(draw: st.DrawFn) -> tuple[pa.Table, np.ndarray]:
    n = draw(st.integers(1, 40))
    partition = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    keys = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
    offsets = np.zeros(n, np.int64)
    for p in set(partition):  # offsets ascend within a partition, in record order
        at = [i for i, q in enumerate(partition) if q == p]
        offsets[at] = np.cumsum(
            draw(st.lists(st.integers(1, 5), min_size=len(at), max_size=len(at)))
        )
    sub = pa.table(
        {"partition": pa.array(partition, pa.int32()), "offset": offsets, "i": np.arange(n)}
    )
    return sub, np.asarray(keys, np.int64)


@settings(max_examples=200, deadline=None)
@given(_records())
def test_the_first_record_of_each_schema_in_each_partition(
    case: tuple[pa.Table, np.ndarray],
) -> None:
    sub, keys = case
    seen: dict[tuple[int, int], int] = {}
    for i, (k, p) in enumerate(
        zip(keys.tolist(), sub.column("partition").to_pylist(), strict=True)
    ):
        seen.setdefault((k, p), i)
    want = sorted(
        seen.values(), key=lambda i: (sub["partition"][i].as_py(), sub["offset"][i].as_py())
    )
    got = representatives(sub, keys)
    assert got.column("i").to_pylist() == want
