"""Truncate through the durable Table: it reaches every bucket, survives reopening (snapshot
and WAL replay, merged segments included) and is counted."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from cdc_sink.batch import OP_TRUNCATE
from cdc_sink.table import TableOptions, create_table, open_table
from tests.fixtures import ID_V_SEQ

SCHEMA = {**ID_V_SEQ, "num_buckets": 4}


def test_truncate_clears_every_bucket_in_its_version_and_survives_reopen(durable_dir: Path):
    t = create_table(durable_dir, SCHEMA, options=TableOptions.for_tests())
    t.apply([{"op": "insert", "key": i, "set": {"v": "a"}, "seq": 5} for i in range(50)])
    res = t.apply(
        [
            {"op": "upsert", "key": 1, "set": {"v": "b"}, "seq": 6},
            {"op": "truncate"},
            {"op": "insert", "key": 2, "set": {"v": "new"}, "seq": 7},
            {"op": "insert", "key": 3, "set": {"v": "old"}, "seq": 4},
        ]
    )
    assert res.version == 2
    assert res.buckets == [0, 1, 2, 3]
    assert res.counts["truncated"] == 50 and res.counts["stale"] == 1
    assert res.counts["inserted"] == 1 and res.counts["updated"] == 1
    assert t.read().to_pylist() == [{"id": 2, "v": "new", "seq": 7}]
    assert t.read(version=1).num_rows == 50
    for opts in (TableOptions.for_tests(), TableOptions()):
        again = open_table(durable_dir, options=opts)
        assert again.read().to_pylist() == [{"id": 2, "v": "new", "seq": 7}]
        assert again.read(version=1).num_rows == 50
    t.compact()
    t.apply([{"op": "insert", "key": 3, "set": {"v": "x"}, "seq": 4}])  # still stale
    assert open_table(durable_dir).read().to_pylist() == [{"id": 2, "v": "new", "seq": 7}]


def test_truncate_in_the_wire_form_and_as_a_lone_event(durable_dir: Path):
    t = create_table(durable_dir, SCHEMA, options=TableOptions(page_rows=8))
    t.apply([{"op": "insert", "key": i, "set": {"v": "a"}, "seq": 1} for i in range(9)])
    wire = pa.table(
        {
            "__op": pa.array([OP_TRUNCATE, 0], pa.int8()),
            "__seq": pa.array([None, 2], pa.int64()),
            "id": pa.array([None, 4], pa.int64()),
            "v": ["ignored", "b"],
        }
    )
    res = t.apply(wire)
    assert res.counts["truncated"] == 9 and len(res.rejects) == 0
    assert t.read().to_pylist() == [{"id": 4, "v": "b", "seq": 2}]
    assert t.apply([{"op": "truncate"}]).counts["truncated"] == 1
    assert t.read().num_rows == 0
    # Reopened without a snapshot: the three segments of each bucket replay as one batch.
    again = open_table(durable_dir)
    assert again.read().num_rows == 0
    assert again.read(version=2).to_pylist() == [{"id": 4, "v": "b", "seq": 2}]
