"""``cdc_sink.tablet.apply.group_keys`` groups a batch's events by key exactly as the
definition says (existing keys by their row, new keys by their first occurrence, events
in stable key order), on its one-pass path for distinct new keys in order (a load) and
on its sorting path (duplicates, existing keys, keys out of order)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.batch import ChangeBatch
from cdc_sink.bucketing import spark_xxhash64
from cdc_sink.schema import TableSchema
from cdc_sink.tablet.apply import group_keys
from cdc_sink.tablet.keyindex import KeyIndex
from tests.fixtures import ID_A

SCHEMA = TableSchema.from_dict(ID_A)


def _reference(batch: ChangeBatch, existing: dict[int, int], row_count: int) -> dict[str, Any]:
    """The grouping by its definition, one event at a time."""
    keys = batch.keys[0].to_pylist()
    first_new: dict[int, int] = {}
    gkey = []
    for k in keys:
        if k in existing:
            gkey.append(existing[k])
        else:
            first_new.setdefault(k, row_count + len(first_new))
            gkey.append(first_new[k])
    order = sorted(range(len(keys)), key=lambda i: gkey[i])  # stable
    gk = [gkey[i] for i in order]
    starts = [i for i in range(len(gk)) if i == 0 or gk[i] != gk[i - 1]]
    return {
        "order": order,
        "starts": starts,
        "row": [gk[s] for s in starts],
        "existing": [gk[s] < row_count for s in starts],
    }


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 60), max_size=20, unique=True),
    st.one_of(
        # duplicates, existing keys, any order; or a load: new keys, distinct, in order
        st.lists(st.integers(0, 120), min_size=1, max_size=40),
        st.integers(62, 200).map(lambda n: list(range(61, n))),
    ),
)
def test_group_keys_is_the_definition(stored: list[int], keys: list[int]) -> None:
    index = KeyIndex([SCHEMA.key_columns[0].type], capacity=8, seed=0x5EED)
    if stored:
        arr = [pa.array(stored, pa.int64())]
        index.insert(spark_xxhash64(arr), arr)
    existing = {k: r for r, k in enumerate(stored)}
    batch, rejects = ChangeBatch.from_events(
        [{"op": "upsert", "key": {"id": k}, "set": {"a": str(k)}} for k in keys], SCHEMA
    )
    assert not len(rejects.positions)
    got = group_keys(index, batch, len(stored))
    want = _reference(batch, existing, len(stored))
    assert got.order.tolist() == want["order"]
    assert got.starts.tolist() == want["starts"]
    assert got.row.tolist() == want["row"]
    assert got.existing.tolist() == want["existing"]
    assert (
        got.gid.tolist()
        == np.repeat(np.arange(len(want["starts"])), np.diff([*want["starts"], len(keys)])).tolist()
    )
